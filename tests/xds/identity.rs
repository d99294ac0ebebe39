//! A stream is issued only the identity it authenticated (issue: hardening round 2, N1, N2,
//! N6): protocol-level Delta clients (tonic) against `meshflow serve`, asking SDS for the
//! workload certificate (`default`), the mesh root (`ROOTCA`) and a gateway's
//! `kubernetes://` Secret.
//!
//! - Under mTLS the client certificate's SPIFFE identity binds the node's NAMESPACE and
//!   SERVICE_ACCOUNT; the certificate issued names that identity and no other; a node id
//!   naming a pod of another service account is refused.
//! - With `--token-review` the service-account token each stream sends is checked with the
//!   Kubernetes TokenReview API — here a fake API server that answers TokenReview as the real
//!   one does (`tests/support/fake_kube`), since no API server can run here — audience
//!   included.
//! - Without either, no key material is served (only `ROOTCA`), unless
//!   `--insecure-serve-keys` says so.

use crate::support;

use envoy_types::pb::envoy::config::core::v3::data_source::Specifier;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{secret, Secret};
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use envoy_types::pb::google::protobuf::{value::Kind, Value};
use prost::Message;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use support::fake_kube::FakeKube;
use support::pki::{ca, leaf, Ca};
use support::xds_client::node;
use support::{write_config, Meshflow, TestDir, PROVEN_KEYS_ONLY};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

const SDS: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";
const SERVER_NAME: &str = "meshflow.istio-system.svc";
const CREDENTIAL: &str = "kubernetes://bookinfo-credential";

/// A pod of service account `bookinfo-reviews`, a gateway with a TLS credential, its Secret.
fn mesh_yaml(ca: &Ca) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let (cert, key) = leaf(ca, &["bookinfo.example.com"], None);
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: reviews-v1, namespace: default, labels: {{app: reviews}}}}
spec: {{serviceAccountName: bookinfo-reviews, containers: [{{name: app, image: x}}]}}
status: {{podIP: 10.9.3.5}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: istio-system}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: 443, name: https, protocol: HTTPS}}
    hosts: ['*']
    tls: {{mode: SIMPLE, credentialName: bookinfo-credential}}
---
apiVersion: v1
kind: Secret
metadata: {{name: bookinfo-credential, namespace: istio-system}}
type: kubernetes.io/tls
data:
  tls.crt: {}
  tls.key: {}
",
        b64(&cert),
        b64(&key)
    )
}

/// A node as Istio's agent describes it, with SERVICE_ACCOUNT when given.
fn proxy_node(
    id: &str,
    ns: &str,
    sa: Option<&str>,
    labels: &[(&str, &str)],
) -> envoy_types::pb::envoy::config::core::v3::Node {
    let mut n = node(id, ns, labels);
    if let (Some(sa), Some(meta)) = (sa, n.metadata.as_mut()) {
        meta.fields.insert(
            "SERVICE_ACCOUNT".into(),
            Value {
                kind: Some(Kind::StringValue(sa.into())),
            },
        );
    }
    n
}

fn sidecar_id(pod: &str, ns: &str) -> String {
    format!("sidecar~10.9.3.77~{pod}.{ns}~{ns}.svc.cluster.local")
}

