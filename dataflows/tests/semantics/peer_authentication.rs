//! PeerAuthentication as Istio translates it, beyond STRICT (see `security.rs`): DISABLE
//! takes a workload's mTLS chains away and tells its clients (auto mTLS sends plaintext to
//! its endpoints on the ports it covers, Istio's `tlsMode` endpoint metadata dropped);
//! `portLevelMtls` ports no service declares get chains of their own before the catch-all,
//! so a STRICT port of a PERMISSIVE workload takes no plaintext.

use crate::support::{endpoint, labels, px, service, sidecar_proxy, workload, Mesh};
use dataflows::model::*;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use std::collections::BTreeMap;

const RATINGS_EDS: &str = "outbound|9080||ratings.default.svc.cluster.local";

fn peer(
    ns: &str,
    name: &str,
    selector: Option<&[(&str, &str)]>,
    mode: MtlsMode,
    ports: &[(u16, MtlsMode)],
) -> Record {
    Record::Security(SecurityPolicy {
        key: ConfigKey::new(Kind::PeerAuthentication, ns, name),
        created: String::new(),
        selector: selector.map(labels),
        effect: PolicyEffect::Peer {
            mode,
            ports: ports.iter().copied().collect::<BTreeMap<_, _>>(),
        },
    })
}

/// ratings (10.1.0.1, a pod running a sidecar) and reviews (10.1.0.2, its client).
fn mesh() -> (Mesh, Proxy, Proxy) {
    let mut m = Mesh::new();
    let ratings = sidecar_proxy("ratings-1", "default", "10.1.0.1", &[("app", "ratings")]);
    let reviews = sidecar_proxy("reviews-1", "default", "10.1.0.2", &[("app", "reviews")]);
    m.insert(vec![
        service("ratings", "default"),
        endpoint("ratings", "default", "10.1.0.1", true),
        workload(
            "ratings-1",
            "default",
            "10.1.0.1",
            &[("app", "ratings"), ("security.istio.io/tlsMode", "istio")],
        ),
        px(&ratings),
        px(&reviews),
    ]);
    (m, ratings, reviews)
}

/// The `tlsMode` transport socket metadata of each endpoint of an assignment, in order.
fn tls_modes(cla: &ClusterLoadAssignment) -> Vec<Option<String>> {
    use envoy_types::pb::google::protobuf::value::Kind as V;
    cla.endpoints
        .iter()
        .flat_map(|g| &g.lb_endpoints)
        .map(|e| {
            let meta = e.metadata.as_ref()?;
            let fields = &meta
                .filter_metadata
                .get("envoy.transport_socket_match")?
                .fields;
            match fields.get("tlsMode")?.kind.as_ref()? {
                V::StringValue(s) => Some(s.clone()),
                other => panic!("{other:?}"),
            }
        })
        .collect()
}

fn chains(l: &Listener) -> Vec<(String, Option<u32>, bool)> {
    l.filter_chains
        .iter()
        .map(|c| {
            let m = c.filter_chain_match.clone().unwrap_or_default();
            (
                c.name.clone(),
                m.destination_port.map(|p| p.value),
                c.transport_socket.is_some(),
            )
        })
        .collect()
}

