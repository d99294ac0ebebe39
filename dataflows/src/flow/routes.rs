//! Sidecar routes. [`ports`]: visible hosts + services + Sidecar specs → the ports each
//! (scope, host) is routed on. [`sidecar`]: those ports + the mesh VirtualServices in effect
//! → one route configuration per (scope, port), the catch-all listener of each port that
//! needs one (both come from the same rows), and their provenance. Routers are
//! [`super::gateways`]'.

use super::{Built, Coll};
use crate::assemble;
use crate::model::*;
use crate::rules;
use crate::translate::{listener, route};
use serde::{Deserialize, Serialize};

/// `((scope, host), (port, allow_any, catch_all, service, listener))`: a host's port in a
/// scope, whether the port's listener allows any destination and needs a catch-all, and the
/// egress listener serving the port (its index: VirtualServices are selected per listener).
pub(super) type Ports<'s> = Coll<
    's,
    (
        (ScopeKey, Hostname),
        (u16, UnknownHosts, bool, Service, usize),
    ),
>;

/// Rows of a sidecar route configuration: a marker that it must exist, or a virtual host.
#[allow(clippy::large_enum_variant)] // rows live in arrangements, not on hot stacks
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum RouteRow {
    Exists {
        allow_any: UnknownHosts,
    },
    /// The mesh's default retry policy, for the routes no VirtualService governs; only
    /// present when the mesh config sets one.
    DefaultRetries(Retries),
    Vhost {
        allow_any: UnknownHosts,
        catch_all: bool,
        service: Service,
        vs: Option<ResolvedVs>,
    },
    /// The hash keys of a host some virtual host of the configuration routes to.
    Hash(Hostname, HostHashing),
    /// A mesh VirtualService whose hosts are no service's, seen by the scope on port 80:
    /// virtual hosts of their own, if the route configuration exists for other reasons.
    Hostless(ResolvedVs),
    /// A Kubernetes `ExternalName` alias declaring the port, with the mesh VirtualService in
    /// effect for its own host: a virtual host of its own, if the route configuration
    /// exists for other reasons (`route::SidecarVhosts::aliases`).
    Alias {
        service: Service,
        vs: ResolvedVs,
    },
}

/// `ExternalName` aliases as sidecar routes see them: their ports per (scope, host), as
/// [`ports`] gives a service's, and the mesh VirtualService in effect for each alias host.
pub(super) struct Aliases<'s> {
    pub ports: Ports<'s>,
    pub vss: Coll<'s, (super::virtual_services::ListenerHost, ConfigKey)>,
}

impl<'s> Aliases<'s> {
    /// `ExternalName` aliases build nothing of their own: only a VirtualService of their own
    /// host gives their names a virtual host (see `route::SidecarVhosts::aliases`).
    pub(super) fn of(
        services: &Coll<'s, (Hostname, HostServices)>,
        specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
        routed_vss: &Coll<'s, (ConfigKey, VirtualService)>,
    ) -> Self {
        let alias_services = services
            .clone()
            .filter(|(_, s)| s.first().alias_for.is_some());
        let visible = super::visibility::hosts(specs, &alias_services);
        let covering =
            super::virtual_services::mesh_covering(routed_vss, &alias_services, &visible, specs);
        Aliases {
            ports: ports(&visible, &alias_services, specs),
            vss: super::virtual_services::mesh_in_effect(&covering),
        }
    }
}

type Rows<'s> = Coll<'s, ((ScopeKey, u16), RouteRow)>;

/// Sidecar route ports per (scope, host), from the egress listener that made it visible.
pub(super) fn ports<'s>(
    visible: &super::visibility::Visible<'s>,
    services: &Coll<'s, (Hostname, HostServices)>,
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
) -> Ports<'s> {
    super::visibility::per_listener(visible, services, specs, |v| {
        rules::sidecar_route_ports(
            &v.listeners,
            v.idx,
            v.service,
            v.interception_none,
            v.proxyless,
            v.spec,
        )
        .into_iter()
        .map(|(port, allow_any, catch_all)| (port, allow_any, catch_all, v.service.clone(), v.idx))
        .collect()
    })
}

