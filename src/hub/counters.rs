//! The event counters behind `/metrics` ([`crate::debug::metrics`] renders them): pushes
//! and bytes by type, NACKs by type, input changes by kind and op, convergence time from an
//! epoch's first input to the ACK of a push that carried it, the dataflow's epoch lag, and the
//! dataflow's steps (inside an epoch's window or at its close).
//! Counted where the event happens; `prometheus-client` atomics, so counting takes no lock.

use dataflows::model::ResourceType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

/// The event counters (see the module documentation). Clones share the same values.
#[derive(Clone, Debug)]
pub struct Counters {
    pub pushes: Family<Labels, Counter>,
    pub bytes: Family<Labels, Counter>,
    pub nacks: Family<Labels, Counter>,
    pub input_changes: Family<Labels, Counter>,
    pub convergence: Histogram,
    pub epoch_lag: Histogram,
    /// Dataflow steps, by when they ran: `ahead` (an idle engine's epoch stepped inside its
    /// window) or `close` (at the window's close).
    pub steps: Family<Labels, Counter>,
}

impl Default for Counters {
    fn default() -> Self {
        let c = Counters {
            pushes: Family::default(),
            bytes: Family::default(),
            nacks: Family::default(),
            input_changes: Family::default(),
            // 1 ms to ~65 s.
            convergence: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            epoch_lag: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            steps: Family::default(),
        };
        for when in ["ahead", "close"] {
            let _ = c.steps.get_or_create(&labels(&[("when", when)]));
        }
        // Every type's series exists from the start, at zero.
        for t in ResourceType::ALL {
            let ty = labels(&[("type", t.short())]);
            let _ = c.pushes.get_or_create(&ty);
            let _ = c.bytes.get_or_create(&ty);
            let _ = c.nacks.get_or_create(&ty);
        }
        c
    }
}

impl Counters {
    pub fn push(&self, t: ResourceType, bytes: usize) {
        let ty = labels(&[("type", t.short())]);
        self.pushes.get_or_create(&ty).inc();
        self.bytes.get_or_create(&ty).inc_by(bytes as u64);
    }

    pub fn nack(&self, t: ResourceType) {
        self.nacks
            .get_or_create(&labels(&[("type", t.short())]))
            .inc();
    }

    /// A dataflow step, `ahead` of its epoch's close or at the `close`.
    pub fn step(&self, when: &str) {
        self.steps.get_or_create(&labels(&[("when", when)])).inc();
    }

    pub fn input_change(&self, kind: &str, op: &str) {
        self.input_changes
            .get_or_create(&labels(&[("kind", kind), ("op", op)]))
            .inc();
    }
}

pub type Labels = Vec<(String, String)>;

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
