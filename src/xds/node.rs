//! Proxy identity from the xDS `Node`: Istio's node id `TYPE~IP~POD.NS~NS.svc.DOMAIN` and
//! node metadata (NAMESPACE, LABELS, INSTANCE_IPS, INTERCEPTION_MODE, SERVICE_ACCOUNT, NETWORK,
//! IDLE_TIMEOUT, and GENERATOR `grpc` for proxyless gRPC). A metadata value meshflow cannot
//! use (an IDLE_TIMEOUT that is no duration) is named for a warning ([`metadata_warnings`])
//! and ignored, as Istio ignores it.
//!
//! Every namespace a node states (the id's `POD.NS`, its `NS.svc.DOMAIN`, the NAMESPACE
//! metadata) must be the same one: the certificate check compares the client's identity with
//! that namespace, so a node naming one namespace in its id and another in its metadata could
//! otherwise pass as one and be served the other. Client-controlled sizes are bounded
//! ([`MAX_LABELS`], [`MAX_METADATA_BYTES`]).

use dataflows::model::{Labels, Proxy, ProxyKind, NETWORK_LABEL};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::protobuf::{value::Kind as ValueKind, Struct, Value};

/// Why a node cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidNode(pub String);

impl std::fmt::Display for InvalidNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Most labels a node's LABELS metadata may carry (Kubernetes objects rarely have 30).
pub const MAX_LABELS: usize = 256;
/// Most bytes of label keys and values, and of INSTANCE_IPS, a node may carry.
pub const MAX_METADATA_BYTES: usize = 64 * 1024;

fn string_field(s: &Struct, key: &str) -> Option<String> {
    match s.fields.get(key).and_then(|v| v.kind.as_ref()) {
        Some(ValueKind::StringValue(v)) => Some(v.clone()),
        _ => None,
    }
}

fn map_field(s: &Struct, key: &str) -> Labels {
    match s.fields.get(key).and_then(|v| v.kind.as_ref()) {
        Some(ValueKind::StructValue(m)) => m
            .fields
            .iter()
            .filter_map(|(k, v): (&String, &Value)| match &v.kind {
                Some(ValueKind::StringValue(s)) => Some((k.clone(), s.clone())),
                _ => None,
            })
            .collect(),
        _ => Labels::new(),
    }
}

/// Longest metadata value quoted in a warning (the value is the client's).
const QUOTED_VALUE_CHARS: usize = 64;

/// A node metadata value meshflow reads but cannot use: the field, the value (escaped, at
/// most [`QUOTED_VALUE_CHARS`] characters) and what happens instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataWarning {
    pub field: &'static str,
    pub value: String,
    pub what: &'static str,
}

