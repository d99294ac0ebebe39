//! A proxy's inbound side: the ports of its own workload as it serves them, and what its
//! inbound clusters `inbound|PORT||` are built from.

use super::{ConnectionPool, Hostname, Protocol, ServerTls, TrafficPolicy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How the inbound side of a proxy serves a port of its workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
/// Ordered by precedence where services reach one port differently (the greatest wins).
pub enum Proxying {
    /// Through an HTTP connection manager.
    Http,
    /// Told per connection (HTTP inspector; for mTLS, Istio's ALPN): HTTP through the
    /// connection manager, the rest as bytes.
    Detected,
    /// As bytes (`tcp_proxy`).
    Tcp,
}

impl Proxying {
    pub fn of(protocol: Protocol) -> Proxying {
        match protocol {
            p if p.is_http() => Proxying::Http,
            Protocol::Auto => Proxying::Detected,
            _ => Proxying::Tcp,
        }
    }
}

/// A port of a proxy's own workload, as its inbound side serves it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InboundPort {
    pub port: u16,
    /// After TLS termination, where `tls` is set.
    pub proxying: Proxying,
    /// A Sidecar `ingress` listener's `tls`: the port's one chain terminates TLS with it
    /// (in place of the plaintext and mTLS chains), as Istio builds it (boxed: most ports
    /// have none).
    pub tls: Option<Box<ServerTls>>,
}

impl InboundPort {
    /// The ports of `rows` (a target port, and the protocol of a service port reaching it),
    /// sorted, one each: a port some service reaches as TCP or TLS is proxied as TCP, which
    /// also carries HTTP (unparsed), where an HTTP chain would break every TCP client; one
    /// some service names no protocol for is told per connection, unless TCP; else HTTP.
    pub fn merged(rows: impl IntoIterator<Item = (u16, Protocol)>) -> Vec<InboundPort> {
        let mut ports: BTreeMap<u16, Proxying> = BTreeMap::new();
        for (port, protocol) in rows {
            let p = Proxying::of(protocol);
            let e = ports.entry(port).or_insert(p);
            *e = (*e).max(p);
        }
        ports
            .into_iter()
            .map(|(port, proxying)| InboundPort {
                port,
                proxying,
                tls: None,
            })
            .collect()
    }

    /// The ports `virtualInbound` serves for a proxy: its own (`own`, as for [`Self::merged`]),
    /// unless its Sidecar has `ingress` listeners, which then replace them, as in Istio
    /// (`ingress`: each port, and whether traffic reaches it through `virtualInbound`
    /// rather than a listener of its own; only the former are served here).
    pub fn of_proxy(
        own: impl IntoIterator<Item = (u16, Protocol)>,
        ingress: impl IntoIterator<Item = (InboundPort, bool)>,
    ) -> Vec<InboundPort> {
        let ingress: Vec<(InboundPort, bool)> = ingress.into_iter().collect();
        if ingress.is_empty() {
            return Self::merged(own);
        }
        let ports: BTreeMap<u16, InboundPort> = ingress
            .into_iter()
            .filter(|(_, captured)| *captured)
            .map(|(p, _)| (p.port, p))
            .collect();
        ports.into_values().collect()
    }
}

/// A `connectionPool` as an inbound cluster applies it: `tcp.connectTimeout` and the rest
/// (circuit-breaker limits, connection lifetimes, `useClientProtocol`). Istio applies only
/// the connection pool to inbound clusters: no load balancer, outlier detection or TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InboundPool {
    pub connect_timeout_ms: Option<u64>,
    pub pool: Option<ConnectionPool>,
}

impl InboundPool {
    /// The connection pool of `policy` (a rule's policy on one port), if it sets one.
    pub fn of_policy(policy: &TrafficPolicy) -> Option<InboundPool> {
        (policy.connect_timeout_ms.is_some() || policy.connection_pool.is_some()).then(|| {
            InboundPool {
                connect_timeout_ms: policy.connect_timeout_ms,
                pool: policy.connection_pool.as_deref().cloned(),
            }
        })
    }
}

/// What a proxy's inbound cluster `inbound|PORT||` is built from, besides the mesh's
/// connect timeout: where it sends traffic, the protocol of the port (HTTP2 and gRPC
/// ports speak HTTP/2 to the application) and the connection pool in effect (a Sidecar's,
/// else that of the DestinationRule of the service reaching the port).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InboundClusterSpec {
    pub port: u16,
    /// `(IP, port)` of the application.
    pub endpoint: (String, u16),
    pub protocol: Protocol,
    pub pool: Option<InboundPool>,
    /// Why the cluster has no endpoints, if it fails closed
    /// ([`IngressListener::fail_closed`]).
    ///
    /// [`IngressListener::fail_closed`]: super::IngressListener::fail_closed
    pub fail_closed: Option<String>,
}

/// The service port that gives a proxy's own port its inbound cluster: of the services
/// whose endpoints are at one of the proxy's IPs on that port, the least (host, service
/// port), so the choice is stable (Istio takes the first it lists).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OwnPort {
    pub host: Hostname,
    pub service_port: u16,
    pub protocol: Protocol,
}

/// The connection pools a DestinationRule gives inbound clusters: its own policy's (not a
/// subset's), per port a `portLevelSettings` entry names (the entry's, whole: `None` where
/// it sets no pool) and for every other port (`None` key). Empty when it gives none.
pub type InboundRulePools = Vec<(Option<u16>, Option<InboundPool>)>;

/// The pool of `pools` ([`InboundRulePools`]) on service port `port`.
pub fn inbound_pool_at(pools: &InboundRulePools, port: u16) -> Option<&InboundPool> {
    pools
        .iter()
        .find(|(p, _)| *p == Some(port))
        .or_else(|| pools.iter().find(|(p, _)| p.is_none()))
        .and_then(|(_, pool)| pool.as_ref())
}
