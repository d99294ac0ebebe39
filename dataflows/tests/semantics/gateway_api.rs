//! The Gateway API at a gateway: a `Gateway` of an owned class becomes listeners on the
//! routers its name label selects in its namespace; HTTPRoutes attach to its listeners by
//! parent reference, `allowedRoutes` and hostname; their rules are ordered across routes by
//! the spec's precedence; a backend in another namespace needs a ReferenceGrant there.

use crate::support::{host, px, router_proxy, service, Mesh};
use dataflows::model::*;
use envoy_types::pb::envoy::config::route::v3::{route::Action, route_match::PathSpecifier};

fn listener(name: &str, port: u16, hostname: Option<&str>, from: AllowedNamespaces) -> Listener {
    Listener {
        index: 0,
        name: name.into(),
        hostname: hostname.map(str::to_string),
        port,
        protocol: ListenerProtocol::Http,
        tls: None,
        allowed_namespaces: from,
        allowed_kinds: Vec::new(),
    }
}

/// An HTTPS listener on 443 terminating with Secret `cert` of namespace `cert_ns`.
fn https_listener(name: &str, hostname: Option<&str>, cert_ns: &str) -> Listener {
    let mut l = listener(name, 443, hostname, AllowedNamespaces::Same);
    l.protocol = ListenerProtocol::Https;
    l.tls = Some(ListenerTls {
        clients: None,
        passthrough: false,
        certificates: vec![(cert_ns.into(), "cert".into())],
    });
    l
}

/// What each virtual host of the HTTPS route configuration of listener `listener` on
/// `p` answers, by its first domain, sorted: "404" (no routes), "421", or what `routed`
/// calls its routes as (path, where to); `None` when there is no such route configuration.
fn https_outcomes(
    m: &Mesh,
    p: &Proxy,
    listener: &str,
    routed: impl Fn(&[(String, String)]) -> String,
) -> Option<Vec<(String, String)>> {
    let route = m
        .routes(p)
        .into_iter()
        .find(|r| r.starts_with(&format!("https.443.{listener}.")))?;
    let mut rows: Vec<(String, String)> = table(m, p, &route)
        .into_iter()
        .map(|(domains, routes)| {
            let what = match routes.as_slice() {
                [] => "404".to_string(),
                [(_, s)] if s == "421" => "421".to_string(),
                rs => routed(rs),
            };
            (domains[0].clone(), what)
        })
        .collect();
    rows.sort();
    Some(rows)
}

/// `(a, b)` pairs owned and sorted, as [`https_outcomes`] gives them.
fn sorted_pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = v
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    v.sort();
    v
}

/// The gateway proxy of Gateway `default/gw` (its name label), pod `gw-abc`.
fn gw_pod() -> Proxy {
    router_proxy(
        "gw-abc",
        "default",
        "10.9.0.1",
        &[(GATEWAY_NAME_LABEL, "gw")],
    )
}

fn kube_gateway(ns: &str, name: &str, class: &str, listeners: Vec<Listener>) -> Record {
    Record::GatewayApi(GatewayApiObject::Gateway(KubeGateway {
        key: ConfigKey::new(Kind::KubernetesGateway, ns, name),
        class: class.into(),
        listeners,
        refused: Vec::new(),
        invalid_parameters: None,
        allowed_listeners: AllowedListeners::None,
        sets: Vec::new(),
        frontend: Default::default(),
    }))
}

fn backend(name: &str, ns: &str, port: u16) -> BackendRef {
    BackendRef {
        host: Some(host(name, ns)),
        namespace: ns.into(),
        kind: "Service".into(),
        name: name.into(),
        port: Some(port),
        weight: 1,
        headers: HeaderOps::default(),
    }
}

/// An HTTPRoute on Gateway `default/gw` with one rule per (path match, backend).
fn http_route(
    ns: &str,
    name: &str,
    created: &str,
    hostnames: &[&str],
    rules: Vec<(StringMatch, BackendRef)>,
) -> Record {
    Record::GatewayApi(GatewayApiObject::HttpRoute(KubeHttpRoute {
        key: ConfigKey::new(Kind::HttpRoute, ns, name),
        created: created.into(),
        parents: vec![ParentRef {
            kind: ParentKind::Gateway,
            namespace: "default".into(),
            name: "gw".into(),
            section: None,
            port: None,
        }],
        hostnames: hostnames.iter().map(|h| h.to_string()).collect(),
        rules: rules
            .into_iter()
            .map(|(path, b)| HttpRouteRule {
                template: HttpRoute::default(),
                matches: vec![HttpMatch {
                    uri: Some(path),
                    ..HttpMatch::default()
                }],
                backends: vec![b],
            })
            .collect(),
    }))
}

/// A virtual host's domains and its routes as (path, where to).
type VirtualHostRows = (Vec<String>, Vec<(String, String)>);

/// (domains, [(path, cluster or "500")]) of each virtual host of `route`.
fn table(m: &Mesh, p: &Proxy, route: &str) -> Vec<VirtualHostRows> {
    m.route_body(p, route)
        .virtual_hosts
        .into_iter()
        .map(|vh| {
            let routes = vh
                .routes
                .iter()
                .map(|r| {
                    let path = match r.r#match.as_ref().and_then(|m| m.path_specifier.clone()) {
                        Some(PathSpecifier::Path(p)) => format!("={p}"),
                        Some(PathSpecifier::Prefix(p)) => format!("{p}*"),
                        Some(PathSpecifier::PathSeparatedPrefix(p)) => format!("{p}/*"),
                        other => format!("{other:?}"),
                    };
                    let to = match &r.action {
                        Some(Action::Route(ra)) => format!("{:?}", ra.cluster_specifier),
                        Some(Action::DirectResponse(d)) => d.status.to_string(),
                        other => format!("{other:?}"),
                    };
                    (path, to)
                })
                .collect();
            (vh.domains, routes)
        })
        .collect()
}

