//! A BackendTLSPolicy: the Services (and ports) it targets, and how their servers are
//! verified. What the policy becomes, and which of two policies on one target is in
//! effect, is the dataflow's to decide (`dataflows::rules::backend_tls`).

use super::super::fields::{report_ignored, spec};
use super::super::Result;
use super::{created, hostname};
use crate::config::findings::Finding;
use crate::config::{gateway_api as api, Invalid};
use dataflows::model::{self as m, ConfigKey, Record};
use serde_yaml_ng::Value;

pub(in crate::config::convert) fn backend_tls_policy(
    key: &ConfigKey,
    value: &Value,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (api::BackendTlsPolicySpec, _) = spec(value)?;
    report_ignored(&ignored, findings, |_| None);
    for k in s.options.keys() {
        findings.push(Finding::warning(
            format!("spec.options.{k}"),
            "not supported by meshflow yet; the policy applies without it",
        ));
    }
    if s.target_refs.is_empty() {
        return Err(Invalid::field(
            "spec.targetRefs",
            "a BackendTLSPolicy needs at least one target",
        ));
    }
    // The spec's CEL rules: a target named twice has a section each time, never the same.
    for (i, t) in s.target_refs.iter().enumerate() {
        let same = |u: &&api::PolicyTargetRef| {
            (&u.group, &u.kind, &u.name) == (&t.group, &t.kind, &t.name)
        };
        let twins = s.target_refs.iter().filter(same).count();
        if twins > 1 && t.section_name.is_none() {
            return Err(Invalid::field(
                format!("spec.targetRefs[{i}].sectionName"),
                "sectionName must be specified when targetRefs includes 2 or more references \
                 to the same target",
            ));
        }
        let same_section = s
            .target_refs
            .iter()
            .filter(same)
            .filter(|u| u.section_name == t.section_name)
            .count();
        if same_section > 1 {
            return Err(Invalid::field(
                format!("spec.targetRefs[{i}].sectionName"),
                "sectionName must be unique when targetRefs includes 2 or more references to \
                 the same target",
            ));
        }
    }
    let Some(v) = s.validation else {
        return Err(Invalid::field(
            "spec.validation",
            "a BackendTLSPolicy needs validation (its hostname, and a CA)",
        ));
    };
    if v.hostname.is_empty() {
        return Err(Invalid::field(
            "spec.validation.hostname",
            "the hostname is required (the SNI, and the name the certificate must carry)",
        ));
    }
    hostname(&v.hostname, "spec.validation.hostname")?;
    if v.hostname.starts_with("*.") {
        return Err(Invalid::field(
            "spec.validation.hostname",
            "a wildcard is not a precise hostname",
        ));
    }
    let well_known = v.well_known_ca_certificates.filter(|w| !w.is_empty());
    match (v.ca_certificate_refs.is_empty(), &well_known) {
        (false, Some(_)) => {
            return Err(Invalid::field(
                "spec.validation",
                "must not contain both caCertificateRefs and wellKnownCACertificates",
            ))
        }
        (true, None) => {
            return Err(Invalid::field(
                "spec.validation",
                "must specify either caCertificateRefs or wellKnownCACertificates",
            ))
        }
        _ => {}
    }
    let mut sans = Vec::new();
    for (i, n) in v.subject_alt_names.iter().enumerate() {
        let field = format!("spec.validation.subjectAltNames[{i}]");
        let name = match (n.kind.as_str(), &n.hostname, &n.uri) {
            ("Hostname", Some(h), None) if !h.is_empty() => {
                hostname(h, &format!("{field}.hostname"))?;
                h.clone()
            }
            ("URI", None, Some(u)) if u.contains("://") => u.clone(),
            ("Hostname", ..) => {
                return Err(Invalid::field(
                    field,
                    "type Hostname needs hostname, and no uri",
                ))
            }
            ("URI", ..) => {
                return Err(Invalid::field(
                    field,
                    "type URI needs a uri (scheme://…), and no hostname",
                ))
            }
            (other, ..) => {
                return Err(Invalid::field(
                    format!("{field}.type"),
                    format!("{other:?} is not a type (Hostname or URI)"),
                ))
            }
        };
        sans.push(name);
    }
    // `System` is the proxy's own bundle; any other set is one meshflow does not know:
    // the policy is the spec's `Invalid` and fails closed.
    let invalid = well_known.as_deref().filter(|w| *w != "System").map(|w| {
        format!("spec.validation.wellKnownCACertificates: {w:?} is not supported (System)")
    });
    let policy = m::BackendTlsPolicy {
        key: key.clone(),
        created: created(value),
        targets: s
            .target_refs
            .into_iter()
            .map(|t| m::PolicyTarget {
                group: t.group,
                kind: t.kind,
                name: t.name,
                section: t.section_name.filter(|n| !n.is_empty()),
            })
            .collect(),
        ca_refs: v
            .ca_certificate_refs
            .into_iter()
            .map(|r| m::CaRef {
                group: r.group,
                kind: r.kind,
                name: r.name,
            })
            .collect(),
        system_ca: well_known.as_deref() == Some("System"),
        hostname: v.hostname,
        subject_alt_names: sans,
        invalid,
    };
    Ok(vec![Record::GatewayApi(
        m::GatewayApiObject::BackendTlsPolicy(policy),
    )])
}
