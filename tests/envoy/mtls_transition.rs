//! A PeerAuthentication flipped from DISABLE to STRICT under continuous traffic, through
//! real Envoys: a client sidecar sending requests to a server sidecar whose xDS stream
//! goes through a link the test pauses, so the server takes its new configuration seconds
//! after the client could (a busy or slow proxy).
//!
//! Held (meshflow's default), the flip fails no request: the server first accepts mTLS and
//! plaintext, the client keeps plaintext until the server acknowledged that, and the
//! server refuses plaintext only once the client acknowledged sending mTLS. The flip back
//! (STRICT → DISABLE) goes the same way, mirrored. The same flip
//! all at once (`--mtls-transition-timeout-ms 0`, what Istio does) fails requests while the
//! client sends mTLS to a server that still takes only plaintext: the counter-test, which
//! shows the first can fail. Loopback only.

use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::reviews::SidecarPair;
use support::{converge, http_request, require_envoy, write_config, TestDir, CONVERGE_TIMEOUT};

const HELD_NET: u8 = 125;
const AT_ONCE_NET: u8 = 126;
/// How long the server's configuration is held back by its paused link.
const PAUSE: Duration = Duration::from_secs(2);

/// One request per connection from the client sidecar to the server: every request opens
/// a connection with what the client is told to send now (a pooled connection would carry
/// the old choice past the flip, hiding it).
const ONE_REQUEST_PER_CONNECTION: &str = "\
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: reviews
  namespace: default
spec:
  host: reviews.default.svc.cluster.local
  trafficPolicy:
    connectionPool:
      http:
        maxRequestsPerConnection: 1
";

fn peer_authentication(mode: &str) -> String {
    format!(
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata:\n  \
         name: reviews\n  namespace: default\nspec:\n  selector:\n    matchLabels:\n      \
         app: reviews\n  mtls:\n    mode: {mode}\n"
    )
}

/// What the traffic met: requests answered by the application, and the others.
struct Traffic {
    ok: usize,
    failed: Vec<String>,
}

