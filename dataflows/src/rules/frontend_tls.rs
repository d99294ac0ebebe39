//! A Gateway's `spec.tls.frontend`: which of its HTTPS listeners verify the clients'
//! certificates, against which CA bundle, as the ConfigMaps it names resolve — shared by
//! the dataflow, the naive recompute and the status writer.
//!
//! A `perPort` entry governs the HTTPS listeners of its port, `default` the others (the
//! Gateway's own and its ListenerSets' alike: a listener added by a set never lets in a
//! client the Gateway's port asks to verify). A reference resolves to the `ca.crt` of a
//! ConfigMap of the core group, of another namespace only where a ReferenceGrant there
//! lets Gateways of the Gateway's namespace name it. A listener none of whose references
//! resolves is not served (the spec's `NoValidCACertificate`): never a listener that lets
//! in the clients its Gateway asked to verify.

use super::backend_tls::{config_map_bundle, push_bundle};
use crate::model::*;
use std::collections::BTreeSet;

/// The ConfigMaps, as (namespace, name), a Gateway's frontend validation names.
pub fn ca_config_maps(gw: &KubeGateway) -> BTreeSet<(String, String)> {
    gw.frontend
        .validations()
        .flat_map(|v| v.ca_refs.iter())
        .filter(|(r, _)| is_config_map(r))
        .map(|(r, ns)| (ns.clone(), r.name.clone()))
        .collect()
}

/// The namespaces other than its own its frontend validation names ConfigMaps of: the
/// ReferenceGrants there decide whether it may.
pub fn ca_namespaces(gw: &KubeGateway) -> BTreeSet<String> {
    ca_config_maps(gw)
        .into_iter()
        .map(|(ns, _)| ns)
        .filter(|ns| *ns != gw.key.namespace)
        .collect()
}

fn is_config_map(r: &CaRef) -> bool {
    r.group.is_empty() && r.kind == "ConfigMap"
}

/// Which listeners of a Gateway to apply the validation to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Its own (before its ListenerSets are attached: whether it is accepted depends on
    /// which of its own listeners are).
    Own,
    /// Those of the ListenerSets it takes.
    Sets,
}

/// `gw` with its frontend validation applied to the HTTPS listeners `which` says: each
/// gets its resolved CA bundle ([`ListenerTls::clients`]), or is left out with the spec's
/// reasons when none of its references resolves; with an error for each listener that is
/// left out or has a reference that does not resolve. `find`: a ConfigMap by (namespace,
/// name); `grants`: those of the namespaces [`ca_namespaces`] names.
pub fn frontend_validation<'a>(
    gw: &KubeGateway,
    which: Applied,
    grants: impl IntoIterator<Item = &'a ReferenceGrant> + Clone,
    find: impl Fn(&str, &str) -> Option<&'a CaConfigMap>,
) -> (KubeGateway, Vec<ConfigError>) {
    let mut out = gw.clone();
    let mut errors = Vec::new();
    // Another controller's Gateway is not meshflow's to serve nor to speak for.
    if !gw.owned() || gw.frontend.validations().next().is_none() {
        return (out, errors);
    }
    let resolve = |v: &FrontendValidation| resolve_ca(v, &gw.key.namespace, grants.clone(), &find);
    let mut apply = |listeners: &mut Vec<Listener>,
                     refused: &mut Vec<RefusedListener>,
                     place: &str| {
        let mut kept = Vec::new();
        for mut l in std::mem::take(listeners) {
            let validation = match (&l.protocol, &l.tls) {
                (ListenerProtocol::Https, Some(t)) if !t.passthrough => {
                    gw.frontend.for_port(l.port)
                }
                _ => None,
            };
            let Some(v) = validation else {
                kept.push(l);
                continue;
            };
            let at = format!(
                "{place}spec.listeners[{}] ({}, port {})",
                l.index, l.name, l.port
            );
            match resolve(v) {
                Ok(clients) => {
                    if let Some((reason, why)) = &clients.unresolved {
                        errors.push(error(
                            gw,
                            format!("{why} ({reason}); {at} verifies clients against the CAs that resolve"),
                        ));
                    }
                    if let Some(t) = l.tls.as_mut() {
                        t.clients = Some(clients);
                    }
                    kept.push(l);
                }
                Err((reason, why)) => {
                    errors.push(error(
                        gw,
                        format!("{why} ({reason}); no CA resolves: {at} is not served (NoValidCACertificate)"),
                    ));
                    refused.push(RefusedListener {
                        name: l.name.clone(),
                        reason,
                        why: format!("{why}; no CA certificate of {} resolves", v.field),
                        kinds: l.protocol.default_kind_names(),
                        holds: None,
                        accepted_reason: Some("NoValidCACertificate".into()),
                    });
                }
            }
        }
        *listeners = kept;
    };
    match which {
        Applied::Own => apply(&mut out.listeners, &mut out.refused, ""),
        Applied::Sets => {
            for set in out.sets.iter_mut().filter(|s| s.refused.is_none()) {
                let place = format!("ListenerSet {}/{} ", set.key.namespace, set.key.name);
                apply(&mut set.listeners, &mut set.refused_listeners, &place);
            }
        }
    }
    (out, errors)
}

