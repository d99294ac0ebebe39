//! The sidecar scenario of the `reviews` fixture (tests/envoy/sidecar.rs, envoy/faults.rs,
//! debug/envoy.rs): routes by header, prefix, method and weight, subsets coming and going,
//! redirects, the outbound traffic policy, hosts outside the registry and wildcard hosts, and
//! what an invalid edit leaves in place.

use crate::fixtures::{pod, reviews_mesh, sidecar_setup, via_sidecar, JASON, PORT};
use crate::support::reviews::{client_sidecar_yaml, Binding, Reviews, FQDN};
use crate::support::{write_config, ProxyNode, TestDir};
use crate::{assert_holds_all, assert_routes_to, assert_status, eds_names, routes_to, Mesh};
use dataflows::model::MeshConfig;
use dataflows::simulate::{Call, NoMatch};
use std::path::Path;

/// Mirrors `envoy/sidecar.rs` step 1 (`sidecar_follows_config_changes_over_{delta,sotw}_ads`):
/// without a VirtualService the sidecar's listener `127.0.0.1_PORT` and route configuration
/// `PORT` send `/reviews/1` to the whole `reviews` cluster (both pods), under every host alias;
/// the proxy holds the EDS assignments of the service and of subsets v1 and v2.
#[test]
fn sidecar_default_route_reaches_both_pods_under_every_alias() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-default", &["v1", "v2"]);
    let both = [pod(&reviews, "v1"), pod(&reviews, "v2")];
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(o.listener, Some(format!("127.0.0.1_{PORT}")));
    assert_eq!(
        o.captured_by, None,
        "INTERCEPTION_MODE NONE: no virtualOutbound"
    );
    assert_eq!(o.route_config, Some(PORT.to_string()));
    assert_eq!(o.virtual_host, Some(format!("{FQDN}:{PORT}")));
    assert_routes_to(&o, &reviews.cluster(""), &both);
    for alias in [
        "reviews.default".to_owned(),
        FQDN.to_owned(),
        format!("reviews:{PORT}"),
        format!("{FQDN}:{PORT}"),
    ] {
        let o = mesh.send(&proxy, &via_sidecar(&alias, "/"));
        assert_routes_to(&o, &reviews.cluster(""), &both);
    }
    assert_holds_all(
        "EDS assignments",
        &eds_names(&mesh.proxy(&proxy)),
        &["", "v1", "v2"].map(|s| reviews.cluster(s)),
    );
}

/// Mirrors `envoy/sidecar.rs` step 2: with VirtualService `reviews` (jason → v2, `/reviews` →
/// v1 100 / v2 0), `end-user: jason` reaches only v2, `/reviews/1` only v1 (the 0-weight
/// subset is not a candidate), and `/ratings/1` matches no route: 404.
#[test]
fn sidecar_header_and_prefix_routes_pick_subsets() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-subsets", &["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 100), ("v2", 0)]);
    let jason = mesh.send(
        &proxy,
        &via_sidecar("reviews", "/reviews/1").header(JASON.0, JASON.1),
    );
    assert_eq!(jason.route.as_ref().map(|r| r.name.as_str()), Some("jason"));
    assert_routes_to(&jason, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let split = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(
        split.route.as_ref().map(|r| r.name.as_str()),
        Some("reviews-split")
    );
    assert_routes_to(&split, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
    let unmatched = mesh.send(&proxy, &via_sidecar("reviews", "/ratings/1"));
    assert_eq!(unmatched.result, Err(NoMatch::NoRoute));
    assert_status(&unmatched, 404);
}

/// Mirrors `envoy/sidecar.rs` step 3 and `envoy/faults.rs`
/// (`restart_under_load_fails_no_request_and_delta_resumes_with_only_changes`): the split
/// shifted to v1 0 / v2 100 sends `/reviews/1` only to v2.
#[test]
fn sidecar_weight_shift_moves_reviews_to_v2() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-shift", &["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 100), ("v2", 0)]);
    let before = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(before.cluster(), Some(reviews.cluster("v1").as_str()));
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 0), ("v2", 100)]);
    let after = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&after, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
}

