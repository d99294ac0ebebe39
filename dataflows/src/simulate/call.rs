//! What a simulation takes: the call made ([`Call`]) and the resources of the proxy it goes
//! through, decoded ([`ProxyConfig`]).

use crate::model::{Resource, ResourceType};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use prost::Message;
use std::collections::BTreeMap;

/// One HTTP request on a fresh connection (plaintext unless made over TLS) from the proxy's
/// workload (a sidecar), from a client (a gateway), or from another workload to the proxy's
/// own ([`Call::inbound`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The destination port of the connection.
    pub port: u16,
    /// The destination address, when known (`None`: any address; a captured call then goes to
    /// the wildcard listener of its port).
    pub address: Option<String>,
    /// `Host` / `:authority`, as sent (`reviews`, `reviews:9080`).
    pub authority: String,
    /// `:path`, with its query string if any.
    pub path: String,
    pub method: String,
    /// Other request headers; names are compared case-insensitively.
    pub headers: Vec<(String, String)>,
    /// The name a TLS client sends in its handshake (SNI), which listeners running the TLS
    /// inspector match chains on; `None`: a plaintext connection, or TLS without a name.
    pub sni: Option<String>,
    /// Its first bytes are an HTTP/1.1 request (which the HTTP inspector reports as
    /// `http/1.1`); false for a connection carrying other bytes ([`Call::connect`]). Over TLS:
    /// what the connection carries once decrypted.
    pub http: bool,
    /// The connection opens with a TLS handshake (also implied by `sni`).
    pub tls: bool,
    /// The protocols the TLS client offers (ALPN), which listeners running the TLS inspector
    /// match chains on: `istio-peer-exchange`/`istio` for Istio's mTLS, `h2`/`http/1.1` for
    /// an HTTPS client. Empty: none offered (or plaintext).
    pub alpn: Vec<String>,
    /// The connection was captured on its way in to the proxy's workload: it reaches the
    /// inbound capture listener (Istio's `virtualInbound`, whose chains match on the
    /// original destination `address:port`), not a listener of its port.
    pub inbound: bool,
    /// The URI SAN of the client certificate the connection presents (Istio's mTLS:
    /// `spiffe://TD/ns/NS/sa/SA`), which RBAC's authenticated principals match.
    pub peer: Option<String>,
    /// The connection's source address (RBAC's `direct_remote_ip` and, with no proxy in
    /// front, `remote_ip`).
    pub source_ip: Option<String>,
    /// A JWT the request carries where the proxy's `jwt_authn` looks for one.
    pub token: Option<Token>,
    /// What an external authorization service asked about the call answers (`true`:
    /// allowed); `None`: unknown, so a call that would be asked ends there
    /// ([`super::NoMatch::External`]).
    pub external_authz: Option<bool>,
}

/// A request's JWT, as far as verification goes: the simulation checks no signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    /// Signed by a key of its issuer's key set, with these claims (`iss`, `sub`, `aud`, …).
    Signed(serde_json::Value),
    /// Not a token that verifies (a bad signature, malformed, expired).
    Invalid,
}

/// The ALPN Istio's sidecars offer on mTLS connections to each other (meshflow's outbound
/// side offers these two).
pub const ISTIO_MTLS_ALPN: [&str; 2] = ["istio-peer-exchange", "istio"];

impl Call {
    /// `GET path` with `Host: authority` to port `port`.
    pub fn get(authority: &str, port: u16, path: &str) -> Call {
        Call {
            port,
            address: None,
            authority: authority.to_string(),
            path: path.to_string(),
            method: "GET".into(),
            headers: Vec::new(),
            sni: None,
            http: true,
            tls: false,
            alpn: Vec::new(),
            inbound: false,
            peer: None,
            source_ip: None,
            token: None,
            external_authz: None,
        }
    }

    /// `GET path` with `Host: authority` to port `port` over TLS whose handshake names
    /// `sni` and offers ALPN `h2` and `http/1.1`, as an HTTPS client does; a proxy that
    /// terminates it routes the request inside.
    pub fn https(authority: &str, port: u16, path: &str, sni: &str) -> Call {
        Call::get(authority, port, path).over_tls(Some(sni), &["h2", "http/1.1"])
    }

    /// The same call over TLS, with SNI `sni` (`None`: no name) and ALPN `alpn`.
    pub fn over_tls(mut self, sni: Option<&str>, alpn: &[&str]) -> Call {
        self.tls = true;
        self.sni = sni.map(str::to_string);
        self.alpn = alpn.iter().map(|a| a.to_string()).collect();
        self
    }

