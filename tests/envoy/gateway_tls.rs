//! Istio gateway TLS with real Envoy as the gateway, fed by meshflow over Delta ADS: HTTPS
//! terminated with a Kubernetes Secret's certificate served over SDS (`credentialName`),
//! rotated by replacing the Secret; MUTUAL with the Secret's CA, and OPTIONAL_MUTUAL (a
//! client certificate verified when presented); PASSTHROUGH routed by SNI
//! (VirtualService `tls[]`) to two loopback TLS backends; `httpsRedirect` on the HTTP server.
//! Certificates are made at test time (rcgen) and checked from the client side (rustls): the
//! certificate a client is presented must be the Secret's.

use crate::support;

use std::net::SocketAddr;

use support::pki::{ca, der_of, leaf, Ca};
use support::tls_backend::TlsBackend;
use support::tls_client::{tls_get_trusting, Trust};
use support::{
    debug_json, free_port, http_request, meshflow_cli, require_envoy, wait_until, write_config,
    Backend, Envoy, Meshflow, ProxyNode, TestDir, XdsMode, CONVERGE_TIMEOUT, STARTUP_TIMEOUT,
};

/// `127.0.<net>.<host>`: each run's backends on loopback addresses of their own.
fn loopback(net: u8, host: u8) -> String {
    format!("127.0.{net}.{host}")
}

/// What a TLS client got: the DER of the certificate it was presented, and the HTTP answer
/// (status line and body) to `GET /` — or why the handshake or exchange failed.
#[derive(Debug)]
struct Answer {
    peer: Vec<u8>,
    response: String,
}

/// Opens TLS to `addr` with SNI `sni`, trusting `roots`, presenting `client` if given, sends
/// `GET /` with `Host: sni`, reads the answer until close.
fn tls_get(
    addr: SocketAddr,
    sni: &str,
    roots: &str,
    client: Option<(&str, &str)>,
) -> Result<Answer, String> {
    let (response, peer) = tls_get_trusting(addr, sni, Trust::Roots(roots), &[], client)?;
    if peer.is_empty() {
        return Err("no peer certificate".into());
    }
    Ok(Answer { peer, response })
}

/// A `kubernetes.io/tls` Secret (base64 `data`, as `kubectl create secret tls` writes it),
/// with `ca.crt` when given.
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

struct Ports {
    https: u16,
    mtls: u16,
    opt: u16,
    pass: u16,
    http: u16,
}

