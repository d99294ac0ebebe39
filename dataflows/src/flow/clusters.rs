//! Outbound clusters. In: the hosts each scope sees, DestinationRules, the services in effect.
//! Out: each scope's clusters (its fixed ones too) with their provenance, and the EDS clusters
//! that [`super::endpoints::assignments`] must give a load assignment.
//!
//! Clusters are built once per group, (host, DestinationRule in effect, for gRPC or Envoy),
//! not per scope: scopes that agree on a host's rule share the work.

use super::mesh::Mesh;
use super::visibility::Visible;
use super::{Built, Coll};
use crate::assemble;
use crate::model::*;
use crate::rules;
use crate::translate::cluster;

/// (host, (DestinationRule in effect, for proxyless gRPC)): what a cluster's body depends on.
type Group = (Hostname, (Option<ConfigKey>, bool));
/// A cluster, the service port it is for, and the subset labels of an EDS cluster.
type ClusterRow = (Resource, u16, Option<Labels>);

/// The EDS clusters that need a ClusterLoadAssignment.
pub(super) struct Eds<'s> {
    /// `((host, service port), (cluster name, subset labels))`, once per definition.
    pub defs: Coll<'s, ((Hostname, u16), (String, Labels))>,
    /// `((cluster name, subset labels), scope)`: which scopes hold each.
    pub per_scope: Coll<'s, ((String, Labels), ScopeKey)>,
}

pub(super) struct Clusters<'s> {
    pub built: Built<'s, ScopeKey>,
    pub eds: Eds<'s>,
    /// `((scope, host), hash keys)`: where the rule a scope has in effect for a host hashes
    /// (only those), for the routes to its clusters.
    pub hashing: Coll<'s, ((ScopeKey, Hostname), HostHashing)>,
    /// Scopes holding an `ISTIO_MUTUAL` cluster: their proxies need workload secrets.
    pub mtls_scopes: Coll<'s, ScopeKey>,
}

pub(super) fn outbound<'s>(
    mesh: &Mesh<'s>,
    scopes: &Coll<'s, ScopeKey>,
    visible: &Visible<'s>,
    drs: Coll<'s, (ConfigKey, DestinationRule)>,
    services: &Coll<'s, (Hostname, Service)>,
) -> Clusters<'s> {
    let scope_groups = rule_in_effect(mesh, visible, &drs, services);
    let hashing = hashing(&scope_groups, &drs);
    let mtls_drs = drs
        .clone()
        .filter(|(_, dr)| dr.uses_istio_mutual())
        .map(|(k, _)| k)
        .distinct();
    let mtls_scopes = scope_groups
        .clone()
        .flat_map(|((_, (d, _)), s)| d.map(|k| (k, s)))
        .semijoin(mtls_drs)
        .map(|(_, s)| s)
        .distinct();
    let group_clusters = per_group(&scope_groups, drs, services, mesh);
    // One join gives each scope its clusters and, for provenance, the group they came from.
    let scope_cluster_groups = scope_groups.join_map(group_clusters.clone(), |g, s, c| {
        (s.clone(), c.clone(), g.clone())
    });
    let provenance = provenance(scope_cluster_groups.clone(), services);
    let scope_cluster_rows = scope_cluster_groups.map(|(s, c, _)| (s, c));
    let eds = Eds {
        defs: group_clusters
            .flat_map(|((h, _), (res, port, labels))| labels.map(|l| ((h, port), (res.name, l))))
            .distinct(),
        per_scope: scope_cluster_rows
            .clone()
            .flat_map(|(s, (res, _, labels))| labels.map(|l| ((res.name, l), s))),
    };
    let fixed = scopes
        .clone()
        .map(|s| ((), s))
        .join_map(mesh.clone(), |_, s, m| (s.clone(), m.connect_timeout_ms))
        .flat_map(|(s, timeout)| {
            assemble::fixed_clusters(&s, timeout)
                .into_iter()
                .map(move |r| (s.clone(), r))
        });
    let resources = fixed.concat(scope_cluster_rows.map(|(s, (res, _, _))| (s, res)));
    Clusters {
        built: Built {
            resources,
            provenance,
        },
        eds,
        hashing,
        mtls_scopes,
    }
}

/// The hash keys per (scope, host), from the rules that hash: a rule without consistent
/// hashing adds no row, so its changes reach no route.
fn hashing<'s>(
    scope_groups: &Coll<'s, (Group, ScopeKey)>,
    drs: &Coll<'s, (ConfigKey, DestinationRule)>,
) -> Coll<'s, ((ScopeKey, Hostname), HostHashing)> {
    let rule_hashing = drs
        .clone()
        .map(|(k, dr)| (k, cluster::hashing(&dr)))
        .filter(|(_, h)| !h.is_empty());
    scope_groups
        .clone()
        .flat_map(|((h, (d, _)), s)| d.map(|k| (k, (h, s))))
        .join_map(rule_hashing, |_, (h, s), hashing| {
            ((s.clone(), h.clone()), hashing.clone())
        })
}

