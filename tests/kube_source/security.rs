//! Security policies (security.istio.io) read from the cluster hold exactly as those read
//! from files: an AuthorizationPolicy created through the API reaches the sidecars it
//! selects as Envoy RBAC (its rules named as Istio names them) and is reconciled; a CUSTOM
//! one naming a provider the mesh config lacks denies what its rules match and says so on
//! its status and in the dataflow's errors; deleting them opens the sidecars again.
//!
//! Against the fake API server (`support::fake_kube`: the real `kube` client, the API
//! server's list/watch wire format); the sidecar is a Delta xDS client.

use crate::status::{await_status, reconciled};
use crate::support::xds_client::{node, DeltaClient, LDS};
use crate::{pod, service, start};
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;

/// What a virtualInbound under an AuthorizationPolicy carries (on its chains that proxy
/// bytes): the network RBAC filter.
const RBAC_FILTER: &[u8] = b"envoy.filters.network.rbac";

/// The `virtualInbound` listener the client was last served (empty before).
fn virtual_inbound(resources: &HashMap<String, Vec<u8>>) -> &[u8] {
    resources
        .get("virtualInbound")
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Receives until `accept` holds for the listeners held, or the convergence timeout.
async fn await_listeners(
    c: &mut DeltaClient,
    held: &mut HashMap<String, Vec<u8>>,
    what: &str,
    accept: impl Fn(&HashMap<String, Vec<u8>>) -> bool,
) {
    let deadline = tokio::time::Instant::now() + crate::support::CONVERGE_TIMEOUT;
    while !accept(held) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        assert!(!left.is_zero(), "{what}: listeners held {:?}", held.keys());
        let Some(resp) = c.recv(left.min(Duration::from_secs(1))).await else {
            continue;
        };
        for r in resp.resources {
            held.insert(r.name, r.resource.map(|a| a.value).unwrap_or_default());
        }
        for n in resp.removed_resources {
            held.remove(&n);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorization_policy_from_the_cluster_reaches_its_sidecars() {
    let cluster = start(
        "kube-security",
        |fake| {
            fake.apply(service("ratings", "default", 9080));
            fake.apply(pod("ratings-1", "10.1.0.7", "ratings"));
            fake.apply(crate::endpoint_slice("ratings", "default", &["10.1.0.7"]));
        },
        &["--write-status"],
    );
    let id = "sidecar~10.1.0.7~ratings-1.default~default.svc.cluster.local";
    let mut c = DeltaClient::connect(
        cluster.meshflow.xds_addr(),
        node(id, "default", &[("app", "ratings")]),
    )
    .await;
    c.subscribe(LDS, &[], HashMap::new()).await;
    let mut held = HashMap::new();
    await_listeners(&mut c, &mut held, "an open virtualInbound", |h| {
        !virtual_inbound(h).is_empty() && !contains(virtual_inbound(h), RBAC_FILTER)
    })
    .await;

    // A DENY policy is translated: its rule, by Istio's name, in the sidecar's RBAC; the
    // policy is reconciled as written.
    cluster.fake.apply(json!({
        "apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
        "metadata": {"name": "deny-ratings", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "ratings"}}, "action": "DENY",
                 "rules": [{"to": [{"operation": {"methods": ["DELETE"]}}]}]},
    }));
    await_listeners(
        &mut c,
        &mut held,
        "the policy's rule in virtualInbound",
        |h| {
            contains(
                virtual_inbound(h),
                b"ns[default]-policy[deny-ratings]-rule[0]",
            )
        },
    )
    .await;
    await_status(
        &cluster.fake,
        "AuthorizationPolicy",
        "deny-ratings",
        "the translated policy is reconciled",
        |s| reconciled(s) == "True",
    );

    // CUSTOM naming a provider the mesh config lacks: what its rules match is denied (its
    // RBAC DENY first in the chains), MF0021 names the field.
    cluster.fake.apply(json!({
        "apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
        "metadata": {"name": "ext-ratings", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "ratings"}}, "action": "CUSTOM",
                 "provider": {"name": "ext"}, "rules": [{}]},
    }));
    await_listeners(&mut c, &mut held, "the CUSTOM rules deny", |h| {
        contains(virtual_inbound(h), b"-deny-due-to-bad-CUSTOM-action")
    })
    .await;
    cluster.await_config_errors("MF0021 names the policy", |errors| {
        errors
            .iter()
            .any(|e| e.contains("ext-ratings") && e.contains("spec.provider.name"))
    });
    // In effect as written (the deny is what Istio does too), with the error on its status.
    let status = await_status(
        &cluster.fake,
        "AuthorizationPolicy",
        "ext-ratings",
        "the policy's status names MF0021",
        |s| s["validationMessages"].to_string().contains("MF0021"),
    );
    assert_eq!(reconciled(&status), "True", "{status:#}");
    assert!(
        status["validationMessages"]
            .to_string()
            .contains("spec.provider.name"),
        "{status:#}"
    );

    for name in ["deny-ratings", "ext-ratings"] {
        cluster.fake.delete("AuthorizationPolicy", "default", name);
    }
    await_listeners(&mut c, &mut held, "open again once deleted", |h| {
        !virtual_inbound(h).is_empty() && !contains(virtual_inbound(h), RBAC_FILTER)
    })
    .await;
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
