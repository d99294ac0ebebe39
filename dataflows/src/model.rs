//! Domain records that flow through the dataflow: validated, protocol-free views of
//! Kubernetes and Istio objects. Parsing and validation live in the `meshflow` crate
//! (`src/config/`); Envoy protobufs live in `translate/`. Every record is totally
//! ordered and hashable so differential dataflow can arrange and exchange it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Fully qualified service hostname, e.g. `reviews.default.svc.cluster.local`.
pub type Hostname = String;
/// Istio node id of a connected proxy, e.g. `sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local`.
pub type ProxyId = String;
/// Kubernetes-style label set; ordered so records compare and hash deterministically.
pub type Labels = BTreeMap<String, String>;

/// Mesh-wide settings fixed at start-up: what parsing depends on. The settings that may
/// change while serving are [`MeshSettings`], an input record like any other.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MeshConfig {
    /// Namespace whose Sidecar/DestinationRule act as mesh-wide defaults (`istio-system`)
    /// until a mesh config says otherwise: the built-in [`MeshSettings`]' root namespace.
    pub root_namespace: String,
    /// Cluster domain suffix (`cluster.local`).
    pub domain_suffix: String,
    /// The largest RE2 program a regex match may compile to: the proxies' runtime value
    /// `re2.max_program_size.error_level` (Envoy's default is 100). A larger one is refused
    /// on input, as the proxy would refuse the route configuration holding it.
    pub max_regex_program_size: u32,
    /// The PEM of the root certificate(s) of the CA that issues workload certificates
    /// (`serve`'s `--ca-cert`, or the root it generated): served to proxies as SDS
    /// `ROOTCA`. Fixed for the process's life, so it is not part of a mesh config;
    /// [`MeshSettings::in_effect`] carries it into the settings every layer has.
    #[serde(default)]
    pub trust_root: Option<String>,
    /// The proxies' file of trusted CA certificates (`--system-ca-bundle`): what a
    /// DestinationRule's `SIMPLE`/`MUTUAL` TLS without `caCertificates` verifies the server
    /// against, as Istio's proxies verify against their operating system's bundle. A path
    /// on the proxy's file system, fixed for the process's life;
    /// [`MeshSettings::in_effect`] carries it into the settings every layer has.
    #[serde(default = "default_system_ca_bundle")]
    pub system_ca_bundle: String,
}

/// Where Debian-based proxy images (Istio's among them) keep the system's CA bundle.
pub const DEFAULT_SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

fn default_system_ca_bundle() -> String {
    DEFAULT_SYSTEM_CA_BUNDLE.to_string()
}

impl Default for MeshConfig {
    fn default() -> Self {
        MeshConfig {
            root_namespace: "istio-system".into(),
            domain_suffix: "cluster.local".into(),
            max_regex_program_size: 100,
            trust_root: None,
            system_ca_bundle: default_system_ca_bundle(),
        }
    }
}

/// Which layer a [`MeshSettings`] record comes from; the highest one present is in effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MeshLayer {
    /// Istio's defaults with the command line's overrides, inserted by the engine itself,
    /// so a mesh without a mesh config (or before it is read) has settings.
    Builtin,
    /// A mesh config file or ConfigMap (with the command line's overrides on top).
    Configured,
}

/// Istio's MeshConfig, the part that changes generated config: an input of the dataflow,
/// so a change reaches only the proxies whose output it changes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MeshSettings {
    pub layer: MeshLayer,
    /// The mesh config it was read from (`None`: built in).
    pub origin: Option<ConfigKey>,
    /// `rootNamespace`: its namespace-wide Sidecar and its DestinationRules apply mesh-wide.
    pub root_namespace: String,
    /// `outboundTrafficPolicy.mode: REGISTRY_ONLY` (a Sidecar's own mode overrides it).
    pub registry_only: bool,
    /// `connectTimeout`, for clusters whose DestinationRule sets none.
    pub connect_timeout_ms: u64,
    /// `defaultHttpRetryPolicy`, for HTTP routes that set no `retries` (`None`: Istio's
    /// built-in default, two attempts).
    pub default_retries: Option<Retries>,
    /// `defaultServiceExportTo`, `defaultVirtualServiceExportTo`,
    /// `defaultDestinationRuleExportTo`: the `exportTo` of objects that set none (empty: `*`).
    pub service_export_to: Vec<String>,
    pub virtual_service_export_to: Vec<String>,
    pub destination_rule_export_to: Vec<String>,
    /// `trustDomain`: workload identities are `spiffe://TRUST_DOMAIN/ns/NS/sa/SA`.
    #[serde(default = "default_trust_domain")]
    pub trust_domain: String,
    /// The CA's root (PEM) from the process's [`MeshConfig`]: the SDS `ROOTCA` proxies
    /// verify peers with. `None` (no CA: `validate`, goldens): no workload secrets are
    /// generated, only the references to them.
    #[serde(default)]
    pub trust_root: Option<String>,
    /// `localityLbSetting`: the locality load balancing of clusters whose DestinationRule
    /// sets none (`None`: Istio's default, enabled with no `distribute` or `failover`).
    #[serde(default)]
    pub locality_lb: Option<LocalityLbSetting>,
    /// The process's [`MeshConfig::system_ca_bundle`]: the CA file `SIMPLE`/`MUTUAL` TLS
    /// without `caCertificates` verifies servers against.
    #[serde(default = "default_system_ca_bundle")]
    pub system_ca_bundle: String,
    /// `protocolDetectionTimeout`: how long sidecar listeners wait for the first bytes they
    /// tell protocols by (`0`: for ever), then go on (`None`: Envoy's 15 s).
    #[serde(default)]
    pub protocol_detection_timeout_ms: Option<u64>,
    /// `enableAutoMtls` (Istio's default: on): clusters whose DestinationRule sets no `tls`
    /// speak the mesh's mutual TLS to the endpoints that run a sidecar (labelled
    /// `security.istio.io/tlsMode: istio`) and plaintext to the others.
    #[serde(default = "yes")]
    pub auto_mtls: bool,
}

fn yes() -> bool {
    true
}

/// What an outbound cluster takes from the mesh settings in effect.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClusterDefaults {
    /// For clusters whose DestinationRule sets none.
    pub connect_timeout_ms: u64,
    /// `ISTIO_MUTUAL` clusters with no subject alt names of their own accept any identity
    /// of this trust domain.
    pub trust_domain: String,
    /// The mesh's `localityLbSetting`, for rules that set none.
    pub locality_lb: Option<LocalityLbSetting>,
    /// The CA file `SIMPLE`/`MUTUAL` TLS without `caCertificates` verifies servers against.
    pub system_ca_bundle: String,
    /// For gateways: a port whose protocol is told per connection speaks HTTP/1.1 upstream
    /// (a gateway's clients negotiate HTTP/2 by ALPN whatever the application speaks), where
    /// a sidecar passes on the request's protocol, as Istio builds them.
    #[serde(default)]
    pub gateway: bool,
    /// The mesh's `enableAutoMtls` ([`MeshSettings::auto_mtls`]).
    #[serde(default = "yes")]
    pub auto_mtls: bool,
}

impl Default for ClusterDefaults {
    fn default() -> Self {
        ClusterDefaults {
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            trust_domain: default_trust_domain(),
            locality_lb: None,
            system_ca_bundle: default_system_ca_bundle(),
            gateway: false,
            auto_mtls: true,
        }
    }
}

impl ClusterDefaults {
    /// As [`Self::of`], for gateways' clusters (`gateway`) or sidecars'.
    pub fn of_client(m: &MeshSettings, gateway: bool) -> ClusterDefaults {
        ClusterDefaults {
            gateway,
            ..ClusterDefaults::of(m)
        }
    }

    pub fn of(m: &MeshSettings) -> ClusterDefaults {
        ClusterDefaults {
            connect_timeout_ms: m.connect_timeout_ms,
            trust_domain: m.trust_domain.clone(),
            locality_lb: m.locality_lb.clone(),
            system_ca_bundle: m.system_ca_bundle.clone(),
            gateway: false,
            auto_mtls: m.auto_mtls,
        }
    }
}

/// Istio's default trust domain.
pub const DEFAULT_TRUST_DOMAIN: &str = "cluster.local";

fn default_trust_domain() -> String {
    DEFAULT_TRUST_DOMAIN.to_string()
}

/// Istio's default connect timeout (`connectTimeout`).
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;

impl MeshSettings {
    /// Whether the mesh's own `localityLbSetting` weighs localities (`distribute`), which
    /// applies to every cluster whose rule sets no `localityLbSetting`.
    pub fn distributes_by_locality(&self) -> bool {
        self.locality_lb
            .as_ref()
            .is_some_and(|l| l.enabled != Some(false) && !l.distribute.is_empty())
    }

    /// The label keys the mesh's own `failoverPriority` reads of a client.
    pub fn failover_priority_keys(&self) -> Vec<String> {
        self.locality_lb
            .as_ref()
            .map(failover_priority_keys)
            .unwrap_or_default()
    }

    /// Istio's defaults, in the root namespace of `mesh`.
    pub fn builtin(mesh: &MeshConfig) -> MeshSettings {
        MeshSettings {
            layer: MeshLayer::Builtin,
            origin: None,
            root_namespace: mesh.root_namespace.clone(),
            registry_only: false,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            default_retries: None,
            service_export_to: Vec::new(),
            virtual_service_export_to: Vec::new(),
            destination_rule_export_to: Vec::new(),
            trust_domain: default_trust_domain(),
            trust_root: mesh.trust_root.clone(),
            locality_lb: None,
            system_ca_bundle: mesh.system_ca_bundle.clone(),
            protocol_detection_timeout_ms: None,
            auto_mtls: true,
        }
    }

