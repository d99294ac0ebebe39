//! Cost of one change: the incremental dataflow's epoch vs a full recompute of every
//! proxy's config (the baseline's work), side by side on the same synthetic mesh; and the
//! cost of encoding resources.

use criterion::{criterion_group, criterion_main, Criterion};
use dataflows::driver::{Batch, Engine};
use dataflows::model::{MeshConfig, Record};
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

criterion_group!(benches, one_change, encoding);
criterion_main!(benches);
