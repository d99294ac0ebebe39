//! Which BackendTLSPolicy is in effect where, what it becomes, and how it merges with a
//! written DestinationRule.

use super::*;
use crate::rules::{consolidate_drs, dr_merge_warnings, DrIndex};
use crate::translate::cluster::tests::reviews;

const DOMAIN: &str = "cluster.local";
const HOST: &str = "reviews.default.svc.cluster.local";

fn policy(name: &str, created: &str, section: Option<&str>) -> BackendTlsPolicy {
    BackendTlsPolicy {
        key: ConfigKey::new(Kind::BackendTlsPolicy, "default", name),
        created: created.into(),
        targets: vec![PolicyTarget {
            group: String::new(),
            kind: "Service".into(),
            name: "reviews".into(),
            section: section.map(str::to_string),
        }],
        ca_refs: vec![CaRef {
            group: String::new(),
            kind: "ConfigMap".into(),
            name: "ca".into(),
        }],
        system_ca: false,
        hostname: format!("{name}.example.com"),
        subject_alt_names: Vec::new(),
        invalid: None,
    }
}

fn map(ca: Option<&str>, problem: Option<&str>) -> CaConfigMap {
    CaConfigMap {
        key: ConfigKey::new(Kind::ConfigMap, "default", "ca"),
        ca: ca.map(str::to_string),
        problem: problem.map(str::to_string),
    }
}

const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

fn bundle(_: &BackendTlsPolicy) -> CaVerdict {
    CaVerdict::Bundle {
        pem: PEM.into(),
        unresolved: None,
    }
}

#[test]
fn the_older_policy_wins_and_a_ports_policy_goes_before_the_services() {
    let svc = reviews();
    let (a, b) = (
        policy("a", "2026-01-02T00:00:00Z", None),
        policy("b", "2026-01-01T00:00:00Z", None),
    );
    let s = policy("s", "2026-01-03T00:00:00Z", Some("http"));
    let (rule, errors) = rules_for_host(HOST, Some(&svc), &[&a, &b, &s], bundle, DOMAIN);
    // b is older than a: a conflicts; the sectioned policy conflicts with neither.
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].object.name, "a");
    assert!(
        errors[0]
            .message
            .contains("Conflicted: BackendTLSPolicy default/b"),
        "{}",
        errors[0].message
    );
    let rule = rule.expect("a rule");
    assert_eq!(rule.key, b.key);
    let tp = rule.traffic_policy.expect("a policy");
    let whole = tp.tls.expect("the Service's TLS");
    assert_eq!(whole.sni.as_deref(), Some("b.example.com"));
    // No subjectAltNames: the hostname is the name verified (the spec; Istio verifies none).
    assert_eq!(whole.subject_alt_names, vec!["b.example.com".to_string()]);
    assert_eq!(whole.ca_pem.as_deref(), Some(PEM));
    assert_eq!(tp.port_level.len(), 1);
    let (port, entry) = &tp.port_level[0];
    assert_eq!(*port, 9080);
    assert_eq!(
        entry.tls.as_ref().expect("the port's TLS").sni.as_deref(),
        Some("s.example.com")
    );
    // Same creation time: the name decides.
    let (c, d) = (policy("c", "", None), policy("d", "", None));
    let (_, errors) = rules_for_host(HOST, Some(&svc), &[&d, &c], bundle, DOMAIN);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].object.name, "d");
}

#[test]
fn targets_that_do_not_exist_are_named() {
    let svc = reviews();
    let p = policy("p", "", Some("grpc"));
    let (rule, errors) = rules_for_host(HOST, Some(&svc), &[&p], bundle, DOMAIN);
    assert!(rule.is_none());
    assert!(
        errors[0]
            .message
            .contains("TargetNotFound: Service default/reviews has no port named \"grpc\""),
        "{}",
        errors[0].message
    );
    let (rule, errors) = rules_for_host(HOST, None, &[&policy("q", "", None)], bundle, DOMAIN);
    assert!(rule.is_none());
    assert!(errors[0]
        .message
        .contains("Service default/reviews does not exist"));
    let mut other = policy("r", "", None);
    other.targets[0].group = "networking.istio.io".into();
    other.targets[0].kind = "ServiceEntry".into();
    assert_eq!(target_host(&other, &other.targets[0], DOMAIN), None);
    assert!(unsupported_target(&other, 0, &other.targets[0])
        .message
        .contains("kind ServiceEntry"));
}

