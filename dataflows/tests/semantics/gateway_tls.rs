//! Gateway TLS servers: Secrets over SDS that fail closed, MUTUAL's CA, PASSTHROUGH and
//! AUTO_PASSTHROUGH chains by SNI, and terminating TLS servers routed by `tcp[]` routes.

use crate::support::{
    destination_rule, gateway_errors, host, labels, outbound, px, router_proxy, service,
    tcp_proxy_cluster, tls_secret, Mesh,
};
use dataflows::model::*;
use prost::Message;
use std::collections::{BTreeMap, BTreeSet};

/// Gateway `istio-system/tls`: an HTTPS server on 443 for `web.example.com` with `mode`
/// and credential `cred`, and a PASSTHROUGH server on 9443 for `*.example.com`.
fn tls_gateway(mode: ServerTlsMode) -> Record {
    let server = |port, mode, credential: Option<&str>, host: &str, field: &str| GatewayServer {
        port,
        port_name: "https".into(),
        protocol: Protocol::Tls,
        bind: None,
        hosts: vec![format!("*/{host}")],
        https_redirect: false,
        tls: Some(Box::new(ServerTls {
            mode,
            credential: credential.map(|c| Credential::Secret(c.into())),
            min_version: None,
            max_version: None,
            cipher_suites: vec![],
            subject_alt_names: vec![],
            tcp: false,
            misdirected: Vec::new(),
            sni_routes: false,
            client_ca: None,
        })),
        field: field.into(),
    };
    Record::Gateway(Gateway {
        key: ConfigKey::new(Kind::Gateway, "istio-system", "tls"),
        selector: labels(&[("istio", "ingressgateway")]),
        servers: vec![
            server(
                443,
                mode,
                Some("cred"),
                "web.example.com",
                "spec.servers[0]",
            ),
            server(
                9443,
                ServerTlsMode::Passthrough,
                None,
                "*.example.com",
                "spec.servers[1]",
            ),
        ],
        same_namespace: false,
    })
}

/// A VirtualService bound to the TLS gateway passing `sni` through to `dest`.
fn tls_route_vs(name: &str, host: &str, sni: &str, dest: &str) -> Record {
    Record::VirtualService(VirtualService {
        key: ConfigKey::new(Kind::VirtualService, "default", name),
        hosts: vec![host.into()],
        gateways: vec!["istio-system/tls".into()],
        export_to: vec![],
        http: vec![],
        tcp: vec![],
        tls: vec![L4Route {
            index: 0,
            matches: vec![L4Match {
                sni_hosts: vec![sni.into()],
                ..Default::default()
            }],
            route: vec![RouteDestination {
                headers: Default::default(),
                via_alias: None,
                host: dest.into(),
                subset: None,
                port: Some(443),
                weight: 100,
            }],
        }],
    })
}

/// Proves that an HTTPS server is generated only with a usable Secret of the gateway
/// workload's namespace: missing (or only in another namespace) or unusable, the listener
/// has no chain for it and an error names the Gateway, the field and the Secret; creating
/// the Secret heals it, and replacing its certificate changes the SDS secret alone.
#[test]
fn https_server_needs_a_usable_secret_of_the_gateway_namespace() {
    let mut m = Mesh::new();
    let gw = router_proxy(
        "gw-1",
        "istio-system",
        "10.0.0.9",
        &[("istio", "ingressgateway")],
    );
    m.insert(vec![px(&gw), tls_gateway(ServerTlsMode::Simple)]);
    assert!(
        !m.listeners(&gw).contains("0.0.0.0_443"),
        "{:?}",
        m.listeners(&gw)
    );
    let errors = gateway_errors(&m, ErrorCode::GatewaySecret);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("Gateway/istio-system/tls")
            && errors[0].contains("spec.servers[0].tls.credentialName")
            && errors[0].contains("Secret istio-system/cred does not exist"),
        "{errors:?}"
    );

    // In another namespace: still not used.
    m.insert(vec![tls_secret("default", "cred", "fp1", None, None)]);
    assert!(!m.listeners(&gw).contains("0.0.0.0_443"));
    assert_eq!(gateway_errors(&m, ErrorCode::GatewaySecret).len(), 1);

    // Unusable (its key does not match): the error says why.
    let bad = tls_secret(
        "istio-system",
        "cred",
        "",
        None,
        Some("tls.key does not match"),
    );
    m.insert(vec![bad.clone()]);
    assert!(!m.listeners(&gw).contains("0.0.0.0_443"));
    let errors = gateway_errors(&m, ErrorCode::GatewaySecret);
    assert!(
        errors[0].contains("cannot be served: tls.key does not match"),
        "{errors:?}"
    );

    // Fixed: the listener, the server's route configuration and the SDS secret appear.
    let good = tls_secret("istio-system", "cred", "fp1", None, None);
    m.replace(bad, good.clone());
    assert!(m.listeners(&gw).contains("0.0.0.0_443"));
    assert!(m.routes(&gw).contains("https.443.https.tls.istio-system"));
    assert_eq!(
        m.names(&gw, ResourceType::Secret),
        BTreeSet::from(["kubernetes://cred".to_string()])
    );
    assert!(gateway_errors(&m, ErrorCode::GatewaySecret).is_empty());

    // Rotation: only the SDS secret changes.
    let diffs = m.replace(good, tls_secret("istio-system", "cred", "fp2", None, None));
    let changed: BTreeSet<(ResourceType, String)> = diffs
        .iter()
        .map(|((_, k), _)| (k.rtype, k.name.clone()))
        .collect();
    assert_eq!(
        changed,
        BTreeSet::from([(ResourceType::Secret, "kubernetes://cred".to_string())]),
        "{diffs:?}"
    );
}

