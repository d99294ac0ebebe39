//! A `RequestRedirect` or `URLRewrite` written on a rule's backend rather than on the rule
//! (HTTPRouteBackendRequestRedirect, HTTPRouteBackendURLRewrite) through a real Envoy
//! gateway: on a rule's one backend it is the rule's, as every request of the rule goes
//! there; on one backend of several it cannot be applied to that backend apart from the
//! others, and that backend is left out, as a backend that does not resolve is.

use crate::gateway_api::{edge_gateway, edge_route, reviews_v1, start_gateway};
use crate::support;

use std::net::SocketAddr;

use support::{free_port, require_envoy, write_config, TestDir};

/// This test's loopback /24.
const NET: u8 = 195;

/// A rule for `PathPrefix` `path` whose one backend, reviews-v1, carries `filter` (a YAML
/// flow mapping).
fn rule(path: &str, filter: &str) -> String {
    format!(
        "  - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
    backendRefs: [{{name: reviews-v1, port: 9080, filters: [{filter}]}}]
"
    )
}

/// Proves HTTPRouteBackendURLRewrite and HTTPRouteBackendRequestRedirect through a real
/// Envoy gateway: a full-path and a prefix rewrite on a rule's one backend reach the
/// backend rewritten; a full-path and a prefix redirect on it answer 302 with the
/// replaced path; a rewrite on one of two backends leaves that backend out (every request
/// of the rule answered by the other).
#[test]
fn backend_redirects_and_rewrites_apply_on_a_rules_one_backend() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-backend-filters");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let _v1 = reviews_v1(NET, &config_dir);
    let rewrite = |kind: &str, field: &str, value: &str| {
        format!("{{type: URLRewrite, urlRewrite: {{path: {{type: {kind}, {field}: {value}}}}}}}")
    };
    let redirect = |kind: &str, field: &str, value: &str| {
        format!(
            "{{type: RequestRedirect, requestRedirect: {{path: {{type: {kind}, {field}: {value}}}}}}}"
        )
    };
    let rules = [
        rule(
            "/full",
            &rewrite("ReplaceFullPath", "replaceFullPath", "/rewritten-full"),
        ),
        rule(
            "/prefix",
            &rewrite(
                "ReplacePrefixMatch",
                "replacePrefixMatch",
                "/rewritten-prefix",
            ),
        ),
        rule(
            "/redirect-full",
            &redirect("ReplaceFullPath", "replaceFullPath", "/redirected-full"),
        ),
        rule(
            "/redirect-prefix",
            &redirect(
                "ReplacePrefixMatch",
                "replacePrefixMatch",
                "/redirected-prefix",
            ),
        ),
        format!(
            "  - matches: [{{path: {{type: PathPrefix, value: /two}}}}]
    backendRefs:
    - {{name: reviews-v1, port: 9080}}
    - {{name: reviews-v1, port: 9080, filters: [{}]}}
",
            rewrite("ReplaceFullPath", "replaceFullPath", "/elsewhere")
        ),
    ]
    .concat();
    write_config(
        &config_dir,
        "gateway.yaml",
        &edge_gateway(port, &edge_route("shop", &rules)),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let get = |path: &str| {
        support::http_request(addr, "GET", "shop.example", path, &[])
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", envoy.summary()))
    };
    let routed = support::wait_until(support::CONVERGE_TIMEOUT, || {
        get("/full/original").status == 200
    });
    assert!(routed, "never routed\n{}", envoy.summary());

    // HTTPRouteBackendURLRewrite.
    let r = get("/full/original");
    assert_eq!(r.header("x-echo-path"), Some("/rewritten-full"), "{r:?}");
    let r = get("/prefix/original");
    assert_eq!(
        r.header("x-echo-path"),
        Some("/rewritten-prefix/original"),
        "{r:?}"
    );

    // HTTPRouteBackendRequestRedirect.
    for (path, location) in [
        ("/redirect-full/original", "/redirected-full"),
        ("/redirect-prefix/original", "/redirected-prefix/original"),
    ] {
        let r = get(path);
        assert_eq!(r.status, 302, "{path}: {r:?}");
        let at = r.header("location").unwrap_or_default();
        assert!(
            at.starts_with("http://shop.example") && at.ends_with(location),
            "{path}: {at}"
        );
    }

    // One backend of two: that one is left out; the other answers every request as sent.
    for _ in 0..10 {
        let r = get("/two/x");
        assert_eq!(
            (r.status, r.header("x-echo-path")),
            (200, Some("/two/x")),
            "{r:?}"
        );
    }
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}