    /// The settings in effect among `candidates`: the highest layer's (the least of equals,
    /// so the choice is deterministic), else the built-in ones.
    pub fn in_effect<'a>(
        candidates: impl IntoIterator<Item = &'a MeshSettings>,
        mesh: &MeshConfig,
    ) -> MeshSettings {
        let mut best: Option<&MeshSettings> = None;
        for c in candidates {
            if best.is_none_or(|b| c.layer > b.layer) {
                best = Some(c);
            }
        }
        let mut chosen = best.cloned().unwrap_or_else(|| MeshSettings::builtin(mesh));
        // The CA and the system's bundle are the process's, whichever layer is in effect.
        chosen.trust_root = mesh.trust_root.clone();
        chosen.system_ca_bundle = mesh.system_ca_bundle.clone();
        chosen
    }

    /// The SPIFFE identity of workloads of `namespace` running as `service_account`.
    pub fn spiffe_id(&self, namespace: &str, service_account: &str) -> String {
        spiffe_id(&self.trust_domain, namespace, service_account)
    }

    /// A VirtualService as the mesh defaults complete it: its `exportTo`, and the retry
    /// policy of HTTP routes that set none.
    pub fn complete_vs(&self, mut vs: VirtualService) -> VirtualService {
        if vs.export_to.is_empty() {
            vs.export_to = self.virtual_service_export_to.clone();
        }
        if self.default_retries.is_some() {
            for http in &mut vs.http {
                if http.retries.is_none() {
                    http.retries = self.default_retries.clone();
                }
            }
        }
        vs
    }

    /// A DestinationRule with the mesh's default `exportTo` if it sets none.
    pub fn complete_dr(&self, mut dr: DestinationRule) -> DestinationRule {
        if dr.export_to.is_empty() {
            dr.export_to = self.destination_rule_export_to.clone();
        }
        dr
    }

    /// Whether completing records with these settings changes none of them.
    pub fn completes_nothing(&self) -> bool {
        self.default_retries.is_none()
            && self.service_export_to.is_empty()
            && self.virtual_service_export_to.is_empty()
            && self.destination_rule_export_to.is_empty()
    }

    /// Any record as these settings complete it (records that take no default unchanged).
    pub fn complete(&self, record: Record) -> Record {
        match record {
            Record::Service(s) => Record::Service(self.complete_service(s)),
            Record::VirtualService(v) => Record::VirtualService(self.complete_vs(v)),
            Record::DestinationRule(d) => Record::DestinationRule(self.complete_dr(d)),
            other => other,
        }
    }

    /// A service with the mesh's default `exportTo` if it sets none.
    pub fn complete_service(&self, mut svc: Service) -> Service {
        if svc.export_to.is_empty() {
            svc.export_to = self.service_export_to.clone();
        }
        svc
    }
}

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
        write!(f, "{:?}/{}/{}", self.kind, self.namespace, self.name)
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

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ServicePort {
    pub name: String,
    pub port: u16,
    pub protocol: Protocol,
}

/// How a ServiceEntry's endpoints are found; Kubernetes services are always `Static` (EDS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Resolution {
    Static,
    /// `DNS`: Envoy resolves every endpoint (or the host) and balances over all the
    /// addresses it gets (STRICT_DNS).
    Dns,
    /// `DNS_ROUND_ROBIN`: Envoy resolves its one endpoint (or the host) and connects to
    /// whichever address DNS returns first (LOGICAL_DNS).
    DnsRoundRobin,
    None,
}

/// The SPIFFE identity of workloads of `namespace` running as `service_account` in
/// `trust_domain`.
pub fn spiffe_id(trust_domain: &str, namespace: &str, service_account: &str) -> String {
    format!("spiffe://{trust_domain}/ns/{namespace}/sa/{service_account}")
}

/// A service from a Kubernetes Service or one host of a ServiceEntry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Service {
    pub hostname: Hostname,
    /// The object that defined it (Service or ServiceEntry).
    pub origin: ConfigKey,
    pub ports: Vec<ServicePort>,
    /// Namespaces the service is exported to (`*`, `.`, `~` or names); empty means `*`.
    pub export_to: Vec<String>,
    pub resolution: Resolution,
    /// The service's own addresses as canonical CIDRs (`10.96.0.5/32`): a Kubernetes
    /// Service's `clusterIPs`, a ServiceEntry's `addresses`. Sidecars tell TCP services that
    /// share a port apart by them (the connection's original destination); empty for a
    /// headless service or a ServiceEntry without addresses.
    pub addresses: Vec<String>,
    /// A DNS ServiceEntry's own `endpoints`, which Envoy resolves in place of the hosts
    /// (empty: each host is resolved itself). Other services' endpoints are records of
    /// their own (EDS).
    pub dns_endpoints: Vec<DnsEndpoint>,
    /// A DNS ServiceEntry's `targetPort`s by port name: where Envoy reaches each host that
    /// is resolved itself (no `endpoints`), as Istio does; a port without one is reached at
    /// its number (Istio's egress TLS origination sends port 80 to the host's 443 so).
    #[serde(default)]
    pub host_target_ports: BTreeMap<String, u16>,
    /// The identities a server of this service may present under `ISTIO_MUTUAL`: a
    /// ServiceEntry's `subjectAltNames`. The dataflow adds the SPIFFE identities of the
    /// service's endpoints (their service accounts) before it builds clusters.
    #[serde(default)]
    pub subject_alt_names: Vec<String>,
    /// Outside the mesh: a ServiceEntry of `location: MESH_EXTERNAL` (Istio's default), a
    /// Kubernetes `ExternalName` Service. An AUTO_PASSTHROUGH gateway server takes no such
    /// service's clusters, as Istio's does.
    #[serde(default)]
    pub mesh_external: bool,
    /// A Kubernetes Service's `trafficDistribution: PreferClose` (or `PreferSameZone`, or
    /// Istio's `networking.istio.io/traffic-distribution` annotation): without a
    /// DestinationRule `localityLbSetting`, its clusters prefer the endpoints that share
    /// the client's network, region, zone and subzone, in that order (Istio's
    /// `GetLocalityLbSetting`), with or without outlier detection.
    #[serde(default)]
    pub prefer_close: bool,
    /// A Kubernetes Service with `clusterIP: None` (headless): Istio's `Passthrough`
    /// resolution. (A Service written without a cluster IP is not headless: the API server
    /// would give it one.)
    #[serde(default)]
    pub headless: bool,
    /// A Kubernetes `ExternalName` Service: the host its `externalName` names. Istio (1.21
    /// and later, `ENABLE_EXTERNAL_NAME_ALIAS`) makes such a service an alias of that host:
    /// it has no cluster, listener or virtual host of its own; the service of the host it
    /// names (through any chain of aliases) answers to its names too ([`Service::aliases`]).
    #[serde(default)]
    pub alias_for: Option<Hostname>,
    /// The hosts of the `ExternalName` Services that resolve to this one, sorted: its
    /// virtual hosts take their names as well (Istio's `Aliases` of a service). Filled by the
    /// dataflow ([`crate::rules::resolve_aliases`]); empty as sources write it.
    #[serde(default)]
    pub aliases: Vec<Hostname>,
}

impl Service {
    /// A Kubernetes Service without a cluster IP (`clusterIP: None`): Istio's `Passthrough`
    /// resolution, which sidecars reach at the address the client dialled.
    pub fn is_headless(&self) -> bool {
        self.headless && self.resolution == Resolution::Static
    }

    /// Whether a gateway's clusters of this service differ from a sidecar's: a port told
    /// per connection (HTTP/1.1 upstream from gateways) or Istio's `Passthrough` resolution
    /// (EDS from gateways, the original destination from sidecars: [`Service::passes_through`]).
    pub fn differs_for_gateways(&self) -> bool {
        self.passes_through() || self.ports.iter().any(|p| p.protocol == Protocol::Auto)
    }

    /// Istio's `Passthrough` resolution: a headless Service, or a ServiceEntry of
    /// `resolution: NONE`. Sidecars send its connections to their original destination;
    /// gateways (which have none to keep) balance over its endpoints by EDS, as Istio's
    /// `convertResolution` does for routers.
    pub fn passes_through(&self) -> bool {
        self.is_headless() || self.resolution == Resolution::None
    }
}

/// One endpoint of a DNS ServiceEntry: a host name (or IP) Envoy resolves, and the port it
/// listens on for each of the entry's ports.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DnsEndpoint {
    pub address: String,
    /// Service port name → the port on this endpoint (the endpoint's own, else the
    /// entry's `targetPort`, else the port's number).
    pub ports: BTreeMap<String, u16>,
    pub labels: Labels,
    pub placement: Placement,
    /// `serviceAccount`: the identity it runs as, in the entry's namespace.
    #[serde(default)]
    pub service_account: Option<String>,
}

impl Service {
    pub fn namespace(&self) -> &str {
        &self.origin.namespace
    }

    /// Every identity its servers may present (Istio's service accounts of a service):
    /// `subject_alt_names` and the service accounts of its DNS endpoints, sorted, once each.
    pub fn identities(&self, trust_domain: &str) -> Vec<String> {
        let mut ids: Vec<String> = self.subject_alt_names.clone();
        ids.extend(self.dns_endpoints.iter().filter_map(|e| {
            let sa = e.service_account.as_deref()?;
            Some(spiffe_id(trust_domain, self.namespace(), sa))
        }));
        ids.sort();
        ids.dedup();
        ids
    }

    /// This service with `ids` (SPIFFE identities of its endpoints) among its
    /// `subject_alt_names`.
    pub fn with_identities<'i>(&self, ids: impl IntoIterator<Item = &'i String>) -> Service {
        let mut svc = self.clone();
        svc.subject_alt_names.extend(ids.into_iter().cloned());
        svc.subject_alt_names.sort();
        svc.subject_alt_names.dedup();
        svc
    }
}

/// An endpoint as a source reports it, before it is matched to a service port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RawEndpoint {
    pub ip: String,
    /// Name of the service port this endpoint port serves (EndpointSlice port name).
    pub port_name: String,
    /// The port on the workload (target port).
    pub port: u16,
    pub ready: bool,
    /// Labels carried by the endpoint itself (ServiceEntry endpoints); pod labels join in by IP.
    pub labels: Labels,
    pub origin: ConfigKey,
    /// Its own locality and weight (a ServiceEntry endpoint's, a Kubernetes endpoint's zone);
    /// where unset, its workload's apply.
    pub placement: Placement,
    /// A ServiceEntry endpoint's `serviceAccount` (in the entry's namespace); where unset,
    /// its workload's applies.
    #[serde(default)]
    pub service_account: Option<String>,
}

/// Where an endpoint runs and how much of its cluster's traffic it takes: Istio's endpoint
/// `locality` (`region/zone/subzone`, any part empty) and `weight` (unset: 1).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Placement {
    pub locality: String,
    pub weight: Option<u32>,
}

impl Placement {
    /// `self`, with what it leaves unset taken from `under`.
    pub fn over(&self, under: &Placement) -> Placement {
        Placement {
            locality: if self.locality.is_empty() {
                under.locality.clone()
            } else {
                self.locality.clone()
            },
            weight: self.weight.or(under.weight),
        }
    }
}

