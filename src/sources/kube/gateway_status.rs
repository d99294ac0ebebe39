//! The Gateway API's status, as the spec defines it, for the objects of the classes
//! meshflow owns (`istio`, `meshflow`): on a Gateway its `Accepted` and `Programmed`
//! conditions and, per listener, `supportedKinds`, `attachedRoutes` and `Accepted`,
//! `Programmed`, `ResolvedRefs`; on a route, one `parents[]` entry per reference to such a
//! Gateway with `Accepted` (the spec's reason when refused) and `ResolvedRefs` (from the
//! dataflow's MF0040 errors, [`with_route_errors`]). Entries other controllers wrote on a
//! route are kept: the route's status is shared. A Gateway of another class, and a route's
//! reference to one, are left alone.

use dataflows::model::{
    ConfigError, ConfigKey, ErrorCode, GatewayApiObject, Kind, KubeGateway, ParentKind, ParentRef,
};
use dataflows::rules::gateway_api::{parent_verdict, RouteView, Verdict};
use serde_json::{json, Value};
use std::collections::BTreeMap;

const GROUP: &str = "gateway.networking.k8s.io";

/// The `controllerName` of the route parents that are Services (the mesh has no class).
const MESH_CONTROLLER: &str = "meshflow.dev/mesh-controller";

/// The kinds whose status is the Gateway API's.
pub fn is_gateway_api(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::KubernetesGateway
            | Kind::HttpRoute
            | Kind::GrpcRoute
            | Kind::TcpRoute
            | Kind::TlsRoute
    )
}

/// One condition (its `lastTransitionTime` is the writer's to add).
fn condition(kind: &str, ok: bool, reason: &str, message: &str, generation: Option<i64>) -> Value {
    let mut c = json!({
        "type": kind,
        "status": if ok { "True" } else { "False" },
        "reason": reason,
        "message": message,
    });
    if let Some(g) = generation {
        c["observedGeneration"] = json!(g);
    }
    c
}

