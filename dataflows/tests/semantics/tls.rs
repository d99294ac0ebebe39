//! TLS on the client side: a DestinationRule's `tls` (`credentialName` per client namespace,
//! SIMPLE failing closed for proxyless clients), and TLS services without addresses told
//! apart by SNI on sidecars.

use crate::support::{
    destination_rule, gateway_errors, host, outbound, px, service, set, sidecar_proxy,
    tcp_proxy_cluster, tls_secret, virtual_service, Mesh,
};
use dataflows::model::*;
use std::collections::BTreeSet;

/// Proves that a proxyless gRPC client is never given a DestinationRule's `SIMPLE` TLS it
/// cannot honour: its cluster fails closed (no assignment) while a sidecar's originates TLS,
/// and an error names the rule and the field for as long as such a client has the rule in
/// effect.
#[test]
fn simple_tls_fails_closed_for_proxyless_clients_and_is_reported() {
    let mut m = Mesh::new();
    let sidecar = sidecar_proxy("a-1", "default", "10.0.0.1", &[("app", "a")]);
    let grpc = Proxy {
        kind: ProxyKind::Proxyless,
        ..sidecar_proxy("g-1", "default", "10.0.0.3", &[("app", "g")])
    };
    let Record::DestinationRule(mut dr) =
        destination_rule("default", "reviews", &host("reviews", "default"), &[])
    else {
        unreachable!()
    };
    dr.traffic_policy = Some(TrafficPolicy {
        tls: Some(Box::new(UpstreamTls {
            field: "spec.trafficPolicy.tls".into(),
            ..Default::default()
        })),
        ..Default::default()
    });
    m.insert(vec![
        service("reviews", "default"),
        Record::DestinationRule(dr),
        px(&sidecar),
    ]);
    let cluster = outbound(9080, "", "reviews", "default");
    let errors = |m: &Mesh| gateway_errors(m, ErrorCode::ProxylessTls);
    assert!(m.names(&sidecar, ResourceType::Endpoint).contains(&cluster));
    assert!(errors(&m).is_empty(), "no gRPC client yet");
    m.insert(vec![px(&grpc)]);
    assert!(m.clusters(&grpc).contains(&cluster));
    let eds = m.names(&grpc, ResourceType::Endpoint);
    assert!(!eds.contains(&cluster), "failed closed: {eds:?}");
    assert!(m.names(&sidecar, ResourceType::Endpoint).contains(&cluster));
    let e = errors(&m);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("DestinationRule/default/reviews")
            && e[0].contains("spec.trafficPolicy.tls.mode SIMPLE"),
        "{e:?}"
    );
    m.retract(vec![px(&grpc)]);
    assert!(errors(&m).is_empty(), "{:?}", errors(&m));
}

/// Proves that a DestinationRule's `credentialName` (here in a `portLevelSettings` entry)
/// takes the Secret of each client proxy's own namespace: without it there, that proxy's
/// cluster fails closed (no assignment, no SDS secret) and an error names the rule, the field
/// and the namespace; the Secret appearing heals only the proxies of its namespace, and
/// replacing its certificate changes that SDS secret alone. The port the entry does not name
/// keeps the rule's own (plaintext) policy throughout.
#[test]
fn credential_name_takes_the_secret_of_each_clients_own_namespace() {
    let mut m = Mesh::new();
    let a = sidecar_proxy("a-1", "default", "10.0.0.1", &[("app", "a")]);
    let b = sidecar_proxy("b-1", "other", "10.0.0.2", &[("app", "b")]);
    let Record::Service(mut svc) = service("reviews", "default") else {
        unreachable!()
    };
    svc.ports.push(ServicePort {
        name: "http-plain".into(),
        port: 9081,
        protocol: Protocol::Http,
    });
    let Record::DestinationRule(mut dr) =
        destination_rule("default", "reviews", &host("reviews", "default"), &[])
    else {
        unreachable!()
    };
    dr.traffic_policy = Some(TrafficPolicy {
        port_level: vec![(
            9080,
            TrafficPolicy {
                tls: Some(Box::new(UpstreamTls {
                    credential: Some("client".into()),
                    mutual: true,
                    field: "spec.trafficPolicy.portLevelSettings[0].tls".into(),
                    ..Default::default()
                })),
                ..Default::default()
            },
        )],
        ..Default::default()
    });
    m.insert(vec![
        Record::Service(svc),
        Record::DestinationRule(dr),
        px(&a),
        px(&b),
    ]);
    let tls_cluster = outbound(9080, "", "reviews", "default");
    let plain_cluster = outbound(9081, "", "reviews", "default");
    let errors = |m: &Mesh| gateway_errors(m, ErrorCode::DestinationRuleSecret);
    for p in [&a, &b] {
        assert!(m.clusters(p).contains(&tls_cluster));
        let eds = m.names(p, ResourceType::Endpoint);
        assert!(!eds.contains(&tls_cluster), "failed closed: {eds:?}");
        assert!(eds.contains(&plain_cluster), "the other port is untouched");
        assert!(m.names(p, ResourceType::Secret).is_empty());
    }
    let e = errors(&m);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e.iter()
            .all(|e| e.contains("DestinationRule/default/reviews")
                && e.contains("spec.trafficPolicy.portLevelSettings[0].tls.credentialName")),
        "{e:?}"
    );
    assert!(e.iter().any(|e| e.contains("namespace other")), "{e:?}");

    // The Secret in `default`: `a` is served it, `b` (namespace `other`) is not.
    let first = tls_secret("default", "client", "fp1", Some("CA 1"), None);
    m.insert(vec![first.clone()]);
    assert_eq!(
        m.names(&a, ResourceType::Secret),
        set(&["kubernetes://client", "kubernetes://client-cacert"])
    );
    assert!(m.names(&a, ResourceType::Endpoint).contains(&tls_cluster));
    assert!(m.names(&b, ResourceType::Secret).is_empty());
    assert!(!m.names(&b, ResourceType::Endpoint).contains(&tls_cluster));
    let e = errors(&m);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("Secret other/client does not exist"), "{e:?}");

    // A new certificate: only that SDS secret changes, for `a` only.
    let diffs = m.replace(
        first,
        tls_secret("default", "client", "fp2", Some("CA 1"), None),
    );
    let changed: BTreeSet<(ProxyId, ResourceType, String)> = diffs
        .iter()
        .map(|((p, k), _)| (p.clone(), k.rtype, k.name.clone()))
        .collect();
    assert_eq!(
        changed,
        BTreeSet::from([(
            a.id.clone(),
            ResourceType::Secret,
            "kubernetes://client".to_string()
        )]),
        "{diffs:?}"
    );
}

