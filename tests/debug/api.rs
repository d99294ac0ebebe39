//! The debug port of a running `meshflow serve`, with Delta ADS clients connected the way
//! Envoy connects: CSDS (`envoy.service.status.v3`, unary and streaming), the JSON endpoints
//! (`/debug/proxies`, `/debug/config_dump`, `/debug/config_errors`), `/metrics`, and the
//! `proxy-status` / `proxy-config` commands run as the built binary. A NACK sent on purpose
//! must show up, with its message, in each of them. The real-Envoy counterpart is
//! `debug/envoy.rs`.

use crate::support;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::listener::v3::{filter, Listener};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, HttpConnectionManager,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{
    string_matcher::MatchPattern, NodeMatcher, RegexMatcher, StringMatcher, StructMatcher,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
use envoy_types::pb::envoy::service::status::v3::{
    ClientConfig, ClientStatusRequest, ClientStatusResponse, ConfigStatus,
};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use prost::Message;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;
use support::xds_client::{self, node, CDS, EDS, LDS, RDS};
use support::{http_get, meshflow_cli, write_config, Meshflow, TestDir};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const TYPES: [&str; 4] = [CDS, EDS, LDS, RDS];
const REVIEWS: &str = "outbound|9080||reviews.default.svc.cluster.local";
const A_ID: &str = "sidecar~10.9.1.1~a-1.default~default.svc.cluster.local";
const B_ID: &str = "sidecar~10.9.1.2~b-1.other~other.svc.cluster.local";
const NACK_TEXT: &str = "Error adding/updating listener(s) 0.0.0.0_9080: on purpose";

/// Two services in `default` (reviews with two endpoints), a Sidecar that confines
/// `app: isolated` proxies in `other` to their own (empty) namespace, and one invalid
/// VirtualService.
fn write_mesh(dir: &std::path::Path) {
    write_config(
        dir,
        "services.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: default}\nspec:\n  ports: [{name: http, port: 9080}]\n---\napiVersion: v1\nkind: Service\nmetadata: {name: ratings, namespace: default}\nspec:\n  ports: [{name: http, port: 9080}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: ratings-abc\n  namespace: default\n  labels: {kubernetes.io/service-name: ratings}\naddressType: IPv4\nports:\n- {name: http, port: 9080}\nendpoints:\n- addresses: [\"10.0.2.1\"]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: reviews-abc\n  namespace: default\n  labels: {kubernetes.io/service-name: reviews}\naddressType: IPv4\nports:\n- {name: http, port: 9080}\nendpoints:\n- addresses: [\"10.0.1.1\"]\n- addresses: [\"10.0.1.2\"]\n",
    );
    write_config(
        dir,
        "sidecar.yaml",
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: isolated, namespace: other}\nspec:\n  workloadSelector: {labels: {app: isolated}}\n  egress:\n  - hosts: [\"./*\"]\n",
    );
    write_config(
        dir,
        "bad.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: broken, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: reviews}\n      weight: 60\n    - destination: {host: ratings}\n      weight: 60\n",
    );
}

/// The shared Delta client (`support::xds_client`), which subscribes and ACKs as Envoy
/// does, plus what this file needs: the bodies it holds, the last nonce per type (to NACK),
/// and RDS subscriptions.
struct DeltaClient {
    inner: xds_client::DeltaClient,
    /// type → (name → encoded body) held.
    bodies: HashMap<String, BTreeMap<String, Vec<u8>>>,
    last_nonce: HashMap<String, String>,
}

impl DeltaClient {
    async fn connect(addr: SocketAddr, node: Node) -> DeltaClient {
        DeltaClient {
            inner: xds_client::DeltaClient::connect(addr, node).await,
            bodies: HashMap::new(),
            last_nonce: HashMap::new(),
        }
    }

    fn held(&self, type_url: &str) -> BTreeMap<String, String> {
        self.inner.held.get(type_url).cloned().unwrap_or_default()
    }

    fn names(&self, type_url: &str) -> Vec<String> {
        self.inner.names(type_url)
    }

    async fn subscribe(&mut self, type_url: &str, names: &[String]) {
        self.inner.subscribe(type_url, names, HashMap::new()).await;
    }

    /// The next response within `wait`, applied and ACKed.
    async fn recv(&mut self, wait: Duration) -> Option<DeltaDiscoveryResponse> {
        let resp = self.inner.recv(wait).await?;
        let bodies = self.bodies.entry(resp.type_url.clone()).or_default();
        for r in &resp.resources {
            let body = r
                .resource
                .as_ref()
                .map(|a| a.value.clone())
                .unwrap_or_default();
            bodies.insert(r.name.clone(), body);
        }
        for n in &resp.removed_resources {
            bodies.remove(n);
        }
        self.last_nonce
            .insert(resp.type_url.clone(), resp.nonce.clone());
        Some(resp)
    }

    async fn drain(&mut self, wait: Duration) {
        while self.recv(wait).await.is_some() {}
    }

    /// Route configurations the held listeners name over RDS.
    fn rds_names(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .bodies
            .get(LDS)
            .into_iter()
            .flat_map(|m| m.values())
            .filter_map(|b| Listener::decode(b.as_slice()).ok())
            .flat_map(|l| l.filter_chains.into_iter().chain(l.default_filter_chain))
            .flat_map(|c| c.filters)
            .filter_map(|f| match f.config_type {
                Some(filter::ConfigType::TypedConfig(a)) => Some(a),
                _ => None,
            })
            .filter_map(|a| HttpConnectionManager::decode(a.value.as_slice()).ok())
            .filter_map(|h| match h.route_specifier {
                Some(RouteSpecifier::Rds(r)) => Some(r.route_config_name),
                _ => None,
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Subscribes like Envoy: wildcard CDS, EDS for the EDS clusters, wildcard LDS, RDS for
    /// the route configurations the listeners name; waits until all of it has arrived.
    async fn sync(&mut self) {
        self.subscribe(CDS, &[]).await;
        self.recv(Duration::from_secs(10))
            .await
            .expect("CDS response");
        let eds: Vec<String> = self
            .names(CDS)
            .into_iter()
            .filter(|n| n.starts_with("outbound|"))
            .collect();
        if !eds.is_empty() {
            self.subscribe(EDS, &eds).await;
        }
        self.subscribe(LDS, &[]).await;
        self.drain(Duration::from_millis(500)).await;
        let rds = self.rds_names();
        if !rds.is_empty() {
            self.subscribe(RDS, &rds).await;
            self.drain(Duration::from_millis(500)).await;
        }
        assert_eq!(self.names(EDS), eds, "every EDS cluster got its assignment");
        assert_eq!(self.names(RDS), rds, "every route configuration arrived");
    }

    /// NACKs the last response of `type_url` with `message`, as Envoy does when it rejects
    /// an update.
    async fn nack(&mut self, type_url: &str, message: &str) {
        let nonce = self
            .last_nonce
            .get(type_url)
            .cloned()
            .expect("a response to NACK");
        self.inner
            .send(DeltaDiscoveryRequest {
                type_url: type_url.into(),
                response_nonce: nonce,
                error_detail: Some(RpcStatus {
                    code: 3,
                    message: message.into(),
                    details: vec![],
                }),
                ..Default::default()
            })
            .await;
    }
}

struct Setup {
    _dir: TestDir,
    _meshflow: Meshflow,
    debug: SocketAddr,
    a: DeltaClient,
    b: DeltaClient,
}

/// meshflow with its debug port on a free loopback port, proxy `a` in `default` (sees both
/// services) and proxy `b` in `other` (sees none), both synced. The test clients are not
/// Envoy: they subscribe to clusters, listeners, routes and endpoints, never to the SDS
/// secrets auto mTLS clusters name, so the mesh runs without auto mTLS and every resource a
/// proxy should hold is one it acknowledged.
async fn setup(label: &str) -> Setup {
    let dir = TestDir::new(label);
    let config = dir.subdir("config");
    write_mesh(&config);
    let mesh_config = dir.path().join("mesh.yaml");
    std::fs::write(&mesh_config, "enableAutoMtls: false\n").expect("write mesh.yaml");
    let debug = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let meshflow = Meshflow::start_with_args(
        &config,
        dir.path(),
        &[
            "--debug-addr",
            &debug.to_string(),
            "--mesh-config",
            &mesh_config.display().to_string(),
        ],
    );
    let mut a = DeltaClient::connect(meshflow.xds_addr(), node(A_ID, "default", &[])).await;
    a.sync().await;
    let mut b = DeltaClient::connect(
        meshflow.xds_addr(),
        node(B_ID, "other", &[("app", "isolated")]),
    )
    .await;
    b.sync().await;
    assert!(!a.names(RDS).is_empty(), "a holds route configurations");
    Setup {
        _dir: dir,
        _meshflow: meshflow,
        debug,
        a,
        b,
    }
}

async fn csds(addr: SocketAddr) -> ClientStatusDiscoveryServiceClient<tonic::transport::Channel> {
    ClientStatusDiscoveryServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("CSDS on the debug port")
}

fn id_matcher(p: MatchPattern) -> NodeMatcher {
    NodeMatcher {
        node_id: Some(StringMatcher {
            match_pattern: Some(p),
            ignore_case: false,
        }),
        node_metadatas: vec![],
    }
}

fn ids(resp: &ClientStatusResponse) -> Vec<String> {
    resp.config
        .iter()
        .map(|c| c.node.as_ref().map(|n| n.id.clone()).unwrap_or_default())
        .collect()
}

/// type → name → (version, status) of a ClientConfig.
fn statuses(c: &ClientConfig) -> BTreeMap<String, BTreeMap<String, (String, i32)>> {
    let mut out: BTreeMap<String, BTreeMap<String, (String, i32)>> = BTreeMap::new();
    for g in &c.generic_xds_configs {
        out.entry(g.type_url.clone())
            .or_default()
            .insert(g.name.clone(), (g.version_info.clone(), g.config_status));
    }
    out
}

/// CSDS answers, per connected proxy, every resource it holds with meshflow's version, the
/// resource itself and its status; node matchers select proxies; a NACK turns the type's
/// resources to ERROR with Envoy's message; the streaming variant answers each request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csds_reports_what_each_proxy_holds() {
    let mut s = setup("debug-csds").await;
    let mut client = csds(s.debug).await;

    let all = client
        .fetch_client_status(ClientStatusRequest::default())
        .await
        .expect("fetch")
        .into_inner();
    assert_eq!(ids(&all), vec![A_ID.to_string(), B_ID.to_string()]);

    for (c, proxy) in all.config.iter().zip([&s.a, &s.b]) {
        let st = statuses(c);
        for t in TYPES {
            let held = proxy.held(t);
            let got: BTreeMap<String, String> = st
                .get(t)
                .into_iter()
                .flatten()
                .map(|(n, (v, _))| (n.clone(), v.clone()))
                .collect();
            assert_eq!(
                got, held,
                "{t}: CSDS names and versions are what the proxy holds"
            );
            for (name, (_, status)) in st.get(t).into_iter().flatten() {
                assert_eq!(*status, ConfigStatus::Synced as i32, "{t} {name}");
            }
        }
    }
    let a = &all.config[0];
    let node = a.node.as_ref().expect("node");
    assert!(node
        .metadata
        .as_ref()
        .is_some_and(|m| m.fields.contains_key("NAMESPACE")));
    // The resource bodies are the ones that were sent.
    let reviews = a
        .generic_xds_configs
        .iter()
        .find(|g| g.type_url == CDS && g.name == REVIEWS)
        .expect("reviews cluster");
    let any = reviews.xds_config.as_ref().expect("resource contents");
    assert_eq!(any.type_url, CDS);
    assert_eq!(
        Cluster::decode(any.value.as_slice())
            .expect("a Cluster")
            .name,
        REVIEWS
    );
    assert_eq!(any.value, s.a.bodies[CDS][REVIEWS]);

    // Node matchers: exact, prefix, regex (whole id), OR between them.
    let one = client
        .fetch_client_status(ClientStatusRequest {
            node_matchers: vec![id_matcher(MatchPattern::Exact(B_ID.into()))],
            ..Default::default()
        })
        .await
        .expect("fetch b")
        .into_inner();
    assert_eq!(ids(&one), vec![B_ID.to_string()]);
    let by_prefix = client
        .fetch_client_status(ClientStatusRequest {
            node_matchers: vec![id_matcher(MatchPattern::Prefix("sidecar~10.9.1.1~".into()))],
            ..Default::default()
        })
        .await
        .expect("fetch prefix")
        .into_inner();
    assert_eq!(ids(&by_prefix), vec![A_ID.to_string()]);
    let regex = |r: &str| {
        id_matcher(MatchPattern::SafeRegex(RegexMatcher {
            regex: r.into(),
            ..Default::default()
        }))
    };
    let both = client
        .fetch_client_status(ClientStatusRequest {
            node_matchers: vec![regex(".*~b-1\\.other~.*"), regex("a-1")],
            ..Default::default()
        })
        .await
        .expect("fetch regex")
        .into_inner();
    assert_eq!(
        ids(&both),
        vec![B_ID.to_string()],
        "`a-1` alone is not the whole id"
    );
    let none = client
        .fetch_client_status(ClientStatusRequest {
            node_matchers: vec![id_matcher(MatchPattern::Exact("router~nobody".into()))],
            ..Default::default()
        })
        .await
        .expect("fetch none")
        .into_inner();
    assert!(none.config.is_empty());

    // Without contents.
    let bare = client
        .fetch_client_status(ClientStatusRequest {
            exclude_resource_contents: true,
            ..Default::default()
        })
        .await
        .expect("fetch bare")
        .into_inner();
    assert!(bare
        .config
        .iter()
        .flat_map(|c| &c.generic_xds_configs)
        .all(|g| g.xds_config.is_none() && !g.version_info.is_empty()));

    // Metadata matchers are refused, not ignored.
    let err = client
        .fetch_client_status(ClientStatusRequest {
            node_matchers: vec![NodeMatcher {
                node_id: None,
                node_metadatas: vec![StructMatcher::default()],
            }],
            ..Default::default()
        })
        .await
        .expect_err("metadata matchers unsupported");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);

    // A NACK of LDS: a's listeners become ERROR with Envoy's message; the rest stays SYNCED.
    s.a.nack(LDS, NACK_TEXT).await;
    let nacked = converge_csds(&mut client, |r| {
        r.config[0]
            .generic_xds_configs
            .iter()
            .any(|g| g.type_url == LDS && g.config_status == ConfigStatus::Error as i32)
    })
    .await;
    for g in &nacked.config[0].generic_xds_configs {
        if g.type_url == LDS {
            assert_eq!(g.config_status, ConfigStatus::Error as i32, "{}", g.name);
            let details = g.error_state.as_ref().map(|e| e.details.as_str());
            assert_eq!(details, Some(NACK_TEXT), "{}", g.name);
        } else {
            assert_eq!(g.config_status, ConfigStatus::Synced as i32, "{}", g.name);
            assert!(g.error_state.is_none());
        }
    }
    assert!(nacked.config[1]
        .generic_xds_configs
        .iter()
        .all(|g| g.config_status == ConfigStatus::Synced as i32));

    // The streaming variant: one response per request.
    let (tx, rx) = mpsc::channel(4);
    let mut stream = client
        .stream_client_status(ReceiverStream::new(rx))
        .await
        .expect("stream")
        .into_inner();
    tx.send(ClientStatusRequest::default()).await.expect("send");
    let first = stream.message().await.expect("ok").expect("response");
    assert_eq!(ids(&first), vec![A_ID.to_string(), B_ID.to_string()]);
    tx.send(ClientStatusRequest {
        node_matchers: vec![id_matcher(MatchPattern::Exact(A_ID.into()))],
        ..Default::default()
    })
    .await
    .expect("send");
    let second = stream.message().await.expect("ok").expect("response");
    assert_eq!(ids(&second), vec![A_ID.to_string()]);

    // A disconnected proxy leaves the answer.
    drop(s.b);
    converge_csds(&mut client, |r| ids(r) == vec![A_ID.to_string()]).await;
}

async fn converge_csds(
    client: &mut ClientStatusDiscoveryServiceClient<tonic::transport::Channel>,
    accept: impl Fn(&ClientStatusResponse) -> bool,
) -> ClientStatusResponse {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = client
            .fetch_client_status(ClientStatusRequest::default())
            .await
            .expect("fetch")
            .into_inner();
        if accept(&r) {
            return r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "CSDS did not converge: {:?}",
            ids(&r)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    http_get(addr, "127.0.0.1", path, &[]).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

fn get_json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (status, body) = get(addr, path);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// The items of section `field` of the config dump section whose `@type` ends with `suffix`.
fn section<'a>(
    dump: &'a serde_json::Value,
    suffix: &str,
    field: &str,
) -> Vec<&'a serde_json::Value> {
    dump["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .filter(|s| s["@type"].as_str().is_some_and(|t| t.ends_with(suffix)))
        .flat_map(|s| s[field].as_array().into_iter().flatten())
        .collect()
}

fn strings(items: &[&serde_json::Value], pointer: &str) -> Vec<String> {
    let mut v: Vec<String> = items
        .iter()
        .filter_map(|i| i.pointer(pointer)?.as_str().map(str::to_string))
        .collect();
    v.sort();
    v
}

/// `/healthz` and `/readyz`: both answer `200 ok` once the initial read of the config
/// directory has been computed and proxies are served.
#[tokio::test(flavor = "multi_thread")]
async fn health_endpoints_say_live_and_ready() {
    let s = setup("debug-health").await;
    assert_eq!(get(s.debug, "/healthz"), (200, "ok\n".to_string()));
    assert_eq!(get(s.debug, "/readyz"), (200, "ok\n".to_string()));
    let (status, body) = get(s.debug, "/nothing-here");
    assert_eq!(status, 404);
    assert!(body.contains("/readyz"), "{body}");
}

/// The debug port answers to IP addresses and `localhost` only (no `--debug-host` given):
/// a request naming another host — a DNS-rebinding page's — is refused with 421 and says
/// why, whatever the path.
#[tokio::test(flavor = "multi_thread")]
async fn the_debug_port_refuses_other_host_names() {
    let s = setup("debug-host").await;
    for host in ["127.0.0.1", "localhost", "[::1]"] {
        let (status, _) = http_get(s.debug, host, "/debug/proxies", &[]).unwrap();
        assert_eq!(status, 200, "{host}");
    }
    for path in [
        "/debug/proxies",
        "/debug/config_dump?proxy=a.default",
        "/healthz",
    ] {
        let (status, body) = http_get(s.debug, "rebind.attacker.example", path, &[]).unwrap();
        assert_eq!(status, 421, "{path}: {body}");
        assert!(body.contains("--debug-host"), "{body}");
    }
}

/// The JSON endpoints and `/metrics` on the same port as gRPC: proxies with sync state per
/// type, a proxy's config dump in Envoy's form, config errors; a NACK shows in all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_endpoints_serve_debug_json_and_metrics() {
    let mut s = setup("debug-http").await;
    let addr = s.debug;

    let proxies = get_json(addr, "/debug/proxies");
    let list = proxies["proxies"].as_array().expect("proxies");
    assert_eq!(list.len(), 2, "{proxies}");
    assert_eq!(list[0]["id"], A_ID);
    assert_eq!(list[0]["kind"], "sidecar");
    assert_eq!(list[0]["namespace"], "default");
    for t in ["CDS", "EDS", "LDS", "RDS"] {
        assert_eq!(list[0]["types"][t]["sync"], "SYNCED", "a {t}: {proxies}");
        assert!(list[0]["types"][t]["acks"].as_u64() >= Some(1), "{proxies}");
        assert!(list[0]["types"][t]["last_nack"].is_null());
    }
    let cds = s.a.names(CDS).len() as u64;
    assert_eq!(list[0]["types"]["CDS"]["resources"].as_u64(), Some(cds));
    // b sees no service: nothing of EDS to send.
    assert_eq!(list[1]["id"], B_ID);
    assert_eq!(list[1]["types"]["EDS"]["sync"], "NOT SENT", "{proxies}");
    assert_eq!(list[1]["types"]["CDS"]["sync"], "SYNCED", "{proxies}");

    // The config dump of a, by its pod.namespace, in Envoy's admin form.
    let dump = get_json(addr, "/debug/config_dump?proxy=a-1.default");
    let clusters = section(&dump, "ClustersConfigDump", "dynamic_active_clusters");
    assert_eq!(strings(&clusters, "/cluster/name"), s.a.names(CDS));
    let reviews = clusters
        .iter()
        .find(|c| c["cluster"]["name"] == REVIEWS)
        .expect("reviews");
    assert_eq!(reviews["version_info"], s.a.held(CDS)[REVIEWS].as_str());
    assert_eq!(reviews["cluster"]["@type"], CDS);
    assert_eq!(reviews["cluster"]["type"], "EDS");
    assert_eq!(
        reviews["cluster"]["eds_cluster_config"]["eds_config"]["ads"],
        serde_json::json!({})
    );
    assert!(reviews["cluster"]["connect_timeout"]
        .as_str()
        .is_some_and(|t| t.ends_with('s')));
    let listeners = section(&dump, "ListenersConfigDump", "dynamic_listeners");
    assert_eq!(strings(&listeners, "/name"), s.a.names(LDS));
    assert!(listeners
        .iter()
        .all(|l| l["active_state"]["listener"]["name"] == l["name"]));
    // Nested Anys render with their own fields, e.g. the HCM's RDS name.
    let text = serde_json::to_string(&dump).expect("json");
    assert!(
        text.contains("\"route_config_name\""),
        "HCM fields rendered"
    );
    let routes = section(&dump, "RoutesConfigDump", "dynamic_route_configs");
    assert_eq!(strings(&routes, "/route_config/name"), s.a.names(RDS));
    let endpoints = section(&dump, "EndpointsConfigDump", "dynamic_endpoint_configs");
    assert_eq!(
        strings(&endpoints, "/endpoint_config/cluster_name"),
        s.a.names(EDS)
    );
    let reviews_eps = endpoints
        .iter()
        .find(|e| e["endpoint_config"]["cluster_name"] == REVIEWS)
        .expect("reviews endpoints");
    let mut ips: Vec<String> = reviews_eps["endpoint_config"]["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["lb_endpoints"].as_array().into_iter().flatten())
        .map(|e| {
            let sa = &e["endpoint"]["address"]["socket_address"];
            format!(
                "{}:{}",
                sa["address"].as_str().unwrap_or("?"),
                sa["port_value"]
            )
        })
        .collect();
    ips.sort();
    assert_eq!(ips, vec!["10.0.1.1:9080", "10.0.1.2:9080"]);
    // The full id and Istio's parameter name work too.
    let same = get_json(
        addr,
        &format!("/debug/config_dump?proxyID={}", percent(A_ID)),
    );
    assert_eq!(same, dump);

    let (status, body) = get(addr, "/debug/config_dump");
    assert_eq!(status, 400, "{body}");
    let (status, body) = get(addr, "/debug/config_dump?proxy=nobody.default");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("nobody.default"), "{body}");
    let (status, _) = get(addr, "/no/such/page");
    assert_eq!(status, 404);

    let errors = get_json(addr, "/debug/config_errors");
    let rejected = errors["rejected_inputs"]
        .as_array()
        .expect("rejected_inputs");
    assert_eq!(rejected.len(), 1, "{errors}");
    assert!(
        rejected[0]
            .as_str()
            .is_some_and(|e| e.contains("bad.yaml:1: VirtualService default/broken")
                && e.contains("weights add up to 120")),
        "{errors}"
    );

    let (status, metrics) = get(addr, "/metrics");
    assert_eq!(status, 200);
    for line in [
        "meshflow_proxies_connected 2",
        "meshflow_xds_streams 2",
        "meshflow_config_errors{source=\"input\"} 1",
        "meshflow_proxy_sync{type=\"LDS\",state=\"SYNCED\"} 2",
        "meshflow_proxy_sync{type=\"EDS\",state=\"NOT SENT\"} 1",
        "meshflow_proxies_nacked{type=\"LDS\"} 0",
        &format!(
            "meshflow_proxy_resources{{type=\"CDS\"}} {}",
            cds + s.b.names(CDS).len() as u64
        ),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "want {line:?} in\n{metrics}"
        );
    }
    assert!(
        metrics.lines().any(|l| l.starts_with("meshflow_epoch ")),
        "{metrics}"
    );

    // A NACK shows in /debug/proxies and /metrics.
    s.a.nack(LDS, NACK_TEXT).await;
    let ok = support::wait_until(Duration::from_secs(10), || {
        get_json(addr, "/debug/proxies")["proxies"][0]["types"]["LDS"]["sync"] == "NACKED"
    });
    assert!(ok, "LDS NACKED in /debug/proxies");
    let proxies = get_json(addr, "/debug/proxies");
    assert_eq!(
        proxies["proxies"][0]["types"]["LDS"]["last_nack"],
        NACK_TEXT
    );
    assert_eq!(proxies["proxies"][0]["types"]["CDS"]["sync"], "SYNCED");
    let (_, metrics) = get(addr, "/metrics");
    for line in [
        "meshflow_proxies_nacked{type=\"LDS\"} 1",
        "meshflow_proxy_sync{type=\"LDS\",state=\"NACKED\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "want {line:?} in\n{metrics}"
        );
    }
}

fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The row of a table whose first column is `first`, split into columns.
fn row<'a>(table: &'a str, first: &str) -> Option<Vec<&'a str>> {
    table
        .lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect::<Vec<_>>()
        })
        .find(|cols| cols.first() == Some(&first))
}

/// `proxy-status` (table, JSON, YAML) and `proxy-config` for every kind, against the same
/// running meshflow; the JSON equals `/debug/proxies`, the tables list what the proxy holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_proxy_status_and_proxy_config() {
    let mut s = setup("debug-cli").await;
    let addr = s.debug.to_string();
    let debug = ["--debug-addr", addr.as_str()];

    let status = meshflow_cli(&[&["proxy-status"][..], &debug].concat());
    let header = row(&status, "NAME").expect("header");
    assert_eq!(
        header,
        vec!["NAME", "KIND", "CDS", "EDS", "LDS", "RDS", "SDS"],
        "{status}"
    );
    let a = row(&status, A_ID).expect("a's row");
    assert_eq!(a[1], "sidecar");
    for cell in &a[2..6] {
        assert!(cell.starts_with("SYNCED ("), "{status}");
    }
    assert_eq!(a[6], "NOT SENT (0)", "a sidecar holds no secrets: {status}");
    assert_eq!(
        a[2],
        format!("SYNCED ({})", s.a.names(CDS).len()),
        "{status}"
    );
    let b = row(&status, B_ID).expect("b's row");
    assert_eq!(b[3], "NOT SENT (0)", "{status}");

    let json = meshflow_cli(&[&["proxy-status", "-o", "json"][..], &debug].concat());
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(json, get_json(s.debug, "/debug/proxies"));
    let yaml = meshflow_cli(&[&["proxy-status", "-o", "yaml"][..], &debug].concat());
    let yaml: serde_json::Value = serde_yaml_ng::from_str(&yaml).expect("YAML");
    assert_eq!(yaml, json);

    // Clusters: NAME and TYPE per cluster the proxy holds.
    let clusters =
        meshflow_cli(&[&["proxy-config", "cluster", "a-1.default"][..], &debug].concat());
    assert_eq!(
        row(&clusters, "NAME").expect("header"),
        vec!["NAME", "TYPE", "LB POLICY", "CONNECT TIMEOUT"]
    );
    let names: Vec<&str> = clusters
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, s.a.names(CDS), "{clusters}");
    assert_eq!(row(&clusters, REVIEWS).expect("reviews")[1], "EDS");
    assert_eq!(
        row(&clusters, "BlackHoleCluster").expect("blackhole")[1],
        "STATIC"
    );

    let json =
        meshflow_cli(&[&["proxy-config", "cluster", A_ID, "-o", "json"][..], &debug].concat());
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let dumped: Vec<&serde_json::Value> = json.as_array().expect("array").iter().collect();
    assert_eq!(strings(&dumped, "/name"), s.a.names(CDS));
    let dump = get_json(s.debug, "/debug/config_dump?proxy=a-1.default");
    let from_dump: Vec<serde_json::Value> =
        section(&dump, "ClustersConfigDump", "dynamic_active_clusters")
            .into_iter()
            .map(|c| c["cluster"].clone())
            .collect();
    assert_eq!(
        json,
        serde_json::Value::Array(from_dump),
        "same JSON as the config dump"
    );

    let endpoints =
        meshflow_cli(&[&["proxy-config", "endpoint", "a-1.default"][..], &debug].concat());
    assert_eq!(
        row(&endpoints, "ADDRESS").expect("header"),
        vec!["ADDRESS", "STATUS", "WEIGHT", "CLUSTER"]
    );
    for ip in ["10.0.1.1:9080", "10.0.1.2:9080"] {
        assert_eq!(row(&endpoints, ip).expect(ip)[3], REVIEWS, "{endpoints}");
    }
    assert_eq!(
        row(&endpoints, "10.0.2.1:9080").expect("ratings")[3],
        "outbound|9080||ratings.default.svc.cluster.local"
    );

    let listeners =
        meshflow_cli(&[&["proxy-config", "listener", "a-1.default"][..], &debug].concat());
    for name in s.a.names(LDS) {
        assert!(row(&listeners, &name).is_some(), "{name} in\n{listeners}");
    }
    let rds = s.a.names(RDS);
    assert!(
        listeners.contains(&format!("Route: {}", rds[0])),
        "a listener routes by RDS {}:\n{listeners}",
        rds[0]
    );

    let routes = meshflow_cli(&[&["proxy-config", "route", "a-1.default"][..], &debug].concat());
    assert_eq!(
        row(&routes, "NAME").expect("header"),
        vec!["NAME", "VIRTUAL HOST", "DOMAINS", "MATCH", "DESTINATION"]
    );
    assert!(
        routes
            .lines()
            .any(|l| l.starts_with(&rds[0]) && l.contains(REVIEWS)),
        "a route to reviews:\n{routes}"
    );
    let yaml = meshflow_cli(
        &[
            &["proxy-config", "route", "a-1.default", "-o", "yaml"][..],
            &debug,
        ]
        .concat(),
    );
    let yaml: serde_json::Value = serde_yaml_ng::from_str(&yaml).expect("YAML");
    assert_eq!(yaml.as_array().map(Vec::len), Some(rds.len()));

    // Unknown proxies fail with a message.
    let out = Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args([&["proxy-config", "cluster", "nobody.default"][..], &debug].concat())
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nobody.default"));

    // A NACK shows in proxy-status with Envoy's message.
    s.a.nack(LDS, NACK_TEXT).await;
    let ok = support::wait_until(Duration::from_secs(10), || {
        let status = meshflow_cli(&[&["proxy-status"][..], &debug].concat());
        row(&status, A_ID).is_some_and(|r| r[4].starts_with("NACKED"))
    });
    assert!(ok, "LDS NACKED in proxy-status");
    let status = meshflow_cli(&[&["proxy-status"][..], &debug].concat());
    assert!(
        status.contains(&format!("NACK {A_ID} LDS: {NACK_TEXT}")),
        "{status}"
    );
}

