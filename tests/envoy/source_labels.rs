//! Real Envoy, fed by meshflow, routes by a VirtualService match's `sourceLabels`: the
//! sidecar of pod `client-abc` (labelled `app: client`) takes the route whose selector its
//! labels satisfy, and the next route when the selector names a label it does not carry
//! (every label of it, not some) — so a route meant for other clients never catches its
//! requests. Envoy accepts every update.

use crate::support;

use support::reviews::{count, Client};
use support::{only, require_envoy, write_config, SidecarScene};

fn split(selector: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: reviews-by-source, namespace: default}}\nspec:\n  hosts: [reviews]\n  http:\n  - match:\n    - uri: {{prefix: /reviews}}\n      sourceLabels: {selector}\n    route:\n    - destination: {{host: reviews, subset: v2}}\n  - route:\n    - destination: {{host: reviews, subset: v1}}\n"
    )
}

#[test]
fn source_labels_pick_the_route_of_the_clients_labels_in_envoy() {
    let envoy_bin = require_envoy!();
    let scene = SidecarScene::start(&envoy_bin, "envoy-source-labels", 71, &[], |_| {});
    let client = Client::new(&scene.envoy, scene.listener(), "reviews");
    let (rv1, rv2) = ("reviews-v1", "reviews-v2");

    // The selector names the client's own label: its requests take the first route.
    write_config(&scene.config, "vs.yaml", &split("{app: client}"));
    let counts = client.converge(
        "sourceLabels app=client → v2",
        "/reviews/1",
        &[],
        |c| only(c, rv2),
        20,
    );
    assert_eq!(count(&counts, rv2), 20, "{counts:?}");

    // Another client's label: the route is not this proxy's, the next one takes over.
    write_config(&scene.config, "vs.yaml", &split("{app: productpage}"));
    let counts = client.converge(
        "sourceLabels app=productpage → v1",
        "/reviews/1",
        &[],
        |c| only(c, rv1),
        20,
    );
    assert_eq!(count(&counts, rv1), 20, "{counts:?}");

    // Back to the client's label, then one label more it does not carry.
    write_config(&scene.config, "vs.yaml", &split("{app: client}"));
    client.converge(
        "sourceLabels app=client again → v2",
        "/reviews/1",
        &[],
        |c| only(c, rv2),
        10,
    );
    write_config(
        &scene.config,
        "vs.yaml",
        &split("{app: client, version: v9}"),
    );
    let counts = client.converge(
        "sourceLabels app=client,version=v9 → v1",
        "/reviews/1",
        &[],
        |c| only(c, rv1),
        20,
    );
    assert_eq!(count(&counts, rv1), 20, "{counts:?}");
    assert_eq!(count(&counts, rv2), 0, "{counts:?}");
    assert_eq!(
        scene.envoy.rejected_updates(),
        0,
        "Envoy rejected an update"
    );
}
