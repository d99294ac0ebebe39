//! Outbound clusters. In: the hosts each scope sees, DestinationRules, the services in effect.
//! Out: each scope's clusters (its fixed ones too) with their provenance, and the EDS clusters
//! that [`super::endpoints::assignments`] must give a load assignment.
//!
//! Clusters are built once per group, (host, DestinationRule in effect, for gRPC or Envoy),
//! not per scope: scopes that agree on a host's rule share the work. The rule in effect is
//! an entry of the rules merged per namespace and host ([`consolidated`]), found through the
//! host patterns that cover each service, so a wildcard rule meets only the hosts it covers.

use super::mesh::Mesh;
use super::visibility::Visible;
use super::{Built, Coll};
use crate::assemble;
use crate::model::*;
use crate::rules::{self, DrEntry};
use crate::translate::cluster;

/// (host, (DestinationRule in effect, the kind of client, the scope's namespace)): what a
/// cluster's body depends on. The namespace is there only for a rule with a
/// `credentialName` (and not for gRPC, which fails those closed anyway): whether its
/// clusters can use the Secret depends on the client proxy's namespace.
/// `(host, (rule in effect, client, namespace of a credentialName rule's clients,
/// namespace whose service of the host it is where several define it))`.
type Group = (
    Hostname,
    (Option<ConfigKey>, Client, Option<String>, Option<String>),
);

/// Who a group's clusters are for. Gateways share the sidecars' clusters except for hosts
/// with a port whose protocol is told per connection, whose clusters differ for them
/// ([`ClusterDefaults::gateway`]): only there do they get groups of their own.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
enum Client {
    Envoy,
    Gateway,
    Grpc,
}

impl Client {
    fn of(s: &ScopeKey) -> Client {
        if s.is_proxyless() {
            Client::Grpc
        } else {
            Client::Envoy
        }
    }

    /// The mesh's cluster defaults as this client's clusters take them.
    fn defaults(self, m: &MeshSettings) -> ClusterDefaults {
        ClusterDefaults::of_client(m, self == Client::Gateway)
    }
}

/// Moves the gateways' groups of hosts whose clusters differ for them (a port told per
/// connection, a headless Service: [`Service::differs_for_gateways`]) to groups of their own
/// (`Client::Gateway`).
fn gateway_groups<'s>(
    groups: Coll<'s, (Group, ScopeKey)>,
    services: &Coll<'s, (Hostname, HostServices)>,
) -> Coll<'s, (Group, ScopeKey)> {
    let detected = services
        .clone()
        // Where any namespace's service differs: a gateway group of one that does not
        // builds the same clusters as the sidecars'.
        .filter(|(_, set)| set.all().iter().any(Service::differs_for_gateways))
        .map(|(h, _)| h)
        .distinct();
    let routers = groups
        .clone()
        .filter(|(_, s)| matches!(s, ScopeKey::Router { .. }))
        .map(|((h, d), s)| (h, (d, s)));
    let moved = routers
        .clone()
        .semijoin(detected.clone())
        .map(|(h, ((d, _, ns, p), s))| ((h, (d, Client::Gateway, ns, p)), s));
    groups
        .filter(|(_, s)| !matches!(s, ScopeKey::Router { .. }))
        .concat(routers.antijoin(detected).map(|(h, (d, s))| ((h, d), s)))
        .concat(moved)
}
/// A cluster, the service port it is for, and what an EDS cluster's assignment is built
/// from.
type ClusterRow = (Resource, u16, Option<EdsSel>);

/// The EDS clusters that need a ClusterLoadAssignment.
pub(super) struct Eds<'s> {
    /// `((host, service port), (cluster name, selection))`, once per definition.
    pub defs: Coll<'s, ((Hostname, u16), (String, EdsSel))>,
    /// `((cluster name, selection), scope)`: which scopes hold each.
    pub per_scope: Coll<'s, ((String, EdsSel), ScopeKey)>,
}

