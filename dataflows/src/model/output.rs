//! What the dataflow produces: encoded xDS resources, addressed by type, name and content
//! hash, and the configuration errors it finds, with the codes status writing reports.

use super::{ConfigKey, Gateway, GatewayServer};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

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

impl ConfigError {
    /// `server` of `gw` gets nothing on its port, which servers of another protocol hold
    /// (`holders`: their Gateways; `what`: their protocol): the error on `gw`, and a warning
    /// on each holder, so both Gateways of the pair say it (as Istio's IST0145 does).
    pub fn port_clash(
        gw: &Gateway,
        server: &GatewayServer,
        holders: &std::collections::BTreeSet<ConfigKey>,
        what: &str,
    ) -> Vec<ConfigError> {
        let mut out = vec![ConfigError::port_taken(gw, server, holders, what)];
        out.extend(holders.iter().map(|h| ConfigError {
            object: h.clone(),
            code: ErrorCode::GatewayPortHeld,
            message: format!(
                "spec.servers: port {} of this workload is its {what} server's; the {:?} \
                 server of Gateway {}/{} on it gets nothing (IST0145 ConflictingGateways)",
                server.port, server.protocol, gw.key.namespace, gw.key.name
            ),
        }));
        out
    }

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

/// What kind of problem a [`ConfigError`] is: status writing gives each its own
/// `validationMessages` code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// A ServiceEntry set aside: a Kubernetes Service of its host in its namespace, or an
    /// earlier entry it cannot merge with, wins (a warning: Istio sets it aside too).
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
    /// A restricting security policy (PeerAuthentication STRICT, an AuthorizationPolicy, a
    /// RequestAuthentication) selects proxies meshflow does not protect (proxyless gRPC
    /// servers, sidecars without traffic capture).
    SecurityPolicyFailsClosed,
    /// A RequestAuthentication rule's `jwksUri` that meshflow has no keys from (not fetched
    /// yet, or every fetch failed): a request carrying a token of the rule is refused.
    JwksUnavailable,
    /// A `jwksUri` whose latest refresh failed: the keys fetched before stay in use (a
    /// warning).
    JwksStale,
    /// A security policy whose selector matches no workload (a warning, Istio's IST0127).
    SecurityPolicySelectsNothing,
    /// A CUSTOM AuthorizationPolicy names an extension provider that is missing from the
    /// mesh config, invalid, or whose service is not in the registry: the requests its rules
    /// match are denied (as in Istio).
    ExtAuthzProviderUnusable,
    /// An AuthorizationPolicy names a namespace (in `namespaces`, `notNamespaces` or a
    /// principal) in which nothing lives (a warning, Istio's IST0101 for namespaces).
    NamespaceNotFound,
    /// A VirtualService rule no request reaches (a warning, Istio's IST0130).
    UnreachableRule,
    /// A VirtualService match an earlier one takes whole (a warning, Istio's IST0131).
    IneffectiveMatch,
    /// A ServiceEntry TCP port (or one whose protocol is detected) without addresses (a
    /// warning, Istio's IST0134).
    AddressesRequired,
    /// A Kubernetes Service port whose name and `appProtocol` name no protocol (a warning;
    /// Istio's IST0118 is informational).
    PortNameConvention,
    /// An `ExternalName` Service port whose name names no protocol, or `tcp` (a warning,
    /// Istio's IST0150).
    ExternalNamePortName,
    /// Several Sidecars with a `workloadSelector` select one workload (Istio's IST0110).
    SidecarSelectorsConflict,
    /// Several Sidecars without a `workloadSelector` in one namespace (Istio's IST0111).
    SidecarsWithoutSelector,
    /// A VirtualService bound to a Gateway that serves none of its hosts (a warning,
    /// Istio's IST0132).
    HostNotInGateway,
    /// A TLS server's certificate another Gateway of the same workloads also uses (a
    /// warning, Istio's IST0138).
    DuplicateCertificate,
    /// ServiceEntries of one host give one port different protocols where their `exportTo`
    /// overlap (a warning, Istio's IST0177).
    ServiceEntryProtocolConflict,
    /// A Sidecar's `workloadSelector` matches no workload of its namespace (a warning,
    /// Istio's IST0101 for a selector).
    SidecarSelectsNothing,
    /// A DestinationRule host no service's host is or covers (a warning, Istio's IST0174).
    DestinationRuleHostUnknown,
    /// A subset whose labels select none of its host's endpoints (a warning, Istio's
    /// IST0173).
    SubsetSelectsNothing,
    /// A Gateway server port no service of its workloads exposes (a warning, Istio's
    /// IST0162).
    GatewayPortNotOnService,
    /// A VirtualService routes on a JWT claim through a Gateway whose workloads no
    /// RequestAuthentication applies to (Istio's IST0149): the condition never holds there.
    ClaimRouteUnverified,
    /// Servers of two Gateways on the same workloads, port and bind list one host (a
    /// warning, Istio's IST0145).
    GatewayHostShared,
    /// A Gateway server holds a port on which another Gateway's server of another protocol
    /// gets nothing (a warning on the holder; the other's error is
    /// [`ErrorCode::GatewayPortConflict`]).
    GatewayPortHeld,
    /// A Gateway API route a parent it names does not accept (the spec's reasons
    /// `NoMatchingParent`, `NotAllowedByListeners`, `NoMatchingListenerHostname`).
    RouteNotAccepted,
    /// A Gateway API route's backend that cannot be resolved (`BackendNotFound`,
    /// `RefNotPermitted`): its share of requests is answered 500.
    BackendNotResolved,
    /// A BackendTLSPolicy not in effect, or in effect failing closed (the spec's reasons
    /// `Conflicted`, `TargetNotFound`, `NoValidCACertificate`, `Invalid`): which, and why.
    BackendTlsPolicyNotApplied,
    /// A ListenerSet, or one of its listeners, its Gateway does not take (the spec's
    /// reasons `NotAllowed`, `ListenersNotValid`, `HostnameConflict`, `ProtocolConflict`).
    ListenerSetNotAccepted,
    /// A Gateway's `spec.tls.frontend` validation with a CA reference that does not
    /// resolve (`InvalidCACertificateRef`, `InvalidCACertificateKind`, `RefNotPermitted`):
    /// an HTTPS listener none of whose references resolve is not served
    /// (`NoValidCACertificate`).
    FrontendValidationNotApplied,
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
            ErrorCode::GatewayPortConflict
            | ErrorCode::GatewayHostShared
            | ErrorCode::GatewayPortHeld => ("MF0011", "ConflictingGateways"),
            ErrorCode::DestinationRuleMerged => ("MF0012", "MergedDestinationRules"),
            ErrorCode::ProxylessTls => ("MF0013", "UnsupportedProxylessTls"),
            ErrorCode::PortSelectorRequired => {
                ("MF0014", "VirtualServiceDestinationPortSelectorRequired")
            }
            ErrorCode::AliasUnresolved => ("MF0015", "UnresolvedExternalNameAlias"),
            ErrorCode::SecurityPolicyFailsClosed => ("MF0017", "SecurityPolicyNotEnforced"),
            ErrorCode::JwksUnavailable => ("MF0018", "JwksUnavailable"),
            ErrorCode::JwksStale => ("MF0019", "JwksRefreshFailed"),
            ErrorCode::SecurityPolicySelectsNothing | ErrorCode::SidecarSelectsNothing => {
                ("MF0020", "NoMatchingWorkloadsFound")
            }
            ErrorCode::ExtAuthzProviderUnusable => ("MF0021", "ExtensionProviderUnusable"),
            ErrorCode::NamespaceNotFound => ("MF0022", "ReferencedNamespaceNotFound"),
            ErrorCode::UnreachableRule => ("MF0023", "VirtualServiceUnreachableRule"),
            ErrorCode::IneffectiveMatch => ("MF0024", "VirtualServiceIneffectiveMatch"),
            ErrorCode::AddressesRequired => ("MF0025", "ServiceEntryAddressesRequired"),
            ErrorCode::PortNameConvention => ("MF0026", "PortNameIsNotUnderNamingConvention"),
            ErrorCode::ExternalNamePortName => ("MF0027", "ExternalNameServiceTypeInvalidPortName"),
            ErrorCode::SidecarSelectorsConflict => {
                ("MF0028", "ConflictingSidecarWorkloadSelectors")
            }
            ErrorCode::SidecarsWithoutSelector => {
                ("MF0029", "MultipleSidecarsWithoutWorkloadSelectors")
            }
            ErrorCode::HostNotInGateway => ("MF0030", "VirtualServiceHostNotFoundInGateway"),
            ErrorCode::DuplicateCertificate => ("MF0031", "GatewayDuplicateCertificate"),
            ErrorCode::ServiceEntryProtocolConflict => {
                ("MF0032", "ConflictingServiceEntryProtocol")
            }
            ErrorCode::DestinationRuleHostUnknown => ("MF0033", "UnknownDestinationRuleHost"),
            ErrorCode::SubsetSelectsNothing => ("MF0034", "DestinationRuleSubsetNotSelectPods"),
            ErrorCode::GatewayPortNotOnService => ("MF0035", "GatewayPortNotDefinedOnService"),
            ErrorCode::ClaimRouteUnverified => {
                ("MF0036", "JwtClaimBasedRoutingWithoutRequestAuthN")
            }
            ErrorCode::RouteNotAccepted => ("MF0039", "GatewayApiRouteNotAccepted"),
            ErrorCode::BackendNotResolved => ("MF0040", "GatewayApiBackendNotResolved"),
            ErrorCode::BackendTlsPolicyNotApplied => ("MF0041", "BackendTlsPolicyNotApplied"),
            ErrorCode::ListenerSetNotAccepted => ("MF0042", "GatewayApiListenerSetNotAccepted"),
            ErrorCode::FrontendValidationNotApplied => {
                ("MF0043", "GatewayFrontendValidationNotApplied")
            }
        }
    }

    /// Reported as a warning (the config works as Istio's would), not an error: `validate`
    /// does not fail on it and status writes it at level WARNING.
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            ErrorCode::DestinationRuleMerged
                | ErrorCode::HostConflict
                | ErrorCode::AliasUnresolved
                | ErrorCode::JwksStale
                | ErrorCode::SecurityPolicySelectsNothing
                | ErrorCode::NamespaceNotFound
                | ErrorCode::UnreachableRule
                | ErrorCode::IneffectiveMatch
                | ErrorCode::AddressesRequired
                | ErrorCode::PortNameConvention
                | ErrorCode::ExternalNamePortName
                | ErrorCode::HostNotInGateway
                | ErrorCode::DuplicateCertificate
                | ErrorCode::ServiceEntryProtocolConflict
                | ErrorCode::SidecarSelectsNothing
                | ErrorCode::DestinationRuleHostUnknown
                | ErrorCode::SubsetSelectsNothing
                | ErrorCode::GatewayPortNotOnService
                | ErrorCode::GatewayHostShared
                | ErrorCode::GatewayPortHeld
        )
    }
}