/// The input objects of one resource, as `/debug/explain` lists them: `Kind ns/name`.
fn explained(addr: SocketAddr, proxy: &str, resource: &str) -> Vec<String> {
    let path = format!(
        "/debug/explain?proxy={}&resource={}",
        percent(proxy),
        percent(resource)
    );
    let v = get_json(addr, &path);
    v["inputs"]
        .as_array()
        .unwrap_or_else(|| panic!("{path}: {v}"))
        .iter()
        .map(|i| {
            format!(
                "{} {}/{}",
                i["kind"].as_str().unwrap(),
                i["namespace"].as_str().unwrap(),
                i["name"].as_str().unwrap()
            )
        })
        .collect()
}

/// `explain` (HTTP, gRPC through the CLI) names the inputs each resource was built from,
/// follows edits incrementally (a VirtualService and DestinationRule appear and disappear),
/// and rejects bad requests with the parameter named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_names_the_inputs_of_each_resource() {
    let s = setup("debug-explain").await;
    let config = s._dir.path().join("config");
    let a = "a-1.default";
    assert_eq!(
        explained(s.debug, a, "route/9080"),
        ["Service default/ratings", "Service default/reviews"]
    );
    assert_eq!(
        explained(s.debug, a, &format!("cluster/{REVIEWS}")),
        ["Service default/reviews"]
    );
    assert_eq!(
        explained(s.debug, a, &format!("endpoint/{REVIEWS}")),
        [
            "Service default/reviews",
            "EndpointSlice default/reviews-abc"
        ]
    );
    // Proxy b is confined by its Sidecar: even its fixed listener comes from it.
    assert_eq!(
        explained(s.debug, "b-1.other", "listener/virtualOutbound"),
        ["Sidecar other/isolated"]
    );

    write_config(
        &config,
        "reviews-rules.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews-route, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: reviews}\n---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews-dr, namespace: default}\nspec:\n  host: reviews\n  trafficPolicy: {loadBalancer: {simple: ROUND_ROBIN}}\n",
    );
    let want_route = [
        "Service default/ratings",
        "Service default/reviews",
        "VirtualService default/reviews-route",
    ];
    assert!(
        support::wait_until(Duration::from_secs(10), || explained(
            s.debug,
            a,
            "route/9080"
        ) == want_route),
        "route/9080 never named the VirtualService: {:?}",
        explained(s.debug, a, "route/9080")
    );
    assert_eq!(
        explained(s.debug, a, &format!("cluster/{REVIEWS}")),
        [
            "Service default/reviews",
            "DestinationRule default/reviews-dr"
        ]
    );
    support::remove_config(&config, "reviews-rules.yaml");
    assert!(
        support::wait_until(Duration::from_secs(10), || explained(
            s.debug,
            a,
            &format!("cluster/{REVIEWS}")
        ) == ["Service default/reviews"]),
        "the DestinationRule stayed in the cluster's inputs"
    );

    // The CLI, over the gRPC Debug API.
    let addr = s.debug.to_string();
    let table = meshflow_cli(&["explain", a, "route/9080", "--debug-addr", &addr]);
    assert_eq!(
        row(&table, "KIND"),
        Some(vec!["KIND", "NAMESPACE", "NAME"]),
        "{table}"
    );
    assert_eq!(
        row(&table, "Service"),
        Some(vec!["Service", "default", "ratings"]),
        "{table}"
    );
    let json = meshflow_cli(&[
        "explain",
        A_ID,
        "route/9080",
        "-o",
        "json",
        "--debug-addr",
        &addr,
    ]);
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(
        json,
        get_json(
            s.debug,
            &format!("/debug/explain?proxy={a}&resource=route/9080")
        )
    );

    // Bad requests say what is wrong.
    let (code, body) = get(
        s.debug,
        &format!("/debug/explain?proxy={a}&resource=route/"),
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("TYPE/"), "{body}");
    let (code, body) = get(
        s.debug,
        &format!("/debug/explain?proxy={a}&resource=route/1234"),
    );
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("holds no RDS named"), "{body}");
    // Held, but built from no input object: an empty list, not an error.
    assert_eq!(
        explained(s.debug, a, "cluster/BlackHoleCluster"),
        Vec::<String>::new()
    );
    let (code, body) = get(s.debug, "/debug/explain?resource=route/9080");
    assert_eq!(code, 400, "{body}");
}

