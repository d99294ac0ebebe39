//! The field vocabulary the kinds share: typed specs and the fields not read, ports and
//! protocols, durations, host names, `exportTo`, CIDRs, label selectors, string matches and route destinations.

use super::Result;
use crate::config::findings::{typed_with_ignored, FieldPath, Finding, IGNORED};
use crate::config::{istio, Invalid};
use dataflows::model::{self as m, Labels, MeshConfig};
use serde::de::DeserializeOwned;
use serde_yaml_ng::Value;

pub(super) fn typed<T: DeserializeOwned>(value: Value, prefix: &str) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = match (prefix, path.as_str()) {
            (p, ".") => p.to_string(),
            ("", path) => path.to_string(),
            (p, path) => format!("{p}.{path}"),
        };
        Invalid::field(field, e.into_inner().to_string())
    })
}

/// The spec of an Istio object, and the fields of it meshflow does not read.
pub(super) fn spec<T: DeserializeOwned + Default>(value: &Value) -> Result<(T, Vec<FieldPath>)> {
    match value.get("spec") {
        None | Some(Value::Null) => Ok((T::default(), Vec::new())),
        Some(s) => typed_with_ignored(s.clone(), "spec"),
    }
}

/// Each field not read is a warning, unless `classify` says more of it.
pub(super) fn report_ignored(
    ignored: &[FieldPath],
    findings: &mut Vec<Finding>,
    mut classify: impl FnMut(&FieldPath) -> Option<Finding>,
) {
    for p in ignored {
        findings.push(classify(p).unwrap_or_else(|| Finding::warning(p.to_string(), IGNORED)));
    }
}

pub(super) fn metadata_map(value: &Value, field: &str) -> Labels {
    value
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(|l| l.as_mapping())
        .map(|l| {
            l.iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_string(), yaml_scalar(v)?)))
                .collect()
        })
        .unwrap_or_default()
}

fn yaml_scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

pub(super) fn port_u16(n: i64, field: &str) -> Result<u16> {
    u16::try_from(n)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| Invalid::field(field, format!("port {n} is not in 1..65535")))
}

/// Istio's rule for naming protocols by port name prefix (`http-foo`, `grpc`) or
/// `appProtocol`; a port naming none is told per connection (Istio's protocol sniffing).
pub fn protocol_of(name: &str, app_protocol: Option<&str>) -> m::Protocol {
    if !names_protocol(name, app_protocol) {
        return m::Protocol::Auto;
    }
    let p = app_protocol.unwrap_or_else(|| name.split('-').next().unwrap_or(""));
    match p.to_ascii_lowercase().trim_start_matches("kubernetes.io/") {
        "http2" | "h2c" => m::Protocol::Http2,
        "grpc" | "grpc-web" => m::Protocol::Grpc,
        // `kubernetes.io/wss` is a WebSocket over TLS: opaque to the proxy, as TLS is.
        "tls" | "https" | "wss" => m::Protocol::Tls,
        "tcp" | "mongo" | "mysql" | "redis" => m::Protocol::Tcp,
        _ => m::Protocol::Http,
    }
}

/// The protocol names Istio knows, as a port name's prefix or an `appProtocol`.
const PROTOCOL_NAMES: &[&str] = &[
    "http", "http2", "h2c", "grpc", "grpc-web", "https", "tls", "tcp", "mongo", "mysql", "redis",
];

/// The `appProtocol`s of KEP-3726 (`kubernetes.io/…`) besides `h2c`: a WebSocket over
/// HTTP/1.1 (`ws`, HTTP, whose upgrade the proxies carry) and over TLS (`wss`).
const KUBERNETES_APP_PROTOCOLS: &[&str] = &["ws", "wss"];

/// Whether a port's name prefix or `appProtocol` names a protocol Istio knows; where none
/// does, Istio detects the protocol per connection.
fn names_protocol(name: &str, app_protocol: Option<&str>) -> bool {
    let known = |p: &str| PROTOCOL_NAMES.contains(&p.to_ascii_lowercase().as_str());
    match app_protocol {
        Some(p) => {
            known(p)
                || p.strip_prefix("kubernetes.io/").is_some_and(|k| {
                    known(k) || KUBERNETES_APP_PROTOCOLS.contains(&k.to_ascii_lowercase().as_str())
                })
        }
        None => known(name.split('-').next().unwrap_or("")),
    }
}

