//! Scope-level assembly shared by the dataflow and the naive recompute: given the inputs a
//! scope sees, which resources it holds. The dataflow decides *what* each scope sees
//! incrementally; these functions decide what that means in Envoy terms. This file holds
//! a sidecar scope's; `router.rs` a gateway proxy's (re-exported here), with its TLS
//! servers in `router_tls.rs` and what both read of the Gateways' servers in `binding.rs`.

mod binding;
mod router;
pub mod router_tls;

pub(crate) use binding::{add_via, sort_vhost};
pub use router::{
    http_placements, http_route_configs, https_redirect_hosts, router_resources, router_servers,
    HttpPlacement, HttpRouteConfig, Router,
};

use crate::model::*;
use crate::rules::{egress_bind, egress_listeners};
use crate::translate::tcp::{OutboundPort, TcpTarget};
use crate::translate::{cluster, listener, tcp};

/// Clusters every proxy of a scope holds whatever it sees. Gateways have no original
/// destination listeners, so only sidecars get `PassthroughCluster`; proxyless clients
/// name every cluster they use, so they need neither.
pub fn fixed_clusters(scope: &ScopeKey, connect_timeout_ms: u64) -> Vec<Resource> {
    match scope {
        ScopeKey::Sidecar {
            proxyless: true, ..
        } => Vec::new(),
        ScopeKey::Sidecar { .. } => vec![
            cluster::passthrough(connect_timeout_ms),
            cluster::blackhole(),
        ],
        ScopeKey::Router { .. } => vec![cluster::blackhole()],
    }
}

/// A router scope's resources with what its security policies make its listeners refuse
/// ([`ScopeKey::router_security`]).
pub fn apply_router_security(s: &ScopeKey, r: Resource) -> Option<Resource> {
    match s.router_security() {
        Some(sec) => listener::with_refusals(r, sec),
        None => Some(r),
    }
}

/// Resource `r` as proxies whose node metadata says `IDLE_TIMEOUT` (`idle_ns`) get it: a
/// listener with their idle timeout ([`listener::with_idle_timeout`]); anything else, and
/// anything for proxies without one, as built. Applied to every listener of a scope
/// ([`ScopeKey::idle_timeout_ns`]) and to a proxy's own `virtualInbound`.
pub fn apply_idle_timeout(idle_ns: Option<u64>, r: Resource) -> Resource {
    match idle_ns {
        Some(ns) if r.rtype == ResourceType::Listener => listener::with_idle_timeout(&r, ns),
        _ => r,
    }
}

/// Resource `r` under the mesh's `pathNormalization` `n`: a listener's connection managers
/// rewritten ([`listener::with_path_normalization`]); anything else, and anything under
/// `BASE` (as every connection manager is built), as built.
pub fn apply_path_normalization(n: PathNormalization, r: Resource) -> Resource {
    if n.is_base() || r.rtype != ResourceType::Listener {
        return r;
    }
    listener::with_path_normalization(&r, n)
}

/// Listeners of a sidecar scope that do not depend on services: one per explicit egress
/// listener, plus `virtualOutbound` where traffic is captured, and the listeners and
/// clusters of its `ingress` (with what the security policies make the bound ones refuse,
/// `sec`). Proxyless clients have no sockets to listen on.
pub fn sidecar_fixed_listeners(
    spec: &ScopeSpec,
    interception_none: bool,
    proxyless: bool,
    sec: &InboundSecurity,
) -> Vec<Resource> {
    let mut out = Vec::new();
    if proxyless {
        return out;
    }
    for l in egress_listeners(spec.sidecar.as_ref()) {
        if let Some(port) = &l.port {
            if port.protocol.is_http() {
                let (addr, bind) = egress_bind(&l, interception_none);
                out.push(listener::http_listener(
                    &addr,
                    port.number,
                    bind,
                    &port.number.to_string(),
                    true,
                ));
            }
        }
    }
    if !interception_none {
        out.push(listener::virtual_outbound(&spec.outbound_fallback()));
    }
    out.extend(sidecar_ingress(spec, interception_none, sec));
    out
}

/// The listeners of the Sidecar's `ingress` the proxy binds itself, with what the security
/// policies make them refuse (`sec`); a captured proxy reaches the port's cluster through
/// `virtualInbound`.
fn sidecar_ingress(
    spec: &ScopeSpec,
    interception_none: bool,
    sec: &InboundSecurity,
) -> Vec<Resource> {
    spec.sidecar
        .iter()
        .flat_map(|s| &s.ingress)
        .filter(|l| interception_none || l.capture_none)
        .map(|l| {
            let addr = l.bind.as_deref().unwrap_or("0.0.0.0");
            listener::ingress_listener(
                addr,
                l.inbound(),
                spec.detection_timeout_ms,
                sec,
                &spec.inbound_mtls,
            )
        })
        .collect()
}

/// The Sidecar's `ingress` ports, each with whether a captured proxy reaches it through
/// `virtualInbound` (not `captureMode: NONE`, which binds a listener of its own).
pub fn ingress_ports(spec: &ScopeSpec) -> Vec<(InboundPort, bool)> {
    spec.sidecar
        .iter()
        .flat_map(|s| &s.ingress)
        .map(|l| (l.inbound(), !l.capture_none))
        .collect()
}

