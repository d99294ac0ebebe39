//! A proxy's inbound side: Sidecar `ingress` listeners (replacing its own ports,
//! terminating TLS, without capture) and its inbound clusters' connection pools and
//! protocols.

use crate::support::{
    destination_rule, endpoint, host, labels, mesh_settings, outbound, px, service, set, sidecar,
    sidecar_proxy, tcp_proxy_cluster, Mesh,
};
use dataflows::driver::Engine;
use dataflows::model::*;
use prost::Message;
use std::collections::BTreeSet;

/// A Sidecar with `ingress` listeners replaces the proxy's own inbound ports, as Istio
/// builds inbound from `ingress` alone: the pod serving reviews on 9080 has
/// `inbound|9080||` and a `virtualInbound` chain for it until a Sidecar with an ingress on
/// 7070 selects it; then only `inbound|7070||` (to its default endpoint); removing the
/// Sidecar brings its own port back.
#[test]
fn sidecar_ingress_replaces_the_proxys_own_inbound_ports() {
    let mut m = Mesh::new();
    let pod = sidecar_proxy("reviews-1", "default", "10.1.0.9", &[("app", "reviews")]);
    m.insert(vec![
        service("reviews", "default"),
        endpoint("reviews", "default", "10.1.0.9", true),
        px(&pod),
    ]);
    let inbound = |m: &Mesh| -> BTreeSet<String> {
        m.held
            .keys()
            .filter(|(p, k)| *p == pod.id && k.rtype == ResourceType::Cluster)
            .map(|(_, k)| k.name.clone())
            .filter(|n| n.starts_with("inbound|"))
            .collect()
    };
    assert_eq!(inbound(&m), BTreeSet::from(["inbound|9080||".to_string()]));
    let sidecar = Record::Sidecar(Sidecar {
        key: ConfigKey::new(Kind::Sidecar, "default", "reviews"),
        selector: Some(labels(&[("app", "reviews")])),
        egress: Vec::new(),
        registry_only: None,
        ingress: vec![IngressListener {
            port: 7070,
            bind: None,
            endpoint: ("127.0.0.1".into(), 17070),
            capture_none: false,
            protocol: Protocol::Http,
            connection_pool: None,
            tls: None,
            fail_closed: None,
        }],
        egress_proxy: None,
        inbound_connection_pool: None,
    });
    m.insert(vec![sidecar.clone()]);
    assert_eq!(inbound(&m), BTreeSet::from(["inbound|7070||".to_string()]));
    let chains = format!(
        "{:?}",
        m.listener_body(&pod, "virtualInbound").filter_chains
    );
    assert!(chains.contains("inbound|7070||"), "{chains}");
    assert!(!chains.contains("inbound|9080||"), "{chains}");
    m.retract(vec![sidecar]);
    assert_eq!(inbound(&m), BTreeSet::from(["inbound|9080||".to_string()]));
}

/// A Sidecar `ingress` listener's `tls` of `mode`, from certificate files.
fn ingress_tls(mode: ServerTlsMode) -> Option<Box<ServerTls>> {
    Some(Box::new(ServerTls {
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
    }))
}

