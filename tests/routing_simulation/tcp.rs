//! TCP traffic: the `mongo` fixture of tests/envoy/tcp.rs and examples/tcp-echo; services
//! told apart by address, protocols told per connection, TCP match conditions, and TLS
//! ServiceEntries routed by SNI.

use crate::fixtures::{mongo_cluster, mongo_pod, PORT};
use crate::support;
use crate::support::{write_config, ProxyNode};
use crate::{assert_routes_to, assert_status, Mesh};
use dataflows::model::{ConfigKey, Holder, ProxyId, ResourceType};
use dataflows::simulate::Call;

/// Mirrors `envoy/tcp.rs` (`tcp_routes_shift_connections_on_sidecar_and_gateway`): the
/// sidecar's bound TCP listener `127.0.0.1_PORT` proxies to the whole `mongo` cluster
/// (both pods) without a VirtualService; `tcp` route weights send every connection to v2,
/// then to v1, then split them 50/50; the gateway's TCP server forwards to subset v2.
#[test]
fn tcp_routes_shift_connections_between_subsets() {
    let mut mesh = Mesh::new("tcp-shift");
    let gateway_port = PORT + 2;
    support::mongo::write_mesh(&mesh.config, 60, PORT, PORT + 1, gateway_port);
    let sidecar = mesh.connect(&ProxyNode::sidecar(
        "client-abc",
        "default",
        &support::mongo::ip(60, 20),
        &[("app", "client")],
    ));
    let conn = Call::connect(PORT).to_address("127.0.0.1");
    let o = mesh.send(&sidecar, &conn);
    assert_eq!(o.listener.as_deref(), Some(&*format!("127.0.0.1_{PORT}")));
    let routes: Vec<String> = mesh.proxy(&sidecar).routes.into_keys().collect();
    assert!(
        routes.is_empty(),
        "a TCP listener needs no routes: {routes:?}"
    );
    assert_routes_to(&o, &mongo_cluster(""), &[mongo_pod(1), mongo_pod(2)]);

    support::mongo::write_split(&mesh.config, &[("v1", 0), ("v2", 100)]);
    let o = mesh.send(&sidecar, &conn);
    assert_routes_to(&o, &mongo_cluster("v2"), &[mongo_pod(2)]);
    support::mongo::write_split(&mesh.config, &[("v1", 100), ("v2", 0)]);
    let o = mesh.send(&sidecar, &conn);
    assert_routes_to(&o, &mongo_cluster("v1"), &[mongo_pod(1)]);
    support::mongo::write_split(&mesh.config, &[("v1", 50), ("v2", 50)]);
    let o = mesh.send(&sidecar, &conn);
    assert_eq!(
        o.clusters(),
        vec![
            (mongo_cluster("v1"), Some(50)),
            (mongo_cluster("v2"), Some(50))
        ],
        "{o:#?}"
    );
    assert_eq!(o.endpoints(), vec![mongo_pod(1), mongo_pod(2)]);

    support::mongo::write_gateway_route(&mesh.config, gateway_port, PORT);
    let router = mesh.connect(&ProxyNode::router(
        "istio-ingressgateway-abc",
        "default",
        &support::mongo::ip(60, 30),
        &[("istio", "ingressgateway")],
    ));
    let o = mesh.send(
        &router,
        &Call::connect(gateway_port).to_address("127.0.0.1"),
    );
    assert_routes_to(&o, &mongo_cluster("v2"), &[mongo_pod(2)]);
}

const TCP_ECHO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/tcp-echo/config");

fn tcp_echo_cluster(port: u16, subset: &str) -> String {
    format!("outbound|{port}|{subset}|tcp-echo.default.svc.cluster.local")
}