/// Mirrors `envoy/sidecar.rs` steps 4–5: a third version (pod, endpoint, subset) takes all of
/// `/reviews` while jason stays on v2; when v3's endpoint leaves the slice its subset has no
/// endpoint and Envoy answers 503 (v3 gets nothing).
#[test]
fn sidecar_new_subset_v3_takes_traffic_then_answers_503_without_endpoints() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-v3", &["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 0), ("v2", 100)]);
    mesh.sync_clean();
    reviews.write_pods(&["v1", "v2", "v3"]);
    reviews.write_endpoints(&["v1", "v2", "v3"]);
    reviews.write_destination_rule(&["v1", "v2", "v3"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v3", 100)]);
    let v3 = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&v3, &reviews.cluster("v3"), &[pod(&reviews, "v3")]);
    let jason = mesh.send(
        &proxy,
        &via_sidecar("reviews", "/reviews/1").header(JASON.0, JASON.1),
    );
    assert_routes_to(&jason, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);

    reviews.write_endpoints(&["v1", "v2"]);
    let gone = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(gone.cluster(), Some(reviews.cluster("v3").as_str()));
    assert!(gone.endpoints().is_empty(), "{gone:#?}");
    assert_status(&gone, 503);
}

/// Istio's match conditions beyond URI and headers: `method`, `queryParams`, `ignoreUriCase`,
/// `withoutHeaders` (empty: the header must be absent), and `port` (a match for another port
/// never applies here, so a route with only that match is not on this port at all).
#[test]
fn sidecar_method_query_case_absence_and_port_conditions() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-conditions", &["v1", "v2"]);
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: conditions, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - match: [{method: {exact: POST}}]\n    route: [{destination: {host: reviews, subset: v2}}]\n  - match: [{queryParams: {v: {exact: '2'}}}]\n    route: [{destination: {host: reviews, subset: v2}}]\n  - match: [{uri: {prefix: /REVIEWS}, ignoreUriCase: true, withoutHeaders: {x-canary: {}}}]\n    route: [{destination: {host: reviews, subset: v1}}]\n  - match: [{port: 1}]\n    route: [{destination: {host: reviews, subset: v2}}]\n";
    write_config(&mesh.config, "conditions.yaml", vs);
    let get = |path: &str| via_sidecar("reviews", path);
    let o = mesh.send(&proxy, &get("/reviews/1"));
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
    let o = mesh.send(&proxy, &get("/reviews/1").header("x-canary", "yes"));
    assert_status(&o, 404);
    let o = mesh.send(&proxy, &get("/x").method("POST"));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let o = mesh.send(&proxy, &get("/x?v=2"));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let o = mesh.send(&proxy, &get("/x?v=3"));
    assert_status(&o, 404);
    let o = mesh.send(&proxy, &get("/x"));
    assert_status(&o, 404);
}

/// `withoutHeaders` with a value matches a request that lacks the header (it does not carry
/// that value), as Istio translates it (`treat_missing_header_as_empty`): a guard route
/// answering 403 to every request without the right key stops a request with no key at all,
/// and only the right key reaches the service.
#[test]
fn without_headers_value_match_takes_requests_lacking_the_header() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-without-value", &["v1"]);
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: guard, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - match: [{withoutHeaders: {x-api-key: {exact: s3cret}}}]\n    directResponse: {status: 403}\n  - route: [{destination: {host: reviews, subset: v1}}]\n";
    write_config(&mesh.config, "guard.yaml", vs);
    let get = || via_sidecar("reviews", "/reviews/1");
    assert_status(&mesh.send(&proxy, &get()), 403);
    assert_status(&mesh.send(&proxy, &get().header("x-api-key", "guess")), 403);
    let o = mesh.send(&proxy, &get().header("x-api-key", "s3cret"));
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);

    // Istio's catch-all forms, `regex: "*"` and an empty prefix, mean "present": the
    // request without the header is the one answered 403.
    for catch_all in ["{regex: \"*\"}", "{prefix: \"\"}"] {
        write_config(
            &mesh.config,
            "guard.yaml",
            &vs.replace("{exact: s3cret}", catch_all),
        );
        assert_status(&mesh.send(&proxy, &get()), 403);
        let o = mesh.send(&proxy, &get().header("x-api-key", "anything"));
        assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
        assert!(mesh.errors.is_empty(), "{catch_all}: {:?}", mesh.errors);
    }
}

