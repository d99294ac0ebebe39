//! The Kubernetes Gateway API's objects (`gateway.networking.k8s.io`), validated: Gateways
//! with their listeners, HTTPRoutes with their rules, ReferenceGrants. The dataflow's
//! `gateway_api` stage turns them into the Gateways and VirtualServices the rest of the
//! dataflow serves, as Istio translates them ([`crate::rules::gateway_api`]).
//!
//! An HTTPRoute rule is carried as the VirtualService route it becomes, less its
//! destinations: the backends need the ReferenceGrants of their namespaces, which only the
//! dataflow has.

use super::{ConfigKey, HttpMatch, HttpRoute, Kind, Labels};
use serde::{Deserialize, Serialize};

/// The GatewayClass names whose Gateways meshflow serves: Istio's own class (an operator
/// moving from istiod keeps their Gateways as written) and meshflow's.
pub const OWNED_CLASSES: [&str; 2] = ["istio", "meshflow"];

/// The label Istio puts on the gateway deployment it provisions for a Gateway (and an
/// operator deploying one by hand puts on theirs): the Gateway's name.
pub const GATEWAY_NAME_LABEL: &str = "gateway.networking.k8s.io/gateway-name";

/// One Gateway API object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GatewayApiObject {
    Gateway(KubeGateway),
    /// An HTTPRoute or a GRPCRoute (its key's kind says which).
    HttpRoute(KubeHttpRoute),
    /// A TCPRoute or a TLSRoute (its key's kind says which).
    L4Route(KubeL4Route),
    ReferenceGrant(ReferenceGrant),
    /// A Namespace's labels: what listeners' `allowedRoutes.namespaces.selector` match.
    Namespace(NamespaceLabels),
    /// A GatewayClass: its status is meshflow's when its controller is.
    GatewayClass(KubeGatewayClass),
    /// A BackendTLSPolicy: TLS to the Services it targets ([`crate::rules::backend_tls`]).
    BackendTlsPolicy(BackendTlsPolicy),
    /// A ConfigMap, for the CA bundle a BackendTLSPolicy may name.
    ConfigMap(CaConfigMap),
    /// A ListenerSet: listeners for a Gateway that admits them
    /// ([`crate::rules::listener_set`]).
    ListenerSet(KubeListenerSet),
}

/// A `ListenerSet` (gateway.networking.k8s.io/v1): listeners another object adds to a
/// Gateway whose `allowedListeners` admits its namespace. Routes attach to them through a
/// `parentRef` to the set, never through one to the Gateway.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KubeListenerSet {
    /// Its key (kind `ListenerSet`).
    pub key: ConfigKey,
    /// `metadata.creationTimestamp` (RFC 3339, empty in a file without one): of two sets
    /// whose listeners conflict, the older keeps its listener.
    pub created: String,
    /// `spec.parentRef`: the Gateway, as (namespace, name).
    pub parent: (String, String),
    /// Its listeners (their `index` is in `spec.listeners`).
    pub listeners: Vec<Listener>,
    /// Listeners left out as written (an unsupported protocol, no certificate), with the
    /// spec's reason.
    pub refused: Vec<RefusedListener>,
}

/// A Gateway's `spec.allowedListeners.namespaces.from`: the namespaces whose ListenerSets
/// it takes. Unset is `None`: a Gateway takes no ListenerSet unless it says so.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AllowedListeners {
    #[default]
    None,
    Same,
    All,
    Selector(NamespaceSelector),
}

/// A ListenerSet as its Gateway takes it ([`crate::rules::listener_set::attach_sets`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AttachedSet {
    pub key: ConfigKey,
    /// Why the Gateway does not take it (the spec's reason — `NotAllowed`,
    /// `ListenersNotValid`, `ParentNotAccepted` — and what it says); `None`: accepted, its
    /// `listeners` served.
    pub refused: Option<(String, String)>,
    /// The listeners served (none when refused).
    pub listeners: Vec<Listener>,
    /// The listeners left out: as written, for their certificate, or for a conflict with
    /// a listener before them.
    pub refused_listeners: Vec<RefusedListener>,
}

