//! Random VirtualServices: HTTP, TCP and TLS routes to subsets of another service, with
//! match conditions, wildcard hosts and hosts outside the registry, delegates and their roots.

use crate::records::{namespace, pick, service_name, source_labels, NAMESPACES};
use crate::support::host;
use dataflows::model::*;
use rand::rngs::StdRng;
use rand::Rng;

/// A route destination to `target`'s `subset` with `weight`.
fn dest(target: &str, subset: Option<&str>, weight: u32) -> RouteDestination {
    RouteDestination {
        headers: Default::default(),
        via_alias: None,
        host: target.to_string(),
        subset: subset.map(String::from),
        port: None,
        weight,
    }
}

pub fn virtual_service(rng: &mut StdRng, extra: &mut StdRng, slot: usize) -> Record {
    let (ns, svc_name) = (namespace(slot), service_name(slot));
    let n = rng.random_range(0..4);
    let target = host(&format!("svc{n}"), pick(rng, &NAMESPACES[..2]));
    let w: u32 = rng.random_range(0..=100);
    let tcp = tcp_routes(rng, ns, &target, w);
    let vs_host = if rng.random_bool(0.5) {
        "*".to_string()
    } else {
        host(&svc_name, ns)
    };
    let tls = tls_routes(rng, extra, ns, &vs_host, &target, w);
    let gateways = match rng.random_range(0..3) {
        0 => vec![],
        1 => vec![format!("{ns}/gw")],
        _ => vec!["mesh".into(), "istio-system/gw".into()],
    };
    let http = http_routes(rng, &target, w);
    let mut vs = VirtualService {
        key: ConfigKey::new(Kind::VirtualService, ns, format!("vs{}", slot % 3)),
        tls,
        hosts: vec![vs_host.clone()],
        gateways,
        export_to: vec![],
        tcp,
        http,
    };
    other_hosts(extra, ns, &vs_host, &mut vs);
    delegation(rng, slot, &mut vs);
    Record::VirtualService(vs)
}

/// A TCP route's match: on port 3306, subnets, gateways and the source's namespace and labels,
/// each now and then.
fn tcp_match(rng: &mut StdRng, ns: &str) -> L4Match {
    L4Match {
        sni_hosts: Vec::new(),
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
    }
}

/// None, or a split between subsets v1 and v2 and a route to the whole service.
fn tcp_routes(rng: &mut StdRng, ns: &str, target: &str, w: u32) -> Vec<L4Route> {
    match rng.random_range(0..3) {
        0 => vec![],
        _ => vec![
            L4Route {
                index: 0,
                matches: vec![tcp_match(rng, ns), tcp_match(rng, ns)],
                route: vec![
                    dest(target, Some("v1"), w),
                    dest(target, Some("v2"), 100 - w),
                ],
            },
            L4Route {
                index: 0,
                matches: if rng.random_bool(0.5) {
                    vec![]
                } else {
                    vec![tcp_match(rng, ns)]
                },
                route: vec![dest(target, None, 100)],
            },
        ],
    }
}

/// Passthrough routes by SNI: the VirtualService's host, or a name no server serves (an
/// error, no chain).
/// Sidecars route them by SNI on TLS ports (3306 here), narrowed by `destinationSubnets`,
/// `gateways: [mesh]` and the source conditions.
fn tls_routes(
    rng: &mut StdRng,
    extra: &mut StdRng,
    ns: &str,
    vs_host: &str,
    target: &str,
    w: u32,
) -> Vec<L4Route> {
    if rng.random_range(0..3) == 0 {
        return vec![];
    }
    let mut routes = vec![L4Route {
        index: 0,
        matches: vec![L4Match {
            sni_hosts: vec![pick(rng, &[vs_host, "nowhere.example"]).into()],
            port: rng.random_bool(0.3).then_some(8444),
            source_labels: source_labels(rng),
            ..Default::default()
        }],
        route: vec![
            dest(target, Some("v1"), w),
            dest(target, Some("v2"), 100 - w),
        ],
    }];
    let m = &mut routes[0].matches[0];
    if extra.random_bool(0.2) {
        // Another service's host: where services without addresses are told apart by name,
        // the first to claim a name keeps it.
        let other = format!("svc{}", extra.random_range(0..4));
        m.sni_hosts = vec![host(&other, pick(extra, &NAMESPACES))];
    }
    if m.port.is_some() && extra.random_bool(0.5) {
        m.port = Some(3306);
    }
    if extra.random_bool(0.3) {
        m.destination_subnets = vec![pick(extra, &["10.96.0.0/24", "10.96.0.2/32"]).into()];
    }
    if extra.random_bool(0.2) {
        m.gateways = vec!["mesh".into()];
    }
    if extra.random_bool(0.2) {
        m.source_namespace = Some(ns.to_string());
    }
    if extra.random_bool(0.5) {
        // A second route: another name of the host, or any name.
        routes.push(L4Route {
            index: 0,
            matches: vec![L4Match {
                sni_hosts: vec![pick(extra, &[vs_host, "*"]).into()],
                destination_subnets: if extra.random_bool(0.3) {
                    vec!["10.96.0.1/32".into()]
                } else {
                    vec![]
                },
                ..Default::default()
            }],
            route: vec![dest(target, None, 100)],
        });
    }
    routes
}

/// `end-user: jason` to v2, and a split under `/r`, sometimes with a timeout.
fn http_routes(rng: &mut StdRng, target: &str, w: u32) -> Vec<HttpRoute> {
    vec![
        HttpRoute {
            name: None,
            matches: vec![HttpMatch {
                headers: [("end-user".to_string(), StringMatch::Exact("jason".into()))].into(),
                source_labels: source_labels(rng),
                ..Default::default()
            }],
            route: vec![dest(target, Some("v2"), 100)],
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
            route: vec![
                dest(target, Some("v1"), w),
                dest(target, Some("v2"), 100 - w),
            ],
            timeout_ms: rng.random_bool(0.3).then_some(1500),
            retries: None,
            ..Default::default()
        },
    ]
}

/// Now and then a wildcard of the host instead of the host, and a host outside the registry.
fn other_hosts(extra: &mut StdRng, ns: &str, vs_host: &str, vs: &mut VirtualService) {
    if vs_host != "*" && extra.random_bool(0.3) {
        // A wildcard of the host: it covers every service under it, but a VirtualService
        // naming a service exactly (or a longer wildcard) wins.
        let wildcards = [
            format!("*.{ns}.svc.cluster.local"),
            "*.svc.cluster.local".to_string(),
            "*.local".to_string(),
        ];
        vs.hosts = vec![wildcards[extra.random_range(0..wildcards.len())].clone()];
        if extra.random_bool(0.3) {
            vs.hosts.push(vs_host.to_string());
        }
    }
    if extra.random_bool(0.25) {
        // A host outside the registry: an alias beside the services' (routed on their
        // ports), or alone (routed on port 80).
        let outside = pick(extra, &["alias.example.com", "*.legacy.example"]).to_string();
        if extra.random_bool(0.5) {
            vs.hosts = vec![outside];
        } else {
            vs.hosts.push(outside);
        }
    }
}

/// Now and then a delegate (named `del0` or `del1`) or a root delegating to one.
fn delegation(rng: &mut StdRng, slot: usize, vs: &mut VirtualService) {
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
}
