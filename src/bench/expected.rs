//! The expected configs: what every simulated proxy must hold, computed by the full
//! recompute ([`dataflows::naive::compute`]) from the harness's shadow copy of the mesh
//! ([`Inputs`], read with the same [`FileSource`] the server uses); which proxies a change
//! affects and with what; and the check of every proxy's held set against it.

use super::loadgen::{type_index, Loadgen};
use super::min_bytes::delta_min_bytes;
use super::options::VerifyMode;
use crate::sources::files::FileSource;
use dataflows::model::{MeshConfig, Proxy, Record, ResourceType};
use dataflows::naive::{self, Snapshot};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one proxy must hold: (type, name) → (version, encoded body size).
type ExpectedConfig = BTreeMap<(ResourceType, String), (String, usize)>;

/// What every simulated proxy must hold, by proxy position (shared where identical).
pub struct Expected {
    per_proxy: Vec<Arc<ExpectedConfig>>,
}

impl Expected {
    /// What `connect` must send at least: every proxy's whole config, as the smallest
    /// Delta responses that carry it ([`delta_min_bytes`]: one per type).
    pub fn total_bytes(&self) -> u64 {
        self.bytes_of(0..self.per_proxy.len())
    }

    /// [`Self::total_bytes`] of the proxies at these positions only.
    pub fn bytes_of(&self, proxies: impl IntoIterator<Item = usize>) -> u64 {
        let mut per_config: HashMap<usize, u64> = HashMap::new();
        proxies
            .into_iter()
            .filter_map(|p| self.per_proxy.get(p))
            .map(|c| {
                *per_config
                    .entry(Arc::as_ptr(c) as usize)
                    .or_insert_with(|| {
                        delta_min_bytes(
                            c.iter()
                                .map(|((t, n), (v, l))| (*t, n.as_str(), Some((v.as_str(), *l)))),
                        )
                    })
            })
            .sum()
    }

    /// The encoded size of the resource bodies of every proxy's whole config, summed (the
    /// minimum before it counted the Delta envelope).
    pub fn total_body_bytes(&self) -> u64 {
        self.per_proxy
            .iter()
            .map(|c| c.values().map(|(_, l)| *l as u64).sum::<u64>())
            .sum()
    }
}

/// One changed resource of a proxy: its new version, or `None` when it is removed.
pub type ResourceChange = (ResourceType, String, Option<String>);

/// One proxy's expected config. With `vhds` (`serve --vhds`, Delta), each route
/// configuration is what the server sends over VHDS: the route configuration without its
/// virtual hosts, and each virtual host as an RDS entry of its own named `ROUTE/HOST` (the
/// simulated proxies hold them so).
fn to_expected(
    res: &BTreeMap<(ResourceType, String), dataflows::model::Resource>,
    vhds: bool,
) -> ExpectedConfig {
    let mut out = ExpectedConfig::new();
    for (k, r) in res {
        let split = (vhds && k.0 == ResourceType::Route)
            .then(|| crate::xds::vhds::split_route(&r.body))
            .flatten();
        match split {
            Some(s) => {
                out.insert(k.clone(), (s.route_version.to_string(), s.route.0.len()));
                for vh in &s.vhosts {
                    out.insert(
                        (ResourceType::Route, vh.name.to_string()),
                        (vh.version.to_string(), vh.body.0.len()),
                    );
                }
            }
            None => {
                out.insert(k.clone(), (r.version.clone(), r.body.0.len()));
            }
        }
    }
    out
}

/// The mode `requested` comes to for these inputs and proxies, and whether `namespace`
/// had to fall back to `full` (see [`namespace_mode_exact`]).
pub fn resolve_mode(
    requested: VerifyMode,
    records: &BTreeSet<Record>,
    proxies: &[Proxy],
) -> (VerifyMode, bool) {
    let mode = match requested {
        VerifyMode::Auto if proxies.len() <= 500 => VerifyMode::Full,
        VerifyMode::Auto => VerifyMode::Namespace,
        m => m,
    };
    if mode == VerifyMode::Namespace && !namespace_mode_exact(records, proxies) {
        (VerifyMode::Full, true)
    } else {
        (mode, false)
    }
}

