//! The random record generator: `random_record` draws a kind, then one function per kind
//! draws a version of that kind's object. The draws happen in the order they always have, so
//! each seed still produces the log it did when the generator was one function.

use crate::destination_rule::{destination_rule, locality_setting};
use crate::gateway::gateway;
use crate::sidecar::sidecar;
use crate::support::{host, labels};
use crate::virtual_service::virtual_service;
use dataflows::model::*;
use rand::rngs::StdRng;
use rand::Rng;

pub const NAMESPACES: [&str; 3] = ["default", "other", "istio-system"];

pub fn pick<T: Copy>(rng: &mut StdRng, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())]
}

/// The namespace of the objects of slot `slot` (`default` or `other`).
pub fn namespace(slot: usize) -> &'static str {
    NAMESPACES[slot % 2]
}

/// The service name of slot `slot` (`svc0` to `svc3`).
pub fn service_name(slot: usize) -> String {
    format!("svc{}", slot % 4)
}

/// A locality and weight, often unset, sometimes only one of them.
pub fn placement(rng: &mut StdRng) -> Placement {
    Placement {
        locality: pick(rng, &["", "", "r1/z1", "r1/z2/s1", "r2"]).to_string(),
        weight: pick(rng, &[None, None, Some(1), Some(3)]),
    }
}

/// A match's `sourceLabels`, now and then: selectors some proxies carry (sidecars `app`,
/// routers `istio`) and one nobody does.
pub fn source_labels(rng: &mut StdRng) -> Option<Labels> {
    rng.random_bool(0.3).then(|| match rng.random_range(0..4) {
        0 => labels(&[("app", "client")]),
        1 => labels(&[("app", "svc0")]),
        2 => labels(&[("istio", "ingressgateway")]),
        _ => labels(&[("app", "client"), ("version", "none")]),
    })
}

/// What a Service draws from `extra` before the kind is drawn: every call draws it, whatever
/// the kind, as the one-function generator did.
struct ServiceDraws {
    dns: bool,
    passthrough: bool,
    alias_for: Option<String>,
}

impl ServiceDraws {
    fn draw(extra: &mut StdRng) -> ServiceDraws {
        let dns = extra.random_bool(0.15);
        // Now and then a ServiceEntry of resolution NONE (sidecars keep the original
        // destination, gateways take EDS over its endpoints).
        let passthrough = !dns && extra.random_bool(0.15);
        // Now and then a Kubernetes ExternalName Service: an alias of a host that may be a
        // service, another alias (a chain, or a loop back to itself) or nothing at all.
        let alias_for = extra.random_bool(0.2).then(|| {
            let n = extra.random_range(0..4);
            host(&format!("svc{n}"), pick(extra, &NAMESPACES[..2]))
        });
        ServiceDraws {
            dns,
            passthrough,
            alias_for,
        }
    }
}

/// One random version of the object in slot `slot` of a kind; slots make keys collide so
/// updates and deletes happen.
pub fn random_record(rng: &mut StdRng, extra: &mut StdRng, slot: usize) -> Record {
    let draws = ServiceDraws::draw(extra);
    match rng.random_range(0..9) {
        0 => service(rng, extra, slot, draws),
        1 => endpoint(rng, slot),
        2 if rng.random_bool(0.25) => selection(rng, slot),
        2 => workload(rng, extra, slot),
        3 => virtual_service(rng, extra, slot),
        4 => destination_rule(rng, extra, slot),
        5 => gateway(rng, extra),
        6 => sidecar(rng, extra, slot),
        8 if rng.random_bool(0.4) => secret(rng),
        7 if rng.random_bool(0.5) => mesh(rng, extra),
        _ => proxy(rng, extra, slot),
    }
}

/// A Service's HTTP ports, sometimes with a TCP or TLS one.
fn service_ports(rng: &mut StdRng) -> Vec<ServicePort> {
    let mut ports = vec![ServicePort {
        name: "http".into(),
        port: 9080,
        protocol: Protocol::Http,
    }];
    if rng.random_bool(0.3) {
        ports.push(ServicePort {
            name: "http-alt".into(),
            port: 8080,
            protocol: Protocol::Http,
        });
    }
    // TCP ports: one of its own, or 9080 itself, so TCP and HTTP services share a port.
    match rng.random_range(0..5) {
        0 => ports.push(ServicePort {
            name: "tcp-db".into(),
            port: 3306,
            protocol: Protocol::Tcp,
        }),
        1 => ports[0].protocol = Protocol::Tcp,
        // TLS on the same port as TCP elsewhere (proxied only where an address tells it
        // apart).
        2 => ports.push(ServicePort {
            name: "tls".into(),
            port: 3306,
            protocol: Protocol::Tls,
        }),
        _ => {}
    }
    ports
}