/// What the inbound cluster of a proxy's `port` is built from, if it has one: its
/// Sidecar's `ingress` listener for the port (to its `defaultEndpoint`), else — unless the
/// Sidecar has `ingress` listeners, which replace the proxy's own ports, as in Istio — the
/// service port `own` reaching it (to the application on loopback). Its connection pool:
/// the Sidecar's for the port ([`SidecarInbound::pool`]), else that of `rule`, the pools of
/// the DestinationRule of `own`'s host ([`inbound_pool_at`] the service port, or for an
/// `ingress` listener at its port, as Istio looks it up).
pub fn inbound_cluster_spec(
    port: u16,
    own: Option<&OwnPort>,
    sidecar: Option<&SidecarInbound>,
    rule: Option<&InboundRulePools>,
) -> Option<InboundClusterSpec> {
    let ingress = sidecar.and_then(|s| s.ingress.iter().find(|l| l.port == port));
    let replaced = sidecar.is_some_and(|s| !s.ingress.is_empty());
    let (endpoint, protocol, policy_port) = match (ingress, own) {
        (Some(l), _) => (l.endpoint.clone(), l.protocol, l.port),
        (None, Some(o)) if !replaced => {
            (("127.0.0.1".to_string(), port), o.protocol, o.service_port)
        }
        _ => return None,
    };
    let pool = sidecar
        .and_then(|s| s.pool(port))
        .or_else(|| own.and(rule).and_then(|r| inbound_pool_at(r, policy_port)))
        .cloned();
    Some(InboundClusterSpec {
        port,
        endpoint,
        protocol,
        pool,
        fail_closed: ingress.and_then(|l| l.fail_closed.clone()),
    })
}

/// Route configuration names an explicit egress listener needs even with no services
/// (none for proxyless clients: their routes exist only for the services they see).
pub fn sidecar_fixed_routes(
    spec: &ScopeSpec,
    interception_none: bool,
    proxyless: bool,
) -> Vec<(u16, UnknownHosts)> {
    if proxyless {
        return Vec::new();
    }
    egress_listeners(spec.sidecar.as_ref())
        .iter()
        .filter_map(|l| {
            let port = l.port.as_ref().filter(|p| p.protocol.is_http())?;
            let unknown = if egress_bind(l, interception_none).1 {
                UnknownHosts::None
            } else {
                UnknownHosts::captured(spec)
            };
            Some((port.number, unknown))
        })
        .collect()
}

/// The catch-all outbound listener for a captured port (`0.0.0.0_PORT`, not bound).
pub fn catchall_listener(port: u16) -> Resource {
    listener::http_listener("0.0.0.0", port, false, &port.to_string(), false)
}

/// How a sidecar port's TCP listener is reached and what it does beyond its services'
/// chains: from the egress listener that made them visible and the scope's spec.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct PortListener {
    /// `0.0.0.0`, or the egress listener's `bind`.
    pub addr: String,
    /// Bound itself rather than handed over by `virtualOutbound`.
    pub bind: bool,
    /// Its egress listener names no protocol: every service is told per connection.
    pub detect: bool,
    /// Where connections no service claims go ([`ScopeSpec::outbound_fallback`]).
    pub fallback: String,
    /// The mesh's `protocolDetectionTimeout` ([`ScopeSpec::detection_timeout_ms`]).
    pub detection_ms: Option<u64>,
}

impl PortListener {
    /// A listener as [`crate::rules::sidecar_tcp_ports`] places it (`addr`, `bind`,
    /// `detect`), in a scope of `spec`.
    pub fn new(addr: String, bind: bool, detect: bool, spec: &ScopeSpec) -> PortListener {
        PortListener {
            addr,
            bind,
            detect,
            fallback: spec.outbound_fallback(),
            detection_ms: spec.detection_timeout_ms,
        }
    }
}

/// TCP services a sidecar reaches on one port, and how the port's listener is reached.
pub struct TcpPort<'a> {
    pub how: &'a PortListener,
    pub targets: &'a [TcpTarget],
    /// The idle timeouts of the hosts the port's routes go to.
    pub idle: &'a TcpTimeouts,
}

/// The outbound listener of a sidecar port: the HTTP catch-all alone (`http`: HTTP services
/// need it), or, with TCP services on the port, their chains (and the HTTP one); with the
/// TCP services it cannot reach.
pub fn sidecar_port_listener(
    source: Source,
    port: u16,
    http: bool,
    tcp: Option<TcpPort>,
) -> tcp::SidecarListener {
    let Some(t) = tcp.filter(|t| !t.targets.is_empty()) else {
        return tcp::SidecarListener {
            listener: http.then(|| catchall_listener(port)),
            unreachable: Vec::new(),
        };
    };
    let how = t.how;
    let p = OutboundPort {
        addr: &how.addr,
        port,
        bind: how.bind,
        http: http && !how.bind,
        fallback: &how.fallback,
        source,
        idle: t.idle,
        detection_ms: how.detection_ms,
        detect: how.detect,
    };
    tcp::sidecar_listener(&p, t.targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A proxy without an `IDLE_TIMEOUT` of its own gets its listeners as built
    /// (`translate::listener`'s tests cover the timeout itself).
    #[test]
    fn no_idle_timeout_leaves_listeners_as_built() {
        let ports = [
            InboundPort {
                port: 9080,
                proxying: Proxying::Http,
                tls: None,
            },
            InboundPort {
                port: 27017,
                proxying: Proxying::Tcp,
                tls: None,
            },
        ];
        let vin = listener::virtual_inbound(&ports, None);
        assert_eq!(apply_idle_timeout(None, vin.clone()), vin);
    }
}