/// Two routes on one listener hostname: the newer route's exact path and longer prefix
/// come before the older route's shorter prefix (precedence across routes, not route
/// order); a route from a namespace `allowedRoutes: Same` does not admit is not attached;
/// a backend in another namespace answers 500 until a ReferenceGrant there allows it. A
/// router of another namespace carrying the name label gets nothing; retracting the
/// Gateway removes its listener.
#[test]
fn routes_attach_by_listener_and_order_by_precedence_across_routes() {
    let mut m = Mesh::new();
    let gw_pod = gw_pod();
    let other_ns = router_proxy("gw-xyz", "other", "10.9.0.2", &[(GATEWAY_NAME_LABEL, "gw")]);
    let gw = kube_gateway(
        "default",
        "gw",
        "istio",
        vec![listener(
            "http",
            8080,
            Some("*.example.com"),
            AllowedNamespaces::Same,
        )],
    );
    let older = http_route(
        "default",
        "a-older",
        "2026-01-01T00:00:00Z",
        &["shop.example.com"],
        vec![(
            StringMatch::Prefix("/".into()),
            backend("web", "default", 80),
        )],
    );
    let newer = http_route(
        "default",
        "b-newer",
        "2026-02-01T00:00:00Z",
        &["shop.example.com", "elsewhere.org"],
        vec![
            (
                StringMatch::SegmentPrefix("/api".into()),
                backend("api", "default", 80),
            ),
            (
                StringMatch::Exact("/login".into()),
                backend("auth", "backend", 80),
            ),
        ],
    );
    let foreign = http_route(
        "team",
        "c-foreign",
        "2025-01-01T00:00:00Z",
        &["shop.example.com"],
        vec![(
            StringMatch::Exact("/stolen".into()),
            backend("thief", "team", 80),
        )],
    );
    m.insert(vec![
        service("web", "default"),
        service("api", "default"),
        service("auth", "backend"),
        service("thief", "team"),
        gw.clone(),
        older,
        newer,
        foreign,
        px(&gw_pod),
        px(&other_ns),
    ]);
    assert_eq!(m.listeners(&gw_pod), crate::support::set(&["0.0.0.0_8080"]));
    assert!(
        m.listeners(&other_ns).is_empty(),
        "a Gateway selects in its own namespace"
    );
    let rows = table(&m, &gw_pod, "http.8080");
    let shop: Vec<_> = rows
        .iter()
        .filter(|(d, _)| d.iter().any(|d| d == "shop.example.com"))
        .collect();
    assert_eq!(shop.len(), 1, "{rows:?}");
    let paths: Vec<(&str, &str)> = shop[0]
        .1
        .iter()
        .map(|(p, to)| {
            (
                p.as_str(),
                if to.contains("web") {
                    "web"
                } else if to.contains("api") {
                    "api"
                } else if to == "500" {
                    "500"
                } else {
                    to.as_str()
                },
            )
        })
        .collect();
    assert_eq!(
        paths,
        vec![("=/login", "500"), ("/api/*", "api"), ("/*", "web")],
        "exact, then the longest prefix, then the older route's `/`; the foreign route is not there"
    );
    assert!(
        !rows
            .iter()
            .any(|(d, _)| d.iter().any(|d| d == "elsewhere.org")),
        "a hostname outside the listener's is not served: {rows:?}"
    );

    // A grant in `backend` for HTTPRoutes of `default` lets /login reach `auth`.
    let grant = Record::GatewayApi(GatewayApiObject::ReferenceGrant(ReferenceGrant {
        key: ConfigKey::new(Kind::ReferenceGrant, "backend", "allow-default"),
        from: vec![("HTTPRoute".into(), "default".into())],
        to: vec![("Service".into(), None)],
    }));
    m.insert(vec![grant.clone()]);
    let rows = table(&m, &gw_pod, "http.8080");
    let login = rows
        .iter()
        .flat_map(|(_, r)| r)
        .find(|(p, _)| p == "=/login")
        .expect("the /login route");
    assert!(login.1.contains("auth.backend"), "{login:?}");
    m.retract(vec![grant]);
    let rows = table(&m, &gw_pod, "http.8080");
    assert!(rows
        .iter()
        .flat_map(|(_, r)| r)
        .any(|(p, to)| p == "=/login" && to == "500"));

    m.retract(vec![gw]);
    assert!(m.listeners(&gw_pod).is_empty());
}

/// A Gateway of a class meshflow does not own is not served.
#[test]
fn a_gateway_of_another_class_is_not_served() {
    let mut m = Mesh::new();
    let gw_pod = gw_pod();
    m.insert(vec![
        kube_gateway(
            "default",
            "gw",
            "nginx",
            vec![listener("http", 8080, None, AllowedNamespaces::All)],
        ),
        px(&gw_pod),
    ]);
    assert!(m.listeners(&gw_pod).is_empty());
}

fn namespace(name: &str, labels: &[(&str, &str)]) -> Record {
    Record::GatewayApi(GatewayApiObject::Namespace(NamespaceLabels {
        key: ConfigKey::new(Kind::Namespace, "", name),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }))
}

/// `from: Selector`: a listener takes the routes of the namespaces whose labels its
/// selector matches — `matchLabels` and `matchExpressions` —, and follows the labels as
/// they change; a namespace whose labels are not known has only its name label, so a
/// selector on anything else takes nothing from it (closed). A route it does not take is
/// `NotAllowedByListeners`.
#[test]
fn a_namespace_selector_takes_the_routes_of_the_namespaces_it_matches() {
    let mut m = Mesh::new();
    let gw_pod = gw_pod();
    let selector = NamespaceSelector {
        match_labels: [("shared".to_string(), "yes".to_string())].into(),
        expressions: vec![LabelExpression::NotIn("env".into(), vec!["test".into()])],
    };
    let gw = kube_gateway(
        "default",
        "gw",
        "istio",
        vec![listener(
            "http",
            8080,
            None,
            AllowedNamespaces::Selector(selector),
        )],
    );
    let route = |ns: &str| {
        http_route(
            ns,
            "r",
            "2026-01-01T00:00:00Z",
            &[&format!("{ns}.example.com")],
            vec![(StringMatch::Prefix("/".into()), backend("web", ns, 80))],
        )
    };
    let served = |m: &Mesh| -> Vec<String> {
        table(m, &gw_pod, "http.8080")
            .into_iter()
            .flat_map(|(d, _)| d)
            .filter(|d| !d.contains(':'))
            .collect()
    };
    m.insert(vec![
        service("web", "team-a"),
        service("web", "team-b"),
        service("web", "team-c"),
        gw,
        route("team-a"),
        route("team-b"),
        route("team-c"),
        namespace("team-a", &[("shared", "yes")]),
        namespace("team-b", &[("shared", "yes"), ("env", "test")]),
        px(&gw_pod),
    ]);
    assert_eq!(served(&m), ["team-a.example.com"]);
    let refused = ConfigKey::new(Kind::HttpRoute, "team-b", "r");
    assert!(
        errors_of(&m, &refused)
            .iter()
            .any(|e| e.contains("NotAllowedByListeners")),
        "{:?}",
        errors_of(&m, &refused)
    );
    // team-b leaves the test environment, team-c's labels become known: both are taken.
    m.retract(vec![namespace(
        "team-b",
        &[("shared", "yes"), ("env", "test")],
    )]);
    m.insert(vec![
        namespace("team-b", &[("shared", "yes"), ("env", "prod")]),
        namespace("team-c", &[("shared", "yes")]),
    ]);
    assert_eq!(
        served(&m),
        [
            "team-a.example.com",
            "team-b.example.com",
            "team-c.example.com"
        ]
    );
    assert!(errors_of(&m, &refused).is_empty());
    // Its Namespace gone, team-a keeps only its name label: not taken.
    m.retract(vec![namespace("team-a", &[("shared", "yes")])]);
    assert_eq!(served(&m), ["team-b.example.com", "team-c.example.com"]);
}

/// The messages of the errors in effect on `key`.
fn errors_of(m: &Mesh, key: &ConfigKey) -> Vec<String> {
    m.errors
        .keys()
        .filter(|e| e.object == *key)
        .map(|e| e.message.clone())
        .collect()
}

