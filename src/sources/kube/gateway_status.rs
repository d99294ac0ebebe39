//! The Gateway API's status, as the spec defines it, for the objects of the classes
//! meshflow owns (`istio`, `meshflow`): on a GatewayClass whose controller meshflow answers
//! for, `Accepted` and `SupportedVersion`; on a Gateway its `Accepted` and `Programmed`
//! conditions and, per listener, `supportedKinds`, `attachedRoutes` and `Accepted`,
//! `Programmed`, `ResolvedRefs`; on a route, one `parents[]` entry per reference to such a
//! Gateway with `Accepted` (the spec's reason when refused) and `ResolvedRefs` (from the
//! dataflow's MF0040 errors, [`with_route_errors`]). Entries other controllers wrote on a
//! route are kept: the route's status is shared. A Gateway of another class, and a route's
//! reference to one, are left alone.

use dataflows::model::{
    CaConfigMap, ConfigError, ConfigKey, ErrorCode, GatewayApiObject, Kind, KubeGateway,
    KubeGatewayClass, Labels, Listener, ParentKind, ParentRef, ReferenceGrant, ServicePort,
    TlsSecret, OWNED_CONTROLLERS,
};
use dataflows::model::{KubeListenerSet, RefusedListener};
use dataflows::rules::gateway_api::{
    listener_serves_kind, parent_objects, parent_verdict, served_gateway, ParentObject, RouteView,
    Verdict,
};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

const GROUP: &str = "gateway.networking.k8s.io";

/// The `controllerName` of the route parents that are Services (the mesh has no class).
pub(super) const MESH_CONTROLLER: &str = "meshflow.dev/mesh-controller";

/// The kinds whose status is the Gateway API's.
pub fn is_gateway_api(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::GatewayClass
            | Kind::KubernetesGateway
            | Kind::HttpRoute
            | Kind::GrpcRoute
            | Kind::TcpRoute
            | Kind::TlsRoute
            | Kind::BackendTlsPolicy
            | Kind::ListenerSet
    )
}

/// One condition (its `lastTransitionTime` is the writer's to add).
pub(super) fn condition(
    kind: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Value {
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

/// The entries of the list `field` (a route's `parents`, a policy's `ancestors`) of the
/// status the API server holds that other controllers than `ours` wrote: kept as they are.
pub(super) fn others_entries(stored: Option<&Value>, field: &str, ours: &[&str]) -> Vec<Value> {
    stored
        .and_then(|s| s[field].as_array())
        .into_iter()
        .flatten()
        .filter(|e| !ours.iter().any(|c| e["controllerName"].as_str() == Some(c)))
        .cloned()
        .collect()
}

/// What the status is judged against besides the Gateway API's objects, by
/// `(namespace, name)`.
#[derive(Default)]
pub struct Known {
    /// The Services that exist: a route whose parent is a Service is accepted there.
    pub services: BTreeSet<(String, String)>,
    /// The Secrets that exist, with why one cannot be served as a listener's certificate
    /// (`None`: it can) — the test the gateway's filter chains are built by.
    pub secrets: BTreeMap<(String, String), Option<String>>,
    /// The Namespaces' labels, by name (listeners' namespace selectors match them).
    pub namespaces: BTreeMap<String, Labels>,
    /// The Services' ports (a BackendTLSPolicy's `sectionName` names one).
    pub service_ports: BTreeMap<(String, String), Vec<ServicePort>>,
    /// The ConfigMaps, as CA bundles (a BackendTLSPolicy's `caCertificateRefs`).
    pub config_maps: BTreeMap<(String, String), CaConfigMap>,
}

impl Known {
    /// Every ConfigMap by (namespace, name): those the sources read, and those among the
    /// objects (which win: they are what the status is judged on).
    pub fn config_maps_with<'a>(
        &'a self,
        objects: &'a [(&GatewayApiObject, Option<i64>, Option<&Value>)],
    ) -> BTreeMap<(&'a str, &'a str), &'a CaConfigMap> {
        let mut maps: BTreeMap<(&str, &str), &CaConfigMap> = self
            .config_maps
            .iter()
            .map(|((ns, name), c)| ((ns.as_str(), name.as_str()), c))
            .collect();
        for (o, _, _) in objects {
            if let GatewayApiObject::ConfigMap(c) = o {
                maps.insert((c.key.namespace.as_str(), c.key.name.as_str()), c);
            }
        }
        maps
    }

    /// Records the Secret a source read.
    pub fn add_secret(&mut self, s: &TlsSecret) {
        self.secrets.insert(
            (s.key.namespace.clone(), s.key.name.clone()),
            s.serving_identity().err(),
        );
    }

    /// Why a terminating listener's certificates cannot be served, if they cannot.
    fn certificate_problem(&self, l: &Listener) -> Option<String> {
        let tls = l.tls.as_ref().filter(|t| !t.passthrough)?;
        tls.certificates.iter().find_map(|(ns, name)| {
            match self.secrets.get(&(ns.clone(), name.clone())) {
                None => Some(format!("Secret {ns}/{name} does not exist")),
                Some(Some(problem)) => Some(format!("Secret {ns}/{name} {problem}")),
                Some(None) => None,
            }
        })
    }
}