pub(super) struct Clusters<'s> {
    pub built: Built<'s, ScopeKey>,
    pub eds: Eds<'s>,
    /// `((scope, host), hash keys)`: where the rule a scope has in effect for a host hashes
    /// (only those), for the routes to its clusters.
    pub hashing: Coll<'s, ((ScopeKey, Hostname), HostHashing)>,
    /// `((scope, host), ms)`: the idle timeout of the rule a scope has in effect for a host
    /// (only those that set one), for the `tcp_proxy` of the routes to it ([`TcpTimeouts`]).
    pub tcp_idle: Coll<'s, ((ScopeKey, Hostname), TcpTimeout)>,
    /// Every DestinationRule entry with the hosts it covers, for the inbound clusters.
    pub placed: Placed<'s>,
    /// Scopes holding an `ISTIO_MUTUAL` cluster, and with auto mTLS every scope but
    /// proxyless clients': their proxies need workload secrets.
    pub mtls_scopes: Coll<'s, ScopeKey>,
    /// `(scope, SDS secret)`: what the `credentialName` clusters of each scope use (a secret
    /// may come for several rules; `distinct` it with the others of the scope).
    pub secrets: Built<'s, ScopeKey>,
    /// `credentialName`s a scope's namespace cannot serve.
    pub errors: Coll<'s, ConfigError>,
}

/// What a `credentialName` group's clusters are built from.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
enum CredItem {
    Base(Box<(Service, DestinationRule, ClusterDefaults)>),
    Secret(TlsSecret),
}

/// What a `credentialName` group builds.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
enum CredOut {
    Cluster(ClusterRow),
    Secret(Resource, Vec<ConfigKey>),
    Error(ConfigError),
}

