//! Istio networking API types (networking.istio.io v1/v1beta1/v1alpha3) as they appear in
//! YAML: camelCase, unknown fields ignored. Only the fields meshflow acts on are typed;
//! the field names follow Istio's API reference.

use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VirtualServiceSpec {
    pub hosts: Vec<String>,
    pub gateways: Vec<String>,
    pub export_to: Vec<String>,
    pub http: Vec<HttpRoute>,
    pub tcp: Vec<TcpRoute>,
    pub tls: Vec<TlsRoute>,
}

/// A `tls[]` route: passthrough by SNI.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TlsRoute {
    #[serde(rename = "match")]
    pub matches: Vec<TlsMatchAttributes>,
    pub route: Vec<HttpRouteDestination>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TlsMatchAttributes {
    pub sni_hosts: Vec<String>,
    /// The conditions a TCP match has too.
    #[serde(flatten)]
    pub l4: L4MatchAttributes,
}

/// A `tcp[]` route. `sourceSubnet` is left untyped on purpose: it is reported (and the
/// route left out) as a field meshflow cannot honour.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TcpRoute {
    #[serde(rename = "match")]
    pub matches: Vec<L4MatchAttributes>,
    pub route: Vec<HttpRouteDestination>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct L4MatchAttributes {
    pub destination_subnets: Vec<String>,
    pub port: Option<i64>,
    pub gateways: Vec<String>,
    pub source_namespace: Option<String>,
    pub source_labels: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRoute {
    pub name: Option<String>,
    #[serde(rename = "match")]
    pub matches: Vec<HttpMatchRequest>,
    pub route: Vec<HttpRouteDestination>,
    pub timeout: Option<String>,
    pub retries: Option<HttpRetry>,
    pub redirect: Option<HttpRedirect>,
    pub direct_response: Option<HttpDirectResponse>,
    pub rewrite: Option<HttpRewrite>,
    pub headers: Option<Headers>,
    pub mirror: Option<Destination>,
    pub mirror_percentage: Option<Percent>,
    /// The older, whole-percent form of `mirrorPercentage` (also spelt `mirror_percent`).
    #[serde(alias = "mirror_percent")]
    pub mirror_percent: Option<i64>,
    pub mirrors: Vec<HttpMirrorPolicy>,
    pub fault: Option<HttpFaultInjection>,
    pub cors_policy: Option<CorsPolicy>,
    pub delegate: Option<Delegate>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Delegate {
    pub name: String,
    pub namespace: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CorsPolicy {
    pub allow_origins: Vec<StringMatch>,
    pub allow_origin: Vec<String>,
    pub allow_methods: Vec<String>,
    pub allow_headers: Vec<String>,
    pub expose_headers: Vec<String>,
    pub max_age: Option<String>,
    pub allow_credentials: Option<bool>,
    pub unmatched_preflights: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRedirect {
    pub uri: Option<String>,
    pub authority: Option<String>,
    pub port: Option<i64>,
    /// `FROM_PROTOCOL_DEFAULT` or `FROM_REQUEST_PORT` (a oneof with `port`).
    pub derive_port: Option<String>,
    pub scheme: Option<String>,
    pub redirect_code: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpDirectResponse {
    pub status: i64,
    pub body: Option<HttpBody>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpBody {
    pub string: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRewrite {
    pub uri: Option<String>,
    pub authority: Option<String>,
    pub uri_regex_rewrite: Option<RegexRewrite>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RegexRewrite {
    #[serde(rename = "match")]
    pub pattern: String,
    pub rewrite: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Headers {
    pub request: Option<HeaderOperations>,
    pub response: Option<HeaderOperations>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HeaderOperations {
    pub set: BTreeMap<String, String>,
    pub add: BTreeMap<String, String>,
    pub remove: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Percent {
    pub value: f64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpMirrorPolicy {
    pub destination: Option<Destination>,
    pub percentage: Option<Percent>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpFaultInjection {
    pub delay: Option<FaultDelay>,
    pub abort: Option<FaultAbort>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultDelay {
    pub fixed_delay: Option<String>,
    /// Read only to say it is not generated (Istio does not implement it either).
    pub exponential_delay: Option<String>,
    pub percentage: Option<Percent>,
    /// Deprecated whole percent, read where `percentage` is unset (as Istio reads it).
    pub percent: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultAbort {
    pub http_status: Option<i64>,
    pub grpc_status: Option<String>,
    pub percentage: Option<Percent>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpMatchRequest {
    pub uri: Option<StringMatch>,
    pub scheme: Option<StringMatch>,
    pub method: Option<StringMatch>,
    pub authority: Option<StringMatch>,
    pub headers: BTreeMap<String, StringMatch>,
    pub port: Option<i64>,
    pub query_params: BTreeMap<String, StringMatch>,
    pub ignore_uri_case: bool,
    pub without_headers: BTreeMap<String, StringMatch>,
    pub gateways: Vec<String>,
    pub source_namespace: Option<String>,
    pub source_labels: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StringMatch {
    pub exact: Option<String>,
    pub prefix: Option<String>,
    pub regex: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteDestination {
    pub destination: Option<Destination>,
    pub weight: Option<i64>,
    pub headers: Option<Headers>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Destination {
    pub host: String,
    pub subset: Option<String>,
    pub port: Option<PortSelector>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PortSelector {
    pub number: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRetry {
    pub attempts: Option<i64>,
    pub per_try_timeout: Option<String>,
    pub retry_on: Option<String>,
    pub retry_remote_localities: Option<bool>,
    pub retry_ignore_previous_hosts: Option<bool>,
    pub backoff: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DestinationRuleSpec {
    pub host: String,
    pub workload_selector: Option<MatchLabels>,
    pub export_to: Vec<String>,
    pub traffic_policy: Option<TrafficPolicy>,
    pub subsets: Vec<Subset>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TrafficPolicy {
    pub load_balancer: Option<LoadBalancerSettings>,
    pub connection_pool: Option<ConnectionPool>,
    pub outlier_detection: Option<OutlierDetection>,
    pub tls: Option<ClientTls>,
    pub port_level_settings: Vec<PortTrafficPolicy>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClientTls {
    pub mode: Option<String>,
    pub client_certificate: Option<String>,
    pub private_key: Option<String>,
    pub ca_certificates: Option<String>,
    pub credential_name: Option<String>,
    pub subject_alt_names: Vec<String>,
    pub sni: Option<String>,
    pub insecure_skip_verify: Option<bool>,
    pub ca_crl: Option<String>,
}

/// `portLevelSettings[]`: the four settings of a policy, for one port.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PortTrafficPolicy {
    pub port: Option<PortSelector>,
    pub load_balancer: Option<LoadBalancerSettings>,
    pub connection_pool: Option<ConnectionPool>,
    pub outlier_detection: Option<OutlierDetection>,
    pub tls: Option<ClientTls>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LoadBalancerSettings {
    pub simple: Option<String>,
    pub consistent_hash: Option<ConsistentHashLb>,
    pub warmup: Option<Warmup>,
    /// Deprecated form of `warmup.duration`.
    pub warmup_duration_secs: Option<String>,
    pub locality_lb_setting: Option<LocalityLbSetting>,
}

/// `localityLbSetting` (of a DestinationRule's `loadBalancer`, and of the mesh config).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalityLbSetting {
    pub enabled: Option<bool>,
    pub distribute: Vec<LocalityDistribute>,
    pub failover: Vec<LocalityFailover>,
    pub failover_priority: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalityDistribute {
    pub from: String,
    pub to: std::collections::BTreeMap<String, i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalityFailover {
    pub from: String,
    pub to: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsistentHashLb {
    pub http_header_name: Option<String>,
    pub http_cookie: Option<HttpCookie>,
    pub use_source_ip: Option<bool>,
    pub http_query_parameter_name: Option<String>,
    pub ring_hash: Option<RingHash>,
    pub maglev: Option<Maglev>,
    /// Deprecated form of `ringHash.minimumRingSize`.
    pub minimum_ring_size: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpCookie {
    pub name: String,
    pub path: Option<String>,
    pub ttl: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RingHash {
    pub minimum_ring_size: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Maglev {
    pub table_size: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Warmup {
    pub duration: Option<String>,
    pub minimum_percent: Option<f64>,
    pub aggression: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConnectionPool {
    pub tcp: Option<TcpSettings>,
    pub http: Option<HttpSettings>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpSettings {
    pub http1_max_pending_requests: Option<i64>,
    pub http2_max_requests: Option<i64>,
    pub max_requests_per_connection: Option<i64>,
    pub max_retries: Option<i64>,
    pub idle_timeout: Option<String>,
    /// `DEFAULT`, `DO_NOT_UPGRADE` or `UPGRADE`.
    pub h2_upgrade_policy: Option<String>,
    pub use_client_protocol: Option<bool>,
    pub max_concurrent_streams: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TcpKeepalive {
    pub probes: Option<i64>,
    pub time: Option<String>,
    pub interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OutlierDetection {
    #[serde(rename = "consecutive5xxErrors")]
    pub consecutive_5xx_errors: Option<i64>,
    pub consecutive_gateway_errors: Option<i64>,
    pub consecutive_local_origin_failures: Option<i64>,
    pub split_external_local_origin_errors: bool,
    pub interval: Option<String>,
    pub base_ejection_time: Option<String>,
    pub max_ejection_percent: Option<i64>,
    pub min_health_percent: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TcpSettings {
    pub connect_timeout: Option<String>,
    pub max_connections: Option<i64>,
    pub max_connection_duration: Option<String>,
    pub tcp_keepalive: Option<TcpKeepalive>,
    pub idle_timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Subset {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub traffic_policy: Option<TrafficPolicy>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewaySpec {
    pub selector: BTreeMap<String, String>,
    pub servers: Vec<Server>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Server {
    pub port: Option<Port>,
    pub bind: Option<String>,
    pub hosts: Vec<String>,
    pub tls: Option<ServerTlsSettings>,
}

/// A server's `tls` (a Gateway server's, or a Sidecar `ingress` listener's).
/// `verifyCertificateSpki`, `verifyCertificateHash`, `caCrl`, `credentialNames`,
/// `tlsCertificates` and `caCertCredentialName` are left untyped: each restricts or changes
/// which certificate is used, so a server naming one is not generated, and an `ingress`
/// listener naming one fails closed.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServerTlsSettings {
    pub https_redirect: bool,
    pub mode: Option<String>,
    pub server_certificate: Option<String>,
    pub private_key: Option<String>,
    pub ca_certificates: Option<String>,
    pub credential_name: Option<String>,
    pub subject_alt_names: Vec<String>,
    pub min_protocol_version: Option<String>,
    pub max_protocol_version: Option<String>,
    pub cipher_suites: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Port {
    pub number: i64,
    pub protocol: String,
    pub name: String,
}

/// A ServiceEntry's port: `targetPort` is where its endpoints receive the traffic.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServicePort {
    pub number: i64,
    pub protocol: String,
    pub name: String,
    pub target_port: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SidecarSpec {
    pub workload_selector: Option<WorkloadSelector>,
    pub ingress: Vec<IstioIngressListener>,
    pub egress: Vec<IstioEgressListener>,
    pub outbound_traffic_policy: Option<OutboundTrafficPolicy>,
    pub inbound_connection_pool: Option<ConnectionPool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OutboundTrafficPolicy {
    pub mode: Option<String>,
    pub egress_proxy: Option<Destination>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadSelector {
    pub labels: BTreeMap<String, String>,
}

/// A DestinationRule's `workloadSelector` (its labels are `matchLabels`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MatchLabels {
    pub match_labels: BTreeMap<String, String>,
}

/// `ingress[]`; its `tls` is not read (reported).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IstioIngressListener {
    pub port: Option<Port>,
    pub bind: Option<String>,
    pub capture_mode: Option<String>,
    pub default_endpoint: Option<String>,
    pub connection_pool: Option<ConnectionPool>,
    pub tls: Option<ServerTlsSettings>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IstioEgressListener {
    pub port: Option<Port>,
    pub bind: Option<String>,
    pub capture_mode: Option<String>,
    pub hosts: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceEntrySpec {
    pub hosts: Vec<String>,
    pub addresses: Vec<String>,
    pub ports: Vec<ServicePort>,
    pub resolution: Option<String>,
    pub endpoints: Vec<WorkloadEntrySpec>,
    pub export_to: Vec<String>,
    pub workload_selector: Option<WorkloadSelector>,
    pub subject_alt_names: Vec<String>,
    pub location: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadEntrySpec {
    pub address: String,
    pub ports: BTreeMap<String, i64>,
    pub labels: BTreeMap<String, String>,
    pub locality: Option<String>,
    pub weight: Option<i64>,
    pub service_account: Option<String>,
    pub network: Option<String>,
}
