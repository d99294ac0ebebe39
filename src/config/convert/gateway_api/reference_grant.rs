//! A ReferenceGrant: which kinds of which namespaces may name objects of its namespace.

use super::super::fields::{report_ignored, spec};
use super::super::Result;
use crate::config::findings::Finding;
use crate::config::{gateway_api as api, Invalid};
use dataflows::model::{self as m, ConfigKey, Record};
use serde_yaml_ng::Value;

/// The group meshflow reads a grant's `to` kind from: the core group for Services,
/// Secrets and ConfigMaps (a Gateway's frontend CA bundles), Istio's for `Hostname`
/// backends; `None` for a kind no reference of meshflow's
/// names.
fn target_group(kind: &str) -> Option<&'static str> {
    match kind {
        "Service" | "Secret" | "ConfigMap" => Some(""),
        "Hostname" => Some("networking.istio.io"),
        _ => None,
    }
}

pub(in crate::config::convert) fn reference_grant(
    key: &ConfigKey,
    value: &Value,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (api::ReferenceGrantSpec, _) = spec(value)?;
    report_ignored(&ignored, findings, |_| None);
    if s.from.is_empty() || s.to.is_empty() {
        return Err(Invalid::field(
            if s.from.is_empty() {
                "spec.from"
            } else {
                "spec.to"
            },
            "a ReferenceGrant needs at least one `from` and one `to`",
        ));
    }
    // A grant names kinds by group and kind: an entry of another group than the one meshflow
    // reads that kind from grants nothing meshflow checks (a route kind of another API, a
    // `Service` of another group), and is left out rather than matched by kind alone.
    let from = s
        .from
        .iter()
        .filter(|f| f.group == super::GROUP)
        .map(|f| (f.kind.clone(), f.namespace.clone()))
        .collect();
    let to =
        s.to.iter()
            .filter(|t| target_group(&t.kind) == Some(t.group.as_str()))
            .map(|t| (t.kind.clone(), t.name.clone().filter(|n| !n.is_empty())))
            .collect();
    Ok(vec![Record::GatewayApi(
        m::GatewayApiObject::ReferenceGrant(m::ReferenceGrant {
            key: key.clone(),
            from,
            to,
        }),
    )])
}
