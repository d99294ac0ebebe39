//! A ReferenceGrant: which kinds of which namespaces may name objects of its namespace.

use super::super::fields::{report_ignored, spec};
use super::super::Result;
use crate::config::findings::Finding;
use crate::config::{gateway_api as api, Invalid};
use dataflows::model::{self as m, ConfigKey, Record};
use serde_yaml_ng::Value;

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
    let from = s
        .from
        .iter()
        .map(|f| (f.kind.clone(), f.namespace.clone()))
        .collect();
    let to =
        s.to.iter()
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