/// A listener a Gateway serves: its own (`set` `None`) or an accepted ListenerSet's.
#[derive(Clone, Copy, Debug)]
pub struct Served<'a> {
    pub set: Option<&'a ConfigKey>,
    pub listener: &'a Listener,
}

impl Served<'_> {
    /// The namespace of the object the listener is written in (its `allowedRoutes` `Same`,
    /// its certificates' default namespace).
    pub fn namespace<'g>(&'g self, gw: &'g KubeGateway) -> &'g str {
        self.set
            .map_or(gw.key.namespace.as_str(), |k| k.namespace.as_str())
    }
}

/// A `BackendTLSPolicy` (gateway.networking.k8s.io/v1): every proxy connecting to the
/// Service ports it targets speaks TLS to them, with `hostname` as SNI, verifying the
/// server's certificate against its CA and names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BackendTlsPolicy {
    pub key: ConfigKey,
    /// `metadata.creationTimestamp` (RFC 3339, empty in a file without one): the older of
    /// two policies on one target wins.
    pub created: String,
    /// `spec.targetRefs`, in order.
    pub targets: Vec<PolicyTarget>,
    /// `spec.validation.caCertificateRefs`, in order.
    pub ca_refs: Vec<CaRef>,
    /// `spec.validation.wellKnownCACertificates: System`: the proxy's system CA bundle.
    pub system_ca: bool,
    /// `spec.validation.hostname`: the SNI, and the name the certificate must carry unless
    /// `subject_alt_names` are given.
    pub hostname: String,
    /// `spec.validation.subjectAltNames` (hostnames and URIs): the names the certificate
    /// must carry one of, in place of `hostname`.
    pub subject_alt_names: Vec<String>,
    /// Why the policy cannot be applied as written (the spec's `Invalid`: a
    /// `wellKnownCACertificates` other than `System`): it fails closed.
    pub invalid: Option<String>,
}

/// One of a policy's `targetRefs`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PolicyTarget {
    pub group: String,
    pub kind: String,
    pub name: String,
    /// `sectionName`: a port of the Service, by name.
    pub section: Option<String>,
}

impl PolicyTarget {
    /// A Service of the core group: the only kind of target meshflow applies policies to.
    pub fn is_service(&self) -> bool {
        self.group.is_empty() && self.kind == "Service"
    }
}

/// One of a policy's `caCertificateRefs` (a local reference: the policy's namespace).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CaRef {
    pub group: String,
    pub kind: String,
    pub name: String,
}

/// A ConfigMap as a CA bundle: its `ca.crt`, PEM certificates that parse, or why it is not
/// one (no such key, empty, not PEM). Every ConfigMap read is one, so a policy naming one
/// without a CA can say so.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CaConfigMap {
    pub key: ConfigKey,
    pub ca: Option<String>,
    pub problem: Option<String>,
}

/// A `GatewayClass` (its key: kind `GatewayClass`, no namespace, its name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KubeGatewayClass {
    pub key: ConfigKey,
    /// `spec.controllerName`.
    pub controller: String,
}

/// The `controllerName`s meshflow answers for: Istio's (meshflow serves the `istio` class in
/// istiod's place) and its own.
pub const OWNED_CONTROLLERS: [&str; 2] = [
    "istio.io/gateway-controller",
    "meshflow.dev/gateway-controller",
];

/// The label Kubernetes puts on every Namespace, naming it (since 1.22).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A Namespace, by its labels (its key: kind `Namespace`, no namespace, its name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NamespaceLabels {
    pub key: ConfigKey,
    pub labels: Labels,
}

impl GatewayApiObject {
    pub fn key(&self) -> &ConfigKey {
        match self {
            GatewayApiObject::Gateway(g) => &g.key,
            GatewayApiObject::HttpRoute(r) => &r.key,
            GatewayApiObject::L4Route(r) => &r.key,
            GatewayApiObject::ReferenceGrant(g) => &g.key,
            GatewayApiObject::Namespace(n) => &n.key,
            GatewayApiObject::GatewayClass(c) => &c.key,
            GatewayApiObject::BackendTlsPolicy(p) => &p.key,
            GatewayApiObject::ConfigMap(c) => &c.key,
            GatewayApiObject::ListenerSet(l) => &l.key,
        }
    }
}

