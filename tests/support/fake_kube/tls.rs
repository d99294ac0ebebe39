//! The fake API server's TLS: a self-signed certificate for `127.0.0.1` (rcgen), served with
//! rustls, so the kube client's HTTPS path (what an in-cluster meshflow uses) is the one
//! under test; the kubeconfig trusts it through `certificate-authority`.

use std::sync::Arc;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

/// The acceptor, and the certificate's PEM for clients to trust.
pub fn self_signed() -> (TlsAcceptor, String) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())
        .unwrap_or_else(|e| panic!("certificate params: {e}"));
    params.subject_alt_names.push(rcgen::SanType::IpAddress(
        std::net::Ipv4Addr::LOCALHOST.into(),
    ));
    let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("a key pair: {e}"));
    let cert = params
        .self_signed(&key)
        .unwrap_or_else(|e| panic!("a self-signed certificate: {e}"));
    let chain = vec![CertificateDer::from(cert.der().to_vec())];
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap_or_else(|e| panic!("TLS versions: {e}"))
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .unwrap_or_else(|e| panic!("the server certificate: {e}"));
    (TlsAcceptor::from(Arc::new(config)), cert.pem())
}