/// An error of `gw`'s frontend validation; `message` opens with the field.
fn error(gw: &KubeGateway, message: String) -> ConfigError {
    ConfigError {
        object: gw.key.clone(),
        code: ErrorCode::FrontendValidationNotApplied,
        message,
    }
}

/// A validation's CA bundle, with the first reference that does not resolve (the spec's
/// `ResolvedRefs` reason, every such reference in the message); or, when none resolves,
/// that reason and why.
fn resolve_ca<'a>(
    v: &FrontendValidation,
    gw_ns: &str,
    grants: impl IntoIterator<Item = &'a ReferenceGrant> + Clone,
    find: &impl Fn(&str, &str) -> Option<&'a CaConfigMap>,
) -> Result<ClientValidation, (String, String)> {
    let mut pem = String::new();
    let mut unresolved: Option<(String, String)> = None;
    for (i, (r, ns)) in v.ca_refs.iter().enumerate() {
        let field = format!("{}.caCertificateRefs[{i}]", v.field);
        let problem = if !is_config_map(r) {
            Some((
                "InvalidCACertificateKind",
                format!(
                    "{field}: a {} of group {:?} is not a CA bundle meshflow reads (a ConfigMap of the core group is)",
                    r.kind, r.group
                ),
            ))
        } else if ns != gw_ns
            && !grants
                .clone()
                .into_iter()
                .any(|g| g.key.namespace == *ns && g.allows("Gateway", gw_ns, "ConfigMap", &r.name))
        {
            Some((
                "RefNotPermitted",
                format!(
                    "{field}: ConfigMap {ns}/{} is in another namespace and no ReferenceGrant there allows Gateways of {gw_ns} to name it",
                    r.name
                ),
            ))
        } else {
            match config_map_bundle(find(ns, &r.name), ns, &r.name) {
                Ok(ca) => {
                    push_bundle(&mut pem, ca);
                    None
                }
                Err(why) => Some(("InvalidCACertificateRef", format!("{field}: {why}"))),
            }
        };
        if let Some((reason, why)) = problem {
            unresolved = Some(match unresolved {
                None => (reason.to_string(), why),
                Some((first, before)) => (first, format!("{before}; {why}")),
            });
        }
    }
    if pem.is_empty() {
        return Err(unresolved.unwrap_or((
            "InvalidCACertificateRef".into(),
            "names no CA certificate".into(),
        )));
    }
    Ok(ClientValidation {
        ca_pem: pem,
        insecure_fallback: v.insecure_fallback,
        unresolved,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Gateway of `class` with one HTTPS listener on 443, validating clients against a
    /// ConfigMap that does not exist.
    fn gateway(class: &str) -> KubeGateway {
        KubeGateway {
            key: ConfigKey::new(Kind::KubernetesGateway, "infra", "gw"),
            class: class.into(),
            listeners: vec![Listener {
                name: "https".into(),
                index: 0,
                hostname: None,
                port: 443,
                protocol: ListenerProtocol::Https,
                tls: Some(ListenerTls {
                    passthrough: false,
                    certificates: vec![("infra".into(), "cert".into())],
                    clients: None,
                }),
                allowed_namespaces: AllowedNamespaces::Same,
                allowed_kinds: Vec::new(),
            }],
            refused: Vec::new(),
            invalid_parameters: None,
            allowed_listeners: AllowedListeners::None,
            sets: Vec::new(),
            frontend: FrontendTls {
                default: Some(FrontendValidation {
                    ca_refs: vec![(
                        CaRef {
                            group: String::new(),
                            kind: "ConfigMap".into(),
                            name: "missing".into(),
                        },
                        "infra".into(),
                    )],
                    insecure_fallback: false,
                    field: "spec.tls.frontend.default.validation".into(),
                }),
                per_port: Vec::new(),
            },
        }
    }

    /// A listener of meshflow's Gateway whose CA does not resolve is left out with an
    /// error; another controller's Gateway is left as it is, and nothing is said of it.
    #[test]
    fn only_meshflows_gateways_are_validated_and_spoken_for() {
        let none = |_: &str, _: &str| None;
        let (ours, errors) = frontend_validation(&gateway("istio"), Applied::Own, [], none);
        assert!(ours.listeners.is_empty());
        assert_eq!(ours.refused.len(), 1);
        assert_eq!(
            ours.refused[0].accepted_reason.as_deref(),
            Some("NoValidCACertificate")
        );
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0]
                .message
                .starts_with("spec.tls.frontend.default.validation.caCertificateRefs[0]: "),
            "{}",
            errors[0].message
        );
        let other = gateway("nginx");
        let (theirs, errors) = frontend_validation(&other, Applied::Own, [], none);
        assert_eq!(theirs, other);
        assert!(errors.is_empty());
    }
}
