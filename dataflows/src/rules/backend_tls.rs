//! BackendTLSPolicy: which policy is in effect on each port of a Service, and the
//! DestinationRule it becomes (TLS `SIMPLE` with the policy's SNI, names and CA), shared by
//! the dataflow, the naive recompute and the status writer.
//!
//! As in Istio, a policy applies to every proxy connecting to the Service (gateways and
//! sidecars alike), as a DestinationRule of the Service's namespace exported everywhere;
//! a DestinationRule written for the host goes first, the policy filling only the `tls` it
//! leaves unset ([`super::consolidate_drs`]). Unlike Istio, `hostname` is also the name the
//! certificate must carry when no `subjectAltNames` are given, as the spec requires. Two
//! policies on one target and port (or both on the whole Service) conflict: the older wins
//! (creation time, then name). A policy that cannot be honoured (no valid CA, an unknown
//! well-known CA set) is still in effect, and fails closed: its clusters have no endpoints.

use crate::model::*;

/// The key of a ConfigMap holding a CA bundle, as the spec names it.
pub const CA_KEY: &str = "ca.crt";

/// What the policy's CA references resolve to.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum CaVerdict {
    /// The proxy's system bundle (`wellKnownCACertificates: System`).
    System,
    /// PEM certificates from the referenced ConfigMaps; `unresolved` names the references
    /// that could not be read (the spec's `ResolvedRefs` reason, and why), if any.
    Bundle {
        pem: String,
        unresolved: Option<(String, String)>,
    },
    /// No usable CA: `NoValidCACertificate` (with the `ResolvedRefs` reason), or `Invalid`.
    None {
        accepted_reason: String,
        resolved_reason: Option<String>,
        why: String,
    },
}

/// The CA of `p`, given the ConfigMaps of its namespace (`find` by name).
pub fn resolve_ca<'a>(
    p: &BackendTlsPolicy,
    find: impl Fn(&str) -> Option<&'a CaConfigMap>,
) -> CaVerdict {
    if let Some(why) = &p.invalid {
        return CaVerdict::None {
            accepted_reason: "Invalid".into(),
            resolved_reason: None,
            why: why.clone(),
        };
    }
    if p.system_ca {
        return CaVerdict::System;
    }
    let ns = &p.key.namespace;
    let mut pem = String::new();
    let mut unresolved: Option<(String, String)> = None;
    for (i, r) in p.ca_refs.iter().enumerate() {
        let field = format!("spec.validation.caCertificateRefs[{i}]");
        let problem = if !(r.group.is_empty() && r.kind == "ConfigMap") {
            Some((
                "InvalidKind".to_string(),
                format!(
                    "{field}: kind {} of group {:?} is not supported (a ConfigMap of the core group)",
                    r.kind, r.group
                ),
            ))
        } else {
            match config_map_bundle(find(&r.name), ns, &r.name) {
                Ok(ca) => {
                    push_bundle(&mut pem, ca);
                    None
                }
                Err(why) => Some((
                    "InvalidCACertificateRef".to_string(),
                    format!("{field}: {why}"),
                )),
            }
        };
        if let Some(p) = problem {
            // The first reference's reason is the condition's; every one is in the message.
            unresolved = Some(match unresolved {
                None => p,
                Some((reason, why)) => (reason, format!("{why}; {}", p.1)),
            });
        }
    }
    if pem.is_empty() {
        let (reason, why) = unresolved.unwrap_or((
            "InvalidCACertificateRef".to_string(),
            "spec.validation names no CA (caCertificateRefs or wellKnownCACertificates)".into(),
        ));
        return CaVerdict::None {
            accepted_reason: "NoValidCACertificate".into(),
            resolved_reason: Some(reason),
            why,
        };
    }
    CaVerdict::Bundle { pem, unresolved }
}