#[test]
fn the_ca_resolves_to_a_bundle_the_system_or_a_reason() {
    let p = policy("p", "", None);
    let good = map(Some(PEM), None);
    assert_eq!(
        resolve_ca(&p, |_| Some(&good)),
        CaVerdict::Bundle {
            pem: PEM.into(),
            unresolved: None
        }
    );
    let CaVerdict::None {
        accepted_reason,
        resolved_reason,
        why,
    } = resolve_ca(&p, |_| None)
    else {
        panic!("no CA");
    };
    assert_eq!(
        (accepted_reason.as_str(), resolved_reason.as_deref()),
        ("NoValidCACertificate", Some("InvalidCACertificateRef"))
    );
    assert!(why.contains("ConfigMap default/ca does not exist"), "{why}");
    let empty = map(None, Some("has no ca.crt"));
    let CaVerdict::None { why, .. } = resolve_ca(&p, |_| Some(&empty)) else {
        panic!("no CA");
    };
    assert!(why.contains("ConfigMap default/ca has no ca.crt"), "{why}");
    let mut kind = p.clone();
    kind.ca_refs[0].group = "invalid.io".into();
    let CaVerdict::None {
        resolved_reason, ..
    } = resolve_ca(&kind, |_| Some(&good))
    else {
        panic!("no CA");
    };
    assert_eq!(resolved_reason.as_deref(), Some("InvalidKind"));
    // One good reference of two: served, the other reported.
    let mut two = p.clone();
    two.ca_refs.push(CaRef {
        group: String::new(),
        kind: "ConfigMap".into(),
        name: "gone".into(),
    });
    let CaVerdict::Bundle {
        unresolved: Some((reason, why)),
        ..
    } = resolve_ca(&two, |n| (n == "ca").then_some(&good))
    else {
        panic!("a bundle");
    };
    assert_eq!(reason, "InvalidCACertificateRef");
    assert!(why.contains("caCertificateRefs[1]"), "{why}");
    let mut system = p.clone();
    system.ca_refs.clear();
    system.system_ca = true;
    assert_eq!(resolve_ca(&system, |_| None), CaVerdict::System);
    let mut invalid = system.clone();
    invalid.invalid = Some("wellKnownCACertificates: \"Vendor\" is not supported".into());
    assert!(
        matches!(resolve_ca(&invalid, |_| None), CaVerdict::None { ref accepted_reason, .. } if accepted_reason == "Invalid")
    );
    // Without a CA the rule still applies, failing closed.
    let (rule, errors) = rules_for_host(
        HOST,
        Some(&reviews()),
        &[&p],
        |p| resolve_ca(p, |_| None),
        DOMAIN,
    );
    let tls = rule
        .and_then(|r| r.traffic_policy)
        .and_then(|p| p.tls)
        .expect("the policy's TLS");
    assert!(tls
        .unusable
        .as_deref()
        .is_some_and(|u| u.contains("does not exist")));
    assert!(
        errors[0].message.starts_with("NoValidCACertificate:"),
        "{}",
        errors[0].message
    );
}

