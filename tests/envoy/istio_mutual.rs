//! Mesh mTLS between two meshflow sidecars, as Istio's `ISTIO_MUTUAL`: the client sidecar's
//! cluster for `reviews` speaks TLS with its workload certificate (SDS `default`, issued by
//! meshflow's CA for `spiffe://cluster.local/ns/default/sa/sleep`), verifying the server
//! against SDS `ROOTCA`; the server sidecar (pod `reviews-v1`, no traffic capture) accepts it
//! on the inbound listener of its Sidecar `ingress` with its own workload certificate and
//! passes the client's identity to the application in `x-forwarded-client-cert`. The CA is
//! plugged in (`--ca-cert`/`--ca-key`), so the test can also hold certificates of its own:
//! a client presenting none, or one of another CA, is refused by the server's listener; one
//! the mesh's CA signed is served. A rule naming an identity the server does not have is
//! refused by the client, and so is a server whose certificate names another service
//! account than the service's pods run as (Istio's pinning of servers to the service's
//! accounts). Real Envoy, loopback only.

use crate::support;

use std::net::SocketAddr;

use support::pki::{ca, leaf};
use support::reviews::{client_sidecar_yaml, count, Reviews};
use support::tls_client::tls_get;
use support::{
    converge, debug_json, free_port, http_request, require_envoy, write_config, Backend, Envoy,
    Meshflow, ProxyNode, TestDir, XdsMode, CONVERGE_TIMEOUT, STARTUP_TIMEOUT,
};

const NET: u8 = 61;

/// TLS with Istio's ALPN to `addr`, presenting `client` if given, `GET /`: the answer
/// (status line, headers, body) or why it failed.
fn mesh_tls_get(addr: SocketAddr, client: Option<(&str, &str)>) -> Result<String, String> {
    tls_get(
        addr,
        "reviews.default.svc.cluster.local",
        &["istio"],
        client,
    )
    .map(|(a, _)| a)
}