/// The CA bundle of the ConfigMap `ns/name` a `caCertificateRefs` entry names (`cm`, as
/// found), or why it gives none (the spec's `InvalidCACertificateRef`).
pub fn config_map_bundle<'a>(
    cm: Option<&'a CaConfigMap>,
    ns: &str,
    name: &str,
) -> Result<&'a str, String> {
    match cm {
        None => Err(format!("ConfigMap {ns}/{name} does not exist")),
        Some(cm) => match (&cm.ca, &cm.problem) {
            (Some(ca), None) => Ok(ca),
            (_, p) => Err(format!(
                "ConfigMap {ns}/{name} {}",
                p.as_deref().unwrap_or("holds no CA certificate")
            )),
        },
    }
}

/// Appends one ConfigMap's PEM to a bundle, each ending its line.
pub fn push_bundle(pem: &mut String, ca: &str) {
    pem.push_str(ca);
    if !pem.ends_with('\n') {
        pem.push('\n');
    }
}

/// How one policy stands on one of its targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetVerdict {
    /// In effect on the Service (`port` `None`) or on one port.
    InEffect { port: Option<u16> },
    /// Another policy older than it is on the same target: the spec's `Conflicted`.
    Conflicted { by: ConfigKey },
    /// No such Service, port name or supported kind: `TargetNotFound`.
    NotFound { why: String },
}

/// The Kubernetes Service of a host among the services defining it (a ServiceEntry of
/// the same host is no target of a policy).
pub fn kube_service<'a>(candidates: impl Iterator<Item = &'a Service>) -> Option<&'a Service> {
    candidates.filter(|s| s.origin.kind == Kind::Service).min()
}

/// The Service a target names, by its host, in the policy's namespace.
pub fn target_host(p: &BackendTlsPolicy, t: &PolicyTarget, domain_suffix: &str) -> Option<String> {
    t.is_service()
        .then(|| format!("{}.{}.svc.{domain_suffix}", t.name, p.key.namespace))
}

/// Which policy is older: it wins a conflict (creation time, then namespace and name; a
/// file's policies have no creation time and are ordered by name).
fn older(a: &BackendTlsPolicy, b: &BackendTlsPolicy) -> bool {
    (&a.created, &a.key.namespace, &a.key.name) < (&b.created, &b.key.namespace, &b.key.name)
}

/// How each of `policies` stands on each of its targets at the Service of host `host`,
/// given that Service's ports (`None`: no such Service): `(policy, target index, verdict)`
/// for the targets of that host only.
pub fn verdicts<'a>(
    host: &str,
    service: Option<&[ServicePort]>,
    policies: &[&'a BackendTlsPolicy],
    domain_suffix: &str,
) -> Vec<(&'a BackendTlsPolicy, usize, TargetVerdict)> {
    let mut out = Vec::new();
    for p in policies {
        for (i, t) in p.targets.iter().enumerate() {
            if target_host(p, t, domain_suffix).as_deref() != Some(host) {
                continue;
            }
            let verdict = match (service, &t.section) {
                (None, _) => TargetVerdict::NotFound {
                    why: format!("Service {}/{} does not exist", p.key.namespace, t.name),
                },
                (Some(ports), Some(section)) => match ports.iter().find(|sp| &sp.name == section) {
                    None => TargetVerdict::NotFound {
                        why: format!(
                            "Service {}/{} has no port named {section:?} (sectionName)",
                            p.key.namespace, t.name
                        ),
                    },
                    Some(sp) => TargetVerdict::InEffect {
                        port: Some(sp.port),
                    },
                },
                (Some(_), None) => TargetVerdict::InEffect { port: None },
            };
            out.push((*p, i, verdict));
        }
    }
    // Of the policies in effect on one section (or on the whole Service), the oldest wins.
    let winners: Vec<(Option<u16>, &BackendTlsPolicy)> = {
        let mut w: Vec<(Option<u16>, &BackendTlsPolicy)> = Vec::new();
        for (p, _, v) in &out {
            if let TargetVerdict::InEffect { port } = v {
                match w.iter_mut().find(|(q, _)| q == port) {
                    Some(slot) if older(p, slot.1) => slot.1 = p,
                    Some(_) => {}
                    None => w.push((*port, p)),
                }
            }
        }
        w
    };
    for (p, _, v) in out.iter_mut() {
        if let TargetVerdict::InEffect { port } = v {
            let (_, winner) = winners
                .iter()
                .find(|(q, _)| q == port)
                .copied()
                .unwrap_or((*port, p));
            if winner.key != p.key {
                *v = TargetVerdict::Conflicted {
                    by: winner.key.clone(),
                };
            }
        }
    }
    out
}