/// A port naming no protocol (told per connection) beside HTTP and TCP services' ports.
fn detected(ports: &mut [ServicePort], extra: &mut StdRng) {
    if extra.random_bool(0.25) {
        let i = extra.random_range(0..ports.len());
        ports[i].protocol = Protocol::Auto;
    }
}

/// Addresses that collide across services and nest, as ServiceEntries may.
fn addresses(rng: &mut StdRng) -> Vec<String> {
    match rng.random_range(0..4) {
        0 => vec![],
        1 => vec!["10.96.0.0/16".to_string()],
        _ => vec![format!("10.96.0.{}/32", rng.random_range(1..4))],
    }
}

fn service(rng: &mut StdRng, extra: &mut StdRng, slot: usize, draws: ServiceDraws) -> Record {
    let (ns, svc_name) = (namespace(slot), service_name(slot));
    let ServiceDraws {
        dns,
        passthrough,
        alias_for,
    } = draws;
    Record::Service(Service {
        control_plane: false,
        // Outside the mesh: AUTO_PASSTHROUGH gateways take no cluster of it.
        mesh_external: extra.random_bool(0.2),
        prefer_close: extra.random_bool(0.2),
        headless: extra.random_bool(0.2),
        alias_for,
        aliases: Vec::new(),
        hostname: host(&svc_name, ns),
        origin: ConfigKey::new(Kind::Service, ns, &svc_name),
        ports: {
            let mut ports = service_ports(rng);
            detected(&mut ports, extra);
            // Port 80 now and then: hostless VirtualServices join its configuration.
            if extra.random_bool(0.25) {
                ports.push(ServicePort {
                    name: "http-web".into(),
                    port: 80,
                    protocol: Protocol::Http,
                });
            }
            ports
        },
        export_to: if rng.random_bool(0.2) {
            vec![".".into()]
        } else {
            vec![]
        },
        // Sometimes a DNS entry with hosts of its own, in localities and with labels
        // (its clusters are then balanced by locality per client class).
        resolution: match (dns, passthrough) {
            (true, _) => Resolution::Dns,
            (false, true) => Resolution::None,
            (false, false) => Resolution::Static,
        },
        dns_endpoints: match dns {
            true => (0..extra.random_range(1..4))
                .map(|i| DnsEndpoint {
                    address: format!("h{i}.{svc_name}.example"),
                    ports: Default::default(),
                    labels: labels(&[("version", pick(extra, &["v1", "v2"]))]),
                    placement: placement(extra),
                    service_account: None,
                })
                .collect(),
            false => Vec::new(),
        },
        host_target_ports: Default::default(),
        addresses: addresses(rng),
        subject_alt_names: if rng.random_bool(0.2) {
            vec!["spiffe://cluster.local/ns/ext/sa/entry".into()]
        } else {
            vec![]
        },
    })
}

fn endpoint(rng: &mut StdRng, slot: usize) -> Record {
    let (ns, svc_name) = (namespace(slot), service_name(slot));
    Record::Endpoint(
        host(&svc_name, ns),
        RawEndpoint {
            ip: format!("10.0.0.{}", rng.random_range(1..6)),
            port_name: pick(rng, &["http", "http-alt"]).to_string(),
            port: pick(rng, &[9080u16, 9081]).to_owned(),
            ready: rng.random_bool(0.9),
            labels: Labels::new(),
            origin: ConfigKey::new(Kind::EndpointSlice, ns, &svc_name),
            placement: placement(rng),
            service_account: pick(rng, &[None, None, Some("own")]).map(String::from),
        },
    )
}