/// Opens a Delta stream, subscribes SDS to `names`, and gathers the Secrets served within
/// a second and a half: name → Secret. The stream's status if refused.
async fn secrets(
    channel: Channel,
    token: Option<&str>,
    n: envoy_types::pb::envoy::config::core::v3::Node,
    names: &[&str],
) -> Result<BTreeMap<String, Secret>, tonic::Status> {
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tx.send(DeltaDiscoveryRequest {
        node: Some(n),
        type_url: SDS.into(),
        resource_names_subscribe: names.iter().map(|s| s.to_string()).collect(),
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
    let mut out = BTreeMap::new();
    let until = tokio::time::Instant::now() + Duration::from_millis(1500);
    while let Ok(msg) = tokio::time::timeout_at(until, stream.message()).await {
        let Some(resp) = msg? else { break };
        for r in &resp.resources {
            let body = r.resource.as_ref().expect("a body");
            out.insert(
                r.name.clone(),
                Secret::decode(&*body.value).expect("a Secret"),
            );
        }
        tx.send(DeltaDiscoveryRequest {
            type_url: resp.type_url.clone(),
            response_nonce: resp.nonce.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    Ok(out)
}

/// The URI SANs of a `default` Secret's certificate, and whether it carries a key.
fn issued(s: &Secret) -> (Vec<String>, bool) {
    let Some(secret::Type::TlsCertificate(c)) = &s.r#type else {
        panic!("not a certificate: {s:?}");
    };
    let text = |d: &Option<envoy_types::pb::envoy::config::core::v3::DataSource>| match d
        .as_ref()
        .and_then(|d| d.specifier.clone())
    {
        Some(Specifier::InlineString(s)) => s,
        other => panic!("not inline: {other:?}"),
    };
    let der = support::pki::der_of(&text(&c.certificate_chain));
    let (_, x) = x509_parser::parse_x509_certificate(&der).unwrap();
    let uris = x
        .subject_alternative_name()
        .unwrap()
        .map(|s| {
            s.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::URI(u) => Some(u.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    (uris, text(&c.private_key).contains("PRIVATE KEY"))
}

async fn plain(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect")
}

async fn mtls(addr: SocketAddr, ca: &Ca, spiffe: &str) -> Channel {
    let (cert, key) = leaf(ca, &[], Some(spiffe));
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .domain_name(SERVER_NAME)
        .identity(Identity::from_pem(cert, key));
    Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("connect over mTLS")
}

fn write(dir: &Path, name: &str, content: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p.display().to_string()
}

/// N2: a stream that proved nothing claims `prod/admin`, then the ingress gateway: it is
/// served the public root and nothing else — no certificate, no key, no gateway Secret. The
/// same claims under `--insecure-serve-keys` are served both (what the flag says it does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_proves_no_identity_gets_no_key_material() {
    let dir = TestDir::new("xds-identity-none");
    let config = dir.subdir("config");
    let test_ca = ca("identity test CA");
    write_config(&config, "mesh.yaml", &mesh_yaml(&test_ca));
    let admin = || proxy_node(&sidecar_id("x", "prod"), "prod", Some("admin"), &[]);
    let router = || {
        node(
            "router~10.9.3.9~ingress-1.istio-system~istio-system.svc.cluster.local",
            "istio-system",
            &[("istio", "ingressgateway")],
        )
    };

    let strict = Meshflow::start_with_args(&config, dir.path(), &[PROVEN_KEYS_ONLY]);
    let got = secrets(
        plain(strict.xds_addr()).await,
        None,
        admin(),
        &["default", "ROOTCA"],
    )
    .await
    .expect("served");
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        ["ROOTCA"],
        "only the public root"
    );
    let got = secrets(
        plain(strict.xds_addr()).await,
        None,
        router(),
        &[CREDENTIAL, "ROOTCA"],
    )
    .await
    .expect("served");
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        ["ROOTCA"],
        "no gateway Secret"
    );
    drop(strict);

    let insecure = Meshflow::start_with_args(&config, dir.path(), &["--insecure-serve-keys"]);
    let got = secrets(
        plain(insecure.xds_addr()).await,
        None,
        admin(),
        &["default"],
    )
    .await
    .expect("served");
    let (uris, key) = issued(&got["default"]);
    assert_eq!(uris, ["spiffe://cluster.local/ns/prod/sa/admin"]);
    assert!(key, "the flag serves keys on claims alone");
    let got = secrets(
        plain(insecure.xds_addr()).await,
        None,
        router(),
        &[CREDENTIAL],
    )
    .await
    .expect("served");
    assert!(got.contains_key(CREDENTIAL), "{:?}", got.keys());
}

/// N1 and N6 under mTLS: the certificate `ns/default/sa/sleep` may not claim
/// SERVICE_ACCOUNT `reviews` (PERMISSION_DENIED), is issued a certificate of `sa/sleep`
/// whether it repeats its account or leaves it out, may not use the node id of pod
/// `reviews-v1` (service account `bookinfo-reviews`), which that pod's own identity may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_binds_namespace_service_account_and_node_id() {
    let dir = TestDir::new("xds-identity-mtls");
    let config = dir.subdir("config");
    let pki = dir.subdir("pki");
    let test_ca = ca("identity test CA");
    write_config(&config, "mesh.yaml", &mesh_yaml(&test_ca));
    let ca_file = write(&pki, "ca.pem", &test_ca.pem);
    let (cert, key) = leaf(&test_ca, &[SERVER_NAME], None);
    let cert_file = write(&pki, "server.pem", &cert);
    let key_file = write(&pki, "server.key", &key);
    let meshflow = Meshflow::start_with_args(
        &config,
        dir.path(),
        &[
            "--tls-cert",
            &cert_file,
            "--tls-key",
            &key_file,
            "--tls-client-ca",
            &ca_file,
        ],
    );
    let addr = meshflow.xds_addr();
    let sleep = "spiffe://cluster.local/ns/default/sa/sleep";

    let claim_reviews = proxy_node(
        &sidecar_id("sleep-1", "default"),
        "default",
        Some("reviews"),
        &[],
    );
    let err = secrets(
        mtls(addr, &test_ca, sleep).await,
        None,
        claim_reviews,
        &["default"],
    )
    .await
    .expect_err("another account's claim is refused");
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    assert!(
        err.message().contains("reviews") && err.message().contains("sa/sleep"),
        "{}",
        err.message()
    );

    for claimed in [None, Some("sleep")] {
        let n = proxy_node(&sidecar_id("sleep-1", "default"), "default", claimed, &[]);
        let got = secrets(mtls(addr, &test_ca, sleep).await, None, n, &["default"])
            .await
            .expect("its own identity is served");
        let (uris, key) = issued(&got["default"]);
        assert_eq!(uris, [sleep], "claimed {claimed:?}");
        assert!(key);
    }

    let squat = proxy_node(&sidecar_id("reviews-v1", "default"), "default", None, &[]);
    let err = secrets(
        mtls(addr, &test_ca, sleep).await,
        None,
        squat.clone(),
        &["default"],
    )
    .await
    .expect_err("a pod of another account's node id is refused");
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    assert!(
        err.message().contains("default/bookinfo-reviews"),
        "{}",
        err.message()
    );
    let reviews = "spiffe://cluster.local/ns/default/sa/bookinfo-reviews";
    let got = secrets(
        mtls(addr, &test_ca, reviews).await,
        None,
        squat,
        &["default"],
    )
    .await
    .expect("the pod's own identity may use its node id");
    assert_eq!(issued(&got["default"]).0, [reviews]);
}

/// `--token-review`: the token proves `default/sleep` for audience `istio-ca`; the issued
/// certificate is that identity's; a claim of another account is refused; a token of
/// another audience, an unknown token and none at all are UNAUTHENTICATED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens_are_reviewed_with_their_audience() {
    let dir = TestDir::new("xds-identity-token");
    let fake = FakeKube::start();
    let test_ca = ca("identity test CA");
    fake.apply_yaml(&mesh_yaml(&test_ca));
    fake.add_sa_token("tok-sleep", "default", "sleep", &["istio-ca"]);
    fake.add_sa_token(
        "tok-api",
        "default",
        "sleep",
        &["https://kubernetes.default.svc"],
    );
    let kubeconfig = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig);
    let meshflow = Meshflow::start_kube(&kubeconfig, dir.path(), &["--token-review"]);
    let addr = meshflow.xds_addr();
    let sleep = || proxy_node(&sidecar_id("sleep-1", "default"), "default", None, &[]);

    let got = secrets(plain(addr).await, Some("tok-sleep"), sleep(), &["default"])
        .await
        .expect("a reviewed token is served");
    assert_eq!(
        issued(&got["default"]).0,
        ["spiffe://cluster.local/ns/default/sa/sleep"]
    );
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.starts_with("POST /apis/authentication.k8s.io/v1/tokenreviews")),
        "reviewed by the API server"
    );

    let claim = proxy_node(
        &sidecar_id("sleep-1", "default"),
        "default",
        Some("reviews"),
        &[],
    );
    let err = secrets(plain(addr).await, Some("tok-sleep"), claim, &["default"])
        .await
        .expect_err("another account refused");
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    let other_ns = proxy_node(&sidecar_id("x", "prod"), "prod", None, &[]);
    let err = secrets(plain(addr).await, Some("tok-sleep"), other_ns, &["default"])
        .await
        .expect_err("another namespace refused");
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");

    for token in [Some("tok-api"), Some("guess"), None] {
        let err = secrets(plain(addr).await, token, sleep(), &["default"])
            .await
            .expect_err("not authenticated");
        assert_eq!(
            err.code(),
            tonic::Code::Unauthenticated,
            "{token:?}: {err:?}"
        );
    }
}