/// The node's metadata values meshflow cannot use, each said when its stream opens so that
/// nothing it asks for is dropped silently: an `IDLE_TIMEOUT` that is not a Go duration (or
/// is negative, or longer than Go's durations can be). The node is served either way.
pub fn metadata_warnings(node: Option<&Node>) -> Vec<MetadataWarning> {
    let Some(meta) = node.and_then(|n| n.metadata.as_ref()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let ignored = "is not a duration (like 10s or 1m30s); ignored, as Istio ignores it: Envoy's 1h idle timeouts apply";
    match meta.fields.get(IDLE_TIMEOUT).and_then(|v| v.kind.as_ref()) {
        Some(ValueKind::StringValue(value)) if idle_timeout(value).is_err() => {
            out.push(MetadataWarning {
                field: IDLE_TIMEOUT,
                value: quoted(value),
                what: ignored,
            });
        }
        Some(ValueKind::StringValue(_)) | None => {}
        Some(other) => out.push(MetadataWarning {
            field: IDLE_TIMEOUT,
            value: quoted(&format!("{other:?}")),
            what: ignored,
        }),
    }
    out
}

fn quoted(value: &str) -> String {
    let cut: String = value.chars().take(QUOTED_VALUE_CHARS).collect();
    format!("{cut:?}")
}

/// The node metadata field of Istio's per-proxy idle timeout.
pub const IDLE_TIMEOUT: &str = "IDLE_TIMEOUT";

/// Node metadata `IDLE_TIMEOUT` as Istio reads it (Go's `time.ParseDuration`): `Ok(None)`
/// when empty (no timeout of the proxy's own), the duration in nanoseconds, or an error for
/// anything else, which Istio ignores. In Istio the value becomes the idle timeout of every
/// HTTP connection manager of the proxy (`common_http_protocol_options.idle_timeout`:
/// outbound, inbound, gateway), of its inbound and catch-all `tcp_proxy` filters, and of its
/// outbound ones whose DestinationRule sets no `tcp.idleTimeout`; `0s` turns the timeout off.
/// A negative duration, which Go accepts, is refused here: Envoy would reject the listener.
pub fn idle_timeout(value: &str) -> Result<Option<u64>, String> {
    if value.is_empty() {
        return Ok(None);
    }
    let ns = go_duration_ns(value)?;
    u64::try_from(ns)
        .map(Some)
        .map_err(|_| "a negative duration".to_string())
}

/// A Go duration string (`300ms`, `-1.5h`, `2h45m`; units ns, us, µs, μs, ms, s, m, h; a
/// bare `0`) in nanoseconds, within Go's `time.Duration` (±2^63 ns, about 292 years).
/// Fractions are kept to the nanosecond, truncated as Go truncates them.
fn go_duration_ns(s: &str) -> Result<i64, String> {
    let bad = || format!("{s:?} is not a duration");
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    // Magnitudes up to 2^63 (the negative end of Go's range), checked as they grow.
    const LIMIT: u128 = 1 << 63;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int, after) = rest.split_at(int_len);
        let (frac, after) = match after.strip_prefix('.') {
            Some(a) => {
                let n = a.bytes().take_while(u8::is_ascii_digit).count();
                a.split_at(n)
            }
            None => ("", after),
        };
        if int.is_empty() && frac.is_empty() {
            return Err(bad());
        }
        let unit_len = after
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(after.len(), |(i, _)| i);
        let (unit, next) = after.split_at(unit_len);
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("{s:?} is not a duration: a number without a unit")),
            _ => return Err(format!("{s:?} is not a duration: unknown unit {unit:?}")),
        };
        let mut whole: u128 = 0;
        for d in int.bytes() {
            whole = whole * 10 + u128::from(d - b'0');
            if whole > LIMIT {
                return Err(bad());
            }
        }
        let mut part = whole * scale;
        // The fraction's digits past a nanosecond cannot add one: at most 19 are read.
        let (mut num, mut den): (u128, u128) = (0, 1);
        for d in frac.bytes().take(19) {
            num = num * 10 + u128::from(d - b'0');
            den *= 10;
        }
        part += num * scale / den;
        total += part;
        if total > LIMIT {
            return Err(bad());
        }
        rest = next;
    }
    if negative {
        // -2^63 is Go's least duration.
        Ok((total as i128).wrapping_neg() as i64)
    } else if total == LIMIT {
        Err(bad())
    } else {
        Ok(total as i64)
    }
}

