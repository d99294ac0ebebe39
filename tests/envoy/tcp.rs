//! Real-Envoy TCP traffic: the `mongo` Service (port named `tcp-mongo`) has two pods, each a
//! TCP echo backend greeting with its name. A sidecar (pod `client-abc`) reaches it through a
//! bound egress listener of protocol TCP (captureMode NONE); a VirtualService's `tcp` route
//! shifts connections between subsets v1 and v2 by weight; and a router selected by a Gateway
//! with a TCP server forwards its connections to the subset its VirtualService names. Every
//! connection greets and echoes, so the whole path carries data both ways.

use crate::support;

use std::collections::HashMap;
use std::net::SocketAddr;

use dataflows::model::ProxyKind;

use support::envoy_validate::envoy_validates_example;
use support::mongo;
use support::tcp_echo::{tcp_tally, TcpEcho};
use support::{
    converge_then, exactly, free_port, only, require_envoy, Envoy, Meshflow, ProxyNode, TestDir,
};

/// This test's loopback /24.
const NET: u8 = 52;

fn ip(host: u8) -> String {
    mongo::ip(NET, host)
}

/// Samples connections until `accept` holds, then returns a fresh tally of `n`.
fn converge_tcp(
    what: &str,
    envoy: &Envoy,
    addr: SocketAddr,
    accept: impl Fn(&HashMap<String, usize>) -> bool,
    n: usize,
) -> HashMap<String, usize> {
    converge_then(what, |k| tcp_tally(addr, k), accept, n, || envoy.summary())
}

/// Proves that TCP services are proxied by real Envoy as meshflow generates them: a bound
/// TCP egress listener reaches both pods without a VirtualService, a `tcp` route's weights
/// move every connection to one subset, then the other, then split them, and a Gateway TCP
/// server forwards to the subset its VirtualService's `tcp` route names — with no update
/// rejected by either Envoy.
#[test]
fn tcp_routes_shift_connections_on_sidecar_and_gateway() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-tcp");
    let config = dir.subdir("config");
    let (port, backend_port, gateway_port) = (free_port(), free_port(), free_port());
    let _v1 = TcpEcho::start(&ip(11), backend_port, "mongo-v1");
    let _v2 = TcpEcho::start(&ip(12), backend_port, "mongo-v2");
    mongo::write_mesh(&config, NET, port, backend_port, gateway_port);
    let meshflow = Meshflow::start(&config, dir.path());

    let node = ProxyNode::sidecar("client-abc", "default", &ip(20), &[("app", "client")]);
    let sidecar = Envoy::start_live(&envoy_bin, dir.path(), &node, meshflow.xds_addr());
    sidecar.await_listener(&format!("127.0.0.1_{port}"));
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let (v1, v2) = ("mongo-v1", "mongo-v2");

    // 1. No VirtualService: the service's own cluster, both pods.
    let counts = converge_tcp("both pods", &sidecar, addr, |c| exactly(c, &[v1, v2]), 40);
    assert!(exactly(&counts, &[v1, v2]), "{counts:?}");

    // 2. Every connection to v2, then to v1, then half and half.
    mongo::write_split(&config, &[("v1", 0), ("v2", 100)]);
    let counts = converge_tcp("all to v2", &sidecar, addr, |c| only(c, v2), 20);
    assert!(only(&counts, v2), "{counts:?}");
    mongo::write_split(&config, &[("v1", 100), ("v2", 0)]);
    let counts = converge_tcp("all to v1", &sidecar, addr, |c| only(c, v1), 20);
    assert!(only(&counts, v1), "{counts:?}");
    mongo::write_split(&config, &[("v1", 50), ("v2", 50)]);
    let counts = converge_tcp("split", &sidecar, addr, |c| exactly(c, &[v1, v2]), 60);
    assert!(exactly(&counts, &[v1, v2]), "{counts:?}");
    let (n1, n2) = (counts[v1], counts[v2]);
    assert!(n1 >= 10 && n2 >= 10, "a 50/50 split of 60: {counts:?}");

    // 3. The Gateway's TCP server, with a VirtualService bound to it: to subset v2.
    mongo::write_gateway_route(&config, gateway_port, port);
    let router_node = ProxyNode::router(
        "istio-ingressgateway-abc",
        "default",
        &ip(30),
        &[("istio", "ingressgateway")],
    );
    let router = Envoy::start_live(&envoy_bin, dir.path(), &router_node, meshflow.xds_addr());
    router.await_listener(&format!("127.0.0.1_{gateway_port}"));
    let gw_addr = SocketAddr::from(([127, 0, 0, 1], gateway_port));
    let counts = converge_tcp("gateway to v2", &router, gw_addr, |c| only(c, v2), 20);
    assert!(only(&counts, v2), "{counts:?}");

    assert_eq!(sidecar.rejected_updates(), 0, "{}", sidecar.summary());
    assert_eq!(router.rejected_updates(), 0, "{}", router.summary());
}

