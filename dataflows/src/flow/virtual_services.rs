//! VirtualServices. [`resolve`]: VirtualServices + services in effect → each VirtualService
//! with the ports of the hosts it routes to (its routes name a host, Envoy needs a port).
//! [`mesh_in_effect`]: which mesh-bound VirtualService governs each host a scope sees.
//! Sidecar routes and gateway routes both consume the resolved form.

use super::visibility::Visible;
use super::Coll;
use crate::model::*;
use crate::rules;
use serde::{Deserialize, Serialize};

/// A root VirtualService and the delegates its routes name, gathered to expand it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum Delegation {
    Root(VirtualService),
    Delegate(VirtualService),
}

/// Every VirtualService with its delegating routes replaced by their delegates' routes
/// ([`crate::delegation::expand`]); one that delegates nothing passes through. A root meets
/// its delegates in one group, so a delegate's change re-expands only its roots.
pub(super) fn expand_delegates<'s>(
    vss: Coll<'s, (ConfigKey, VirtualService)>,
) -> Coll<'s, (ConfigKey, VirtualService)> {
    let plain = vss.clone().filter(|(_, vs)| vs.delegates().is_empty());
    let roots = vss.clone().filter(|(_, vs)| !vs.delegates().is_empty());
    let found = roots
        .clone()
        .flat_map(|(k, vs)| vs.delegates().into_iter().map(move |d| (d, k.clone())))
        .join_map(vss, |_, root, d| {
            (root.clone(), Delegation::Delegate(d.clone()))
        });
    let expanded = roots
        .map(|(k, vs)| (k, Delegation::Root(vs)))
        .concat(found)
        .reduce(|_, vals: &[(&Delegation, isize)], out| {
            let mut root = None;
            let mut delegates = std::collections::BTreeMap::new();
            for (v, _) in vals {
                match v {
                    Delegation::Root(vs) => root = Some(vs),
                    Delegation::Delegate(d) => {
                        delegates.insert(d.key.clone(), d.clone());
                    }
                }
            }
            if let Some(root) = root {
                out.push((crate::delegation::expand(root, &delegates), 1isize));
            }
        });
    plain.concat(expanded)
}

/// A VirtualService and the `ExternalName` aliases its destinations name, gathered to
/// retarget them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum AliasPart {
    Spec(VirtualService),
    Alias(Hostname, rules::AliasTarget),
}

/// Every VirtualService with its destinations that name an `ExternalName` alias sent to the
/// host the alias names ([`rules::with_alias_destinations`]); one naming no alias passes
/// through. `services`: the services in effect, aliases included. A VirtualService meets
/// only the aliases it names, so an alias's change re-resolves only those.
pub(super) fn alias_destinations<'s>(
    vss: Coll<'s, (ConfigKey, VirtualService)>,
    services: &Coll<'s, (Hostname, HostServices)>,
) -> Coll<'s, (ConfigKey, VirtualService)> {
    // An alias is a Kubernetes `ExternalName` Service: first among its host's services.
    let aliases = services.clone().flat_map(|(h, s)| {
        let s = s.first();
        let ports = s.ports.iter().map(|p| p.port).collect::<Vec<_>>();
        s.alias_for.clone().map(|t| (h, (t, ports)))
    });
    let named = vss
        .clone()
        .flat_map(|(k, vs)| {
            rules::destination_hosts(&vs)
                .into_iter()
                .map(move |h| (h, k.clone()))
        })
        .join_map(aliases, |h, k, a| {
            (k.clone(), AliasPart::Alias(h.clone(), a.clone()))
        });
    let naming = named.clone().map(|(k, _)| k).distinct();
    let plain = vss.clone().antijoin(naming.clone());
    let retargeted = vss
        .semijoin(naming)
        .map(|(k, vs)| (k, AliasPart::Spec(vs)))
        .concat(named)
        .reduce(|_, vals: &[(&AliasPart, isize)], out| {
            let mut spec = None;
            let mut aliases = std::collections::BTreeMap::new();
            for (v, _) in vals {
                match v {
                    AliasPart::Spec(vs) => spec = Some(vs),
                    AliasPart::Alias(h, a) => {
                        aliases.insert(h.clone(), a.clone());
                    }
                }
            }
            if let Some(vs) = spec {
                out.push((rules::with_alias_destinations(vs, &aliases), 1isize));
            }
        });
    plain.concat(retargeted)
}

/// Parts of a VirtualService gathered to resolve destination ports.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum VsPart {
    Spec(VirtualService),
    Dest(Hostname, Vec<u16>),
}