/// A copy of `examples/tcp-echo/config` as shipped (tests add to it), with a captured
/// sidecar and the ingress gateway.
fn tcp_echo() -> (Mesh, ProxyId, ProxyId) {
    let mut mesh = Mesh::new("tcp-echo");
    for entry in std::fs::read_dir(TCP_ECHO).expect("examples/tcp-echo/config") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().expect("a file name");
        std::fs::copy(&path, mesh.config.join(name)).expect("copy the example");
    }
    let sidecar = mesh.connect_captured(&ProxyNode::sidecar(
        "sleep-abc",
        "default",
        "127.0.2.50",
        &[("app", "sleep")],
    ));
    let gateway = mesh.connect(&ProxyNode::router(
        "istio-ingressgateway-abc",
        "istio-system",
        "127.0.0.1",
        &[("istio", "ingressgateway")],
    ));
    mesh.sync_clean();
    (mesh, sidecar, gateway)
}

/// A captured sidecar's `0.0.0.0_9000` tells the services sharing port 9000 apart by the
/// connection's original destination: tcp-echo's cluster IP takes its VirtualService's
/// default route (v1), the ServiceEntry's address block its own cluster, and any other
/// address the HTTP chain of `web` (routed by `Host`). On 9001, tcp-echo's `port` match
/// sends connections to v2, and unknown addresses pass through.
#[test]
fn captured_sidecar_tells_tcp_services_apart_by_destination_address() {
    let (mut mesh, sidecar, _) = tcp_echo();
    let echo_v1 = "127.0.2.11:9000".to_string();
    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("10.96.0.90"));
    assert_eq!(o.captured_by.as_deref(), Some("virtualOutbound"), "{o:#?}");
    assert_eq!(o.listener.as_deref(), Some("0.0.0.0_9000"));
    assert_routes_to(&o, &tcp_echo_cluster(9000, "v1"), &[echo_v1]);

    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("192.0.2.77"));
    assert_routes_to(
        &o,
        "outbound|9000||db.example.com",
        &["127.0.2.30:9000".to_string()],
    );

    let web = Call::get("web", 9000, "/").to_address("10.96.0.91");
    let o = mesh.send(&sidecar, &web);
    assert_eq!(o.route_config.as_deref(), Some("9000"), "{o:#?}");
    assert_routes_to(
        &o,
        "outbound|9000||web.default.svc.cluster.local",
        &["127.0.2.20:8080".to_string()],
    );

    let o = mesh.send(&sidecar, &Call::connect(9001).to_address("10.96.0.90"));
    assert_routes_to(
        &o,
        &tcp_echo_cluster(9001, "v2"),
        &["127.0.2.12:9001".to_string()],
    );
    let o = mesh.send(&sidecar, &Call::connect(9001).to_address("203.0.113.9"));
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
}

