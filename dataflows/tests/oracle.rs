//! The incremental dataflow against a naive full recompute, on random logs of config
//! changes: after every epoch, each connected proxy's resources (names and encoded bytes)
//! must equal what `naive::compute` derives from scratch from the same inputs.

use dataflows::driver::{Batch, Engine};
use dataflows::materialize::{Applied, Materialized};
use dataflows::model::*;
use dataflows::naive::{self, ProxyConfigs, Snapshot};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};

const NAMESPACES: [&str; 3] = ["default", "other", "istio-system"];

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn host(name: &str, ns: &str) -> String {
    format!("{name}.{ns}.svc.cluster.local")
}

/// Edits a record that is a DestinationRule (others pass unchanged).
trait MapDr {
    fn map_dr(self, edit: impl FnOnce(&mut DestinationRule)) -> Self;
}

impl MapDr for Record {
    fn map_dr(mut self, edit: impl FnOnce(&mut DestinationRule)) -> Self {
        if let Record::DestinationRule(dr) = &mut self {
            edit(dr);
        }
        self
    }
}

fn pick<T: Copy>(rng: &mut StdRng, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())]
}

/// One random version of the object in slot `slot` of a kind; slots make keys collide so
/// updates and deletes happen.
/// A locality and weight, often unset, sometimes only one of them.
fn placement(rng: &mut StdRng) -> Placement {
    Placement {
        locality: pick(rng, &["", "", "r1/z1", "r1/z2/s1", "r2"]).to_string(),
        weight: pick(rng, &[None, None, Some(1), Some(3)]),
    }
}

/// Often none; else a load balancer that changes routes (consistent hashing), clusters
/// (warmup) or whether a cluster has endpoints at all (passthrough).
/// `extra` draws what later features add (mesh mTLS), so the draws of `rng` (and the
/// scenarios each seed has always explored) stay as they were.
fn lb_policy(rng: &mut StdRng, extra: &mut StdRng) -> Option<TrafficPolicy> {
    let policy = base_policy(rng, extra);
    let policy = per_port_and_secrets(extra, policy);
    let policy = with_locality(extra, policy);
    with_connection_pool(extra, policy)
}

/// Sometimes a `connectionPool` whose `tcp.idleTimeout` reaches the `tcp_proxy` of routes
/// to the host (the rule's own) and whose `h2UpgradePolicy` makes its clusters HTTP/2.
fn with_connection_pool(
    extra: &mut StdRng,
    policy: Option<TrafficPolicy>,
) -> Option<TrafficPolicy> {
    if extra.random_bool(0.7) {
        return policy;
    }
    let mut p = policy.unwrap_or_default();
    let pool = p.connection_pool.get_or_insert_with(Default::default);
    pool.tcp_idle_timeout_ms = Some(30_000);
    pool.h2_upgrade = Some(H2Upgrade::Upgrade);
    pool.max_concurrent_streams = Some(10);
    pool.max_requests_per_connection = Some(5);
    if extra.random_bool(0.5) {
        pool.max_connection_duration_ms = Some(60_000);
    }
    Some(p)
}

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

/// A locality load balancing setting: failover (with or without region entries),
/// `failoverPriority` (with a fixed value, a label and a topology label, or beside
/// failover), `distribute` with wildcards, or switched off.
fn locality_setting(extra: &mut StdRng) -> LocalityLbSetting {
    match extra.random_range(0..6) {
        4 => LocalityLbSetting {
            failover_priority: vec![
                "version=v1".into(),
                "app".into(),
                "topology.kubernetes.io/zone".into(),
            ],
            ..Default::default()
        },
        5 => LocalityLbSetting {
            failover: vec![("r1".into(), "r2".into())],
            failover_priority: vec!["app".into()],
            ..Default::default()
        },
        0 => LocalityLbSetting::default(),
        1 => LocalityLbSetting {
            failover: vec![("r1".into(), "r2".into())],
            ..Default::default()
        },
        2 => LocalityLbSetting {
            distribute: vec![
                LocalityDistribute {
                    from: "r1/z1/*".into(),
                    to: vec![("r1/z1/*".into(), 70), ("r2/*".into(), 30)],
                },
                LocalityDistribute {
                    from: "*".into(),
                    to: vec![("r1/*".into(), 50), ("r2".into(), 50)],
                },
            ],
            ..Default::default()
        },
        _ => LocalityLbSetting {
            enabled: Some(false),
            ..Default::default()
        },
    }
}

