//! Istio's traffic-management semantics, observed through the incremental engine
//! (`dataflows::driver::Engine`): small inputs, then assertions on which resources (by type
//! and name) each connected proxy holds, and on exactly which per-proxy diffs an input change
//! produces. Expected behaviour follows Istio's documentation (Sidecar egress hosts, exportTo,
//! Sidecar and DestinationRule precedence, Gateway selection, EDS naming).

use dataflows::driver::{Batch, Engine};
use dataflows::materialize::Materialized;
use dataflows::model::*;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::core::v3::{address, socket_address::PortSpecifier};
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint::HostIdentifier, ClusterLoadAssignment,
};
use prost::Message;
use std::collections::{BTreeMap, BTreeSet};

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

type Diffs = Vec<((ProxyId, ResourceKey), isize)>;

/// An engine plus the accumulated per-proxy state and resource bodies.
struct Mesh {
    engine: Engine,
    epoch: u64,
    materialized: Materialized,
    held: BTreeMap<(ProxyId, ResourceKey), isize>,
    bodies: BTreeMap<(ResourceType, String, String), (Resource, isize)>,
    /// The config errors in effect.
    errors: BTreeMap<ConfigError, isize>,
}

impl Mesh {
    fn new() -> Mesh {
        Mesh {
            engine: Engine::start(1, MeshConfig::default()),
            epoch: 0,
            materialized: Materialized::default(),
            held: BTreeMap::new(),
            bodies: BTreeMap::new(),
            errors: BTreeMap::new(),
        }
    }

    /// Applies one epoch of changes; returns that epoch's per-proxy diffs (sorted).
    fn step(&mut self, changes: Vec<(Record, isize)>) -> Diffs {
        self.epoch += 1;
        let out = self
            .engine
            .step(Batch {
                epoch: self.epoch,
                changes,
            })
            .expect("the engine stopped");
        // Each proxy's set is its scope's plus its own, resolved as the hub does.
        self.materialized.apply(&out, false);
        let held: BTreeMap<(ProxyId, ResourceKey), isize> = self
            .materialized
            .snapshot()
            .into_iter()
            .flat_map(|(p, keys)| keys.into_keys().map(move |k| ((p.clone(), k), 1)))
            .collect();
        let mut diffs: Diffs = Vec::new();
        for k in self.held.keys().filter(|k| !held.contains_key(*k)) {
            diffs.push((k.clone(), -1));
        }
        for k in held.keys().filter(|k| !self.held.contains_key(*k)) {
            diffs.push((k.clone(), 1));
        }
        self.held = held;
        for (r, d) in out.bodies {
            let e = self
                .bodies
                .entry((r.rtype, r.name.clone(), r.version.clone()))
                .or_insert((r, 0));
            e.1 += d;
        }
        self.bodies.retain(|_, (_, c)| *c != 0);
        for (e, d) in out.errors {
            *self.errors.entry(e).or_insert(0) += d;
        }
        self.errors.retain(|_, c| *c != 0);
        diffs.sort();
        diffs
    }

    fn insert(&mut self, records: Vec<Record>) -> Diffs {
        self.step(records.into_iter().map(|r| (r, 1)).collect())
    }

    fn retract(&mut self, records: Vec<Record>) -> Diffs {
        self.step(records.into_iter().map(|r| (r, -1)).collect())
    }

    fn replace(&mut self, old: Record, new: Record) -> Diffs {
        self.step(vec![(old, -1), (new, 1)])
    }

    /// Names of the resources of type `t` that `proxy` holds.
    fn names(&self, proxy: &Proxy, t: ResourceType) -> BTreeSet<String> {
        self.held
            .keys()
            .filter(|(p, k)| *p == proxy.id && k.rtype == t)
            .map(|(_, k)| k.name.clone())
            .collect()
    }

    fn clusters(&self, proxy: &Proxy) -> BTreeSet<String> {
        self.names(proxy, ResourceType::Cluster)
    }

    fn listeners(&self, proxy: &Proxy) -> BTreeSet<String> {
        self.names(proxy, ResourceType::Listener)
    }

    fn routes(&self, proxy: &Proxy) -> BTreeSet<String> {
        self.names(proxy, ResourceType::Route)
    }

    /// Everything `proxy` holds.
    fn all(&self, proxy: &Proxy) -> Vec<ResourceKey> {
        self.held
            .keys()
            .filter(|(p, _)| *p == proxy.id)
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// The version of `(t, name)` that `proxy` holds.
    fn version(&self, proxy: &Proxy, t: ResourceType, name: &str) -> String {
        let found: Vec<&ResourceKey> = self
            .held
            .keys()
            .filter(|(p, k)| *p == proxy.id && k.rtype == t && k.name == name)
            .map(|(_, k)| k)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{} should hold exactly one {t:?} {name}: {found:?}",
            proxy.id
        );
        found[0].version.clone()
    }

    /// The endpoint addresses (`ip:port`) in the ClusterLoadAssignment `name` that `proxy` holds.
    fn eds_addresses(&self, proxy: &Proxy, name: &str) -> BTreeSet<String> {
        let version = self.version(proxy, ResourceType::Endpoint, name);
        let (body, _) = self
            .bodies
            .get(&(ResourceType::Endpoint, name.to_string(), version.clone()))
            .unwrap_or_else(|| panic!("no body for EDS {name} version {version}"));
        let cla = ClusterLoadAssignment::decode(&body.body.0[..]).expect("a ClusterLoadAssignment");
        assert_eq!(cla.cluster_name, name);
        let mut out = BTreeSet::new();
        for loc in &cla.endpoints {
            for lb in &loc.lb_endpoints {
                let Some(HostIdentifier::Endpoint(ep)) = &lb.host_identifier else {
                    continue;
                };
                let Some(address::Address::SocketAddress(sa)) =
                    ep.address.as_ref().and_then(|a| a.address.as_ref())
                else {
                    continue;
                };
                let Some(PortSpecifier::PortValue(port)) = sa.port_specifier else {
                    continue;
                };
                out.insert(format!("{}:{}", sa.address, port));
            }
        }
        out
    }
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn host(name: &str, ns: &str) -> String {
    format!("{name}.{ns}.svc.cluster.local")
}

/// `outbound|PORT|SUBSET|HOST`.
fn outbound(port: u16, subset: &str, name: &str, ns: &str) -> String {
    format!("outbound|{port}|{subset}|{}", host(name, ns))
}

/// The outbound cluster names (default subset, port 9080) among `clusters`, i.e. which
/// services are visible.
fn visible(clusters: &BTreeSet<String>) -> BTreeSet<String> {
    clusters
        .iter()
        .filter_map(|c| c.strip_prefix("outbound|9080||"))
        .map(|h| h.trim_end_matches(".svc.cluster.local").to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Input builders
// ---------------------------------------------------------------------------------------------

fn service(name: &str, ns: &str) -> Record {
    Record::Service(Service {
        mesh_external: false,
        prefer_close: false,
        headless: false,
        alias_for: None,
        aliases: Vec::new(),
        subject_alt_names: Vec::new(),
        hostname: host(name, ns),
        origin: ConfigKey::new(Kind::Service, ns, name),
        ports: vec![ServicePort {
            name: "http".into(),
            port: 9080,
            protocol: Protocol::Http,
        }],
        export_to: vec![],
        resolution: Resolution::Static,
        dns_endpoints: Vec::new(),
        host_target_ports: Default::default(),
        addresses: vec![],
    })
}

fn service_exported(name: &str, ns: &str, export_to: &[&str]) -> Record {
    let Record::Service(mut s) = service(name, ns) else {
        unreachable!()
    };
    s.export_to = export_to.iter().map(|e| e.to_string()).collect();
    Record::Service(s)
}

fn sidecar_proxy(pod: &str, ns: &str, ip: &str, pod_labels: &[(&str, &str)]) -> Proxy {
    Proxy {
        id: format!("sidecar~{ip}~{pod}.{ns}~{ns}.svc.cluster.local"),
        kind: ProxyKind::Sidecar,
        ips: vec![ip.to_string()],
        namespace: ns.to_string(),
        labels: labels(pod_labels),
        interception_none: false,
        service_account: None,
        locality: String::new(),
        idle_timeout_ns: None,
    }
}

fn router_proxy(pod: &str, ns: &str, ip: &str, pod_labels: &[(&str, &str)]) -> Proxy {
    Proxy {
        id: format!("router~{ip}~{pod}.{ns}~{ns}.svc.cluster.local"),
        kind: ProxyKind::Router,
        ..sidecar_proxy(pod, ns, ip, pod_labels)
    }
}

fn px(p: &Proxy) -> Record {
    Record::Proxy(p.clone())
}

/// A Sidecar with one catch-all egress listener for `hosts`; `selector` None is the
/// namespace default.
fn sidecar(ns: &str, name: &str, selector: Option<&[(&str, &str)]>, hosts: &[&str]) -> Record {
    Record::Sidecar(Sidecar {
        registry_only: None,
        egress_proxy: None,
        inbound_connection_pool: None,
        ingress: Vec::new(),
        key: ConfigKey::new(Kind::Sidecar, ns, name),
        selector: selector.map(labels),
        egress: vec![EgressListener {
            port: None,
            bind: None,
            capture_none: false,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
        }],
    })
}

/// A DestinationRule in `ns` for `host` with subsets `(name, version label)`.
fn destination_rule(ns: &str, name: &str, host: &str, subsets: &[(&str, &str)]) -> Record {
    Record::DestinationRule(DestinationRule {
        key: ConfigKey::new(Kind::DestinationRule, ns, name),
        host: host.to_string(),
        export_to: vec![],
        traffic_policy: None,
        subsets: subsets
            .iter()
            .map(|(n, v)| Subset {
                name: n.to_string(),
                labels: labels(&[("version", v)]),
                traffic_policy: None,
            })
            .collect(),
        selector: None,
    })
}

fn gateway(
    ns: &str,
    name: &str,
    selector: &[(&str, &str)],
    servers: &[(u16, Option<&str>)],
) -> Record {
    Record::Gateway(Gateway {
        key: ConfigKey::new(Kind::Gateway, ns, name),
        selector: labels(selector),
        servers: servers
            .iter()
            .map(|(port, bind)| GatewayServer {
                port: *port,
                port_name: format!("http-{port}"),
                protocol: Protocol::Http,
                bind: bind.map(String::from),
                hosts: vec!["*/*".into()],
                https_redirect: false,
                tls: None,
                field: String::new(),
            })
            .collect(),
    })
}

/// A VirtualService bound to `gateways` routing every request for `hosts` to `dest`.
fn virtual_service(ns: &str, name: &str, hosts: &[&str], gateways: &[&str], dest: &str) -> Record {
    Record::VirtualService(VirtualService {
        key: ConfigKey::new(Kind::VirtualService, ns, name),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        gateways: gateways.iter().map(|g| g.to_string()).collect(),
        export_to: vec![],
        tcp: vec![],
        tls: vec![],
        http: vec![HttpRoute {
            name: None,
            matches: vec![],
            route: vec![RouteDestination {
                headers: Default::default(),
                via_alias: None,
                host: dest.to_string(),
                subset: None,
                port: None,
                weight: 100,
            }],
            timeout_ms: None,
            retries: None,
            ..Default::default()
        }],
    })
}

fn endpoint(svc: &str, ns: &str, ip: &str, ready: bool) -> Record {
    Record::Endpoint(
        host(svc, ns),
        RawEndpoint {
            service_account: None,
            ip: ip.to_string(),
            port_name: "http".into(),
            port: 9080,
            ready,
            labels: Labels::new(),
            origin: ConfigKey::new(Kind::EndpointSlice, ns, format!("{svc}-slice")),
            placement: Placement::default(),
        },
    )
}

fn workload(pod: &str, ns: &str, ip: &str, pod_labels: &[(&str, &str)]) -> Record {
    Record::Workload(Workload {
        service_account: None,
        ip: ip.to_string(),
        labels: labels(pod_labels),
        origin: ConfigKey::new(Kind::Pod, ns, pod),
        ports: Default::default(),
        placement: Placement::default(),
    })
}

/// Three services in three namespaces: `reviews.default`, `ratings.other`, `details.third`.
fn three_services() -> Vec<Record> {
    vec![
        service("reviews", "default"),
        service("ratings", "other"),
        service("details", "third"),
    ]
}

// ---------------------------------------------------------------------------------------------
// Sidecar egress visibility
// ---------------------------------------------------------------------------------------------

/// Without a Sidecar a proxy sees every service of the mesh; a namespace-default Sidecar
/// with egress hosts `./*` limits its proxies to their own namespace's services (no clusters
/// for other namespaces'), while proxies of other namespaces keep seeing everything. Removing
/// the Sidecar restores the full view.
#[test]
fn sidecar_egress_dot_star_hides_other_namespaces() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("client", "default", "10.1.0.1", &[("app", "client")]);
    let outsider = sidecar_proxy("outsider", "other", "10.1.0.2", &[("app", "outsider")]);
    let mut input = three_services();
    input.extend([px(&client), px(&outsider)]);
    m.insert(input);
    let everything = set(&["details.third", "ratings.other", "reviews.default"]);
    assert_eq!(visible(&m.clusters(&client)), everything);

    let sc = sidecar("default", "default", None, &["./*"]);
    m.insert(vec![sc.clone()]);
    assert_eq!(visible(&m.clusters(&client)), set(&["reviews.default"]));
    assert!(
        m.clusters(&client).contains("PassthroughCluster")
            && m.clusters(&client).contains("BlackHoleCluster")
    );
    assert_eq!(
        visible(&m.clusters(&outsider)),
        everything,
        "a Sidecar in default does not apply to other namespaces"
    );

    m.retract(vec![sc]);
    assert_eq!(visible(&m.clusters(&client)), everything);
}

/// Egress host patterns: `other/*` selects every service of namespace `other` (and nothing
/// of the proxy's own namespace); `*/reviews.default.svc.cluster.local` selects that one
/// service from any namespace; `*/*.third.svc.cluster.local` is a host wildcard; `~/*`
/// selects nothing; several patterns add up.
#[test]
fn sidecar_egress_namespace_and_host_patterns() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("client", "default", "10.1.0.1", &[("app", "client")]);
    let mut input = three_services();
    input.push(service("productpage", "default"));
    input.push(px(&client));
    m.insert(input);

    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["other/*"], vec!["ratings.other"]),
        (
            vec!["*/reviews.default.svc.cluster.local"],
            vec!["reviews.default"],
        ),
        (
            vec!["default/reviews.default.svc.cluster.local"],
            vec!["reviews.default"],
        ),
        (vec!["other/reviews.default.svc.cluster.local"], vec![]),
        (vec!["*/*.third.svc.cluster.local"], vec!["details.third"]),
        (vec!["~/*"], vec![]),
        (
            vec!["./*", "other/*"],
            vec!["productpage.default", "ratings.other", "reviews.default"],
        ),
        (
            vec!["*/*"],
            vec![
                "details.third",
                "productpage.default",
                "ratings.other",
                "reviews.default",
            ],
        ),
    ];
    let mut current: Option<Record> = None;
    for (hosts, expected) in cases {
        let sc = sidecar("default", "default", None, &hosts);
        match current.take() {
            Some(old) => m.replace(old, sc.clone()),
            None => m.insert(vec![sc.clone()]),
        };
        current = Some(sc);
        assert_eq!(
            visible(&m.clusters(&client)),
            set(&expected),
            "egress hosts {hosts:?}"
        );
    }
}

