//! The routing simulation (`dataflows::simulate`) on configurations built by the real dataflow
//! (`dataflows::driver::Engine`, one epoch, each proxy's set resolved by `Materialized`): a
//! captured sidecar, a sidecar without capture and a gateway, each asked where calls go.

mod support;

use dataflows::model::*;
use dataflows::simulate::{Action, Call, Discovery, NoMatch, ProxyConfig, Retry};
use std::collections::BTreeMap;
use std::time::Duration;
use support::{
    destination_rule, endpoint, host, labels, outbound, service, sidecar_proxy, workload, Mesh,
};

/// Runs `records` through the engine as one epoch; returns each proxy's decoded resources.
fn configs(records: Vec<Record>) -> BTreeMap<ProxyId, ProxyConfig> {
    let mut m = Mesh::new();
    m.insert(records);
    assert!(m.errors.is_empty(), "config errors: {:?}", m.errors);
    m.configs()
}

fn fqdn(name: &str) -> String {
    host(name, "default")
}

fn cluster(subset: &str, name: &str) -> String {
    outbound(9080, subset, name, "default")
}

/// Service `name` in `default` on HTTP port 9080, with one ready pod per version
/// (`10.0.<n>.<version>`), and a DestinationRule with a subset per version.
fn service_with_pods(name: &str, n: u8, versions: &[u8]) -> Vec<Record> {
    let mut out = vec![service(name, "default")];
    for v in versions {
        let ip = format!("10.0.{n}.{v}");
        let version = format!("v{v}");
        let pod = format!("{name}-{version}");
        out.push(workload(
            &pod,
            "default",
            &ip,
            &[("app", name), ("version", &version)],
        ));
        out.push(endpoint(name, "default", &ip, true));
    }
    let subsets: Vec<String> = versions.iter().map(|v| format!("v{v}")).collect();
    let subsets: Vec<(&str, &str)> = subsets.iter().map(|s| (s.as_str(), s.as_str())).collect();
    out.push(destination_rule("default", name, &fqdn(name), &subsets));
    out
}

fn dest(host: &str, subset: &str, weight: u32) -> RouteDestination {
    RouteDestination {
        headers: Default::default(),
        via_alias: None,
        host: fqdn(host),
        subset: Some(subset.to_string()).filter(|s| !s.is_empty()),
        port: None,
        weight,
    }
}

/// VirtualService `reviews` (mesh): `end-user: jason` → v2; `/reviews` prefix → v1 80 / v3 20
/// with a 2 s timeout and 3 retries; `/exact` (exact path) → v3; regex `/r[0-9]+` → v1.
fn reviews_vs(gateways: &[&str], hosts: &[&str]) -> Record {
    let route = |name: &str, m: Option<HttpMatch>, to: Vec<RouteDestination>| HttpRoute {
        name: Some(name.to_string()),
        matches: m.into_iter().collect(),
        route: to,
        timeout_ms: None,
        retries: None,
        ..Default::default()
    };
    let uri = |u: StringMatch| HttpMatch {
        uri: Some(u),
        ..Default::default()
    };
    let jason = HttpMatch {
        headers: [("end-user".to_string(), StringMatch::Exact("jason".into()))].into(),
        ..Default::default()
    };
    let mut split = route(
        "split",
        Some(uri(StringMatch::Prefix("/reviews".into()))),
        vec![dest("reviews", "v1", 80), dest("reviews", "v3", 20)],
    );
    split.timeout_ms = Some(2000);
    split.retries = Some(Retries {
        attempts: 3,
        per_try_timeout_ms: Some(500),
        retry_on: Some("5xx".into()),
        remote_localities: true,
        ignore_previous_hosts: None,
        backoff_ms: Some(50),
    });
    Record::VirtualService(VirtualService {
        key: ConfigKey::new(Kind::VirtualService, "default", "reviews"),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        gateways: gateways.iter().map(|g| g.to_string()).collect(),
        export_to: vec![],
        tcp: vec![],
        tls: vec![],
        http: vec![
            route("jason", Some(jason), vec![dest("reviews", "v2", 100)]),
            split,
            route(
                "exact",
                Some(uri(StringMatch::Exact("/exact".into()))),
                vec![dest("reviews", "v3", 100)],
            ),
            route(
                "regex",
                Some(uri(StringMatch::Regex("/r[0-9]+".into()))),
                vec![dest("reviews", "v1", 100)],
            ),
        ],
    })
}

