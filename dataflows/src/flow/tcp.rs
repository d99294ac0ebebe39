//! Sidecar TCP listeners. In: the hosts each (scope, egress listener) sees, the services in
//! effect, the scopes' Sidecar specs, the mesh VirtualServices in effect and their resolved
//! form, and the captured ports that need the HTTP catch-all chain ([`super::routes`]). Out:
//! one outbound listener per (scope, port) — TCP chains per service (by destination
//! address) and the HTTP chain where HTTP services share the port — with the services and
//! VirtualServices it was built from. A port with HTTP services only keeps the plain
//! catch-all listener. A TCP service a listener cannot reach is an error naming it.

use super::visibility::Visible;
use super::{Built, Coll};
use crate::assemble::{self, PortListener, TcpPort};
use crate::model::*;
use crate::rules;
use crate::translate::listener;
use crate::translate::tcp::SidecarListener;
use serde::{Deserialize, Serialize};

/// What a sidecar port's listener is built from.
#[allow(clippy::large_enum_variant)] // rows live in arrangements, not on hot stacks
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum PortRow {
    /// HTTP services need the port's catch-all chain.
    Http,
    /// The idle timeout of a host the port's TCP routes go to, where its rule sets one.
    Idle(Hostname, TcpTimeout),
    /// A TCP service reached on the port, and how the listener is reached.
    Tcp { how: PortListener, service: Service },
    /// A mesh VirtualService covering a TCP service's host on the port, with its place
    /// among those covering it ([`super::virtual_services::Covering`]).
    Vs {
        /// The listener's address (for provenance).
        addr: String,
        host: Hostname,
        order: ((u8, usize), u8, ConfigKey),
        vs: ResolvedVs,
    },
}

type TcpRows<'s> = Coll<'s, ((ScopeKey, Hostname), (u16, PortListener, Service, usize))>;

/// `((scope, host), (port, listener, service, egress listener))` for every TCP listener a
/// visible service joins, through the egress listener that made it visible (its index:
/// VirtualServices are selected per egress listener).
fn tcp_ports<'s>(
    visible: &Visible<'s>,
    services: &Coll<'s, (Hostname, HostServices)>,
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
        .map(|(port, addr, bind, detect)| {
            let how = PortListener::new(addr, bind, detect, v.spec);
            (port, how, v.service.clone(), v.idx)
        })
        .collect()
    })
}