pub(super) fn server_protocol(p: &str) -> m::Protocol {
    match p.to_ascii_uppercase().as_str() {
        "HTTP" => m::Protocol::Http,
        "HTTP2" => m::Protocol::Http2,
        "GRPC" => m::Protocol::Grpc,
        "HTTPS" | "TLS" => m::Protocol::Tls,
        _ => m::Protocol::Tcp,
    }
}

/// Istio's duration strings: `1.5s`, `300ms`, `2m`, `1h`.
pub fn parse_duration_ms(s: &str, field: &str) -> Result<u64> {
    Ok(duration_exact_ms(s, field)?.round() as u64)
}

/// A duration Istio's validation holds to at least 1ms (`agent.ValidateDuration`), in ms.
pub(super) fn duration_at_least_1ms(v: Option<&str>, field: &str) -> Result<Option<u64>> {
    let Some(text) = v else { return Ok(None) };
    let exact = duration_exact_ms(text, field)?;
    if exact < 1.0 {
        return Err(Invalid::field(
            field,
            format!("{text:?} is below 1ms, the least duration Istio accepts here"),
        ));
    }
    Ok(Some(exact.round() as u64))
}

/// The longest protobuf Duration (`google.protobuf.Duration`: 315,576,000,000 s), in ms.
const MAX_DURATION_MS: f64 = 315_576_000_000_000.0;

/// A duration as written, in (possibly fractional) milliseconds.
fn duration_exact_ms(s: &str, field: &str) -> Result<f64> {
    let bad = || {
        Invalid::field(
            field,
            format!("{s:?} is not a duration such as 1.5s or 300ms"),
        )
    };
    let (num, unit_ms) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3_600_000.0)
    } else {
        return Err(bad());
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad());
    }
    let ms = v * unit_ms;
    // Every duration becomes a protobuf Duration, which Envoy refuses past 10,000 years:
    // the whole CDS or RDS update with it would be rejected by every proxy.
    if ms > MAX_DURATION_MS {
        return Err(Invalid::field(
            field,
            format!(
                "{s:?} is longer than a protobuf Duration may be (315576000000s, 10,000 years)"
            ),
        ));
    }
    Ok(ms)
}

pub(super) fn duration(v: &Option<String>, field: &str) -> Result<Option<u64>> {
    v.as_deref()
        .map(|d| parse_duration_ms(d, field))
        .transpose()
}

/// Expands a short host name relative to the config's namespace, as Istio does:
/// `reviews` → `reviews.NS.svc.SUFFIX`; names with dots and wildcards are kept.
pub fn fqdn(host: &str, ns: &str, mesh: &MeshConfig) -> String {
    if host.contains('.') || host.contains('*') {
        host.to_string()
    } else {
        format!("{host}.{ns}.svc.{}", mesh.domain_suffix)
    }
}

/// A name DNS can answer: dot-separated labels of letters, digits and inner hyphens, each
/// at most 63 characters, 253 in all (a trailing dot allowed); no wildcard.
pub(super) fn is_fqdn(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// An `exportTo` list: `.`, `*`, `~` or namespace names (DNS-1123 labels, as Istio's
/// validation requires).
pub(in crate::config) fn export_to(list: &[String], field: &str) -> Result<Vec<String>> {
    let namespace = |e: &str| {
        !e.is_empty()
            && e.len() <= 63
            && e.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !e.starts_with('-')
            && !e.ends_with('-')
    };
    for (i, e) in list.iter().enumerate() {
        if !matches!(e.as_str(), "." | "*" | "~") && !namespace(e) {
            return Err(Invalid::field(
                format!("{field}[{i}]"),
                format!("{e:?} is not \".\", \"*\", \"~\" or a namespace"),
            ));
        }
    }
    Ok(list.to_vec())
}

/// An IP address or CIDR block (`10.0.0.1`, `10.0.0.0/8`, `2001:db8::/32`) as a canonical
/// CIDR: the network address and its prefix length, so equal ranges compare equal (Envoy
/// refuses a listener whose filter chains match the same range twice).
pub fn cidr(s: &str, field: &str) -> Result<String> {
    let bad = || Invalid::field(field, format!("{s:?} is not an IP address or CIDR block"));
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l.parse::<u8>().map_err(|_| bad())?)),
        None => (s, None),
    };
    let ip: std::net::IpAddr = addr.parse().map_err(|_| bad())?;
    Ok(match ip {
        std::net::IpAddr::V4(v4) => {
            let len = len.unwrap_or(32);
            if len > 32 {
                return Err(bad());
            }
            let mask = u32::MAX.checked_shl(u32::from(32 - len)).unwrap_or(0);
            let net = std::net::Ipv4Addr::from(u32::from(v4) & mask);
            format!("{net}/{len}")
        }
        std::net::IpAddr::V6(v6) => {
            let len = len.unwrap_or(128);
            if len > 128 {
                return Err(bad());
            }
            let mask = u128::MAX.checked_shl(u32::from(128 - len)).unwrap_or(0);
            let net = std::net::Ipv6Addr::from(u128::from(v6) & mask);
            format!("{net}/{len}")
        }
    })
}

