//! The report as text: the whole run's JSON and markdown (the medians and ratios come from
//! [`super::summary`]), and the one line printed as each scenario ends.

use super::loadgen::percentile;
use super::mesh_gen;
use super::report::{Failover, Report, ScenarioResult};
use super::summary;
use serde_json::json;

/// One scenario's JSON.
fn scenario_json(r: &ScenarioResult) -> serde_json::Value {
    let lat = r.sorted_latency();
    json!({
        "scenario": r.name,
        "window_s": r.window_s,
        "changes": r.changes,
        "rss_samples_mib": r.rss_samples,
        "server_cpu_cores": r.cpu_cores(),
        "description": r.description,
        "skipped": r.skipped,
        "affected_proxies": r.affected,
        "converged_proxies": r.converged,
        "latency_ms": {
            "p50": percentile(&lat, 0.50),
            "p99": percentile(&lat, 0.99),
            "max": lat.last().copied(),
        },
        "received": r.received.json(),
        "proxies_messaged": r.proxies_messaged,
        "messages_per_affected_proxy": r.messages_per_affected(),
        "unaffected_proxies_messaged": r.unaffected_messaged,
        "min_bytes": r.min_bytes,
        "min_body_bytes": r.min_body_bytes,
        "server_cpu_s": r.server_cpu_s,
        "server_cpu_us_per_message": r.cpu_us_per_message(),
        "server_cpu_task_s": r.server_cpu_task_s,
        "loadgen_cpu_s": r.loadgen_cpu_s,
        "loadgen_peak_rss_kib": r.loadgen_peak_rss_kib,
        "server_peak_rss_kib": r.peak_rss_kib,
        "verified": r.verified,
        "mismatched_proxies": r.mismatched_proxies,
        "mismatches": r.mismatches,
        "replicas": r.replicas.iter().map(|f| json!({
            "cpu_s": f.cpu_s,
            "peak_rss_kib": f.peak_rss_kib,
            "proxies": f.proxies,
        })).collect::<Vec<_>>(),
        "failover": r.failover.as_ref().map(failover_json),
        "ok": r.ok(),
    })
}

fn failover_json(f: &Failover) -> serde_json::Value {
    json!({
        "killed_replica": f.killed,
        "moved_proxies": f.moved,
        "resumed_proxies": f.resumed,
        "resync_ms": resync_json(f),
        "moved_received": f.moved_received.json(),
        "stayed_received": f.stayed_received.json(),
        "moved_min_bytes": f.moved_min_bytes,
        "moved_full_bytes": f.moved_full_bytes,
        "moved_bytes_per_min": ratio(f.moved_received.total_bytes(), f.moved_min_bytes),
        "moved_bytes_per_full": ratio(f.moved_received.total_bytes(), f.moved_full_bytes),
    })
}

/// The moved proxies' resync times: p50, p99, max.
fn resync_json(f: &Failover) -> serde_json::Value {
    let mut v = f.resync_ms.clone();
    v.sort_by(f64::total_cmp);
    json!({"p50": percentile(&v, 0.5), "p99": percentile(&v, 0.99), "max": v.last()})
}

/// `a / b`, `None` when `b` is 0.
fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// `failover`'s figures in one sentence.
fn failover_text(f: &Failover) -> String {
    let x = |v: Option<f64>| v.map(|r| format!("{r:.3}×")).unwrap_or_else(|| "–".into());
    let mut resync = f.resync_ms.clone();
    resync.sort_by(f64::total_cmp);
    let at = |q| {
        percentile(&resync, q)
            .map(|v| format!("{v:.1}"))
            .unwrap_or_else(|| "–".into())
    };
    format!(
        "{} of {} moved proxies resumed (kill → resumed and holding the change: p50 {} ms, \
         p99 {} ms); they received {} messages, {} B ({} the change's \
         minimum for them, {} B; {} their whole configs, {} B); the proxies that stayed \
         received {} messages, {} B",
        f.resumed,
        f.moved,
        at(0.5),
        at(0.99),
        f.moved_received.total_messages(),
        f.moved_received.total_bytes(),
        x(ratio(f.moved_received.total_bytes(), f.moved_min_bytes)),
        f.moved_min_bytes,
        x(ratio(f.moved_received.total_bytes(), f.moved_full_bytes)),
        f.moved_full_bytes,
        f.stayed_received.total_messages(),
        f.stayed_received.total_bytes(),
    )
}