/// A `Gateway` (kind `KubernetesGateway` here: Istio's `Gateway` has the name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KubeGateway {
    pub key: ConfigKey,
    /// `spec.gatewayClassName`.
    pub class: String,
    pub listeners: Vec<Listener>,
    /// Listeners left out as written, with the spec's reason and why (an unsupported
    /// protocol, a certificate that cannot be served): their status says so.
    #[serde(default)]
    pub refused: Vec<RefusedListener>,
    /// Why the Gateway is not accepted for its `infrastructure.parametersRef` (the spec's
    /// `InvalidParameters`): none of its listeners is served.
    #[serde(default)]
    pub invalid_parameters: Option<String>,
    /// `spec.allowedListeners`.
    #[serde(default)]
    pub allowed_listeners: AllowedListeners,
    /// The ListenerSets naming it, as it takes them, oldest first (empty as read: filled
    /// where the Gateway meets its sets, [`crate::rules::listener_set::attach_sets`]).
    #[serde(default)]
    pub sets: Vec<AttachedSet>,
    /// `spec.tls.frontend`: how its HTTPS listeners verify clients' certificates (applied
    /// to them where the Gateway meets the ConfigMaps it names,
    /// [`crate::rules::frontend_validation`]).
    #[serde(default)]
    pub frontend: FrontendTls,
}

/// A Gateway's `spec.tls.frontend`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FrontendTls {
    /// `default`: for the HTTPS listeners of a port `per_port` does not name.
    pub default: Option<FrontendValidation>,
    /// `perPort`: a port's own (`None`: the port's listeners verify no client).
    pub per_port: Vec<(u16, Option<FrontendValidation>)>,
}

impl FrontendTls {
    /// The validation of the HTTPS listeners on `port`.
    pub fn for_port(&self, port: u16) -> Option<&FrontendValidation> {
        match self.per_port.iter().find(|(p, _)| *p == port) {
            Some((_, v)) => v.as_ref(),
            None => self.default.as_ref(),
        }
    }

    /// Whether any of it lets clients without a valid certificate in (the Gateway's
    /// `InsecureFrontendValidationMode` condition).
    pub fn insecure(&self) -> bool {
        self.validations().any(|v| v.insecure_fallback)
    }

    /// Every validation written: the default's and the ports'.
    pub fn validations(&self) -> impl Iterator<Item = &FrontendValidation> {
        self.default
            .iter()
            .chain(self.per_port.iter().filter_map(|(_, v)| v.as_ref()))
    }
}

/// One `validation` of `spec.tls.frontend`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FrontendValidation {
    /// `caCertificateRefs`, each with its namespace (the Gateway's when not written).
    pub ca_refs: Vec<(CaRef, String)>,
    /// `mode: AllowInsecureFallback`: a client without a certificate, or with one the CAs
    /// did not sign, is let in all the same.
    pub insecure_fallback: bool,
    /// Where it is written (`spec.tls.frontend.default.validation`), for what is said of it.
    pub field: String,
}

/// A served HTTPS listener's client-certificate validation, its CA references resolved.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClientValidation {
    /// The CA bundle (PEM) of the references that resolved.
    pub ca_pem: String,
    pub insecure_fallback: bool,
    /// The first reference that did not resolve: the listener's `ResolvedRefs` reason and
    /// why (every unresolved one is in the message).
    pub unresolved: Option<(String, String)>,
}

