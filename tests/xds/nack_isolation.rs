//! No client decides for another (issue: hardening round 2, R1): what a proxy answers — an
//! ACK, a NACK, late or at once — changes what is recorded about it, never what another
//! proxy is served. Protocol-level Delta clients (tonic) against `meshflow serve` on the
//! bookinfo example: a hostile client of `default` with no credentials rejects every route
//! configuration while victims answer after 0, 50 and 500 ms; then clients that reject at
//! random through a series of edits. Every client must end up served exactly what an honest
//! client connected afterwards is served, and every VirtualService stays in effect.

use crate::support;

use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use prost::Message;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use support::xds_client::{node, DeltaClient, CDS, EDS, LDS, RDS};
use support::{debug_json, free_port, write_config, Meshflow, TestDir};

/// The bookinfo example's config, with `reviews`' VirtualService left out of its file (each
/// test writes its own version of it to `reviews-vs.yaml`).
fn bookinfo(config: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookinfo/config");
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let kept: Vec<&str> = text
            .split("\n---")
            .filter(|doc| !(doc.contains("kind: VirtualService") && doc.contains("name: reviews")))
            .collect();
        write_config(config, &name, &kept.join("\n---"));
    }
}

/// `reviews` split between v1, v2 and v3 by these weights.
fn reviews_vs(weights: [u32; 3]) -> String {
    let routes: String = ["v1", "v2", "v3"]
        .iter()
        .zip(weights)
        .map(|(s, w)| {
            format!("    - destination: {{host: reviews, subset: {s}}}\n      weight: {w}\n")
        })
        .collect();
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: reviews, namespace: default}}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n{routes}"
    )
}

fn sleep_node(i: u32) -> envoy_types::pb::envoy::config::core::v3::Node {
    // Addresses of no workload: every client shares the sleep Sidecar's scope and has no
    // inbound side of its own, so all are to be served the same.
    node(
        &format!("sidecar~127.0.9.{i}~sleep-{i}.default~default.svc.cluster.local"),
        "default",
        &[("app", "sleep")],
    )
}

/// Subscribes as Envoy does (wildcard CDS and LDS, EDS for the clusters, RDS for `9080`) and
/// keeps answering until `quiet` passes with nothing new.
async fn follow(c: &mut DeltaClient, quiet: Duration) {
    if c.node.is_some() {
        c.subscribe(CDS, &[], HashMap::new()).await;
        c.subscribe(LDS, &[], HashMap::new()).await;
        c.subscribe(RDS, &["9080".to_string()], HashMap::new())
            .await;
    }
    // Quiet counts from the first answer: on a busy machine the first push may take longer
    // than `quiet` itself, and a client that stopped before it would hold nothing.
    let deadline = tokio::time::Instant::now() + crate::support::CONVERGE_TIMEOUT;
    loop {
        let got = c.drain(quiet).await;
        let nothing_yet = !c.held.contains_key(CDS) && c.nacks == 0;
        if got.is_empty() && nothing_yet && tokio::time::Instant::now() < deadline {
            continue;
        }
        let eds: Vec<String> = c
            .names(CDS)
            .into_iter()
            .filter(|n| n.starts_with("outbound|"))
            .filter(|n| !c.eds_subscribed.contains(n))
            .collect();
        if !eds.is_empty() {
            c.subscribe(EDS, &eds, HashMap::new()).await;
            c.eds_subscribed.extend(eds);
            continue;
        }
        if got.is_empty() {
            break;
        }
    }
}

type Served = HashMap<String, BTreeMap<String, String>>;

/// What an honest client connected now is served, and its route configuration `9080`.
async fn reference(addr: SocketAddr) -> (Served, RouteConfiguration) {
    let mut c = DeltaClient::connect(addr, sleep_node(200)).await;
    c.subscribe(RDS, &["9080".to_string()], HashMap::new())
        .await;
    let mut route = None;
    for r in c.drain(Duration::from_millis(800)).await {
        for res in r.resources.iter().filter(|x| x.name == "9080") {
            route =
                Some(RouteConfiguration::decode(&*res.resource.as_ref().unwrap().value).unwrap());
        }
    }
    // A fresh stream for the rest, subscribed as the others are.
    let mut full = DeltaClient::connect(addr, sleep_node(201)).await;
    follow(&mut full, Duration::from_millis(800)).await;
    (full.held, route.expect("route configuration 9080 served"))
}

fn clusters_of(route: &RouteConfiguration) -> Vec<String> {
    let text = format!("{route:?}");
    let mut out: Vec<String> = text
        .split('"')
        .filter(|s| s.starts_with("outbound|9080|"))
        .map(String::from)
        .collect();
    out.sort();
    out.dedup();
    out
}

fn no_setback(debug: SocketAddr) {
    let errors = debug_json(debug, "/debug/config_errors").to_string();
    assert!(
        !errors.contains("rolled back") && !errors.contains("taken out"),
        "{errors}"
    );
}