/// DISABLE at any level (workload, the workload's port, namespace, mesh with the namespace
/// UNSET) drops the endpoint's `tlsMode: istio` metadata in what its clients hold, and the
/// server's mTLS chains on the ports it covers; a port-level DISABLE on another port, or a
/// later policy that overrides it, leaves both; retracting brings both back.
#[test]
fn disable_tells_the_clients_and_takes_the_mtls_chains_away() {
    let (mut m, ratings, reviews) = mesh();
    let istio = || vec![Some("istio".to_string())];
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), istio());
    let open = [
        ("inbound|9080||".to_string(), Some(9080), false),
        ("inbound|9080||-mtls".to_string(), Some(9080), true),
        ("virtualInbound-catchall-tcp".to_string(), None, false),
    ];
    assert_eq!(chains(&m.listener_body(&ratings, "virtualInbound")), open);

    let sel = Some(&[("app", "ratings")][..]);
    let workload_off = peer("default", "ratings", sel, MtlsMode::Disable, &[]);
    m.insert(vec![workload_off.clone()]);
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), vec![None]);
    assert_eq!(
        chains(&m.listener_body(&ratings, "virtualInbound")),
        [
            ("inbound|9080||".to_string(), Some(9080), false),
            ("virtualInbound-catchall-tcp".to_string(), None, false),
        ]
    );
    m.retract(vec![workload_off]);
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), istio());

    // By port: only the endpoint's own port (9080) counts.
    let other_port = peer(
        "default",
        "ratings",
        sel,
        MtlsMode::Permissive,
        &[(9081, MtlsMode::Disable)],
    );
    m.insert(vec![other_port.clone()]);
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), istio());
    let this_port = peer(
        "default",
        "ratings",
        sel,
        MtlsMode::Strict,
        &[(9080, MtlsMode::Disable)],
    );
    m.replace(other_port, this_port.clone());
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), vec![None]);
    assert_eq!(
        chains(&m.listener_body(&ratings, "virtualInbound")),
        [
            ("inbound|9080||".to_string(), Some(9080), false),
            ("virtualInbound-catchall-mtls".to_string(), None, true),
        ]
    );
    m.retract(vec![this_port]);

    // Namespace-wide, and mesh-wide under a namespace policy that says UNSET.
    let ns_off = peer("default", "default", None, MtlsMode::Disable, &[]);
    m.insert(vec![ns_off.clone()]);
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), vec![None]);
    let ns_unset = peer("default", "default", None, MtlsMode::Unset, &[]);
    m.replace(ns_off, ns_unset.clone());
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), istio());
    let mesh_off = peer("istio-system", "default", None, MtlsMode::Disable, &[]);
    m.insert(vec![mesh_off.clone()]);
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), vec![None]);
    // A workload policy overrides the mesh's.
    let workload_on = peer("default", "ratings", sel, MtlsMode::Permissive, &[]);
    m.insert(vec![workload_on.clone()]);
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), istio());
    assert_eq!(chains(&m.listener_body(&ratings, "virtualInbound")), open);
    m.retract(vec![workload_on, mesh_off, ns_unset]);
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), istio());
    assert_eq!(chains(&m.listener_body(&ratings, "virtualInbound")), open);
}

/// A `portLevelMtls` port that no service of the workload declares gets its own chain
/// (matched on that port) before the catch-all, kept by the port's mode: STRICT on a
/// PERMISSIVE workload takes only mTLS there, PERMISSIVE on a STRICT workload takes
/// plaintext there. A declared port gets no second chain.
#[test]
fn ports_no_service_declares_keep_their_own_mode() {
    let (mut m, ratings, _) = mesh();
    let sel = Some(&[("app", "ratings")][..]);
    let strict_port = peer(
        "default",
        "ratings",
        sel,
        MtlsMode::Permissive,
        &[(7070, MtlsMode::Strict), (9080, MtlsMode::Strict)],
    );
    m.insert(vec![strict_port.clone()]);
    let l = m.listener_body(&ratings, "virtualInbound");
    assert_eq!(
        chains(&l),
        [
            ("inbound|9080||-mtls".to_string(), Some(9080), true),
            (
                "virtualInbound-catchall-mtls-7070".to_string(),
                Some(7070),
                true
            ),
            ("virtualInbound-catchall-tcp".to_string(), None, false),
        ]
    );
    let tls_only = &l.filter_chains[1].filter_chain_match.as_ref().unwrap();
    assert_eq!(tls_only.transport_protocol, "tls");
    let open_port = peer(
        "default",
        "ratings",
        sel,
        MtlsMode::Strict,
        &[(7070, MtlsMode::Permissive)],
    );
    m.replace(strict_port, open_port);
    assert_eq!(
        chains(&m.listener_body(&ratings, "virtualInbound")),
        [
            ("inbound|9080||-mtls".to_string(), Some(9080), true),
            (
                "virtualInbound-catchall-tcp-7070".to_string(),
                Some(7070),
                false
            ),
            ("virtualInbound-catchall-mtls".to_string(), None, true),
        ]
    );
}

