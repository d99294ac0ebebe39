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

/// The desired status of every BackendTLSPolicy among `objects`, into `out`; `gateways`:
/// the Gateways meshflow serves, by (namespace, name).
pub(super) fn policy_statuses(
    objects: &[(&GatewayApiObject, Option<i64>, Option<&Value>)],
    known: &Known,
    gateways: &BTreeMap<(&str, &str), &KubeGateway>,
    out: &mut BTreeMap<ConfigKey, Value>,
) {
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
    // The ConfigMaps: those the sources read, and those among the objects.
    let mut maps = BTreeMap::new();
    for ((ns, name), c) in &known.config_maps {
        maps.insert((ns.as_str(), name.as_str()), c);
    }
    for (o, _, _) in objects {
        if let GatewayApiObject::ConfigMap(c) = o {
            maps.insert((c.key.namespace.as_str(), c.key.name.as_str()), c);
        }
    }
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
                    // A Gateway reaching several targets shows the first one's verdict.
                    at_gateways.entry(&gw.key).or_insert((gw, conds.clone()));
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
        let mut ancestors = others_entries(*stored, "ancestors", &controllers);
        ancestors.extend(ours);
        ancestors.truncate(MAX_ANCESTORS);
        out.insert(p.key.clone(), json!({ "ancestors": ancestors }));
    }
}
