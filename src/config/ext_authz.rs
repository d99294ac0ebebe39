//! The mesh config's `extensionProviders` that CUSTOM AuthorizationPolicies name
//! (`envoyExtAuthzHttp`, `envoyExtAuthzGrpc`), read into [`ExtAuthzProvider`]s and checked
//! as istiod checks them. As in istiod, a provider it would refuse does not refuse the mesh
//! config: it is kept with its problem, the policies naming it deny what their rules match,
//! and the problem is said on the mesh config (by field) and on each such policy.
//! Providers of other kinds (tracing, access logs, metrics) belong to Istio's Telemetry API,
//! which meshflow does not serve: each is reported by name.

use super::convert::parse_duration_ms;
use super::findings::Finding;
use dataflows::model::{BodyInCheck, ExtAuthzApi, ExtAuthzProvider, HttpExtAuthz};
use serde::Deserialize;
use serde_yaml_ng::Value;
use std::collections::BTreeMap;

/// One `extensionProviders` entry: its name and the external authorization kinds; any
/// other kind is one more (ignored, reported) field.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct ExtensionProviderSpec {
    name: String,
    envoy_ext_authz_http: Option<ExtAuthzHttpSpec>,
    envoy_ext_authz_grpc: Option<ExtAuthzGrpcSpec>,
    #[serde(flatten)]
    others: BTreeMap<String, Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ExtAuthzHttpSpec {
    service: String,
    port: u32,
    timeout: Option<String>,
    path_prefix: String,
    fail_open: bool,
    status_on_error: String,
    include_request_headers_in_check: Vec<String>,
    include_headers_in_check: Vec<String>,
    include_additional_headers_in_check: BTreeMap<String, String>,
    include_request_body_in_check: Option<BodySpec>,
    headers_to_upstream_on_allow: Vec<String>,
    headers_to_downstream_on_deny: Vec<String>,
    headers_to_downstream_on_allow: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ExtAuthzGrpcSpec {
    service: String,
    port: u32,
    timeout: Option<String>,
    fail_open: bool,
    status_on_error: String,
    include_request_body_in_check: Option<BodySpec>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct BodySpec {
    max_request_bytes: u32,
    allow_partial_message: bool,
    pack_as_bytes: bool,
}

impl From<&BodySpec> for BodyInCheck {
    fn from(b: &BodySpec) -> Self {
        BodyInCheck {
            max_request_bytes: b.max_request_bytes,
            allow_partial_message: b.allow_partial_message,
            pack_as_bytes: b.pack_as_bytes,
        }
    }
}

/// The external authorization providers among `specs`, in order, each with what istiod
/// would refuse in it (as its `problem`, and as a finding naming the field); the other
/// kinds reported.
pub(super) fn providers(
    specs: &[ExtensionProviderSpec],
    findings: &mut Vec<Finding>,
) -> Vec<ExtAuthzProvider> {
    let mut out = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let at = format!("mesh.extensionProviders[{i}]");
        for kind in spec.others.keys() {
            findings.push(Finding::warning(
                format!("{at}.{kind}"),
                "not used: this provider kind serves Istio's Telemetry API, which meshflow \
                 does not serve",
            ));
        }
        let (api, common, field) = match (&spec.envoy_ext_authz_http, &spec.envoy_ext_authz_grpc) {
            (Some(h), None) => (
                http_api(h),
                Common {
                    service: &h.service,
                    port: h.port,
                    timeout: h.timeout.as_deref(),
                    fail_open: h.fail_open,
                    status_on_error: &h.status_on_error,
                    body: h.include_request_body_in_check.as_ref(),
                },
                "envoyExtAuthzHttp",
            ),
            (None, Some(g)) => (
                Ok(ExtAuthzApi::Grpc),
                Common {
                    service: &g.service,
                    port: g.port,
                    timeout: g.timeout.as_deref(),
                    fail_open: g.fail_open,
                    status_on_error: &g.status_on_error,
                    body: g.include_request_body_in_check.as_ref(),
                },
                "envoyExtAuthzGrpc",
            ),
            (Some(_), Some(_)) => {
                findings.push(Finding::error(
                    at.clone(),
                    "names two provider kinds (envoyExtAuthzHttp and envoyExtAuthzGrpc): it \
                     is not used",
                ));
                continue;
            }
            (None, None) => continue,
        };
        let at = format!("{at}.{field}");
        let mut problems: Vec<(String, String)> = Vec::new();
        if let Err(why) = name(&spec.name) {
            problems.push((format!("mesh.extensionProviders[{i}].name"), why));
        }
        let api = api.unwrap_or_else(|(f, why)| {
            problems.push((format!("{at}.{f}"), why));
            ExtAuthzApi::Http(HttpExtAuthz::default())
        });
        let provider = common.read(&at, spec.name.clone(), api, &mut problems);
        let mut provider = provider;
        if !problems.is_empty() {
            for (field, why) in &problems {
                findings.push(Finding::error(
                    field.clone(),
                    format!(
                        "{why}: the provider cannot be used; CUSTOM policies naming it deny the \
                         requests their rules match"
                    ),
                ));
            }
            provider.problem = Some(
                problems
                    .iter()
                    .map(|(f, why)| format!("{f}: {why}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            );
        }
        out.push(provider);
    }
    out
}

/// What both kinds have.
struct Common<'a> {
    service: &'a str,
    port: u32,
    timeout: Option<&'a str>,
    fail_open: bool,
    status_on_error: &'a str,
    body: Option<&'a BodySpec>,
}

impl Common<'_> {
    fn read(
        &self,
        at: &str,
        name: String,
        api: ExtAuthzApi,
        problems: &mut Vec<(String, String)>,
    ) -> ExtAuthzProvider {
        if let Err(why) = service(self.service) {
            problems.push((format!("{at}.service"), why));
        }
        let port = match u16::try_from(self.port) {
            Ok(p) if p > 0 => p,
            _ => {
                problems.push((
                    format!("{at}.port"),
                    format!("{} is not a port (1-65535)", self.port),
                ));
                0
            }
        };
        let timeout_ms = match self
            .timeout
            .map(|t| parse_duration_ms(t, &format!("{at}.timeout")))
        {
            Some(Err(e)) => {
                problems.push((format!("{at}.timeout"), e.to_string()));
                None
            }
            Some(Ok(ms)) => Some(ms),
            None => None,
        };
        let status_on_error = match status(self.status_on_error) {
            Ok(s) => s,
            Err(why) => {
                problems.push((format!("{at}.statusOnError"), why));
                None
            }
        };
        ExtAuthzProvider {
            name,
            api,
            service: self.service.to_string(),
            port,
            timeout_ms,
            fail_open: self.fail_open,
            status_on_error,
            body: self.body.map(BodyInCheck::from),
            problem: None,
        }
    }
}

/// The HTTP kind's own fields, checked as istiod checks them (`(field, why)` when not).
fn http_api(h: &ExtAuthzHttpSpec) -> Result<ExtAuthzApi, (String, String)> {
    if !h.path_prefix.is_empty() && !h.path_prefix.starts_with('/') {
        return Err((
            "pathPrefix".into(),
            format!("{:?} does not begin with '/'", h.path_prefix),
        ));
    }
    // The deprecated list counts only when the new one is empty, as in istiod.
    let request_headers = if h.include_request_headers_in_check.is_empty() {
        &h.include_headers_in_check
    } else {
        &h.include_request_headers_in_check
    };
    for (field, list) in [
        (
            "includeRequestHeadersInCheck",
            &h.include_request_headers_in_check,
        ),
        ("includeHeadersInCheck", &h.include_headers_in_check),
        ("headersToUpstreamOnAllow", &h.headers_to_upstream_on_allow),
        (
            "headersToDownstreamOnDeny",
            &h.headers_to_downstream_on_deny,
        ),
        (
            "headersToDownstreamOnAllow",
            &h.headers_to_downstream_on_allow,
        ),
    ] {
        if let Some(j) = list.iter().position(|v| v == "*") {
            return Err((
                format!("{field}[{j}]"),
                "a lone \"*\" is not supported: write a prefix (x-*) or a suffix (*-id)".into(),
            ));
        }
    }
    Ok(ExtAuthzApi::Http(HttpExtAuthz {
        path_prefix: h.path_prefix.clone(),
        request_headers: request_headers.clone(),
        additional_headers: h.include_additional_headers_in_check.clone(),
        upstream_on_allow: h.headers_to_upstream_on_allow.clone(),
        downstream_on_deny: h.headers_to_downstream_on_deny.clone(),
        downstream_on_allow: h.headers_to_downstream_on_allow.clone(),
    }))
}

/// A provider name istiod accepts: a DNS-1123 label (it goes into metadata keys and rule
/// names).
fn name(n: &str) -> Result<(), String> {
    let ok = !n.is_empty()
        && n.len() <= 63
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !n.starts_with('-')
        && !n.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{n:?} is not a provider name (a DNS label: lowercase letters, digits and '-', at \
             most 63)"
        ))
    }
}

