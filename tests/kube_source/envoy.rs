//! Real Envoys fed from the API server: two replicas give two Envoys identical config and
//! routing, an Envoy routes by a VirtualService created through the API, its rejection of one
//! is written on the object's status and as an Event, and a gateway Secret is served over SDS.

use crate::status::{await_status, reconciled};
use crate::support;
use crate::support::fake_kube::FakeKube;
use crate::support::reviews::{Binding, Client, Reviews};
use crate::support::xds_client::{node, DeltaClient};
use crate::support::{
    dump_served_config, exactly, free_port, only, require_envoy, served_config_differences,
    wait_until, Envoy, Meshflow, TestDir, CONVERGE_TIMEOUT,
};
use crate::{get, start, Sidecar};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// The reviews scene as files to apply to the fake: Service, Pods, EndpointSlice and
/// DestinationRule (subsets v1, v2) of `reviews`, Sidecar `client` binding 127.0.0.1:PORT;
/// the backends of v1 and v2 running.
struct ReviewsFiles {
    reviews: Reviews,
    port: u16,
    path: std::path::PathBuf,
    _backends: [support::Backend; 2],
    _dir: TestDir,
}

impl ReviewsFiles {
    fn new(label: &str, net: u8) -> ReviewsFiles {
        let dir = TestDir::new(label);
        let path = dir.subdir("fixtures");
        let port = free_port();
        let reviews = Reviews::new(net, port, &path);
        let backends = [reviews.start_backend("v1"), reviews.start_backend("v2")];
        reviews.write_service();
        reviews.write_pods(&["v1", "v2"]);
        reviews.write_endpoints(&["v1", "v2"]);
        reviews.write_destination_rule(&["v1", "v2"]);
        reviews.write("sidecar.yaml", &support::reviews::client_sidecar_yaml(port));
        ReviewsFiles {
            reviews,
            port,
            path,
            _backends: backends,
            _dir: dir,
        }
    }
}

/// Applies every YAML file of `dir` to the fake API server (unchanged ones change nothing).
fn apply_dir(fake: &FakeKube, dir: &Path) {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        fake.apply_yaml(&text);
    }
}

/// Two replicas watching one cluster, each serving one real Envoy: both Envoys hold the same
/// clusters, listeners and route configurations (their config dumps less what is per
/// moment: version_info and last_updated), and route the same request the same way, before
/// and after a change made through the API. Both Envoys bind the Sidecar's listener
/// 127.0.0.1:PORT (Envoy sets SO_REUSEPORT on listeners by default, so the kernel spreads
/// connections over both); each Envoy's own upstream counters show that it sent requests
/// to the subset the VirtualService names, and only there.
#[test]
fn two_replicas_give_two_envoys_identical_config_and_routing() {
    let envoy_bin = require_envoy!();
    let files = ReviewsFiles::new("kube-replicas-envoy-fixtures", 63);
    let (reviews, port, fixtures) = (&files.reviews, files.port, &files.path);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 0), ("v2", 100)]);
    let cluster = start("kube-replicas-envoy", |fake| apply_dir(fake, fixtures), &[]);
    let debug_b = SocketAddr::from(([127, 0, 0, 1], free_port())).to_string();
    let second = Meshflow::start_kube(
        &cluster.dir.path().join("kubeconfig"),
        &cluster.dir.subdir("replica-b"),
        &["--debug-addr", &debug_b],
    );
    let sidecar = |name, host, xds| Sidecar {
        name,
        ip: reviews.ip(host),
        xds,
    };
    let a = cluster.envoy_of(
        &envoy_bin,
        sidecar("client-a", 20, cluster.meshflow.xds_addr()),
        port,
    );
    let b = cluster.envoy_of(&envoy_bin, sidecar("client-b", 21, second.xds_addr()), port);
    let listener = SocketAddr::from(([127, 0, 0, 1], port));
    let client = Client::new(&a, listener, "reviews");

    let first = await_identical_config(&a, &b, |_| true);
    let v2_cluster = format!("cluster/outbound|{port}|v2|{}", support::reviews::FQDN);
    assert!(first.contains_key(&v2_cluster), "{:#?}", first.keys());
    assert!(
        first.contains_key(&format!("route/{port}")),
        "{:#?}",
        first.keys()
    );
    routes_only_to(&client, &[&a, &b], port, "v2");

    // A change through the API reaches both replicas; both Envoys route by it.
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 100), ("v2", 0)]);
    apply_dir(&cluster.fake, fixtures);
    await_identical_config(&a, &b, |c| *c != first);
    routes_only_to(&client, &[&a, &b], port, "v1");
}