/// The full recompute of one engine's run: its mesh settings, proxies and mode.
pub struct Oracle {
    pub mesh: MeshConfig,
    pub proxies: Arc<Vec<Proxy>>,
    pub mode: VerifyMode,
    /// The server serves route configurations over VHDS (`bench --vhds`).
    pub vhds: bool,
}

impl Oracle {
    /// What every proxy must hold for `records`, computed off the async threads.
    pub async fn compute(&self, records: BTreeSet<Record>) -> Result<Expected, String> {
        let (mesh, proxies, mode) = (self.mesh.clone(), self.proxies.clone(), self.mode);
        let vhds = self.vhds;
        tokio::task::spawn_blocking(move || compute_expected(&mesh, &records, &proxies, mode, vhds))
            .await
            .map_err(|e| format!("the recompute failed: {e}"))
    }
}

/// Whether `namespace` verification is exact for these inputs (see [`VerifyMode`]): a
/// sidecar's config must depend on its namespace alone. Gateway proxies (routers) are
/// always recomputed one by one.
fn namespace_mode_exact(records: &BTreeSet<Record>, proxies: &[Proxy]) -> bool {
    let proxy_ips: BTreeSet<&str> = proxies
        .iter()
        .filter(|p| p.kind == dataflows::model::ProxyKind::Sidecar)
        .flat_map(|p| p.ips.iter().map(String::as_str))
        .collect();
    records.iter().all(|r| match r {
        Record::Sidecar(s) => s.selector.is_none(),
        // A security policy with a selector may apply to some proxies of a namespace only.
        Record::Security(p) => p.selector.is_none(),
        Record::Endpoint(_, e) => !proxy_ips.contains(e.ip.as_str()),
        _ => true,
    })
}

/// The key a proxy's expected config is shared under in `namespace` mode.
fn verify_group(p: &Proxy) -> String {
    match p.kind {
        dataflows::model::ProxyKind::Sidecar => format!("ns {}", p.namespace),
        _ => format!("proxy {}", p.id),
    }
}

fn compute_expected(
    mesh: &MeshConfig,
    records: &BTreeSet<Record>,
    proxies: &[Proxy],
    mode: VerifyMode,
    vhds: bool,
) -> Expected {
    let mut snapshot = Snapshot {
        records: records.clone(),
    };
    if mode == VerifyMode::Namespace {
        let mut reps: BTreeMap<String, &Proxy> = BTreeMap::new();
        for p in proxies {
            reps.entry(verify_group(p)).or_insert(p);
        }
        snapshot
            .records
            .extend(reps.values().map(|p| Record::Proxy((*p).clone())));
        let out = naive::compute(mesh, &snapshot);
        let by_group: BTreeMap<&str, Arc<ExpectedConfig>> = reps
            .iter()
            .map(|(group, p)| {
                let cfg = out
                    .get(&p.id)
                    .map(|r| to_expected(r, vhds))
                    .unwrap_or_default();
                (group.as_str(), Arc::new(cfg))
            })
            .collect();
        let empty = Arc::new(ExpectedConfig::new());
        Expected {
            per_proxy: proxies
                .iter()
                .map(|p| {
                    by_group
                        .get(verify_group(p).as_str())
                        .cloned()
                        .unwrap_or(empty.clone())
                })
                .collect(),
        }
    } else {
        snapshot
            .records
            .extend(proxies.iter().map(|p| Record::Proxy(p.clone())));
        let out = naive::compute(mesh, &snapshot);
        Expected {
            per_proxy: proxies
                .iter()
                .map(|p| {
                    Arc::new(
                        out.get(&p.id)
                            .map(|r| to_expected(r, vhds))
                            .unwrap_or_default(),
                    )
                })
                .collect(),
        }
    }
}