/// What is wrong with a route is an error naming the field and the spec's reason, and is
/// retracted when fixed: a parent that does not exist, a listener name that does not, a
/// listener that does not admit the route's namespace, a hostname no listener serves, a
/// backend that does not exist and one in another namespace without a grant.
#[test]
fn route_problems_are_errors_naming_the_field_and_retract_when_fixed() {
    let mut m = Mesh::new();
    let gw = kube_gateway(
        "default",
        "gw",
        "istio",
        vec![listener(
            "http",
            8080,
            Some("*.example.com"),
            AllowedNamespaces::Same,
        )],
    );
    let route =
        |parents: Vec<ParentRef>, hostnames: &[&str], backends: Vec<BackendRef>, ns: &str| {
            Record::GatewayApi(GatewayApiObject::HttpRoute(KubeHttpRoute {
                key: ConfigKey::new(Kind::HttpRoute, ns, "r"),
                created: String::new(),
                parents,
                hostnames: hostnames.iter().map(|h| h.to_string()).collect(),
                rules: vec![HttpRouteRule {
                    template: HttpRoute::default(),
                    matches: vec![],
                    backends,
                }],
            }))
        };
    let parent = |name: &str, section: Option<&str>| ParentRef {
        kind: ParentKind::Gateway,
        namespace: "default".into(),
        name: name.into(),
        section: section.map(str::to_string),
        port: None,
    };
    let key = ConfigKey::new(Kind::HttpRoute, "default", "r");
    let bad = route(
        vec![parent("missing", None), parent("gw", Some("https"))],
        &[],
        vec![
            backend("nowhere", "default", 80),
            backend("auth", "backend", 80),
        ],
        "default",
    );
    m.insert(vec![gw.clone(), service("auth", "backend"), bad.clone()]);
    let errors = errors_of(&m, &key);
    for expected in [
        "spec.parentRefs[0]: NoMatchingParent: Gateway default/missing does not exist",
        "spec.parentRefs[1]: NoMatchingParent: Gateway default/gw has no listener named \"https\"",
        "spec.rules[0].backendRefs[0]: BackendNotFound",
        "spec.rules[0].backendRefs[1]: RefNotPermitted",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "{expected} not in {errors:?}"
        );
    }

    let wrong_host = route(
        vec![parent("gw", None)],
        &["shop.example.org"],
        vec![],
        "default",
    );
    m.replace(bad, wrong_host.clone());
    let errors = errors_of(&m, &key);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("NoMatchingListenerHostname"),
        "{errors:?}"
    );

    let foreign = route(vec![parent("gw", None)], &[], vec![], "team");
    m.replace(wrong_host, foreign.clone());
    let team = ConfigKey::new(Kind::HttpRoute, "team", "r");
    assert!(errors_of(&m, &key).is_empty(), "retracted with the route");
    let errors = errors_of(&m, &team);
    assert!(
        errors.iter().any(|e| e.contains("NotAllowedByListeners")),
        "{errors:?}"
    );

    let fixed = route(
        vec![parent("gw", None)],
        &["shop.example.com"],
        vec![backend("auth", "backend", 80)],
        "default",
    );
    let grant = Record::GatewayApi(GatewayApiObject::ReferenceGrant(ReferenceGrant {
        key: ConfigKey::new(Kind::ReferenceGrant, "backend", "g"),
        from: vec![("HTTPRoute".into(), "default".into())],
        to: vec![("Service".into(), Some("auth".into()))],
    }));
    m.step(vec![(foreign, -1), (fixed, 1), (grant, 1)]);
    assert!(
        m.errors.keys().all(|e| e.object.kind != Kind::HttpRoute),
        "{:?}",
        m.errors
    );
}

fn l4_route(kind: Kind, name: &str, hostnames: &[&str], backends: Vec<BackendRef>) -> Record {
    Record::GatewayApi(GatewayApiObject::L4Route(KubeL4Route {
        key: ConfigKey::new(kind, "default", name),
        created: String::new(),
        parents: vec![ParentRef {
            kind: ParentKind::Gateway,
            namespace: "default".into(),
            name: "gw".into(),
            section: None,
            port: None,
        }],
        hostnames: hostnames.iter().map(|h| h.to_string()).collect(),
        rules: vec![backends],
    }))
}

/// A TCP listener proxies a TCPRoute's connections to its backend; a TLS passthrough
/// listener sends each SNI a TLSRoute names to its backend; a TLSRoute cannot attach to
/// the TCP listener (NotAllowedByListeners) and a TCPRoute not to the passthrough one.
#[test]
fn tcp_and_tls_routes_take_connections() {
    let mut m = Mesh::new();
    let gw_pod = gw_pod();
    let mut tls = listener("tls", 8443, None, AllowedNamespaces::Same);
    tls.protocol = ListenerProtocol::Tls;
    tls.tls = Some(ListenerTls {
        clients: None,
        passthrough: true,
        certificates: vec![],
    });
    let mut tcp = listener("tcp", 3306, None, AllowedNamespaces::Same);
    tcp.protocol = ListenerProtocol::Tcp;
    m.insert(vec![
        service("db", "default"),
        service("secure", "default"),
        kube_gateway("default", "gw", "istio", vec![tcp, tls]),
        l4_route(
            Kind::TcpRoute,
            "db",
            &[],
            vec![backend("db", "default", 80)],
        ),
        l4_route(
            Kind::TlsRoute,
            "secure",
            &["secure.example.com"],
            vec![backend("secure", "default", 80)],
        ),
        px(&gw_pod),
    ]);
    assert_eq!(
        m.listeners(&gw_pod),
        crate::support::set(&["0.0.0.0_3306", "0.0.0.0_8443"])
    );
    let chains = m.listener_body(&gw_pod, "0.0.0.0_3306").filter_chains;
    let to: Vec<_> = chains
        .iter()
        .filter_map(crate::support::tcp_proxy_cluster)
        .collect();
    assert_eq!(to, vec![crate::support::outbound(80, "", "db", "default")]);
    let sni = sni_chains(&m, &gw_pod, "0.0.0.0_8443");
    assert!(
        sni.contains(&(
            vec!["secure.example.com".to_string()],
            Some(crate::support::outbound(80, "", "secure", "default"))
        )),
        "{sni:?}"
    );
    let tls_key = ConfigKey::new(Kind::TlsRoute, "default", "secure");
    let tcp_key = ConfigKey::new(Kind::TcpRoute, "default", "db");
    assert!(
        errors_of(&m, &tls_key).is_empty(),
        "{:?}",
        errors_of(&m, &tls_key)
    );
    assert!(
        errors_of(&m, &tcp_key).is_empty(),
        "{:?}",
        errors_of(&m, &tcp_key)
    );

    // A TLSRoute naming only the TCP listener is not allowed there.
    let wrong = KubeL4Route {
        key: ConfigKey::new(Kind::TlsRoute, "default", "wrong"),
        created: String::new(),
        parents: vec![ParentRef {
            kind: ParentKind::Gateway,
            namespace: "default".into(),
            name: "gw".into(),
            section: Some("tcp".into()),
            port: None,
        }],
        hostnames: vec!["x.example.com".into()],
        rules: vec![vec![backend("secure", "default", 80)]],
    };
    m.insert(vec![Record::GatewayApi(GatewayApiObject::L4Route(
        wrong.clone(),
    ))]);
    let errors = errors_of(&m, &wrong.key);
    assert!(
        errors.iter().any(|e| e.contains("NotAllowedByListeners")),
        "{errors:?}"
    );
}