/// A DISABLE → STRICT change held by the transition controller serves each of its steps:
/// held, clients keep plaintext (no `tlsMode`) while the server accepts both (PERMISSIVE's
/// chains); clients moved, they send mTLS and the server still accepts both; retracted,
/// the server takes STRICT (TLS chains only). The policy alone would have flipped both
/// sides in one epoch.
#[test]
fn a_held_flip_serves_each_step_in_order() {
    let (mut m, ratings, reviews) = mesh();
    let sel = Some(&[("app", "ratings")][..]);
    let open = [
        ("inbound|9080||".to_string(), Some(9080), false),
        ("inbound|9080||-mtls".to_string(), Some(9080), true),
        ("virtualInbound-catchall-tcp".to_string(), None, false),
    ];
    let disabled = PeerModes {
        mode: MtlsMode::Disable,
        ports: BTreeMap::new(),
    };
    let hold = |clients_moved| {
        Record::MtlsHold(MtlsHold {
            ip: "10.1.0.1".into(),
            workload: ConfigKey::new(Kind::Pod, "default", "ratings-1"),
            from: Some(disabled.clone()),
            to: None,
            clients_moved,
        })
    };
    m.insert(vec![peer(
        "default",
        "ratings",
        sel,
        MtlsMode::Disable,
        &[],
    )]);
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), vec![None]);

    // The policy turns STRICT in the same epoch as its hold.
    m.step(vec![
        (peer("default", "ratings", sel, MtlsMode::Disable, &[]), -1),
        (peer("default", "ratings", sel, MtlsMode::Strict, &[]), 1),
        (hold(false), 1),
    ]);
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), vec![None]);
    assert_eq!(chains(&m.listener_body(&ratings, "virtualInbound")), open);

    m.replace(hold(false), hold(true));
    let istio = vec![Some("istio".to_string())];
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), istio);
    assert_eq!(chains(&m.listener_body(&ratings, "virtualInbound")), open);

    m.retract(vec![hold(true)]);
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), istio);
    let strict = chains(&m.listener_body(&ratings, "virtualInbound"));
    assert!(!strict.is_empty());
    assert!(
        strict.iter().all(|(_, _, tls)| *tls),
        "STRICT: TLS chains only: {strict:?}"
    );
}

/// A hold naming a workload at another address (its Pod moved) changes nothing for the
/// Pod's clients, and bridges no sidecar that does not run at the hold's address.
#[test]
fn a_hold_of_another_address_changes_nothing() {
    let (mut m, ratings, reviews) = mesh();
    let sel = Some(&[("app", "ratings")][..]);
    m.insert(vec![peer("default", "ratings", sel, MtlsMode::Strict, &[])]);
    let before_cla = tls_modes(&m.cla(&reviews, RATINGS_EDS));
    let before = chains(&m.listener_body(&ratings, "virtualInbound"));
    m.insert(vec![Record::MtlsHold(MtlsHold {
        ip: "10.1.0.9".into(),
        workload: ConfigKey::new(Kind::Pod, "default", "ratings-1"),
        from: None,
        to: Some(PeerModes {
            mode: MtlsMode::Disable,
            ports: BTreeMap::new(),
        }),
        clients_moved: false,
    })]);
    assert_eq!(tls_modes(&m.cla(&reviews, RATINGS_EDS)), before_cla);
    assert_eq!(chains(&m.listener_body(&ratings, "virtualInbound")), before);
}
