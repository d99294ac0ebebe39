//! Real-Envoy gateway servers of protocol TLS that terminate: a TLS client reaches a
//! plaintext TCP echo backend through the gateway, which terminates with the Secret's
//! certificate (SDS `credentialName`) and passes the decrypted stream on by the
//! VirtualService's `tcp[]` route. SIMPLE serves any client; MUTUAL requires a client
//! certificate of the Secret's CA and refuses none or another CA's.

use crate::support;

use std::net::SocketAddr;

use support::pki::{ca, leaf};
use support::tcp_echo::TcpEcho;
use support::tls_client::{tls_echo, Trust};
use support::{
    free_port, require_envoy, wait_until, write_config, Envoy, Meshflow, ProxyNode, TestDir,
    CONVERGE_TIMEOUT,
};

/// This test's loopback /24.
const NET: u8 = 94;

fn ip(host: u8) -> String {
    format!("127.0.{NET}.{host}")
}

/// A `kubernetes.io/tls` Secret in `default`, with `ca.crt` when given.
fn tls_secret(name: &str, cert: &str, key: &str, ca: Option<&str>) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ca = ca
        .map(|c| format!("  ca.crt: {}\n", b64(c)))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: default}}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n{ca}",
        b64(cert),
        b64(key)
    )
}

/// The gateway's pod and Gateway (a SIMPLE and a MUTUAL TLS server), the echo service and
/// the VirtualService routing the gateway's `db.example.com` connections to it by `tcp[]`.
fn mesh_yaml(simple: u16, mutual: u16, echo_port: u16) -> String {
    format!(
        "\
apiVersion: v1
kind: Pod
metadata: {{name: ingressgateway-abc, namespace: default, labels: {{istio: ingressgateway}}}}
status: {{podIP: {gw}}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: tls-gateway, namespace: default}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {simple}, name: tls-simple, protocol: TLS}}
    bind: 127.0.0.1
    hosts: [db.example.com]
    tls: {{mode: SIMPLE, credentialName: db-cred}}
  - port: {{number: {mutual}, name: tls-mutual, protocol: TLS}}
    bind: 127.0.0.1
    hosts: [db.example.com]
    tls: {{mode: MUTUAL, credentialName: db-mtls}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: db, namespace: default}}
spec:
  hosts: [db.internal]
  ports: [{{number: 5432, name: tcp, protocol: TCP}}]
  resolution: STATIC
  endpoints: [{{address: {echo}, ports: {{tcp: {echo_port}}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: db, namespace: default}}
spec:
  hosts: [db.example.com]
  gateways: [tls-gateway]
  tcp:
  - route:
    - destination: {{host: db.internal, port: {{number: 5432}}}}
",
        gw = ip(30),
        echo = ip(11),
    )
}

/// Tries until `ok` holds (or the time is up): the last outcome.
fn converge(
    what: &str,
    get: impl Fn() -> Result<String, String>,
    ok: impl Fn(&Result<String, String>) -> bool,
) -> Result<String, String> {
    let mut last = Err("not tried".to_string());
    let done = wait_until(CONVERGE_TIMEOUT, || {
        last = get();
        ok(&last)
    });
    assert!(done, "{what}: {last:?}");
    last
}

/// Proves that a TLS server terminating SIMPLE presents the Secret's certificate (the client
/// trusts only its CA) and carries the decrypted stream both ways to the plaintext backend
/// its VirtualService's `tcp[]` route names; that a MUTUAL one does so for a client with a
/// certificate of the Secret's CA and refuses a client without one or with another CA's;
/// with no update rejected.
#[test]
fn terminating_tls_servers_route_decrypted_streams_by_tcp_routes() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-tls-tcp");
    let config = dir.subdir("config");
    let (simple, mutual, echo_port) = (free_port(), free_port(), free_port());
    let _echo = TcpEcho::start(&ip(11), echo_port, "db-echo");
    let gw_ca = ca("gateway CA");
    let (cert, key) = leaf(&gw_ca, &["db.example.com"], None);
    let client_ca = ca("client CA");
    let other_ca = ca("other CA");
    let (ccert, ckey) = leaf(&client_ca, &["client.example.com"], None);
    let (ocert, okey) = leaf(&other_ca, &["client.example.com"], None);
    write_config(&config, "mesh.yaml", &mesh_yaml(simple, mutual, echo_port));
    write_config(
        &config,
        "db-cred.yaml",
        &tls_secret("db-cred", &cert, &key, None),
    );
    write_config(
        &config,
        "db-mtls.yaml",
        &tls_secret("db-mtls", &cert, &key, Some(&client_ca.pem)),
    );
    let meshflow = Meshflow::start(&config, dir.path());
    let node = ProxyNode::router(
        "ingressgateway-abc",
        "default",
        &ip(30),
        &[("istio", "ingressgateway")],
    );
    let router = Envoy::start_live(&envoy_bin, dir.path(), &node, meshflow.xds_addr());
    let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let trust = Trust::Roots(&gw_ca.pem);
    let echoed = |r: &Result<String, String>| r.as_deref() == Ok("db-echo");

    // SIMPLE: any client, the Secret's certificate, the backend's greeting and echo.
    let got = converge(
        "SIMPLE through to the echo",
        || tls_echo(at(simple), "db.example.com", trust, None),
        echoed,
    );
    assert_eq!(got.as_deref(), Ok("db-echo"));

    // MUTUAL: with a certificate of the Secret's CA, through.
    let client = Some((ccert.as_str(), ckey.as_str()));
    let got = converge(
        "MUTUAL with the client CA's certificate",
        || tls_echo(at(mutual), "db.example.com", trust, client),
        echoed,
    );
    assert_eq!(got.as_deref(), Ok("db-echo"));
    // Without a certificate, or with another CA's: refused, nothing reaches the backend.
    let none = tls_echo(at(mutual), "db.example.com", trust, None);
    assert!(none.is_err(), "no client certificate: {none:?}");
    let other = tls_echo(
        at(mutual),
        "db.example.com",
        trust,
        Some((ocert.as_str(), okey.as_str())),
    );
    assert!(other.is_err(), "another CA's certificate: {other:?}");

    assert_eq!(router.rejected_updates(), 0, "{}", router.summary());
}