fn proxy(kind: ProxyKind, id_kind: &str, app: &str, interception_none: bool) -> Proxy {
    Proxy {
        id: format!("{id_kind}~10.9.0.1~{app}-0.default~default.svc.cluster.local"),
        kind,
        interception_none,
        ..sidecar_proxy(&format!("{app}-0"), "default", "10.9.0.1", &[("app", app)])
    }
}

/// The reviews (v1, v2, v3) and ratings (v1) services, reviews' VirtualService, plus `extra`.
fn mesh(extra: Vec<Record>) -> Vec<Record> {
    let mut records = service_with_pods("reviews", 1, &[1, 2, 3]);
    records.extend(service_with_pods("ratings", 2, &[1]));
    records.push(reviews_vs(&[], &[&fqdn("reviews")]));
    records.extend(extra);
    records
}

/// A captured sidecar: calls go through `virtualOutbound` to `0.0.0.0_9080`, route
/// configuration `9080`, and the virtual host of the service the authority names.
#[test]
fn captured_sidecar_follows_header_prefix_exact_and_regex_routes() {
    let client = proxy(ProxyKind::Sidecar, "sidecar", "client", false);
    let all = configs(mesh(vec![Record::Proxy(client.clone())]));
    let sim = &all[&client.id];

    let jason = sim.simulate(&Call::get("reviews", 9080, "/anything").header("End-User", "jason"));
    assert_eq!(jason.captured_by.as_deref(), Some("virtualOutbound"));
    assert_eq!(jason.listener.as_deref(), Some("0.0.0.0_9080"));
    assert_eq!(jason.route_config.as_deref(), Some("9080"));
    assert_eq!(
        jason.virtual_host.as_deref(),
        Some(format!("{}:9080", fqdn("reviews")).as_str())
    );
    assert_eq!(
        jason.route.as_ref().map(|r| (r.index, r.name.as_str())),
        Some((0, "jason"))
    );
    assert_eq!(jason.cluster(), Some(cluster("v2", "reviews").as_str()));
    assert_eq!(jason.endpoints(), ["10.0.1.2:9080"]);

    let split = sim.simulate(&Call::get("reviews.default", 9080, "/reviews/1?x=1"));
    assert_eq!(
        split.clusters(),
        [
            (cluster("v1", "reviews"), Some(80)),
            (cluster("v3", "reviews"), Some(20))
        ]
    );
    assert_eq!(split.endpoints(), ["10.0.1.1:9080", "10.0.1.3:9080"]);
    let Ok(Action::Route { timeout, retry, .. }) = &split.result else {
        panic!("a route: {split:?}");
    };
    assert_eq!(*timeout, Some(Duration::from_secs(2)));
    assert_eq!(
        retry
            .as_ref()
            .map(|r: &Retry| (r.num_retries, r.per_try_timeout, r.retry_on.as_str())),
        Some((3, Some(Duration::from_millis(500)), "5xx"))
    );
    // retryRemoteLocalities, backoff; previous hosts avoided unless told otherwise.
    assert_eq!(
        retry
            .as_ref()
            .map(|r| (r.to_other_localities, r.backoff, r.avoids_previous_hosts)),
        Some((true, Some(Duration::from_millis(50)), true))
    );

    // `path` is an exact match on the path without its query; `/exact/more` is not it.
    let exact = sim.simulate(&Call::get(&fqdn("reviews"), 9080, "/exact?q"));
    assert_eq!(exact.cluster(), Some(cluster("v3", "reviews").as_str()));
    let not_exact = sim.simulate(&Call::get("reviews", 9080, "/exact/more"));
    assert_eq!(not_exact.result, Err(NoMatch::NoRoute));
    assert_eq!(not_exact.status(), Some(404));

    // safe_regex must match the whole path.
    let regex = sim.simulate(&Call::get("reviews", 9080, "/r42"));
    assert_eq!(regex.route.map(|r| r.name), Some("regex".into()));
    assert_eq!(
        sim.simulate(&Call::get("reviews", 9080, "/r42x")).result,
        Err(NoMatch::NoRoute)
    );
    // Dot segments are normalized before matching (normalize_path).
    let normalized = sim.simulate(&Call::get("reviews", 9080, "/x/../reviews/1"));
    assert_eq!(normalized.route.map(|r| r.name), Some("split".into()));
}

