//! ServiceEntries: a `workloadSelector` taking Pods and WorkloadEntries as endpoints, and
//! `resolution: NONE` (original destinations for sidecars, EDS for gateways).

use crate::support::{
    endpoint, gateway, gateway_errors, labels, outbound, px, router_proxy, service, set,
    sidecar_proxy, virtual_service, workload, Mesh,
};
use dataflows::model::*;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use prost::Message;

/// A ServiceEntry's `workloadSelector` makes endpoints of the Pods and WorkloadEntries of its
/// own namespace whose labels match: a WorkloadEntry at the port it names for the entry's
/// port, a Pod at the target port; each with its locality and weight, grouped by locality.
/// Relabelling a workload out of the selector, or deleting the selection, removes them.
#[test]
fn service_entry_selector_takes_workloads_with_their_placement() {
    let mut m = Mesh::new();
    let vm = "vm.example.com".to_string();
    let client = sidecar_proxy("a", "default", "10.1.0.1", &[("app", "a")]);
    let entry = Record::Service(Service {
        control_plane: false,
        mesh_external: false,
        prefer_close: false,
        headless: false,
        alias_for: None,
        aliases: Vec::new(),
        subject_alt_names: Vec::new(),
        hostname: vm.clone(),
        origin: ConfigKey::new(Kind::ServiceEntry, "default", "vm"),
        ports: vec![ServicePort {
            name: "http".into(),
            port: 80,
            protocol: Protocol::Http,
        }],
        export_to: vec![],
        resolution: Resolution::Static,
        dns_endpoints: Vec::new(),
        host_target_ports: Default::default(),
        addresses: vec![],
    });
    let selection = Record::Selection(
        vm.clone(),
        WorkloadSelection {
            origin: ConfigKey::new(Kind::ServiceEntry, "default", "vm"),
            labels: labels(&[("app", "vm")]),
            ports: vec![SelectedPort {
                name: "http".into(),
                target: 8080,
            }],
        },
    );
    let entry_vm = |name: &str, ns: &str, ip: &str, app: &str, port: Option<u16>| {
        Record::Workload(Workload {
            service_account: None,
            peer: None,
            ip: ip.into(),
            labels: labels(&[("app", app)]),
            origin: ConfigKey::new(Kind::WorkloadEntry, ns, name),
            ports: port.map(|p| ("http".to_string(), p)).into_iter().collect(),
            placement: Placement {
                locality: "r1/z1".into(),
                weight: Some(4),
            },
        })
    };
    let vm1 = entry_vm("vm1", "default", "10.5.0.1", "vm", Some(9090));
    m.insert(vec![
        entry,
        selection.clone(),
        vm1.clone(),
        // Not in the entry's namespace; not matching.
        entry_vm("vm2", "other", "10.5.0.2", "vm", None),
        entry_vm("vm3", "default", "10.5.0.3", "db", None),
        workload("vm-pod", "default", "10.5.0.4", &[("app", "vm")]),
        px(&client),
    ]);
    let name = "outbound|80||vm.example.com";
    assert_eq!(
        m.eds_addresses(&client, name),
        set(&["10.5.0.1:9090", "10.5.0.4:8080"])
    );
    let version = m.version(&client, ResourceType::Endpoint, name);
    let (body, _) = &m.bodies[&(ResourceType::Endpoint, name.to_string(), version)];
    let cla = ClusterLoadAssignment::decode(&body.body.0[..]).expect("a ClusterLoadAssignment");
    let groups: Vec<(String, String, u32, Vec<u32>)> = cla
        .endpoints
        .iter()
        .map(|g| {
            let l = g.locality.clone().unwrap_or_default();
            (
                l.region,
                l.zone,
                g.load_balancing_weight.as_ref().map_or(0, |w| w.value),
                g.lb_endpoints
                    .iter()
                    .map(|e| e.load_balancing_weight.as_ref().map_or(0, |w| w.value))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        groups,
        vec![
            (String::new(), String::new(), 1, vec![1]),
            ("r1".into(), "z1".into(), 4, vec![4]),
        ],
        "the Pod in no locality with weight 1, the WorkloadEntry in r1/z1 with its weight"
    );
    // The WorkloadEntry relabelled out of the selector: only the Pod is left.
    let Record::Workload(mut moved) = vm1.clone() else {
        unreachable!()
    };
    moved.labels = labels(&[("app", "db")]);
    m.replace(vm1, Record::Workload(moved));
    assert_eq!(m.eds_addresses(&client, name), set(&["10.5.0.4:8080"]));
    m.retract(vec![selection]);
    assert!(m.eds_addresses(&client, name).is_empty());
}

/// A ServiceEntry of `resolution: NONE`: sidecars send its connections to their original
/// destination (ORIGINAL_DST); a gateway has none to keep and balances over the entry's
/// endpoints by EDS, as Istio's `convertResolution` gives routers EDS for `Passthrough`.
#[test]
fn resolution_none_entries_are_original_destinations_for_sidecars_and_eds_for_gateways() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("client", "default", "10.0.9.1", &[("app", "client")]);
    let gw = router_proxy(
        "ingress",
        "istio-system",
        "10.0.9.2",
        &[("istio", "ingress")],
    );
    let Record::Service(mut entry) = service("legacy", "default") else {
        unreachable!()
    };
    entry.origin = ConfigKey::new(Kind::ServiceEntry, "default", "legacy");
    entry.resolution = Resolution::None;
    m.insert(vec![
        px(&client),
        px(&gw),
        Record::Service(entry),
        endpoint("legacy", "default", "10.1.0.7", true),
        gateway(
            "istio-system",
            "gw",
            &[("istio", "ingress")],
            &[(8080, None)],
        ),
    ]);
    let name = outbound(9080, "", "legacy", "default");
    let kind =
        |c: &envoy_types::pb::envoy::config::cluster::v3::Cluster| c.cluster_discovery_type.clone();
    assert_eq!(
        kind(&m.cluster_body(&client, &name)),
        Some(ClusterDiscoveryType::Type(
            DiscoveryType::OriginalDst as i32
        ))
    );
    assert!(!m.names(&client, ResourceType::Endpoint).contains(&name));
    assert_eq!(
        kind(&m.cluster_body(&gw, &name)),
        Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32))
    );
    assert_eq!(m.eds_addresses(&gw, &name), set(&["10.1.0.7:9080"]));
}

