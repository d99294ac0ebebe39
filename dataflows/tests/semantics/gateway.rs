//! Gateways: which routers a Gateway selects, the ports its servers listen on (the target
//! port of the router's own Service), and HTTP2 and GRPC servers served as HTTP.

use crate::support::{
    endpoint, gateway, gateway_errors, host, labels, outbound, px, router_proxy, service, set,
    virtual_service, Mesh,
};
use dataflows::model::*;
use prost::Message;

/// A router whose labels match a Gateway's selector (the Gateway may live in another
/// namespace) gets a listener `0.0.0.0_8080` for the Gateway's HTTP server on port 8080 and
/// the route configuration `http.8080`; a server with `bind` gives `BIND_PORT`
/// (`10.1.0.9_9090`, route `http.9090`). A router gets no sidecar listeners (`virtualOutbound`,
/// `virtualInbound`). Removing the Gateway removes its listeners and routes.
#[test]
fn gateway_selected_by_labels_gets_listener_and_route() {
    let mut m = Mesh::new();
    let ingress = router_proxy(
        "istio-ingressgateway-abc",
        "istio-system",
        "10.1.0.9",
        &[("istio", "ingressgateway"), ("app", "gw")],
    );
    let gw = gateway(
        "default",
        "bookinfo-gateway",
        &[("istio", "ingressgateway")],
        &[(8080, None)],
    );
    m.insert(vec![
        service("productpage", "default"),
        gw.clone(),
        virtual_service(
            "default",
            "bookinfo",
            &["*"],
            &["bookinfo-gateway", "default/bookinfo-gateway"],
            &host("productpage", "default"),
        ),
        px(&ingress),
    ]);
    assert_eq!(m.listeners(&ingress), set(&["0.0.0.0_8080"]));
    assert_eq!(m.routes(&ingress), set(&["http.8080"]));
    assert!(m
        .clusters(&ingress)
        .contains(&outbound(9080, "", "productpage", "default")));

    let bound = gateway(
        "istio-system",
        "internal",
        &[("istio", "ingressgateway")],
        &[(9090, Some("10.1.0.9"))],
    );
    m.insert(vec![bound.clone()]);
    assert_eq!(
        m.listeners(&ingress),
        set(&["0.0.0.0_8080", "10.1.0.9_9090"])
    );
    assert_eq!(
        m.routes(&ingress),
        set(&["http.8080", "http.9090.10.1.0.9"])
    );

    m.retract(vec![gw, bound]);
    assert_eq!(m.listeners(&ingress), set(&[]));
    assert_eq!(m.routes(&ingress), set(&[]));
}

/// The Service of a gateway's own pods, `istio-ingressgateway` in `istio-system` as Istio
/// installs it: port 80 (`http2`) to target port 8080 and 443 (`https`) to 8443, with its
/// endpoints at `ip`.
fn gateway_service(ip: &str, ports: &[(&str, u16, u16)]) -> Vec<Record> {
    let Record::Service(mut s) = service("istio-ingressgateway", "istio-system") else {
        unreachable!()
    };
    s.ports = ports
        .iter()
        .map(|(name, port, _)| ServicePort {
            name: name.to_string(),
            port: *port,
            protocol: Protocol::Http,
        })
        .collect();
    let mut out = vec![Record::Service(s)];
    for (name, _, target) in ports {
        let Record::Endpoint(h, mut e) = endpoint("istio-ingressgateway", "istio-system", ip, true)
        else {
            unreachable!()
        };
        e.port_name = name.to_string();
        e.port = *target;
        out.push(Record::Endpoint(h, e));
    }
    out
}