/// `(key, resolved VirtualService)`. The spec and each destination's ports meet in one group
/// so a service's port change re-resolves only the VirtualServices routing to it.
pub(super) fn resolve<'s>(
    vss: &Coll<'s, (ConfigKey, VirtualService)>,
    services: &Coll<'s, (Hostname, HostServices)>,
) -> Coll<'s, (ConfigKey, ResolvedVs)> {
    let vs_dest_ports = vss
        .clone()
        .flat_map(|(k, vs)| {
            let mut hosts: Vec<Hostname> = vs
                .http
                .iter()
                .flat_map(|r| r.route.iter())
                .chain(vs.tcp.iter().flat_map(|r| r.route.iter()))
                .chain(vs.tls.iter().flat_map(|r| r.route.iter()))
                .map(|d| d.host.clone())
                .collect();
            hosts.sort();
            hosts.dedup();
            hosts.into_iter().map(move |h| (h, k.clone()))
        })
        // The ports of the service the VirtualService's own namespace gets (where several
        // namespaces define the host, proxies elsewhere may get another's).
        .join_map(services.clone(), |h, k, set| {
            let svc = set.for_namespace(&k.namespace).unwrap_or(set.first());
            (
                k.clone(),
                VsPart::Dest(h.clone(), svc.ports.iter().map(|p| p.port).collect()),
            )
        });
    vss.clone()
        .map(|(k, vs)| (k, VsPart::Spec(vs)))
        .concat(vs_dest_ports)
        .reduce(|_, vals: &[(&VsPart, isize)], out| {
            let mut spec = None;
            let mut dest_ports = std::collections::BTreeMap::new();
            for (v, _) in vals {
                match v {
                    VsPart::Spec(vs) => spec = Some(vs.clone()),
                    VsPart::Dest(h, p) => {
                        dest_ports.insert(h.clone(), p.clone());
                    }
                }
            }
            if let Some(vs) = spec {
                out.push((ResolvedVs { vs, dest_ports }, 1isize));
            }
        })
}

/// `((scope, host, egress listener), VirtualService key)`: the mesh VirtualService in effect
/// per (scope, host) on the ports an egress listener serves. A VirtualService covers a host
/// it names or a wildcard of it names; the most specific cover wins
/// (`rules::vs_host_specificity`: the host itself, then the longest wildcard), then the
/// lowest `rules::vs_rank`, then the key; only among those the listener imports
/// (`rules::listeners_importing_vs`).
pub(super) fn mesh_in_effect<'s>(covering: &Covering<'s>) -> Coll<'s, (ListenerHost, ConfigKey)> {
    covering
        .clone()
        .reduce(|_, vals, out| out.push((vals[0].0 .2.clone(), 1isize)))
}

/// A host as a sidecar scope sees it through one of its egress listeners (its index among
/// the scope's listeners): VirtualServices are selected per listener.
pub(super) type ListenerHost = (ScopeKey, Hostname, usize);

/// `((scope, host, listener), (specificity, rank, key))`: every mesh VirtualService an egress
/// listener of a scope imports that covers a host the scope sees, ordered (as the tuple
/// sorts) the way [`mesh_in_effect`] chooses: TCP and TLS ports try them all, in this order.
pub(super) type Covering<'s> = Coll<'s, (ListenerHost, ((u8, usize), u8, ConfigKey))>;

/// How closely a VirtualService covers a host (`rules::vs_host_specificity`), and which.
type Cover = ((u8, usize), VirtualService);