/// A GRPCRoute's method match is a path match, ordered with the HTTPRoutes of its hostname
/// (an exact method before a service's prefix).
#[test]
fn grpc_routes_route_by_method_path() {
    let mut m = Mesh::new();
    let gw_pod = gw_pod();
    let grpc = |name: &str, path: StringMatch, svc: &str| {
        Record::GatewayApi(GatewayApiObject::HttpRoute(KubeHttpRoute {
            key: ConfigKey::new(Kind::GrpcRoute, "default", name),
            created: String::new(),
            parents: vec![ParentRef {
                kind: ParentKind::Gateway,
                namespace: "default".into(),
                name: "gw".into(),
                section: None,
                port: None,
            }],
            hostnames: vec!["grpc.example.com".into()],
            rules: vec![HttpRouteRule {
                template: HttpRoute::default(),
                matches: vec![HttpMatch {
                    uri: Some(path),
                    ..HttpMatch::default()
                }],
                backends: vec![backend(svc, "default", 80)],
            }],
        }))
    };
    m.insert(vec![
        service("greeter", "default"),
        service("hello", "default"),
        kube_gateway(
            "default",
            "gw",
            "istio",
            vec![listener("http", 8080, None, AllowedNamespaces::Same)],
        ),
        grpc(
            "a",
            StringMatch::Prefix("/helloworld.Greeter/".into()),
            "greeter",
        ),
        grpc(
            "b",
            StringMatch::Exact("/helloworld.Greeter/SayHello".into()),
            "hello",
        ),
        px(&gw_pod),
    ]);
    let rows = table(&m, &gw_pod, "http.8080");
    let routes: Vec<&str> = rows
        .iter()
        .filter(|(d, _)| d.iter().any(|d| d == "grpc.example.com"))
        .flat_map(|(_, r)| r.iter().map(|(p, _)| p.as_str()))
        .collect();
    assert_eq!(
        routes,
        vec!["=/helloworld.Greeter/SayHello", "/helloworld.Greeter/*"]
    );
}

/// One GRPCRoute's rules in the spec's order, whatever their order in the route: an exact
/// method, a service, a method of any service (by expression), a match on a header alone,
/// and a rule without matches last — a header-only match is not shadowed by the catch-all
/// (it was, with a header-only match ranked below every path).
#[test]
fn grpc_route_rules_order_by_service_method_then_headers() {
    let mut m = Mesh::new();
    let gw_pod = gw_pod();
    let rule = |uri: Option<StringMatch>, header: Option<&str>, svc: &str| HttpRouteRule {
        template: HttpRoute::default(),
        matches: if uri.is_none() && header.is_none() {
            Vec::new()
        } else {
            vec![HttpMatch {
                uri,
                headers: header
                    .map(|v| ("x-test-case".to_string(), StringMatch::Exact(v.into())))
                    .into_iter()
                    .collect(),
                ..HttpMatch::default()
            }]
        },
        backends: vec![backend(svc, "default", 80)],
    };
    let route = Record::GatewayApi(GatewayApiObject::HttpRoute(KubeHttpRoute {
        key: ConfigKey::new(Kind::GrpcRoute, "default", "echo"),
        created: String::new(),
        parents: vec![ParentRef {
            kind: ParentKind::Gateway,
            namespace: "default".into(),
            name: "gw".into(),
            section: None,
            port: None,
        }],
        hostnames: vec!["grpc.example.com".into()],
        rules: vec![
            rule(None, None, "everything"),
            rule(None, Some("set"), "by-header"),
            rule(
                Some(StringMatch::Regex("/[^/]+/Ping".into())),
                None,
                "by-method",
            ),
            rule(
                Some(StringMatch::Prefix("/echo.Echo/".into())),
                None,
                "by-service",
            ),
            rule(
                Some(StringMatch::Exact("/echo.Echo/Ping".into())),
                None,
                "exact",
            ),
        ],
    }));
    let services = [
        "everything",
        "by-header",
        "by-method",
        "by-service",
        "exact",
    ];
    let mut records: Vec<Record> = services.iter().map(|s| service(s, "default")).collect();
    records.extend([
        kube_gateway(
            "default",
            "gw",
            "istio",
            vec![listener("http", 8080, None, AllowedNamespaces::Same)],
        ),
        route,
        px(&gw_pod),
    ]);
    m.insert(records);
    let rows = table(&m, &gw_pod, "http.8080");
    let order: Vec<&str> = rows
        .iter()
        .filter(|(d, _)| d.iter().any(|d| d == "grpc.example.com"))
        .flat_map(|(_, r)| r.iter())
        .map(|(_, to)| {
            let to = to.as_str();
            *services
                .iter()
                .find(|s| to.contains(&format!("|{s}.default")))
                .unwrap_or(&to)
        })
        .collect();
    assert_eq!(
        order,
        [
            "exact",
            "by-service",
            "by-method",
            "by-header",
            "everything"
        ]
    );
}

/// A parent reference's `port` names the listener on that port (another port: not
/// attached, NoMatchingParent); a rule's `name` names its Envoy route.
#[test]
fn a_parent_port_names_its_listener_and_a_rule_name_its_route() {
    let mut m = Mesh::new();
    let gw_pod = gw_pod();
    let route = |port: u16| {
        Record::GatewayApi(GatewayApiObject::HttpRoute(KubeHttpRoute {
            key: ConfigKey::new(Kind::HttpRoute, "default", "r"),
            created: String::new(),
            parents: vec![ParentRef {
                kind: ParentKind::Gateway,
                namespace: "default".into(),
                name: "gw".into(),
                section: None,
                port: Some(port),
            }],
            hostnames: vec![],
            rules: vec![HttpRouteRule {
                template: HttpRoute {
                    name: Some("checkout".into()),
                    ..HttpRoute::default()
                },
                matches: vec![],
                backends: vec![backend("web", "default", 80)],
            }],
        }))
    };
    m.insert(vec![
        service("web", "default"),
        kube_gateway(
            "default",
            "gw",
            "istio",
            vec![
                listener("a", 8080, None, AllowedNamespaces::Same),
                listener("b", 8081, None, AllowedNamespaces::Same),
            ],
        ),
        route(8081),
        px(&gw_pod),
    ]);
    let names = |m: &Mesh, rc: &str| -> Vec<String> {
        m.route_body(&gw_pod, rc)
            .virtual_hosts
            .iter()
            .flat_map(|vh| vh.routes.iter().map(|r| r.name.clone()))
            .collect()
    };
    assert_eq!(
        names(&m, "http.8081"),
        vec!["default.r.checkout.0".to_string()]
    );
    assert!(!names(&m, "http.8080")
        .iter()
        .any(|n| n.starts_with("default.r.")));
    m.replace(route(8081), route(9999));
    let errors = errors_of(&m, &ConfigKey::new(Kind::HttpRoute, "default", "r"));
    assert!(
        errors
            .iter()
            .any(|e| e.contains("NoMatchingParent") && e.contains("on port 9999")),
        "{errors:?}"
    );
}