/// The desired `status` of every Gateway API object meshflow speaks for, from all of them:
/// `(object, generation, status the API server holds)`.
pub fn desired(
    objects: &[(&GatewayApiObject, Option<i64>, Option<&Value>)],
    services: &std::collections::BTreeSet<(String, String)>,
) -> BTreeMap<ConfigKey, Value> {
    let gateways: BTreeMap<(&str, &str), &KubeGateway> = objects
        .iter()
        .filter_map(|(o, _, _)| match o {
            GatewayApiObject::Gateway(g) if g.owned() => {
                Some(((g.key.namespace.as_str(), g.key.name.as_str()), g))
            }
            _ => None,
        })
        .collect();
    let mut attached: BTreeMap<(&str, &str, String), usize> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for (o, generation, stored) in objects {
        let Some(route) = RouteView::of(o) else {
            continue;
        };
        let mut ours = Vec::new();
        let mut controllers = Vec::new();
        for p in route
            .parents
            .iter()
            .filter(|p| p.kind == ParentKind::Gateway)
        {
            let Some(gw) = gateways.get(&(p.namespace.as_str(), p.name.as_str())) else {
                continue;
            };
            let (ok, reason, message) = match parent_verdict(&route, p, gw) {
                Verdict::Accepted(listeners) => {
                    for l in &listeners {
                        *attached
                            .entry((gw.key.namespace.as_str(), gw.key.name.as_str(), l.clone()))
                            .or_default() += 1;
                    }
                    (
                        true,
                        "Accepted",
                        format!("attached to listeners {listeners:?}"),
                    )
                }
                Verdict::Refused(reason, message) => (false, reason, message),
            };
            controllers.push(gw.controller_name());
            ours.push(json!({
                "parentRef": parent_ref(p),
                "controllerName": gw.controller_name(),
                "conditions": [
                    condition("Accepted", ok, reason, &message, *generation),
                    condition("ResolvedRefs", true, "ResolvedRefs", "every backend resolves", *generation),
                ],
            }));
        }
        // Services (the mesh): accepted where the Service exists.
        for p in route
            .parents
            .iter()
            .filter(|p| p.kind == ParentKind::Service)
        {
            let exists = services.contains(&(p.namespace.clone(), p.name.clone()));
            let (reason, message) = if exists {
                (
                    "Accepted",
                    "the sidecars' routes to the Service".to_string(),
                )
            } else {
                (
                    "NoMatchingParent",
                    format!("Service {}/{} does not exist", p.namespace, p.name),
                )
            };
            controllers.push(MESH_CONTROLLER);
            let mut parent =
                json!({"group": "", "kind": "Service", "namespace": p.namespace, "name": p.name});
            if let Some(port) = p.port {
                parent["port"] = json!(port);
            }
            ours.push(json!({
                "parentRef": parent,
                "controllerName": MESH_CONTROLLER,
                "conditions": [
                    condition("Accepted", exists, reason, &message, *generation),
                    condition("ResolvedRefs", true, "ResolvedRefs", "every backend resolves", *generation),
                ],
            }));
        }
        if ours.is_empty() {
            continue;
        }
        // Entries of other controllers stay as they are.
        let mut parents: Vec<Value> = stored
            .and_then(|s| s["parents"].as_array())
            .into_iter()
            .flatten()
            .filter(|e| {
                !controllers
                    .iter()
                    .any(|c| e["controllerName"].as_str() == Some(c))
            })
            .cloned()
            .collect();
        parents.extend(ours);
        out.insert(route.key.clone(), json!({"parents": parents}));
    }
    for (o, generation, _) in objects {
        let GatewayApiObject::Gateway(g) = o else {
            continue;
        };
        if !g.owned() {
            continue;
        }
        let mut listeners: Vec<Value> = g
            .listeners
            .iter()
            .map(|l| {
                let kinds: Vec<&str> = if l.allowed_kinds.is_empty() {
                    l.protocol.default_kinds().to_vec()
                } else {
                    l.allowed_kinds.iter().map(String::as_str).filter(|k| *k != "-").collect()
                };
                let count = attached
                    .get(&(g.key.namespace.as_str(), g.key.name.as_str(), l.name.clone()))
                    .copied()
                    .unwrap_or(0);
                json!({
                    "name": l.name,
                    "supportedKinds": kinds.iter().map(|k| json!({"group": GROUP, "kind": k})).collect::<Vec<_>>(),
                    "attachedRoutes": count,
                    "conditions": [
                        condition("Accepted", true, "Accepted", "the listener is served", *generation),
                        condition("Programmed", true, "Programmed", "the listener is served to the gateway's proxies", *generation),
                        condition("ResolvedRefs", true, "ResolvedRefs", "its references resolve", *generation),
                    ],
                })
            })
            .collect();
        for (name, reason, why) in &g.refused {
            let conditions = match reason.as_str() {
                "InvalidCertificateRef" => vec![
                    condition("Accepted", true, "Accepted", why, *generation),
                    condition("Programmed", false, "Invalid", why, *generation),
                    condition("ResolvedRefs", false, reason, why, *generation),
                ],
                "ProtocolConflict" | "HostnameConflict" => vec![
                    condition("Accepted", false, reason, why, *generation),
                    condition("Programmed", false, "Invalid", why, *generation),
                    condition("ResolvedRefs", true, "ResolvedRefs", why, *generation),
                    condition("Conflicted", true, reason, why, *generation),
                ],
                _ => vec![
                    condition("Accepted", false, reason, why, *generation),
                    condition("Programmed", false, "Invalid", why, *generation),
                    condition("ResolvedRefs", true, "ResolvedRefs", why, *generation),
                ],
            };
            listeners.push(json!({
                "name": name,
                "supportedKinds": [],
                "attachedRoutes": 0,
                "conditions": conditions,
            }));
        }
        let programmed = !g.listeners.is_empty();
        let gateway_conditions = vec![
            condition(
                "Accepted",
                true,
                "Accepted",
                "of a class meshflow serves",
                *generation,
            ),
            condition(
                "Programmed",
                programmed,
                if programmed { "Programmed" } else { "Invalid" },
                if programmed {
                    "served to the proxies labelled gateway.networking.k8s.io/gateway-name"
                } else {
                    "no listener can be served"
                },
                *generation,
            ),
        ];
        out.insert(
            g.key.clone(),
            json!({"conditions": gateway_conditions, "listeners": listeners}),
        );
    }
    out
}