/// As Istio's gateways do, a server listens on the target port of the gateway workload's
/// Service port of the server's number (Istio's ingress gateway Service maps 80 to 8080):
/// the listener and the `http.PORT` route configuration are the target port's, while the
/// routes are still built for the server's port (the virtual host `*:80`). Where no Service of
/// the router's pods has the port, the server listens on it as written; a second Service of
/// the same pods with port 80 elsewhere does not move it (the first Service by name wins);
/// removing the Service's endpoints moves the listener back to 80.
#[test]
fn a_gateway_listens_on_the_target_port_of_its_workloads_service() {
    let mut m = Mesh::new();
    let ingress = router_proxy(
        "istio-ingressgateway-abc",
        "istio-system",
        "10.1.0.9",
        &[("istio", "ingressgateway")],
    );
    let gw = gateway(
        "default",
        "bookinfo-gateway",
        &[("istio", "ingressgateway")],
        &[(80, None), (9000, None)],
    );
    m.insert(vec![
        service("productpage", "default"),
        gw,
        virtual_service(
            "default",
            "bookinfo",
            &["*"],
            &["default/bookinfo-gateway"],
            &host("productpage", "default"),
        ),
        px(&ingress),
    ]);
    assert_eq!(m.listeners(&ingress), set(&["0.0.0.0_80", "0.0.0.0_9000"]));

    let own = gateway_service("10.1.0.9", &[("http2", 80, 8080), ("https", 443, 8443)]);
    m.insert(own.clone());
    assert_eq!(
        m.listeners(&ingress),
        set(&["0.0.0.0_8080", "0.0.0.0_9000"])
    );
    assert_eq!(m.routes(&ingress), set(&["http.8080", "http.9000"]));
    let vhosts = m.vhost_domains(&ingress, "http.8080");
    assert_eq!(
        vhosts.keys().collect::<Vec<_>>(),
        ["*:80"],
        "routes for port 80"
    );

    // Another Service of the same pods mapping 80 elsewhere: the first by name still rules.
    let Record::Service(mut other) = service("zz-status", "istio-system") else {
        unreachable!()
    };
    other.ports[0].port = 80;
    let Record::Endpoint(h, mut e) = endpoint("zz-status", "istio-system", "10.1.0.9", true) else {
        unreachable!()
    };
    e.port = 8081;
    let other = vec![Record::Service(other), Record::Endpoint(h, e)];
    m.insert(other.clone());
    assert_eq!(
        m.listeners(&ingress),
        set(&["0.0.0.0_8080", "0.0.0.0_9000"])
    );
    m.retract(own[1..].to_vec());
    assert_eq!(
        m.listeners(&ingress),
        set(&["0.0.0.0_8081", "0.0.0.0_9000"]),
        "the other Service's target once the first has no endpoint there"
    );
    m.retract(other);
    assert_eq!(m.listeners(&ingress), set(&["0.0.0.0_80", "0.0.0.0_9000"]));
    assert_eq!(m.routes(&ingress), set(&["http.80", "http.9000"]));
}

/// A router that no Gateway selects (labels do not match, or only some of the selector's
/// labels match) gets no listeners and no route configurations, while the selected router
/// does; relabelling the router (reconnect with other labels) moves it between the two.
#[test]
fn router_without_matching_gateway_has_no_listeners() {
    let mut m = Mesh::new();
    let selected = router_proxy(
        "gw-a",
        "istio-system",
        "10.1.0.8",
        &[("istio", "ingressgateway"), ("tier", "edge")],
    );
    let partial = router_proxy(
        "gw-b",
        "istio-system",
        "10.1.0.9",
        &[("istio", "ingressgateway")],
    );
    let unrelated = router_proxy(
        "gw-c",
        "istio-system",
        "10.1.0.10",
        &[("istio", "egressgateway"), ("tier", "edge")],
    );
    m.insert(vec![
        service("productpage", "default"),
        gateway(
            "istio-system",
            "edge",
            &[("istio", "ingressgateway"), ("tier", "edge")],
            &[(8080, None)],
        ),
        px(&selected),
        px(&partial),
        px(&unrelated),
    ]);
    assert_eq!(m.listeners(&selected), set(&["0.0.0.0_8080"]));
    for p in [&partial, &unrelated] {
        assert_eq!(m.listeners(p), set(&[]), "{}", p.id);
        assert_eq!(m.routes(p), set(&[]), "{}", p.id);
    }

    let relabelled = Proxy {
        labels: labels(&[("istio", "ingressgateway"), ("tier", "edge")]),
        ..partial.clone()
    };
    m.replace(px(&partial), px(&relabelled));
    assert_eq!(m.listeners(&relabelled), set(&["0.0.0.0_8080"]));
    assert_eq!(m.routes(&relabelled), set(&["http.8080"]));
}