/// Sidecar `ingress` listeners with `tls` terminate TLS with their certificate files, as
/// Istio builds them: a captured port's one chain in `virtualInbound` and a bound port's
/// (`captureMode: NONE`) in its own listener, on TLS only (no plaintext, no mesh mTLS
/// chain), to the port's inbound cluster, which keeps its endpoint. With no mTLS chain left
/// (and `ingress` replacing the pod's own port), the proxy's config names no workload
/// certificate, so it holds no `default` or `ROOTCA` (auto mTLS off, so no cluster names
/// them either); a listener without `tls` brings the mTLS chain and both secrets back.
#[test]
fn sidecar_ingress_tls_terminates_on_its_port_alone() {
    let mut m = Mesh {
        engine: Engine::start(
            1,
            MeshConfig {
                trust_root: Some("ROOT PEM".into()),
                ..MeshConfig::default()
            },
        ),
        ..Mesh::new()
    };
    let pod = sidecar_proxy("reviews-1", "default", "10.1.0.9", &[("app", "reviews")]);
    m.insert(vec![
        mesh_settings(|s| s.auto_mtls = false),
        service("reviews", "default"),
        endpoint("reviews", "default", "10.1.0.9", true),
        px(&pod),
    ]);
    assert_eq!(
        m.names(&pod, ResourceType::Secret),
        set(&["ROOTCA", "default"]),
        "virtualInbound's mTLS chain of the pod's own port names them"
    );
    let listener = |port: u16, protocol: Protocol, capture_none: bool, mode| IngressListener {
        port,
        bind: None,
        endpoint: ("127.0.0.1".into(), port + 10000),
        capture_none,
        protocol,
        connection_pool: None,
        tls: ingress_tls(mode),
        fail_closed: None,
    };
    let sidecar = |ingress: Vec<IngressListener>| {
        Record::Sidecar(Sidecar {
            key: ConfigKey::new(Kind::Sidecar, "default", "reviews"),
            selector: Some(labels(&[("app", "reviews")])),
            egress: Vec::new(),
            registry_only: None,
            ingress,
            egress_proxy: None,
            inbound_connection_pool: None,
        })
    };
    let tls_only = sidecar(vec![
        listener(8443, Protocol::Http, false, ServerTlsMode::Simple),
        listener(9443, Protocol::Tcp, true, ServerTlsMode::Mutual),
    ]);
    m.insert(vec![tls_only.clone()]);
    let chains = |l: &envoy_types::pb::envoy::config::listener::v3::Listener| {
        l.filter_chains
            .iter()
            .map(|c| {
                let m = c.filter_chain_match.clone().unwrap_or_default();
                (
                    c.name.clone(),
                    m.transport_protocol,
                    c.transport_socket.is_some(),
                )
            })
            .collect::<Vec<_>>()
    };
    let vin = m.listener_body(&pod, "virtualInbound");
    assert_eq!(
        chains(&vin),
        vec![
            ("inbound|8443||-ingress-tls".into(), "tls".into(), true),
            ("virtualInbound-catchall-tcp".into(), String::new(), false),
        ]
    );
    let socket = vin.filter_chains[0]
        .transport_socket
        .clone()
        .expect("a transport socket");
    let Some(envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType::TypedConfig(
        any,
    )) = socket.config_type
    else {
        panic!("{socket:?}")
    };
    assert!(any.type_url.ends_with("DownstreamTlsContext"), "{any:?}");
    let context = String::from_utf8_lossy(&any.value);
    // The certificate files come over SDS, as Istio names them.
    const CERT: &str = "file-cert:/etc/certs/cert.pem~/etc/certs/key.pem";
    assert!(context.contains(CERT), "{context}");
    let bound = m.listener_body(&pod, "inbound_0.0.0.0_9443");
    assert_eq!(
        chains(&bound),
        vec![("inbound|9443||-ingress-tls".into(), "tls".into(), true)]
    );
    assert_eq!(
        tcp_proxy_cluster(&bound.filter_chains[0]).as_deref(),
        Some("inbound|9443||")
    );
    for (cluster, app) in [("inbound|8443||", "18443"), ("inbound|9443||", "19443")] {
        let c = m.cluster_body(&pod, cluster);
        assert!(
            format!("{:?}", c.load_assignment).contains(app),
            "{cluster}: {c:?}"
        );
    }
    assert!(m.clusters(&pod).iter().all(|c| c != "inbound|9080||"));
    // No chain names the workload certificate: the secrets are the files' alone (the
    // MUTUAL port's CA too), held by the proxy (`virtualInbound`) and by its scope (the
    // bound listener) alike.
    assert_eq!(
        m.names(&pod, ResourceType::Secret),
        set(&[CERT, "file-root:/etc/certs/ca.pem"]),
    );

    // A listener without `tls`: its plaintext and mTLS chains, which name the workload
    // certificate again.
    let mixed = sidecar(vec![
        IngressListener {
            tls: None,
            ..listener(8443, Protocol::Http, false, ServerTlsMode::Simple)
        },
        listener(9443, Protocol::Tcp, true, ServerTlsMode::Mutual),
    ]);
    m.replace(tls_only, mixed);
    let names: Vec<String> = chains(&m.listener_body(&pod, "virtualInbound"))
        .into_iter()
        .map(|(n, _, _)| n)
        .collect();
    assert_eq!(
        names,
        vec![
            "inbound|8443||",
            "inbound|8443||-mtls",
            "virtualInbound-catchall-tcp"
        ]
    );
    assert_eq!(
        m.names(&pod, ResourceType::Secret),
        set(&["ROOTCA", "default", CERT, "file-root:/etc/certs/ca.pem"])
    );
}

