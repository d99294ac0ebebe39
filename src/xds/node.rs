//! Proxy identity from the xDS `Node`: Istio's node id `TYPE~IP~POD.NS~NS.svc.DOMAIN` and
//! node metadata (NAMESPACE, LABELS, INSTANCE_IPS, INTERCEPTION_MODE, SERVICE_ACCOUNT, NETWORK,
//! and GENERATOR `grpc` for proxyless gRPC); metadata Istio reads and meshflow does not
//! translate (IDLE_TIMEOUT) is named for a warning.
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

/// Node metadata istiod translates that meshflow does not, with what Istio does with it: a
/// proxy sending one is warned about when its stream opens ([`untranslated_metadata`]), so
/// what it asks for is never dropped silently.
///
/// `IDLE_TIMEOUT` (a Go duration, `10s`) is, in Istio, per proxy the idle timeout of every
/// HTTP connection manager it is given (`common_http_protocol_options.idle_timeout`, inbound,
/// outbound and gateway), of its inbound `tcp_proxy` filters and `virtualOutbound`'s
/// catch-all one, and of its outbound `tcp_proxy` filters whose DestinationRule sets no
/// `tcp.idleTimeout`. meshflow builds those listeners once per scope (proxies of one scope
/// share their bodies), so honouring a per-proxy value needs it in the scope key and in
/// every listener builder; until then Envoy's defaults apply (1 hour for both).
pub const UNTRANSLATED_METADATA: &[(&str, &str)] = &[(
    "IDLE_TIMEOUT",
    "Istio's idle timeout of the proxy's connection managers and tcp_proxy filters; Envoy's 1h default applies",
)];

/// Longest metadata value quoted in a warning (the value is the client's).
const QUOTED_VALUE_CHARS: usize = 64;

/// The [`UNTRANSLATED_METADATA`] fields the node sends with a non-empty string value: the
/// field, its value (escaped, at most [`QUOTED_VALUE_CHARS`] characters) and what meshflow
/// leaves out.
pub fn untranslated_metadata(node: Option<&Node>) -> Vec<(&'static str, String, &'static str)> {
    let Some(meta) = node.and_then(|n| n.metadata.as_ref()) else {
        return Vec::new();
    };
    UNTRANSLATED_METADATA
        .iter()
        .filter_map(|(field, what)| {
            let value = string_field(meta, field).filter(|v| !v.is_empty())?;
            let quoted: String = value.chars().take(QUOTED_VALUE_CHARS).collect();
            Some((*field, format!("{quoted:?}"), *what))
        })
        .collect()
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

    /// `IDLE_TIMEOUT` is named when a node sends it (its value quoted, escaped and
    /// bounded), and not when it is absent or empty; the node is served either way.
    #[test]
    fn idle_timeout_metadata_is_reported_as_untranslated() {
        let node = |value: Option<&str>| {
            let mut meta = Struct::default();
            meta.fields.insert("NAMESPACE".into(), s("default"));
            if let Some(v) = value {
                meta.fields.insert("IDLE_TIMEOUT".into(), s(v));
            }
            Node {
                id: "sidecar~10.1.2.3~a-1.default~default.svc.cluster.local".into(),
                metadata: Some(meta),
                ..Default::default()
            }
        };
        let sent = node(Some("30s"));
        let found = untranslated_metadata(Some(&sent));
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].0, found[0].1.as_str()),
            ("IDLE_TIMEOUT", "\"30s\"")
        );
        assert!(proxy_from_node(Some(&sent)).is_ok());
        assert!(untranslated_metadata(Some(&node(None))).is_empty());
        assert!(untranslated_metadata(Some(&node(Some("")))).is_empty());
        assert!(untranslated_metadata(None).is_empty());
        let long = format!("\u{1b}[31m{}", "9".repeat(500));
        let found = untranslated_metadata(Some(&node(Some(&long))));
        assert!(!found[0].1.contains('\u{1b}'), "{}", found[0].1);
        assert!(found[0].1.len() < 100, "{}", found[0].1);
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
