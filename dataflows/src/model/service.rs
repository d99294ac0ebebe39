//! Services and where they run: [`Service`] (a Kubernetes Service or one host of a
//! ServiceEntry), its endpoints as sources report them and as they resolve, and the
//! workloads (Pods, WorkloadEntries, a ServiceEntry's `workloadSelector`) behind them.

use super::{spiffe_id, ConfigKey, Hostname, Labels, MtlsMode, PeerModes, Protocol};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    /// Labelled as Istio's own (an `istio` label, or `release: istio`): analysis leaves its
    /// port names alone, as Istio's does (a gateway's `status-port` is named so on purpose).
    #[serde(default)]
    pub control_plane: bool,
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

/// Whether an object of namespace `owner_ns` with `export_to` (empty: everywhere) is
/// visible from namespace `ns`: `*`, `.` (its own namespace) or `ns` itself.
pub fn exported_to(export_to: &[String], owner_ns: &str, ns: &str) -> bool {
    export_to.is_empty()
        || export_to
            .iter()
            .any(|e| e == "*" || (e == "." && owner_ns == ns) || e == ns)
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
    /// Its workload's PeerAuthentication disables mTLS on the endpoint's port: auto mTLS
    /// clients send it plaintext even though it runs a sidecar (Istio drops the endpoint's
    /// `tlsMode: istio` metadata alike).
    #[serde(default)]
    pub mtls_disabled: bool,
}

impl Endpoint {
    /// The namespace of the service it serves: its EndpointSlice's, or its ServiceEntry's
    /// (the first of its origins).
    pub fn service_namespace(&self) -> &str {
        self.origins.first().map_or("", |o| o.namespace.as_str())
    }

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
            mtls_disabled: workload
                .and_then(|w| w.peer.as_ref())
                .is_some_and(|m| m.mode_for(raw.port) == MtlsMode::Disable),
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
    /// What the PeerAuthentications that apply to it say, where one disables mTLS on some
    /// port (`None` otherwise, and always as the sources read it: the engines fill it in,
    /// [`PeerModes::compose`]). Its clients' auto mTLS sends plaintext there.
    #[serde(default)]
    pub peer: Option<PeerModes>,
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