/// Proves that Gateway servers of protocol HTTP2 and GRPC are served as an HTTP server is
/// (Istio treats every HTTP protocol alike at a gateway): each port gets a listener
/// `0.0.0.0_PORT` whose connection manager takes HTTP/1.1 and HTTP/2 (codec AUTO: gRPC and
/// HTTP/2 clients speak it in cleartext without an upgrade) and names route configuration
/// `http.PORT`, whose virtual host sends the VirtualService's requests to its destination.
#[test]
fn gateway_http2_and_grpc_servers_serve_http_routes() {
    use envoy_types::pb::envoy::config::listener::v3::filter::ConfigType;
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
        http_connection_manager::{CodecType, RouteSpecifier},
        HttpConnectionManager,
    };
    let mut m = Mesh::new();
    let ingress = router_proxy(
        "istio-ingressgateway-abc",
        "istio-system",
        "10.1.0.9",
        &[("istio", "ingressgateway")],
    );
    let Record::Gateway(mut gw) = gateway(
        "default",
        "bookinfo-gateway",
        &[("istio", "ingressgateway")],
        &[(8081, None), (8082, None)],
    ) else {
        unreachable!("gateway() makes gateways")
    };
    gw.servers[0].protocol = Protocol::Http2;
    gw.servers[0].port_name = "http2".into();
    gw.servers[1].protocol = Protocol::Grpc;
    gw.servers[1].port_name = "grpc".into();
    m.insert(vec![
        service("productpage", "default"),
        Record::Gateway(gw),
        virtual_service(
            "default",
            "bookinfo",
            &["bookinfo.example.com"],
            &["default/bookinfo-gateway"],
            &host("productpage", "default"),
        ),
        px(&ingress),
    ]);
    assert_eq!(
        m.listeners(&ingress),
        set(&["0.0.0.0_8081", "0.0.0.0_8082"])
    );
    assert_eq!(m.routes(&ingress), set(&["http.8081", "http.8082"]));
    for port in [8081, 8082] {
        let listener = m.listener_body(&ingress, &format!("0.0.0.0_{port}"));
        let hcm: Vec<HttpConnectionManager> = listener
            .filter_chains
            .iter()
            .flat_map(|c| &c.filters)
            .filter_map(|f| match &f.config_type {
                Some(ConfigType::TypedConfig(any))
                    if any.type_url.ends_with(".HttpConnectionManager") =>
                {
                    HttpConnectionManager::decode(&any.value[..]).ok()
                }
                _ => None,
            })
            .collect();
        assert_eq!(hcm.len(), 1, "{port}: {listener:?}");
        assert_eq!(hcm[0].codec_type, CodecType::Auto as i32, "{port}");
        let Some(RouteSpecifier::Rds(rds)) = &hcm[0].route_specifier else {
            panic!("{port}: routes by RDS: {:?}", hcm[0]);
        };
        assert_eq!(rds.route_config_name, format!("http.{port}"));
        let vhosts = m.vhost_clusters(&ingress, &format!("http.{port}"));
        assert_eq!(
            vhosts.get(&format!("bookinfo.example.com:{port}")),
            Some(&outbound(9080, "", "productpage", "default")),
            "{port}: {vhosts:?}"
        );
    }
}

