//! Istio's auto mTLS between meshflow sidecars, with no DestinationRule at all: `reviews` has
//! a pod that runs a sidecar (labelled `security.istio.io/tlsMode: istio`, as Istio's
//! injector labels it) and one that does not. The client sidecar's cluster for `reviews`
//! speaks the mesh's mutual TLS (its workload certificate, the server verified against
//! `ROOTCA` and pinned to the service's accounts) to the first — whose sidecar terminates it
//! and passes the client's identity to the application in `x-forwarded-client-cert` — and
//! plaintext to the second, which has no sidecar to terminate TLS. Real Envoy, loopback
//! only.

use crate::support;

use std::net::SocketAddr;

use support::reviews::{client_sidecar_yaml, Reviews};
use support::{
    converge, free_port, http_request, require_envoy, write_config, Backend, Meshflow, TestDir,
    XdsMode, CONVERGE_TIMEOUT,
};

const NET: u8 = 98;

#[test]
fn auto_mtls_to_sidecars_and_plaintext_to_the_rest() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-auto-mtls");
    let config = dir.subdir("config");

    // `reviews` on port `port`: pod `reviews-v1` runs a sidecar (its ingress listener binds
    // the pod's address and hands requests to the application on 127.0.0.1:<app_port>);
    // pod `reviews-v2` is a plain backend on its own address.
    let port = free_port();
    let reviews = Reviews::new(NET, port, &config);
    let app_port = free_port();
    let _app = Backend::start("127.0.0.1", app_port, "reviews-app");
    let _plain = reviews.start_backend("v2");
    reviews.write_service();
    reviews.write_pods_labelled(&[("v1", "security.istio.io/tlsMode: istio"), ("v2", "")]);
    reviews.write_endpoints(&["v1", "v2"]);
    write_config(&config, "sidecar.yaml", &client_sidecar_yaml(port));
    write_config(
        &config,
        "server-sidecar.yaml",
        &reviews.server_sidecar_yaml(app_port, ""),
    );
    let meshflow = Meshflow::start(&config, dir.path());
    let (bin, xds) = (envoy_bin.as_path(), meshflow.xds_addr());
    let server = reviews.server_sidecar(bin, dir.path(), xds, XdsMode::Delta);
    let client = reviews.client_sidecar(bin, dir.path(), xds, XdsMode::Delta, port);

    // Each answer's body and the client identity it was given, if any.
    let listener = SocketAddr::from(([127, 0, 0, 1], port));
    let answers = || {
        (0..12)
            .map(
                |_| match http_request(listener, "GET", "reviews", "/", &[]) {
                    Ok(r) if r.status == 200 => (
                        r.text(),
                        r.header("x-echo-x-forwarded-client-cert")
                            .map(str::to_string),
                    ),
                    Ok(r) => (format!("status {}", r.status), None),
                    Err(e) => (e, None),
                },
            )
            .collect::<Vec<_>>()
    };
    let seen = converge(
        "both pods answer, the sidecar's over mTLS",
        CONVERGE_TIMEOUT,
        answers,
        |a| {
            a.iter()
                .all(|(body, _)| body == "reviews-app" || body == "reviews-v2")
                && a.iter().any(|(body, _)| body == "reviews-app")
                && a.iter().any(|(body, _)| body == "reviews-v2")
        },
        || format!("{}\n{}", client.summary(), server.summary()),
    );
    for (body, xfcc) in &seen {
        match body.as_str() {
            // Through the server's sidecar: the client's workload identity came with it.
            "reviews-app" => {
                let xfcc = xfcc.as_deref().unwrap_or_default();
                assert!(
                    xfcc.contains("URI=spiffe://cluster.local/ns/default/sa/sleep"),
                    "{xfcc:?}"
                );
            }
            // Straight to the plain pod: no TLS, so no client certificate to speak of.
            _ => assert_eq!(xfcc, &None, "{body}"),
        }
    }
    let handshakes = server.listener_tls_handshakes();
    assert!(handshakes >= 1, "{:?}", server.stats(Some("ssl")));
    // The client's cluster chose its sockets by the endpoints' metadata.
    let clusters = client.admin_get("/config_dump?resource=dynamic_active_clusters");
    assert!(clusters.contains("tlsMode-istio"), "{clusters}");
    assert_eq!(client.rejected_updates(), 0, "{}", client.summary());
    assert_eq!(server.rejected_updates(), 0, "{}", server.summary());
}