/// An endpoint resolved to a service port, with the labels of its workload.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    pub ip: String,
    pub port: u16,
    pub ready: bool,
    pub labels: Labels,
    /// The objects it comes from: its EndpointSlice (or Endpoints, ServiceEntry) and, when
    /// labels joined in by IP, the Pod or WorkloadEntry. For `explain`, not for Envoy.
    pub origins: Vec<ConfigKey>,
    pub placement: Placement,
    /// `(namespace, service account)` it runs as, if known: the endpoint's own, else its
    /// workload's. What `ISTIO_MUTUAL` clients of its service pin the server's identity to.
    #[serde(default)]
    pub identity: Option<(String, String)>,
}

impl Endpoint {
    /// `raw` with the labels of its workload (if one matched its IP) under its own: both
    /// engines resolve endpoints through here so they cannot disagree on precedence.
    /// Its placement likewise: the endpoint's own over its workload's.
    pub fn resolved(raw: &RawEndpoint, workload: Option<&Workload>) -> Self {
        let mut labels = workload.map(|w| w.labels.clone()).unwrap_or_default();
        labels.extend(raw.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        Endpoint {
            ip: raw.ip.clone(),
            port: raw.port,
            ready: raw.ready,
            labels,
            origins: std::iter::once(&raw.origin)
                .chain(workload.map(|w| &w.origin))
                .cloned()
                .collect(),
            placement: match workload {
                Some(w) => raw.placement.over(&w.placement),
                None => raw.placement.clone(),
            },
            identity: raw
                .service_account
                .as_ref()
                .map(|sa| (raw.origin.namespace.clone(), sa.clone()))
                .or_else(|| {
                    let w = workload?;
                    Some((w.origin.namespace.clone(), w.service_account.clone()?))
                }),
        }
    }

    /// The endpoint a ServiceEntry's `workloadSelector` makes of a workload it selects, on
    /// port `port` of the entry: at the workload's own port of that name (a WorkloadEntry's
    /// `ports`), else at the entry's target port.
    pub fn selected(entry: &WorkloadSelection, port: &SelectedPort, w: &Workload) -> Self {
        let raw = RawEndpoint {
            ip: w.ip.clone(),
            port_name: port.name.clone(),
            port: w.ports.get(&port.name).copied().unwrap_or(port.target),
            ready: true,
            labels: Labels::new(),
            origin: entry.origin.clone(),
            placement: Placement::default(),
            service_account: None,
        };
        Endpoint::resolved(&raw, Some(w))
    }
}

/// A Pod or WorkloadEntry: where labels of an endpoint come from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Workload {
    pub ip: String,
    pub labels: Labels,
    pub origin: ConfigKey,
    /// A WorkloadEntry's `ports`: the workload's port per service port name.
    pub ports: BTreeMap<String, u16>,
    pub placement: Placement,
    /// The service account it runs as (a Pod's `serviceAccountName`, `default` when unset;
    /// a WorkloadEntry's `serviceAccount`), in its own namespace.
    #[serde(default)]
    pub service_account: Option<String>,
}

/// A ServiceEntry's `workloadSelector`: its endpoints are the Pods and WorkloadEntries of
/// its namespace whose labels match, on each of its ports.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorkloadSelection {
    pub origin: ConfigKey,
    pub labels: Labels,
    pub ports: Vec<SelectedPort>,
}

/// A port of a selecting ServiceEntry: its name, and where a workload that does not name
/// it receives traffic (the `targetPort`, else the port's number).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SelectedPort {
    pub name: String,
    pub target: u16,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum StringMatch {
    Exact(String),
    Prefix(String),
    Regex(String),
    /// Any value, as long as there is one: Istio's empty match of a header or query
    /// parameter (never of the URI).
    Present,
}

/// One `match` of an HTTP route: every condition must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HttpMatch {
    pub uri: Option<StringMatch>,
    /// `uri` ignores case (exact and prefix matches).
    pub ignore_uri_case: bool,
    /// By lower-cased name; Istio's `method`, `authority` and `scheme` are the pseudo-headers
    /// `:method`, `:authority`, `:scheme`.
    pub headers: BTreeMap<String, StringMatch>,
    /// Headers that must not match (`withoutHeaders`; `Present`: must be absent).
    pub without_headers: BTreeMap<String, StringMatch>,
    pub query_params: BTreeMap<String, StringMatch>,
    /// Only on route configurations of this port (the listener's, or the gateway server's).
    pub port: Option<u16>,
    /// Only for these gateways (`namespace/name`, or `mesh` for sidecars); empty: wherever
    /// the VirtualService applies.
    pub gateways: Vec<String>,
    /// Only for proxies in this namespace (sidecar route configurations are per namespace;
    /// gateway ones are not, so there such a match never applies: it fails closed).
    pub source_namespace: Option<String>,
    /// Only for proxies carrying these labels (sidecars and gateways alike): a scope knows
    /// which of the mesh's `sourceLabels` selectors its proxies match.
    #[serde(default)]
    pub source_labels: Option<Labels>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RouteDestination {
    /// Fully qualified destination host.
    pub host: Hostname,
    pub subset: Option<String>,
    pub port: Option<u16>,
    pub weight: u32,
    /// `route[].headers`: edits of requests sent to, and responses from, this destination.
    #[serde(default)]
    pub headers: HeaderOps,
    /// Set where the destination named a Kubernetes `ExternalName` alias and was sent to the
    /// host the alias names ([`crate::rules::with_alias_destinations`]): the alias, whose
    /// ports decide the port a destination without one goes to. Sources leave it `None`.
    #[serde(default)]
    pub via_alias: Option<AliasVia>,
}

/// The `ExternalName` alias a route destination named, as Istio's `GetDestinationCluster`
/// reads it: its host and its ports.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AliasVia {
    pub host: Hostname,
    pub ports: Vec<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Retries {
    pub attempts: u32,
    pub per_try_timeout_ms: Option<u64>,
    pub retry_on: Option<String>,
    /// `retryRemoteLocalities`: a retry may move on to the next priority (the localities
    /// after the client's own), as Envoy's `previous_priorities` retry priority does.
    #[serde(default)]
    pub remote_localities: bool,
    /// `retryIgnorePreviousHosts`: `Some(false)` lets a retry pick a host already tried
    /// (unset and `true`: avoid them, Istio's default).
    #[serde(default)]
    pub ignore_previous_hosts: Option<bool>,
    /// `backoff`: the base interval between retries (Envoy's default, 25 ms, when unset).
    #[serde(default)]
    pub backoff_ms: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HttpRoute {
    pub name: Option<String>,
    /// Any of these matches (OR); empty matches everything.
    pub matches: Vec<HttpMatch>,
    /// Where matching requests go; empty when the route redirects or answers directly.
    pub route: Vec<RouteDestination>,
    pub timeout_ms: Option<u64>,
    pub retries: Option<Retries>,
    pub redirect: Option<Redirect>,
    pub direct_response: Option<DirectResponse>,
    pub rewrite: Option<Rewrite>,
    pub headers: HeaderOps,
    pub mirrors: Vec<Mirror>,
    pub fault: Option<Fault>,
    /// `corsPolicy`: the CORS filter's policy for this route.
    pub cors: Option<Box<Cors>>,
    /// `delegate`: the VirtualService whose routes take this route's place, each under
    /// this route's matches ([`crate::rules::expand_delegates`]).
    #[serde(default)]
    pub delegate: Option<ConfigKey>,
}

/// A fraction of requests, in millionths (Istio's `percentage.value` 12.5 is 125,000): an
/// integer, so records stay hashable and ordered.
pub type PerMillion = u32;

/// `redirect`: answered by the proxy with a 3xx to the rewritten location.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Redirect {
    pub uri: Option<String>,
    pub authority: Option<String>,
    pub port: Option<u16>,
    /// `derivePort: FROM_REQUEST_PORT`: the port of the route configuration the route is
    /// on (the port requests arrive on), as Istio writes it; Envoy cannot take it from the
    /// request itself. (`FROM_PROTOCOL_DEFAULT`, like no port: none in the location.)
    #[serde(default)]
    pub from_request_port: bool,
    pub scheme: Option<String>,
    /// 301, 302, 303, 307 or 308.
    pub code: u32,
}

/// `directResponse`: answered by the proxy.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DirectResponse {
    pub status: u32,
    pub body: Option<String>,
}

/// `rewrite`: what the upstream sees instead of the request's path or authority.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Rewrite {
    /// Replaces the matched prefix (the whole path for an exact match).
    pub uri: Option<String>,
    pub authority: Option<String>,
    /// `uriRegexRewrite`: (pattern, substitution).
    pub uri_regex: Option<(String, String)>,
}

/// `headers`: edits of request headers (before the upstream sees them) and of response
/// headers (before the client does).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HeaderOps {
    pub request: HeaderEdits,
    pub response: HeaderEdits,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HeaderEdits {
    /// Overwrite or add.
    pub set: BTreeMap<String, String>,
    /// Append to what is there.
    pub add: BTreeMap<String, String>,
    pub remove: Vec<String>,
    /// A request's `host` / `:authority` set or added: Envoy edits no pseudo-header (nor
    /// `host`) as a header, so, as Istio does, it becomes a host rewrite of the route (or of
    /// the destination, for `route[].headers`).
    #[serde(default)]
    pub authority: Option<String>,
}

impl HeaderEdits {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
            && self.add.is_empty()
            && self.remove.is_empty()
            && self.authority.is_none()
    }
}

/// `mirror` / `mirrors[]`: a copy of the request, its answer discarded.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Mirror {
    pub destination: RouteDestination,
    /// `None`: every request.
    pub fraction: Option<PerMillion>,
}

/// `corsPolicy`, as Envoy's CORS filter takes it per route.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Cors {
    /// `allowOrigins` (or the older `allowOrigin`, exact names).
    pub allow_origins: Vec<StringMatch>,
    pub allow_methods: Vec<String>,
    pub allow_headers: Vec<String>,
    pub expose_headers: Vec<String>,
    /// `maxAge`, whole seconds.
    pub max_age_s: Option<u64>,
    pub allow_credentials: Option<bool>,
    /// `unmatchedPreflights`: FORWARD (the default) passes a preflight whose origin does
    /// not match on to the upstream; IGNORE answers it without CORS headers.
    pub forward_unmatched_preflights: bool,
}

/// `fault`: delays and aborts injected by the client's proxy.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Fault {
    /// (delay, fraction of requests).
    pub delay: Option<(u64, PerMillion)>,
    /// (the status answered, fraction of requests).
    pub abort: Option<(AbortStatus, PerMillion)>,
}

