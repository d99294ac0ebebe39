//! Analysis across objects for `validate`: the same dataflow `serve` runs, over the records
//! read once, so `validate` reports what `serve` would (a subset no rule defines, a host no
//! service defines, conflicting VirtualServices …) without a proxy connected.

use dataflows::driver::{Batch, Engine};
use dataflows::model::{ConfigError, MeshConfig, Record};

/// The errors the dataflow finds in `records`, sorted by object.
pub fn analyze(records: Vec<(Record, isize)>, mesh: MeshConfig) -> Vec<ConfigError> {
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
        "{}{}: {:?} {}/{}: {} [{code} {name}]",
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
