//! The keys of RequestAuthentication `jwksUri` rules, fetched by meshflow (as istiod does
//! by default) and handed to the runtime, which fills them into the rules' records
//! (`runtime::jwks`). Proxies are then given the keys inline and never fetch them.
//!
//! Bounded: a fetch takes at most the rule's `timeout` (Istio's default 5 s) and reads at
//! most [`MAX_JWKS_BYTES`]; the body must be a JSON Web Key Set. A URI is fetched as soon
//! as a record uses it, then every `refresh` (Istio's 20 minutes by default); a failed
//! fetch is retried after 1 s, doubling up to a minute, and the keys fetched before stay in
//! use meanwhile. Only outcomes that differ from the last one reach the runtime.

use crate::input::{Input, JwksUris};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The largest key set read (a provider's set is a few kilobytes).
pub const MAX_JWKS_BYTES: usize = 512 * 1024;

/// The longest wait before a failed fetch is tried again.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// TLS for `https` URIs: the system's trust roots (none loadable: https fetches fail,
/// saying so, and http ones still work).
fn tls() -> Arc<tokio_rustls::rustls::ClientConfig> {
    use tokio_rustls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .unwrap_or_else(|_| {
            rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        });
    Arc::new(config)
}

/// An address range keys are never fetched from (`--jwks-blocked-cidrs`, Istio's
/// `BLOCKED_CIDRS_IN_JWKS_URIS`): a policy author cannot make the control plane reach into
/// networks it should not (a cloud's metadata service, the cluster's own services).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub net: IpAddr,
    pub len: u8,
}

impl Cidr {
    /// `10.0.0.0/8`, `fd00::/8`, or one address.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (a, l) = s.split_once('/').unwrap_or((s, ""));
        let net: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: not an address"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let len = if l.is_empty() {
            max
        } else {
            l.parse::<u8>()
                .ok()
                .filter(|n| *n <= max)
                .ok_or_else(|| format!("{s:?}: not a prefix length"))?
        };
        Ok(Cidr { net, len })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (ip, self.net) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(a) & mask == u32::from(b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(a) & mask == u128::from(b) & mask
            }
            _ => false,
        }
    }
}

/// One GET of `uri` (`http` or `https`) over HTTP/1.1: the body, when the answer is 200
/// and the body at most [`MAX_JWKS_BYTES`] (and, `keys`, a JSON Web Key Set). The host is
/// resolved once and connected to at an address checked against `blocked`.
async fn get(
    uri: &str,
    tls: Arc<tokio_rustls::rustls::ClientConfig>,
    keys: bool,
    blocked: &[Cidr],
) -> Result<String, String> {
    let parsed: hyper::Uri = uri.parse().map_err(|e| format!("not a URL: {e}"))?;
    let https = match parsed.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err("not an http or https URL".into()),
    };
    let host = parsed.host().ok_or("no host")?.to_string();
    let port = parsed.port_u16().unwrap_or(if https { 443 } else { 80 });
    let bare = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host((bare.as_str(), port))
        .await
        .map_err(|e| format!("resolving {host}: {e}"))?
        .collect();
    if let Some(a) = addrs
        .iter()
        .find(|a| blocked.iter().any(|c| c.contains(a.ip())))
    {
        return Err(format!(
            "{host} resolves to {}, in a range keys are not fetched from (--jwks-blocked-cidrs)",
            a.ip()
        ));
    }
    let first = addrs.first().ok_or_else(|| format!("{host}: no address"))?;
    let tcp = tokio::net::TcpStream::connect(first)
        .await
        .map_err(|e| format!("connecting to {host}:{port}: {e}"))?;
    let authority = parsed
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_else(|| host.clone());
    let path = parsed
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::USER_AGENT, "meshflow")
        .header(hyper::header::ACCEPT, "application/json")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let response = if https {
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from(bare)
            .map_err(|e| format!("server name {host}: {e}"))?;
        let stream = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS with {host}: {e}"))?;
        send(TokioIo::new(stream), request).await?
    } else {
        send(TokioIo::new(tcp), request).await?
    };
    if response.status() != hyper::StatusCode::OK {
        return Err(format!("answered {}", response.status()));
    }
    let body = Limited::new(response.into_body(), MAX_JWKS_BYTES)
        .collect()
        .await
        .map_err(|e| format!("reading the body (at most {MAX_JWKS_BYTES} bytes): {e}"))?
        .to_bytes();
    let text = String::from_utf8(body.to_vec()).map_err(|_| "the body is not UTF-8")?;
    if keys {
        crate::config::check_jwks(&text)?;
    }
    Ok(text)
}

