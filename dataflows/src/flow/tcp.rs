//! Sidecar TCP listeners. In: the hosts each (scope, egress listener) sees, the services in
//! effect, the scopes' Sidecar specs, the mesh VirtualServices in effect and their resolved
//! form, and the captured ports that need the HTTP catch-all chain ([`super::routes`]). Out:
//! one outbound listener per (scope, port) — TCP chains per service (by destination
//! address) and the HTTP chain where HTTP services share the port — with the services and
//! VirtualServices it was built from. A port with HTTP services only keeps the plain
//! catch-all listener.

use super::visibility::Visible;
use super::{Built, Coll};
use crate::assemble::{self, TcpPort};
use crate::model::*;
use crate::rules;
use crate::translate::listener;
use serde::{Deserialize, Serialize};

/// What a sidecar port's listener is built from.
#[allow(clippy::large_enum_variant)] // rows live in arrangements, not on hot stacks
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum PortRow {
    /// HTTP services need the port's catch-all chain.
    Http,
    /// A TCP service reached on the port, and how the listener is reached.
    Tcp {
        addr: String,
        bind: bool,
        registry_only: bool,
        service: Service,
        vs: Option<ResolvedVs>,
    },
}

type TcpRows<'s> = Coll<'s, ((ScopeKey, Hostname), (u16, String, bool, bool, Service))>;

/// `((scope, host), (port, address, bind, registry_only, service))` for every TCP listener
/// a visible service joins, through the egress listener that made it visible.
fn tcp_ports<'s>(
    visible: &Visible<'s>,
    services: &Coll<'s, (Hostname, Service)>,
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
) -> TcpRows<'s> {
    super::visibility::per_listener(visible, services, specs, |v| {
        rules::sidecar_tcp_ports(
            &v.listeners,
            v.idx,
            v.service,
            v.interception_none,
            v.proxyless,
        )
        .into_iter()
        .map(|(port, addr, bind)| (port, addr, bind, v.spec.registry_only, v.service.clone()))
        .collect()
    })
}

pub(super) fn sidecar<'s>(
    visible: &Visible<'s>,
    services: &Coll<'s, (Hostname, Service)>,
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
    mesh_vss: Coll<'s, ((ScopeKey, Hostname), ConfigKey)>,
    vss: &Coll<'s, (ConfigKey, ResolvedVs)>,
    http_ports: Coll<'s, (ScopeKey, u16)>,
) -> Built<'s, ScopeKey> {
    let tcp =
        super::virtual_services::with_mesh_vs(tcp_ports(visible, services, specs), mesh_vss, vss)
            .map(
                |((s, _), ((port, addr, bind, registry_only, service), vs))| {
                    let row = PortRow::Tcp {
                        addr,
                        bind,
                        registry_only,
                        service,
                        vs,
                    };
                    ((s, port), row)
                },
            );
    let provenance = tcp.clone().flat_map(|((s, port), row)| {
        let PortRow::Tcp {
            addr, service, vs, ..
        } = row
        else {
            return Vec::new();
        };
        let key = (
            Holder::Scope(s),
            ResourceType::Listener,
            listener::listener_name(&addr, port),
        );
        let mut rows = vec![(key.clone(), service.origin)];
        rows.extend(vs.map(|v| (key, v.vs.key)));
        rows
    });
    let resources = tcp
        .concat(http_ports.map(|k| (k, PortRow::Http)))
        .reduce(|(s, port), vals: &[(&PortRow, isize)], out| {
            if let Some(l) = port_listener(s, *port, vals) {
                out.push((l, 1isize));
            }
        })
        .map(|((s, _), r)| (s, r));
    Built {
        resources,
        provenance,
    }
}

/// One (scope, port)'s listener from all its rows at once.
fn port_listener(s: &ScopeKey, port: u16, vals: &[(&PortRow, isize)]) -> Option<Resource> {
    let mut http = false;
    let mut targets = Vec::new();
    let mut how = None;
    for (row, _) in vals {
        match row {
            PortRow::Http => http = true,
            PortRow::Tcp {
                addr,
                bind,
                registry_only,
                service,
                vs,
            } => {
                how = Some((addr.as_str(), *bind, *registry_only));
                targets.push((service.clone(), vs.clone()));
            }
        }
    }
    let tcp = how.map(|(addr, bind, registry_only)| TcpPort {
        addr,
        bind,
        registry_only,
        targets: &targets,
    });
    assemble::sidecar_port_listener(s.namespace(), port, http, tcp)
}
