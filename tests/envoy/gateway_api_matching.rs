//! The Gateway API's matching and filter conformance cases with real requests through a real
//! Envoy gateway (until now proved on the route table only): exact paths (a trailing slash is
//! another path), header, query parameter and method matches, redirects' `Location` and
//! status, response header edits (set, add, remove) and a backend request's host rewritten.
//! Each host of the Gateway's HTTP listener carries one case's HTTPRoute; the backends echo
//! the path, host and `x-` headers they received.

use crate::gateway_api::{start_gateway, version_service};
use crate::support;

use std::net::SocketAddr;

use support::reviews::Reviews;
use support::{free_port, require_envoy, write_config, HttpResponse, TestDir};

/// This test's loopback /24.
const NET: u8 = 176;

/// HTTPRoute `name` for host `NAME.example` on Gateway `edge`, its `rules` (YAML, indented as
/// the list under `rules:`).
fn route(name: &str, rules: &str) -> String {
    format!(
        "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [{name}.example]
  rules:
{rules}"
    )
}

/// Proves, through a real Envoy gateway: HTTPRouteExactPathMatching (`/one` exact, `/one/`
/// not), HTTPRouteHeaderMatching (an exact header picks its rule, a regular expression
/// another, neither the default), HTTPRouteQueryParamMatching, HTTPRouteMethodMatching
/// (POST to one backend, GET to the other), HTTPRouteRedirectHostAndStatus and
/// HTTPRouteRedirectScheme (the `Location` and status a client receives),
/// HTTPRouteResponseHeaderModifier (set, add and remove on the response) and
/// HTTPRouteRewriteHost (the host the backend receives).
#[test]
fn http_route_matches_and_filters_through_a_real_gateway() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-matching");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let reviews = Reviews::new(NET, 9080, &config_dir);
    let _v1 = reviews.start_backend("v1");
    let _v2 = reviews.start_backend("v2");
    reviews.write_pods(&["v1", "v2"]);
    write_config(
        &config_dir,
        "services.yaml",
        &[
            version_service(&reviews, "v1"),
            version_service(&reviews, "v2"),
        ]
        .join("---\n"),
    );
    let to = |v: &str| format!("backendRefs: [{{name: reviews-{v}, port: 9080}}]");
    let routes = [
        route(
            "exact",
            &format!(
                "  - matches: [{{path: {{type: Exact, value: /one}}}}]\n    {}\n",
                to("v1")
            ),
        ),
        route(
            "headers",
            &format!(
                "  - matches: [{{headers: [{{name: version, value: two}}]}}]\n    {}\n  \
                 - matches: [{{headers: [{{type: RegularExpression, name: color, value: \"^(red|blue)$\"}}]}}]\n    {}\n",
                to("v2"),
                to("v2")
            ),
        ),
        route(
            "query",
            &format!(
                "  - matches: [{{queryParams: [{{name: animal, value: whale}}]}}]\n    {}\n  - {}\n",
                to("v2"),
                to("v1")
            ),
        ),
        route(
            "method",
            &format!(
                "  - matches: [{{method: POST}}]\n    {}\n  - {}\n",
                to("v2"),
                to("v1")
            ),
        ),
        route(
            "redirect",
            "  - matches: [{path: {type: PathPrefix, value: /host}}]\n    \
             filters: [{type: RequestRedirect, requestRedirect: {hostname: moved.example, statusCode: 301}}]\n  \
             - matches: [{path: {type: PathPrefix, value: /scheme}}]\n    \
             filters: [{type: RequestRedirect, requestRedirect: {scheme: https, statusCode: 302}}]\n",
        ),
        route(
            "response",
            &format!(
                "  - filters:\n    - type: ResponseHeaderModifier\n      responseHeaderModifier:\n        \
                 set: [{{name: x-set, value: set-value}}]\n        \
                 add: [{{name: x-added, value: added-value}}]\n        \
                 remove: [x-backend]\n    {}\n",
                to("v1")
            ),
        ),
        route(
            "rewrite",
            &format!(
                "  - filters: [{{type: URLRewrite, urlRewrite: {{hostname: rewritten.example}}}}]\n    {}\n",
                to("v1")
            ),
        ),
    ];
    write_config(
        &config_dir,
        "gateway.yaml",
        &format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec:
  gatewayClassName: istio
  listeners: [{{name: http, port: {port}, protocol: HTTP}}]
{}",
            routes.concat()
        ),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let ask = |method: &str, host: &str, path: &str, headers: &[(&str, &str)]| -> HttpResponse {
        support::http_request(addr, method, &format!("{host}.example"), path, headers)
            .unwrap_or_else(|e| panic!("{method} {host} {path}: {e}\n{}", envoy.summary()))
    };
    // Every route is in one push: once the last host answers, all are served.
    let converged = support::wait_until(support::CONVERGE_TIMEOUT, || {
        support::http_request(addr, "GET", "rewrite.example", "/", &[])
            .is_ok_and(|r| r.status == 200)
    });
    assert!(converged, "{}", envoy.summary());
    let backend = |r: &HttpResponse| (r.status, r.text());

    // HTTPRouteExactPathMatching.
    assert_eq!(
        backend(&ask("GET", "exact", "/one", &[])),
        (200, "reviews-v1".into())
    );
    assert_eq!(
        ask("GET", "exact", "/one/", &[]).status,
        404,
        "a trailing slash is another path"
    );
    assert_eq!(ask("GET", "exact", "/one/two", &[]).status, 404);

    // HTTPRouteHeaderMatching: an exact header, a regular expression, neither.
    assert_eq!(
        backend(&ask("GET", "headers", "/", &[("version", "two")])),
        (200, "reviews-v2".into())
    );
    assert_eq!(
        backend(&ask("GET", "headers", "/", &[("color", "blue")])),
        (200, "reviews-v2".into())
    );
    assert_eq!(
        ask("GET", "headers", "/", &[("color", "green")]).status,
        404
    );
    assert_eq!(
        ask("GET", "headers", "/", &[("version", "one")]).status,
        404
    );

    // HTTPRouteQueryParamMatching.
    assert_eq!(
        backend(&ask("GET", "query", "/?animal=whale", &[])),
        (200, "reviews-v2".into())
    );
    assert_eq!(
        backend(&ask("GET", "query", "/?animal=dolphin", &[])),
        (200, "reviews-v1".into())
    );
    assert_eq!(
        backend(&ask("GET", "query", "/", &[])),
        (200, "reviews-v1".into())
    );

    // HTTPRouteMethodMatching.
    assert_eq!(
        backend(&ask("POST", "method", "/", &[("content-length", "0")])),
        (200, "reviews-v2".into())
    );
    assert_eq!(
        backend(&ask("GET", "method", "/", &[])),
        (200, "reviews-v1".into())
    );

    // HTTPRouteRedirectHostAndStatus, HTTPRouteRedirectScheme: what the client receives —
    // the listener's port kept when neither scheme nor port is written; with `https`
    // written, its well-known port, left out of the Location.
    let r = ask("GET", "redirect", "/host/a", &[]);
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some(format!("http://moved.example:{port}/host/a").as_str()),
        "{:?}",
        r.headers
    );
    let r = ask("GET", "redirect", "/scheme/b", &[]);
    assert_eq!(r.status, 302);
    assert_eq!(
        r.header("location"),
        Some("https://redirect.example/scheme/b"),
        "{:?}",
        r.headers
    );

    // HTTPRouteResponseHeaderModifier: set, add, remove on what the backend answered.
    let r = ask("GET", "response", "/", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-set"), Some("set-value"));
    assert_eq!(r.header("x-added"), Some("added-value"));
    assert_eq!(r.header("x-backend"), None, "removed: {:?}", r.headers);

    // HTTPRouteRewriteHost: the backend receives the rewritten host.
    let r = ask("GET", "rewrite", "/", &[]);
    assert_eq!(
        r.header("x-echo-host"),
        Some("rewritten.example"),
        "{:?}",
        r.headers
    );
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}