/// An HTTPRoute whose parent is a Service (GAMMA) governs the sidecars' routes to it: a
/// producer route (in the Service's namespace) for every client; a consumer route (in the
/// client's namespace) for that namespace's clients only, in place of the producer's;
/// retracting the consumer route hands its clients back to the producer's. The consumer's
/// backend is in the Service's namespace, with no ReferenceGrant there: a mesh route needs
/// none (GEP-1294), unlike a gateway's, and no error is raised for it.
#[test]
fn mesh_routes_govern_the_sidecars_routes_to_their_service() {
    let mut m = Mesh::new();
    let here = crate::support::sidecar_proxy("sleep-1", "default", "10.0.0.5", &[("app", "sleep")]);
    let there = crate::support::sidecar_proxy("sleep-2", "team", "10.0.0.6", &[("app", "sleep")]);
    let mesh_route = |ns: &str, name: &str, to: &str| {
        Record::GatewayApi(GatewayApiObject::HttpRoute(KubeHttpRoute {
            key: ConfigKey::new(Kind::HttpRoute, ns, name),
            created: String::new(),
            parents: vec![ParentRef {
                kind: ParentKind::Service,
                namespace: "default".into(),
                name: "reviews".into(),
                section: None,
                port: None,
            }],
            hostnames: vec![],
            rules: vec![HttpRouteRule {
                template: HttpRoute::default(),
                matches: vec![],
                backends: vec![backend(to, "default", 9080)],
            }],
        }))
    };
    let vh = format!("{}:9080", host("reviews", "default"));
    let to = |name: &str| crate::support::outbound(9080, "", name, "default");
    let producer = mesh_route("default", "reviews-v2", "reviews-v2");
    m.insert(vec![
        service("reviews", "default"),
        service("reviews-v2", "default"),
        service("reviews-v3", "default"),
        px(&here),
        px(&there),
    ]);
    assert_eq!(m.vhost_clusters(&here, "9080")[&vh], to("reviews"));
    m.insert(vec![producer]);
    assert_eq!(m.vhost_clusters(&here, "9080")[&vh], to("reviews-v2"));
    assert_eq!(m.vhost_clusters(&there, "9080")[&vh], to("reviews-v2"));

    // The consumer route's backend is in the Service's namespace: no grant needed.
    let consumer = mesh_route("team", "reviews-v3", "reviews-v3");
    m.insert(vec![consumer.clone()]);
    let key = ConfigKey::new(Kind::HttpRoute, "team", "reviews-v3");
    assert!(errors_of(&m, &key).is_empty(), "{:?}", errors_of(&m, &key));
    assert_eq!(
        m.vhost_clusters(&there, "9080")[&vh],
        to("reviews-v3"),
        "the consumer's own"
    );
    assert_eq!(
        m.vhost_clusters(&here, "9080")[&vh],
        to("reviews-v2"),
        "not for others"
    );
    m.retract(vec![consumer]);
    assert_eq!(m.vhost_clusters(&there, "9080")[&vh], to("reviews-v2"));
}

/// A terminating listener whose certificate is a Secret of another namespace is served only
/// while a ReferenceGrant there lets Gateways of its namespace name that Secret: without one
/// the listener is left out and an error names the field and the spec's reason; a grant to
/// all Secrets or to that one serves it (the certificate over SDS under Istio's
/// `kubernetes-gateway://NAMESPACE/NAME`), a grant to another Secret or from another
/// namespace does not, and retracting the grant takes the listener away again.
#[test]
fn a_certificate_of_another_namespace_is_served_as_its_reference_grants_allow() {
    let mut m = Mesh::new();
    let gw_pod = gw_pod();
    let mut https = listener(
        "https",
        443,
        Some("web.example.com"),
        AllowedNamespaces::Same,
    );
    https.protocol = ListenerProtocol::Https;
    https.index = 1;
    https.tls = Some(ListenerTls {
        clients: None,
        passthrough: false,
        certificates: vec![("certs".into(), "web".into())],
    });
    let http = listener("http", 80, None, AllowedNamespaces::Same);
    let gw_key = ConfigKey::new(Kind::KubernetesGateway, "default", "gw");
    m.insert(vec![
        service("reviews", "default"),
        kube_gateway("default", "gw", "istio", vec![http, https]),
        http_route(
            "default",
            "r",
            "",
            &[],
            vec![(
                StringMatch::Prefix("/".into()),
                backend("reviews", "default", 80),
            )],
        ),
        crate::support::tls_secret("certs", "web", "fp1", None, None),
        px(&gw_pod),
    ]);
    let sds = "kubernetes-gateway://certs/web";
    let refused = |m: &Mesh| {
        errors_of(m, &gw_key).iter().any(|e| {
            e.starts_with("spec.listeners[1].tls.certificateRefs[0]: RefNotPermitted")
                && e.contains("Secret certs/web")
        })
    };
    assert_eq!(m.listeners(&gw_pod), crate::support::set(&["0.0.0.0_80"]));
    assert!(m.names(&gw_pod, ResourceType::Secret).is_empty());
    assert!(refused(&m), "{:?}", errors_of(&m, &gw_key));

    let grant = |name: &str, from_ns: &str, to: Option<&str>| {
        Record::GatewayApi(GatewayApiObject::ReferenceGrant(ReferenceGrant {
            key: ConfigKey::new(Kind::ReferenceGrant, "certs", name),
            from: vec![("Gateway".into(), from_ns.into())],
            to: vec![("Secret".into(), to.map(str::to_string))],
        }))
    };
    // Grants that do not cover it: another Secret, another namespace's Gateways, and
    // (by kind) routes of this one.
    let not_these = vec![
        grant("other-secret", "default", Some("api")),
        grant("other-namespace", "edge", None),
        Record::GatewayApi(GatewayApiObject::ReferenceGrant(ReferenceGrant {
            key: ConfigKey::new(Kind::ReferenceGrant, "certs", "routes"),
            from: vec![("HTTPRoute".into(), "default".into())],
            to: vec![("Secret".into(), None)],
        })),
    ];
    m.insert(not_these);
    assert_eq!(m.listeners(&gw_pod), crate::support::set(&["0.0.0.0_80"]));
    assert!(refused(&m));

    for g in [
        grant("all", "default", None),
        grant("this", "default", Some("web")),
    ] {
        m.insert(vec![g.clone()]);
        assert_eq!(
            m.listeners(&gw_pod),
            crate::support::set(&["0.0.0.0_80", "0.0.0.0_443"])
        );
        assert_eq!(
            m.names(&gw_pod, ResourceType::Secret),
            crate::support::set(&[sds])
        );
        let chains = m.listener_body(&gw_pod, "0.0.0.0_443").filter_chains;
        let certs: Vec<String> = chains
            .iter()
            .flat_map(|c| {
                downstream_tls(c)
                    .common_tls_context
                    .unwrap_or_default()
                    .tls_certificate_sds_secret_configs
            })
            .map(|c| c.name)
            .collect();
        assert_eq!(
            certs,
            vec![sds.to_string()],
            "the chain takes the granted Secret"
        );
        assert!(!refused(&m), "{:?}", errors_of(&m, &gw_key));
        m.retract(vec![g]);
        assert_eq!(m.listeners(&gw_pod), crate::support::set(&["0.0.0.0_80"]));
        assert!(m.names(&gw_pod, ResourceType::Secret).is_empty());
        assert!(refused(&m));
    }
}