/// What an injected abort answers: an HTTP status, or a gRPC status (by its code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AbortStatus {
    Http(u32),
    Grpc(u32),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct VirtualService {
    pub key: ConfigKey,
    /// Hosts, fully qualified (short names expanded in the VirtualService's namespace); may be
    /// wildcards such as `*` or `*.example.com` for gateways.
    pub hosts: Vec<String>,
    /// Gateways as `namespace/name`, or `mesh`. Empty means `mesh`.
    pub gateways: Vec<String>,
    pub export_to: Vec<String>,
    pub http: Vec<HttpRoute>,
    /// `tcp[]`: routes for the TCP ports of the hosts, in order (the first that matches wins).
    pub tcp: Vec<TcpRoute>,
    /// `tls[]`: routes of TLS passthrough by SNI (gateways' PASSTHROUGH servers, sidecars'
    /// TLS ports), in order.
    #[serde(default)]
    pub tls: Vec<TlsRoute>,
}

/// One `match` of a TLS route: the SNI names (required) and the TCP conditions.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TlsMatch {
    /// `sniHosts`, fully qualified as the VirtualService's hosts are.
    pub sni_hosts: Vec<String>,
    pub port: Option<u16>,
    pub destination_subnets: Vec<String>,
    pub gateways: Vec<String>,
    pub source_namespace: Option<String>,
    /// As [`HttpMatch::source_labels`].
    #[serde(default)]
    pub source_labels: Option<Labels>,
}

/// A VirtualService's `tls[]` route.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TlsRoute {
    pub matches: Vec<TlsMatch>,
    pub route: Vec<RouteDestination>,
}

/// One `match` of a TCP route: every condition must hold. `sourceSubnet` is not modelled:
/// a route using it is left out on input (fails closed).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TcpMatch {
    /// Only connections to this service port (or gateway server port).
    pub port: Option<u16>,
    /// Only connections whose destination IP is in one of these (canonical CIDRs).
    pub destination_subnets: Vec<String>,
    /// As [`HttpMatch::gateways`].
    pub gateways: Vec<String>,
    /// As [`HttpMatch::source_namespace`]: sidecars in that namespace, never a gateway.
    pub source_namespace: Option<String>,
    /// As [`HttpMatch::source_labels`].
    #[serde(default)]
    pub source_labels: Option<Labels>,
}

/// A VirtualService's `tcp[]` route: where matching connections go.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TcpRoute {
    /// Any of these matches (OR); empty matches every connection.
    pub matches: Vec<TcpMatch>,
    pub route: Vec<RouteDestination>,
}

impl VirtualService {
    /// The `sourceLabels` selectors of its matches (HTTP, TCP and TLS).
    pub fn source_selectors(&self) -> Vec<Labels> {
        let http = self
            .http
            .iter()
            .flat_map(|r| &r.matches)
            .map(|m| &m.source_labels);
        let tcp = self
            .tcp
            .iter()
            .flat_map(|r| &r.matches)
            .map(|m| &m.source_labels);
        let tls = self
            .tls
            .iter()
            .flat_map(|r| &r.matches)
            .map(|m| &m.source_labels);
        let mut out: Vec<Labels> = http.chain(tcp).chain(tls).flatten().cloned().collect();
        out.sort();
        out.dedup();
        out
    }

    /// The VirtualServices its routes delegate to.
    pub fn delegates(&self) -> Vec<ConfigKey> {
        let mut out: Vec<ConfigKey> = self
            .http
            .iter()
            .filter_map(|r| r.delegate.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    pub fn binds_mesh(&self) -> bool {
        self.gateways.is_empty() || self.gateways.iter().any(|g| g == "mesh")
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum LoadBalancer {
    RoundRobin,
    LeastRequest,
    Random,
    /// `simple: PASSTHROUGH`: to the connection's original destination, no endpoints.
    Passthrough,
    /// `consistentHash`: RING_HASH or MAGLEV clusters, and the hash on the routes to them.
    ConsistentHash(Box<ConsistentHash>),
}

/// A DestinationRule's `consistentHash`: what a request is hashed by, and the table.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConsistentHash {
    pub key: HashKey,
    pub table: HashTable,
}

/// What a route hashes a request by (the route's `hash_policy`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum HashKey {
    Header(String),
    /// A cookie; with a TTL Envoy sets it when the request has none.
    Cookie {
        name: String,
        path: Option<String>,
        ttl_ms: Option<u64>,
    },
    SourceIp,
    QueryParameter(String),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum HashTable {
    /// `ringHash` (or no table named): Istio's minimum ring size defaults to 1024.
    Ring {
        minimum_size: Option<u64>,
    },
    Maglev {
        table_size: Option<u64>,
    },
}

/// The consistent-hash keys of one host's clusters under the DestinationRule a scope has in
/// effect: per subset (`None`: the host's own cluster) and port. A `None` port stands for
/// every port no `portLevelSettings` entry names, and is there only where it hashes; a port
/// an entry names (of the rule or the subset) has its own row, `None` where that port does
/// not hash. Look it up with [`host_hash`].
pub type HostHashing = BTreeMap<(Option<String>, Option<u16>), Option<HashKey>>;

/// The hash key of the cluster of `subset` on `port` in `hh`, if it hashes.
pub fn host_hash<'h>(
    hh: &'h HostHashing,
    subset: &Option<String>,
    port: u16,
) -> Option<&'h HashKey> {
    match hh.get(&(subset.clone(), Some(port))) {
        Some(at_port) => at_port.as_ref(),
        None => hh.get(&(subset.clone(), None)).and_then(Option::as_ref),
    }
}

/// [`HostHashing`] per host, for the routes of one route configuration.
pub type Hashing = BTreeMap<Hostname, HostHashing>;

/// The limits Istio gives the `tcp_proxy` of a route to a host, from the rule in effect's
/// own `trafficPolicy.connectionPool.tcp` (not a subset's or a port's), as Istio reads it
/// for the route's first destination: `idleTimeout` (`None`: Envoy's 1h; 0: none) and
/// `maxConnectionDuration` (Envoy's `max_downstream_connection_duration`; `None`: no limit).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct TcpTimeout {
    pub idle_ms: Option<u64>,
    pub max_duration_ms: Option<u64>,
}

/// Per host a scope routes TCP connections to, its [`TcpTimeout`]. Hosts whose rule sets
/// neither are absent.
pub type TcpTimeouts = BTreeMap<Hostname, TcpTimeout>;

impl DestinationRule {
    /// The rule's own [`TcpTimeout`], if it sets either.
    pub fn tcp_timeout(&self) -> Option<TcpTimeout> {
        let pool = self.traffic_policy.as_ref()?.connection_pool.as_ref()?;
        let t = TcpTimeout {
            idle_ms: pool.tcp_idle_timeout_ms,
            max_duration_ms: pool.max_connection_duration_ms,
        };
        (t != TcpTimeout::default()).then_some(t)
    }
}

/// Istio's `localityLbSetting` (of a DestinationRule's `loadBalancer` or of the mesh
/// config), as validated: `distribute` and `failover` are never both given.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LocalityLbSetting {
    /// `enabled` (unset: on).
    pub enabled: Option<bool>,
    pub distribute: Vec<LocalityDistribute>,
    /// `failover[]` `(from, to)`: regions.
    pub failover: Vec<(String, String)>,
    /// `failoverPriority[]`: label keys (`key`: the client's value) or `key=value` pairs,
    /// most important first.
    #[serde(default)]
    pub failover_priority: Vec<String>,
}

/// One `distribute` entry: clients in `from` (`region/zone/subzone`, a trailing `*`
/// matches any) send each `to` locality its percentage.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LocalityDistribute {
    pub from: String,
    /// Locality (possibly with a trailing `*`) → weight; the weights sum to 100.
    pub to: Vec<(String, u32)>,
}

/// What locality load balancing does to one EDS cluster's assignment, relative to the
/// client proxy's locality: Istio's `ApplyLocalityLoadBalancer`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum LocalityMode {
    /// Locality groups weighted per the first entry whose `from` the client matches.
    Distribute(Vec<LocalityDistribute>),
    /// Priorities by how much of the client's locality a group shares, with these
    /// `(from, to)` region failovers.
    Failover(Vec<(String, String)>),
    /// `failoverPriority`: priorities by how many of these labels (in order) an endpoint
    /// shares with the client; then, with `failover` entries, by locality as `Failover`
    /// on top (Istio applies both in that order).
    Prioritized {
        labels: Vec<String>,
        failover: Vec<(String, String)>,
    },
}

/// The topology labels whose values come from a locality (`region/zone/subzone`), as Istio
/// adds them to a proxy's and an endpoint's labels, with the part of the locality each is.
pub const TOPOLOGY_LABELS: [(&str, usize); 3] = [
    ("topology.kubernetes.io/region", 0),
    ("topology.kubernetes.io/zone", 1),
    ("topology.istio.io/subzone", 2),
];

/// The label Istio gives a workload (and a proxy) its network: a WorkloadEntry's or
/// ServiceEntry endpoint's `network`, a proxy's `NETWORK` metadata, where the workload has
/// no such label of its own.
pub const NETWORK_LABEL: &str = "topology.istio.io/network";

/// The labels a service with `trafficDistribution: PreferClose` prefers its clients'
/// values of, most important first (Istio's order: network, region, zone, subzone).
pub const PREFER_CLOSE_LABELS: [&str; 4] = [
    NETWORK_LABEL,
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.istio.io/subzone",
];

/// The value of label `key` for a workload with `labels` in `locality`: a topology label
/// is the locality's part where the locality has it (Istio's `AugmentLabels` overrides
/// the workload's own), any other label the workload's; "" when absent.
pub fn priority_label_value<'a>(key: &str, labels: &'a Labels, locality: &'a str) -> &'a str {
    let part = TOPOLOGY_LABELS
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, i)| locality.split('/').nth(*i))
        .filter(|p| !p.is_empty());
    part.or_else(|| labels.get(key).map(String::as_str))
        .unwrap_or_default()
}

/// The keys of a setting's `failoverPriority` entries that read the client's value.
pub fn failover_priority_keys(l: &LocalityLbSetting) -> Vec<String> {
    read_keys(&l.failover_priority)
        .map(str::to_string)
        .collect()
}

