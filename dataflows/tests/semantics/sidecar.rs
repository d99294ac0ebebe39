//! Which services and VirtualServices a proxy sees: Sidecar egress hosts (per egress
//! listener too) and which Sidecar applies, `exportTo`, and the mesh config's defaults
//! (`defaultServiceExportTo`, `rootNamespace`); Sidecars that tie for a workload.

use crate::support::{
    gateway_errors, host, mesh_settings, outbound, px, service, service_exported, set, sidecar,
    sidecar_proxy, virtual_service, workload, Mesh,
};
use dataflows::model::*;
use std::collections::BTreeSet;

/// The outbound cluster names (default subset, port 9080) among `clusters`, i.e. which
/// services are visible.
fn visible(clusters: &BTreeSet<String>) -> BTreeSet<String> {
    clusters
        .iter()
        .filter_map(|c| c.strip_prefix("outbound|9080||"))
        .map(|h| h.trim_end_matches(".svc.cluster.local").to_string())
        .collect()
}

/// Three services in three namespaces: `reviews.default`, `ratings.other`, `details.third`.
fn three_services() -> Vec<Record> {
    vec![
        service("reviews", "default"),
        service("ratings", "other"),
        service("details", "third"),
    ]
}

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

/// Sidecars that leave a workload to a tie-break are reported on each, naming the others:
/// two selecting one Pod (`MF0028`), two namespace defaults (`MF0029`); a Sidecar whose
/// selector another Pod matches, or a default in another namespace, says nothing; removing
/// one retracts the messages.
#[test]
fn sidecars_that_tie_are_reported_until_one_goes() {
    let mut m = Mesh::new();
    let a = sidecar("default", "a", Some(&[("app", "reviews")]), &["./*"]);
    let b = sidecar("default", "b", Some(&[("version", "v1")]), &["./*"]);
    let other = sidecar("default", "c", Some(&[("app", "ratings")]), &["./*"]);
    let wide1 = sidecar("default", "wide1", None, &["./*"]);
    let wide2 = sidecar("default", "wide2", None, &["./*"]);
    let elsewhere = sidecar("other", "wide", None, &["./*"]);
    m.insert(vec![
        workload(
            "reviews-v1",
            "default",
            "10.0.0.1",
            &[("app", "reviews"), ("version", "v1")],
        ),
        workload("ratings-1", "default", "10.0.0.2", &[("app", "ratings")]),
        a.clone(),
        b,
        other,
        wide1,
        wide2.clone(),
        elsewhere,
    ]);
    let conflicts = gateway_errors(&m, ErrorCode::SidecarSelectorsConflict);
    assert_eq!(
        conflicts,
        vec![
            "Sidecar/default/a: the Sidecars [a, b] of namespace default select the same \
             workload (Pod reviews-v1): only one applies (the first by name)"
                .to_string(),
            "Sidecar/default/b: the Sidecars [a, b] of namespace default select the same \
             workload (Pod reviews-v1): only one applies (the first by name)"
                .to_string(),
        ]
    );
    let wide = gateway_errors(&m, ErrorCode::SidecarsWithoutSelector);
    assert_eq!(wide.len(), 2, "{wide:?}");
    assert!(wide[0].starts_with("Sidecar/default/wide1: the Sidecars [wide1, wide2]"));
    m.retract(vec![a, wide2]);
    assert!(gateway_errors(&m, ErrorCode::SidecarSelectorsConflict).is_empty());
    assert!(gateway_errors(&m, ErrorCode::SidecarsWithoutSelector).is_empty());
}

/// A Sidecar whose `workloadSelector` matches no workload of its namespace is a warning
/// (Istio's IST0101 for a selector, MF0020 here); a workload of another namespace with the
/// labels does not count; once one of its namespace (a Pod, or a connected proxy) matches,
/// the warning goes.
#[test]
fn a_sidecar_selecting_no_workload_is_a_warning_until_one_matches() {
    let mut m = Mesh::new();
    m.insert(vec![
        sidecar("default", "db", Some(&[("app", "db")]), &["./*"]),
        workload("db-0", "other", "10.0.3.1", &[("app", "db")]),
    ]);
    assert_eq!(
        gateway_errors(&m, ErrorCode::SidecarSelectsNothing),
        vec![
            "Sidecar/default/db: spec.workloadSelector: matches no workload (Pod or \
             WorkloadEntry) of namespace default: the Sidecar applies to nothing yet (IST0101 \
             ReferencedResourceNotFound)"
                .to_string()
        ]
    );
    assert_eq!(
        ErrorCode::SidecarSelectsNothing.message_code(),
        ("MF0020", "NoMatchingWorkloadsFound")
    );
    assert!(ErrorCode::SidecarSelectsNothing.is_warning());
    // A connected proxy the selector matches is a workload too (files may hold no Pods).
    let connected = px(&sidecar_proxy(
        "db-2",
        "default",
        "10.0.3.3",
        &[("app", "db")],
    ));
    m.insert(vec![connected.clone()]);
    assert!(gateway_errors(&m, ErrorCode::SidecarSelectsNothing).is_empty());
    m.retract(vec![connected]);
    assert_eq!(
        gateway_errors(&m, ErrorCode::SidecarSelectsNothing).len(),
        1
    );
    m.insert(vec![workload(
        "db-1",
        "default",
        "10.0.3.2",
        &[("app", "db")],
    )]);
    assert!(gateway_errors(&m, ErrorCode::SidecarSelectsNothing).is_empty());
}