#[test]
fn istio_mutual_between_two_sidecars() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-istio-mutual");
    let config = dir.subdir("config");
    let pki = dir.subdir("pki");
    let mesh_ca = ca("mesh CA");
    let other_ca = ca("another CA");
    std::fs::write(pki.join("ca-cert.pem"), &mesh_ca.pem).expect("write CA");
    std::fs::write(pki.join("ca-key.pem"), mesh_ca.key_pem()).expect("write CA key");

    // `reviews` on port `port`; its one pod `reviews-v1` at 127.0.61.11:<target> is where the
    // server sidecar's ingress listener binds, handing requests to the application on
    // 127.0.0.1:<app_port>.
    let port = free_port();
    let reviews = Reviews::new(NET, port, &config);
    let app_port = free_port();
    let app = Backend::start("127.0.0.1", app_port, "reviews-app");
    reviews.write_service();
    reviews.write_pods(&["v1"]);
    reviews.write_endpoints(&["v1"]);
    reviews.write_destination_rule_with_policy(
        &["v1"],
        "  trafficPolicy:\n    tls: {mode: ISTIO_MUTUAL}\n",
    );
    write_config(&config, "sidecar.yaml", &client_sidecar_yaml(port));
    let pod_ip = reviews.pod_ip("v1");
    let target = reviews.backend_port();
    write_config(
        &config,
        "server-sidecar.yaml",
        &reviews.server_sidecar_yaml(app_port, ""),
    );
    let ca_cert = pki.join("ca-cert.pem").display().to_string();
    let ca_key = pki.join("ca-key.pem").display().to_string();
    let debug = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let meshflow = Meshflow::start_with_args(
        &config,
        dir.path(),
        &[
            "--ca-cert",
            &ca_cert,
            "--ca-key",
            &ca_key,
            "--debug-addr",
            &debug.to_string(),
        ],
    );
    let with_sa = |sa: &'static str| {
        move |b: &mut serde_json::Value| {
            b["node"]["metadata"]["SERVICE_ACCOUNT"] = serde_json::json!(sa);
        }
    };
    let server_node = ProxyNode::sidecar(
        "reviews-v1",
        "default",
        &pod_ip,
        &[("app", "reviews"), ("version", "v1")],
    );
    let server = Envoy::start_customized(
        &envoy_bin,
        dir.path(),
        &server_node,
        meshflow.xds_addr(),
        XdsMode::Delta,
        with_sa("reviews"),
    );
    server.wait_live(STARTUP_TIMEOUT);
    let inbound = format!("inbound_{pod_ip}_{target}");
    server.await_listener(&inbound);
    let client_node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    );
    let client = Envoy::start_customized(
        &envoy_bin,
        dir.path(),
        &client_node,
        meshflow.xds_addr(),
        XdsMode::Sotw,
        with_sa("sleep"),
    );
    client.wait_live(STARTUP_TIMEOUT);
    client.await_listener(&format!("127.0.0.1_{port}"));

    let listener = SocketAddr::from(([127, 0, 0, 1], port));
    let get = || {
        http_request(listener, "GET", "reviews", "/", &[]).map(|r| {
            (
                r.status,
                r.text(),
                r.header("x-echo-x-forwarded-client-cert")
                    .map(str::to_string),
            )
        })
    };
    let answers = || {
        let mut counts = std::collections::HashMap::new();
        for _ in 0..5 {
            let key = match get() {
                Ok((200, body, _)) => body,
                Ok((status, ..)) => format!("status {status}"),
                Err(e) => e,
            };
            *counts.entry(key).or_insert(0usize) += 1;
        }
        counts
    };

    // 1. Through the client sidecar: mTLS to the server's inbound listener, which passes the
    //    client's SPIFFE identity on.
    converge(
        "the client reaches the application over mTLS",
        CONVERGE_TIMEOUT,
        answers,
        |c| count(c, "reviews-app") == 5,
        || format!("{}\n{}", client.summary(), server.summary()),
    );
    let (status, _, xfcc) = get().expect("GET through the client sidecar");
    assert_eq!(status, 200);
    let xfcc = xfcc.expect("x-forwarded-client-cert reached the application");
    assert!(
        xfcc.contains("URI=spiffe://cluster.local/ns/default/sa/sleep"),
        "{xfcc}"
    );
    assert!(
        xfcc.contains("By=spiffe://cluster.local/ns/default/sa/reviews"),
        "{xfcc}"
    );
    let handshakes = server.listener_tls_handshakes();
    assert!(handshakes >= 1, "{:?}", server.stats(Some("ssl")));
    assert_eq!(client.rejected_updates(), 0, "{}", client.summary());
    assert_eq!(server.rejected_updates(), 0, "{}", server.summary());

    // The certificates issued went to the proxies only: the debug port shows the stand-in
    // (the identity), the history and the log no key.
    for proxy in [&client_node.id, &server_node.id] {
        let dump = debug_json(debug, &format!("/debug/config_dump?proxy={proxy}")).to_string();
        assert!(dump.contains("ROOTCA"), "{dump}");
        assert!(
            dump.contains("spiffe://cluster.local/ns/default/sa/"),
            "{dump}"
        );
        assert!(!dump.contains("PRIVATE KEY"), "the dump shows a key");
        let history = debug_json(debug, &format!("/debug/diff?proxy={proxy}")).to_string();
        assert!(!history.contains("PRIVATE KEY"), "the history shows a key");
    }
    assert!(
        !meshflow.log().contains("PRIVATE KEY"),
        "the log shows a key"
    );

    // 2. Straight to the server's inbound listener with Istio's ALPN: no client certificate,
    //    or one of another CA, is refused; one the mesh's CA signed is served, its identity
    //    passed on.
    let inbound_addr: SocketAddr = format!("{pod_ip}:{target}").parse().expect("address");
    let served = app.requests_served();
    assert!(
        mesh_tls_get(inbound_addr, None).is_err(),
        "no client certificate is refused"
    );
    let (other_cert, other_key) = leaf(
        &other_ca,
        &[],
        Some("spiffe://cluster.local/ns/default/sa/intruder"),
    );
    assert!(
        mesh_tls_get(inbound_addr, Some((&other_cert, &other_key))).is_err(),
        "a certificate of another CA is refused"
    );
    assert_eq!(
        app.requests_served(),
        served,
        "nothing reached the application"
    );
    let (mesh_cert, mesh_key) = leaf(
        &mesh_ca,
        &[],
        Some("spiffe://cluster.local/ns/default/sa/tester"),
    );
    let answer = mesh_tls_get(inbound_addr, Some((&mesh_cert, &mesh_key)))
        .expect("a certificate of the mesh's CA is served");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("URI=spiffe://cluster.local/ns/default/sa/tester"),
        "{answer}"
    );

    // 3. A rule that expects another identity of the server: the client refuses the
    //    handshake, nothing reaches the application.
    reviews.write_destination_rule_with_policy(
        &["v1"],
        "  trafficPolicy:\n    tls: {mode: ISTIO_MUTUAL, subjectAltNames: [spiffe://cluster.local/ns/default/sa/other]}\n",
    );
    converge(
        "a server identity the rule does not name is refused",
        CONVERGE_TIMEOUT,
        answers,
        |c| count(c, "reviews-app") == 0,
        || client.summary(),
    );
    let served = app.requests_served();
    let counts = answers();
    assert_eq!(count(&counts, "reviews-app"), 0, "{counts:?}");
    assert_eq!(app.requests_served(), served);
    assert_eq!(client.rejected_updates(), 0, "{}", client.summary());

    // 4. Back to the rule's default (the service accounts of the service's pods, here
    //    `reviews`, which the server runs as): served again.
    reviews.write_destination_rule_with_policy(
        &["v1"],
        "  trafficPolicy:\n    tls: {mode: ISTIO_MUTUAL}\n",
    );
    converge(
        "served again",
        CONVERGE_TIMEOUT,
        answers,
        |c| count(c, "reviews-app") == 5,
        || client.summary(),
    );
    let dump = debug_json(
        debug,
        &format!("/debug/config_dump?proxy={}", client_node.id),
    );
    assert!(
        dump.to_string()
            .contains("spiffe://cluster.local/ns/default/sa/reviews"),
        "the client pins the service's account: {dump}"
    );

    // 5. The pod now runs as another service account than the server's certificate names:
    //    the client, pinned to the pods' accounts, refuses the server, as Istio's would.
    reviews.write_pods_as(&["v1"], "ratings");
    converge(
        "a server running as an account the service's pods do not is refused",
        CONVERGE_TIMEOUT,
        answers,
        |c| count(c, "reviews-app") == 0,
        || client.summary(),
    );
    reviews.write_pods_as(&["v1"], "reviews");
    converge(
        "served once the pod's account is the server's again",
        CONVERGE_TIMEOUT,
        answers,
        |c| count(c, "reviews-app") == 5,
        || client.summary(),
    );
    assert_eq!(client.rejected_updates(), 0, "{}", client.summary());
    drop(meshflow);
}

