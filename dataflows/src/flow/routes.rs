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

/// `((scope, host), (port, allow_any, catch_all, service))`: a host's port in a scope, and
/// whether the port's listener allows any destination and needs a catch-all.
pub(super) type Ports<'s> = Coll<'s, ((ScopeKey, Hostname), (u16, UnknownHosts, bool, Service))>;

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
}

type Rows<'s> = Coll<'s, ((ScopeKey, u16), RouteRow)>;

/// Sidecar route ports per (scope, host), from the egress listener that made it visible.
pub(super) fn ports<'s>(
    visible: &super::visibility::Visible<'s>,
    services: &Coll<'s, (Hostname, Service)>,
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
) -> Ports<'s> {
    visible
        .views
        .clone()
        .map(|((s, idx), h)| (h, (s, idx)))
        .join_map(services.clone(), |_, (s, idx), svc| {
            (s.clone(), (*idx, svc.clone()))
        })
        .join_map(specs.clone(), |s, (idx, svc), spec| {
            let ScopeKey::Sidecar {
                interception_none,
                proxyless,
                ..
            } = *s
            else {
                return Vec::new();
            };
            let listeners = rules::egress_listeners(spec.sidecar.as_ref());
            let registry_only = spec.registry_only;
            rules::sidecar_route_ports(
                &listeners,
                *idx,
                svc,
                interception_none,
                proxyless,
                registry_only,
            )
            .into_iter()
            .map(|(port, allow_any, catch_all)| {
                (
                    (s.clone(), svc.hostname.clone()),
                    (port, allow_any, catch_all, svc.clone()),
                )
            })
            .collect()
        })
        .flat_map(|rows| rows)
        .distinct()
}

/// Route configurations and catch-all listeners of sidecar scopes, with their provenance.
pub(super) fn sidecar<'s>(
    domain_suffix: &str,
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
    ports: &Ports<'s>,
    mesh_vss: Coll<'s, ((ScopeKey, Hostname), ConfigKey)>,
    vss: &Coll<'s, (ConfigKey, ResolvedVs)>,
) -> Built<'s, ScopeKey> {
    let rows = rows(specs, ports, mesh_vss, vss);
    let provenance = provenance(&rows);
    let catchall = catchall_listeners(&rows);
    Built {
        resources: configs(rows, domain_suffix).concat(catchall),
        provenance,
    }
}

/// One row per virtual host (with its VirtualService, if one is in effect) and one per route
/// configuration a sidecar must have even with no virtual host.
fn rows<'s>(
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
    ports: &Ports<'s>,
    mesh_vss: Coll<'s, ((ScopeKey, Hostname), ConfigKey)>,
    vss: &Coll<'s, (ConfigKey, ResolvedVs)>,
) -> Rows<'s> {
    let rows_with_vs = ports
        .clone()
        .join_map(
            mesh_vss.clone(),
            |(s, _), (port, allow_any, catch_all, svc), vk| {
                (
                    vk.clone(),
                    (s.clone(), *port, *allow_any, *catch_all, svc.clone()),
                )
            },
        )
        .join_map(
            vss.clone(),
            |_, (s, port, allow_any, catch_all, svc), rvs| {
                let row = RouteRow::Vhost {
                    allow_any: *allow_any,
                    catch_all: *catch_all,
                    service: svc.clone(),
                    vs: Some(rvs.clone()),
                };
                ((s.clone(), *port), row)
            },
        );
    let rows_without_vs = ports.clone().antijoin(mesh_vss.map(|(k, _)| k)).map(
        |((s, _), (port, allow_any, catch_all, svc))| {
            (
                (s, port),
                RouteRow::Vhost {
                    allow_any,
                    catch_all,
                    service: svc,
                    vs: None,
                },
            )
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
    let rows = rows_with_vs.concat(rows_without_vs).concat(route_exists);
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
    rows.concat(retries)
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

/// One catch-all listener per port that some virtual host needs it on.
fn catchall_listeners<'s>(rows: &Rows<'s>) -> Coll<'s, (ScopeKey, Resource)> {
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
        .map(|(s, port)| (s, assemble::catchall_listener(port)))
}

/// The route configuration of each (scope, port), from all its rows at once: a virtual host
/// added or removed rebuilds only its own port's configuration.
fn configs<'s>(rows: Rows<'s>, domain_suffix: &str) -> Coll<'s, (ScopeKey, Resource)> {
    let suffix = domain_suffix.to_string();
    rows.reduce(
        move |(s, port): &(ScopeKey, u16), vals: &[(&RouteRow, isize)], out| {
            let mut allow_any = UnknownHosts::None;
            let mut vhosts = Vec::new();
            let mut retries = None;
            for (row, _) in vals {
                match row {
                    RouteRow::Exists { allow_any: a } => allow_any = *a,
                    RouteRow::DefaultRetries(r) => retries = Some(r),
                    RouteRow::Vhost {
                        allow_any: a,
                        service,
                        vs,
                        ..
                    } => {
                        allow_any = *a;
                        vhosts.push((service.clone(), vs.clone()));
                    }
                }
            }
            out.push((
                route::sidecar_route_config(
                    *port,
                    s.namespace(),
                    &suffix,
                    &vhosts,
                    allow_any,
                    retries,
                ),
                1isize,
            ));
        },
    )
    .map(|((s, _), r)| (s, r))
}
