//! Cost of one change: the incremental dataflow's epoch vs a full recompute of every
//! proxy's config (the baseline's work), side by side on the same synthetic mesh; one
//! HTTPRoute's edit on gateways with 5,000 routes; and the cost of encoding resources.

use criterion::{criterion_group, criterion_main, Criterion};
use dataflows::driver::{Batch, Engine};
use dataflows::model::{GatewayApiObject, MeshConfig, Record};
use dataflows::naive::{self, Snapshot};
use dataflows::synth::{self, Shape};
use std::hint::black_box;

fn one_change(c: &mut Criterion) {
    let mesh = MeshConfig::default();
    let shape = Shape::small();
    let records = synth::records(&shape, &mesh);
    let engine = Engine::start(1, mesh.clone());
    let mut epoch = 1;
    engine
        .step(Batch {
            epoch,
            changes: records.iter().cloned().map(|r| (r, 1)).collect(),
        })
        .expect("engine");
    let mut group = c.benchmark_group("one_change");
    group.sample_size(20);

    // Toggle one endpoint of service 7 in and out.
    let ep = synth::endpoint(7, 0, &shape, &mesh);
    let mut present = true;
    group.bench_function("endpoint/incremental", |b| {
        b.iter(|| {
            epoch += 1;
            let diff = if present { -1 } else { 1 };
            present = !present;
            black_box(
                engine
                    .step(Batch {
                        epoch,
                        changes: vec![(ep.clone(), diff)],
                    })
                    .expect("engine"),
            );
        })
    });
    let vs_a = Record::VirtualService(synth::vs(0, 90, &shape, &mesh));
    let vs_b = Record::VirtualService(synth::vs(0, 50, &shape, &mesh));
    let mut flip = false;
    group.bench_function("virtual_service/incremental", |b| {
        b.iter(|| {
            epoch += 1;
            let (old, new) = if flip { (&vs_b, &vs_a) } else { (&vs_a, &vs_b) };
            flip = !flip;
            black_box(
                engine
                    .step(Batch {
                        epoch,
                        changes: vec![(old.clone(), -1), (new.clone(), 1)],
                    })
                    .expect("engine"),
            );
        })
    });
    let snapshot = Snapshot {
        records: records.into_iter().collect(),
    };
    group.bench_function("any/full_recompute", |b| {
        b.iter(|| black_box(naive::compute(&mesh, &snapshot)))
    });
    group.finish();
}

/// One HTTPRoute's edit on gateways serving 5,000 HTTPRoutes (and 500 VirtualServices):
/// the `httproute` scenario's dataflow step alone, without sidecars, so the gateways'
/// route configuration is all the epoch builds.
fn gateway_route(c: &mut Criterion) {
    let mesh = MeshConfig::default();
    let shape = Shape {
        endpoints_per_service: 1,
        proxies: 0,
        gateways: 2,
        http_routes: 5_000,
        ..Shape::large()
    };
    let records = synth::records(&shape, &mesh);
    let engine = Engine::start(1, mesh.clone());
    let mut epoch = 1;
    engine
        .step(Batch {
            epoch,
            changes: records.into_iter().map(|r| (r, 1)).collect(),
        })
        .expect("engine");
    let route = |canary| {
        let r = synth::http_route(0, canary, &shape, &mesh);
        Record::GatewayApi(GatewayApiObject::HttpRoute(r))
    };
    // Route svc-0 sends 10% to svc-100 (its namespace's next service) or takes it back.
    let (plain, canary) = (route(None), route(Some((10, shape.namespaces))));
    let mut flip = false;
    let mut group = c.benchmark_group("one_change");
    group.sample_size(20);
    group.bench_function("http_route/incremental", |b| {
        b.iter(|| {
            epoch += 1;
            let (old, new) = if flip {
                (&canary, &plain)
            } else {
                (&plain, &canary)
            };
            flip = !flip;
            black_box(
                engine
                    .step(Batch {
                        epoch,
                        changes: vec![(old.clone(), -1), (new.clone(), 1)],
                    })
                    .expect("engine"),
            );
        })
    });
    group.finish();
}

fn encoding(c: &mut Criterion) {
    let mesh = MeshConfig::default();
    let shape = Shape::small();
    let records = synth::records(&shape, &mesh);
    let svc = records
        .iter()
        .find_map(|r| {
            if let Record::Service(s) = r {
                Some(s.clone())
            } else {
                None
            }
        })
        .expect("a service");
    c.bench_function("encode/outbound_clusters", |b| {
        b.iter(|| black_box(dataflows::translate::cluster::outbound_all(&svc, None)))
    });
}

criterion_group!(benches, one_change, gateway_route, encoding);
criterion_main!(benches);
