//! A BackendTLSPolicy's status, as the spec defines it: one `ancestors[]` entry per
//! target (the Service, and its section), under the mesh's controller (the policy applies
//! to the sidecars too), and one per Gateway of a class meshflow owns whose routes send to
//! a targeted Service, under the Gateway's controller; each with `Accepted` (`Accepted`,
//! `Conflicted`, `TargetNotFound`, `NoValidCACertificate`, `Invalid`) and `ResolvedRefs`
//! (`ResolvedRefs`, `InvalidCACertificateRef`, `InvalidKind`), decided by
//! `dataflows::rules::backend_tls` as the dataflow decides them. Entries other controllers
//! wrote stay; at most 16 ancestors, as the API allows.

use super::gateway_status::{condition, others_entries, Known, MESH_CONTROLLER};
use dataflows::model::{BackendTlsPolicy, ConfigKey, GatewayApiObject, KubeGateway, ParentKind};
use dataflows::rules::backend_tls::{resolve_ca, target_host, verdicts, CaVerdict, TargetVerdict};
use dataflows::rules::gateway_api::RouteView;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A domain for the hosts compared here (targets are matched among themselves only).
const DOMAIN: &str = "cluster.local";

/// The API's limit on `status.ancestors`.
const MAX_ANCESTORS: usize = 16;

/// `Accepted` and `ResolvedRefs` of one target.
fn conditions(verdict: &TargetVerdict, ca: &CaVerdict, generation: Option<i64>) -> [Value; 2] {
    let accepted = match verdict {
        TargetVerdict::NotFound { why } => {
            condition("Accepted", false, "TargetNotFound", why, generation)
        }
        TargetVerdict::Conflicted { by } => condition(
            "Accepted",
            false,
            "Conflicted",
            &format!(
                "BackendTLSPolicy {}/{} is older and targets the same Service and section",
                by.namespace, by.name
            ),
            generation,
        ),
        TargetVerdict::InEffect { .. } => match ca {
            CaVerdict::None {
                accepted_reason,
                why,
                ..
            } => condition(
                "Accepted",
                false,
                accepted_reason,
                &format!("{why}; connections under this policy fail closed"),
                generation,
            ),
            _ => condition("Accepted", true, "Accepted", "in effect", generation),
        },
    };
    let resolved = match ca {
        CaVerdict::None {
            resolved_reason: Some(reason),
            why,
            ..
        }
        | CaVerdict::Bundle {
            unresolved: Some((reason, why)),
            ..
        } => condition("ResolvedRefs", false, reason, why, generation),
        _ => condition(
            "ResolvedRefs",
            true,
            "ResolvedRefs",
            "every CA reference resolves",
            generation,
        ),
    };
    [accepted, resolved]
}