/// A ServiceEntry `name` (namespace `default`) for `host` with TLS port 443 and no
/// addresses, of Istio's default location (outside the mesh).
fn tls_entry(name: &str, host: &str, resolution: Resolution) -> Record {
    Record::Service(Service {
        control_plane: false,
        mesh_external: true,
        prefer_close: false,
        headless: false,
        alias_for: None,
        aliases: Vec::new(),
        subject_alt_names: Vec::new(),
        hostname: host.to_string(),
        origin: ConfigKey::new(Kind::ServiceEntry, "default", name),
        ports: vec![ServicePort {
            name: "tls".into(),
            port: 443,
            protocol: Protocol::Tls,
        }],
        export_to: vec![],
        resolution,
        dns_endpoints: Vec::new(),
        host_target_ports: Default::default(),
        addresses: vec![],
    })
}

/// A mesh VirtualService `name` for `hosts` with one `tls[]` route: SNI `sni` to `dest`'s
/// subset `subset` on port 443.
fn sni_vs(name: &str, hosts: &[&str], sni: &str, dest: &str, subset: &str) -> Record {
    Record::VirtualService(VirtualService {
        key: ConfigKey::new(Kind::VirtualService, "default", name),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        gateways: vec![],
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
                subset: Some(subset.into()),
                port: Some(443),
                weight: 100,
            }],
        }],
    })
}

/// A listener's chains as `(server names, prefix ranges, tcp_proxy cluster)`.
fn sni_table(
    l: &envoy_types::pb::envoy::config::listener::v3::Listener,
) -> Vec<(Vec<String>, usize, Option<String>)> {
    l.filter_chains
        .iter()
        .map(|c| {
            let m = c.filter_chain_match.clone().unwrap_or_default();
            (m.server_names, m.prefix_ranges.len(), tcp_proxy_cluster(c))
        })
        .collect()
}

