//! A TLS client for tests: it trusts any server certificate (tests that check what a server
//! *accepts*) or only given roots (tests that check what a server *presents*), presents a
//! client certificate when given one, offers the ALPN asked for, and sends one `GET /`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::{
    self, ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, StreamOwned,
};

/// Which server certificates the client accepts.
#[derive(Clone, Copy, Debug)]
pub enum Trust<'a> {
    /// Any: the test looks at what the server accepts, not at what it presents.
    Any,
    /// Those the roots (PEM) sign, for the name sent as SNI.
    Roots(&'a str),
}

/// Accepts any server certificate.
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `GET /` with `Host: host` over TLS to `addr` (SNI `host`, ALPN `alpn`), presenting
/// `client` (certificate and key PEM) if given: the answer (status line, headers, body) and
/// the server's certificate (DER), or why it failed.
pub fn tls_get(
    addr: SocketAddr,
    host: &str,
    alpn: &[&str],
    client: Option<(&str, &str)>,
) -> Result<(String, Vec<u8>), String> {
    tls_get_trusting(addr, host, Trust::Any, alpn, client)
}

/// A TLS stream to `addr` (SNI `host`), accepting the server certificates `trust` says,
/// offering `alpn`, presenting `client` if given.
pub fn tls_connect(
    addr: SocketAddr,
    host: &str,
    trust: Trust<'_>,
    alpn: &[&str],
    client: Option<(&str, &str)>,
) -> Result<StreamOwned<ClientConnection, TcpStream>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match trust {
        Trust::Any => versions
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer(provider))),
        Trust::Roots(pem) => {
            let mut store = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                store
                    .add(c.map_err(|e| e.to_string())?)
                    .map_err(|e| e.to_string())?;
            }
            versions.with_root_certificates(store)
        }
    };
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<_, _>>()
                    .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| e.to_string())?
        }
    };
    config.alpn_protocols = alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
    let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    let conn = ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let sock =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(5))).ok();
    Ok(StreamOwned::new(conn, sock))
}

/// As [`tls_get`], accepting the server certificates `trust` says.
pub fn tls_get_trusting(
    addr: SocketAddr,
    host: &str,
    trust: Trust<'_>,
    alpn: &[&str],
    client: Option<(&str, &str)>,
) -> Result<(String, Vec<u8>), String> {
    tls_get_path(addr, host, "/", trust, alpn, client)
}

/// As [`tls_get_trusting`], for `path`.
pub fn tls_get_path(
    addr: SocketAddr,
    host: &str,
    path: &str,
    trust: Trust<'_>,
    alpn: &[&str],
    client: Option<(&str, &str)>,
) -> Result<(String, Vec<u8>), String> {
    tls_get_sni(addr, host, host, path, trust, alpn, client)
}

/// As [`tls_get_path`], with an SNI name (`sni`, also the name the certificate is verified
/// for) that need not be the request's `Host` — a client reusing a connection for another
/// host.
pub fn tls_get_sni(
    addr: SocketAddr,
    sni: &str,
    host: &str,
    path: &str,
    trust: Trust<'_>,
    alpn: &[&str],
    client: Option<(&str, &str)>,
) -> Result<(String, Vec<u8>), String> {
    let mut tls = tls_connect(addr, sni, trust, alpn, client)?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    tls.write_all(req.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut out = Vec::new();
    match tls.read_to_end(&mut out) {
        Ok(_) => {}
        Err(_) if !out.is_empty() => {}
        Err(e) => return Err(format!("read: {e}")),
    }
    if out.is_empty() {
        return Err("closed without an answer".into());
    }
    let peer = tls
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    Ok((String::from_utf8_lossy(&out).into_owned(), peer))
}

/// Over TLS to a TCP echo backend (`support::tcp_echo`) through `addr`: sends `ping`, reads
/// the backend's greeting and the echo; the backend's identity, or why it failed.
pub fn tls_echo(
    addr: SocketAddr,
    host: &str,
    trust: Trust<'_>,
    client: Option<(&str, &str)>,
) -> Result<String, String> {
    let mut tls = tls_connect(addr, host, trust, &[], client)?;
    tls.write_all(b"ping\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while got.iter().filter(|b| **b == b'\n').count() < 2 {
        match tls.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => got.push(byte[0]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let mut lines = text.lines();
    match (lines.next(), lines.next()) {
        (Some(identity), Some("ping")) => Ok(identity.to_string()),
        _ => Err(format!("no greeting and echo: {text:?}")),
    }
}
