//! The gateway scenario of tests/envoy/gateway.rs: routes by host and path at the gateway,
//! match conditions on the source and the gateway, HTTPS redirects and TLS passthrough by SNI.

use crate::fixtures::{gateway_setup, pod, via_gateway, GATEWAY_HOST, JASON, PORT};
use crate::support::reviews::{Binding, FQDN};
use crate::support::{write_config, ProxyNode};
use crate::{assert_holds_all, assert_routes_to, assert_status, eds_names, routes_to, Mesh};
use dataflows::simulate::{Call, NoMatch};

/// Analysis across objects: a VirtualService bound to a gateway no Gateway defines reaches no
/// proxy through it; that is reported naming the VirtualService and the gateway, and the
/// report goes when the Gateway exists (and the route works).
#[test]
fn a_virtual_service_bound_to_an_undefined_gateway_is_reported_until_it_exists() {
    let (mut mesh, reviews, gateway, _) = gateway_setup("undefined-gateway", &["v1"]);
    let binding = Binding::Gateway {
        gateway: "other-gateway".into(),
        host: GATEWAY_HOST.into(),
    };
    reviews.write_plain_routing(&binding);
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/"));
    assert_status(&o, 404);
    mesh.assert_one_error(&[
        "VirtualService/default/reviews",
        "gateway default/other-gateway is defined by no Gateway",
    ]);
    // The same VirtualService through the Gateway that exists: routed, nothing reported.
    let binding = Binding::Gateway {
        gateway: "bookinfo-gateway".into(),
        host: GATEWAY_HOST.into(),
    };
    reviews.write_plain_routing(&binding);
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);
    mesh.assert_no_errors();
}

/// `sourceNamespace`: a match for sidecars of namespace `default` applies to the sidecar in
/// `default` only; at the gateway (whose routes are not per namespace) it never applies.
#[test]
fn match_source_namespace_applies_to_that_namespace_only() {
    let (mut mesh, reviews, gateway, _) = gateway_setup("source-namespace", &["v1", "v2"]);
    let node = |ns: &str| ProxyNode::sidecar("client-abc", ns, &reviews.ip(20), &[("app", "c")]);
    let here = mesh.connect_captured(&node("default"));
    let there = mesh.connect_captured(&node("other"));
    let vs = format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: split, namespace: default}}\nspec:\n  hosts: [reviews.default.svc.cluster.local, {GATEWAY_HOST}]\n  gateways: [bookinfo-gateway, mesh]\n  http:\n  - match: [{{sourceNamespace: default}}]\n    route: [{{destination: {{host: reviews, subset: v2, port: {{number: 9080}}}}}}]\n  - route: [{{destination: {{host: reviews, subset: v1, port: {{number: 9080}}}}}}]\n"
    );
    write_config(&mesh.config, "split.yaml", &vs);
    let call = Call::get("reviews.default.svc.cluster.local", 9080, "/").to_address("203.0.113.9");
    let o = mesh.send(&here, &call);
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let o = mesh.send(&there, &call);
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/"));
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
}