/// Without a VirtualService a service gets the default route to its whole cluster; unknown
/// hosts on a known port take the `allow_any` passthrough; unknown ports pass through
/// `virtualOutbound` itself.
#[test]
fn captured_sidecar_default_route_allow_any_and_passthrough() {
    let client = proxy(ProxyKind::Sidecar, "sidecar", "client", false);
    let all = configs(mesh(vec![Record::Proxy(client.clone())]));
    let sim = &all[&client.id];

    let ratings = sim.simulate(&Call::get("ratings:9080", 9080, "/"));
    assert_eq!(
        ratings.route.as_ref().map(|r| r.name.as_str()),
        Some("default")
    );
    assert_eq!(ratings.cluster(), Some(cluster("", "ratings").as_str()));
    assert_eq!(ratings.endpoints(), ["10.0.2.1:9080"]);
    assert!(matches!(
        &ratings.upstreams()[0].discovery,
        Discovery::Eds { service_name, assignment_found: true } if *service_name == cluster("", "ratings")
    ));

    let unknown = sim.simulate(&Call::get("example.com", 9080, "/").to_address("93.184.216.34"));
    assert_eq!(unknown.virtual_host.as_deref(), Some("allow_any"));
    assert_eq!(unknown.cluster(), Some("PassthroughCluster"));
    assert_eq!(unknown.endpoints(), ["93.184.216.34:9080"]);
    assert_eq!(unknown.status(), None);

    let other_port = sim.simulate(&Call::get("db", 5432, "/").to_address("10.1.1.1"));
    assert_eq!(other_port.listener.as_deref(), Some("virtualOutbound"));
    assert_eq!(
        other_port.filter_chain.as_deref(),
        Some("virtualOutbound-catchall-tcp")
    );
    assert!(matches!(other_port.result, Ok(Action::Tcp { .. })));
    assert_eq!(other_port.cluster(), Some("PassthroughCluster"));
}

/// A proxy without capture (`INTERCEPTION_MODE: NONE`) under a Sidecar with one bound egress
/// listener (`./reviews`): only that listener exists; calls to other ports find none, and only `reviews` has a virtual host.
#[test]
fn sidecar_without_capture_uses_its_bound_listener_only() {
    let client = proxy(ProxyKind::Sidecar, "sidecar", "client", true);
    let sc = Record::Sidecar(Sidecar {
        registry_only: None,
        egress_proxy: None,
        inbound_connection_pool: None,
        ingress: Vec::new(),
        key: ConfigKey::new(Kind::Sidecar, "default", "client"),
        selector: Some(labels(&[("app", "client")])),
        egress: vec![EgressListener {
            port: Some(EgressPort {
                number: 9080,
                protocol: Protocol::Http,
                name: "http".into(),
            }),
            bind: Some("127.0.0.1".into()),
            capture_none: true,
            hosts: vec!["./reviews.default.svc.cluster.local".into()],
        }],
    });
    let all = configs(mesh(vec![Record::Proxy(client.clone()), sc]));
    let sim = &all[&client.id];

    let call = Call::get("reviews", 9080, "/reviews/1").to_address("127.0.0.1");
    let o = sim.simulate(&call);
    assert_eq!(o.listener.as_deref(), Some("127.0.0.1_9080"));
    assert_eq!(o.captured_by, None);
    assert_eq!(o.clusters().len(), 2, "{o:?}");
    let ratings = sim.simulate(&Call::get("ratings", 9080, "/").to_address("127.0.0.1"));
    assert_eq!(
        ratings.result,
        Err(NoMatch::NoVirtualHost {
            authority: "ratings".into()
        })
    );
    assert_eq!(ratings.status(), Some(404));
    assert_eq!(
        sim.simulate(&Call::get("reviews", 9080, "/").to_address("10.0.0.1"))
            .result,
        Err(NoMatch::NoListener { port: 9080 })
    );
    assert_eq!(
        sim.simulate(&Call::get("reviews", 8080, "/")).result,
        Err(NoMatch::NoListener { port: 8080 })
    );
}

