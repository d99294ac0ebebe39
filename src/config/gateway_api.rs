//! Gateway API types (gateway.networking.k8s.io v1, v1beta1, v1alpha2) as they appear in
//! YAML: camelCase, unknown fields collected and reported by name. Only the fields meshflow
//! acts on are typed; the names follow the Gateway API's reference (v1.x).

use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayClassSpec {
    pub controller_name: String,
    pub description: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewaySpec {
    pub gateway_class_name: String,
    pub listeners: Vec<Listener>,
    pub infrastructure: Option<GatewayInfrastructure>,
    pub allowed_listeners: Option<AllowedListeners>,
    pub tls: Option<GatewayTls>,
}

/// A Gateway's `spec.tls`: `frontend` (how clients' certificates are verified on its HTTPS
/// listeners). `backend` (a client certificate for TLS backends) is not typed: it is
/// reported as not translated.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayTls {
    pub frontend: Option<FrontendTls>,
}

/// `spec.tls.frontend`: the validation of every HTTPS listener (`default`), and of those
/// on a port (`perPort`, which replaces the default there).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FrontendTls {
    pub default: Option<FrontendTlsConfig>,
    pub per_port: Vec<FrontendPortTls>,
}

/// One of `spec.tls.frontend.perPort`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FrontendPortTls {
    pub port: i64,
    pub tls: Option<FrontendTlsConfig>,
}

/// A `TLSConfig` of `spec.tls.frontend`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FrontendTlsConfig {
    pub validation: Option<FrontendValidation>,
}

/// `validation`: the CA bundles a client's certificate must chain to, and `mode`
/// (`AllowValidOnly`, the default, or `AllowInsecureFallback`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FrontendValidation {
    pub ca_certificate_refs: Vec<ObjectRef>,
    pub mode: Option<String>,
}

/// A Gateway's `spec.allowedListeners`: the namespaces whose ListenerSets it takes.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AllowedListeners {
    /// `from` (`All`, `Same`, `Selector`, `None`) and `selector`, as a listener's
    /// `allowedRoutes.namespaces` has them.
    pub namespaces: Option<RouteNamespaces>,
}

/// A ListenerSet's spec (v1): the Gateway it adds listeners to, and its listeners (each
/// a Gateway listener's fields).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListenerSetSpec {
    pub parent_ref: Option<ObjectRef>,
    pub listeners: Vec<Listener>,
}

/// `spec.infrastructure`: what a provisioning implementation puts on what it creates.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayInfrastructure {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub parameters_ref: Option<ObjectRef>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Listener {
    pub name: String,
    pub hostname: Option<String>,
    pub port: i64,
    pub protocol: String,
    pub tls: Option<ListenerTls>,
    pub allowed_routes: Option<AllowedRoutes>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListenerTls {
    pub mode: Option<String>,
    pub certificate_refs: Vec<ObjectRef>,
}