/// A port that names no protocol (the example's `legacy` on 9000: no name, no `appProtocol`) is told
/// per connection, as Istio's protocol sniffing does, on the chains for the service's own
/// address: plaintext HTTP takes the port's routes (its VirtualService answers `/teapot`
/// itself), other bytes and TLS go to the service's cluster as TCP. Beside it on the same
/// port, tcp-echo stays TCP, `web` keeps the HTTP chain for other addresses; without
/// services sharing it, an unnamed port's unknown destinations pass through, HTTP or not.
#[test]
fn a_port_without_a_protocol_is_told_per_connection() {
    let (mut mesh, sidecar, _) = tcp_echo();
    write_config(
        &mesh.config,
        "legacy-routes.yaml",
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: legacy, namespace: default}
spec:
  hosts: [legacy]
  http:
  - match: [{uri: {prefix: /teapot}}]
    directResponse: {status: 418}
  - route: [{destination: {host: legacy}}]
",
    );
    let legacy = "outbound|9000||legacy.default.svc.cluster.local";
    let http = Call::get("legacy", 9000, "/teapot").to_address("10.96.0.92");
    let o = mesh.send(&sidecar, &http);
    assert_eq!(
        o.filter_chain.as_deref(),
        Some("legacy.default.svc.cluster.local:9000#http"),
        "{o:#?}"
    );
    assert_status(&o, 418);
    let o = mesh.send(
        &sidecar,
        &Call::get("legacy", 9000, "/").to_address("10.96.0.92"),
    );
    assert_eq!(o.cluster(), Some(legacy), "{o:#?}");
    assert_eq!(o.route_config.as_deref(), Some("9000"), "{o:#?}");
    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("10.96.0.92"));
    assert_eq!(o.cluster(), Some(legacy), "{o:#?}");
    assert_eq!(o.route_config, None, "proxied as TCP: {o:#?}");
    let o = mesh.send(
        &sidecar,
        &Call::tls(9000, "legacy").to_address("10.96.0.92"),
    );
    assert_eq!(o.cluster(), Some(legacy), "{o:#?}");
    // Its neighbours on the port keep their protocols.
    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("10.96.0.90"));
    assert_eq!(o.cluster(), Some(&*tcp_echo_cluster(9000, "v1")), "{o:#?}");
    let o = mesh.send(
        &sidecar,
        &Call::get("web", 9000, "/").to_address("10.96.0.91"),
    );
    assert_eq!(
        o.cluster(),
        Some("outbound|9000||web.default.svc.cluster.local"),
        "{o:#?}"
    );
    // A port of its own (9100, named `admin`: no protocol either): HTTP and TCP to the
    // service, anything to another address passes through.
    let admin = "outbound|9100||legacy.default.svc.cluster.local";
    let o = mesh.send(
        &sidecar,
        &Call::get("legacy", 9100, "/").to_address("10.96.0.92"),
    );
    assert_eq!(
        (o.cluster(), o.route_config.as_deref()),
        (Some(admin), Some("9100")),
        "{o:#?}"
    );
    let o = mesh.send(&sidecar, &Call::connect(9100).to_address("10.96.0.92"));
    assert_eq!(
        (o.cluster(), o.route_config.as_deref()),
        (Some(admin), None),
        "{o:#?}"
    );
    for call in [
        Call::connect(9100).to_address("203.0.113.9"),
        Call::get("elsewhere", 9100, "/").to_address("203.0.113.9"),
    ] {
        let o = mesh.send(&sidecar, &call);
        assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    }
}

/// A Sidecar egress listener whose port names no protocol tells HTTP from TCP per
/// connection for every service on it (the listener's protocol governs, as in Istio): on
/// the listener the proxy binds (no capture), an HTTP request takes the port's routes by
/// `Host`, other bytes the one service a bound listener serves (the first by host name).
#[test]
fn an_egress_listener_without_a_protocol_is_told_per_connection() {
    let (mut mesh, _, _) = tcp_echo();
    write_config(
        &mesh.config,
        "bound-sidecar.yaml",
        "apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: bound, namespace: default}
spec:
  workloadSelector: {labels: {app: bound}}
  egress:
  - port: {number: 9000, name: any}
    hosts: ['./*']
",
    );
    let proxy = mesh.connect(&ProxyNode::sidecar(
        "bound-abc",
        "default",
        "127.0.2.60",
        &[("app", "bound")],
    ));
    let o = mesh.send(&proxy, &Call::get("web", 9000, "/").to_address("127.0.0.1"));
    assert_eq!(o.listener.as_deref(), Some("127.0.0.1_9000"), "{o:#?}");
    assert_eq!(o.route_config.as_deref(), Some("9000"), "{o:#?}");
    assert_eq!(
        o.cluster(),
        Some("outbound|9000||web.default.svc.cluster.local"),
        "{o:#?}"
    );
    // tcp-echo's port is TCP, yet its HTTP is routed here too.
    let o = mesh.send(
        &proxy,
        &Call::get("tcp-echo", 9000, "/").to_address("127.0.0.1"),
    );
    assert_eq!(o.route_config.as_deref(), Some("9000"), "{o:#?}");
    let o = mesh.send(&proxy, &Call::connect(9000).to_address("127.0.0.1"));
    assert_eq!(o.route_config, None, "proxied as TCP: {o:#?}");
    assert_eq!(o.cluster(), Some("outbound|9000||db.example.com"), "{o:#?}");
}