/// Route configurations of sidecar scopes with their provenance (and that of the catch-all
/// listeners), and the `(scope, port)`s whose captured listener needs the HTTP chain:
/// [`super::tcp`] builds those listeners, as TCP services may share their ports.
#[allow(clippy::too_many_arguments)] // the sidecar route inputs, each its own collection
pub(super) fn sidecar<'s>(
    domain_suffix: &str,
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
    ports: &Ports<'s>,
    mesh_vss: Coll<'s, (super::virtual_services::ListenerHost, ConfigKey)>,
    vss: &Coll<'s, (ConfigKey, ResolvedVs)>,
    hostless: &Coll<'s, (ConfigKey, ResolvedVs)>,
    aliases: Aliases<'s>,
    hashing: &Coll<'s, ((ScopeKey, Hostname), HostHashing)>,
) -> (Built<'s, ScopeKey>, Coll<'s, (ScopeKey, u16)>) {
    let rows = rows(specs, ports, mesh_vss, vss, hostless, aliases, hashing);
    let provenance = provenance(&rows);
    let catchall = catchall_ports(&rows);
    let built = Built {
        resources: configs(rows, domain_suffix),
        provenance,
    };
    (built, catchall)
}

/// One row per virtual host (with its VirtualService, if one is in effect) and one per route
/// configuration a sidecar must have even with no virtual host.
fn rows<'s>(
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
    ports: &Ports<'s>,
    mesh_vss: Coll<'s, (super::virtual_services::ListenerHost, ConfigKey)>,
    vss: &Coll<'s, (ConfigKey, ResolvedVs)>,
    hostless: &Coll<'s, (ConfigKey, ResolvedVs)>,
    aliases: Aliases<'s>,
    hashing: &Coll<'s, ((ScopeKey, Hostname), HostHashing)>,
) -> Rows<'s> {
    let by_listener = |ports: &Ports<'s>| {
        ports
            .clone()
            .map(|((s, h), (port, allow_any, catch_all, svc, idx))| {
                ((s, h, idx), (port, allow_any, catch_all, svc))
            })
    };
    // Aliases only where a VirtualService governs their host.
    let alias_rows =
        super::virtual_services::with_mesh_vs(by_listener(&aliases.ports), aliases.vss, vss)
            .flat_map(|((s, _, _), ((port, _, _, service), vs))| {
                vs.map(|vs| ((s, port), RouteRow::Alias { service, vs }))
            });
    let by_listener = by_listener(ports);
    let rows_vs = super::virtual_services::with_mesh_vs(by_listener, mesh_vss, vss).map(
        |((s, _, _), ((port, allow_any, catch_all, svc), vs))| {
            let row = RouteRow::Vhost {
                allow_any,
                catch_all,
                service: svc,
                vs,
            };
            ((s, port), row)
        },
    );
    let route_exists = specs.clone().flat_map(|(s, spec)| match &s {
        ScopeKey::Sidecar {
            interception_none,
            proxyless,
            ..
        } => assemble::sidecar_fixed_routes(&spec, *interception_none, *proxyless)
            .into_iter()
            .map(|(port, allow_any)| ((s.clone(), port), RouteRow::Exists { allow_any }))
            .collect(),
        ScopeKey::Router { .. } => Vec::new(),
    });
    // Hostless VirtualServices, for every sidecar scope whose port-80 egress listener sees
    // them (few: VirtualServices name services almost always).
    let hostless_rows = specs
        .clone()
        .map(|(s, spec)| ((), (s, spec)))
        .join_map(
            hostless.clone().map(|(_, vs)| ((), vs)),
            |_, (s, spec), vs| {
                let ScopeKey::Sidecar { proxyless, .. } = &s else {
                    return None;
                };
                let listeners = rules::egress_listeners(spec.sidecar.as_ref());
                rules::sidecar_sees_hostless_vs(&listeners, s.namespace(), *proxyless, &vs.vs)
                    .then(|| ((s.clone(), 80u16), RouteRow::Hostless(vs.clone())))
            },
        )
        .flat_map(|x| x);
    // The hash keys of each host a virtual host routes to, when its rule hashes.
    let hashes = rows_vs
        .clone()
        .concat(hostless_rows.clone())
        .concat(alias_rows.clone())
        .flat_map(|((s, port), row)| match row {
            RouteRow::Vhost { service, vs, .. } => route::routed_hosts(&service, vs.as_ref())
                .into_iter()
                .map(|h| ((s.clone(), h), port))
                .collect(),
            RouteRow::Hostless(vs) | RouteRow::Alias { vs, .. } => route::routed_hosts_of(&vs)
                .into_iter()
                .map(|h| ((s.clone(), h), port))
                .collect(),
            _ => Vec::new(),
        })
        .distinct()
        .join_map(hashing.clone(), |(s, h), port, hh| {
            ((s.clone(), *port), RouteRow::Hash(h.clone(), hh.clone()))
        });
    let rows = rows_vs.concat(route_exists);
    // One row per (scope, port) with the mesh's retry default, when there is one: a
    // change of it rebuilds the scopes' route configurations and nothing else.
    let retries = rows
        .clone()
        .map(|((s, port), _)| (s, port))
        .distinct()
        .join_map(
            specs
                .clone()
                .flat_map(|(s, spec)| spec.default_retries.map(|r| (s, r))),
            |s, port, r| ((s.clone(), *port), RouteRow::DefaultRetries(r.clone())),
        );
    rows.concat(hashes)
        .concat(retries)
        .concat(hostless_rows)
        .concat(alias_rows)
}