/// The changes from `old` to `new`, the smallest Delta responses delivering them
/// ([`delta_min_bytes`]) and the size of the changed bodies alone.
fn diff_configs(old: &ExpectedConfig, new: &ExpectedConfig) -> (Vec<ResourceChange>, MinBytes) {
    let mut changes = Vec::new();
    let mut bodies = 0u64;
    let mut sent = Vec::new();
    for (k, (v, len)) in new {
        if old.get(k).map(|(ov, _)| ov) != Some(v) {
            changes.push((k.0, k.1.clone(), Some(v.clone())));
            sent.push((k.0, k.1.as_str(), Some((v.as_str(), *len))));
            bodies += *len as u64;
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            changes.push((k.0, k.1.clone(), None));
            sent.push((k.0, k.1.as_str(), None));
        }
    }
    let envelope = delta_min_bytes(sent);
    (
        changes,
        MinBytes {
            responses: envelope,
            bodies,
        },
    )
}

/// What a change must send at least, summed over the proxies it affects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MinBytes {
    /// The smallest Delta responses that deliver it ([`delta_min_bytes`]).
    pub responses: u64,
    /// The changed resources' bodies alone.
    pub bodies: u64,
}

/// Per proxy, the changes between two expectations (computed once per distinct pair).
/// One proxy config's changes and their minimum size.
type Diffed = (Arc<Vec<ResourceChange>>, MinBytes);

/// Proxies (by position) with their changes.
pub type Affected = Vec<(usize, Arc<Vec<ResourceChange>>)>;

pub fn affected_changes(old: &Expected, new: &Expected) -> (Affected, MinBytes) {
    affected_among(old, new, 0..old.per_proxy.len())
}

/// [`affected_changes`] of the proxies at these positions only.
pub fn affected_among(
    old: &Expected,
    new: &Expected,
    proxies: impl IntoIterator<Item = usize>,
) -> (Affected, MinBytes) {
    // Keyed by the addresses of the two shared configs.
    let mut cache: HashMap<(usize, usize), Diffed> = HashMap::new();
    let mut out = Vec::new();
    let mut min_bytes = MinBytes::default();
    for i in proxies {
        let (Some(o), Some(n)) = (old.per_proxy.get(i), new.per_proxy.get(i)) else {
            continue;
        };
        let key = (Arc::as_ptr(o) as usize, Arc::as_ptr(n) as usize);
        let (changes, bytes) = cache
            .entry(key)
            .or_insert_with(|| {
                let (c, b) = diff_configs(o, n);
                (Arc::new(c), b)
            })
            .clone();
        if !changes.is_empty() {
            min_bytes.responses += bytes.responses;
            min_bytes.bodies += bytes.bodies;
            out.push((i, changes));
        }
    }
    (out, min_bytes)
}

/// The latency of a proxy that holds every change, from `t0`; `None` while it does not.
pub fn converged_at(
    lg: &Loadgen,
    p: usize,
    changes: &[ResourceChange],
    t0: Instant,
) -> Option<Duration> {
    let handle = lg.proxies.get(p)?;
    let st = handle.lock();
    let mut latest = Duration::ZERO;
    for (t, name, version) in changes {
        let at = match version {
            Some(v) => {
                let h = st.version(*t, name).filter(|h| &h.version == v)?;
                h.at
            }
            None => {
                if st.version(*t, name).is_some() {
                    return None;
                }
                st.removed_at[type_index(*t)]
                    .get(name)
                    .copied()
                    .unwrap_or(t0)
            }
        };
        latest = latest.max(at.saturating_duration_since(t0));
    }
    Some(latest)
}