/// A reference by group, kind, namespace and name (`certificateRefs`, `backendRefs`,
/// `parentRefs`), with the fields each of those adds.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectRef {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub name: String,
    pub namespace: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AllowedRoutes {
    pub namespaces: Option<RouteNamespaces>,
    pub kinds: Vec<RouteGroupKind>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteNamespaces {
    pub from: Option<String>,
    pub selector: Option<LabelSelector>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteGroupKind {
    pub group: Option<String>,
    pub kind: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteSpec {
    pub parent_refs: Vec<ParentReference>,
    pub hostnames: Vec<String>,
    pub rules: Vec<HttpRouteRule>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ParentReference {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: String,
    pub section_name: Option<String>,
    pub port: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteRule {
    pub name: Option<String>,
    pub matches: Vec<HttpRouteMatch>,
    pub filters: Vec<HttpRouteFilter>,
    pub backend_refs: Vec<HttpBackendRef>,
    pub timeouts: Option<HttpRouteTimeouts>,
    pub retry: Option<HttpRouteRetry>,
}

/// A rule's `retry` (experimental channel, `HTTPRouteRetry`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteRetry {
    pub codes: Vec<i64>,
    pub attempts: Option<i64>,
    pub backoff: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteMatch {
    pub path: Option<HttpPathMatch>,
    pub headers: Vec<NameValueMatch>,
    pub query_params: Vec<NameValueMatch>,
    pub method: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpPathMatch {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub value: Option<String>,
}

/// A header or query parameter match.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NameValueMatch {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub name: String,
    pub value: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteFilter {
    #[serde(rename = "type")]
    pub kind: String,
    pub request_header_modifier: Option<HeaderFilter>,
    pub response_header_modifier: Option<HeaderFilter>,
    pub request_redirect: Option<RequestRedirect>,
    #[serde(rename = "urlRewrite")]
    pub url_rewrite: Option<UrlRewrite>,
    pub request_mirror: Option<RequestMirror>,
    pub cors: Option<CorsFilter>,
    pub extension_ref: Option<ObjectRef>,
}

/// The `CORS` filter (`HTTPCORSFilter`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CorsFilter {
    pub allow_origins: Vec<String>,
    pub allow_credentials: Option<bool>,
    pub allow_methods: Vec<String>,
    pub allow_headers: Vec<String>,
    pub expose_headers: Vec<String>,
    pub max_age: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HeaderFilter {
    pub set: Vec<HeaderValue>,
    pub add: Vec<HeaderValue>,
    pub remove: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HeaderValue {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestRedirect {
    pub scheme: Option<String>,
    pub hostname: Option<String>,
    pub path: Option<PathModifier>,
    pub port: Option<i64>,
    pub status_code: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PathModifier {
    #[serde(rename = "type")]
    pub kind: String,
    pub replace_full_path: Option<String>,
    pub replace_prefix_match: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UrlRewrite {
    pub hostname: Option<String>,
    pub path: Option<PathModifier>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestMirror {
    pub backend_ref: ObjectRefWithPort,
    pub percent: Option<i64>,
    pub fraction: Option<Fraction>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Fraction {
    pub numerator: i64,
    pub denominator: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectRefWithPort {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub name: String,
    pub namespace: Option<String>,
    pub port: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpBackendRef {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub name: String,
    pub namespace: Option<String>,
    pub port: Option<i64>,
    pub weight: Option<i64>,
    pub filters: Vec<HttpRouteFilter>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteTimeouts {
    pub request: Option<String>,
    pub backend_request: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReferenceGrantSpec {
    pub from: Vec<GrantFrom>,
    pub to: Vec<GrantTo>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrantFrom {
    pub group: String,
    pub kind: String,
    pub namespace: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrantTo {
    pub group: String,
    pub kind: String,
    pub name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcRouteSpec {
    pub parent_refs: Vec<ParentReference>,
    pub hostnames: Vec<String>,
    pub rules: Vec<GrpcRouteRule>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcRouteRule {
    pub name: Option<String>,
    pub matches: Vec<GrpcRouteMatch>,
    pub filters: Vec<HttpRouteFilter>,
    pub backend_refs: Vec<HttpBackendRef>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcRouteMatch {
    pub method: Option<GrpcMethodMatch>,
    pub headers: Vec<NameValueMatch>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcMethodMatch {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub service: Option<String>,
    pub method: Option<String>,
}

/// A TCPRoute's or TLSRoute's spec (a TCPRoute has no hostnames).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct L4RouteSpec {
    pub parent_refs: Vec<ParentReference>,
    pub hostnames: Vec<String>,
    pub rules: Vec<L4RouteRule>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct L4RouteRule {
    pub name: Option<String>,
    pub backend_refs: Vec<HttpBackendRef>,
}

/// A BackendTLSPolicy's spec (v1).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BackendTlsPolicySpec {
    pub target_refs: Vec<PolicyTargetRef>,
    pub validation: Option<BackendTlsValidation>,
    /// Implementation-specific TLS options: none is read (each key reported by name).
    pub options: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicyTargetRef {
    pub group: String,
    pub kind: String,
    pub name: String,
    pub section_name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BackendTlsValidation {
    pub ca_certificate_refs: Vec<LocalRef>,
    #[serde(rename = "wellKnownCACertificates")]
    pub well_known_ca_certificates: Option<String>,
    pub hostname: String,
    pub subject_alt_names: Vec<SubjectAltName>,
}

/// A local object reference (the referrer's namespace).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalRef {
    pub group: String,
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubjectAltName {
    #[serde(rename = "type")]
    pub kind: String,
    pub hostname: Option<String>,
    pub uri: Option<String>,
}