/// The TLS a policy in effect originates.
fn upstream_tls(p: &BackendTlsPolicy, ca: &CaVerdict, field: String) -> UpstreamTls {
    let names = if p.subject_alt_names.is_empty() {
        vec![p.hostname.clone()]
    } else {
        p.subject_alt_names.clone()
    };
    let (ca_pem, unusable) = match ca {
        CaVerdict::System => (None, None),
        CaVerdict::Bundle { pem, .. } => (Some(pem.clone()), None),
        CaVerdict::None { why, .. } => (
            None,
            Some(format!(
                "BackendTLSPolicy {}/{}: {why}",
                p.key.namespace, p.key.name
            )),
        ),
    };
    UpstreamTls {
        sni: Some(p.hostname.clone()),
        subject_alt_names: names,
        field,
        ca_pem,
        unusable,
        ..Default::default()
    }
}

/// What the policies of one Service (host `host`) become: one DestinationRule of the
/// policies in effect on it (the one on the whole Service as its `tls`, those on a port as
/// that port's), and what is wrong with each policy there. `ca` gives each policy's CA.
pub fn rules_for_host(
    host: &str,
    service: Option<&Service>,
    policies: &[&BackendTlsPolicy],
    ca: impl Fn(&BackendTlsPolicy) -> CaVerdict,
    domain_suffix: &str,
) -> (Option<DestinationRule>, Vec<ConfigError>) {
    let mut errors = Vec::new();
    let error = |p: &BackendTlsPolicy, message: String| ConfigError {
        object: p.key.clone(),
        code: ErrorCode::BackendTlsPolicyNotApplied,
        message,
    };
    let mut whole: Option<(&BackendTlsPolicy, Box<UpstreamTls>)> = None;
    let mut ports: Vec<(u16, TrafficPolicy)> = Vec::new();
    let mut first: Option<&BackendTlsPolicy> = None;
    let defined = service.map(|s| s.ports.as_slice());
    for (p, i, v) in verdicts(host, defined, policies, domain_suffix) {
        let field = format!("spec.targetRefs[{i}]");
        match v {
            TargetVerdict::NotFound { why } => {
                errors.push(error(p, format!("{field}: TargetNotFound: {why}")))
            }
            TargetVerdict::Conflicted { by } => errors.push(error(
                p,
                format!(
                    "{field}: Conflicted: BackendTLSPolicy {}/{} is older and targets the same \
                     Service and section; it applies instead",
                    by.namespace, by.name
                ),
            )),
            TargetVerdict::InEffect { port } => {
                let verdict = ca(p);
                match &verdict {
                    CaVerdict::None {
                        accepted_reason,
                        why,
                        ..
                    } => errors.push(error(
                        p,
                        format!(
                            "{accepted_reason}: {why}; connections to {host} under this policy \
                             fail closed"
                        ),
                    )),
                    CaVerdict::Bundle {
                        unresolved: Some((_, why)),
                        ..
                    } => errors.push(error(p, format!("InvalidCACertificateRef: {why}"))),
                    _ => {}
                }
                let tls = Box::new(upstream_tls(p, &verdict, "spec.validation".into()));
                first = first.or(Some(p));
                match port {
                    None => whole = Some((p, tls)),
                    Some(port) => ports.push((
                        port,
                        TrafficPolicy {
                            tls: Some(tls),
                            ..Default::default()
                        },
                    )),
                }
            }
        }
    }
    errors.sort();
    errors.dedup();
    let Some(named) = whole.as_ref().map(|(p, _)| *p).or(first) else {
        return (None, errors);
    };
    ports.sort();
    // One entry per port (a policy naming one port twice is refused by its reader).
    ports.dedup_by_key(|(port, _)| *port);
    let rule = DestinationRule {
        key: rule_key(named, host, domain_suffix),
        host: host.to_string(),
        // Everywhere, whatever the mesh's default: every client must originate it.
        export_to: vec!["*".into()],
        traffic_policy: Some(TrafficPolicy {
            tls: whole.map(|(_, t)| t),
            port_level: ports,
            ..Default::default()
        }),
        subsets: Vec::new(),
        selector: None,
    };
    (Some(rule), errors)
}