/// Proves that real Envoy accepts the TCP listeners meshflow generates where the scenario
/// above cannot bind them (a captured sidecar's `0.0.0.0_PORT` listeners, their chains by
/// service address beside the HTTP chain, their default chain; the gateway's weighted
/// `tcp_proxy`): every listener and cluster of `examples/tcp-echo`'s proxies, in a bootstrap
/// checked by `envoy --mode validate`, which loads them without binding any port.
#[test]
fn envoy_accepts_the_tcp_echo_example_listeners() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-tcp-validate");
    let captured = ProxyNode::sidecar("sleep-abc", "default", "127.0.2.50", &[("app", "sleep")]);
    let router = ProxyNode::router(
        "istio-ingressgateway-abc",
        "istio-system",
        "127.0.0.1",
        &[("istio", "ingressgateway")],
    );
    // The legacy service's own sidecar: `virtualInbound` tells HTTP from TCP on its ports,
    // which name no protocol (the HTTP inspector, off on every other port).
    let legacy = ProxyNode::sidecar("legacy-1", "default", "127.0.2.40", &[("app", "legacy")]);
    let nodes = [
        (&captured, ProxyKind::Sidecar),
        (&router, ProxyKind::Router),
        (&legacy, ProxyKind::Sidecar),
    ];
    let listeners = envoy_validates_example(&envoy_bin, dir.path(), "tcp-echo", &nodes);
    let has = |listeners: &[serde_json::Value], what: &str| {
        listeners.iter().any(|l| l.to_string().contains(what))
    };
    for ((node, _), listeners) in nodes.iter().zip(&listeners) {
        assert!(has(listeners, "tcp_proxy"), "{} has TCP listeners", node.id);
    }
    // Ports naming no protocol run the HTTP inspector: the client's outbound listener for
    // legacy's ports, the legacy sidecar's `virtualInbound`; the gateway's never.
    let inspects: Vec<bool> = listeners
        .iter()
        .map(|l| has(l, "envoy.filters.listener.http_inspector"))
        .collect();
    assert_eq!(inspects, vec![true, false, true]);
}

