//! `meshflow mesh-gen`: the generated directory is valid for `meshflow validate`, and what the
//! file source reads from it is exactly `dataflows::synth::records` of the same shape without
//! its proxies (gateways included); the load generator's proxies and gateway proxies are
//! exactly synth's proxy records.

use dataflows::model::{MeshConfig, Record};
use dataflows::synth::{self, Shape};
use meshflow::bench::loadgen;
use meshflow::bench::mesh_gen::{self, MeshState};
use meshflow::sources::files::FileSource;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn temp_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "meshflow-test-{label}-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn shape(sidecar_scoping: bool, vs_every: usize) -> Shape {
    Shape {
        services: 37,
        endpoints_per_service: 4,
        namespaces: 5,
        proxies: 23,
        vs_every,
        sidecar_scoping,
        shared_namespaces: 2,
        gateways: 0,
        gateway_vs_every: 10,
        authz_policies: 0,
        http_routes: 0,
    }
}

/// Records read by the file source, with multiplicity.
fn read(dir: &Path, mesh: &MeshConfig) -> BTreeMap<Record, isize> {
    let mut source = FileSource::new(dir, mesh.clone());
    let scan = source.rescan();
    assert!(scan.errors.is_empty(), "errors: {:#?}", scan.errors);
    let mut out = BTreeMap::new();
    for (r, d) in scan.changes {
        *out.entry(r).or_default() += d;
    }
    out
}

fn synth_without_proxies(shape: &Shape, mesh: &MeshConfig) -> BTreeMap<Record, isize> {
    let mut out = BTreeMap::new();
    for r in synth::records(shape, mesh) {
        if !matches!(r, Record::Proxy(_)) {
            *out.entry(r).or_default() += 1;
        }
    }
    out
}