/// The TLS context a filter chain terminates with.
fn downstream_tls(
    chain: &envoy_types::pb::envoy::config::listener::v3::FilterChain,
) -> envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::DownstreamTlsContext {
    use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
    match chain
        .transport_socket
        .as_ref()
        .and_then(|t| t.config_type.as_ref())
    {
        Some(ConfigType::TypedConfig(any)) => {
            prost::Message::decode(any.value.as_slice()).unwrap_or_else(|e| panic!("{e}: {any:?}"))
        }
        other => panic!("no TLS on the chain: {other:?}"),
    }
}

/// The misdirected-request rule (GatewayHTTPSListenerDetectMisdirectedRequests): three
/// HTTPS listeners on one port — `foo.example.com`, `*.example.com` and none — each
/// answer 421 for a host another of them matches more specifically (or that theirs does
/// not match and another does), and 404 for a host only theirs matches without a route;
/// a route's own host keeps its route on the listener that matches it best. HTTP
/// listeners, and a Gateway with one HTTPS listener on the port, answer no 421.
#[test]
fn https_listeners_on_one_port_answer_421_for_each_others_hosts() {
    let mut m = Mesh::new();
    let gw_pod = gw_pod();
    let https = |name: &str, hostname: Option<&str>| https_listener(name, hostname, "default");
    m.insert(vec![
        service("reviews", "default"),
        crate::support::tls_secret("default", "cert", "fp1", None, None),
        kube_gateway(
            "default",
            "gw",
            "istio",
            vec![
                https("foo", Some("foo.example.com")),
                https("wild", Some("*.example.com")),
                https("any", None),
                listener("http", 80, None, AllowedNamespaces::Same),
            ],
        ),
        http_route(
            "default",
            "r",
            "",
            &["foo.example.com", "bar.example.com"],
            vec![(
                StringMatch::Prefix("/".into()),
                backend("reviews", "default", 80),
            )],
        ),
        px(&gw_pod),
    ]);
    let to = crate::support::outbound(80, "", "reviews", "default");
    // Each virtual host by its first domain: "route", "421", or "404" (no routes).
    let outcome = |route: &str| -> Vec<(String, String)> {
        https_outcomes(&m, &gw_pod, route, |rs| {
            if rs.iter().all(|(_, c)| c.contains(&to)) {
                "route".to_string()
            } else {
                format!("{rs:?}")
            }
        })
        .unwrap_or_else(|| panic!("no route configuration of {route}: {:?}", m.routes(&gw_pod)))
    };
    let pairs = sorted_pairs;
    let sorted = |mut v: Vec<(String, String)>| {
        v.sort();
        v
    };
    assert_eq!(
        sorted(outcome("foo")),
        pairs(&[
            ("foo.example.com", "route"),
            ("*.example.com", "421"),
            ("*", "421")
        ])
    );
    assert_eq!(
        sorted(outcome("wild")),
        pairs(&[
            ("bar.example.com", "route"),
            ("foo.example.com", "421"),
            ("*.example.com", "404"),
            ("*", "421"),
        ])
    );
    assert_eq!(
        sorted(outcome("any")),
        pairs(&[
            ("foo.example.com", "421"),
            ("bar.example.com", "421"),
            ("*.example.com", "421"),
        ])
    );
    // The HTTP listener's route configuration has no 421.
    let http = m
        .routes(&gw_pod)
        .into_iter()
        .find(|r| r == "http.80")
        .unwrap_or_else(|| panic!("{:?}", m.routes(&gw_pod)));
    assert!(table(&m, &gw_pod, &http)
        .iter()
        .all(|(_, routes)| routes.iter().all(|(_, s)| s != "421")));
}

/// An L4 route of `default` on listener `section` of Gateway `default/gw`.
fn l4_route_on(
    kind: Kind,
    name: &str,
    section: &str,
    hostnames: &[&str],
    backends: Vec<BackendRef>,
) -> Record {
    let Record::GatewayApi(GatewayApiObject::L4Route(mut r)) =
        l4_route(kind, name, hostnames, backends)
    else {
        unreachable!("l4_route makes an L4 route")
    };
    r.parents[0].section = Some(section.into());
    Record::GatewayApi(GatewayApiObject::L4Route(r))
}

/// The (SNI names, cluster) of each filter chain of a router's listener.
fn sni_chains(m: &Mesh, p: &Proxy, listener: &str) -> Vec<(Vec<String>, Option<String>)> {
    m.listener_body(p, listener)
        .filter_chains
        .iter()
        .map(|c| {
            (
                c.filter_chain_match
                    .as_ref()
                    .map(|m| m.server_names.clone())
                    .unwrap_or_default(),
                crate::support::tcp_proxy_cluster(c),
            )
        })
        .collect()
}

/// TLSRouteHostnameIntersection: a passthrough listener serves a TLSRoute on the
/// intersection of their hostnames — a wildcard route on an exact listener takes the
/// listener's name, an exact route on a wildcard listener its own, a route on a listener
/// without a hostname its own wildcard — and no SNI outside it.
#[test]
fn tls_routes_serve_the_intersection_of_their_hostnames_and_the_listeners() {
    let mut m = Mesh::new();
    let gw_pod = gw_pod();
    let passthrough = |name: &str, port: u16, hostname: Option<&str>| {
        let mut l = listener(name, port, hostname, AllowedNamespaces::Same);
        l.protocol = ListenerProtocol::Tls;
        l.tls = Some(ListenerTls {
            clients: None,
            passthrough: true,
            certificates: vec![],
        });
        l
    };
    m.insert(vec![
        service("secure", "default"),
        kube_gateway(
            "default",
            "gw",
            "istio",
            vec![
                passthrough("exact", 8443, Some("abc.example.com")),
                passthrough("wild", 8444, Some("*.example.com")),
                passthrough("empty", 8445, None),
            ],
        ),
        l4_route_on(
            Kind::TlsRoute,
            "wild-on-exact",
            "exact",
            &["*.example.com"],
            vec![backend("secure", "default", 80)],
        ),
        l4_route_on(
            Kind::TlsRoute,
            "exact-on-wild",
            "wild",
            &["abc.example.com"],
            vec![backend("secure", "default", 80)],
        ),
        l4_route_on(
            Kind::TlsRoute,
            "wider-on-empty",
            "empty",
            &["*.com"],
            vec![backend("secure", "default", 80)],
        ),
        px(&gw_pod),
    ]);
    let to = Some(crate::support::outbound(80, "", "secure", "default"));
    let only = |names: &[&str]| {
        vec![(
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            to.clone(),
        )]
    };
    assert_eq!(
        sni_chains(&m, &gw_pod, "0.0.0.0_8443"),
        only(&["abc.example.com"])
    );
    assert_eq!(
        sni_chains(&m, &gw_pod, "0.0.0.0_8444"),
        only(&["abc.example.com"])
    );
    assert_eq!(sni_chains(&m, &gw_pod, "0.0.0.0_8445"), only(&["*.com"]));
}

