//! ADS at the protocol level: real gRPC clients (tonic, Envoy's own proto types) speak Delta
//! and State-of-the-World xDS to a running `meshflow serve`, the way Envoy does, and the
//! tests assert on exactly which messages arrive. Envoy itself is not needed here; the
//! real-Envoy tests are `envoy/gateway.rs` and `envoy/sidecar.rs`.

use crate::support;

use support::xds_client::{node, DeltaClient, CDS, EDS, LDS, RDS};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use prost::Message;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;
use support::{write_config, Meshflow, TestDir};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

const REVIEWS: &str = "outbound|9080||reviews.default.svc.cluster.local";

fn slice_yaml(ips: &[&str]) -> String {
    let endpoints: String = ips
        .iter()
        .map(|ip| format!("- addresses: [\"{ip}\"]\n  conditions: {{ready: true}}\n"))
        .collect();
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: reviews-abc\n  namespace: default\n  labels: {{kubernetes.io/service-name: reviews}}\naddressType: IPv4\nports:\n- {{name: http, port: 9080, protocol: TCP}}\nendpoints:\n{endpoints}"
    )
}

/// Two services in `default`, a Sidecar that confines `app: isolated` proxies in `other`
/// to their own namespace.
fn write_mesh(dir: &std::path::Path) {
    write_config(
        dir,
        "services.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: default}\nspec:\n  ports: [{name: http, port: 9080}]\n---\napiVersion: v1\nkind: Service\nmetadata: {name: ratings, namespace: default}\nspec:\n  ports: [{name: http, port: 9080}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: ratings-abc\n  namespace: default\n  labels: {kubernetes.io/service-name: ratings}\naddressType: IPv4\nports:\n- {name: http, port: 9080}\nendpoints:\n- addresses: [\"10.0.2.1\"]\n",
    );
    write_config(
        dir,
        "reviews-slice.yaml",
        &slice_yaml(&["10.0.1.1", "10.0.1.2"]),
    );
    write_config(
        dir,
        "sidecar.yaml",
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: isolated, namespace: other}\nspec:\n  workloadSelector: {labels: {app: isolated}}\n  egress:\n  - hosts: [\"./*\"]\n",
    );
}

async fn setup(label: &str) -> (TestDir, std::path::PathBuf, Meshflow) {
    let dir = TestDir::new(label);
    let config = dir.subdir("config");
    write_mesh(&config);
    let meshflow = Meshflow::start(&config, dir.path());
    (dir, config, meshflow)
}

/// An endpoint added to one service reaches exactly the proxies that hold that service's
/// cluster, as exactly one ClusterLoadAssignment each, and nothing else is sent to anyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_change_sends_one_assignment_to_subscribed_proxies_only() {
    let (_dir, config, meshflow) = setup("xds-endpoint-delta").await;
    let addr = meshflow.xds_addr();
    let mut a = DeltaClient::connect(
        addr,
        node(
            "sidecar~10.9.0.1~a-1.default~default.svc.cluster.local",
            "default",
            &[("app", "a")],
        ),
    )
    .await;
    let mut b = DeltaClient::connect(
        addr,
        node(
            "sidecar~10.9.0.2~b-1.default~default.svc.cluster.local",
            "default",
            &[("app", "b")],
        ),
    )
    .await;
    let mut c = DeltaClient::connect(
        addr,
        node(
            "sidecar~10.9.0.3~c-1.other~other.svc.cluster.local",
            "other",
            &[("app", "isolated")],
        ),
    )
    .await;
    for cl in [&mut a, &mut b, &mut c] {
        cl.sync().await;
    }
    assert!(
        a.names(CDS).contains(&REVIEWS.to_string()),
        "{:?}",
        a.names(CDS)
    );
    assert!(
        !c.names(CDS).contains(&REVIEWS.to_string()),
        "the isolated proxy must not see reviews: {:?}",
        c.names(CDS)
    );
    let before = a.held[EDS][REVIEWS].clone();

    write_config(
        &config,
        "reviews-slice.yaml",
        &slice_yaml(&["10.0.1.1", "10.0.1.2", "10.0.1.3"]),
    );
    for cl in [&mut a, &mut b] {
        let got = cl.drain(Duration::from_millis(1500)).await;
        assert_eq!(got.len(), 1, "exactly one response: {got:?}");
        let r = &got[0];
        assert_eq!(r.type_url, EDS);
        assert!(r.removed_resources.is_empty());
        let names: Vec<&str> = r.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, vec![REVIEWS]);
        assert_ne!(cl.held[EDS][REVIEWS], before, "a new version");
        eprintln!("endpoint change: {} bytes to one proxy", r.encoded_len());
    }
    let got = c.drain(Duration::from_millis(300)).await;
    assert!(got.is_empty(), "the isolated proxy gets nothing: {got:?}");
}

