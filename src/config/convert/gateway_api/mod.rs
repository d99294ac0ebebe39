//! The Gateway API's kinds (gateway.networking.k8s.io), validated into the records of
//! `dataflows::model::gateway_api`, one file per kind. Which Gateway a route attaches to,
//! and what a ReferenceGrant allows, is the dataflow's to decide: these read one object.

mod backend_tls_policy;
mod gateway;
mod gateway_class;
mod http_route;
mod l4_route;
mod listener_set;
mod reference_grant;

pub(super) use backend_tls_policy::backend_tls_policy;
pub(super) use gateway::kubernetes_gateway;
pub(super) use gateway_class::gateway_class;
pub(super) use http_route::{grpc_route, http_route};
pub(super) use l4_route::l4_route;
pub(super) use listener_set::listener_set;
pub(super) use reference_grant::reference_grant;

use super::Result;
use crate::config::findings::Finding;
use crate::config::{gateway_api as api, Invalid};
use dataflows::model as m;
use serde_yaml_ng::Value;

/// The Gateway API's group.
pub(super) const GROUP: &str = "gateway.networking.k8s.io";

/// A port of the Gateway API (1–65535).
fn port(n: i64, field: &str) -> Result<u16> {
    u16::try_from(n)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| Invalid::field(field, format!("{n} is not a port (1-65535)")))
}

/// A hostname as the Gateway API takes it: a DNS name, or `*.` before one; no IP address,
/// no port, lowercase.
fn hostname(h: &str, field: &str) -> Result<()> {
    let name = h.strip_prefix("*.").unwrap_or(h);
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if h.len() > 253 || !name.split('.').all(label_ok) || name.parse::<std::net::IpAddr>().is_ok() {
        return Err(Invalid::field(
            field,
            format!("{h:?} is not a hostname (lowercase DNS labels, `*.` first for a wildcard)"),
        ));
    }
    Ok(())
}

/// A route's fields not read: a warning, but an error inside `rules[]` (it could change
/// where the rule's requests go; the rule is served without it).
fn report_route_fields(
    ignored: &[crate::config::findings::FieldPath],
    findings: &mut Vec<Finding>,
) {
    super::fields::report_ignored(ignored, findings, |p| {
        p.index_under("rules").map(|_| {
            Finding::error(
                p.to_string(),
                "not supported by meshflow yet; the rule is served without it",
            )
        })
    });
}

/// `metadata.creationTimestamp` as the API server writes it (empty when a file has none).
fn created(value: &Value) -> String {
    value
        .get("metadata")
        .and_then(|md| md.get("creationTimestamp"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// A route's `hostnames`, each checked.
fn hostnames(hosts: &[String]) -> Result<()> {
    for (i, h) in hosts.iter().enumerate() {
        hostname(h, &format!("spec.hostnames[{i}]"))?;
    }
    Ok(())
}

/// A route's `parentRefs`: Gateways, ListenerSets, and Services (the mesh: an HTTPRoute's or GRPCRoute's
/// only); another kind is reported and left out.
fn parents(
    refs: &[api::ParentReference],
    ns: &str,
    l4: bool,
    findings: &mut Vec<Finding>,
) -> Result<Vec<m::ParentRef>> {
    let mut parents = Vec::new();
    for (i, p) in refs.iter().enumerate() {
        let f = format!("spec.parentRefs[{i}]");
        let group = p.group.as_deref().unwrap_or(GROUP);
        let kind = p.kind.as_deref().unwrap_or("Gateway");
        let parent_kind = match (group, kind) {
            (GROUP, "Gateway") => m::ParentKind::Gateway,
            (GROUP, "ListenerSet") => m::ParentKind::ListenerSet,
            // A Service port by name is a restriction the mesh routes do not read yet: the
            // parent is left out rather than routed on every port.
            ("" | "core", "Service") if !l4 && p.section_name.is_some() => {
                findings.push(Finding::error(
                    format!("{f}.sectionName"),
                    "a Service parent's sectionName is not read yet (name the port with `port`); \
                     this parent is left out",
                ));
                continue;
            }
            ("" | "core", "Service") if !l4 => m::ParentKind::Service,
            ("" | "core", "Service") => {
                findings.push(Finding::error(
                    f.clone(),
                    "TCP and TLS routes of the mesh (a Service parent) are not served yet",
                ));
                continue;
            }
            _ => {
                findings.push(Finding::error(
                    f.clone(),
                    format!("a {kind} of group {group:?} is not a parent meshflow serves"),
                ));
                continue;
            }
        };
        parents.push(m::ParentRef {
            kind: parent_kind,
            namespace: p.namespace.clone().unwrap_or_else(|| ns.to_string()),
            name: p.name.clone(),
            section: p.section_name.clone(),
            port: p.port.map(|n| port(n, &format!("{f}.port"))).transpose()?,
        });
    }
    Ok(parents)
}