/// A proxy without capture (`INTERCEPTION_MODE: NONE`) builds its inbound side from Sidecar
/// `ingress` alone, as Istio does: serving reviews on 9080 it has no inbound cluster and no
/// inbound listener (binding 9080 would take the application's port), not even when a
/// Sidecar gives it only an `inboundConnectionPool`; a Sidecar with an `ingress` on 7070
/// gives it `inbound|7070||` and the bound `inbound_0.0.0.0_7070`, and removing it takes
/// both away again. A captured pod of the same service keeps `inbound|9080||` throughout.
#[test]
fn uncaptured_proxy_has_inbound_clusters_from_sidecar_ingress_only() {
    let mut m = Mesh::new();
    let pod = Proxy {
        interception_none: true,
        ..sidecar_proxy("reviews-1", "default", "10.1.0.9", &[("app", "reviews")])
    };
    let captured = sidecar_proxy("reviews-2", "default", "10.1.0.10", &[("app", "other")]);
    m.insert(vec![
        service("reviews", "default"),
        endpoint("reviews", "default", "10.1.0.9", true),
        endpoint("reviews", "default", "10.1.0.10", true),
        px(&pod),
        px(&captured),
    ]);
    let inbound = |m: &Mesh, p: &Proxy| -> (BTreeSet<String>, BTreeSet<String>) {
        let clusters = m
            .clusters(p)
            .into_iter()
            .filter(|n| n.starts_with("inbound|"))
            .collect();
        let listeners = m
            .listeners(p)
            .into_iter()
            .filter(|n| n.starts_with("inbound_") || n == "virtualInbound")
            .collect();
        (clusters, listeners)
    };
    let none = (BTreeSet::new(), BTreeSet::new());
    let captured_side = (
        BTreeSet::from(["inbound|9080||".to_string()]),
        BTreeSet::from(["virtualInbound".to_string()]),
    );
    assert_eq!(inbound(&m, &pod), none);
    assert_eq!(inbound(&m, &captured), captured_side);
    let pool_only = Record::Sidecar(Sidecar {
        key: ConfigKey::new(Kind::Sidecar, "default", "reviews"),
        selector: Some(labels(&[("app", "reviews")])),
        egress: Vec::new(),
        registry_only: None,
        ingress: Vec::new(),
        egress_proxy: None,
        inbound_connection_pool: Some(InboundPool {
            connect_timeout_ms: Some(250),
            pool: None,
        }),
    });
    m.insert(vec![pool_only.clone()]);
    assert_eq!(inbound(&m, &pod), none);
    let Record::Sidecar(with_ingress) = pool_only.clone() else {
        unreachable!()
    };
    let with_ingress = Record::Sidecar(Sidecar {
        ingress: vec![IngressListener {
            port: 7070,
            bind: None,
            endpoint: ("127.0.0.1".into(), 17070),
            capture_none: false,
            protocol: Protocol::Http,
            connection_pool: None,
            tls: None,
            fail_closed: None,
        }],
        ..with_ingress
    });
    m.replace(pool_only, with_ingress.clone());
    assert_eq!(
        inbound(&m, &pod),
        (
            BTreeSet::from(["inbound|7070||".to_string()]),
            BTreeSet::from(["inbound_0.0.0.0_7070".to_string()]),
        )
    );
    assert_eq!(inbound(&m, &captured), captured_side);
    m.retract(vec![with_ingress]);
    assert_eq!(inbound(&m, &pod), none);
    assert_eq!(inbound(&m, &captured), captured_side);
}

/// The HttpProtocolOptions of a cluster, if it has them.
fn http_options(
    c: &envoy_types::pb::envoy::config::cluster::v3::Cluster,
) -> Option<envoy_types::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions> {
    c.typed_extension_protocol_options
        .get("envoy.extensions.upstreams.http.v3.HttpProtocolOptions")
        .map(|a| {
            envoy_types::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions::decode(
                &a.value[..],
            )
            .expect("HttpProtocolOptions")
        })
}

/// (max connections, max pending requests, max requests, max retries) of a cluster.
fn limits(c: &envoy_types::pb::envoy::config::cluster::v3::Cluster) -> [u32; 4] {
    let t = &c
        .circuit_breakers
        .as_ref()
        .expect("circuit breakers")
        .thresholds[0];
    [
        t.max_connections.as_ref().map_or(0, |v| v.value),
        t.max_pending_requests.as_ref().map_or(0, |v| v.value),
        t.max_requests.as_ref().map_or(0, |v| v.value),
        t.max_retries.as_ref().map_or(0, |v| v.value),
    ]
}