/// Compares every proxy's held set with the expectation: (proxies that differ, examples).
pub fn verify(lg: &Loadgen, expected: &Expected) -> (usize, Vec<String>) {
    let mut bad = 0;
    let mut examples = Vec::new();
    for (handle, exp) in lg.proxies.iter().zip(&expected.per_proxy) {
        let held = handle.lock().held_versions();
        let mut diffs = Vec::new();
        for ((t, name), (v, _)) in exp.iter() {
            match held.get(&(*t, name.clone())) {
                None => diffs.push(format!("missing {} {name}", t.short())),
                Some(h) if h != v => {
                    diffs.push(format!("{} {name}: holds {h}, expected {v}", t.short()))
                }
                _ => {}
            }
        }
        for (t, name) in held.keys() {
            if !exp.contains_key(&(*t, name.clone())) {
                diffs.push(format!("unexpected {} {name}", t.short()));
            }
        }
        if !diffs.is_empty() {
            bad += 1;
            if examples.len() < 10 {
                let n = diffs.len();
                diffs.truncate(3);
                examples.push(format!(
                    "{}: {} ({n} differences)",
                    handle.id,
                    diffs.join("; ")
                ));
            }
        }
    }
    (bad, examples)
}

/// The input records of the mesh the server sees, maintained from file-source rescans.
pub struct Inputs {
    source: FileSource,
    records: BTreeMap<Record, isize>,
}

impl Inputs {
    /// Reads the mesh in `dir`.
    pub fn new(dir: &Path, mesh: MeshConfig) -> Result<Inputs, String> {
        let mut inputs = Inputs {
            source: FileSource::new(dir, mesh),
            records: BTreeMap::new(),
        };
        inputs.rescan()?;
        Ok(inputs)
    }

    /// Takes in what changed in the directory since the last scan.
    pub fn rescan(&mut self) -> Result<(), String> {
        let scan = self.source.rescan();
        if !scan.errors.is_empty() {
            return Err(format!(
                "the generated config has errors: {}",
                scan.errors.join("; ")
            ));
        }
        for (r, d) in scan.changes {
            let e = self.records.entry(r.clone()).or_default();
            *e += d;
            if *e == 0 {
                self.records.remove(&r);
            }
        }
        Ok(())
    }

    pub fn set(&self) -> BTreeSet<Record> {
        self.records.keys().cloned().collect()
    }
}

/// Whether `dir` (the served directory) holds exactly what these inputs read.
pub fn same_records(dir: &Path, mesh: MeshConfig, inputs: &Inputs) -> bool {
    let mut served = FileSource::new(dir, mesh);
    let scan = served.rescan();
    let served_set: BTreeSet<Record> = scan
        .changes
        .into_iter()
        .filter(|(_, d)| *d > 0)
        .map(|(r, _)| r)
        .collect();
    served_set == inputs.set() && scan.errors.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataflows::synth::{self, Shape};

    /// Namespace verification shares one proxy's config with its namespace: exact only where
    /// no config tells proxies of a namespace apart — a selector Sidecar, an endpoint on a
    /// proxy's address, or a security policy with a selector falls back to full.
    #[test]
    fn a_selector_security_policy_makes_namespace_mode_inexact() {
        let mesh = MeshConfig::default();
        let mut shape = Shape::small();
        let records = |shape: &Shape| -> (BTreeSet<Record>, Vec<Proxy>) {
            let mut records = BTreeSet::new();
            let mut proxies = Vec::new();
            for r in synth::records(shape, &mesh) {
                match r {
                    Record::Proxy(p) => proxies.push(p),
                    r => {
                        records.insert(r);
                    }
                }
            }
            (records, proxies)
        };
        let (plain, proxies) = records(&shape);
        assert_eq!(
            resolve_mode(VerifyMode::Namespace, &plain, &proxies),
            (VerifyMode::Namespace, false)
        );
        shape.authz_policies = 3;
        let (policies, proxies) = records(&shape);
        assert_eq!(
            resolve_mode(VerifyMode::Namespace, &policies, &proxies),
            (VerifyMode::Full, true)
        );
    }
}