/// Proves that MUTUAL takes its CA from the Secret's own `ca.crt`, else from the
/// `NAME-cacert` companion Secret, and fails closed without one.
#[test]
fn mutual_server_takes_its_ca_from_the_secret_or_its_cacert_companion() {
    let mut m = Mesh::new();
    let gw = router_proxy(
        "gw-1",
        "istio-system",
        "10.0.0.9",
        &[("istio", "ingressgateway")],
    );
    m.insert(vec![
        px(&gw),
        tls_gateway(ServerTlsMode::Mutual),
        tls_secret("istio-system", "cred", "fp1", None, None),
    ]);
    assert!(!m.listeners(&gw).contains("0.0.0.0_443"));
    let errors = gateway_errors(&m, ErrorCode::GatewaySecret);
    assert!(errors[0].contains("no CA certificate"), "{errors:?}");
    m.insert(vec![tls_secret(
        "istio-system",
        "cred-cacert",
        "",
        Some("CA"),
        None,
    )]);
    assert!(m.listeners(&gw).contains("0.0.0.0_443"), "{:?}", m.errors);
    assert_eq!(
        m.names(&gw, ResourceType::Secret),
        BTreeSet::from([
            "kubernetes://cred".to_string(),
            "kubernetes://cred-cacert".to_string()
        ])
    );
}

/// Proves that PASSTHROUGH servers get a chain per `tls[]` route whose SNI names they
/// serve, and a route naming none of its hosts gets no chain and an error naming it.
#[test]
fn passthrough_routes_by_sni_within_the_server_hosts() {
    let mut m = Mesh::new();
    let gw = router_proxy(
        "gw-1",
        "istio-system",
        "10.0.0.9",
        &[("istio", "ingressgateway")],
    );
    m.insert(vec![
        px(&gw),
        tls_gateway(ServerTlsMode::Simple),
        service("a", "default"),
        tls_route_vs("off", "*", "a.other.org", "a.default.svc.cluster.local"),
    ]);
    assert!(
        !m.listeners(&gw).contains("0.0.0.0_9443"),
        "no route: no listener"
    );
    let errors = gateway_errors(&m, ErrorCode::TlsRouteUnmatched);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("VirtualService/default/off")
                && e.contains("spec.tls[0].match[0].sniHosts")),
        "{errors:?}"
    );
    m.insert(vec![tls_route_vs(
        "on",
        "a.example.com",
        "a.example.com",
        "a.default.svc.cluster.local",
    )]);
    assert!(m.listeners(&gw).contains("0.0.0.0_9443"));
}