/// The keys of `failoverPriority` entries that read the client's value (not `key=value`).
fn read_keys(entries: &[String]) -> impl Iterator<Item = &str> {
    entries
        .iter()
        .map(|e| priority_entry(e))
        .filter(|(_, fixed)| fixed.is_none())
        .map(|(k, _)| k)
}

/// The key of a `failoverPriority` entry, and the value it fixes (`key=value`), if any.
pub fn priority_entry(entry: &str) -> (&str, Option<&str>) {
    match entry.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (entry, None),
    }
}

impl LocalityMode {
    /// The mode for a cluster of `service` under `policy` (its rule's, merged for the
    /// subset and port), as Istio's `GetLocalityLbSetting` picks the setting: the policy's,
    /// else the service's `trafficDistribution: PreferClose` (priorities by
    /// [`PREFER_CLOSE_LABELS`], applied without outlier detection too), else the mesh's:
    /// `distribute` applies as it is; other priorities only with `outlierDetection`
    /// (without it Envoy would never fail over); nothing when the setting in effect has
    /// `enabled: false`.
    pub fn of(
        policy: &TrafficPolicy,
        mesh: Option<&LocalityLbSetting>,
        service: &Service,
    ) -> Option<LocalityMode> {
        if policy.locality_lb.is_none() && service.prefer_close {
            return Some(LocalityMode::Prioritized {
                labels: PREFER_CLOSE_LABELS.map(String::from).to_vec(),
                failover: Vec::new(),
            });
        }
        // Istio's mesh config defaults to `{enabled: true}`.
        let builtin = LocalityLbSetting::default();
        let setting = policy.locality_lb.as_deref().or(mesh).unwrap_or(&builtin);
        if setting.enabled == Some(false) {
            return None;
        }
        if !setting.distribute.is_empty() {
            return Some(LocalityMode::Distribute(setting.distribute.clone()));
        }
        policy.outlier_detection.as_ref()?;
        Some(match setting.failover_priority.is_empty() {
            true => LocalityMode::Failover(setting.failover.clone()),
            false => LocalityMode::Prioritized {
                labels: setting.failover_priority.clone(),
                failover: setting.failover.clone(),
            },
        })
    }

    /// The label keys whose client values this mode reads (`key=value` entries fix theirs).
    pub fn client_label_keys(&self) -> Vec<&str> {
        match self {
            LocalityMode::Prioritized { labels, .. } => read_keys(labels).collect(),
            _ => Vec::new(),
        }
    }

    /// Whether Istio sets the cluster's `locality_weighted_lb_config` for it: with
    /// `distribute`, or `failover` entries.
    pub fn weighted(&self) -> bool {
        match self {
            LocalityMode::Distribute(_) => true,
            LocalityMode::Failover(f) | LocalityMode::Prioritized { failover: f, .. } => {
                !f.is_empty()
            }
        }
    }
}

/// What an EDS cluster's assignment is built from: its subset's labels (empty: the host's
/// own cluster) and the locality load balancing in effect for it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EdsSel {
    pub labels: Labels,
    pub locality: Option<Box<LocalityMode>>,
    /// A DNS cluster's own hosts where locality load balancing applies to them: such a
    /// cluster carries its assignment inline, so the cluster itself is built per client
    /// class from these (`translate::cluster::localized_dns`). `None` for an EDS cluster.
    #[serde(default)]
    pub inline_hosts: Option<Vec<InlineHost>>,
}

/// One host of a DNS cluster's inline assignment, with what locality load balancing reads.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InlineHost {
    pub locality: String,
    pub labels: Labels,
    pub address: String,
    pub port: u16,
    pub weight: u32,
}

/// The clients one assignment is built for: those in `locality` ("" unknown or unused)
/// and, under `failoverPriority`, with these values of the labels it reads (`None`: no
/// `failoverPriority` applies).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClientClass {
    pub locality: String,
    pub labels: Option<Vec<(String, String)>>,
}

impl EdsSel {
    /// The clients an assignment under this selection is built for: the scope's locality
    /// (and its values of the labels a `failoverPriority` reads) where locality load
    /// balancing applies, else the one shared assignment's (all default).
    pub fn client_class(&self, s: &ScopeKey) -> ClientClass {
        let Some(mode) = self.locality.as_deref() else {
            return ClientClass::default();
        };
        let keys = mode.client_label_keys();
        let labels = match mode {
            LocalityMode::Prioritized { .. } => Some(
                s.priority_labels()
                    .unwrap_or_default()
                    .iter()
                    .filter(|(k, _)| keys.contains(&k.as_str()))
                    .cloned()
                    .collect(),
            ),
            _ => None,
        };
        ClientClass {
            locality: s.locality().to_string(),
            labels,
        }
    }
}

/// `loadBalancer.warmup`: new endpoints ramp up over `duration_ms` (Envoy's slow start).
/// The fractions are kept in millionths, so the record compares and hashes exactly.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Warmup {
    pub duration_ms: u64,
    /// Percent of its weight a new endpoint starts at, in millionths (Istio's default 10%).
    pub minimum_percent_micros: u64,
    /// Envoy's aggression, in millionths (Istio's default 1.0: linear).
    pub aggression_micros: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
pub struct TrafficPolicy {
    pub load_balancer: Option<LoadBalancer>,
    pub warmup: Option<Warmup>,
    /// `loadBalancer.localityLbSetting` (part of `loadBalancer`: merged with it).
    #[serde(default)]
    pub locality_lb: Option<Box<LocalityLbSetting>>,
    pub connect_timeout_ms: Option<u64>,
    /// TLS to the upstream (`SIMPLE`, `MUTUAL` with certificate files, `ISTIO_MUTUAL`).
    /// (Boxed, as the other rarely set parts: every `Record` is as large as its largest
    /// variant, and endpoints are most of them.)
    pub tls: Option<Box<UpstreamTls>>,
    /// `connectionPool` beyond `tcp.connectTimeout`: circuit-breaker limits and connection
    /// lifetimes; `None` fields keep Istio's defaults (no limit).
    pub connection_pool: Option<Box<ConnectionPool>>,
    pub outlier_detection: Option<Box<OutlierDetection>>,
    /// `tls` given with mode `DISABLE`: it replaces an inherited `tls` (a subset's over the
    /// rule's) as Istio's merge does, though nothing is generated for it.
    #[serde(default)]
    pub tls_disabled: bool,
    /// `portLevelSettings[]`: per port number, the policy that replaces this one's
    /// `loadBalancer`, `connectionPool`, `outlierDetection` and `tls` on that port, whole
    /// (a setting the entry leaves out takes its default; nothing is inherited, as Istio's
    /// docs say). The entries' own `port_level` is empty.
    #[serde(default)]
    pub port_level: Vec<(u16, TrafficPolicy)>,
}

impl TrafficPolicy {
    /// The policy on `port`: a `portLevelSettings` entry for it in place of the four
    /// settings, else this one (without its port entries); and whether an entry applied.
    /// `None`: a port no entry names.
    pub fn at_port(&self, port: Option<u16>) -> (TrafficPolicy, bool) {
        match self.port_level.iter().find(|(p, _)| Some(*p) == port) {
            Some((_, entry)) => (
                TrafficPolicy {
                    port_level: Vec::new(),
                    ..entry.clone()
                },
                true,
            ),
            None => (
                TrafficPolicy {
                    port_level: Vec::new(),
                    ..self.clone()
                },
                false,
            ),
        }
    }

    /// Whether `loadBalancer` is given (a warmup alone is part of it).
    fn sets_load_balancer(&self) -> bool {
        self.load_balancer.is_some() || self.warmup.is_some() || self.locality_lb.is_some()
    }

    /// Whether `connectionPool` is given (its connect timeout is part of it).
    fn sets_connection_pool(&self) -> bool {
        self.connect_timeout_ms.is_some() || self.connection_pool.is_some()
    }

    /// Whether `tls` is given, `DISABLE` included.
    fn sets_tls(&self) -> bool {
        self.tls.is_some() || self.tls_disabled
    }

    /// Istio's merge of a rule's policy and a subset's on one port: first each level's
    /// `portLevelSettings` entry for the port (which replaces that level's four settings
    /// whole); then a subset's entry for the port wins whole, else each setting the
    /// subset gives replaces the rule's.
    /// `port` `None`: a port no entry of either names.
    pub fn merged(
        rule: Option<&TrafficPolicy>,
        subset: Option<&TrafficPolicy>,
        port: Option<u16>,
    ) -> TrafficPolicy {
        let base = rule.map(|r| r.at_port(port).0).unwrap_or_default();
        let Some(subset) = subset else {
            return base;
        };
        let (sub, whole) = subset.at_port(port);
        if whole || rule.is_none() {
            return sub;
        }
        let mut out = base;
        if sub.sets_load_balancer() {
            out.load_balancer = sub.load_balancer.clone();
            out.warmup = sub.warmup.clone();
            out.locality_lb = sub.locality_lb.clone();
        }
        if sub.sets_connection_pool() {
            out.connect_timeout_ms = sub.connect_timeout_ms;
            out.connection_pool = sub.connection_pool.clone();
        }
        if sub.outlier_detection.is_some() {
            out.outlier_detection = sub.outlier_detection.clone();
        }
        if sub.sets_tls() {
            out.tls = sub.tls.clone();
            out.tls_disabled = sub.tls_disabled;
        }
        out
    }