/// Sends requests through the client sidecar, one every few milliseconds, until stopped.
fn traffic(addr: SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Traffic> {
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut t = Traffic {
            ok: 0,
            failed: Vec::new(),
        };
        while !stop.load(Ordering::SeqCst) {
            match http_request(addr, "GET", "reviews", "/", &[]) {
                Ok(r) if r.status == 200 && r.text() == "reviews-app" => t.ok += 1,
                Ok(r) => t.failed.push(format!(
                    "{:?}: status {} {}",
                    started.elapsed(),
                    r.status,
                    r.text()
                )),
                Err(e) => t.failed.push(format!("{:?}: {e}", started.elapsed())),
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        t
    })
}

/// Starts the pair with the server DISABLE, flips it to STRICT while its link is paused,
/// resumes, waits until STRICT is in effect (plaintext refused), then flips it back the
/// same way; returns what the traffic met throughout, with meshflow's log.
fn flip_under_traffic(
    envoy_bin: &std::path::Path,
    net: u8,
    name: &str,
    args: &[&str],
    debug: Option<SocketAddr>,
) -> (Traffic, String) {
    let dir = TestDir::new(name);
    let config = dir.subdir("config");
    write_config(&config, "zz-peer.yaml", &peer_authentication("DISABLE"));
    write_config(&config, "zz-pool.yaml", ONE_REQUEST_PER_CONNECTION);
    let pair = SidecarPair::start_with_server_link(net, envoy_bin, dir.path(), &config, args);
    let link = pair.server_link.as_ref().expect("started with a link");
    let outcome = |addr: SocketAddr| match http_request(addr, "GET", "reviews", "/", &[]) {
        Ok(r) if r.status == 200 => r.text(),
        Ok(r) => format!("status {}", r.status),
        Err(_) => "error".to_string(),
    };
    let (through_client, direct) = (pair.through_client, pair.direct);
    let app = "reviews-app".to_string();
    converge(
        "DISABLE: the client sidecar and plaintext both reach the application",
        CONVERGE_TIMEOUT,
        || (outcome(through_client), outcome(direct)),
        |(via, plain)| *via == app && *plain == app,
        || pair.summary(),
    );

    let stop = Arc::new(AtomicBool::new(false));
    let running = traffic(through_client, stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    link.pause();
    write_config(&config, "zz-peer.yaml", &peer_authentication("STRICT"));
    let paused = Instant::now();
    if let Some(debug) = debug {
        // The debug port shows the hold at its first step, waiting for the server.
        let mut last = serde_json::Value::Null;
        let seen = support::wait_until(PAUSE / 2, || {
            last = support::debug_json(debug, "/debug/mtls_transitions");
            last.as_array().is_some_and(|holds| {
                holds.len() == 1
                    && holds[0]["step"] == "server-accepts-both"
                    && holds[0]["from"] == "plaintext"
                    && holds[0]["to"] == "mtls"
                    && holds[0]["waiting"].as_u64().unwrap_or(0) > 0
            })
        });
        assert!(
            seen,
            "/debug/mtls_transitions while the server is held back: {last}"
        );
    }
    std::thread::sleep(PAUSE.saturating_sub(paused.elapsed()));
    link.resume();
    converge(
        "STRICT in effect: plaintext finds no chain",
        CONVERGE_TIMEOUT,
        || outcome(direct),
        |plain| plain == "error",
        || pair.summary(),
    );
    std::thread::sleep(Duration::from_millis(500));
    // And back: STRICT → DISABLE, the server held back again.
    link.pause();
    write_config(&config, "zz-peer.yaml", &peer_authentication("DISABLE"));
    std::thread::sleep(PAUSE);
    link.resume();
    converge(
        "DISABLE in effect again: plaintext reaches the application",
        CONVERGE_TIMEOUT,
        || outcome(direct),
        |plain| *plain == app,
        || pair.summary(),
    );
    // Traffic goes on a while over the server's final configuration.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    let t = running.join().expect("the traffic thread");
    assert_eq!(
        outcome(through_client),
        app,
        "mTLS from the client sidecar reaches the application\n{}",
        pair.summary()
    );
    let sent = t.ok + t.failed.len();
    eprintln!("{name}: {sent} requests, {} failed", t.failed.len());
    assert!(sent > 100, "traffic ran throughout: {sent} sent");
    (t, pair.meshflow.log())
}

#[test]
fn held_flips_between_disable_and_strict_fail_no_request() {
    let envoy_bin = require_envoy!();
    let debug = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let (t, log) = flip_under_traffic(
        &envoy_bin,
        HELD_NET,
        "envoy-mtls-flip-held",
        &["--debug-addr", &debug.to_string()],
        Some(debug),
    );
    // The steps, in order, each acknowledged (none ended by the timeout).
    let at = |step: &str| {
        log.find(step)
            .unwrap_or_else(|| panic!("meshflow logs {step:?}:\n{log}"))
    };
    assert!(
        at("mTLS change held") < at("the sidecar acknowledged accepting both")
            && at("the sidecar acknowledged accepting both") < at("mTLS change complete"),
        "{log}"
    );
    assert_eq!(
        log.matches("mTLS change complete").count(),
        2,
        "both flips: {log}"
    );
    assert!(!log.contains("not acknowledged in time"), "{log}");
    assert!(
        t.failed.is_empty(),
        "{} of {} requests failed: {:?}",
        t.failed.len(),
        t.ok + t.failed.len(),
        &t.failed[..t.failed.len().min(10)]
    );
}

#[test]
fn the_same_flips_all_at_once_fail_requests() {
    let envoy_bin = require_envoy!();
    let (t, _) = flip_under_traffic(
        &envoy_bin,
        AT_ONCE_NET,
        "envoy-mtls-flip-at-once",
        &["--mtls-transition-timeout-ms", "0"],
        None,
    );
    assert!(
        !t.failed.is_empty(),
        "all {} requests answered: the flip all at once should have failed some while the \
         server's configuration was held back",
        t.ok
    );
}
