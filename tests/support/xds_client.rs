//! A Delta ADS client for protocol-level tests: subscribes and ACKs the way Envoy does,
//! and records what it holds and how many bytes it received.
#![allow(dead_code)]

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use prost::Message;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

pub const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
pub const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
pub const LDS: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
pub const RDS: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";

/// An Istio-style node with NAMESPACE and LABELS metadata.
pub fn node(id: &str, ns: &str, labels: &[(&str, &str)]) -> Node {
    let s = |v: &str| Value {
        kind: Some(Kind::StringValue(v.into())),
    };
    let mut l = Struct::default();
    for (k, v) in labels {
        l.fields.insert(k.to_string(), s(v));
    }
    let mut meta = Struct::default();
    meta.fields.insert("NAMESPACE".into(), s(ns));
    meta.fields.insert(
        "LABELS".into(),
        Value {
            kind: Some(Kind::StructValue(l)),
        },
    );
    Node {
        id: id.into(),
        metadata: Some(meta),
        ..Default::default()
    }
}

/// A Delta ADS client that subscribes and ACKs the way Envoy does.
pub struct DeltaClient {
    pub tx: mpsc::Sender<DeltaDiscoveryRequest>,
    pub rx: Streaming<DeltaDiscoveryResponse>,
    pub node: Option<Node>,
    /// type → name → version held.
    pub held: HashMap<String, BTreeMap<String, String>>,
    pub bytes: usize,
    /// How long it waits before it answers a response (a proxy under load).
    pub answer_delay: Duration,
    /// Whether it rejects (NACKs) a response; by default it accepts everything. What it
    /// rejects still counts as received in `held`: what it was served.
    pub rejects: Box<dyn FnMut(&DeltaDiscoveryResponse) -> bool + Send>,
    /// NACKs it sent.
    pub nacks: usize,
    /// EDS names it subscribed to (for tests that subscribe as clusters arrive).
    pub eds_subscribed: Vec<String>,
}

impl DeltaClient {
    pub async fn connect(addr: SocketAddr, node: Node) -> DeltaClient {
        let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
        let (tx, rx) = mpsc::channel(16);
        let rx = client
            .delta_aggregated_resources(ReceiverStream::new(rx))
            .await
            .expect("open stream")
            .into_inner();
        DeltaClient {
            tx,
            rx,
            node: Some(node),
            held: HashMap::new(),
            bytes: 0,
            answer_delay: Duration::ZERO,
            rejects: Box::new(|_| false),
            nacks: 0,
            eds_subscribed: Vec::new(),
        }
    }

    pub async fn send(&mut self, mut req: DeltaDiscoveryRequest) {
        req.node = self.node.take();
        self.tx.send(req).await.expect("send");
    }

    pub async fn subscribe(
        &mut self,
        type_url: &str,
        names: &[String],
        initial: HashMap<String, String>,
    ) {
        self.send(DeltaDiscoveryRequest {
            type_url: type_url.into(),
            resource_names_subscribe: names.to_vec(),
            initial_resource_versions: initial,
            ..Default::default()
        })
        .await;
    }

    /// The next response within `wait`, applied and ACKed.
    pub async fn recv(&mut self, wait: Duration) -> Option<DeltaDiscoveryResponse> {
        let resp = tokio::time::timeout(wait, self.rx.message())
            .await
            .ok()?
            .expect("stream error")?;
        self.bytes += resp.encoded_len();
        let held = self.held.entry(resp.type_url.clone()).or_default();
        for r in &resp.resources {
            held.insert(r.name.clone(), r.version.clone());
        }
        for n in &resp.removed_resources {
            held.remove(n);
        }
        if !self.answer_delay.is_zero() {
            tokio::time::sleep(self.answer_delay).await;
        }
        let error_detail = (self.rejects)(&resp).then(|| {
            self.nacks += 1;
            envoy_types::pb::google::rpc::Status {
                code: 13,
                message: "rejected by the test client".into(),
                ..Default::default()
            }
        });
        let answer = DeltaDiscoveryRequest {
            type_url: resp.type_url.clone(),
            response_nonce: resp.nonce.clone(),
            error_detail,
            ..Default::default()
        };
        self.send(answer).await;
        Some(resp)
    }

    /// Receives until `wait` passes with nothing; returns what arrived.
    pub async fn drain(&mut self, wait: Duration) -> Vec<DeltaDiscoveryResponse> {
        let mut out = Vec::new();
        while let Some(r) = self.recv(wait).await {
            out.push(r);
        }
        out
    }

    pub fn names(&self, type_url: &str) -> Vec<String> {
        self.held
            .get(type_url)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Subscribes like Envoy: wildcard CDS, then EDS for every EDS cluster, wildcard LDS,
    /// then RDS for what listeners reference — and waits until all of it has arrived.
    pub async fn sync(&mut self) {
        self.subscribe(CDS, &[], HashMap::new()).await;
        self.recv(Duration::from_secs(10))
            .await
            .expect("CDS response");
        let eds: Vec<String> = self
            .names(CDS)
            .into_iter()
            .filter(|n| n.starts_with("outbound|"))
            .collect();
        if !eds.is_empty() {
            self.subscribe(EDS, &eds, HashMap::new()).await;
        }
        self.subscribe(LDS, &[], HashMap::new()).await;
        self.drain(Duration::from_millis(500)).await;
        assert_eq!(self.names(EDS), eds, "every EDS cluster got its assignment");
    }
}
