//! The mesh's settings: [`MeshConfig`], fixed at start-up, and [`MeshSettings`], Istio's
//! MeshConfig as an input record that may change while serving, with the defaults it
//! gives clusters ([`ClusterDefaults`]).

use super::{
    failover_priority_keys, spiffe_id, ConfigKey, DestinationRule, LocalityLbSetting, Record,
    Retries, Service, VirtualService,
};
use serde::{Deserialize, Serialize};

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

/// `pathNormalization.normalization`: how every HTTP connection manager rewrites request
/// paths before routing and filters see them (Istio's names; `DEFAULT` is `BASE`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum PathNormalization {
    /// Paths as the client sent them.
    None,
    /// RFC 3986 normalization: dot segments resolved (Istio's default).
    #[default]
    Base,
    /// `BASE`, and repeated slashes merged.
    MergeSlashes,
    /// `MERGE_SLASHES`, and escaped slashes (`%2F`, `%5C`) decoded and forwarded.
    DecodeAndMergeSlashes,
}

impl PathNormalization {
    pub fn is_base(&self) -> bool {
        *self == PathNormalization::Base
    }
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
    /// `trustDomainAliases` and `meshMTLS`: what sidecars' inbound mTLS accepts.
    #[serde(default)]
    pub inbound_mtls: InboundMtls,
    /// `extensionProviders` of an external authorization kind, as written (in order): what
    /// CUSTOM AuthorizationPolicies name.
    #[serde(default)]
    pub ext_authz: Vec<super::ExtAuthzProvider>,
    /// `pathNormalization`: what every connection manager no security policy checks does to
    /// paths (those policies check keep the strictest: [`PathNormalization`]).
    #[serde(default)]
    pub path_normalization: PathNormalization,
}

/// What a sidecar's inbound mTLS chains accept, from the mesh config: clients whose
/// certificate names a SPIFFE identity of one of `trust_domains` (the mesh's
/// `trustDomain` and its `trustDomainAliases`, as Istio validates them), over TLS of at
/// least `min_tls13` (`meshMTLS.minProtocolVersion: TLSV1_3`) with `cipher_suites`
/// (`meshMTLS.cipherSuites`, else Istio's list) and `ecdh_curves` (`meshMTLS.ecdhCurves`,
/// else Envoy's).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InboundMtls {
    pub trust_domains: Vec<String>,
    #[serde(default)]
    pub min_tls13: bool,
    #[serde(default)]
    pub cipher_suites: Vec<String>,
    #[serde(default)]
    pub ecdh_curves: Vec<String>,
}

impl Default for InboundMtls {
    fn default() -> Self {
        InboundMtls {
            trust_domains: vec![default_trust_domain()],
            min_tls13: false,
            cipher_suites: Vec::new(),
            ecdh_curves: Vec::new(),
        }
    }
}

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
            inbound_mtls: InboundMtls::default(),
            ext_authz: Vec::new(),
            path_normalization: PathNormalization::Base,
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

fn yes() -> bool {
    true
}

/// Istio's default trust domain.
pub const DEFAULT_TRUST_DOMAIN: &str = "cluster.local";

fn default_trust_domain() -> String {
    DEFAULT_TRUST_DOMAIN.to_string()
}

/// Istio's default connect timeout (`connectTimeout`).
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;

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