/// A listener left out, as its status reports it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RefusedListener {
    pub name: String,
    /// The spec's reason (`UnsupportedProtocol`, `InvalidCertificateRef`, `RefNotPermitted`,
    /// `ProtocolConflict`, `HostnameConflict`).
    pub reason: String,
    pub why: String,
    /// The route kinds it would take (its status's `supportedKinds`): a listener refused
    /// for its certificate or a conflict still says what it is for.
    pub kinds: Vec<String>,
    /// The listener, when it still holds its port and hostname though it is not served:
    /// one refused for its certificate is accepted all the same (the spec's
    /// `InvalidCertificateRef`, `RefNotPermitted`), so a listener after it on the same port
    /// and hostname conflicts with it rather than taking its traffic.
    #[serde(default)]
    pub holds: Option<Listener>,
    /// The listener's `Accepted` reason when it is not accepted for a reason `reason`
    /// (its `ResolvedRefs` reason) does not name: `NoValidCACertificate`, for a frontend
    /// validation none of whose CA references resolve.
    #[serde(default)]
    pub accepted_reason: Option<String>,
}

impl RefusedListener {
    /// `l`, left out for a conflict with a listener before it (`reason`: the spec's).
    pub fn conflicted(l: &Listener, reason: &str, why: String) -> RefusedListener {
        RefusedListener {
            name: l.name.clone(),
            reason: reason.to_string(),
            why,
            kinds: l.kinds_served(),
            holds: None,
            accepted_reason: None,
        }
    }
}

impl KubeGateway {
    /// Of a class meshflow serves.
    pub fn owned(&self) -> bool {
        OWNED_CLASSES.contains(&self.class.as_str())
    }

    /// Its own listeners that hold their port and hostname: those served, and those refused
    /// for their certificate ([`RefusedListener::holds`]).
    pub fn claims(&self) -> impl Iterator<Item = &Listener> {
        self.listeners
            .iter()
            .chain(self.refused.iter().filter_map(|r| r.holds.as_ref()))
    }

    /// Whether the Gateway itself is accepted: its parameters are read and one of its own
    /// listeners at least is accepted (served, or refused for its certificate only). Its
    /// ListenerSets are served only then.
    pub fn accepted(&self) -> bool {
        self.invalid_parameters.is_none() && self.claims().next().is_some()
    }

    /// Every listener it serves: its own, then its accepted ListenerSets' in precedence
    /// order.
    pub fn served(&self) -> impl Iterator<Item = Served<'_>> {
        let own = self.listeners.iter().map(|listener| Served {
            set: None,
            listener,
        });
        let sets = self
            .sets
            .iter()
            .filter(|s| s.refused.is_none())
            .flat_map(|s| {
                s.listeners.iter().map(move |listener| Served {
                    set: Some(&s.key),
                    listener,
                })
            });
        own.chain(sets)
    }

    /// The `controllerName` its class names (meshflow serves Istio's class in istiod's
    /// place, under Istio's name).
    pub fn controller_name(&self) -> &'static str {
        match self.class.as_str() {
            "istio" => "istio.io/gateway-controller",
            _ => "meshflow.dev/gateway-controller",
        }
    }
}

/// One of a Gateway's `listeners`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Listener {
    pub name: String,
    /// Its index in `spec.listeners`, for the field paths problems are reported at.
    #[serde(default)]
    pub index: usize,
    /// `hostname`: exact or `*.suffix`; `None` matches every host.
    pub hostname: Option<String>,
    pub port: u16,
    pub protocol: ListenerProtocol,
    pub tls: Option<ListenerTls>,
    pub allowed_namespaces: AllowedNamespaces,
    /// `allowedRoutes.kinds` by kind name (group `gateway.networking.k8s.io`); empty: the
    /// kinds the protocol takes.
    pub allowed_kinds: Vec<String>,
}

impl Listener {
    /// Whether meshflow serves routes of `kind` on this listener, by its protocol and TLS
    /// mode: HTTP and GRPC routes on HTTP and terminated HTTPS, TCP routes on TCP and
    /// terminated TLS, TLS routes (by SNI) on TLS, passed through or terminated. What a
    /// listener's `allowedRoutes.kinds` lists beyond these is `InvalidRouteKinds` on its
    /// status.
    pub fn serves_kind(&self, kind: &str) -> bool {
        let passthrough = self.tls.as_ref().is_some_and(|t| t.passthrough);
        match kind {
            "HTTPRoute" | "GRPCRoute" => {
                matches!(
                    self.protocol,
                    ListenerProtocol::Http | ListenerProtocol::Https
                ) && !passthrough
            }
            "TCPRoute" => {
                self.protocol == ListenerProtocol::Tcp
                    || (self.protocol == ListenerProtocol::Tls && !passthrough)
            }
            // On a listener that terminates, the decrypted stream (TLSRouteModeTerminate).
            "TLSRoute" => self.protocol == ListenerProtocol::Tls,
            _ => false,
        }
    }

