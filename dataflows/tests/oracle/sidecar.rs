//! Random Sidecars: egress listeners (bound, without capture, of no protocol), `ingress`
//! listeners (with TLS and connection pools), egress proxies and inbound connection pools.

use crate::records::{pick, NAMESPACES};
use crate::support::{host, labels};
use dataflows::model::*;
use rand::rngs::StdRng;
use rand::Rng;

/// A Sidecar's connection pool for inbound clusters, told apart by `pending`.
fn inbound_pool(pending: u32) -> InboundPool {
    InboundPool {
        connect_timeout_ms: Some(2_000),
        pool: Some(ConnectionPool {
            max_pending_requests: Some(pending),
            ..Default::default()
        }),
    }
}

pub fn sidecar(rng: &mut StdRng, extra: &mut StdRng, slot: usize) -> Record {
    let sel = rng.random_bool(0.5).then(|| labels(&[("app", "client")]));
    Record::Sidecar(Sidecar {
        registry_only: pick(rng, &[None, Some(false), Some(true)]),
        // Unknown destinations to an egress proxy (where ALLOW_ANY holds).
        egress_proxy: extra.random_bool(0.3).then(|| EgressProxy {
            host: host("svc1", "default"),
            subset: pick(extra, &[None, Some("v1")]).map(String::from),
            port: pick(extra, &[9080u16, 3306]),
        }),
        ingress: ingress(extra),
        // A connection pool for every inbound cluster of the selected proxies.
        inbound_connection_pool: extra.random_bool(0.2).then(|| inbound_pool(7)),
        key: ConfigKey::new(
            Kind::Sidecar,
            pick(rng, &NAMESPACES),
            format!("sc{}", slot % 2),
        ),
        selector: sel,
        egress: egress(rng, extra),
    })
}

/// Ingress, on a port the proxies' own endpoints may have or not: it replaces their own
/// ports.
fn ingress(extra: &mut StdRng) -> Vec<IngressListener> {
    match extra.random_range(0..3) {
        0 => vec![IngressListener {
            port: pick(extra, &[9080u16, 8080]),
            bind: extra.random_bool(0.5).then(|| "127.0.0.1".into()),
            endpoint: ("127.0.0.1".into(), 18080),
            capture_none: extra.random_bool(0.5),
            protocol: pick(extra, &[Protocol::Http, Protocol::Tcp]),
            connection_pool: extra.random_bool(0.3).then(|| inbound_pool(3)),
            // TLS terminated for clients outside the mesh: the port's one
            // chain, and no mTLS chain naming the workload certificate.
            tls: extra.random_bool(0.4).then(|| {
                let mode = pick(
                    extra,
                    &[
                        ServerTlsMode::Simple,
                        ServerTlsMode::Mutual,
                        ServerTlsMode::OptionalMutual,
                    ],
                );
                Box::new(ServerTls {
                    mode,
                    credential: Some(Credential::Files {
                        cert: "/etc/certs/cert.pem".into(),
                        key: "/etc/certs/key.pem".into(),
                        ca: (mode != ServerTlsMode::Simple).then(|| "/etc/certs/ca.pem".into()),
                    }),
                    min_version: None,
                    max_version: None,
                    cipher_suites: vec![],
                    subject_alt_names: vec![],
                    tcp: false,
                    misdirected: Vec::new(),
                    sni_routes: false,
                    client_ca: None,
                })
            }),
            fail_closed: None,
        }],
        _ => Vec::new(),
    }
}

/// No egress listener, a catch-all, or a port's listener (bound, without capture) beside one.
fn egress(rng: &mut StdRng, extra: &mut StdRng) -> Vec<EgressListener> {
    match rng.random_range(0..4) {
        3 => vec![
            EgressListener {
                port: Some(EgressPort {
                    number: pick(rng, &[3306u16, 9080]),
                    // Or naming no protocol: told per connection.
                    protocol: pick(extra, &[Protocol::Tcp, Protocol::Tcp, Protocol::Auto]),
                    name: "tcp".into(),
                }),
                // A bound listener for any address tells TLS services
                // apart by SNI; one for a single address serves its first.
                bind: rng
                    .random_bool(0.5)
                    .then(|| pick(extra, &["127.0.0.1", "0.0.0.0"]).into()),
                capture_none: rng.random_bool(0.5),
                hosts: vec![pick(rng, &["./*", "*/*"]).to_string()],
            },
            EgressListener {
                port: None,
                bind: None,
                capture_none: false,
                hosts: vec!["*/*".into()],
            },
        ],
        0 => vec![],
        1 => vec![EgressListener {
            port: None,
            bind: None,
            capture_none: false,
            hosts: vec![pick(rng, &["./*", "*/*", "other/*", "~/*"]).to_string()],
        }],
        _ => vec![
            EgressListener {
                port: Some(EgressPort {
                    number: 9080,
                    protocol: Protocol::Http,
                    name: "http".into(),
                }),
                bind: Some("127.0.0.1".into()),
                capture_none: true,
                hosts: vec!["./*".into()],
            },
            EgressListener {
                port: None,
                bind: None,
                capture_none: false,
                hosts: vec!["*/*".into()],
            },
        ],
    }
}