/// Proves that TLS services without an address of their own are told apart by the name
/// the client sends, as Istio does: the sidecar's `0.0.0.0_443` gets, with the TLS
/// inspector, a chain per service matched by its host (a wildcard host as Envoy's wildcard
/// name) on any address, to its own cluster, and what no name claims still passes through;
/// a `tls[]` route for the host moves its chain to the route's destination; a wildcard
/// VirtualService's route for a name under it is that entry's own, but a route that claims
/// the host of an entry with a VirtualService of its own first leaves that entry
/// unreachable, which is reported, and the report goes with the route.
#[test]
fn tls_services_without_addresses_are_routed_by_their_host_names() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("sleep-1", "default", "10.0.0.5", &[("app", "sleep")]);
    m.insert(vec![
        px(&client),
        tls_entry("www", "www.example.com", Resolution::Dns),
        tls_entry("wiki", "*.wiki.example.org", Resolution::None),
    ]);
    let l = m.listener_body(&client, "0.0.0.0_443");
    assert_eq!(
        sni_table(&l),
        vec![
            (
                vec!["*.wiki.example.org".to_string()],
                0,
                Some("outbound|443||*.wiki.example.org".to_string())
            ),
            (
                vec!["www.example.com".to_string()],
                0,
                Some("outbound|443||www.example.com".to_string())
            ),
        ]
    );
    assert!(
        l.listener_filters
            .iter()
            .any(|f| f.name.contains("tls_inspector")),
        "{l:?}"
    );
    assert!(l.continue_on_listener_filters_timeout);
    let passthrough = l.default_filter_chain.as_ref().and_then(tcp_proxy_cluster);
    assert_eq!(passthrough.as_deref(), Some("PassthroughCluster"));
    assert!(m.errors.is_empty(), "{:?}", m.errors);

    // A tls[] route for www.example.com takes its name to subset v1.
    let www_vs = sni_vs(
        "www",
        &["www.example.com"],
        "www.example.com",
        "www.example.com",
        "v1",
    );
    m.insert(vec![www_vs.clone()]);
    let l = m.listener_body(&client, "0.0.0.0_443");
    let www: Vec<_> = sni_table(&l)
        .into_iter()
        .filter(|(names, _, _)| names == &["www.example.com"])
        .collect();
    assert_eq!(
        www,
        vec![(
            vec!["www.example.com".to_string()],
            0,
            Some("outbound|443|v1|www.example.com".to_string())
        )]
    );
    m.retract(vec![www_vs]);

    // An entry for a.wiki.example.org, and a route of the wildcard entry claiming that name
    // first (`*` sorts before letters): the later entry is reported, not silently lost.
    let a_entry = tls_entry("a-wiki", "a.wiki.example.org", Resolution::Dns);
    m.insert(vec![a_entry]);
    let l = m.listener_body(&client, "0.0.0.0_443");
    assert!(sni_table(&l).contains(&(
        vec!["a.wiki.example.org".to_string()],
        0,
        Some("outbound|443||a.wiki.example.org".to_string())
    )));
    assert!(m.errors.is_empty(), "{:?}", m.errors);
    let wiki_vs = sni_vs(
        "wiki",
        &["*.wiki.example.org"],
        "a.wiki.example.org",
        "*.wiki.example.org",
        "v2",
    );
    m.insert(vec![wiki_vs.clone()]);
    let l = m.listener_body(&client, "0.0.0.0_443");
    let claimed: Vec<_> = sni_table(&l)
        .into_iter()
        .filter(|(names, _, _)| names == &["a.wiki.example.org"])
        .collect();
    assert_eq!(
        claimed,
        vec![(
            vec!["a.wiki.example.org".to_string()],
            0,
            Some("outbound|443|v2|*.wiki.example.org".to_string())
        )]
    );
    // The wildcard VirtualService covers a.wiki.example.org too, so the route is that
    // entry's own: nothing is lost. An exact VirtualService for the entry (without `tls[]`
    // routes) does not take it back: a TLS port tries the routes of every VirtualService
    // covering the host, the exact one's first, then the wildcard's, as Istio's sidecars do.
    // The one finding is the subset no DestinationRule defines (analysis reads `tls[]`
    // destinations as it reads `http[]` ones).
    let codes: Vec<ErrorCode> = m.errors.keys().map(|e| e.code).collect();
    assert_eq!(codes, vec![ErrorCode::SubsetNotDefined], "{:?}", m.errors);
    let a_vs = virtual_service(
        "default",
        "a-wiki",
        &["a.wiki.example.org"],
        &[],
        "a.wiki.example.org",
    );
    m.insert(vec![a_vs.clone()]);
    let l = m.listener_body(&client, "0.0.0.0_443");
    let claimed: Vec<_> = sni_table(&l)
        .into_iter()
        .filter(|(names, _, _)| names == &["a.wiki.example.org"])
        .collect();
    assert_eq!(
        claimed,
        vec![(
            vec!["a.wiki.example.org".to_string()],
            0,
            Some("outbound|443|v2|*.wiki.example.org".to_string())
        )]
    );
    assert!(
        gateway_errors(&m, ErrorCode::TcpServiceConflict).is_empty(),
        "{:?}",
        m.errors
    );
    m.retract(vec![wiki_vs, a_vs]);
    assert!(m.errors.is_empty(), "{:?}", m.errors);
}

/// Proves that a VirtualService whose hosts cover a service twice — by its exact name and
/// by a wildcard — is walked once on the service's TLS port: its `tls[]` routes make one
/// chain each, named by its place among the VirtualServices covering the host (the oracle
/// found the dataflow walking it twice, once per covering host, where the full recompute
/// walks it once, by its most specific host).
#[test]
fn a_virtual_service_covering_a_host_twice_is_walked_once() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("sleep-1", "default", "10.0.0.5", &[("app", "sleep")]);
    m.insert(vec![
        px(&client),
        tls_entry("www", "www.example.com", Resolution::Dns),
        sni_vs(
            "www",
            &["*.example.com", "www.example.com"],
            "www.example.com",
            "www.example.com",
            "v1",
        ),
        sni_vs(
            "com",
            &["*.com"],
            "api.example.com",
            "www.example.com",
            "v2",
        ),
    ]);
    let l = m.listener_body(&client, "0.0.0.0_443");
    let names: Vec<&str> = l
        .filter_chains
        .iter()
        .map(|c| c.name.as_str())
        .filter(|n| n.starts_with("www.example.com:443"))
        .collect();
    // The SNI chain of each VirtualService's route, in order (on any address): walked twice,
    // the first would take two places and the second's chain would be `#tls2.0`.
    assert_eq!(
        names,
        vec!["www.example.com:443#tls0.0", "www.example.com:443#tls1.0"],
        "{l:?}"
    );
}
