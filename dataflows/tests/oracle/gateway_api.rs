//! Random Gateway API objects: Gateways of an owned class or another, with one or two
//! listeners (HTTP, TCP, TLS passthrough, HTTPS with a certificate of its namespace or
//! another; hostnames, `allowedRoutes`), HTTPRoutes naming them (by listener or not) or a
//! Service (the mesh), TCPRoutes and TLSRoutes, with a few rules to services of either
//! namespace, ReferenceGrants (to Services and to Secrets), Namespaces with labels
//! (listeners select routes' namespaces by them), BackendTLSPolicies with the ConfigMaps
//! their CAs come from, ListenerSets on the Gateways (routes name them too), and the
//! routers that run the Gateways. Drawn from a generator of their own, so the logs of the others stay.

use crate::records::{pick, NAMESPACES};
use crate::support::{host, router_proxy};
use dataflows::model::*;
use rand::rngs::StdRng;
use rand::Rng;

/// One random Gateway API record, or a router of one of the Gateways.
pub fn gateway_api(rng: &mut StdRng) -> Record {
    let ns = pick(rng, &NAMESPACES[..2]);
    match rng.random_range(0..13) {
        0 | 1 => gateway(rng, ns),
        12 => listener_set(rng, ns),
        10 => backend_tls_policy(rng, ns),
        11 => {
            // A CA bundle, or a ConfigMap that is none.
            let ok = rng.random_bool(0.7);
            Record::GatewayApi(GatewayApiObject::ConfigMap(CaConfigMap {
                key: ConfigKey::new(Kind::ConfigMap, ns, format!("ca{}", rng.random_range(0..2))),
                ca: ok.then(|| format!("PEM {}", rng.random_range(0..3))),
                problem: (!ok).then(|| "has no ca.crt".to_string()),
            }))
        }
        2..=4 => route(rng, ns),
        5 => l4_route(rng, ns),
        9 => {
            // A Namespace's labels: a selector's label, or not.
            let mut labels = Labels::new();
            if rng.random_bool(0.5) {
                labels.insert("shared".into(), pick(rng, &["yes", "no"]).into());
            }
            Record::GatewayApi(GatewayApiObject::Namespace(NamespaceLabels {
                key: ConfigKey::new(Kind::Namespace, "", ns),
                labels,
            }))
        }
        6 => Record::GatewayApi(GatewayApiObject::ReferenceGrant(ReferenceGrant {
            key: ConfigKey::new(
                Kind::ReferenceGrant,
                ns,
                format!("g{}", rng.random_range(0..2)),
            ),
            from: vec![(
                pick(
                    rng,
                    &[
                        "HTTPRoute",
                        "TCPRoute",
                        "GRPCRoute",
                        "Gateway",
                        "ListenerSet",
                    ],
                )
                .into(),
                pick(rng, &NAMESPACES[..2]).into(),
            )],
            // To backends, or to the certificates of terminating listeners.
            to: vec![if rng.random_bool(0.6) {
                (
                    "Service".into(),
                    rng.random_bool(0.5)
                        .then(|| format!("svc{}", rng.random_range(0..4))),
                )
            } else if rng.random_bool(0.25) {
                // To the CA bundles of Gateways' frontend validations.
                (
                    "ConfigMap".into(),
                    rng.random_bool(0.5)
                        .then(|| format!("ca{}", rng.random_range(0..2))),
                )
            } else {
                (
                    "Secret".into(),
                    rng.random_bool(0.5)
                        .then(|| pick(rng, &["cred", "other"]).to_string()),
                )
            }],
        })),
        _ => {
            let gw = format!("gw{}", rng.random_range(0..2));
            let ip = format!(
                "10.7.{}.{}",
                usize::from(ns == "other"),
                rng.random_range(1..3)
            );
            Record::Proxy(router_proxy(
                &format!("{gw}-pod"),
                ns,
                &ip,
                &[(GATEWAY_NAME_LABEL, &gw)],
            ))
        }
    }
}

