//! The simulated proxies' identities: node ids, nodes and the proxy records they stand for.

use super::*;

/// The node id of proxy `p` (as `dataflows::synth::proxy` spells it).
pub fn node_id(p: usize, namespaces: usize) -> String {
    let ns = dataflows::synth::namespace(p % namespaces.max(1));
    format!(
        "sidecar~10.255.{}.{}~client-{p}.{ns}~{ns}.svc.cluster.local",
        (p / 256) % 256,
        p % 256
    )
}

/// The xDS node of proxy `p`: Istio node id plus NAMESPACE and LABELS metadata.
pub fn node(p: usize, namespaces: usize) -> Node {
    let s = |v: String| Value {
        kind: Some(Kind::StringValue(v)),
    };
    let mut labels = Struct::default();
    labels.fields.insert("app".into(), s(format!("client-{p}")));
    let mut meta = Struct::default();
    meta.fields.insert(
        "NAMESPACE".into(),
        s(dataflows::synth::namespace(p % namespaces.max(1))),
    );
    meta.fields.insert(
        "LABELS".into(),
        Value {
            kind: Some(Kind::StructValue(labels)),
        },
    );
    Node {
        id: node_id(p, namespaces),
        metadata: Some(meta),
        ..Default::default()
    }
}

/// The proxy record the server derives from proxy `p`'s node (meshflow's own parser).
pub fn proxy_record(p: usize, namespaces: usize) -> Result<Proxy, String> {
    proxy_from_node(Some(&node(p, namespaces))).map_err(|e| e.to_string())
}

/// The xDS node of gateway proxy `g` (the router `dataflows::synth::router` describes).
pub fn router_node(g: usize, root_namespace: &str) -> Node {
    let mesh = dataflows::model::MeshConfig {
        root_namespace: root_namespace.to_string(),
        ..Default::default()
    };
    let r = dataflows::synth::router(g, &mesh);
    let s = |v: String| Value {
        kind: Some(Kind::StringValue(v)),
    };
    let mut labels = Struct::default();
    for (k, v) in &r.labels {
        labels.fields.insert(k.clone(), s(v.clone()));
    }
    let mut meta = Struct::default();
    meta.fields
        .insert("NAMESPACE".into(), s(r.namespace.clone()));
    meta.fields.insert(
        "LABELS".into(),
        Value {
            kind: Some(Kind::StructValue(labels)),
        },
    );
    Node {
        id: r.id,
        metadata: Some(meta),
        ..Default::default()
    }
}

/// The proxy record the server derives from gateway proxy `g`'s node.
pub fn router_record(g: usize, root_namespace: &str) -> Result<Proxy, String> {
    proxy_from_node(Some(&router_node(g, root_namespace))).map_err(|e| e.to_string())
}