/// Waits until both Envoys hold the same config and it satisfies `accept`; returns it, or
/// panics naming what differs.
fn await_identical_config(
    a: &Envoy,
    b: &Envoy,
    accept: impl Fn(&BTreeMap<String, Value>) -> bool,
) -> BTreeMap<String, Value> {
    let mut last = (BTreeMap::new(), BTreeMap::new());
    let same = wait_until(CONVERGE_TIMEOUT, || {
        last = (
            dump_served_config(&a.config_dump()),
            dump_served_config(&b.config_dump()),
        );
        !last.0.is_empty() && last.0 == last.1 && accept(&last.0)
    });
    if !same {
        let (a, b) = &last;
        let differ = served_config_differences(a, b);
        let first = differ.first().map(|k| (a.get(k), b.get(k)));
        panic!("the Envoys' configs differ in {differ:#?}; the first: {first:#?}");
    }
    last.0
}

/// Sends 60 requests through the listener both Envoys bind: every one is answered by
/// reviews-`subset`, and each Envoy sent some of them, all to that subset's cluster.
fn routes_only_to(client: &Client, envoys: &[&Envoy], port: u16, subset: &str) {
    let fqdn = support::reviews::FQDN;
    let sent = |e: &Envoy, s: &str| {
        e.stat(&format!(
            "cluster.outbound|{port}|{s}|{fqdn}.upstream_rq_total"
        ))
        .unwrap_or(0)
    };
    let other = if subset == "v1" { "v2" } else { "v1" };
    let before: Vec<(u64, u64)> = envoys
        .iter()
        .map(|e| (sent(e, subset), sent(e, other)))
        .collect();
    let counts = client.tally(60, "/reviews/1", &[]);
    let answer = format!("reviews-{subset}");
    assert!(only(&counts, &answer), "{counts:?}");
    for (e, (to, not_to)) in envoys.iter().zip(before) {
        assert!(
            sent(e, subset) > to,
            "each Envoy routed some requests to {subset}\n{}",
            e.summary()
        );
        assert_eq!(sent(e, other), not_to, "none to {other}\n{}", e.summary());
    }
}

/// A real Envoy sidecar, configured by meshflow from the fake cluster, routes by a
/// VirtualService created through the API, and returns to the default route when it is
/// deleted.
#[test]
fn envoy_routes_by_a_virtual_service_created_through_the_api() {
    let envoy_bin = require_envoy!();
    let files = ReviewsFiles::new("kube-envoy-fixtures", 61);
    let (reviews, port, fixtures) = (&files.reviews, files.port, &files.path);
    let cluster = start("kube-envoy", |fake| apply_dir(fake, fixtures), &[]);

    let envoy = cluster.client_envoy(&envoy_bin, "client-abc", reviews, port);
    let client = Client::new(&envoy, SocketAddr::from(([127, 0, 0, 1], port)), "reviews");
    let (v1, v2) = ("reviews-v1", "reviews-v2");
    client.converge(
        "the default route reaches v1 and v2",
        "/reviews/1",
        &[],
        |c| exactly(c, &[v1, v2]),
        20,
    );

    // Created through the API: everything under /reviews to v2. Sampled only once Envoy has
    // the new route configuration: the default route can send a short run to v2 by chance.
    envoy.await_rds_update(&port.to_string(), || {
        reviews.write_subset_routing(&Binding::Mesh, &[("v1", 0), ("v2", 100)]);
        apply_dir(&cluster.fake, fixtures);
    });
    let counts = client.converge(
        "the VirtualService sends /reviews to v2",
        "/reviews/1",
        &[],
        |c| only(c, v2),
        20,
    );
    assert!(only(&counts, v2), "{counts:?}");

    cluster.fake.delete("VirtualService", "default", "reviews");
    let counts = client.converge(
        "the default route again",
        "/reviews/1",
        &[],
        |c| exactly(c, &[v1, v2]),
        40,
    );
    assert!(exactly(&counts, &[v1, v2]), "{counts:?}");
    assert!(cluster.errors().is_empty(), "{:?}", cluster.errors());
}