/// A Sidecar `ingress` port of protocol TCP (here `MONGO`) is proxied as TCP to its
/// `defaultEndpoint`: the server sidecar (pod `mongo-server-abc`, no capture) binds
/// `inbound_IP_PORT` itself, and every connection greets and echoes through it — an HTTP
/// connection manager there would answer the first bytes with a 400 instead. Switching the
/// port's protocol to HTTP puts the connection manager back (the echo breaks), and back to
/// TCP restores it, with no update rejected.
#[test]
fn sidecar_ingress_tcp_port_proxies_connections_to_its_default_endpoint() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-tcp-ingress");
    let config = dir.subdir("config");
    let (port, app_port) = (free_port(), free_port());
    let server_ip = ip(30);
    let _app = TcpEcho::start("127.0.0.1", app_port, "mongo-app");
    let sidecar = |protocol: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: mongo-server, namespace: default}}\nspec:\n  workloadSelector: {{labels: {{app: mongo-server}}}}\n  ingress:\n  - port: {{number: {port}, protocol: {protocol}, name: mongo}}\n    bind: {server_ip}\n    captureMode: NONE\n    defaultEndpoint: 127.0.0.1:{app_port}\n  egress:\n  - hosts: ['./*']\n"
        )
    };
    support::write_config(&config, "sidecar.yaml", &sidecar("MONGO"));
    let meshflow = Meshflow::start(&config, dir.path());
    let node = ProxyNode::sidecar(
        "mongo-server-abc",
        "default",
        &server_ip,
        &[("app", "mongo-server")],
    );
    let server = Envoy::start_live(&envoy_bin, dir.path(), &node, meshflow.xds_addr());
    server.await_listener(&format!("inbound_{server_ip}_{port}"));
    let addr: SocketAddr = format!("{server_ip}:{port}").parse().expect("address");
    let app = "mongo-app";

    let counts = converge_tcp("TCP ingress echoes", &server, addr, |c| only(c, app), 10);
    assert_eq!(counts.get(app), Some(&10), "{counts:?}");

    support::write_config(&config, "sidecar.yaml", &sidecar("HTTP"));
    let counts = converge_tcp(
        "HTTP ingress does not echo",
        &server,
        addr,
        |c| !c.contains_key(app),
        5,
    );
    assert!(!counts.contains_key(app), "{counts:?}");

    support::write_config(&config, "sidecar.yaml", &sidecar("TCP"));
    let counts = converge_tcp("TCP again", &server, addr, |c| only(c, app), 10);
    assert_eq!(counts.get(app), Some(&10), "{counts:?}");
    assert_eq!(server.rejected_updates(), 0, "{}", server.summary());
}

/// A DestinationRule's own `connectionPool.tcp.idleTimeout` is the idle timeout of the
/// `tcp_proxy` of routes to its host, as Istio sets it: the sidecar's Envoy closes a
/// connection idle for 1s (with Envoy's default, 1h, it would stay open; the echo backend
/// itself gives up only after 5s of silence).
#[test]
fn tcp_idle_timeout_closes_idle_connections() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::time::{Duration, Instant};
    let envoy_bin = require_envoy!();
    let net = 92;
    let dir = TestDir::new("envoy-tcp-idle");
    let config = dir.subdir("config");
    let (port, backend_port, gateway_port) = (free_port(), free_port(), free_port());
    let _v1 = TcpEcho::start(&mongo::ip(net, 11), backend_port, "mongo-v1");
    let _v2 = TcpEcho::start(&mongo::ip(net, 12), backend_port, "mongo-v2");
    mongo::write_mesh(&config, net, port, backend_port, gateway_port);
    let path = config.join("mongo.yaml");
    let text = std::fs::read_to_string(&path).expect("mongo.yaml");
    let with_idle = text.replace(
        "  host: mongo\n  subsets:",
        "  host: mongo\n  trafficPolicy: {connectionPool: {tcp: {idleTimeout: 1s}}}\n  subsets:",
    );
    assert_ne!(with_idle, text, "the rule is in mongo.yaml");
    std::fs::write(&path, with_idle).expect("write mongo.yaml");
    let meshflow = Meshflow::start(&config, dir.path());
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &mongo::ip(net, 20),
        &[("app", "client")],
    );
    let sidecar = Envoy::start_live(&envoy_bin, dir.path(), &node, meshflow.xds_addr());
    sidecar.await_listener(&format!("127.0.0.1_{port}"));
    // On the listener's tcp_proxy (the cluster has it too, for HTTP connections).
    let dump = sidecar.config_dump();
    let listeners: Vec<String> = dump["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["@type"]
                .as_str()
                .is_some_and(|t| t.ends_with("ListenersConfigDump"))
        })
        .map(|c| c.to_string())
        .collect();
    assert!(
        listeners
            .iter()
            .any(|l| l.contains("\"idle_timeout\":\"1s\"")),
        "{listeners:?}"
    );

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let stream = std::net::TcpStream::connect(addr).expect("connect through the sidecar");
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
    let idle_from = Instant::now();
    let mut rest = Vec::new();
    let read = reader.read_to_end(&mut rest);
    let idle = idle_from.elapsed();
    assert!(
        read.is_ok() && rest.is_empty(),
        "closed, not {read:?} {rest:?}"
    );
    assert!(
        idle >= Duration::from_millis(800) && idle < Duration::from_secs(3),
        "Envoy closed the idle connection after {idle:?}"
    );
    assert_eq!(sidecar.rejected_updates(), 0, "{}", sidecar.summary());
}