pub(super) fn outbound<'s>(
    mesh: &Mesh<'s>,
    scopes: &Coll<'s, ScopeKey>,
    visible: &Visible<'s>,
    merged_drs: &Consolidated<'s>,
    services: &Coll<'s, (Hostname, HostServices)>,
    identified: &Coll<'s, (Hostname, HostServices)>,
    secrets: &Coll<'s, ((String, String), TlsSecret)>,
) -> Clusters<'s> {
    let placed = placed(mesh, &merged_drs.entries, services);
    let scope_groups = gateway_groups(rule_in_effect(visible, &placed), services);
    // Clusters are built from the merged rules, under their entries' keys.
    let drs = merged_drs.rules.clone();
    let hashing = hashing(&scope_groups, &drs);
    let tcp_idle = tcp_idle(&scope_groups, &drs);
    let mtls_drs = drs
        .clone()
        .filter(|(_, dr)| dr.uses_istio_mutual())
        .map(|(k, _)| k)
        .distinct();
    // With auto mTLS, every scope of proxies that take SDS certificates may name it.
    let auto_mtls_scopes = scopes
        .clone()
        .map(|s| ((), s))
        .join_map(mesh.clone(), |_, s, m| {
            (m.auto_mtls && !s.is_proxyless()).then(|| s.clone())
        })
        .flat_map(|s| s);
    let mtls_scopes = scope_groups
        .clone()
        .flat_map(|((_, (d, _, _, _)), s)| d.map(|k| (k, s)))
        .semijoin(mtls_drs)
        .map(|(_, s)| s)
        .concat(auto_mtls_scopes)
        .distinct();
    let (group_clusters, cred_out) = per_group(&scope_groups, drs, identified, mesh, secrets);
    let group_secrets = cred_out.clone().flat_map(|(g, o)| match o {
        CredOut::Secret(r, from) => Some((g, (r, from))),
        _ => None,
    });
    let errors = cred_out
        .flat_map(|(_, o)| match o {
            CredOut::Error(e) => Some(e),
            _ => None,
        })
        .distinct();
    let scope_secret_rows = scope_groups
        .clone()
        .join_map(group_secrets, |_, s, (r, from)| {
            (s.clone(), (r.clone(), from.clone()))
        });
    let secret_provenance = scope_secret_rows.clone().flat_map(|(s, (r, from))| {
        let key = (Holder::Scope(s), r.rtype, r.name);
        from.into_iter()
            .map(move |k| (key.clone(), k))
            .collect::<Vec<_>>()
    });
    let secrets = Built {
        resources: scope_secret_rows.map(|(s, (r, _))| (s, r)),
        provenance: secret_provenance,
    };
    // One join gives each scope its clusters and, for provenance, the group they came from.
    let scope_cluster_groups = scope_groups.join_map(group_clusters.clone(), |g, s, c| {
        (s.clone(), c.clone(), g.clone())
    });
    let provenance = provenance(
        scope_cluster_groups.clone(),
        services,
        &merged_drs.contributors,
    );
    let scope_cluster_rows = scope_cluster_groups.map(|(s, c, _)| (s, c));
    let is_eds = |sel: &Option<EdsSel>| sel.as_ref().is_some_and(|s| s.inline_hosts.is_none());
    let eds = Eds {
        defs: group_clusters
            .filter(move |(_, (_, _, sel))| is_eds(sel))
            .flat_map(|((h, _), (res, port, labels))| labels.map(|l| ((h, port), (res.name, l))))
            .distinct(),
        per_scope: scope_cluster_rows
            .clone()
            .filter(move |(_, (_, _, sel))| is_eds(sel))
            .flat_map(|(s, (res, _, labels))| labels.map(|l| ((res.name, l), s))),
    };
    // A DNS cluster balanced by locality is built once per (cluster, client class), for
    // the scopes of that class; every other cluster is the group's as it is.
    let dns_rows = scope_cluster_rows
        .clone()
        .flat_map(|(s, (res, _, sel))| match sel {
            Some(sel) if sel.inline_hosts.is_some() => {
                let class = sel.client_class(&s);
                Some(((res, sel, class), s))
            }
            _ => None,
        });
    let localized = dns_rows
        .clone()
        .map(|(k, _)| k)
        .distinct()
        .map(|(res, sel, class)| {
            let built = cluster::localized_dns(&res, &sel, &class);
            ((res, sel, class), built)
        });
    let dns_clusters = dns_rows.join_map(localized, |_, s, built| (s.clone(), built.clone()));
    let scope_cluster_rows = scope_cluster_rows
        .filter(|(_, (_, _, sel))| sel.as_ref().is_none_or(|s| s.inline_hosts.is_none()));
    let fixed = scopes
        .clone()
        .map(|s| ((), s))
        .join_map(mesh.clone(), |_, s, m| (s.clone(), m.connect_timeout_ms))
        .flat_map(|(s, timeout)| {
            assemble::fixed_clusters(&s, timeout)
                .into_iter()
                .map(move |r| (s.clone(), r))
        });
    let resources = fixed
        .concat(scope_cluster_rows.map(|(s, (res, _, _))| (s, res)))
        .concat(dns_clusters);
    Clusters {
        built: Built {
            resources,
            provenance,
        },
        eds,
        hashing,
        tcp_idle,
        placed,
        mtls_scopes,
        secrets,
        errors,
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
        .flat_map(|((h, (d, _, _, _)), s)| d.map(|k| (k, (h, s))))
        .join_map(rule_hashing, |_, (h, s), hashing| {
            ((s.clone(), h.clone()), hashing.clone())
        })
}

/// The rule's own `tcp.idleTimeout` and `tcp.maxConnectionDuration` per (scope, host), from
/// the rules that set one: a rule without adds no row, so its changes reach no listener.
fn tcp_idle<'s>(
    scope_groups: &Coll<'s, (Group, ScopeKey)>,
    drs: &Coll<'s, (ConfigKey, DestinationRule)>,
) -> Coll<'s, ((ScopeKey, Hostname), TcpTimeout)> {
    let rule_idle = drs
        .clone()
        .flat_map(|(k, dr)| dr.tcp_timeout().map(|t| (k, t)));
    scope_groups
        .clone()
        .flat_map(|((h, (d, _, _, _)), s)| d.map(|k| (k, (h, s))))
        .join_map(rule_idle, |_, (h, s), ms| ((s.clone(), h.clone()), *ms))
}

/// What merging the DestinationRules of a namespace for a host gives.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
enum Merged {
    Entry(DrEntry),
    Rule(Box<(ConfigKey, DestinationRule)>),
    Contributor(ConfigKey, ConfigKey),
    Warning(ConfigError),
}