/// The desired `status` of every Gateway API object meshflow speaks for, from all of them:
/// `(object, generation, status the API server holds)`.
pub fn desired(
    objects: &[(&GatewayApiObject, Option<i64>, Option<&Value>)],
    known: &Known,
) -> BTreeMap<ConfigKey, Value> {
    let services = &known.services;
    // The Namespaces' labels: those the sources read, and those among the objects.
    let mut namespaces: BTreeMap<&str, &Labels> = known
        .namespaces
        .iter()
        .map(|(n, l)| (n.as_str(), l))
        .collect();
    for (o, _, _) in objects {
        if let GatewayApiObject::Namespace(n) = o {
            namespaces.insert(n.key.name.as_str(), &n.labels);
        }
    }
    // The Gateways meshflow serves, with the ReferenceGrants for their certificates applied
    // as the dataflow applies them.
    let grants: Vec<&ReferenceGrant> = objects
        .iter()
        .filter_map(|(o, _, _)| match o {
            GatewayApiObject::ReferenceGrant(g) => Some(g),
            _ => None,
        })
        .collect();
    // With the ListenerSets naming them, taken as the dataflow takes them.
    let sets: Vec<&KubeListenerSet> = objects
        .iter()
        .filter_map(|(o, _, _)| match o {
            GatewayApiObject::ListenerSet(s) => Some(s),
            _ => None,
        })
        .collect();
    // And the ConfigMaps their frontend validations name.
    let maps = known.config_maps_with(objects);
    let find_map = |ns: &str, name: &str| maps.get(&(ns, name)).copied();
    let granted: BTreeMap<&ConfigKey, KubeGateway> = objects
        .iter()
        .filter_map(|(o, _, _)| match o {
            GatewayApiObject::Gateway(g) if g.owned() => {
                let own: Vec<&KubeListenerSet> = sets
                    .iter()
                    .copied()
                    .filter(|s| s.parent.0 == g.key.namespace && s.parent.1 == g.key.name)
                    .collect();
                let served =
                    served_gateway(g, &grants, find_map, &own, |ns| namespaces.get(ns).copied());
                Some((&g.key, served.0))
            }
            _ => None,
        })
        .collect();
    // Each Gateway by every object a route names it through: itself and its ListenerSets.
    let gateways: BTreeMap<ParentObject, &KubeGateway> = granted
        .values()
        .flat_map(|g| parent_objects(g).into_iter().map(move |o| (o, g)))
        .collect();
    // Routes attached, by (the object named, listener).
    let mut attached: BTreeMap<(ParentObject, String), usize> = BTreeMap::new();
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
            .filter(|p| p.kind != ParentKind::Service)
        {
            let object = (p.kind, p.namespace.clone(), p.name.clone());
            let Some(gw) = gateways.get(&object) else {
                continue;
            };
            let labels = namespaces.get(route.key.namespace.as_str()).copied();
            let (ok, reason, message) = match parent_verdict(&route, p, gw, labels) {
                Verdict::Accepted(listeners) => {
                    for l in &listeners {
                        *attached.entry((object.clone(), l.clone())).or_default() += 1;
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
        let mut parents = others_entries(*stored, "parents", &controllers);
        parents.extend(ours);
        out.insert(route.key.clone(), json!({"parents": parents}));
    }
    for (o, generation, _) in objects {
        if let GatewayApiObject::GatewayClass(c) = o {
            if let Some(status) = class_status(c, *generation) {
                out.insert(c.key.clone(), status);
            }
            continue;
        }
        if let GatewayApiObject::ListenerSet(set) = o {
            let object = (
                ParentKind::ListenerSet,
                set.key.namespace.clone(),
                set.key.name.clone(),
            );
            // Of a Gateway meshflow serves only: another's (or one missing) is not ours to
            // speak for.
            if let Some(gw) = gateways.get(&object) {
                let status = set_status(set, gw, &attached, known, *generation);
                out.insert(set.key.clone(), status);
            }
            continue;
        }
        let GatewayApiObject::Gateway(g) = o else {
            continue;
        };
        let Some(g) = granted.get(&g.key) else {
            continue;
        };
        let object = (
            ParentKind::Gateway,
            g.key.namespace.clone(),
            g.key.name.clone(),
        );
        let counts = |l: &Listener| {
            attached
                .get(&(object.clone(), l.name.clone()))
                .copied()
                .unwrap_or(0)
        };
        let listeners =
            listeners_status(&g.listeners, &g.refused, counts, known, false, *generation);
        let (accepted, not_accepted, programmed) = (
            listeners.accepted,
            listeners.not_accepted,
            listeners.programmed,
        );
        let listeners = listeners.entries;
        // The spec's Gateway `Accepted`: `InvalidParameters` for its parameters; with a
        // listener not accepted, `ListenersNotValid` — False when no listener is accepted,
        // True when some are.
        let invalid_listeners = format!("{not_accepted} of its listeners are not accepted");
        let (ok, reason, message) = match &g.invalid_parameters {
            Some(why) => (false, "InvalidParameters", why.clone()),
            None if not_accepted > 0 => (accepted > 0, "ListenersNotValid", invalid_listeners),
            None => (true, "Accepted", "of a class meshflow serves".to_string()),
        };
        let programmed = ok && programmed > 0;
        let mut gateway_conditions = vec![
            condition("Accepted", ok, reason, &message, *generation),
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
        // Written only while a validation lets clients in without a valid certificate:
        // the conditions are written whole, so it goes when the fallback does.
        if g.frontend.insecure() {
            gateway_conditions.push(condition(
                "InsecureFrontendValidationMode",
                true,
                "ConfigurationChanged",
                "spec.tls.frontend lets clients in without a valid certificate (AllowInsecureFallback)",
                *generation,
            ));
        }
        // How many ListenerSets it serves: written every time (0 when none), as a status
        // patch leaves a field it does not name as it was.
        let taken = g.sets.iter().filter(|s| s.refused.is_none()).count();
        out.insert(
            g.key.clone(),
            json!({
                "conditions": gateway_conditions,
                "listeners": listeners,
                "attachedListenerSets": taken,
            }),
        );
    }
    out
}

/// The status of listeners (served and left out), and how many are accepted, not
/// accepted, and programmed.
struct ListenersStatus {
    entries: Vec<Value>,
    accepted: usize,
    not_accepted: usize,
    programmed: usize,
}

/// The `listeners` of a Gateway's or a ListenerSet's status: those served (`attached`:
/// how many routes each takes), then those left out with the spec's reason. A
/// ListenerSet's also say `Conflicted` False when they are not (`conflicts`), as its
/// conformance cases read them.
fn listeners_status(
    served: &[Listener],
    refused: &[RefusedListener],
    attached: impl Fn(&Listener) -> usize,
    known: &Known,
    conflicts: bool,
    generation: Option<i64>,
) -> ListenersStatus {
    let mut out = ListenersStatus {
        entries: Vec::new(),
        accepted: 0,
        not_accepted: 0,
        programmed: 0,
    };
    for l in served {
        let cert = known.certificate_problem(l);
        // A served listener is accepted; programmed where its certificate can be served.
        let mut entry = listener_status(l, attached(l), cert.as_deref(), generation);
        if conflicts {
            if let Some(c) = entry["conditions"].as_array_mut() {
                c.push(condition(
                    "Conflicted",
                    false,
                    "NoConflicts",
                    "no listener before it has its port and hostname",
                    generation,
                ));
            }
        }
        out.entries.push(entry);
        out.accepted += 1;
        out.programmed += usize::from(cert.is_none());
    }
    for r in refused {
        let (reason, why) = (&r.reason, &r.why);
        let conditions = match (reason.as_str(), &r.accepted_reason) {
            // Not accepted for a reference (a frontend validation's CAs): both say so.
            (_, Some(accepted)) => {
                out.not_accepted += 1;
                vec![
                    condition("Accepted", false, accepted, why, generation),
                    condition("Programmed", false, "Invalid", why, generation),
                    condition("ResolvedRefs", false, reason, why, generation),
                ]
            }
            ("InvalidCertificateRef" | "RefNotPermitted", None) => {
                out.accepted += 1;
                vec![
                    condition("Accepted", true, "Accepted", why, generation),
                    condition("Programmed", false, "Invalid", why, generation),
                    condition("ResolvedRefs", false, reason, why, generation),
                ]
            }
            ("ProtocolConflict" | "HostnameConflict", None) => {
                out.not_accepted += 1;
                vec![
                    condition("Accepted", false, reason, why, generation),
                    condition(
                        "Programmed",
                        false,
                        if conflicts { reason } else { "Invalid" },
                        why,
                        generation,
                    ),
                    condition("ResolvedRefs", true, "ResolvedRefs", why, generation),
                    condition("Conflicted", true, reason, why, generation),
                ]
            }
            _ => {
                out.not_accepted += 1;
                vec![
                    condition("Accepted", false, reason, why, generation),
                    condition("Programmed", false, "Invalid", why, generation),
                    condition("ResolvedRefs", true, "ResolvedRefs", why, generation),
                ]
            }
        };
        out.entries.push(json!({
            "name": r.name,
            "supportedKinds": r.kinds.iter().map(|k| json!({"group": GROUP, "kind": k})).collect::<Vec<_>>(),
            "attachedRoutes": 0,
            "conditions": conditions,
        }));
    }
    out
}

/// A ListenerSet's status on a Gateway meshflow serves: `Accepted` and `Programmed` with
/// the spec's reasons (`NotAllowed` by the Gateway's `allowedListeners`, the Gateway not
/// accepted, `ListenersNotValid` when none of its listeners can be served) and, for a set
/// the Gateway takes, its listeners as a Gateway's are written.
fn set_status(
    set: &KubeListenerSet,
    gw: &KubeGateway,
    attached: &BTreeMap<(ParentObject, String), usize>,
    known: &Known,
    generation: Option<i64>,
) -> Value {
    let taken = gw.sets.iter().find(|s| s.key == set.key);
    let object = (
        ParentKind::ListenerSet,
        set.key.namespace.clone(),
        set.key.name.clone(),
    );
    let (accepted, programmed, listeners) = match taken {
        None => {
            let why = "its Gateway does not take it".to_string();
            (
                ("NotAllowed", false, why.clone()),
                ("NotAllowed", false, why),
                Vec::new(),
            )
        }
        Some(t) => {
            let counts = |l: &Listener| {
                attached
                    .get(&(object.clone(), l.name.clone()))
                    .copied()
                    .unwrap_or(0)
            };
            let listeners = listeners_status(
                &t.listeners,
                &t.refused_listeners,
                counts,
                known,
                true,
                generation,
            );
            match &t.refused {
                // Refused by the Gateway: nothing of it is served, and no listener is
                // listed (it has none on the Gateway).
                Some((reason, why)) if reason != "ListenersNotValid" => {
                    let programmed = if reason == "ParentNotAccepted" {
                        "ParentNotProgrammed"
                    } else {
                        reason.as_str()
                    };
                    (
                        (reason.as_str(), false, why.clone()),
                        (programmed, false, why.clone()),
                        Vec::new(),
                    )
                }
                Some((reason, why)) => (
                    (reason.as_str(), false, why.clone()),
                    (reason.as_str(), false, why.clone()),
                    listeners.entries,
                ),
                None => {
                    let accepted = if listeners.not_accepted > 0 {
                        let why = format!(
                            "{} of its listeners are not accepted",
                            listeners.not_accepted
                        );
                        ("ListenersNotValid", true, why)
                    } else {
                        let why = format!("taken by Gateway {}/{}", gw.key.namespace, gw.key.name);
                        ("Accepted", true, why)
                    };
                    // Programmed where a listener's filter chain can be built (a
                    // certificate that cannot be served builds none), as a Gateway's.
                    let programmed = if listeners.programmed > 0 {
                        (
                            "Programmed",
                            true,
                            "served to the Gateway's proxies".to_string(),
                        )
                    } else {
                        ("Invalid", false, "no listener can be served".to_string())
                    };
                    (accepted, programmed, listeners.entries)
                }
            }
        }
    };
    json!({
        "conditions": [
            condition("Accepted", accepted.1, accepted.0, &accepted.2, generation),
            condition("Programmed", programmed.1, programmed.0, &programmed.2, generation),
        ],
        "listeners": listeners,
    })
}

/// A GatewayClass's status, for a class whose controller meshflow answers for (none for
/// another's: its status is that controller's): `Accepted`, and `SupportedVersion` — meshflow
/// reads the Gateway API's v1 kinds (and v1beta1/v1alpha2 where a kind has no v1).
fn class_status(c: &KubeGatewayClass, generation: Option<i64>) -> Option<Value> {
    if !OWNED_CONTROLLERS.contains(&c.controller.as_str()) {
        return None;
    }
    Some(json!({"conditions": [
        condition("Accepted", true, "Accepted", "meshflow serves this class's Gateways", generation),
        condition("SupportedVersion", true, "SupportedVersion", "the Gateway API's v1 kinds are read", generation),
    ]}))
}

/// A served listener's status: the route kinds it takes (`supportedKinds`: those its
/// `allowedRoutes.kinds` lists, or its protocol's, that meshflow serves on it), and
/// `ResolvedRefs` False with `InvalidRouteKinds` naming the kinds listed that it cannot
/// take.
fn listener_status(
    l: &Listener,
    attached: usize,
    certificate_problem: Option<&str>,
    generation: Option<i64>,
) -> Value {
    let listed: Vec<&str> = if l.allowed_kinds.is_empty() {
        l.protocol.default_kinds().to_vec()
    } else {
        l.allowed_kinds.iter().map(String::as_str).collect()
    };
    let (served, invalid): (Vec<&str>, Vec<&str>) =
        listed.iter().partition(|k| listener_serves_kind(l, k));
    let mut conditions = vec![
        condition(
            "Accepted",
            true,
            "Accepted",
            "the listener is served",
            generation,
        ),
        match certificate_problem {
            // The gateway's filter chain is not built without its certificate: not served.
            Some(why) => condition("Programmed", false, "Invalid", why, generation),
            None => condition(
                "Programmed",
                true,
                "Programmed",
                "the listener is served to the gateway's proxies",
                generation,
            ),
        },
    ];
    // A frontend validation's CA reference that did not resolve beside one that did.
    let unresolved_ca = l
        .tls
        .as_ref()
        .and_then(|t| t.clients.as_ref())
        .and_then(|c| c.unresolved.as_ref());
    if let Some(why) = certificate_problem {
        conditions.push(condition(
            "ResolvedRefs",
            false,
            "InvalidCertificateRef",
            why,
            generation,
        ));
    } else if let Some((reason, why)) = unresolved_ca {
        conditions.push(condition("ResolvedRefs", false, reason, why, generation));
    } else if invalid.is_empty() {
        conditions.push(condition(
            "ResolvedRefs",
            true,
            "ResolvedRefs",
            "its references resolve",
            generation,
        ));
    } else {
        let names: Vec<&str> = invalid
            .iter()
            .map(|k| {
                if *k == "-" {
                    "kinds of other groups"
                } else {
                    k
                }
            })
            .collect();
        let why = format!("not route kinds this listener takes: {}", names.join(", "));
        conditions.push(condition(
            "ResolvedRefs",
            false,
            "InvalidRouteKinds",
            &why,
            generation,
        ));
    }
    json!({
        "name": l.name,
        "supportedKinds": served.iter().map(|k| json!({"group": GROUP, "kind": k})).collect::<Vec<_>>(),
        "attachedRoutes": attached,
        "conditions": conditions,
    })
}

fn parent_ref(p: &ParentRef) -> Value {
    let kind = match p.kind {
        ParentKind::ListenerSet => "ListenerSet",
        _ => "Gateway",
    };
    let mut r = json!({"group": GROUP, "kind": kind, "namespace": p.namespace, "name": p.name});
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
        .filter(|r| matches!(*r, "RefNotPermitted" | "BackendNotFound" | "InvalidKind"))
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

#[cfg(test)]
#[path = "listener_set_status_tests.rs"]
mod listener_set_tests;

#[cfg(test)]
pub(super) mod tests {
    use super::{desired, with_route_errors, Known};
    use dataflows::model::{
        AllowedNamespaces, ConfigError, ConfigKey, GatewayApiObject, Kind, KubeGateway, Listener,
        ListenerProtocol, ListenerTls,
    };
    use serde_json::{json, Value};

    /// The element of the array `list` named `name` (`Null` when none is).
    fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
        list.as_array()
            .and_then(|items| items.iter().find(|i| i["name"] == name))
            .unwrap_or(&Value::Null)
    }

    /// `(status, reason)` of the condition of type `kind` of `object` (empty when none is).
    pub(in crate::sources::kube) fn condition_of(object: &Value, kind: &str) -> (String, String) {
        let c = object["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
            .unwrap_or(&Value::Null);
        let text = |x: &Value| x.as_str().unwrap_or_default().to_string();
        (text(&c["status"]), text(&c["reason"]))
    }

    /// The kinds of `listeners`' element `name`'s `supportedKinds`, in order.
    fn supported_kinds(listeners: &Value, name: &str) -> Vec<String> {
        named(listeners, name)["supportedKinds"]
            .as_array()
            .map(|ks| {
                ks.iter()
                    .map(|k| k["kind"].as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// What the file source reads from `yaml`, written as the one file of a directory of
    /// its own (`label` names it): every record, and the Gateway API objects apart.
    /// Reading errors fail the test.
    #[allow(clippy::type_complexity)] // the records and the objects among them
    /// The Gateway API objects in `yaml` as the file source reads them, with the records
    /// read and what the status is judged against (the Secrets read).
    pub(in crate::sources::kube) fn read_files(
        label: &str,
        yaml: &str,
    ) -> (
        Vec<(dataflows::model::Record, isize)>,
        Vec<GatewayApiObject>,
        Known,
    ) {
        use crate::sources::files::FileSource;
        use dataflows::model::{MeshConfig, Record};
        let dir = std::env::temp_dir().join(format!(
            "meshflow-{label}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        std::fs::write(dir.join("cases.yaml"), yaml).expect("the cases' file");
        let mut source = FileSource::new(&dir, MeshConfig::default());
        let scan = source.rescan();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(scan.errors.is_empty(), "{:?}", scan.errors);
        let mut known = Known::default();
        let mut objects = Vec::new();
        for (r, _) in &scan.changes {
            match r {
                Record::GatewayApi(o) => objects.push(o.clone()),
                Record::Secret(secret) => known.add_secret(secret),
                Record::Service(s) => {
                    let key = (s.origin.namespace.clone(), s.origin.name.clone());
                    known.service_ports.insert(key.clone(), s.ports.clone());
                    known.services.insert(key);
                }
                _ => {}
            }
        }
        (scan.changes, objects, known)
    }

    /// A `kubernetes.io/tls` Secret `ns/name` (a YAML document, `---` first) holding a new
    /// self-signed certificate for `dns` and its key: one a listener can serve.
    pub(in crate::sources::kube) fn tls_secret_yaml(ns: &str, name: &str, dns: &str) -> String {
        let kp = rcgen::KeyPair::generate().expect("a key");
        let cert = rcgen::CertificateParams::new(vec![dns.into()])
            .expect("params")
            .self_signed(&kp)
            .expect("a certificate");
        let indent = |pem: &str| -> String { pem.lines().map(|l| format!("    {l}\n")).collect() };
        format!(
            "---
apiVersion: v1
kind: Secret
metadata: {{name: {name}, namespace: {ns}}}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{}  tls.key: |
{}",
            indent(&cert.pem()),
            indent(&kp.serialize_pem())
        )
    }

    fn listener(
        name: &str,
        protocol: ListenerProtocol,
        passthrough: Option<bool>,
        kinds: &[&str],
    ) -> Listener {
        Listener {
            index: 0,
            name: name.into(),
            hostname: None,
            port: 443,
            protocol,
            tls: passthrough.map(|passthrough| ListenerTls {
                clients: None,
                passthrough,
                certificates: if passthrough {
                    vec![]
                } else {
                    vec![("edge".into(), "cert".into())]
                },
            }),
            allowed_namespaces: AllowedNamespaces::Same,
            allowed_kinds: kinds.iter().map(|k| k.to_string()).collect(),
        }
    }

    /// A listener's `supportedKinds` are the kinds it lists (or its protocol's) that
    /// meshflow serves on it; a kind listed that it cannot take is `InvalidRouteKinds`; a
    /// terminating TLS listener takes TLSRoutes.
    #[test]
    fn listener_status_names_the_route_kinds_it_cannot_take() {
        let gw = GatewayApiObject::Gateway(KubeGateway {
            key: ConfigKey::new(Kind::KubernetesGateway, "edge", "gw"),
            class: "istio".into(),
            listeners: vec![
                listener("web", ListenerProtocol::Http, None, &[]),
                listener(
                    "pass",
                    ListenerProtocol::Tls,
                    Some(true),
                    &["TCPRoute", "TLSRoute"],
                ),
                listener("term", ListenerProtocol::Tls, Some(false), &[]),
                listener(
                    "term-tcp",
                    ListenerProtocol::Tls,
                    Some(false),
                    &["TCPRoute"],
                ),
            ],
            refused: vec![],
            invalid_parameters: None,
            allowed_listeners: dataflows::model::AllowedListeners::None,
            sets: Vec::new(),
            frontend: Default::default(),
        });
        let mut known = Known::default();
        known.secrets.insert(("edge".into(), "cert".into()), None);
        let status = desired(&[(&gw, Some(3), None)], &known);
        let listeners = &status[gw.key()]["listeners"];
        let kinds = |name: &str| supported_kinds(listeners, name);
        let cond = |name: &str, kind: &str| condition_of(named(listeners, name), kind);
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(kinds("web"), ["HTTPRoute", "GRPCRoute"]);
        assert_eq!(cond("web", "ResolvedRefs"), pair("True", "ResolvedRefs"));
        assert_eq!(kinds("pass"), ["TLSRoute"]);
        assert_eq!(
            cond("pass", "ResolvedRefs"),
            pair("False", "InvalidRouteKinds")
        );
        assert_eq!(cond("pass", "Accepted"), pair("True", "Accepted"));
        // TLSRouteListenerTerminateSupportedKinds: a terminating TLS listener takes
        // TLSRoutes (its decrypted stream routed by SNI).
        assert_eq!(kinds("term"), ["TLSRoute"]);
        assert_eq!(cond("term", "Accepted"), pair("True", "Accepted"));
        assert_eq!(cond("term", "ResolvedRefs"), pair("True", "ResolvedRefs"));
        assert_eq!(kinds("term-tcp"), ["TCPRoute"]);
        assert_eq!(cond("term-tcp", "Accepted"), pair("True", "Accepted"));
        assert_eq!(
            cond("term-tcp", "ResolvedRefs"),
            pair("True", "ResolvedRefs")
        );
        // Every listener accepted: so is the Gateway.
        let gateway = &status[gw.key()];
        assert_eq!(condition_of(gateway, "Accepted"), pair("True", "Accepted"));
        assert_eq!(condition_of(gateway, "Programmed").0, "True");

        // Without the certificate's Secret (or with one that cannot be served) the
        // terminating listener is accepted but neither programmed nor resolved; a
        // passthrough listener needs none.
        for (secret, why) in [
            (None, "Secret edge/cert does not exist"),
            (
                Some(Some("cannot be served: not PEM".to_string())),
                "Secret edge/cert cannot be served: not PEM",
            ),
        ] {
            let mut known = Known::default();
            if let Some(problem) = secret {
                known
                    .secrets
                    .insert(("edge".into(), "cert".into()), problem);
            }
            let status = desired(&[(&gw, Some(3), None)], &known);
            let listeners = &status[gw.key()]["listeners"];
            let term_tcp = named(listeners, "term-tcp");
            assert_eq!(
                condition_of(term_tcp, "ResolvedRefs"),
                pair("False", "InvalidCertificateRef")
            );
            assert_eq!(condition_of(term_tcp, "Programmed").0, "False");
            assert_eq!(condition_of(term_tcp, "Accepted").0, "True");
            let message = term_tcp["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "ResolvedRefs"))
                .map(|c| c["message"].clone());
            assert_eq!(message, Some(json!(why)));
            let pass = named(listeners, "pass");
            assert_eq!(condition_of(pass, "Programmed").0, "True");
        }
    }

    /// The status-only cases of the Gateway API's conformance suite, as behaviours of our own
    /// (`docs/gateway-api-conformance-cases.md`), from files read by the file source: a
    /// route's parent entry says why it is not attached with the spec's reason, and a
    /// listener counts only the routes attached to it.
    #[test]
    fn status_only_conformance_cases_from_files() {
        let gateways = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: same-only, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: tls-only, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - name: tls
    port: 443
    protocol: TLS
    tls: {mode: Passthrough}
    allowedRoutes:
      namespaces: {from: All}
      kinds: [{kind: TLSRoute}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: mixed, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
  - {name: tcp, port: 9000, protocol: TCP, allowedRoutes: {namespaces: {from: All}}}
  - name: tls
    port: 443
    protocol: TLS
    hostname: \"*.tls.example\"
    tls: {mode: Passthrough}
    allowedRoutes: {namespaces: {from: All}}
";
        let route = |kind: &str, version: &str, name: &str, parent: &str, extra: &str| {
            format!(
                "---
apiVersion: gateway.networking.k8s.io/{version}
kind: {kind}
metadata: {{name: {name}, namespace: apps}}
spec:
  parentRefs: [{{name: {parent}, namespace: infra{extra}}}]
  rules: [{{backendRefs: [{{name: web, port: 80}}]}}]
"
            )
        };
        let routes = [
            // HTTPRouteInvalidCrossNamespaceParentRef
            route("HTTPRoute", "v1", "cross", "same-only", ""),
            // HTTPRouteInvalidParentRefNotMatchingListenerPort
            route("HTTPRoute", "v1", "wrong-port", "mixed", ", port: 81"),
            // HTTPRouteInvalidParentRefSectionNameNotMatchingPort
            route(
                "HTTPRoute",
                "v1",
                "section-port",
                "mixed",
                ", sectionName: http, port: 81",
            ),
            // HTTPRouteDisallowedKind
            route("HTTPRoute", "v1", "disallowed", "tls-only", ""),
            // TCPRouteInvalidNonTCPListener
            route(
                "TCPRoute",
                "v1alpha2",
                "tcp-on-http",
                "mixed",
                ", sectionName: http",
            ),
            // TLSRouteInvalidNoMatchingListener (both halves)
            route("TLSRoute", "v1alpha2", "tls-on-http", "same-only", ""),
            route(
                "TLSRoute",
                "v1alpha2",
                "tls-no-section",
                "mixed",
                ", sectionName: nope",
            ),
            // GatewayWithAttachedRoutes
            route("HTTPRoute", "v1", "good", "mixed", ""),
            route(
                "TCPRoute",
                "v1alpha2",
                "good-tcp",
                "mixed",
                ", sectionName: tcp",
            ),
        ];
        let tls_miss = "---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: tls-hostname-miss, namespace: apps}
spec:
  parentRefs: [{name: mixed, namespace: infra, sectionName: tls}]
  hostnames: [db.other.example]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
";
        let text = format!("{gateways}{}{tls_miss}", routes.concat());
        let (_, objects, known) = read_files("status-cases", &text);
        assert_eq!(objects.len(), 13, "{objects:?}");
        let inputs: Vec<_> = objects.iter().map(|o| (o, None, None)).collect();
        let status = desired(&inputs, &known);
        let by_name = |kind: Kind, name: &str| -> Value {
            status
                .iter()
                .find(|(k, _)| k.kind == kind && k.name == name)
                .map(|(_, v)| v.clone())
                .unwrap_or(Value::Null)
        };
        let accepted =
            |kind: Kind, name: &str| condition_of(&by_name(kind, name)["parents"][0], "Accepted");
        let refused = |reason: &str| ("False".to_string(), reason.to_string());
        let yes = ("True".to_string(), "Accepted".to_string());
        assert_eq!(
            accepted(Kind::HttpRoute, "cross"),
            refused("NotAllowedByListeners")
        );
        assert_eq!(
            accepted(Kind::HttpRoute, "wrong-port"),
            refused("NoMatchingParent")
        );
        assert_eq!(
            accepted(Kind::HttpRoute, "section-port"),
            refused("NoMatchingParent")
        );
        assert_eq!(
            accepted(Kind::HttpRoute, "disallowed"),
            refused("NotAllowedByListeners")
        );
        assert_eq!(
            accepted(Kind::TcpRoute, "tcp-on-http"),
            refused("NotAllowedByListeners")
        );
        assert_eq!(
            accepted(Kind::TlsRoute, "tls-on-http"),
            refused("NotAllowedByListeners")
        );
        assert_eq!(
            accepted(Kind::TlsRoute, "tls-no-section"),
            refused("NoMatchingParent")
        );
        assert_eq!(
            accepted(Kind::TlsRoute, "tls-hostname-miss"),
            refused("NoMatchingListenerHostname")
        );
        assert_eq!(accepted(Kind::HttpRoute, "good"), yes);
        assert_eq!(accepted(Kind::TcpRoute, "good-tcp"), yes);
        let attached = |gateway: &str, listener: &str| {
            named(
                &by_name(Kind::KubernetesGateway, gateway)["listeners"],
                listener,
            )["attachedRoutes"]
                .clone()
        };
        // Only the attached routes count: `good` on http (the TCP and TLS listeners do not
        // take HTTPRoutes), `good-tcp` on tcp, none of the refused ones anywhere.
        assert_eq!(attached("mixed", "http"), 1);
        assert_eq!(attached("mixed", "tcp"), 1);
        assert_eq!(attached("mixed", "tls"), 0);
        assert_eq!(attached("same-only", "http"), 0);
        assert_eq!(attached("tls-only", "tls"), 0);
    }

    /// The conformance suite's ResolvedRefs cases, read from files and run through the
    /// dataflow (whose MF0040 errors give the reasons): TCPRouteInvalidBackendRefNonexistent,
    /// the status half of TLSRouteInvalidBackendRefNonexistent,
    /// TCPRouteInvalidCrossNamespaceBackendRef, TLSRouteInvalidReferenceGrant,
    /// HTTPRouteInvalidReferenceGrant (a grant `to` another kind, and a grant in the route's
    /// own namespace), HTTPRouteInvalidBackendRefUnknownKind and its TLSRoute twin; a
    /// backend granted by a ReferenceGrant of its namespace resolves.
    #[test]
    fn resolved_refs_conformance_cases_from_files() {
        use dataflows::driver::{Batch, Engine};
        use dataflows::model::MeshConfig;
        let base = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
  - {name: tcp, port: 9000, protocol: TCP, allowedRoutes: {namespaces: {from: All}}}
  - name: tls
    port: 443
    protocol: TLS
    tls: {mode: Passthrough}
    allowedRoutes: {namespaces: {from: All}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: apps}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: data}
spec: {ports: [{port: 80}]}
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: secrets-only, namespace: data}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: apps}]
  to: [{group: '', kind: Secret}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: in-the-routes-namespace, namespace: apps}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: apps}]
  to: [{group: '', kind: Service}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: http-from-granted, namespace: data}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: granted}]
  to: [{group: '', kind: Service, name: db}]
";
        let route =
            |kind: &str, version: &str, ns: &str, name: &str, section: &str, backend: &str| {
                format!(
                    "---
apiVersion: gateway.networking.k8s.io/{version}
kind: {kind}
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{name: gw, namespace: infra, sectionName: {section}}}]
  rules: [{{backendRefs: [{{{backend}, port: 80}}]}}]
"
                )
            };
        let cases = [
            route(
                "TCPRoute",
                "v1alpha2",
                "apps",
                "tcp-missing",
                "tcp",
                "name: nope",
            ),
            route(
                "TCPRoute",
                "v1alpha2",
                "apps",
                "tcp-cross",
                "tcp",
                "name: db, namespace: data",
            ),
            route(
                "TLSRoute",
                "v1alpha2",
                "apps",
                "tls-cross",
                "tls",
                "name: db, namespace: data",
            ),
            route(
                "TLSRoute",
                "v1alpha2",
                "apps",
                "tls-missing",
                "tls",
                "name: nope",
            ),
            route(
                "HTTPRoute",
                "v1",
                "apps",
                "http-cross",
                "http",
                "name: db, namespace: data",
            ),
            route(
                "HTTPRoute",
                "v1",
                "granted",
                "http-granted",
                "http",
                "name: db, namespace: data",
            ),
            route(
                "HTTPRoute",
                "v1",
                "apps",
                "http-unknown-kind",
                "http",
                "group: unknown.example, kind: Foo, name: web",
            ),
            route(
                "TLSRoute",
                "v1alpha2",
                "apps",
                "tls-unknown-kind",
                "tls",
                "kind: Foo, name: web",
            ),
            route("HTTPRoute", "v1", "apps", "http-local", "http", "name: web"),
        ];
        let text = format!("{base}{}", cases.concat());
        let (changes, objects, known) = read_files("resolved-refs", &text);
        let engine = Engine::start(1, MeshConfig::default());
        let out = engine
            .step(Batch { epoch: 1, changes })
            .expect("the engine steps");
        let errors: Vec<ConfigError> = out
            .errors
            .into_iter()
            .filter(|(_, d)| *d > 0)
            .map(|(e, _)| e)
            .collect();
        let inputs: Vec<_> = objects.iter().map(|o| (o, None, None)).collect();
        let mut status = desired(&inputs, &known);
        for (key, value) in status.iter_mut() {
            let mine: Vec<ConfigError> = errors
                .iter()
                .filter(|e| e.object == *key)
                .cloned()
                .collect();
            with_route_errors(value, key, &mine);
        }
        let resolved = |kind: Kind, name: &str| {
            let value = status
                .iter()
                .find(|(k, _)| k.kind == kind && k.name == name)
                .map(|(_, v)| v.clone())
                .unwrap_or(Value::Null);
            let parent = &value["parents"][0];
            // Every case's parent accepts it: only the reference is at fault.
            assert_eq!(
                condition_of(parent, "Accepted").0,
                "True",
                "{kind} {name}: {value:#}"
            );
            condition_of(parent, "ResolvedRefs")
        };
        let refused = |reason: &str| ("False".to_string(), reason.to_string());
        assert_eq!(
            resolved(Kind::TcpRoute, "tcp-missing"),
            refused("BackendNotFound")
        );
        assert_eq!(
            resolved(Kind::TcpRoute, "tcp-cross"),
            refused("RefNotPermitted")
        );
        assert_eq!(
            resolved(Kind::TlsRoute, "tls-cross"),
            refused("RefNotPermitted")
        );
        assert_eq!(
            resolved(Kind::TlsRoute, "tls-missing"),
            refused("BackendNotFound")
        );
        // The grant in `data` names Secrets; the one in `apps` is in the route's own
        // namespace: neither permits the Service of `data`.
        assert_eq!(
            resolved(Kind::HttpRoute, "http-cross"),
            refused("RefNotPermitted")
        );
        assert_eq!(resolved(Kind::HttpRoute, "http-granted").0, "True");
        assert_eq!(
            resolved(Kind::HttpRoute, "http-unknown-kind"),
            refused("InvalidKind")
        );
        assert_eq!(
            resolved(Kind::TlsRoute, "tls-unknown-kind"),
            refused("InvalidKind")
        );
        assert_eq!(resolved(Kind::HttpRoute, "http-local").0, "True");
        let unknown = errors
            .iter()
            .find(|e| e.object.name == "http-unknown-kind")
            .expect("the unknown kind's error");
        assert!(
            unknown.message.contains("Foo.unknown.example apps/web"),
            "{}",
            unknown.message
        );
    }

    /// GatewayInvalidTLSConfiguration and GatewaySecretInvalidReferenceGrant, from files: an
    /// HTTPS listener whose certificate is not a Secret, and one whose Secret is in another
    /// namespace, are left out with the spec's reasons (`InvalidCertificateRef`,
    /// `RefNotPermitted`) and keep the kinds they are for; a conflicted listener too.
    #[test]
    fn refused_listeners_keep_their_kinds_and_the_specs_reason() {
        let gateway = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - name: wrong-kind
    port: 443
    protocol: HTTPS
    hostname: a.example
    tls: {certificateRefs: [{group: '', kind: ConfigMap, name: cert}]}
  - name: other-namespace
    port: 443
    protocol: HTTPS
    hostname: b.example
    tls: {certificateRefs: [{name: cert, namespace: elsewhere}]}
  - {name: web, port: 80, protocol: HTTP}
  - {name: web-again, port: 80, protocol: HTTP}
";
        let (_, objects, known) = read_files("refused-listeners", gateway);
        assert_eq!(objects.len(), 1, "{objects:?}");
        let status = desired(&[(&objects[0], Some(1), None)], &known);
        let listeners = &status[objects[0].key()]["listeners"];
        let kinds = |name: &str| supported_kinds(listeners, name);
        let listener = |name: &str| named(listeners, name).clone();
        for (name, reason) in [
            ("wrong-kind", "InvalidCertificateRef"),
            ("other-namespace", "RefNotPermitted"),
        ] {
            let l = listener(name);
            assert_eq!(kinds(name), ["HTTPRoute", "GRPCRoute"], "{l:#}");
            assert_eq!(
                condition_of(&l, "ResolvedRefs"),
                ("False".to_string(), reason.to_string()),
                "{l:#}"
            );
            assert_eq!(condition_of(&l, "Programmed").0, "False", "{l:#}");
            assert_eq!(l["attachedRoutes"], 0);
        }
        let conflicted = listener("web-again");
        assert_eq!(kinds("web-again"), ["HTTPRoute", "GRPCRoute"]);
        assert_eq!(
            condition_of(&conflicted, "Conflicted"),
            ("True".to_string(), "HostnameConflict".to_string())
        );
        assert_eq!(condition_of(&listener("web"), "Accepted").0, "True");
    }

    /// GatewayModifyListeners, GatewayNameMaximumLength and HTTPRouteObservedGenerationBump,
    /// from files: a listener added to a Gateway appears in its status, accepted and
    /// resolved with the route attached to it, at the new generation; a listener removed
    /// leaves only the others; a Gateway named with the longest name Kubernetes allows (253
    /// characters) gets its conditions; a route's parent conditions carry the route's
    /// generation after an edit.
    #[test]
    fn listener_edits_long_names_and_generations_conformance_cases_from_files() {
        let gateway = |name: &str, listeners: &str| {
            format!(
                "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: infra}}
spec:
  gatewayClassName: istio
  listeners:
{listeners}---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: infra}}
spec:
  parentRefs: [{{name: {name}}}]
  rules: [{{backendRefs: [{{name: web, port: 80}}]}}]
"
            )
        };
        let http = "  - {name: http, port: 80, protocol: HTTP}\n";
        let second = "  - {name: http-2, port: 8080, protocol: HTTP}\n";
        let status_at = |label: &str, yaml: &str, generation: i64| {
            let (_, objects, known) = read_files(label, yaml);
            let with: Vec<_> = objects
                .iter()
                .map(|o| (o, Some(generation), None))
                .collect();
            desired(&with, &known)
        };
        let key = |name: &str| ConfigKey::new(Kind::KubernetesGateway, "infra", name);
        let names = |status: &Value| -> Vec<String> {
            status["listeners"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| l["name"].as_str().unwrap_or_default().to_string())
                .collect()
        };
        let gw_v1 = status_at("modify-listeners-1", &gateway("gw", http), 1);
        assert_eq!(names(&gw_v1[&key("gw")]), ["http"]);
        // Added: both listeners, the new one accepted and resolved with the route.
        let gw_v2 = status_at(
            "modify-listeners-2",
            &gateway("gw", &format!("{http}{second}")),
            2,
        );
        let status = &gw_v2[&key("gw")];
        assert_eq!(names(status), ["http", "http-2"]);
        let added = named(&status["listeners"], "http-2");
        for c in ["Accepted", "ResolvedRefs", "Programmed"] {
            assert_eq!(condition_of(added, c).0, "True", "{c}: {added:#}");
        }
        assert_eq!(added["attachedRoutes"], 1, "{added:#}");
        for c in added["conditions"].as_array().into_iter().flatten() {
            assert_eq!(c["observedGeneration"], 2, "{c:#}");
        }
        // The route's parent entry carries the route's new generation.
        let route = &gw_v2[&ConfigKey::new(Kind::HttpRoute, "infra", "web")];
        for c in route["parents"][0]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert_eq!(c["observedGeneration"], 2, "{c:#}");
        }
        // Removed: only the other is left.
        let gw_v3 = status_at("modify-listeners-3", &gateway("gw", second), 3);
        assert_eq!(names(&gw_v3[&key("gw")]), ["http-2"]);
        assert_eq!(
            named(&gw_v3[&key("gw")]["listeners"], "http-2")["attachedRoutes"],
            1
        );

        // The longest name: 253 characters in labels of at most 63.
        let long = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "b".repeat(61));
        assert_eq!(long.len(), 253);
        let status = status_at("long-name", &gateway(&long, http), 1);
        let gw = &status[&key(&long)];
        assert_eq!(
            condition_of(gw, "Accepted"),
            ("True".into(), "Accepted".into()),
            "{gw:#}"
        );
        assert_eq!(condition_of(gw, "Programmed").0, "True", "{gw:#}");
        assert_eq!(gw["conditions"][0]["observedGeneration"], 1);
    }

    /// GatewaySecretReferenceGrantAllInNamespace, GatewaySecretReferenceGrantSpecific,
    /// GatewaySecretInvalidReferenceGrant and GatewaySecretMissingReferenceGrant, from files:
    /// an HTTPS listener whose certificate is a Secret of another namespace is accepted,
    /// programmed and resolved where a ReferenceGrant there lets Gateways of its namespace
    /// name all Secrets or that one; a grant to another Secret, from another namespace, or
    /// none at all, leaves it `ResolvedRefs=False/RefNotPermitted` and not programmed.
    #[test]
    fn certificate_reference_grants_conformance_cases_from_files() {
        let gateway = |ns: &str| {
            format!(
                "---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: {ns}}}
spec:
  gatewayClassName: istio
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    tls: {{certificateRefs: [{{name: cert, namespace: certs}}]}}
"
            )
        };
        let yaml = tls_secret_yaml("certs", "cert", "*.example")
            + &format!(
                "---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: all-secrets, namespace: certs}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: Gateway, namespace: all-in-namespace}}]
  to: [{{group: '', kind: Secret}}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: this-secret, namespace: certs}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: Gateway, namespace: specific}}]
  to: [{{group: '', kind: Secret, name: cert}}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: another-secret, namespace: certs}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: Gateway, namespace: invalid}}]
  to: [{{group: '', kind: Secret, name: not-the-cert}}]
{}{}{}{}",
                gateway("all-in-namespace"),
                gateway("specific"),
                gateway("invalid"),
                gateway("missing"),
            );
        let (_, objects, known) = read_files("certificate-grants", &yaml);
        let with_generation: Vec<_> = objects.iter().map(|o| (o, Some(1), None)).collect();
        let status = desired(&with_generation, &known);
        let of = |ns: &str| {
            let key = ConfigKey::new(Kind::KubernetesGateway, ns, "gw");
            named(&status[&key]["listeners"], "https").clone()
        };
        for ns in ["all-in-namespace", "specific"] {
            let l = of(ns);
            for c in ["Accepted", "Programmed", "ResolvedRefs"] {
                assert_eq!(condition_of(&l, c).0, "True", "{ns}: {l:#}");
            }
        }
        for ns in ["invalid", "missing"] {
            let l = of(ns);
            assert_eq!(
                condition_of(&l, "ResolvedRefs"),
                ("False".to_string(), "RefNotPermitted".to_string()),
                "{ns}: {l:#}"
            );
            assert_eq!(condition_of(&l, "Programmed").0, "False", "{ns}: {l:#}");
            assert_eq!(
                supported_kinds(
                    &status[&ConfigKey::new(Kind::KubernetesGateway, ns, "gw")]["listeners"],
                    "https"
                ),
                ["HTTPRoute", "GRPCRoute"]
            );
        }
    }
    /// GatewayInvalidFrontendClientCertificateValidation,
    /// GatewayFrontendInvalidDefaultClientCertificateValidation and the status of
    /// GatewayFrontendClientCertificateValidationInsecureFallback, from files: per HTTPS
    /// listener, a CA that resolves is all True; a ConfigMap that does not exist is
    /// `InvalidCACertificateRef`, a reference of another kind `InvalidCACertificateKind`,
    /// one of another namespace without a grant `RefNotPermitted` — each also `Accepted`
    /// False `NoValidCACertificate` and not programmed, where a grant makes the same
    /// reference resolve; an HTTP listener is untouched by a `perPort` entry on its port;
    /// a reference that does not resolve beside one that does leaves the listener served,
    /// `ResolvedRefs` False; `AllowInsecureFallback` anywhere makes the Gateway's
    /// `InsecureFrontendValidationMode` True (`ConfigurationChanged`), and no condition of
    /// that type is written otherwise. The ConfigMaps are the sources' (not among the
    /// objects), as the Kubernetes source gives them.
    #[test]
    fn frontend_validation_conformance_cases_from_files() {
        let kp = rcgen::KeyPair::generate().expect("a key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = params.self_signed(&kp).expect("a CA").pem();
        let config_map = |ns: &str, name: &str| {
            let body: String = ca.lines().map(|l| format!("    {l}\n")).collect();
            format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\ndata:\n  ca.crt: |\n{body}"
            )
        };
        let yaml = tls_secret_yaml("infra", "good-cert", "good.example")
            + &config_map("infra", "valid-ca")
            + &config_map("web", "web-ca")
            + &config_map("granted", "granted-ca")
            + "---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: gateways, namespace: granted}
spec:
  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: infra}]
  to: [{group: '', kind: ConfigMap}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: invalid-validation, namespace: infra}
