//! Istio's per-proxy node metadata `IDLE_TIMEOUT` on real Envoy: a sidecar that sends it
//! closes a TCP connection through its outbound `tcp_proxy` once the connection has been
//! idle that long, where a sidecar without it keeps the connection open; and Envoy accepts
//! the listeners of the `tcp-echo` example (connection managers, inbound, catch-all and
//! outbound `tcp_proxy` filters, a gateway's) with the timeout on each.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use dataflows::model::ProxyKind;

use support::envoy_validate::envoy_validates_example;
use support::mongo;
use support::tcp_echo::TcpEcho;
use support::{free_port, require_envoy, Envoy, Meshflow, ProxyNode, TestDir};

/// This test's loopback /24.
const NET: u8 = 107;

/// A connection through the sidecar's bound TCP listener, past the backend's greeting and
/// one echo: the reader (with a 10 s read timeout) and a writer.
fn exchanged(addr: SocketAddr) -> (BufReader<TcpStream>, TcpStream) {
    let stream = TcpStream::connect(addr).expect("connect through the sidecar");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut writer = stream.try_clone().expect("a writer");
    writer.write_all(b"ping\n").expect("ping");
    let mut reader = BufReader::new(stream);
    let (mut greeting, mut echo) = (String::new(), String::new());
    reader.read_line(&mut greeting).expect("greeting");
    reader.read_line(&mut echo).expect("echo");
    assert!(greeting.starts_with("mongo-v"), "{greeting:?}");
    assert_eq!(echo, "ping\n");
    (reader, writer)
}

/// Connections the sidecar's `tcp_proxy` filters closed for being idle.
fn idle_closed(envoy: &Envoy) -> u64 {
    envoy
        .stat_with_suffix(".idle_timeout")
        .map_or(0, |(_, n)| n)
}

/// Proves that `IDLE_TIMEOUT: 1s` in a sidecar's node metadata is the idle timeout of its
/// outbound `tcp_proxy` (the `mongo` rule sets none of its own): Envoy closes a connection
/// idle for about a second (the echo backend itself would wait 5 s), and counts it as
/// closed for being idle. A sidecar of the same workload without the metadata keeps a
/// connection quiet for 3 s open (Envoy's default is an hour).
#[test]
fn idle_timeout_metadata_closes_idle_tcp_connections() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-idle-timeout");
    let config = dir.subdir("config");
    let (port, backend_port, gateway_port) = (free_port(), free_port(), free_port());
    let _v1 = TcpEcho::start(&mongo::ip(NET, 11), backend_port, "mongo-v1");
    let _v2 = TcpEcho::start(&mongo::ip(NET, 12), backend_port, "mongo-v2");
    mongo::write_mesh(&config, NET, port, backend_port, gateway_port);
    let meshflow = Meshflow::start(&config, dir.path());
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = format!("127.0.0.1_{port}");

    // Without the metadata: still open after 3 s of silence.
    {
        let node = ProxyNode::sidecar(
            "client-abc",
            "default",
            &mongo::ip(NET, 20),
            &[("app", "client")],
        );
        let plain = Envoy::start_live(&envoy_bin, dir.path(), &node, meshflow.xds_addr());
        plain.await_listener(&listener);
        let (mut reader, mut writer) = exchanged(addr);
        std::thread::sleep(Duration::from_secs(3));
        writer.write_all(b"still there\n").expect("write after 3s");
        let mut echo = String::new();
        reader.read_line(&mut echo).expect("echo after 3s");
        assert_eq!(echo, "still there\n", "open after 3 s without IDLE_TIMEOUT");
        assert_eq!(idle_closed(&plain), 0, "{}", plain.summary());
        assert_eq!(plain.rejected_updates(), 0, "{}", plain.summary());
    } // That Envoy stops: its listener's port is free for the next.

    let node = ProxyNode::sidecar(
        "client-def",
        "default",
        &mongo::ip(NET, 21),
        &[("app", "client")],
    )
    .with_metadata("IDLE_TIMEOUT", "1s");
    let quick = Envoy::start_live(&envoy_bin, dir.path(), &node, meshflow.xds_addr());
    quick.await_listener(&listener);
    let dump = quick.config_dump().to_string();
    assert!(dump.contains("\"idle_timeout\":\"1s\""), "{dump}");

    let (mut reader, _writer) = exchanged(addr);
    let idle_from = Instant::now();
    let mut rest = Vec::new();
    let read = reader.read_to_end(&mut rest);
    let idle = idle_from.elapsed();
    assert!(
        read.is_ok() && rest.is_empty(),
        "closed, not {read:?} {rest:?}"
    );
    assert!(
        idle >= Duration::from_millis(800) && idle < Duration::from_secs(4),
        "Envoy closed the idle connection after {idle:?}"
    );
    assert_eq!(idle_closed(&quick), 1, "{}", quick.summary());
    assert_eq!(quick.rejected_updates(), 0, "{}", quick.summary());
}