/// Redirects and direct responses are answered by the proxy: the simulation sees the status
/// Envoy sends without any upstream (tests/envoy/route_actions.rs checks the same in Envoy).
#[test]
fn sidecar_redirect_and_direct_response_answer_without_an_upstream() {
    let (mut mesh, _reviews, proxy) = sidecar_setup("sidecar-answers", &["v1", "v2"]);
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: answers, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - match: [{uri: {exact: /old}}]\n    redirect: {uri: /new, redirectCode: 308}\n  - match: [{uri: {exact: /health}}]\n    directResponse: {status: 204}\n";
    write_config(&mesh.config, "answers.yaml", vs);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/old"));
    assert_status(&o, 308);
    assert!(o.upstreams().is_empty(), "{o:#?}");
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/health"));
    assert_status(&o, 204);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/other"));
    assert_status(&o, 404);
}

/// `outboundTrafficPolicy.mode` of a namespace's Sidecar, for a captured sidecar: with
/// ALLOW_ANY (the default) a host outside the registry passes through to its original
/// destination; with REGISTRY_ONLY it does not (Istio's `block_all` virtual host answers
/// 502), and a connection to a port no service has goes to `BlackHoleCluster`.
#[test]
fn captured_sidecar_registry_only_blocks_unknown_hosts() {
    let mut mesh = Mesh::new("registry-only");
    let reviews = reviews_mesh(&mesh, PORT, &["v1"]);
    let proxy = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    ));
    let unknown = Call::get("unknown.example.com", PORT, "/").to_address("203.0.113.7");
    let other_port = Call::get("unknown.example.com", 5555, "/").to_address("203.0.113.7");
    let sidecar = |mode: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: default, namespace: default}}\nspec:\n  egress: [{{hosts: ['./*']}}]\n  outboundTrafficPolicy: {{mode: {mode}}}\n")
    };
    write_config(&mesh.config, "sidecar.yaml", &sidecar("ALLOW_ANY"));
    let o = mesh.send(&proxy, &unknown);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    let o = mesh.send(&proxy, &other_port);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    let known = mesh.send(
        &proxy,
        &Call::get("reviews", PORT, "/").to_address("203.0.113.7"),
    );
    assert_routes_to(&known, &reviews.cluster(""), &[pod(&reviews, "v1")]);

    write_config(&mesh.config, "sidecar.yaml", &sidecar("REGISTRY_ONLY"));
    let o = mesh.send(&proxy, &unknown);
    assert_status(&o, 502);
    let o = mesh.send(&proxy, &other_port);
    assert_eq!(o.cluster(), Some("BlackHoleCluster"), "{o:#?}");
    let known = mesh.send(
        &proxy,
        &Call::get("reviews", PORT, "/").to_address("203.0.113.7"),
    );
    assert_routes_to(&known, &reviews.cluster(""), &[pod(&reviews, "v1")]);
}

/// A VirtualService host that is no service's gets a virtual host of its own, as in Istio: an
/// alias written beside a service host (`reviews.example.com` beside `reviews`) routes on the
/// service's port through the sidecar's bound egress listener, where it answered 404 before.
#[test]
fn an_alias_beside_a_service_host_is_routed_by_the_virtual_service() {
    let (mut mesh, reviews, proxy) = sidecar_setup("vs-alias", &["v1", "v2"]);
    let alias = via_sidecar("reviews.example.com", "/reviews/1");
    assert_status(&mesh.send(&proxy, &alias), 404);
    write_config(
        &mesh.config,
        "alias.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: alias, namespace: default}\nspec:\n  hosts: [reviews, reviews.example.com]\n  http:\n  - route:\n    - destination: {host: reviews, subset: v2}\n",
    );
    let o = mesh.send(&proxy, &alias);
    assert_eq!(o.virtual_host, Some(format!("reviews.example.com:{PORT}")));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
}