/// `sourceLabels`: a match for proxies labelled `app: productpage` applies to the sidecar
/// carrying that label and to no other, at a gateway as at a sidecar (the gateway's own
/// labels decide); relabelling the selector moves each proxy's route, and a route whose only
/// match selects a label nobody carries reaches no one.
#[test]
fn match_source_labels_apply_to_the_proxies_carrying_them() {
    let (mut mesh, reviews, gateway, _) = gateway_setup("source-labels", &["v1", "v2"]);
    let node = |name: &str, app: &str, ip: u8| {
        ProxyNode::sidecar(name, "default", &reviews.ip(ip), &[("app", app)])
    };
    let productpage = mesh.connect_captured(&node("productpage-abc", "productpage", 20));
    let ratings = mesh.connect_captured(&node("ratings-abc", "ratings", 21));
    let vs = |selector: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: split, namespace: default}}\nspec:\n  hosts: [reviews.default.svc.cluster.local, {GATEWAY_HOST}]\n  gateways: [bookinfo-gateway, mesh]\n  http:\n  - match: [{{sourceLabels: {selector}}}]\n    route: [{{destination: {{host: reviews, subset: v2, port: {{number: 9080}}}}}}]\n  - route: [{{destination: {{host: reviews, subset: v1, port: {{number: 9080}}}}}}]\n"
        )
    };
    let call = Call::get("reviews.default.svc.cluster.local", 9080, "/").to_address("203.0.113.9");
    let at_gateway = via_gateway(GATEWAY_HOST, "/");
    let (v1, v2) = (reviews.cluster("v1"), reviews.cluster("v2"));
    let (pod1, pod2) = (pod(&reviews, "v1"), pod(&reviews, "v2"));

    write_config(&mesh.config, "split.yaml", &vs("{app: productpage}"));
    routes_to(&mut mesh, &productpage, &call, &v2, &pod2);
    routes_to(&mut mesh, &ratings, &call, &v1, &pod1);
    routes_to(&mut mesh, &gateway, &at_gateway, &v1, &pod1);

    write_config(&mesh.config, "split.yaml", &vs("{app: ratings}"));
    routes_to(&mut mesh, &productpage, &call, &v1, &pod1);
    routes_to(&mut mesh, &ratings, &call, &v2, &pod2);

    // The gateway's own labels: the router carries `istio: ingressgateway`.
    write_config(&mesh.config, "split.yaml", &vs("{istio: ingressgateway}"));
    routes_to(&mut mesh, &gateway, &at_gateway, &v2, &pod2);
    routes_to(&mut mesh, &ratings, &call, &v1, &pod1);

    // Every label of the selector must be carried.
    write_config(
        &mesh.config,
        "split.yaml",
        &vs("{app: productpage, version: v9}"),
    );
    for proxy in [&productpage, &ratings] {
        routes_to(&mut mesh, proxy, &call, &v1, &pod1);
    }
    routes_to(&mut mesh, &gateway, &at_gateway, &v1, &pod1);
    mesh.assert_no_errors();
}

/// Two Gateways selecting one router, an HTTP server and a TCP server on the same address
/// and port: the HTTP server keeps the port (its routes still answer), and the TCP server of
/// the other Gateway is reported by name (Istio's ConflictingGateways) rather than vanishing;
/// the report goes with the second Gateway (and a warning with the first, which holds the
/// port).
#[test]
fn a_tcp_server_on_another_gateways_http_port_is_reported() {
    let (mut mesh, reviews, gateway, binding) = gateway_setup("gateway-port-clash", &["v1"]);
    reviews.write_plain_routing(&binding);
    let tcp_gateway = format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: tcp-gateway, namespace: default}}\nspec:\n  selector: {{istio: ingressgateway}}\n  servers:\n  - port: {{number: {PORT}, name: tcp, protocol: TCP}}\n    bind: 127.0.0.1\n    hosts: ['*']\n"
    );
    write_config(&mesh.config, "tcp-gateway.yaml", &tcp_gateway);
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);
    // Both Gateways of the pair say it: an error on the one that gets nothing, a warning on
    // the one holding the port.
    mesh.assert_errors(&[
        &[
            "Gateway/default/bookinfo-gateway: spec.servers: port",
            "is its HTTP server's; the Tcp server of Gateway default/tcp-gateway on it gets \
             nothing (IST0145 ConflictingGateways)",
        ],
        &[
            "Gateway/default/tcp-gateway",
            "spec.servers[0].port",
            &format!("port {PORT}"),
            "HTTP server's (Gateway default/bookinfo-gateway)",
        ],
    ]);
    std::fs::remove_file(mesh.config.join("tcp-gateway.yaml")).expect("remove");
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);
    mesh.assert_no_errors();
}