/// The desired status of every BackendTLSPolicy among `objects` (all the Gateway API's
/// objects, as [`super::gateway_status::desired`] takes them), into `out`.
pub(super) fn policy_statuses(
    objects: &[(&GatewayApiObject, Option<i64>, Option<&Value>)],
    known: &Known,
    out: &mut BTreeMap<ConfigKey, Value>,
) {
    // The Gateways of the classes meshflow owns, by (namespace, name).
    let gateways: BTreeMap<(&str, &str), &KubeGateway> = objects
        .iter()
        .filter_map(|(o, _, _)| match o {
            GatewayApiObject::Gateway(g) if g.owned() => {
                Some(((g.key.namespace.as_str(), g.key.name.as_str()), g))
            }
            _ => None,
        })
        .collect();
    let policies: Vec<&BackendTlsPolicy> = objects
        .iter()
        .filter_map(|(o, _, _)| match o {
            GatewayApiObject::BackendTlsPolicy(p) => Some(p),
            _ => None,
        })
        .collect();
    if policies.is_empty() {
        return;
    }
    let maps = known.config_maps_with(objects);
    // Which Gateways meshflow serves send to each Service, by (namespace, name).
    let mut reached: BTreeMap<(&str, &str), Vec<&KubeGateway>> = BTreeMap::new();
    for (o, _, _) in objects {
        let Some(route) = RouteView::of(o) else {
            continue;
        };
        let parents: Vec<&KubeGateway> = route
            .parents
            .iter()
            .filter(|p| p.kind == ParentKind::Gateway)
            .filter_map(|p| {
                gateways
                    .get(&(p.namespace.as_str(), p.name.as_str()))
                    .copied()
            })
            .collect();
        for b in route.backends.iter().flat_map(|b| b.iter()) {
            if b.kind == "Service" {
                let list = reached
                    .entry((b.namespace.as_str(), b.name.as_str()))
                    .or_default();
                list.extend(parents.iter().copied());
                list.sort_by(|a, b| a.key.cmp(&b.key));
                list.dedup_by(|a, b| a.key == b.key);
            }
        }
    }
    for (o, generation, stored) in objects {
        let GatewayApiObject::BackendTlsPolicy(p) = o else {
            continue;
        };
        let ns = p.key.namespace.as_str();
        let ca = resolve_ca(p, |name| maps.get(&(ns, name)).copied());
        let mut ours: Vec<Value> = Vec::new();
        let mut at_gateways: BTreeMap<&ConfigKey, (&KubeGateway, [Value; 2])> = BTreeMap::new();
        for (i, t) in p.targets.iter().enumerate() {
            let verdict = match target_host(p, t, DOMAIN) {
                None => TargetVerdict::NotFound {
                    why: format!(
                        "kind {} of group {:?} is not supported (a Service of the core group)",
                        t.kind, t.group
                    ),
                },
                Some(host) => {
                    let ports = known
                        .service_ports
                        .get(&(ns.to_string(), t.name.clone()))
                        .map(Vec::as_slice);
                    verdicts(&host, ports, &policies, DOMAIN)
                        .into_iter()
                        .find(|(q, j, _)| q.key == p.key && *j == i)
                        .map(|(_, _, v)| v)
                        .unwrap_or(TargetVerdict::NotFound {
                            why: "not found".into(),
                        })
                }
            };
            let conds = conditions(&verdict, &ca, *generation);
            let mut ancestor =
                json!({"group": t.group, "kind": t.kind, "namespace": ns, "name": t.name});
            if let Some(s) = &t.section {
                ancestor["sectionName"] = json!(s);
            }
            ours.push(json!({
                "ancestorRef": ancestor,
                "controllerName": MESH_CONTROLLER,
                "conditions": conds.clone(),
            }));
            if t.is_service() {
                for gw in reached.get(&(ns, t.name.as_str())).into_iter().flatten() {
                    // A Gateway reaching several targets shows the first one in effect
                    // (else the first one's verdict).
                    let in_effect = conds[0]["status"] == "True";
                    match at_gateways.get(&gw.key) {
                        Some((_, held)) if !in_effect || held[0]["status"] == "True" => {}
                        _ => {
                            at_gateways.insert(&gw.key, (gw, conds.clone()));
                        }
                    }
                }
            }
        }
        let mut controllers: Vec<&str> = vec![MESH_CONTROLLER];
        for (gw, conds) in at_gateways.into_values() {
            controllers.push(gw.controller_name());
            ours.push(json!({
                "ancestorRef": {
                    "group": "gateway.networking.k8s.io",
                    "kind": "Gateway",
                    "namespace": gw.key.namespace,
                    "name": gw.key.name,
                },
                "controllerName": gw.controller_name(),
                "conditions": conds,
            }));
        }
        // Entries of other controllers stay as they are, first.
        // Ours first in what the API's limit keeps: the others' entries fill what is left.
        ours.truncate(MAX_ANCESTORS);
        let mut ancestors = others_entries(*stored, "ancestors", &controllers);
        ancestors.truncate(MAX_ANCESTORS - ours.len());
        ancestors.extend(ours);
        out.insert(p.key.clone(), json!({ "ancestors": ancestors }));
    }
}