/// A VirtualService bound to a Gateway none of whose servers serves its hosts (for its
/// namespace) is told so (`MF0030`); one of its hosts served is enough; a server host
/// restricted to another namespace does not count; the message retracts when the Gateway
/// serves the host.
#[test]
fn a_virtual_service_whose_hosts_a_gateway_does_not_serve_is_reported() {
    let mut m = Mesh::new();
    let with_hosts = |hosts: &[&str]| {
        let Record::Gateway(mut g) = gateway(
            "istio-system",
            "gw",
            &[("istio", "ingressgateway")],
            &[(8080, None)],
        ) else {
            unreachable!()
        };
        g.servers[0].hosts = hosts.iter().map(|h| h.to_string()).collect();
        Record::Gateway(g)
    };
    let bound = |name: &str, hosts: &[&str]| {
        virtual_service(
            "default",
            name,
            hosts,
            &["istio-system/gw"],
            &host("reviews", "default"),
        )
    };
    let shop = with_hosts(&["*/shop.example.com", "other/api.example.com"]);
    m.insert(vec![
        service("reviews", "default"),
        shop.clone(),
        bound("shop", &["shop.example.com"]),
        bound("both", &["shop.example.com", "blog.example.com"]),
        bound("api", &["api.example.com"]),
    ]);
    let found = gateway_errors(&m, ErrorCode::HostNotInGateway);
    assert_eq!(
        found,
        vec![
            "VirtualService/default/api: spec.gateways: Gateway istio-system/gw serves none of \
             the hosts [api.example.com] to namespace default: the VirtualService's routes \
             reach no proxy through it"
                .to_string()
        ]
    );
    m.replace(
        shop,
        with_hosts(&["*/shop.example.com", "default/api.example.com"]),
    );
    assert!(gateway_errors(&m, ErrorCode::HostNotInGateway).is_empty());
}

/// Two Gateways of the same workloads whose TLS servers use one certificate are each told
/// so (`MF0031`, Istio's IST0138); a Gateway selecting other workloads, or another
/// certificate, says nothing; the message retracts when one certificate changes.
#[test]
fn one_certificate_on_two_gateways_of_the_same_workloads_is_reported() {
    let mut m = Mesh::new();
    let tls_gateway = |name: &str, selector: &[(&str, &str)], credential: &str| {
        let Record::Gateway(mut g) = gateway("istio-system", name, selector, &[(443, None)]) else {
            unreachable!()
        };
        g.servers[0].protocol = Protocol::Http;
        g.servers[0].tls = Some(Box::new(ServerTls {
            mode: ServerTlsMode::Simple,
            credential: Some(Credential::Secret(credential.into())),
            min_version: None,
            max_version: None,
            cipher_suites: Vec::new(),
            subject_alt_names: Vec::new(),
            tcp: false,
            misdirected: Vec::new(),
            sni_routes: false,
            client_ca: None,
        }));
        Record::Gateway(g)
    };
    let ingress = [("istio", "ingressgateway")];
    let b = tls_gateway("b", &ingress, "shop-cert");
    m.insert(vec![
        tls_gateway("a", &ingress, "shop-cert"),
        b.clone(),
        tls_gateway("c", &[("istio", "egressgateway")], "shop-cert"),
        tls_gateway("d", &ingress, "blog-cert"),
    ]);
    let found = gateway_errors(&m, ErrorCode::DuplicateCertificate);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with(
        "Gateway/istio-system/a: spec.servers: the credentialName shop-cert of a TLS server is \
         also used by Gateway istio-system/b"
    ));
    assert!(found[1].starts_with("Gateway/istio-system/b:"), "{found:?}");
    m.replace(b, tls_gateway("b", &ingress, "other-cert"));
    assert!(gateway_errors(&m, ErrorCode::DuplicateCertificate).is_empty());
}

