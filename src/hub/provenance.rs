//! Provenance: which input objects each resource a proxy holds was built from.
//!
//! The dataflow computes provenance next to the resources (`flow::Outputs::provenance`), per
//! scope for shared resources and per proxy for its inbound side, so it is exactly as current
//! as the resources themselves. This store applies those diffs epoch by epoch and answers
//! "proxy P, resource TYPE/NAME → inputs" by looking up the proxy's scope. It lives beside
//! the hub's serving state under its own lock, so explaining never blocks a push; the debug
//! port's `explain` ([`crate::debug::explain`]) reads it.

use dataflows::model::{ConfigKey, Holder, ProvenanceRow, ProxyId, ResourceType, ScopeKey};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

type ResourceRef = (Holder, ResourceType, String);

#[derive(Default)]
struct Inner {
    scopes: HashMap<ProxyId, ScopeKey>,
    rows: HashMap<ResourceRef, BTreeMap<ConfigKey, isize>>,
}

/// Provenance of every resource of every connected proxy.
#[derive(Default)]
pub struct ProvenanceStore {
    inner: Mutex<Inner>,
}

/// Where one resource of a proxy came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provenance {
    /// The scope the resource is shared in (`sidecar default, no Sidecar resource`), or
    /// `proxy` for a resource of the proxy's own (inbound) side.
    pub holder: String,
    /// The input objects, sorted by kind, namespace and name.
    pub inputs: BTreeSet<ConfigKey>,
}

impl ProvenanceStore {
    /// Applies one epoch's changes of proxy scopes and provenance rows.
    pub fn apply(&self, scopes: &[((ProxyId, ScopeKey), isize)], rows: &[(ProvenanceRow, isize)]) {
        if scopes.is_empty() && rows.is_empty() {
            return;
        }
        let mut st = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // Retractions first, so a proxy that moves scope ends with the new one.
        for ((id, scope), _) in scopes.iter().filter(|(_, d)| *d < 0) {
            if st.scopes.get(id) == Some(scope) {
                st.scopes.remove(id);
            }
        }
        for ((id, scope), _) in scopes.iter().filter(|(_, d)| *d > 0) {
            st.scopes.insert(id.clone(), scope.clone());
        }
        for ((res, input), d) in rows {
            let inputs = st.rows.entry(res.clone()).or_default();
            let n = inputs.entry(input.clone()).or_insert(0);
            *n += d;
            if *n == 0 {
                inputs.remove(input);
            }
            if inputs.is_empty() {
                st.rows.remove(res);
            }
        }
    }

    /// The inputs of resource `name` of type `rtype` held by proxy `id`; `None` if the proxy
    /// is unknown here or holds no such resource with recorded inputs.
    pub fn lookup(&self, id: &str, rtype: ResourceType, name: &str) -> Option<Provenance> {
        let st = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let scope = st.scopes.get(id)?;
        let shared = (Holder::Scope(scope.clone()), rtype, name.to_string());
        let own = (Holder::Proxy(id.to_string()), rtype, name.to_string());
        let (holder, inputs) = match st.rows.get(&shared) {
            Some(inputs) => (describe_scope(scope), inputs),
            None => ("proxy".to_string(), st.rows.get(&own)?),
        };
        Some(Provenance {
            holder,
            inputs: inputs.keys().cloned().collect(),
        })
    }
}

/// `sidecar default (Sidecar default/sleep)`, `router istio-system (Gateway ...)`.
fn describe_scope(scope: &ScopeKey) -> String {
    let what = match scope {
        ScopeKey::Sidecar {
            namespace,
            sidecar,
            proxyless,
            ..
        } => {
            let what = if *proxyless { "proxyless" } else { "sidecar" };
            let refusing = match scope.ingress_security() {
                Some(_) => ", its bound ingress listeners failing closed (security stopgap)",
                None => "",
            };
            match sidecar {
                Some(k) => format!(
                    "{what} {namespace} under Sidecar {}/{}{refusing}",
                    k.namespace, k.name
                ),
                None => format!("{what} {namespace}, no Sidecar resource"),
            }
        }
        ScopeKey::Router {
            namespace,
            gateways,
            ..
        } => {
            let gws: Vec<String> = gateways
                .iter()
                .map(|g| format!("{}/{}", g.namespace, g.name))
                .collect();
            let refusing = match scope.router_security() {
                Some(_) => ", with its security policies",
                None => "",
            };
            format!(
                "router {namespace} selected by [{}]{refusing}",
                gws.join(", ")
            )
        }
    };
    let what = match scope.source_labels() {
        [] => what,
        sels => {
            let sels: Vec<String> = sels.iter().map(|sel| format!("{sel:?}")).collect();
            format!("{what}, matching sourceLabels {}", sels.join(", "))
        }
    };
    let what = match scope.locality() {
        "" => what,
        loc => format!("{what}, in locality {loc}"),
    };
    match scope.idle_timeout_ns() {
        Some(ns) => format!(
            "{what}, with IDLE_TIMEOUT {:?}",
            std::time::Duration::from_nanos(ns)
        ),
        None => what,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataflows::model::Kind;

    fn key(kind: Kind, name: &str) -> ConfigKey {
        ConfigKey::new(kind, "default", name)
    }

    #[test]
    fn explains_through_the_proxy_scope_and_forgets_retractions() {
        let store = ProvenanceStore::default();
        let scope = ScopeKey::Sidecar {
            namespace: "default".into(),
            sidecar: None,
            interception_none: false,
            proxyless: false,
            source_labels: Vec::new(),
            locality: None,
            priority_labels: None,
            idle_timeout_ns: None,
            path_normalization: Default::default(),
            security: None,
        };
        let route = (
            Holder::Scope(scope.clone()),
            ResourceType::Route,
            "9080".to_string(),
        );
        store.apply(
            &[(("p1".into(), scope.clone()), 1)],
            &[
                ((route.clone(), key(Kind::Service, "reviews")), 1),
                ((route.clone(), key(Kind::VirtualService, "reviews")), 1),
            ],
        );
        let e = store.lookup("p1", ResourceType::Route, "9080").unwrap();
        assert_eq!(e.inputs.len(), 2);
        assert_eq!(e.inputs.first().map(|k| k.kind), Some(Kind::Service));
        store.apply(&[], &[((route, key(Kind::VirtualService, "reviews")), -1)]);
        let e = store.lookup("p1", ResourceType::Route, "9080").unwrap();
        assert_eq!(e.inputs.len(), 1);
        assert!(store.lookup("p2", ResourceType::Route, "9080").is_none());
        assert!(store.lookup("p1", ResourceType::Route, "80").is_none());
    }
}
