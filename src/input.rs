//! The vocabulary every side shares: what sources and streams hand the runtime ([`Input`]),
//! what the hub learns about an epoch besides its output ([`EpochMeta`]), and the
//! description of the input changes that made an epoch: which object (kind, namespace,
//! name) was inserted, updated or deleted, and where it came from (the file that defines it,
//! or `xds` for a proxy that connected or went away). Sources describe their changes from
//! the records they emit; the runtime carries the description with the epoch to the hub,
//! whose history shows it next to what each proxy was sent.
//!
//! Imports nothing of this crate: sources, runtime, hub, xds and debug all build on it.

use dataflows::model::{ConfigKey, Proxy, ProxyId, Record, ResourceType};
use serde::Serialize;
use std::collections::BTreeSet;
use std::time::{Instant, SystemTime};

/// What the runtime consumes.
#[derive(Debug)]
pub enum Input {
    /// Record changes from the source named `source`, with that source's complete list of
    /// current problems (replacing what it reported before; other sources' stay).
    Changes {
        source: SourceName,
        changes: Vec<(Record, isize)>,
        /// The objects behind `changes`, for the debug history.
        described: Vec<InputChange>,
        errors: Vec<String>,
        /// Analysis messages about the objects in effect (the complete list).
        analysis: Vec<String>,
        /// When the source first saw these changes ([`crate::sources::Report::seen`]).
        seen: std::time::Instant,
    },
    ProxyUp(Proxy),
    ProxyDown(Proxy),
    /// A proxy rejected a push; the runtime names the objects whose change it rejected
    /// (`runtime::rejections`), and changes nothing.
    Rejected(Rejection),
    /// A fetch of a RequestAuthentication's `jwksUri` finished: the key set, or why not.
    Jwks {
        uri: String,
        outcome: Result<String, String>,
    },
}

/// The `jwksUri`s in use, with the longest fetch timeout (ms) a rule gives each.
pub type JwksUris = std::collections::BTreeMap<String, u64>;

/// A push a proxy rejected (NACK), with what the hub knows of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub proxy: ProxyId,
    /// The proxy's namespace, as its stream authenticated it (as claimed where the server
    /// authenticates no one): who may write on which object's status.
    pub namespace: String,
    pub rtype: ResourceType,
    /// The resources of the push in a version this proxy had not accepted (and that
    /// Envoy's message names, when it names any).
    pub resources: Vec<String>,
    /// Envoy's message.
    pub message: String,
    /// The input objects those resources were built from (provenance).
    pub inputs: BTreeSet<ConfigKey>,
    /// The epoch of the last push of this type the proxy accepted (0: none).
    pub accepted_epoch: u64,
    /// The epoch of the rejected push.
    pub rejected_epoch: u64,
}

/// An object whose change proxies rejected (NACK), until it changes again: for its status
/// (`serve --kube --write-status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRejection {
    /// The proxies that rejected it.
    pub proxies: BTreeSet<String>,
    /// The first rejection's resource type and resources (`RDS 80`), and Envoy's message.
    pub resources: String,
    pub message: String,
    /// When it was first rejected.
    pub since: SystemTime,
}

/// A workload's PeerAuthentication change held part-way (published by the runtime for the
/// debug port: `/debug/mtls_transitions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MtlsTransition {
    /// The workload's object (`Pod/NS/NAME` or `WorkloadEntry/NS/NAME`) and address.
    pub workload: String,
    pub ip: String,
    /// What its clients sent before and send after, described.
    pub from: String,
    pub to: String,
    /// `server-accepts-both` (clients keep `from`) or `clients-moved` (clients sent `to`,
    /// the server still accepts both).
    pub step: &'static str,
    /// When the step began (ms since the Unix epoch).
    pub step_since_unix_ms: u64,
    /// How many (proxy, type) acknowledgments the step still waits for, and the first few.
    pub waiting: usize,
    pub waiting_for: Vec<String>,
}

/// The objects proxies reject now, published by the runtime (a `watch` channel:
/// readers see the latest state).
pub type ProxyRejections = std::collections::BTreeMap<ConfigKey, ProxyRejection>;

/// The dataflow's current errors by the object they name, published by the hub (a `watch`
/// channel) for status writing.
pub type ObjectErrors = std::collections::BTreeMap<ConfigKey, Vec<dataflows::model::ConfigError>>;

