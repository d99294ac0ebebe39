//! Proxy identity from the xDS `Node`: Istio's node id `TYPE~IP~POD.NS~NS.svc.DOMAIN` and
//! node metadata (NAMESPACE, LABELS, INSTANCE_IPS, INTERCEPTION_MODE, and GENERATOR `grpc` for
//! proxyless gRPC).

use dataflows::model::{Labels, Proxy, ProxyKind};
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

/// Parses the proxy a stream speaks for.
pub fn proxy_from_node(node: Option<&Node>) -> Result<Proxy, InvalidNode> {
    let node = node
        .ok_or_else(|| InvalidNode("the first request of a stream must carry the node".into()))?;
    let id = node.id.as_str();
    if id.len() > 1024 {
        return Err(InvalidNode("node id is longer than 1024 bytes".into()));
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
    let namespace = string_field(&meta, "NAMESPACE")
        .or_else(|| pod_ns.split_once('.').map(|(_, ns)| ns.to_string()))
        .or_else(|| domain.split('.').next().map(str::to_string))
        .filter(|ns| !ns.is_empty())
        .ok_or_else(|| {
            InvalidNode(format!(
                "node id {id:?}: no namespace in the id or NAMESPACE metadata"
            ))
        })?;
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
    Ok(Proxy {
        id: id.to_string(),
        kind,
        ips,
        namespace,
        labels: map_field(&meta, "LABELS"),
        interception_none,
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
}