/// The DestinationRules merged as Istio merges them ([`rules::consolidate_drs`]).
pub(super) struct Consolidated<'s> {
    /// Every entry of every namespace's indexes.
    pub entries: Coll<'s, DrEntry>,
    /// `(entry key, merged rule)`, once per key.
    pub rules: Coll<'s, (ConfigKey, DestinationRule)>,
    /// `(entry key, rule)` for every rule merged into an entry (provenance).
    pub contributors: Coll<'s, (ConfigKey, ConfigKey)>,
    /// What the merges set aside.
    pub warnings: Coll<'s, ConfigError>,
}

/// Merges the DestinationRules of each namespace for each host (exact or wildcard). A
/// rule's change recomputes only its own namespace and host.
pub(super) fn consolidated<'s>(drs: &Coll<'s, (ConfigKey, DestinationRule)>) -> Consolidated<'s> {
    let merged = drs
        .clone()
        .map(|(k, dr)| ((k.namespace.clone(), dr.host.clone()), dr))
        .reduce(|_, vals: &[(&DestinationRule, isize)], out| {
            let list: Vec<&DestinationRule> = vals.iter().map(|(d, _)| *d).collect();
            let mut rules = std::collections::BTreeMap::new();
            let mut contributors = std::collections::BTreeSet::new();
            for (e, dr, from) in rules::consolidate_drs(&list) {
                for k in from {
                    contributors.insert((e.key.clone(), k));
                }
                rules.entry(e.key.clone()).or_insert(dr);
                out.push((Merged::Entry(e), 1isize));
            }
            for (k, dr) in rules {
                out.push((Merged::Rule(Box::new((k, dr))), 1isize));
            }
            for (e, k) in contributors {
                out.push((Merged::Contributor(e, k), 1isize));
            }
            for w in rules::dr_merge_warnings(&list) {
                out.push((Merged::Warning(w), 1isize));
            }
        })
        .map(|(_, m)| m);
    Consolidated {
        entries: merged.clone().flat_map(|m| match m {
            Merged::Entry(e) => Some(e),
            _ => None,
        }),
        rules: merged.clone().flat_map(|m| match m {
            Merged::Rule(b) => Some(*b),
            _ => None,
        }),
        contributors: merged.clone().flat_map(|m| match m {
            Merged::Contributor(e, k) => Some((e, k)),
            _ => None,
        }),
        warnings: merged.flat_map(|m| match m {
            Merged::Warning(w) => Some(w),
            _ => None,
        }),
    }
}

/// `(host, (entry, its service's namespace, the root namespace))`: each DestinationRule
/// entry with every service host it covers — itself, `*.` and each suffix after a dot, `*`
/// — and the namespaces Istio looks a rule up in, so a wildcard rule's change reaches the
/// hosts it covers and no other. Outbound and inbound clusters choose from these.
pub(super) type Placed<'s> = Coll<'s, (Hostname, (DrEntry, String, String))>;

fn placed<'s>(
    mesh: &Mesh<'s>,
    dr_entries: &Coll<'s, DrEntry>,
    services: &Coll<'s, (Hostname, HostServices)>,
) -> Placed<'s> {
    let by_pattern = dr_entries.clone().map(|e| (e.host.clone(), e));
    services
        .clone()
        .flat_map(|(h, set)| {
            set.all()
                .iter()
                .map(|svc| (h.clone(), svc.namespace().to_string()))
                .collect::<Vec<_>>()
        })
        .flat_map(|(h, ns)| {
            rules::covering_patterns(&h)
                .into_iter()
                .map(move |p| (p, (h.clone(), ns.clone())))
        })
        .join_map(by_pattern, |_, (h, ns), e| {
            ((), (h.clone(), ns.clone(), e.clone()))
        })
        .join_map(mesh.clone(), |_, (h, ns, e), m| {
            (h.clone(), (e.clone(), ns.clone(), m.root_namespace.clone()))
        })
}