/// TCPRouteReferenceGrant: a TCPRoute's backend in another namespace carries the listener's
/// connections while a ReferenceGrant there allows TCPRoutes of the route's namespace to
/// name it; once the grant is retracted the route's backend is refused by field with
/// `RefNotPermitted` and the listener sends nothing there.
#[test]
fn a_tcp_routes_backend_of_another_namespace_follows_its_reference_grant() {
    let mut m = Mesh::new();
    let gw_pod = gw_pod();
    let mut tcp = listener("tcp", 3306, None, AllowedNamespaces::Same);
    tcp.protocol = ListenerProtocol::Tcp;
    let grant = Record::GatewayApi(GatewayApiObject::ReferenceGrant(ReferenceGrant {
        key: ConfigKey::new(Kind::ReferenceGrant, "data", "tcp-routes"),
        from: vec![("TCPRoute".into(), "default".into())],
        to: vec![("Service".into(), Some("db".into()))],
    }));
    m.insert(vec![
        service("db", "data"),
        kube_gateway("default", "gw", "istio", vec![tcp]),
        l4_route(Kind::TcpRoute, "db", &[], vec![backend("db", "data", 80)]),
        grant.clone(),
        px(&gw_pod),
    ]);
    let db = crate::support::outbound(80, "", "db", "data");
    let to_db = |m: &Mesh| {
        m.listeners(&gw_pod).contains("0.0.0.0_3306")
            && sni_chains(m, &gw_pod, "0.0.0.0_3306")
                .iter()
                .any(|(_, c)| c.as_deref() == Some(db.as_str()))
    };
    let key = ConfigKey::new(Kind::TcpRoute, "default", "db");
    assert!(to_db(&m), "granted: {:?}", m.listeners(&gw_pod));
    assert!(errors_of(&m, &key).is_empty(), "{:?}", errors_of(&m, &key));
    m.retract(vec![grant]);
    assert!(!to_db(&m), "the grant retracted, nothing goes to db");
    assert!(
        errors_of(&m, &key)
            .iter()
            .any(|e| e.starts_with("spec.rules[0].backendRefs[0]") && e.contains("RefNotPermitted")),
        "{:?}",
        errors_of(&m, &key)
    );
}