/// The whole run's JSON.
pub fn json(report: &Report) -> serde_json::Value {
    let o = &report.options;
    json!({
        "command": o.command,
        "started_unix": report.started_unix,
        "machine": report.machine,
        "shape_name": o.shape_name,
        "shape": mesh_gen::shape_json(&o.shape, &o.mesh),
        "workers": o.workers,
        "replicas": o.replicas,
        "debounce_ms": o.debounce_ms,
        "settle_ms": o.settle.as_millis() as u64,
        "runs": o.runs,
        "churn": {"rate_per_s": o.churn.rate, "duration_s": o.churn.duration.as_secs_f64()},
        "ok": report.ok(),
        "summary": summary::json(&report.engines),
        "engines": report.engines.iter().map(|e| json!({
            "run": e.run + 1,
            "engine": e.engine.name(),
            "protocol": e.protocol.name(),
            "verify": e.verify,
            "error": e.error,
            "skipped": e.skipped,
            "server_log": e.server_log.as_ref().map(|p| p.display().to_string()),
            "ok": e.ok(),
            "scenarios": e.results.iter().map(scenario_json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// The shape and settings, the medians and ratios, then every repetition's rows.
pub fn markdown(report: &Report) -> String {
    let mut md = markdown_header(report);
    md.push_str(&summary::markdown(&report.engines, report.options.runs));
    md.push_str("\nEvery repetition:\n\n");
    md.push_str(&markdown_runs(report));
    md.push_str(&markdown_rss(report));
    md.push_str(&markdown_replicas(report));
    md
}

/// One line per scenario and run for which `line` has something: `LABEL during `name`,
/// run N engine: …` (the rows' figures that do not fit the table).
fn per_scenario_lines(
    report: &Report,
    label: &str,
    line: impl Fn(&ScenarioResult) -> Option<String>,
) -> String {
    let mut md = String::new();
    for e in &report.engines {
        for r in &e.results {
            if let Some(text) = line(r) {
                md.push_str(&format!(
                    "\n{label} during `{}`, run {} {}: {text}\n",
                    r.name,
                    e.run + 1,
                    e.engine.name(),
                ));
            }
        }
    }
    md
}

/// With several replicas: each one's CPU and peak memory per scenario, and `failover`.
fn markdown_replicas(report: &Report) -> String {
    let replicas = per_scenario_lines(report, "Replicas", |r| {
        let each: Vec<String> = r
            .replicas
            .iter()
            .enumerate()
            .map(|(i, f)| match (f.cpu_s, f.peak_rss_kib) {
                (Some(cpu), rss) => format!(
                    "replica {}: {} proxies, CPU {cpu:.3} s, peak RSS {} MiB",
                    i + 1,
                    f.proxies,
                    rss.map(|k| format!("{:.0}", k as f64 / 1024.0))
                        .unwrap_or_else(|| "–".into())
                ),
                (None, _) => format!("replica {}: killed", i + 1),
            })
            .collect();
        (!each.is_empty()).then(|| each.join("; "))
    });
    let failover = per_scenario_lines(report, "Failover", |r| {
        r.failover
            .as_ref()
            .map(|f| format!("{}.", failover_text(f)))
    });
    replicas + &failover
}

/// The server's resident memory over each sustained scenario (`churn`), one line per run.
fn markdown_rss(report: &Report) -> String {
    per_scenario_lines(report, "RSS MiB", |r| {
        let points: Vec<String> = r
            .rss_samples
            .iter()
            .map(|(t, mib)| format!("{t:.0} s {mib:.0}"))
            .collect();
        (!points.is_empty()).then(|| points.join(", "))
    })
}

fn markdown_header(report: &Report) -> String {
    let o = &report.options;
    let s = &o.shape;
    let mut md = String::new();
    md.push_str(&format!(
        "Shape `{}`: {} services × {} endpoints, {} namespaces, {} proxies, \
             VirtualService+DestinationRule on every {}th service, Sidecar scoping {}{}; \
             {} timely worker(s), debounce {} ms.\n\n",
        o.shape_name,
        s.services,
        s.endpoints_per_service,
        s.namespaces,
        s.proxies,
        s.vs_every,
        if s.sidecar_scoping { "on" } else { "off" },
        if s.sidecar_scoping {
            format!(" (own namespace + {} shared)", s.shared_namespaces)
        } else {
            String::new()
        },
        o.workers,
        o.debounce_ms,
    ));
    if o.replicas > 1 {
        md.push_str(&format!(
            "{} replicas of the server on the same directory, the proxies' connections spread \
             over them one after another; server figures are their sums (each one's below the \
             table). The run ends with `failover`: the last replica killed while an endpoint \
             every proxy sees moves, its proxies resuming on the others.\n\n",
            o.replicas
        ));
    }
    if s.gateways > 0 {
        md.push_str(&format!(
            "{} gateway proxies (`router`, selected by one Gateway on port 80) and a \
                 VirtualService bound to it for every {}th service.\n\n",
            s.gateways, s.gateway_vs_every
        ));
        if s.http_routes > 0 {
            md.push_str(&format!(
                "The gateway proxies also run the Gateway API Gateway `web` (HTTP on port 8080) \
                 with {} HTTPRoutes, one for each of the first {} services.\n\n",
                s.http_routes, s.http_routes
            ));
        }
    }
    if o.scenarios.iter().any(|s| s.is_churn()) {
        md.push_str(&format!(
            "`churn`: {} endpoint moves per second for {} s (latency: one sample per \
                 change and proxy that holds the service's assignment).\n\n",
            o.churn.rate,
            o.churn.duration.as_secs_f64()
        ));
    }
    md
}

/// Every repetition's rows (one per repetition, engine and scenario).
fn markdown_runs(report: &Report) -> String {
    let mut md = String::new();
    md.push_str(
            "| run | engine | xDS | scenario | affected proxies | proxies messaged | p50 ms | p99 ms | max ms \
             | messages | messages per affected proxy | resources | bytes | min bytes | server CPU s \
             | server CPU µs per message | loadgen CPU s | peak RSS MiB | verified |\n",
        );
    md.push_str(
        "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    let f = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "–".into());
    for e in &report.engines {
        if let Some(why) = &e.skipped {
            md.push_str(&format!(
                "| {} | {} | {} | (skipped: {}) ||||||||||||||||\n",
                e.run + 1,
                e.engine.name(),
                e.protocol.name(),
                why.replace('|', "/")
            ));
        }
        if let Some(err) = &e.error {
            md.push_str(&format!(
                "| {} | {} | {} | (did not run: {}) ||||||||||||||||\n",
                e.run + 1,
                e.engine.name(),
                e.protocol.name(),
                err.replace('|', "/")
            ));
        }
        for r in &e.results {
            if let Some(why) = &r.skipped {
                md.push_str(&format!(
                    "| {} | {} | {} | {} (skipped: {}) ||||||||||||||||\n",
                    e.run + 1,
                    e.engine.name(),
                    e.protocol.name(),
                    r.name,
                    why
                ));
                continue;
            }
            let lat = r.sorted_latency();
            let verified = if r.verified {
                format!("yes ({})", e.verify)
            } else {
                format!("**NO** ({} proxies differ)", r.mismatched_proxies)
            };
            let affected = if r.converged == r.affected {
                r.affected.to_string()
            } else {
                format!(
                    "{} (**{} not converged**)",
                    r.affected,
                    r.affected - r.converged
                )
            };
            md.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.3} | {} | {} | {} | {} |\n",
                    e.run + 1,
                    e.engine.name(),
                    e.protocol.name(),
                    r.name,
                    affected,
                    r.proxies_messaged,
                    f(percentile(&lat, 0.5)),
                    f(percentile(&lat, 0.99)),
                    f(lat.last().copied()),
                    r.received.total_messages(),
                    r.messages_per_affected()
                        .map(|m| format!("{m:.2}"))
                        .unwrap_or_else(|| "–".into()),
                    r.received.total_resources(),
                    r.received.total_bytes(),
                    r.min_bytes,
                    r.server_cpu_s,
                    f(r.cpu_us_per_message()),
                    r.loadgen_cpu_s
                        .map(|c| format!("{c:.3}"))
                        .unwrap_or_else(|| "–".into()),
                    r.peak_rss_kib
                        .map(|k| format!("{:.0}", k as f64 / 1024.0))
                        .unwrap_or_else(|| "–".into()),
                    verified,
                ));
        }
    }
    md.push_str(
            "\nLatency: file renamed into the config directory → the affected proxy holds every \
             changed resource in its new version (debounce included); for `connect`, stream \
             opened → proxy synced; `idle` is one second with no change (the server's \
             background cost, to read the other rows against). Messages, resources and bytes: everything every simulated \
             proxy received during the scenario; messages per affected proxy: messages ÷ affected proxies (protobuf-encoded response size, no gRPC/HTTP/2 \
             framing). Min bytes: the smallest Delta responses that deliver the changed \
             resources to the proxies that need them (one response per type per proxy: type \
             URL, a 16-character nonce, each resource's name, version and body; removed \
             names), protobuf-encoded as the bytes column is. Server CPU: utime+stime of the server process from /proc/PID/stat; \
             server CPU µs per message: that ÷ messages (every cost of the scenario, \
             dataflow and kernel included, spread over what was sent); \
             loadgen CPU s: the same of the bench process (the simulated proxies and the harness); \
             peak RSS: VmHWM, reset before each scenario.\n",
        );
    md
}

/// The line printed when a scenario ends.
pub fn line(r: &ScenarioResult) -> String {
    if let Some(why) = &r.skipped {
        return format!("{:<12} skipped: {why}", r.name);
    }
    let lat = r.sorted_latency();
    let f = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
    let failover = r
        .failover
        .as_ref()
        .map(|x| format!("\n{:<12} {}", "", failover_text(x)))
        .unwrap_or_default();
    format!(
        "{:<12} affected {:>5} (converged {:>5}) p50 {:>7} ms p99 {:>7} ms | {} msgs {} res {} B (min {} B) | cpu {:.3} s ({} µs/msg, loadgen {}) | {}{failover}",
        r.name,
        r.affected,
        r.converged,
        f(percentile(&lat, 0.5)),
        f(percentile(&lat, 0.99)),
        r.received.total_messages(),
        r.received.total_resources(),
        r.received.total_bytes(),
        r.min_bytes,
        r.server_cpu_s,
        f(r.cpu_us_per_message()),
        r.loadgen_cpu_s
            .map(|c| format!("{c:.3} s"))
            .unwrap_or_else(|| "-".into()),
        if r.verified {
            "verified".to_string()
        } else {
            format!("MISMATCH: {}", r.mismatches.join(" | "))
        }
    )
}

/// The markdown file: a title, the command line, then [`markdown`].
pub fn markdown_file(report: &Report) -> String {
    format!(
        "# meshflow bench, shape {}\n\n`{}`\n\n{}",
        report.options.shape_name,
        report.options.command,
        markdown(report)
    )
}
