//! Analysis across objects for `validate`: the same dataflow `serve` runs, over the records
//! read once, so `validate` reports what `serve` would (a subset no rule defines, a host no
//! service defines, conflicting VirtualServices …). What `serve` finds only for connected
//! proxies (a `credentialName` Secret missing from a client's namespace, Gateways that
//! conflict on a gateway's port, TCP services a sidecar cannot tell apart) `validate` finds
//! for the proxies the records describe: each Pod and WorkloadEntry is taken as connected,
//! as a gateway where a Gateway selects it, else as a sidecar with its traffic captured.

use dataflows::driver::{Batch, Engine};
use dataflows::model::{ConfigError, Kind, MeshConfig, Proxy, ProxyKind, Record};
use dataflows::rules::labels_match;

/// The proxies the workloads of `records` would connect as (Istio's node id shape).
fn described_proxies(records: &[(Record, isize)]) -> Vec<(Record, isize)> {
    let selectors: Vec<_> = records
        .iter()
        .filter_map(|(r, d)| match r {
            Record::Gateway(g) if *d > 0 && !g.selector.is_empty() => Some(&g.selector),
            _ => None,
        })
        .collect();
    records
        .iter()
        .filter_map(|(r, d)| match r {
            Record::Workload(w)
                if *d > 0 && matches!(w.origin.kind, Kind::Pod | Kind::WorkloadEntry) =>
            {
                let router = selectors.iter().any(|s| labels_match(s, &w.labels));
                let (kind, prefix) = if router {
                    (ProxyKind::Router, "router")
                } else {
                    (ProxyKind::Sidecar, "sidecar")
                };
                let ns = &w.origin.namespace;
                Some((
                    Record::Proxy(Proxy {
                        id: format!(
                            "{prefix}~{}~{}.{ns}~{ns}.svc.cluster.local",
                            w.ip, w.origin.name
                        ),
                        kind,
                        ips: vec![w.ip.clone()],
                        namespace: ns.clone(),
                        labels: w.labels.clone(),
                        interception_none: false,
                        service_account: w.service_account.clone(),
                        locality: w.placement.locality.clone(),
                        idle_timeout_ns: None,
                    }),
                    1,
                ))
            }
            _ => None,
        })
        .collect()
}

/// The errors the dataflow finds in `records`, with the proxies they describe connected,
/// sorted by object.
pub fn analyze(mut records: Vec<(Record, isize)>, mesh: MeshConfig) -> Vec<ConfigError> {
    let proxies = described_proxies(&records);
    records.extend(proxies);
    let engine = Engine::start(1, mesh);
    let Some(out) = engine.step(Batch {
        epoch: 1,
        changes: records,
    }) else {
        return Vec::new();
    };
    let mut errors: Vec<ConfigError> = out
        .errors
        .into_iter()
        .filter(|(_, diff)| *diff > 0)
        .map(|(e, _)| e)
        .collect();
    errors.sort();
    errors.dedup();
    errors
}

/// One line per error: `LOCATION: error: Kind ns/name: message [CODE Name]` (`warning:`
/// for the codes that are warnings).
pub fn error_line(e: &ConfigError, location: Option<String>) -> String {
    let (code, name) = e.code.message_code();
    let o = &e.object;
    format!(
        "{}{}: {} {}/{}: {} [{code} {name}]",
        location.map(|l| format!("{l}: ")).unwrap_or_default(),
        if e.code.is_warning() {
            "warning"
        } else {
            "error"
        },
        o.kind,
        o.namespace,
        o.name,
        e.message
    )
}
