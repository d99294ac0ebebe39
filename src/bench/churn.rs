//! The `churn` scenario: sustained endpoint churn at a fixed rate (default 100 endpoint
//! moves per second for 60 s), the way a busy cluster's pods come and go.
//!
//! Change `i` is written at `start + i / rate` (on schedule, whatever the server does): one
//! endpoint of service `svc-{i mod N}` moves to a fresh IP (its EndpointSlice and Pod, one
//! file renamed into place). Consecutive changes touch different services, so a service is
//! changed again only `N / rate` seconds later (10 s on M, 50 s on L): far longer than any
//! convergence, which makes each change's effect on a proxy unambiguous.
//!
//! The proxies a change must reach are those holding that service's ClusterLoadAssignment
//! (`outbound|80||HOST`, as Envoy subscribes to it) when the churn starts. The harness
//! builds the assignment the service must have after change `i` with the server's own
//! builder (`dataflows::translate::endpoint::load_assignment`), so it knows the exact
//! version (content hash) to wait for. A proxy has converged for change `i` when it holds
//! that version — or the version of a later change of the same service, for a server so far
//! behind that it skipped one; its latency is that version's arrival minus the write. Every
//! (change, proxy) pair is one latency sample, and the minimum bytes are the size of each
//! new assignment times the proxies holding it. After the last change, the harness checks
//! every proxy's whole config against the full recompute, as after every other scenario.
//!
//! `rollout` is the same measurement on one service ([`Moves::OneService`]): its endpoints
//! replaced one by one, the way a Deployment's rolling update replaces its pods.

use super::loadgen::{later, ms, Loadgen};
use super::mesh_gen::{self, Edit, MeshState};
use dataflows::model::Endpoint;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The churn to apply.
#[derive(Clone, Copy, Debug)]
pub struct ChurnConfig {
    /// Endpoint changes per second.
    pub rate: f64,
    /// How long changes are written.
    pub duration: Duration,
}

/// What the churn measured (server figures are taken by the caller).
#[derive(Debug, Default)]
pub struct ChurnOutcome {
    pub changes: usize,
    /// (change, proxy) pairs that had to converge.
    pub pairs: usize,
    pub converged: usize,
    /// One sample per converged pair, ms.
    pub latency_ms: Vec<f64>,
    /// How far behind schedule the writer fell at most (the harness's own lateness), ms.
    pub max_write_lag_ms: f64,
    /// The edits, in order (to replay on the harness's shadow copy).
    pub edits: Vec<Edit>,
    /// Wall time from the first write to the last, s.
    pub write_window_s: f64,
    /// The smallest Delta response carrying each new assignment, times the proxies
    /// holding it.
    pub min_bytes: u64,
    /// Encoded size of each new assignment times the proxies holding it.
    pub min_body_bytes: u64,
}

/// Which endpoint each change moves.
#[derive(Clone, Copy, Debug)]
pub enum Moves {
    /// Change `i`: an endpoint of `svc-{i mod N}` (consecutive changes, different services).
    RoundRobin,
    /// Change `i`: endpoint `i` (modulo its endpoints) of this service.
    OneService(usize),
}

struct Pending {
    change: usize,
    proxy: u32,
    name: Arc<str>,
    expected: Arc<str>,
}

/// How long to wait before scanning the pending proxies again: at least `floor`, and at
/// least four times what the last scan took, so that the harness (which shares the cores
/// with the server and the simulated proxies) spends at most a fifth of a core on it — a
/// scan of 250,000 pending (change, proxy) pairs at XL takes tens of milliseconds. Latencies
/// come from the arrival times the proxies record, so scanning less often only ends the
/// wait a little later.
pub fn poll_pause(last_scan: Duration, floor: Duration) -> Duration {
    floor.max(last_scan.saturating_mul(4))
}

/// EDS name → proxies (by position) holding it now.
fn eds_index(lg: &Loadgen) -> HashMap<String, Vec<u32>> {
    let mut index: HashMap<String, Vec<u32>> = HashMap::new();
    for (i, p) in lg.proxies.iter().enumerate() {
        let st = p.lock();
        for name in st.held[1].keys() {
            match index.get_mut(name) {
                Some(v) => v.push(i as u32),
                None => {
                    index.insert(name.clone(), vec![i as u32]);
                }
            }
        }
    }
    index
}

