//! A Gateway API `Gateway`: its class and listeners. A listener meshflow cannot serve as
//! written is left out with an error naming it — never served without its TLS.

use super::super::fields::{report_ignored, spec};
use super::super::Result;
use super::{hostname, port, GROUP};
use crate::config::findings::Finding;
use crate::config::{gateway_api as api, Invalid};
use dataflows::model::{self as m, ConfigKey, Record};
use dataflows::rules::listener_set;
use serde_yaml_ng::Value;

pub(in crate::config::convert) fn kubernetes_gateway(
    key: &ConfigKey,
    value: &Value,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (api::GatewaySpec, _) = spec(value)?;
    if s.gateway_class_name.is_empty() {
        return Err(Invalid::field(
            "spec.gatewayClassName",
            "a Gateway needs a gatewayClassName",
        ));
    }
    let owned = m::OWNED_CLASSES.contains(&s.gateway_class_name.as_str());
    // Another controller's Gateway: nothing of it is meshflow's to report.
    if owned {
        report_ignored(&ignored, findings, |_| None);
    }
    if s.listeners.is_empty() {
        return Err(Invalid::field(
            "spec.listeners",
            "a Gateway needs at least one listener",
        ));
    }
    let (mut listeners, mut refused) =
        read_listeners(&s.listeners, &key.namespace, owned, findings)?;
    let invalid_parameters = s
        .infrastructure
        .as_ref()
        .and_then(|i| infrastructure(i, owned, findings));
    if let Some(why) = &invalid_parameters {
        // Not accepted: nothing of it is served, and each listener says why.
        for l in listeners.drain(..) {
            refused.push(m::RefusedListener {
                kinds: l.protocol.default_kind_names(),
                name: l.name,
                reason: "Pending".into(),
                why: format!("the Gateway is not accepted: {why}"),
                holds: None,
                accepted_reason: None,
            });
        }
    }
    let allowed_listeners = match &s.allowed_listeners {
        None => m::AllowedListeners::None,
        Some(a) => allowed_listeners(a)?,
    };
    let frontend = frontend_tls(s.tls.as_ref(), &key.namespace)?;
    Ok(vec![Record::GatewayApi(m::GatewayApiObject::Gateway(
        m::KubeGateway {
            key: ConfigKey::new(m::Kind::KubernetesGateway, &key.namespace, &key.name),
            class: s.gateway_class_name.clone(),
            listeners,
            refused,
            invalid_parameters,
            allowed_listeners,
            sets: Vec::new(),
            frontend,
        },
    ))])
}

/// `spec.tls.frontend`: the validation of the HTTPS listeners by default and per port.
/// A mode meshflow does not know, or a validation without a CA, is an error: the Gateway
/// keeps its last valid version rather than serve a listener that checks less than asked.
fn frontend_tls(t: Option<&api::GatewayTls>, gw_ns: &str) -> Result<m::FrontendTls> {
    let Some(f) = t.and_then(|t| t.frontend.as_ref()) else {
        return Ok(m::FrontendTls::default());
    };
    let base = "spec.tls.frontend";
    let default = match &f.default {
        Some(c) => frontend_validation(c, gw_ns, &format!("{base}.default"))?,
        None => None,
    };
    let mut per_port: Vec<(u16, Option<m::FrontendValidation>)> = Vec::new();
    for (i, p) in f.per_port.iter().enumerate() {
        let field = format!("{base}.perPort[{i}]");
        let number = port(p.port, &format!("{field}.port"))?;
        if per_port.iter().any(|(n, _)| *n == number) {
            return Err(Invalid::field(
                format!("{field}.port"),
                format!("port {number} is configured twice"),
            ));
        }
        let validation = match &p.tls {
            Some(c) => frontend_validation(c, gw_ns, &format!("{field}.tls"))?,
            None => None,
        };
        per_port.push((number, validation));
    }
    Ok(m::FrontendTls { default, per_port })
}

/// One `TLSConfig` of `spec.tls.frontend` (at `field`): its `validation`, if any.
fn frontend_validation(
    c: &api::FrontendTlsConfig,
    gw_ns: &str,
    field: &str,
) -> Result<Option<m::FrontendValidation>> {
    let Some(v) = &c.validation else {
        return Ok(None);
    };
    let field = format!("{field}.validation");
    let insecure_fallback = match v.mode.as_deref() {
        None | Some("AllowValidOnly") => false,
        Some("AllowInsecureFallback") => true,
        Some(other) => {
            return Err(Invalid::field(
                format!("{field}.mode"),
                format!(
                    "{other:?} is not a validation mode (AllowValidOnly, AllowInsecureFallback)"
                ),
            ))
        }
    };
    if v.ca_certificate_refs.is_empty() {
        return Err(Invalid::field(
            format!("{field}.caCertificateRefs"),
            "a validation needs at least one CA certificate",
        ));
    }
    let ca_refs = v
        .ca_certificate_refs
        .iter()
        .map(|r| {
            (
                m::CaRef {
                    group: r.group.clone().unwrap_or_default(),
                    kind: r.kind.clone().unwrap_or_default(),
                    name: r.name.clone(),
                },
                r.namespace.clone().unwrap_or_else(|| gw_ns.to_string()),
            )
        })
        .collect();
    Ok(Some(m::FrontendValidation {
        ca_refs,
        insecure_fallback,
        field,
    }))
}

