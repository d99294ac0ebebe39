//! Real Envoy carries out a VirtualService's route actions as Istio's would: fault injection
//! (an abort answers its code, a delay takes its time), redirects (`derivePort:
//! FROM_REQUEST_PORT` writes the port the request came to), direct responses, URI and
//! authority rewrites (from `rewrite.authority` and from a `host`/`:authority` header edit),
//! request and response header edits, and mirroring (the mirror receives a
//! copy while the answer comes from the route), and a CORS policy (Envoy answers the
//! preflight of an allowed origin itself and marks its responses; other origins get no CORS
//! headers). The backends echo the path, host and `x-`
//! headers they receive, so each edit is seen where it lands. Envoy accepts every update.

use crate::support;

use std::time::{Duration, Instant};

use support::{
    converge, http_request, require_envoy, write_config, SidecarScene, CONVERGE_TIMEOUT,
};

const VS: &str = "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: actions, namespace: default}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /abort}}]
    fault: {abort: {httpStatus: 418, percentage: {value: 100}}}
    route: [{destination: {host: reviews, subset: v1}}]
  - match: [{uri: {prefix: /grpc-abort}}]
    fault: {abort: {grpcStatus: UNAVAILABLE, percentage: {value: 100}}}
    route: [{destination: {host: reviews, subset: v1}}]
  - match: [{uri: {prefix: /delay}}]
    fault: {delay: {fixedDelay: 400ms, percentage: {value: 100}}}
    route: [{destination: {host: reviews, subset: v1}}]
  - match: [{uri: {exact: /old}}]
    redirect: {uri: /new, authority: example.com, redirectCode: 302}
  - match: [{uri: {exact: /older}}]
    redirect: {uri: /new, derivePort: FROM_REQUEST_PORT}
  - match: [{uri: {exact: /oldest}}]
    redirect: {uri: /new, derivePort: FROM_PROTOCOL_DEFAULT}
  - match: [{uri: {exact: /health}}]
    directResponse: {status: 200, body: {string: meshflow says ok}}
  - match: [{uri: {prefix: /api/}}]
    rewrite: {uri: /v2/, authority: internal.reviews}
    headers:
      request: {set: {x-team: blue}, remove: [x-secret]}
      response: {set: {x-served-by: meshflow}}
    route: [{destination: {host: reviews, subset: v1}}]
  - match: [{uri: {prefix: /mirrored}}]
    mirror: {host: reviews, subset: v2}
    route: [{destination: {host: reviews, subset: v1}}]
  - match: [{uri: {prefix: /one-destination}}]
    route:
    - destination: {host: reviews, subset: v1}
      headers: {request: {set: {x-dest: v1}}, response: {set: {x-from: v1}}}
  - match: [{uri: {prefix: /two-destinations}}]
    route:
    - destination: {host: reviews, subset: v1}
      weight: 50
      headers: {request: {set: {x-dest: v1}}, response: {set: {x-from: v1}}}
    - destination: {host: reviews, subset: v2}
      weight: 50
      headers: {request: {set: {x-dest: v2}}, response: {set: {x-from: v2}, remove: [x-echo-path]}}
  - match: [{uri: {prefix: /host-header}}]
    headers: {request: {set: {host: via-header.reviews}}}
    route: [{destination: {host: reviews, subset: v1}}]
  - match: [{uri: {prefix: /two-authorities}}]
    route:
    - destination: {host: reviews, subset: v1}
      weight: 50
    - destination: {host: reviews, subset: v2}
      weight: 50
      headers: {request: {add: {\":authority\": v2.reviews}}}
  - match: [{uri: {prefix: /cors}}]
    corsPolicy:
      allowOrigins: [{exact: \"https://app.example.com\"}, {prefix: \"https://admin.\"}]
      allowMethods: [GET, POST]
      allowHeaders: [x-team]
      exposeHeaders: [x-served-by]
      maxAge: 60s
      allowCredentials: true
      unmatchedPreflights: IGNORE
    route: [{destination: {host: reviews, subset: v1}}]
";

#[test]
fn route_actions_take_effect_in_envoy() {
    let envoy_bin = require_envoy!();
    let scene = SidecarScene::start(&envoy_bin, "envoy-route-actions", 48, &[], |config| {
        write_config(config, "actions.yaml", VS)
    });
    let (envoy, v1, v2, listener) = (&scene.envoy, &scene.v1, &scene.v2, scene.listener());
    let get = |path: &str, headers: &[(&str, &str)]| {
        http_request(listener, "GET", "reviews", path, headers)
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    };

    // Abort: every request answered 418 by Envoy, none reaches v1.
    converge(
        "the routes are in effect",
        CONVERGE_TIMEOUT,
        || get("/abort", &[]).status,
        |s| *s == 418,
        || envoy.summary(),
    );
    let served = v1.requests_served();
    for _ in 0..5 {
        assert_eq!(get("/abort", &[]).status, 418);
    }
    assert_eq!(
        v1.requests_served(),
        served,
        "aborted requests never leave Envoy"
    );

    // A gRPC abort: Envoy answers a gRPC request with the gRPC status (14 is UNAVAILABLE)
    // itself; a plain HTTP request is answered by Envoy too.
    let r = get("/grpc-abort", &[("content-type", "application/grpc")]);
    assert_eq!(r.header("grpc-status"), Some("14"), "{:?}", r.headers);
    assert_eq!(get("/grpc-abort", &[]).text(), "fault filter abort");
    assert_eq!(
        v1.requests_served(),
        served,
        "aborted requests never leave Envoy"
    );

    // Delay: the answer comes from v1, no sooner than the delay.
    let start = Instant::now();
    let r = get("/delay", &[]);
    let took = start.elapsed();
    assert_eq!((r.status, r.text().as_str()), (200, "reviews-v1"));
    // Envoy schedules the delay from its event loop's cached clock, which under load may be
    // a few milliseconds behind: allow that much, far above an undelayed answer (~1 ms).
    assert!(took >= Duration::from_millis(350), "took {took:?}");

    // Redirect and direct response: answered by Envoy.
    let r = get("/old", &[]);
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("http://example.com/new"));
    // derivePort: FROM_REQUEST_PORT carries the port the request came to (the route
    // configuration's); FROM_PROTOCOL_DEFAULT leaves it to the scheme.
    let r = get("/older", &[]);
    assert_eq!(r.status, 301);
    let location = format!("http://reviews:{}/new", scene.port);
    assert_eq!(r.header("location"), Some(location.as_str()));
    let r = get("/oldest", &[]);
    assert_eq!(r.header("location"), Some("http://reviews/new"));
    let r = get("/health", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "meshflow says ok"));

    // Rewrite and header edits: what v1 received, and what the client got back.
    let r = get(
        "/api/items?id=1",
        &[("x-secret", "s3cr3t"), ("x-team", "red")],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-echo-path"), Some("/v2/items?id=1"));
    assert_eq!(r.header("x-echo-host"), Some("internal.reviews"));
    assert_eq!(r.header("x-echo-x-team"), Some("blue"), "set overwrites");
    assert_eq!(
        r.header("x-echo-x-secret"),
        None,
        "removed before the upstream"
    );
    assert_eq!(r.header("x-served-by"), Some("meshflow"));

    // Mirror: v1 answers, v2 receives a copy of each request.
    let mirrored_before = v2.requests_served();
    for _ in 0..5 {
        let r = get("/mirrored", &[]);
        assert_eq!((r.status, r.text().as_str()), (200, "reviews-v1"));
    }
    converge(
        "v2 received the mirrored copies",
        CONVERGE_TIMEOUT,
        || v2.requests_served() - mirrored_before,
        |n| *n >= 5,
        || envoy.summary(),
    );
    // Per-destination header edits: on the route for one destination, on each weighted
    // cluster for several, so each edit follows the request to its own destination.
    let r = get("/one-destination", &[]);
    assert_eq!(r.text(), "reviews-v1");
    assert_eq!(r.header("x-echo-x-dest"), Some("v1"));
    assert_eq!(r.header("x-from"), Some("v1"));
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let r = get("/two-destinations", &[]);
        let version = r.text().trim_start_matches("reviews-").to_string();
        assert_eq!(
            r.header("x-echo-x-dest"),
            Some(version.as_str()),
            "request edit"
        );
        assert_eq!(r.header("x-from"), Some(version.as_str()), "response edit");
        assert_eq!(
            r.header("x-echo-path").is_none(),
            version == "v2",
            "v2's response loses x-echo-path, v1's keeps it"
        );
        seen.insert(version);
    }
    assert_eq!(seen.len(), 2, "both destinations answered: {seen:?}");

    // A `host` / `:authority` header edit is the host rewrite Envoy performs (it edits no
    // such header itself): on the route, and on the one weighted destination that asks.
    let r = get("/host-header", &[]);
    assert_eq!(r.text(), "reviews-v1");
    assert_eq!(r.header("x-echo-host"), Some("via-header.reviews"));
    let mut hosts = std::collections::BTreeMap::new();
    for _ in 0..40 {
        let r = get("/two-authorities", &[]);
        let host = r.header("x-echo-host").unwrap_or_default().to_string();
        hosts.insert(r.text(), host);
    }
    assert_eq!(
        hosts.get("reviews-v2").map(String::as_str),
        Some("v2.reviews"),
        "{hosts:?}"
    );
    assert_eq!(
        hosts.get("reviews-v1").map(String::as_str),
        Some("reviews"),
        "{hosts:?}"
    );

    // CORS: the preflight of an allowed origin is answered by Envoy with the policy.
    let preflight = |origin: &str| {
        http_request(
            listener,
            "OPTIONS",
            "reviews",
            "/cors/items",
            &[
                ("origin", origin),
                ("access-control-request-method", "POST"),
            ],
        )
        .unwrap_or_else(|e| panic!("OPTIONS /cors/items: {e}"))
    };
    let served = v1.requests_served();
    let r = preflight("https://app.example.com");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    assert_eq!(r.header("access-control-allow-methods"), Some("GET,POST"));
    assert_eq!(r.header("access-control-allow-headers"), Some("x-team"));
    assert_eq!(r.header("access-control-max-age"), Some("60"));
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    let r = preflight("https://admin.example.com");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://admin.example.com"),
        "a prefix match"
    );
    assert_eq!(v1.requests_served(), served, "preflights never leave Envoy");
    // An origin that does not match gets no CORS headers (IGNORE: answered, not forwarded).
    let r = preflight("https://evil.example.com");
    assert_eq!(r.header("access-control-allow-origin"), None);
    assert_eq!(
        v1.requests_served(),
        served,
        "IGNORE keeps it from the upstream"
    );
    // The actual request: the allowed origin is marked, the header exposed; others are not.
    let r = get("/cors/items", &[("origin", "https://app.example.com")]);
    assert_eq!((r.status, r.text().as_str()), (200, "reviews-v1"));
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    assert_eq!(
        r.header("access-control-expose-headers"),
        Some("x-served-by")
    );
    let r = get("/cors/items", &[("origin", "https://evil.example.com")]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), None);
    // Routes without a policy get no CORS headers at all.
    let r = get("/mirrored", &[("origin", "https://app.example.com")]);
    assert_eq!(r.header("access-control-allow-origin"), None);

    assert_eq!(
        envoy.rejected_updates(),
        0,
        "Envoy accepted every update: {:?}",
        envoy.rejected_update_stats()
    );
}
