//! The Gateway API's timeout, retry, mirror and invalid-backend conformance cases with real
//! requests through a real Envoy gateway, against backends that fail on cue (a status, a
//! dropped connection or a delay for the first N requests of a key, `support::Backend`) and
//! count how often each request reached them. Until now these cases were proved on the
//! route table only; here the client sees the status the spec asks for, and the backend the
//! number of attempts.

use crate::gateway_api::{
    edge_gateway, edge_gateway_of, edge_route as route, start_gateway, version_service,
};
use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use support::kube_yaml::HandService;
use support::reviews::Reviews;
use support::{free_port, require_envoy, write_config, HttpResponse, TestDir};

/// The timeout and retry test's loopback /24.
const RETRY_NET: u8 = 179;
/// The mirror and invalid-backend test's loopback /24.
const BACKENDS_NET: u8 = 180;

/// `reviews-v1` as a rule's backend.
const TO_V1: &str = "backendRefs: [{name: reviews-v1, port: 9080}]";

/// A request to the backend that fails `times` times with `with` (`500`, `reset`,
/// `delay-1000`) under `key`, then succeeds.
fn failing(key: &str, times: usize, with: &str) -> [(String, String); 3] {
    [
        ("x-fail-key".into(), key.into()),
        ("x-fail-times".into(), times.to_string()),
        ("x-fail-with".into(), with.into()),
    ]
}

/// Waits until `GET /` for `host` through `addr` answers `status`.
pub(crate) fn await_status(addr: SocketAddr, host: &str, status: u16, envoy: &support::Envoy) {
    let served = support::wait_until(support::CONVERGE_TIMEOUT, || {
        support::http_request(addr, "GET", host, "/", &[]).is_ok_and(|r| r.status == status)
    });
    assert!(
        served,
        "{host} does not answer {status}\n{}",
        envoy.summary()
    );
}