async fn send<T>(
    io: TokioIo<T>,
    request: hyper::Request<Empty<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    tokio::spawn(conn);
    sender
        .send_request(request)
        .await
        .map_err(|e| format!("HTTP: {e}"))
}

/// Fetches `uri` within `timeout`: the key set, or why not (for the object's status).
pub async fn fetch(uri: &str, timeout: Duration, blocked: &[Cidr]) -> Result<String, String> {
    fetch_with(uri, timeout, tls(), blocked).await
}

async fn fetch_with(
    uri: &str,
    timeout: Duration,
    tls: Arc<tokio_rustls::rustls::ClientConfig>,
    blocked: &[Cidr],
) -> Result<String, String> {
    let fetched = async {
        if !uri.ends_with(dataflows::model::OPENID_CONFIGURATION) {
            return get(uri, tls, true, blocked).await;
        }
        // OpenID Connect Discovery: the configuration names the key set's URL.
        let config = get(uri, tls.clone(), false, blocked).await?;
        let keys_at = serde_json::from_str::<serde_json::Value>(&config)
            .ok()
            .and_then(|c| c.get("jwks_uri")?.as_str().map(str::to_string))
            .ok_or("the OpenID configuration names no jwks_uri")?;
        get(&keys_at, tls, true, blocked)
            .await
            .map_err(|e| format!("{keys_at} (its jwks_uri): {e}"))
    };
    match tokio::time::timeout(timeout, fetched).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
    }
}

/// One URI's schedule: when it is next fetched, failures in a row, the last outcome sent.
struct Due {
    at: Instant,
    failures: u32,
    last: Option<Result<String, String>>,
}