/// `HOST` (a fully qualified name or an address) or `NAMESPACE/HOST`.
fn service(s: &str) -> Result<(), String> {
    let host = match s.split_once('/') {
        Some((ns, host)) if !ns.is_empty() && !host.contains('/') => host,
        Some(_) => return Err(format!("{s:?} is not HOST or NAMESPACE/HOST")),
        None => s,
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if host.is_empty() {
        return Err("must not be empty".into());
    }
    if host.parse::<std::net::IpAddr>().is_ok() || host.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(format!("{host:?} is not a host name"))
    }
}

/// `statusOnError`: an HTTP status Envoy's `StatusCode` names.
fn status(s: &str) -> Result<Option<u32>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    let code: i32 = s
        .parse()
        .map_err(|_| format!("{s:?} is not an HTTP status"))?;
    match envoy_types::pb::envoy::r#type::v3::StatusCode::try_from(code) {
        Ok(c) if code != 0 => Ok(Some(c as i32 as u32)),
        _ => Err(format!(
            "{code} is not an HTTP status Envoy can answer with"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> (Vec<ExtAuthzProvider>, Vec<Finding>) {
        let specs: Vec<ExtensionProviderSpec> = serde_yaml_ng::from_str(yaml).expect("yaml");
        let mut findings = Vec::new();
        (providers(&specs, &mut findings), findings)
    }

    /// Both kinds with every field read; the other kinds named, not used.
    #[test]
    fn every_field_of_both_kinds_is_read() {
        let (p, f) = read(
            r#"
- name: http-authz
  envoyExtAuthzHttp:
    service: authz.foo.svc.cluster.local
    port: 8000
    timeout: 2s
    pathPrefix: /check
    failOpen: true
    statusOnError: "503"
    includeRequestHeadersInCheck: [x-ext-authz, "x-b3-*"]
    includeAdditionalHeadersInCheck: {x-from: meshflow}
    includeRequestBodyInCheck: {maxRequestBytes: 4096, allowPartialMessage: true, packAsBytes: true}
    headersToUpstreamOnAllow: [x-user]
    headersToDownstreamOnDeny: ["*-reason"]
    headersToDownstreamOnAllow: [x-allowed]
- name: grpc-authz
  envoyExtAuthzGrpc: {service: foo/authz.foo.svc.cluster.local, port: 9000}
- name: tracing
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
"#,
        );
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p.iter().all(|p| p.problem.is_none()), "{p:?}");
        assert_eq!(p[0].timeout_ms, Some(2000));
        assert_eq!(p[0].status_on_error, Some(503));
        assert!(p[0].fail_open);
        let ExtAuthzApi::Http(h) = &p[0].api else {
            panic!("http")
        };
        assert_eq!(h.path_prefix, "/check");
        assert_eq!(h.request_headers, ["x-ext-authz", "x-b3-*"]);
        assert_eq!(h.additional_headers["x-from"], "meshflow");
        assert_eq!(p[0].body.as_ref().map(|b| b.max_request_bytes), Some(4096));
        assert_eq!(p[1].api, ExtAuthzApi::Grpc);
        assert_eq!(
            p[1].service_ref(),
            (Some("foo"), "authz.foo.svc.cluster.local")
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].field, "mesh.extensionProviders[2].zipkin");
    }

    /// What istiod refuses makes the provider unusable, named by field; the rest stay.
    #[test]
    fn a_provider_istiod_refuses_is_kept_unusable_with_its_field() {
        let (p, f) = read(
            r#"
- name: Bad_Name
  envoyExtAuthzGrpc: {service: authz.example.com, port: 9000}
- name: no-port
  envoyExtAuthzGrpc: {service: authz.example.com}
- name: bad-status
  envoyExtAuthzHttp: {service: authz.example.com, port: 80, statusOnError: "999"}
- name: bad-prefix
  envoyExtAuthzHttp: {service: authz.example.com, port: 80, pathPrefix: check}
- name: lone-star
  envoyExtAuthzHttp: {service: authz.example.com, port: 80, headersToUpstreamOnAllow: ["*"]}
- name: bad-service
  envoyExtAuthzHttp: {service: "a/b/c", port: 80}
"#,
        );
        let fields: Vec<&str> = f.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "mesh.extensionProviders[0].name",
                "mesh.extensionProviders[1].envoyExtAuthzGrpc.port",
                "mesh.extensionProviders[2].envoyExtAuthzHttp.statusOnError",
                "mesh.extensionProviders[3].envoyExtAuthzHttp.pathPrefix",
                "mesh.extensionProviders[4].envoyExtAuthzHttp.headersToUpstreamOnAllow[0]",
                "mesh.extensionProviders[5].envoyExtAuthzHttp.service",
            ]
        );
        assert_eq!(p.len(), 6);
        assert!(p.iter().all(|p| p.problem.is_some()), "{p:?}");
    }
}