/// A Service annotated `networking.istio.io/exportTo: "."` is visible only in its own
/// namespace: a proxy in another namespace gets no cluster for it (even with `*/*` egress),
/// a proxy in its namespace does. Exporting it to a named namespace makes it visible there
/// only.
#[test]
fn export_to_dot_hides_service_from_other_namespaces() {
    let mut m = Mesh::new();
    let inside = sidecar_proxy("inside", "other", "10.1.0.1", &[("app", "a")]);
    let outside = sidecar_proxy("outside", "default", "10.1.0.2", &[("app", "b")]);
    let third = sidecar_proxy("third", "third", "10.1.0.3", &[("app", "c")]);
    let private = service_exported("ratings", "other", &["."]);
    m.insert(vec![
        private.clone(),
        service("reviews", "default"),
        px(&inside),
        px(&outside),
        px(&third),
    ]);
    assert_eq!(
        visible(&m.clusters(&inside)),
        set(&["ratings.other", "reviews.default"])
    );
    assert_eq!(visible(&m.clusters(&outside)), set(&["reviews.default"]));
    assert_eq!(visible(&m.clusters(&third)), set(&["reviews.default"]));

    let to_third = service_exported("ratings", "other", &["third"]);
    m.replace(private, to_third);
    assert_eq!(visible(&m.clusters(&outside)), set(&["reviews.default"]));
    assert_eq!(
        visible(&m.clusters(&third)),
        set(&["ratings.other", "reviews.default"])
    );
}

/// A mesh config in effect over the engine's built-in settings.
fn mesh_settings(edit: impl FnOnce(&mut MeshSettings)) -> Record {
    let mut m = MeshSettings::builtin(&MeshConfig::default());
    m.layer = MeshLayer::Configured;
    m.origin = Some(ConfigKey::new(Kind::MeshConfig, "", "mesh"));
    edit(&mut m);
    Record::Mesh(m)
}

/// The mesh's `defaultServiceExportTo` applies to services that set no `exportTo` of their
/// own; a service's own list wins. Changing the default changes only what it reaches.
#[test]
fn mesh_default_export_to_applies_to_services_without_their_own() {
    let mut m = Mesh::new();
    let inside = sidecar_proxy("inside", "other", "10.1.0.1", &[("app", "a")]);
    let outside = sidecar_proxy("outside", "default", "10.1.0.2", &[("app", "b")]);
    let everywhere = service_exported("details", "third", &["*"]);
    let mesh = mesh_settings(|_| {});
    m.insert(vec![
        service("ratings", "other"),
        everywhere,
        px(&inside),
        px(&outside),
        mesh.clone(),
    ]);
    assert_eq!(
        visible(&m.clusters(&outside)),
        set(&["details.third", "ratings.other"])
    );
    let private = mesh_settings(|m| m.service_export_to = vec![".".into()]);
    let diffs = m.replace(mesh, private.clone());
    assert_eq!(visible(&m.clusters(&outside)), set(&["details.third"]));
    assert_eq!(
        visible(&m.clusters(&inside)),
        set(&["details.third", "ratings.other"])
    );
    // Only `outside` lost anything: `inside` still sees both, so it received nothing.
    assert!(
        diffs.iter().all(|((p, _), _)| p == &outside.id),
        "{diffs:#?}"
    );
    // Back to the built-in settings when the mesh config goes.
    m.retract(vec![private]);
    assert_eq!(
        visible(&m.clusters(&outside)),
        set(&["details.third", "ratings.other"])
    );
}

/// The mesh config's `rootNamespace` decides which namespace's default Sidecar applies
/// mesh-wide; changing it moves every proxy without a Sidecar of its own namespace.
#[test]
fn mesh_root_namespace_change_moves_the_mesh_wide_sidecar() {
    let mut m = Mesh::new();
    let proxy = sidecar_proxy("p", "fourth", "10.1.0.1", &[("app", "client")]);
    let mut input = three_services();
    input.extend([
        px(&proxy),
        sidecar("istio-system", "default", None, &["third/*"]),
        sidecar("mesh-root", "default", None, &["other/*"]),
    ]);
    m.insert(input);
    assert_eq!(visible(&m.clusters(&proxy)), set(&["details.third"]));
    let moved = mesh_settings(|m| m.root_namespace = "mesh-root".into());
    m.insert(vec![moved.clone()]);
    assert_eq!(visible(&m.clusters(&proxy)), set(&["ratings.other"]));
    m.retract(vec![moved]);
    assert_eq!(visible(&m.clusters(&proxy)), set(&["details.third"]));
}

/// Which Sidecar applies: one whose workloadSelector matches the proxy's labels (in the
/// proxy's namespace) beats the namespace default (no selector), which beats the default in
/// the root namespace (`istio-system`); the root default applies to namespaces without their
/// own. Removing the winning Sidecar falls back to the next one, per proxy.
#[test]
fn sidecar_precedence_selector_then_namespace_then_root() {
    let mut m = Mesh::new();
    let selected = sidecar_proxy(
        "selected",
        "default",
        "10.1.0.1",
        &[("app", "client"), ("version", "v1")],
    );
    let unselected = sidecar_proxy("unselected", "default", "10.1.0.2", &[("app", "other")]);
    let elsewhere = sidecar_proxy("elsewhere", "fourth", "10.1.0.3", &[("app", "client")]);
    let by_selector = sidecar(
        "default",
        "by-selector",
        Some(&[("app", "client")]),
        &["./*"],
    );
    let ns_default = sidecar("default", "default", None, &["other/*"]);
    let root_default = sidecar("istio-system", "default", None, &["third/*"]);
    let mut input = three_services();
    input.extend([
        px(&selected),
        px(&unselected),
        px(&elsewhere),
        by_selector.clone(),
        ns_default.clone(),
        root_default.clone(),
    ]);
    m.insert(input);
    assert_eq!(
        visible(&m.clusters(&selected)),
        set(&["reviews.default"]),
        "workloadSelector Sidecar"
    );
    assert_eq!(
        visible(&m.clusters(&unselected)),
        set(&["ratings.other"]),
        "namespace default"
    );
    assert_eq!(
        visible(&m.clusters(&elsewhere)),
        set(&["details.third"]),
        "root namespace default"
    );

    m.retract(vec![by_selector]);
    assert_eq!(visible(&m.clusters(&selected)), set(&["ratings.other"]));
    m.retract(vec![ns_default]);
    assert_eq!(visible(&m.clusters(&selected)), set(&["details.third"]));
    assert_eq!(visible(&m.clusters(&unselected)), set(&["details.third"]));
    m.retract(vec![root_default]);
    let everything = set(&["details.third", "ratings.other", "reviews.default"]);
    for p in [&selected, &unselected, &elsewhere] {
        assert_eq!(visible(&m.clusters(p)), everything);
    }
}

// ---------------------------------------------------------------------------------------------
// DestinationRule precedence
// ---------------------------------------------------------------------------------------------

fn subset_clusters(clusters: &BTreeSet<String>, name: &str, ns: &str) -> BTreeSet<String> {
    let suffix = format!("|{}", host(name, ns));
    clusters
        .iter()
        .filter(|c| c.ends_with(&suffix) && !c.starts_with("outbound|9080||"))
        .map(|c| c.split('|').nth(2).unwrap().to_string())
        .collect()
}

/// For `reviews.default`, a DestinationRule in the proxy's namespace beats the one in the
/// service's namespace, which beats the one in the root namespace: seen in which subset
/// clusters (`outbound|9080|SUBSET|reviews…`) each proxy gets. Retracting a rule falls back
/// to the next on Istio's lookup path (client namespace, service namespace, root namespace).
#[test]
fn destination_rule_in_proxy_namespace_beats_service_namespace() {
    let mut m = Mesh::new();
    let reviews = host("reviews", "default");
    let in_default = sidecar_proxy("a", "default", "10.1.0.1", &[("app", "a")]);
    let in_other = sidecar_proxy("b", "other", "10.1.0.2", &[("app", "b")]);
    let in_third = sidecar_proxy("c", "third", "10.1.0.3", &[("app", "c")]);
    let svc_ns_dr = destination_rule("default", "reviews", &reviews, &[("from-service-ns", "v1")]);
    let client_ns_dr = destination_rule(
        "other",
        "reviews-for-other",
        &reviews,
        &[("from-client-ns", "v2")],
    );
    let root_dr = destination_rule(
        "istio-system",
        "reviews-root",
        &reviews,
        &[("from-root", "v3")],
    );
    m.insert(vec![
        service("reviews", "default"),
        px(&in_default),
        px(&in_other),
        px(&in_third),
        svc_ns_dr.clone(),
        client_ns_dr.clone(),
        root_dr.clone(),
    ]);
    let subsets = |m: &Mesh, p: &Proxy| subset_clusters(&m.clusters(p), "reviews", "default");
    assert_eq!(
        subsets(&m, &in_other),
        set(&["from-client-ns"]),
        "the client namespace's rule wins"
    );
    assert_eq!(subsets(&m, &in_default), set(&["from-service-ns"]));
    assert_eq!(
        subsets(&m, &in_third),
        set(&["from-service-ns"]),
        "no rule in the client namespace: the service's"
    );
    assert!(
        m.clusters(&in_other)
            .contains(&outbound(9080, "", "reviews", "default")),
        "the default cluster stays"
    );

    m.retract(vec![client_ns_dr]);
    assert_eq!(subsets(&m, &in_other), set(&["from-service-ns"]));
    m.retract(vec![svc_ns_dr]);
    for p in [&in_default, &in_other, &in_third] {
        assert_eq!(
            subsets(&m, p),
            set(&["from-root"]),
            "only the root namespace's rule is left"
        );
    }
    m.retract(vec![root_dr]);
    for p in [&in_default, &in_other, &in_third] {
        assert_eq!(subsets(&m, p), set(&[]));
    }
}

/// A DestinationRule in a namespace that is neither the client's, the service's nor the
/// root namespace is not on Istio's documented lookup path ("client namespace, service
/// namespace, Istio configuration root"), so exporting it does not make it apply: no proxy
/// gets its subsets.
#[test]
fn destination_rule_outside_lookup_path_is_not_applied() {
    let mut m = Mesh::new();
    let reviews = host("reviews", "default");
    let client = sidecar_proxy("a", "other", "10.1.0.1", &[("app", "a")]);
    let in_default = sidecar_proxy("b", "default", "10.1.0.2", &[("app", "b")]);
    m.insert(vec![
        service("reviews", "default"),
        px(&client),
        px(&in_default),
        destination_rule("unrelated", "reviews", &reviews, &[("stray", "v1")]),
    ]);
    assert_eq!(
        subset_clusters(&m.clusters(&client), "reviews", "default"),
        set(&[])
    );
    assert_eq!(
        subset_clusters(&m.clusters(&in_default), "reviews", "default"),
        set(&[])
    );
}

/// Two DestinationRules on the lookup path can define a subset of the same name with
/// different labels (here `canary` = version v2 in the service's namespace, version v1 in
/// the client's). The EDS resource has one name (`outbound|9080|canary|reviews…`), but each
/// proxy must get the endpoints selected by the rule in effect for *it*, as Istio computes
/// EDS with the proxy's own DestinationRule.
#[test]
fn subset_endpoints_follow_each_proxys_own_destination_rule() {
    let mut m = Mesh::new();
    let reviews = host("reviews", "default");
    let in_default = sidecar_proxy("a", "default", "10.1.0.1", &[("app", "a")]);
    let in_other = sidecar_proxy("b", "other", "10.1.0.2", &[("app", "b")]);
    m.insert(vec![
        service("reviews", "default"),
        workload(
            "reviews-v1",
            "default",
            "10.0.0.1",
            &[("app", "reviews"), ("version", "v1")],
        ),
        workload(
            "reviews-v2",
            "default",
            "10.0.0.2",
            &[("app", "reviews"), ("version", "v2")],
        ),
        endpoint("reviews", "default", "10.0.0.1", true),
        endpoint("reviews", "default", "10.0.0.2", true),
        destination_rule("default", "reviews", &reviews, &[("canary", "v2")]),
        destination_rule("other", "reviews", &reviews, &[("canary", "v1")]),
        px(&in_default),
        px(&in_other),
    ]);
    let canary = outbound(9080, "canary", "reviews", "default");
    assert!(m.clusters(&in_default).contains(&canary));
    assert!(m.clusters(&in_other).contains(&canary));
    assert_eq!(
        m.eds_addresses(&in_default, &canary),
        set(&["10.0.0.2:9080"]),
        "the service namespace's canary = v2"
    );
    assert_eq!(
        m.eds_addresses(&in_other, &canary),
        set(&["10.0.0.1:9080"]),
        "the client namespace's canary = v1"
    );
}

// ---------------------------------------------------------------------------------------------
// Wildcard DestinationRule hosts and merged DestinationRules
// ---------------------------------------------------------------------------------------------

/// [`destination_rule`] with `exportTo`, a `trafficPolicy` balancing by `lb` and a
/// `workloadSelector`.
fn destination_rule_with(
    ns: &str,
    name: &str,
    host: &str,
    subsets: &[(&str, &str)],
    export_to: &[&str],
    lb: Option<LoadBalancer>,
    selector: Option<&[(&str, &str)]>,
) -> Record {
    let Record::DestinationRule(mut dr) = destination_rule(ns, name, host, subsets) else {
        unreachable!("destination_rule() makes rules")
    };
    dr.export_to = export_to.iter().map(|e| e.to_string()).collect();
    dr.traffic_policy = lb.map(|lb| TrafficPolicy {
        load_balancer: Some(lb),
        ..Default::default()
    });
    dr.selector = selector.map(labels);
    Record::DestinationRule(dr)
}

/// The proxy's clusters of the default port 9080 whose names change in `diffs`, by host.
fn changed_hosts(diffs: &Diffs) -> BTreeSet<String> {
    diffs
        .iter()
        .filter(|((_, k), _)| k.rtype == ResourceType::Cluster)
        .filter_map(|((_, k), _)| k.name.split('|').nth(3).map(str::to_string))
        .collect()
}

fn changed_proxies(diffs: &Diffs) -> BTreeSet<ProxyId> {
    diffs.iter().map(|((p, _), _)| p.clone()).collect()
}

/// A service without a rule of its own takes the most specific wildcard rule that covers
/// it (`*.default.svc.cluster.local` before `*`), as Istio's lookup does; a rule for the
/// host itself beats both. Adding and removing the more specific rules moves the host's
/// clusters over and back, and each change reaches only the hosts the rule covers: a
/// `*.default…` rule never touches `details.other`.
#[test]
fn wildcard_destination_rules_apply_most_specific_first_and_incrementally() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("a", "client", "10.1.0.1", &[("app", "a")]);
    let star = destination_rule("istio-system", "all", "*", &[("from-star", "v1")]);
    let ns_wild = destination_rule(
        "istio-system",
        "default-ns",
        "*.default.svc.cluster.local",
        &[("from-ns-wildcard", "v2")],
    );
    m.insert(vec![
        service("reviews", "default"),
        service("ratings", "default"),
        service("details", "other"),
        px(&client),
        star.clone(),
    ]);
    let subsets = |m: &Mesh, name: &str, ns: &str| subset_clusters(&m.clusters(&client), name, ns);
    assert_eq!(subsets(&m, "reviews", "default"), set(&["from-star"]));
    assert_eq!(subsets(&m, "details", "other"), set(&["from-star"]));

    let diffs = m.insert(vec![ns_wild.clone()]);
    assert_eq!(
        subsets(&m, "reviews", "default"),
        set(&["from-ns-wildcard"])
    );
    assert_eq!(
        subsets(&m, "ratings", "default"),
        set(&["from-ns-wildcard"])
    );
    assert_eq!(subsets(&m, "details", "other"), set(&["from-star"]));
    assert_eq!(
        changed_hosts(&diffs),
        set(&[&host("reviews", "default"), &host("ratings", "default")]),
        "the longer wildcard reaches only the hosts it covers"
    );

    let exact = destination_rule(
        "default",
        "reviews",
        &host("reviews", "default"),
        &[("from-exact", "v3")],
    );
    let diffs = m.insert(vec![exact.clone()]);
    assert_eq!(subsets(&m, "reviews", "default"), set(&["from-exact"]));
    assert_eq!(
        subsets(&m, "ratings", "default"),
        set(&["from-ns-wildcard"])
    );
    assert_eq!(changed_hosts(&diffs), set(&[&host("reviews", "default")]));

    let diffs = m.retract(vec![exact]);
    assert_eq!(
        subsets(&m, "reviews", "default"),
        set(&["from-ns-wildcard"])
    );
    assert_eq!(changed_hosts(&diffs), set(&[&host("reviews", "default")]));

    let diffs = m.retract(vec![ns_wild]);
    assert_eq!(subsets(&m, "reviews", "default"), set(&["from-star"]));
    assert_eq!(subsets(&m, "ratings", "default"), set(&["from-star"]));
    assert_eq!(
        changed_hosts(&diffs),
        set(&[&host("reviews", "default"), &host("ratings", "default")])
    );
}