/// NACK attribution with a real Envoy: meshflow is told proxies accept RE2 programs of any
/// size (`--max-regex-program-size`), which Envoy (default limit 100) does not, so a
/// VirtualService with the regex `/a{150}` passes meshflow and Envoy rejects its route
/// configuration. The VirtualService, rejected, is not Reconciled, and a RejectedByProxies
/// message names the proxy, Envoy's message and since when; fixing it clears both.
#[test]
fn a_virtual_service_envoy_rejects_says_so_on_its_status() {
    let envoy_bin = require_envoy!();
    let fixtures_dir = TestDir::new("kube-nack-fixtures");
    let fixtures = fixtures_dir.subdir("fixtures");
    let port = free_port();
    let reviews = Reviews::new(62, port, &fixtures);
    reviews.write_service();
    reviews.write_pods(&["v1"]);
    reviews.write_endpoints(&["v1"]);
    reviews.write("sidecar.yaml", &support::reviews::client_sidecar_yaml(port));
    let cluster = start(
        "kube-nack",
        |fake| apply_dir(fake, &fixtures),
        &["--write-status", "--max-regex-program-size", "100000"],
    );
    let _envoy = cluster.client_envoy(&envoy_bin, "client-nack", &reviews, port);

    let ratings = |regex: &str| {
        json!({
            "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "metadata": {"name": "ratings", "namespace": "default"},
            "spec": {"hosts": ["reviews"], "http": [{
                "match": [{"uri": {"regex": regex}}],
                "route": [{"destination": {"host": "reviews"}}],
            }]},
        })
    };
    cluster.fake.apply(ratings("/a{150}"));
    let status = await_status(
        &cluster.fake,
        "VirtualService",
        "ratings",
        "the rejection is written",
        |s| {
            s["validationMessages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["type"]["name"] == "RejectedByProxies"))
        },
    );
    assert_eq!(reconciled(&status), "False", "{status:#}");
    let message = status["validationMessages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["type"]["name"] == "RejectedByProxies"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(message["level"], "ERROR", "{status:#}");
    let description = message["description"].as_str().unwrap_or("");
    assert!(
        description.starts_with("rejected by 1 proxy ("),
        "{description}"
    );
    assert!(description.contains("client-nack"), "{description}");
    assert!(description.contains(" since 20"), "{description}");
    assert!(description.contains("RDS"), "{description}");
    // Envoy's own message about the regex.
    assert!(
        description.to_lowercase().contains("regex"),
        "{description}"
    );

    // And once as a Warning Event regarding the object, from the replica whose proxy
    // rejected it.
    let events = rejection_events(&cluster.fake);
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
    assert_eq!(event["type"], "Warning", "{event:#}");
    assert_eq!(event["action"], "Rejected", "{event:#}");
    assert_eq!(event["reportingController"], "meshflow", "{event:#}");
    assert!(
        event["reportingInstance"]
            .as_str()
            .is_some_and(|i| i.ends_with(&format!("_{}", cluster.meshflow.pid()))),
        "{event:#}"
    );
    assert!(event["eventTime"].is_string(), "{event:#}");
    let object = cluster.fake.object("VirtualService", "default", "ratings");
    assert_eq!(
        event["regarding"],
        json!({
            "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "namespace": "default", "name": "ratings", "uid": object["metadata"]["uid"],
        }),
        "{event:#}"
    );
    let note = event["note"].as_str().unwrap_or("");
    assert!(note.starts_with(description), "{note}");

    // Fixed: the new version is judged again, accepted, and the status says so.
    cluster.fake.apply(ratings("/a"));
    await_status(
        &cluster.fake,
        "VirtualService",
        "ratings",
        "the fix clears the rejection",
        |s| reconciled(s) == "True" && s.get("validationMessages").is_none(),
    );
    assert_eq!(
        rejection_events(&cluster.fake).len(),
        1,
        "no Event for an accepted version"
    );
}

/// The Events the fake holds with reason RejectedByProxies.
fn rejection_events(fake: &FakeKube) -> Vec<Value> {
    fake.objects("Event")
        .into_iter()
        .filter(|e| e["reason"] == "RejectedByProxies")
        .collect()
}

/// A gateway's TLS Secret through the API: watched like the other kinds (get/list/watch on
/// `secrets`), a Gateway naming a Secret that does not exist is an error naming both, and
/// creating it (base64 `data`, as the API server serves it) heals the server: the gateway
/// proxy's listener appears and the certificate is served over SDS as `kubernetes://NAME`;
/// the debug port never shows the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_secret_from_the_api_is_served_over_sds() {
    use base64::Engine;
    const SDS: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";
    const LDS: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
    let cluster = start(
        "kube-secret",
        |fake| {
            fake.apply(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "ingress-1", "namespace": "istio-system",
                             "labels": {"istio": "ingressgateway"}},
                "spec": {"containers": [{"name": "istio-proxy", "image": "example/proxy:1"}]},
                "status": {"phase": "Running", "podIP": "10.1.0.9", "podIPs": [{"ip": "10.1.0.9"}]},
            }));
            fake.apply(json!({
                "apiVersion": "networking.istio.io/v1", "kind": "Gateway",
                "metadata": {"name": "secure", "namespace": "istio-system"},
                "spec": {"selector": {"istio": "ingressgateway"}, "servers": [{
                    "port": {"number": 443, "name": "https", "protocol": "HTTPS"},
                    "hosts": ["web.example.com"],
                    "tls": {"mode": "SIMPLE", "credentialName": "web-cred"},
                }]},
            }));
        },
        &[],
    );
    // Started means each kind's initial list is done; its watch request follows the list,
    // so it is awaited rather than expected at once.
    assert!(
        wait_until(CONVERGE_TIMEOUT, || cluster.fake.requests().iter().any(
            |r| r.starts_with("GET /api/v1/secrets?") && r.contains("watch=true")
        )),
        "Secrets are watched"
    );
    cluster.await_config_errors("the missing Secret is named", |e| {
        e.iter().any(|l| {
            l.contains("Gateway/istio-system/secure")
                && l.contains("spec.servers[0].tls.credentialName")
                && l.contains("Secret istio-system/web-cred does not exist")
        })
    });

    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["web.example.com".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    cluster.fake.apply(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "web-cred", "namespace": "istio-system"},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": b64(&cert.pem()), "tls.key": b64(&key.serialize_pem())},
    }));
    cluster.await_config_errors("the Secret heals the server", |e| {
        !e.iter().any(|l| l.contains("web-cred"))
    });
    cluster.await_input_changes("Secret", "insert", 1.0);

    let id = "router~10.1.0.9~ingress-1.istio-system~istio-system.svc.cluster.local";
    let mut c = DeltaClient::connect(
        cluster.meshflow.xds_addr(),
        node(id, "istio-system", &[("istio", "ingressgateway")]),
    )
    .await;
    c.subscribe(LDS, &[], HashMap::new()).await;
    c.subscribe(SDS, &["kubernetes://web-cred".to_string()], HashMap::new())
        .await;
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while !(c.names(LDS).contains(&"0.0.0.0_443".to_string())
        && c.names(SDS).contains(&"kubernetes://web-cred".to_string()))
    {
        assert!(
            Instant::now() < deadline,
            "LDS {:?}, SDS {:?}",
            c.names(LDS),
            c.names(SDS)
        );
        c.recv(Duration::from_millis(200)).await;
    }
    let errors = get(cluster.debug, "/debug/config_errors");
    assert!(!errors.contains("PRIVATE KEY"), "{errors}");
    assert!(!cluster.meshflow.log().contains("PRIVATE KEY"));
}