/// Parses the proxy a stream speaks for.
pub fn proxy_from_node(node: Option<&Node>) -> Result<Proxy, InvalidNode> {
    let node = node
        .ok_or_else(|| InvalidNode("the first request of a stream must carry the node".into()))?;
    let id = node.id.as_str();
    if id.len() > 1024 {
        return Err(InvalidNode("node id is longer than 1024 bytes".into()));
    }
    // A node id is printed by proxy-status, the log and the debug port: control characters
    // (a terminal escape sequence) have no place in it.
    if id.chars().any(char::is_control) {
        return Err(InvalidNode(format!(
            "node id {id:?} contains control characters"
        )));
    }
    let parts: Vec<&str> = id.split('~').collect();
    let [kind, ip, pod_ns, domain] = parts.as_slice() else {
        return Err(InvalidNode(format!(
            "node id {id:?} is not of the form TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.DOMAIN"
        )));
    };
    let meta = node.metadata.clone().unwrap_or_default();
    let kind = match *kind {
        // gRPC's own xDS client marks itself as Istio's agent does for it.
        "sidecar" if string_field(&meta, "GENERATOR").as_deref() == Some("grpc") => {
            ProxyKind::Proxyless
        }
        "sidecar" => ProxyKind::Sidecar,
        "router" => ProxyKind::Router,
        other => {
            return Err(InvalidNode(format!(
                "node id {id:?}: unknown proxy type {other:?} (sidecar or router)"
            )))
        }
    };
    if ip.parse::<std::net::IpAddr>().is_err() {
        return Err(InvalidNode(format!(
            "node id {id:?}: {ip:?} is not an IP address"
        )));
    }
    let namespace = namespace(id, pod_ns, domain, string_field(&meta, "NAMESPACE"))?;
    let mut ips: Vec<String> = string_field(&meta, "INSTANCE_IPS")
        .map(|s| {
            s.split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if ips.is_empty() {
        ips.push(ip.to_string());
    }
    ips.sort();
    ips.dedup();
    let interception_none = string_field(&meta, "INTERCEPTION_MODE").as_deref() == Some("NONE");
    // An invalid value is ignored, as Istio ignores it (and said: `metadata_warnings`).
    let idle_timeout_ns = string_field(&meta, IDLE_TIMEOUT)
        .and_then(|v| idle_timeout(&v).ok())
        .flatten();
    let mut labels = map_field(&meta, "LABELS");
    if labels.len() > MAX_LABELS {
        return Err(InvalidNode(format!(
            "node {id:?}: {} LABELS, more than {MAX_LABELS}",
            labels.len()
        )));
    }
    let bytes: usize = labels.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
        + ips.iter().map(String::len).sum::<usize>();
    if bytes > MAX_METADATA_BYTES {
        return Err(InvalidNode(format!(
            "node {id:?}: {bytes} bytes of LABELS and INSTANCE_IPS, more than {MAX_METADATA_BYTES}"
        )));
    }
    // The workload identity's service account (Istio's agent sends the Pod's); bounded
    // and printable as a Kubernetes name is, since it goes into a certificate.
    let service_account = string_field(&meta, "SERVICE_ACCOUNT").filter(|s| !s.is_empty());
    if let Some(sa) = &service_account {
        let ok = sa.len() <= 253
            && sa
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if !ok {
            return Err(InvalidNode(format!(
                "node {id:?}: SERVICE_ACCOUNT {sa:?} is not a Kubernetes name"
            )));
        }
    }
    let locality = proxy_locality(node, &labels);
    // Istio labels a proxy with its NETWORK (where its workload has no network label), so
    // a `failoverPriority` on the network label compares it with the endpoints'.
    if let Some(network) =
        string_field(&meta, "NETWORK").filter(|n| !n.is_empty() && n.len() <= 253)
    {
        labels.entry(NETWORK_LABEL.to_string()).or_insert(network);
    }
    Ok(Proxy {
        id: id.to_string(),
        kind,
        ips,
        namespace,
        labels,
        interception_none,
        service_account,
        locality,
        idle_timeout_ns,
    })
}

/// The proxy's locality as Istio reads it: its workload's locality labels (`istio-locality`
/// as `region.zone.subzone`, else the topology labels) where the metadata carries them, else
/// the node's `locality`; `region/zone/subzone` with trailing empty parts left out.
fn proxy_locality(node: &Node, labels: &Labels) -> String {
    let parts: [String; 3] = if let Some(l) = labels.get("istio-locality") {
        let mut it = l.splitn(3, '.').map(str::to_string);
        [
            it.next().unwrap_or_default(),
            it.next().unwrap_or_default(),
            it.next().unwrap_or_default(),
        ]
    } else if let Some(region) = labels.get("topology.kubernetes.io/region") {
        let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
        [
            region.clone(),
            get("topology.kubernetes.io/zone"),
            get("topology.istio.io/subzone"),
        ]
    } else {
        let l = node.locality.clone().unwrap_or_default();
        [l.region, l.zone, l.sub_zone]
    };
    parts
        .iter()
        .map(|p| {
            p.chars()
                .filter(|c| *c != '/')
                .take(128)
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("/")
        .trim_end_matches('/')
        .to_string()
}

/// The one namespace the node states: in `POD.NS`, in `NS.svc.DOMAIN` and in the NAMESPACE
/// metadata, wherever present, and the same everywhere.
fn namespace(
    id: &str,
    pod_ns: &str,
    domain: &str,
    metadata: Option<String>,
) -> Result<String, InvalidNode> {
    let stated = [
        (
            "the id's POD.NAMESPACE",
            pod_ns.split_once('.').map(|(_, ns)| ns.to_string()),
        ),
        (
            "the id's NAMESPACE.svc domain",
            domain.split_once(".svc").map(|(ns, _)| ns.to_string()),
        ),
        ("the NAMESPACE metadata", metadata),
    ];
    let mut found: Option<(&str, String)> = None;
    for (where_, ns) in stated {
        let Some(ns) = ns.filter(|ns| !ns.is_empty()) else {
            continue;
        };
        match &found {
            None => found = Some((where_, ns)),
            Some((first, seen)) if *seen != ns => {
                return Err(InvalidNode(format!(
                    "node id {id:?}: {first} says namespace {seen:?} but {where_} says {ns:?}"
                )))
            }
            Some(_) => {}
        }
    }
    found.map(|(_, ns)| ns).ok_or_else(|| {
        InvalidNode(format!(
            "node id {id:?}: no namespace in the id or NAMESPACE metadata"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::Struct;

    fn s(v: &str) -> Value {
        Value {
            kind: Some(ValueKind::StringValue(v.into())),
        }
    }

    #[test]
    fn parses_istio_sidecar_node() {
        let mut labels = Struct::default();
        labels.fields.insert("app".into(), s("reviews"));
        let mut meta = Struct::default();
        meta.fields.insert("NAMESPACE".into(), s("default"));
        meta.fields.insert(
            "LABELS".into(),
            Value {
                kind: Some(ValueKind::StructValue(labels)),
            },
        );
        meta.fields.insert("INTERCEPTION_MODE".into(), s("NONE"));
        let node = Node {
            id: "sidecar~10.1.2.3~reviews-v1-abc.default~default.svc.cluster.local".into(),
            metadata: Some(meta),
            ..Default::default()
        };
        let p = proxy_from_node(Some(&node)).unwrap();
        assert_eq!(p.kind, ProxyKind::Sidecar);
        assert_eq!(p.namespace, "default");
        assert_eq!(p.ips, vec!["10.1.2.3".to_string()]);
        assert_eq!(p.labels.get("app").map(String::as_str), Some("reviews"));
        assert!(p.interception_none);
    }

    /// Go's durations, as `time.ParseDuration` reads them: units from ns to h, fractions,
    /// several parts, a bare `0`; empty is no timeout.
    #[test]
    fn idle_timeout_parses_go_durations() {
        const S: u64 = 1_000_000_000;
        for (text, ns) in [
            ("10s", 10 * S),
            ("1m30s", 90 * S),
            ("0s", 0),
            ("0", 0),
            ("-0s", 0),
            ("+1s", S),
            ("1.5h", 5400 * S),
            ("300ms", 300_000_000),
            ("1500us", 1_500_000),
            ("2\u{b5}s", 2_000),
            ("2\u{3bc}s", 2_000),
            ("7ns", 7),
            ("1h2m3s4ms5us6ns", 3723 * S + 4_005_006),
            (".5s", S / 2),
            ("5.s", 5 * S),
            ("0.000000001s", 1),
            ("0.0000000019s", 1),
            // Go's longest duration, 2^63-1 ns.
            ("2562047h47m16.854775807s", i64::MAX as u64),
        ] {
            assert_eq!(idle_timeout(text), Ok(Some(ns)), "{text:?}");
        }
        assert_eq!(idle_timeout(""), Ok(None));
    }

    /// What Go refuses is refused (Istio then ignores the value), and so are negative
    /// durations, which Envoy would refuse; nothing panics, however long or strange.
    #[test]
    fn idle_timeout_refuses_what_is_no_duration() {
        let huge = "9".repeat(10_000) + "h";
        for text in [
            "10",
            "s",
            "1x",
            "1 s",
            " 1s",
            "1s ",
            ".s",
            ".",
            "+",
            "-",
            "1.5.3s",
            "--1s",
            "-1s",
            "-2562047h",
            "9999999999h",
            "2562047h47m16.854775808s",
            "2562047h47m16.854775807s1ns",
            huge.as_str(),
            "1\u{1b}[31ms",
            "\u{e9}",
        ] {
            assert!(idle_timeout(text).is_err(), "{text:?} accepted");
        }
    }

    fn idle_node(value: Option<Value>) -> Node {
        let mut meta = Struct::default();
        meta.fields.insert("NAMESPACE".into(), s("default"));
        if let Some(v) = value {
            meta.fields.insert(IDLE_TIMEOUT.into(), v);
        }
        Node {
            id: "sidecar~10.1.2.3~a-1.default~default.svc.cluster.local".into(),
            metadata: Some(meta),
            ..Default::default()
        }
    }

    /// A valid `IDLE_TIMEOUT` is the proxy's (`0s` too: no timeout); an invalid one is
    /// ignored, the node still served.
    #[test]
    fn idle_timeout_metadata_is_the_proxys() {
        let idle = |v: Option<Value>| {
            proxy_from_node(Some(&idle_node(v)))
                .unwrap()
                .idle_timeout_ns
        };
        assert_eq!(idle(Some(s("1s"))), Some(1_000_000_000));
        assert_eq!(idle(Some(s("0s"))), Some(0));
        assert_eq!(idle(Some(s("1m30s"))), Some(90_000_000_000));
        assert_eq!(idle(None), None);
        assert_eq!(idle(Some(s(""))), None);
        assert_eq!(idle(Some(s("ten seconds"))), None);
        assert_eq!(idle(Some(s("-5s"))), None);
        let number = Value {
            kind: Some(ValueKind::NumberValue(10.0)),
        };
        assert_eq!(idle(Some(number)), None);
    }

    /// An `IDLE_TIMEOUT` that is no duration is named in a warning, its value quoted,
    /// escaped and bounded; a valid, empty or absent one is not.
    #[test]
    fn invalid_idle_timeout_metadata_is_warned_about() {
        let warnings = |v: Option<Value>| metadata_warnings(Some(&idle_node(v)));
        let found = warnings(Some(s("30 seconds")));
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].field, found[0].value.as_str()),
            (IDLE_TIMEOUT, "\"30 seconds\"")
        );
        assert!(found[0].what.contains("ignored"), "{}", found[0].what);
        for ok in [Some(s("30s")), Some(s("0s")), Some(s("")), None] {
            assert!(warnings(ok.clone()).is_empty(), "{ok:?}");
        }
        assert!(metadata_warnings(None).is_empty());
        let long = format!("\u{1b}[31m{}", "9".repeat(500));
        let found = warnings(Some(s(&long)));
        assert!(!found[0].value.contains('\u{1b}'), "{}", found[0].value);
        assert!(found[0].value.len() < 100, "{}", found[0].value);
        let number = Value {
            kind: Some(ValueKind::NumberValue(10.0)),
        };
        assert_eq!(warnings(Some(number)).len(), 1);
    }

    #[test]
    fn network_metadata_is_the_network_label_unless_the_workload_has_one() {
        let proxy = |labels: &[(&str, &str)]| {
            let mut l = Struct::default();
            for (k, v) in labels {
                l.fields.insert((*k).into(), s(v));
            }
            let mut meta = Struct::default();
            meta.fields.insert("NETWORK".into(), s("net-a"));
            meta.fields.insert(
                "LABELS".into(),
                Value {
                    kind: Some(ValueKind::StructValue(l)),
                },
            );
            let node = Node {
                id: "sidecar~10.1.2.3~a-1.default~default.svc.cluster.local".into(),
                metadata: Some(meta),
                ..Default::default()
            };
            proxy_from_node(Some(&node)).unwrap().labels
        };
        let labels = proxy(&[("app", "a")]);
        assert_eq!(labels.get(NETWORK_LABEL).map(String::as_str), Some("net-a"));
        let labels = proxy(&[(NETWORK_LABEL, "own")]);
        assert_eq!(labels.get(NETWORK_LABEL).map(String::as_str), Some("own"));
    }

    #[test]
    fn grpc_generator_marks_a_proxyless_client() {
        let mut meta = Struct::default();
        meta.fields.insert("GENERATOR".into(), s("grpc"));
        let node = Node {
            id: "sidecar~127.0.0.1~client.default~default.svc.cluster.local".into(),
            metadata: Some(meta),
            ..Default::default()
        };
        let p = proxy_from_node(Some(&node)).unwrap();
        assert_eq!(p.kind, ProxyKind::Proxyless);
        assert_eq!(p.namespace, "default");
    }

    #[test]
    fn rejects_malformed_ids() {
        for id in [
            "",
            "sidecar",
            "gateway~1.2.3.4~a.b~b.svc.cluster.local",
            "sidecar~not-an-ip~a.b~b.svc",
        ] {
            let node = Node {
                id: id.into(),
                ..Default::default()
            };
            assert!(proxy_from_node(Some(&node)).is_err(), "{id:?} accepted");
        }
        assert!(proxy_from_node(None).is_err());
    }

    fn node(id: &str, meta: Struct) -> Node {
        Node {
            id: id.into(),
            metadata: Some(meta),
            ..Default::default()
        }
    }

    /// SERVICE_ACCOUNT names the workload identity's account (`default` without it); one
    /// that is no Kubernetes name (it goes into a certificate's URI) refuses the node.
    #[test]
    fn service_account_comes_from_the_metadata() {
        let id = "sidecar~10.1.2.3~sleep-1.default~default.svc.cluster.local";
        let p = proxy_from_node(Some(&node(id, Struct::default()))).unwrap();
        assert_eq!(p.service_account(), "default");
        let mut meta = Struct::default();
        meta.fields.insert("SERVICE_ACCOUNT".into(), s("sleep"));
        let p = proxy_from_node(Some(&node(id, meta))).unwrap();
        assert_eq!(p.service_account(), "sleep");
        let mut bad = Struct::default();
        bad.fields.insert("SERVICE_ACCOUNT".into(), s("a/b"));
        let err = proxy_from_node(Some(&node(id, bad))).unwrap_err();
        assert!(err.0.contains("SERVICE_ACCOUNT"), "{err}");
    }

    /// A node that names one namespace in its id and another in its metadata is refused,
    /// so a certificate of the metadata's namespace cannot be served the id's proxy.
    #[test]
    fn every_stated_namespace_must_agree() {
        let mut evil = Struct::default();
        evil.fields.insert("NAMESPACE".into(), s("evil"));
        let err = proxy_from_node(Some(&node(
            "sidecar~10.1.2.3~sleep-1.default~default.svc.cluster.local",
            evil.clone(),
        )))
        .unwrap_err();
        assert!(
            err.0.contains("\"default\"") && err.0.contains("\"evil\""),
            "{err}"
        );
        let err = proxy_from_node(Some(&node(
            "sidecar~10.1.2.3~sleep-1.default~evil.svc.cluster.local",
            Struct::default(),
        )))
        .unwrap_err();
        assert!(err.0.contains("NAMESPACE.svc"), "{err}");
        // The same namespace everywhere, or stated only once, is fine.
        let p = proxy_from_node(Some(&node(
            "sidecar~10.1.2.3~sleep-1.evil~evil.svc.cluster.local",
            evil.clone(),
        )))
        .unwrap();
        assert_eq!(p.namespace, "evil");
        let p = proxy_from_node(Some(&node("sidecar~10.1.2.3~sleep~svc", evil.clone()))).unwrap();
        assert_eq!(p.namespace, "evil");
        // A domain without a namespace label states none.
        let p = proxy_from_node(Some(&node(
            "sidecar~10.1.2.3~sleep~svc.cluster.local",
            evil,
        )))
        .unwrap();
        assert_eq!(p.namespace, "evil");
    }

    /// Node metadata is bounded: label count and bytes.
    #[test]
    fn oversized_metadata_is_refused() {
        let labels = |n: usize, len: usize| {
            let mut l = Struct::default();
            for i in 0..n {
                l.fields.insert(format!("k{i}"), s(&"v".repeat(len)));
            }
            let mut meta = Struct::default();
            meta.fields.insert(
                "LABELS".into(),
                Value {
                    kind: Some(ValueKind::StructValue(l)),
                },
            );
            node("sidecar~10.1.2.3~a.default~default.svc.cluster.local", meta)
        };
        assert!(proxy_from_node(Some(&labels(MAX_LABELS, 10))).is_ok());
        let err = proxy_from_node(Some(&labels(MAX_LABELS + 1, 1))).unwrap_err();
        assert!(err.0.contains("LABELS"), "{err}");
        let err = proxy_from_node(Some(&labels(2, MAX_METADATA_BYTES))).unwrap_err();
        assert!(err.0.contains("bytes"), "{err}");
    }

    /// A node id with a terminal escape sequence or another control character is refused
    /// (the error shows it escaped).
    #[test]
    fn control_characters_in_node_ids_are_refused() {
        let id = "sidecar~10.1.2.3~a\u{1b}[2J.default~default.svc.cluster.local";
        let err = proxy_from_node(Some(&node(id, Struct::default()))).unwrap_err();
        assert!(err.0.contains("control characters"), "{err}");
        assert!(!err.0.contains('\u{1b}'), "escaped in the message: {err:?}");
    }
}
