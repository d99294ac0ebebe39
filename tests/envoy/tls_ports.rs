//! TLS that depends on where traffic goes, with real Envoy fed by meshflow, loopback only,
//! certificates made in the test:
//! - DestinationRule `portLevelSettings`: one port of a rule originates TLS to a loopback TLS
//!   backend while another port of the same rule stays plaintext to a plain one;
//! - DestinationRule `tls.credentialName` (MUTUAL): the client certificate and the CA come
//!   from a `kubernetes.io/tls` Secret of the client's own namespace over SDS; while the
//!   Secret is only in another namespace the cluster fails closed (503, nothing reaches the
//!   backend) and an error names the rule and the field;
//! - a Gateway server with `tls.mode: ISTIO_MUTUAL`: the gateway terminates with its workload
//!   certificate from meshflow's CA and serves a client presenting a certificate of the
//!   mesh's CA, refusing one without a certificate or with one of another CA.

use crate::support;

use std::collections::HashMap;
use std::net::SocketAddr;

use support::pki::{ca, leaf};
use support::reviews::count;
use support::tls_backend::TlsBackend;
use support::tls_client::tls_get;
use support::{
    converge, debug_json, free_port, http_request, only, require_envoy, write_config, Backend,
    Envoy, Meshflow, ProxyNode, TestDir, XdsMode, CONVERGE_TIMEOUT, STARTUP_TIMEOUT,
};

/// A `kubernetes.io/tls` Secret with `ca.crt`, in `namespace`.
fn tls_secret(name: &str, namespace: &str, cert: &str, key: &str, ca: &str) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {namespace}}}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n  ca.crt: {}\n",
        b64(cert),
        b64(key),
        b64(ca)
    )
}

/// Sidecar `client` (selects `app: client`): an egress listener bound to `127.0.0.1` on each
/// of `ports`, without capture.
fn client_sidecar(ports: &[u16]) -> String {
    let listeners: String = ports
        .iter()
        .map(|p| {
            format!(
                "  - port: {{number: {p}, protocol: HTTP, name: http-{p}}}\n    bind: 127.0.0.1\n    captureMode: NONE\n    hosts: [\"./*\"]\n"
            )
        })
        .collect();
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: client, namespace: default}}\nspec:\n  workloadSelector: {{labels: {{app: client}}}}\n  egress:\n{listeners}"
    )
}

/// Per answer body (or `status N` / the error), over five GETs of `host` at `addr`.
fn tally(addr: SocketAddr, host: &str) -> HashMap<String, usize> {
    tally_n(addr, host, 5)
}

/// As [`tally`], over `n` requests.
fn tally_n(addr: SocketAddr, host: &str, n: usize) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for _ in 0..n {
        let key = match http_request(addr, "GET", host, "/", &[]) {
            Ok(r) if r.status == 200 => r.text(),
            Ok(r) => format!("status {}", r.status),
            Err(e) => e,
        };
        *counts.entry(key).or_insert(0usize) += 1;
    }
    counts
}