/// Proves, through a real Envoy gateway and a backend failing on cue:
/// - HTTPRouteTimeoutRequest and HTTPRouteTimeoutBackendRequest: a 1 s delay past a 500 ms
///   `request` or `backendRequest` timeout gets 504, a fast request 200, and `request: 0s`
///   waits for the slow backend (no timeout).
/// - HTTPRouteRetry: codes [500] with 3 attempts succeed after two 500s (three arrivals) and
///   return the 500 after four (four arrivals: one try and three retries); a 503 is not
///   retried; the four 5xx codes with 2 attempts retry 502 and return 504 past the budget;
///   `attempts: 0` does not retry.
/// - HTTPRouteRetryConnectionError: a connection dropped before the response is retried
///   without any code listed: success after two drops, 503 after four.
/// - HTTPRouteRetryBackendTimeout with HTTPRouteRequestTimeout: an attempt past
///   `backendRequest` is retried and the next one answers; the `request` timeout bounds all
///   attempts (504, with only the attempts begun before it arriving).
#[test]
fn http_route_timeouts_and_retries_through_a_real_gateway() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-retries");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let reviews = Reviews::new(RETRY_NET, 9080, &config_dir);
    let v1 = reviews.start_backend("v1");
    reviews.write_pods(&["v1"]);
    write_config(
        &config_dir,
        "services.yaml",
        &version_service(&reviews, "v1"),
    );
    let rules = |lines: &str| format!("  - {lines}\n    {TO_V1}\n");
    let routes = [
        route("request", &rules("timeouts: {request: 500ms}")),
        route("backend", &rules("timeouts: {backendRequest: 500ms}")),
        route("unbounded", &rules("timeouts: {request: 0s}")),
        route("codes", &rules("retry: {codes: [500], attempts: 3}")),
        route(
            "all-codes",
            &rules("retry: {codes: [500, 502, 503, 504], attempts: 2}"),
        ),
        route(
            "no-retry",
            &rules("retry: {codes: [500, 502, 503, 504], attempts: 0}"),
        ),
        route("resets", &rules("retry: {attempts: 3}")),
        route(
            "per-try",
            &rules("timeouts: {request: 5s, backendRequest: 300ms}\n    retry: {attempts: 2}"),
        ),
        route(
            "bounded",
            &rules("timeouts: {request: 500ms, backendRequest: 300ms}\n    retry: {attempts: 5}"),
        ),
    ];
    write_config(
        &config_dir,
        "gateway.yaml",
        &edge_gateway(port, &routes.concat()),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // Every route is in one push: once the last host answers, all are served.
    await_status(addr, "bounded.example", 200, &envoy);
    let ask = |host: &str, headers: &[(String, String)]| -> HttpResponse {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        support::http_request(addr, "GET", &format!("{host}.example"), "/", &headers)
            .unwrap_or_else(|e| panic!("GET {host}: {e}\n{}", envoy.summary()))
    };
    let slow = [("x-delay-ms".to_string(), "1000".to_string())];

    // Timeouts: the slow request past either timeout is 504; fast ones and `0s` get 200.
    for host in ["request", "backend"] {
        assert_eq!(ask(host, &[]).status, 200, "{host}, fast");
        assert_eq!(ask(host, &slow).status, 504, "{host}, 1 s past 500 ms");
    }
    assert_eq!(ask("unbounded", &slow).status, 200, "request: 0s waits");

    // HTTPRouteRetry. Each case has a key of its own, so the backend counts its attempts.
    let cases: [(&str, &str, usize, &str, u16, usize); 7] = [
        ("codes", "500-twice", 2, "500", 200, 3),
        ("codes", "500-past-budget", 4, "500", 500, 4),
        ("codes", "503-unlisted", 2, "503", 503, 1),
        ("all-codes", "502-once", 1, "502", 200, 2),
        ("all-codes", "504-past-budget", 3, "504", 504, 3),
        ("no-retry", "500-no-retry", 1, "500", 500, 1),
        // HTTPRouteRetryConnectionError: dropped connections, no code listed.
        ("resets", "drop-twice", 2, "reset", 200, 3),
    ];
    for (host, key, times, with, status, arrivals) in cases {
        let r = ask(host, &failing(key, times, with));
        assert_eq!(r.status, status, "{host}: {key}: {}", r.text());
        assert_eq!(v1.arrivals(key), arrivals, "{host}: {key}: attempts");
    }
    let r = ask("resets", &failing("drop-past-budget", 4, "reset"));
    assert_eq!(r.status, 503, "four drops, three retries: {}", r.text());
    assert_eq!(v1.arrivals("drop-past-budget"), 4);

    // HTTPRouteRetryBackendTimeout: the first attempt runs past 300 ms and is retried.
    let r = ask("per-try", &failing("slow-once", 1, "delay-1000"));
    assert_eq!(r.status, 200, "per-try: {}", r.text());
    assert_eq!(v1.arrivals("slow-once"), 2);
    // The request's 500 ms bound every attempt: the second (begun about 300 ms in) is cut
    // short with the request, and no third begins.
    let r = ask("bounded", &failing("always-slow", 10, "delay-1000"));
    assert_eq!(r.status, 504, "bounded: {}", r.text());
    // The backend counts an arrival when it has read the request; give the last one time.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(v1.arrivals("always-slow"), 2, "attempts within 500 ms");
}

/// Service `name` of namespace `other` whose one endpoint is `reviews`'s v1 pod.
fn other_service(reviews: &Reviews, name: &str) -> String {
    let service = HandService {
        namespace: "other",
        port_name: "http",
        ..HandService::web(name, 9080, reviews.backend_port())
    };
    service.with_endpoints(&[&reviews.pod_ip("v1")])
}

