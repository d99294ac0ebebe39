//! Istio's security API types (security.istio.io v1 and v1beta1) as they appear in YAML:
//! camelCase, unknown fields tolerated (and reported). AuthorizationPolicy rules are typed
//! and RequestAuthentication JWT rules are typed whole. Field names follow Istio's API
//! reference.

use serde::Deserialize;
use std::collections::BTreeMap;

/// `selector` of the three kinds.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Selector {
    pub match_labels: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Mtls {
    pub mode: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PeerAuthenticationSpec {
    pub selector: Option<Selector>,
    pub mtls: Option<Mtls>,
    /// Keyed by workload port (written as a string or a number in YAML).
    pub port_level_mtls: Option<BTreeMap<PortKey, Mtls>>,
}

/// A `portLevelMtls` key: YAML writes it as a number or a string.
#[derive(Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(untagged)]
pub enum PortKey {
    Number(i64),
    Text(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AuthorizationPolicySpec {
    pub selector: Option<Selector>,
    pub target_ref: Option<serde_yaml_ng::Value>,
    pub target_refs: Option<serde_yaml_ng::Value>,
    pub action: Option<String>,
    pub provider: Option<serde_yaml_ng::Value>,
    pub rules: Option<Vec<Option<Rule>>>,
}

/// An AuthorizationPolicy rule: `from`, `to`, `when`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Rule {
    pub from: Vec<RuleFrom>,
    pub to: Vec<RuleTo>,
    pub when: Vec<Condition>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RuleFrom {
    pub source: Option<Source>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RuleTo {
    pub operation: Option<Operation>,
}

/// `from[].source`: every field Istio's API has.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Source {
    pub principals: Vec<String>,
    pub not_principals: Vec<String>,
    pub request_principals: Vec<String>,
    pub not_request_principals: Vec<String>,
    pub namespaces: Vec<String>,
    pub not_namespaces: Vec<String>,
    pub service_accounts: Vec<String>,
    pub not_service_accounts: Vec<String>,
    pub ip_blocks: Vec<String>,
    pub not_ip_blocks: Vec<String>,
    pub remote_ip_blocks: Vec<String>,
    pub not_remote_ip_blocks: Vec<String>,
    pub trust_domains: Vec<String>,
    pub not_trust_domains: Vec<String>,
}

/// `to[].operation`: every field Istio's API has.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Operation {
    pub hosts: Vec<String>,
    pub not_hosts: Vec<String>,
    pub ports: Vec<String>,
    pub not_ports: Vec<String>,
    pub methods: Vec<String>,
    pub not_methods: Vec<String>,
    pub paths: Vec<String>,
    pub not_paths: Vec<String>,
}

/// `when[]`: a key and the values it must (`values`) or must not (`notValues`) have.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Condition {
    pub key: String,
    pub values: Vec<String>,
    pub not_values: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestAuthenticationSpec {
    pub selector: Option<Selector>,
    pub target_ref: Option<serde_yaml_ng::Value>,
    pub target_refs: Option<serde_yaml_ng::Value>,
    pub jwt_rules: Vec<JwtRule>,
}

/// A `jwtRules[]` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct JwtRule {
    pub issuer: String,
    pub audiences: Vec<String>,
    pub jwks_uri: String,
    /// The API's other spelling of `jwksUri`.
    #[serde(rename = "jwks_uri")]
    pub jwks_uri_snake: String,
    pub jwks: String,
    pub from_headers: Vec<JwtHeader>,
    pub from_params: Vec<String>,
    pub from_cookies: Vec<String>,
    pub output_payload_to_header: String,
    pub output_claim_to_headers: Vec<ClaimToHeader>,
    pub forward_original_token: bool,
    pub timeout: Option<String>,
    pub space_delimited_claims: Vec<String>,
    /// `OPTIONAL` (the default) or `REQUIRED`.
    pub presence: Option<String>,
}

/// `outputClaimToHeaders[]`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClaimToHeader {
    pub header: String,
    pub claim: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct JwtHeader {
    pub name: String,
    pub prefix: Option<String>,
}
