//! Protocol detection in real Envoy: a port that names no protocol (no `http-`/`tcp-` name
//! prefix, no `appProtocol`, a Sidecar `ingress` port without `protocol`) is told per
//! connection, as Istio's protocol sniffing does. The server sidecar of pod `reviews-v1`
//! binds its `ingress` listener to the pod's address (no traffic capture here) and sends to
//! an application that speaks both HTTP and a line protocol of its own. An HTTP request goes
//! through the connection manager (the application sees the `x-request-id` Envoy adds, and
//! answers HTTP); a connection that sends other bytes is proxied as bytes (the application
//! echoes them). Before detection, such a port was HTTP only and the second kind got a 400.
//! The mesh's `protocolDetectionTimeout` bounds the wait for a client's first bytes, so a
//! server that speaks first is reached. Loopback only.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use support::reviews::Reviews;
use support::tcp_echo::TcpEcho;
use support::{
    converge, free_port, http_request, require_envoy, write_config, Envoy, Meshflow, ProxyNode,
    TestDir, CONVERGE_TIMEOUT,
};

const NET: u8 = 86;

/// An application on loopback that answers an HTTP request with `200` and a body saying
/// whether the request came through Envoy's connection manager (`x-request-id` present),
/// and any other first line with `echo:` and the line itself.
fn dual_app() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the application");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || serve(conn));
        }
    });
    port
}

fn serve(conn: TcpStream) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    let is_http = ["GET ", "POST ", "HEAD ", "PUT "]
        .iter()
        .any(|m| first.starts_with(m));
    if !is_http {
        let _ = out.write_all(format!("echo:{first}").as_bytes());
        return;
    }
    let mut via_envoy = false;
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" => break,
            Ok(_) => via_envoy |= line.to_ascii_lowercase().starts_with("x-request-id:"),
        }
    }
    let body = format!("http via-envoy={via_envoy}");
    let _ = out.write_all(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
}

/// Sends `line` and reads what comes back until the peer closes (or 5 s pass).
fn line_exchange(addr: SocketAddr, line: &str) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
    let mut got = String::new();
    let _ = s.read_to_string(&mut got);
    Ok(got)
}

/// The server sidecar of `reviews-v1`, its Sidecar `ingress` port naming no protocol bound
/// to the pod's address and sent to the application on `app_port`; meshflow started with
/// `args`. Returns meshflow, the Envoy and the port's address.
fn server_scene(
    envoy_bin: &std::path::Path,
    dir: &TestDir,
    app_port: u16,
    args: &[&str],
) -> (Meshflow, Envoy, SocketAddr) {
    let config = dir.subdir("config");
    let port = free_port();
    let reviews = Reviews::new(NET, port, &config);
    reviews.write_service();
    reviews.write_pods(&["v1"]);
    reviews.write_endpoints(&["v1"]);
    let pod_ip = reviews.pod_ip("v1");
    let target = reviews.backend_port();
    write_config(
        &config,
        "server-sidecar.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: reviews, namespace: default}}\nspec:\n  workloadSelector: {{labels: {{app: reviews}}}}\n  ingress:\n  - port: {{number: {target}, name: web}}\n    bind: {pod_ip}\n    captureMode: NONE\n    defaultEndpoint: 127.0.0.1:{app_port}\n  egress:\n  - hosts: ['./*']\n"
        ),
    );
    let meshflow = Meshflow::start_with_args(&config, dir.path(), args);
    let node = ProxyNode::sidecar(
        "reviews-v1",
        "default",
        &pod_ip,
        &[("app", "reviews"), ("version", "v1")],
    );
    let server = Envoy::start_live(envoy_bin, dir.path(), &node, meshflow.xds_addr());
    server.await_listener(&format!("inbound_{pod_ip}_{target}"));
    let addr: SocketAddr = format!("{pod_ip}:{target}").parse().expect("an address");
    (meshflow, server, addr)
}

/// Proves that a Sidecar `ingress` port without a protocol serves HTTP and other TCP bytes
/// alike in real Envoy: HTTP through the connection manager, the rest as bytes; and that
/// the listener carries the HTTP inspector, with no update rejected.
#[test]
fn a_port_without_a_protocol_serves_http_and_tcp() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-protocol-detection");
    let (_meshflow, server, addr) = server_scene(&envoy_bin, &dir, dual_app(), &[]);

    let http = converge(
        "an HTTP request through the connection manager",
        CONVERGE_TIMEOUT,
        || http_request(addr, "GET", "reviews", "/", &[]),
        |r| r.as_ref().is_ok_and(|r| r.status == 200),
        || server.summary(),
    )
    .expect("an answer");
    assert_eq!(http.text(), "http via-envoy=true");

    let echoed = line_exchange(addr, "PING 42\n").expect("an exchange");
    assert_eq!(echoed, "echo:PING 42\n", "{}", server.summary());

    let dump = server.config_dump().to_string();
    assert!(
        dump.contains("envoy.filters.listener.http_inspector"),
        "the ingress listener runs the HTTP inspector"
    );
    assert_eq!(server.rejected_updates(), 0, "{}", server.summary());
}

/// Proves that the mesh's `protocolDetectionTimeout` bounds how long Envoy waits for a
/// client's first bytes on such a port: an application that speaks first (it greets, then
/// echoes) is reached once the 1 s timeout passes, as TCP — where Envoy's own 15 s default
/// would outlast the client's 5 s wait.
#[test]
fn a_server_that_speaks_first_is_reached_after_the_detection_timeout() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-protocol-detection-timeout");
    let app_port = free_port();
    let _app = TcpEcho::start("127.0.0.1", app_port, "greeter");
    write_config(dir.path(), "mesh.yaml", "protocolDetectionTimeout: 1s\n");
    let mesh_file = dir.path().join("mesh.yaml");
    let args = ["--mesh-config", mesh_file.to_str().expect("a UTF-8 path")];
    let (_meshflow, server, addr) = server_scene(&envoy_bin, &dir, app_port, &args);
    let dump = server.config_dump().to_string();
    assert!(
        dump.contains("\"listener_filters_timeout\":\"1s\""),
        "the mesh's timeout on the listener"
    );
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("a read timeout");
    let mut greeting = String::new();
    BufReader::new(s)
        .read_line(&mut greeting)
        .unwrap_or_else(|e| panic!("no greeting within 5s ({e}): {}", server.summary()));
    assert_eq!(greeting, "greeter\n");
    assert_eq!(server.rejected_updates(), 0, "{}", server.summary());
}