pub(super) fn mesh_covering<'s>(
    vss: &Coll<'s, (ConfigKey, VirtualService)>,
    services: &Coll<'s, (Hostname, HostServices)>,
    visible: &Visible<'s>,
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
) -> Covering<'s> {
    let vs_by_host = vss
        .clone()
        .filter(|(_, vs)| vs.binds_mesh())
        .flat_map(|(_, vs)| {
            distinct_hosts(&vs)
                .into_iter()
                .map(move |h| (h, vs.clone()))
        });
    // Per service host, each VirtualService that covers it and how closely: found by
    // joining the patterns that could cover the host with the VirtualServices' hosts, so a
    // service meets only its own VirtualServices.
    let covering = service_patterns(services)
        .join_map(vs_by_host, |p, h, vs| {
            rules::vs_host_specificity(p, h)
                .map(|spec| ((h.clone(), vs.key.clone()), (spec, vs.clone())))
        })
        .flat_map(|x| x)
        // A VirtualService covers a host once, by its most specific host (`*.local` and the
        // exact name both cover `a.ns.svc.cluster.local`): TCP and TLS ports walk every cover
        // in order, and must not walk one VirtualService twice.
        .reduce(|_, vals: &[(&Cover, isize)], out| out.push((vals[0].0.clone(), 1isize)))
        .map(|((h, _), cover)| (h, cover));
    // Each candidate then meets its scope's egress listeners: a row per listener importing it.
    let listeners = specs
        .clone()
        .map(|(s, spec)| (s, rules::egress_listeners(spec.sidecar.as_ref())));
    visible
        .host_scopes()
        .join_map(covering, |h, s, (spec, vs)| {
            rules::vs_rank(vs, s.namespace())
                .map(|r| (s.clone(), (h.clone(), (*spec, r, vs.clone()))))
        })
        .flat_map(|x| x)
        .join_map(listeners, |s, (h, (spec, r, vs)), listeners| {
            rules::listeners_importing_vs(listeners, s.namespace(), vs)
                .into_iter()
                .map(|idx| ((s.clone(), h.clone(), idx), (*spec, *r, vs.key.clone())))
                .collect::<Vec<_>>()
        })
        .flat_map(|x| x)
}

/// Rows of [`with_mesh_vs`].
pub(super) type WithVs<'s, T> = Coll<'s, (ListenerHost, (T, Option<ResolvedVs>))>;

/// Each `((scope, host, listener), T)` row with the mesh VirtualService in effect for its
/// host on that egress listener, if any: what sidecar routes (HTTP) build from.
pub(super) fn with_mesh_vs<'s, T: differential_dataflow::ExchangeData>(
    rows: Coll<'s, (ListenerHost, T)>,
    mesh_vss: Coll<'s, (ListenerHost, ConfigKey)>,
    vss: &Coll<'s, (ConfigKey, ResolvedVs)>,
) -> WithVs<'s, T> {
    let with_vs = rows
        .clone()
        .join_map(mesh_vss.clone(), |sh, t, vk| {
            (vk.clone(), (sh.clone(), t.clone()))
        })
        .join_map(vss.clone(), |_, (sh, t), rvs| {
            (sh.clone(), (t.clone(), Some(rvs.clone())))
        });
    let without_vs = rows
        .antijoin(mesh_vss.map(|(k, _)| k))
        .map(|(sh, t)| (sh, (t, None)));
    with_vs.concat(without_vs)
}

/// `(key, resolved VirtualService)` of every mesh VirtualService none of whose hosts names or
/// covers a service of the registry: sidecars give its hosts virtual hosts of their own on
/// port 80 ([`crate::rules::sidecar_sees_hostless_vs`]). Found by joining the patterns that
/// could cover each service host with the VirtualServices' hosts, as [`mesh_in_effect`]
/// does, so no VirtualService is compared with every service.
pub(super) fn hostless<'s>(
    routed: &Coll<'s, (ConfigKey, VirtualService)>,
    resolved: &Coll<'s, (ConfigKey, ResolvedVs)>,
    services: &Coll<'s, (Hostname, HostServices)>,
) -> Coll<'s, (ConfigKey, ResolvedVs)> {
    let mesh = routed
        .clone()
        .filter(|(_, vs)| vs.binds_mesh() && !vs.hosts.is_empty());
    let vs_hosts = mesh
        .clone()
        .flat_map(|(k, vs)| distinct_hosts(&vs).into_iter().map(move |h| (h, k.clone())));
    let covered = service_patterns(services).map(|(p, _)| p).distinct();
    let with_service = vs_hosts.semijoin(covered).map(|(_, k)| k).distinct();
    resolved
        .clone()
        .semijoin(mesh.map(|(k, _)| k))
        .antijoin(with_service)
}

/// A VirtualService's hosts, each once.
fn distinct_hosts(vs: &VirtualService) -> Vec<Hostname> {
    let mut hosts = vs.hosts.clone();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// `(pattern, service host)`: every host pattern that could cover a service's host
/// ([`rules::covering_patterns`]: itself, `*.` and each suffix after a dot, `*`), so joins
/// with VirtualService hosts meet only the VirtualServices of a service.
fn service_patterns<'s>(
    services: &Coll<'s, (Hostname, HostServices)>,
) -> Coll<'s, (String, Hostname)> {
    services.clone().map(|(h, _)| h).distinct().flat_map(|h| {
        rules::covering_patterns(&h)
            .into_iter()
            .map(move |p| (p, h.clone()))
    })
}