/// A policy whose connection pool allows `pending` queued requests, with a load balancer,
/// outlier detection and TLS beside it (which inbound clusters never take).
fn pool_policy(pending: u32) -> TrafficPolicy {
    TrafficPolicy {
        load_balancer: Some(LoadBalancer::RoundRobin),
        connect_timeout_ms: Some(3_000),
        connection_pool: Some(Box::new(ConnectionPool {
            max_pending_requests: Some(pending),
            max_requests_per_connection: Some(2),
            ..Default::default()
        })),
        outlier_detection: Some(Box::new(OutlierDetection {
            consecutive_5xx: Some(1),
            ..Default::default()
        })),
        tls: Some(Box::new(UpstreamTls {
            istio_mutual: true,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// Istio applies the connection pool of the DestinationRule of a workload's own service to
/// its inbound cluster, and nothing else of the rule: with no rule the cluster has Istio's
/// default limits (no limit); a rule's pool sets its limits, lifetimes and connect timeout
/// (not its load balancer, outlier detection or TLS), and its change reaches only the
/// inbound clusters of that host's workloads. A rule with a `workloadSelector` is not used
/// for inbound traffic; a `portLevelSettings` entry for the service port is; a Sidecar's
/// `inboundConnectionPool` wins over the rule, and an `ingress` listener's pool over that.
#[test]
fn inbound_clusters_take_the_connection_pool_of_their_services_rule() {
    let mut m = Mesh::new();
    let reviews = sidecar_proxy("reviews-1", "default", "10.1.0.9", &[("app", "reviews")]);
    let ratings = sidecar_proxy("ratings-1", "default", "10.1.0.10", &[("app", "ratings")]);
    m.insert(vec![
        service("reviews", "default"),
        service("ratings", "default"),
        endpoint("reviews", "default", "10.1.0.9", true),
        endpoint("ratings", "default", "10.1.0.10", true),
        px(&reviews),
        px(&ratings),
    ]);
    let inbound = |m: &Mesh| m.cluster_body(&reviews, "inbound|9080||");
    let c = inbound(&m);
    assert_eq!(limits(&c), [u32::MAX; 4], "Istio's defaults: no limit");
    assert!(http_options(&c).is_none());
    let rule = |policy: TrafficPolicy, selector: Option<Labels>| {
        let Record::DestinationRule(mut dr) =
            destination_rule("default", "reviews", &host("reviews", "default"), &[])
        else {
            unreachable!()
        };
        dr.traffic_policy = Some(policy);
        dr.selector = selector;
        Record::DestinationRule(dr)
    };
    let dr = rule(pool_policy(1), None);
    let diffs = m.insert(vec![dr.clone()]);
    let inbound_changes: BTreeSet<(ProxyId, String)> = diffs
        .iter()
        .filter(|((_, k), _)| k.name.starts_with("inbound|"))
        .map(|((p, k), _)| (p.clone(), k.name.clone()))
        .collect();
    assert_eq!(
        inbound_changes,
        BTreeSet::from([(reviews.id.clone(), "inbound|9080||".to_string())]),
        "only the inbound cluster of the rule's host's workload changes"
    );
    let c = inbound(&m);
    assert_eq!(limits(&c), [u32::MAX, 1, u32::MAX, u32::MAX]);
    assert_eq!(c.connect_timeout.as_ref().map(|d| d.seconds), Some(3));
    let common = http_options(&c).and_then(|o| o.common_http_protocol_options);
    assert_eq!(
        common
            .and_then(|o| o.max_requests_per_connection)
            .map(|v| v.value),
        Some(2)
    );
    assert!(
        c.outlier_detection.is_none(),
        "no outlier detection inbound"
    );
    assert!(c.transport_socket.is_none(), "no TLS inbound");
    assert_eq!(
        c.lb_policy, 0,
        "the default load balancer, not the rule's ROUND_ROBIN"
    );
    // The outbound cluster of the host has the whole rule.
    let out = m.cluster_body(&ratings, &outbound(9080, "", "reviews", "default"));
    assert!(out.outlier_detection.is_some());
    // A rule with a workload selector (selecting the workload itself) is not read inbound.
    let selected = Record::DestinationRule(DestinationRule {
        key: ConfigKey::new(Kind::DestinationRule, "default", "reviews-selected"),
        ..match rule(pool_policy(5), Some(labels(&[("app", "reviews")]))) {
            Record::DestinationRule(d) => d,
            _ => unreachable!(),
        }
    });
    m.insert(vec![selected.clone()]);
    assert_eq!(limits(&inbound(&m))[1], 1, "the selector rule is not used");
    m.retract(vec![selected]);
    // A port-level entry for the service port replaces the rule's pool there.
    let mut per_port = pool_policy(1);
    per_port.port_level = vec![(9080, pool_policy(4))];
    let dr_port = rule(per_port, None);
    m.replace(dr.clone(), dr_port.clone());
    assert_eq!(limits(&inbound(&m))[1], 4);
    // The Sidecar's inboundConnectionPool wins; an ingress listener's pool wins over it.
    let Record::Sidecar(mut sc) =
        sidecar("default", "reviews", Some(&[("app", "reviews")]), &["*/*"])
    else {
        unreachable!()
    };
    let sidecar_pool = |pending| InboundPool {
        connect_timeout_ms: None,
        pool: Some(ConnectionPool {
            max_pending_requests: Some(pending),
            ..Default::default()
        }),
    };
    sc.inbound_connection_pool = Some(sidecar_pool(7));
    let sc_pool = Record::Sidecar(sc.clone());
    m.insert(vec![sc_pool.clone()]);
    let c = inbound(&m);
    assert_eq!(limits(&c)[1], 7);
    assert_eq!(
        c.connect_timeout.as_ref().map(|d| d.seconds),
        Some(10),
        "the Sidecar's pool replaces the rule's whole (the mesh's connect timeout)"
    );
    sc.ingress = vec![IngressListener {
        port: 9080,
        bind: None,
        endpoint: ("127.0.0.1".into(), 19080),
        capture_none: false,
        protocol: Protocol::Http,
        connection_pool: Some(sidecar_pool(8)),
        tls: None,
        fail_closed: None,
    }];
    let sc_ingress = Record::Sidecar(sc);
    m.replace(sc_pool, sc_ingress.clone());
    let c = inbound(&m);
    assert_eq!(limits(&c)[1], 8);
    assert!(format!("{:?}", c.load_assignment).contains("19080"));
    // An ingress listener failing closed (a `tls` not terminated): no endpoints at all.
    let Record::Sidecar(mut closed) = sc_ingress.clone() else {
        unreachable!()
    };
    closed.ingress[0].fail_closed = Some("spec.ingress[0].tls".into());
    let sc_closed = Record::Sidecar(closed);
    m.replace(sc_ingress.clone(), sc_closed.clone());
    let c = inbound(&m);
    assert!(
        c.load_assignment
            .as_ref()
            .is_some_and(|a| a.endpoints.is_empty()),
        "{c:?}"
    );
    m.replace(sc_closed, sc_ingress.clone());
    // Without the Sidecar, the rule's port entry again; without the rule, the defaults.
    m.retract(vec![sc_ingress]);
    assert_eq!(limits(&inbound(&m))[1], 4);
    m.retract(vec![dr_port]);
    assert_eq!(limits(&inbound(&m)), [u32::MAX; 4]);
}

/// An inbound cluster of an HTTP2 or gRPC service port speaks HTTP/2 to the application,
/// as Istio's do; an HTTP/1.1 port's does not, even under `h2UpgradePolicy: UPGRADE`
/// (Istio never upgrades inbound), and `maxConcurrentStreams` reaches the HTTP/2 options.
#[test]
fn inbound_clusters_of_grpc_ports_speak_http2() {
    let mut m = Mesh::new();
    let pod = sidecar_proxy("reviews-1", "default", "10.1.0.9", &[("app", "reviews")]);
    let grpc = |protocol| {
        let Record::Service(mut s) = service("reviews", "default") else {
            unreachable!()
        };
        s.ports[0].protocol = protocol;
        Record::Service(s)
    };
    let Record::DestinationRule(mut dr) =
        destination_rule("default", "reviews", &host("reviews", "default"), &[])
    else {
        unreachable!()
    };
    dr.traffic_policy = Some(TrafficPolicy {
        connection_pool: Some(Box::new(ConnectionPool {
            h2_upgrade: Some(H2Upgrade::Upgrade),
            max_concurrent_streams: Some(9),
            ..Default::default()
        })),
        ..Default::default()
    });
    m.insert(vec![
        grpc(Protocol::Grpc),
        endpoint("reviews", "default", "10.1.0.9", true),
        Record::DestinationRule(dr),
        px(&pod),
    ]);
    let h2 = |m: &Mesh| {
        let c = m.cluster_body(&pod, "inbound|9080||");
        let dump = format!("{:?}", http_options(&c));
        dump.contains("Http2ProtocolOptions")
            .then(|| dump.contains("max_concurrent_streams: Some(UInt32Value { value: 9 })"))
    };
    assert_eq!(h2(&m), Some(true), "HTTP/2 with the rule's stream limit");
    m.replace(grpc(Protocol::Grpc), grpc(Protocol::Http));
    assert_eq!(h2(&m), None, "an HTTP/1.1 port is never upgraded inbound");
}