/// A DestinationRule's own `connectionPool.tcp.maxConnectionDuration` is the longest a
/// connection through the `tcp_proxy` of routes to its host may last, as Istio sets it
/// (`max_downstream_connection_duration`): the sidecar's Envoy closes a connection after 1s
/// though it is never idle (a ping every 200ms, each echoed).
#[test]
fn tcp_max_connection_duration_closes_busy_connections() {
    use std::io::{BufRead, BufReader, Write};
    use std::time::{Duration, Instant};
    let envoy_bin = require_envoy!();
    let net = 85;
    let dir = TestDir::new("envoy-tcp-max-duration");
    let config = dir.subdir("config");
    let (port, backend_port, gateway_port) = (free_port(), free_port(), free_port());
    let _v1 = TcpEcho::start(&mongo::ip(net, 11), backend_port, "mongo-v1");
    let _v2 = TcpEcho::start(&mongo::ip(net, 12), backend_port, "mongo-v2");
    mongo::write_mesh(&config, net, port, backend_port, gateway_port);
    let path = config.join("mongo.yaml");
    let text = std::fs::read_to_string(&path).expect("mongo.yaml");
    let limited = text.replace(
        "  host: mongo\n  subsets:",
        "  host: mongo\n  trafficPolicy: {connectionPool: {tcp: {maxConnectionDuration: 1s}}}\n  subsets:",
    );
    assert_ne!(limited, text, "the rule is in mongo.yaml");
    std::fs::write(&path, limited).expect("write mongo.yaml");
    let meshflow = Meshflow::start(&config, dir.path());
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &mongo::ip(net, 20),
        &[("app", "client")],
    );
    let sidecar = Envoy::start_live(&envoy_bin, dir.path(), &node, meshflow.xds_addr());
    sidecar.await_listener(&format!("127.0.0.1_{port}"));
    let dump = sidecar.config_dump().to_string();
    assert!(
        dump.contains("\"max_downstream_connection_duration\":\"1s\""),
        "the tcp_proxy's limit: {dump}"
    );

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let stream = std::net::TcpStream::connect(addr).expect("connect through the sidecar");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut writer = stream.try_clone().expect("a writer");
    let mut reader = BufReader::new(stream);
    let mut greeting = String::new();
    reader.read_line(&mut greeting).expect("greeting");
    assert!(greeting.starts_with("mongo-v"), "{greeting:?}");
    let opened = Instant::now();
    let mut echoed = 0;
    let lasted = loop {
        let mut echo = String::new();
        let alive = writer.write_all(b"ping\n").is_ok()
            && matches!(reader.read_line(&mut echo), Ok(n) if n > 0);
        if !alive {
            break opened.elapsed();
        }
        assert_eq!(echo, "ping\n");
        echoed += 1;
        assert!(
            opened.elapsed() < Duration::from_secs(8),
            "still open after {echoed} pings"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        echoed >= 2,
        "the connection carried data first ({echoed} pings)"
    );
    assert!(
        lasted >= Duration::from_millis(800) && lasted < Duration::from_secs(4),
        "Envoy closed the busy connection after {lasted:?}"
    );
    assert_eq!(sidecar.rejected_updates(), 0, "{}", sidecar.summary());
}
