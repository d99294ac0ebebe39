//! Real Envoy carries out a VirtualService's route actions as Istio's would: fault injection
//! (an abort answers its code, a delay takes its time), redirects, direct responses, URI and
//! authority rewrites, request and response header edits, and mirroring (the mirror receives a
//! copy while the answer comes from the route). The backends echo the path, host and `x-`
//! headers they receive, so each edit is seen where it lands. Envoy accepts every update.

mod support;

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
  - match: [{uri: {prefix: /delay}}]
    fault: {delay: {fixedDelay: 400ms, percentage: {value: 100}}}
    route: [{destination: {host: reviews, subset: v1}}]
  - match: [{uri: {exact: /old}}]
    redirect: {uri: /new, authority: example.com, redirectCode: 302}
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
    assert_eq!(
        envoy.rejected_updates(),
        0,
        "Envoy accepted every update: {:?}",
        envoy.rejected_update_stats()
    );
}