#[test]
fn destination_rule_tls_per_port_and_from_a_secret() {
    let envoy_bin = require_envoy!();
    let net = 72;
    let ip = |h: u8| format!("127.0.{net}.{h}");
    let dir = TestDir::new("envoy-tls-ports");
    let config = dir.subdir("config");
    let pki = dir.subdir("pki");

    let server_ca = ca("backend CA");
    let client_ca = ca("client CA");
    let (cert, key) = leaf(&server_ca, &["secure.example.com"], None);
    let (client_cert, client_key) = leaf(&client_ca, &["client.default"], None);
    let ca_file = pki.join("ca.pem");
    std::fs::write(&ca_file, &server_ca.pem).expect("write CA");
    let ca_file = ca_file.display().to_string();

    // `ext.example.com` has two ports, each on its own backend of one endpoint: port `a`
    // on a TLS backend, port `b` on a plain one. `mutual.example.com` (port `a`) is a TLS
    // backend that requires a client certificate of the client CA.
    let (port_a, port_b) = (free_port(), free_port());
    let (tls_port, plain_port) = (free_port(), free_port());
    let _tls = TlsBackend::start(&ip(10), tls_port, "tls-a", &cert, &key, None);
    let _plain = Backend::start(&ip(10), plain_port, "plain-b");
    let mutual = TlsBackend::start(
        &ip(11),
        tls_port,
        "tls-mutual",
        &cert,
        &key,
        Some(&client_ca.pem),
    );
    write_config(
        &config,
        "entries.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: ext, namespace: default}}\nspec:\n  hosts: [ext.example.com]\n  ports:\n  - {{number: {port_a}, name: http-a, protocol: HTTP}}\n  - {{number: {port_b}, name: http-b, protocol: HTTP}}\n  resolution: STATIC\n  location: MESH_EXTERNAL\n  endpoints: [{{address: {a}, ports: {{http-a: {tls_port}, http-b: {plain_port}}}}}]\n---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: mutual, namespace: default}}\nspec:\n  hosts: [mutual.example.com]\n  ports: [{{number: {port_a}, name: http-a, protocol: HTTP}}]\n  resolution: STATIC\n  location: MESH_EXTERNAL\n  endpoints: [{{address: {m}, ports: {{http-a: {tls_port}}}}}]\n",
            a = ip(10),
            m = ip(11),
        ),
    );
    write_config(&config, "sidecar.yaml", &client_sidecar(&[port_a, port_b]));
    // TLS on port `a` only: the rule's own policy says nothing of TLS.
    let ext_rule = |entries: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: ext, namespace: default}}\nspec:\n  host: ext.example.com\n  trafficPolicy:\n    loadBalancer: {{simple: ROUND_ROBIN}}\n    portLevelSettings:\n{entries}"
        )
    };
    let tls_on = |port: u16| {
        format!(
            "    - port: {{number: {port}}}\n      tls: {{mode: SIMPLE, caCertificates: {ca_file}, sni: secure.example.com}}\n"
        )
    };
    write_config(&config, "ext-rule.yaml", &ext_rule(&tls_on(port_a)));
    write_config(
        &config,
        "mutual-rule.yaml",
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: mutual, namespace: default}\nspec:\n  host: mutual.example.com\n  trafficPolicy:\n    tls: {mode: MUTUAL, credentialName: client-cred, sni: secure.example.com}\n",
    );
    // The Secret exists, but in another namespace than the client's.
    write_config(
        &config,
        "client-cred.yaml",
        &tls_secret(
            "client-cred",
            "other",
            &client_cert,
            &client_key,
            &server_ca.pem,
        ),
    );

    let debug = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let meshflow =
        Meshflow::start_with_args(&config, dir.path(), &["--debug-addr", &debug.to_string()]);
    let node = ProxyNode::sidecar("client-abc", "default", &ip(20), &[("app", "client")]);
    let envoy = Envoy::start_live(&envoy_bin, dir.path(), &node, meshflow.xds_addr());
    envoy.await_listener(&format!("127.0.0.1_{port_a}"));
    envoy.await_listener(&format!("127.0.0.1_{port_b}"));
    let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));

    // (a) One rule, two ports: TLS to the TLS backend on `a`, plaintext to the plain one on
    // `b`; the TLS backend saw the SNI the entry names.
    converge(
        "port a speaks TLS",
        CONVERGE_TIMEOUT,
        || tally(at(port_a), "ext.example.com"),
        |c| only(c, "tls-a"),
        || envoy.summary(),
    );
    converge(
        "port b stays plaintext",
        CONVERGE_TIMEOUT,
        || tally(at(port_b), "ext.example.com"),
        |c| only(c, "plain-b"),
        || envoy.summary(),
    );
    let r = http_request(at(port_a), "GET", "ext.example.com", "/", &[]).expect("GET a");
    assert_eq!(r.header("x-echo-sni"), Some("secure.example.com"));
    // TLS on `b` too: its plain backend cannot answer a handshake, so nothing is served there
    // any more, while `a` goes on.
    write_config(
        &config,
        "ext-rule.yaml",
        &ext_rule(&format!("{}{}", tls_on(port_a), tls_on(port_b))),
    );
    // One request per sample: a request there now waits for its read timeout (the plain
    // backend never answers a handshake), so five per sample would leave the wait too few.
    converge(
        "port b now originates TLS too",
        CONVERGE_TIMEOUT,
        || tally_n(at(port_b), "ext.example.com", 1),
        |c| !c.is_empty() && count(c, "plain-b") == 0,
        || envoy.summary(),
    );
    let counts = tally_n(at(port_b), "ext.example.com", 2);
    assert_eq!(count(&counts, "plain-b"), 0, "{counts:?}");
    assert!(only(&tally(at(port_a), "ext.example.com"), "tls-a"));

    // (b) credentialName: the Secret is in namespace `other`, not the client's: the cluster
    // fails closed (503 from Envoy, nothing reaches the backend), and the error names the
    // rule, the field and where the Secret was looked for.
    let counts = converge(
        "no Secret in the client's namespace: fail closed",
        CONVERGE_TIMEOUT,
        || tally(at(port_a), "mutual.example.com"),
        |c| only(c, "status 503"),
        || envoy.summary(),
    );
    assert!(only(&counts, "status 503"), "{counts:?}");
    assert_eq!(mutual.requests_served(), 0, "nothing reached the backend");
    let errors = debug_json(debug, "/debug/config_errors").to_string();
    assert!(
        errors.contains("spec.trafficPolicy.tls.credentialName")
            && errors.contains("default/client-cred")
            && errors.contains("default/mutual"),
        "{errors}"
    );
    // The Secret in the client's namespace: served over SDS, the backend sees the client
    // certificate, and the error is gone.
    write_config(
        &config,
        "client-cred-default.yaml",
        &tls_secret(
            "client-cred",
            "default",
            &client_cert,
            &client_key,
            &server_ca.pem,
        ),
    );
    converge(
        "the Secret's client certificate reaches the mTLS backend",
        CONVERGE_TIMEOUT,
        || tally(at(port_a), "mutual.example.com"),
        |c| only(c, "tls-mutual"),
        || envoy.summary(),
    );
    let r = http_request(at(port_a), "GET", "mutual.example.com", "/", &[]).expect("GET");
    assert_eq!(r.header("x-echo-client-cert"), Some("yes"));
    assert!(mutual.requests_served() > 0);
    let errors = debug_json(debug, "/debug/config_errors").to_string();
    assert!(!errors.contains("client-cred"), "{errors}");
    // The proxy holds the Secret's SDS resources, its key redacted on the debug port.
    let dump = debug_json(debug, &format!("/debug/config_dump?proxy={}", node.id)).to_string();
    assert!(dump.contains("kubernetes://client-cred"), "{dump}");
    assert!(dump.contains("kubernetes://client-cred-cacert"), "{dump}");
    assert!(!dump.contains("PRIVATE KEY"), "the dump shows a key");
    assert_eq!(
        envoy.rejected_updates(),
        0,
        "Envoy accepted every update: {:?}",
        envoy.rejected_update_stats()
    );
    drop(meshflow);
}