/// A DestinationRule with a `workloadSelector` applies to the proxies of its namespace it
/// selects, ahead of the rule without one: its subset `v2` (here selecting the v1 pod) is
/// the productpage sidecar's, while the ratings sidecar keeps the namespace's rule (v2 is
/// the v2 pod), and a sidecar of another namespace carrying the label is not selected.
#[test]
fn destination_rule_workload_selector_picks_the_rule_per_workload() {
    let (mut mesh, reviews, _, _) = gateway_setup("dr-workload-selector", &["v1", "v2"]);
    let node = |name: &str, ns: &str, app: &str, ip: u8| {
        ProxyNode::sidecar(name, ns, &reviews.ip(ip), &[("app", app)])
    };
    let productpage = mesh.connect_captured(&node("productpage-abc", "default", "productpage", 20));
    let ratings = mesh.connect_captured(&node("ratings-abc", "default", "ratings", 21));
    let elsewhere = mesh.connect_captured(&node("productpage-xyz", "other", "productpage", 22));
    write_config(
        &mesh.config,
        "vs.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: to-v2, namespace: default}\nspec:\n  hosts: [reviews.default.svc.cluster.local]\n  http:\n  - route: [{destination: {host: reviews.default.svc.cluster.local, subset: v2}}]\n",
    );
    write_config(
        &mesh.config,
        "dr-productpage.yaml",
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews-for-productpage, namespace: default}\nspec:\n  host: reviews\n  workloadSelector: {matchLabels: {app: productpage}}\n  subsets:\n  - {name: v1, labels: {version: v1}}\n  - {name: v2, labels: {version: v1}}\n",
    );
    let call = Call::get("reviews.default.svc.cluster.local", 9080, "/").to_address("203.0.113.9");
    let v2 = reviews.cluster("v2");
    let o = mesh.send(&productpage, &call);
    assert_routes_to(&o, &v2, &[pod(&reviews, "v1")]);
    let o = mesh.send(&ratings, &call);
    assert_routes_to(&o, &v2, &[pod(&reviews, "v2")]);
    let o = mesh.send(&elsewhere, &call);
    assert_routes_to(&o, &v2, &[pod(&reviews, "v2")]);
    // Without the selector's rule, every proxy is back on the namespace's rule.
    std::fs::remove_file(mesh.config.join("dr-productpage.yaml")).expect("remove");
    let o = mesh.send(&productpage, &call);
    assert_routes_to(&o, &v2, &[pod(&reviews, "v2")]);
}

/// A match's `gateways` (Istio's egress-gateway pattern): one VirtualService bound to the
/// gateway and to `mesh`, whose first route matches only for `mesh`. Through the gateway that
/// route does not apply (v1); from a sidecar it does (v2).
#[test]
fn match_gateways_split_one_virtual_service_between_gateway_and_sidecars() {
    let (mut mesh, reviews, gateway, _) = gateway_setup("match-gateways", &["v1", "v2"]);
    let sidecar = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    ));
    let vs = format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: split, namespace: default}}\nspec:\n  hosts: [reviews, {GATEWAY_HOST}]\n  gateways: [bookinfo-gateway, mesh]\n  http:\n  - match: [{{gateways: [mesh]}}]\n    route: [{{destination: {{host: reviews, subset: v2, port: {{number: 9080}}}}}}]\n  - route: [{{destination: {{host: reviews, subset: v1, port: {{number: 9080}}}}}}]\n"
    );
    write_config(&mesh.config, "split.yaml", &vs);
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/"));
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
    let o = mesh.send(
        &sidecar,
        &Call::get("reviews", 9080, "/").to_address("203.0.113.9"),
    );
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
}