/// The key of the DestinationRule a Service's policies become: the key of the policy on
/// the whole Service (else of the first on a port), kind `BackendTLSPolicy`, with
/// `~SERVICE` added when that policy targets several Services.
fn rule_key(p: &BackendTlsPolicy, host: &str, domain_suffix: &str) -> ConfigKey {
    let services: std::collections::BTreeSet<String> = p
        .targets
        .iter()
        .filter_map(|t| target_host(p, t, domain_suffix))
        .collect();
    let mut key = p.key.clone();
    if services.len() > 1 {
        let name = host.split('.').next().unwrap_or(host);
        key.name = format!("{}~{name}", key.name);
    }
    key
}

/// Every DestinationRule and error of `objects`' policies, at once (the naive recompute's
/// form of what the dataflow computes per Service).
pub fn translate_all(
    objects: &[&GatewayApiObject],
    services: &[&Service],
    domain_suffix: &str,
) -> (Vec<DestinationRule>, Vec<ConfigError>) {
    let mut policies = Vec::new();
    let mut maps = std::collections::BTreeMap::new();
    for o in objects {
        match o {
            GatewayApiObject::BackendTlsPolicy(p) => policies.push(p),
            GatewayApiObject::ConfigMap(c) => {
                maps.insert((c.key.namespace.as_str(), c.key.name.as_str()), c);
            }
            _ => {}
        }
    }
    let hosts: std::collections::BTreeSet<String> = policies
        .iter()
        .flat_map(|p| {
            p.targets
                .iter()
                .filter_map(|t| target_host(p, t, domain_suffix))
        })
        .collect();
    let mut rules = Vec::new();
    let mut errors = Vec::new();
    for host in hosts {
        let service = kube_service(services.iter().copied().filter(|s| s.hostname == host));
        let (r, e) = rules_for_host(
            &host,
            service,
            &policies,
            |p| {
                resolve_ca(p, |name| {
                    maps.get(&(p.key.namespace.as_str(), name)).copied()
                })
            },
            domain_suffix,
        );
        rules.extend(r);
        errors.extend(e);
    }
    // A policy none of whose targets is a Service says so.
    for p in &policies {
        for (i, t) in p.targets.iter().enumerate() {
            if !t.is_service() {
                errors.push(unsupported_target(p, i, t));
            }
        }
    }
    (rules, errors)
}

/// A target of a kind meshflow applies no policy to.
pub fn unsupported_target(p: &BackendTlsPolicy, i: usize, t: &PolicyTarget) -> ConfigError {
    ConfigError {
        object: p.key.clone(),
        code: ErrorCode::BackendTlsPolicyNotApplied,
        message: format!(
            "spec.targetRefs[{i}]: TargetNotFound: kind {} of group {:?} is not supported (a \
             Service of the core group)",
            t.kind, t.group
        ),
    }
}

#[cfg(test)]
#[path = "backend_tls_tests.rs"]
mod tests;