/// The task's gateway: TCP on 31400 split 80/20 between tcp-echo's v1 and v2.
#[test]
fn tcp_echo_gateway_splits_connections_80_20() {
    let (mut mesh, _, gateway) = tcp_echo();
    let o = mesh.send(&gateway, &Call::connect(31400).to_address("127.0.0.1"));
    assert_eq!(o.listener.as_deref(), Some("127.0.0.1_31400"), "{o:#?}");
    assert_eq!(
        o.clusters(),
        vec![
            (tcp_echo_cluster(9000, "v1"), Some(80)),
            (tcp_echo_cluster(9000, "v2"), Some(20))
        ]
    );
}

/// `destinationSubnets` narrows a route to the service's addresses inside them (a chain of
/// its own, more specific than the service's; a subnet wider than the service draws no
/// other destination to it), `sourceNamespace` to sidecars of that namespace, and the first
/// route that applies wins; an address the route does not name keeps the default.
#[test]
fn tcp_match_conditions_select_routes_as_written() {
    let (mut mesh, sidecar, _) = tcp_echo();
    write_config(
        &mesh.config,
        "db-routes.yaml",
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: default}
spec:
  hosts: [db.example.com]
  tcp:
  - match: [{sourceNamespace: elsewhere}]
    route: [{destination: {host: tcp-echo, subset: v2, port: {number: 9000}}}]
  - match: [{destinationSubnets: [10.96.0.0/16]}]
    route: [{destination: {host: tcp-echo, subset: v2, port: {number: 9000}}}]
  - match: [{destinationSubnets: [192.0.2.128/25], port: 9000}]
    route: [{destination: {host: tcp-echo, subset: v1, port: {number: 9000}}}]
  - route: [{destination: {host: db.example.com}}]
",
    );
    // A subnet outside the service's own addresses draws no other destination to its
    // route: 10.96.0.77 is nobody's, so the port's HTTP chain (web's) takes it.
    let o = mesh.send(
        &sidecar,
        &Call::get("web", 9000, "/").to_address("10.96.0.77"),
    );
    assert_eq!(o.route_config.as_deref(), Some("9000"), "{o:#?}");
    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("192.0.2.200"));
    assert_eq!(o.cluster(), Some(&*tcp_echo_cluster(9000, "v1")), "{o:#?}");
    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("192.0.2.5"));
    assert_eq!(o.cluster(), Some("outbound|9000||db.example.com"), "{o:#?}");
}

/// On TCP ports a sidecar tries the `tcp[]` routes of every VirtualService covering the host,
/// most specific first (Istio walks every VirtualService of the host): where the exact
/// host's VirtualService has no route that applies, a wildcard one's route takes the
/// connection, instead of the service's own cluster.
#[test]
fn tcp_routes_of_every_covering_virtual_service_are_tried_in_order() {
    let (mut mesh, sidecar, _) = tcp_echo();
    write_config(
        &mesh.config,
        "db-routes.yaml",
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: default}
spec:
  hosts: [db.example.com]
  tcp:
  - match: [{sourceNamespace: elsewhere}]
    route: [{destination: {host: tcp-echo, subset: v2, port: {number: 9000}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: example-wide, namespace: default}
spec:
  hosts: ['*.example.com']
  tcp:
  - route: [{destination: {host: tcp-echo, subset: v1, port: {number: 9000}}}]
",
    );
    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("192.0.2.5"));
    assert_eq!(o.cluster(), Some(&*tcp_echo_cluster(9000, "v1")), "{o:#?}");
    // The exact host's route, where it applies, comes first.
    write_config(
        &mesh.config,
        "db-routes.yaml",
        &std::fs::read_to_string(mesh.config.join("db-routes.yaml"))
            .expect("read")
            .replace("sourceNamespace: elsewhere", "port: 9000"),
    );
    let o = mesh.send(&sidecar, &Call::connect(9000).to_address("192.0.2.5"));
    assert_eq!(o.cluster(), Some(&*tcp_echo_cluster(9000, "v2")), "{o:#?}");
}