/// Istio looks a rule up namespace by namespace (the proxy's, the service's, the root) and
/// stops at the first that has one covering the host: a wildcard rule in the proxy's own
/// namespace beats the service namespace's rule for the host itself, for that namespace's
/// proxies alone. A wildcard rule exported only to one namespace applies there only.
#[test]
fn wildcard_destination_rule_in_the_proxy_namespace_beats_an_exact_one_elsewhere() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("a", "client", "10.1.0.1", &[("app", "a")]);
    let third = sidecar_proxy("c", "third", "10.1.0.3", &[("app", "c")]);
    m.insert(vec![
        service("reviews", "default"),
        service("details", "other"),
        px(&client),
        px(&third),
        destination_rule(
            "default",
            "reviews",
            &host("reviews", "default"),
            &[("from-exact", "v1")],
        ),
    ]);
    let subsets = |m: &Mesh, p: &Proxy| subset_clusters(&m.clusters(p), "reviews", "default");
    assert_eq!(subsets(&m, &client), set(&["from-exact"]));
    let own = destination_rule(
        "client",
        "everything",
        "*.svc.cluster.local",
        &[("from-client-wildcard", "v2")],
    );
    let diffs = m.insert(vec![own.clone()]);
    assert_eq!(subsets(&m, &client), set(&["from-client-wildcard"]));
    assert_eq!(
        subset_clusters(&m.clusters(&client), "details", "other"),
        set(&["from-client-wildcard"])
    );
    assert_eq!(subsets(&m, &third), set(&["from-exact"]));
    assert_eq!(
        changed_proxies(&diffs),
        BTreeSet::from([client.id.clone()]),
        "a rule of the client namespace reaches its proxies alone"
    );
    m.retract(vec![own]);
    assert_eq!(subsets(&m, &client), set(&["from-exact"]));

    // Exported to `third` only, from the service's namespace.
    let only_third = destination_rule_with(
        "other",
        "details-wild",
        "*.other.svc.cluster.local",
        &[("for-third", "v1")],
        &["third"],
        None,
        None,
    );
    m.insert(vec![only_third]);
    assert_eq!(
        subset_clusters(&m.clusters(&third), "details", "other"),
        set(&["for-third"])
    );
    assert_eq!(
        subset_clusters(&m.clusters(&client), "details", "other"),
        set(&[])
    );
}

/// Two rules of one namespace for one host, without selectors and with the same
/// `exportTo`, are merged as Istio merges them (meshflow orders them by name, Istio by
/// creation time): the first keeps its `trafficPolicy`, the later one adds the subsets
/// whose names are new (a subset of a name the first defines keeps the first's labels),
/// and a warning names the later rule. Removing the first leaves the second alone.
#[test]
fn destination_rules_of_one_host_and_namespace_merge_in_name_order() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("a", "default", "10.1.0.1", &[("app", "a")]);
    let reviews = host("reviews", "default");
    let first = destination_rule_with(
        "default",
        "a-reviews",
        &reviews,
        &[("v1", "v1")],
        &[],
        Some(LoadBalancer::Random),
        None,
    );
    let second = destination_rule_with(
        "default",
        "b-reviews",
        &reviews,
        &[("v1", "other-label"), ("v2", "v2")],
        &[],
        Some(LoadBalancer::LeastRequest),
        None,
    );
    m.insert(vec![
        service("reviews", "default"),
        endpoint("reviews", "default", "10.2.0.1", true),
        workload("reviews-v1", "default", "10.2.0.1", &[("version", "v1")]),
        px(&client),
        second.clone(),
        first.clone(),
    ]);
    assert_eq!(
        subset_clusters(&m.clusters(&client), "reviews", "default"),
        set(&["v1", "v2"])
    );
    let lb = |m: &Mesh, subset: &str| {
        m.cluster_body(&client, &outbound(9080, subset, "reviews", "default"))
            .lb_policy
    };
    use envoy_types::pb::envoy::config::cluster::v3::cluster::LbPolicy;
    assert_eq!(
        lb(&m, ""),
        LbPolicy::Random as i32,
        "the first rule's policy"
    );
    assert_eq!(lb(&m, "v2"), LbPolicy::Random as i32);
    assert_eq!(
        m.eds_addresses(&client, &outbound(9080, "v1", "reviews", "default")),
        set(&["10.2.0.1:9080"]),
        "v1 keeps the first rule's labels"
    );
    let warnings = gateway_errors(&m, ErrorCode::DestinationRuleMerged);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("b-reviews")
            && warnings[0].contains("merged into a-reviews")
            && warnings[0].contains("subset(s) v1")
            && warnings[0].contains("trafficPolicy is not used"),
        "{warnings:?}"
    );

    m.retract(vec![first]);
    assert_eq!(lb(&m, ""), LbPolicy::LeastRequest as i32);
    assert!(
        m.eds_addresses(&client, &outbound(9080, "v1", "reviews", "default"))
            .is_empty(),
        "v1 is the second rule's now (version: other-label)"
    );
    assert!(gateway_errors(&m, ErrorCode::DestinationRuleMerged).is_empty());
}

/// Rules with different `exportTo` are not merged (Istio's enhanced merge): each stays an
/// entry, and a proxy that sees both takes the last one without a selector. A rule with a
/// `workloadSelector` never merges with one without: the proxies it selects take it alone,
/// the others the rule without.
#[test]
fn destination_rules_merge_only_with_the_same_export_to_and_selector() {
    let mut m = Mesh::new();
    let selected = sidecar_proxy("a", "default", "10.1.0.1", &[("app", "a")]);
    let plain = sidecar_proxy("b", "default", "10.1.0.2", &[("app", "b")]);
    let elsewhere = sidecar_proxy("c", "other", "10.1.0.3", &[("app", "c")]);
    let reviews = host("reviews", "default");
    let private = destination_rule_with(
        "default",
        "a-private",
        &reviews,
        &[("private", "v1")],
        &["."],
        None,
        None,
    );
    let public = destination_rule_with(
        "default",
        "b-public",
        &reviews,
        &[("public", "v2")],
        &["*"],
        None,
        None,
    );
    let selecting = destination_rule_with(
        "default",
        "c-selecting",
        &reviews,
        &[("selected", "v3")],
        &[],
        None,
        Some(&[("app", "a")]),
    );
    m.insert(vec![
        service("reviews", "default"),
        px(&selected),
        px(&plain),
        px(&elsewhere),
        private.clone(),
        public.clone(),
        selecting,
    ]);
    let subsets = |m: &Mesh, p: &Proxy| subset_clusters(&m.clusters(p), "reviews", "default");
    assert_eq!(subsets(&m, &selected), set(&["selected"]));
    assert_eq!(subsets(&m, &plain), set(&["public"]), "the last entry");
    assert_eq!(subsets(&m, &elsewhere), set(&["public"]));
    assert!(gateway_errors(&m, ErrorCode::DestinationRuleMerged).is_empty());

    // The same `exportTo`: merged, for every proxy without the selector.
    let Record::DestinationRule(mut now_public) = private.clone() else {
        unreachable!()
    };
    now_public.export_to = vec!["*".into()];
    m.replace(private, Record::DestinationRule(now_public));
    assert_eq!(subsets(&m, &plain), set(&["private", "public"]));
    assert_eq!(subsets(&m, &elsewhere), set(&["private", "public"]));
    assert_eq!(subsets(&m, &selected), set(&["selected"]));
    assert_eq!(
        gateway_errors(&m, ErrorCode::DestinationRuleMerged).len(),
        1
    );
}

/// Once the proxy's namespace has rules for the most specific host covering a service,
/// Istio's lookup stops there even if they all have a `workloadSelector` the proxy does not
/// match: that proxy gets no rule, not the service namespace's.
#[test]
fn selector_rules_of_the_proxy_namespace_stop_the_lookup_there() {
    let mut m = Mesh::new();
    let selected = sidecar_proxy("a", "client", "10.1.0.1", &[("app", "a")]);
    let other = sidecar_proxy("b", "client", "10.1.0.2", &[("app", "b")]);
    let reviews = host("reviews", "default");
    m.insert(vec![
        service("reviews", "default"),
        px(&selected),
        px(&other),
        destination_rule("default", "reviews", &reviews, &[("from-service-ns", "v1")]),
        destination_rule_with(
            "client",
            "for-a",
            &reviews,
            &[("for-a", "v2")],
            &[],
            None,
            Some(&[("app", "a")]),
        ),
    ]);
    let subsets = |m: &Mesh, p: &Proxy| subset_clusters(&m.clusters(p), "reviews", "default");
    assert_eq!(subsets(&m, &selected), set(&["for-a"]));
    assert_eq!(subsets(&m, &other), set(&[]));
    m.insert(vec![destination_rule(
        "client",
        "for-all",
        &reviews,
        &[("for-all", "v3")],
    )]);
    assert_eq!(subsets(&m, &other), set(&["for-all"]));
    assert_eq!(subsets(&m, &selected), set(&["for-a"]));
}

/// A route to a subset that only a wildcard rule, or the later of two merged rules,
/// defines is no undefined subset; one no rule covering the host defines is (MF0004).
#[test]
fn subsets_of_wildcard_and_merged_rules_count_as_defined() {
    let mut m = Mesh::new();
    let reviews = host("reviews", "default");
    let with_subset = |name: &str, subset: &str| {
        let Record::VirtualService(mut vs) =
            virtual_service("default", name, &[&reviews], &["mesh"], &reviews)
        else {
            unreachable!()
        };
        vs.http[0].route[0].subset = Some(subset.to_string());
        Record::VirtualService(vs)
    };
    m.insert(vec![
        service("reviews", "default"),
        destination_rule(
            "istio-system",
            "all",
            "*.svc.cluster.local",
            &[("wild", "v1")],
        ),
        destination_rule("default", "a", &reviews, &[("first", "v1")]),
        destination_rule("default", "b", &reviews, &[("second", "v2")]),
        with_subset("to-wild", "wild"),
        with_subset("to-second", "second"),
        with_subset("to-nowhere", "nowhere"),
    ]);
    let undefined: Vec<String> = m
        .errors
        .keys()
        .filter(|e| e.code == ErrorCode::SubsetNotDefined)
        .map(|e| e.object.name.clone())
        .collect();
    assert_eq!(undefined, vec!["to-nowhere".to_string()]);
}

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

// ---------------------------------------------------------------------------------------------
// Gateways
// ---------------------------------------------------------------------------------------------

/// A router whose labels match a Gateway's selector (the Gateway may live in another
/// namespace) gets a listener `0.0.0.0_8080` for the Gateway's HTTP server on port 8080 and
/// the route configuration `http.8080`; a server with `bind` gives `BIND_PORT`
/// (`10.1.0.9_9090`, route `http.9090`). A router gets no sidecar listeners (`virtualOutbound`,
/// `virtualInbound`). Removing the Gateway removes its listeners and routes.
#[test]
fn gateway_selected_by_labels_gets_listener_and_route() {
    let mut m = Mesh::new();
    let ingress = router_proxy(
        "istio-ingressgateway-abc",
        "istio-system",
        "10.1.0.9",
        &[("istio", "ingressgateway"), ("app", "gw")],
    );
    let gw = gateway(
        "default",
        "bookinfo-gateway",
        &[("istio", "ingressgateway")],
        &[(8080, None)],
    );
    m.insert(vec![
        service("productpage", "default"),
        gw.clone(),
        virtual_service(
            "default",
            "bookinfo",
            &["*"],
            &["bookinfo-gateway", "default/bookinfo-gateway"],
            &host("productpage", "default"),
        ),
        px(&ingress),
    ]);
    assert_eq!(m.listeners(&ingress), set(&["0.0.0.0_8080"]));
    assert_eq!(m.routes(&ingress), set(&["http.8080"]));
    assert!(m
        .clusters(&ingress)
        .contains(&outbound(9080, "", "productpage", "default")));

    let bound = gateway(
        "istio-system",
        "internal",
        &[("istio", "ingressgateway")],
        &[(9090, Some("10.1.0.9"))],
    );
    m.insert(vec![bound.clone()]);
    assert_eq!(
        m.listeners(&ingress),
        set(&["0.0.0.0_8080", "10.1.0.9_9090"])
    );
    assert_eq!(
        m.routes(&ingress),
        set(&["http.8080", "http.9090.10.1.0.9"])
    );

    m.retract(vec![gw, bound]);
    assert_eq!(m.listeners(&ingress), set(&[]));
    assert_eq!(m.routes(&ingress), set(&[]));
}

/// The Service of a gateway's own pods, `istio-ingressgateway` in `istio-system` as Istio
/// installs it: port 80 (`http2`) to target port 8080 and 443 (`https`) to 8443, with its
/// endpoints at `ip`.
fn gateway_service(ip: &str, ports: &[(&str, u16, u16)]) -> Vec<Record> {
    let Record::Service(mut s) = service("istio-ingressgateway", "istio-system") else {
        unreachable!()
    };
    s.ports = ports
        .iter()
        .map(|(name, port, _)| ServicePort {
            name: name.to_string(),
            port: *port,
            protocol: Protocol::Http,
        })
        .collect();
    let mut out = vec![Record::Service(s)];
    for (name, _, target) in ports {
        let Record::Endpoint(h, mut e) = endpoint("istio-ingressgateway", "istio-system", ip, true)
        else {
            unreachable!()
        };
        e.port_name = name.to_string();
        e.port = *target;
        out.push(Record::Endpoint(h, e));
    }
    out
}

/// As Istio's gateways do, a server listens on the target port of the gateway workload's
/// Service port of the server's number (Istio's ingress gateway Service maps 80 to 8080):
/// the listener and the `http.PORT` route configuration are the target port's, while the
/// routes are still built for the server's port (the virtual host `*:80`). Where no Service of
/// the router's pods has the port, the server listens on it as written; a second Service of
/// the same pods with port 80 elsewhere does not move it (the first Service by name wins);
/// removing the Service's endpoints moves the listener back to 80.
#[test]
fn a_gateway_listens_on_the_target_port_of_its_workloads_service() {
    let mut m = Mesh::new();
    let ingress = router_proxy(
        "istio-ingressgateway-abc",
        "istio-system",
        "10.1.0.9",
        &[("istio", "ingressgateway")],
    );
    let gw = gateway(
        "default",
        "bookinfo-gateway",
        &[("istio", "ingressgateway")],
        &[(80, None), (9000, None)],
    );
    m.insert(vec![
        service("productpage", "default"),
        gw,
        virtual_service(
            "default",
            "bookinfo",
            &["*"],
            &["default/bookinfo-gateway"],
            &host("productpage", "default"),
        ),
        px(&ingress),
    ]);
    assert_eq!(m.listeners(&ingress), set(&["0.0.0.0_80", "0.0.0.0_9000"]));

    let own = gateway_service("10.1.0.9", &[("http2", 80, 8080), ("https", 443, 8443)]);
    m.insert(own.clone());
    assert_eq!(
        m.listeners(&ingress),
        set(&["0.0.0.0_8080", "0.0.0.0_9000"])
    );
    assert_eq!(m.routes(&ingress), set(&["http.8080", "http.9000"]));
    let vhosts = m.vhost_domains(&ingress, "http.8080");
    assert_eq!(
        vhosts.keys().collect::<Vec<_>>(),
        ["*:80"],
        "routes for port 80"
    );

    // Another Service of the same pods mapping 80 elsewhere: the first by name still rules.
    let Record::Service(mut other) = service("zz-status", "istio-system") else {
        unreachable!()
    };
    other.ports[0].port = 80;
    let Record::Endpoint(h, mut e) = endpoint("zz-status", "istio-system", "10.1.0.9", true) else {
        unreachable!()
    };
    e.port = 8081;
    let other = vec![Record::Service(other), Record::Endpoint(h, e)];
    m.insert(other.clone());
    assert_eq!(
        m.listeners(&ingress),
        set(&["0.0.0.0_8080", "0.0.0.0_9000"])
    );
    m.retract(own[1..].to_vec());
    assert_eq!(
        m.listeners(&ingress),
        set(&["0.0.0.0_8081", "0.0.0.0_9000"]),
        "the other Service's target once the first has no endpoint there"
    );
    m.retract(other);
    assert_eq!(m.listeners(&ingress), set(&["0.0.0.0_80", "0.0.0.0_9000"]));
    assert_eq!(m.routes(&ingress), set(&["http.80", "http.9000"]));
}

