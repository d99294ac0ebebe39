//! ServiceEntries that share a host across namespaces and within one, with their endpoints
//! and DestinationRules: Istio keeps a service per host and namespace, the ServiceEntries of
//! one namespace merge their ports, and each namespace's proxies get the service their
//! namespace picks. Drawn from a generator of their own, so the logs of the others stay.

use crate::records::{pick, NAMESPACES};
use crate::support::labels;
use dataflows::model::*;
use rand::rngs::StdRng;
use rand::Rng;

const HOSTS: [&str; 2] = ["shared0.example.com", "shared1.example.com"];

/// One random record about a shared host: an entry (most often), an endpoint of one, or a
/// DestinationRule of the host.
pub fn shared_host(rng: &mut StdRng) -> Record {
    let host = pick(rng, &HOSTS).to_string();
    let ns = pick(rng, &NAMESPACES[..2]);
    let name = format!("se{}", rng.random_range(0..3));
    match rng.random_range(0..6) {
        0 | 1 | 2 => entry(rng, host, ns, name),
        3 | 4 => Record::Endpoint(
            host,
            RawEndpoint {
                ip: format!("10.0.1.{}", rng.random_range(1..4)),
                port_name: pick(rng, &["http", "tcp", "http-alt"]).to_string(),
                port: pick(rng, &[9080u16, 9090]),
                ready: true,
                labels: labels(&[("version", pick(rng, &["v1", "v2"]))]),
                origin: ConfigKey::new(Kind::ServiceEntry, ns, &name),
                placement: Placement::default(),
                service_account: None,
            },
        ),
        _ => Record::DestinationRule(DestinationRule {
            key: ConfigKey::new(Kind::DestinationRule, ns, format!("shared-{name}")),
            host,
            export_to: vec![],
            traffic_policy: rng.random_bool(0.5).then(|| TrafficPolicy {
                load_balancer: Some(LoadBalancer::LeastRequest),
                ..Default::default()
            }),
            subsets: vec![Subset {
                name: "v1".into(),
                labels: labels(&[("version", "v1")]),
                traffic_policy: None,
            }],
            selector: None,
        }),
    }
}

/// A ServiceEntry of `host`: some of the ports an entry may have, exported to every
/// namespace, its own or the other, static or DNS.
fn entry(rng: &mut StdRng, host: String, ns: &str, name: String) -> Record {
    let all = [
        ("http", 9080u16, Protocol::Http),
        ("tcp", 9090, Protocol::Tcp),
        ("http-alt", 9081, Protocol::Http),
    ];
    let mut ports: Vec<ServicePort> = all
        .iter()
        .filter(|_| rng.random_bool(0.6))
        .map(|(n, p, proto)| ServicePort {
            name: n.to_string(),
            port: *p,
            protocol: *proto,
        })
        .collect();
    if ports.is_empty() {
        ports.push(ServicePort {
            name: "http".into(),
            port: 9080,
            protocol: Protocol::Http,
        });
    }
    // Now and then one port number with another protocol: a conflict Istio reports.
    if rng.random_bool(0.15) {
        ports[0].protocol = Protocol::Tcp;
    }
    let other = if ns == NAMESPACES[0] {
        NAMESPACES[1]
    } else {
        NAMESPACES[0]
    };
    let exports: [Vec<String>; 4] = [
        vec![],
        vec![".".into()],
        vec![other.into()],
        vec!["*".into()],
    ];
    Record::Service(Service {
        hostname: host,
        origin: ConfigKey::new(Kind::ServiceEntry, ns, &name),
        ports,
        export_to: exports[rng.random_range(0..exports.len())].clone(),
        resolution: if rng.random_bool(0.25) {
            Resolution::Dns
        } else {
            Resolution::Static
        },
        addresses: if rng.random_bool(0.3) {
            vec![format!("240.0.0.{}/32", rng.random_range(1..4))]
        } else {
            vec![]
        },
        dns_endpoints: vec![],
        host_target_ports: Default::default(),
        subject_alt_names: vec![],
        mesh_external: rng.random_bool(0.3),
        prefer_close: false,
        headless: false,
        alias_for: None,
        control_plane: false,
        aliases: vec![],
    })
}
