//! The full-push baseline: on every epoch, rebuild every connected proxy's whole config from
//! a snapshot of all inputs with the same translation and encoders (`dataflows::naive`), and
//! have every stream push everything again (State-of-the-World only). It is what meshflow is
//! measured against, as Istio worked before incremental pushes.

use dataflows::driver::{Batch, EpochOutput};
use dataflows::model::{MeshConfig, Record, ResourceKey};
use dataflows::naive::{self, ProxyConfigs, Snapshot};
use std::collections::BTreeMap;

pub struct FullPush {
    mesh: MeshConfig,
    inputs: BTreeMap<Record, isize>,
    previous: ProxyConfigs,
}

impl FullPush {
    pub fn new(mesh: MeshConfig) -> FullPush {
        FullPush {
            mesh,
            inputs: BTreeMap::new(),
            previous: ProxyConfigs::new(),
        }
    }

    /// Applies a batch, recomputes everything, and reports the difference to the previous
    /// configs in the dataflow's output form (so the hub holds the same state either way).
    pub fn step(&mut self, batch: Batch) -> EpochOutput {
        for (r, d) in batch.changes {
            let n = self.inputs.entry(r.clone()).or_insert(0);
            *n += d;
            if *n == 0 {
                self.inputs.remove(&r);
            }
        }
        let snapshot = Snapshot {
            records: self
                .inputs
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(r, _)| r.clone())
                .collect(),
        };
        let next = naive::compute(&self.mesh, &snapshot);
        let mut out = EpochOutput {
            epoch: batch.epoch,
            ..Default::default()
        };
        let mut bodies: BTreeMap<ResourceKey, (dataflows::model::Resource, isize)> =
            BTreeMap::new();
        let empty = BTreeMap::new();
        let ids: std::collections::BTreeSet<&String> =
            self.previous.keys().chain(next.keys()).collect();
        for id in ids {
            let (old, new) = (
                self.previous.get(id).unwrap_or(&empty),
                next.get(id).unwrap_or(&empty),
            );
            for (k, r) in old {
                if new.get(k).map(|n| &n.version) != Some(&r.version) {
                    out.proxy_resources.push(((id.clone(), r.key()), -1));
                    bodies.entry(r.key()).or_insert((r.clone(), 0)).1 -= 1;
                }
            }
            for (k, r) in new {
                if old.get(k).map(|o| &o.version) != Some(&r.version) {
                    out.proxy_resources.push(((id.clone(), r.key()), 1));
                    bodies.entry(r.key()).or_insert((r.clone(), 0)).1 += 1;
                }
            }
        }
        // Bodies are counted per holder here (the dataflow counts distinct bodies); the hub
        // keeps a body while its count is positive, which holds either way.
        out.bodies = bodies.into_values().filter(|(_, d)| *d != 0).collect();
        self.previous = next;
        out
    }
}