/// `explain` for the TCP listeners: a captured sidecar's `0.0.0.0_9000` comes from every
/// service on the port (TCP, HTTP and told per connection) and tcp-echo's VirtualService; the gateway's TCP
/// listener from its Gateway and the VirtualService bound to it.
#[test]
fn tcp_listeners_name_the_inputs_they_are_built_from() {
    let (mesh, _, _) = tcp_echo();
    let built_from = |router: bool, name: &str| -> Vec<String> {
        let mut out: Vec<String> = mesh
            .provenance
            .keys()
            .filter(|((holder, t, n), _)| {
                let is_router = matches!(
                    holder,
                    Holder::Scope(dataflows::model::ScopeKey::Router { .. })
                );
                *t == ResourceType::Listener && n == name && is_router == router
            })
            .map(|(_, k): &(_, ConfigKey)| format!("{:?} {}/{}", k.kind, k.namespace, k.name))
            .collect();
        out.dedup();
        out
    };
    assert_eq!(
        built_from(false, "0.0.0.0_9000"),
        vec![
            "Service default/legacy",
            "Service default/tcp-echo",
            "Service default/web",
            "VirtualService default/tcp-echo",
            "ServiceEntry default/external-db",
        ]
    );
    assert_eq!(
        built_from(true, "127.0.0.1_31400"),
        vec![
            "VirtualService default/tcp-echo-gateway",
            "Gateway default/tcp-echo-gateway",
        ]
    );
}

/// Two ServiceEntries without addresses on one TCP port: nothing tells their connections
/// apart, so the first (by host) takes the port and the second is an error naming it, until
/// it gets addresses of its own. A TLS port without addresses is told apart by SNI: a
/// connection without its name still passes through to where it was going, as before.
#[test]
fn tcp_services_a_sidecar_cannot_tell_apart_are_reported() {
    let mut mesh = Mesh::new("tcp-unreachable");
    let entry = |name: &str, protocol: &str, addresses: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{name}.example.com]
{addresses}  ports: [{{number: 7000, name: p, protocol: {protocol}}}]
  resolution: DNS
"
        )
    };
    write_config(&mesh.config, "a.yaml", &entry("a", "TCP", ""));
    write_config(&mesh.config, "b.yaml", &entry("b", "TCP", ""));
    let sidecar = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        "127.0.60.20",
        &[("app", "client")],
    ));
    let conn = Call::connect(7000).to_address("203.0.113.1");
    let o = mesh.send(&sidecar, &conn);
    assert_eq!(o.cluster(), Some("outbound|7000||a.example.com"), "{o:#?}");
    // Each entry without addresses is also told so (MF0025); the conflict is on the later.
    let conflicts = |mesh: &Mesh| -> Vec<String> {
        mesh.dataflow_errors
            .keys()
            .filter(|e| !e.contains("the entry has no addresses"))
            .cloned()
            .collect()
    };
    let errors = conflicts(&mesh);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(
            "ServiceEntry/default/b: b.example.com: port 7000 (TCP) cannot be told apart"
        ),
        "{errors:?}"
    );
    let bare = mesh
        .dataflow_errors
        .keys()
        .filter(|e| e.contains("the entry has no addresses"))
        .count();
    assert_eq!(bare, 2, "{:?}", mesh.dataflow_errors);

    write_config(
        &mesh.config,
        "b.yaml",
        &entry("b", "TCP", "  addresses: [198.51.100.0/24]\n"),
    );
    let o = mesh.send(&sidecar, &Call::connect(7000).to_address("198.51.100.9"));
    assert_eq!(o.cluster(), Some("outbound|7000||b.example.com"), "{o:#?}");
    assert!(conflicts(&mesh).is_empty(), "{:?}", mesh.dataflow_errors);

    std::fs::remove_file(mesh.config.join("a.yaml")).expect("remove a.yaml");
    write_config(&mesh.config, "c.yaml", &entry("c", "TLS", ""));
    let o = mesh.send(&sidecar, &conn);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    assert!(conflicts(&mesh).is_empty(), "{:?}", mesh.dataflow_errors);
}

