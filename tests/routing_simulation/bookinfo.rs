//! The bookinfo example (tests/bookinfo.rs, examples/bookinfo/config as shipped): its gateway
//! and its `sleep` sidecar, and what the analysis reports about it.

use crate::fixtures::{bookinfo, bookinfo_cluster, gateway_setup, sidecar_setup, JASON};
use crate::support::write_config;
use crate::{assert_holds_all, assert_routes_to, assert_status, eds_names};
use dataflows::simulate::{Call, NoMatch};

/// Mirrors `tests/bookinfo.rs` part 1 (`bookinfo_example_serves_gateway_and_sidecar_over_delta_ads`):
/// through the ingress gateway (`127.0.0.1_8080`, `http.8080.127.0.0.1`), the five paths of
/// VirtualService `bookinfo` reach productpage-v1, other paths get 404, and any host is served.
#[test]
fn bookinfo_gateway_routes_the_productpage_paths() {
    let (mesh, gateway, _) = bookinfo();
    let config = mesh.proxy(&gateway);
    let call = |host: &str, path: &str| Call::get(host, 8080, path).to_address("127.0.0.1");
    let productpage = bookinfo_cluster("", "productpage");
    for path in [
        "/productpage",
        "/static/tailwind/tailwind.css",
        "/login",
        "/logout",
        "/api/v1/products/0",
    ] {
        let o = config.simulate(&call("bookinfo.example.com", path));
        assert_eq!(o.listener.as_deref(), Some("127.0.0.1_8080"), "{path}");
        assert_eq!(
            o.route_config.as_deref(),
            Some("http.8080.127.0.0.1"),
            "{path}"
        );
        assert_routes_to(&o, &productpage, &["127.0.1.41:9080".into()]);
    }
    for path in ["/", "/reviews/0", "/productpage/extra", "/loginx"] {
        let o = config.simulate(&call("bookinfo.example.com", path));
        assert_eq!(o.result, Err(NoMatch::NoRoute), "GET {path}");
        assert_status(&o, 404);
    }
    let other = config.simulate(&call("other.example.org", "/productpage"));
    assert_routes_to(&other, &productpage, &["127.0.1.41:9080".into()]);
}

/// Mirrors `tests/bookinfo.rs` part 2: through the `sleep` sidecar's egress listener
/// (`127.0.0.1_9080`, routes `9080`), `Host: reviews` reaches reviews-v1 (127.0.1.31), jason
/// reaches reviews-v2, and ratings, details and productpage reach their v1 pods under the
/// aliases the Envoy test uses.
#[test]
fn bookinfo_sleep_sidecar_routes_every_service_by_host() {
    let (mesh, _, sleep) = bookinfo();
    let config = mesh.proxy(&sleep);
    let call = |host: &str, path: &str| Call::get(host, 9080, path).to_address("127.0.0.1");
    let reviews = config.simulate(&call("reviews", "/reviews/0"));
    assert_eq!(reviews.listener.as_deref(), Some("127.0.0.1_9080"));
    assert_eq!(reviews.route_config.as_deref(), Some("9080"));
    assert_routes_to(
        &reviews,
        &bookinfo_cluster("v1", "reviews"),
        &["127.0.1.31:9080".into()],
    );
    let jason = config.simulate(&call("reviews", "/reviews/0").header(JASON.0, JASON.1));
    assert_routes_to(
        &jason,
        &bookinfo_cluster("v2", "reviews"),
        &["127.0.1.32:9080".into()],
    );
    for (host, service, endpoint) in [
        ("ratings", "ratings", "127.0.1.21:9080"),
        ("details", "details", "127.0.1.11:9080"),
        ("productpage", "productpage", "127.0.1.41:9080"),
        (
            "reviews.default.svc.cluster.local:9080",
            "reviews",
            "127.0.1.31:9080",
        ),
        ("ratings.default", "ratings", "127.0.1.21:9080"),
    ] {
        let o = config.simulate(&call(host, "/"));
        assert_routes_to(&o, &bookinfo_cluster("v1", service), &[endpoint.into()]);
    }
    assert_holds_all(
        "sidecar EDS",
        &eds_names(&config),
        &[
            bookinfo_cluster("v1", "reviews"),
            bookinfo_cluster("v2", "reviews"),
            bookinfo_cluster("v3", "reviews"),
            bookinfo_cluster("v1", "ratings"),
        ],
    );
    // The sidecar has no capture: nothing listens on other ports.
    assert_eq!(
        config.simulate(&Call::get("reviews", 8080, "/")).result,
        Err(NoMatch::NoListener { port: 8080 })
    );
}

/// Analysis across objects: a route to a host no Service or ServiceEntry defines is reported
/// naming the VirtualService and the host (Envoy answers 503 for it), and the report goes
/// when a ServiceEntry defines the host.
#[test]
fn a_route_to_a_host_nobody_serves_is_reported_until_a_service_defines_it() {
    let (mut mesh, _reviews, _proxy) = sidecar_setup("undefined-host", &["v1"]);
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: to-nowhere, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: nowhere.example.com}\n";
    write_config(&mesh.config, "to-nowhere.yaml", vs);
    mesh.sync_clean();
    mesh.assert_one_error(&[
        "VirtualService/default/to-nowhere",
        "host nowhere.example.com is defined by no Service",
    ]);
    let se = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: nowhere, namespace: default}\nspec:\n  hosts: [nowhere.example.com]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  resolution: DNS\n";
    write_config(&mesh.config, "nowhere.yaml", se);
    mesh.sync_clean();
    mesh.assert_no_errors();
}

/// Analysis across objects: a Gateway whose selector matches no Pod is reported naming the
/// Gateway and its selector (no proxy serves it), and the report goes when such a Pod exists
/// and comes back when it goes.
#[test]
fn a_gateway_no_workload_matches_is_reported_while_it_matches_none() {
    let (mut mesh, _reviews, _gateway, _) = gateway_setup("unselected-gateway", &["v1"]);
    mesh.assert_no_errors();
    std::fs::remove_file(mesh.config.join("gateway-pod.yaml")).expect("remove the pod");
    mesh.sync_clean();
    mesh.assert_one_error(&[
        "Gateway/default/bookinfo-gateway",
        "selector {istio=ingressgateway} matches no workload",
    ]);
}
