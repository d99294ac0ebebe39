//! A router scope's resources: the listeners, routes and secrets of the Gateways selecting it.

use super::view::View;
use super::with_idle_timeout;
use crate::assemble;
use crate::model::*;
use crate::rules;

/// A router scope's listeners, routes and secrets, from the Gateways selecting it and the
/// Secrets of its namespace.
pub(super) fn router(
    v: &View,
    s: &ScopeKey,
    namespace: &str,
    gateways: &[ConfigKey],
    clusters: &[String],
) -> Vec<Resource> {
    let gws: Vec<&Gateway> = gateways
        .iter()
        .filter_map(|k| v.gateways.get(k).copied())
        .collect();
    let resolved: Vec<(ConfigKey, ResolvedVs)> = v
        .vss
        .iter()
        .flat_map(|vs| {
            vs.gateways
                .iter()
                .filter_map(|g| rules::gateway_ref(g))
                .filter(|g| gateways.contains(g))
                .map(|g| (g, v.resolve(vs)))
                .collect::<Vec<_>>()
        })
        .collect();
    let pairs: Vec<(&ConfigKey, &ResolvedVs)> = resolved.iter().map(|(g, r)| (g, r)).collect();
    let secrets: Vec<&TlsSecret> = v
        .secrets
        .iter()
        .copied()
        .filter(|s| s.key.namespace == namespace)
        .collect();
    // AUTO_PASSTHROUGH serves no service outside the mesh.
    let clusters: Vec<String> = clusters
        .iter()
        .filter(|c| c.starts_with("outbound|"))
        .filter(|c| {
            v.service(namespace, crate::translate::outbound_cluster_host(c))
                .is_some_and(|svc| !svc.mesh_external)
        })
        .cloned()
        .collect();
    let res = assemble::router_resources(
        s.source(),
        namespace,
        &gws,
        &pairs,
        &secrets,
        &v.hashing(s),
        &v.tcp_idle(s),
        &clusters,
        s.gateway_ports(),
    )
    .resources
    .into_iter()
    .map(|(r, _)| r)
    .collect();
    with_idle_timeout(s, res)
}
