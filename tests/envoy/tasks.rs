//! Real Envoy running Istio's traffic-management task pages: each test serves fixtures of
//! `tests/fixtures/tasks/` exactly as they are (the Istio objects the page applies) and adds
//! only what a cluster would already hold — bookinfo's Services, pods and EndpointSlices with
//! its DestinationRules, or tcp-echo's pods and EndpointSlice — and the proxies. The pods'
//! addresses are in the test's own loopback /24, where test backends listen: every target must
//! be a loopback address, since nothing here may leave the machine. In place of iptables, the
//! client (pod `sleep`) has a Sidecar whose egress listener binds its own address without
//! capture, and so does the server's ingress listener where one runs (see `support::tasks`).
//!
//! What the pages promise is checked on the wire: a fault delay takes its time and an abort
//! answers its code, the request timeout answers 504 while the upstream waits on a delayed
//! call, weights split requests and TCP connections in their ratio, a mirror copies every
//! call, and `ISTIO_MUTUAL` reaches the server's sidecar over Istio's mutual TLS.

use crate::support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use support::reviews::count;
use support::tasks::{self, BOOKINFO_PORT, TCP_ECHO_PORT};
use support::tcp_echo::{tcp_tally, TcpEcho};
use support::{
    converge, converge_then, exactly, free_port, http_get, http_request, only, require_envoy,
    tally, write_config, Backend, Envoy, Meshflow, ProxyNode, TestDir, CONVERGE_TIMEOUT,
};

const JASON: (&str, &str) = ("end-user", "jason");

/// meshflow and the client's Envoy serving one task over bookinfo. Fields drop in order:
/// Envoy before meshflow, the directory last.
struct Bookinfo {
    envoy: Envoy,
    _meshflow: Meshflow,
    net: u8,
    /// The port every pod listens on (the Services' `targetPort`).
    target: u16,
    config: PathBuf,
    _dir: TestDir,
}

impl Bookinfo {
    /// Bookinfo's registry and DestinationRules in `127.0.<net>.0/24` with fixture `task`
    /// applied, meshflow serving them, and the client's Envoy with its listener in place. The
    /// test starts the backends it needs afterwards ([`Bookinfo::backend`]).
    fn start(envoy_bin: &std::path::Path, net: u8, task: &str) -> Bookinfo {
        let dir = TestDir::new(&format!("envoy-tasks-{task}"));
        let config = dir.subdir("config");
        let target = free_port();
        tasks::write_bookinfo(&config, net, target);
        tasks::write_bookinfo_rules(&config);
        tasks::write_client_sidecar(&config, net, BOOKINFO_PORT, "HTTP");
        tasks::apply_task(&config, task);
        let meshflow = Meshflow::start(&config, dir.path());
        let envoy = client_envoy(envoy_bin, &dir, &meshflow, net, BOOKINFO_PORT);
        Bookinfo {
            envoy,
            _meshflow: meshflow,
            net,
            target,
            config,
            _dir: dir,
        }
    }

    /// A backend on pod `<service>-<version>`'s address answering `<service>-<version>`.
    fn backend(net: u8, target: u16, service: &str, version: &str) -> Backend {
        Backend::start(
            &tasks::pod_ip(net, service, version),
            target,
            &format!("{service}-{version}"),
        )
    }

    /// The client's egress listener.
    fn listener(&self) -> SocketAddr {
        listener(self.net, BOOKINFO_PORT)
    }

    /// Outcomes of `n` GETs of `path` on `host` (see `support::outcome_key`).
    fn tally(&self, n: usize, host: &str, path: &str, headers: &[(&str, &str)]) -> Counts {
        tally(n, || http_get(self.listener(), host, path, headers))
    }

    /// Samples 10 GETs until `accept` holds, then returns a fresh tally of `n`.
    fn converge(
        &self,
        what: &str,
        (host, path, headers): (&str, &str, &[(&str, &str)]),
        accept: impl Fn(&Counts) -> bool,
        n: usize,
    ) -> Counts {
        converge_then(
            what,
            |k| self.tally(k, host, path, headers),
            accept,
            n,
            || self.envoy.summary(),
        )
    }

    /// The one route configuration the client's Envoy holds (its egress listener's).
    fn route_config(&self) -> String {
        let names = self.envoy.route_config_names();
        assert_eq!(names.len(), 1, "{names:?}");
        names[0].clone()
    }
}

type Counts = HashMap<String, usize>;

/// `client_ip:port`, where the client's Sidecar binds its egress listener.
fn listener(net: u8, port: u16) -> SocketAddr {
    format!("{}:{port}", tasks::client_ip(net))
        .parse()
        .expect("an address")
}

