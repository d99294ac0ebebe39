//! `failover`, the last row of a run with `--replicas` 2 or more: the last replica is
//! killed (SIGKILL, as a node dies) and, at the same moment, an endpoint every proxy sees
//! moves (`endpoint-shared`'s edit). The proxies that were on the killed replica open a new
//! stream on the next one and resume with what they hold; they must end up holding the
//! change and nothing else re-sent.
//!
//! Measured: per proxy, the time from the kill until it holds every change, and for a moved
//! one also has a new stream (one latency sample each: every proxy is `affected`, the moved
//! ones' samples also apart); what the moved proxies received against what the proxies
//! that stayed received for the same change, against the change's minimum for them, and
//! against their whole configs (what connecting anew would send). The replicas left must
//! also deliver the change to the proxies that stayed; every proxy is checked against the
//! recompute at the end.

use super::*;
use crate::bench::report::Failover;
use std::sync::Arc;

impl RunContext<'_> {
    pub(super) async fn failover(
        &mut self,
        lg: &Loadgen,
        protocol: Protocol,
        result: &mut ScenarioResult,
    ) -> Result<(), String> {
        let opts = self.opts;
        if protocol != Protocol::Delta {
            result.skipped = Some(
                "failover measures Delta resumption (initial_resource_versions); a SotW proxy \
                 that reconnects is sent everything again"
                    .into(),
            );
            return Ok(());
        }
        let killed = self.server.count() - 1;
        let is_moved: Vec<bool> = lg
            .proxies
            .iter()
            .map(|p| p.lock().server == killed)
            .collect();
        let moved: Vec<usize> = (0..lg.proxies.len()).filter(|i| is_moved[*i]).collect();
        if moved.is_empty() {
            result.skipped = Some(format!("no proxy is on replica {}", killed + 1));
            return Ok(());
        }
        let (description, edit) = match scenarios::endpoint_shared(self.state) {
            Ok(x) => x,
            Err(why) => {
                result.skipped = Some(why);
                return Ok(());
            }
        };
        mesh_gen::apply_edit(self.shadow_dir, &edit)?;
        let next = self.recompute().await?;
        let (affected, min_bytes) = expected::affected_changes(&self.expected, &next);
        let (_, moved_min) = expected::affected_among(&self.expected, &next, moved.clone());
        let mut figures = Failover {
            killed: killed + 1,
            moved: moved.len(),
            moved_min_bytes: moved_min.responses,
            moved_full_bytes: next.bytes_of(moved.iter().copied()),
            ..Default::default()
        };
        result.description = format!(
            "replica {} of {} killed (SIGKILL) with {} proxies on it, and at once: {description}; \
             they resume on the replicas left",
            killed + 1,
            self.server.count(),
            moved.len()
        );
        result.min_bytes = min_bytes.responses;
        result.min_body_bytes = min_bytes.bodies;
        let before: Vec<(Counters, u32)> = lg
            .proxies
            .iter()
            .map(|p| {
                let st = p.lock();
                (st.counters, st.reconnects)
            })
            .collect();

        let window = Window::open(self.server, Some(lg))?;
        let t0 = Instant::now();
        self.server.kill(killed)?;
        mesh_gen::apply_edit(self.config_dir, &edit)?;

        // A moved proxy is back when it has a new stream on another replica and holds
        // every change; one that stayed, when it holds every change.
        let mut changes: Vec<Option<Arc<Vec<expected::ResourceChange>>>> =
            vec![None; lg.proxies.len()];
        for (p, c) in &affected {
            changes[*p] = Some(c.clone());
        }
        let mut pending: Vec<usize> = (0..lg.proxies.len()).collect();
        let deadline = later(t0, opts.timeout);
        loop {
            let scan = Instant::now();
            pending.retain(|p| {
                let held = match &changes[*p] {
                    Some(c) => expected::converged_at(lg, *p, c, t0),
                    None => Some(Duration::ZERO),
                };
                let Some(held) = held else { return true };
                if !is_moved[*p] {
                    result.latency_ms.push(ms(held));
                    return false;
                }
                let st = lg.proxies[*p].lock();
                if st.reconnects <= before[*p].1 || st.server == killed {
                    return true;
                }
                let reopened = st
                    .connected_at
                    .map(|t| t.saturating_duration_since(t0))
                    .unwrap_or_default();
                let back = ms(held.max(reopened));
                result.latency_ms.push(back);
                figures.resync_ms.push(back);
                false
            });
            if pending.is_empty() || Instant::now() >= deadline {
                break;
            }
            if let Some(e) = lg.errors(1).into_iter().next() {
                return Err(format!("a simulated proxy failed: {e}"));
            }
            let pause = churn::poll_pause(scan.elapsed(), Duration::from_millis(2));
            tokio::time::sleep(pause).await;
        }
        result.affected = lg.proxies.len();
        result.converged = result.latency_ms.len();
        figures.resumed = figures.resync_ms.len();
        // Whatever else the resumption causes (resends) counts too.
        settle_after(opts, lg, t0).await;
        let affected_set: BTreeSet<usize> = affected.iter().map(|(p, _)| *p).collect();
        window.close_counting(self.server, lg, result, &affected_set)?;
        for (i, (p, (counters, _))) in lg.proxies.iter().zip(&before).enumerate() {
            let got = p.lock().counters.since(counters);
            if is_moved[i] {
                figures.moved_received.add(&got);
            } else {
                figures.stayed_received.add(&got);
            }
        }
        result.failover = Some(figures);
        record_check(result, expected::verify(lg, &next));
        self.expected = next;
        Ok(())
    }
}