/// The idle timeouts of a listener's filters, as Envoy's JSON gives them: per filter, its
/// kind (`hcm`, `tcp`) and idle timeout (a connection manager's
/// `common_http_protocol_options.idle_timeout`).
fn idle_timeouts(listener: &serde_json::Value) -> Vec<(&'static str, Option<String>)> {
    let chains = listener["filter_chains"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(listener.get("default_filter_chain"));
    chains
        .flat_map(|c| c["filters"].as_array().into_iter().flatten())
        .filter_map(|f| {
            let config = &f["typed_config"];
            let of = |v: &serde_json::Value| v.as_str().map(str::to_owned);
            match f["name"].as_str() {
                Some("envoy.filters.network.http_connection_manager") => Some((
                    "hcm",
                    of(&config["common_http_protocol_options"]["idle_timeout"]),
                )),
                Some("envoy.filters.network.tcp_proxy") => {
                    Some(("tcp", of(&config["idle_timeout"])))
                }
                _ => None,
            }
        })
        .collect()
}

/// Proves that Envoy accepts every listener of the `tcp-echo` example's proxies (a captured
/// sidecar, a gateway, the legacy service's sidecar whose `virtualInbound` has connection
/// managers and `tcp_proxy` filters) when their nodes send `IDLE_TIMEOUT`, and that each
/// connection manager and `tcp_proxy` carries it (`0s`, no timeout, too).
#[test]
fn envoy_accepts_listeners_with_the_idle_timeout() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-idle-timeout-validate");
    let captured = ProxyNode::sidecar("sleep-abc", "default", "127.0.2.50", &[("app", "sleep")])
        .with_metadata("IDLE_TIMEOUT", "1m30s");
    let router = ProxyNode::router(
        "istio-ingressgateway-abc",
        "istio-system",
        "127.0.0.1",
        &[("istio", "ingressgateway")],
    )
    .with_metadata("IDLE_TIMEOUT", "1m30s");
    let legacy = ProxyNode::sidecar("legacy-1", "default", "127.0.2.40", &[("app", "legacy")])
        .with_metadata("IDLE_TIMEOUT", "0s");
    let nodes = [
        (&captured, ProxyKind::Sidecar),
        (&router, ProxyKind::Router),
        (&legacy, ProxyKind::Sidecar),
    ];
    let listeners = envoy_validates_example(&envoy_bin, dir.path(), "tcp-echo", &nodes);
    let mut kinds = std::collections::BTreeSet::new();
    for ((node, _), listeners) in nodes.iter().zip(&listeners) {
        let want = match node.extra_metadata["IDLE_TIMEOUT"].as_str() {
            "0s" => "0s",
            _ => "90s",
        };
        let found: Vec<_> = listeners.iter().flat_map(idle_timeouts).collect();
        assert!(!found.is_empty(), "{}: no filters", node.id);
        for (kind, idle) in found {
            assert_eq!(idle.as_deref(), Some(want), "{}: a {kind}", node.id);
            kinds.insert(kind);
        }
    }
    assert_eq!(kinds, ["hcm", "tcp"].into(), "both kinds were seen");
}