    /// This policy and its port entries.
    pub fn with_ports(&self) -> impl Iterator<Item = &TrafficPolicy> {
        std::iter::once(self).chain(self.port_level.iter().map(|(_, p)| p))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConnectionPool {
    pub max_connections: Option<u32>,
    /// `http.http1MaxPendingRequests`.
    pub max_pending_requests: Option<u32>,
    /// `http.http2MaxRequests`.
    pub max_requests: Option<u32>,
    pub max_retries: Option<u32>,
    pub max_requests_per_connection: Option<u32>,
    /// `http.idleTimeout`.
    pub idle_timeout_ms: Option<u64>,
    /// `tcp.maxConnectionDuration`.
    pub max_connection_duration_ms: Option<u64>,
    /// `tcp.tcpKeepalive`: (probes, time s, interval s).
    pub tcp_keepalive: Option<(Option<u32>, Option<u64>, Option<u64>)>,
    /// `tcp.idleTimeout`: the idle timeout of the cluster's HTTP connections where
    /// `http.idleTimeout` sets none, as Istio falls back to it (0: none).
    #[serde(default)]
    pub tcp_idle_timeout_ms: Option<u64>,
    /// `http.h2UpgradePolicy` (`None`: `DEFAULT`, the mesh's policy, Istio's default
    /// `DO_NOT_UPGRADE`).
    #[serde(default)]
    pub h2_upgrade: Option<H2Upgrade>,
    /// `http.useClientProtocol`: the upstream connection speaks the protocol the request
    /// came in (Envoy's `use_downstream_protocol_config`); never upgraded.
    #[serde(default)]
    pub use_client_protocol: bool,
    /// `http.maxConcurrentStreams`: Envoy's `max_concurrent_streams` of an HTTP/2 cluster
    /// (0, like unset: Envoy's default).
    #[serde(default)]
    pub max_concurrent_streams: Option<u32>,
}

/// `connectionPool.http.h2UpgradePolicy` other than `DEFAULT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum H2Upgrade {
    Upgrade,
    DoNotUpgrade,
}

/// `outlierDetection`, as Istio maps it: a set error count ejects at once (enforcing 100%).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OutlierDetection {
    pub consecutive_5xx: Option<u32>,
    pub consecutive_gateway_errors: Option<u32>,
    pub consecutive_local_origin_failures: Option<u32>,
    pub split_external_local_origin_errors: bool,
    pub interval_ms: Option<u64>,
    pub base_ejection_time_ms: Option<u64>,
    pub max_ejection_percent: Option<u32>,
    pub min_health_percent: Option<u32>,
}

/// A DestinationRule's `tls` in a mode meshflow generates: files the proxy reads itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct UpstreamTls {
    /// `MUTUAL`: the client certificate and key presented.
    pub client_cert: Option<(String, String)>,
    /// Verify the server against this CA bundle; `None` with `insecure_skip_verify` false:
    /// against the system's bundle ([`ClusterDefaults::system_ca_bundle`]).
    pub ca: Option<String>,
    pub crl: Option<String>,
    pub sni: Option<String>,
    /// Names the server's certificate must carry (DNS or URI SANs, exact).
    pub subject_alt_names: Vec<String>,
    pub insecure_skip_verify: bool,
    /// `ISTIO_MUTUAL`: the proxy's own workload certificate (SDS `default`), verified
    /// against the mesh's root (SDS `ROOTCA`); the files above are unused.
    #[serde(default)]
    pub istio_mutual: bool,
    /// `credentialName` of `SIMPLE`/`MUTUAL`: the client certificate (MUTUAL) and the CA
    /// come from this Secret of the proxy's own namespace over SDS, in place of files.
    #[serde(default)]
    pub credential: Option<String>,
    /// Where this `tls` is in the rule (`spec.trafficPolicy.tls`), for errors that name it.
    #[serde(default)]
    pub field: String,
    /// Mode `MUTUAL` (a client certificate is presented: from files, or the Secret's).
    #[serde(default)]
    pub mutual: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Subset {
    pub name: String,
    pub labels: Labels,
    pub traffic_policy: Option<TrafficPolicy>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DestinationRule {
    pub key: ConfigKey,
    /// Fully qualified host the rule applies to.
    pub host: Hostname,
    pub export_to: Vec<String>,
    pub traffic_policy: Option<TrafficPolicy>,
    pub subsets: Vec<Subset>,
    /// `workloadSelector`: only for the proxies of its namespace carrying these labels, for
    /// which it goes before every rule without one.
    #[serde(default)]
    pub selector: Option<Labels>,
}

impl Gateway {
    /// Some server is AUTO_PASSTHROUGH: the gateway proxies it selects route by their
    /// outbound clusters' names.
    pub fn uses_auto_passthrough(&self) -> bool {
        self.servers.iter().any(|s| {
            s.tls
                .as_deref()
                .is_some_and(|t| t.mode == ServerTlsMode::AutoPassthrough)
        })
    }

    /// Some server terminates with the workload certificate (`ISTIO_MUTUAL`): the gateway
    /// proxies it selects need their workload identity.
    pub fn uses_istio_mutual(&self) -> bool {
        self.servers.iter().any(|s| {
            s.tls
                .as_deref()
                .is_some_and(|t| t.mode == ServerTlsMode::IstioMutual)
        })
    }
}

impl DestinationRule {
    /// Whether some cluster of the rule may balance by locality (an `outlierDetection`,
    /// which turns on Istio's default locality failover, or a `distribute`): while one
    /// such rule exists, proxies with a locality are scoped by it.
    pub fn may_balance_by_locality(&self) -> bool {
        self.policies().any(|p| {
            p.outlier_detection.is_some()
                || p.locality_lb
                    .as_ref()
                    .is_some_and(|l| !l.distribute.is_empty())
        })
    }

    /// The label keys its `failoverPriority` lists read of a client (`key=value` entries
    /// fix their value and read none).
    pub fn failover_priority_keys(&self) -> Vec<String> {
        self.policies()
            .filter_map(|p| p.locality_lb.as_deref())
            .flat_map(failover_priority_keys)
            .collect()
    }

    /// Every policy of the rule: its own, its subsets', and their port entries.
    fn policies(&self) -> impl Iterator<Item = &TrafficPolicy> {
        std::iter::once(self.traffic_policy.as_ref())
            .chain(self.subsets.iter().map(|s| s.traffic_policy.as_ref()))
            .flatten()
            .flat_map(TrafficPolicy::with_ports)
    }

    /// Some cluster of the rule (the host's or a subset's) uses `ISTIO_MUTUAL`: the proxies
    /// holding them need their workload certificate.
    pub fn uses_istio_mutual(&self) -> bool {
        self.policies()
            .any(|p| p.tls.as_ref().is_some_and(|t| t.istio_mutual))
    }

    /// Every `tls` of the rule that takes its certificates from a Secret (`credentialName`).
    pub fn credential_tls(&self) -> Vec<&UpstreamTls> {
        self.policies()
            .filter_map(|p| p.tls.as_deref())
            .filter(|t| t.credential.is_some())
            .collect()
    }

    /// Every `tls` of the rule that encrypts (`SIMPLE`, `MUTUAL`, `ISTIO_MUTUAL`): what a
    /// proxyless gRPC client cannot be given (see [`ErrorCode::ProxylessTls`]).
    pub fn encrypting_tls(&self) -> Vec<&UpstreamTls> {
        self.policies().filter_map(|p| p.tls.as_deref()).collect()
    }

    /// The Secrets (by name) the rule's `credentialName`s need in a proxy's namespace: each
    /// named one and its `-cacert` companion.
    pub fn wanted_secrets(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .credential_tls()
            .into_iter()
            .filter_map(|t| t.credential.clone())
            .flat_map(|n| [format!("{n}-cacert"), n])
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GatewayServer {
    pub port: u16,
    pub port_name: String,
    pub protocol: Protocol,
    pub bind: Option<String>,
    /// Hosts as `namespace/host` (`*/host` when the namespace was not given).
    pub hosts: Vec<String>,
    /// `tls.httpsRedirect` on an HTTP server: every request is answered with a 301 to https.
    #[serde(default)]
    pub https_redirect: bool,
    /// `tls` of an HTTPS or TLS server (boxed: most servers have none).
    #[serde(default)]
    pub tls: Option<Box<ServerTls>>,
    /// The server's field (`spec.servers[1]`), for errors that name it.
    #[serde(default)]
    pub field: String,
}

/// How a gateway server treats TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ServerTlsMode {
    /// Terminate with the server's certificate.
    Simple,
    /// Terminate, and require a client certificate signed by the server's CA bundle.
    Mutual,
    /// Route by SNI (VirtualService `tls[]` routes) without terminating.
    Passthrough,
    /// Terminate with the gateway's own workload certificate (SDS `default`), and require a
    /// client certificate the mesh's root signed (SDS `ROOTCA`).
    IstioMutual,
    /// As `Mutual`, but a client may present no certificate; one it presents is verified.
    OptionalMutual,
    /// Pass through to the cluster the client names in its SNI,
    /// `outbound_.PORT_.SUBSET_.HOST` (Istio's cross-network gateway).
    AutoPassthrough,
}

/// Where a terminating server's certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Credential {
    /// `credentialName`: a Secret in the gateway workload's namespace, served over SDS.
    Secret(String),
    /// `serverCertificate`/`privateKey`/`caCertificates`: files the proxy reads itself.
    Files {
        cert: String,
        key: String,
        ca: Option<String>,
    },
}

/// A gateway server's `tls` in a mode meshflow generates (also a Sidecar `ingress`
/// listener's: SIMPLE, MUTUAL or OPTIONAL_MUTUAL with files).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ServerTls {
    pub mode: ServerTlsMode,
    /// `None` only for PASSTHROUGH, AUTO_PASSTHROUGH and ISTIO_MUTUAL (the workload
    /// certificate).
    pub credential: Option<Credential>,
    /// `minProtocolVersion`/`maxProtocolVersion` as Envoy's `TlsProtocol` numbers
    /// (`TLSV1_2` is 3).
    pub min_version: Option<i32>,
    pub max_version: Option<i32>,
    pub cipher_suites: Vec<String>,
    /// MUTUAL: names a client certificate must carry (exact).
    pub subject_alt_names: Vec<String>,
    /// A server of protocol TLS (not HTTPS) that terminates: the decrypted stream is TCP,
    /// routed by the `tcp[]` routes of the VirtualServices bound to the gateway.
    #[serde(default)]
    pub tcp: bool,
}

/// A TLS Secret (`kubernetes.io/tls` with `tls.crt`/`tls.key`/`ca.crt`, or Istio's generic
/// form with `cert`/`key`/`cacert`), validated by the source: PEM that parses and a key
/// that matches the certificate, or the reason it cannot be served.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TlsSecret {
    pub key: ConfigKey,
    /// The certificate chain and key (`None`: a CA-only Secret, or an invalid one).
    pub identity: Option<TlsIdentity>,
    /// The CA bundle (PEM) clients are verified against.
    pub ca: Option<String>,
    /// Why the Secret cannot be served (not PEM, key does not match...).
    pub problem: Option<String>,
}

/// A certificate chain with its private key.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TlsIdentity {
    pub cert_chain: String,
    pub private_key: String,
    /// SHA-256 of the leaf certificate's DER, hex: how the Secret is shown anywhere.
    pub fingerprint: String,
}

/// Key material never reaches a log or a debug answer through `{:?}`.
impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsIdentity(sha256:{}, key redacted)", self.fingerprint)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Gateway {
    pub key: ConfigKey,
    pub selector: Labels,
    pub servers: Vec<GatewayServer>,
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

