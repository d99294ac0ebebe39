//! Domain records that flow through the dataflow: validated, protocol-free views of
//! Kubernetes and Istio objects. Parsing and validation live in the `meshflow` crate
//! (`src/config/`); Envoy protobufs live in `translate/`. Every record is totally
//! ordered and hashable so differential dataflow can arrange and exchange it.
//!
//! One file per kind or concept, all re-exported here: every record is `crate::model::X`
//! wherever it lives. The model imports nothing of `translate` (the names of Istio's
//! clusters are in [`names`], which `translate` re-exports).

mod authz;
mod destination_rule;
mod ext_authz;
mod gateway;
pub mod gateway_api;
mod host_services;
mod inbound;
mod jwt;
mod locality;
mod mesh;
mod mtls_hold;
pub mod names;
mod output;
mod scope;
mod security;
mod service;
mod sidecar;
mod tls;
mod virtual_service;

pub use authz::*;
pub use destination_rule::*;
pub use ext_authz::*;
pub use gateway::*;
pub use gateway_api::*;
pub use host_services::*;
pub use inbound::*;
pub use jwt::*;
pub use locality::*;
pub use mesh::*;
pub use mtls_hold::*;
pub use names::*;
pub use output::*;
pub use scope::*;
pub use security::*;
pub use service::*;
pub use sidecar::*;
pub use tls::*;
pub use virtual_service::*;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Fully qualified service hostname, e.g. `reviews.default.svc.cluster.local`.
pub type Hostname = String;

/// Istio node id of a connected proxy, e.g. `sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local`.
pub type ProxyId = String;

/// Kubernetes-style label set; ordered so records compare and hash deterministically.
pub type Labels = BTreeMap<String, String>;

/// The kind of an input object, as it appears in error messages and debug output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Kind {
    Namespace,
    Service,
    Endpoints,
    EndpointSlice,
    Pod,
    VirtualService,
    DestinationRule,
    Gateway,
    ServiceEntry,
    Sidecar,
    WorkloadEntry,
    /// Istio's mesh config (a file, or the `istio` ConfigMap's `mesh` key).
    MeshConfig,
    /// A Kubernetes Secret holding TLS material (gateway `credentialName`).
    Secret,
    /// security.istio.io kinds, read by the fail-closed stopgap ([`SecurityPolicy`]).
    PeerAuthentication,
    AuthorizationPolicy,
    RequestAuthentication,
    /// The Gateway API's `Gateway` (gateway.networking.k8s.io).
    KubernetesGateway,
    HttpRoute,
    ReferenceGrant,
    GrpcRoute,
    TcpRoute,
    TlsRoute,
    /// The Gateway API's `GatewayClass` (cluster-scoped).
    GatewayClass,
    /// The Gateway API's `BackendTLSPolicy`: TLS from proxies to a Service's endpoints.
    BackendTlsPolicy,
    /// A Kubernetes ConfigMap, read for the CA bundle (`ca.crt`) a BackendTLSPolicy names.
    ConfigMap,
    /// The Gateway API's `ListenerSet`: listeners another object adds to a Gateway.
    ListenerSet,
}

/// Identity of an input object: kind/namespace/name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConfigKey {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl ConfigKey {
    pub fn new(kind: Kind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ConfigKey {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// A kind as its users write it: the Kubernetes and Istio kinds by their own names, the
/// Gateway API's as its `kind` field spells them (`HTTPRoute`, not the variant's
/// `HttpRoute`), its `Gateway` with its group (Istio's `Gateway` has the bare name).
impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::KubernetesGateway => f.write_str("Gateway.gateway.networking.k8s.io"),
            Kind::HttpRoute => f.write_str("HTTPRoute"),
            Kind::GrpcRoute => f.write_str("GRPCRoute"),
            Kind::TcpRoute => f.write_str("TCPRoute"),
            Kind::TlsRoute => f.write_str("TLSRoute"),
            Kind::BackendTlsPolicy => f.write_str("BackendTLSPolicy"),
            Kind::ListenerSet => f.write_str("ListenerSet"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// Application protocol of a port, from its name prefix or `appProtocol` (Istio's rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Protocol {
    Http,
    Http2,
    Grpc,
    Tcp,
    /// TLS the proxy does not terminate (`tls`, `https`): proxied as TCP where the service's
    /// address tells it apart, and routed by SNI (`tls[]` routes) there; without an address
    /// it is told apart by SNI alone (its routes' names, then its host name).
    Tls,
    /// Named by neither a known name prefix nor `appProtocol`: told per connection, as
    /// Istio's protocol sniffing does (Envoy's HTTP inspector), HTTP/1.1 and HTTP/2 without
    /// TLS through the HTTP routes, anything else as TCP.
    Auto,
}

impl Protocol {
    /// Declared HTTP (HTTP/1.1, HTTP/2, gRPC).
    pub fn is_http(self) -> bool {
        matches!(self, Protocol::Http | Protocol::Http2 | Protocol::Grpc)
    }

    /// Proxied by `tcp_proxy`: TCP, and TLS that is not terminated.
    pub fn is_tcp(self) -> bool {
        matches!(self, Protocol::Tcp | Protocol::Tls)
    }

    /// Gets HTTP routes: declared HTTP, or detected as HTTP on some connections.
    pub fn carries_http(self) -> bool {
        self.is_http() || self == Protocol::Auto
    }

    /// Gets `tcp_proxy` chains: declared TCP or TLS, or detected as other than HTTP on some
    /// connections.
    pub fn carries_tcp(self) -> bool {
        self.is_tcp() || self == Protocol::Auto
    }
}

/// One input record: what a source inserts or retracts.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Record {
    Service(Service),
    Endpoint(Hostname, RawEndpoint),
    Workload(Workload),
    VirtualService(VirtualService),
    DestinationRule(DestinationRule),
    Gateway(Gateway),
    Sidecar(Sidecar),
    Proxy(Proxy),
    Secret(TlsSecret),
    /// A ServiceEntry host's `workloadSelector`.
    Selection(Hostname, WorkloadSelection),
    /// A PeerAuthentication, AuthorizationPolicy or RequestAuthentication.
    Security(SecurityPolicy),
    /// A workload's PeerAuthentication change part-way through (written by the runtime's
    /// transition controller, never by a source).
    MtlsHold(MtlsHold),
    /// A Gateway API object, translated by the dataflow's `gateway_api` stage.
    GatewayApi(GatewayApiObject),
    /// The mesh config in effect (one per layer). Keep it the last variant: records sort by
    /// variant, and the naive recompute reads mesh records from the end of a snapshot.
    Mesh(MeshSettings),
}