/// The built binary's stderr for a command that must fail.
fn meshflow_cli_fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run meshflow");
    assert!(!out.status.success(), "meshflow {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A bare resource name is enough when one type of the proxy's resources has it: for
/// `explain` (HTTP, and gRPC through the CLI: resolved by the server) and `proxy-config`
/// (resolved among what CSDS lists). A name several types have (an EDS name is its
/// cluster's) is refused with every candidate as TYPE/NAME.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_resource_names_resolve_when_unique() {
    let s = setup("debug-bare-names").await;
    let addr = s.debug.to_string();
    let debug = ["--debug-addr", addr.as_str()];
    let a = "a-1.default";
    let route = s.a.names(RDS)[0].clone();
    assert!(
        !s.a.names(LDS).contains(&route) && !s.a.names(CDS).contains(&route),
        "{route} is only a route configuration's name"
    );

    // explain over HTTP: bare = typed.
    assert_eq!(
        get_json(
            s.debug,
            &format!("/debug/explain?proxy={a}&resource={route}")
        ),
        get_json(
            s.debug,
            &format!("/debug/explain?proxy={a}&resource=route/{route}")
        )
    );
    let (code, body) = get(
        s.debug,
        &format!("/debug/explain?proxy={a}&resource={}", percent(REVIEWS)),
    );
    assert_eq!(code, 400, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).expect("JSON error");
    assert_eq!(
        error["error"],
        format!(
            "\"{REVIEWS}\" names 2 resources of proxy {A_ID}: cluster/{REVIEWS}, \
             endpoint/{REVIEWS}; give one as TYPE/NAME"
        )
    );
    let (code, body) = get(
        s.debug,
        &format!("/debug/explain?proxy={a}&resource=nothing"),
    );
    assert_eq!(code, 404, "{body}");
    assert!(
        body.contains("holds no resource named \\\"nothing\\\""),
        "{body}"
    );

    // explain through the CLI (gRPC): the same resolution.
    let bare = meshflow_cli(&[&["explain", a, &route, "-o", "json"][..], &debug].concat());
    let typed = meshflow_cli(
        &[
            &["explain", a, &format!("route/{route}"), "-o", "json"][..],
            &debug,
        ]
        .concat(),
    );
    assert_eq!(bare, typed);
    let err = meshflow_cli_fails(&[&["explain", a, REVIEWS][..], &debug].concat());
    assert!(
        err.contains(&format!("cluster/{REVIEWS}, endpoint/{REVIEWS}")),
        "{err}"
    );

    // proxy-config: NAME keeps one resource; `all` resolves across types.
    let one = meshflow_cli(&[&["proxy-config", "cluster", a, REVIEWS][..], &debug].concat());
    let names: Vec<&str> = one
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, [REVIEWS], "{one}");
    let by_all = meshflow_cli(&[&["proxy-config", "all", a, &route][..], &debug].concat());
    let by_route = meshflow_cli(&[&["proxy-config", "route", a, &route][..], &debug].concat());
    assert_eq!(by_all, by_route);
    assert_eq!(
        row(&by_all, "NAME").expect("header"),
        vec!["NAME", "VIRTUAL HOST", "DOMAINS", "MATCH", "DESTINATION"],
        "{by_all}"
    );
    let json = meshflow_cli(
        &[
            &[
                "proxy-config",
                "all",
                a,
                &format!("endpoint/{REVIEWS}"),
                "-o",
                "json",
            ][..],
            &debug,
        ]
        .concat(),
    );
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(json.as_array().map(Vec::len), Some(1), "{json}");
    assert_eq!(json[0]["cluster_name"], REVIEWS, "{json}");
    let err = meshflow_cli_fails(&[&["proxy-config", "all", a, REVIEWS][..], &debug].concat());
    assert!(
        err.contains(&format!("cluster/{REVIEWS}, endpoint/{REVIEWS}")),
        "{err}"
    );
    let err = meshflow_cli_fails(
        &[
            &["proxy-config", "route", a, &format!("cluster/{REVIEWS}")][..],
            &debug,
        ]
        .concat(),
    );
    assert!(err.contains("names a cluster, not a route"), "{err}");
    let err = meshflow_cli_fails(&[&["proxy-config", "route", a, "nothing"][..], &debug].concat());
    assert!(err.contains("holds no resource named \"nothing\""), "{err}");

    // `all` without NAME: a table per type, and as JSON the proxy's config dump.
    let all = meshflow_cli(&[&["proxy-config", "all", a][..], &debug].concat());
    for header in ["CONNECT TIMEOUT", "CHAINS", "VIRTUAL HOST", "WEIGHT"] {
        assert!(all.contains(header), "{header} in\n{all}");
    }
    let dump = meshflow_cli(&[&["proxy-config", "all", a, "-o", "json"][..], &debug].concat());
    let dump: serde_json::Value = serde_json::from_str(&dump).expect("JSON");
    assert_eq!(
        dump,
        get_json(s.debug, &format!("/debug/config_dump?proxy={a}"))
    );
    let yaml = meshflow_cli(&[&["proxy-config", "all", a, "-o", "yaml"][..], &debug].concat());
    let yaml: serde_json::Value = serde_yaml_ng::from_str(&yaml).expect("YAML");
    assert_eq!(yaml, dump);
}