/// A ServiceEntry host selecting workloads of its namespace.
fn selection(rng: &mut StdRng, slot: usize) -> Record {
    let svc_name = service_name(slot);
    let svc_ns = pick(rng, &NAMESPACES[..2]);
    Record::Selection(
        host(&svc_name, svc_ns),
        WorkloadSelection {
            origin: ConfigKey::new(Kind::ServiceEntry, svc_ns, &svc_name),
            labels: labels(&[("app", &svc_name)]),
            ports: vec![SelectedPort {
                name: pick(rng, &["http", "http-alt"]).to_string(),
                target: pick(rng, &[9080u16, 7070]),
            }],
        },
    )
}

fn workload(rng: &mut StdRng, extra: &mut StdRng, slot: usize) -> Record {
    let (ns, svc_name) = (namespace(slot), service_name(slot));
    Record::Workload(Workload {
        service_account: pick(rng, &[None, Some("a"), Some("b")]).map(String::from),
        peer: None,
        ip: format!("10.0.0.{}", rng.random_range(1..6)),
        labels: {
            let mut l = labels(&[("app", &svc_name), ("version", pick(rng, &["v1", "v2"]))]);
            // Some workloads run a sidecar (auto mTLS matches them).
            if extra.random_bool(0.5) {
                l.insert("security.istio.io/tlsMode".into(), "istio".into());
            }
            l
        },
        origin: ConfigKey::new(
            pick(rng, &[Kind::Pod, Kind::WorkloadEntry]),
            ns,
            format!("pod{slot}"),
        ),
        ports: if rng.random_bool(0.3) {
            [("http".to_string(), 8888u16)].into_iter().collect()
        } else {
            Default::default()
        },
        placement: placement(rng),
    })
}

/// TLS Secrets gateways name: valid, CA-only, or unusable, in the router's namespace or
/// another, and the `-cacert` companion.
fn secret(rng: &mut StdRng) -> Record {
    let id = |fp: &str| TlsIdentity {
        cert_chain: format!("CERT {fp}"),
        private_key: format!("KEY {fp}"),
        fingerprint: fp.into(),
    };
    let name = pick(rng, &["cred", "cred-cacert", "other"]);
    let (identity, ca, problem) = match rng.random_range(0..4) {
        0 => (Some(id(pick(rng, &["fp1", "fp2"]))), None, None),
        1 => (Some(id("fp3")), Some("CA 1".to_string()), None),
        2 => (None, Some(pick(rng, &["CA 1", "CA 2"]).to_string()), None),
        _ => (None, None, Some("tls.key does not match".to_string())),
    };
    Record::Secret(TlsSecret {
        key: ConfigKey::new(Kind::Secret, pick(rng, &["istio-system", "default"]), name),
        identity,
        ca,
        problem,
    })
}

/// A mesh config layer over the built-in settings.
fn mesh(rng: &mut StdRng, extra: &mut StdRng) -> Record {
    let export_to = |rng: &mut StdRng| match rng.random_range(0..3) {
        0 => vec![],
        1 => vec![".".to_string()],
        _ => vec!["*".to_string()],
    };
    Record::Mesh(MeshSettings {
        layer: MeshLayer::Configured,
        origin: Some(ConfigKey::new(Kind::MeshConfig, "istio-system", "istio")),
        root_namespace: pick(rng, &["istio-system", "other"]).into(),
        registry_only: rng.random_bool(0.5),
        connect_timeout_ms: pick(rng, &[10_000, 2_500]),
        protocol_detection_timeout_ms: pick(extra, &[None, Some(0), Some(500)]),
        auto_mtls: extra.random_bool(0.7),
        default_retries: match rng.random_range(0..3) {
            0 => None,
            1 => Some(Retries {
                attempts: 0,
                per_try_timeout_ms: None,
                retry_on: None,
                remote_localities: false,
                ignore_previous_hosts: None,
                backoff_ms: None,
            }),
            _ => Some(Retries {
                attempts: 4,
                per_try_timeout_ms: Some(250),
                retry_on: Some("5xx".into()),
                remote_localities: rng.random_bool(0.5),
                ignore_previous_hosts: pick(rng, &[None, Some(false), Some(true)]),
                backoff_ms: pick(rng, &[None, Some(40)]),
            }),
        },
        service_export_to: export_to(rng),
        virtual_service_export_to: export_to(rng),
        destination_rule_export_to: export_to(rng),
        trust_domain: pick(extra, &["cluster.local", "corp.example"]).into(),
        trust_root: None,
        locality_lb: extra.random_bool(0.5).then(|| locality_setting(extra)),
        // Replaced by the process's bundle whichever layer is in effect.
        system_ca_bundle: "/layer/bundle.pem".into(),
        inbound_mtls: InboundMtls {
            trust_domains: pick(
                extra,
                &[&["cluster.local"][..], &["corp.example", "old.example"]],
            )
            .iter()
            .map(|t| t.to_string())
            .collect(),
            min_tls13: extra.random_bool(0.3),
            cipher_suites: Vec::new(),
            ecdh_curves: Vec::new(),
        },
        ext_authz: ext_authz_providers(extra),
        path_normalization: pick(
            extra,
            &[
                PathNormalization::Base,
                PathNormalization::None,
                PathNormalization::MergeSlashes,
                PathNormalization::DecodeAndMergeSlashes,
            ],
        ),
    })
}

