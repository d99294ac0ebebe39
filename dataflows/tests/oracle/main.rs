//! The incremental dataflow against a naive full recompute, on random logs of config
//! changes: after every epoch, each connected proxy's resources (names and encoded bytes)
//! must equal what `naive::compute` derives from scratch from the same inputs.
//!
//! The random records come from one generator function per kind (`records.rs` draws the
//! kind, the others one kind each).

#[path = "../support/mod.rs"]
mod support;

mod destination_rule;
mod gateway;
mod gateway_api;
mod records;
mod security;
mod shared_host;
mod sidecar;
mod virtual_service;

use dataflows::driver::{Batch, Engine};
use dataflows::materialize::{Applied, Materialized};
use dataflows::model::*;
use dataflows::naive::{self, ProxyConfigs, Snapshot};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use records::{random_record, with_idle_timeout};
use std::collections::{BTreeMap, BTreeSet};

/// The key a source would hold one version of.
fn identity(r: &Record) -> String {
    match r {
        Record::Service(s) => format!("svc/{}/{}", s.hostname, s.origin),
        Record::Endpoint(h, e) => format!("ep/{h}/{}/{}/{}", e.ip, e.port_name, e.port),
        Record::Workload(w) => format!("wl/{}", w.origin),
        Record::VirtualService(v) => format!("vs/{}", v.key),
        Record::DestinationRule(d) => format!("dr/{}", d.key),
        Record::Gateway(g) => format!("gw/{}", g.key),
        Record::Sidecar(s) => format!("sc/{}", s.key),
        Record::Proxy(p) => format!("px/{}", p.id),
        Record::Secret(s) => format!("secret/{}", s.key),
        Record::Selection(h, s) => format!("sel/{h}/{}", s.origin),
        Record::Security(p) => format!("sec/{}", p.key),
        Record::MtlsHold(h) => format!("hold/{}/{}", h.ip, h.workload),
        Record::GatewayApi(o) => format!("gwapi/{}", o.key()),
        // One mesh config, as a mesh config source holds.
        Record::Mesh(_) => "mesh".into(),
    }
}

/// Accumulates the dataflow's diffs into per-proxy configs, checking that every proxy holds
/// each (type, name) exactly once and that every body it references exists.
#[derive(Default)]
struct Accumulated {
    held: Materialized,
    bodies: BTreeMap<(ResourceType, String, String), (Resource, isize)>,
}

/// Per proxy: `(type, name) → version`.
type Held = BTreeMap<ProxyId, BTreeMap<(ResourceType, String), String>>;

impl Accumulated {
    fn held(&self) -> Held {
        self.held
            .snapshot()
            .into_iter()
            .map(|(p, keys)| {
                let keys = keys
                    .into_keys()
                    .map(|k| ((k.rtype, k.name), k.version))
                    .collect();
                (p, keys)
            })
            .collect()
    }

    fn configs(&self) -> ProxyConfigs {
        let mut out = ProxyConfigs::new();
        for (proxy, keys) in self.held() {
            for ((rtype, name), version) in keys {
                let (body, _) = self
                    .bodies
                    .get(&(rtype, name.clone(), version.clone()))
                    .unwrap_or_else(|| panic!("no body for {rtype:?} {name} {version}"));
                out.entry(proxy.clone())
                    .or_default()
                    .insert((rtype, name), body.clone());
            }
        }
        out
    }
}

/// One reported change, flattened: proxy, type, name, old and new version.
type FlatChange = (
    ProxyId,
    ResourceType,
    String,
    Option<String>,
    Option<String>,
);

/// The per-proxy change lists `Materialized::apply` reports must be exactly the difference
/// between what each proxy held before and after (the debug history records them).
fn check_reported_changes(before: &Held, after: &Held, applied: &Applied, epoch: u64) {
    let mut expected: BTreeSet<FlatChange> = BTreeSet::new();
    let empty = BTreeMap::new();
    for p in before.keys().chain(after.keys()) {
        let (b, a) = (
            before.get(p).unwrap_or(&empty),
            after.get(p).unwrap_or(&empty),
        );
        for ((t, n), v) in b {
            if a.get(&(*t, n.clone())) != Some(v) {
                let new = a.get(&(*t, n.clone())).cloned();
                expected.insert((p.clone(), *t, n.clone(), Some(v.clone()), new));
            }
        }
        for ((t, n), v) in a {
            if !b.contains_key(&(*t, n.clone())) {
                expected.insert((p.clone(), *t, n.clone(), None, Some(v.clone())));
            }
        }
    }
    let reported: BTreeSet<_> = applied
        .changes
        .iter()
        .flat_map(|(p, t, list)| {
            list.iter().map(move |(n, o, v)| {
                (
                    p.clone(),
                    *t,
                    n.to_string(),
                    o.as_deref().map(str::to_string),
                    v.as_deref().map(str::to_string),
                )
            })
        })
        .collect();
    assert_eq!(reported, expected, "epoch {epoch}: reported changes differ");
    let touched: BTreeSet<&ProxyId> = expected.iter().map(|c| &c.0).collect();
    for p in touched {
        assert!(
            applied.touched.contains(p),
            "epoch {epoch}: {p} changed but was not reported as touched"
        );
    }
}

/// `record` replaces the live version of its object (a change of −1 and +1); an object
/// already live is deleted instead with probability `delete` (drawn from `rng`).
fn replace(
    live: &mut BTreeMap<String, Record>,
    changes: &mut Vec<(Record, isize)>,
    record: Record,
    rng: &mut StdRng,
    delete: f64,
) {
    let id = identity(&record);
    let old = live.remove(&id);
    let deleted = old.is_some() && rng.random_bool(delete);
    if let Some(old) = old {
        changes.push((old, -1));
    }
    if !deleted {
        live.insert(id, record.clone());
        changes.push((record, 1));
    }
}