/// A BackendTLSPolicy on a Service of its namespace (the whole Service or a port, now and
/// then one it lacks), its CA from a ConfigMap (sometimes of a kind meshflow does not
/// read) or the system's; policies of one name differ in age, so conflicts go both ways.
fn backend_tls_policy(rng: &mut StdRng, ns: &str) -> Record {
    let name = format!("p{}", rng.random_range(0..3));
    let targets = (0..rng.random_range(1..3))
        .map(|i| PolicyTarget {
            group: String::new(),
            kind: "Service".into(),
            name: format!("svc{}", rng.random_range(0..4)),
            section: match rng.random_range(0..4) {
                0 => Some("http".into()),
                1 => Some(pick(rng, &["http-alt", "nope"]).into()),
                _ if i > 0 => Some("tcp-db".into()),
                _ => None,
            },
        })
        .collect();
    let system_ca = rng.random_bool(0.2);
    let ca_refs = if system_ca {
        Vec::new()
    } else {
        vec![CaRef {
            group: String::new(),
            kind: pick(rng, &["ConfigMap", "ConfigMap", "ConfigMap", "Secret"]).into(),
            name: format!("ca{}", rng.random_range(0..2)),
        }]
    };
    Record::GatewayApi(GatewayApiObject::BackendTlsPolicy(BackendTlsPolicy {
        key: ConfigKey::new(Kind::BackendTlsPolicy, ns, &name),
        created: pick(rng, &["", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"]).into(),
        targets,
        ca_refs,
        system_ca,
        hostname: format!("{name}.example.com"),
        subject_alt_names: if rng.random_bool(0.3) {
            vec!["spiffe://example/backend".into()]
        } else {
            Vec::new()
        },
        invalid: rng
            .random_bool(0.1)
            .then(|| "wellKnownCACertificates: \"Vendor\" is not supported".into()),
    }))
}

/// One or two random listeners of an object of namespace `ns`, named `{prefix}0`, ….
fn listeners(rng: &mut StdRng, ns: &str, prefix: &str) -> Vec<Listener> {
    let protocols: Vec<(usize, ListenerProtocol)> = (0..rng.random_range(1..3))
        .map(|i| {
            // Now and then a TCP listener, or TLS passing through.
            let protocol = pick(
                rng,
                &[
                    ListenerProtocol::Http,
                    ListenerProtocol::Http,
                    ListenerProtocol::Tcp,
                    ListenerProtocol::Tls,
                    ListenerProtocol::Https,
                ],
            );
            (i, protocol)
        })
        .collect();
    protocols
        .into_iter()
        .map(|(i, protocol)| Listener {
            index: i,
            name: format!("{prefix}{i}"),
            hostname: pick(
                rng,
                &[
                    None,
                    Some("*.example.com"),
                    Some("a.example.com"),
                    Some("b.example.com"),
                ],
            )
            .map(str::to_string),
            port: match protocol {
                ListenerProtocol::Tcp => 3306,
                ListenerProtocol::Tls => 8443,
                ListenerProtocol::Https => 443,
                _ => pick(rng, &[8080u16, 8081]),
            },
            protocol,
            tls: match protocol {
                ListenerProtocol::Tls => Some(ListenerTls {
                    clients: None,
                    passthrough: true,
                    certificates: Vec::new(),
                }),
                // A certificate of the Gateway's namespace, or of another one: served where
                // a ReferenceGrant there allows it.
                ListenerProtocol::Https => Some(ListenerTls {
                    clients: None,
                    passthrough: false,
                    certificates: vec![(
                        pick(rng, &[ns, "default", "istio-system"]).to_string(),
                        pick(rng, &["cred", "other"]).to_string(),
                    )],
                }),
                _ => None,
            },
            allowed_namespaces: match rng.random_range(0..5) {
                0 | 1 => AllowedNamespaces::Same,
                2 | 3 => AllowedNamespaces::All,
                _ => AllowedNamespaces::Selector(NamespaceSelector {
                    match_labels: [("shared".to_string(), "yes".to_string())].into(),
                    expressions: if rng.random_bool(0.5) {
                        vec![LabelExpression::NotIn(
                            "kubernetes.io/metadata.name".into(),
                            vec![ns.to_string()],
                        )]
                    } else {
                        Vec::new()
                    },
                }),
            },
            allowed_kinds: Vec::new(),
        })
        .collect()
}

/// A ListenerSet of `ns` on one of the Gateways, its listeners named like theirs or its
/// own; sets of one name differ in age, so precedence goes both ways.
fn listener_set(rng: &mut StdRng, ns: &str) -> Record {
    let prefix = pick(rng, &["l", "s"]);
    Record::GatewayApi(GatewayApiObject::ListenerSet(KubeListenerSet {
        key: ConfigKey::new(
            Kind::ListenerSet,
            ns,
            format!("ls{}", rng.random_range(0..2)),
        ),
        created: pick(rng, &["", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"]).into(),
        parent: (
            pick(rng, &NAMESPACES[..2]).into(),
            format!("gw{}", rng.random_range(0..2)),
        ),
        listeners: listeners(rng, ns, prefix),
        refused: Vec::new(),
    }))
}

fn gateway(rng: &mut StdRng, ns: &str) -> Record {
    let listeners = listeners(rng, ns, "l");
    let allowed_listeners = match rng.random_range(0..6) {
        0 | 1 => AllowedListeners::None,
        2 => AllowedListeners::Same,
        3 | 4 => AllowedListeners::All,
        _ => AllowedListeners::Selector(NamespaceSelector {
            match_labels: [("shared".to_string(), "yes".to_string())].into(),
            expressions: Vec::new(),
        }),
    };
    Record::GatewayApi(GatewayApiObject::Gateway(KubeGateway {
        key: ConfigKey::new(
            Kind::KubernetesGateway,
            ns,
            format!("gw{}", rng.random_range(0..2)),
        ),
        class: pick(rng, &["istio", "istio", "meshflow", "nginx"]).into(),
        listeners,
        refused: Vec::new(),
        invalid_parameters: None,
        allowed_listeners,
        sets: Vec::new(),
        frontend: frontend(rng, ns),
    }))
}

/// Now and then a frontend validation: by default and for port 443 (the HTTPS listeners'),
/// its CAs the ConfigMaps of this namespace or the other (granted or not), or a reference
/// of a kind meshflow does not read; now and then the insecure fallback.
fn frontend(rng: &mut StdRng, ns: &str) -> FrontendTls {
    let validation = |rng: &mut StdRng, field: &str| {
        rng.random_bool(0.7).then(|| FrontendValidation {
            ca_refs: (0..rng.random_range(1..3))
                .map(|_| {
                    (
                        CaRef {
                            group: String::new(),
                            kind: pick(rng, &["ConfigMap", "ConfigMap", "ConfigMap", "Secret"])
                                .into(),
                            name: format!("ca{}", rng.random_range(0..2)),
                        },
                        pick(rng, &[ns, ns, NAMESPACES[0], NAMESPACES[1]]).to_string(),
                    )
                })
                .collect(),
            insecure_fallback: rng.random_bool(0.2),
            field: field.into(),
        })
    };
    if rng.random_bool(0.5) {
        return FrontendTls::default();
    }
    let default = validation(rng, "spec.tls.frontend.default.validation");
    let per_port = if rng.random_bool(0.3) {
        vec![(
            443,
            validation(rng, "spec.tls.frontend.perPort[0].tls.validation"),
        )]
    } else {
        Vec::new()
    };
    FrontendTls { default, per_port }
}

fn route(rng: &mut StdRng, ns: &str) -> Record {
    let parents = (0..rng.random_range(1..3))
        .map(|_| {
            // Now and then a Service (the mesh): the sidecars' routes to it.
            if rng.random_bool(0.25) {
                return ParentRef {
                    kind: ParentKind::Service,
                    namespace: pick(rng, &NAMESPACES[..2]).into(),
                    name: format!("svc{}", rng.random_range(0..4)),
                    section: None,
                    port: rng.random_bool(0.3).then_some(9080),
                };
            }
            // A Gateway, or now and then one of the ListenerSets.
            let set = rng.random_bool(0.25);
            ParentRef {
                kind: if set {
                    ParentKind::ListenerSet
                } else {
                    ParentKind::Gateway
                },
                namespace: pick(rng, &NAMESPACES[..2]).into(),
                name: format!(
                    "{}{}",
                    if set { "ls" } else { "gw" },
                    rng.random_range(0..2)
                ),
                section: rng
                    .random_bool(0.3)
                    .then(|| format!("{}{}", pick(rng, &["l", "s"]), rng.random_range(0..2))),
                port: None,
            }
        })
        .collect();
    let hostnames = match rng.random_range(0..4) {
        0 => vec![],
        1 => vec!["a.example.com".into()],
        2 => vec!["*.example.com".into(), "b.example.com".into()],
        _ => vec!["other.org".into()],
    };
    let rules = (0..rng.random_range(1..3))
        .map(|_| HttpRouteRule {
            template: HttpRoute::default(),
            matches: (0..rng.random_range(0..3))
                .map(|_| HttpMatch {
                    uri: Some(match rng.random_range(0..3) {
                        0 => StringMatch::Exact(format!("/p{}", rng.random_range(0..3))),
                        1 => StringMatch::SegmentPrefix(format!("/p{}", rng.random_range(0..3))),
                        _ => StringMatch::Prefix("/".into()),
                    }),
                    ..HttpMatch::default()
                })
                .collect(),
            backends: (0..rng.random_range(0..3))
                .map(|_| {
                    let svc = format!("svc{}", rng.random_range(0..4));
                    let b_ns = if rng.random_bool(0.7) {
                        ns
                    } else {
                        pick(rng, &NAMESPACES[..2])
                    };
                    BackendRef {
                        host: Some(host(&svc, b_ns)),
                        namespace: b_ns.into(),
                        kind: "Service".into(),
                        name: svc,
                        port: Some(9080),
                        weight: pick(rng, &[0u32, 1, 3]),
                        headers: HeaderOps::default(),
                    }
                })
                .collect(),
        })
        .collect();
    Record::GatewayApi(GatewayApiObject::HttpRoute(KubeHttpRoute {
        key: ConfigKey::new(Kind::HttpRoute, ns, format!("r{}", rng.random_range(0..3))),
        created: pick(rng, &["", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"]).into(),
        parents,
        hostnames,
        rules,
    }))
}

/// A TCPRoute or TLSRoute on the Gateways, to services of either namespace.
fn l4_route(rng: &mut StdRng, ns: &str) -> Record {
    let kind = pick(rng, &[Kind::TcpRoute, Kind::TlsRoute]);
    let parents = vec![ParentRef {
        kind: ParentKind::Gateway,
        namespace: pick(rng, &NAMESPACES[..2]).into(),
        name: format!("gw{}", rng.random_range(0..2)),
        section: None,
        port: None,
    }];
    let svc = format!("svc{}", rng.random_range(0..4));
    let b_ns = if rng.random_bool(0.7) {
        ns
    } else {
        pick(rng, &NAMESPACES[..2])
    };
    Record::GatewayApi(GatewayApiObject::L4Route(KubeL4Route {
        key: ConfigKey::new(kind, ns, format!("t{}", rng.random_range(0..2))),
        created: pick(rng, &["", "2026-01-01T00:00:00Z"]).into(),
        parents,
        hostnames: if kind == Kind::TlsRoute {
            vec![pick(rng, &["a.example.com", "b.example.com"]).into()]
        } else {
            Vec::new()
        },
        rules: vec![vec![BackendRef {
            host: Some(host(&svc, b_ns)),
            namespace: b_ns.into(),
            kind: "Service".into(),
            name: svc,
            port: Some(9080),
            weight: 1,
            headers: HeaderOps::default(),
        }]],
    }))
}