/// A Delta client that reconnects announcing what it holds (`initial_resource_versions`)
/// is sent nothing when nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_reconnect_with_current_versions_sends_nothing() {
    let (_dir, _config, meshflow) = setup("xds-reconnect").await;
    let addr = meshflow.xds_addr();
    let n = node(
        "sidecar~10.9.0.4~d-1.default~default.svc.cluster.local",
        "default",
        &[("app", "d")],
    );
    let mut first = DeltaClient::connect(addr, n.clone()).await;
    first.sync().await;
    let held = first.held.clone();
    drop(first);

    let mut again = DeltaClient::connect(addr, n).await;
    for t in [CDS, EDS, LDS] {
        let versions: HashMap<String, String> = held
            .get(t)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let names: Vec<String> = if t == EDS {
            versions.keys().cloned().collect()
        } else {
            Vec::new()
        };
        again.subscribe(t, &names, versions).await;
    }
    let got = again.drain(Duration::from_millis(800)).await;
    assert!(got.is_empty(), "nothing changed, nothing is sent: {got:?}");
}

async fn sotw_stream(
    addr: SocketAddr,
) -> (mpsc::Sender<DiscoveryRequest>, Streaming<DiscoveryResponse>) {
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    let (tx, rx) = mpsc::channel(16);
    let rx = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("open")
        .into_inner();
    (tx, rx)
}

/// The status a stream is ended with (it must end within 5 s, with an error).
async fn refusal<T>(rx: &mut Streaming<T>, what: &str) -> tonic::Status {
    tokio::time::timeout(Duration::from_secs(5), rx.message())
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer"))
        .err()
        .unwrap_or_else(|| panic!("{what}: not refused"))
}

async fn next(rx: &mut Streaming<DiscoveryResponse>, wait: Duration) -> Option<DiscoveryResponse> {
    tokio::time::timeout(wait, rx.message())
        .await
        .ok()?
        .expect("stream error")
}

