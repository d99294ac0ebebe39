//! TLS and mutual TLS for the xDS server (rustls). Certificates, keys and the client CA are
//! files, re-read when they change (checked at each handshake, so a rotated certificate
//! applies to the next connection without a restart). A file that fails to load keeps the
//! previous material in effect.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::crypto::{ring, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{
    DigitallySignedStruct, DistinguishedName, Error as TlsError, RootCertStore, ServerConfig,
    SignatureScheme,
};
use tokio_rustls::TlsAcceptor;

/// Where the server's TLS material lives.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Client CA bundle: when given, clients must present a certificate it signed (mTLS).
    pub client_ca: Option<PathBuf>,
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

fn load_certified_key(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("{}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate", cert.display()));
    }
    let key_der =
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    let signing = provider()
        .key_provider
        .load_private_key(key_der)
        .map_err(|e| format!("{}: {e}", key.display()))?;
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

/// Serves the certificate in `files`, reloading it when either file changes.
struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    state: Mutex<(Option<SystemTime>, Option<SystemTime>, Arc<CertifiedKey>)>,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReloadingCert({})", self.cert.display())
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (c, k) = (mtime(&self.cert), mtime(&self.key));
        if (c, k) != (st.0, st.1) {
            match load_certified_key(&self.cert, &self.key) {
                Ok(ck) => {
                    tracing::info!(cert = %self.cert.display(), "serving certificate reloaded");
                    *st = (c, k, ck);
                }
                // Keep serving the previous certificate; files may be mid-rotation.
                Err(e) => {
                    tracing::warn!(error = %e, "certificate reload failed, keeping the previous one")
                }
            }
        }
        Some(st.2.clone())
    }
}

fn load_verifier(ca: &Path) -> Result<Arc<dyn ClientCertVerifier>, String> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))? {
        let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| format!("{}: {e}", ca.display()))
}

/// Verifies client certificates against a CA bundle that is reloaded when it changes.
struct ReloadingVerifier {
    ca: PathBuf,
    state: Mutex<(Option<SystemTime>, Arc<dyn ClientCertVerifier>)>,
}

impl fmt::Debug for ReloadingVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReloadingVerifier({})", self.ca.display())
    }
}

impl ReloadingVerifier {
    fn current(&self) -> Arc<dyn ClientCertVerifier> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let m = mtime(&self.ca);
        if m != st.0 {
            match load_verifier(&self.ca) {
                Ok(v) => {
                    tracing::info!(ca = %self.ca.display(), "client CA reloaded");
                    *st = (m, v);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "client CA reload failed, keeping the previous one")
                }
            }
        }
        st.1.clone()
    }
}

impl ClientCertVerifier for ReloadingVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // Hints are optional; the CA may change under us, so send none.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, TlsError> {
        self.current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current().supported_verify_schemes()
    }
}

/// Builds the TLS acceptor; fails if the files cannot be loaded at start.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let key = load_certified_key(&files.cert, &files.key)?;
    let resolver = Arc::new(ReloadingCert {
        cert: files.cert.clone(),
        key: files.key.clone(),
        state: Mutex::new((mtime(&files.cert), mtime(&files.key), key)),
    });
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let mut config = match &files.client_ca {
        Some(ca) => {
            let verifier = Arc::new(ReloadingVerifier {
                ca: ca.clone(),
                state: Mutex::new((mtime(ca), load_verifier(ca)?)),
            });
            builder
                .with_client_cert_verifier(verifier)
                .with_cert_resolver(resolver)
        }
        None => builder.with_no_client_auth().with_cert_resolver(resolver),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Accepts TCP connections and completes TLS handshakes off the accept loop, yielding the
/// established streams (a failed handshake is logged and dropped).
pub fn incoming(
    listener: tokio::net::TcpListener,
    acceptor: TlsAcceptor,
) -> tokio_stream::wrappers::ReceiverStream<
    Result<tokio_rustls::server::TlsStream<tokio::net::TcpStream>, std::io::Error>,
> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors, say: wait rather than spin, and go on.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let tcp = super::socket::no_delay(tcp);
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let handshake =
                    tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(tcp))
                        .await;
                match handshake {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(tls)).await;
                    }
                    Ok(Err(e)) => tracing::info!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
