//! VirtualService delegation in real Envoy: the root VirtualService of `reviews` hands
//! `/reviews` to a delegate owned by another namespace; the delegate's routes apply only
//! under the root's prefix, its own matches merged in; editing the delegate alone changes
//! where requests go; a delegate not exported to the root's namespace takes its routes away.

use crate::support;

use support::reviews::{count, Client};
use support::{require_envoy, SidecarScene};

const ROOT: &str = "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: default}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /reviews}}]
    delegate: {name: reviews-routes, namespace: team}
  - match: [{uri: {prefix: /health}}]
    directResponse: {status: 204}
";

/// The delegate in namespace `team`: `end-user: jason` to `jason_to`, the rest to `rest_to`;
/// a route for `/ratings`, outside the root's prefix, that must never match.
fn delegate(jason_to: &str, rest_to: &str, export_to: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: reviews-routes, namespace: team}}
spec:
  exportTo: [{export_to}]
  http:
  - match: [{{headers: {{end-user: {{exact: jason}}}}}}]
    route: [{{destination: {{host: reviews.default.svc.cluster.local, subset: {jason_to}}}}}]
  - match: [{{uri: {{prefix: /ratings}}}}]
    directResponse: {{status: 418}}
  - route: [{{destination: {{host: reviews.default.svc.cluster.local, subset: {rest_to}}}}}]
"
    )
}

#[test]
fn delegated_routes_follow_their_delegate_in_envoy() {
    let envoy_bin = require_envoy!();
    let scene = SidecarScene::start(&envoy_bin, "envoy-delegate", 55, &[], |config| {
        support::write_config(config, "root.yaml", ROOT);
        support::write_config(config, "delegate.yaml", &delegate("v2", "v1", "\"*\""));
    });
    let client = Client::new(&scene.envoy, scene.listener(), "reviews");
    let jason = [("end-user", "jason")];
    let counts = client.converge(
        "jason reaches v2 through the delegate",
        "/reviews/1",
        &jason,
        |c| count(c, "reviews-v2") == 10,
        10,
    );
    assert_eq!(count(&counts, "reviews-v2"), 10, "{counts:?}");
    let rest = client.tally(10, "/reviews/1", &[]);
    assert_eq!(count(&rest, "reviews-v1"), 10, "{rest:?}");
    // The delegate's /ratings route is outside the root's /reviews: it matches nothing, and
    // the root routes nothing else but /health.
    assert_eq!(count(&client.tally(3, "/ratings", &[]), "status 404"), 3);
    assert_eq!(count(&client.tally(3, "/health", &[]), "status 204"), 3);

    // Only the delegate changes: the root's traffic follows it.
    support::write_config(
        &scene.config,
        "delegate.yaml",
        &delegate("v1", "v2", "\"*\""),
    );
    let counts = client.converge(
        "the edited delegate sends the rest to v2",
        "/reviews/1",
        &[],
        |c| count(c, "reviews-v2") == 10,
        10,
    );
    assert_eq!(count(&counts, "reviews-v2"), 10, "{counts:?}");
    assert_eq!(
        count(&client.tally(5, "/reviews/1", &jason), "reviews-v1"),
        5
    );

    // Private to its namespace: the root in `default` no longer gets its routes.
    support::write_config(&scene.config, "delegate.yaml", &delegate("v1", "v2", "."));
    let counts = client.converge(
        "the private delegate's routes are gone",
        "/reviews/1",
        &[],
        |c| count(c, "status 404") == 10,
        10,
    );
    assert_eq!(count(&counts, "status 404"), 10, "{counts:?}");
    assert_eq!(
        scene.envoy.rejected_updates(),
        0,
        "{:?}",
        scene.envoy.rejected_update_stats()
    );
}