/// A gateway: the listener on the server's port, route configuration `http.PORT`, virtual
/// hosts by the VirtualService's host (any port), 404 for other hosts.
#[test]
fn gateway_routes_by_host_and_answers_404_otherwise() {
    let gw_proxy = Proxy {
        id: "router~10.9.0.2~gw-0.istio-system~istio-system.svc.cluster.local".into(),
        namespace: "istio-system".into(),
        labels: labels(&[("istio", "ingressgateway")]),
        ..proxy(ProxyKind::Router, "router", "gw", false)
    };
    let gateway = Record::Gateway(Gateway {
        key: ConfigKey::new(Kind::Gateway, "default", "gw"),
        selector: labels(&[("istio", "ingressgateway")]),
        servers: vec![GatewayServer {
            port: 8080,
            port_name: "http".into(),
            protocol: Protocol::Http,
            bind: None,
            hosts: vec!["*/*".into()],
            https_redirect: false,
            tls: None,
            field: String::new(),
        }],
        same_namespace: false,
    });
    let mut vs = reviews_vs(&["default/gw"], &["reviews.example.com"]);
    if let Record::VirtualService(v) = &mut vs {
        v.key.name = "reviews-gw".into();
        for d in v.http.iter_mut().flat_map(|h| h.route.iter_mut()) {
            d.port = Some(9080);
        }
    }
    // The gateway's pod: its labels are what the Gateway's selector finds.
    let gw_pod = Record::Workload(Workload {
        service_account: None,
        peer: None,
        ip: "10.9.0.2".into(),
        labels: gw_proxy.labels.clone(),
        origin: ConfigKey::new(Kind::Pod, "istio-system", "gw-0"),
        ports: Default::default(),
        placement: Placement::default(),
    });
    let all = configs(mesh(vec![
        Record::Proxy(gw_proxy.clone()),
        gw_pod,
        gateway,
        vs,
    ]));
    let sim = &all[&gw_proxy.id];

    let o = sim.simulate(&Call::get("Reviews.Example.com:31380", 8080, "/r7"));
    assert_eq!(o.listener.as_deref(), Some("0.0.0.0_8080"));
    assert_eq!(o.route_config.as_deref(), Some("http.8080"));
    assert_eq!(o.virtual_host.as_deref(), Some("reviews.example.com:8080"));
    assert_eq!(o.cluster(), Some(cluster("v1", "reviews").as_str()));
    let other = sim.simulate(&Call::get("other.example.com", 8080, "/r7"));
    assert_eq!(
        other.result,
        Err(NoMatch::NoVirtualHost {
            authority: "other.example.com".into()
        })
    );
    assert_eq!(
        sim.simulate(&Call::get("reviews.example.com", 9999, "/"))
            .result,
        Err(NoMatch::NoListener { port: 9999 })
    );
}

/// Resources that do not decode are reported, not panicked on, and routing goes on without
/// them.
#[test]
fn undecodable_bodies_are_reported_as_data() {
    let bad = [
        (ResourceType::Route, "9080", &[0xff_u8, 0xff, 0xff][..]),
        (ResourceType::Listener, "x", &[0x0a_u8][..]),
    ];
    let sim = ProxyConfig::from_bodies(bad);
    assert_eq!(sim.undecodable.len(), 2);
    let o = sim.simulate(&Call::get("reviews", 9080, "/"));
    assert_eq!(o.result, Err(NoMatch::NoListener { port: 9080 }));
    assert_eq!(o.warnings.len(), 2, "{o:?}");
}

/// Odd calls (empty or malformed authority and path, bracketed IPv6, huge ports in the host,
/// non-UTF-8-looking bytes, odd methods) never panic; each gets an outcome.
#[test]
fn odd_calls_get_an_outcome_never_a_panic() {
    let client = proxy(ProxyKind::Sidecar, "sidecar", "client", false);
    let all = configs(mesh(vec![Record::Proxy(client.clone())]));
    let sim = &all[&client.id];
    let authorities = [
        "",
        ":",
        "reviews:",
        ":9080",
        "[::1]:9080",
        "ñ.example",
        "*",
        "a:b:c",
    ];
    let paths = [
        "",
        "?",
        "#",
        "no-slash",
        "/..",
        "/%2e%2e/",
        "/ü/../r1",
        "/reviews?&&=&",
    ];
    for authority in authorities {
        for path in paths {
            for address in [None, Some("::1"), Some("not-an-ip"), Some("10.0.1.1")] {
                let mut call = Call::get(authority, 9080, path)
                    .method("CONNECT")
                    .header("", "")
                    .header("end-user", "jason");
                call.address = address.map(String::from);
                let o = sim.simulate(&call);
                assert!(o.listener.is_some(), "{call:?}: {o:?}");
            }
        }
    }
}