/// A VirtualService whose only host is outside the registry (no ServiceEntry) routes that host
/// on a captured sidecar's port 80, as Istio does: the request that passed through to its
/// original destination goes to the VirtualService's destination instead, and passes through
/// again once the VirtualService is deleted. A destination without a port is taken at port 80
/// there (Istio's sidecars know services at the route configuration's port only), where
/// reviews has no cluster: 503 until the destination names reviews' port.
#[test]
fn a_virtual_service_for_a_host_outside_the_registry_routes_it_on_port_80() {
    let mut mesh = Mesh::new("vs-hostless");
    let reviews = reviews_mesh(&mesh, PORT, &["v1"]);
    write_config(
        &mesh.config,
        "web.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec:\n  selector: {app: web}\n  ports:\n  - {name: http, port: 80}\n",
    );
    let proxy = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    ));
    let legacy = Call::get("legacy.example.com", 80, "/reviews/1").to_address("203.0.113.7");
    let o = mesh.send(&proxy, &legacy);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    write_config(
        &mesh.config,
        "legacy.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: legacy, namespace: default}\nspec:\n  hosts: [legacy.example.com]\n  http:\n  - route:\n    - destination: {host: reviews}\n",
    );
    let o = mesh.send(&proxy, &legacy);
    assert_eq!(o.virtual_host.as_deref(), Some("legacy.example.com:80"));
    assert_eq!(
        o.cluster(),
        Some(format!("outbound|80||{FQDN}").as_str()),
        "{o:#?}"
    );
    assert_status(&o, 503);
    write_config(
        &mesh.config,
        "legacy.yaml",
        &format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: legacy, namespace: default}}\nspec:\n  hosts: [legacy.example.com]\n  http:\n  - route:\n    - destination: {{host: reviews, port: {{number: {PORT}}}}}\n"),
    );
    let o = mesh.send(&proxy, &legacy);
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);
    std::fs::remove_file(mesh.config.join("legacy.yaml")).expect("remove legacy.yaml");
    let o = mesh.send(&proxy, &legacy);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
}

/// The mesh config's `outboundTrafficPolicy.mode` for a captured sidecar with no mode of its
/// own, read by the mesh config source as `serve --mesh-config` does: REGISTRY_ONLY blocks a
/// host outside the registry (502, and `BlackHoleCluster` for a port no service has); a
/// namespace Sidecar that says ALLOW_ANY overrides it; one that says nothing does not.
#[test]
fn mesh_outbound_policy_applies_unless_the_sidecar_sets_its_own() {
    use meshflow::config::mesh::{mesh_config_key, MeshOverrides};
    use meshflow::sources::mesh::MeshState;
    let mut mesh = Mesh::new("mesh-registry-only");
    let reviews = reviews_mesh(&mesh, PORT, &["v1"]);
    let proxy = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    ));
    let mut state = MeshState::new(
        MeshConfig::default(),
        MeshOverrides::default(),
        mesh_config_key("", "mesh"),
        "mesh.yaml".into(),
        "files",
    );
    let mut set_mode = |mesh: &mut Mesh, mode: &str| {
        let yaml = format!("outboundTrafficPolicy: {{mode: {mode}}}\n");
        let report = state.update(&yaml, None).expect("a new config");
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        mesh.step(report.changes);
    };
    let unknown = Call::get("unknown.example.com", PORT, "/").to_address("203.0.113.7");
    let other_port = Call::get("unknown.example.com", 5555, "/").to_address("203.0.113.7");
    let known = Call::get("reviews", PORT, "/").to_address("203.0.113.7");

    set_mode(&mut mesh, "REGISTRY_ONLY");
    assert_status(&mesh.send(&proxy, &unknown), 502);
    let o = mesh.send(&proxy, &other_port);
    assert_eq!(o.cluster(), Some("BlackHoleCluster"), "{o:#?}");
    assert_routes_to(
        &mesh.send(&proxy, &known),
        &reviews.cluster(""),
        &[pod(&reviews, "v1")],
    );

    let sidecar = |mode: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: default, namespace: default}}\nspec:\n  egress: [{{hosts: ['./*']}}]\n{mode}")
    };
    write_config(
        &mesh.config,
        "sidecar.yaml",
        &sidecar("  outboundTrafficPolicy: {mode: ALLOW_ANY}\n"),
    );
    mesh.sync_clean();
    let o = mesh.send(&proxy, &unknown);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");

    write_config(&mesh.config, "sidecar.yaml", &sidecar(""));
    mesh.sync_clean();
    assert_status(&mesh.send(&proxy, &unknown), 502);

    set_mode(&mut mesh, "ALLOW_ANY");
    let o = mesh.send(&proxy, &other_port);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
}