/// The client's Envoy (pod `sleep`), live, with its egress listener on `port` in place.
fn client_envoy(
    envoy_bin: &std::path::Path,
    dir: &TestDir,
    meshflow: &Meshflow,
    net: u8,
    port: u16,
) -> Envoy {
    let envoy = Envoy::start_live(
        envoy_bin,
        dir.path(),
        &tasks::client_node(net),
        meshflow.xds_addr(),
    );
    envoy.await_listener(&format!("{}_{port}", tasks::client_ip(net)));
    envoy
}

/// One GET over a fresh connection with a budget of `budget` (longer than the support
/// client's, for answers a fault delays): the status and body, and how long the answer took
/// from connecting to the last byte.
fn timed_get(
    addr: SocketAddr,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    budget: Duration,
) -> (Result<(u16, String), String>, Duration) {
    let started = Instant::now();
    let exchange = || -> Result<(u16, String), String> {
        let mut stream = TcpStream::connect_timeout(&addr, budget).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(budget))
            .map_err(|e| e.to_string())?;
        let mut request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
        for (name, value) in headers {
            request += &format!("{name}: {value}\r\n");
        }
        request += "\r\n";
        stream
            .write_all(request.as_bytes())
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .map_err(|e| format!("reading the answer: {e}"))?;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status = answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no status line in {answer:?}"))?;
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        Ok((status, body))
    };
    let result = exchange();
    (result, started.elapsed())
}

/// The "Fault Injection" page, step by step: with `fault-injection-delay.yaml` jason's calls
/// to ratings wait the fixed 7 s delay, then reach ratings v1, while everyone else's go
/// straight there; with `fault-injection.yaml` applied over it, jason's calls are aborted with
/// the fault's HTTP 500 (ratings sees none of them) and everyone else's still reach v1.
#[test]
fn fault_injection_task_delays_then_aborts_jasons_ratings_calls() {
    let envoy_bin = require_envoy!();
    let net = 181;
    let scene = Bookinfo::start(&envoy_bin, net, "fault-injection-delay");
    let ratings = Bookinfo::backend(net, scene.target, "ratings", "v1");
    let ratings_call = ("ratings", "/ratings/0", &[][..]);
    let counts = scene.converge("ratings → v1", ratings_call, |c| only(c, "ratings-v1"), 10);
    assert!(only(&counts, "ratings-v1"), "{counts:?}");

    // 1. The delay: jason's one call takes at least the 7 s, an undelayed one far less.
    let delay = Duration::from_secs(7);
    let budget = Duration::from_secs(20);
    let listener = scene.listener();
    let (plain, plain_took) = timed_get(listener, "ratings", "/ratings/0", &[], budget);
    assert_eq!(plain, Ok((200, "ratings-v1".into())));
    let (delayed, delayed_took) = timed_get(listener, "ratings", "/ratings/0", &[JASON], budget);
    assert_eq!(
        delayed,
        Ok((200, "ratings-v1".into())),
        "delayed, then served"
    );
    eprintln!("FAULT DELAY: undelayed {plain_took:?}, jason's {delayed_took:?}");
    // Envoy's timer starts once the request has arrived, after this clock did; the margin
    // only absorbs timer granularity.
    assert!(
        delayed_took >= delay - Duration::from_millis(100),
        "jason's call took {delayed_took:?}, less than the {delay:?} delay"
    );
    assert!(
        plain_took < delay / 2,
        "an undelayed call took {plain_took:?}"
    );

    // 2. The abort, applied over the delay as the page does.
    let route_config = scene.route_config();
    scene.envoy.await_rds_update(&route_config, || {
        tasks::apply_task(&scene.config, "fault-injection")
    });
    let served = ratings.requests_served();
    let jason = scene.tally(20, "ratings", "/ratings/0", &[JASON]);
    assert_eq!(count(&jason, "status 500"), 20, "{jason:?}");
    assert_eq!(ratings.requests_served(), served, "aborted before ratings");
    let others = scene.tally(20, "ratings", "/ratings/0", &[]);
    assert_eq!(count(&others, "ratings-v1"), 20, "{others:?}");
    assert_eq!(
        scene.envoy.rejected_updates(),
        0,
        "{}",
        scene.envoy.summary()
    );
}