/// SotW: CDS responses carry the full set; an endpoint change sends only the changed
/// subscribed ClusterLoadAssignment; a request with a stale nonce is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sotw_full_cds_and_changed_eds_only() {
    let (_dir, config, meshflow) = setup("xds-sotw").await;
    let (tx, mut rx) = sotw_stream(meshflow.xds_addr()).await;
    let n = node(
        "sidecar~10.9.0.5~e-1.default~default.svc.cluster.local",
        "default",
        &[("app", "e")],
    );
    tx.send(DiscoveryRequest {
        node: Some(n),
        type_url: CDS.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let cds = next(&mut rx, Duration::from_secs(10)).await.expect("CDS");
    assert_eq!(cds.type_url, CDS);
    assert!(
        cds.resources.len() >= 4,
        "full set: reviews, ratings, Passthrough, BlackHole"
    );
    tx.send(DiscoveryRequest {
        type_url: CDS.into(),
        version_info: cds.version_info.clone(),
        response_nonce: cds.nonce.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let eds_names = vec![
        REVIEWS.to_string(),
        "outbound|9080||ratings.default.svc.cluster.local".to_string(),
    ];
    tx.send(DiscoveryRequest {
        type_url: EDS.into(),
        resource_names: eds_names.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let eds = next(&mut rx, Duration::from_secs(5)).await.expect("EDS");
    assert_eq!(eds.resources.len(), 2, "both requested assignments");
    tx.send(DiscoveryRequest {
        type_url: EDS.into(),
        resource_names: eds_names.clone(),
        response_nonce: eds.nonce.clone(),
        version_info: eds.version_info.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    // A stale nonce must not trigger anything.
    tx.send(DiscoveryRequest {
        type_url: EDS.into(),
        resource_names: vec![REVIEWS.into()],
        response_nonce: "stale".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(
        next(&mut rx, Duration::from_millis(400)).await.is_none(),
        "stale nonce ignored"
    );

    write_config(&config, "reviews-slice.yaml", &slice_yaml(&["10.0.1.1"]));
    let upd = next(&mut rx, Duration::from_secs(5))
        .await
        .expect("EDS update");
    assert_eq!(upd.type_url, EDS);
    assert_eq!(upd.resources.len(), 1, "only the changed assignment");
    let cla = envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment::decode(
        upd.resources[0].value.as_slice(),
    )
    .unwrap();
    assert_eq!(cla.cluster_name, REVIEWS);
    assert_eq!(
        cla.endpoints
            .iter()
            .map(|l| l.lb_endpoints.len())
            .sum::<usize>(),
        1
    );
    assert!(
        next(&mut rx, Duration::from_millis(400)).await.is_none(),
        "no CDS resend for an endpoint change"
    );
}

/// Requests meshflow cannot serve get a clear gRPC status, not a hang or a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_get_invalid_argument() {
    let (_dir, _config, meshflow) = setup("xds-invalid").await;
    let addr = meshflow.xds_addr();
    let (tx, mut rx) = sotw_stream(addr).await;
    tx.send(DiscoveryRequest {
        node: Some(Node {
            id: "not-an-istio-id".into(),
            ..Default::default()
        }),
        type_url: CDS.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), rx.message())
        .await
        .expect("answered")
        .expect_err("rejected");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("not-an-istio-id"),
        "{}",
        err.message()
    );

    let (tx, mut rx) = sotw_stream(addr).await;
    let n = node(
        "sidecar~10.9.0.6~f-1.default~default.svc.cluster.local",
        "default",
        &[],
    );
    tx.send(DiscoveryRequest {
        node: Some(n),
        type_url: "type.googleapis.com/not.a.Type".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), rx.message())
        .await
        .expect("answered")
        .expect_err("rejected");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("not.a.Type"), "{}", err.message());
    let _ = (LDS, RDS);
}

/// The debug API lists connected proxies with their resources and ACKs per type, and the
/// configuration errors with the file, line, object and field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_api_lists_proxies_and_config_errors() {
    use meshflow::debug::pb::debug_client::DebugClient;
    use meshflow::debug::pb::{ListConfigErrorsRequest, ListProxiesRequest};
    let dir = TestDir::new("xds-debug");
    let config = dir.subdir("config");
    write_mesh(&config);
    write_config(
        &config,
        "bad.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: broken, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: reviews}\n      weight: 60\n    - destination: {host: ratings}\n      weight: 60\n",
    );
    let debug_addr = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let meshflow = Meshflow::start_with_args(
        &config,
        dir.path(),
        &["--debug-addr", &debug_addr.to_string()],
    );
    let mut a = DeltaClient::connect(
        meshflow.xds_addr(),
        node(
            "sidecar~10.9.0.7~g-1.default~default.svc.cluster.local",
            "default",
            &[],
        ),
    )
    .await;
    a.sync().await;

    let mut client = DebugClient::connect(format!("http://{debug_addr}"))
        .await
        .expect("debug API");
    let proxies = client
        .list_proxies(ListProxiesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .proxies;
    assert_eq!(proxies.len(), 1);
    let p = &proxies[0];
    assert_eq!(
        p.id,
        "sidecar~10.9.0.7~g-1.default~default.svc.cluster.local"
    );
    assert_eq!(p.streams, 1);
    let cds = p.types.iter().find(|t| t.r#type == "CDS").unwrap();
    assert_eq!(cds.resources as usize, a.names(CDS).len());
    assert!(cds.acks >= 1);
    // The stream's named subscriptions are listed; `without_names` (what the proxy-status
    // table asks for) leaves only the names out.
    let named = |p: &meshflow::debug::pb::ProxyStatus| -> usize {
        p.stream_details
            .iter()
            .flat_map(|s| &s.types)
            .map(|t| t.names.len())
            .sum()
    };
    assert!(named(p) > 0, "{p:?}");
    let short = client
        .list_proxies(ListProxiesRequest {
            without_names: true,
        })
        .await
        .unwrap()
        .into_inner()
        .proxies;
    assert_eq!(short.len(), 1);
    assert_eq!(named(&short[0]), 0, "{:?}", short[0]);
    assert_eq!(short[0].types, p.types);
    let subscribed = |p: &meshflow::debug::pb::ProxyStatus| -> Vec<(String, bool)> {
        p.stream_details
            .iter()
            .flat_map(|s| &s.types)
            .map(|t| (t.r#type.clone(), t.wildcard))
            .collect()
    };
    assert_eq!(subscribed(&short[0]), subscribed(p));

    let errors = client
        .list_config_errors(ListConfigErrorsRequest {})
        .await
        .unwrap()
        .into_inner()
        .errors;
    // The mesh fixture's Sidecar `other/isolated` selects no workload: a warning (MF0020).
    let (warnings, errors): (Vec<String>, Vec<String>) =
        errors.into_iter().partition(|e| e.contains(": warning: "));
    assert!(
        warnings.len() == 1 && warnings[0].starts_with("Sidecar/other/isolated: warning:"),
        "{warnings:?}"
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains(
            "bad.yaml:1: VirtualService default/broken: spec.http[0].route: weights add up to 120"
        ),
        "{}",
        errors[0]
    );
}

/// The full-push baseline (`--engine full-push`) answers an endpoint change the way
/// pre-incremental Istio did: the whole cluster set and every subscribed assignment again,
/// over State-of-the-World; Delta is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_push_baseline_resends_everything() {
    let dir = TestDir::new("xds-full-push");
    let config = dir.subdir("config");
    write_mesh(&config);
    let meshflow = Meshflow::start_with_args(&config, dir.path(), &["--engine", "full-push"]);
    let (tx, mut rx) = sotw_stream(meshflow.xds_addr()).await;
    let n = node(
        "sidecar~10.9.0.8~h-1.default~default.svc.cluster.local",
        "default",
        &[],
    );
    tx.send(DiscoveryRequest {
        node: Some(n),
        type_url: CDS.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let cds = next(&mut rx, Duration::from_secs(10)).await.expect("CDS");
    tx.send(DiscoveryRequest {
        type_url: CDS.into(),
        response_nonce: cds.nonce.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let eds_names = vec![
        REVIEWS.to_string(),
        "outbound|9080||ratings.default.svc.cluster.local".to_string(),
    ];
    tx.send(DiscoveryRequest {
        type_url: EDS.into(),
        resource_names: eds_names.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let eds = next(&mut rx, Duration::from_secs(5)).await.expect("EDS");
    tx.send(DiscoveryRequest {
        type_url: EDS.into(),
        resource_names: eds_names.clone(),
        response_nonce: eds.nonce.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(
        next(&mut rx, Duration::from_millis(300)).await.is_none(),
        "quiet before the change"
    );

    write_config(&config, "reviews-slice.yaml", &slice_yaml(&["10.0.1.1"]));
    let mut got: HashMap<String, usize> = HashMap::new();
    while let Some(r) = next(&mut rx, Duration::from_millis(800)).await {
        *got.entry(r.type_url.clone()).or_default() += r.resources.len();
        let names = if r.type_url == EDS {
            eds_names.clone()
        } else {
            vec![]
        };
        tx.send(DiscoveryRequest {
            type_url: r.type_url.clone(),
            resource_names: names,
            response_nonce: r.nonce.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    assert_eq!(
        got.get(CDS).copied(),
        Some(cds.resources.len()),
        "every cluster again: {got:?}"
    );
    assert_eq!(
        got.get(EDS).copied(),
        Some(2),
        "every subscribed assignment again: {got:?}"
    );

    let mut delta =
        AggregatedDiscoveryServiceClient::connect(format!("http://{}", meshflow.xds_addr()))
            .await
            .unwrap();
    let (_dtx, drx) =
        mpsc::channel::<envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest>(1);
    let err = delta
        .delta_aggregated_resources(ReceiverStream::new(drx))
        .await
        .expect_err("refused");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
}

/// One node id is one proxy: while a stream is open for a node, a stream claiming the same
/// id with another definition (here: other labels, which would select another Sidecar) is
/// refused with ALREADY_EXISTS, and the first proxy keeps being served its own config.
/// An identical definition (a second stream of the same Envoy) is still accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_id_never_serves_two_definitions() {
    let (_dir, _config, meshflow) = setup("xds-node-conflict").await;
    let addr = meshflow.xds_addr();
    const ID: &str = "sidecar~10.9.4.1~owner-1.other~other.svc.cluster.local";
    let mut owner = DeltaClient::connect(addr, node(ID, "other", &[])).await;
    owner.sync().await;
    let held = owner.names(CDS);
    assert!(held.iter().any(|c| c == REVIEWS), "{held:?}");

    let (tx, mut rx) = sotw_stream(addr).await;
    tx.send(DiscoveryRequest {
        node: Some(node(ID, "other", &[("app", "isolated")])),
        type_url: CDS.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let err = refusal(&mut rx, "the second definition").await;
    assert_eq!(err.code(), tonic::Code::AlreadyExists, "{}", err.message());
    assert!(err.message().contains(ID), "{}", err.message());

    // The same definition again is a second stream of the same proxy: served alike.
    let mut twin = DeltaClient::connect(addr, node(ID, "other", &[])).await;
    twin.sync().await;
    assert_eq!(twin.names(CDS), held);
    owner.drain(Duration::from_millis(500)).await;
    assert_eq!(owner.names(CDS), held, "the owner's config did not change");
}

/// Streams that never send a request are closed after `--first-request-timeout-ms` with
/// DEADLINE_EXCEEDED, so they cannot hold every `--max-streams` slot: a proxy connecting
/// afterwards is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_streams_time_out_and_free_their_slots() {
    let dir = TestDir::new("xds-first-request");
    let config = dir.subdir("config");
    write_mesh(&config);
    let meshflow = Meshflow::start_with_args(
        &config,
        dir.path(),
        &["--max-streams", "2", "--first-request-timeout-ms", "300"],
    );
    let addr = meshflow.xds_addr();
    let (_keep1, mut r1) = sotw_stream(addr).await;
    let (_keep2, mut r2) = sotw_stream(addr).await;
    for rx in [&mut r1, &mut r2] {
        let err = refusal(rx, "a silent stream").await;
        assert_eq!(
            err.code(),
            tonic::Code::DeadlineExceeded,
            "{}",
            err.message()
        );
    }
    let mut a = DeltaClient::connect(
        addr,
        node(
            "sidecar~10.9.5.1~late-1.default~default.svc.cluster.local",
            "default",
            &[],
        ),
    )
    .await;
    a.sync().await;
    assert!(a.names(CDS).iter().any(|c| c == REVIEWS));
}

/// `meshflow serve --config-dir DIR` with no other flag starts: the default xDS address is
/// on loopback, where plaintext is allowed.
#[test]
fn serve_starts_with_default_flags() {
    use std::io::BufRead;
    let dir = TestDir::new("serve-defaults");
    let config = dir.subdir("config");
    write_mesh(&config);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args(["serve", "--config-dir"])
        .arg(&config)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start meshflow");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    let listening = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("xDS server listening on 127.0.0.1:15010") => break true,
            Ok(line) => seen.push(line),
            Err(_) => break false,
        }
    };
    let status = child.try_wait().expect("wait");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        listening,
        "no 'listening' line (exit {status:?}):\n{}",
        seen.join("\n")
    );
}

/// A request that is not a valid DiscoveryRequest ends the stream with INVALID_ARGUMENT and
/// the reason (it used to end with grpc-status OK, the reason nowhere).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_invalid_argument() {
    /// Field 1 of DiscoveryRequest is the string `version_info`: these bytes are not UTF-8.
    #[derive(Clone, PartialEq, prost::Message)]
    struct NotUtf8 {
        #[prost(bytes = "vec", tag = "1")]
        version_info: Vec<u8>,
    }
    let (_dir, _config, meshflow) = setup("xds-malformed").await;
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", meshflow.xds_addr()))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
    );
    let codec = tonic_prost::ProstCodec::<NotUtf8, DiscoveryResponse>::default();
    let request = tonic::Request::new(tokio_stream::iter(vec![NotUtf8 {
        version_info: vec![0xff, 0xfe],
    }]));
    let mut stream = grpc
        .streaming(request, path, codec)
        .await
        .expect("opened")
        .into_inner();
    let err = refusal(&mut stream, "a malformed request").await;
    assert_eq!(
        err.code(),
        tonic::Code::InvalidArgument,
        "{}",
        err.message()
    );
    assert!(
        err.message().contains("unreadable request"),
        "{}",
        err.message()
    );
}

/// A node whose LABELS metadata is over the bound (here 4,000 labels, a 70 KB request) is
/// refused with INVALID_ARGUMENT before it becomes a dataflow input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_node_metadata_is_refused() {
    let (_dir, _config, meshflow) = setup("xds-big-node").await;
    let labels: Vec<(String, String)> = (0..4000)
        .map(|i| (format!("label-{i}"), format!("value-{i}")))
        .collect();
    let labels: Vec<(&str, &str)> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let (tx, mut rx) = sotw_stream(meshflow.xds_addr()).await;
    tx.send(DiscoveryRequest {
        node: Some(node(
            "sidecar~10.9.6.1~big-1.default~default.svc.cluster.local",
            "default",
            &labels,
        )),
        type_url: CDS.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let err = refusal(&mut rx, "4,000 labels").await;
    assert_eq!(
        err.code(),
        tonic::Code::InvalidArgument,
        "{}",
        err.message()
    );
    assert!(err.message().contains("LABELS"), "{}", err.message());
}

/// The debug port shows every proxy's config and history unauthenticated: off loopback,
/// `serve` refuses to start without `--debug-public`, and says so.
#[test]
fn debug_port_off_loopback_needs_debug_public() {
    let dir = TestDir::new("serve-debug-public");
    let config = dir.subdir("config");
    write_mesh(&config);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args([
            "serve",
            "--xds-addr",
            "127.0.0.1:0",
            "--debug-addr",
            "0.0.0.0:0",
            "--config-dir",
        ])
        .arg(&config)
        .output()
        .expect("run meshflow");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--debug-public"), "{stderr}");
}

/// An initial-push slot is held at most `--initial-push-hold-ms` from when it was taken: a
/// proxy that takes the only slot (`--initial-pushes 1`) and then neither reads nor answers
/// does not keep the next proxy from being served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_proxy_holds_its_initial_push_slot_only_until_the_deadline() {
    use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
    let dir = TestDir::new("xds-slot-deadline");
    let config = dir.subdir("config");
    write_mesh(&config);
    let meshflow = Meshflow::start_with_args(
        &config,
        dir.path(),
        &["--initial-pushes", "1", "--initial-push-hold-ms", "500"],
    );
    let addr = meshflow.xds_addr();
    let mut silent = AggregatedDiscoveryServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    let (tx, rx) = mpsc::channel(4);
    tx.send(DeltaDiscoveryRequest {
        node: Some(node(
            "sidecar~10.9.7.1~silent-1.default~default.svc.cluster.local",
            "default",
            &[],
        )),
        type_url: CDS.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    // Opened, never read, never answered.
    let _unread = silent
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("open");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let mut next = DeltaClient::connect(
        addr,
        node(
            "sidecar~10.9.7.2~next-1.default~default.svc.cluster.local",
            "default",
            &[],
        ),
    )
    .await;
    next.sync().await;
    assert!(next.names(CDS).iter().any(|c| c == REVIEWS));
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "served after {:?}",
        started.elapsed()
    );
    drop(tx);
}

/// A request over the 16 MiB limit ends the stream with RESOURCE_EXHAUSTED and the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_requests_get_resource_exhausted() {
    let (_dir, _config, meshflow) = setup("xds-oversized").await;
    let (tx, mut rx) = sotw_stream(meshflow.xds_addr()).await;
    tx.send(DiscoveryRequest {
        node: Some(node(
            "sidecar~10.9.8.1~huge-1.default~default.svc.cluster.local",
            "default",
            &[],
        )),
        type_url: CDS.into(),
        version_info: "x".repeat(17 * 1024 * 1024),
        ..Default::default()
    })
    .await
    .unwrap();
    let err = refusal(&mut rx, "a 17 MiB request").await;
    assert_eq!(
        err.code(),
        tonic::Code::ResourceExhausted,
        "{}",
        err.message()
    );
    assert!(err.message().contains("bytes"), "{}", err.message());
}