/// Sometimes `outlierDetection` (which turns locality failover on) and a
/// `localityLbSetting`, at the policy or at a port entry.
fn with_locality(extra: &mut StdRng, policy: Option<TrafficPolicy>) -> Option<TrafficPolicy> {
    if extra.random_bool(0.6) {
        return policy;
    }
    let mut p = policy.unwrap_or_default();
    let mut target = TrafficPolicy::default();
    if extra.random_bool(0.6) {
        target.outlier_detection = Some(Box::new(OutlierDetection {
            consecutive_5xx: Some(1),
            ..Default::default()
        }));
    }
    if extra.random_bool(0.6) {
        target.locality_lb = Some(Box::new(locality_setting(extra)));
    }
    if extra.random_bool(0.3) {
        p.port_level.push((pick(extra, &[9080u16, 8080]), target));
    } else {
        p.outlier_detection = target.outlier_detection;
        p.locality_lb = target.locality_lb;
    }
    Some(p)
}

/// Later additions, drawn from `extra` only: a `portLevelSettings` entry (hashing, TLS from
/// a Secret, or TLS disabled for one port), or the policy's own TLS from a Secret.
fn per_port_and_secrets(
    extra: &mut StdRng,
    policy: Option<TrafficPolicy>,
) -> Option<TrafficPolicy> {
    let credential = |extra: &mut StdRng| {
        Some(Box::new(UpstreamTls {
            credential: Some(pick(extra, &["cred", "other"]).to_string()),
            mutual: extra.random_bool(0.5),
            field: "spec.trafficPolicy.tls".into(),
            ..Default::default()
        }))
    };
    match extra.random_range(0..6) {
        0 => {
            let entry = match extra.random_range(0..3) {
                0 => TrafficPolicy {
                    load_balancer: Some(LoadBalancer::ConsistentHash(Box::new(ConsistentHash {
                        key: HashKey::Header("x-port".into()),
                        table: HashTable::Ring { minimum_size: None },
                    }))),
                    ..Default::default()
                },
                1 => TrafficPolicy {
                    tls: credential(extra),
                    ..Default::default()
                },
                _ => TrafficPolicy {
                    tls_disabled: true,
                    connect_timeout_ms: Some(1234),
                    ..Default::default()
                },
            };
            let mut p = policy.unwrap_or_default();
            p.port_level.push((pick(extra, &[9080u16, 8080]), entry));
            Some(p)
        }
        1 => {
            let mut p = policy.unwrap_or_default();
            p.tls = credential(extra);
            Some(p)
        }
        _ => policy,
    }
}

fn base_policy(rng: &mut StdRng, extra: &mut StdRng) -> Option<TrafficPolicy> {
    let hash = |key| {
        LoadBalancer::ConsistentHash(Box::new(ConsistentHash {
            key,
            table: HashTable::Ring { minimum_size: None },
        }))
    };
    let (load_balancer, warmup) = match rng.random_range(0..8) {
        0 => (Some(hash(HashKey::Header("x-user".into()))), None),
        1 => (Some(hash(HashKey::SourceIp)), None),
        2 => (Some(LoadBalancer::Passthrough), None),
        3 => (
            Some(LoadBalancer::RoundRobin),
            Some(Warmup {
                duration_ms: 30_000,
                minimum_percent_micros: 10_000_000,
                aggression_micros: 1_000_000,
            }),
        ),
        // Mesh mTLS: clusters that hold the trust domain's identities.
        _ if extra.random_bool(0.4) => {
            return Some(TrafficPolicy {
                tls: Some(Box::new(UpstreamTls {
                    istio_mutual: true,
                    ..Default::default()
                })),
                ..Default::default()
            })
        }
        _ => return None,
    };
    Some(TrafficPolicy {
        load_balancer,
        warmup,
        ..Default::default()
    })
}