/// Runs the churn against the served directory `config_dir`; `timeout` bounds the wait for
/// the last changes to converge.
pub async fn drive(
    lg: &Loadgen,
    state: &mut MeshState,
    config_dir: &Path,
    cfg: ChurnConfig,
    moves: Moves,
    timeout: Duration,
    mut progress: impl FnMut(usize, usize),
) -> Result<ChurnOutcome, String> {
    let services = state.services.len();
    if services == 0 || cfg.rate <= 0.0 {
        return Err("churn needs services and a positive rate".into());
    }
    let total = (cfg.rate * cfg.duration.as_secs_f64()).round() as usize;
    let index = eds_index(lg);
    let mut out = ChurnOutcome {
        changes: total,
        ..Default::default()
    };
    let mut pending: Vec<Pending> = Vec::new();
    let mut t0s: Vec<Instant> = Vec::with_capacity(total);
    let start = Instant::now();
    let period = Duration::from_secs_f64(1.0 / cfg.rate);
    // Per assignment name: (version, change) of every change so far, in order.
    let mut versions: HashMap<Arc<str>, Vec<(Arc<str>, usize)>> = HashMap::new();
    let check = |pending: &mut Vec<Pending>,
                 t0s: &[Instant],
                 versions: &HashMap<Arc<str>, Vec<(Arc<str>, usize)>>,
                 out: &mut ChurnOutcome| {
        pending.retain(|p| {
            let st = lg.proxies[p.proxy as usize].lock();
            let Some(h) = st.held[1].get(&*p.name) else {
                return true;
            };
            let done = *h.version == *p.expected
                || versions
                    .get(&p.name)
                    .is_some_and(|vs| vs.iter().any(|(v, c)| *c > p.change && **v == *h.version));
            if done {
                out.latency_ms
                    .push(ms(h.at.saturating_duration_since(t0s[p.change])));
                out.converged += 1;
            }
            !done
        });
    };
    let mut last_check = Instant::now();
    for i in 0..total {
        let due = start + period.mul_f64(i as f64);
        tokio::time::sleep_until(due.into()).await;
        let (s, e) = match moves {
            Moves::RoundRobin => {
                let s = i % services;
                (s, (i / services) % state.services[s].endpoints.len().max(1))
            }
            Moves::OneService(s) => {
                let n = state.services.get(s).map_or(0, |x| x.endpoints.len());
                (s, i % n.max(1))
            }
        };
        let host = state.hostname(s);
        let name: Arc<str> = dataflows::translate::outbound_cluster_name(80, None, &host).into();
        let edit = state.move_endpoint(s, e)?;
        // The assignment the service has after this change, built as the server builds it.
        let eps: Vec<Endpoint> = state.services[s]
            .endpoints
            .iter()
            .map(|ep| Endpoint {
                identity: None,
                mtls_disabled: false,
                ip: ep.ip.clone(),
                port: 8080,
                ready: true,
                labels: Default::default(),
                origins: Vec::new(),
                placement: Default::default(),
            })
            .collect();
        let cla = dataflows::translate::endpoint::load_assignment(&name, &eps);
        let expected: Arc<str> = cla.version.as_str().into();
        versions
            .entry(name.clone())
            .or_default()
            .push((expected.clone(), i));
        // The moved endpoint's subset (if its DestinationRule selects its version) changes
        // too: its assignment is part of what the change must send.
        let subset = {
            let svc = &state.services[s];
            let version = svc.endpoints.get(e).map(|ep| ep.version.clone());
            version.filter(|v| svc.subsets.contains(v)).map(|v| {
                let sub_name = dataflows::translate::outbound_cluster_name(80, Some(&v), &host);
                let sub_eps: Vec<Endpoint> = svc
                    .endpoints
                    .iter()
                    .zip(&eps)
                    .filter(|(ep, _)| ep.version == v)
                    .map(|(_, x)| x.clone())
                    .collect();
                dataflows::translate::endpoint::load_assignment(&sub_name, &sub_eps)
            })
        };
        if let Some(holders) = index.get(&*name) {
            let mut changed = vec![(
                dataflows::model::ResourceType::Endpoint,
                &*name,
                Some((cla.version.as_str(), cla.body.0.len())),
            )];
            let mut body_bytes = cla.body.0.len() as u64;
            // Every holder of a service's assignment holds its subsets' (the Sidecar
            // imports hosts, not clusters): one response carries both.
            if let Some(sub) = subset
                .as_ref()
                .filter(|c| index.contains_key(c.name.as_str()))
            {
                changed.push((
                    dataflows::model::ResourceType::Endpoint,
                    sub.name.as_str(),
                    Some((sub.version.as_str(), sub.body.0.len())),
                ));
                body_bytes += sub.body.0.len() as u64;
            }
            let response = super::min_bytes::delta_min_bytes(changed);
            out.min_bytes += response * holders.len() as u64;
            out.min_body_bytes += body_bytes * holders.len() as u64;
            for &p in holders {
                pending.push(Pending {
                    change: i,
                    proxy: p,
                    name: name.clone(),
                    expected: expected.clone(),
                });
                out.pairs += 1;
            }
        }
        let t0 = Instant::now();
        mesh_gen::apply_edit(config_dir, &edit)?;
        t0s.push(t0);
        out.max_write_lag_ms = out
            .max_write_lag_ms
            .max(ms(t0.saturating_duration_since(due)));
        out.edits.push(edit);
        // Latencies come from the arrival times the proxies record, not from when they are
        // checked: checking seldom only keeps the harness off the server's cores.
        if last_check.elapsed() >= Duration::from_millis(500) {
            check(&mut pending, &t0s, &versions, &mut out);
            progress(i + 1, total);
            last_check = Instant::now();
        }
    }
    out.write_window_s = t0s
        .last()
        .map(|t| t.saturating_duration_since(start).as_secs_f64())
        .unwrap_or(0.0);
    let deadline = later(Instant::now(), timeout);
    loop {
        let scan = Instant::now();
        check(&mut pending, &t0s, &versions, &mut out);
        if pending.is_empty() || Instant::now() >= deadline {
            break;
        }
        if let Some(e) = lg.errors(1).into_iter().next() {
            return Err(format!("a simulated proxy failed: {e}"));
        }
        tokio::time::sleep(poll_pause(scan.elapsed(), Duration::from_millis(20))).await;
    }
    progress(total, total);
    Ok(out)
}