pub(super) fn sidecar<'s>(
    visible: &Visible<'s>,
    services: &Coll<'s, (Hostname, HostServices)>,
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
    covering: super::virtual_services::Covering<'s>,
    vss: &Coll<'s, (ConfigKey, ResolvedVs)>,
    http_ports: Coll<'s, (ScopeKey, u16)>,
    tcp_idle: &Coll<'s, ((ScopeKey, Hostname), TcpTimeout)>,
) -> (Built<'s, ScopeKey>, Coll<'s, ConfigError>) {
    let ports = tcp_ports(visible, services, specs);
    let service_rows = ports
        .clone()
        .map(|((s, _), (port, how, service, _))| ((s, port), PortRow::Tcp { how, service }));
    // Every VirtualService covering each TCP service's host that the egress listener of
    // the port imports, on each of its ports.
    let vs_rows = ports
        .map(|((s, h), (port, how, _, idx))| ((s, h, idx), (port, how.addr)))
        .join_map(covering, |(s, h, _), (port, addr), order| {
            (
                order.2.clone(),
                ((s.clone(), h.clone()), *port, addr.clone(), order.clone()),
            )
        })
        .join_map(vss.clone(), |_, ((s, h), port, addr, order), rvs| {
            (
                (s.clone(), *port),
                PortRow::Vs {
                    addr: addr.clone(),
                    host: h.clone(),
                    order: order.clone(),
                    vs: rvs.clone(),
                },
            )
        });
    let tcp = service_rows.concat(vs_rows);
    let provenance = tcp.clone().flat_map(|((s, port), row)| {
        let (addr, from) = match row {
            PortRow::Tcp { how, service } => (how.addr, service.origin),
            PortRow::Vs { addr, vs, .. } => (addr, vs.vs.key),
            _ => return None,
        };
        let key = (
            Holder::Scope(s),
            ResourceType::Listener,
            listener::listener_name(&addr, port),
        );
        Some((key, from))
    });
    // The idle timeouts of the hosts the port's routes go to: the services' own (their
    // default chains) and their VirtualServices' `tcp[]` and `tls[]` destinations.
    let idle = tcp
        .clone()
        .flat_map(|((s, port), row)| {
            let hosts: Vec<Hostname> = match row {
                PortRow::Tcp { service, .. } => vec![service.hostname],
                PortRow::Vs { vs, .. } => {
                    let tcp = vs.vs.tcp.iter().flat_map(|r| r.route.iter());
                    let tls = vs.vs.tls.iter().flat_map(|r| r.route.iter());
                    tcp.chain(tls).map(|d| d.host.clone()).collect()
                }
                _ => Vec::new(),
            };
            hosts
                .into_iter()
                .map(|h| ((s.clone(), h), port))
                .collect::<Vec<_>>()
        })
        .distinct()
        .join_map(tcp_idle.clone(), |(s, h), port, ms| {
            ((s.clone(), *port), PortRow::Idle(h.clone(), *ms))
        });
    // Per (scope, port): the listener (`Ok`), and an error (`Err`) per TCP service it cannot
    // reach, which the same error from every other scope collapses into.
    let out = tcp
        .concat(http_ports.map(|k| (k, PortRow::Http)))
        .concat(idle)
        .reduce(|(s, port), vals: &[(&PortRow, isize)], out| {
            let built = port_listener(s, *port, vals);
            out.extend(built.listener.map(|l| (Ok(l), 1isize)));
            for svc in built.unreachable {
                out.push((Err(unreachable(&svc, *port)), 1isize));
            }
        })
        .map(|((s, _), r)| (s, r));
    let resources = out.clone().flat_map(|(s, r)| r.ok().map(|r| (s, r)));
    let errors = out.flat_map(|(_, r)| r.err()).distinct();
    let built = Built {
        resources,
        provenance,
    };
    (built, errors)
}

/// What is said of a TCP service a sidecar's listener cannot reach.
fn unreachable(svc: &Service, port: u16) -> ConfigError {
    ConfigError {
        object: svc.origin.clone(),
        code: ErrorCode::TcpServiceConflict,
        message: format!(
            "{}: port {port} (TCP) cannot be told apart from another service on that port \
             where sidecars see both (it has no address of its own, an earlier service has \
             its addresses or, for TLS, the name (SNI) of its host, or a bound egress \
             listener serves another); those sidecars do not route its connections",
            svc.hostname
        ),
    }
}

/// One (scope, port)'s listener from all its rows at once.
fn port_listener(s: &ScopeKey, port: u16, vals: &[(&PortRow, isize)]) -> SidecarListener {
    let mut http = false;
    let mut services = Vec::new();
    let mut covering: std::collections::BTreeMap<&Hostname, Vec<(&_, &ResolvedVs)>> =
        std::collections::BTreeMap::new();
    let mut how = None;
    let mut idle = TcpTimeouts::new();
    for (row, _) in vals {
        match row {
            PortRow::Http => http = true,
            PortRow::Idle(h, ms) => {
                idle.insert(h.clone(), *ms);
            }
            PortRow::Tcp { how: h, service } => {
                how = Some(h);
                services.push(service);
            }
            PortRow::Vs {
                host, order, vs, ..
            } => {
                covering.entry(host).or_default().push((order, vs));
            }
        }
    }
    let targets: Vec<_> = services
        .into_iter()
        .map(|svc| {
            let mut vss = covering.remove(&svc.hostname).unwrap_or_default();
            vss.sort_by(|a, b| a.0.cmp(b.0));
            let vss = vss.into_iter().map(|(_, v)| v.clone()).collect();
            (svc.clone(), vss)
        })
        .collect();
    let tcp = how.map(|how| TcpPort {
        how,
        targets: &targets,
        idle: &idle,
    });
    assemble::sidecar_port_listener(s.source(), port, http, tcp)
}
