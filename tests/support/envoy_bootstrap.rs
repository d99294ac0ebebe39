//! What an Envoy under test is told at start: its identity (`ProxyNode`, shaped like an
//! istio-agent's), the ADS flavour (`XdsMode`) and the bootstrap JSON (`envoy_bootstrap`).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde_json::{json, Value};

/// Which ADS flavour Envoy speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdsMode {
    /// `DeltaAggregatedResources` (`api_type: DELTA_GRPC`).
    Delta,
    /// `StreamAggregatedResources`, State of the World (`api_type: GRPC`).
    Sotw,
}

impl XdsMode {
    pub fn api_type(self) -> &'static str {
        match self {
            XdsMode::Delta => "DELTA_GRPC",
            XdsMode::Sotw => "GRPC",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            XdsMode::Delta => "delta",
            XdsMode::Sotw => "sotw",
        }
    }
}

/// The identity an Envoy presents to the control plane, shaped like istio-agent's.
#[derive(Clone, Debug)]
pub struct ProxyNode {
    /// `sidecar~IP~pod.ns~ns.svc.cluster.local` or `router~…`.
    pub id: String,
    /// `node.cluster`: `<workload>.<namespace>`.
    pub cluster: String,
    pub pod_name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub instance_ips: Vec<String>,
    /// Further node metadata (e.g. `IDLE_TIMEOUT`), beside what every node sends.
    pub extra_metadata: BTreeMap<String, String>,
}

impl ProxyNode {
    /// A sidecar proxy of pod `pod_name` in `namespace` with address `ip`.
    pub fn sidecar(pod_name: &str, namespace: &str, ip: &str, labels: &[(&str, &str)]) -> Self {
        Self::new("sidecar", pod_name, namespace, ip, labels)
    }

    /// A gateway (router) proxy of pod `pod_name` in `namespace` with address `ip`.
    pub fn router(pod_name: &str, namespace: &str, ip: &str, labels: &[(&str, &str)]) -> Self {
        Self::new("router", pod_name, namespace, ip, labels)
    }

    fn new(kind: &str, pod_name: &str, namespace: &str, ip: &str, labels: &[(&str, &str)]) -> Self {
        // "istio-ingressgateway-abc" → workload "istio-ingressgateway".
        let workload = pod_name.rsplit_once('-').map_or(pod_name, |(head, _)| head);
        ProxyNode {
            id: format!("{kind}~{ip}~{pod_name}.{namespace}~{namespace}.svc.cluster.local"),
            cluster: format!("{workload}.{namespace}"),
            pod_name: pod_name.to_owned(),
            namespace: namespace.to_owned(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            instance_ips: vec![ip.to_owned()],
            extra_metadata: BTreeMap::new(),
        }
    }

    /// The same node, also sending node metadata `key: value`.
    #[allow(dead_code)] // not every test binary sends more
    pub fn with_metadata(mut self, key: &str, value: &str) -> Self {
        self.extra_metadata.insert(key.to_owned(), value.to_owned());
        self
    }
}

/// The Envoy bootstrap meshflow's tests use: node identity and Istio-style metadata, ADS (Delta
/// or SotW) to the static `xds-grpc` cluster at `xds_addr` over HTTP/2, CDS and LDS from ADS,
/// admin on an ephemeral loopback port.
pub fn envoy_bootstrap(node: &ProxyNode, xds_addr: SocketAddr, mode: XdsMode) -> Value {
    let from_ads = json!({ "ads": {}, "resource_api_version": "V3" });
    let mut bootstrap = json!({
        "node": {
            "id": node.id,
            "cluster": node.cluster,
            "metadata": {
                "NAME": node.pod_name,
                "NAMESPACE": node.namespace,
                "LABELS": node.labels,
                "INSTANCE_IPS": node.instance_ips.join(","),
                "INTERCEPTION_MODE": "NONE",
                "ISTIO_VERSION": "1.24.0",
                "CLUSTER_ID": "Kubernetes",
            },
        },
        "dynamic_resources": {
            "ads_config": {
                "api_type": mode.api_type(),
                "transport_api_version": "V3",
                "set_node_on_first_message_only": true,
                "grpc_services": [{ "envoy_grpc": { "cluster_name": "xds-grpc" } }],
            },
            "cds_config": from_ads.clone(),
            "lds_config": from_ads,
        },
        "static_resources": {
            "clusters": [{
                "name": "xds-grpc",
                "type": "STATIC",
                "connect_timeout": "1s",
                "load_assignment": {
                    "cluster_name": "xds-grpc",
                    "endpoints": [{
                        "lb_endpoints": [{
                            "endpoint": {
                                "address": {
                                    "socket_address": {
                                        "address": xds_addr.ip().to_string(),
                                        "port_value": xds_addr.port(),
                                    },
                                },
                            },
                        }],
                    }],
                },
                "typed_extension_protocol_options": {
                    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                        "explicit_http_config": { "http2_protocol_options": {} },
                    },
                },
            }],
        },
        "admin": {
            "address": { "socket_address": { "address": "127.0.0.1", "port_value": 0 } },
        },
    });
    for (k, v) in &node.extra_metadata {
        bootstrap["node"]["metadata"][k] = json!(v);
    }
    bootstrap
}