fn random_record(rng: &mut StdRng, extra: &mut StdRng, slot: usize) -> Record {
    let ns = NAMESPACES[slot % 2];
    let svc_name = format!("svc{}", slot % 4);
    let ports = |rng: &mut StdRng| {
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
    };
    // A port naming no protocol (told per connection) beside HTTP and TCP services' ports.
    let detected = |ports: &mut Vec<ServicePort>, extra: &mut StdRng| {
        if extra.random_bool(0.25) {
            let i = extra.random_range(0..ports.len());
            ports[i].protocol = Protocol::Auto;
        }
    };
    // Addresses that collide across services and nest, as ServiceEntries may.
    let addresses = |rng: &mut StdRng| match rng.random_range(0..4) {
        0 => vec![],
        1 => vec!["10.96.0.0/16".to_string()],
        _ => vec![format!("10.96.0.{}/32", rng.random_range(1..4))],
    };
    let dns = extra.random_bool(0.15);
    // Now and then a ServiceEntry of resolution NONE (sidecars keep the original destination,
    // gateways take EDS over its endpoints).
    let passthrough = !dns && extra.random_bool(0.15);
    // Now and then a Kubernetes ExternalName Service: an alias of a host that may be a
    // service, another alias (a chain, or a loop back to itself) or nothing at all.
    let alias_for = extra.random_bool(0.2).then(|| {
        let n = extra.random_range(0..4);
        host(&format!("svc{n}"), pick(extra, &NAMESPACES[..2]))
    });
    match rng.random_range(0..9) {
        0 => Record::Service(Service {
            // Outside the mesh: AUTO_PASSTHROUGH gateways take no cluster of it.
            mesh_external: extra.random_bool(0.2),
            prefer_close: extra.random_bool(0.2),
            headless: extra.random_bool(0.2),
            alias_for,
            aliases: Vec::new(),
            hostname: host(&svc_name, ns),
            origin: ConfigKey::new(Kind::Service, ns, &svc_name),
            ports: {
                let mut ports = ports(rng);
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
        }),
        1 => Record::Endpoint(
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
        ),
        2 if rng.random_bool(0.25) => {
            // A ServiceEntry host selecting workloads of its namespace.
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
        2 => Record::Workload(Workload {
            service_account: pick(rng, &[None, Some("a"), Some("b")]).map(String::from),
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
        }),
        3 => {
            let n = rng.random_range(0..4);
            let target = host(&format!("svc{n}"), pick(rng, &NAMESPACES[..2]));
            let dest = |subset: Option<&str>, weight| RouteDestination {
                headers: Default::default(),
                via_alias: None,
                host: target.clone(),
                subset: subset.map(String::from),
                port: None,
                weight,
            };
            let w = rng.random_range(0..=100);
            let tcp_match = |rng: &mut StdRng| TcpMatch {
                port: rng.random_bool(0.3).then_some(3306),
                destination_subnets: if rng.random_bool(0.3) {
                    vec!["10.96.0.0/24".into()]
                } else {
                    vec![]
                },
                gateways: pick(rng, &[&[][..], &["mesh"], &["istio-system/gw"]])
                    .iter()
                    .map(|g| g.to_string())
                    .collect(),
                source_namespace: rng.random_bool(0.2).then(|| ns.to_string()),
                source_labels: source_labels(rng),
            };
            let tcp = match rng.random_range(0..3) {
                0 => vec![],
                _ => vec![
                    TcpRoute {
                        matches: vec![tcp_match(rng), tcp_match(rng)],
                        route: vec![dest(Some("v1"), w), dest(Some("v2"), 100 - w)],
                    },
                    TcpRoute {
                        matches: if rng.random_bool(0.5) {
                            vec![]
                        } else {
                            vec![tcp_match(rng)]
                        },
                        route: vec![dest(None, 100)],
                    },
                ],
            };
            let vs_host = if rng.random_bool(0.5) {
                "*".to_string()
            } else {
                host(&svc_name, ns)
            };
            // Passthrough routes by SNI: the VirtualService's host, or a name no server
            // serves (an error, no chain).
            // Sidecars route them by SNI on TLS ports (3306 here), narrowed by
            // `destinationSubnets`, `gateways: [mesh]` and the source conditions.
            let tls = match rng.random_range(0..3) {
                0 => vec![],
                _ => {
                    let mut routes = vec![TlsRoute {
                        matches: vec![TlsMatch {
                            sni_hosts: vec![
                                pick(rng, &[vs_host.as_str(), "nowhere.example"]).into()
                            ],
                            port: rng.random_bool(0.3).then_some(8444),
                            source_labels: source_labels(rng),
                            ..Default::default()
                        }],
                        route: vec![dest(Some("v1"), w), dest(Some("v2"), 100 - w)],
                    }];
                    let m = &mut routes[0].matches[0];
                    if extra.random_bool(0.2) {
                        // Another service's host: where services without addresses are
                        // told apart by name, the first to claim a name keeps it.
                        let other = format!("svc{}", extra.random_range(0..4));
                        m.sni_hosts = vec![host(&other, pick(extra, &NAMESPACES))];
                    }
                    if m.port.is_some() && extra.random_bool(0.5) {
                        m.port = Some(3306);
                    }
                    if extra.random_bool(0.3) {
                        m.destination_subnets =
                            vec![pick(extra, &["10.96.0.0/24", "10.96.0.2/32"]).into()];
                    }
                    if extra.random_bool(0.2) {
                        m.gateways = vec!["mesh".into()];
                    }
                    if extra.random_bool(0.2) {
                        m.source_namespace = Some(ns.to_string());
                    }
                    if extra.random_bool(0.5) {
                        // A second route: another name of the host, or any name.
                        routes.push(TlsRoute {
                            matches: vec![TlsMatch {
                                sni_hosts: vec![pick(extra, &[vs_host.as_str(), "*"]).into()],
                                destination_subnets: if extra.random_bool(0.3) {
                                    vec!["10.96.0.1/32".into()]
                                } else {
                                    vec![]
                                },
                                ..Default::default()
                            }],
                            route: vec![dest(None, 100)],
                        });
                    }
                    routes
                }
            };
            let mut vs = VirtualService {
                key: ConfigKey::new(Kind::VirtualService, ns, format!("vs{}", slot % 3)),
                tls,
                hosts: vec![vs_host.clone()],
                gateways: match rng.random_range(0..3) {
                    0 => vec![],
                    1 => vec![format!("{ns}/gw")],
                    _ => vec!["mesh".into(), "istio-system/gw".into()],
                },
                export_to: vec![],
                tcp,
                http: vec![
                    HttpRoute {
                        name: None,
                        matches: vec![HttpMatch {
                            headers: [("end-user".to_string(), StringMatch::Exact("jason".into()))]
                                .into(),
                            source_labels: source_labels(rng),
                            ..Default::default()
                        }],
                        route: vec![dest(Some("v2"), 100)],
                        timeout_ms: None,
                        retries: None,
                        ..Default::default()
                    },
                    HttpRoute {
                        name: Some("split".into()),
                        matches: vec![HttpMatch {
                            uri: Some(StringMatch::Prefix("/r".into())),
                            ..Default::default()
                        }],
                        route: vec![dest(Some("v1"), w), dest(Some("v2"), 100 - w)],
                        timeout_ms: rng.random_bool(0.3).then_some(1500),
                        retries: None,
                        ..Default::default()
                    },
                ],
            };
            if vs_host != "*" && extra.random_bool(0.3) {
                // A wildcard of the host: it covers every service under it, but a
                // VirtualService naming a service exactly (or a longer wildcard) wins.
                let wildcards = [
                    format!("*.{ns}.svc.cluster.local"),
                    "*.svc.cluster.local".to_string(),
                    "*.local".to_string(),
                ];
                vs.hosts = vec![wildcards[extra.random_range(0..wildcards.len())].clone()];
                if extra.random_bool(0.3) {
                    vs.hosts.push(vs_host.clone());
                }
            }
            if extra.random_bool(0.25) {
                // A host outside the registry: an alias beside the services' (routed on
                // their ports), or alone (routed on port 80).
                let outside = pick(extra, &["alias.example.com", "*.legacy.example"]).to_string();
                if extra.random_bool(0.5) {
                    vs.hosts = vec![outside];
                } else {
                    vs.hosts.push(outside);
                }
            }
            match rng.random_range(0..5) {
                // A delegate: no hosts, routes under /r, sometimes private to its namespace.
                0 => {
                    vs.key.name = format!("del{}", slot % 2);
                    vs.hosts.clear();
                    vs.gateways.clear();
                    vs.tcp.clear();
                    vs.tls.clear();
                    vs.http[1].matches[0].uri =
                        Some(StringMatch::Prefix(pick(rng, &["/r/a", "/x"]).to_string()));
                    if rng.random_bool(0.3) {
                        vs.export_to = vec![".".into()];
                    }
                }
                // A root delegating /r to one of them.
                1 => vs.http.insert(
                    0,
                    HttpRoute {
                        matches: vec![HttpMatch {
                            uri: Some(StringMatch::Prefix("/r".into())),
                            ..Default::default()
                        }],
                        delegate: Some(ConfigKey::new(
                            Kind::VirtualService,
                            pick(rng, &NAMESPACES[..2]),
                            format!("del{}", rng.random_range(0..2)),
                        )),
                        ..Default::default()
                    },
                ),
                _ => {}
            }
            Record::VirtualService(vs)
        }
        4 => Record::DestinationRule(DestinationRule {
            key: ConfigKey::new(
                Kind::DestinationRule,
                pick(rng, &NAMESPACES),
                format!("dr{}", slot % 3),
            ),
            host: host(&svc_name, ns),
            export_to: vec![],
            traffic_policy: lb_policy(rng, extra),
            subsets: ["v1", "v2"][..rng.random_range(1..3)]
                .iter()
                .map(|v| Subset {
                    name: v.to_string(),
                    labels: labels(&[("version", v)]),
                    traffic_policy: lb_policy(rng, extra),
                })
                .collect(),
            // Now and then only for the proxies of its namespace a label selects.
            selector: extra
                .random_bool(0.3)
                .then(|| labels(&[("app", pick(extra, &["client", "svc0", "nobody"]))])),
        })
        .map_dr(|dr| {
            // Now and then a wildcard host (the most specific covering rule applies where
            // no rule names the host), and an `exportTo` that decides which rules of one
            // namespace and host merge; the rules of a namespace for one host (`dr0` to
            // `dr2`) merge in name order.
            match extra.random_range(0..8) {
                0 => dr.host = format!("*.{ns}.svc.cluster.local"),
                1 => dr.host = "*.svc.cluster.local".to_string(),
                2 => dr.host = "*".to_string(),
                _ => {}
            }
            let exports: [&[&str]; 6] = [&[], &[], &["."], &["*"], &[".", "other"], &["other"]];
            dr.export_to = exports[extra.random_range(0..exports.len())]
                .iter()
                .map(|e| e.to_string())
                .collect();
        }),
        5 => {
            let tls_server = rng.random_bool(0.6).then(|| {
                // A TLS server: terminating with a Secret (SIMPLE or MUTUAL) or passthrough.
                let mode = pick(
                    rng,
                    &[
                        ServerTlsMode::Simple,
                        ServerTlsMode::Mutual,
                        ServerTlsMode::OptionalMutual,
                        ServerTlsMode::Passthrough,
                    ],
                );
                // Later: the gateway's workload certificate.
                let mode = if extra.random_bool(0.2) {
                    ServerTlsMode::IstioMutual
                } else {
                    mode
                };
                // Now and then: passing through to the cluster the SNI names.
                let mode = if extra.random_bool(0.15) {
                    ServerTlsMode::AutoPassthrough
                } else {
                    mode
                };
                GatewayServer {
                    port: pick(rng, &[8443u16, 8444]),
                    port_name: "https".into(),
                    protocol: Protocol::Tls,
                    bind: None,
                    hosts: vec![pick(rng, &["*/*", "./*", "default/*"]).to_string()],
                    https_redirect: false,
                    tls: Some(Box::new(ServerTls {
                        mode,
                        credential: (mode != ServerTlsMode::Passthrough)
                            .then(|| Credential::Secret(pick(rng, &["cred", "other"]).into()))
                            .filter(|_| {
                                !matches!(
                                    mode,
                                    ServerTlsMode::IstioMutual | ServerTlsMode::AutoPassthrough
                                )
                            }),
                        min_version: None,
                        max_version: None,
                        cipher_suites: vec![],
                        subject_alt_names: vec![],
                        // A TLS server that terminates: routed by `tcp[]` routes.
                        tcp: !matches!(
                            mode,
                            ServerTlsMode::Passthrough | ServerTlsMode::AutoPassthrough
                        ) && extra.random_bool(0.4),
                    })),
                    field: "spec.servers[2]".into(),
                }
            });
            Record::Gateway(Gateway {
                key: ConfigKey::new(Kind::Gateway, pick(rng, &["default", "istio-system"]), "gw"),
                selector: labels(&[("istio", "ingressgateway")]),
                servers: std::iter::once(Protocol::Http)
                    .chain(rng.random_bool(0.5).then_some(Protocol::Tcp))
                    .map(|protocol| GatewayServer {
                        port: pick(rng, &[8080u16, 8081, 3306]).to_owned(),
                        port_name: "http".into(),
                        protocol,
                        bind: None,
                        hosts: vec![pick(rng, &["*/*", "./*", "default/*"]).to_string()],
                        https_redirect: protocol == Protocol::Http && rng.random_bool(0.3),
                        tls: None,
                        field: String::new(),
                    })
                    .chain(tls_server)
                    .collect(),
            })
        }
        6 => {
            let sel = rng.random_bool(0.5).then(|| labels(&[("app", "client")]));
            Record::Sidecar(Sidecar {
                registry_only: pick(rng, &[None, Some(false), Some(true)]),
                // Unknown destinations to an egress proxy (where ALLOW_ANY holds).
                egress_proxy: extra.random_bool(0.3).then(|| EgressProxy {
                    host: host("svc1", "default"),
                    subset: pick(extra, &[None, Some("v1")]).map(String::from),
                    port: pick(extra, &[9080u16, 3306]),
                }),
                // Ingress, on a port the proxies' own endpoints may have or not: it replaces
                // their own ports.
                ingress: match extra.random_range(0..3) {
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
                                    ca: (mode != ServerTlsMode::Simple)
                                        .then(|| "/etc/certs/ca.pem".into()),
                                }),
                                min_version: None,
                                max_version: None,
                                cipher_suites: vec![],
                                subject_alt_names: vec![],
                                tcp: false,
                            })
                        }),
                        fail_closed: None,
                    }],
                    _ => Vec::new(),
                },
                // A connection pool for every inbound cluster of the selected proxies.
                inbound_connection_pool: extra.random_bool(0.2).then(|| inbound_pool(7)),
                key: ConfigKey::new(
                    Kind::Sidecar,
                    pick(rng, &NAMESPACES),
                    format!("sc{}", slot % 2),
                ),
                selector: sel,
                egress: match rng.random_range(0..4) {
                    3 => vec![
                        EgressListener {
                            port: Some(EgressPort {
                                number: pick(rng, &[3306u16, 9080]),
                                // Or naming no protocol: told per connection.
                                protocol: pick(
                                    extra,
                                    &[Protocol::Tcp, Protocol::Tcp, Protocol::Auto],
                                ),
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
                },
            })
        }
        8 if rng.random_bool(0.4) => {
            // TLS Secrets gateways name: valid, CA-only, or unusable, in the router's
            // namespace or another, and the `-cacert` companion.
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
        7 if rng.random_bool(0.5) => {
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
            })
        }
        _ => {
            let router = rng.random_bool(0.3);
            let proxyless = !router && rng.random_bool(0.25);
            let ns = if router { "istio-system" } else { ns };
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
    }
}