#[test]
fn generated_configs_read_back_as_synth_records() {
    let mesh = MeshConfig::default();
    for (scoping, vs_every, gateways, policies, routes) in [
        (true, 4, 0, 0, 0),
        (false, 3, 0, 0, 0),
        (true, 0, 0, 30, 0),
        (true, 4, 2, 0, 0),
        // With the Gateway API Gateway and an HTTPRoute for 20 of the 37 services.
        (true, 4, 2, 0, 20),
        // HTTPRoutes without gateway proxies: none generated.
        (true, 4, 0, 0, 20),
    ] {
        let mut shape = shape(scoping, vs_every);
        shape.gateways = gateways;
        shape.authz_policies = policies;
        shape.http_routes = routes;
        shape.gateway_vs_every = 3;
        let dir = temp_dir("meshgen");
        let state = MeshState::new(shape.clone(), mesh.clone()).unwrap();
        mesh_gen::write_mesh(&dir, &state, false, |_, _| {}).unwrap();
        let read = read(&dir, &mesh);
        let expected = synth_without_proxies(&shape, &mesh);
        assert_eq!(
            read.len(),
            expected.len(),
            "record count (scoping {scoping}, vs_every {vs_every})"
        );
        for (r, n) in &expected {
            assert_eq!(read.get(r), Some(n), "missing or duplicated: {r:?}");
        }
        assert_eq!(read, expected);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The `authz-policy` scenario's edit reads back as the policy's next revision, and the
/// `peer-auth` one as a namespace-wide STRICT PeerAuthentication.
#[test]
fn security_edits_read_back_as_their_records() {
    let mesh = MeshConfig::default();
    let mut shape = shape(true, 4);
    shape.authz_policies = 5;
    let dir = temp_dir("meshgen-security");
    let mut state = MeshState::new(shape.clone(), mesh.clone()).unwrap();
    mesh_gen::write_mesh(&dir, &state, false, |_, _| {}).unwrap();
    let edit = state.edit_authz(3);
    mesh_gen::apply_edit(&dir, &edit).unwrap();
    let peer = state.peer_authentication(4, Some("STRICT"));
    mesh_gen::apply_edit(&dir, &peer).unwrap();
    let read = read(&dir, &mesh);
    assert!(read.contains_key(&synth::authz_policy(3, 1, &shape, &mesh)));
    assert!(!read.contains_key(&synth::authz_policy(3, 0, &shape, &mesh)));
    let strict = read.keys().any(|r| {
        matches!(r, Record::Security(p) if p.key.namespace == "ns-4"
        && p.selector.is_none()
        && matches!(p.effect, dataflows::model::PolicyEffect::Peer {
            mode: dataflows::model::MtlsMode::Strict, ..
        }))
    });
    assert!(strict, "the namespace's STRICT PeerAuthentication");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `httproute` scenario's edit reads back as the route with its canary (synth's record
/// of the same route), and taking the canary back as the route as generated.
#[test]
fn route_canary_edits_read_back_as_their_records() {
    let mesh = MeshConfig::default();
    let mut shape = shape(true, 4);
    shape.gateways = 1;
    shape.http_routes = 10;
    let dir = temp_dir("meshgen-routes");
    let mut state = MeshState::new(shape.clone(), mesh.clone()).unwrap();
    mesh_gen::write_mesh(&dir, &state, false, |_, _| {}).unwrap();
    let route = |s, canary| {
        Record::GatewayApi(dataflows::model::GatewayApiObject::HttpRoute(
            synth::http_route(s, canary, &shape, &mesh),
        ))
    };
    let edit = state.set_route_canary(3, Some(10)).unwrap();
    mesh_gen::apply_edit(&dir, &edit).unwrap();
    let read_back = read(&dir, &mesh);
    // svc-3's canary is svc-8: the next service of ns-3 (5 namespaces).
    assert!(read_back.contains_key(&route(3, Some((10, 8)))));
    assert!(!read_back.contains_key(&route(3, None)));
    mesh_gen::apply_edit(&dir, &state.set_route_canary(3, None).unwrap()).unwrap();
    assert_eq!(read(&dir, &mesh), synth_without_proxies(&shape, &mesh));
    // A service without a route has none to edit.
    assert!(state.set_route_canary(10, Some(10)).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mesh_gen_command_output_validates() {
    let dir = temp_dir("meshgen-cli");
    let out = Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args(["mesh-gen", "--out"])
        .arg(&dir)
        .args([
            "--services",
            "30",
            "--endpoints-per-service",
            "3",
            "--namespaces",
            "4",
            "--proxies",
            "10",
            "--vs-every",
            "3",
            "--sidecar-scoping",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.join(mesh_gen::SHAPE_FILE).is_file());
    let out = Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args(["validate", "--config-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.starts_with("ok: "), "{stdout}");
    // A second run refuses to write into the non-empty directory.
    let again = Command::new(env!("CARGO_BIN_EXE_meshflow"))
        .args(["mesh-gen", "--out"])
        .arg(&dir)
        .args([
            "--services",
            "1",
            "--endpoints-per-service",
            "1",
            "--namespaces",
            "1",
        ])
        .output()
        .unwrap();
    assert!(!again.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_shapes_are_refused() {
    let mut s = shape(true, 4);
    s.namespaces = 0;
    assert!(MeshState::new(s, MeshConfig::default()).is_err());
    let mut s = shape(true, 4);
    s.endpoints_per_service = 5000;
    assert!(MeshState::new(s, MeshConfig::default()).is_err());
    let mut s = shape(true, 4);
    s.http_routes = s.services + 1;
    assert!(MeshState::new(s, MeshConfig::default()).is_err());
}

#[test]
fn loadgen_proxies_are_synth_proxies() {
    let shape = shape(true, 4);
    for p in 0..300 {
        let from_node = loadgen::proxy_record(p, shape.namespaces).unwrap();
        assert_eq!(
            Record::Proxy(from_node),
            synth::proxy(p, &shape),
            "proxy {p}"
        );
    }
    let mesh = MeshConfig::default();
    for g in 0..300 {
        let from_node = loadgen::router_record(g, &mesh.root_namespace).unwrap();
        assert_eq!(from_node, synth::router(g, &mesh), "gateway {g}");
    }
}

#[test]
fn scenario_edits_change_exactly_their_records() {
    let mesh = MeshConfig::default();
    let shape = shape(true, 4);
    let dir = temp_dir("meshgen-edits");
    let mut state = MeshState::new(shape.clone(), mesh.clone()).unwrap();
    mesh_gen::write_mesh(&dir, &state, false, |_, _| {}).unwrap();
    let mut source = FileSource::new(&dir, mesh.clone());
    assert!(source.rescan().errors.is_empty());
    let mut apply = |edit: mesh_gen::Edit| {
        mesh_gen::apply_edit(&dir, &edit).unwrap();
        let scan = source.rescan();
        assert!(scan.errors.is_empty(), "{:#?}", scan.errors);
        scan.changes
    };
    // An endpoint moves: its Endpoint and its Pod's Workload are replaced.
    let c = apply(state.move_endpoint(1, 0).unwrap());
    assert_eq!(c.len(), 4, "{c:#?}");
    assert!(c.iter().filter(|(_, d)| *d == 1).count() == 2);
    // Scale up by 10: 10 endpoints and 10 workloads appear.
    let c = apply(state.scale_up(2, 10).unwrap());
    assert_eq!(c.len(), 20);
    assert!(c.iter().all(|(_, d)| *d == 1));
    // A weight shift replaces one VirtualService.
    let c = apply(state.shift_weight(4, 50).unwrap());
    assert!(matches!(
        c.as_slice(),
        [
            (Record::VirtualService(_), _),
            (Record::VirtualService(_), _)
        ]
    ));
    // A new subset replaces one DestinationRule.
    let c = apply(state.add_subset(4, "v3").unwrap());
    assert!(matches!(
        c.as_slice(),
        [
            (Record::DestinationRule(_), _),
            (Record::DestinationRule(_), _)
        ]
    ));
    // A new service: the Service, its endpoints and pods.
    let (s, edit) = state.add_service().unwrap();
    assert_eq!(s, shape.services);
    let c = apply(edit);
    assert_eq!(c.len(), 1 + 2 * shape.endpoints_per_service);
    // A Sidecar change replaces one Sidecar.
    let c = apply(state.set_sidecar(3, Some(vec!["./*".into()])).unwrap());
    assert!(matches!(
        c.as_slice(),
        [(Record::Sidecar(_), _), (Record::Sidecar(_), _)]
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A one-hour soak moves endpoints 360,000 times: more than the 65,536 addresses of the
/// moved-endpoint range. Moves keep going, and no move gives an endpoint an IP another
/// endpoint holds.
#[test]
fn endpoint_moves_outlast_the_address_range_without_clashes() {
    let mesh = MeshConfig::default();
    let mut state = MeshState::new(shape(false, 4), mesh).unwrap();
    let n = state.services.len();
    for i in 0..100_000usize {
        let s = i % n;
        let e = (i / n) % state.services[s].endpoints.len();
        state
            .move_endpoint(s, e)
            .unwrap_or_else(|err| panic!("move {i}: {err}"));
        if i % 9_973 == 0 || i > 65_530 && i < 65_600 {
            let mut ips: Vec<&str> = state
                .services
                .iter()
                .flat_map(|svc| svc.endpoints.iter().map(|ep| ep.ip.as_str()))
                .collect();
            let all = ips.len();
            ips.sort_unstable();
            ips.dedup();
            assert_eq!(ips.len(), all, "after move {i}, two endpoints share an IP");
        }
    }
}