/// Fetches the URIs `uris` holds (published by the runtime) until the runtime is gone,
/// sending each new outcome into `inputs`.
pub async fn run(
    mut uris: tokio::sync::watch::Receiver<JwksUris>,
    inputs: std::sync::mpsc::Sender<Input>,
    refresh: Duration,
    blocked: Vec<Cidr>,
) {
    let tls = tls();
    let mut due: BTreeMap<String, Due> = BTreeMap::new();
    loop {
        let wanted = uris.borrow_and_update().clone();
        due.retain(|u, _| wanted.contains_key(u));
        for u in wanted.keys() {
            due.entry(u.clone()).or_insert(Due {
                at: Instant::now(),
                failures: 0,
                last: None,
            });
        }
        let now = Instant::now();
        for (uri, d) in due.iter_mut().filter(|(_, d)| d.at <= now) {
            let timeout = Duration::from_millis(wanted.get(uri).copied().unwrap_or(5_000));
            let outcome = fetch_with(uri, timeout, tls.clone(), &blocked).await;
            match &outcome {
                Ok(_) => {
                    d.failures = 0;
                    d.at = Instant::now() + refresh;
                }
                Err(why) => {
                    tracing::warn!(uri, error = %why, "fetching JWKS failed");
                    d.failures += 1;
                    let wait = Duration::from_secs(1 << d.failures.min(6)) / 2;
                    d.at = Instant::now() + wait.min(MAX_RETRY);
                }
            }
            if d.last.as_ref() != Some(&outcome) {
                d.last = Some(outcome.clone());
                let sent = inputs.send(Input::Jwks {
                    uri: uri.clone(),
                    outcome,
                });
                if sent.is_err() {
                    return;
                }
            }
        }
        let next = due.values().map(|d| d.at).min();
        tokio::select! {
            changed = uris.changed() => if changed.is_err() { return },
            _ = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Serves `responses` in turn on a loopback port, one connection each.
    async fn serve(responses: Vec<String>) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            for r in responses {
                let (mut s, _) = l.accept().await.expect("accept");
                let mut buf = [0u8; 2048];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(r.as_bytes()).await;
                let _ = s.shutdown().await;
            }
        });
        format!("http://{addr}/keys")
    }

    fn ok(body: &str) -> String {
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    /// A key set is fetched; a non-200 answer, a body that is not a key set, one above
    /// the size bound, a set without a key Envoy reads and a server that never answers are
    /// failures that say why.
    #[tokio::test]
    async fn fetches_a_key_set_and_says_why_not() {
        let keys = r#"{"keys":[{"kty":"EC","crv":"P-256","x":"a","y":"b"}]}"#;
        let big = format!(r#"{{"keys":[],"pad":"{}"}}"#, "x".repeat(MAX_JWKS_BYTES));
        let uri = serve(vec![
            ok(keys),
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into(),
            ok("<html>"),
            ok(&big),
            ok(r#"{"keys":[{"kty":"EC","crv":"P-999","x":"a","y":"b"}]}"#),
        ])
        .await;
        let t = Duration::from_secs(5);
        assert_eq!(fetch(&uri, t, &[]).await.as_deref(), Ok(keys));
        assert!(fetch(&uri, t, &[]).await.unwrap_err().contains("404"));
        assert!(fetch(&uri, t, &[]).await.unwrap_err().contains("not JSON"));
        assert!(fetch(&uri, t, &[]).await.unwrap_err().contains("at most"));
        assert!(fetch(&uri, t, &[])
            .await
            .unwrap_err()
            .contains("no key Envoy"));
        // Accepts and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = silent.local_addr().expect("addr");
        let held = tokio::spawn(async move {
            let (s, _) = silent.accept().await.expect("accept");
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(s);
        });
        let why = fetch(&format!("http://{addr}/k"), Duration::from_millis(200), &[])
            .await
            .unwrap_err();
        assert!(why.contains("within 200 ms"), "{why}");
        held.abort();
    }

    /// A rule without `jwksUri` takes its keys where the issuer's OpenID configuration says.
    #[tokio::test]
    async fn discovers_the_key_set_from_the_openid_configuration() {
        let keys = r#"{"keys":[{"kty":"oct","k":"AA"}]}"#;
        let keys_uri = serve(vec![ok(keys)]).await;
        let issuer = serve(vec![ok(&format!(
            r#"{{"issuer":"x","jwks_uri":"{keys_uri}"}}"#
        ))])
        .await
        .trim_end_matches("/keys")
        .to_string();
        let discovery = format!("{issuer}{}", dataflows::model::OPENID_CONFIGURATION);
        assert_eq!(
            fetch(&discovery, Duration::from_secs(5), &[])
                .await
                .as_deref(),
            Ok(keys)
        );
        let silent = serve(vec![ok("{}")])
            .await
            .trim_end_matches("/keys")
            .to_string();
        let why = fetch(
            &format!("{silent}{}", dataflows::model::OPENID_CONFIGURATION),
            Duration::from_secs(5),
            &[],
        )
        .await
        .unwrap_err();
        assert!(why.contains("no jwks_uri"), "{why}");
        // A blocked range: never connected to.
        let blocked = [Cidr::parse("127.0.0.0/8").expect("a range")];
        let why = fetch(&discovery, Duration::from_secs(5), &blocked)
            .await
            .unwrap_err();
        assert!(why.contains("--jwks-blocked-cidrs"), "{why}");
        assert!(Cidr::parse("::ffff:0:0/96").is_ok() && Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("169.254.169.254")
            .expect("one address")
            .contains("169.254.169.254".parse().expect("an address")));
    }

    /// The loop fetches a URI once it is in use, sends only outcomes that changed, and
    /// fetches again after `refresh`.
    #[tokio::test]
    async fn fetches_what_is_in_use_and_sends_changes_only() {
        let (a, b) = (
            r#"{"keys":[{"kty":"oct","k":"AA"}]}"#,
            r#"{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}"#,
        );
        let uri = serve(vec![ok(a), ok(a), ok(b), ok(b), ok(b), ok(b)]).await;
        let (tx, rx) = std::sync::mpsc::channel();
        let (uris, watched) = tokio::sync::watch::channel(JwksUris::new());
        let task = tokio::spawn(run(watched, tx, Duration::from_millis(100), Vec::new()));
        uris.send_replace(JwksUris::from([(uri.clone(), 2_000)]));
        let inputs = tokio::task::spawn_blocking(move || {
            (0..2)
                .map(|_| rx.recv_timeout(Duration::from_secs(10)))
                .collect::<Result<Vec<Input>, _>>()
        })
        .await
        .expect("the waiting task")
        .expect("two outcomes");
        let got: Vec<String> = inputs
            .into_iter()
            .map(|i| match i {
                Input::Jwks { uri: u, outcome } => {
                    assert_eq!(u, uri);
                    outcome.expect("fetched")
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(got, [a, b], "the second fetch of `a` sent nothing");
        task.abort();
    }
}