fn mesh_yaml(net: u8, p: &Ports, web_port: u16, tls_port: u16) -> String {
    let ip = |host| loopback(net, host);
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
  - port: {{number: {https}, name: https, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: [web.example.com]
    tls: {{mode: SIMPLE, credentialName: web-cred}}
  - port: {{number: {mtls}, name: https-mtls, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: [mtls.example.com]
    tls: {{mode: MUTUAL, credentialName: mtls-cred}}
  - port: {{number: {opt}, name: https-optional, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: [mtls.example.com]
    tls: {{mode: OPTIONAL_MUTUAL, credentialName: mtls-cred}}
  - port: {{number: {pass}, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    hosts: [a.example.com, b.example.com]
    tls: {{mode: PASSTHROUGH}}
  - port: {{number: {http}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: [web.example.com]
    tls: {{httpsRedirect: true}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: web, namespace: default}}
spec:
  hosts: [web.internal]
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  resolution: STATIC
  endpoints: [{{address: {web}, ports: {{http: {web_port}}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: tls-backends, namespace: default}}
spec:
  hosts: [a.internal]
  ports: [{{number: 443, name: tls, protocol: TLS}}]
  resolution: STATIC
  endpoints: [{{address: {a}, ports: {{tls: {tls_port}}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: tls-backend-b, namespace: default}}
spec:
  hosts: [b.internal]
  ports: [{{number: 443, name: tls, protocol: TLS}}]
  resolution: STATIC
  endpoints: [{{address: {b}, ports: {{tls: {tls_port}}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: web, namespace: default}}
spec:
  hosts: [web.example.com, mtls.example.com]
  gateways: [tls-gateway]
  http:
  - route:
    - destination: {{host: web.internal, port: {{number: 80}}}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: passthrough, namespace: default}}
spec:
  hosts: [a.example.com, b.example.com]
  gateways: [tls-gateway]
  tls:
  - match: [{{sniHosts: [a.example.com]}}]
    route:
    - destination: {{host: a.internal, port: {{number: 443}}}}
  - match: [{{sniHosts: [b.example.com]}}]
    route:
    - destination: {{host: b.internal, port: {{number: 443}}}}
",
        gw = ip(30),
        https = p.https,
        mtls = p.mtls,
        opt = p.opt,
        pass = p.pass,
        http = p.http,
        web = ip(10),
        a = ip(11),
        b = ip(12),
    )
}

/// The router's node id, as `ProxyNode::router` makes it.
fn node_id(ip: &str) -> String {
    format!("router~{ip}~ingressgateway-abc.default~default.svc.cluster.local")
}

/// The debug port shows the Secret by name and fingerprint, never a key: in the config
/// dump, in the history's diff of the rotation, and in explain (which names the Secret).
fn redacted_on_the_debug_port(debug: SocketAddr, proxy: &str, cert: &str, keys: &[&str]) {
    let fp = {
        let der = der_of(cert);
        let d = ring::digest::digest(&ring::digest::SHA256, &der);
        d.as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let key_lines = |text: &str| {
        keys.iter().any(|k| {
            k.lines()
                .filter(|l| !l.starts_with("-----"))
                .any(|l| text.contains(l))
        })
    };
    let dump = debug_json(debug, &format!("/debug/config_dump?proxy={proxy}")).to_string();
    assert!(dump.contains("kubernetes://web-cred"), "{dump}");
    assert!(dump.contains(&format!("sha256:{fp}")), "{dump}");
    assert!(dump.contains("[redacted]"));
    assert!(
        !dump.contains("PRIVATE KEY") && !key_lines(&dump),
        "the dump shows a key"
    );
    let diff = debug_json(debug, &format!("/debug/diff?proxy={proxy}")).to_string();
    assert!(
        !diff.contains("PRIVATE KEY") && !key_lines(&diff),
        "the diff shows a key"
    );
    let explain = debug_json(
        debug,
        &format!("/debug/explain?proxy={proxy}&resource=secret/kubernetes://web-cred"),
    )
    .to_string();
    assert!(explain.contains("web-cred"), "{explain}");
    assert!(!explain.contains("PRIVATE KEY") && !key_lines(&explain));
    // `proxy-config secret`: one row per secret, the certificate by its fingerprint.
    let addr = debug.to_string();
    let table = meshflow_cli(&["proxy-config", "secret", proxy, "--debug-addr", &addr]);
    let row = table
        .lines()
        .find(|l| l.starts_with("kubernetes://web-cred "))
        .unwrap_or_else(|| panic!("no web-cred row:\n{table}"));
    assert!(
        row.contains("certificate") && row.contains(&format!("sha256:{fp}")),
        "{table}"
    );
    assert!(
        !table.contains("PRIVATE KEY") && !key_lines(&table),
        "{table}"
    );
}

/// Retries `get` until it answers what `ok` accepts, within the convergence timeout; the
/// last answer either way.
fn converge(
    what: &str,
    mut get: impl FnMut() -> Result<Answer, String>,
    ok: impl Fn(&Result<Answer, String>) -> bool,
) -> Result<Answer, String> {
    let mut last = Err("not tried".to_string());
    let done = wait_until(CONVERGE_TIMEOUT, || {
        last = get();
        ok(&last)
    });
    assert!(done, "{what}: {last:?}");
    last
}

/// Proves HTTPS termination with the Secret's certificate (and its rotation with no listener
/// change), MUTUAL client verification, SNI passthrough to two backends and httpsRedirect,
/// with no update rejected by Envoy, over Delta ADS; and that the debug port shows the
/// Secret redacted (config dump, history diff, explain).
#[test]
fn gateway_tls_over_delta_ads() {
    let envoy_bin = require_envoy!();
    scenario(&envoy_bin, XdsMode::Delta, 53);
}

/// The same over State-of-the-World ADS (SDS by name on the same stream).
#[test]
fn gateway_tls_over_sotw_ads() {
    let envoy_bin = require_envoy!();
    scenario(&envoy_bin, XdsMode::Sotw, 54);
}

fn scenario(envoy_bin: &std::path::Path, mode: XdsMode, net: u8) {
    let ip = |host| loopback(net, host);
    let dir = TestDir::new(&format!("envoy-gateway-tls-{}", mode.label()));
    let config = dir.subdir("config");
    let ports = Ports {
        https: free_port(),
        mtls: free_port(),
        opt: free_port(),
        pass: free_port(),
        http: free_port(),
    };
    let (web_port, tls_port) = (free_port(), free_port());
    let _web = Backend::start(&ip(10), web_port, "web");
    let backend_ca = ca("backend CA");
    let (bcert, bkey) = leaf(&backend_ca, &["a.example.com", "b.example.com"], None);
    let _a = TlsBackend::start(&ip(11), tls_port, "tls-a", &bcert, &bkey, None);
    let _b = TlsBackend::start(&ip(12), tls_port, "tls-b", &bcert, &bkey, None);

    let gw_ca: Ca = ca("gateway CA");
    let (cert1, key1) = leaf(&gw_ca, &["web.example.com"], None);
    let client_ca = ca("client CA");
    let (mcert, mkey) = leaf(&gw_ca, &["mtls.example.com"], None);
    let (ccert, ckey) = leaf(&client_ca, &["client.example.com"], None);
    write_config(
        &config,
        "mesh.yaml",
        &mesh_yaml(net, &ports, web_port, tls_port),
    );
    write_config(
        &config,
        "web-cred.yaml",
        &tls_secret("web-cred", &cert1, &key1, None),
    );
    write_config(
        &config,
        "mtls-cred.yaml",
        &tls_secret("mtls-cred", &mcert, &mkey, Some(&client_ca.pem)),
    );
    let debug = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let meshflow =
        Meshflow::start_with_args(&config, dir.path(), &["--debug-addr", &debug.to_string()]);
    let node = ProxyNode::router(
        "ingressgateway-abc",
        "default",
        &ip(30),
        &[("istio", "ingressgateway")],
    );
    let router = Envoy::start(envoy_bin, dir.path(), &node, meshflow.xds_addr(), mode);
    router.wait_live(STARTUP_TIMEOUT);
    let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));

    // (a) HTTPS with SNI: through to the backend, presenting the Secret's certificate.
    let answer = converge(
        "HTTPS through the gateway",
        || tls_get(at(ports.https), "web.example.com", &gw_ca.pem, None),
        |a| a.as_ref().is_ok_and(|a| a.response.contains("web")),
    )
    .unwrap();
    assert!(
        answer.response.starts_with("HTTP/1.1 200"),
        "{}",
        answer.response
    );
    assert_eq!(
        answer.peer,
        der_of(&cert1),
        "the Secret's certificate is presented"
    );

    // (b) Replacing the Secret rotates the served certificate; the listener is not
    // replaced (no drain): the listener references the SDS name, which did not change.
    let modified = |r: &Envoy| r.stat("listener_manager.listener_modified").unwrap_or(0);
    let before = modified(&router);
    let (cert2, key2) = leaf(&gw_ca, &["web.example.com"], None);
    write_config(
        &config,
        "web-cred.yaml",
        &tls_secret("web-cred", &cert2, &key2, None),
    );
    let rotated = der_of(&cert2);
    let answer = converge(
        "the rotated certificate",
        || tls_get(at(ports.https), "web.example.com", &gw_ca.pem, None),
        |a| a.as_ref().is_ok_and(|a| a.peer == rotated),
    )
    .unwrap();
    assert!(
        answer.response.starts_with("HTTP/1.1 200"),
        "{}",
        answer.response
    );
    assert_eq!(modified(&router), before, "no listener was replaced");
    assert_eq!(
        router
            .stat("listener_manager.total_filter_chains_draining")
            .unwrap_or(0),
        0
    );
    redacted_on_the_debug_port(debug, &node_id(&ip(30)), &cert2, &[&key1, &key2]);

    // (c) MUTUAL: refused without a client certificate, served with one the CA signed.
    let with_cert = converge(
        "MUTUAL with a client certificate",
        || {
            tls_get(
                at(ports.mtls),
                "mtls.example.com",
                &gw_ca.pem,
                Some((&ccert, &ckey)),
            )
        },
        |a| {
            a.as_ref()
                .is_ok_and(|a| a.response.starts_with("HTTP/1.1 200"))
        },
    )
    .unwrap();
    assert_eq!(with_cert.peer, der_of(&mcert));
    let without = tls_get(at(ports.mtls), "mtls.example.com", &gw_ca.pem, None);
    assert!(
        without
            .as_ref()
            .map_or(true, |a| !a.response.contains("200")),
        "a client without a certificate is refused: {without:?}"
    );

    // (c') OPTIONAL_MUTUAL: served without a client certificate and with one the CA signed;
    //      a certificate of another CA is verified and refused.
    for client in [None, Some((ccert.as_str(), ckey.as_str()))] {
        let answer = converge(
            "OPTIONAL_MUTUAL",
            || tls_get(at(ports.opt), "mtls.example.com", &gw_ca.pem, client),
            |a| {
                a.as_ref()
                    .is_ok_and(|a| a.response.starts_with("HTTP/1.1 200"))
            },
        )
        .unwrap();
        assert_eq!(answer.peer, der_of(&mcert));
    }
    let stranger = tls_get(
        at(ports.opt),
        "mtls.example.com",
        &gw_ca.pem,
        Some((&bcert, &bkey)),
    );
    assert!(
        stranger
            .as_ref()
            .map_or(true, |a| !a.response.contains("200")),
        "a certificate of another CA is refused: {stranger:?}"
    );

    // (d) PASSTHROUGH: each SNI name to its own backend, TLS end to end with the backend.
    for (sni, identity) in [("a.example.com", "tls-a"), ("b.example.com", "tls-b")] {
        let answer = converge(
            &format!("passthrough {sni}"),
            || tls_get(at(ports.pass), sni, &backend_ca.pem, None),
            |a| a.as_ref().is_ok_and(|a| a.response.contains(identity)),
        )
        .unwrap();
        assert_eq!(answer.peer, der_of(&bcert), "the backend's own certificate");
    }

    // (e) httpsRedirect: plaintext requests are answered 301 to https.
    let mut last = Err(String::new());
    let redirected = wait_until(CONVERGE_TIMEOUT, || {
        last = http_request(at(ports.http), "GET", "web.example.com", "/x?y=1", &[]);
        last.as_ref().is_ok_and(|r| r.status == 301)
    });
    assert!(redirected, "{:?}", last.map(|r| (r.status, r.text())));
    let r = last.unwrap();
    assert_eq!(
        r.header("location"),
        Some("https://web.example.com/x?y=1"),
        "{:?}",
        r.header("location")
    );

    assert_eq!(router.rejected_updates(), 0, "{}", router.summary());
    let log = meshflow.log();
    assert!(
        !log.contains("PRIVATE KEY"),
        "meshflow logs no key material"
    );
    drop(meshflow);
}

/// Proves that real Envoy accepts the listeners and clusters generated for
/// `examples/gateway-tls` (the golden `tests/golden/gateway-tls.txt`): SNI chains
/// terminating with SDS certificates (SIMPLE with its cipher suites, MUTUAL with the CA's SDS
/// validation context and the clients' names), a passthrough chain, the redirecting HTTP
/// server and the HTTP2 and GRPC servers' routes, checked by `envoy --mode validate` with
/// the Secrets as Envoy parses them.
#[test]
fn envoy_accepts_the_gateway_tls_example() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-tls-validate");
    let router = ProxyNode::router(
        "istio-ingressgateway-abc",
        "istio-system",
        "127.0.0.1",
        &[("istio", "ingressgateway")],
    );
    let listeners = support::envoy_validate::envoy_validates_example(
        &envoy_bin,
        dir.path(),
        "gateway-tls",
        &[(&router, dataflows::model::ProxyKind::Router)],
    );
    let text = serde_json::Value::from(listeners[0].clone()).to_string();
    for part in [
        "kubernetes://bookinfo-credential",
        "kubernetes://bookinfo-credential-cacert",
        "tls_inspector",
        "nginx.example.com",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "client.bookinfo.example.com",
        "http.8081",
        "http.8082",
    ] {
        assert!(text.contains(part), "{part} in {text}");
    }
}