/// Which source sent a change (`files`, `kubernetes`, …): each keeps its own errors.
pub type SourceName = &'static str;

/// What the hub learns about an epoch besides its output.
#[derive(Debug, Clone)]
pub struct EpochMeta {
    /// The input objects that changed.
    pub inputs: Vec<InputChange>,
    /// When the first input of the epoch arrived.
    pub received: SystemTime,
    pub received_instant: Instant,
    /// The problems of each source that reported in this epoch (the complete list of each).
    pub source_errors: Vec<(SourceName, Vec<String>)>,
    /// The analysis messages of each source that reported in this epoch (complete lists).
    pub source_analysis: Vec<(SourceName, Vec<String>)>,
}

impl EpochMeta {
    /// An epoch with no description (tests, hand-made epochs).
    pub fn now() -> EpochMeta {
        EpochMeta {
            inputs: Vec::new(),
            received: SystemTime::now(),
            received_instant: Instant::now(),
            source_errors: Vec::new(),
            source_analysis: Vec::new(),
        }
    }
}

/// What happened to an input object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeOp {
    Insert,
    Update,
    Delete,
}

impl ChangeOp {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeOp::Insert => "insert",
            ChangeOp::Update => "update",
            ChangeOp::Delete => "delete",
        }
    }
}

/// One input object that changed in an epoch.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct InputChange {
    /// `VirtualService`, `EndpointSlice`, …, or `Proxy` for a connected proxy.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub op: ChangeOp,
    /// Where it came from: the file path, or `xds` for proxies.
    pub source: String,
}

impl InputChange {
    /// Rough heap size, for the history's byte bound.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.kind.len()
            + self.namespace.len()
            + self.name.len()
            + self.source.len()
    }

    /// An object of a source (`source`: the file, or the source's name).
    pub fn object(key: &ConfigKey, op: ChangeOp, source: String) -> InputChange {
        InputChange {
            kind: key.kind.to_string(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            op,
            source,
        }
    }

    /// A proxy that connected (`up`) or whose last stream closed.
    pub fn proxy(p: &Proxy, up: bool) -> InputChange {
        InputChange {
            kind: "Proxy".into(),
            namespace: p.namespace.clone(),
            name: p.id.clone(),
            op: if up {
                ChangeOp::Insert
            } else {
                ChangeOp::Delete
            },
            source: "xds".into(),
        }
    }
}

/// The input object a record was derived from (`None` for proxies, which are not objects
/// of a source).
pub fn record_key(r: &Record) -> Option<&ConfigKey> {
    match r {
        Record::Service(s) => Some(&s.origin),
        Record::Endpoint(_, e) => Some(&e.origin),
        Record::Workload(w) => Some(&w.origin),
        Record::VirtualService(v) => Some(&v.key),
        Record::DestinationRule(d) => Some(&d.key),
        Record::Gateway(g) => Some(&g.key),
        Record::Sidecar(s) => Some(&s.key),
        Record::Secret(s) => Some(&s.key),
        Record::Proxy(_) => None,
        Record::Selection(_, s) => Some(&s.origin),
        Record::Security(p) => Some(&p.key),
        Record::MtlsHold(_) => None,
        Record::GatewayApi(o) => Some(o.key()),
        Record::Mesh(m) => m.origin.as_ref(),
    }
}

/// Describes record changes as object changes: every object with a changed record once,
/// an insert if `existed_before` says it did not exist, a delete if it no longer exists,
/// an update otherwise. `source` names where an object comes from.
pub fn describe(
    changes: &[(Record, isize)],
    existed_before: impl Fn(&ConfigKey) -> bool,
    exists_now: impl Fn(&ConfigKey) -> bool,
    source: impl Fn(&ConfigKey) -> String,
) -> Vec<InputChange> {
    let mut keys: Vec<&ConfigKey> = changes.iter().filter_map(|(r, _)| record_key(r)).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|k| {
            let op = match (existed_before(k), exists_now(k)) {
                (false, true) => ChangeOp::Insert,
                (true, false) => ChangeOp::Delete,
                _ => ChangeOp::Update,
            };
            InputChange::object(k, op, source(k))
        })
        .collect()
}
