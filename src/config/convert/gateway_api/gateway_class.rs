//! A Gateway API `GatewayClass`: the controller it names. meshflow writes the status of the
//! classes whose controller it answers for ([`m::OWNED_CONTROLLERS`]); what it does not read
//! of those is said.

use super::super::fields::{report_ignored, spec};
use super::super::Result;
use crate::config::findings::Finding;
use crate::config::{gateway_api as api, Invalid};
use dataflows::model::{self as m, ConfigKey, Record};
use serde_yaml_ng::Value;

pub(in crate::config::convert) fn gateway_class(
    key: &ConfigKey,
    value: &Value,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (api::GatewayClassSpec, _) = spec(value)?;
    if s.controller_name.is_empty() {
        return Err(Invalid::field(
            "spec.controllerName",
            "a GatewayClass needs a controllerName",
        ));
    }
    // Another controller's class: nothing of it is meshflow's to report.
    if m::OWNED_CONTROLLERS.contains(&s.controller_name.as_str()) {
        report_ignored(&ignored, findings, |_| None);
    }
    Ok(vec![Record::GatewayApi(m::GatewayApiObject::GatewayClass(
        m::KubeGatewayClass {
            key: key.clone(),
            controller: s.controller_name,
        },
    ))])
}