/// `examples/istio-mutual` (the goldens `tests/golden/istio-mutual-*.txt`), for captured
/// sidecars here: the `ISTIO_MUTUAL` clusters, `virtualInbound` with the TLS inspector and
/// each port's mTLS chain, and the Sidecar `ingress` listener, checked by
/// `envoy --mode validate`.
#[test]
fn envoy_accepts_the_istio_mutual_example() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-istio-mutual-validate");
    let sleep = ProxyNode::sidecar("sleep-abc", "default", "127.0.0.20", &[("app", "sleep")]);
    let reviews = ProxyNode::sidecar(
        "reviews-v1-abc",
        "default",
        "127.0.0.11",
        &[("app", "reviews"), ("version", "v1")],
    );
    let listeners = support::envoy_validate::envoy_validates_example(
        &envoy_bin,
        dir.path(),
        "istio-mutual",
        &[
            (&sleep, dataflows::model::ProxyKind::Sidecar),
            (&reviews, dataflows::model::ProxyKind::Sidecar),
        ],
    );
    let text = serde_json::Value::from(listeners[1].clone()).to_string();
    for part in [
        "virtualInbound",
        "inbound_127.0.0.11_9080",
        "tls_inspector",
        "istio-peer-exchange",
        "ROOTCA",
        "require_client_certificate",
    ] {
        assert!(text.contains(part), "{part} in {text}");
    }
}