/// Only a sidecar whose traffic is captured has the `0.0.0.0` listeners a catch-all needs.
fn captured(s: &ScopeKey) -> bool {
    matches!(
        s,
        ScopeKey::Sidecar {
            interception_none: false,
            ..
        }
    )
}

/// A sidecar route configuration comes from its services and their VirtualServices; the
/// catch-all listener of a port from the services that needed it.
fn provenance<'s>(rows: &Rows<'s>) -> Coll<'s, ProvenanceRow> {
    rows.clone().flat_map(|((s, port), row)| {
        if let RouteRow::Hostless(vs) = row {
            let route_key = (Holder::Scope(s), ResourceType::Route, port.to_string());
            return vec![(route_key, vs.vs.key)];
        }
        if let RouteRow::Alias { service, vs } = row {
            let route_key = (Holder::Scope(s), ResourceType::Route, port.to_string());
            return vec![(route_key.clone(), service.origin), (route_key, vs.vs.key)];
        }
        let RouteRow::Vhost {
            service,
            vs,
            catch_all,
            ..
        } = row
        else {
            return Vec::new();
        };
        let route_key = (
            Holder::Scope(s.clone()),
            ResourceType::Route,
            port.to_string(),
        );
        let mut rows = vec![(route_key.clone(), service.origin.clone())];
        if let Some(vs) = vs {
            rows.push((route_key, vs.vs.key));
        }
        if catch_all && captured(&s) {
            let name = listener::listener_name("0.0.0.0", port);
            rows.push((
                (Holder::Scope(s), ResourceType::Listener, name),
                service.origin,
            ));
        }
        rows
    })
}

/// Each captured port that some virtual host needs a catch-all listener on.
fn catchall_ports<'s>(rows: &Rows<'s>) -> Coll<'s, (ScopeKey, u16)> {
    rows.clone()
        .filter(|(_, row)| {
            matches!(
                row,
                RouteRow::Vhost {
                    catch_all: true,
                    ..
                }
            )
        })
        .map(|((s, port), _)| (s, port))
        .distinct()
        .filter(|(s, _)| captured(s))
}

/// The route configuration of each (scope, port), from all its rows at once: a virtual host
/// added or removed rebuilds only its own port's configuration.
fn configs<'s>(rows: Rows<'s>, domain_suffix: &str) -> Coll<'s, (ScopeKey, Resource)> {
    let suffix = domain_suffix.to_string();
    rows.reduce(
        move |(s, port): &(ScopeKey, u16), vals: &[(&RouteRow, isize)], out| {
            let mut allow_any = UnknownHosts::None;
            let mut vhosts = route::SidecarVhosts::default();
            let mut retries = None;
            let mut hashing = Hashing::new();
            let mut exists = false;
            for (row, _) in vals {
                match row {
                    RouteRow::Hash(h, hh) => {
                        hashing.insert(h.clone(), hh.clone());
                    }
                    RouteRow::Exists { allow_any: a } => {
                        exists = true;
                        allow_any = a.clone();
                    }
                    RouteRow::DefaultRetries(r) => retries = Some(r),
                    RouteRow::Hostless(vs) => vhosts.hostless.push(vs.clone()),
                    RouteRow::Alias { service, vs } => {
                        vhosts.aliases.push((service.clone(), vs.clone()))
                    }
                    RouteRow::Vhost {
                        allow_any: a,
                        service,
                        vs,
                        ..
                    } => {
                        exists = true;
                        allow_any = a.clone();
                        vhosts.services.push((service.clone(), vs.clone()));
                    }
                }
            }
            // Hostless VirtualServices and aliases join a configuration; they never make one.
            if !exists {
                return;
            }
            out.push((
                route::sidecar_route_config(
                    *port, s, &suffix, &vhosts, allow_any, retries, &hashing,
                ),
                1isize,
            ));
        },
    )
    .map(|((s, _), r)| (s, r))
}