/// Proves that a TLS server (not HTTPS) that terminates is generated: a chain matched on
/// its hosts as SNI names that terminates with its Secret's certificate (SDS) and passes
/// the decrypted stream to the `tcp[]` route of the VirtualService bound to the gateway;
/// without an applicable route it has no chain (and its Secret is not served), and the
/// Secret still decides whether it is generated at all.
#[test]
fn terminating_tls_server_routes_decrypted_stream_by_tcp_routes() {
    let mut m = Mesh::new();
    let gw = router_proxy(
        "gw-1",
        "istio-system",
        "10.0.0.9",
        &[("istio", "ingressgateway")],
    );
    let Record::Gateway(mut gateway) = tls_gateway(ServerTlsMode::Simple) else {
        unreachable!("tls_gateway() makes a Gateway")
    };
    if let Some(tls) = gateway.servers[0].tls.as_mut() {
        tls.tcp = true;
    }
    let secret = tls_secret("istio-system", "cred", "fp1", None, None);
    m.insert(vec![
        px(&gw),
        Record::Gateway(gateway.clone()),
        secret.clone(),
    ]);
    // No tcp route yet: no chain, no listener, no Secret served.
    assert!(
        !m.listeners(&gw).contains("0.0.0.0_443"),
        "{:?}",
        m.listeners(&gw)
    );
    assert!(m.names(&gw, ResourceType::Secret).is_empty());

    let db = host("db", "default");
    let vs = Record::VirtualService(VirtualService {
        key: ConfigKey::new(Kind::VirtualService, "default", "db"),
        hosts: vec!["web.example.com".into()],
        gateways: vec!["istio-system/tls".into()],
        export_to: vec![],
        http: vec![],
        tcp: vec![L4Route {
            index: 0,
            matches: vec![L4Match {
                port: Some(443),
                ..Default::default()
            }],
            route: vec![RouteDestination {
                headers: Default::default(),
                via_alias: None,
                host: db.clone(),
                subset: None,
                port: Some(5432),
                weight: 100,
            }],
        }],
        tls: vec![],
    });
    m.insert(vec![vs.clone()]);
    let l = m.listener_body(&gw, "0.0.0.0_443");
    let [chain] = l.filter_chains.as_slice() else {
        panic!("one chain: {l:?}")
    };
    let names = chain
        .filter_chain_match
        .as_ref()
        .map(|c| c.server_names.clone())
        .unwrap_or_default();
    assert_eq!(names, vec!["web.example.com"]);
    assert!(chain.transport_socket.is_some(), "terminates: {chain:?}");
    assert_eq!(
        tcp_proxy_cluster(chain).as_deref(),
        Some(format!("outbound|5432||{db}").as_str())
    );
    assert!(m.routes(&gw).iter().all(|r| !r.starts_with("https.443")));
    assert_eq!(
        m.names(&gw, ResourceType::Secret),
        BTreeSet::from(["kubernetes://cred".to_string()])
    );

    // Without the Secret it fails closed, said as for HTTPS servers.
    m.retract(vec![secret]);
    assert!(!m.listeners(&gw).contains("0.0.0.0_443"));
    assert_eq!(gateway_errors(&m, ErrorCode::GatewaySecret).len(), 1);
}

/// (idle timeout, longest connection) in seconds of a chain's `tcp_proxy`.
fn tcp_proxy_limits(
    chain: &envoy_types::pb::envoy::config::listener::v3::FilterChain,
) -> (Option<i64>, Option<i64>) {
    use envoy_types::pb::envoy::config::listener::v3::filter::ConfigType;
    use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::TcpProxy;
    let Some(ConfigType::TypedConfig(any)) = &chain.filters[0].config_type else {
        panic!("a typed config");
    };
    let p = TcpProxy::decode(&any.value[..]).expect("a tcp_proxy");
    (
        p.idle_timeout.map(|d| d.seconds),
        p.max_downstream_connection_duration.map(|d| d.seconds),
    )
}

/// Istio gives the `tcp_proxy` of an AUTO_PASSTHROUGH chain the `tcp.idleTimeout` and
/// `tcp.maxConnectionDuration` of its host's rule (its subsets' chains too), as it gives a
/// TCP route's; a rule's change reaches the chains, and without the settings they go.
#[test]
fn auto_passthrough_chains_take_their_hosts_tcp_limits() {
    let mut m = Mesh::new();
    let gw = router_proxy(
        "eastwest-1",
        "istio-system",
        "10.0.0.9",
        &[("istio", "eastwestgateway")],
    );
    let gateway = Record::Gateway(Gateway {
        key: ConfigKey::new(Kind::Gateway, "istio-system", "cross-network"),
        selector: labels(&[("istio", "eastwestgateway")]),
        servers: vec![GatewayServer {
            port: 15443,
            port_name: "tls".into(),
            protocol: Protocol::Tls,
            bind: None,
            hosts: vec!["*/*.default.svc.cluster.local".into()],
            https_redirect: false,
            tls: Some(Box::new(ServerTls {
                mode: ServerTlsMode::AutoPassthrough,
                credential: None,
                min_version: None,
                max_version: None,
                cipher_suites: vec![],
                subject_alt_names: vec![],
                tcp: false,
                misdirected: Vec::new(),
                sni_routes: false,
                client_ca: None,
            })),
            field: "spec.servers[0]".into(),
        }],
        same_namespace: false,
    });
    let reviews = host("reviews", "default");
    let rule = |pool: Option<ConnectionPool>| {
        let Record::DestinationRule(mut dr) =
            destination_rule("default", "reviews", &reviews, &[("v1", "v1")])
        else {
            unreachable!()
        };
        dr.traffic_policy = pool.map(|p| TrafficPolicy {
            connection_pool: Some(Box::new(p)),
            ..Default::default()
        });
        Record::DestinationRule(dr)
    };
    let limited = rule(Some(ConnectionPool {
        tcp_idle_timeout_ms: Some(30_000),
        max_connection_duration_ms: Some(60_000),
        ..Default::default()
    }));
    m.insert(vec![
        px(&gw),
        gateway,
        service("reviews", "default"),
        limited.clone(),
    ]);
    let limits = |m: &Mesh| -> BTreeSet<(Option<i64>, Option<i64>)> {
        let chains = m.listener_body(&gw, "0.0.0.0_15443").filter_chains;
        assert_eq!(chains.len(), 2, "the host's chain and its subset's");
        chains.iter().map(tcp_proxy_limits).collect()
    };
    assert_eq!(limits(&m), BTreeSet::from([(Some(30), Some(60))]));
    m.replace(limited, rule(None));
    assert_eq!(limits(&m), BTreeSet::from([(None, None)]));
}