impl DestinationRule {
    /// This rule's [`InboundRulePools`].
    pub fn inbound_pools(&self) -> InboundRulePools {
        let Some(policy) = &self.traffic_policy else {
            return Vec::new();
        };
        let out: InboundRulePools = std::iter::once(None)
            .chain(policy.port_level.iter().map(|(p, _)| Some(*p)))
            .map(|port| (port, InboundPool::of_policy(&policy.at_port(port).0)))
            .collect();
        if out.iter().all(|(_, p)| p.is_none()) {
            return Vec::new();
        }
        out
    }
}

/// The pool of `pools` ([`InboundRulePools`]) on service port `port`.
pub fn inbound_pool_at(pools: &InboundRulePools, port: u16) -> Option<&InboundPool> {
    pools
        .iter()
        .find(|(p, _)| *p == Some(port))
        .or_else(|| pools.iter().find(|(p, _)| p.is_none()))
        .and_then(|(_, pool)| pool.as_ref())
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
        crate::translate::outbound_cluster_name(self.port, self.subset.as_deref(), &self.host)
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

/// The virtual host a sidecar route configuration ends with, for hosts outside the registry:
/// Istio's `allow_any` (to `PassthroughCluster`, or the Sidecar's `egressProxy` cluster) or
/// `block_all` (a 502) on captured listeners, by `outboundTrafficPolicy`; none on bound ones.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum UnknownHosts {
    None,
    /// To this cluster.
    AllowAny(String),
    BlockAll,
}

impl UnknownHosts {
    /// The catch-all of a captured listener of a scope of `spec`.
    pub fn captured(spec: &ScopeSpec) -> UnknownHosts {
        if spec.registry_only {
            UnknownHosts::BlockAll
        } else {
            UnknownHosts::AllowAny(spec.outbound_fallback())
        }
    }
}

/// What a scope's configuration depends on besides the hosts it sees: the Sidecar in effect
/// (none: defaults; routers see everything exported) and the mesh defaults it applies.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ScopeSpec {
    pub sidecar: Option<Sidecar>,
    /// Traffic to hosts outside the registry is blocked: the Sidecar's mode, else the mesh's.
    pub registry_only: bool,
    /// The retry policy of routes no VirtualService governs (the mesh's default).
    pub default_retries: Option<Retries>,
    /// The mesh's connect timeout, for the inbound clusters of the Sidecar's `ingress`.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_ms: u64,
    /// The mesh's `protocolDetectionTimeout` ([`MeshSettings::protocol_detection_timeout_ms`]).
    #[serde(default)]
    pub detection_timeout_ms: Option<u64>,
}

fn default_connect_timeout() -> u64 {
    DEFAULT_CONNECT_TIMEOUT_MS
}

impl ScopeSpec {
    /// Where a captured connection no service claims goes: `BlackHoleCluster` under
    /// REGISTRY_ONLY, else the Sidecar's `egressProxy` cluster, else `PassthroughCluster`.
    pub fn outbound_fallback(&self) -> String {
        if self.registry_only {
            return crate::translate::BLACKHOLE_CLUSTER.to_string();
        }
        self.sidecar
            .as_ref()
            .and_then(|s| s.egress_proxy.as_ref())
            .map_or_else(
                || crate::translate::PASSTHROUGH_CLUSTER.to_string(),
                EgressProxy::cluster,
            )
    }

    pub fn new(sidecar: Option<Sidecar>, mesh: &MeshSettings) -> ScopeSpec {
        let registry_only = sidecar
            .as_ref()
            .and_then(|s| s.registry_only)
            .unwrap_or(mesh.registry_only);
        ScopeSpec {
            sidecar,
            registry_only,
            default_retries: mesh.default_retries.clone(),
            connect_timeout_ms: mesh.connect_timeout_ms,
            detection_timeout_ms: mesh.protocol_detection_timeout_ms,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ProxyKind {
    Sidecar,
    Router,
    /// A gRPC client or server using gRPC's xDS support (node metadata `GENERATOR: grpc`):
    /// scoped like a sidecar, but it looks listeners up by `host:port` (`xds:///host:port`)
    /// and has no traffic capture and no inbound side.
    Proxyless,
}

/// A connected proxy, from its node id and node metadata.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Proxy {
    pub id: ProxyId,
    pub kind: ProxyKind,
    pub ips: Vec<String>,
    pub namespace: String,
    pub labels: Labels,
    /// `INTERCEPTION_MODE: NONE`: no iptables capture, so no virtual listeners.
    pub interception_none: bool,
    /// Node metadata `SERVICE_ACCOUNT`: the workload identity's service account (`None`:
    /// `default`, as Kubernetes runs a Pod that names none).
    #[serde(default)]
    pub service_account: Option<String>,
    /// Where it runs (`region/zone/subzone`, empty: unknown): the node's `locality`, or
    /// the locality labels of its workload, as Istio reads it.
    #[serde(default)]
    pub locality: String,
    /// Node metadata `IDLE_TIMEOUT` (a Go duration), in nanoseconds: Istio's idle timeout of
    /// every connection manager and `tcp_proxy` of the proxy (see
    /// [`crate::assemble::apply_idle_timeout`]). `None`: not sent, or not a valid duration.
    #[serde(default)]
    pub idle_timeout_ns: Option<u64>,
}

impl Proxy {
    /// The service account the proxy's workload certificate names.
    pub fn service_account(&self) -> &str {
        self.service_account.as_deref().unwrap_or("default")
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
    /// The mesh config in effect (one per layer). Keep it the last variant: records sort by
    /// variant, and the naive recompute reads mesh records from the end of a snapshot.
    Mesh(MeshSettings),
}

/// xDS resource types, in make-before-break push order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ResourceType {
    Cluster,
    Endpoint,
    Listener,
    Route,
    /// SDS: TLS certificates and validation contexts, by name (`kubernetes://NAME`).
    Secret,
}

impl ResourceType {
    /// How many types there are: the length of per-type arrays.
    pub const COUNT: usize = 5;

    pub const ALL: [ResourceType; ResourceType::COUNT] = [
        ResourceType::Cluster,
        ResourceType::Endpoint,
        ResourceType::Listener,
        ResourceType::Route,
        ResourceType::Secret,
    ];

    /// Position in [`ResourceType::ALL`]: the index of per-type arrays.
    pub fn index(self) -> usize {
        match self {
            ResourceType::Cluster => 0,
            ResourceType::Endpoint => 1,
            ResourceType::Listener => 2,
            ResourceType::Route => 3,
            ResourceType::Secret => 4,
        }
    }

    pub fn type_url(self) -> &'static str {
        match self {
            ResourceType::Cluster => "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            ResourceType::Endpoint => {
                "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
            }
            ResourceType::Listener => "type.googleapis.com/envoy.config.listener.v3.Listener",
            ResourceType::Route => "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
            ResourceType::Secret => {
                "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
            }
        }
    }

    pub fn from_type_url(url: &str) -> Option<ResourceType> {
        ResourceType::ALL.into_iter().find(|t| t.type_url() == url)
    }

    pub fn short(self) -> &'static str {
        match self {
            ResourceType::Cluster => "CDS",
            ResourceType::Endpoint => "EDS",
            ResourceType::Listener => "LDS",
            ResourceType::Route => "RDS",
            ResourceType::Secret => "SDS",
        }
    }
}

/// An encoded resource body, shared (reference-counted) by every proxy that holds it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Body(pub Arc<[u8]>);

/// Content hash of an encoded body: the per-resource xDS version.
pub fn version_of(bytes: &[u8]) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(bytes))
}

/// A named, encoded resource.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Resource {
    pub rtype: ResourceType,
    pub name: String,
    pub version: String,
    pub body: Body,
}

impl Resource {
    pub fn new(rtype: ResourceType, name: String, bytes: Vec<u8>) -> Self {
        let version = version_of(&bytes);
        Resource {
            rtype,
            name,
            version,
            body: Body(bytes.into()),
        }
    }

    pub fn key(&self) -> ResourceKey {
        ResourceKey {
            rtype: self.rtype,
            name: self.name.clone(),
            version: self.version.clone(),
        }
    }
}

/// What flows per proxy: a resource's identity and version, never its body.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResourceKey {
    pub rtype: ResourceType,
    pub name: String,
    pub version: String,
}

/// A configuration problem found while computing; retracted when the inputs are fixed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConfigError {
    pub object: ConfigKey,
    pub code: ErrorCode,
    pub message: String,
}

/// What kind of problem a [`ConfigError`] is: status writing gives each its own
/// `validationMessages` code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// A host another service already defines.
    HostConflict,
    /// A route or mirror destination names a subset no DestinationRule of its host defines.
    SubsetNotDefined,
    /// A VirtualService names a gateway no Gateway defines.
    GatewayNotDefined,
    /// A route or mirror destination names a host no service defines.
    HostNotFound,
    /// A destination names a port its host does not have.
    PortNotFound,
    /// A destination names no port and its host has several (Istio's IST0112).
    PortSelectorRequired,
    /// A Gateway's selector matches no workload (Pod or WorkloadEntry).
    GatewaySelectsNothing,
    /// A TCP service sidecars cannot tell apart from another on its port.
    TcpServiceConflict,
    /// Two VirtualServices bound to the mesh name the same host: one is in effect for it.
    VirtualServiceConflict,
    /// A route delegates to a VirtualService that does not exist or has hosts.
    DelegateNotFound,
    /// A gateway server's certificate Secret is missing, in another namespace, or invalid.
    GatewaySecret,
    /// A VirtualService `tls[]` route a gateway server cannot take (its SNI names are not
    /// among the server's hosts).
    TlsRouteUnmatched,
    /// Two Gateways selecting one workload put servers of different protocols on one port.
    GatewayPortConflict,
    /// A DestinationRule's `credentialName` Secret is missing from a client proxy's
    /// namespace, or cannot be served: that proxy's clusters of the rule fail closed.
    DestinationRuleSecret,
    /// A DestinationRule merged into an earlier one of its namespace for the same host (a
    /// warning: the merge is what Istio does, but parts of it may be set aside).
    DestinationRuleMerged,
    /// A DestinationRule's `tls` (SIMPLE, MUTUAL, ISTIO_MUTUAL) applies to a proxyless gRPC
    /// client, which cannot take it from the control plane: its clusters fail closed.
    ProxylessTls,
    /// A Kubernetes `ExternalName` alias that resolves to no service (the host it names is
    /// in no registry, or its chain loops), or a destination naming an alias whose named
    /// host has no cluster (a warning: the config works as Istio's would).
    AliasUnresolved,
}