/// Certificates are short-lived and renewed: with `--workload-cert-ttl 4s` a stream holding
/// `default` is pushed a new certificate (another key, a later expiry) about every 2 s,
/// without asking, and each expires no later than 4 s after it was issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_certificates_are_short_lived_and_renewed() {
    let dir = TestDir::new("xds-identity-rotation");
    let config = dir.subdir("config");
    let test_ca = ca("identity test CA");
    write_config(&config, "mesh.yaml", &mesh_yaml(&test_ca));
    let meshflow = Meshflow::start_with_args(&config, dir.path(), &["--workload-cert-ttl", "4s"]);
    let mut client = AggregatedDiscoveryServiceClient::new(plain(meshflow.xds_addr()).await);
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tx.send(DeltaDiscoveryRequest {
        node: Some(proxy_node(
            &sidecar_id("sleep-1", "default"),
            "default",
            Some("sleep"),
            &[],
        )),
        type_url: SDS.into(),
        resource_names_subscribe: vec!["default".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut stream = client
        .delta_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut certs: Vec<(String, i64)> = Vec::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(8);
    while certs.len() < 3 {
        let Ok(msg) = tokio::time::timeout_at(until, stream.message()).await else {
            break;
        };
        let resp = msg.expect("stream").expect("open");
        for r in &resp.resources {
            let s = Secret::decode(&*r.resource.as_ref().unwrap().value).unwrap();
            let Some(secret::Type::TlsCertificate(c)) = &s.r#type else {
                continue;
            };
            let Some(Specifier::InlineString(pem)) = c
                .certificate_chain
                .as_ref()
                .and_then(|d| d.specifier.clone())
            else {
                continue;
            };
            let der = support::pki::der_of(&pem);
            let (_, x) = x509_parser::parse_x509_certificate(&der).unwrap();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64;
            let expires = x.validity().not_after.timestamp();
            assert!(
                expires <= now + 5,
                "valid for the ttl only: expires in {} s",
                expires - now
            );
            certs.push((pem.clone(), expires));
        }
        tx.send(DeltaDiscoveryRequest {
            type_url: resp.type_url.clone(),
            response_nonce: resp.nonce.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    assert!(
        certs.len() >= 3,
        "renewed twice within 8 s: {} certificates",
        certs.len()
    );
    assert_ne!(certs[0].0, certs[1].0);
    assert_ne!(certs[1].0, certs[2].0);
    assert!(certs[2].1 > certs[0].1, "later expiry");
}