/// A proxy's node metadata `IDLE_TIMEOUT`, now and then: none, 1s, 0s (no timeout),
/// 1m30.5s. Drawn from a generator of its own, so the logs the other generators draw stay
/// what they were.
fn with_idle_timeout(rng: &mut StdRng, r: Record) -> Record {
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

/// A match's `sourceLabels`, now and then: selectors some proxies carry (sidecars `app`,
/// routers `istio`) and one nobody does.
fn source_labels(rng: &mut StdRng) -> Option<Labels> {
    rng.random_bool(0.3).then(|| match rng.random_range(0..4) {
        0 => labels(&[("app", "client")]),
        1 => labels(&[("app", "svc0")]),
        2 => labels(&[("istio", "ingressgateway")]),
        _ => labels(&[("app", "client"), ("version", "none")]),
    })
}

/// The key a source would hold one version of.
fn identity(r: &Record) -> String {
    match r {
        Record::Service(s) => format!("svc/{}", s.hostname),
        Record::Endpoint(h, e) => format!("ep/{h}/{}/{}/{}", e.ip, e.port_name, e.port),
        Record::Workload(w) => format!("wl/{}", w.origin),
        Record::VirtualService(v) => format!("vs/{}", v.key),
        Record::DestinationRule(d) => format!("dr/{}", d.key),
        Record::Gateway(g) => format!("gw/{}", g.key),
        Record::Sidecar(s) => format!("sc/{}", s.key),
        Record::Proxy(p) => format!("px/{}", p.id),
        Record::Secret(s) => format!("secret/{}", s.key),
        Record::Selection(h, s) => format!("sel/{h}/{}", s.origin),
        // One mesh config, as a mesh config source holds.
        Record::Mesh(_) => "mesh".into(),
    }
}

/// Accumulates the dataflow's diffs into per-proxy configs, checking that every proxy holds
/// each (type, name) exactly once and that every body it references exists.
#[derive(Default)]
struct Accumulated {
    held: Materialized,
    bodies: BTreeMap<(ResourceType, String, String), (Resource, isize)>,
}

/// Per proxy: `(type, name) → version`.
type Held = BTreeMap<ProxyId, BTreeMap<(ResourceType, String), String>>;

impl Accumulated {
    fn held(&self) -> Held {
        self.held
            .snapshot()
            .into_iter()
            .map(|(p, keys)| {
                let keys = keys
                    .into_keys()
                    .map(|k| ((k.rtype, k.name), k.version))
                    .collect();
                (p, keys)
            })
            .collect()
    }

    fn configs(&self) -> ProxyConfigs {
        let mut out = ProxyConfigs::new();
        for (proxy, keys) in self.held() {
            for ((rtype, name), version) in keys {
                let (body, _) = self
                    .bodies
                    .get(&(rtype, name.clone(), version.clone()))
                    .unwrap_or_else(|| panic!("no body for {rtype:?} {name} {version}"));
                out.entry(proxy.clone())
                    .or_default()
                    .insert((rtype, name), body.clone());
            }
        }
        out
    }
}

/// One reported change, flattened: proxy, type, name, old and new version.
type FlatChange = (
    ProxyId,
    ResourceType,
    String,
    Option<String>,
    Option<String>,
);

/// The per-proxy change lists `Materialized::apply` reports must be exactly the difference
/// between what each proxy held before and after (the debug history records them).
fn check_reported_changes(before: &Held, after: &Held, applied: &Applied, epoch: u64) {
    let mut expected: BTreeSet<FlatChange> = BTreeSet::new();
    let empty = BTreeMap::new();
    for p in before.keys().chain(after.keys()) {
        let (b, a) = (
            before.get(p).unwrap_or(&empty),
            after.get(p).unwrap_or(&empty),
        );
        for ((t, n), v) in b {
            if a.get(&(*t, n.clone())) != Some(v) {
                let new = a.get(&(*t, n.clone())).cloned();
                expected.insert((p.clone(), *t, n.clone(), Some(v.clone()), new));
            }
        }
        for ((t, n), v) in a {
            if !b.contains_key(&(*t, n.clone())) {
                expected.insert((p.clone(), *t, n.clone(), None, Some(v.clone())));
            }
        }
    }
    let reported: BTreeSet<_> = applied
        .changes
        .iter()
        .flat_map(|(p, t, list)| {
            list.iter().map(move |(n, o, v)| {
                (
                    p.clone(),
                    *t,
                    n.to_string(),
                    o.as_deref().map(str::to_string),
                    v.as_deref().map(str::to_string),
                )
            })
        })
        .collect();
    assert_eq!(reported, expected, "epoch {epoch}: reported changes differ");
    let touched: BTreeSet<&ProxyId> = expected.iter().map(|c| &c.0).collect();
    for p in touched {
        assert!(
            applied.touched.contains(p),
            "epoch {epoch}: {p} changed but was not reported as touched"
        );
    }
}

fn run(seed: u64, steps: usize, workers: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut extra = StdRng::seed_from_u64(seed ^ 0x6d74_6c73);
    let mut node_meta = StdRng::seed_from_u64(seed ^ 0x6964_6c65);
    // A CA's root: every sidecar and router holds its workload secrets.
    let mesh = MeshConfig {
        trust_root: Some("-----BEGIN CERTIFICATE-----\noracle\n-----END CERTIFICATE-----\n".into()),
        system_ca_bundle: "/oracle/ca-bundle.pem".into(),
        ..Default::default()
    };
    let engine = Engine::start(workers, mesh.clone());
    let mut live: BTreeMap<String, Record> = BTreeMap::new();
    let mut acc = Accumulated::default();
    let mut checked_nonempty = 0;
    for epoch in 1..=steps as u64 {
        let mut changes = Vec::new();
        for _ in 0..rng.random_range(1..6) {
            let slot = rng.random_range(0..12);
            let record =
                with_idle_timeout(&mut node_meta, random_record(&mut rng, &mut extra, slot));
            let id = identity(&record);
            if let Some(old) = live.remove(&id) {
                changes.push((old, -1));
                if rng.random_bool(0.3) {
                    continue; // a delete
                }
            }
            live.insert(id, record.clone());
            changes.push((record, 1));
        }
        let out = engine
            .step(Batch { epoch, changes })
            .expect("engine running");
        let before = acc.held();
        let applied = acc.held.apply(&out, true);
        check_reported_changes(&before, &acc.held(), &applied, epoch);
        for (r, d) in out.bodies {
            let e = acc
                .bodies
                .entry((r.rtype, r.name.clone(), r.version.clone()))
                .or_insert((r, 0));
            e.1 += d;
        }
        acc.bodies.retain(|_, (_, c)| *c != 0);

        let snapshot = Snapshot {
            records: live.values().cloned().collect::<BTreeSet<_>>(),
        };
        let expected = naive::compute(&mesh, &snapshot);
        let actual = acc.configs();
        if expected != actual {
            for (p, exp) in &expected {
                let act = actual.get(p).cloned().unwrap_or_default();
                for (k, r) in exp {
                    if act.get(k) != Some(r) {
                        eprintln!(
                            "epoch {epoch} {p}: expected {k:?} {}, dataflow has {:?}",
                            r.version,
                            act.get(k).map(|r| &r.version)
                        );
                    }
                }
                for k in act.keys().filter(|k| !exp.contains_key(*k)) {
                    eprintln!("epoch {epoch} {p}: dataflow has extra {k:?}");
                }
            }
            for p in actual.keys().filter(|p| !expected.contains_key(*p)) {
                eprintln!("epoch {epoch}: dataflow has extra proxy {p}");
            }
            panic!("seed {seed}: dataflow differs from the full recompute at epoch {epoch}");
        }
        checked_nonempty += usize::from(actual.values().any(|m| m.len() > 4));
    }
    assert!(
        checked_nonempty > steps / 4,
        "the random log rarely produced any config ({checked_nonempty}/{steps})"
    );
}

#[test]
fn oracle_one_worker() {
    for seed in 0..6 {
        run(seed, 120, 1);
    }
}

#[test]
fn oracle_two_workers() {
    for seed in 100..103 {
        run(seed, 80, 2);
    }
}
