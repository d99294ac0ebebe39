//! A Gateway API `ListenerSet`: the Gateway it names and its listeners, read as a
//! Gateway's are. Whether the Gateway takes them is decided where the two meet
//! (`dataflows::rules::listener_set`).

use super::super::fields::{report_ignored, spec};
use super::super::Result;
use super::gateway::read_listeners;
use super::{created, GROUP};
use crate::config::findings::Finding;
use crate::config::{gateway_api as api, Invalid};
use dataflows::model::{self as m, ConfigKey, Record};
use serde_yaml_ng::Value;

pub(in crate::config::convert) fn listener_set(
    key: &ConfigKey,
    value: &Value,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (api::ListenerSetSpec, _) = spec(value)?;
    report_ignored(&ignored, findings, |_| None);
    let Some(parent) = &s.parent_ref else {
        return Err(Invalid::field(
            "spec.parentRef",
            "a ListenerSet needs the Gateway it adds listeners to",
        ));
    };
    let group = parent.group.as_deref().unwrap_or(GROUP);
    let kind = parent.kind.as_deref().unwrap_or("Gateway");
    if group != GROUP || kind != "Gateway" {
        return Err(Invalid::field(
            "spec.parentRef",
            format!("a {kind} of group {group:?} is not a Gateway (gateway.networking.k8s.io)"),
        ));
    }
    if parent.name.is_empty() {
        return Err(Invalid::field(
            "spec.parentRef.name",
            "the Gateway's name is required",
        ));
    }
    if s.listeners.is_empty() {
        return Err(Invalid::field(
            "spec.listeners",
            "a ListenerSet needs at least one listener",
        ));
    }
    // Whether the Gateway is one meshflow serves is not known here: what is left out is
    // reported all the same.
    let (listeners, refused) = read_listeners(&s.listeners, &key.namespace, true, findings)?;
    Ok(vec![Record::GatewayApi(m::GatewayApiObject::ListenerSet(
        m::KubeListenerSet {
            key: ConfigKey::new(m::Kind::ListenerSet, &key.namespace, &key.name),
            created: created(value),
            parent: (
                parent
                    .namespace
                    .clone()
                    .unwrap_or_else(|| key.namespace.clone()),
                parent.name.clone(),
            ),
            listeners,
            refused,
        },
    ))])
}