    /// The route kinds it says it is for, left out or not: those its `allowedRoutes` lists,
    /// or its protocol's, that it would serve.
    pub fn kinds_served(&self) -> Vec<String> {
        let listed: Vec<String> = if self.allowed_kinds.is_empty() {
            self.protocol.default_kind_names()
        } else {
            self.allowed_kinds.clone()
        };
        listed.into_iter().filter(|k| self.serves_kind(k)).collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ListenerProtocol {
    Http,
    Https,
    Tls,
    Tcp,
}

impl ListenerProtocol {
    /// The route kinds a listener of this protocol takes when `allowedRoutes.kinds` is unset.
    pub fn default_kinds(self) -> &'static [&'static str] {
        match self {
            ListenerProtocol::Http | ListenerProtocol::Https => &["HTTPRoute", "GRPCRoute"],
            ListenerProtocol::Tls => &["TLSRoute"],
            ListenerProtocol::Tcp => &["TCPRoute"],
        }
    }

    /// [`Self::default_kinds`], owned (a refused listener's status still lists them).
    pub fn default_kind_names(self) -> Vec<String> {
        self.default_kinds().iter().map(|k| k.to_string()).collect()
    }
}

/// A listener's `tls`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ListenerTls {
    pub passthrough: bool,
    /// `certificateRefs` as (namespace, name) of Secrets.
    pub certificates: Vec<(String, String)>,
    /// The Gateway's `spec.tls.frontend` validation of this (HTTPS) listener, resolved
    /// ([`crate::rules::frontend_validation`]; `None` as read).
    #[serde(default)]
    pub clients: Option<ClientValidation>,
}

/// `allowedRoutes.namespaces.from`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AllowedNamespaces {
    Same,
    All,
    /// Namespaces whose labels match.
    Selector(NamespaceSelector),
}

/// A Kubernetes label selector (`matchLabels` and `matchExpressions`, all of them must
/// hold), as a listener's `allowedRoutes.namespaces.selector` is.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NamespaceSelector {
    pub match_labels: Labels,
    pub expressions: Vec<LabelExpression>,
}

/// One of `matchExpressions`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum LabelExpression {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl NamespaceSelector {
    /// Whether Namespace `ns` is selected, `labels` being its labels when known. Kubernetes
    /// gives every Namespace its name label ([`NAMESPACE_NAME_LABEL`]); of a Namespace not
    /// read nothing else is known, so an expression that holds for a missing label
    /// (`NotIn`, `DoesNotExist` on another key) does not select it: closed, not open.
    pub fn selects(&self, ns: &str, labels: Option<&Labels>) -> bool {
        let mut of = labels.cloned().unwrap_or_default();
        of.entry(NAMESPACE_NAME_LABEL.to_string())
            .or_insert_with(|| ns.to_string());
        let unknown_negative = labels.is_none()
            && self.expressions.iter().any(|e| match e {
                LabelExpression::NotIn(k, _) | LabelExpression::DoesNotExist(k) => {
                    k != NAMESPACE_NAME_LABEL
                }
                LabelExpression::In(..) | LabelExpression::Exists(_) => false,
            });
        !unknown_negative && self.matches(&of)
    }

    /// Whether labels `of` satisfy the selector (an empty selector selects everything).
    pub fn matches(&self, of: &Labels) -> bool {
        self.match_labels.iter().all(|(k, v)| of.get(k) == Some(v))
            && self.expressions.iter().all(|e| match e {
                LabelExpression::In(k, vs) => of.get(k).is_some_and(|v| vs.contains(v)),
                LabelExpression::NotIn(k, vs) => of.get(k).is_none_or(|v| !vs.contains(v)),
                LabelExpression::Exists(k) => of.contains_key(k),
                LabelExpression::DoesNotExist(k) => !of.contains_key(k),
            })
    }
}