/// TLS ServiceEntries without addresses (Istio's egress task: `www.example.com` on 443,
/// resolution DNS; a wildcard `*.wikipedia.org`, NONE) on a captured sidecar: a connection
/// is routed by the name its client sends (SNI), a wildcard host by Envoy's wildcard match,
/// to the entry's own cluster whatever its destination address; a name no entry has passes
/// through (ALLOW_ANY) or is dropped (REGISTRY_ONLY), as without the entries; a `tls[]`
/// route for a host sends its name to the route's destination.
#[test]
fn tls_service_entries_without_addresses_are_routed_by_sni() {
    let mut mesh = Mesh::new("tls-sni-no-address");
    let entries = "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: www, namespace: default}
spec:
  hosts: [www.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: egress, namespace: default}
spec:
  hosts: [egress.example.com]
  ports: [{number: 443, name: https, protocol: HTTPS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: wikipedia, namespace: default}
spec:
  hosts: ['*.wikipedia.org']
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: NONE
";
    write_config(&mesh.config, "entries.yaml", entries);
    let sidecar = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        "127.0.61.20",
        &[("app", "client")],
    ));
    let to = |sni: &str| Call::tls(443, sni).to_address("203.0.113.80");
    let o = mesh.send(&sidecar, &to("www.example.com"));
    assert_eq!(o.cluster(), Some("outbound|443||www.example.com"), "{o:#?}");
    let o = mesh.send(&sidecar, &to("en.wikipedia.org"));
    assert_eq!(o.cluster(), Some("outbound|443||*.wikipedia.org"), "{o:#?}");
    let o = mesh.send(&sidecar, &to("wikipedia.org"));
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    let o = mesh.send(&sidecar, &to("unknown.example.org"));
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    let o = mesh.send(&sidecar, &Call::connect(443).to_address("203.0.113.80"));
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    assert!(
        mesh.dataflow_errors.is_empty(),
        "{:?}",
        mesh.dataflow_errors
    );

    // As in Istio's egress gateway task: www.example.com's name goes elsewhere by a route.
    write_config(
        &mesh.config,
        "route.yaml",
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: www, namespace: default}
spec:
  hosts: [www.example.com]
  tls:
  - match: [{sniHosts: [www.example.com], port: 443}]
    route: [{destination: {host: egress.example.com, port: {number: 443}}}]
",
    );
    let o = mesh.send(&sidecar, &to("www.example.com"));
    assert_eq!(
        o.cluster(),
        Some("outbound|443||egress.example.com"),
        "{o:#?}"
    );
    let o = mesh.send(&sidecar, &to("egress.example.com"));
    assert_eq!(
        o.cluster(),
        Some("outbound|443||egress.example.com"),
        "{o:#?}"
    );

    write_config(
        &mesh.config,
        "sidecar.yaml",
        "apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: default}
spec:
  egress: [{hosts: ['./*']}]
  outboundTrafficPolicy: {mode: REGISTRY_ONLY}
",
    );
    let o = mesh.send(&sidecar, &to("unknown.example.org"));
    assert_eq!(o.cluster(), Some("BlackHoleCluster"), "{o:#?}");
    let o = mesh.send(&sidecar, &to("en.wikipedia.org"));
    assert_eq!(o.cluster(), Some("outbound|443||*.wikipedia.org"), "{o:#?}");
}