/// A stand-in for reviews v2 in the "Request Timeouts" page: for every request it first calls
/// ratings through the client's sidecar (`Host: ratings`), as reviews v2 calls ratings for its
/// stars, and answers `reviews-v2` once that call has returned. Stops on drop.
struct CallsRatings {
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl CallsRatings {
    fn start(addr: SocketAddr, sidecar: SocketAddr) -> CallsRatings {
        let listener = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let stop = stop.clone();
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            thread::spawn(move || serve_calling_ratings(stream, sidecar));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        CallsRatings {
            stop,
            acceptor: Some(acceptor),
        }
    }
}

impl Drop for CallsRatings {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

/// One request (a GET without a body) on `stream`: call ratings, then answer and close.
fn serve_calling_ratings(mut stream: TcpStream, sidecar: SocketAddr) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let stars = match http_get(sidecar, "ratings", "/ratings/0", &[]) {
        Ok((status, _)) => format!("ratings {status}"),
        Err(e) => format!("ratings failed: {e}"),
    };
    let body = format!("reviews-v2 ({stars})");
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// The "Request Timeouts" page: reviews goes to v2 with a half-second timeout while every
/// call to ratings is delayed 2 s. reviews v2 waits on its (delayed) ratings call, so the
/// client's call to reviews is answered 504 by the timeout, after at least half a second and
/// without reviews' answer; ratings itself, called directly, answers after its delay.
#[test]
fn request_timeouts_task_answers_504_while_ratings_is_delayed() {
    let envoy_bin = require_envoy!();
    let net = 182;
    let scene = Bookinfo::start(&envoy_bin, net, "request-timeouts");
    let _ratings = Bookinfo::backend(net, scene.target, "ratings", "v1");
    let reviews_v2: SocketAddr =
        format!("{}:{}", tasks::pod_ip(net, "reviews", "v2"), scene.target)
            .parse()
            .expect("an address");
    let _reviews = CallsRatings::start(reviews_v2, scene.listener());
    let listener = scene.listener();
    let budget = Duration::from_secs(10);

    // Before the VirtualServices apply, reviews' other pods (no backend) answer 503 and
    // nothing times out; once they do, every call times out.
    let _timed_out = converge(
        "reviews times out",
        CONVERGE_TIMEOUT,
        || timed_get(listener, "reviews", "/reviews/0", &[], budget).0,
        |r| matches!(r, Ok((504, _))),
        || scene.envoy.summary(),
    );
    let timeout = Duration::from_millis(500);
    let (answer, took) = timed_get(listener, "reviews", "/reviews/0", &[], budget);
    eprintln!("REQUEST TIMEOUT: reviews answered {answer:?} after {took:?}");
    assert_eq!(answer, Ok((504, "upstream request timeout".into())));
    assert!(
        took >= timeout - Duration::from_millis(50),
        "the timeout answered after {took:?}"
    );

    let delay = Duration::from_secs(2);
    let (answer, took) = timed_get(listener, "ratings", "/ratings/0", &[], budget);
    eprintln!("REQUEST TIMEOUT: ratings answered {answer:?} after {took:?}");
    assert_eq!(
        answer,
        Ok((200, "ratings-v1".into())),
        "delayed, then served"
    );
    assert!(
        took >= delay - Duration::from_millis(100),
        "ratings answered after {took:?}"
    );
    assert_eq!(
        scene.envoy.rejected_updates(),
        0,
        "{}",
        scene.envoy.summary()
    );
}

/// The "Traffic Shifting" page: reviews half to v1, half to v3. Over 200 requests both
/// versions answer, each between a quarter and three quarters of them (a fair split falls
/// outside that about once in 10^12 runs), and v2 never does.
#[test]
fn traffic_shifting_task_splits_reviews_between_v1_and_v3() {
    let envoy_bin = require_envoy!();
    let net = 183;
    let scene = Bookinfo::start(&envoy_bin, net, "traffic-shifting");
    let _v1 = Bookinfo::backend(net, scene.target, "reviews", "v1");
    let _v2 = Bookinfo::backend(net, scene.target, "reviews", "v2");
    let _v3 = Bookinfo::backend(net, scene.target, "reviews", "v3");
    let (v1, v3) = ("reviews-v1", "reviews-v3");
    let n = 200;
    let counts = scene.converge(
        "reviews split between v1 and v3",
        ("reviews", "/reviews/0", &[]),
        |c| exactly(c, &[v1, v3]),
        n,
    );
    eprintln!("TRAFFIC SHIFTING: {counts:?}");
    assert_eq!(count(&counts, v1) + count(&counts, v3), n, "{counts:?}");
    for version in [v1, v3] {
        let k = count(&counts, version);
        assert!(
            (n / 4..=3 * n / 4).contains(&k),
            "{version} answered {k} of {n}: {counts:?}"
        );
    }
    assert_eq!(
        scene.envoy.rejected_updates(),
        0,
        "{}",
        scene.envoy.summary()
    );
}

/// The "TCP Traffic Shifting" page: tcp-echo's connections 80% to v1, 20% to v2, through
/// the client's TCP listener (the fixture's in-mesh VirtualService) and through the task's
/// own ingress gateway on port 31400. Over 300 connections on each (every one greets and
/// echoes) both versions answer, v2 between 25 and 100 of them — about 20%, far from an even
/// split; an 80/20 split falls outside that about once in 10^6 runs.
#[test]
fn tcp_traffic_shifting_task_splits_connections_80_20() {
    let envoy_bin = require_envoy!();
    let net = 184;
    let dir = TestDir::new("envoy-tasks-tcp-traffic-shifting");
    let config = dir.subdir("config");
    tasks::apply_task(&config, "tcp-traffic-shifting");
    tasks::write_tcp_echo_workloads(&config, net);
    tasks::write_client_sidecar(&config, net, TCP_ECHO_PORT, "TCP");
    let gateway_node = tasks::write_ingress_gateway(&config, net);
    let (v1, v2) = ("tcp-echo-v1", "tcp-echo-v2");
    let _v1 = TcpEcho::start(&tasks::pod_ip(net, "tcp-echo", "v1"), TCP_ECHO_PORT, v1);
    let _v2 = TcpEcho::start(&tasks::pod_ip(net, "tcp-echo", "v2"), TCP_ECHO_PORT, v2);
    let meshflow = Meshflow::start(&config, dir.path());
    let envoy = client_envoy(&envoy_bin, &dir, &meshflow, net, TCP_ECHO_PORT);
    let addr = listener(net, TCP_ECHO_PORT);

    let split_80_20 = |what: &str, envoy: &Envoy, addr: SocketAddr| {
        let n = 300;
        let counts = converge_then(
            what,
            |k| tcp_tally(addr, k),
            |c| exactly(c, &[v1, v2]),
            n,
            || envoy.summary(),
        );
        eprintln!("TCP TRAFFIC SHIFTING ({what}): {counts:?}");
        assert_eq!(count(&counts, v1) + count(&counts, v2), n, "{counts:?}");
        let k = count(&counts, v2);
        assert!(
            (25..=100).contains(&k),
            "{what}: v2 took {k} of {n} connections: {counts:?}"
        );
    };
    split_80_20("the client's connections", &envoy, addr);
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());