fn run(seed: u64, steps: usize, workers: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut extra = StdRng::seed_from_u64(seed ^ 0x6d74_6c73);
    let mut node_meta = StdRng::seed_from_u64(seed ^ 0x6964_6c65);
    // Security policies, from a generator of their own: added to an epoch's changes after
    // the others, so the logs the other generators draw stay what they were.
    let mut policies = StdRng::seed_from_u64(seed ^ 0x7365_6375);
    // Held mTLS changes of live workloads, from a generator of their own too.
    let mut holds = StdRng::seed_from_u64(seed ^ 0x686f_6c64);
    // ServiceEntries sharing hosts across namespaces, from a generator of their own too.
    let mut shared = StdRng::seed_from_u64(seed ^ 0x7368_6172);
    // Gateway API objects and their routers, from a generator of their own too.
    let mut gateway_api = StdRng::seed_from_u64(seed ^ 0x6b67_7761);
    // A CA's root: every sidecar and router holds its workload secrets.
    let mesh = MeshConfig {
        trust_root: Some("-----BEGIN CERTIFICATE-----\noracle\n-----END CERTIFICATE-----\n".into()),
        system_ca_bundle: "/oracle/ca-bundle.pem".into(),
        ..Default::default()
    };
    let engine = Engine::start(workers, mesh.clone());
    let mut live: BTreeMap<String, Record> = BTreeMap::new();
    let mut acc = Accumulated::default();
    let mut checked_nonempty = 0;
    for epoch in 1..=steps as u64 {
        let mut changes = Vec::new();
        for _ in 0..rng.random_range(1..6) {
            let slot = rng.random_range(0..12);
            let record =
                with_idle_timeout(&mut node_meta, random_record(&mut rng, &mut extra, slot));
            let id = identity(&record);
            if let Some(old) = live.remove(&id) {
                changes.push((old, -1));
                if rng.random_bool(0.3) {
                    continue; // a delete
                }
            }
            live.insert(id, record.clone());
            changes.push((record, 1));
        }
        if policies.random_bool(0.4) {
            let record = security::security(&mut policies);
            replace(&mut live, &mut changes, record, &mut policies, 0.3);
        }
        if holds.random_bool(0.3) {
            let workloads: Vec<&Workload> = live
                .values()
                .filter_map(|r| match r {
                    Record::Workload(w) => Some(w),
                    _ => None,
                })
                .collect();
            if !workloads.is_empty() {
                let w = workloads[holds.random_range(0..workloads.len())];
                let record = security::hold(&mut holds, w);
                replace(&mut live, &mut changes, record, &mut holds, 0.4);
            }
        }
        if shared.random_bool(0.4) {
            let record = shared_host::shared_host(&mut shared);
            replace(&mut live, &mut changes, record, &mut shared, 0.3);
        }
        if gateway_api.random_bool(0.4) {
            let record = gateway_api::gateway_api(&mut gateway_api);
            replace(&mut live, &mut changes, record, &mut gateway_api, 0.3);
        }
        let out = engine
            .step(Batch { epoch, changes })
            .expect("engine running");
        let before = acc.held();
        let applied = acc.held.apply(&out, true);
        check_reported_changes(&before, &acc.held(), &applied, epoch);
        for (r, d) in out.bodies {
            let e = acc
                .bodies
                .entry((r.rtype, r.name.clone(), r.version.clone()))
                .or_insert((r, 0));
            e.1 += d;
        }
        acc.bodies.retain(|_, (_, c)| *c != 0);

        let snapshot = Snapshot {
            records: live.values().cloned().collect::<BTreeSet<_>>(),
        };
        let expected = naive::compute(&mesh, &snapshot);
        let actual = acc.configs();
        if expected != actual {
            for (p, exp) in &expected {
                let act = actual.get(p).cloned().unwrap_or_default();
                for (k, r) in exp {
                    if act.get(k) != Some(r) {
                        eprintln!(
                            "epoch {epoch} {p}: expected {k:?} {}, dataflow has {:?}",
                            r.version,
                            act.get(k).map(|r| &r.version)
                        );
                    }
                }
                for k in act.keys().filter(|k| !exp.contains_key(*k)) {
                    eprintln!("epoch {epoch} {p}: dataflow has extra {k:?}");
                }
            }
            for p in actual.keys().filter(|p| !expected.contains_key(*p)) {
                eprintln!("epoch {epoch}: dataflow has extra proxy {p}");
            }
            panic!("seed {seed}: dataflow differs from the full recompute at epoch {epoch}");
        }
        checked_nonempty += usize::from(actual.values().any(|m| m.len() > 4));
    }
    assert!(
        checked_nonempty > steps / 4,
        "the random log rarely produced any config ({checked_nonempty}/{steps})"
    );
}

// One worker, six seeds, in two tests: each stays well inside the time a test is given on
// a busy 2-core machine, and the two run side by side.
#[test]
fn oracle_one_worker() {
    for seed in 0..3 {
        run(seed, 120, 1);
    }
}

#[test]
fn oracle_one_worker_more_seeds() {
    for seed in 3..6 {
        run(seed, 120, 1);
    }
}

#[test]
fn oracle_two_workers() {
    for seed in 100..103 {
        run(seed, 80, 2);
    }
}