/// A written rule goes first: the policy fills the `tls` it leaves unset (its own, and its
/// port entries' — a port entry without `tls` would otherwise send plaintext), and where
/// the written rule sets `tls`, that applies and a warning says so.
#[test]
fn a_written_rule_goes_first_and_the_policy_fills_its_tls() {
    let (rule, _) = rules_for_host(
        HOST,
        Some(&reviews()),
        &[&policy("p", "", None)],
        bundle,
        DOMAIN,
    );
    let from_policy = rule.expect("a rule");
    let written = |tp: TrafficPolicy| DestinationRule {
        key: ConfigKey::new(Kind::DestinationRule, "default", "z-written"),
        host: HOST.into(),
        export_to: Vec::new(),
        traffic_policy: Some(tp),
        subsets: Vec::new(),
        selector: None,
    };
    let user = written(TrafficPolicy {
        load_balancer: Some(LoadBalancer::Random),
        port_level: vec![(
            9090,
            TrafficPolicy {
                load_balancer: Some(LoadBalancer::LeastRequest),
                ..Default::default()
            },
        )],
        ..Default::default()
    });
    let merged = consolidate_drs(&[&from_policy, &user]);
    let (_, rule, from) = merged
        .iter()
        .find(|(e, _, _)| e.index == DrIndex::Exported)
        .expect("the exported entry");
    assert_eq!(rule.key, user.key, "the written rule is the entry");
    assert_eq!(from, &vec![user.key.clone(), from_policy.key.clone()]);
    let tp = rule.traffic_policy.as_ref().expect("a policy");
    assert_eq!(tp.load_balancer, Some(LoadBalancer::Random));
    assert_eq!(
        tp.tls.as_ref().expect("TLS").sni.as_deref(),
        Some("p.example.com")
    );
    assert_eq!(
        tp.port_level[0].1.load_balancer,
        Some(LoadBalancer::LeastRequest)
    );
    assert_eq!(
        tp.port_level[0].1.tls, tp.tls,
        "the port entry is filled too"
    );
    assert!(dr_merge_warnings(&[&from_policy, &user]).is_empty());

    let disabled = written(TrafficPolicy {
        tls_disabled: true,
        ..Default::default()
    });
    let merged = consolidate_drs(&[&from_policy, &disabled]);
    let tp = merged[0].1.traffic_policy.as_ref().expect("a policy");
    assert!(tp.tls.is_none() && tp.tls_disabled);
    let warnings = dr_merge_warnings(&[&from_policy, &disabled]);
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].object, from_policy.key);
    assert!(
        warnings[0].message.contains("sets its own tls"),
        "{}",
        warnings[0].message
    );
}

/// Whatever a written rule's `exportTo`, its entries take the policy's TLS (a rule the
/// policy's rule did not merge into would otherwise send plaintext to its proxies), down
/// to a subset's port entry, which replaces the settings above it whole; the policy's rule
/// is exported everywhere, whatever the mesh's default.
#[test]
fn every_written_entry_takes_the_policys_tls_down_to_subset_ports() {
    let (rule, _) = rules_for_host(
        HOST,
        Some(&reviews()),
        &[&policy("p", "", None)],
        bundle,
        DOMAIN,
    );
    let from_policy = rule.expect("a rule");
    assert_eq!(from_policy.export_to, vec!["*".to_string()]);
    let user = DestinationRule {
        key: ConfigKey::new(Kind::DestinationRule, "default", "local"),
        host: HOST.into(),
        export_to: vec![".".into()],
        traffic_policy: None,
        subsets: vec![Subset {
            name: "v1".into(),
            labels: Labels::new(),
            traffic_policy: Some(TrafficPolicy {
                port_level: vec![(
                    9080,
                    TrafficPolicy {
                        load_balancer: Some(LoadBalancer::Random),
                        ..Default::default()
                    },
                )],
                ..Default::default()
            }),
        }],
        selector: None,
    };
    let merged = consolidate_drs(&[&from_policy, &user]);
    let written: Vec<_> = merged
        .iter()
        .filter(|(_, r, _)| r.key == user.key)
        .collect();
    assert!(!written.is_empty());
    for (_, rule, from) in written {
        assert!(from.contains(&from_policy.key), "{from:?}");
        let tp = rule.traffic_policy.as_ref().expect("the policy's");
        assert_eq!(
            tp.tls.as_ref().and_then(|t| t.sni.as_deref()),
            Some("p.example.com")
        );
        let sub = rule.subsets[0]
            .traffic_policy
            .as_ref()
            .expect("the subset's");
        let (_, port) = &sub.port_level[0];
        assert_eq!(port.load_balancer, Some(LoadBalancer::Random));
        assert_eq!(
            port.tls, tp.tls,
            "the subset's port entry takes the policy's TLS"
        );
    }
}