    // The Gateway's server names no `bind`, so the router listens on 0.0.0.0:31400; a lock
    // keeps two runs of this test from taking turns on the port.
    let _port = gateway_port_lock(31400);
    let gateway = Envoy::start_live(&envoy_bin, dir.path(), &gateway_node, meshflow.xds_addr());
    gateway.await_listener("0.0.0.0_31400");
    let gateway_addr = SocketAddr::from(([127, 0, 0, 1], 31400));
    split_80_20("the gateway's connections", &gateway, gateway_addr);
    assert_eq!(gateway.rejected_updates(), 0, "{}", gateway.summary());
}

/// Holds the lock of `port` for this test binary's runs, once nothing else listens there.
fn gateway_port_lock(port: u16) -> std::fs::File {
    let lock = std::fs::File::create(
        std::env::temp_dir().join(format!("meshflow-envoy-tasks-{port}.lock")),
    )
    .expect("the lock file");
    lock.lock().expect("lock");
    if let Err(e) = TcpListener::bind(("0.0.0.0", port)) {
        panic!("port {port}, where the task's gateway listens, is taken by another process: {e}");
    }
    lock
}

/// Mutual TLS by DestinationRule (`mtls-destination-rule.yaml`): the client's calls to
/// reviews reach the server sidecar of pod `reviews-v1` (no capture: its Sidecar's ingress
/// listener binds the pod's address and hands requests to the application) over Istio's
/// mutual TLS — the server's listener counts the handshakes, and the application sees the
/// client's SPIFFE identity in `x-forwarded-client-cert`, signed for the server's — while
/// details, `DISABLE`d, is reached in plaintext at a backend that speaks nothing else.
#[test]
fn mtls_destination_rule_task_reaches_the_servers_sidecar_over_istio_mtls() {
    let envoy_bin = require_envoy!();
    let net = 185;
    let dir = TestDir::new("envoy-tasks-mtls-destination-rule");
    let config = dir.subdir("config");
    let target = free_port();
    // The fixture's rules name all four services; reviews has the one pod whose sidecar
    // runs here, details one plain backend.
    tasks::write_bookinfo_service(&config, net, "reviews", &["v1"], target);
    tasks::write_bookinfo_service(&config, net, "details", &["v1"], target);
    tasks::write_bookinfo_service(&config, net, "ratings", &[], target);
    tasks::write_bookinfo_service(&config, net, "productpage", &[], target);
    tasks::write_client_sidecar(&config, net, BOOKINFO_PORT, "HTTP");
    tasks::apply_task(&config, "mtls-destination-rule");
    let pod_ip = tasks::pod_ip(net, "reviews", "v1");
    let app_port = free_port();
    let _app = Backend::start("127.0.0.1", app_port, "reviews-app");
    let _details = Bookinfo::backend(net, target, "details", "v1");
    write_config(
        &config,
        "sidecar-reviews.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: reviews, namespace: default}}
spec:
  workloadSelector: {{labels: {{app: reviews}}}}
  ingress:
  - port: {{number: {target}, protocol: HTTP, name: http}}
    bind: {pod_ip}
    captureMode: NONE
    defaultEndpoint: 127.0.0.1:{app_port}
  egress:
  - hosts: ['./*']
"
        ),
    );
    let meshflow = Meshflow::start(&config, dir.path());
    let server_node = ProxyNode::sidecar(
        "reviews-v1",
        "default",
        &pod_ip,
        &[("app", "reviews"), ("version", "v1")],
    )
    .with_metadata("SERVICE_ACCOUNT", "bookinfo-reviews");
    let server = Envoy::start_live(&envoy_bin, dir.path(), &server_node, meshflow.xds_addr());
    server.await_listener(&format!("inbound_{pod_ip}_{target}"));
    let client = client_envoy(&envoy_bin, &dir, &meshflow, net, BOOKINFO_PORT);
    let listener = listener(net, BOOKINFO_PORT);