/// Analysis across objects: a route to a subset no DestinationRule defines is reported (Envoy
/// answers 503 for it), naming the VirtualService, and the report goes when a rule defines it.
#[test]
fn a_route_to_an_undefined_subset_is_reported_until_a_rule_defines_it() {
    let (mut mesh, reviews, proxy) = sidecar_setup("undefined-subset", &["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v3", 100)]);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_status(&o, 503);
    mesh.assert_one_error(&[
        "VirtualService/default/reviews",
        "subset \"v3\"",
        "no DestinationRule",
    ]);
    reviews.write_destination_rule(&["v1", "v2", "v3"]);
    mesh.sync_clean();
    mesh.assert_no_errors();
}

/// Mirrors `envoy/sidecar.rs` steps 6–7: deleting the VirtualService restores the default
/// route over both pods; when v1's endpoint leaves, only v2 is behind it.
#[test]
fn sidecar_deleting_the_virtual_service_restores_the_default_route() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-delete", &["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v3", 100)]);
    let routed = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(routed.cluster(), Some(reviews.cluster("v3").as_str()));
    reviews.delete_virtual_service();
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(o.route.as_ref().map(|r| r.name.as_str()), Some("default"));
    assert_routes_to(
        &o,
        &reviews.cluster(""),
        &[pod(&reviews, "v1"), pod(&reviews, "v2")],
    );
    reviews.write_endpoints(&["v2"]);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v2")]);
}

/// Mirrors `debug/envoy.rs` (`debug_views_match_envoy_over_{delta,sotw}_ads`): with the split
/// v1 90 / v2 10, `/reviews/1` is a weighted route over both subsets, and subset v1's EDS
/// assignment holds exactly pod v1.
#[test]
fn sidecar_weighted_split_reports_both_subsets_with_their_weights() {
    let (mut mesh, reviews, proxy) = sidecar_setup("sidecar-weights", &["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 90), ("v2", 10)]);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(
        o.clusters(),
        [
            (reviews.cluster("v1"), Some(90)),
            (reviews.cluster("v2"), Some(10))
        ]
    );
    let v1 = &o.upstreams()[0];
    let addresses: Vec<&str> = v1.endpoints.iter().map(|e| e.address.as_str()).collect();
    assert_eq!(addresses, [pod(&reviews, "v1")]);
}

/// Mirrors `envoy/faults.rs` (`invalid_edits_and_atomic_directory_swaps_never_retract_valid_config`):
/// the directory is a ConfigMap-style volume (`..data` symlink); swapping in a VirtualService
/// whose weights add up to 150 is reported and leaves the last valid routes (`/reviews/1` → v1);
/// swapping in the fixed split moves it to v2.
#[test]
fn invalid_edit_keeps_the_last_valid_routes_and_the_fix_applies() {
    let dir = TestDir::new("routing-simulation-hiccups");
    let root = dir.subdir("config");
    let v1 = root.join("..v1");
    std::fs::create_dir_all(&v1).unwrap();
    let mut mesh = Mesh::over(dir, root.clone());
    let reviews = Reviews::new(60, PORT, &v1);
    reviews.write_service();
    reviews.write_pods(&["v1", "v2"]);
    reviews.write_endpoints(&["v1", "v2"]);
    reviews.write_destination_rule(&["v1", "v2"]);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 100), ("v2", 0)]);
    write_config(&v1, "sidecar.yaml", &client_sidecar_yaml(PORT));
    std::os::unix::fs::symlink("..v1", root.join("..data")).unwrap();
    for entry in std::fs::read_dir(&v1).unwrap() {
        let name = entry.unwrap().file_name();
        if !name.to_string_lossy().starts_with('.') {
            std::os::unix::fs::symlink(Path::new("..data").join(&name), root.join(&name)).unwrap();
        }
    }
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    );
    let proxy = mesh.connect(&node);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(o.cluster(), Some(reviews.cluster("v1").as_str()));

    // Swap in a copy whose VirtualService is invalid, then one with the fixed split.
    let vs = std::fs::read_to_string(v1.join("reviews-virtualservice.yaml")).unwrap();
    let swap_in = |version: &str, vs_text: &str| {
        let next = root.join(version);
        std::fs::create_dir_all(&next).unwrap();
        for entry in std::fs::read_dir(&v1).unwrap() {
            let e = entry.unwrap();
            std::fs::copy(e.path(), next.join(e.file_name())).unwrap();
        }
        std::fs::write(next.join("reviews-virtualservice.yaml"), vs_text).unwrap();
        std::os::unix::fs::symlink(version, root.join("..data_tmp")).unwrap();
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    };
    let broken = vs.replace("weight: 0", "weight: 50");
    assert_ne!(broken, vs);
    swap_in("..v2", &broken);
    mesh.sync();
    assert!(
        mesh.errors
            .iter()
            .any(|e| e.contains("weights add up to 150")),
        "the error is reported: {:?}",
        mesh.errors
    );
    let kept = mesh
        .proxy(&proxy)
        .simulate(&via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&kept, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);

    let fixed = vs
        .replace("weight: 100", "weight: X")
        .replace("weight: 0", "weight: 100")
        .replace("weight: X", "weight: 0");
    swap_in("..v3", &fixed);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
}