/// `(group, scope)` for every host a scope sees: the DestinationRule entry in effect per
/// (scope, host) ([`rules::dr_in_effect`]), or none.
fn rule_in_effect<'s>(
    visible: &Visible<'s>,
    host_entries: &Placed<'s>,
) -> Coll<'s, (Group, ScopeKey)> {
    // Each (scope, host) with the namespace whose service it gets, where several define it.
    let picked = super::visibility::with_picks(
        visible.scope_hosts.clone().map(|(s, h)| ((s, h), ())),
        &visible.picks,
    );
    let dr_chosen = picked
        .clone()
        .map(|((s, h), p)| (h, (s, p)))
        .join_map(host_entries.clone(), |h, (s, p), (e, svc_ns, root)| {
            (p.as_ref().is_none_or(|p| p == svc_ns)
                && rules::dr_entry_relevant(&e.namespace, s.namespace(), svc_ns, root))
            .then(|| {
                (
                    (s.clone(), h.clone()),
                    (e.clone(), svc_ns.clone(), root.clone()),
                )
            })
        })
        .flat_map(|x| x)
        .reduce(
            |(s, h), vals: &[(&(DrEntry, String, String), isize)], out| {
                let entries: Vec<&DrEntry> = vals.iter().map(|(v, _)| &v.0).collect();
                let (_, svc_ns, root) = vals[0].0;
                if let Some(e) = rules::dr_in_effect(&entries, s, h, svc_ns, root) {
                    out.push(((e.key.clone(), e.creds), 1isize));
                }
            },
        );
    picked
        .clone()
        .join_map(dr_chosen.clone(), |(s, h), p, (k, creds)| {
            let client = Client::of(s);
            let ns = (*creds && client != Client::Grpc).then(|| s.namespace().to_string());
            (
                (h.clone(), (Some(k.clone()), client, ns, p.clone())),
                s.clone(),
            )
        })
        .concat(
            picked
                .antijoin(dr_chosen.map(|(k, _)| k))
                .map(|((s, h), p)| ((h, (None, Client::of(&s), None, p)), s)),
        )
}

