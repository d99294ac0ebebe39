//! An HTTPS backend on loopback (rustls): answers every request on a connection with 200,
//! body = its identity, and headers telling what the TLS handshake carried (`x-echo-sni`,
//! `x-echo-client-cert: yes|no`). With a client CA it requires a client certificate signed by
//! it. One request per connection; it stops on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig, ServerConnection, StreamOwned};

pub struct TlsBackend {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicUsize>,
    acceptor: Option<JoinHandle<()>>,
}

impl TlsBackend {
    /// Serves `cert_pem`/`key_pem` on `ip:port`; with `client_ca_pem`, only to clients with a
    /// certificate it signed.
    pub fn start(
        ip: &str,
        port: u16,
        identity: &str,
        cert_pem: &str,
        key_pem: &str,
        client_ca_pem: Option<&str>,
    ) -> TlsBackend {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("TLS versions");
        let builder = match client_ca_pem {
            None => builder.with_no_client_auth(),
            Some(pem) => {
                let mut roots = RootCertStore::empty();
                for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                    roots.add(c.expect("client CA PEM")).expect("client CA");
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .expect("client verifier");
                builder.with_client_cert_verifier(verifier)
            }
        };
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .expect("certificate PEM");
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("key PEM");
        let config = Arc::new(builder.with_single_cert(certs, key).expect("server config"));
        let addr: SocketAddr = format!("{ip}:{port}").parse().expect("address");
        let listener = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let acceptor = {
            let (stop, served, identity) = (stop.clone(), served.clone(), identity.to_string());
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let (config, served, identity) =
                                (config.clone(), served.clone(), identity.clone());
                            thread::spawn(move || serve(stream, config, &identity, &served));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        TlsBackend {
            addr,
            stop,
            served,
            acceptor: Some(acceptor),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests answered (after a completed handshake).
    pub fn requests_served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }
}

impl Drop for TlsBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

fn serve(stream: TcpStream, config: Arc<ServerConfig>, identity: &str, served: &AtomicUsize) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let Ok(conn) = ServerConnection::new(config) else {
        return;
    };
    let mut tls = StreamOwned::new(conn, stream);
    let mut request = Vec::new();
    let mut chunk = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&chunk[..n]),
        }
    }
    let sni = tls.conn.server_name().unwrap_or("").to_string();
    let client_cert = if tls.conn.peer_certificates().is_some_and(|c| !c.is_empty()) {
        "yes"
    } else {
        "no"
    };
    served.fetch_add(1, Ordering::SeqCst);
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nx-echo-sni: {sni}\r\n\
         x-echo-client-cert: {client_cert}\r\nconnection: close\r\n\r\n{identity}",
        identity.len()
    );
    let _ = tls.write_all(response.as_bytes());
    let _ = tls.flush();
    tls.conn.send_close_notify();
    let _ = tls.flush();
}
