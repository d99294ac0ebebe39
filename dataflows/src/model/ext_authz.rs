//! External authorization (AuthorizationPolicy `action: CUSTOM`): the mesh config's
//! `extensionProviders` of kind `envoyExtAuthzHttp` and `envoyExtAuthzGrpc` as meshflow reads
//! them ([`ExtAuthzProvider`]), the CUSTOM policies that name one ([`NamedCustom`]), and the
//! providers resolved against the mesh's services as istiod resolves them
//! ([`ProviderTable`]): a provider that is missing, invalid or names no service makes the
//! policies naming it deny what their rules match, never let it through unchecked.

use super::{AuthzRule, Hostname};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Istio's prefix of the names of CUSTOM rules, which the ext_authz filter's
/// `filter_enabled_metadata` matches.
pub const EXT_AUTHZ_PREFIX: &str = "istio-ext-authz";

/// The API an external authorization service speaks.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ExtAuthzApi {
    /// `envoyExtAuthzHttp`: Envoy sends the request's headers (`allowed`) to the service
    /// over HTTP; a 200 allows.
    Http(HttpExtAuthz),
    /// `envoyExtAuthzGrpc`: Envoy's `envoy.service.auth.v3.Authorization/Check`; also
    /// checks connections on chains that proxy bytes.
    Grpc,
}

/// The fields only `envoyExtAuthzHttp` has.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HttpExtAuthz {
    /// `pathPrefix`: put before the request's path in the check request.
    pub path_prefix: String,
    /// `includeRequestHeadersInCheck` (or the deprecated `includeHeadersInCheck`): header
    /// patterns (`x*` prefix, `*x` suffix, else exact; case-insensitive).
    pub request_headers: Vec<String>,
    /// `includeAdditionalHeadersInCheck`, by name.
    pub additional_headers: BTreeMap<String, String>,
    /// `headersToUpstreamOnAllow`, `headersToDownstreamOnDeny`, `headersToDownstreamOnAllow`.
    pub upstream_on_allow: Vec<String>,
    pub downstream_on_deny: Vec<String>,
    pub downstream_on_allow: Vec<String>,
}

/// `includeRequestBodyInCheck`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BodyInCheck {
    pub max_request_bytes: u32,
    pub allow_partial_message: bool,
    pub pack_as_bytes: bool,
}

/// One `extensionProviders` entry of an external authorization kind.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ExtAuthzProvider {
    pub name: String,
    pub api: ExtAuthzApi,
    /// `service` as written: a fully qualified host, or `NAMESPACE/HOST`.
    pub service: String,
    pub port: u16,
    /// `timeout` (`None`: Istio's 600 s).
    pub timeout_ms: Option<u64>,
    /// `failOpen`: a request is let through when the service cannot be asked.
    pub fail_open: bool,
    /// `statusOnError`: the status of a request refused because the service could not be
    /// asked (`None`: Envoy's 403).
    pub status_on_error: Option<u32>,
    pub body: Option<BodyInCheck>,
    /// Why istiod would refuse the provider (a bad port, status or prefix, a lone `*` in a
    /// header list, a duplicate name): the policies naming it deny instead.
    pub problem: Option<String>,
}

impl ExtAuthzProvider {
    /// The namespace `service` names (`NAMESPACE/HOST`), if any, and its host.
    pub fn service_ref(&self) -> (Option<&str>, &str) {
        match self.service.split_once('/') {
            Some((ns, host)) if !host.contains('/') => (Some(ns), host),
            _ => (None, self.service.as_str()),
        }
    }
}

/// A provider with the service it names found: Envoy's cluster for it
/// (`outbound|PORT||HOST`, which every proxy of the mesh that may reach the service holds)
/// and the host (the check requests' authority).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResolvedExtAuthz {
    pub provider: ExtAuthzProvider,
    pub host: Hostname,
    pub cluster: String,
}

/// Every provider by name, resolved, or why it cannot be used.
pub type ProviderTable = BTreeMap<String, Result<ResolvedExtAuthz, String>>;