/// HTTPS `GET /` with `Host: host` to `addr`, presenting `client` if given: the answer and
/// the server's certificate (DER), or why it failed.
fn https_get(
    addr: SocketAddr,
    host: &str,
    client: Option<(&str, &str)>,
) -> Result<(String, Vec<u8>), String> {
    tls_get(addr, host, &[], client)
}

#[test]
fn gateway_istio_mutual_serves_clients_of_the_mesh_ca_only() {
    let envoy_bin = require_envoy!();
    let net = 74;
    let ip = |h: u8| format!("127.0.{net}.{h}");
    let dir = TestDir::new("envoy-gateway-istio-mutual");
    let config = dir.subdir("config");
    let pki = dir.subdir("pki");
    let mesh_ca = ca("mesh CA");
    let other_ca = ca("another CA");
    std::fs::write(pki.join("ca-cert.pem"), &mesh_ca.pem).expect("write CA");
    std::fs::write(pki.join("ca-key.pem"), mesh_ca.key_pem()).expect("write CA key");

    let (https, web_port) = (free_port(), free_port());
    let web = Backend::start(&ip(10), web_port, "web");
    write_config(
        &config,
        "gateway.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: ingressgateway-abc, namespace: default, labels: {{istio: ingressgateway}}}}\nstatus: {{podIP: {gw}}}\n---\napiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: mesh-gw, namespace: default}}\nspec:\n  selector: {{istio: ingressgateway}}\n  servers:\n  - port: {{number: {https}, name: https, protocol: HTTPS}}\n    bind: 127.0.0.1\n    hosts: [web.example.com]\n    tls: {{mode: ISTIO_MUTUAL}}\n---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: web, namespace: default}}\nspec:\n  hosts: [web.internal]\n  ports: [{{number: 80, name: http, protocol: HTTP}}]\n  resolution: STATIC\n  endpoints: [{{address: {w}, ports: {{http: {web_port}}}}}]\n---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: web, namespace: default}}\nspec:\n  hosts: [web.example.com]\n  gateways: [mesh-gw]\n  http:\n  - route:\n    - destination: {{host: web.internal, port: {{number: 80}}}}\n",
            gw = ip(30),
            w = ip(10),
        ),
    );
    let ca_cert = pki.join("ca-cert.pem").display().to_string();
    let ca_key = pki.join("ca-key.pem").display().to_string();
    let meshflow = Meshflow::start_with_args(
        &config,
        dir.path(),
        &["--ca-cert", &ca_cert, "--ca-key", &ca_key],
    );
    let node = ProxyNode::router(
        "ingressgateway-abc",
        "default",
        &ip(30),
        &[("istio", "ingressgateway")],
    );
    let router = Envoy::start(
        &envoy_bin,
        dir.path(),
        &node,
        meshflow.xds_addr(),
        XdsMode::Sotw,
    );
    router.wait_live(STARTUP_TIMEOUT);
    let addr = SocketAddr::from(([127, 0, 0, 1], https));

    // A client of the mesh's CA is served, through to the backend; the gateway presents its
    // workload certificate (a SPIFFE identity meshflow's CA issued).
    let (mesh_cert, mesh_key) = leaf(
        &mesh_ca,
        &[],
        Some("spiffe://cluster.local/ns/default/sa/client"),
    );
    let mut last = Err("not tried".to_string());
    let served = support::wait_until(CONVERGE_TIMEOUT, || {
        last = https_get(addr, "web.example.com", Some((&mesh_cert, &mesh_key)));
        last.as_ref()
            .is_ok_and(|(a, _)| a.starts_with("HTTP/1.1 200") && a.contains("web"))
    });
    assert!(
        served,
        "a mesh client is served: {last:?}\n{}",
        router.summary()
    );
    let (_, peer) = last.expect("an answer");
    let spiffe = b"spiffe://cluster.local/ns/default/sa/default";
    assert!(
        peer.windows(spiffe.len()).any(|w| w == spiffe),
        "the gateway's workload certificate names its identity"
    );

    // No client certificate, or one of another CA: refused by the gateway's chain, nothing
    // reaches the backend.
    let before = web.requests_served();
    let none = https_get(addr, "web.example.com", None);
    assert!(
        none.as_ref().map_or(true, |(a, _)| !a.contains("200")),
        "no client certificate is refused: {none:?}"
    );
    let (other_cert, other_key) = leaf(
        &other_ca,
        &[],
        Some("spiffe://cluster.local/ns/default/sa/intruder"),
    );
    let other = https_get(addr, "web.example.com", Some((&other_cert, &other_key)));
    assert!(
        other.as_ref().map_or(true, |(a, _)| !a.contains("200")),
        "a certificate of another CA is refused: {other:?}"
    );
    assert_eq!(web.requests_served(), before, "nothing reached the backend");
    // And the mesh client still is.
    let again = https_get(addr, "web.example.com", Some((&mesh_cert, &mesh_key)));
    assert!(
        again
            .as_ref()
            .is_ok_and(|(a, _)| a.starts_with("HTTP/1.1 200")),
        "{again:?}"
    );
    assert_eq!(router.rejected_updates(), 0, "{}", router.summary());
    drop(meshflow);
}

/// `examples/tls-ports` (the goldens `tests/golden/tls-ports-*.txt`), for captured proxies:
/// the per-port clusters with SDS TLS contexts, the failed-closed ones, and the gateway's
/// ISTIO_MUTUAL listener, checked by `envoy --mode validate`.
#[test]
fn envoy_accepts_the_tls_ports_example() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-tls-ports-validate");
    let sleep = ProxyNode::sidecar("sleep-abc", "default", "127.0.0.20", &[("app", "sleep")]);
    let gateway = ProxyNode::router(
        "istio-ingressgateway-abc",
        "istio-system",
        "127.0.0.1",
        &[("istio", "ingressgateway")],
    );
    let listeners = support::envoy_validate::envoy_validates_example(
        &envoy_bin,
        dir.path(),
        "tls-ports",
        &[
            (&sleep, dataflows::model::ProxyKind::Sidecar),
            (&gateway, dataflows::model::ProxyKind::Router),
        ],
    );
    let text = serde_json::Value::from(listeners[1].clone()).to_string();
    for part in ["0.0.0.0_8443", "ROOTCA", "require_client_certificate"] {
        assert!(text.contains(part), "{part} in {text}");
    }
}