/// A mesh VirtualService whose host is a wildcard governs every service it covers, as
/// Istio's sidecars do: with ServiceEntries `a.example.com` and `b.example.com`, a request
/// for `a.example.com` follows the `*.example.com` VirtualService (to `reviews` v1), while
/// an exact VirtualService for `b.example.com` beats the wildcard for its host (to v2);
/// deleting the exact one hands `b.example.com` to the wildcard, deleting the wildcard
/// restores each entry's own default route.
#[test]
fn sidecar_wildcard_virtual_service_routes_the_hosts_it_covers() {
    let mut mesh = Mesh::new("wildcard-vs");
    let reviews = reviews_mesh(&mesh, PORT, &["v1", "v2"]);
    let proxy = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    ));
    let entry = |name: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  hosts: [{name}.example.com]\n  location: MESH_EXTERNAL\n  ports: [{{number: 80, name: http, protocol: HTTP}}]\n  resolution: DNS\n")
    };
    let vs = |name: &str, host: &str, subset: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  hosts: ['{host}']\n  http:\n  - route:\n    - destination: {{host: {FQDN}, subset: {subset}, port: {{number: {PORT}}}}}\n")
    };
    write_config(&mesh.config, "a.yaml", &entry("a"));
    write_config(&mesh.config, "b.yaml", &entry("b"));
    let call = |host: &str| Call::get(host, 80, "/").to_address("203.0.113.7");
    let o = mesh.send(&proxy, &call("a.example.com"));
    assert_eq!(o.cluster(), Some("outbound|80||a.example.com"), "{o:#?}");

    write_config(
        &mesh.config,
        "wild.yaml",
        &vs("wild", "*.example.com", "v1"),
    );
    write_config(
        &mesh.config,
        "exact.yaml",
        &vs("exact", "b.example.com", "v2"),
    );
    let v1 = reviews.cluster("v1");
    let v2 = reviews.cluster("v2");
    routes_to(
        &mut mesh,
        &proxy,
        &call("a.example.com"),
        &v1,
        &pod(&reviews, "v1"),
    );
    routes_to(
        &mut mesh,
        &proxy,
        &call("b.example.com"),
        &v2,
        &pod(&reviews, "v2"),
    );
    mesh.assert_no_errors();

    std::fs::remove_file(mesh.config.join("exact.yaml")).expect("remove exact.yaml");
    routes_to(
        &mut mesh,
        &proxy,
        &call("b.example.com"),
        &v1,
        &pod(&reviews, "v1"),
    );

    std::fs::remove_file(mesh.config.join("wild.yaml")).expect("remove wild.yaml");
    let o = mesh.send(&proxy, &call("b.example.com"));
    assert_eq!(o.cluster(), Some("outbound|80||b.example.com"), "{o:#?}");
}
