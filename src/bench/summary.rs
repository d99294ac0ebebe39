//! Medians over the repetitions of a `meshflow bench` run, and baseline/meshflow ratios.
//!
//! Every repetition runs every engine once, one after the other, on a freshly generated
//! copy of the same mesh; a ratio is taken between the two engines *of the same
//! repetition* (side by side), and the report gives the median of those per-repetition
//! ratios. Every other figure is the median over repetitions of that figure (for latency:
//! the median of each repetition's p50, p99 and max).

use super::loadgen::percentile;
use super::report::{EngineReport, ScenarioResult};
use crate::engine::EngineKind;
use serde_json::json;
use std::collections::BTreeSet;

/// The median of some values (mean of the two middle ones for an even count).
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// One engine's scenario, summarised over the repetitions that ran it.
#[derive(Clone, Debug)]
pub struct MedianRow {
    pub engine: EngineKind,
    pub protocol: &'static str,
    pub scenario: String,
    /// Repetitions that measured it (not skipped).
    pub runs: usize,
    pub affected: Option<f64>,
    /// Largest number of affected proxies that did not converge in any repetition.
    pub not_converged: usize,
    pub proxies_messaged: Option<f64>,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
    pub messages: Option<f64>,
    /// Messages per affected proxy.
    pub msgs_per_affected: Option<f64>,
    pub resources: Option<f64>,
    pub bytes: Option<f64>,
    pub min_bytes: Option<f64>,
    pub cpu_s: Option<f64>,
    /// Server CPU µs per message received ([`ScenarioResult::cpu_us_per_message`]).
    pub cpu_us_per_msg: Option<f64>,
    pub cpu_cores: Option<f64>,
    /// The bench process's CPU seconds (the simulated proxies).
    pub loadgen_cpu_s: Option<f64>,
    pub rss_mib: Option<f64>,
    pub verified: bool,
}

fn p(r: &ScenarioResult, q: f64) -> Option<f64> {
    let mut lat = r.latency_ms.clone();
    lat.sort_by(f64::total_cmp);
    if q >= 1.0 {
        lat.last().copied()
    } else {
        percentile(&lat, q)
    }
}

fn med(rs: &[&ScenarioResult], f: impl Fn(&ScenarioResult) -> Option<f64>) -> Option<f64> {
    median(rs.iter().filter_map(|r| f(r)).collect())
}

/// Scenario names in first-seen order.
fn scenario_names(engines: &[EngineReport]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for e in engines {
        for r in &e.results {
            if !names.contains(&r.name) {
                names.push(r.name.clone());
            }
        }
    }
    names
}

/// Engines in first-seen order.
fn engine_kinds(engines: &[EngineReport]) -> Vec<EngineKind> {
    let mut out: Vec<EngineKind> = Vec::new();
    for e in engines {
        if !out.contains(&e.engine) {
            out.push(e.engine);
        }
    }
    out
}

/// The median rows of a run, per engine then scenario.
pub fn median_rows(engines: &[EngineReport]) -> Vec<MedianRow> {
    let names = scenario_names(engines);
    let mut rows = Vec::new();
    for kind in engine_kinds(engines) {
        let reports: Vec<&EngineReport> = engines.iter().filter(|e| e.engine == kind).collect();
        let protocol = reports.first().map(|e| e.protocol.name()).unwrap_or("");
        for name in &names {
            let rs: Vec<&ScenarioResult> = reports
                .iter()
                .filter_map(|e| e.results.iter().find(|r| &r.name == name))
                .filter(|r| r.skipped.is_none())
                .collect();
            if rs.is_empty() {
                continue;
            }
            rows.push(MedianRow {
                engine: kind,
                protocol,
                scenario: name.clone(),
                runs: rs.len(),
                affected: med(&rs, |r| Some(r.affected as f64)),
                not_converged: rs
                    .iter()
                    .map(|r| r.affected - r.converged.min(r.affected))
                    .max()
                    .unwrap_or(0),
                proxies_messaged: med(&rs, |r| Some(r.proxies_messaged as f64)),
                p50: med(&rs, |r| p(r, 0.5)),
                p99: med(&rs, |r| p(r, 0.99)),
                max: med(&rs, |r| p(r, 1.0)),
                messages: med(&rs, |r| Some(r.received.total_messages() as f64)),
                msgs_per_affected: med(&rs, ScenarioResult::messages_per_affected),
                resources: med(&rs, |r| Some(r.received.total_resources() as f64)),
                bytes: med(&rs, |r| Some(r.received.total_bytes() as f64)),
                min_bytes: med(&rs, |r| (r.min_bytes > 0).then_some(r.min_bytes as f64)),
                cpu_s: med(&rs, |r| Some(r.server_cpu_s)),
                cpu_us_per_msg: med(&rs, ScenarioResult::cpu_us_per_message),
                cpu_cores: med(&rs, ScenarioResult::cpu_cores),
                loadgen_cpu_s: med(&rs, |r| r.loadgen_cpu_s),
                rss_mib: med(&rs, |r| r.peak_rss_kib.map(|k| k as f64 / 1024.0)),
                verified: rs.iter().all(|r| r.verified),
            });
        }
    }
    rows
}