/// Proves that an AUTO_PASSTHROUGH server has a chain per outbound cluster of the gateway's
/// scope whose host its hosts match (services inside the mesh only), matched on Istio's SNI
/// for it and passing to it, and that a new subset adds its chain incrementally (the dataflow's result is the naive
/// recompute's, which the oracle checks on random inputs).
#[test]
fn auto_passthrough_server_has_a_chain_per_cluster_by_its_sni() {
    let mut m = Mesh::new();
    let gw = router_proxy(
        "eastwest-1",
        "istio-system",
        "10.0.0.9",
        &[("istio", "eastwestgateway")],
    );
    let server = GatewayServer {
        port: 15443,
        port_name: "tls".into(),
        protocol: Protocol::Tls,
        bind: None,
        hosts: vec!["*/*.default.svc.cluster.local".into()],
        https_redirect: false,
        tls: Some(Box::new(ServerTls {
            mode: ServerTlsMode::AutoPassthrough,
            credential: None,
            min_version: None,
            max_version: None,
            cipher_suites: vec![],
            subject_alt_names: vec![],
            tcp: false,
            misdirected: Vec::new(),
            sni_routes: false,
            client_ca: None,
        })),
        field: "spec.servers[0]".into(),
    };
    let gateway = Record::Gateway(Gateway {
        key: ConfigKey::new(Kind::Gateway, "istio-system", "cross-network"),
        selector: labels(&[("istio", "eastwestgateway")]),
        servers: vec![server],
        same_namespace: false,
    });
    m.insert(vec![
        px(&gw),
        gateway,
        service("reviews", "default"),
        service("ratings", "other"),
    ]);
    let chains = |m: &Mesh| -> BTreeMap<String, String> {
        m.listener_body(&gw, "0.0.0.0_15443")
            .filter_chains
            .iter()
            .map(|c| {
                let names = c
                    .filter_chain_match
                    .as_ref()
                    .map(|f| f.server_names.join(","))
                    .unwrap_or_default();
                (names, tcp_proxy_cluster(c).unwrap_or_default())
            })
            .collect()
    };
    let reviews = host("reviews", "default");
    assert_eq!(
        chains(&m),
        BTreeMap::from([(
            format!("outbound_.9080_._.{reviews}"),
            outbound(9080, "", "reviews", "default")
        )]),
        "only the hosts the server matches"
    );
    m.insert(vec![destination_rule(
        "default",
        "reviews",
        &reviews,
        &[("v1", "v1")],
    )]);
    let got = chains(&m);
    assert_eq!(
        got.get(&format!("outbound_.9080_.v1_.{reviews}")),
        Some(&outbound(9080, "v1", "reviews", "default")),
        "{got:?}"
    );
    assert_eq!(got.len(), 2, "{got:?}");

    // A service outside the mesh (a ServiceEntry's default location) gets no chain, though
    // the server's hosts match it; moved inside the mesh, it gets its chain.
    let partner = |external: bool| {
        let Record::Service(mut svc) = service("partner", "default") else {
            unreachable!()
        };
        svc.mesh_external = external;
        Record::Service(svc)
    };
    m.insert(vec![partner(true)]);
    let got = chains(&m);
    assert_eq!(
        got.len(),
        2,
        "no chain for a service outside the mesh: {got:?}"
    );
    m.replace(partner(true), partner(false));
    let got = chains(&m);
    assert_eq!(
        got.get(&format!("outbound_.9080_._.{}", host("partner", "default"))),
        Some(&outbound(9080, "", "partner", "default")),
        "{got:?}"
    );
}
