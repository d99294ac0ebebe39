//! A RequestAuthentication's `jwtRules` as meshflow translates them into Envoy's
//! `jwt_authn` filter: where a token is looked for, which issuer and audiences it must
//! have, what of it goes on to the application, and the keys that verify it ([`Jwks`]).
//!
//! Keys written in the rule (`jwks`) are used as they are; keys at a `jwksUri` are fetched
//! by meshflow, outside the dataflow, and filled in here before the record enters it
//! ([`Jwks::Uri`]), so the proxies' config is a function of the records alone. A rule whose
//! keys meshflow does not hold yet verifies no token: a request carrying one is refused,
//! one without passes, as Istio does while its own fetch fails.

use serde::{Deserialize, Serialize};

/// Where a rule's verification keys come from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Jwks {
    /// `jwks`: a JSON Web Key Set written in the rule.
    Inline(String),
    /// `jwksUri` (or the issuer's OpenID configuration, [`OPENID_CONFIGURATION`]), with
    /// what meshflow fetched from it: `keys`, the last key set fetched
    /// (kept while a refresh fails); `problem`, why the latest fetch failed (or that none
    /// has completed yet). Both `None` as the object is read, before any fetch.
    Uri {
        uri: String,
        keys: Option<String>,
        problem: Option<String>,
    },
}

impl Jwks {
    /// The key set Envoy verifies with, when meshflow holds one.
    pub fn keys(&self) -> Option<&str> {
        match self {
            Jwks::Inline(k) => Some(k),
            Jwks::Uri { keys, .. } => keys.as_deref(),
        }
    }

    /// The URI meshflow fetches keys from, if any.
    pub fn uri(&self) -> Option<&str> {
        match self {
            Jwks::Inline(_) => None,
            Jwks::Uri { uri, .. } => Some(uri),
        }
    }
}

/// `fromHeaders[]`: a header a token is read from, after `prefix` (`Bearer `).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TokenHeader {
    pub name: String,
    pub prefix: String,
}

/// One `jwtRules[]` entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JwtRule {
    /// `issuer` (empty: the token's `iss` is not checked).
    pub issuer: String,
    /// `audiences` (empty: the token's `aud` is not checked).
    pub audiences: Vec<String>,
    pub jwks: Jwks,
    /// `fromHeaders`, `fromParams`, `fromCookies`; all empty: Envoy's defaults, the
    /// `Authorization` header after `Bearer ` and the `access_token` parameter.
    pub from_headers: Vec<TokenHeader>,
    pub from_params: Vec<String>,
    pub from_cookies: Vec<String>,
    /// `forwardOriginalToken`: the token stays on the request to the application.
    pub forward_original_token: bool,
    /// `outputPayloadToHeader` (empty: none).
    pub output_payload_to_header: String,
    /// `outputClaimToHeaders[]`: (header, claim).
    pub output_claim_to_headers: Vec<(String, String)>,
    /// `timeout` of a key fetch, in milliseconds (Istio's default 5 s).
    pub timeout_ms: u64,
    /// `spaceDelimitedClaims`, with Istio's `scope` and `permission` always among them:
    /// claims whose space-separated string is matched as a list.
    pub space_delimited_claims: Vec<String>,
    /// `presence: REQUIRED`: a request without a token of this rule is refused (401).
    #[serde(default)]
    pub required: bool,
}

impl JwtRule {
    /// A rule of `issuer` verifying with `jwks`, every other field as Istio defaults it
    /// (tokens where Envoy looks by default, nothing forwarded, the default timeout).
    pub fn new(issuer: &str, jwks: Jwks) -> JwtRule {
        JwtRule {
            issuer: issuer.into(),
            audiences: Vec::new(),
            jwks,
            from_headers: Vec::new(),
            from_params: Vec::new(),
            from_cookies: Vec::new(),
            forward_original_token: false,
            output_payload_to_header: String::new(),
            output_claim_to_headers: Vec::new(),
            timeout_ms: DEFAULT_JWKS_TIMEOUT_MS,
            space_delimited_claims: Vec::new(),
            required: false,
        }
    }
}

/// The path of an issuer's OpenID configuration (OpenID Connect Discovery 1.0): a rule
/// with neither `jwks` nor `jwksUri` takes its keys from the `jwks_uri` it names, as in
/// Istio. A [`Jwks::Uri`] ending with it is fetched that way.
pub const OPENID_CONFIGURATION: &str = "/.well-known/openid-configuration";

/// Istio's claims always read as space-delimited lists (OAuth's `scope`).
pub const DEFAULT_SPACE_DELIMITED_CLAIMS: [&str; 2] = ["permission", "scope"];

/// Istio's key-fetch timeout where a rule sets none.
pub const DEFAULT_JWKS_TIMEOUT_MS: u64 = 5_000;