/// A Gateway server port that neither a port nor a target port of the services running on
/// the Gateway's workloads is (Istio's IST0162) is a warning; a port that is the service's
/// port, or its target port, says nothing; with no endpoint on its workloads, nothing is
/// said.
#[test]
fn a_gateway_port_no_service_of_its_workloads_exposes_is_a_warning() {
    let mut m = Mesh::new();
    let gw = gateway(
        "istio-system",
        "gw",
        &[("istio", "ingressgateway")],
        &[(9080, None), (8443, None)],
    );
    let pod = crate::support::workload(
        "ingress-0",
        "istio-system",
        "10.0.5.1",
        &[("istio", "ingressgateway")],
    );
    m.insert(vec![gw, pod]);
    assert!(gateway_errors(&m, ErrorCode::GatewayPortNotOnService).is_empty());
    let ep = endpoint("ingressgateway", "istio-system", "10.0.5.1", true);
    m.insert(vec![service("ingressgateway", "istio-system"), ep.clone()]);
    assert_eq!(
        gateway_errors(&m, ErrorCode::GatewayPortNotOnService),
        vec![
            "Gateway/istio-system/gw: spec.servers[1].port.number: port 8443 is neither a \
             port nor a target port of the services whose endpoints run on the workloads the \
             Gateway selects (9080→9080): clients through those services cannot reach it \
             (IST0162 GatewayPortNotDefinedOnService)"
                .to_string()
        ]
    );
    m.retract(vec![ep]);
    assert!(gateway_errors(&m, ErrorCode::GatewayPortNotOnService).is_empty());
}

/// Two Gateways of the same selector whose servers on one port list one host are each
/// reported (Istio's IST0145, MF0011), naming the other; another host, another port or a
/// selector matching other workloads says nothing; Gateways of different selectors that a
/// workload both match are reported once it runs; renaming the host ends it.
#[test]
fn gateways_listing_one_host_on_one_port_of_one_workload_are_each_reported() {
    let mut m = Mesh::new();
    let with_host = |name: &str, selector: &[(&str, &str)], port: u16, host: &str| {
        let Record::Gateway(mut gw) = gateway("istio-system", name, selector, &[(port, None)])
        else {
            unreachable!()
        };
        gw.servers[0].hosts = vec![host.to_string()];
        Record::Gateway(gw)
    };
    let ingress: &[(&str, &str)] = &[("istio", "ingressgateway")];
    let b = with_host("b", ingress, 80, "shop.example.com");
    m.insert(vec![
        with_host("a", ingress, 80, "shop.example.com"),
        b.clone(),
        with_host("c", ingress, 80, "blog.example.com"),
        with_host("d", ingress, 8080, "shop.example.com"),
        with_host("e", &[("istio", "egressgateway")], 80, "shop.example.com"),
    ]);
    let message = |k: &str, other: &str| {
        format!(
            "Gateway/istio-system/{k}: spec.servers: port 80 serves host \"shop.example.com\" \
             here and in Gateway istio-system/{other} on the same workloads: one listener \
             serves both, the VirtualServices of both answering for it (IST0145 \
             ConflictingGateways)"
        )
    };
    let mut found = gateway_errors(&m, ErrorCode::GatewayHostShared);
    found.sort();
    assert_eq!(found, vec![message("a", "b"), message("b", "a")]);
    assert_eq!(
        ErrorCode::GatewayHostShared.message_code(),
        ("MF0011", "ConflictingGateways")
    );
    // A workload both `e`'s and `a`'s selectors match puts them together.
    m.insert(vec![crate::support::workload(
        "both-0",
        "istio-system",
        "10.0.7.1",
        &[("istio", "ingressgateway"), ("role", "edge")],
    )]);
    let Record::Gateway(mut e) = with_host("e", &[("role", "edge")], 80, "shop.example.com") else {
        unreachable!()
    };
    e.servers[0].hosts = vec!["shop.example.com".into()];
    m.replace(
        with_host("e", &[("istio", "egressgateway")], 80, "shop.example.com"),
        Record::Gateway(e),
    );
    let found = gateway_errors(&m, ErrorCode::GatewayHostShared);
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("Gateway/istio-system/e:")
                && f.contains("Gateway istio-system/a, istio-system/b")),
        "{found:?}"
    );
    m.replace(b, with_host("b", ingress, 80, "other.example.com"));
    m.retract(vec![with_host(
        "e",
        &[("role", "edge")],
        80,
        "shop.example.com",
    )]);
    assert!(gateway_errors(&m, ErrorCode::GatewayHostShared).is_empty());
}