/// Proves, through a real Envoy gateway:
/// - HTTPRouteRequestMirror: the request is answered by v1 and a copy reaches v2;
///   HTTPRouteRequestPercentageMirror: `percent: 50` and a `fraction` of 1/4 mirror that
///   share of 200 requests.
/// - HTTPRouteInvalidBackendRefUnknownKind, HTTPRouteInvalidNonExistentBackendRef,
///   HTTPRouteInvalidCrossNamespaceBackendRef: a rule whose backend is of an unknown kind,
///   missing, or in another namespace without a ReferenceGrant answers 500.
/// - HTTPRoutePartiallyInvalidViaInvalidReferenceGrant: with a grant naming one Service of
///   the other namespace, the rule to it answers 200 and the rule to its neighbour 500;
///   deleting the grant turns the first to 500 as well.
#[test]
fn http_route_mirrors_and_invalid_backends_through_a_real_gateway() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-backends");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let reviews = Reviews::new(BACKENDS_NET, 9080, &config_dir);
    let _v1 = reviews.start_backend("v1");
    let v2 = reviews.start_backend("v2");
    reviews.write_pods(&["v1", "v2"]);
    write_config(
        &config_dir,
        "services.yaml",
        &[
            version_service(&reviews, "v1"),
            version_service(&reviews, "v2"),
            other_service(&reviews, "granted"),
            other_service(&reviews, "ungranted"),
        ]
        .join("---\n"),
    );
    let grant = "apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: to-granted, namespace: other}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}]
  to: [{group: \"\", kind: Service, name: granted}]
";
    write_config(&config_dir, "grant.yaml", grant);
    let routes = [
        route(
            "mirror",
            &format!(
                "  - filters: [{{type: RequestMirror, requestMirror: {{backendRef: {{name: reviews-v2, port: 9080}}}}}}]\n    {TO_V1}\n"
            ),
        ),
        route(
            "mirror-half",
            &format!(
                "  - filters: [{{type: RequestMirror, requestMirror: {{backendRef: {{name: reviews-v2, port: 9080}}, percent: 50}}}}]\n    {TO_V1}\n"
            ),
        ),
        route(
            "mirror-quarter",
            &format!(
                "  - filters: [{{type: RequestMirror, requestMirror: {{backendRef: {{name: reviews-v2, port: 9080}}, fraction: {{numerator: 1, denominator: 4}}}}}}]\n    {TO_V1}\n"
            ),
        ),
        route(
            "unknown-kind",
            "  - backendRefs: [{group: unknownkind.example.com, kind: NonExistent, name: v1}]\n",
        ),
        route("missing", "  - backendRefs: [{name: nowhere, port: 9080}]\n"),
        route(
            "partial",
            "  - matches: [{path: {type: PathPrefix, value: /v2}}]\n    \
             backendRefs: [{name: ungranted, namespace: other, port: 9080}]\n  \
             - backendRefs: [{name: granted, namespace: other, port: 9080}]\n",
        ),
    ];
    write_config(
        &config_dir,
        "gateway.yaml",
        &edge_gateway(port, &routes.concat()),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    await_status(addr, "partial.example", 200, &envoy);
    let ask = |host: &str, path: &str| -> HttpResponse {
        support::http_request(addr, "GET", &format!("{host}.example"), path, &[])
            .unwrap_or_else(|e| panic!("GET {host}{path}: {e}\n{}", envoy.summary()))
    };

    // HTTPRouteRequestMirror: v1 answers; v2 receives the copy (sent alongside, so waited for).
    let before = v2.requests_served();
    let r = ask("mirror", "/mirrored");
    assert_eq!((r.status, r.text()), (200, "reviews-v1".to_string()));
    let mirrored = support::wait_until(Duration::from_secs(5), || {
        v2.requests_served() == before + 1
    });
    assert!(
        mirrored,
        "v2 received {} copies",
        v2.requests_served() - before
    );

    // HTTPRouteRequestPercentageMirror: 200 requests each, copies in proportion (within 12
    // points: about 3.4 standard deviations at 50 %, 3.9 at 25 %).
    for (host, percent) in [("mirror-half", 50), ("mirror-quarter", 25)] {
        let before = v2.requests_served();
        for _ in 0..200 {
            assert_eq!(ask(host, "/").status, 200, "{host}");
        }
        // The copies are sent alongside; let the last ones land.
        std::thread::sleep(Duration::from_millis(300));
        let copies = v2.requests_served() - before;
        assert!(
            support::share_near(copies, 200, percent),
            "{host}: {copies} copies of 200 requests"
        );
    }

    // Invalid backends answer 500.
    assert_eq!(
        ask("unknown-kind", "/").status,
        500,
        "an unknown backend kind"
    );
    assert_eq!(ask("missing", "/").status, 500, "a missing Service");
    assert_eq!(
        ask("partial", "/v2").status,
        500,
        "a Service the grant does not name"
    );
    let r = ask("partial", "/");
    assert_eq!(
        (r.status, r.text()),
        (200, "reviews-v1".to_string()),
        "the granted Service"
    );

    // The grant deleted: the granted rule answers 500 too.
    support::remove_config(&config_dir, "grant.yaml");
    await_status(addr, "partial.example", 500, &envoy);
    assert_eq!(ask("partial", "/v2").status, 500);
}

/// The loopback /24 of the wrong-grants test.
const GRANTS_NET: u8 = 191;

/// Proves HTTPRouteInvalidReferenceGrant through a real Envoy gateway: seven routes, each
/// of a namespace of its own, send to `reviews-v1` of `default` under a ReferenceGrant
/// wrong in exactly one way — written in the route's namespace instead of the backend's,
/// `from` of another group, kind or namespace, `to` of another group, kind or name — and
/// each answers 500 (the rule keeps no backend); the eighth, under a right grant, reaches
/// the backend. Envoy rejects no update.
#[test]
fn routes_under_a_reference_grant_wrong_in_one_way_answer_500() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-wrong-grants");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let reviews = Reviews::new(GRANTS_NET, 9080, &config_dir);
    let _v1 = reviews.start_backend("v1");
    reviews.write_pods(&["v1"]);
    write_config(
        &config_dir,
        "services.yaml",
        &version_service(&reviews, "v1"),
    );
    // (route namespace, where the grant is, its `from`, its `to`).
    let from = |group: &str, kind: &str, ns: &str| {
        format!("{{group: '{group}', kind: {kind}, namespace: {ns}}}")
    };
    let to = |group: &str, kind: &str, name: &str| {
        format!("{{group: '{group}', kind: {kind}, name: {name}}}")
    };
    const API: &str = "gateway.networking.k8s.io";
    let cases: Vec<(&str, &str, String, String)> = vec![
        (
            "in-route-namespace",
            "in-route-namespace",
            from(API, "HTTPRoute", "in-route-namespace"),
            to("", "Service", "reviews-v1"),
        ),
        (
            "from-group",
            "default",
            from("example.com", "HTTPRoute", "from-group"),
            to("", "Service", "reviews-v1"),
        ),
        (
            "from-kind",
            "default",
            from(API, "GRPCRoute", "from-kind"),
            to("", "Service", "reviews-v1"),
        ),
        (
            "from-namespace",
            "default",
            from(API, "HTTPRoute", "elsewhere"),
            to("", "Service", "reviews-v1"),
        ),
        (
            "to-group",
            "default",
            from(API, "HTTPRoute", "to-group"),
            to("apps", "Service", "reviews-v1"),
        ),
        (
            "to-kind",
            "default",
            from(API, "HTTPRoute", "to-kind"),
            to("", "Secret", "reviews-v1"),
        ),
        (
            "to-name",
            "default",
            from(API, "HTTPRoute", "to-name"),
            to("", "Service", "reviews-v2"),
        ),
        (
            "right",
            "default",
            from(API, "HTTPRoute", "right"),
            to("", "Service", "reviews-v1"),
        ),
    ];
    let objects: String = cases
        .iter()
        .map(|(ns, grant_ns, from, to)| {
            format!(
                "---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {{name: grant-{ns}, namespace: {grant_ns}}}
spec:
  from: [{from}]
  to: [{to}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: route, namespace: {ns}}}
spec:
  parentRefs: [{{name: edge, namespace: default}}]
  hostnames: [{ns}.example]
  rules: [{{backendRefs: [{{name: reviews-v1, namespace: default, port: 9080}}]}}]
"
            )
        })
        .collect();
    write_config(
        &config_dir,
        "gateway.yaml",
        &edge_gateway_of(
            &format!(
                "  - {{name: http, port: {port}, protocol: HTTP, allowedRoutes: {{namespaces: {{from: All}}}}}}\n"
            ),
            &objects,
        ),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    await_status(addr, "right.example", 200, &envoy);
    for (ns, _, from, to) in &cases {
        let host = format!("{ns}.example");
        let (status, body) = support::http_get(addr, &host, "/", &[]).expect("a request");
        if *ns == "right" {
            assert_eq!((status, body.as_str()), (200, "reviews-v1"), "{host}");
        } else {
            assert_eq!(
                status, 500,
                "{host}: a grant from {from} to {to} grants nothing"
            );
        }
    }
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}