/// Ports sidecars must guess about, reported on their object and retracted when fixed: a
/// ServiceEntry TCP port without addresses (`MF0025`), a Service port whose name names no
/// protocol (`MF0026`), an ExternalName Service port named `tcp` (`MF0027`); an HTTP port,
/// a TLS one and an entry with an address say nothing.
#[test]
fn ports_sidecars_must_guess_about_are_reported() {
    let mut m = Mesh::new();
    let entry = |name: &str, addresses: Vec<String>, protocol| {
        let Record::Service(mut s) = service(name, "default") else {
            unreachable!()
        };
        s.hostname = format!("{name}.example.com");
        s.origin = ConfigKey::new(Kind::ServiceEntry, "default", name);
        s.ports = vec![
            ServicePort {
                name: "http".into(),
                port: 80,
                protocol: Protocol::Http,
            },
            ServicePort {
                name: "db".into(),
                port: 5432,
                protocol,
            },
        ];
        s.addresses = addresses;
        Record::Service(s)
    };
    let named = |name: &str, protocol, alias: Option<&str>| {
        let Record::Service(mut s) = service("web", "default") else {
            unreachable!()
        };
        s.ports[0].name = name.into();
        s.ports[0].protocol = protocol;
        s.alias_for = alias.map(String::from);
        Record::Service(s)
    };
    let bare = entry("db", Vec::new(), Protocol::Tcp);
    let guessed = named("web", Protocol::Auto, None);
    m.insert(vec![bare.clone(), guessed.clone()]);
    let found = gateway_errors(&m, ErrorCode::AddressesRequired);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("ServiceEntry/default/db: spec.ports[1]: port 5432 (TCP)"));
    let found = gateway_errors(&m, ErrorCode::PortNameConvention);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("Service/default/web: spec.ports: port \"web\" (9080)"));

    m.replace(bare, entry("db", vec!["10.9.0.1".into()], Protocol::Tcp));
    m.replace(guessed, named("http-web", Protocol::Http, None));
    assert!(gateway_errors(&m, ErrorCode::AddressesRequired).is_empty());
    assert!(gateway_errors(&m, ErrorCode::PortNameConvention).is_empty());

    let tls_entry = entry("tls", Vec::new(), Protocol::Tls);
    m.insert(vec![tls_entry]);
    assert!(
        gateway_errors(&m, ErrorCode::AddressesRequired).is_empty(),
        "TLS routes by SNI"
    );

    let external = named("tcp", Protocol::Tcp, Some("db.example.com"));
    m.replace(named("http-web", Protocol::Http, None), external.clone());
    let found = gateway_errors(&m, ErrorCode::ExternalNamePortName);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(gateway_errors(&m, ErrorCode::PortNameConvention).is_empty());
    m.replace(
        external,
        named("https", Protocol::Tls, Some("db.example.com")),
    );
    assert!(gateway_errors(&m, ErrorCode::ExternalNamePortName).is_empty());
}