/// `spec.allowedListeners`: which namespaces' ListenerSets the Gateway takes.
fn allowed_listeners(a: &api::AllowedListeners) -> Result<m::AllowedListeners> {
    let from = a.namespaces.as_ref().and_then(|n| n.from.as_deref());
    Ok(match from {
        None | Some("None") => m::AllowedListeners::None,
        Some("Same") => m::AllowedListeners::Same,
        Some("All") => m::AllowedListeners::All,
        Some("Selector") => {
            let f = "spec.allowedListeners.namespaces.selector";
            let Some(selector) = a.namespaces.as_ref().and_then(|n| n.selector.as_ref()) else {
                return Err(Invalid::field(f, "from: Selector needs a selector"));
            };
            m::AllowedListeners::Selector(namespace_selector(selector, f)?)
        }
        Some(other) => {
            return Err(Invalid::field(
                "spec.allowedListeners.namespaces.from",
                format!("{other:?} is not one of All, Same, Selector, None"),
            ))
        }
    })
}

/// A Gateway's or a ListenerSet's `spec.listeners` (of namespace `ns`): those meshflow can
/// serve, and those left out with the spec's reason (a protocol it does not serve, TLS that
/// terminates without a certificate, a conflict with a listener before). `report`: whether
/// what is left out is meshflow's to report (not for another controller's Gateway).
pub(super) fn read_listeners(
    written: &[api::Listener],
    ns: &str,
    owned: bool,
    findings: &mut Vec<Finding>,
) -> Result<(Vec<m::Listener>, Vec<m::RefusedListener>)> {
    // Each listener meshflow can read, with why it is not served when it is refused for its
    // certificate (it still holds its port and hostname).
    let mut listeners: Vec<(m::Listener, Option<&'static str>)> = Vec::new();
    let mut refused: Vec<m::RefusedListener> = Vec::new();
    for (i, l) in written.iter().enumerate() {
        let f = format!("spec.listeners[{i}]");
        if l.name.is_empty() {
            return Err(Invalid::field(
                format!("{f}.name"),
                "a listener needs a name",
            ));
        }
        if written[..i].iter().any(|o| o.name == l.name) {
            return Err(Invalid::field(
                format!("{f}.name"),
                format!("{:?} names two listeners", l.name),
            ));
        }
        let number = port(l.port, &format!("{f}.port"))?;
        if let Some(h) = &l.hostname {
            hostname(h, &format!("{f}.hostname"))?;
        }
        let protocol = match l.protocol.as_str() {
            "HTTP" => m::ListenerProtocol::Http,
            "HTTPS" => m::ListenerProtocol::Https,
            "TLS" => m::ListenerProtocol::Tls,
            "TCP" => m::ListenerProtocol::Tcp,
            other => {
                let why = format!("{other:?} is not served by meshflow; the listener is left out");
                if owned {
                    findings.push(Finding::error(format!("{f}.protocol"), why.clone()));
                }
                refused.push(m::RefusedListener {
                    name: l.name.clone(),
                    reason: "UnsupportedProtocol".into(),
                    why,
                    kinds: Vec::new(),
                    holds: None,
                    accepted_reason: None,
                });
                continue;
            }
        };
        let tls = match (&l.tls, protocol) {
            (None, m::ListenerProtocol::Https | m::ListenerProtocol::Tls) => {
                return Err(Invalid::field(
                    format!("{f}.tls"),
                    format!("a {} listener needs tls", l.protocol),
                ))
            }
            (Some(_), m::ListenerProtocol::Http | m::ListenerProtocol::Tcp) => {
                return Err(Invalid::field(
                    format!("{f}.tls"),
                    format!("a {} listener takes no tls", l.protocol),
                ))
            }
            (None, _) => None,
            (Some(t), _) => Some(listener_tls(t, protocol, ns, &f, owned, findings)?),
        };
        let no_certificate = tls
            .as_ref()
            .is_some_and(|t| !t.passthrough && t.certificates.is_empty());
        // A certificate of another namespace is kept: whether a ReferenceGrant there allows
        // it depends on other objects, and is judged where they meet (the dataflow, the
        // status writer). One that terminates with no certificate is left out (reported):
        // it cannot terminate without one it can serve.
        let (allowed_namespaces, allowed_kinds) = allowed_routes(l, &f, owned, findings)?;
        listeners.push((
            m::Listener {
                index: i,
                name: l.name.clone(),
                hostname: l.hostname.clone(),
                port: number,
                protocol,
                tls,
                allowed_namespaces,
                allowed_kinds,
            },
            no_certificate.then_some("no certificate meshflow can serve: a Secret is needed"),
        ));
    }
    let listeners = without_conflicts(listeners, &mut refused, owned, findings);
    Ok((listeners, refused))
}

/// `spec.infrastructure`: meshflow provisions nothing, so labels and annotations have nowhere
/// to go (said). A `parametersRef` to a ConfigMap (the kind Istio reads for the deployment
/// it provisions) is said to be unread; one to any other kind is the spec's
/// `InvalidParameters` — the reason returned, the Gateway not accepted.
fn infrastructure(
    i: &api::GatewayInfrastructure,
    owned: bool,
    findings: &mut Vec<Finding>,
) -> Option<String> {
    let mut say = |f: Finding| {
        if owned {
            findings.push(f);
        }
    };
    for (field, map) in [("labels", &i.labels), ("annotations", &i.annotations)] {
        if !map.is_empty() {
            say(Finding::warning(
                format!("spec.infrastructure.{field}"),
                "meshflow provisions no deployment: nothing carries them",
            ));
        }
    }
    let p = i.parameters_ref.as_ref()?;
    let group = p.group.as_deref().unwrap_or("");
    let kind = p.kind.as_deref().unwrap_or("");
    if matches!(group, "" | "core") && kind == "ConfigMap" {
        say(Finding::warning(
            "spec.infrastructure.parametersRef",
            format!(
                "meshflow provisions no deployment: ConfigMap {} is not read",
                p.name
            ),
        ));
        return None;
    }
    let why = format!(
        "parametersRef names a {kind} of group {group:?}, not parameters meshflow reads (a ConfigMap)"
    );
    say(Finding::error(
        "spec.infrastructure.parametersRef",
        format!("{why}; the Gateway is not accepted and none of its listeners is served"),
    ));
    Some(why)
}

fn listener_tls(
    t: &api::ListenerTls,
    protocol: m::ListenerProtocol,
    gw_ns: &str,
    f: &str,
    owned: bool,
    findings: &mut Vec<Finding>,
) -> Result<m::ListenerTls> {
    let passthrough = match t.mode.as_deref() {
        None | Some("Terminate") => false,
        Some("Passthrough") if protocol == m::ListenerProtocol::Tls => true,
        Some("Passthrough") => {
            return Err(Invalid::field(
                format!("{f}.tls.mode"),
                "Passthrough is for TLS listeners only",
            ))
        }
        Some(other) => {
            return Err(Invalid::field(
                format!("{f}.tls.mode"),
                format!("{other:?} is not a TLS mode (Terminate, Passthrough)"),
            ))
        }
    };
    let mut certificates = Vec::new();
    for (j, c) in t.certificate_refs.iter().enumerate() {
        let cf = format!("{f}.tls.certificateRefs[{j}]");
        let group = c.group.as_deref().unwrap_or("");
        let kind = c.kind.as_deref().unwrap_or("Secret");
        if !group.is_empty() || kind != "Secret" {
            if owned {
                findings.push(Finding::error(
                    cf,
                    format!("a {kind} of group {group:?} is not a certificate meshflow reads (a Secret is)"),
                ));
            }
            continue;
        }
        let ns = c.namespace.clone().unwrap_or_else(|| gw_ns.to_string());
        certificates.push((ns, c.name.clone()));
    }
    if certificates.len() > 1 && owned {
        findings.push(Finding::warning(
            format!("{f}.tls.certificateRefs"),
            "only the first certificate is served (one per listener, as a gateway server's credentialName)",
        ));
    }
    if !passthrough && certificates.is_empty() && owned {
        findings.push(Finding::error(
            format!("{f}.tls.certificateRefs"),
            "a listener that terminates TLS needs a certificate (a Secret); the listener is left out",
        ));
    }
    Ok(m::ListenerTls {
        clients: None,
        passthrough,
        certificates,
    })
}

fn allowed_routes(
    l: &api::Listener,
    f: &str,
    owned: bool,
    findings: &mut Vec<Finding>,
) -> Result<(m::AllowedNamespaces, Vec<String>)> {
    let Some(a) = &l.allowed_routes else {
        return Ok((m::AllowedNamespaces::Same, Vec::new()));
    };
    let from = a.namespaces.as_ref().and_then(|n| n.from.as_deref());
    let namespaces = match from {
        None | Some("Same") => m::AllowedNamespaces::Same,
        Some("All") => m::AllowedNamespaces::All,
        Some("Selector") => {
            let sf = format!("{f}.allowedRoutes.namespaces.selector");
            let Some(selector) = a.namespaces.as_ref().and_then(|n| n.selector.as_ref()) else {
                return Err(Invalid::field(sf, "from: Selector needs a selector"));
            };
            m::AllowedNamespaces::Selector(namespace_selector(selector, &sf)?)
        }
        Some(other) => {
            return Err(Invalid::field(
                format!("{f}.allowedRoutes.namespaces.from"),
                format!("{other:?} is not one of All, Same, Selector"),
            ))
        }
    };
    let mut kinds = Vec::new();
    for (j, k) in a.kinds.iter().enumerate() {
        let group = k.group.as_deref().unwrap_or(GROUP);
        if group != GROUP {
            if owned {
                findings.push(Finding::warning(
                    format!("{f}.allowedRoutes.kinds[{j}]"),
                    format!(
                        "{} of group {group:?} is not a route kind meshflow serves",
                        k.kind
                    ),
                ));
            }
            continue;
        }
        kinds.push(k.kind.clone());
    }
    // Kinds listed but none of them known: the listener takes no route, as the spec has it.
    if !a.kinds.is_empty() && kinds.is_empty() {
        kinds.push(String::from("-"));
    }
    Ok((namespaces, kinds))
}

/// Listeners that conflict with an earlier one are left out, as the spec has it
/// (`Conflicted`, [`listener_set::listener_conflict`]): the first listener written keeps
/// the port, served or refused for its certificate (`InvalidCertificateRef`: accepted, it
/// holds its port and hostname).
fn without_conflicts(
    listeners: Vec<(m::Listener, Option<&'static str>)>,
    refused: &mut Vec<m::RefusedListener>,
    owned: bool,
    findings: &mut Vec<Finding>,
) -> Vec<m::Listener> {
    let mut claimed: Vec<m::Listener> = Vec::new();
    let mut kept: Vec<m::Listener> = Vec::new();
    for (l, no_certificate) in listeners {
        if let Some((reason, why)) = listener_set::listener_conflict(&claimed, &l) {
            if owned {
                findings.push(Finding::error(
                    format!("spec.listeners[{}]", l.index),
                    format!("{reason}: {why}; the listener is left out"),
                ));
            }
            refused.push(m::RefusedListener::conflicted(&l, reason, why));
            continue;
        }
        claimed.push(l.clone());
        match no_certificate {
            Some(why) => refused.push(m::RefusedListener {
                name: l.name.clone(),
                reason: "InvalidCertificateRef".into(),
                why: why.into(),
                kinds: l.protocol.default_kind_names(),
                holds: Some(l),
                accepted_reason: None,
            }),
            None => kept.push(l),
        }
    }
    kept
}

/// A label selector as Kubernetes defines it: `matchLabels` and `matchExpressions`
/// (`In`, `NotIn`, `Exists`, `DoesNotExist`), all of which must hold.
fn namespace_selector(s: &api::LabelSelector, f: &str) -> Result<m::NamespaceSelector> {
    let mut expressions = Vec::new();
    for (i, e) in s.match_expressions.iter().enumerate() {
        let ef = format!("{f}.matchExpressions[{i}]");
        if e.key.is_empty() {
            return Err(Invalid::field(format!("{ef}.key"), "a key is required"));
        }
        let with_values = |values: &[String]| {
            if values.is_empty() {
                Err(Invalid::field(
                    format!("{ef}.values"),
                    format!("{} needs values", e.operator),
                ))
            } else {
                Ok(values.to_vec())
            }
        };
        let without_values = || {
            if e.values.is_empty() {
                Ok(())
            } else {
                Err(Invalid::field(
                    format!("{ef}.values"),
                    format!("{} takes no values", e.operator),
                ))
            }
        };
        expressions.push(match e.operator.as_str() {
            "In" => m::LabelExpression::In(e.key.clone(), with_values(&e.values)?),
            "NotIn" => m::LabelExpression::NotIn(e.key.clone(), with_values(&e.values)?),
            "Exists" => {
                without_values()?;
                m::LabelExpression::Exists(e.key.clone())
            }
            "DoesNotExist" => {
                without_values()?;
                m::LabelExpression::DoesNotExist(e.key.clone())
            }
            other => {
                return Err(Invalid::field(
                    format!("{ef}.operator"),
                    format!("{other:?} is not one of In, NotIn, Exists, DoesNotExist"),
                ))
            }
        });
    }
    Ok(m::NamespaceSelector {
        match_labels: s.match_labels.clone(),
        expressions,
    })
}