/// A hostile client NACKs every route configuration; victims answering after 0, 50 and
/// 500 ms are each served route `9080` with every VirtualService in it, through two edits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_nack_changes_nothing_for_the_victims() {
    let dir = TestDir::new("nack-hostile");
    let config = dir.subdir("config");
    bookinfo(&config);
    write_config(&config, "reviews-vs.yaml", &reviews_vs([50, 25, 25]));
    let debug = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let meshflow =
        Meshflow::start_with_args(&config, dir.path(), &["--debug-addr", &debug.to_string()]);
    let addr = meshflow.xds_addr();

    let mut hostile = DeltaClient::connect(addr, sleep_node(66)).await;
    hostile.rejects = Box::new(|r| r.type_url == RDS);
    let mut victims = Vec::new();
    for (i, delay) in [0u64, 50, 500].into_iter().enumerate() {
        let mut v = DeltaClient::connect(addr, sleep_node(10 + i as u32)).await;
        v.answer_delay = Duration::from_millis(delay);
        victims.push(v);
    }
    let quiet = Duration::from_millis(1200);
    let hostile_task = tokio::spawn(async move {
        follow(&mut hostile, Duration::from_millis(1200)).await;
        hostile
    });
    let mut tasks = Vec::new();
    for mut v in victims {
        tasks.push(tokio::spawn(async move {
            follow(&mut v, quiet).await;
            v
        }));
    }
    let mut hostile = hostile_task.await.unwrap();
    let mut victims: Vec<DeltaClient> = Vec::new();
    for t in tasks {
        victims.push(t.await.unwrap());
    }
    assert!(hostile.nacks >= 1, "the hostile client did reject");

    for (edit, weights) in [(0, [50, 25, 25]), (1, [0, 0, 100]), (2, [100, 0, 0])] {
        if edit > 0 {
            write_config(&config, "reviews-vs.yaml", &reviews_vs(weights));
            follow(&mut hostile, quiet).await;
            for v in &mut victims {
                follow(v, quiet).await;
            }
        }
        let (served, route) = reference(addr).await;
        let expected: Vec<String> = ["v1", "v2", "v3"]
            .iter()
            .zip(weights)
            .filter(|(_, w)| *w > 0)
            .map(|(s, _)| format!("outbound|9080|{s}|reviews.default.svc.cluster.local"))
            .collect();
        let clusters = clusters_of(&route);
        for e in &expected {
            assert!(
                clusters.contains(e),
                "edit {edit}: {e} routed: {clusters:?}"
            );
        }
        for (i, v) in victims.iter().enumerate() {
            assert_eq!(
                v.held[RDS].get("9080"),
                served[RDS].get("9080"),
                "edit {edit}: victim {i} holds route 9080 as an honest client is served it"
            );
            for t in [CDS, LDS] {
                assert_eq!(v.held.get(t), served.get(t), "edit {edit}: victim {i}, {t}");
            }
        }
        no_setback(debug);
    }
    assert!(hostile.nacks >= 3, "rejected every edit: {}", hostile.nacks);
    let errors = debug_json(debug, "/debug/config_errors").to_string();
    assert!(
        errors.contains("rejected by proxy"),
        "the NACKs are recorded: {errors}"
    );
    drop(meshflow);
}

/// A small deterministic generator (xorshift), so a failing sequence can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Property: clients that accept or reject at random (seeded), answering after random
/// delays, through random edits, are each served exactly what an honest client is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_answers_never_change_what_another_is_served() {
    let dir = TestDir::new("nack-random");
    let config = dir.subdir("config");
    bookinfo(&config);
    write_config(&config, "reviews-vs.yaml", &reviews_vs([50, 25, 25]));
    let meshflow = Meshflow::start(&config, dir.path());
    let addr = meshflow.xds_addr();
    let seed: u64 = std::env::var("NACK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234);
    eprintln!("NACK_SEED={seed}");
    let mut rng = Rng(seed);
    let mut clients = Vec::new();
    for i in 0..4u32 {
        let mut c = DeltaClient::connect(addr, sleep_node(30 + i)).await;
        let mut own = Rng(seed.wrapping_add(i as u64 + 1));
        c.rejects = Box::new(move |_| own.next().is_multiple_of(2));
        c.answer_delay = Duration::from_millis(rng.next() % 40);
        clients.push(c);
    }
    let quiet = Duration::from_millis(700);
    let mut weights = [50, 25, 25];
    for round in 0..4 {
        if round > 0 {
            let w1 = (rng.next() % 101) as u32;
            let w2 = (rng.next() % (101 - w1 as u64)) as u32;
            weights = [w1, w2, 100 - w1 - w2];
            write_config(&config, "reviews-vs.yaml", &reviews_vs(weights));
        }
        let mut tasks = Vec::new();
        for mut c in clients.drain(..) {
            tasks.push(tokio::spawn(async move {
                follow(&mut c, quiet).await;
                c
            }));
        }
        for t in tasks {
            clients.push(t.await.unwrap());
        }
        let (served, route) = reference(addr).await;
        // The edit is in effect, whatever the clients answered.
        let routed = clusters_of(&route);
        for (s, w) in ["v1", "v2", "v3"].iter().zip(weights) {
            let c = format!("outbound|9080|{s}|reviews.default.svc.cluster.local");
            assert_eq!(
                routed.contains(&c),
                w > 0,
                "round {round}: {weights:?} {routed:?}"
            );
        }
        for (i, c) in clients.iter().enumerate() {
            for t in [CDS, EDS, LDS, RDS] {
                assert_eq!(
                    c.held.get(t),
                    served.get(t),
                    "round {round}: client {i} ({} NACKs), {t} (NACK_SEED={seed})",
                    c.nacks
                );
            }
        }
    }
    assert!(clients.iter().map(|c| c.nacks).sum::<usize>() > 0);
    drop(meshflow);
}
