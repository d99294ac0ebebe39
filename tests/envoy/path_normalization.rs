//! The mesh config's `pathNormalization` in real Envoy: under `MERGE_SLASHES` a client
//! sidecar's connection manager merges `//a//b` into `/a/b` before routing, so the route
//! matching `/a/b` exactly takes it; back to `BASE` (the mesh config edited while Envoy
//! runs), the same request falls through to the default route. Envoy accepts the listeners
//! under every value, `NONE` and `DECODE_AND_MERGE_SLASHES` included. Loopback only.

use crate::support;

use support::reviews::Client;
use support::{converge, require_envoy, write_config, SidecarScene, TestDir, CONVERGE_TIMEOUT};

const NET: u8 = 117;

fn mesh(normalization: &str) -> String {
    format!("enableAutoMtls: false\npathNormalization:\n  normalization: {normalization}\n")
}

#[test]
fn the_mesh_path_normalization_changes_what_routes_see() {
    let envoy_bin = require_envoy!();
    let mesh_dir = TestDir::new("envoy-path-normalization-mesh");
    let mesh_file = mesh_dir.path().join("mesh");
    write_config(mesh_dir.path(), "mesh", &mesh("MERGE_SLASHES"));
    let scene = SidecarScene::start(
        &envoy_bin,
        "envoy-path-normalization",
        NET,
        &["--mesh-config", mesh_file.to_str().expect("a UTF-8 path")],
        |config| {
            write_config(
                config,
                "zz-vs.yaml",
                "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - match:\n    - uri: {exact: /a/b}\n    route:\n    - destination: {host: reviews, subset: v2}\n  - route:\n    - destination: {host: reviews, subset: v1}\n",
            );
        },
    );
    let client = Client::new(&scene.envoy, scene.listener(), "reviews");
    let only = |version: &'static str| {
        move |c: &std::collections::HashMap<String, usize>| {
            c.len() == 1 && c.contains_key(&format!("reviews-{version}"))
        }
    };
    client.converge(
        "MERGE_SLASHES: //a//b is /a/b",
        "//a//b",
        &[],
        only("v2"),
        5,
    );
    client.converge("/a/b itself", "/a/b", &[], only("v2"), 5);
    for value in ["NONE", "DECODE_AND_MERGE_SLASHES", "BASE"] {
        write_config(mesh_dir.path(), "mesh", &mesh(value));
        let want = if value == "DECODE_AND_MERGE_SLASHES" {
            "v2"
        } else {
            "v1"
        };
        client.converge(&format!("{value}: //a//b"), "//a//b", &[], only(want), 5);
    }
    converge(
        "no update was rejected",
        CONVERGE_TIMEOUT,
        || scene.envoy.rejected_updates(),
        |n| *n == 0,
        || scene.envoy.summary(),
    );
}