/// Baseline ÷ meshflow for one scenario: the median of the per-repetition ratios.
#[derive(Clone, Debug)]
pub struct RatioRow {
    /// The baseline engine (full-push or istio-style).
    pub baseline: EngineKind,
    pub scenario: String,
    /// Repetitions where both engines measured the scenario.
    pub pairs: usize,
    pub bytes: Option<f64>,
    pub cpu: Option<f64>,
    pub p99: Option<f64>,
    /// meshflow's bytes ÷ the minimum (median over repetitions).
    pub meshflow_bytes_over_min: Option<f64>,
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0 && a.is_finite() && b.is_finite()).then_some(a / b)
}

/// Ratios between each baseline that ran and meshflow, repetition by repetition.
pub fn ratio_rows(engines: &[EngineReport]) -> Vec<RatioRow> {
    let mut rows = Vec::new();
    let runs = engines.iter().map(|e| e.run + 1).max().unwrap_or(0);
    let baselines = engine_kinds(engines)
        .into_iter()
        .filter(|k| *k != EngineKind::Meshflow);
    for (baseline, name) in
        baselines.flat_map(|b| scenario_names(engines).into_iter().map(move |n| (b, n)))
    {
        let find = |run: usize, kind: EngineKind| {
            engines
                .iter()
                .find(|e| e.run == run && e.engine == kind)
                .and_then(|e| e.results.iter().find(|r| r.name == name))
                .filter(|r| r.skipped.is_none())
        };
        let (mut bytes, mut cpu, mut p99, mut over_min) = (vec![], vec![], vec![], vec![]);
        let mut pairs = 0;
        for run in 0..runs {
            let m = find(run, EngineKind::Meshflow);
            if let Some(m) = m {
                if m.min_bytes > 0 {
                    over_min.push(m.received.total_bytes() as f64 / m.min_bytes as f64);
                }
            }
            let (Some(m), Some(b)) = (m, find(run, baseline)) else {
                continue;
            };
            pairs += 1;
            bytes.extend(ratio(
                b.received.total_bytes() as f64,
                m.received.total_bytes() as f64,
            ));
            cpu.extend(ratio(b.server_cpu_s, m.server_cpu_s));
            // A baseline that did not converge has no p99 to compare.
            if b.converged == b.affected && m.converged == m.affected {
                if let (Some(pb), Some(pm)) = (p(b, 0.99), p(m, 0.99)) {
                    p99.extend(ratio(pb, pm));
                }
            }
        }
        rows.push(RatioRow {
            baseline,
            scenario: name,
            pairs,
            bytes: median(bytes),
            cpu: median(cpu),
            p99: median(p99),
            meshflow_bytes_over_min: median(over_min),
        });
    }
    rows
}

fn f1(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "–".into())
}

fn f0(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.0}")).unwrap_or_else(|| "–".into())
}

fn f2(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "–".into())
}

fn f3(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.3}")).unwrap_or_else(|| "–".into())
}

fn fx(v: Option<f64>) -> String {
    match v {
        Some(x) if x >= 100.0 => format!("{x:.0}×"),
        Some(x) if x >= 10.0 => format!("{x:.1}×"),
        Some(x) => format!("{x:.2}×"),
        None => "–".into(),
    }
}

