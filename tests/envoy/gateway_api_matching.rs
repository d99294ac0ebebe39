//! The Gateway API's matching and filter conformance cases with real requests through a real
//! Envoy gateway (until now proved on the route table only): exact paths (a trailing slash is
//! another path), header, query parameter and method matches, redirects' `Location` and
//! status, response header edits (set, add, remove), a backend request's host rewritten,
//! CORS preflights and simple requests, and weights as proportions of real requests.
//! Each host of the Gateway's HTTP listener carries one case's HTTPRoute; the backends echo
//! the path, host and `x-` headers they received.

use crate::gateway_api::{
    answer, edge_gateway, edge_gateway_of, edge_route as route, reviews_services, reviews_v1,
    start_gateway, version_service,
};
use crate::gateway_api_resilience::await_status;
use crate::support;

use std::net::SocketAddr;

use support::reviews::Reviews;
use support::{free_port, require_envoy, write_config, HttpResponse, TestDir};

/// The matching test's loopback /24.
const NET: u8 = 176;
/// The CORS test's loopback /24.
const CORS_NET: u8 = 177;
/// The weights test's loopback /24.
const WEIGHT_NET: u8 = 178;
/// The hostname intersection test's loopback /24.
const INTERSECTION_NET: u8 = 189;

/// Waits until `GET /` for `host` through `addr` answers 200.
fn await_served(addr: SocketAddr, host: &str, envoy: &support::Envoy) {
    await_status(addr, host, 200, envoy);
}

