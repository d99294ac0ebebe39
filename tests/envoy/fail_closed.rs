//! Real Envoy, fed by meshflow, never carries traffic more openly than the config asks: a
//! DestinationRule asking for TLS the proxy cannot be given (SIMPLE with a credentialName
//! whose Secret is not in the client's namespace) leaves its cluster with no endpoints (Envoy answers 503, and the plaintext backend sees no request) instead of sending
//! plaintext; a route whose match condition meshflow does not read is left out instead of
//! matching every request; and the debug port names each such field. Envoy accepts every update.

use crate::support;

use std::net::SocketAddr;

use support::reviews::{count, Client};
use support::{debug_json, free_port, only, require_envoy, write_config, SidecarScene};

fn config_errors(debug: SocketAddr) -> serde_json::Value {
    debug_json(debug, "/debug/config_errors")
}

/// The dataflow's errors on the debug port (object and message) that contain `needle`.
fn errors_with(debug: SocketAddr, needle: &str) -> Vec<String> {
    config_errors(debug)["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e.to_string())
        .filter(|l| l.contains(needle))
        .collect()
}

/// The analysis lines of the debug port that contain `needle`.
fn analysis_with(debug: SocketAddr, needle: &str) -> Vec<String> {
    config_errors(debug)["analysis"]
        .as_array()
        .expect("analysis")
        .iter()
        .filter_map(|l| l.as_str())
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

#[test]
fn unsupported_tls_and_match_conditions_fail_closed_in_envoy() {
    let envoy_bin = require_envoy!();
    let debug = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let debug_arg = debug.to_string();
    let scene = SidecarScene::start(
        &envoy_bin,
        "envoy-fail-closed",
        47,
        &["--debug-addr", &debug_arg],
        |_| {},
    );
    let (envoy, reviews, v1, config, port) = (
        &scene.envoy,
        &scene.reviews,
        &scene.v1,
        &scene.config,
        scene.port,
    );
    let client = Client::new(envoy, SocketAddr::from(([127, 0, 0, 1], port)), "reviews");
    let (rv1, rv2) = ("reviews-v1", "reviews-v2");

    // 1. A VirtualService whose first route carries a match condition meshflow does not
    //    read (`sourceLabel`, misspelt): that route is left out, so /reviews goes by the
    //    second route to v1 — never to v2 for every caller.
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews-fc, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - match:\n    - uri: {prefix: /reviews}\n      sourceLabel: {app: someone-else}\n    route:\n    - destination: {host: reviews, subset: v2}\n  - route:\n    - destination: {host: reviews, subset: v1}\n";
    write_config(config, "vs.yaml", vs);
    let counts = client.converge(
        "/reviews → v1 only",
        "/reviews/1",
        &[],
        |c| only(c, rv1),
        20,
    );
    assert_eq!(count(&counts, rv1), 20, "{counts:?}");
    assert_eq!(count(&counts, rv2), 0, "{counts:?}");
    let said = analysis_with(debug, "spec.http[0].match[0].sourceLabel");
    assert_eq!(said.len(), 1, "{:#}", config_errors(debug));
    assert!(
        said[0].contains("error: VirtualService default/reviews-fc")
            && said[0].contains("spec.http[0] is not generated"),
        "{said:?}"
    );

    // 2. The DestinationRule asks for TLS from a Secret the client's namespace does not
    //    have: every request is refused by Envoy (503), none reaches the plaintext backend.
    let served_before = v1.requests_served();
    reviews.write_destination_rule_with_policy(
        &["v1", "v2"],
        "  trafficPolicy:\n    tls: {mode: SIMPLE, credentialName: reviews-client}\n",
    );
    let counts = client.converge(
        "TLS asked, not generated → 503",
        "/reviews/1",
        &[],
        |c| only(c, "status 503"),
        20,
    );
    assert_eq!(count(&counts, "status 503"), 20, "{counts:?}");
    // Requests of the batches before convergence may have reached v1; none after.
    let served = v1.requests_served();
    let again = client.tally(20, "/reviews/1", &[]);
    assert_eq!(count(&again, "status 503"), 20, "{again:?}");
    assert_eq!(
        v1.requests_served(),
        served,
        "no plaintext request after the rule"
    );
    assert!(served >= served_before);
    let said = errors_with(debug, "spec.trafficPolicy.tls.credentialName");
    assert_eq!(said.len(), 1, "{:#}", config_errors(debug));
    assert!(
        said[0].contains("Secret default/reviews-client does not exist"),
        "{said:?}"
    );
    let dump = envoy.config_dump().to_string();
    assert!(
        dump.contains("fail_closed"),
        "the cluster's metadata says why it has no endpoints"
    );

    // 3. Back to DISABLE: traffic flows again, and nothing is reported.
    reviews.write_destination_rule_with_policy(
        &["v1", "v2"],
        "  trafficPolicy:\n    tls: {mode: DISABLE}\n",
    );
    let counts = client.converge("DISABLE → v1", "/reviews/1", &[], |c| only(c, rv1), 20);
    assert_eq!(count(&counts, rv1), 20, "{counts:?}");
    assert!(errors_with(debug, "spec.trafficPolicy.tls").is_empty());
    assert!(analysis_with(debug, "spec.trafficPolicy.tls").is_empty());

    // 4. The match conditions meshflow translates route in Envoy as written: method, query
    //    parameter, case-insensitive prefix with a header that must be absent.
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews-fc, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - match: [{method: {exact: POST}}]\n    route: [{destination: {host: reviews, subset: v2}}]\n  - match: [{queryParams: {v: {exact: '2'}}}]\n    route: [{destination: {host: reviews, subset: v2}}]\n  - match: [{uri: {prefix: /REVIEWS}, ignoreUriCase: true, withoutHeaders: {x-canary: {}}}]\n    route: [{destination: {host: reviews, subset: v1}}]\n";
    write_config(config, "vs.yaml", vs);
    let listener = SocketAddr::from(([127, 0, 0, 1], port));
    let post = || {
        support::http_request(listener, "POST", "reviews", "/x", &[]).map(|r| (r.status, r.text()))
    };
    support::converge(
        "POST → v2",
        support::CONVERGE_TIMEOUT,
        || support::tally(10, post),
        |c| only(c, rv2),
        || envoy.summary(),
    );
    let counts = client.tally(10, "/x?v=2", &[]);
    assert_eq!(count(&counts, rv2), 10, "query v=2: {counts:?}");
    let counts = client.tally(10, "/Reviews/1", &[]);
    assert_eq!(count(&counts, rv1), 10, "ignoreUriCase: {counts:?}");
    let counts = client.tally(10, "/reviews/1", &[("x-canary", "1")]);
    assert_eq!(
        count(&counts, "status 404"),
        10,
        "withoutHeaders: {counts:?}"
    );
    assert!(
        config_errors(debug)["analysis"]
            .as_array()
            .is_some_and(|a| a.iter().all(|l| !l.to_string().contains("reviews-fc"))),
        "every field of the VirtualService is translated: {:#}",
        config_errors(debug)
    );
    assert_eq!(
        envoy.rejected_updates(),
        0,
        "Envoy accepted every update: {:?}",
        envoy.rejected_update_stats()
    );
}