/// The Gateway API's name of a route kind (`HTTPRoute`, …): what listeners'
/// `allowedRoutes.kinds` and ReferenceGrants' `from` name.
pub fn route_kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::GrpcRoute => "GRPCRoute",
        Kind::TcpRoute => "TCPRoute",
        Kind::TlsRoute => "TLSRoute",
        _ => "HTTPRoute",
    }
}

/// A `TCPRoute` or `TLSRoute`: each rule's backends share the connections it takes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KubeL4Route {
    pub key: ConfigKey,
    pub created: String,
    pub parents: Vec<ParentRef>,
    /// A TLSRoute's `hostnames` (SNI); empty for a TCPRoute.
    pub hostnames: Vec<String>,
    /// Each rule's backends.
    pub rules: Vec<Vec<BackendRef>>,
}

/// An `HTTPRoute` or `GRPCRoute`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KubeHttpRoute {
    pub key: ConfigKey,
    /// `metadata.creationTimestamp` (RFC 3339, what the API server writes; empty in a file
    /// that has none): the oldest route wins a precedence tie.
    pub created: String,
    pub parents: Vec<ParentRef>,
    /// `hostnames`, as written (exact or `*.suffix`).
    pub hostnames: Vec<String>,
    pub rules: Vec<HttpRouteRule>,
}

/// One of a route's `parentRefs`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ParentRef {
    pub kind: ParentKind,
    pub namespace: String,
    pub name: String,
    /// `sectionName`: a listener's name.
    pub section: Option<String>,
    pub port: Option<u16>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ParentKind {
    Gateway,
    /// A ListenerSet: its listeners, on its Gateway.
    ListenerSet,
    /// A Service (the mesh, GAMMA).
    Service,
}

/// One of a route's `rules`: the VirtualService route it becomes (`route` left empty) for
/// each of its matches, and its backends.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HttpRouteRule {
    /// The route as Istio's form has it: filters, timeouts and retries set, no matches and
    /// no destinations.
    pub template: HttpRoute,
    /// `matches`; empty: the rule's one match, the path prefix `/`.
    pub matches: Vec<HttpMatch>,
    pub backends: Vec<BackendRef>,
}

/// One of a rule's `backendRefs`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BackendRef {
    /// The fully qualified host it names (a Service's `name.namespace.svc.<domain>`, or an
    /// Istio `Hostname`); `None`: a kind meshflow cannot route to, which answers 500.
    pub host: Option<String>,
    /// The namespace of the object named: a namespace other than the route's needs a
    /// ReferenceGrant there.
    pub namespace: String,
    /// The kind named (`Service`, `Hostname`, …), for ReferenceGrants.
    pub kind: String,
    pub name: String,
    pub port: Option<u16>,
    pub weight: u32,
    /// The backend's own `RequestHeaderModifier`/`ResponseHeaderModifier` filters.
    pub headers: super::HeaderOps,
}

/// A `ReferenceGrant`: what objects of other namespaces may name in its own.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReferenceGrant {
    pub key: ConfigKey,
    /// `from`: (kind, namespace) of the objects that may refer.
    pub from: Vec<(String, String)>,
    /// `to`: (kind, name) of what they may name here; `None`: any object of the kind.
    pub to: Vec<(String, Option<String>)>,
}

impl ReferenceGrant {
    /// Whether an object of kind `from_kind` in `from_ns` may name `to_kind` `to_name` in the
    /// grant's namespace.
    pub fn allows(&self, from_kind: &str, from_ns: &str, to_kind: &str, to_name: &str) -> bool {
        self.from
            .iter()
            .any(|(k, ns)| k == from_kind && ns == from_ns)
            && self
                .to
                .iter()
                .any(|(k, n)| k == to_kind && n.as_deref().is_none_or(|n| n == to_name))
    }
}