/// The medians and ratios as markdown tables.
pub fn markdown(engines: &[EngineReport], runs: usize) -> String {
    let mut md = String::new();
    let mut skipped = BTreeSet::new();
    for e in engines {
        if let Some(why) = &e.skipped {
            if skipped.insert(e.engine.name()) {
                md.push_str(&format!("Engine `{}` skipped: {why}.\n\n", e.engine.name()));
            }
        }
    }
    md.push_str(&format!("Medians over {runs} repetition(s):\n\n"));
    md.push_str(
        "| engine | xDS | scenario | runs | affected proxies | proxies messaged | p50 ms | p99 ms | max ms \
         | messages | messages per affected proxy | resources | bytes | min bytes | server CPU s | server CPU µs per message | CPU cores \
         | loadgen CPU s | peak RSS MiB | verified |\n",
    );
    md.push_str(
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in median_rows(engines) {
        let affected = if r.not_converged == 0 {
            f0(r.affected)
        } else {
            format!(
                "{} (**{} did not converge** in a run)",
                f0(r.affected),
                r.not_converged
            )
        };
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.engine.name(),
            r.protocol,
            r.scenario,
            r.runs,
            affected,
            f0(r.proxies_messaged),
            f1(r.p50),
            f1(r.p99),
            f1(r.max),
            f0(r.messages),
            f2(r.msgs_per_affected),
            f0(r.resources),
            f0(r.bytes),
            f0(r.min_bytes),
            f3(r.cpu_s),
            f1(r.cpu_us_per_msg),
            r.cpu_cores.map(|c| format!("{c:.3}")).unwrap_or_else(|| "–".into()),
            f3(r.loadgen_cpu_s),
            f0(r.rss_mib),
            if r.verified { "yes" } else { "**NO**" },
        ));
    }
    let ratios = ratio_rows(engines);
    if ratios.iter().any(|r| r.pairs > 0) {
        md.push_str(
            "\nBaseline ÷ meshflow, per repetition (same run, side by side), median over \
             repetitions; meshflow bytes ÷ minimum:\n\n\
             | baseline | scenario | pairs | bytes | server CPU | p99 latency | meshflow bytes ÷ min |\n\
             |---|---|---:|---:|---:|---:|---:|\n",
        );
        for r in ratios.iter().filter(|r| r.pairs > 0) {
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                r.baseline.name(),
                r.scenario,
                r.pairs,
                fx(r.bytes),
                fx(r.cpu),
                fx(r.p99),
                r.meshflow_bytes_over_min
                    .map(|x| format!("{x:.2}"))
                    .unwrap_or_else(|| "–".into()),
            ));
        }
    }
    md
}

/// The medians and ratios as JSON.
pub fn json(engines: &[EngineReport]) -> serde_json::Value {
    json!({
        "medians": median_rows(engines).iter().map(|r| json!({
            "engine": r.engine.name(),
            "protocol": r.protocol,
            "scenario": r.scenario,
            "runs": r.runs,
            "affected_proxies": r.affected,
            "max_not_converged": r.not_converged,
            "proxies_messaged": r.proxies_messaged,
            "latency_ms": {"p50": r.p50, "p99": r.p99, "max": r.max},
            "messages": r.messages,
            "messages_per_affected_proxy": r.msgs_per_affected,
            "resources": r.resources,
            "bytes": r.bytes,
            "min_bytes": r.min_bytes,
            "server_cpu_s": r.cpu_s,
            "server_cpu_us_per_message": r.cpu_us_per_msg,
            "server_cpu_cores": r.cpu_cores,
            "loadgen_cpu_s": r.loadgen_cpu_s,
            "peak_rss_mib": r.rss_mib,
            "verified": r.verified,
        })).collect::<Vec<_>>(),
        "ratios_over_meshflow": ratio_rows(engines).iter().map(|r| json!({
            "baseline": r.baseline.name(),
            "scenario": r.scenario,
            "pairs": r.pairs,
            "bytes": r.bytes,
            "server_cpu": r.cpu,
            "p99_latency": r.p99,
            "meshflow_bytes_over_min": r.meshflow_bytes_over_min,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn bench_median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }
}