/// A Sidecar whose `outboundTrafficPolicy` is ALLOW_ANY with an `egressProxy` (ratings'
/// subset v1 on 9080, standing in for an egress gateway): what would pass through goes to
/// that cluster instead, as Istio sends it — a host outside the registry on a known HTTP
/// port (the `allow_any` virtual host), an address no TCP service has on a TCP port (the
/// port listener's default chain), and a port no service has (`virtualOutbound`); known
/// services are routed as before.
#[test]
fn egress_proxy_takes_what_would_pass_through() {
    let client = proxy(ProxyKind::Sidecar, "sidecar", "client", false);
    let egress = EgressProxy {
        host: fqdn("ratings"),
        subset: Some("v1".into()),
        port: 9080,
    };
    let sc = Record::Sidecar(Sidecar {
        registry_only: Some(false),
        egress_proxy: Some(egress.clone()),
        inbound_connection_pool: None,
        ingress: Vec::new(),
        key: ConfigKey::new(Kind::Sidecar, "default", "default"),
        selector: None,
        egress: vec![EgressListener {
            port: None,
            bind: None,
            capture_none: false,
            hosts: vec!["./*".into()],
        }],
    });
    let db = Record::Service(Service {
        control_plane: false,
        mesh_external: false,
        prefer_close: false,
        headless: false,
        alias_for: None,
        aliases: Vec::new(),
        subject_alt_names: Vec::new(),
        hostname: fqdn("db"),
        origin: ConfigKey::new(Kind::Service, "default", "db"),
        ports: vec![ServicePort {
            name: "tcp".into(),
            port: 5432,
            protocol: Protocol::Tcp,
        }],
        export_to: vec![],
        resolution: Resolution::Static,
        dns_endpoints: Vec::new(),
        host_target_ports: Default::default(),
        addresses: vec!["10.96.0.20/32".into()],
    });
    let all = configs(mesh(vec![Record::Proxy(client.clone()), sc, db]));
    let sim = &all[&client.id];
    let proxy_cluster = egress.cluster();
    assert_eq!(proxy_cluster, cluster("v1", "ratings"));

    let unknown = sim.simulate(&Call::get("example.com", 9080, "/").to_address("93.184.216.34"));
    assert_eq!(unknown.virtual_host.as_deref(), Some("allow_any"));
    assert_eq!(
        unknown.cluster(),
        Some(proxy_cluster.as_str()),
        "{unknown:#?}"
    );
    assert_eq!(unknown.endpoints(), ["10.0.2.1:9080"]);

    let tcp_other = sim.simulate(&Call::connect(5432).to_address("10.1.1.1"));
    assert_eq!(tcp_other.listener.as_deref(), Some("0.0.0.0_5432"));
    assert_eq!(
        tcp_other.cluster(),
        Some(proxy_cluster.as_str()),
        "{tcp_other:#?}"
    );
    let tcp_db = sim.simulate(&Call::connect(5432).to_address("10.96.0.20"));
    assert_eq!(
        tcp_db.cluster(),
        Some(format!("outbound|5432||{}", fqdn("db")).as_str())
    );

    let other_port = sim.simulate(&Call::get("db", 6000, "/").to_address("10.1.1.1"));
    assert_eq!(other_port.listener.as_deref(), Some("virtualOutbound"));
    assert_eq!(
        other_port.cluster(),
        Some(proxy_cluster.as_str()),
        "{other_port:#?}"
    );

    let ratings = sim.simulate(&Call::get("ratings:9080", 9080, "/"));
    assert_eq!(ratings.cluster(), Some(cluster("", "ratings").as_str()));
}