/// A router that no Gateway selects (labels do not match, or only some of the selector's
/// labels match) gets no listeners and no route configurations, while the selected router
/// does; relabelling the router (reconnect with other labels) moves it between the two.
#[test]
fn router_without_matching_gateway_has_no_listeners() {
    let mut m = Mesh::new();
    let selected = router_proxy(
        "gw-a",
        "istio-system",
        "10.1.0.8",
        &[("istio", "ingressgateway"), ("tier", "edge")],
    );
    let partial = router_proxy(
        "gw-b",
        "istio-system",
        "10.1.0.9",
        &[("istio", "ingressgateway")],
    );
    let unrelated = router_proxy(
        "gw-c",
        "istio-system",
        "10.1.0.10",
        &[("istio", "egressgateway"), ("tier", "edge")],
    );
    m.insert(vec![
        service("productpage", "default"),
        gateway(
            "istio-system",
            "edge",
            &[("istio", "ingressgateway"), ("tier", "edge")],
            &[(8080, None)],
        ),
        px(&selected),
        px(&partial),
        px(&unrelated),
    ]);
    assert_eq!(m.listeners(&selected), set(&["0.0.0.0_8080"]));
    for p in [&partial, &unrelated] {
        assert_eq!(m.listeners(p), set(&[]), "{}", p.id);
        assert_eq!(m.routes(p), set(&[]), "{}", p.id);
    }

    let relabelled = Proxy {
        labels: labels(&[("istio", "ingressgateway"), ("tier", "edge")]),
        ..partial.clone()
    };
    m.replace(px(&partial), px(&relabelled));
    assert_eq!(m.listeners(&relabelled), set(&["0.0.0.0_8080"]));
    assert_eq!(m.routes(&relabelled), set(&["http.8080"]));
}

// ---------------------------------------------------------------------------------------------
// Proxies coming and going
// ---------------------------------------------------------------------------------------------

/// Retracting a proxy's record (its stream closed) retracts every resource it held (its
/// accumulated state becomes empty) and produces no diff for any other proxy, including one
/// in the same namespace and scope.
#[test]
fn proxy_disconnect_removes_all_its_resources() {
    let mut m = Mesh::new();
    let leaving = sidecar_proxy("leaving", "default", "10.0.0.1", &[("app", "reviews")]);
    let staying = sidecar_proxy("staying", "default", "10.1.0.2", &[("app", "client")]);
    let router = router_proxy(
        "gw",
        "istio-system",
        "10.1.0.9",
        &[("istio", "ingressgateway")],
    );
    m.insert(vec![
        service("reviews", "default"),
        service("ratings", "other"),
        endpoint("reviews", "default", "10.0.0.1", true),
        gateway(
            "istio-system",
            "gw",
            &[("istio", "ingressgateway")],
            &[(8080, None)],
        ),
        px(&leaving),
        px(&staying),
        px(&router),
    ]);
    let held_before = m.all(&leaving);
    assert!(
        held_before.iter().any(|k| k.name == "inbound|9080||"),
        "the leaving proxy has its inbound part"
    );
    let staying_before = m.all(&staying);
    assert!(!staying_before.is_empty());

    let diffs = m.retract(vec![px(&leaving)]);
    assert!(
        m.all(&leaving).is_empty(),
        "left behind: {:?}",
        m.all(&leaving)
    );
    let mut expected: Diffs = held_before
        .into_iter()
        .map(|k| ((leaving.id.clone(), k), -1))
        .collect();
    expected.sort();
    assert_eq!(
        diffs, expected,
        "exactly the retraction of everything it held"
    );
    assert_eq!(m.all(&staying), staying_before);

    let router_before = m.all(&router);
    let diffs = m.retract(vec![px(&router)]);
    assert!(m.all(&router).is_empty());
    assert_eq!(diffs.len(), router_before.len());
    assert!(diffs.iter().all(|((p, _), d)| *p == router.id && *d == -1));
}

// ---------------------------------------------------------------------------------------------
// Endpoint changes
// ---------------------------------------------------------------------------------------------

type Held = BTreeMap<(ProxyId, ResourceKey), isize>;

/// The diff an EDS change should produce: for each proxy, `-old +new` of each named
/// ClusterLoadAssignment, where `old` is the version the proxy held `before` the change and
/// `new` is a version different from it.
fn expected_eds_diffs(before: &Held, proxies: &[&Proxy], names: &[String], diffs: &Diffs) -> Diffs {
    let mut expected = Diffs::new();
    for p in proxies {
        for name in names {
            let old: Vec<&ResourceKey> = before
                .keys()
                .filter(|(q, k)| *q == p.id && k.rtype == ResourceType::Endpoint && k.name == *name)
                .map(|(_, k)| k)
                .collect();
            assert_eq!(
                old.len(),
                1,
                "{} held {name} {} times before",
                p.id,
                old.len()
            );
            expected.push(((p.id.clone(), old[0].clone()), -1));
            let new = diffs
                .iter()
                .find(|((q, k), d)| {
                    *q == p.id && k.rtype == ResourceType::Endpoint && k.name == *name && *d == 1
                })
                .unwrap_or_else(|| panic!("no new version of {name} for {}: {diffs:#?}", p.id));
            assert_ne!(new.0 .1.version, old[0].version);
            expected.push(new.clone());
        }
    }
    expected.sort();
    expected
}

/// An endpoint change produces per-proxy diffs only for the ClusterLoadAssignments that
/// contain the endpoint: for each proxy holding such a cluster, `-old +new` of that EDS name
/// and nothing else (no Cluster, Listener or Route, no other EDS name, nothing for proxies
/// that do not see the service). Checked for an added endpoint (default + matching subset),
/// a readiness flip, a removed endpoint of another service, and a pod relabelled from v1 to
/// v2 (both subsets change, the default cluster's content does not).
#[test]
fn endpoint_change_touches_only_its_load_assignments() {
    let mut m = Mesh::new();
    let reviews = host("reviews", "default");
    let a = sidecar_proxy("a", "default", "10.9.0.1", &[("app", "a")]);
    let b = sidecar_proxy("b", "default", "10.9.0.2", &[("app", "b")]);
    let c = sidecar_proxy("c", "other", "10.9.0.3", &[("app", "c")]);
    let isolated = sidecar_proxy("d", "isolated", "10.9.0.4", &[("app", "d")]);
    let gw = router_proxy(
        "gw",
        "istio-system",
        "10.9.0.9",
        &[("istio", "ingressgateway")],
    );
    m.insert(vec![
        service("reviews", "default"),
        service("ratings", "default"),
        destination_rule(
            "default",
            "reviews",
            &reviews,
            &[("v1", "v1"), ("v2", "v2")],
        ),
        workload(
            "reviews-v1",
            "default",
            "10.0.0.1",
            &[("app", "reviews"), ("version", "v1")],
        ),
        workload(
            "reviews-v2",
            "default",
            "10.0.0.2",
            &[("app", "reviews"), ("version", "v2")],
        ),
        workload(
            "reviews-v1b",
            "default",
            "10.0.0.3",
            &[("app", "reviews"), ("version", "v1")],
        ),
        endpoint("reviews", "default", "10.0.0.1", true),
        endpoint("reviews", "default", "10.0.0.2", true),
        endpoint("ratings", "default", "10.0.0.5", true),
        sidecar("isolated", "default", None, &["./*"]),
        px(&a),
        px(&b),
        px(&c),
        px(&isolated),
        px(&gw),
    ]);
    let all_default = outbound(9080, "", "reviews", "default");
    let v1 = outbound(9080, "v1", "reviews", "default");
    let v2 = outbound(9080, "v2", "reviews", "default");
    let ratings = outbound(9080, "", "ratings", "default");
    let holders = [&a, &b, &c, &gw];
    for p in holders {
        for name in [&all_default, &v1, &v2, &ratings] {
            assert!(
                m.names(p, ResourceType::Endpoint).contains(name),
                "{} should hold EDS {name}",
                p.id
            );
        }
    }
    assert!(m.names(&isolated, ResourceType::Endpoint).is_empty());
    assert_eq!(m.eds_addresses(&a, &v1), set(&["10.0.0.1:9080"]));

    // 1. A new v1 endpoint: the default and v1 assignments change, v2 does not.
    let before = m.held.clone();
    let diffs = m.insert(vec![endpoint("reviews", "default", "10.0.0.3", true)]);
    let names = [all_default.clone(), v1.clone()];
    assert_eq!(
        diffs,
        expected_eds_diffs(&before, &holders, &names, &diffs),
        "adding 10.0.0.3 (v1)"
    );
    assert_eq!(
        m.eds_addresses(&a, &v1),
        set(&["10.0.0.1:9080", "10.0.0.3:9080"])
    );
    assert_eq!(
        m.eds_addresses(&c, &all_default),
        set(&["10.0.0.1:9080", "10.0.0.2:9080", "10.0.0.3:9080"])
    );

    // 2. 10.0.0.2 (v2) becomes not ready: the default and v2 assignments change.
    let before = m.held.clone();
    let diffs = m.replace(
        endpoint("reviews", "default", "10.0.0.2", true),
        endpoint("reviews", "default", "10.0.0.2", false),
    );
    assert_eq!(
        diffs,
        expected_eds_diffs(
            &before,
            &holders,
            &[all_default.clone(), v2.clone()],
            &diffs
        ),
        "10.0.0.2 not ready"
    );
    assert_eq!(m.eds_addresses(&b, &v2), set(&[]));

    // 3. The only ratings endpoint goes away: only the ratings assignment changes.
    let before = m.held.clone();
    let diffs = m.retract(vec![endpoint("ratings", "default", "10.0.0.5", true)]);
    assert_eq!(
        diffs,
        expected_eds_diffs(&before, &holders, std::slice::from_ref(&ratings), &diffs),
        "ratings endpoint removed"
    );
    assert_eq!(m.eds_addresses(&a, &ratings), set(&[]));

    // 4. Pod 10.0.0.1 relabelled v1 → v2: v1 and v2 change; the default assignment's content
    // (addresses) is the same, so it does not change.
    let before = m.held.clone();
    let diffs = m.replace(
        workload(
            "reviews-v1",
            "default",
            "10.0.0.1",
            &[("app", "reviews"), ("version", "v1")],
        ),
        workload(
            "reviews-v1",
            "default",
            "10.0.0.1",
            &[("app", "reviews"), ("version", "v2")],
        ),
    );
    assert_eq!(
        diffs,
        expected_eds_diffs(&before, &holders, &[v1.clone(), v2.clone()], &diffs),
        "10.0.0.1 relabelled"
    );
    assert_eq!(m.eds_addresses(&a, &v1), set(&["10.0.0.3:9080"]));
    assert_eq!(m.eds_addresses(&a, &v2), set(&["10.0.0.1:9080"]));
}

// ---------------------------------------------------------------------------------------------
// Gateway TLS: Secrets over SDS, fail closed
// ---------------------------------------------------------------------------------------------