/// `(group, scope)` for every host a scope sees: the DestinationRule in effect per
/// (scope, host), lowest `rules::dr_rank` first, or none.
fn rule_in_effect<'s>(
    mesh: &Mesh<'s>,
    visible: &Visible<'s>,
    drs: &Coll<'s, (ConfigKey, DestinationRule)>,
    services: &Coll<'s, (Hostname, Service)>,
) -> Coll<'s, (Group, ScopeKey)> {
    // Each rule with its service's namespace and the root namespace: the three places
    // Istio looks a rule up.
    let rules_placed = drs
        .clone()
        .map(|(_, dr)| (dr.host.clone(), dr))
        .join_map(services.clone(), |h, dr, svc| {
            ((), (h.clone(), dr.clone(), svc.namespace().to_string()))
        })
        .join_map(mesh.clone(), |_, (h, dr, svc_ns), m| {
            (
                h.clone(),
                (dr.clone(), svc_ns.clone(), m.root_namespace.clone()),
            )
        });
    let dr_chosen = visible
        .host_scopes()
        .join_map(rules_placed, move |h, s, (dr, svc_ns, root)| {
            rules::dr_rank(dr, s, svc_ns, root)
                .map(|r| ((s.clone(), h.clone()), (r, dr.key.clone())))
        })
        .flat_map(|x| x)
        .reduce(|_, vals, out| out.push((vals[0].0 .1.clone(), 1isize)));
    let scope_host_keyed = visible.scope_hosts.clone().map(|(s, h)| ((s, h), ()));
    scope_host_keyed
        .clone()
        .join_map(dr_chosen.clone(), |(s, h), _, k| {
            ((h.clone(), (Some(k.clone()), s.is_proxyless())), s.clone())
        })
        .concat(
            scope_host_keyed
                .antijoin(dr_chosen.map(|(k, _)| k))
                .map(|((s, h), _)| ((h, (None, s.is_proxyless())), s)),
        )
}

/// The clusters of each group some scope uses.
fn per_group<'s>(
    scope_groups: &Coll<'s, (Group, ScopeKey)>,
    drs: Coll<'s, (ConfigKey, DestinationRule)>,
    services: &Coll<'s, (Hostname, Service)>,
    mesh: &Mesh<'s>,
) -> Coll<'s, (Group, ClusterRow)> {
    let groups = scope_groups.clone().map(|(g, _)| g).distinct();
    // The mesh's connect timeout joins once per group, before the rule does.
    let groups_svc = groups
        .join_map(services.clone(), |h, d, svc| {
            ((), (d.clone(), (h.clone(), svc.clone())))
        })
        .join_map(mesh.clone(), |_, (d, (h, svc)), m| {
            (d.clone(), (h.clone(), svc.clone(), ClusterDefaults::of(m)))
        });
    groups_svc
        .clone()
        .flat_map(|((d, grpc), (h, svc, timeout))| d.map(|k| (k, (h, svc, grpc, timeout))))
        .join_map(drs, |k, (h, svc, grpc, timeout), dr| {
            (
                (h.clone(), (Some(k.clone()), *grpc)),
                cluster::outbound_all_for(svc, Some(dr), *grpc, timeout),
            )
        })
        .concat(groups_svc.filter(|((d, _), _)| d.is_none()).map(
            |((_, grpc), (h, svc, timeout))| {
                (
                    (h, (None, grpc)),
                    cluster::outbound_all_for(&svc, None, grpc, &timeout),
                )
            },
        ))
        .flat_map(|(g, list)| list.into_iter().map(move |c| (g.clone(), c)))
}

/// A cluster (and its assignment) comes from the service and the DestinationRule in effect.
fn provenance<'s>(
    scope_cluster_groups: Coll<'s, (ScopeKey, ClusterRow, Group)>,
    services: &Coll<'s, (Hostname, Service)>,
) -> Coll<'s, ProvenanceRow> {
    let svc_origin = services.clone().map(|(h, svc)| (h, svc.origin));
    let cluster_keys = scope_cluster_groups
        .map(|(s, (res, _, labels), (h, (d, _)))| (h, (s, res.name, labels.is_some(), d)));
    cluster_keys
        .clone()
        .join_map(svc_origin, |_, row, o| (row.clone(), o.clone()))
        .concat(cluster_keys.flat_map(|(_, row)| {
            let dr = row.3.clone();
            dr.map(|d| (row, d))
        }))
        .flat_map(|((s, name, eds, _), input)| {
            let mut rows = vec![(
                (
                    Holder::Scope(s.clone()),
                    ResourceType::Cluster,
                    name.clone(),
                ),
                input.clone(),
            )];
            if eds {
                rows.push(((Holder::Scope(s), ResourceType::Endpoint, name), input));
            }
            rows
        })
}
