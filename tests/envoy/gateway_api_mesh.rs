//! The MESH-HTTP conformance cases that the first mesh tests left at the route table, with
//! real requests from a client behind its own sidecar: path, header and query matches (and
//! the 404 of a miss), redirects with their statuses, hosts, ports and prefixes, request
//! header edits at the rule and the backend, path rewrites, and weights as proportions.

use crate::gateway_api::MeshClient;
use crate::support;

use std::collections::BTreeMap;

use support::{require_envoy, share_near, HttpResponse, XdsMode};

/// This test's loopback /24.
const NET: u8 = 184;

/// HTTPRoute `reviews` on the Service `reviews`, one rule per case.
fn mesh_route(port: u16) -> String {
    let to = |v: &str| format!("backendRefs: [{{name: reviews-{v}, port: {port}}}]");
    let path =
        |kind: &str, value: &str| format!("matches: [{{path: {{type: {kind}, value: {value}}}}}]");
    let redirect = |prefix: &str, fields: &str| {
        format!(
            "  - {}\n    filters: [{{type: RequestRedirect, requestRedirect: {{{fields}}}}}]\n",
            path("PathPrefix", prefix)
        )
    };
    let rules = [
        // MeshTrafficSplit, MeshHTTPRouteMatching.
        format!("  - {}\n    {}\n", path("Exact", "/v1"), to("v1")),
        format!("  - {}\n    {}\n", path("Exact", "/v2"), to("v2")),
        format!(
            "  - matches: [{{path: {{type: PathPrefix, value: /match}}, headers: [{{name: version, value: two}}]}}]\n    {}\n",
            to("v2")
        ),
        format!("  - {}\n    {}\n", path("PathPrefix", "/match"), to("v1")),
        // MeshHTTPRouteQueryParamMatching: two parameters and the path, all of them.
        format!(
            "  - matches: [{{path: {{type: PathPrefix, value: /query}}, queryParams: [{{name: animal, value: whale}}, {{name: color, value: blue}}]}}]\n    {}\n",
            to("v2")
        ),
        // MeshHTTPRoute303/307/308Redirect, MeshHTTPRouteRedirectHostAndStatus.
        redirect("/redirect-303", "hostname: example.org, statusCode: 303"),
        redirect("/redirect-307", "hostname: example.org, statusCode: 307"),
        redirect("/redirect-308", "hostname: example.org, statusCode: 308"),
        // MeshHTTPRouteRedirectPath (prefix), MeshHTTPRouteRedirectPort (with a host, 301),
        // MeshHTTPRouteSchemeRedirect (301).
        redirect(
            "/prefix-redirect",
            "path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement}",
        ),
        redirect("/port-host", "port: 8083, hostname: example.org, statusCode: 301"),
        redirect("/scheme-301", "scheme: https, statusCode: 301"),
        // MeshHTTPRouteRequestHeaderModifier.
        format!(
            "  - {}\n    filters:\n    - type: RequestHeaderModifier\n      requestHeaderModifier:\n        \
             set: [{{name: X-Header-Set, value: set-overwrites-values}}]\n        \
             add: [{{name: X-Header-Add, value: add-appends-values}}]\n        \
             remove: [X-Header-Remove]\n    {}\n",
            path("PathPrefix", "/headers"),
            to("v1")
        ),
        // MeshHTTPRouteBackendRequestHeaderModifier: add and remove at the backend.
        format!(
            "  - {}\n    backendRefs:\n    - name: reviews-v2\n      port: {port}\n      filters:\n      \
             - type: RequestHeaderModifier\n        requestHeaderModifier: {{add: [{{name: X-Header-Add, value: backend}}], remove: [X-Header-Remove]}}\n",
            path("PathPrefix", "/backend-headers")
        ),
        // MeshHTTPRouteRewritePath: strip to `/`, and a full path.
        format!(
            "  - {}\n    filters: [{{type: URLRewrite, urlRewrite: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /}}}}}}]\n    {}\n",
            path("PathPrefix", "/strip-prefix"),
            to("v1")
        ),
        format!(
            "  - {}\n    filters: [{{type: URLRewrite, urlRewrite: {{path: {{type: ReplaceFullPath, replaceFullPath: /one}}}}}}]\n    {}\n",
            path("PathPrefix", "/full"),
            to("v1")
        ),
        // MeshHTTPRouteWeight.
        format!(
            "  - {}\n    backendRefs:\n    - {{name: reviews-v1, port: {port}, weight: 70}}\n    - {{name: reviews-v2, port: {port}, weight: 30}}\n",
            path("PathPrefix", "/weights")
        ),
    ];
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: reviews, namespace: default}}
spec:
  parentRefs: [{{group: \"\", kind: Service, name: reviews, port: {port}}}]
  rules:
{}",
        rules.concat()
    )
}

/// Proves, with real requests through a real client sidecar: MeshTrafficSplit and
/// MeshHTTPRouteMatching (exact paths to two Services, a header match over the path alone);
/// MeshHTTPRouteQueryParamMatching (two parameters and the path together, a miss 404);
/// MeshHTTPRoute303/307/308Redirect and MeshHTTPRouteRedirectHostAndStatus;
/// MeshHTTPRouteRedirectPath with a prefix; MeshHTTPRouteRedirectPort with a host and 301;
/// MeshHTTPRouteSchemeRedirect with 301; MeshHTTPRouteRequestHeaderModifier (set, add,
/// remove) and MeshHTTPRouteBackendRequestHeaderModifier (add, remove);
/// MeshHTTPRouteRewritePath (strip to `/`, a full path); MeshHTTPRouteWeight (300 requests
/// 70/30, each share within 12 points); a path no rule takes answers 404.
#[test]
fn mesh_routes_match_redirect_rewrite_and_split_through_a_sidecar() {
    let envoy_bin = require_envoy!();
    let mesh = MeshClient::start(
        &envoy_bin,
        "envoy-gateway-api-mesh-http",
        (NET, XdsMode::Delta),
        mesh_route,
    );
    let (envoy, addr) = (&mesh.envoy, mesh.addr());
    let get = |path: &str, headers: &[(&str, &str)]| {
        support::http_request(addr, "GET", "reviews", path, headers)
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", envoy.summary()))
    };
    let served = support::wait_until(support::CONVERGE_TIMEOUT, || {
        get("/weights", &[]).status == 200
    });
    assert!(served, "the route never applied\n{}", envoy.summary());
    let backend = |r: &HttpResponse| r.header("x-backend").map(str::to_owned);
    let v = |n: u8| Some(format!("reviews-v{n}"));

    // Matching, and the split by path.
    assert_eq!(backend(&get("/v1", &[])), v(1));
    assert_eq!(backend(&get("/v2", &[])), v(2));
    assert_eq!(get("/v1/more", &[]).status, 404, "exact");
    assert_eq!(backend(&get("/match", &[("version", "two")])), v(2));
    assert_eq!(backend(&get("/match", &[("version", "one")])), v(1));
    assert_eq!(backend(&get("/query?animal=whale&color=blue", &[])), v(2));
    for miss in [
        "/query?animal=whale",
        "/query?color=blue",
        "/elsewhere?animal=whale&color=blue",
    ] {
        assert_eq!(get(miss, &[]).status, 404, "{miss}");
    }

    // Redirects.
    for code in [303, 307, 308] {
        let r = get(&format!("/redirect-{code}/x"), &[]);
        assert_eq!(r.status, code, "{r:?}");
        let location = r.header("location").unwrap_or_default();
        assert!(
            location.starts_with("http://example.org")
                && location.ends_with(&format!("/redirect-{code}/x")),
            "{location}"
        );
    }
    let r = get("/prefix-redirect/x", &[]);
    assert_eq!(r.status, 302, "{r:?}");
    assert!(
        r.header("location")
            .unwrap_or_default()
            .ends_with("/replacement/x"),
        "{r:?}"
    );
    let r = get("/port-host", &[]);
    assert_eq!(r.status, 301, "{r:?}");
    assert_eq!(
        r.header("location"),
        Some("http://example.org:8083/port-host"),
        "{r:?}"
    );
    let r = get("/scheme-301", &[]);
    assert_eq!(r.status, 301, "{r:?}");
    assert!(
        r.header("location")
            .unwrap_or_default()
            .starts_with("https://reviews"),
        "{r:?}"
    );

    // Header edits at the rule and at the backend.
    let sent = [
        ("x-header-set", "original"),
        ("x-header-add", "client"),
        ("x-header-remove", "gone"),
    ];
    let r = get("/headers", &sent);
    assert_eq!(
        r.header_values("x-echo-x-header-set"),
        ["set-overwrites-values"],
        "{r:?}"
    );
    assert_eq!(
        r.header_values("x-echo-x-header-add"),
        ["client", "add-appends-values"],
        "{r:?}"
    );
    assert!(
        r.header_values("x-echo-x-header-remove").is_empty(),
        "{r:?}"
    );
    let r = get("/backend-headers", &sent);
    assert_eq!(backend(&r), v(2));
    assert_eq!(
        r.header_values("x-echo-x-header-add"),
        ["client", "backend"],
        "{r:?}"
    );
    assert!(
        r.header_values("x-echo-x-header-remove").is_empty(),
        "{r:?}"
    );
    assert_eq!(
        r.header_values("x-echo-x-header-set"),
        ["original"],
        "{r:?}"
    );

    // Rewrites.
    assert_eq!(
        get("/strip-prefix/three", &[]).header("x-echo-path"),
        Some("/three")
    );
    assert_eq!(get("/strip-prefix", &[]).header("x-echo-path"), Some("/"));
    assert_eq!(
        get("/full/one/two", &[]).header("x-echo-path"),
        Some("/one")
    );

    // Weights.
    let mut by_backend: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..300 {
        let r = get("/weights", &[]);
        assert_eq!(r.status, 200, "{r:?}");
        *by_backend
            .entry(backend(&r).unwrap_or_default())
            .or_default() += 1;
    }
    let count = |name: &str| by_backend.get(name).copied().unwrap_or(0);
    assert!(share_near(count("reviews-v1"), 300, 70), "{by_backend:?}");
    assert!(share_near(count("reviews-v2"), 300, 30), "{by_backend:?}");
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}