/// Mirrors `envoy/gateway.rs` steps 1 and 7 (`gateway_follows_config_changes_over_*`): a
/// Gateway without a bound VirtualService routes nothing (404), again after the
/// VirtualService is deleted.
#[test]
fn gateway_without_virtual_service_answers_404() {
    let (mut mesh, reviews, proxy, binding) = gateway_setup("gateway-404", &["v1", "v2"]);
    let o = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_eq!(o.listener, Some(format!("127.0.0.1_{PORT}")));
    assert_eq!(o.route_config, Some(format!("http.{PORT}.127.0.0.1")));
    assert_status(&o, 404);
    reviews.write_plain_routing(&binding);
    let routed = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_eq!(routed.cluster(), Some(reviews.cluster("").as_str()));
    reviews.delete_virtual_service();
    let o = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_status(&o, 404);
}

/// Mirrors `envoy/gateway.rs` steps 2, 8 and 9: the plain (subset-less) route reaches both
/// pods through the service's cluster; with v1's endpoint gone only v2 is left; the proxy
/// holds the EDS assignments of the service and of v1 and v2.
#[test]
fn gateway_plain_route_reaches_the_services_endpoints() {
    let (mut mesh, reviews, proxy, binding) = gateway_setup("gateway-plain", &["v1", "v2"]);
    reviews.write_plain_routing(&binding);
    let o = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_eq!(o.virtual_host, Some(format!("{GATEWAY_HOST}:{PORT}")));
    assert_routes_to(
        &o,
        &reviews.cluster(""),
        &[pod(&reviews, "v1"), pod(&reviews, "v2")],
    );
    assert_holds_all(
        "EDS assignments",
        &eds_names(&mesh.proxy(&proxy)),
        &["", "v1", "v2"].map(|s| reviews.cluster(s)),
    );
    reviews.write_endpoints(&["v2"]);
    let o = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v2")]);
}

