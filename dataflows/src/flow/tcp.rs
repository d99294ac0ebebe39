//! Sidecar TCP listeners. In: the hosts each (scope, egress listener) sees, the services in
//! effect, the scopes' Sidecar specs, the mesh VirtualServices in effect and their resolved
//! form, and the captured ports that need the HTTP catch-all chain ([`super::routes`]). Out:
//! one outbound listener per (scope, port) — TCP chains per service (by destination
//! address) and the HTTP chain where HTTP services share the port — with the services and
//! VirtualServices it was built from. A port with HTTP services only keeps the plain
//! catch-all listener. A TCP service a listener cannot reach is an error naming it.

use super::visibility::Visible;
use super::{Built, Coll};
use crate::assemble::{self, TcpPort};
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
    Tcp {
        addr: String,
        bind: bool,
        /// Where connections no service claims go.
        fallback: String,
        service: Service,
        vs: Option<ResolvedVs>,
    },
}

type TcpRows<'s> = Coll<'s, ((ScopeKey, Hostname), (u16, String, bool, String, Service))>;

/// `((scope, host), (port, address, bind, fallback, service))` for every TCP listener
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
        .map(|(port, addr, bind)| {
            let fallback = v.spec.outbound_fallback();
            (port, addr, bind, fallback, v.service.clone())
        })
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
    tcp_idle: &Coll<'s, ((ScopeKey, Hostname), TcpTimeout)>,
) -> (Built<'s, ScopeKey>, Coll<'s, ConfigError>) {
    let tcp =
        super::virtual_services::with_mesh_vs(tcp_ports(visible, services, specs), mesh_vss, vss)
            .map(|((s, _), ((port, addr, bind, fallback, service), vs))| {
                let row = PortRow::Tcp {
                    addr,
                    bind,
                    fallback,
                    service,
                    vs,
                };
                ((s, port), row)
            });
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
    // The idle timeouts of the hosts the port's routes go to: the services' own (their
    // default chains) and their VirtualServices' `tcp[]` and `tls[]` destinations.
    let idle = tcp
        .clone()
        .flat_map(|((s, port), row)| {
            let PortRow::Tcp { service, vs, .. } = row else {
                return Vec::new();
            };
            let routed = vs.iter().flat_map(|v| {
                let tcp = v.vs.tcp.iter().flat_map(|r| r.route.iter());
                let tls = v.vs.tls.iter().flat_map(|r| r.route.iter());
                tcp.chain(tls).map(|d| d.host.clone()).collect::<Vec<_>>()
            });
            std::iter::once(service.hostname)
                .chain(routed)
                .map(|h| ((s.clone(), h), port))
                .collect()
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
    let mut targets = Vec::new();
    let mut how = None;
    let mut idle = TcpTimeouts::new();
    for (row, _) in vals {
        match row {
            PortRow::Http => http = true,
            PortRow::Idle(h, ms) => {
                idle.insert(h.clone(), *ms);
            }
            PortRow::Tcp {
                addr,
                bind,
                fallback,
                service,
                vs,
            } => {
                how = Some((addr.as_str(), *bind, fallback.as_str()));
                targets.push((service.clone(), vs.clone()));
            }
        }
    }
    let tcp = how.map(|(addr, bind, fallback)| TcpPort {
        addr,
        bind,
        fallback,
        targets: &targets,
        idle: &idle,
    });
    assemble::sidecar_port_listener(s.source(), port, http, tcp)
}
