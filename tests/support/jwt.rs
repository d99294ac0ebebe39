//! A token issuer for RequestAuthentication tests: an ES256 (ECDSA P-256) key, its public
//! half as a JSON Web Key Set, and tokens it signs (JWS compact form, RFC 7515/7519), made
//! with `ring` as Envoy's `jwt_authn` verifies them. Plus a key-set server on loopback for
//! `jwksUri` rules, whose answer a test can change.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

pub struct Issuer {
    pub iss: String,
    kid: String,
    key: EcdsaKeyPair,
}

impl Issuer {
    /// A new key for `iss`, named `kid`.
    pub fn new(iss: &str, kid: &str) -> Issuer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("a P-256 key");
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("the key reads back");
        Issuer {
            iss: iss.into(),
            kid: kid.into(),
            key,
        }
    }

    /// The public key as one JWK (RFC 7518 §6.2: the uncompressed point's coordinates).
    pub fn jwk(&self) -> String {
        let point = self.key.public_key().as_ref();
        assert_eq!(point.len(), 65, "an uncompressed P-256 point");
        format!(
            r#"{{"kty":"EC","crv":"P-256","alg":"ES256","use":"sig","kid":"{}","x":"{}","y":"{}"}}"#,
            self.kid,
            B64.encode(&point[1..33]),
            B64.encode(&point[33..65])
        )
    }

    /// A key set holding this issuer's key.
    pub fn jwks(&self) -> String {
        format!(r#"{{"keys":[{}]}}"#, self.jwk())
    }

    /// A token of `sub` with `extra` claims (JSON members, `""` for none), valid for an hour.
    pub fn token(&self, sub: &str, extra: &str) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let extra = if extra.is_empty() {
            String::new()
        } else {
            format!(",{extra}")
        };
        let claims = format!(
            r#"{{"iss":"{}","sub":"{sub}","iat":{now},"exp":{}{extra}}}"#,
            self.iss,
            now + 3600
        );
        self.sign(&claims)
    }

    /// `claims` signed as they are.
    pub fn sign(&self, claims: &str) -> String {
        let header = format!(r#"{{"alg":"ES256","typ":"JWT","kid":"{}"}}"#, self.kid);
        let input = format!("{}.{}", B64.encode(header), B64.encode(claims));
        let sig = self
            .key
            .sign(&SystemRandom::new(), input.as_bytes())
            .expect("signs");
        format!("{input}.{}", B64.encode(sig.as_ref()))
    }
}

/// An HTTP server on loopback answering every request with the key set it holds now
/// (`None`: 503), one request per connection.
pub struct KeyServer {
    pub addr: SocketAddr,
    body: Arc<Mutex<Option<String>>>,
    pub requests: Arc<Mutex<usize>>,
}

impl KeyServer {
    pub fn start(body: Option<String>) -> KeyServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let body = Arc::new(Mutex::new(body));
        let requests = Arc::new(Mutex::new(0));
        let (b, n) = (body.clone(), requests.clone());
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(mut s) = s else { continue };
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                *n.lock().unwrap() += 1;
                let answer = match b.lock().unwrap().clone() {
                    Some(body) => format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    ),
                    None => "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into(),
                };
                let _ = s.write_all(answer.as_bytes());
            }
        });
        KeyServer {
            addr,
            body,
            requests,
        }
    }

    pub fn uri(&self) -> String {
        format!("http://{}/keys", self.addr)
    }

    pub fn set(&self, body: Option<String>) {
        *self.body.lock().unwrap() = body;
    }
}