/// The providers resolved against the mesh's services (`services`: each host with the
/// namespaces that define it), as istiod's `LookupCluster`: `NAMESPACE/HOST` must be
/// defined in that namespace, a bare host in exactly one.
pub fn resolve_providers(
    providers: &[ExtAuthzProvider],
    services: &BTreeMap<Hostname, Vec<String>>,
) -> ProviderTable {
    let mut out = ProviderTable::new();
    for p in providers {
        let resolved = match &p.problem {
            Some(why) => Err(why.clone()),
            None => {
                let (ns, host) = p.service_ref();
                let defined = services.get(host).map(Vec::as_slice).unwrap_or_default();
                let found = match ns {
                    Some(ns) => defined.iter().any(|d| d == ns),
                    None => defined.len() == 1,
                };
                if found {
                    Ok(ResolvedExtAuthz {
                        provider: p.clone(),
                        host: host.to_string(),
                        cluster: format!("outbound|{}||{host}", p.port),
                    })
                } else if ns.is_none() && defined.len() > 1 {
                    Err(format!(
                        "service {host:?} is defined in several namespaces ({}): name it \
                         NAMESPACE/HOST",
                        defined.join(", ")
                    ))
                } else {
                    Err(format!(
                        "service {:?} is not in the mesh's registry",
                        p.service
                    ))
                }
            }
        };
        // A name given twice is unusable, whichever entry comes first (as in istiod).
        if out.contains_key(&p.name) {
            out.insert(
                p.name.clone(),
                Err(format!(
                    "the name {:?} is given to several providers",
                    p.name
                )),
            );
        } else {
            out.insert(p.name.clone(), resolved);
        }
    }
    out
}

/// A CUSTOM AuthorizationPolicy's provider and rules.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CustomAuthz {
    /// `provider.name`.
    pub provider: String,
    pub rules: Vec<AuthzRule>,
}

/// A CUSTOM policy that applies to a proxy, with what names its rules in Envoy's RBAC
/// (`istio-ext-authz-PROVIDER-ns[NS]-policy[NAME]-rule[I]`, as Istio names them).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NamedCustom {
    pub namespace: String,
    pub name: String,
    pub custom: CustomAuthz,
}

impl NamedCustom {
    pub fn rule_name(&self, i: usize) -> String {
        format!(
            "{}-ns[{}]-policy[{}]-rule[{i}]",
            provider_prefix(&self.custom.provider),
            self.namespace,
            self.name
        )
    }
}

/// What the names of a provider's rules start with (`istio-ext-authz-PROVIDER-`), which its
/// ext_authz filter is enabled by.
pub fn provider_prefix(provider: &str) -> String {
    format!("{EXT_AUTHZ_PREFIX}-{provider}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(name: &str, service: &str) -> ExtAuthzProvider {
        ExtAuthzProvider {
            name: name.into(),
            api: ExtAuthzApi::Grpc,
            service: service.into(),
            port: 9000,
            timeout_ms: None,
            fail_open: false,
            status_on_error: None,
            body: None,
            problem: None,
        }
    }

    /// istiod's lookup: `NAMESPACE/HOST` in that namespace, a bare host defined once; a
    /// duplicate name or a problem makes the provider unusable.
    #[test]
    fn providers_resolve_as_istiod_looks_their_services_up() {
        let services: BTreeMap<Hostname, Vec<String>> = [
            (
                "authz.foo.svc.cluster.local".to_string(),
                vec!["foo".into()],
            ),
            ("twice.example".to_string(), vec!["a".into(), "b".into()]),
        ]
        .into();
        let mut bad = provider("bad", "authz.foo.svc.cluster.local");
        bad.problem = Some("port 0".into());
        let table = resolve_providers(
            &[
                provider("plain", "authz.foo.svc.cluster.local"),
                provider("scoped", "foo/authz.foo.svc.cluster.local"),
                provider("elsewhere", "bar/authz.foo.svc.cluster.local"),
                provider("ambiguous", "twice.example"),
                provider("chosen", "b/twice.example"),
                provider("missing", "nowhere.example"),
                bad,
                provider("dup", "twice.example"),
                provider("dup", "b/twice.example"),
            ],
            &services,
        );
        let ok = |n: &str| table[n].clone().map(|r| r.cluster);
        assert_eq!(
            ok("plain"),
            Ok("outbound|9000||authz.foo.svc.cluster.local".into())
        );
        assert_eq!(
            ok("scoped"),
            Ok("outbound|9000||authz.foo.svc.cluster.local".into())
        );
        assert_eq!(ok("chosen"), Ok("outbound|9000||twice.example".into()));
        assert!(ok("elsewhere").unwrap_err().contains("not in the mesh"));
        assert!(ok("ambiguous").unwrap_err().contains("several namespaces"));
        assert!(ok("missing").unwrap_err().contains("not in the mesh"));
        assert_eq!(ok("bad"), Err("port 0".to_string()));
        assert!(ok("dup").unwrap_err().contains("several providers"));
    }
}
