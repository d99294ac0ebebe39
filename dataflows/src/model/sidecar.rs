//! Sidecar: what its proxies see outbound (`egress`), where traffic outside the registry
//! goes (`egressProxy`), and how the workload receives traffic (`ingress`).

use super::names::outbound_cluster_name;
use super::{ConfigKey, Hostname, InboundPool, InboundPort, Labels, Protocol, Proxying, ServerTls};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Sidecar {
    pub key: ConfigKey,
    /// `workloadSelector.labels`; `None` makes it the namespace default.
    pub selector: Option<Labels>,
    pub egress: Vec<EgressListener>,
    /// `outboundTrafficPolicy.mode: REGISTRY_ONLY`: traffic to hosts outside the registry is
    /// blocked (no `allow_any` virtual host, `virtualOutbound` to `BlackHoleCluster`).
    /// `None`: the Sidecar sets no mode, the mesh's `outboundTrafficPolicy` applies.
    pub registry_only: Option<bool>,
    /// `ingress[]`: how the workload receives traffic, per port.
    #[serde(default)]
    pub ingress: Vec<IngressListener>,
    /// `outboundTrafficPolicy.egressProxy` (only beside mode `ALLOW_ANY`, as Istio
    /// validates): where traffic to destinations outside the registry goes instead of
    /// passing through.
    #[serde(default)]
    pub egress_proxy: Option<EgressProxy>,
    /// `inboundConnectionPool`: the connection pool of every inbound cluster of the
    /// workload whose `ingress` listener sets none, in place of the DestinationRule's.
    #[serde(default)]
    pub inbound_connection_pool: Option<InboundPool>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EgressPort {
    pub number: u16,
    pub protocol: Protocol,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EgressListener {
    pub port: Option<EgressPort>,
    pub bind: Option<String>,
    /// `captureMode: NONE`: the listener binds its address itself instead of relying on
    /// traffic redirection.
    pub capture_none: bool,
    /// `namespace/host` patterns; namespace may be `*`, `.` or `~`.
    pub hosts: Vec<String>,
}

/// A Sidecar's `egressProxy`: the cluster `outbound|PORT|SUBSET|HOST` that takes what would
/// pass through.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EgressProxy {
    /// Fully qualified.
    pub host: Hostname,
    pub subset: Option<String>,
    pub port: u16,
}

impl EgressProxy {
    /// Its cluster's name.
    pub fn cluster(&self) -> String {
        outbound_cluster_name(self.port, self.subset.as_deref(), &self.host)
    }
}

/// A Sidecar `ingress` listener: traffic for the workload's `port` goes to `endpoint`
/// (`defaultEndpoint`), through a listener of its own where the proxy binds it (`captureMode:
/// NONE`, or a proxy whose traffic is not captured), else through `virtualInbound`. Both
/// accept plaintext and the mesh's mTLS (Istio's PERMISSIVE default), or, with `tls`, TLS
/// alone, terminated with the listener's certificate.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct IngressListener {
    pub port: u16,
    /// The address the listener binds (`bind`; `0.0.0.0` when unset).
    pub bind: Option<String>,
    /// `defaultEndpoint` as (IP, port): `127.0.0.1:PORT` when unset.
    pub endpoint: (String, u16),
    pub capture_none: bool,
    /// The port's protocol: an HTTP one gets the HTTP chains, TCP and TLS `tcp_proxy`, an
    /// unset one both, told per connection. With `tls`, the protocol after termination
    /// (HTTPS is HTTP, TLS is TCP, as Istio reads it).
    #[serde(default = "http_protocol")]
    pub protocol: Protocol,
    /// `tls` (SIMPLE, MUTUAL or OPTIONAL_MUTUAL, certificates from files): the proxy
    /// terminates TLS for clients outside the mesh and the application receives plaintext.
    #[serde(default)]
    pub tls: Option<Box<ServerTls>>,
    /// `connectionPool`: the pool of this port's inbound cluster, over the
    /// DestinationRule's and the Sidecar's `inboundConnectionPool`.
    #[serde(default)]
    pub connection_pool: Option<InboundPool>,
    /// Why the port's inbound cluster has no endpoints, if it fails closed (a `tls` meshflow
    /// cannot terminate as asked: plaintext must not reach the application in its place).
    #[serde(default)]
    pub fail_closed: Option<String>,
}

fn http_protocol() -> Protocol {
    Protocol::Http
}

impl IngressListener {
    /// Its port as the inbound side serves it.
    pub fn inbound(&self) -> InboundPort {
        InboundPort {
            port: self.port,
            proxying: Proxying::of(self.protocol),
            tls: self.tls.clone(),
        }
    }
}

/// What of a Sidecar its proxies' inbound clusters read: `ingress` (which replaces the
/// proxy's own ports) and `inboundConnectionPool`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SidecarInbound {
    pub ingress: Vec<IngressListener>,
    pub inbound_connection_pool: Option<InboundPool>,
}

impl SidecarInbound {
    /// `None` for a Sidecar that says nothing of the inbound side.
    pub fn of(sidecar: &Sidecar) -> Option<SidecarInbound> {
        (!sidecar.ingress.is_empty() || sidecar.inbound_connection_pool.is_some()).then(|| {
            SidecarInbound {
                ingress: sidecar.ingress.clone(),
                inbound_connection_pool: sidecar.inbound_connection_pool.clone(),
            }
        })
    }

    /// The connection pool the Sidecar gives the inbound cluster of `port`: its `ingress`
    /// listener's for that port, else `inboundConnectionPool`, as Istio looks it up.
    pub fn pool(&self, port: u16) -> Option<&InboundPool> {
        self.ingress
            .iter()
            .find(|l| l.port == port && l.connection_pool.is_some())
            .and_then(|l| l.connection_pool.as_ref())
            .or(self.inbound_connection_pool.as_ref())
    }
}
