//! A Sidecar `ingress` listener's `tls` on real Envoy: the sidecar of pod `app-abc` (no
//! traffic capture, so each `ingress` port is a listener of its own on the pod's address)
//! terminates TLS for clients outside the mesh with certificate files the test writes, and
//! hands plaintext to the application, as Istio does where `tls` takes effect. An HTTPS port
//! (SIMPLE): a TLS client that trusts only the test's CA reaches the HTTP application, which
//! parses the request (it speaks plaintext HTTP only); a plaintext client finds no chain. A
//! TLS port (MUTUAL): a client presenting a certificate of that CA exchanges bytes with a TCP
//! application; one presenting none, or one of another CA, is refused, and so is plaintext.
//! The HTTPS port made MUTUAL: a client certificate is then required there too, and its
//! details reach the application in `x-forwarded-client-cert`. Loopback only.

use crate::support;

use std::net::SocketAddr;

use support::pki::{ca, leaf};
use support::tcp_echo::{tcp_exchange, TcpEcho};
use support::tls_client::{tls_echo, tls_get_trusting, Trust};
use support::{
    converge, free_port, http_request, require_envoy, write_config, Backend, Envoy, Meshflow,
    ProxyNode, TestDir, CONVERGE_TIMEOUT,
};

const POD_IP: &str = "127.0.123.11";
/// The name the server certificate carries, and clients send as SNI.
const HOST: &str = "app.default.example";

/// The Sidecar of `app`: `https_port` (HTTPS, `https_mode`) to the HTTP application on
/// `127.0.0.1:app_port`, `tls_port` (TLS, MUTUAL) to the TCP application on
/// `127.0.0.1:echo_port`, both with the certificate files in `certs`.
fn sidecar_yaml(
    certs: &std::path::Path,
    https_mode: &str,
    (https_port, app_port): (u16, u16),
    (tls_port, echo_port): (u16, u16),
) -> String {
    let files = |mode: &str| {
        format!(
            "{{mode: {mode}, serverCertificate: {c}/cert.pem, privateKey: {c}/key.pem, caCertificates: {c}/ca.pem}}",
            c = certs.display()
        )
    };
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: app, namespace: default}}\nspec:\n  workloadSelector: {{labels: {{app: app}}}}\n  ingress:\n  - port: {{number: {https_port}, protocol: HTTPS, name: https}}\n    bind: {POD_IP}\n    captureMode: NONE\n    defaultEndpoint: 127.0.0.1:{app_port}\n    tls: {}\n  - port: {{number: {tls_port}, protocol: TLS, name: tls}}\n    bind: {POD_IP}\n    captureMode: NONE\n    defaultEndpoint: 127.0.0.1:{echo_port}\n    tls: {}\n",
        files(https_mode),
        files("MUTUAL"),
    )
}

#[test]
fn sidecar_ingress_tls_terminates_for_clients_outside_the_mesh() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-sidecar-ingress-tls");
    let config = dir.subdir("config");
    let certs = dir.subdir("certs");
    let ingress_ca = ca("ingress CA");
    let other_ca = ca("another CA");
    let (cert, key) = leaf(&ingress_ca, &[HOST], None);
    std::fs::write(certs.join("cert.pem"), &cert).expect("write the server certificate");
    std::fs::write(certs.join("key.pem"), &key).expect("write the server key");
    std::fs::write(certs.join("ca.pem"), &ingress_ca.pem).expect("write the CA");
    let client = leaf(&ingress_ca, &["client.default.example"], None);
    let rogue = leaf(&other_ca, &["client.default.example"], None);
    let client = (client.0.as_str(), client.1.as_str());
    let rogue = (rogue.0.as_str(), rogue.1.as_str());

    let (https_port, app_port) = (free_port(), free_port());
    let (tls_port, echo_port) = (free_port(), free_port());
    let app = Backend::start("127.0.0.1", app_port, "app");
    let _echo = TcpEcho::start("127.0.0.1", echo_port, "echo-app");
    let sidecar = |https_mode: &str| {
        sidecar_yaml(
            &certs,
            https_mode,
            (https_port, app_port),
            (tls_port, echo_port),
        )
    };
    write_config(&config, "sidecar.yaml", &sidecar("SIMPLE"));
    let meshflow = Meshflow::start(&config, dir.path());
    let node = ProxyNode::sidecar("app-abc", "default", POD_IP, &[("app", "app")]);
    let envoy = Envoy::start_live(&envoy_bin, dir.path(), &node, meshflow.xds_addr());
    envoy.await_listener(&format!("inbound_{POD_IP}_{https_port}"));
    envoy.await_listener(&format!("inbound_{POD_IP}_{tls_port}"));
    let https: SocketAddr = format!("{POD_IP}:{https_port}").parse().expect("address");
    let tls: SocketAddr = format!("{POD_IP}:{tls_port}").parse().expect("address");
    let trust = Trust::Roots(&ingress_ca.pem);
    let get = |client_cert: Option<(&str, &str)>| {
        tls_get_trusting(https, HOST, trust, &["http/1.1"], client_cert).map(|(answer, _)| answer)
    };

    // 1. HTTPS, SIMPLE: the sidecar presents the file's certificate (the client trusts only
    //    its CA, for HOST) and the plaintext HTTP application answers.
    let answer = converge(
        "a TLS client reaches the application through the HTTPS ingress port",
        CONVERGE_TIMEOUT,
        || get(None),
        |r| r.as_ref().is_ok_and(|a| a.starts_with("HTTP/1.1 200")),
        || envoy.summary(),
    )
    .expect("an answer");
    assert!(answer.ends_with("app"), "{answer}");
    assert!(
        !answer.contains("x-echo-x-forwarded-client-cert"),
        "no client certificate, no details: {answer}"
    );
    // Plaintext finds no chain on that port: the application sees nothing of it.
    let served = app.requests_served();
    let plain = http_request(https, "GET", HOST, "/", &[]);
    assert!(
        plain.is_err(),
        "plaintext refused: {:?}",
        plain.map(|r| r.status)
    );
    assert_eq!(app.requests_served(), served);

    // 2. TLS, MUTUAL, to a TCP application: a client certificate of the CA is required.
    assert_eq!(
        tls_echo(tls, HOST, trust, Some(client)).as_deref(),
        Ok("echo-app")
    );
    assert!(
        tls_echo(tls, HOST, trust, None).is_err(),
        "a client without a certificate is refused"
    );
    assert!(
        tls_echo(tls, HOST, trust, Some(rogue)).is_err(),
        "a client certificate of another CA is refused"
    );
    let plain = tcp_exchange(tls);
    assert!(plain.starts_with("error"), "plaintext refused: {plain}");

    // 3. The HTTPS port made MUTUAL: without a certificate, refused; with one, its details
    //    reach the application.
    write_config(&config, "sidecar.yaml", &sidecar("MUTUAL"));
    let refused = converge(
        "the HTTPS ingress port requires a client certificate",
        CONVERGE_TIMEOUT,
        || get(None),
        |r| r.is_err(),
        || envoy.summary(),
    );
    assert!(refused.is_err());
    let answer = get(Some(client)).expect("a client with a certificate is served");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let xfcc = answer
        .lines()
        .find(|l| l.starts_with("x-echo-x-forwarded-client-cert"))
        .unwrap_or_else(|| panic!("the client's details reached the application: {answer}"));
    assert!(xfcc.contains("DNS=client.default.example"), "{xfcc}");
    assert!(get(Some(rogue)).is_err(), "another CA's client is refused");
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}