/// A match's `sourceLabels`: a label selector as Kubernetes spells labels (none when empty,
/// which selects every proxy).
pub(super) fn source_labels(labels: &Labels, field: &str) -> Result<Option<Labels>> {
    for (k, v) in labels {
        if let Err(why) = label_key(k).and_then(|()| label_value(v)) {
            return Err(Invalid::field(format!("{field}.{k}"), why));
        }
    }
    Ok((!labels.is_empty()).then(|| labels.clone()))
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric.
fn label_key(key: &str) -> std::result::Result<(), String> {
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            if prefix.is_empty() || prefix.len() > 253 || !is_fqdn(prefix) {
                return Err(format!("{key:?}: the prefix must be a DNS subdomain"));
            }
            name
        }
        None => key,
    };
    if name.is_empty() {
        return Err(format!("{key:?}: a label key needs a name"));
    }
    label_value(name).map_err(|_| format!("{key:?} is not a valid label key"))
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_` and `.`, starting and
/// ending alphanumeric.
fn label_value(value: &str) -> std::result::Result<(), String> {
    let ok = value.is_empty()
        || (value.len() <= 63
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric())
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')));
    if ok {
        Ok(())
    } else {
        Err(format!("{value:?} is not a valid label value"))
    }
}

pub(super) fn string_match(
    sm: &istio::StringMatch,
    field: &str,
    mesh: &MeshConfig,
) -> Result<m::StringMatch> {
    match (&sm.exact, &sm.prefix, &sm.regex) {
        (Some(e), None, None) => Ok(m::StringMatch::Exact(e.clone())),
        (None, Some(p), None) => Ok(m::StringMatch::Prefix(p.clone())),
        // Envoy compiles it with RE2 and rejects the whole route configuration if it does
        // not parse (every route on the port): refused here, naming the field, instead.
        (None, None, Some(r)) => match regex::Regex::new(r) {
            Err(e) => Err(Invalid::field(
                format!("{field}.regex"),
                format!("{r:?} is not a valid RE2 regular expression: {e}"),
            )),
            // Envoy also refuses a regex whose RE2 program is over its limit, with the same
            // effect on the port.
            Ok(_) => match crate::config::re2_size::program_size(r) {
                Some(n) if n > u64::from(mesh.max_regex_program_size) => Err(Invalid::field(
                    format!("{field}.regex"),
                    format!(
                        "{r:?} compiles to an RE2 program of about {n} instructions, over \
                         Envoy's limit of {} (re2.max_program_size.error_level; \
                         --max-regex-program-size): simplify it, e.g. a bounded repetition \
                         like x{{150}} is that many copies of x",
                        mesh.max_regex_program_size
                    ),
                )),
                _ => Ok(m::StringMatch::Regex(r.clone())),
            },
        },
        _ => Err(Invalid::field(
            field,
            "exactly one of exact, prefix or regex is required",
        )),
    }
}

/// Whether `name` is an HTTP field name: an RFC 9110 token (letters, digits and
/// ``!#$%&'*+-.^_`|~``).
pub(super) fn is_header_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.!#$%&'*+^`|~".contains(&b))
}

/// A route's or mirror's destination (weight 100).
pub(super) fn destination(
    dest: Option<&istio::Destination>,
    field: &str,
    ns: &str,
    mesh: &MeshConfig,
) -> Result<m::RouteDestination> {
    let Some(dest) = dest.filter(|d| !d.host.is_empty()) else {
        return Err(Invalid::field(
            format!("{field}.host"),
            "a destination host is required",
        ));
    };
    let port = dest
        .port
        .as_ref()
        .and_then(|p| p.number)
        .map(|n| port_u16(n, &format!("{field}.port.number")))
        .transpose()?;
    Ok(m::RouteDestination {
        host: fqdn(&dest.host, ns, mesh),
        subset: dest.subset.clone(),
        port,
        weight: 100,
        headers: m::HeaderOps::default(),
        via_alias: None,
    })
}