impl ErrorCode {
    /// The analysis message code and name it is reported under (validate, status),
    /// after the `istioctl analyze` message it matches.
    pub fn message_code(self) -> (&'static str, &'static str) {
        match self {
            ErrorCode::SubsetNotDefined
            | ErrorCode::GatewayNotDefined
            | ErrorCode::HostNotFound
            | ErrorCode::PortNotFound
            | ErrorCode::GatewaySelectsNothing
            | ErrorCode::DelegateNotFound => ("MF0004", "ReferencedResourceNotFound"),
            ErrorCode::HostConflict => ("MF0005", "ConflictingHost"),
            ErrorCode::TcpServiceConflict => ("MF0006", "ConflictingTcpService"),
            ErrorCode::VirtualServiceConflict => {
                ("MF0007", "ConflictingMeshGatewayVirtualServiceHosts")
            }
            ErrorCode::GatewaySecret => ("MF0008", "InvalidGatewayCredential"),
            ErrorCode::TlsRouteUnmatched => ("MF0009", "TlsRouteNotServed"),
            ErrorCode::DestinationRuleSecret => ("MF0010", "InvalidDestinationRuleCredential"),
            ErrorCode::GatewayPortConflict => ("MF0011", "ConflictingGateways"),
            ErrorCode::DestinationRuleMerged => ("MF0012", "MergedDestinationRules"),
            ErrorCode::ProxylessTls => ("MF0013", "UnsupportedProxylessTls"),
            ErrorCode::PortSelectorRequired => {
                ("MF0014", "VirtualServiceDestinationPortSelectorRequired")
            }
            ErrorCode::AliasUnresolved => ("MF0015", "UnresolvedExternalNameAlias"),
        }
    }

    /// Reported as a warning (the config works as Istio's would), not an error: `validate`
    /// does not fail on it and status writes it at level WARNING.
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            ErrorCode::DestinationRuleMerged | ErrorCode::AliasUnresolved
        )
    }
}

impl ConfigError {
    /// `server` of `gw` gets nothing on its port: servers of another protocol hold it
    /// (`holders`: their Gateways; `what`: their protocol).
    pub fn port_taken(
        gw: &Gateway,
        server: &GatewayServer,
        holders: &std::collections::BTreeSet<ConfigKey>,
        what: &str,
    ) -> ConfigError {
        let names: Vec<String> = holders
            .iter()
            .map(|k| format!("{}/{}", k.namespace, k.name))
            .collect();
        ConfigError {
            object: gw.key.clone(),
            code: ErrorCode::GatewayPortConflict,
            message: format!(
                "{}.port: port {} of this workload is already an {what} server's (Gateway {}); \
                 one listener cannot serve both protocols, so this server gets nothing",
                server.field,
                server.port,
                names.join(", ")
            ),
        }
    }
}

/// A VirtualService with the ports of every destination host it names, so routes can
/// resolve an omitted destination port the way Istio does.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResolvedVs {
    pub vs: VirtualService,
    pub dest_ports: BTreeMap<Hostname, Vec<u16>>,
}

/// Who holds a resource, for provenance: every proxy of a scope, or one proxy (its inbound
/// side).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Holder {
    Scope(ScopeKey),
    Proxy(ProxyId),
}

/// One provenance row: the resource `(holder, type, name)` was produced from input `.1`.
pub type ProvenanceRow = ((Holder, ResourceType, String), ConfigKey);

/// Who a configuration is for, as a route match's `sourceNamespace` and `sourceLabels` see
/// it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Source<'a> {
    /// The proxies' namespace (sidecars' and gateways' alike, as Istio compares
    /// `sourceNamespace` with the proxy's own); `None` matches no `sourceNamespace`.
    pub namespace: Option<&'a str>,
    /// The mesh's `sourceLabels` selectors the proxies match.
    pub labels: &'a [Labels],
    /// Proxyless gRPC clients, which read a route's timeout from `max_stream_duration`.
    pub proxyless: bool,
}

impl Source<'_> {
    /// Whether a match with these source conditions applies to these proxies.
    pub fn admits(&self, namespace: Option<&String>, labels: Option<&Labels>) -> bool {
        namespace.is_none_or(|ns| Some(ns.as_str()) == self.namespace)
            && labels.is_none_or(|sel| self.labels.contains(sel))
    }
}

/// What a proxy's configuration is computed for. Proxies with the same scope share all
/// scope-level work; only the inbound part is per proxy.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScopeKey {
    /// A sidecar in `namespace`, under the Sidecar resource in effect (if any).
    Sidecar {
        namespace: String,
        sidecar: Option<ConfigKey>,
        interception_none: bool,
        /// Proxyless gRPC: API listeners named `host:port` instead of socket listeners.
        proxyless: bool,
        /// The VirtualServices' `sourceLabels` selectors these proxies match (sorted).
        #[serde(default)]
        source_labels: Vec<Labels>,
        /// The proxies' locality, where locality load balancing may make their load
        /// assignments differ (see [`ScopeKey::with_locality`]); `None`: unknown or unused.
        #[serde(default)]
        locality: Option<String>,
        /// The proxies' values of the labels some `failoverPriority` reads (see
        /// [`ScopeKey::with_priority_labels`]); `None`: none read.
        #[serde(default)]
        priority_labels: Option<Vec<(String, String)>>,
        /// The proxies' node metadata `IDLE_TIMEOUT` ([`Proxy::idle_timeout_ns`]; never for
        /// proxyless clients, which Istio does not give it): their listeners carry it.
        #[serde(default)]
        idle_timeout_ns: Option<u64>,
    },
    /// A gateway proxy in `namespace` selected by these Gateways (sorted).
    Router {
        namespace: String,
        gateways: Vec<ConfigKey>,
        /// As for sidecars.
        #[serde(default)]
        source_labels: Vec<Labels>,
        /// As for sidecars.
        #[serde(default)]
        locality: Option<String>,
        /// As for sidecars.
        #[serde(default)]
        priority_labels: Option<Vec<(String, String)>>,
        /// As for sidecars.
        #[serde(default)]
        idle_timeout_ns: Option<u64>,
        /// `(service port, target port)`: where a server of a service port listens, as
        /// Istio's gateways listen on the target port of the Service of their pods that has
        /// the server's port ([`crate::rules::gateway_ports`]); a port not here is listened
        /// on as written.
        #[serde(default)]
        ports: Vec<(u16, u16)>,
    },
}

impl ScopeKey {
    /// A proxyless gRPC client's scope.
    pub fn is_proxyless(&self) -> bool {
        matches!(
            self,
            ScopeKey::Sidecar {
                proxyless: true,
                ..
            }
        )
    }

    pub fn namespace(&self) -> &str {
        match self {
            ScopeKey::Sidecar { namespace, .. } | ScopeKey::Router { namespace, .. } => namespace,
        }
    }

    /// The `sourceLabels` selectors its proxies match.
    pub fn source_labels(&self) -> &[Labels] {
        match self {
            ScopeKey::Sidecar { source_labels, .. } | ScopeKey::Router { source_labels, .. } => {
                source_labels
            }
        }
    }

    /// Who its configuration is for, as route matches' source conditions see it.
    pub fn source(&self) -> Source<'_> {
        match self {
            ScopeKey::Sidecar {
                namespace,
                source_labels,
                proxyless,
                ..
            } => Source {
                namespace: Some(namespace),
                labels: source_labels,
                proxyless: *proxyless,
            },
            ScopeKey::Router {
                namespace,
                source_labels,
                ..
            } => Source {
                namespace: Some(namespace),
                labels: source_labels,
                proxyless: false,
            },
        }
    }

    /// The node metadata `IDLE_TIMEOUT` its proxies share, in nanoseconds.
    pub fn idle_timeout_ns(&self) -> Option<u64> {
        match self {
            ScopeKey::Sidecar {
                idle_timeout_ns, ..
            }
            | ScopeKey::Router {
                idle_timeout_ns, ..
            } => *idle_timeout_ns,
        }
    }

    /// The client locality its proxies share ("" where unknown or not used).
    pub fn locality(&self) -> &str {
        match self {
            ScopeKey::Sidecar { locality, .. } | ScopeKey::Router { locality, .. } => {
                locality.as_deref().unwrap_or_default()
            }
        }
    }

    /// The same scope for proxies in `locality`: only proxies with a locality, and only while
    /// some rule of the mesh may balance by locality (see
    /// [`DestinationRule::may_balance_by_locality`]), are split by it, so other meshes keep
    /// their scopes whole.
    pub fn with_locality(mut self, loc: String) -> Self {
        match &mut self {
            ScopeKey::Sidecar { locality, .. } | ScopeKey::Router { locality, .. } => {
                *locality = Some(loc)
            }
        }
        self
    }

    /// The values of the labels some `failoverPriority` reads its proxies share.
    pub fn priority_labels(&self) -> Option<&[(String, String)]> {
        match self {
            ScopeKey::Sidecar {
                priority_labels, ..
            }
            | ScopeKey::Router {
                priority_labels, ..
            } => priority_labels.as_deref(),
        }
    }

    /// The same scope for proxies with these values (sorted by key) of the labels the
    /// mesh's `failoverPriority` lists read: only while some list reads a label are proxies
    /// split by it, and only by the labels read.
    pub fn with_priority_labels(mut self, values: Vec<(String, String)>) -> Self {
        match &mut self {
            ScopeKey::Sidecar {
                priority_labels, ..
            }
            | ScopeKey::Router {
                priority_labels, ..
            } => *priority_labels = Some(values),
        }
        self
    }

    /// Where a router's servers of each service port listen (see [`ScopeKey::Router`]'s
    /// `ports`); empty for sidecars.
    pub fn gateway_ports(&self) -> &[(u16, u16)] {
        match self {
            ScopeKey::Router { ports, .. } => ports,
            ScopeKey::Sidecar { .. } => &[],
        }
    }

    /// The same router scope for proxies whose servers listen per `map`.
    pub fn with_gateway_ports(mut self, map: Vec<(u16, u16)>) -> Self {
        if let ScopeKey::Router { ports, .. } = &mut self {
            *ports = map;
        }
        self
    }

    /// The same scope for proxies matching `selectors` (sorted, distinct).
    pub fn with_source_labels(mut self, selectors: Vec<Labels>) -> Self {
        match &mut self {
            ScopeKey::Sidecar { source_labels, .. } | ScopeKey::Router { source_labels, .. } => {
                *source_labels = selectors
            }
        }
        self
    }
}