/// The debug port closes connections that do not deliver a whole request in time
/// (`--debug-read-timeout-ms`): half-sent headers and silent connections alike, while
/// complete requests (HTTP/1 and gRPC) are served as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_port_closes_half_sent_requests() {
    use std::io::{Read, Write};
    let dir = TestDir::new("debug-slowloris");
    let config = dir.subdir("config");
    write_mesh(&config);
    let debug = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let _meshflow = Meshflow::start_with_args(
        &config,
        dir.path(),
        &[
            "--debug-addr",
            &debug.to_string(),
            "--debug-read-timeout-ms",
            "300",
        ],
    );
    assert_eq!(get(debug, "/healthz").0, 200);
    let mut slow: Vec<std::net::TcpStream> = (0..20)
        .map(|i| {
            let mut c = std::net::TcpStream::connect(debug).expect("connect");
            if i % 4 != 0 {
                c.write_all(b"GET /debug/proxies HTTP/1.1\r\nHost: x\r\n")
                    .expect("half a request");
            }
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    for (i, c) in slow.iter_mut().enumerate() {
        c.set_read_timeout(Some(Duration::from_secs(3)))
            .expect("timeout");
        let mut buf = [0u8; 512];
        match c.read(&mut buf) {
            // Closed (possibly after hyper's 408 answer to half-sent headers).
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("connection {i} still open after the timeout: {e}"),
        }
    }
    assert_eq!(
        get(debug, "/healthz").0,
        200,
        "whole requests are still served"
    );
    let mut csds = csds(debug).await;
    let answer = csds
        .fetch_client_status(ClientStatusRequest::default())
        .await
        .expect("gRPC is still served");
    assert!(answer.into_inner().config.is_empty(), "no proxy connected");
}