/// Mirrors `envoy/gateway.rs` steps 3–4: jason → v2, `/reviews` → v1 (100/0) then v2
/// (0/100), an unmatched path and an unknown host → 404.
#[test]
fn gateway_header_prefix_and_host_routing() {
    let (mut mesh, reviews, proxy, binding) = gateway_setup("gateway-subsets", &["v1", "v2"]);
    reviews.write_subset_routing(&binding, &[("v1", 100), ("v2", 0)]);
    let jason = mesh.send(
        &proxy,
        &via_gateway(GATEWAY_HOST, "/reviews/1").header(JASON.0, JASON.1),
    );
    assert_routes_to(&jason, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let split = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_routes_to(&split, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
    let path = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/ratings/1"));
    assert_eq!(path.result, Err(NoMatch::NoRoute));
    assert_status(&path, 404);
    let host = mesh.send(&proxy, &via_gateway("other.example.com", "/reviews/1"));
    assert!(
        matches!(host.result, Err(NoMatch::NoVirtualHost { .. })),
        "{host:#?}"
    );
    assert_status(&host, 404);

    reviews.write_subset_routing(&binding, &[("v1", 0), ("v2", 100)]);
    let shifted = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_routes_to(&shifted, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
}

/// Mirrors `envoy/gateway.rs` steps 5–6: subset v3 takes `/reviews` while jason stays on v2;
/// without v3's endpoint the gateway answers 503.
#[test]
fn gateway_new_subset_v3_then_503_without_endpoints() {
    let (mut mesh, reviews, proxy, binding) = gateway_setup("gateway-v3", &["v1", "v2", "v3"]);
    reviews.write_subset_routing(&binding, &[("v3", 100)]);
    let v3 = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_routes_to(&v3, &reviews.cluster("v3"), &[pod(&reviews, "v3")]);
    let jason = mesh.send(
        &proxy,
        &via_gateway(GATEWAY_HOST, "/reviews/1").header(JASON.0, JASON.1),
    );
    assert_routes_to(&jason, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    reviews.write_endpoints(&["v1", "v2"]);
    let gone = mesh.send(&proxy, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_eq!(gone.cluster(), Some(reviews.cluster("v3").as_str()));
    assert_status(&gone, 503);
}

/// `tls.httpsRedirect` on a gateway's HTTP server: the virtual host a plaintext request lands
/// on requires TLS (`require_tls: ALL`), so Envoy answers it with a 301 to https before any
/// route — for the host a VirtualService serves as for one none does. (The simulation reports
/// the route the request would take; the redirect is Envoy's virtual-host check, asserted
/// here on the virtual host the simulation picked.) Without the flag, the route applies.
#[test]
fn https_redirect_servers_send_plaintext_requests_to_https() {
    use envoy_types::pb::envoy::config::route::v3::virtual_host::TlsRequirementType;
    let (mut mesh, reviews, gateway, binding) = gateway_setup("https-redirect", &["v1"]);
    reviews.write_plain_routing(&binding);
    let require_tls = |mesh: &mut Mesh, host: &str| -> Option<i32> {
        let o = mesh.send(&gateway, &via_gateway(host, "/reviews/1"));
        let config = mesh.proxy(&gateway);
        let rc = &config.routes[o.route_config.as_deref().expect("a route configuration")];
        let vh = o.virtual_host.as_deref()?;
        rc.virtual_hosts
            .iter()
            .find(|v| v.name == vh)
            .map(|v| v.require_tls)
    };
    assert_eq!(
        require_tls(&mut mesh, GATEWAY_HOST),
        Some(TlsRequirementType::None as i32)
    );
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/reviews/1"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);

    let gateway_yaml = std::fs::read_to_string(mesh.config.join("gateway.yaml")).expect("read");
    write_config(
        &mesh.config,
        "gateway.yaml",
        &format!("{gateway_yaml}    tls: {{httpsRedirect: true}}\n"),
    );
    assert_eq!(
        require_tls(&mut mesh, GATEWAY_HOST),
        Some(TlsRequirementType::All as i32)
    );
    assert_eq!(
        require_tls(&mut mesh, "other.example.com"),
        Some(TlsRequirementType::All as i32),
        "a host no VirtualService serves is redirected too"
    );
}

/// A TLS server with `mode: PASSTHROUGH` at the gateway routes each connection by its SNI to
/// the destination of the `tls[]` route naming it, without terminating it; a name no route
/// claims, or a connection without TLS, matches no filter chain.
#[test]
fn gateway_passthrough_routes_tls_connections_by_sni() {
    let (mut mesh, reviews, gateway, _) = gateway_setup("gateway-passthrough", &["v1", "v2"]);
    write_config(
        &mesh.config,
        "passthrough.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: passthrough, namespace: default}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: 8443, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    hosts: ['*.example.com']
    tls: {{mode: PASSTHROUGH}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: passthrough, namespace: default}}
spec:
  hosts: ['*.example.com']
  gateways: [passthrough]
  tls:
  - match: [{{sniHosts: [a.example.com]}}]
    route: [{{destination: {{host: {FQDN}, subset: v1, port: {{number: 9080}}}}}}]
  - match: [{{sniHosts: [b.example.com]}}]
    route: [{{destination: {{host: {FQDN}, subset: v2, port: {{number: 9080}}}}}}]
"
        ),
    );
    let at = |sni: &str| Call::tls(8443, sni).to_address("127.0.0.1");
    let o = mesh.send(&gateway, &at("a.example.com"));
    assert_eq!(o.listener.as_deref(), Some("127.0.0.1_8443"), "{o:#?}");
    assert_eq!(o.downstream_tls, None, "passed through, not terminated");
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
    let o = mesh.send(&gateway, &at("b.example.com"));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    for call in [
        at("c.example.com"),
        Call::connect(8443).to_address("127.0.0.1"),
    ] {
        let o = mesh.send(&gateway, &call);
        assert!(
            matches!(o.result, Err(NoMatch::NoFilterChain { .. })),
            "{call:?}: {o:#?}"
        );
    }
    mesh.assert_no_errors();
}