/// The clusters of each group some scope uses; and what the groups of a `credentialName`
/// rule build (their clusters too, the SDS secrets and errors), from the Secrets of the
/// group's namespace that the rule names. `services` carry their endpoints' identities.
#[allow(clippy::type_complexity)]
fn per_group<'s>(
    scope_groups: &Coll<'s, (Group, ScopeKey)>,
    drs: Coll<'s, (ConfigKey, DestinationRule)>,
    services: &Coll<'s, (Hostname, HostServices)>,
    mesh: &Mesh<'s>,
    secrets: &Coll<'s, ((String, String), TlsSecret)>,
) -> (Coll<'s, (Group, ClusterRow)>, Coll<'s, (Group, CredOut)>) {
    let groups = scope_groups.clone().map(|(g, _)| g).distinct();
    let groups_grpc = groups.clone().flat_map(|g| match &g.1 {
        (Some(k), Client::Grpc, _, _) => Some((k.clone(), g.clone())),
        _ => None,
    });
    let drs_for_grpc = drs
        .clone()
        .filter(|(_, dr)| !dr.encrypting_tls().is_empty());
    // The mesh's connect timeout joins once per group, before the rule does.
    let groups_svc = groups
        .join_map(services.clone(), |h, d, set| {
            let svc = match &d.3 {
                Some(ns) => set.of_namespace(ns)?,
                None => set.first(),
            };
            Some(((), (d.clone(), (h.clone(), svc.clone()))))
        })
        .flat_map(|x| x)
        .join_map(mesh.clone(), |_, (d, (h, svc)), m| {
            (d.clone(), (h.clone(), svc.clone(), d.1.defaults(m)))
        });
    let plain = groups_svc
        .clone()
        .flat_map(|((d, grpc, ns, p), (h, svc, timeout))| match (d, ns) {
            (Some(k), None) => Some((k, (h, svc, grpc, p, timeout))),
            _ => None,
        })
        .join_map(drs.clone(), |k, (h, svc, grpc, p, timeout), dr| {
            (
                (h.clone(), (Some(k.clone()), *grpc, None, p.clone())),
                cluster::outbound_all_for(svc, Some(dr), *grpc == Client::Grpc, timeout),
            )
        })
        .concat(
            groups_svc
                .clone()
                .filter(|((d, _, _, _), _)| d.is_none())
                .map(|((_, grpc, _, p), (h, svc, timeout))| {
                    (
                        (h, (None, grpc, None, p)),
                        cluster::outbound_all_for(&svc, None, grpc == Client::Grpc, &timeout),
                    )
                }),
        )
        .flat_map(|(g, list)| list.into_iter().map(move |c| (g.clone(), c)));
    // A `credentialName` rule's groups: one per namespace its clients are in.
    let cred_base = groups_svc
        .flat_map(|((d, grpc, ns, p), (h, svc, timeout))| match (d, ns) {
            (Some(k), Some(ns)) => Some((k, (h, svc, grpc, ns, p, timeout))),
            _ => None,
        })
        .join_map(drs, |k, (h, svc, grpc, ns, p, timeout), dr| {
            (
                (
                    h.clone(),
                    (Some(k.clone()), *grpc, Some(ns.clone()), p.clone()),
                ),
                CredItem::Base(Box::new((svc.clone(), dr.clone(), timeout.clone()))),
            )
        });
    let cred_secrets = cred_base
        .clone()
        .flat_map(|(g, item)| {
            let (CredItem::Base(base), Some(ns)) = (&item, &(g.1).2) else {
                return Vec::new();
            };
            base.1
                .wanted_secrets()
                .into_iter()
                .map(|name| ((ns.clone(), name), g.clone()))
                .collect()
        })
        .join_map(secrets.clone(), |_, g, s| {
            (g.clone(), CredItem::Secret(s.clone()))
        });
    let cred_out = cred_base
        .concat(cred_secrets)
        .reduce(|g, vals: &[(&CredItem, isize)], out| {
            let found: Vec<&TlsSecret> = vals
                .iter()
                .filter_map(|(v, _)| match v {
                    CredItem::Secret(s) => Some(s),
                    CredItem::Base(_) => None,
                })
                .collect();
            let client = crate::client_tls::ClientSecrets {
                namespace: (g.1).2.as_deref().unwrap_or_default(),
                secrets: &found,
            };
            for (v, _) in vals {
                let CredItem::Base(base) = v else {
                    continue;
                };
                let (svc, dr, defaults) = &**base;
                let grpc = (g.1).1 == Client::Grpc;
                for c in cluster::outbound_all_with(svc, Some(dr), grpc, defaults, client) {
                    out.push((CredOut::Cluster(c), 1isize));
                }
                for (r, from) in client.resources(dr) {
                    out.push((CredOut::Secret(r, from), 1isize));
                }
                for e in client.errors(dr) {
                    out.push((CredOut::Error(e), 1isize));
                }
            }
        });
    // A rule proxyless gRPC clients have in effect: what of its TLS they cannot be given.
    let grpc_errors = groups_grpc
        .join_map(drs_for_grpc, |_, g, dr| {
            (g.clone(), crate::client_tls::proxyless_errors(dr))
        })
        .flat_map(|(g, errs)| {
            errs.into_iter()
                .map(move |e| (g.clone(), CredOut::Error(e)))
        });
    let cred_out = cred_out.concat(grpc_errors);
    let cred_clusters = cred_out.clone().flat_map(|(g, o)| match o {
        CredOut::Cluster(c) => Some((g, c)),
        _ => None,
    });
    (plain.concat(cred_clusters), cred_out)
}

/// A cluster (and its assignment) comes from the service and the DestinationRule in effect.
fn provenance<'s>(
    scope_cluster_groups: Coll<'s, (ScopeKey, ClusterRow, Group)>,
    services: &Coll<'s, (Hostname, HostServices)>,
    contributors: &Coll<'s, (ConfigKey, ConfigKey)>,
) -> Coll<'s, ProvenanceRow> {
    let cluster_keys = scope_cluster_groups
        .map(|(s, (res, _, labels), (h, (d, _, _, p)))| (h, (s, res.name, labels.is_some(), d, p)));
    cluster_keys
        .clone()
        .join_map(services.clone(), |_, row, set| {
            let svc = match &row.4 {
                Some(ns) => set.of_namespace(ns)?,
                None => set.first(),
            };
            Some((row.clone(), svc.origin.clone()))
        })
        .flat_map(|x| x)
        .concat(
            // Every rule merged into the entry in effect.
            cluster_keys
                .flat_map(|(_, row)| row.3.clone().map(|d| (d, row)))
                .join_map(contributors.clone(), |_, row, k| (row.clone(), k.clone())),
        )
        .flat_map(|((s, name, eds, _, _), input)| {
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