/// A ServiceEntry of host `api.example.com` in namespace `ns` named `name`, on HTTP `ports`.
fn api_entry(ns: &str, name: &str, ports: &[u16]) -> Service {
    let Record::Service(mut s) = service(name, ns) else {
        unreachable!()
    };
    s.hostname = "api.example.com".into();
    s.origin = ConfigKey::new(Kind::ServiceEntry, ns, name);
    s.ports = crate::support::http_ports(ports);
    s
}

/// An endpoint of the entry `ns/name` of `api.example.com` at `ip`, on its port `port`.
fn api_endpoint(ns: &str, name: &str, ip: &str, port: u16) -> Record {
    let Record::Endpoint(_, mut e) = endpoint(name, ns, ip, true) else {
        unreachable!()
    };
    e.origin = ConfigKey::new(Kind::ServiceEntry, ns, name);
    e.port_name = format!("http-{port}");
    e.port = port;
    Record::Endpoint("api.example.com".into(), e)
}

/// Istio keeps a service per host and namespace: ServiceEntries of one host in two
/// namespaces each serve their own namespace's sidecars (their ports, their endpoints), a
/// third namespace gets the first by namespace, and neither is reported. Once one goes, its
/// namespace gets the other's.
#[test]
fn entries_of_one_host_in_two_namespaces_serve_their_own() {
    let mut m = Mesh::new();
    let a = sidecar_proxy("ca", "a", "10.6.1.1", &[("app", "c")]);
    let b = sidecar_proxy("cb", "b", "10.6.1.2", &[("app", "c")]);
    let c = sidecar_proxy("cc", "c", "10.6.1.3", &[("app", "c")]);
    let in_b = Record::Service(api_entry("b", "api", &[80, 8080]));
    let ep_b = api_endpoint("b", "api", "10.6.0.2", 80);
    m.insert(vec![
        Record::Service(api_entry("a", "api", &[80])),
        api_endpoint("a", "api", "10.6.0.1", 80),
        in_b.clone(),
        ep_b.clone(),
        px(&a),
        px(&b),
        px(&c),
    ]);
    let c80 = "outbound|80||api.example.com";
    let c8080 = "outbound|8080||api.example.com";
    assert_eq!(m.eds_addresses(&a, c80), set(&["10.6.0.1:80"]));
    assert_eq!(m.eds_addresses(&b, c80), set(&["10.6.0.2:80"]));
    assert_eq!(
        m.eds_addresses(&c, c80),
        set(&["10.6.0.1:80"]),
        "the first by namespace"
    );
    assert!(!m.clusters(&a).contains(c8080));
    assert!(m.clusters(&b).contains(c8080), "b's entry has port 8080");
    assert!(gateway_errors(&m, ErrorCode::HostConflict).is_empty());
    assert!(gateway_errors(&m, ErrorCode::ServiceEntryProtocolConflict).is_empty());
    m.retract(vec![in_b, ep_b]);
    assert_eq!(m.eds_addresses(&b, c80), set(&["10.6.0.1:80"]));
    assert!(!m.clusters(&b).contains(c8080));
}