spec:
  gatewayClassName: istio
  tls:
    frontend:
      default:
        validation: {caCertificateRefs: [{group: '', kind: ConfigMap, name: valid-ca}]}
      perPort:
      - {port: 7443, tls: {validation: {caCertificateRefs: [{group: '', kind: ConfigMap, name: non-existing}]}}}
      - {port: 8443, tls: {validation: {caCertificateRefs: [{group: '', kind: Service, name: valid-ca}]}}}
      - {port: 6443, tls: {validation: {caCertificateRefs: [{group: '', kind: ConfigMap, name: web-ca, namespace: web}]}}}
      - {port: 5443, tls: {validation: {caCertificateRefs: [{group: '', kind: ConfigMap, name: granted-ca, namespace: granted}]}}}
      - {port: 4443, tls: {validation: {caCertificateRefs: [{group: '', kind: ConfigMap, name: non-existing}, {group: '', kind: ConfigMap, name: valid-ca}]}}}
  listeners:
  - {name: https, port: 443, protocol: HTTPS, tls: {certificateRefs: [{name: good-cert}]}}
  - {name: https-unresolved, port: 7443, protocol: HTTPS, tls: {certificateRefs: [{name: good-cert}]}}
  - {name: https-invalid-kind, port: 8443, protocol: HTTPS, tls: {certificateRefs: [{name: good-cert}]}}
  - {name: https-grant-missing, port: 6443, protocol: HTTPS, tls: {certificateRefs: [{name: good-cert}]}}
  - {name: https-granted, port: 5443, protocol: HTTPS, tls: {certificateRefs: [{name: good-cert}]}}
  - {name: https-partly, port: 4443, protocol: HTTPS, tls: {certificateRefs: [{name: good-cert}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: invalid-default, namespace: infra}
spec:
  gatewayClassName: istio
  tls:
    frontend:
      default:
        validation: {caCertificateRefs: [{group: '', kind: ConfigMap, name: does-not-exist}]}
      perPort:
      - {port: 80, tls: {validation: {caCertificateRefs: [{group: '', kind: ConfigMap, name: valid-ca}]}}}
  listeners:
  - {name: https, port: 443, protocol: HTTPS, tls: {certificateRefs: [{name: good-cert}]}}
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: insecure-fallback, namespace: infra}
spec:
  gatewayClassName: istio
  tls:
    frontend:
      default:
        validation: {caCertificateRefs: [{group: '', kind: ConfigMap, name: valid-ca}]}
      perPort:
      - {port: 8443, tls: {validation: {mode: AllowInsecureFallback, caCertificateRefs: [{group: '', kind: ConfigMap, name: valid-ca}]}}}
  listeners:
  - {name: https, port: 443, protocol: HTTPS, tls: {certificateRefs: [{name: good-cert}]}}
  - {name: https-port, port: 8443, protocol: HTTPS, tls: {certificateRefs: [{name: good-cert}]}}
";
        let (_, objects, mut known) = read_files("frontend-validation", &yaml);
        // The ConfigMaps as the Kubernetes source hands them over: read, not among the
        // objects whose status is written.
        let (maps, objects): (Vec<_>, Vec<_>) = objects
            .into_iter()
            .partition(|o| matches!(o, GatewayApiObject::ConfigMap(_)));
        for m in maps {
            if let GatewayApiObject::ConfigMap(c) = m {
                let at = (c.key.namespace.clone(), c.key.name.clone());
                known.config_maps.insert(at, c);
            }
        }
        let inputs: Vec<_> = objects.iter().map(|o| (o, Some(1), None)).collect();
        let status = desired(&inputs, &known);
        let gateway = |name: &str| -> &Value {
            status
                .iter()
                .find(|(k, _)| k.kind == Kind::KubernetesGateway && k.name == name)
                .map(|(_, v)| v)
                .unwrap_or_else(|| panic!("no status for {name}"))
        };
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        let conditions = |gw: &str, listener: &str| {
            let l = named(&gateway(gw)["listeners"], listener);
            (
                condition_of(l, "Accepted"),
                condition_of(l, "Programmed").0,
                condition_of(l, "ResolvedRefs"),
            )
        };
        let good = (
            pair("True", "Accepted"),
            "True".to_string(),
            pair("True", "ResolvedRefs"),
        );
        let refused = |reason: &str| {
            (
                pair("False", "NoValidCACertificate"),
                "False".to_string(),
                pair("False", reason),
            )
        };
        assert_eq!(conditions("invalid-validation", "https"), good);
        assert_eq!(
            conditions("invalid-validation", "https-unresolved"),
            refused("InvalidCACertificateRef")
        );
        assert_eq!(
            conditions("invalid-validation", "https-invalid-kind"),
            refused("InvalidCACertificateKind")
        );
        assert_eq!(
            conditions("invalid-validation", "https-grant-missing"),
            refused("RefNotPermitted")
        );
        assert_eq!(conditions("invalid-validation", "https-granted"), good);
        assert_eq!(
            conditions("invalid-validation", "https-partly"),
            (
                pair("True", "Accepted"),
                "True".to_string(),
                pair("False", "InvalidCACertificateRef")
            ),
            "served with the CA that resolves"
        );
        assert_eq!(
            condition_of(gateway("invalid-validation"), "Accepted"),
            pair("True", "ListenersNotValid")
        );
        assert_eq!(
            conditions("invalid-default", "https"),
            refused("InvalidCACertificateRef")
        );
        assert_eq!(
            conditions("invalid-default", "http"),
            good,
            "a port's validation is for HTTPS listeners"
        );
        assert_eq!(
            condition_of(
                gateway("insecure-fallback"),
                "InsecureFrontendValidationMode"
            ),
            pair("True", "ConfigurationChanged")
        );
        assert_eq!(conditions("insecure-fallback", "https-port"), good);
        for strict in ["invalid-validation", "invalid-default"] {
            assert_eq!(
                condition_of(gateway(strict), "InsecureFrontendValidationMode"),
                pair("", ""),
                "{strict}: no fallback, no condition"
            );
        }
    }

    /// The Gateway-level cases of the conformance suite, from files: a Gateway whose only
    /// listener has an unsupported protocol is `Accepted=False/ListenersNotValid`, one with a
    /// valid listener beside it `Accepted=True/ListenersNotValid`
    /// (GatewayListenerUnsupportedProtocol); a `parametersRef` of a kind meshflow does not
    /// read is `Accepted=False/InvalidParameters`, nothing of it served and its routes not
    /// accepted (GatewayInvalidParametersRef), a ConfigMap is accepted; an HTTPS listener
    /// whose Secret does not exist or holds no servable certificate is
    /// `ResolvedRefs=False/InvalidCertificateRef` and not programmed, yet counts the route
    /// attached to it (GatewayInvalidTLSConfiguration, GatewayWithAttachedRoutes).
    #[test]
    fn gateway_conditions_conformance_cases_from_files() {
        let yaml = tls_secret_yaml("infra", "good-cert", "good.example")
            + "---
apiVersion: v1
kind: Secret
metadata: {name: bad-cert, namespace: infra}
type: kubernetes.io/tls
stringData: {tls.crt: not a certificate, tls.key: not a key}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: only-unsupported, namespace: infra}
spec:
  gatewayClassName: istio
  listeners: [{name: invalid, port: 1111, protocol: INVALID}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: supported-and-unsupported, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: 80, protocol: HTTP}
  - {name: invalid, port: 1111, protocol: INVALID}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: invalid-parameters, namespace: infra}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 80, protocol: HTTP}]
  infrastructure:
    parametersRef: {group: invalid.io, kind: InvalidParameters, name: invalid}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: configmap-parameters, namespace: infra}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 80, protocol: HTTP}]
  infrastructure:
    parametersRef: {group: '', kind: ConfigMap, name: gateway-options}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: certificates, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - name: missing
    port: 443
    protocol: HTTPS
    hostname: missing.example
    tls: {certificateRefs: [{name: does-not-exist}]}
  - name: malformed
    port: 443
    protocol: HTTPS
    hostname: malformed.example
    tls: {certificateRefs: [{name: bad-cert}]}
  - name: good
    port: 443
    protocol: HTTPS
    hostname: good.example
    tls: {certificateRefs: [{name: good-cert}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: on-missing, namespace: infra}
spec:
  parentRefs: [{name: certificates, sectionName: missing}]
  rules: [{backendRefs: [{name: web, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: on-invalid-parameters, namespace: infra}
spec:
  parentRefs: [{name: invalid-parameters}]
  rules: [{backendRefs: [{name: web, port: 80}]}]
";
        let (_, objects, known) = read_files("gateway-conditions", &yaml);
        let inputs: Vec<_> = objects.iter().map(|o| (o, Some(1), None)).collect();
        let status = desired(&inputs, &known);
        let of = |kind: Kind, name: &str| -> &Value {
            status
                .iter()
                .find(|(k, _)| k.kind == kind && k.name == name)
                .map(|(_, v)| v)
                .unwrap_or_else(|| panic!("no status for {name}"))
        };
        let gateway = |name: &str| of(Kind::KubernetesGateway, name);
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());

        let only = gateway("only-unsupported");
        assert_eq!(
            condition_of(only, "Accepted"),
            pair("False", "ListenersNotValid")
        );
        assert_eq!(condition_of(only, "Programmed").0, "False");
        let invalid = named(&only["listeners"], "invalid");
        assert_eq!(
            condition_of(invalid, "Accepted"),
            pair("False", "UnsupportedProtocol")
        );
        assert!(supported_kinds(&only["listeners"], "invalid").is_empty());
        let mixed = gateway("supported-and-unsupported");
        assert_eq!(
            condition_of(mixed, "Accepted"),
            pair("True", "ListenersNotValid")
        );
        assert_eq!(
            condition_of(named(&mixed["listeners"], "http"), "Accepted"),
            pair("True", "Accepted")
        );

        let params = gateway("invalid-parameters");
        assert_eq!(
            condition_of(params, "Accepted"),
            pair("False", "InvalidParameters")
        );
        assert_eq!(condition_of(params, "Programmed").0, "False");
        assert_eq!(
            condition_of(named(&params["listeners"], "http"), "Programmed").0,
            "False"
        );
        let refused = &of(Kind::HttpRoute, "on-invalid-parameters")["parents"][0];
        assert_eq!(
            condition_of(refused, "Accepted"),
            pair("False", "NoMatchingParent")
        );
        assert_eq!(
            condition_of(gateway("configmap-parameters"), "Accepted"),
            pair("True", "Accepted")
        );

        let certs = gateway("certificates");
        assert_eq!(condition_of(certs, "Accepted"), pair("True", "Accepted"));
        assert_eq!(condition_of(certs, "Programmed").0, "True");
        for name in ["missing", "malformed"] {
            let l = named(&certs["listeners"], name);
            assert_eq!(
                condition_of(l, "ResolvedRefs"),
                pair("False", "InvalidCertificateRef"),
                "{l:#}"
            );
            assert_eq!(condition_of(l, "Programmed").0, "False", "{l:#}");
            assert_eq!(condition_of(l, "Accepted").0, "True", "{l:#}");
        }
        assert_eq!(named(&certs["listeners"], "missing")["attachedRoutes"], 1);
        let good = named(&certs["listeners"], "good");
        assert_eq!(
            condition_of(good, "ResolvedRefs"),
            pair("True", "ResolvedRefs")
        );
        assert_eq!(condition_of(good, "Programmed"), pair("True", "Programmed"));
    }

    /// HTTPRouteCrossNamespace, from files: a listener taking routes `from: Selector`
    /// accepts the route of a namespace whose labels match (the Namespace read from a file)
    /// and counts it; a route of a namespace that does not match is NotAllowedByListeners.
    #[test]
    fn a_namespace_selector_accepts_the_routes_of_matching_namespaces_from_files() {
        let yaml = "apiVersion: v1
kind: Namespace
metadata: {name: web-backend, labels: {gateway-conformance: backend}}
---
apiVersion: v1
kind: Namespace
metadata: {name: elsewhere}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: backend-namespaces, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes:
      namespaces:
        from: Selector
        selector: {matchLabels: {gateway-conformance: backend}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-route, namespace: web-backend}
spec:
  parentRefs: [{name: backend-namespaces, namespace: infra}]
  rules: [{backendRefs: [{name: web-backend, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: other-route, namespace: elsewhere}
spec:
  parentRefs: [{name: backend-namespaces, namespace: infra}]
  rules: [{backendRefs: [{name: web, port: 8080}]}]
";
        let (_, objects, known) = read_files("namespace-selector", yaml);
        let inputs: Vec<_> = objects.iter().map(|o| (o, Some(1), None)).collect();
        let status = desired(&inputs, &known);
        let parent = |name: &str| {
            let (_, s) = status
                .iter()
                .find(|(k, _)| k.kind == Kind::HttpRoute && k.name == name)
                .expect("the route's status");
            condition_of(&s["parents"][0], "Accepted")
        };
        assert_eq!(
            parent("backend-route"),
            ("True".to_string(), "Accepted".to_string())
        );
        assert_eq!(
            parent("other-route"),
            ("False".to_string(), "NotAllowedByListeners".to_string())
        );
        let gateway = status
            .iter()
            .find(|(k, _)| k.kind == Kind::KubernetesGateway)
            .map(|(_, s)| s)
            .expect("the Gateway's status");
        assert_eq!(named(&gateway["listeners"], "http")["attachedRoutes"], 1);
    }

    /// Attachment counts of the conformance suite, from files: two routes on one listener
    /// count 2 (GatewayWithAttachedRoutes); a route naming one of two listeners counts there
    /// only (…WithPort8080); two TCPRoutes on one TCP listener are both Accepted
    /// (TCPRouteMultipleRoutesAttachment); a TCPRoute with neither sectionName nor port
    /// attaches to every TCP listener, one with a port or a port and a sectionName to that
    /// listener (TCPRouteParentRefAttachAll, …PortAndSectionName); an exact listener hostname
    /// a TLSRoute's hostnames miss is NoMatchingListenerHostname
    /// (TLSRouteInvalidNoMatchingListenerHostname); an unknown kind in `allowedRoutes.kinds`,
    /// alone or beside HTTPRoute, is InvalidRouteKinds and left out of supportedKinds
    /// (GatewayInvalidRouteKind).
    #[test]
    fn attachment_counts_conformance_cases_from_files() {
        let yaml = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: two-listeners, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: 80, protocol: HTTP}
  - {name: http-unattached, port: 8080, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: tcp-four, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - {name: tcp-1, port: 9001, protocol: TCP}
  - {name: tcp-2, port: 9002, protocol: TCP}
  - {name: tcp-3, port: 9003, protocol: TCP}
  - {name: tcp-4, port: 9004, protocol: TCP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: tls-exact, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - {name: tls, port: 443, protocol: TLS, hostname: db.example, tls: {mode: Passthrough}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: route-kinds, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - {name: unknown, port: 80, protocol: HTTP, allowedRoutes: {kinds: [{kind: FooRoute}]}}
  - {name: both, port: 81, protocol: HTTP, allowedRoutes: {kinds: [{kind: FooRoute}, {kind: HTTPRoute}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: one, namespace: infra}
spec:
  parentRefs: [{name: two-listeners, sectionName: http}]
  rules: [{backendRefs: [{name: web, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: two, namespace: infra}
spec:
  parentRefs: [{name: two-listeners, sectionName: http}]
  rules: [{backendRefs: [{name: web, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: all, namespace: infra}
spec:
  parentRefs: [{name: tcp-four}]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: by-port, namespace: infra}
spec:
  parentRefs: [{name: tcp-four, port: 9002}]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: by-both, namespace: infra}
spec:
  parentRefs: [{name: tcp-four, sectionName: tcp-3, port: 9003}]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: exact-miss, namespace: infra}
spec:
  parentRefs: [{name: tls-exact}]
  hostnames: [other.example]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
";
        let (_, objects, known) = read_files("attachment-counts", yaml);
        let inputs: Vec<_> = objects.iter().map(|o| (o, Some(1), None)).collect();
        let status = desired(&inputs, &known);
        let of = |kind: Kind, name: &str| -> &Value {
            status
                .iter()
                .find(|(k, _)| k.kind == kind && k.name == name)
                .map(|(_, v)| v)
                .unwrap_or_else(|| panic!("no status for {name}"))
        };
        let attached = |gateway: &str, listener: &str| {
            named(&of(Kind::KubernetesGateway, gateway)["listeners"], listener)["attachedRoutes"]
                .clone()
        };
        let accepted =
            |kind: Kind, name: &str| condition_of(&of(kind, name)["parents"][0], "Accepted");
        let yes = ("True".to_string(), "Accepted".to_string());

        assert_eq!(attached("two-listeners", "http"), 2);
        assert_eq!(attached("two-listeners", "http-unattached"), 0);
        assert_eq!(accepted(Kind::HttpRoute, "one"), yes);
        assert_eq!(accepted(Kind::HttpRoute, "two"), yes);

        for route in ["all", "by-port", "by-both"] {
            assert_eq!(accepted(Kind::TcpRoute, route), yes, "{route}");
        }
        // `all` everywhere, `by-port` on 9002, `by-both` on tcp-3.
        assert_eq!(attached("tcp-four", "tcp-1"), 1);
        assert_eq!(attached("tcp-four", "tcp-2"), 2);
        assert_eq!(attached("tcp-four", "tcp-3"), 2);
        assert_eq!(attached("tcp-four", "tcp-4"), 1);

        assert_eq!(
            accepted(Kind::TlsRoute, "exact-miss"),
            (
                "False".to_string(),
                "NoMatchingListenerHostname".to_string()
            )
        );
        assert_eq!(attached("tls-exact", "tls"), 0);

        let listeners = &of(Kind::KubernetesGateway, "route-kinds")["listeners"];
        assert!(supported_kinds(listeners, "unknown").is_empty());
        assert_eq!(supported_kinds(listeners, "both"), ["HTTPRoute"]);
        for l in ["unknown", "both"] {
            assert_eq!(
                condition_of(named(listeners, l), "ResolvedRefs"),
                ("False".to_string(), "InvalidRouteKinds".to_string()),
                "{l}"
            );
        }
    }

    /// GatewayClassObservedGenerationBump's condition, from files: a class whose controller
    /// meshflow answers for (Istio's, meshflow's) is Accepted with SupportedVersion at its
    /// generation; another controller's class gets no status from meshflow.
    #[test]
    fn gateway_classes_of_meshflows_controllers_are_accepted() {
        let yaml = "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: istio}
spec: {controllerName: istio.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: meshflow}
spec: {controllerName: meshflow.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: nginx}
spec: {controllerName: example.net/nginx}
";
        let (_, objects, known) = read_files("gateway-classes", yaml);
        assert_eq!(objects.len(), 3, "{objects:?}");
        let inputs: Vec<_> = objects.iter().map(|o| (o, Some(4), None)).collect();
        let status = desired(&inputs, &known);
        for name in ["istio", "meshflow"] {
            let key = ConfigKey::new(Kind::GatewayClass, "", name);
            let s = &status[&key];
            assert_eq!(
                condition_of(s, "Accepted"),
                ("True".to_string(), "Accepted".to_string())
            );
            assert_eq!(
                condition_of(s, "SupportedVersion"),
                ("True".to_string(), "SupportedVersion".to_string())
            );
            assert_eq!(s["conditions"][0]["observedGeneration"], 4);
        }
        assert!(!status.contains_key(&ConfigKey::new(Kind::GatewayClass, "", "nginx")));
    }

    /// HTTPRouteHostnameIntersection's status half, from files: three HTTP listeners on one
    /// port (an exact hostname, two wildcards); the routes whose hostnames intersect a
    /// listener's are Accepted and counted on that listener only (2, 1, 1: a route counts
    /// where it intersects), the one that intersects none is Accepted=False with
    /// NoMatchingListenerHostname. Its traffic half is the real-Envoy test
    /// `http_routes_take_the_intersection_of_their_hostnames_and_the_listeners`.
    #[test]
    fn hostname_intersection_conformance_case_from_files() {
        let route = |name: &str, hostnames: &str| {
            format!(
                "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: {hostnames}
  rules: [{{backendRefs: [{{name: web, port: 80}}]}}]
"
            )
        };
        let yaml = [
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: default}
spec:
  gatewayClassName: istio
  listeners:
  - {name: exact, port: 80, protocol: HTTP, hostname: api.shop.example}
  - {name: apps, port: 80, protocol: HTTP, hostname: '*.apps.example'}
  - {name: other, port: 80, protocol: HTTP, hostname: '*.other.example'}
"
            .to_string(),
            route(
                "specific-in-specific",
                "[non.matching.example, '*.nomatch.example', api.shop.example]",
            ),
            route(
                "specific-in-wildcard",
                "[non.matching.example, apps.example, foo.apps.example, foo.bar.apps.example]",
            ),
            route(
                "wildcard-in-specific",
                "[non.matching.example, '*.shop.example']",
            ),
            route("wildcard-in-wildcard", "['*.other.example']"),
            route("no-intersection", "[wrong.shop.example.net, apps.example]"),
        ]
        .concat();
        let (_, objects, known) = read_files("hostname-intersection", &yaml);
        let with_generation: Vec<_> = objects.iter().map(|o| (o, Some(1), None)).collect();
        let status = desired(&with_generation, &known);
        let gateway = &status[&ConfigKey::new(Kind::KubernetesGateway, "default", "edge")];
        let counts: Vec<Value> = ["exact", "apps", "other"]
            .iter()
            .map(|l| named(&gateway["listeners"], l)["attachedRoutes"].clone())
            .collect();
        assert_eq!(counts, [json!(2), json!(1), json!(1)], "{gateway:#}");
        let accepted = |name: &str| {
            let route = &status[&ConfigKey::new(Kind::HttpRoute, "default", name)];
            condition_of(&route["parents"][0], "Accepted")
        };
        for name in [
            "specific-in-specific",
            "specific-in-wildcard",
            "wildcard-in-specific",
            "wildcard-in-wildcard",
        ] {
            assert_eq!(accepted(name), ("True".into(), "Accepted".into()), "{name}");
        }
        assert_eq!(
            accepted("no-intersection"),
            ("False".into(), "NoMatchingListenerHostname".into())
        );
    }
}