/// MeshPorts: a mesh route whose Service parent names a `port` governs the sidecars' routes
/// to that port only — the Service's other port keeps its default route —, and one whose
/// parent names no port governs every port of its Service.
#[test]
fn a_mesh_routes_parent_port_picks_the_ports_it_governs() {
    let mut m = Mesh::new();
    let client =
        crate::support::sidecar_proxy("sleep-1", "default", "10.0.0.5", &[("app", "sleep")]);
    let two_ports = |name: &str| {
        let Record::Service(mut s) = service(name, "default") else {
            unreachable!("service makes a Service")
        };
        s.ports = crate::support::http_ports(&[80, 8080]);
        Record::Service(s)
    };
    let mesh_route = |name: &str, parent: &str, port: Option<u16>, to: &str, to_port: u16| {
        Record::GatewayApi(GatewayApiObject::HttpRoute(KubeHttpRoute {
            key: ConfigKey::new(Kind::HttpRoute, "default", name),
            created: String::new(),
            parents: vec![ParentRef {
                kind: ParentKind::Service,
                namespace: "default".into(),
                name: parent.into(),
                section: None,
                port,
            }],
            hostnames: vec![],
            rules: vec![HttpRouteRule {
                template: HttpRoute::default(),
                matches: vec![],
                backends: vec![backend(to, "default", to_port)],
            }],
        }))
    };
    m.insert(vec![
        two_ports("echo-v1"),
        two_ports("echo-v2"),
        two_ports("canary"),
        mesh_route("v1-port-80", "echo-v1", Some(80), "canary", 80),
        mesh_route("v2-every-port", "echo-v2", None, "canary", 8080),
        px(&client),
    ]);
    let routed = |svc: &str, port: u16| {
        let vhosts = m.vhost_clusters(&client, &port.to_string());
        let name = format!("{}:{port}", host(svc, "default"));
        vhosts
            .get(&name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name}: {vhosts:#?}"))
    };
    let to = |svc: &str, port: u16| crate::support::outbound(port, "", svc, "default");
    assert_eq!(routed("echo-v1", 80), to("canary", 80));
    assert_eq!(
        routed("echo-v1", 8080),
        to("echo-v1", 8080),
        "port 8080 untouched"
    );
    assert_eq!(routed("echo-v2", 80), to("canary", 8080));
    assert_eq!(routed("echo-v2", 8080), to("canary", 8080));
}

/// TLSRouteModeTerminate and TLSRouteModeMixed: TLSRoutes on a TLS listener that terminates
/// each get a chain of their own SNI names that terminates with the listener's certificate
/// and passes the decrypted stream to the route's backend; a passthrough listener on the same
/// port keeps its TLSRoute's chain passing TLS through; an SNI of the terminating listener's
/// hostname no route names gets no chain.
#[test]
fn tls_routes_on_a_terminating_listener_are_terminated_by_sni() {
    let mut m = Mesh::new();
    let gw_pod = gw_pod();
    let mut terminate = listener(
        "terminate",
        8443,
        Some("*.example.com"),
        AllowedNamespaces::Same,
    );
    terminate.protocol = ListenerProtocol::Tls;
    terminate.tls = Some(ListenerTls {
        clients: None,
        passthrough: false,
        certificates: vec![("default".into(), "edge-cert".into())],
    });
    let mut pass = listener(
        "passthrough",
        8443,
        Some("pass.example.net"),
        AllowedNamespaces::Same,
    );
    pass.index = 1;
    pass.protocol = ListenerProtocol::Tls;
    pass.tls = Some(ListenerTls {
        clients: None,
        passthrough: true,
        certificates: vec![],
    });
    m.insert(vec![
        service("db-a", "default"),
        service("db-b", "default"),
        service("secure", "default"),
        crate::support::tls_secret("default", "edge-cert", "fp1", None, None),
        kube_gateway("default", "gw", "istio", vec![terminate, pass]),
        l4_route_on(
            Kind::TlsRoute,
            "a",
            "terminate",
            &["a.example.com"],
            vec![backend("db-a", "default", 80)],
        ),
        l4_route_on(
            Kind::TlsRoute,
            "b",
            "terminate",
            &["b.example.com"],
            vec![backend("db-b", "default", 80)],
        ),
        l4_route_on(
            Kind::TlsRoute,
            "pass",
            "passthrough",
            &["pass.example.net"],
            vec![backend("secure", "default", 80)],
        ),
        px(&gw_pod),
    ]);
    let to = |svc: &str| Some(crate::support::outbound(80, "", svc, "default"));
    let mut chains = sni_chains(&m, &gw_pod, "0.0.0.0_8443");
    chains.sort();
    assert_eq!(
        chains,
        vec![
            (vec!["a.example.com".to_string()], to("db-a")),
            (vec!["b.example.com".to_string()], to("db-b")),
            (vec!["pass.example.net".to_string()], to("secure")),
        ]
    );
    // The terminating chains carry the listener's certificate; the passthrough one none.
    let body = m.listener_body(&gw_pod, "0.0.0.0_8443");
    for c in &body.filter_chains {
        let sni = &c
            .filter_chain_match
            .as_ref()
            .expect("an SNI match")
            .server_names[0];
        if sni == "pass.example.net" {
            assert!(c.transport_socket.is_none(), "passed through: {c:?}");
        } else {
            let certs: Vec<String> = downstream_tls(c)
                .common_tls_context
                .unwrap_or_default()
                .tls_certificate_sds_secret_configs
                .into_iter()
                .map(|s| s.name)
                .collect();
            assert_eq!(certs, ["kubernetes://edge-cert"], "{sni}");
        }
    }
    assert!(m
        .names(&gw_pod, ResourceType::Secret)
        .contains("kubernetes://edge-cert"));
    for name in ["a", "b", "pass"] {
        let key = ConfigKey::new(Kind::TlsRoute, "default", name);
        assert!(
            errors_of(&m, &key).is_empty(),
            "{name}: {:?}",
            errors_of(&m, &key)
        );
    }
}

/// A ListenerSet's listeners on the Gateway's proxies share its ports with the Gateway's
/// own: an HTTPS listener of a set more specific than the Gateway's wildcard listener takes
/// its hostname away from it (421 there, served on the set's listener to the set's route,
/// whose `Same` is the set's namespace); when the Gateway stops taking sets, the set's route
/// configuration goes, the wildcard listener serves that hostname again, and the set's
/// errors say why (MF0042, retracted when taken again).
#[test]
fn a_listener_sets_listeners_share_the_gateways_ports() {
    let mut m = Mesh::new();
    let gw_pod = gw_pod();
    let https = |name: &str, hostname: &str, ns: &str| https_listener(name, Some(hostname), ns);
    let gateway = |allowed: AllowedListeners| {
        let Record::GatewayApi(GatewayApiObject::Gateway(mut g)) = kube_gateway(
            "default",
            "gw",
            "istio",
            vec![https("wild", "*.example.com", "default")],
        ) else {
            unreachable!("kube_gateway makes a Gateway")
        };
        g.allowed_listeners = allowed;
        Record::GatewayApi(GatewayApiObject::Gateway(g))
    };
    let set_key = ConfigKey::new(Kind::ListenerSet, "team", "team");
    let set = Record::GatewayApi(GatewayApiObject::ListenerSet(KubeListenerSet {
        key: set_key.clone(),
        created: String::new(),
        parent: ("default".into(), "gw".into()),
        listeners: vec![https("foo", "foo.example.com", "team")],
        refused: Vec::new(),
    }));
    let Record::GatewayApi(GatewayApiObject::HttpRoute(mut team_route)) = http_route(
        "team",
        "t",
        "",
        &[],
        vec![(
            StringMatch::Prefix("/".into()),
            backend("ratings", "team", 80),
        )],
    ) else {
        unreachable!("http_route makes an HTTPRoute")
    };
    team_route.parents[0].kind = ParentKind::ListenerSet;
    team_route.parents[0].namespace = "team".into();
    team_route.parents[0].name = "team".into();
    m.insert(vec![
        service("reviews", "default"),
        service("ratings", "team"),
        crate::support::tls_secret("default", "cert", "fp1", None, None),
        crate::support::tls_secret("team", "cert", "fp2", None, None),
        gateway(AllowedListeners::All),
        set.clone(),
        Record::GatewayApi(GatewayApiObject::HttpRoute(team_route)),
        http_route(
            "default",
            "r",
            "",
            &["foo.example.com", "bar.example.com"],
            vec![(
                StringMatch::Prefix("/".into()),
                backend("reviews", "default", 80),
            )],
        ),
        px(&gw_pod),
    ]);
    let reviews = crate::support::outbound(80, "", "reviews", "default");
    let ratings = crate::support::outbound(80, "", "ratings", "team");
    // What each virtual host of listener `name`'s route configuration answers: the
    // backend, "421" or "404"; `None` when there is none.
    let outcome = |m: &Mesh, name: &str| {
        https_outcomes(m, &gw_pod, name, |rs| match rs {
            [(_, c)] if c.contains(&reviews) => "reviews".to_string(),
            [(_, c)] if c.contains(&ratings) => "ratings".to_string(),
            rs => format!("{rs:?}"),
        })
    };
    let rows = |v: &[(&str, &str)]| Some(sorted_pairs(v));
    assert_eq!(
        outcome(&m, "wild"),
        rows(&[("bar.example.com", "reviews"), ("foo.example.com", "421"),])
    );
    assert_eq!(
        outcome(&m, "foo"),
        rows(&[("foo.example.com", "ratings"), ("*.example.com", "421")])
    );
    assert!(errors_of(&m, &set_key).is_empty());
    // The set's listener terminates with the Secret of the set's namespace.
    let set_secret = "kubernetes-gateway://team/cert";
    assert!(
        m.names(&gw_pod, ResourceType::Secret).contains(set_secret),
        "{:?}",
        m.names(&gw_pod, ResourceType::Secret)
    );

    // The Gateway takes no set any more.
    m.replace(
        gateway(AllowedListeners::All),
        gateway(AllowedListeners::None),
    );
    assert_eq!(outcome(&m, "foo"), None);
    assert_eq!(
        outcome(&m, "wild"),
        rows(&[
            ("bar.example.com", "reviews"),
            ("foo.example.com", "reviews"),
        ])
    );
    let errors = errors_of(&m, &set_key);
    assert!(
        errors.len() == 1 && errors[0].contains("spec.parentRef: NotAllowed"),
        "{errors:?}"
    );
    assert!(!m.names(&gw_pod, ResourceType::Secret).contains(set_secret));
    m.replace(
        gateway(AllowedListeners::None),
        gateway(AllowedListeners::Same),
    );
    // `Same` is the Gateway's namespace: still not the set's.
    assert_eq!(outcome(&m, "foo"), None);
    m.replace(
        gateway(AllowedListeners::Same),
        gateway(AllowedListeners::All),
    );
    assert_eq!(
        outcome(&m, "foo"),
        rows(&[("foo.example.com", "ratings"), ("*.example.com", "421")])
    );
    assert!(errors_of(&m, &set_key).is_empty());

    // A set naming a Gateway that does not exist is said to, until the Gateway does.
    let lost_key = ConfigKey::new(Kind::ListenerSet, "team", "lost");
    let lost = Record::GatewayApi(GatewayApiObject::ListenerSet(KubeListenerSet {
        key: lost_key.clone(),
        created: String::new(),
        parent: ("default".into(), "elsewhere".into()),
        listeners: vec![https("bar", "bar.example.com", "team")],
        refused: Vec::new(),
    }));
    m.insert(vec![lost]);
    let errors = errors_of(&m, &lost_key);
    assert!(
        errors.len() == 1 && errors[0].contains("Gateway default/elsewhere does not exist"),
        "{errors:?}"
    );
    assert_eq!(
        outcome(&m, "wild"),
        rows(&[("bar.example.com", "reviews"), ("foo.example.com", "421"),]),
        "nothing of it served"
    );
}