/// Proves, through a real Envoy gateway: HTTPRouteExactPathMatching (`/one` exact, `/one/`
/// not), HTTPRouteHeaderMatching (an exact header picks its rule, a regular expression
/// another, neither the default), HTTPRouteQueryParamMatching, HTTPRouteMethodMatching
/// (POST to one backend, GET to the other), HTTPRouteRedirectHostAndStatus,
/// HTTPRouteRedirectScheme, HTTPRoute303/307/308Redirect and HTTPRouteRedirectPort (the
/// `Location` and status a client receives),
/// HTTPRouteResponseHeaderModifier (set, add and remove on the response),
/// HTTPRouteBackendRequestHeaderModifier (set, add and remove at the backend),
/// HTTPRouteMatching (a prefix by segment, a path or a header) and
/// HTTPRouteMatchingAcrossRoutes (a later route's path-or-header rule on one of an earlier
/// route's two hostnames), and
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
             filters: [{type: RequestRedirect, requestRedirect: {scheme: https, statusCode: 302}}]\n  \
             - matches: [{path: {type: PathPrefix, value: /s303}}]\n    \
             filters: [{type: RequestRedirect, requestRedirect: {statusCode: 303}}]\n  \
             - matches: [{path: {type: PathPrefix, value: /s307}}]\n    \
             filters: [{type: RequestRedirect, requestRedirect: {statusCode: 307}}]\n  \
             - matches: [{path: {type: PathPrefix, value: /s308}}]\n    \
             filters: [{type: RequestRedirect, requestRedirect: {statusCode: 308}}]\n  \
             - matches: [{path: {type: PathPrefix, value: /port}}]\n    \
             filters: [{type: RequestRedirect, requestRedirect: {port: 8083}}]\n  \
             - matches: [{path: {type: PathPrefix, value: /to-https-port}}]\n    \
             filters: [{type: RequestRedirect, requestRedirect: {scheme: https, port: 8443}}]\n",
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
        // HTTPRouteMatching: a prefix by segment, a path OR a header.
        route(
            "matching",
            &format!(
                "  - matches: [{{path: {{type: PathPrefix, value: /}}}}]\n    {}\n  \
                 - matches: [{{path: {{type: PathPrefix, value: /v2}}}}, {{headers: [{{name: version, value: two}}]}}]\n    {}\n",
                to("v1"),
                to("v2")
            ),
        ),
        // HTTPRouteMatchingAcrossRoutes: a route of two hostnames, and a later one of one of
        // them with a path OR a header.
        format!(
            "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: across-a, namespace: default, creationTimestamp: \"2026-01-01T00:00:00Z\"}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [across.example, across.net]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /}}}}]
    {}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: across-b, namespace: default, creationTimestamp: \"2026-02-01T00:00:00Z\"}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [across.example]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /v2}}}}, {{headers: [{{name: version, value: two}}]}}]
    {}
",
            to("v1"),
            to("v2")
        ),
        route(
            "backend-headers",
            "  - backendRefs:\n    - name: reviews-v1\n      port: 9080\n      filters:\n      \
             - type: RequestHeaderModifier\n        requestHeaderModifier:\n          \
             set: [{name: X-Header-Set, value: set-overwrites-values}]\n          \
             add: [{name: X-Header-Add, value: add-appends-values}]\n          \
             remove: [X-Header-Remove]\n",
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
        &edge_gateway(port, &routes.concat()),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let ask = |method: &str, host: &str, path: &str, headers: &[(&str, &str)]| -> HttpResponse {
        support::http_request(addr, method, &format!("{host}.example"), path, headers)
            .unwrap_or_else(|e| panic!("{method} {host} {path}: {e}\n{}", envoy.summary()))
    };
    // Every route is in one push: once the last host answers, all are served.
    await_served(addr, "rewrite.example", &envoy);
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

    // HTTPRoute303/307/308RedirectStatusCode (the listener's port kept), HTTPRouteRedirectPort
    // (a port written is the Location's; with https, one other than 443 is kept too).
    for code in [303u16, 307, 308] {
        let r = ask("GET", "redirect", &format!("/s{code}/c"), &[]);
        assert_eq!(r.status, code);
        assert_eq!(
            r.header("location"),
            Some(format!("http://redirect.example:{port}/s{code}/c").as_str()),
            "{:?}",
            r.headers
        );
    }
    let r = ask("GET", "redirect", "/port/d", &[]);
    assert_eq!(r.status, 302);
    assert_eq!(
        r.header("location"),
        Some("http://redirect.example:8083/port/d"),
        "{:?}",
        r.headers
    );
    let r = ask("GET", "redirect", "/to-https-port/e", &[]);
    assert_eq!(
        r.header("location"),
        Some("https://redirect.example:8443/to-https-port/e"),
        "{:?}",
        r.headers
    );

    // HTTPRouteResponseHeaderModifier: set, add, remove on what the backend answered.
    let r = ask("GET", "response", "/", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-set"), Some("set-value"));
    assert_eq!(r.header("x-added"), Some("added-value"));
    assert_eq!(r.header("x-backend"), None, "removed: {:?}", r.headers);

    // HTTPRouteMatching.
    for (path, headers, want) in [
        ("/", &[][..], "reviews-v1"),
        ("/example", &[], "reviews-v1"),
        ("/v2", &[], "reviews-v2"),
        ("/v2/", &[], "reviews-v2"),
        ("/v2example", &[], "reviews-v1"),
        ("/foo/v2/example", &[], "reviews-v1"),
        ("/", &[("version", "two")], "reviews-v2"),
    ] {
        assert_eq!(
            backend(&ask("GET", "matching", path, headers)),
            (200, want.into()),
            "{path} {headers:?}"
        );
    }
    // HTTPRouteMatchingAcrossRoutes: the hosts are `across.example` and `across.net` (not
    // `NAME.example`), so these are asked directly.
    let across = |host: &str, path: &str, headers: &[(&str, &str)]| {
        let r = support::http_request(addr, "GET", host, path, headers)
            .unwrap_or_else(|e| panic!("{host}{path}: {e}"));
        backend(&r)
    };
    assert_eq!(
        across("across.example", "/v2", &[]),
        (200, "reviews-v2".into())
    );
    assert_eq!(
        across("across.example", "/", &[("version", "two")]),
        (200, "reviews-v2".into())
    );
    assert_eq!(
        across("across.example", "/", &[]),
        (200, "reviews-v1".into())
    );
    assert_eq!(across("across.net", "/v2", &[]), (200, "reviews-v1".into()));
    assert_eq!(
        across("across.net", "/", &[("version", "two")]),
        (200, "reviews-v1".into())
    );

    // HTTPRouteBackendRequestHeaderModifier: set, add and remove at the backend.
    let r = ask(
        "GET",
        "backend-headers",
        "/",
        &[
            ("x-header-set", "original"),
            ("x-header-add", "client"),
            ("x-header-remove", "gone"),
        ],
    );
    let values = |name: &str| r.header_values(name);
    assert_eq!(values("x-echo-x-header-set"), ["set-overwrites-values"]);
    assert_eq!(
        values("x-echo-x-header-add"),
        ["client", "add-appends-values"]
    );
    assert!(
        values("x-echo-x-header-remove").is_empty(),
        "{:?}",
        r.headers
    );

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

/// Proves HTTPRouteCORS through a real Envoy gateway: a preflight from an exact allowed
/// origin, and from one a wildcard origin matches (`https://*.bar.com` takes
/// `https://xpto.www.bar.com`), is answered with that origin, the methods, the headers,
/// `max-age` and credentials; a simple request from an allowed origin gets the origin and
/// the exposed headers; an origin not allowed gets no `access-control-allow-origin` (its
/// preflight goes on to the backend, which answers without one).
#[test]
fn http_route_cors_through_a_real_gateway() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-cors");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let _v1 = reviews_v1(CORS_NET, &config_dir);
    write_config(
        &config_dir,
        "gateway.yaml",
        &edge_gateway(
            port,
            &route(
                "cors",
                "  - filters:
    - type: CORS
      cors:
        allowOrigins: [\"https://www.foo.com\", \"https://*.bar.com\"]
        allowMethods: [GET, OPTIONS]
        allowHeaders: [x-header-1, x-header-2]
        exposeHeaders: [x-header-3, x-header-4]
        allowCredentials: true
        maxAge: 3600
    backendRefs: [{name: reviews-v1, port: 9080}]
",
            ),
        ),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    await_served(addr, "cors.example", &envoy);
    let preflight = |origin: &str| {
        support::http_request(
            addr,
            "OPTIONS",
            "cors.example",
            "/",
            &[
                ("origin", origin),
                ("access-control-request-method", "GET"),
                ("access-control-request-headers", "x-header-1"),
            ],
        )
        .unwrap_or_else(|e| panic!("preflight from {origin}: {e}"))
    };
    for origin in ["https://www.foo.com", "https://xpto.www.bar.com"] {
        let r = preflight(origin);
        assert_eq!(r.status, 200, "{origin}: {:?}", r.headers);
        assert_eq!(
            r.header("access-control-allow-origin"),
            Some(origin),
            "{:?}",
            r.headers
        );
        let methods = r.header("access-control-allow-methods").unwrap_or_default();
        assert!(
            methods.contains("GET") && methods.contains("OPTIONS"),
            "{methods}"
        );
        let headers = r.header("access-control-allow-headers").unwrap_or_default();
        assert!(
            headers.contains("x-header-1") && headers.contains("x-header-2"),
            "{headers}"
        );
        assert_eq!(r.header("access-control-max-age"), Some("3600"));
        assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    }
    for origin in [
        "https://evil.example",
        "https://bar.com",
        "http://www.foo.com",
    ] {
        let r = preflight(origin);
        assert_eq!(
            r.header("access-control-allow-origin"),
            None,
            "{origin}: {:?}",
            r.headers
        );
    }
    let simple = support::http_request(
        addr,
        "GET",
        "cors.example",
        "/",
        &[("origin", "https://www.foo.com")],
    )
    .expect("a simple request");
    assert_eq!(simple.status, 200);
    assert_eq!(
        simple.header("access-control-allow-origin"),
        Some("https://www.foo.com")
    );
    let exposed = simple
        .header("access-control-expose-headers")
        .unwrap_or_default();
    assert!(
        exposed.contains("x-header-3") && exposed.contains("x-header-4"),
        "{exposed}"
    );
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// Proves HTTPRouteWeight through a real Envoy gateway, by proportion: backends weighted
/// 70/30/0 share 300 requests about 70/30 (each within 12 percentage points, several
/// standard deviations of a fair draw) and the backend of weight 0 gets none.
#[test]
fn http_route_weights_split_real_requests_in_proportion() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-weights");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let (_reviews, backends) = reviews_services(WEIGHT_NET, &config_dir, &["v1", "v2", "v3"]);
    write_config(
        &config_dir,
        "gateway.yaml",
        &edge_gateway(
            port,
            &route(
                "weights",
                "  - backendRefs:
    - {name: reviews-v1, port: 9080, weight: 70}
    - {name: reviews-v2, port: 9080, weight: 30}
    - {name: reviews-v3, port: 9080, weight: 0}
",
            ),
        ),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    await_served(addr, "weights.example", &envoy);
    let before: Vec<usize> = backends.iter().map(|b| b.requests_served()).collect();
    const N: usize = 300;
    for _ in 0..N {
        let (status, _) = support::http_get(addr, "weights.example", "/", &[]).expect("a request");
        assert_eq!(status, 200);
    }
    let got: Vec<usize> = backends
        .iter()
        .zip(&before)
        .map(|(b, n)| b.requests_served() - n)
        .collect();
    assert_eq!(got.iter().sum::<usize>(), N, "{got:?}");
    let share = |n: usize| n as f64 / N as f64;
    assert!((share(got[0]) - 0.7).abs() < 0.12, "v1 {got:?}");
    assert!((share(got[1]) - 0.3).abs() < 0.12, "v2 {got:?}");
    assert_eq!(got[2], 0, "weight 0 takes nothing: {got:?}");
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}

/// Proves HTTPRouteHostnameIntersection's traffic through a real Envoy gateway: three HTTP
/// listeners on one port (an exact hostname and two wildcards), routes whose hostnames are
/// partly inside and partly outside them (specific in specific, specific in wildcard,
/// wildcard in specific, wildcard in wildcard); each request is answered by the route whose
/// hostnames intersect its listener's, `Host` with the port too; a host outside every
/// intersection — among them a wildcard's bare parent, which `*.` does not cover — gets 404,
/// and so does a route none of whose hostnames intersects (its status half is
/// `gateway_status`'s `hostname_intersection_conformance_case_from_files`).
#[test]
fn http_routes_take_the_intersection_of_their_hostnames_and_the_listeners() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-hostname-intersection");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let (_reviews, _backends) =
        reviews_services(INTERSECTION_NET, &config_dir, &["v1", "v2", "v3"]);
    let route = |name: &str, hostnames: &str, prefix: &str, version: &str| {
        format!(
            "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: {hostnames}
  rules:
  - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]
    backendRefs: [{{name: reviews-{version}, port: 9080}}]
"
        )
    };
    let listener = |name: &str, hostname: &str| {
        format!("  - {{name: {name}, port: {port}, protocol: HTTP, hostname: '{hostname}'}}\n")
    };
    write_config(
        &config_dir,
        "gateway.yaml",
        &edge_gateway_of(
            &[
                listener("exact", "api.shop.example"),
                listener("apps", "*.apps.example"),
                listener("other", "*.other.example"),
            ]
            .concat(),
            &[
                route(
                    "specific-in-specific",
                    "[non.matching.example, '*.nomatch.example', api.shop.example]",
                    "/s1",
                    "v1"
                ),
                route(
                    "specific-in-wildcard",
                    "[non.matching.example, apps.example, foo.apps.example, bar.apps.example, foo.bar.apps.example]",
                    "/s2",
                    "v2"
                ),
                route(
                    "wildcard-in-specific",
                    "[non.matching.example, '*.shop.example']",
                    "/s3",
                    "v3"
                ),
                route("wildcard-in-wildcard", "['*.other.example']", "/s4", "v1"),
                route(
                    "no-intersection",
                    "[wrong.shop.example.net, apps.example]",
                    "/s5",
                    "v2"
                ),
            ]
            .concat()
        ),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let ask = |host: &str, path: &str| answer(addr, host, path);
    // Every route is in one push: once one is served, all are.
    let served = support::wait_until(support::CONVERGE_TIMEOUT, || {
        ask("x.other.example", "/s4") == "reviews-v1"
    });
    assert!(served, "the routes are not served\n{}", envoy.summary());
    let with_port = format!("api.shop.example:{port}");
    let cases: &[(&str, &str, &str)] = &[
        ("api.shop.example", "/s1", "reviews-v1"),
        (&with_port, "/s1", "reviews-v1"),
        ("api.shop.example", "/s3", "reviews-v3"),
        ("foo.apps.example", "/s2", "reviews-v2"),
        ("bar.apps.example", "/s2", "reviews-v2"),
        ("foo.bar.apps.example", "/s2", "reviews-v2"),
        ("x.other.example", "/s4", "reviews-v1"),
        // Outside every intersection.
        ("non.matching.example", "/s1", "404"),
        ("x.nomatch.example", "/s1", "404"),
        ("apps.example", "/s2", "404"),
        ("api.shop.example", "/s2", "404"),
        ("foo.apps.example", "/s1", "404"),
        ("foo.apps.example", "/s3", "404"),
        ("wrong.shop.example.net", "/s5", "404"),
        ("apps.example", "/s5", "404"),
    ];
    for (host, path, want) in cases {
        assert_eq!(&ask(host, path), want, "{host}{path}");
    }
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}