    let counts = converge_then(
        "reviews reached through the server's sidecar",
        |k| tally(k, || http_get(listener, "reviews", "/reviews/0", &[])),
        |c| only(c, "reviews-app"),
        5,
        || format!("{}\n{}", client.summary(), server.summary()),
    );
    assert!(only(&counts, "reviews-app"), "{counts:?}");
    let answer = http_request(listener, "GET", "reviews", "/reviews/0", &[]).expect("GET reviews");
    assert_eq!(answer.status, 200);
    let xfcc = answer
        .header("x-echo-x-forwarded-client-cert")
        .expect("the client's certificate reached the application")
        .to_owned();
    assert!(
        xfcc.contains("URI=spiffe://cluster.local/ns/default/sa/sleep"),
        "{xfcc}"
    );
    assert!(
        xfcc.contains("By=spiffe://cluster.local/ns/default/sa/bookinfo-reviews"),
        "{xfcc}"
    );
    let handshakes = server.listener_tls_handshakes();
    assert!(handshakes >= 1, "{:?}", server.stats(Some("ssl")));

    let details = tally(5, || http_get(listener, "details", "/details/0", &[]));
    assert!(only(&details, "details-v1"), "plaintext: {details:?}");
    assert_eq!(client.rejected_updates(), 0, "{}", client.summary());
    assert_eq!(server.rejected_updates(), 0, "{}", server.summary());
}

/// The "Mirroring" page: every call to reviews is answered by v1, and v2 gets a copy of each
/// (Envoy sends it without waiting for, or returning, v2's answer).
#[test]
fn mirroring_task_copies_reviews_calls_to_v2() {
    let envoy_bin = require_envoy!();
    let net = 186;
    let scene = Bookinfo::start(&envoy_bin, net, "mirroring");
    let v1 = Bookinfo::backend(net, scene.target, "reviews", "v1");
    let v2 = Bookinfo::backend(net, scene.target, "reviews", "v2");
    let _v3 = Bookinfo::backend(net, scene.target, "reviews", "v3");
    scene.converge(
        "reviews answered by v1",
        ("reviews", "/reviews/0", &[]),
        |c| only(c, "reviews-v1"),
        10,
    );
    let (answered, copied) = (v1.requests_served(), v2.requests_served());
    let counts = scene.tally(20, "reviews", "/reviews/0", &[]);
    assert_eq!(count(&counts, "reviews-v1"), 20, "{counts:?}");
    assert_eq!(v1.requests_served(), answered + 20);
    assert!(
        support::wait_until(CONVERGE_TIMEOUT, || v2.requests_served() >= copied + 20),
        "v2 got {} of 20 copies",
        v2.requests_served() - copied
    );
    assert_eq!(
        scene.envoy.rejected_updates(),
        0,
        "{}",
        scene.envoy.summary()
    );
}