/// A Secret with certificate `fp` (none when `fp` is empty or with a `problem`).
fn tls_secret(ns: &str, name: &str, fp: &str, ca: Option<&str>, problem: Option<&str>) -> Record {
    Record::Secret(TlsSecret {
        key: ConfigKey::new(Kind::Secret, ns, name),
        identity: (problem.is_none() && !fp.is_empty()).then(|| TlsIdentity {
            cert_chain: format!("CERT {fp}"),
            private_key: format!("KEY {fp}"),
            fingerprint: fp.into(),
        }),
        ca: ca.map(String::from),
        problem: problem.map(String::from),
    })
}

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
        tls: vec![TlsRoute {
            matches: vec![TlsMatch {
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

fn gateway_errors(m: &Mesh, code: ErrorCode) -> Vec<String> {
    m.errors
        .keys()
        .filter(|e| e.code == code)
        .map(|e| format!("{}: {}", e.object, e.message))
        .collect()
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

// ---------------------------------------------------------------------------------------------
// Locality load balancing
// ---------------------------------------------------------------------------------------------

/// An endpoint of `svc` in locality `loc`.
fn placed_endpoint(svc: &str, ip: &str, loc: &str) -> Record {
    let Record::Endpoint(h, mut e) = endpoint(svc, "default", ip, true) else {
        unreachable!("endpoint() makes endpoints")
    };
    e.placement.locality = loc.to_string();
    Record::Endpoint(h, e)
}

/// A sidecar in `default` whose node says it runs in `loc`.
fn placed_proxy(pod: &str, ip: &str, loc: &str) -> Proxy {
    Proxy {
        locality: loc.to_string(),
        ..sidecar_proxy(pod, "default", ip, &[("app", pod)])
    }
}

/// The `reviews` rule with this policy and no subsets.
fn reviews_rule(policy: TrafficPolicy) -> Record {
    let Record::DestinationRule(mut dr) =
        destination_rule("default", "reviews", &host("reviews", "default"), &[])
    else {
        unreachable!("destination_rule() makes rules")
    };
    dr.traffic_policy = Some(policy);
    Record::DestinationRule(dr)
}

impl Mesh {
    /// The ClusterLoadAssignment `name` that `proxy` holds.
    fn cla(&self, proxy: &Proxy, name: &str) -> ClusterLoadAssignment {
        let version = self.version(proxy, ResourceType::Endpoint, name);
        let (body, _) = &self.bodies[&(ResourceType::Endpoint, name.to_string(), version)];
        ClusterLoadAssignment::decode(&body.body.0[..]).expect("a ClusterLoadAssignment")
    }

    /// The Cluster `name` that `proxy` holds.
    fn cluster_body(
        &self,
        proxy: &Proxy,
        name: &str,
    ) -> envoy_types::pb::envoy::config::cluster::v3::Cluster {
        let version = self.version(proxy, ResourceType::Cluster, name);
        let (body, _) = &self.bodies[&(ResourceType::Cluster, name.to_string(), version)];
        envoy_types::pb::envoy::config::cluster::v3::Cluster::decode(&body.body.0[..])
            .expect("a Cluster")
    }
}

/// `region/zone/subzone` → (priority, weight, endpoint count) per locality group.
fn groups(cla: &ClusterLoadAssignment) -> BTreeMap<String, (u32, u32, usize)> {
    cla.endpoints
        .iter()
        .map(|g| {
            let l = g.locality.clone().unwrap_or_default();
            let name = format!("{}/{}/{}", l.region, l.zone, l.sub_zone);
            let weight = g.load_balancing_weight.as_ref().map_or(0, |w| w.value);
            (name, (g.priority, weight, g.lb_endpoints.len()))
        })
        .collect()
}

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
    assert!(context.contains("/etc/certs/cert.pem"), "{context}");
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
    assert!(
        m.names(&pod, ResourceType::Secret).is_empty(),
        "no chain names the workload certificate"
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
        set(&["ROOTCA", "default"])
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

/// A DNS ServiceEntry's hosts are balanced by locality as EDS endpoints are: under a rule
/// with `outlierDetection`, the STRICT_DNS cluster a client in r1/z1 holds has its own
/// zone's host at priority 0 and the other region's at 1, a client in r2/z2 the reverse;
/// clients of one locality share one cluster; a client without a locality gets one
/// priority. Removing the rule's outlier detection gives everyone the one unranked cluster
/// again, and a new host reaches every client's cluster.
#[test]
fn dns_entry_hosts_are_balanced_by_each_clients_locality() {
    let mut m = Mesh::new();
    let a = placed_proxy("a", "10.9.0.1", "r1/z1");
    let b = placed_proxy("b", "10.9.0.2", "r1/z1");
    let c = placed_proxy("c", "10.9.0.3", "r2/z2");
    let d = placed_proxy("d", "10.9.0.4", "");
    let entry = |hosts: &[(&str, &str)]| {
        let Record::Service(mut svc) = service("reviews", "default") else {
            unreachable!()
        };
        svc.resolution = Resolution::Dns;
        svc.dns_endpoints = hosts
            .iter()
            .map(|(address, locality)| DnsEndpoint {
                address: address.to_string(),
                ports: Default::default(),
                labels: Labels::new(),
                placement: Placement {
                    locality: locality.to_string(),
                    weight: None,
                },
                service_account: None,
            })
            .collect();
        Record::Service(svc)
    };
    let outlier = TrafficPolicy {
        outlier_detection: Some(Box::new(OutlierDetection {
            consecutive_5xx: Some(1),
            ..Default::default()
        })),
        ..Default::default()
    };
    let two = entry(&[("east.example", "r1/z1"), ("west.example", "r2/z2")]);
    m.insert(vec![
        two.clone(),
        reviews_rule(outlier.clone()),
        px(&a),
        px(&b),
        px(&c),
        px(&d),
    ]);
    let reviews = outbound(9080, "", "reviews", "default");
    let inline = |m: &Mesh, p: &Proxy| {
        let c = m.cluster_body(p, &reviews);
        assert_eq!(
            c.cluster_discovery_type,
            Some(ClusterDiscoveryType::Type(DiscoveryType::StrictDns as i32))
        );
        groups(&c.load_assignment.expect("inline hosts"))
    };
    let cds = |m: &Mesh, p: &Proxy| m.version(p, ResourceType::Cluster, &reviews);
    assert_eq!(
        inline(&m, &a),
        BTreeMap::from([
            ("r1/z1/".to_string(), (0, 1, 1)),
            ("r2/z2/".to_string(), (1, 1, 1)),
        ])
    );
    assert_eq!(
        inline(&m, &c),
        BTreeMap::from([
            ("r1/z1/".to_string(), (1, 1, 1)),
            ("r2/z2/".to_string(), (0, 1, 1)),
        ])
    );
    assert!(inline(&m, &d).values().all(|g| g.0 == 0));
    assert_eq!(cds(&m, &a), cds(&m, &b), "one locality, one cluster");
    assert_ne!(cds(&m, &a), cds(&m, &c));

    // A new host: every client's cluster has it, at its place.
    let three = entry(&[
        ("east.example", "r1/z1"),
        ("west.example", "r2/z2"),
        ("east2.example", "r1/z1"),
    ]);
    m.replace(two, three.clone());
    assert_eq!(inline(&m, &a)["r1/z1/"], (0, 2, 2));
    assert_eq!(inline(&m, &c)["r1/z1/"], (1, 2, 2));

    // Without outlier detection nothing ranks the hosts: one cluster for everyone.
    m.replace(
        reviews_rule(outlier),
        reviews_rule(TrafficPolicy::default()),
    );
    for p in [&b, &c, &d] {
        assert_eq!(cds(&m, &a), cds(&m, p));
    }
    assert!(inline(&m, &a).values().all(|g| g.0 == 0));
}

/// Locality load balancing, as Istio applies it, relative to each client proxy's locality:
/// with `outlierDetection`, priorities (0 the client's own zone and subzone, then its zone,
/// its region, elsewhere, without gaps); with `distribute`, the weights of the first entry
/// the client matches (the groups it names nothing emptied), whether or not outliers are
/// detected; `enabled: false` neither. Proxies in one locality share one assignment;
/// proxies without a locality, and clusters without such a rule, share one as before; an
/// endpoint change reaches exactly the assignments that hold it.
#[test]
fn load_assignments_follow_each_client_locality() {
    let mut m = Mesh::new();
    let a = placed_proxy("a", "10.9.0.1", "r1/z1");
    let b = placed_proxy("b", "10.9.0.2", "r1/z1");
    let c = placed_proxy("c", "10.9.0.3", "r2/z2");
    let d = placed_proxy("d", "10.9.0.4", "");
    let outlier = TrafficPolicy {
        outlier_detection: Some(Box::new(OutlierDetection {
            consecutive_5xx: Some(1),
            ..Default::default()
        })),
        ..Default::default()
    };
    m.insert(vec![
        service("reviews", "default"),
        service("ratings", "default"),
        placed_endpoint("reviews", "10.0.0.1", "r1/z1"),
        placed_endpoint("reviews", "10.0.0.2", "r2/z2"),
        placed_endpoint("reviews", "10.0.0.3", "r1/z2"),
        placed_endpoint("ratings", "10.0.0.5", "r1/z1"),
        reviews_rule(outlier.clone()),
        px(&a),
        px(&b),
        px(&c),
        px(&d),
    ]);
    let reviews = outbound(9080, "", "reviews", "default");
    let ratings = outbound(9080, "", "ratings", "default");
    let eds = |m: &Mesh, p: &Proxy, name: &str| m.version(p, ResourceType::Endpoint, name);
    // Failover: priorities relative to the client.
    assert_eq!(
        groups(&m.cla(&a, &reviews)),
        BTreeMap::from([
            ("r1/z1/".to_string(), (0, 1, 1)),
            ("r1/z2/".to_string(), (1, 1, 1)),
            ("r2/z2/".to_string(), (2, 1, 1)),
        ])
    );
    assert_eq!(
        groups(&m.cla(&c, &reviews)),
        BTreeMap::from([
            ("r1/z1/".to_string(), (1, 1, 1)),
            ("r1/z2/".to_string(), (1, 1, 1)),
            ("r2/z2/".to_string(), (0, 1, 1)),
        ])
    );
    // A client of no locality shares nothing with any group: one priority.
    assert!(groups(&m.cla(&d, &reviews)).values().all(|g| g.0 == 0));
    assert_eq!(
        eds(&m, &a, &reviews),
        eds(&m, &b, &reviews),
        "one locality, one assignment"
    );
    assert_ne!(eds(&m, &a, &reviews), eds(&m, &c, &reviews));
    // Without a locality rule, everyone shares the one assignment.
    for p in [&b, &c, &d] {
        assert_eq!(eds(&m, &a, &ratings), eds(&m, p, &ratings));
    }
    // Priorities need no switch in the cluster; distribute does (below).
    assert!(m
        .cluster_body(&a, &reviews)
        .common_lb_config
        .unwrap()
        .locality_config_specifier
        .is_none());

    // An endpoint of ratings: each proxy gets its one new ratings assignment, nothing else.
    let before = m.held.clone();
    let diffs = m.insert(vec![placed_endpoint("ratings", "10.0.0.6", "r2/z2")]);
    assert_eq!(
        diffs,
        expected_eds_diffs(
            &before,
            &[&a, &b, &c, &d],
            std::slice::from_ref(&ratings),
            &diffs
        )
    );
    // An endpoint of reviews: each proxy's reviews assignment, nothing else.
    let before = m.held.clone();
    let diffs = m.insert(vec![placed_endpoint("reviews", "10.0.0.4", "r2/z2")]);
    assert_eq!(
        diffs,
        expected_eds_diffs(
            &before,
            &[&a, &b, &c, &d],
            std::slice::from_ref(&reviews),
            &diffs
        )
    );
    assert_eq!(groups(&m.cla(&c, &reviews))["r2/z2/"], (0, 2, 2));

    // Distribute, without outlier detection: clients in r1/z1 weigh by it, others not.
    let distribute = TrafficPolicy {
        locality_lb: Some(Box::new(LocalityLbSetting {
            distribute: vec![LocalityDistribute {
                from: "r1/z1/*".into(),
                to: vec![("r1/z1".into(), 80), ("r2/*".into(), 20)],
            }],
            ..Default::default()
        })),
        ..Default::default()
    };
    m.replace(
        reviews_rule(outlier.clone()),
        reviews_rule(distribute.clone()),
    );
    assert_eq!(
        groups(&m.cla(&a, &reviews)),
        BTreeMap::from([
            ("r1/z1/".to_string(), (0, 80, 1)),
            ("r1/z2/".to_string(), (0, 1, 0)),
            ("r2/z2/".to_string(), (0, 20, 2)),
        ])
    );
    assert_eq!(
        groups(&m.cla(&c, &reviews)),
        groups(&m.cla(&d, &reviews)),
        "no entry for r2/z2: as it is"
    );
    assert!(m
        .cluster_body(&a, &reviews)
        .common_lb_config
        .and_then(|c| c.locality_config_specifier)
        .is_some());

    // Switched off: one assignment for all again.
    let mut off = distribute.clone();
    off.outlier_detection = outlier.outlier_detection.clone();
    if let Some(l) = off.locality_lb.as_mut() {
        l.enabled = Some(false);
        l.distribute.clear();
    }
    m.replace(reviews_rule(distribute), reviews_rule(off));
    for p in [&b, &c, &d] {
        assert_eq!(eds(&m, &a, &reviews), eds(&m, p, &reviews));
    }
    assert!(groups(&m.cla(&a, &reviews)).values().all(|g| g.0 == 0));
}

/// An endpoint of `svc` in `loc` whose workload carries `tier`.
fn tiered_endpoint(svc: &str, ip: &str, loc: &str, tier: &str) -> Record {
    let Record::Endpoint(h, mut e) = placed_endpoint(svc, ip, loc) else {
        unreachable!("placed_endpoint() makes endpoints")
    };
    e.labels = labels(&[("tier", tier)]);
    Record::Endpoint(h, e)
}

/// `(locality, priority, endpoints)` per group, in the assignment's order.
fn ranked_groups(cla: &ClusterLoadAssignment) -> Vec<(String, u32, usize)> {
    cla.endpoints
        .iter()
        .map(|g| {
            let l = g.locality.clone().unwrap_or_default();
            let name = format!("{}/{}/{}", l.region, l.zone, l.sub_zone);
            (name, g.priority, g.lb_endpoints.len())
        })
        .collect()
}

/// `failoverPriority` as Istio applies it, per client: an endpoint's priority comes from
/// how many of the listed labels, in order, it shares with the client proxy (a topology
/// label from each side's locality), renumbered without gaps; proxies with the same values
/// share one assignment; a proxy with neither labels nor a locality compares "" for each
/// (as Istio's proxies always carry some label, it ranks them too); clusters without the rule stay shared; an endpoint change reaches exactly
/// the assignments that hold it; removing the list ends the split.
#[test]
fn failover_priority_ranks_endpoints_by_the_labels_they_share_with_each_client() {
    let mut m = Mesh::new();
    let gold = |pod: &str, ip: &str| Proxy {
        locality: "r1/z1".into(),
        ..sidecar_proxy(pod, "default", ip, &[("tier", "gold")])
    };
    let a = gold("a", "10.9.0.1");
    let b = gold("b", "10.9.0.2");
    let c = Proxy {
        locality: "r1/z1".into(),
        ..sidecar_proxy("c", "default", "10.9.0.3", &[("tier", "silver")])
    };
    let d = sidecar_proxy("d", "default", "10.9.0.4", &[]);
    let prioritized = TrafficPolicy {
        outlier_detection: Some(Box::new(OutlierDetection {
            consecutive_5xx: Some(1),
            ..Default::default()
        })),
        locality_lb: Some(Box::new(LocalityLbSetting {
            failover_priority: vec!["tier".into(), "topology.kubernetes.io/zone".into()],
            ..Default::default()
        })),
        ..Default::default()
    };
    m.insert(vec![
        service("reviews", "default"),
        service("ratings", "default"),
        tiered_endpoint("reviews", "10.0.0.1", "r1/z1", "gold"),
        tiered_endpoint("reviews", "10.0.0.2", "r1/z2", "gold"),
        tiered_endpoint("reviews", "10.0.0.3", "r1/z1", "silver"),
        placed_endpoint("ratings", "10.0.0.5", "r1/z1"),
        reviews_rule(prioritized.clone()),
        px(&a),
        px(&b),
        px(&c),
        px(&d),
    ]);
    let reviews = outbound(9080, "", "reviews", "default");
    let ratings = outbound(9080, "", "ratings", "default");
    let eds = |m: &Mesh, p: &Proxy, name: &str| m.version(p, ResourceType::Endpoint, name);
    let g = |s: &str, p: u32, n: usize| (s.to_string(), p, n);
    // Gold in z1: its tier and zone first, its tier elsewhere next, then the rest.
    assert_eq!(
        ranked_groups(&m.cla(&a, &reviews)),
        vec![g("r1/z1/", 0, 1), g("r1/z1/", 2, 1), g("r1/z2/", 1, 1)]
    );
    // Silver: the silver endpoint, then every other one (the zone counts only after the tier).
    assert_eq!(
        ranked_groups(&m.cla(&c, &reviews)),
        vec![g("r1/z1/", 0, 1), g("r1/z1/", 1, 1), g("r1/z2/", 1, 1)]
    );
    // No labels and no locality: "" shares the tier with no endpoint, one rank for all.
    assert_eq!(
        ranked_groups(&m.cla(&d, &reviews)),
        vec![g("r1/z1/", 0, 2), g("r1/z2/", 0, 1)]
    );
    assert_eq!(
        eds(&m, &a, &reviews),
        eds(&m, &b, &reviews),
        "same values, one assignment"
    );
    assert_ne!(eds(&m, &a, &reviews), eds(&m, &c, &reviews));
    for p in [&b, &c, &d] {
        assert_eq!(
            eds(&m, &a, &ratings),
            eds(&m, p, &ratings),
            "no rule: shared"
        );
    }

    // A gold endpoint in z1: gold clients' first group grows; each proxy gets only its
    // new reviews assignment.
    let before = m.held.clone();
    let diffs = m.insert(vec![tiered_endpoint(
        "reviews", "10.0.0.4", "r1/z1", "gold",
    )]);
    assert_eq!(
        diffs,
        expected_eds_diffs(
            &before,
            &[&a, &b, &c, &d],
            std::slice::from_ref(&reviews),
            &diffs
        )
    );
    assert_eq!(ranked_groups(&m.cla(&b, &reviews))[0], g("r1/z1/", 0, 2));

    // Without the list: locality failover again, one assignment per locality.
    let mut plain = prioritized.clone();
    if let Some(l) = plain.locality_lb.as_mut() {
        l.failover_priority.clear();
    }
    m.replace(reviews_rule(prioritized), reviews_rule(plain));
    assert_eq!(eds(&m, &a, &reviews), eds(&m, &c, &reviews));
    assert_eq!(
        ranked_groups(&m.cla(&c, &reviews)),
        vec![g("r1/z1/", 0, 3), g("r1/z2/", 1, 1)]
    );
}

impl Mesh {
    /// The Listener `name` that `proxy` holds.
    fn listener_body(
        &self,
        proxy: &Proxy,
        name: &str,
    ) -> envoy_types::pb::envoy::config::listener::v3::Listener {
        let version = self.version(proxy, ResourceType::Listener, name);
        let (body, _) = &self.bodies[&(ResourceType::Listener, name.to_string(), version)];
        envoy_types::pb::envoy::config::listener::v3::Listener::decode(&body.body.0[..])
            .expect("a Listener")
    }
}

/// The cluster a chain's `tcp_proxy` sends to (one cluster), if it has one.
fn tcp_proxy_cluster(
    chain: &envoy_types::pb::envoy::config::listener::v3::FilterChain,
) -> Option<String> {
    use envoy_types::pb::envoy::config::listener::v3::filter::ConfigType;
    use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
        tcp_proxy::ClusterSpecifier, TcpProxy,
    };
    let f = chain.filters.first()?;
    let Some(ConfigType::TypedConfig(any)) = &f.config_type else {
        return None;
    };
    match TcpProxy::decode(&any.value[..]).ok()?.cluster_specifier? {
        ClusterSpecifier::Cluster(c) => Some(c),
        _ => None,
    }
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
        tcp: vec![TcpRoute {
            matches: vec![TcpMatch {
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
            })),
            field: "spec.servers[0]".into(),
        }],
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
        })),
        field: "spec.servers[0]".into(),
    };
    let gateway = Record::Gateway(Gateway {
        key: ConfigKey::new(Kind::Gateway, "istio-system", "cross-network"),
        selector: labels(&[("istio", "eastwestgateway")]),
        servers: vec![server],
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

/// A ServiceEntry `name` (namespace `default`) for `host` with TLS port 443 and no
/// addresses, of Istio's default location (outside the mesh).
fn tls_entry(name: &str, host: &str, resolution: Resolution) -> Record {
    Record::Service(Service {
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
        tls: vec![TlsRoute {
            matches: vec![TlsMatch {
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

impl Mesh {
    /// The cluster each virtual host of route configuration `name` sends its first route to,
    /// by virtual host name.
    fn vhost_clusters(&self, proxy: &Proxy, name: &str) -> BTreeMap<String, String> {
        use envoy_types::pb::envoy::config::route::v3::{
            route::Action, route_action::ClusterSpecifier, RouteConfiguration,
        };
        let version = self.version(proxy, ResourceType::Route, name);
        let (body, _) = &self.bodies[&(ResourceType::Route, name.to_string(), version)];
        let rc = RouteConfiguration::decode(&body.body.0[..]).expect("a RouteConfiguration");
        rc.virtual_hosts
            .iter()
            .filter_map(|vh| {
                let action = vh.routes.first()?.action.as_ref()?;
                let Action::Route(ra) = action else {
                    return None;
                };
                let cluster = match ra.cluster_specifier.as_ref()? {
                    ClusterSpecifier::Cluster(c) => c.clone(),
                    ClusterSpecifier::WeightedClusters(w) => w.clusters.first()?.name.clone(),
                    _ => return None,
                };
                Some((vh.name.clone(), cluster))
            })
            .collect()
    }
}

/// Proves that a mesh VirtualService with a wildcard host governs every visible service it
/// covers, with Istio's precedence (the most specific cover wins, whatever the namespaces'
/// order): `*.default.svc.cluster.local` routes `a` and `b` of `default`; an exact
/// VirtualService for `b` — in another namespace, which would otherwise rank after the
/// proxy's own — takes `b` back; `*` covers what no longer wildcard does (`c` of `other`) and
/// never displaces the longer one; withdrawing the exact one hands `b` back to the wildcard.
#[test]
fn wildcard_virtual_service_hosts_govern_the_services_they_cover() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("sleep-1", "default", "10.0.0.5", &[("app", "sleep")]);
    let to = |name: &str, ns: &str| outbound(9080, "", name, ns);
    let vh = |name: &str, ns: &str| format!("{}:9080", host(name, ns));
    m.insert(vec![
        px(&client),
        service("a", "default"),
        service("b", "default"),
        service("c", "other"),
        service("d", "other"),
    ]);
    let defaults = m.vhost_clusters(&client, "9080");
    assert_eq!(defaults[&vh("a", "default")], to("a", "default"));
    assert_eq!(defaults[&vh("c", "other")], to("c", "other"));

    let wild = virtual_service(
        "default",
        "wild",
        &["*.default.svc.cluster.local"],
        &[],
        &host("d", "other"),
    );
    m.insert(vec![wild.clone()]);
    let routes = m.vhost_clusters(&client, "9080");
    assert_eq!(routes[&vh("a", "default")], to("d", "other"), "{routes:?}");
    assert_eq!(routes[&vh("b", "default")], to("d", "other"), "{routes:?}");
    assert_eq!(routes[&vh("c", "other")], to("c", "other"), "{routes:?}");

    let exact = virtual_service(
        "other",
        "exact-b",
        &[&host("b", "default")],
        &["mesh"],
        &host("c", "other"),
    );
    let everything = virtual_service("default", "everything", &["*"], &[], &host("a", "default"));
    m.insert(vec![exact.clone(), everything.clone()]);
    let routes = m.vhost_clusters(&client, "9080");
    assert_eq!(routes[&vh("a", "default")], to("d", "other"), "{routes:?}");
    assert_eq!(routes[&vh("b", "default")], to("c", "other"), "{routes:?}");
    assert_eq!(routes[&vh("c", "other")], to("a", "default"), "{routes:?}");
    assert_eq!(routes[&vh("d", "other")], to("a", "default"), "{routes:?}");

    // A gateway-only wildcard VirtualService changes nothing on sidecars.
    let gw_only = virtual_service(
        "default",
        "gw-only",
        &["*.svc.cluster.local"],
        &["default/gw"],
        &host("b", "default"),
    );
    m.insert(vec![gw_only]);
    assert_eq!(m.vhost_clusters(&client, "9080"), routes);

    m.retract(vec![exact, everything]);
    let routes = m.vhost_clusters(&client, "9080");
    assert_eq!(routes[&vh("b", "default")], to("d", "other"), "{routes:?}");
    assert_eq!(routes[&vh("c", "other")], to("c", "other"), "{routes:?}");
    m.retract(vec![wild]);
    assert_eq!(
        m.vhost_clusters(&client, "9080")[&vh("a", "default")],
        to("a", "default")
    );
}

/// A service like [`service`] on HTTP port `port` instead.
fn service_on(name: &str, ns: &str, port: u16) -> Record {
    let Record::Service(mut s) = service(name, ns) else {
        unreachable!()
    };
    s.ports[0].port = port;
    Record::Service(s)
}

/// Proves Istio's virtual hosts for VirtualService hosts that are no service's: a
/// VirtualService governing `a` also routes its alias `a.example.com` on `a`'s port (and not
/// on port 80); a VirtualService whose only host is outside the registry routes it on port
/// 80's configuration alone, for the scopes that see it (not one it is not exported to, nor
/// one whose Sidecar imports only its own namespace); once a ServiceEntry defines the host,
/// the host is a service like any other; withdrawing the VirtualService removes its hosts.
#[test]
fn virtual_service_hosts_outside_the_registry_get_virtual_hosts_of_their_own() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("sleep-1", "default", "10.0.0.5", &[("app", "sleep")]);
    let fenced = sidecar_proxy("fenced-1", "fenced", "10.0.0.6", &[("app", "fenced")]);
    let to = |name: &str, ns: &str, port: u16| outbound(port, "", name, ns);
    m.insert(vec![
        px(&client),
        px(&fenced),
        service("a", "default"),
        service("b", "default"),
        service_on("web", "default", 80),
        sidecar("fenced", "fenced", None, &["./*", "default/*"]),
    ]);
    let alias = virtual_service(
        "default",
        "alias",
        &[&host("a", "default"), "a.example.com"],
        &[],
        &host("b", "default"),
    );
    m.insert(vec![alias.clone()]);
    let on_9080 = m.vhost_clusters(&client, "9080");
    assert_eq!(on_9080["a.example.com:9080"], to("b", "default", 9080));
    assert_eq!(
        on_9080[&format!("{}:9080", host("a", "default"))],
        to("b", "default", 9080)
    );
    assert!(!m
        .vhost_clusters(&client, "80")
        .contains_key("a.example.com:80"));

    let legacy = virtual_service(
        "other",
        "legacy",
        &["legacy.example.com"],
        &[],
        &host("a", "default"),
    );
    m.insert(vec![legacy.clone()]);
    let on_80 = m.vhost_clusters(&client, "80");
    // Its destination names no port: on port 80's configuration Istio's sidecars know the
    // services at port 80 only, so `a` (9080 alone) is taken at 80, a cluster that does not
    // exist (503), as in Istio; a destination port would fix it.
    assert_eq!(
        on_80["legacy.example.com:80"],
        to("a", "default", 80),
        "{on_80:?}"
    );
    assert!(!m
        .vhost_clusters(&client, "9080")
        .contains_key("legacy.example.com:9080"));
    // The fenced Sidecar imports `fenced` and `default` only: not `other`'s VirtualService.
    assert!(!m
        .vhost_clusters(&fenced, "80")
        .contains_key("legacy.example.com:80"));
    let Record::VirtualService(mut private) = legacy.clone() else {
        unreachable!()
    };
    private.export_to = vec![".".into()];
    m.replace(legacy.clone(), Record::VirtualService(private.clone()));
    assert!(!m
        .vhost_clusters(&client, "80")
        .contains_key("legacy.example.com:80"));
    m.replace(Record::VirtualService(private), legacy.clone());
    assert!(m
        .vhost_clusters(&client, "80")
        .contains_key("legacy.example.com:80"));

    // Defined by a ServiceEntry on port 8080, the host is governed as a service.
    let Record::Service(mut entry) = service_on("legacy", "other", 8080) else {
        unreachable!()
    };
    entry.hostname = "legacy.example.com".into();
    m.insert(vec![Record::Service(entry.clone())]);
    assert!(!m
        .vhost_clusters(&client, "80")
        .contains_key("legacy.example.com:80"));
    assert_eq!(
        m.vhost_clusters(&client, "8080")["legacy.example.com:8080"],
        to("a", "default", 8080),
        "a destination without a port is taken at the route configuration's port"
    );
    m.retract(vec![Record::Service(entry)]);
    assert!(m
        .vhost_clusters(&client, "80")
        .contains_key("legacy.example.com:80"));

    m.retract(vec![legacy, alias]);
    assert!(!m
        .vhost_clusters(&client, "80")
        .contains_key("legacy.example.com:80"));
    assert!(!m
        .vhost_clusters(&client, "9080")
        .contains_key("a.example.com:9080"));
}

/// A Sidecar's `egress[].hosts` select VirtualServices by the VirtualService's own
/// namespace, as Istio's Sidecar scope does: a Sidecar importing `./*` keeps a
/// VirtualService of another namespace out even for services it sees; importing that
/// namespace too (or no Sidecar) lets it govern them.
#[test]
fn sidecar_egress_hosts_select_the_virtual_services_that_apply() {
    let mut m = Mesh::new();
    let open = sidecar_proxy("sleep-1", "default", "10.0.0.5", &[("app", "sleep")]);
    let fenced = sidecar_proxy("fenced-1", "fenced", "10.0.0.6", &[("app", "fenced")]);
    let to = |name: &str, ns: &str, port: u16| outbound(port, "", name, ns);
    let fence = sidecar("fenced", "fenced", None, &["./*", "default/*"]);
    m.insert(vec![
        px(&open),
        px(&fenced),
        service("a", "default"),
        service("b", "default"),
        fence.clone(),
    ]);
    let a = host("a", "default");
    let elsewhere = virtual_service("team", "a-to-b", &[&a], &[], &host("b", "default"));
    m.insert(vec![elsewhere.clone()]);
    assert_eq!(
        m.vhost_clusters(&open, "9080")[&format!("{a}:9080")],
        to("b", "default", 9080),
        "no Sidecar: every namespace's VirtualServices"
    );
    assert_eq!(
        m.vhost_clusters(&fenced, "9080")[&format!("{a}:9080")],
        to("a", "default", 9080),
        "the fenced Sidecar does not import namespace team"
    );
    // Importing `team/*` (any host there) brings it in.
    m.replace(
        fence.clone(),
        sidecar("fenced", "fenced", None, &["./*", "default/*", "team/*"]),
    );
    assert_eq!(
        m.vhost_clusters(&fenced, "9080")[&format!("{a}:9080")],
        to("b", "default", 9080)
    );
    // A VirtualService of `default` for the host is imported by `default/*` and governs it
    // for the fenced scope, whichever governs it elsewhere.
    m.replace(
        sidecar("fenced", "fenced", None, &["./*", "default/*", "team/*"]),
        fence,
    );
    let home = virtual_service("default", "a-home", &[&a], &[], &host("a", "default"));
    m.insert(vec![home.clone()]);
    assert_eq!(
        m.vhost_clusters(&fenced, "9080")[&format!("{a}:9080")],
        to("a", "default", 9080)
    );
    m.retract(vec![home, elsewhere]);
    assert_eq!(
        m.vhost_clusters(&open, "9080")[&format!("{a}:9080")],
        to("a", "default", 9080)
    );
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

/// Proves the port of a destination without one, as Istio's `GetDestinationCluster`
/// resolves it, and the analysis of it (Istio's IST0112 and IST0101): `front` (port 8000)
/// routes to `reviews` (ports 9080 and 9090) without a port, so the route goes to the port
/// the request arrived on (8000, a cluster `reviews` does not have: Envoy answers 503), not
/// to one of `reviews`' ports picked for it, and the VirtualService is told to name one; a
/// port `reviews` does not have is reported as such; a port it has is routed and clears both.
#[test]
fn a_destination_without_a_port_takes_the_request_port_and_is_reported() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("sleep-1", "default", "10.0.0.5", &[("app", "sleep")]);
    let Record::Service(mut reviews) = service("reviews", "default") else {
        unreachable!()
    };
    reviews.ports.push(ServicePort {
        name: "http-admin".into(),
        port: 9090,
        protocol: Protocol::Http,
    });
    let front_host = host("front", "default");
    let reviews_host = host("reviews", "default");
    let vs = |port: Option<u16>| {
        let Record::VirtualService(mut vs) =
            virtual_service("default", "front", &[&front_host], &[], &reviews_host)
        else {
            unreachable!()
        };
        vs.http[0].route[0].port = port;
        Record::VirtualService(vs)
    };
    m.insert(vec![
        px(&client),
        service_on("front", "default", 8000),
        Record::Service(reviews),
        vs(None),
    ]);
    let vhost = format!("{front_host}:8000");
    let routed = |m: &Mesh| m.vhost_clusters(&client, "8000").get(&vhost).cloned();
    assert_eq!(
        routed(&m).as_deref(),
        Some(format!("outbound|8000||{reviews_host}").as_str())
    );
    let found: Vec<(ErrorCode, String)> = m
        .errors
        .keys()
        .map(|e| (e.code, e.message.clone()))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, ErrorCode::PortSelectorRequired);
    assert!(found[0].1.contains("(9080, 9090)"), "{found:?}");
    assert_eq!(
        ErrorCode::PortSelectorRequired.message_code().1,
        "VirtualServiceDestinationPortSelectorRequired"
    );

    m.retract(vec![vs(None)]);
    m.insert(vec![vs(Some(9191))]);
    let codes: Vec<ErrorCode> = m.errors.keys().map(|e| e.code).collect();
    assert_eq!(codes, vec![ErrorCode::PortNotFound], "{:?}", m.errors);

    m.retract(vec![vs(Some(9191))]);
    m.insert(vec![vs(Some(9090))]);
    assert_eq!(
        routed(&m).as_deref(),
        Some(format!("outbound|9090||{reviews_host}").as_str())
    );
    assert!(m.errors.is_empty(), "{:?}", m.errors);
}

/// Proves that VirtualServices are selected per egress listener, as Istio's Sidecar scope
/// selects them: a Sidecar whose port-9080 listener imports `./*` and `routing/*` and whose
/// catch-all imports `./*` alone sees the `routing` namespace's VirtualService for `reviews`
/// on port 9080 (its route goes to `ratings`) and not on port 9070 (the catch-all serves it:
/// `reviews`' own default route), where a per-scope selection would apply it to both;
/// importing `routing/*` on the catch-all too applies it on both ports.
#[test]
fn virtual_services_are_selected_per_egress_listener() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("sleep-1", "default", "10.0.0.5", &[("app", "sleep")]);
    let Record::Service(mut reviews) = service("reviews", "default") else {
        unreachable!()
    };
    reviews.ports.push(ServicePort {
        name: "http-v2".into(),
        port: 9070,
        protocol: Protocol::Http,
    });
    let reviews_host = host("reviews", "default");
    let ratings_host = host("ratings", "default");
    let Record::VirtualService(mut vs) =
        virtual_service("routing", "reviews", &[&reviews_host], &[], &ratings_host)
    else {
        unreachable!()
    };
    vs.http[0].route[0].port = Some(9080);
    let egress = |catch_all: &[&str]| {
        Record::Sidecar(Sidecar {
            registry_only: None,
            egress_proxy: None,
            inbound_connection_pool: None,
            ingress: Vec::new(),
            key: ConfigKey::new(Kind::Sidecar, "default", "default"),
            selector: None,
            egress: vec![
                EgressListener {
                    port: Some(EgressPort {
                        number: 9080,
                        protocol: Protocol::Http,
                        name: "http".into(),
                    }),
                    bind: None,
                    capture_none: false,
                    hosts: vec!["./*".into(), "routing/*".into()],
                },
                EgressListener {
                    port: None,
                    bind: None,
                    capture_none: false,
                    hosts: catch_all.iter().map(|h| h.to_string()).collect(),
                },
            ],
        })
    };
    m.insert(vec![
        px(&client),
        Record::Service(reviews),
        service("ratings", "default"),
        Record::VirtualService(vs),
        egress(&["./*"]),
    ]);
    let routed = |m: &Mesh, port: u16| {
        m.vhost_clusters(&client, &port.to_string())
            .get(&format!("{reviews_host}:{port}"))
            .cloned()
    };
    let ratings = format!("outbound|9080||{ratings_host}");
    assert_eq!(routed(&m, 9080).as_deref(), Some(ratings.as_str()));
    assert_eq!(
        routed(&m, 9070).as_deref(),
        Some(format!("outbound|9070||{reviews_host}").as_str())
    );

    m.retract(vec![egress(&["./*"])]);
    m.insert(vec![egress(&["./*", "routing/*"])]);
    assert_eq!(routed(&m, 9080).as_deref(), Some(ratings.as_str()));
    assert_eq!(routed(&m, 9070).as_deref(), Some(ratings.as_str()));
}

/// A Service's `trafficDistribution: PreferClose`, as Istio's `GetLocalityLbSetting` reads it:
/// without a DestinationRule `localityLbSetting`, each client's assignment ranks the
/// endpoints by how much of its network, region, zone and subzone they share, even without
/// outlier detection; clients in different places get different assignments; a rule's
/// `localityLbSetting` (here `enabled: false`) takes precedence; without the preference the
/// assignment is one shared, unranked one again.
#[test]
fn prefer_close_services_rank_endpoints_by_the_clients_place() {
    let mut m = Mesh::new();
    let a = placed_proxy("a", "10.9.0.1", "r1/z1");
    let b = placed_proxy("b", "10.9.0.2", "r2/z3");
    let Record::Service(mut close) = service("reviews", "default") else {
        unreachable!()
    };
    close.prefer_close = true;
    m.insert(vec![
        Record::Service(close.clone()),
        placed_endpoint("reviews", "10.0.0.1", "r1/z1"),
        placed_endpoint("reviews", "10.0.0.2", "r1/z2"),
        placed_endpoint("reviews", "10.0.0.3", "r2/z3"),
        px(&a),
        px(&b),
    ]);
    let reviews = outbound(9080, "", "reviews", "default");
    let g = |s: &str, p: u32| (s.to_string(), p, 1usize);
    let ranks = |m: &Mesh, p: &Proxy| {
        let mut r = ranked_groups(&m.cla(p, &reviews));
        r.sort();
        r
    };
    assert_eq!(
        ranks(&m, &a),
        vec![g("r1/z1/", 0), g("r1/z2/", 1), g("r2/z3/", 2)]
    );
    assert_eq!(
        ranks(&m, &b),
        vec![g("r1/z1/", 1), g("r1/z2/", 1), g("r2/z3/", 0)]
    );
    let eds = |m: &Mesh, p: &Proxy| m.version(p, ResourceType::Endpoint, &reviews);
    assert_ne!(eds(&m, &a), eds(&m, &b));

    // A rule's own setting wins: disabled, nothing is ranked.
    let off = TrafficPolicy {
        locality_lb: Some(Box::new(LocalityLbSetting {
            enabled: Some(false),
            ..Default::default()
        })),
        ..Default::default()
    };
    m.insert(vec![reviews_rule(off.clone())]);
    assert!(
        ranks(&m, &a).iter().all(|(_, p, _)| *p == 0),
        "{:?}",
        ranks(&m, &a)
    );
    m.retract(vec![reviews_rule(off)]);

    // Without the preference: no ranking, one assignment for both.
    let mut plain = close.clone();
    plain.prefer_close = false;
    m.replace(Record::Service(close), Record::Service(plain));
    assert!(ranks(&m, &a).iter().all(|(_, p, _)| *p == 0));
    assert_eq!(eds(&m, &a), eds(&m, &b));
}

/// Per filter of a listener's chains (the default chain last): where it sends connections
/// (a `tcp_proxy`'s cluster, `hcm` for a connection manager) and its idle timeout in ms.
fn idle_timeouts(
    l: &envoy_types::pb::envoy::config::listener::v3::Listener,
) -> Vec<(String, Option<i64>)> {
    use envoy_types::pb::envoy::config::listener::v3::filter::ConfigType;
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
    use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
        tcp_proxy::ClusterSpecifier, TcpProxy,
    };
    let ms = |d: Option<envoy_types::pb::google::protobuf::Duration>| {
        d.map(|d| d.seconds * 1000 + i64::from(d.nanos) / 1_000_000)
    };
    l.filter_chains
        .iter()
        .chain(l.default_filter_chain.iter())
        .flat_map(|c| c.filters.iter())
        .map(|f| {
            let Some(ConfigType::TypedConfig(any)) = &f.config_type else {
                panic!("a typed config");
            };
            if any.type_url.ends_with("HttpConnectionManager") {
                let h =
                    HttpConnectionManager::decode(&any.value[..]).expect("a connection manager");
                let idle = h.common_http_protocol_options.and_then(|o| o.idle_timeout);
                return ("hcm".to_string(), ms(idle));
            }
            let t = TcpProxy::decode(&any.value[..]).expect("a tcp_proxy");
            let to = match t.cluster_specifier {
                Some(ClusterSpecifier::Cluster(c)) => c,
                other => format!("{other:?}"),
            };
            (to, ms(t.idle_timeout))
        })
        .collect()
}

/// Proves Istio's per-proxy node metadata `IDLE_TIMEOUT`: it is the idle timeout of every
/// connection manager and `tcp_proxy` of the proxy's listeners — outbound HTTP and TCP,
/// `virtualOutbound`'s catch-all, `virtualInbound` (HTTP and catch-all), a gateway's — except
/// a TCP route's whose host's DestinationRule sets `tcp.idleTimeout` (the rule wins, as in
/// Istio); a proxy of the same namespace without it is scoped apart and keeps Envoy's
/// defaults; a proxy that stops sending it gets that proxy's listeners again.
#[test]
fn idle_timeout_metadata_reaches_every_listener_of_its_proxy() {
    let mut m = Mesh::new();
    let tcp_service = |name: &str, addr: &str| {
        let Record::Service(mut s) = service_on(name, "default", 27017) else {
            unreachable!()
        };
        s.ports[0].protocol = Protocol::Tcp;
        s.ports[0].name = "tcp".into();
        s.addresses = vec![addr.to_string()];
        Record::Service(s)
    };
    let Record::DestinationRule(mut cache_rule) =
        destination_rule("default", "cache", &host("cache", "default"), &[])
    else {
        unreachable!()
    };
    cache_rule.traffic_policy = Some(TrafficPolicy {
        connection_pool: Some(Box::new(ConnectionPool {
            tcp_idle_timeout_ms: Some(30_000),
            ..Default::default()
        })),
        ..Default::default()
    });
    let quick = Proxy {
        idle_timeout_ns: Some(1_000_000_000),
        ..sidecar_proxy("quick", "default", "10.0.0.1", &[])
    };
    let plain = sidecar_proxy("plain", "default", "10.0.0.2", &[]);
    let gw = Proxy {
        idle_timeout_ns: Some(2_500_000_000),
        ..router_proxy(
            "gw",
            "istio-system",
            "10.0.0.9",
            &[("istio", "ingressgateway")],
        )
    };
    m.insert(vec![
        service("reviews", "default"),
        // `quick` serves reviews: its `virtualInbound` has connection managers too.
        endpoint("reviews", "default", "10.0.0.1", true),
        tcp_service("db", "10.96.0.10"),
        tcp_service("cache", "10.96.0.11"),
        Record::DestinationRule(cache_rule),
        gateway(
            "istio-system",
            "gw",
            &[("istio", "ingressgateway")],
            &[(8080, None)],
        ),
        virtual_service(
            "istio-system",
            "gw-routes",
            &["*"],
            &["gw"],
            &host("reviews", "default"),
        ),
        px(&quick),
        px(&plain),
        px(&gw),
    ]);
    let names = set(&[
        "0.0.0.0_9080",
        "0.0.0.0_27017",
        "virtualOutbound",
        "virtualInbound",
    ]);
    assert_eq!(m.listeners(&quick), names);
    assert_eq!(m.listeners(&plain), names);
    let cache = outbound(27017, "", "cache", "default");
    for name in &names {
        for (to, idle) in idle_timeouts(&m.listener_body(&quick, name)) {
            let want = if to == cache { 30_000 } else { 1_000 };
            assert_eq!(idle, Some(want), "quick's {name} to {to}");
        }
        for (to, idle) in idle_timeouts(&m.listener_body(&plain, name)) {
            let want = (to == cache).then_some(30_000);
            assert_eq!(idle, want, "plain's {name} to {to}");
        }
    }
    let seen: BTreeSet<String> = idle_timeouts(&m.listener_body(&quick, "virtualInbound"))
        .into_iter()
        .chain(idle_timeouts(&m.listener_body(&quick, "0.0.0.0_27017")))
        .map(|(to, _)| to)
        .collect();
    assert!(
        seen.contains("hcm")
            && seen.contains(&cache)
            && seen.contains(&outbound(27017, "", "db", "default")),
        "{seen:?}"
    );
    let gw_idle = idle_timeouts(&m.listener_body(&gw, "0.0.0.0_8080"));
    assert_eq!(gw_idle, vec![("hcm".to_string(), Some(2_500))]);

    // Without the metadata (reconnected), `quick` shares `plain`'s scope and listeners.
    let shared = ["0.0.0.0_9080", "0.0.0.0_27017", "virtualOutbound"];
    let versions = |m: &Mesh, p: &Proxy| -> Vec<String> {
        shared
            .iter()
            .map(|n| m.version(p, ResourceType::Listener, n))
            .collect()
    };
    assert_ne!(versions(&m, &quick), versions(&m, &plain));
    let unhurried = Proxy {
        idle_timeout_ns: None,
        ..quick.clone()
    };
    m.replace(px(&quick), px(&unhurried));
    assert_eq!(versions(&m, &unhurried), versions(&m, &plain));
    for (to, idle) in idle_timeouts(&m.listener_body(&unhurried, "virtualInbound")) {
        assert_eq!(idle, None, "virtualInbound to {to}");
    }
}

// ---------------------------------------------------------------------------------------------
// PASSTHROUGH load balancing; HTTP2 and GRPC gateway servers
// ---------------------------------------------------------------------------------------------

/// Proves that a DestinationRule's `loadBalancer.simple: PASSTHROUGH` makes the host's
/// clusters (the service's and each subset's) go to the connection's original destination
/// as Istio's do: type ORIGINAL_DST, lb policy CLUSTER_PROVIDED, no EDS config, no load
/// assignment and no endpoint metadata to match (no auto mTLS); without the rule the
/// clusters take their endpoints from EDS again.
#[test]
fn passthrough_load_balancing_sends_to_the_original_destination() {
    use envoy_types::pb::envoy::config::cluster::v3::cluster::LbPolicy;
    let mut m = Mesh::new();
    let client = sidecar_proxy("sleep-1", "default", "10.0.0.5", &[("app", "sleep")]);
    let rule = destination_rule_with(
        "default",
        "reviews",
        &host("reviews", "default"),
        &[("v1", "v1")],
        &[],
        Some(LoadBalancer::Passthrough),
        None,
    );
    m.insert(vec![
        px(&client),
        service("reviews", "default"),
        endpoint("reviews", "default", "10.2.0.1", true),
        workload("reviews-v1", "default", "10.2.0.1", &[("version", "v1")]),
        rule.clone(),
    ]);
    let names = [
        outbound(9080, "", "reviews", "default"),
        outbound(9080, "v1", "reviews", "default"),
    ];
    for name in &names {
        let c = m.cluster_body(&client, name);
        assert_eq!(
            c.cluster_discovery_type,
            Some(ClusterDiscoveryType::Type(
                DiscoveryType::OriginalDst as i32
            )),
            "{name}: {c:?}"
        );
        assert_eq!(c.lb_policy, LbPolicy::ClusterProvided as i32, "{name}");
        assert!(c.eds_cluster_config.is_none(), "{name}: {c:?}");
        assert!(c.load_assignment.is_none(), "{name}: {c:?}");
        assert!(c.lb_config.is_none(), "{name}: {c:?}");
        assert!(c.transport_socket_matches.is_empty(), "{name}: {c:?}");
    }

    m.retract(vec![rule]);
    let c = m.cluster_body(&client, &names[0]);
    assert_eq!(
        c.cluster_discovery_type,
        Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32))
    );
    assert_eq!(c.lb_policy, LbPolicy::LeastRequest as i32);
    assert_eq!(m.eds_addresses(&client, &names[0]), set(&["10.2.0.1:9080"]));
}

/// Proves that Gateway servers of protocol HTTP2 and GRPC are served as an HTTP server is
/// (Istio treats every HTTP protocol alike at a gateway): each port gets a listener
/// `0.0.0.0_PORT` whose connection manager takes HTTP/1.1 and HTTP/2 (codec AUTO: gRPC and
/// HTTP/2 clients speak it in cleartext without an upgrade) and names route configuration
/// `http.PORT`, whose virtual host sends the VirtualService's requests to its destination.
#[test]
fn gateway_http2_and_grpc_servers_serve_http_routes() {
    use envoy_types::pb::envoy::config::listener::v3::filter::ConfigType;
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
        http_connection_manager::{CodecType, RouteSpecifier},
        HttpConnectionManager,
    };
    let mut m = Mesh::new();
    let ingress = router_proxy(
        "istio-ingressgateway-abc",
        "istio-system",
        "10.1.0.9",
        &[("istio", "ingressgateway")],
    );
    let Record::Gateway(mut gw) = gateway(
        "default",
        "bookinfo-gateway",
        &[("istio", "ingressgateway")],
        &[(8081, None), (8082, None)],
    ) else {
        unreachable!("gateway() makes gateways")
    };
    gw.servers[0].protocol = Protocol::Http2;
    gw.servers[0].port_name = "http2".into();
    gw.servers[1].protocol = Protocol::Grpc;
    gw.servers[1].port_name = "grpc".into();
    m.insert(vec![
        service("productpage", "default"),
        Record::Gateway(gw),
        virtual_service(
            "default",
            "bookinfo",
            &["bookinfo.example.com"],
            &["default/bookinfo-gateway"],
            &host("productpage", "default"),
        ),
        px(&ingress),
    ]);
    assert_eq!(
        m.listeners(&ingress),
        set(&["0.0.0.0_8081", "0.0.0.0_8082"])
    );
    assert_eq!(m.routes(&ingress), set(&["http.8081", "http.8082"]));
    for port in [8081, 8082] {
        let listener = m.listener_body(&ingress, &format!("0.0.0.0_{port}"));
        let hcm: Vec<HttpConnectionManager> = listener
            .filter_chains
            .iter()
            .flat_map(|c| &c.filters)
            .filter_map(|f| match &f.config_type {
                Some(ConfigType::TypedConfig(any))
                    if any.type_url.ends_with(".HttpConnectionManager") =>
                {
                    HttpConnectionManager::decode(&any.value[..]).ok()
                }
                _ => None,
            })
            .collect();
        assert_eq!(hcm.len(), 1, "{port}: {listener:?}");
        assert_eq!(hcm[0].codec_type, CodecType::Auto as i32, "{port}");
        let Some(RouteSpecifier::Rds(rds)) = &hcm[0].route_specifier else {
            panic!("{port}: routes by RDS: {:?}", hcm[0]);
        };
        assert_eq!(rds.route_config_name, format!("http.{port}"));
        let vhosts = m.vhost_clusters(&ingress, &format!("http.{port}"));
        assert_eq!(
            vhosts.get(&format!("bookinfo.example.com:{port}")),
            Some(&outbound(9080, "", "productpage", "default")),
            "{port}: {vhosts:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// ExternalName aliases and resolution NONE
// ---------------------------------------------------------------------------------------------

/// A Kubernetes ExternalName Service `name.ns` naming `target`.
fn external_name(name: &str, ns: &str, target: &str) -> Record {
    let Record::Service(mut s) = service(name, ns) else {
        unreachable!()
    };
    s.alias_for = Some(target.to_string());
    s.resolution = Resolution::Dns;
    s.mesh_external = true;
    Record::Service(s)
}

impl Mesh {
    /// The domains of each virtual host of route configuration `name`, by virtual host name.
    fn vhost_domains(&self, proxy: &Proxy, name: &str) -> BTreeMap<String, Vec<String>> {
        use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
        let version = self.version(proxy, ResourceType::Route, name);
        let (body, _) = &self.bodies[&(ResourceType::Route, name.to_string(), version)];
        let rc = RouteConfiguration::decode(&body.body.0[..]).expect("a RouteConfiguration");
        rc.virtual_hosts
            .into_iter()
            .map(|vh| (vh.name, vh.domains))
            .collect()
    }
}

/// An ExternalName Service is an alias of the host it names (Istio 1.21 and later): it has
/// no cluster of its own, the named service's virtual host answers to the alias's names (in
/// every form the client's namespace may use) and routes where that service routes; a chain
/// of aliases resolves to its end, a loop and a missing target to nothing. A route naming the
/// alias goes to the named host's cluster.
#[test]
fn external_name_services_are_aliases_of_the_host_they_name() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("client", "default", "10.0.9.1", &[("app", "client")]);
    m.insert(vec![
        px(&client),
        service("reviews", "shop"),
        external_name("rv", "default", &host("reviews", "shop")),
    ]);
    let clusters = m.clusters(&client);
    assert!(
        clusters.contains(&outbound(9080, "", "reviews", "shop")),
        "{clusters:?}"
    );
    assert!(
        !clusters.iter().any(|c| c.contains("rv.default")),
        "the alias has no cluster of its own: {clusters:?}"
    );
    let domains = m.vhost_domains(&client, "9080");
    let reviews = &domains[&format!("{}:9080", host("reviews", "shop"))];
    for d in [
        "rv",
        "rv.default",
        "rv.default.svc",
        "rv.default.svc.cluster.local:9080",
    ] {
        assert!(reviews.contains(&d.to_string()), "{d}: {domains:?}");
    }
    assert!(
        !domains.keys().any(|k| k.starts_with("rv.")),
        "no virtual host of its own: {domains:?}"
    );

    // A chain (alias → alias → service) resolves to its end; a loop resolves to nothing.
    let chained = external_name("chained", "default", &host("rv", "default"));
    let looped = [
        external_name("l1", "default", &host("l2", "default")),
        external_name("l2", "default", &host("l1", "default")),
    ];
    m.insert(vec![chained.clone(), looped[0].clone(), looped[1].clone()]);
    let domains = m.vhost_domains(&client, "9080");
    let all: Vec<&String> = domains.values().flatten().collect();
    assert!(all.contains(&&"chained".to_string()), "{domains:?}");
    assert!(
        !all.iter()
            .any(|d| d.starts_with("l1") || d.starts_with("l2")),
        "{domains:?}"
    );

    // A route naming the alias goes to the named host's cluster.
    m.insert(vec![virtual_service(
        "default",
        "to-alias",
        &[&host("reviews", "shop")],
        &[],
        &host("rv", "default"),
    )]);
    let to = m.vhost_clusters(&client, "9080");
    assert_eq!(
        to[&format!("{}:9080", host("reviews", "shop"))],
        outbound(9080, "", "reviews", "shop"),
        "{to:?}"
    );

    // Without the service it names, an alias adds nothing: its names are unknown hosts.
    m.retract(vec![service("reviews", "shop")]);
    assert!(
        !m.clusters(&client).iter().any(|c| c.contains("reviews")),
        "{:?}",
        m.clusters(&client)
    );
    assert!(
        !m.routes(&client).contains("9080"),
        "{:?}",
        m.routes(&client)
    );
}

/// An ExternalName Service `name.ns` naming `target` that declares `ports` (HTTP).
fn external_name_ports(name: &str, ns: &str, target: &str, ports: &[u16]) -> Record {
    let Record::Service(mut s) = external_name(name, ns, target) else {
        unreachable!()
    };
    s.ports = ports
        .iter()
        .map(|p| ServicePort {
            name: format!("http-{p}"),
            port: *p,
            protocol: Protocol::Http,
        })
        .collect();
    Record::Service(s)
}

/// A route destination without a port that names an ExternalName alias goes where Istio's
/// `GetDestinationCluster` sends it. A sidecar's route configuration for port `p` knows each
/// service cut down to `p`: an alias that declares `p` goes to the host it names at `p`
/// (whatever its other ports), one that does not keeps its own host, which has no cluster
/// (Envoy answers 503). A gateway knows the whole alias: its only port, else the port the
/// request arrived on — never the named host's only port.
#[test]
fn alias_destinations_without_a_port_take_the_alias_port_or_the_request_port() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("client", "default", "10.0.9.1", &[("app", "client")]);
    let ingress = router_proxy(
        "ingress",
        "istio-system",
        "10.0.9.2",
        &[("istio", "ingress")],
    );
    let Record::Service(mut front) = service("front", "default") else {
        unreachable!()
    };
    front.ports[0].port = 8080;
    let reviews = host("reviews", "shop");
    m.insert(vec![
        px(&client),
        px(&ingress),
        Record::Service(front),
        service("reviews", "shop"),
        external_name_ports("none", "default", &reviews, &[]),
        external_name_ports("one", "default", &reviews, &[9080]),
        external_name_ports("many", "default", &reviews, &[8080, 9080]),
        gateway(
            "istio-system",
            "gw",
            &[("istio", "ingress")],
            &[(8080, None)],
        ),
    ]);
    let front_vhost = format!("{}:8080", host("front", "default"));
    // (alias, the sidecar's cluster on port 8080, the gateway's on port 8080)
    let cases = [
        (
            "none",
            outbound(8080, "", "none", "default"),
            outbound(8080, "", "reviews", "shop"),
        ),
        (
            "one",
            outbound(8080, "", "one", "default"),
            outbound(9080, "", "reviews", "shop"),
        ),
        (
            "many",
            outbound(8080, "", "reviews", "shop"),
            outbound(8080, "", "reviews", "shop"),
        ),
    ];
    for (alias, sidecar_cluster, gateway_cluster) in cases {
        let vss = [
            virtual_service(
                "default",
                "front",
                &[&host("front", "default")],
                &[],
                &host(alias, "default"),
            ),
            virtual_service(
                "istio-system",
                "edge",
                &["edge.example.com"],
                &["istio-system/gw"],
                &host(alias, "default"),
            ),
        ];
        m.insert(vss.to_vec());
        let to = m.vhost_clusters(&client, "8080");
        assert_eq!(
            to.get(&front_vhost),
            Some(&sidecar_cluster),
            "{alias}: {to:?}"
        );
        let to = m.vhost_clusters(&ingress, "http.8080");
        assert_eq!(
            to.get("edge.example.com:8080"),
            Some(&gateway_cluster),
            "{alias}: {to:?}"
        );
        m.retract(vss.to_vec());
    }
    // The sidecar's route for port 9080 (the VirtualService now governs reviews) sends a
    // destination naming `one` to the named host at 9080: `one` declares it.
    m.insert(vec![virtual_service(
        "default",
        "to-one",
        &[&reviews],
        &[],
        &host("one", "default"),
    )]);
    let to = m.vhost_clusters(&client, "9080");
    assert_eq!(
        to.get(&format!("{reviews}:9080")),
        Some(&outbound(9080, "", "reviews", "shop")),
        "{to:?}"
    );
}

/// A VirtualService naming an ExternalName alias's own host governs the alias's names on
/// the ports the alias declares, as Istio's sidecars give it: the alias is a service of the
/// route configuration of such a port (`servicesByName`), so the VirtualService's virtual
/// host `alias:port` takes the alias's names and routes them, and the named service's
/// virtual host keeps its own; VirtualServices build their virtual hosts in order, so where
/// the named service's own VirtualService comes first (Istio: by creation time; meshflow: by
/// key) it keeps the alias's names. An alias without the port leaves its names with the
/// named service.
#[test]
fn a_virtual_service_of_an_alias_host_governs_the_alias_names_on_its_ports() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("client", "default", "10.0.9.1", &[("app", "client")]);
    let reviews = host("reviews", "shop");
    let rv = host("rv", "default");
    let alias = external_name_ports("rv", "default", &reviews, &[9080]);
    let alias_vs = virtual_service("default", "m-rv", &[&rv], &[], &host("ratings", "shop"));
    m.insert(vec![
        px(&client),
        service("reviews", "shop"),
        service("ratings", "shop"),
        alias.clone(),
        alias_vs.clone(),
    ]);
    let rv_vhost = format!("{rv}:9080");
    let reviews_vhost = format!("{reviews}:9080");
    let to = m.vhost_clusters(&client, "9080");
    assert_eq!(
        to.get(&rv_vhost),
        Some(&outbound(9080, "", "ratings", "shop")),
        "{to:?}"
    );
    let domains = m.vhost_domains(&client, "9080");
    for d in [
        "rv",
        "rv.default",
        "rv.default.svc",
        &rv,
        &format!("{rv}:9080"),
    ] {
        assert!(
            domains[&rv_vhost].contains(&d.to_string()),
            "{d}: {domains:?}"
        );
        assert!(
            !domains[&reviews_vhost].contains(&d.to_string()),
            "{d}: {domains:?}"
        );
    }
    assert!(!m.clusters(&client).iter().any(|c| c.contains("rv.default")));

    // The named service's own VirtualService comes first (by key): it keeps the names.
    let first = virtual_service("default", "a-reviews", &[&reviews], &[], &reviews);
    m.insert(vec![first.clone()]);
    let domains = m.vhost_domains(&client, "9080");
    assert!(!domains.contains_key(&rv_vhost), "{domains:?}");
    assert!(
        domains[&reviews_vhost].contains(&"rv".to_string()),
        "{domains:?}"
    );
    // It comes after: the alias's VirtualService has them again.
    m.replace(
        first,
        virtual_service("default", "z-reviews", &[&reviews], &[], &reviews),
    );
    let domains = m.vhost_domains(&client, "9080");
    assert!(
        domains[&rv_vhost].contains(&"rv".to_string()),
        "{domains:?}"
    );

    // An alias that does not declare the port: its VirtualService does not govern it there.
    m.replace(
        alias,
        external_name_ports("rv", "default", &reviews, &[8080]),
    );
    let domains = m.vhost_domains(&client, "9080");
    assert!(!domains.contains_key(&rv_vhost), "{domains:?}");
    assert!(
        domains[&reviews_vhost].contains(&"rv".to_string()),
        "{domains:?}"
    );
}

/// Istio resolves a chain of ExternalName aliases of any length (`resolveServiceAliases`
/// walks it until it ends or comes back to a host already seen): the first alias of a chain
/// of 40 answers at the service the chain ends at; closing the chain into a loop takes every
/// name of it away.
#[test]
fn a_long_chain_of_aliases_resolves_to_its_end() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("client", "default", "10.0.9.1", &[("app", "client")]);
    let chain: Vec<Record> = (0..40)
        .map(|i| {
            let next = if i == 39 {
                host("reviews", "shop")
            } else {
                host(&format!("a{}", i + 1), "default")
            };
            external_name(&format!("a{i}"), "default", &next)
        })
        .collect();
    m.insert(vec![px(&client), service("reviews", "shop")]);
    m.insert(chain.clone());
    let domains = m.vhost_domains(&client, "9080");
    let reviews = &domains[&format!("{}:9080", host("reviews", "shop"))];
    for d in ["a0", "a0.default", "a39.default.svc.cluster.local"] {
        assert!(reviews.contains(&d.to_string()), "{d}: {domains:?}");
    }
    // The last alias names the first: a loop of 40, which resolves to nothing.
    m.replace(
        chain[39].clone(),
        external_name("a39", "default", &host("a0", "default")),
    );
    let domains = m.vhost_domains(&client, "9080");
    let reviews = &domains[&format!("{}:9080", host("reviews", "shop"))];
    assert!(
        !reviews
            .iter()
            .any(|d| d.starts_with("a0") || d.starts_with("a39")),
        "{domains:?}"
    );
}

/// An ExternalName alias that resolves to no service is reported on the Service at
/// `spec.externalName` (`MF0015`, a warning: its names are unknown hosts, as in Istio), and
/// so is each VirtualService destination naming an alias whose named host has no cluster
/// (no service, or another alias: destinations follow one hop) — requests there are
/// answered 503. The findings go when the named host appears.
#[test]
fn aliases_resolving_to_no_service_are_reported() {
    let mut m = Mesh::new();
    let reviews = host("reviews", "shop");
    m.insert(vec![
        service("front", "default"),
        external_name("rv", "default", &reviews),
        external_name("chained", "default", &host("rv", "default")),
        virtual_service(
            "default",
            "to-rv",
            &[&host("front", "default")],
            &[],
            &host("rv", "default"),
        ),
        virtual_service(
            "default",
            "to-chained",
            &["chained.example.com"],
            &[],
            &host("chained", "default"),
        ),
    ]);
    let found: BTreeMap<(String, String), String> = m
        .errors
        .keys()
        .filter(|e| e.code == ErrorCode::AliasUnresolved)
        .map(|e| {
            (
                (format!("{:?}", e.object.kind), e.object.name.clone()),
                e.message.clone(),
            )
        })
        .collect();
    let keys: Vec<&(String, String)> = found.keys().collect();
    assert_eq!(found.len(), 4, "{found:#?}");
    let msg = |kind: &str, name: &str| {
        found
            .iter()
            .find(|((k, n), _)| k == kind && n == name)
            .map(|(_, m)| m.clone())
            .unwrap_or_else(|| panic!("{kind} {name}: {keys:?}"))
    };
    assert!(msg("Service", "rv").starts_with("spec.externalName: host reviews.shop"));
    assert!(msg("Service", "chained").starts_with("spec.externalName: the chain"));
    assert!(msg("VirtualService", "to-rv").starts_with("spec.http[0].route[0].destination.host"));
    assert!(msg("VirtualService", "to-chained").contains("another alias"));
    assert!(ErrorCode::AliasUnresolved.is_warning());
    assert_eq!(ErrorCode::AliasUnresolved.message_code().0, "MF0015");

    // The named host appears: the aliases resolve; a destination naming an alias of an
    // alias still has no cluster (one hop), as in Istio.
    m.insert(vec![service("reviews", "shop")]);
    let left: Vec<&ConfigError> = m
        .errors
        .keys()
        .filter(|e| e.code == ErrorCode::AliasUnresolved)
        .collect();
    assert_eq!(left.len(), 1, "{left:#?}");
    assert_eq!(left[0].object.name, "to-chained");
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