/// The ServiceEntries of one namespace for one host merge their ports (their resolutions
/// and `exportTo` alike, as Istio's `canMergeServices` asks) and their endpoints; one that
/// cannot merge is set aside and reported (MF0005), until it can.
#[test]
fn entries_of_one_host_in_one_namespace_merge_their_ports() {
    let mut m = Mesh::new();
    let a = sidecar_proxy("ca", "a", "10.6.2.1", &[("app", "c")]);
    let second = api_entry("a", "api-admin", &[80, 9000]);
    m.insert(vec![
        Record::Service(api_entry("a", "api", &[80])),
        Record::Service(second.clone()),
        api_endpoint("a", "api", "10.6.0.1", 80),
        api_endpoint("a", "api-admin", "10.6.0.3", 9000),
        px(&a),
    ]);
    let c9000 = "outbound|9000||api.example.com";
    assert!(m.clusters(&a).contains(c9000), "{:?}", m.clusters(&a));
    assert_eq!(m.eds_addresses(&a, c9000), set(&["10.6.0.3:9000"]));
    assert!(gateway_errors(&m, ErrorCode::HostConflict).is_empty());
    let mut dns = second.clone();
    dns.resolution = Resolution::Dns;
    m.replace(
        Record::Service(second.clone()),
        Record::Service(dns.clone()),
    );
    assert!(!m.clusters(&a).contains(c9000));
    let errors = gateway_errors(&m, ErrorCode::HostConflict);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("ServiceEntry/a/api-admin:")
            && errors[0].contains("their resolutions differ"),
        "{errors:?}"
    );
    assert!(
        ErrorCode::HostConflict.is_warning(),
        "Istio sets it aside too"
    );
    m.replace(Record::Service(dns), Record::Service(second));
    assert!(m.clusters(&a).contains(c9000));
    assert!(gateway_errors(&m, ErrorCode::HostConflict).is_empty());
}

/// Entries of one host that give one port different protocols where their `exportTo`
/// overlap are each reported (Istio's IST0177): one exported to its own namespace only
/// still overlaps one exported everywhere; once both are, the reports go.
#[test]
fn entries_giving_a_port_two_protocols_are_reported_where_they_overlap() {
    let mut m = Mesh::new();
    let mut tcp = api_entry("b", "api", &[80]);
    tcp.ports[0].protocol = Protocol::Tcp;
    let mut http = api_entry("a", "api", &[80]);
    http.export_to = vec![".".into()];
    m.insert(vec![Record::Service(http), Record::Service(tcp.clone())]);
    let mut errors = gateway_errors(&m, ErrorCode::ServiceEntryProtocolConflict);
    errors.sort();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].starts_with("ServiceEntry/a/api: spec.ports: port 80"));
    assert!(errors[0].contains("ServiceEntry/b/api (Tcp)"), "{errors:?}");
    assert!(errors[1].starts_with("ServiceEntry/b/api:"));
    let mut private = tcp.clone();
    private.export_to = vec![".".into()];
    m.replace(Record::Service(tcp), Record::Service(private));
    assert!(gateway_errors(&m, ErrorCode::ServiceEntryProtocolConflict).is_empty());
}

/// A VirtualService routing to a host whose only entry is not exported to the
/// VirtualService's namespace is reported (Istio's IST0101 for a host), and not once the
/// entry is exported there.
#[test]
fn a_destination_not_exported_to_the_virtual_service_is_reported() {
    let mut m = Mesh::new();
    let mut private = api_entry("a", "api", &[80]);
    private.export_to = vec![".".into()];
    m.insert(vec![
        Record::Service(private.clone()),
        virtual_service(
            "c",
            "to-api",
            &["front.example.com"],
            &[],
            "api.example.com",
        ),
    ]);
    let errors = gateway_errors(&m, ErrorCode::HostNotFound);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(
            "VirtualService/c/to-api: spec.http[0].route[0].destination.host: host \
             api.example.com is defined"
        ) && errors[0].contains("not exported to namespace c"),
        "{errors:?}"
    );
    let mut public = private.clone();
    public.export_to = vec![];
    m.replace(Record::Service(private), Record::Service(public));
    assert!(gateway_errors(&m, ErrorCode::HostNotFound).is_empty());
}