fn parent_ref(p: &ParentRef) -> Value {
    let mut r =
        json!({"group": GROUP, "kind": "Gateway", "namespace": p.namespace, "name": p.name});
    if let Some(s) = &p.section {
        r["sectionName"] = json!(s);
    }
    if let Some(port) = p.port {
        r["port"] = json!(port);
    }
    r
}

/// A route's status with the dataflow's errors about it: a backend that does not resolve
/// makes `ResolvedRefs` False (the first such error's reason) on every parent entry of
/// meshflow's.
pub fn with_route_errors(status: &mut Value, key: &ConfigKey, errors: &[ConfigError]) {
    if key.kind == Kind::KubernetesGateway {
        return;
    }
    let Some(first) = errors
        .iter()
        .find(|e| e.code == ErrorCode::BackendNotResolved)
    else {
        return;
    };
    // "spec.rules[0].backendRefs[1]: RefNotPermitted: …"
    let reason = first
        .message
        .split(": ")
        .nth(1)
        .filter(|r| matches!(*r, "RefNotPermitted" | "BackendNotFound"))
        .unwrap_or("BackendNotFound");
    let Some(parents) = status["parents"].as_array_mut() else {
        return;
    };
    for p in parents.iter_mut().filter(|p| ours(p)) {
        if let Some(conditions) = p["conditions"].as_array_mut() {
            for c in conditions
                .iter_mut()
                .filter(|c| c["type"] == "ResolvedRefs")
            {
                c["status"] = json!("False");
                c["reason"] = json!(reason);
                c["message"] = json!(first.message);
            }
        }
    }
}

/// Whether a route's parent entry is one meshflow writes.
fn ours(entry: &Value) -> bool {
    matches!(
        entry["controllerName"].as_str(),
        Some("istio.io/gateway-controller" | "meshflow.dev/gateway-controller" | MESH_CONTROLLER)
    )
}

/// The status with `since` as the transition time of each of meshflow's conditions (the
/// writer keeps one per object; a Gateway API condition must carry one); other
/// controllers' entries are left as they are.
pub fn stamped(status: &Value, since: &str) -> Value {
    let mut s = status.clone();
    let stamp = |conditions: &mut Value| {
        for c in conditions.as_array_mut().into_iter().flatten() {
            c["lastTransitionTime"] = json!(since);
        }
    };
    stamp(&mut s["conditions"]);
    if let Some(listeners) = s.get_mut("listeners").and_then(Value::as_array_mut) {
        for l in listeners {
            stamp(&mut l["conditions"]);
        }
    }
    if let Some(parents) = s.get_mut("parents").and_then(Value::as_array_mut) {
        for p in parents.iter_mut().filter(|p| ours(p)) {
            stamp(&mut p["conditions"]);
        }
    }
    if s.get("conditions").is_some_and(Value::is_null) {
        if let Some(map) = s.as_object_mut() {
            map.remove("conditions");
        }
    }
    s
}

/// The transition time meshflow last wrote on a stored status (its first condition's).
pub fn stored_since(stored: &Value) -> Option<String> {
    let first = match stored.get("parents").and_then(Value::as_array) {
        Some(parents) => parents
            .iter()
            .find(|p| ours(p))
            .map(|p| &p["conditions"][0]),
        None => Some(&stored["conditions"][0]),
    }?;
    first["lastTransitionTime"].as_str().map(str::to_string)
}
