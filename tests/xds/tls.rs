//! The xDS port over TLS and mutual TLS: client certificates are checked against the client
//! CA and their SPIFFE identity against the namespace each proxy claims; a bearer token file
//! is enforced; certificates are reloaded when their files change. Protocol-level tests use
//! tonic clients; one test puts a real Envoy on mTLS.

use crate::support;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::pki::{ca, leaf, Ca};
use support::xds_client::{node, CDS, LDS};
use support::{
    require_envoy, write_config, Envoy, Meshflow, ProxyNode, TestDir, XdsMode, STARTUP_TIMEOUT,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

const SERVER_NAME: &str = "meshflow.istio-system.svc";

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

struct Pki {
    dir: PathBuf,
    ca: Ca,
}

impl Pki {
    fn new(dir: PathBuf) -> Pki {
        std::fs::create_dir_all(&dir).unwrap();
        let ca = ca("meshflow test CA");
        write(&dir, "ca.pem", &ca.pem);
        let (cert, key) = leaf(&ca, &[SERVER_NAME], None);
        write(&dir, "server.pem", &cert);
        write(&dir, "server.key", &key);
        write(&dir, "token", "s3cret\n");
        Pki { dir, ca }
    }

    fn args(&self) -> Vec<String> {
        let p = |n: &str| self.dir.join(n).display().to_string();
        vec![
            "--tls-cert".into(),
            p("server.pem"),
            "--tls-key".into(),
            p("server.key"),
            "--tls-client-ca".into(),
            p("ca.pem"),
            "--token-file".into(),
            p("token"),
        ]
    }

    fn client(&self, ns: &str) -> (String, String) {
        leaf(
            &self.ca,
            &[],
            Some(&format!("spiffe://cluster.local/ns/{ns}/sa/client")),
        )
    }
}

fn start(dir: &TestDir, pki: &Pki) -> Meshflow {
    let config = dir.subdir("config");
    write_config(&config, "svc.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: default}\nspec:\n  ports: [{name: http, port: 9080}]\n");
    let args = pki.args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Meshflow::start_with_args(&config, dir.path(), &args)
}

async fn channel(
    addr: SocketAddr,
    ca_pem: &str,
    identity: Option<(String, String)>,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name(SERVER_NAME);
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await
}

/// Opens a Delta stream as `node_ns` and returns the first response or the status.
async fn first_response(
    channel: Channel,
    token: Option<&str>,
    node_ns: &str,
) -> Result<String, tonic::Status> {
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(DeltaDiscoveryRequest {
        node: Some(node(
            &format!("sidecar~10.9.3.1~p.{node_ns}~{node_ns}.svc.cluster.local"),
            node_ns,
            &[],
        )),
        type_url: CDS.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut req = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    if let Some(t) = token {
        req.metadata_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    let mut stream = client.delta_aggregated_resources(req).await?.into_inner();
    let msg = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("answered")?;
    Ok(msg.map(|m| m.type_url).unwrap_or_default())
}

/// The right certificate and token get config; a missing or wrong token is UNAUTHENTICATED;
/// a certificate for another namespace is PERMISSION_DENIED; no client certificate fails the
/// handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_identity_and_token_are_enforced() {
    let dir = TestDir::new("xds-tls");
    let pki = Pki::new(dir.subdir("pki"));
    let meshflow = start(&dir, &pki);
    let addr = meshflow.xds_addr();

    let ok = first_response(
        channel(addr, &pki.ca.pem, Some(pki.client("default")))
            .await
            .unwrap(),
        Some("s3cret"),
        "default",
    )
    .await;
    assert_eq!(ok.unwrap(), CDS);

    let no_token = first_response(
        channel(addr, &pki.ca.pem, Some(pki.client("default")))
            .await
            .unwrap(),
        None,
        "default",
    )
    .await;
    assert_eq!(no_token.unwrap_err().code(), tonic::Code::Unauthenticated);
    let bad_token = first_response(
        channel(addr, &pki.ca.pem, Some(pki.client("default")))
            .await
            .unwrap(),
        Some("guess"),
        "default",
    )
    .await;
    assert_eq!(bad_token.unwrap_err().code(), tonic::Code::Unauthenticated);

    let other_ns = first_response(
        channel(addr, &pki.ca.pem, Some(pki.client("other")))
            .await
            .unwrap(),
        Some("s3cret"),
        "default",
    )
    .await;
    let err = other_ns.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied);
    assert!(
        err.message()
            .contains("spiffe://cluster.local/ns/other/sa/client"),
        "{}",
        err.message()
    );

    let foreign_ca = ca("someone else");
    let foreign = first_response_or_transport_error(
        addr,
        &pki.ca.pem,
        Some(leaf(
            &foreign_ca,
            &[],
            Some("spiffe://cluster.local/ns/default/sa/x"),
        )),
    )
    .await;
    assert!(foreign.is_err(), "a certificate from another CA is refused");
    let anonymous = first_response_or_transport_error(addr, &pki.ca.pem, None).await;
    assert!(anonymous.is_err(), "no client certificate is refused");
}

async fn first_response_or_transport_error(
    addr: SocketAddr,
    ca_pem: &str,
    id: Option<(String, String)>,
) -> Result<String, String> {
    match channel(addr, ca_pem, id).await {
        Err(e) => Err(e.to_string()),
        Ok(ch) => first_response(ch, Some("s3cret"), "default")
            .await
            .map_err(|s| s.to_string()),
    }
}

/// Rotating the serving certificate and the client CA on disk takes effect for new
/// connections without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_reload_when_files_change() {
    let dir = TestDir::new("xds-tls-reload");
    let pki = Pki::new(dir.subdir("pki"));
    let meshflow = start(&dir, &pki);
    let addr = meshflow.xds_addr();
    assert!(first_response(
        channel(addr, &pki.ca.pem, Some(pki.client("default")))
            .await
            .unwrap(),
        Some("s3cret"),
        "default"
    )
    .await
    .is_ok());

    // A new CA issues the server certificate and is the only client CA from now on.
    let ca2 = ca("meshflow test CA 2");
    let (cert, key) = leaf(&ca2, &[SERVER_NAME], None);
    std::thread::sleep(Duration::from_millis(20)); // a distinct mtime
    write(&pki.dir, "server.key", &key);
    write(&pki.dir, "server.pem", &cert);
    write(&pki.dir, "ca.pem", &ca2.pem);
    let client2 = leaf(
        &ca2,
        &[],
        Some("spiffe://cluster.local/ns/default/sa/client"),
    );
    let new = first_response(
        channel(addr, &ca2.pem, Some(client2)).await.unwrap(),
        Some("s3cret"),
        "default",
    )
    .await;
    assert_eq!(new.unwrap(), CDS, "clients of the new CA are served");
    let old =
        first_response_or_transport_error(addr, &pki.ca.pem, Some(pki.client("default"))).await;
    assert!(
        old.is_err(),
        "clients trusting only the old CA no longer connect"
    );
}

/// A real Envoy on mTLS with a SPIFFE certificate and bearer token (as istio-agent would
/// configure it) receives its config; one whose certificate names another namespace is
/// refused and receives nothing.
#[test]
fn envoy_over_mtls_gets_config_and_impostor_gets_none() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-tls");
    let pki = Pki::new(dir.subdir("pki"));
    let meshflow = start(&dir, &pki);
    let tls_for = |ns: &str, name: &str| {
        let (cert, key) = pki.client(ns);
        let c = write(&pki.dir, &format!("{name}.pem"), &cert);
        let k = write(&pki.dir, &format!("{name}.key"), &key);
        let ca = pki.dir.join("ca.pem");
        move |b: &mut serde_json::Value| {
            b["static_resources"]["clusters"][0]["transport_socket"] = serde_json::json!({
                "name": "envoy.transport_sockets.tls",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                    "sni": SERVER_NAME,
                    "common_tls_context": {
                        "alpn_protocols": ["h2"],
                        "tls_certificates": [{"certificate_chain": {"filename": c}, "private_key": {"filename": k}}],
                        "validation_context": {"trusted_ca": {"filename": ca}},
                    },
                },
            });
            b["dynamic_resources"]["ads_config"]["grpc_services"][0]["initial_metadata"] =
                serde_json::json!([{"key": "authorization", "value": "Bearer s3cret"}]);
        }
    };
    let node = ProxyNode::sidecar("client-ok", "default", "127.0.48.20", &[("app", "client")]);
    let envoy = Envoy::start_customized(
        &envoy_bin,
        dir.path(),
        &node,
        meshflow.xds_addr(),
        XdsMode::Delta,
        tls_for("default", "ok"),
    );
    envoy.wait_live(STARTUP_TIMEOUT);
    assert!(
        envoy
            .cluster_names()
            .iter()
            .any(|c| c == "outbound|9080||reviews.default.svc.cluster.local"),
        "{:?}",
        envoy.cluster_names()
    );

    let impostor = ProxyNode::sidecar("client-bad", "default", "127.0.48.21", &[("app", "client")]);
    let bad = Envoy::start_customized(
        &envoy_bin,
        dir.path(),
        &impostor,
        meshflow.xds_addr(),
        XdsMode::Delta,
        tls_for("other", "bad"),
    );
    assert!(
        support::wait_until(Duration::from_secs(10), || meshflow
            .log()
            .contains("claims namespace \"default\", but its client certificate")),
        "the impostor is refused"
    );
    assert_eq!(
        bad.stat("cluster_manager.cds.update_success").unwrap_or(0),
        0,
        "the impostor got no clusters"
    );
    let _ = (HashMap::<(), ()>::new(), LDS);
}