/// Some of three external authorization providers: a gRPC one and an HTTP one naming
/// services the draws may define (or not), and one istiod would refuse.
fn ext_authz_providers(extra: &mut StdRng) -> Vec<ExtAuthzProvider> {
    let provider =
        |name: &str, api: ExtAuthzApi, service: &str, problem: Option<&str>| ExtAuthzProvider {
            name: name.into(),
            api,
            service: service.into(),
            port: 9000,
            timeout_ms: Some(500),
            fail_open: false,
            status_on_error: Some(503),
            body: None,
            problem: problem.map(str::to_string),
        };
    let all = [
        provider(
            "grpc-authz",
            ExtAuthzApi::Grpc,
            "svc0.default.svc.cluster.local",
            None,
        ),
        provider(
            "http-authz",
            ExtAuthzApi::Http(HttpExtAuthz {
                path_prefix: "/check".into(),
                request_headers: vec!["x-user".into()],
                ..Default::default()
            }),
            "other/svc1.other.svc.cluster.local",
            None,
        ),
        provider(
            "broken",
            ExtAuthzApi::Grpc,
            "svc2.default.svc.cluster.local",
            Some("bad"),
        ),
    ];
    all.into_iter().filter(|_| extra.random_bool(0.6)).collect()
}

/// A connected proxy: a router, a proxyless gRPC client or a sidecar.
fn proxy(rng: &mut StdRng, extra: &mut StdRng, slot: usize) -> Record {
    let router = rng.random_bool(0.3);
    let proxyless = !router && rng.random_bool(0.25);
    let ns = if router {
        "istio-system"
    } else {
        namespace(slot)
    };
    let id = format!(
        "{}~10.0.0.{}~p{slot}.{ns}~{ns}.svc.cluster.local",
        if router { "router" } else { "sidecar" },
        slot % 6
    );
    Record::Proxy(Proxy {
        id,
        kind: if router {
            ProxyKind::Router
        } else if proxyless {
            ProxyKind::Proxyless
        } else {
            ProxyKind::Sidecar
        },
        ips: vec![format!("10.0.0.{}", slot % 6)],
        namespace: ns.to_string(),
        labels: if router {
            labels(&[("istio", "ingressgateway")])
        } else {
            labels(&[("app", pick(rng, &["client", "svc0"]))])
        },
        interception_none: rng.random_bool(0.5),
        service_account: extra.random_bool(0.5).then(|| "reviews".to_string()),
        locality: pick(extra, &["", "r1/z1", "r1/z2/s1", "r2/z9"]).to_string(),
        // Drawn apart: see `with_idle_timeout`.
        idle_timeout_ns: None,
    })
}

/// A proxy's node metadata `IDLE_TIMEOUT`, now and then: none, 1s, 0s (no timeout),
/// 1m30.5s. Drawn from a generator of its own, so the logs the other generators draw stay
/// what they were.
pub fn with_idle_timeout(rng: &mut StdRng, r: Record) -> Record {
    match r {
        Record::Proxy(p) => Record::Proxy(Proxy {
            idle_timeout_ns: pick(
                rng,
                &[
                    None,
                    None,
                    Some(1_000_000_000),
                    Some(0),
                    Some(90_500_000_000),
                ],
            ),
            ..p
        }),
        other => other,
    }
}