    /// The same call over Istio's mutual TLS between sidecars: TLS with SNI `sni` and ALPN
    /// [`ISTIO_MTLS_ALPN`].
    pub fn istio_mtls(self, sni: &str) -> Call {
        self.over_tls(Some(sni), &ISTIO_MTLS_ALPN)
    }

    /// The same call arriving at the proxy's workload from outside (captured inbound): it
    /// reaches the inbound capture listener, whose chains match on this call's port and
    /// address.
    pub fn inbound(mut self) -> Call {
        self.inbound = true;
        self
    }

    /// Whether the connection is TLS (`tls`, or a name sent in a handshake).
    pub fn is_tls(&self) -> bool {
        self.tls || self.sni.is_some()
    }

    /// A TLS connection to port `port` whose handshake names `sni`, which the proxy passes
    /// through without terminating it (a `tcp_proxy` chain forwards it).
    pub fn tls(port: u16, sni: &str) -> Call {
        Call {
            sni: Some(sni.to_string()),
            tls: true,
            ..Call::connect(port)
        }
    }

    /// A plain TCP connection to port `port`, with no HTTP request on it: what a `tcp_proxy`
    /// chain forwards. Should it land on an HTTP chain instead, it is taken as a request
    /// without `Host` or path (which no virtual host but `*` matches).
    pub fn connect(port: u16) -> Call {
        Call {
            http: false,
            ..Call::get("", port, "")
        }
    }

    /// The same call to destination address `ip`.
    pub fn to_address(mut self, ip: &str) -> Call {
        self.address = Some(ip.to_string());
        self
    }

    /// The same call with one more request header.
    pub fn header(mut self, name: &str, value: &str) -> Call {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// The same call with another method.
    pub fn method(mut self, method: &str) -> Call {
        self.method = method.to_string();
        self
    }

    /// The same call with the client certificate of `spiffe` (a URI SAN).
    pub fn from_peer(mut self, spiffe: &str) -> Call {
        self.peer = Some(spiffe.to_string());
        self
    }

    /// The same call from source address `ip`.
    pub fn from_ip(mut self, ip: &str) -> Call {
        self.source_ip = Some(ip.to_string());
        self
    }

    /// The same call, with an external authorization service that answers `allows`.
    pub fn with_external_authz(mut self, allows: bool) -> Call {
        self.external_authz = Some(allows);
        self
    }

    /// The same call carrying `token`.
    pub fn with_token(mut self, token: Token) -> Call {
        self.token = Some(token);
        self
    }
}

/// One proxy's resources, decoded.
#[derive(Clone, Debug, Default)]
pub struct ProxyConfig {
    pub listeners: BTreeMap<String, Listener>,
    pub routes: BTreeMap<String, RouteConfiguration>,
    pub clusters: BTreeMap<String, Cluster>,
    pub endpoints: BTreeMap<String, ClusterLoadAssignment>,
    /// Bodies that did not decode: type, name and prost's message.
    pub undecodable: Vec<(ResourceType, String, String)>,
}

impl ProxyConfig {
    /// Decodes the resources one proxy holds (as the dataflow encodes them).
    pub fn from_resources<'a>(resources: impl IntoIterator<Item = &'a Resource>) -> ProxyConfig {
        ProxyConfig::from_bodies(
            resources
                .into_iter()
                .map(|r| (r.rtype, r.name.as_str(), &r.body.0[..])),
        )
    }

    /// Decodes `(type, name, encoded body)` triples.
    pub fn from_bodies<'a>(
        bodies: impl IntoIterator<Item = (ResourceType, &'a str, &'a [u8])>,
    ) -> ProxyConfig {
        fn put<M: Message + Default>(
            map: &mut BTreeMap<String, M>,
            bad: &mut Vec<(ResourceType, String, String)>,
            (t, name, bytes): (ResourceType, &str, &[u8]),
        ) {
            match M::decode(bytes) {
                Ok(m) => {
                    map.insert(name.to_string(), m);
                }
                Err(e) => bad.push((t, name.to_string(), e.to_string())),
            }
        }
        let mut c = ProxyConfig::default();
        for body in bodies {
            let bad = &mut c.undecodable;
            match body.0 {
                ResourceType::Listener => put(&mut c.listeners, bad, body),
                ResourceType::Route => put(&mut c.routes, bad, body),
                ResourceType::Cluster => put(&mut c.clusters, bad, body),
                ResourceType::Endpoint => put(&mut c.endpoints, bad, body),
                // Certificates route nothing: TLS contexts are reported by the SDS names
                // they refer to.
                ResourceType::Secret => {}
            }
        }
        c
    }
}