#[cfg(test)]
mod tests {
    use super::super::gateway_status::tests::{condition_of, read_files};
    use super::super::gateway_status::Known;
    use dataflows::model::{ConfigKey, GatewayApiObject, Kind};
    use serde_json::Value;
    use std::collections::BTreeMap;

    /// The policies' desired status.
    fn statuses(
        objects: &[(&GatewayApiObject, Option<i64>, Option<&Value>)],
        known: &Known,
    ) -> BTreeMap<ConfigKey, Value> {
        let mut out = BTreeMap::new();
        super::policy_statuses(objects, known, &mut out);
        out
    }

    /// BackendTLSPolicy's status cases, from files: BackendTLSPolicy (Accepted and
    /// ResolvedRefs at the Gateway whose route sends to the Service, and at the Service),
    /// BackendTLSPolicyConflictResolution (the older of two on one target Conflicted, a
    /// sectioned policy beside an unsectioned one both Accepted),
    /// BackendTLSPolicyInvalidCACertificateRef (a missing ConfigMap, one without `ca.crt`),
    /// BackendTLSPolicyInvalidKind, and BackendTLSPolicyObservedGenerationBump (every
    /// condition carries the generation it was judged at); a section the Service lacks is
    /// TargetNotFound.
    #[test]
    fn backend_tls_policy_conformance_cases_from_files() {
        let ca = rcgen::KeyPair::generate().expect("a key");
        let pem = rcgen::CertificateParams::new(vec!["ca.example".into()])
            .expect("params")
            .self_signed(&ca)
            .expect("a certificate")
            .pem();
        let indent: String = pem.lines().map(|l| format!("    {l}\n")).collect();
        let policy = |name: &str, created: &str, section: &str, cm: &str, kind: &str| {
            format!(
                "---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: {name}, namespace: infra, creationTimestamp: '{created}'}}
spec:
  targetRefs: [{{group: '', kind: Service, name: tls-backend{section}}}]
  validation:
    caCertificateRefs: [{{group: '', kind: {kind}, name: {cm}}}]
    hostname: abc.example.com
"
            )
        };
        let yaml = [
            format!(
                "apiVersion: v1
kind: ConfigMap
metadata: {{name: ca, namespace: infra}}
data:
  ca.crt: |
{indent}---
apiVersion: v1
kind: ConfigMap
metadata: {{name: empty, namespace: infra}}
data: {{}}
---
apiVersion: v1
kind: Service
metadata: {{name: tls-backend, namespace: infra}}
spec:
  ports: [{{name: https-1, port: 443}}, {{name: https-2, port: 8443}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: same-namespace, namespace: infra}}
spec:
  gatewayClassName: istio
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: to-tls, namespace: infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules: [{{backendRefs: [{{name: tls-backend, port: 443}}]}}]
"
            ),
            policy(
                "conflicted-1",
                "2026-01-01T00:00:00Z",
                "",
                "ca",
                "ConfigMap",
            ),
            policy(
                "conflicted-2",
                "2026-01-01T00:00:00Z",
                "",
                "ca",
                "ConfigMap",
            ),
            policy(
                "sectioned",
                "2026-01-02T00:00:00Z",
                ", sectionName: https-1",
                "ca",
                "ConfigMap",
            ),
            policy(
                "missing-cm",
                "2026-01-03T00:00:00Z",
                ", sectionName: https-2",
                "nothing",
                "ConfigMap",
            ),
            policy(
                "no-section",
                "2026-01-03T00:00:00Z",
                ", sectionName: https-9",
                "ca",
                "ConfigMap",
            ),
        ]
        .concat();
        let (_, objects, known) = read_files("backend-tls-policies", &yaml);
        let with_generation: Vec<_> = objects.iter().map(|o| (o, Some(4), None)).collect();
        let status = statuses(&with_generation, &known);
        let ancestors = |name: &str| -> Vec<Value> {
            let key = ConfigKey::new(Kind::BackendTlsPolicy, "infra", name);
            status[&key]["ancestors"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        };
        let at = |name: &str, kind: &str| -> Value {
            ancestors(name)
                .into_iter()
                .find(|a| a["ancestorRef"]["kind"] == kind)
                .unwrap_or(Value::Null)
        };
        let pair = |s: &str, r: &str| (s.to_string(), r.to_string());
        for kind in ["Gateway", "Service"] {
            let a = at("conflicted-1", kind);
            assert_eq!(
                condition_of(&a, "Accepted"),
                pair("True", "Accepted"),
                "{a:#}"
            );
            assert_eq!(
                condition_of(&a, "ResolvedRefs"),
                pair("True", "ResolvedRefs")
            );
            let b = at("conflicted-2", kind);
            assert_eq!(
                condition_of(&b, "Accepted"),
                pair("False", "Conflicted"),
                "{b:#}"
            );
            let s = at("sectioned", kind);
            assert_eq!(
                condition_of(&s, "Accepted"),
                pair("True", "Accepted"),
                "{s:#}"
            );
        }
        let gw = at("conflicted-1", "Gateway");
        assert_eq!(gw["ancestorRef"]["name"], "same-namespace");
        assert_eq!(gw["controllerName"], "istio.io/gateway-controller");
        assert_eq!(
            at("sectioned", "Service")["ancestorRef"]["sectionName"],
            "https-1"
        );
        let missing = at("missing-cm", "Service");
        assert_eq!(
            condition_of(&missing, "Accepted"),
            pair("False", "NoValidCACertificate")
        );
        assert_eq!(
            condition_of(&missing, "ResolvedRefs"),
            pair("False", "InvalidCACertificateRef")
        );
        let none = at("no-section", "Service");
        assert_eq!(
            condition_of(&none, "Accepted"),
            pair("False", "TargetNotFound"),
            "{none:#}"
        );
        // Every condition carries the generation it was judged at.
        for a in ancestors("conflicted-1") {
            for c in a["conditions"].as_array().expect("conditions") {
                assert_eq!(c["observedGeneration"], 4, "{c:#}");
            }
        }
        // A ConfigMap without ca.crt, and a reference of an invalid kind.
        let yaml = yaml.replace("name: nothing", "name: empty");
        let (_, objects, known) = read_files("backend-tls-policies-2", &yaml);
        let with_generation: Vec<_> = objects.iter().map(|o| (o, Some(5), None)).collect();
        let status = statuses(&with_generation, &known);
        let key = ConfigKey::new(Kind::BackendTlsPolicy, "infra", "missing-cm");
        let a = &status[&key]["ancestors"][0];
        assert_eq!(
            condition_of(a, "ResolvedRefs"),
            pair("False", "InvalidCACertificateRef"),
            "{a:#}"
        );
        assert!(
            a.to_string()
                .contains("ConfigMap infra/empty has no ca.crt"),
            "{a:#}"
        );
        let yaml = yaml.replace(
            "kind: ConfigMap, name: empty",
            "kind: InvalidKind, name: empty",
        );
        let (_, objects, known) = read_files("backend-tls-policies-3", &yaml);
        let with_generation: Vec<_> = objects.iter().map(|o| (o, Some(5), None)).collect();
        let status = statuses(&with_generation, &known);
        let a = &status[&key]["ancestors"][0];
        assert_eq!(
            condition_of(a, "Accepted"),
            pair("False", "NoValidCACertificate")
        );
        assert_eq!(
            condition_of(a, "ResolvedRefs"),
            pair("False", "InvalidKind"),
            "{a:#}"
        );
    }
}
