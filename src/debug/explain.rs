//! `explain`: which input objects a resource a proxy holds was built from.
//!
//! The dataflow computes provenance next to the resources (`flow::Outputs::provenance`), per
//! scope for shared resources and per proxy for its inbound side, so it is exactly as current
//! as the resources themselves. This store applies those diffs epoch by epoch and answers
//! "proxy P, resource TYPE/NAME → inputs" by looking up the proxy's scope. It lives beside
//! the hub's serving state under its own lock, so explaining never blocks a push.

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

/// The answer to `explain`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Explanation {
    pub proxy: String,
    #[serde(rename = "type")]
    pub rtype: String,
    pub name: String,
    /// The scope the resource is shared in (`sidecar default/...`), or `proxy` for a
    /// resource of the proxy's own (inbound) side.
    pub scope: String,
    /// The input objects, sorted by kind, namespace and name.
    pub inputs: Vec<Input>,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Input {
    pub kind: String,
    pub namespace: String,
    pub name: String,
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
    pub fn explain(&self, id: &str, rtype: ResourceType, name: &str) -> Option<Explanation> {
        let st = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let scope = st.scopes.get(id)?;
        let shared = (Holder::Scope(scope.clone()), rtype, name.to_string());
        let own = (Holder::Proxy(id.to_string()), rtype, name.to_string());
        let (holder, inputs) = match st.rows.get(&shared) {
            Some(inputs) => (describe_scope(scope), inputs),
            None => ("proxy".to_string(), st.rows.get(&own)?),
        };
        let inputs: BTreeSet<&ConfigKey> = inputs.keys().collect();
        Some(Explanation {
            proxy: id.to_string(),
            rtype: rtype.short().to_string(),
            name: name.to_string(),
            scope: holder,
            inputs: inputs
                .into_iter()
                .map(|k| Input {
                    kind: format!("{:?}", k.kind),
                    namespace: k.namespace.clone(),
                    name: k.name.clone(),
                })
                .collect(),
        })
    }
}

// The two directions of the gRPC form, in one place.
impl From<Explanation> for super::pb::ExplainResponse {
    fn from(e: Explanation) -> Self {
        super::pb::ExplainResponse {
            proxy: e.proxy,
            r#type: e.rtype,
            name: e.name,
            scope: e.scope,
            inputs: e
                .inputs
                .into_iter()
                .map(|i| super::pb::InputObject {
                    kind: i.kind,
                    namespace: i.namespace,
                    name: i.name,
                })
                .collect(),
        }
    }
}

impl From<super::pb::ExplainResponse> for Explanation {
    fn from(r: super::pb::ExplainResponse) -> Self {
        Explanation {
            proxy: r.proxy,
            rtype: r.r#type,
            name: r.name,
            scope: r.scope,
            inputs: r
                .inputs
                .into_iter()
                .map(|i| Input {
                    kind: i.kind,
                    namespace: i.namespace,
                    name: i.name,
                })
                .collect(),
        }
    }
}

/// Why `explain` has no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExplainError {
    /// The request itself is wrong (names the parameter).
    Invalid(String),
    /// No such proxy or resource.
    NotFound(String),
}

/// Answers `explain` for `proxy` (node id or `pod.namespace`) and `resource` (`TYPE/NAME`),
/// for every debug surface alike.
pub fn explain(
    hub: &crate::xds::hub::Hub,
    proxy: &str,
    resource: &str,
) -> Result<Explanation, ExplainError> {
    if proxy.is_empty() {
        return Err(ExplainError::Invalid("proxy: required".into()));
    }
    let (rtype, name) = parse_resource(resource).map_err(ExplainError::Invalid)?;
    let (id, held) = hub
        .read(|st| {
            let id = super::status::resolve_proxy(
                super::status::connected(st).map(|e| e.proxy.id.as_str()),
                proxy,
            )?;
            let held = st.proxy(&id).is_some() && st.held(&id).contains(rtype, &name);
            Ok::<_, String>((id, held))
        })
        .map_err(ExplainError::NotFound)?;
    if let Some(e) = hub.provenance.explain(&id, rtype, &name) {
        return Ok(e);
    }
    if held && !hub.is_full_push() {
        // Fixed resources (BlackHoleCluster, an unscoped sidecar's virtualOutbound) are
        // built from no input object.
        return Ok(Explanation {
            proxy: id,
            rtype: rtype.short().to_string(),
            name,
            scope: "every proxy of its kind (built in)".into(),
            inputs: Vec::new(),
        });
    }
    let why = if hub.is_full_push() {
        " (the full-push engine does not compute provenance)"
    } else {
        ""
    };
    Err(ExplainError::NotFound(format!(
        "proxy {id} holds no {} named {name:?}{why}",
        rtype.short()
    )))
}

/// `sidecar default (Sidecar default/sleep)`, `router istio-system (Gateway ...)`.
fn describe_scope(scope: &ScopeKey) -> String {
    match scope {
        ScopeKey::Sidecar {
            namespace,
            sidecar,
            proxyless,
            ..
        } => {
            let what = if *proxyless { "proxyless" } else { "sidecar" };
            match sidecar {
                Some(k) => format!(
                    "{what} {namespace} under Sidecar {}/{}",
                    k.namespace, k.name
                ),
                None => format!("{what} {namespace}, no Sidecar resource"),
            }
        }
        ScopeKey::Router {
            namespace,
            gateways,
        } => {
            let gws: Vec<String> = gateways
                .iter()
                .map(|g| format!("{}/{}", g.namespace, g.name))
                .collect();
            format!("router {namespace} selected by [{}]", gws.join(", "))
        }
    }
}

/// `TYPE/NAME` as the CLI and API take it: `cluster/outbound|9080||reviews...`,
/// `route/9080`, `listener/...`, `endpoint/...` (or CDS/RDS/LDS/EDS).
pub fn parse_resource(s: &str) -> Result<(ResourceType, String), String> {
    let (t, name) = s.split_once('/').ok_or_else(|| {
        format!("resource {s:?}: expected TYPE/NAME, e.g. route/9080 or cluster/outbound|9080||reviews.default.svc.cluster.local")
    })?;
    let rtype = match t.to_ascii_lowercase().as_str() {
        "cluster" | "clusters" | "cds" => ResourceType::Cluster,
        "endpoint" | "endpoints" | "eds" => ResourceType::Endpoint,
        "listener" | "listeners" | "lds" => ResourceType::Listener,
        "route" | "routes" | "rds" => ResourceType::Route,
        other => {
            return Err(format!(
                "resource {s:?}: unknown type {other:?} (cluster, endpoint, listener or route)"
            ))
        }
    };
    if name.is_empty() {
        return Err(format!("resource {s:?}: the name after TYPE/ is empty"));
    }
    Ok((rtype, name.to_string()))
}

/// `meshflow explain PROXY TYPE/NAME`: a table of the input objects, or the same as
/// JSON/YAML (the JSON of `/debug/explain`).
pub async fn explain_cli(
    addr: std::net::SocketAddr,
    proxy: &str,
    resource: &str,
    output: super::cli::Output,
) -> Result<String, String> {
    use super::envoy_json::{print, Format};
    use super::pb::{debug_client::DebugClient, ExplainRequest};
    let mut client = DebugClient::connect(format!("http://{addr}"))
        .await
        .map_err(|e| format!("connecting to the debug API at {addr}: {e}"))?;
    let resp = client
        .explain(ExplainRequest {
            proxy: proxy.to_string(),
            resource: resource.to_string(),
        })
        .await
        .map_err(|e| e.message().to_string())?
        .into_inner();
    let e = Explanation::from(resp);
    match output {
        super::cli::Output::Json => print(&e, Format::Json),
        super::cli::Output::Yaml => print(&e, Format::Yaml),
        super::cli::Output::Table => {
            let mut out = format!(
                "{} {} of {}\nshared by: {}\nbuilt from:\n",
                e.rtype, e.name, e.proxy, e.scope
            );
            let mut rows = vec![vec!["KIND".to_string(), "NAMESPACE".into(), "NAME".into()]];
            rows.extend(
                e.inputs
                    .iter()
                    .map(|i| vec![i.kind.clone(), i.namespace.clone(), i.name.clone()]),
            );
            out.push_str(&super::cli::table(&rows, |_, cell| cell));
            Ok(out)
        }
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
        let e = store.explain("p1", ResourceType::Route, "9080").unwrap();
        assert_eq!(e.inputs.len(), 2);
        assert_eq!(e.inputs[0].kind, "Service");
        store.apply(&[], &[((route, key(Kind::VirtualService, "reviews")), -1)]);
        let e = store.explain("p1", ResourceType::Route, "9080").unwrap();
        assert_eq!(e.inputs.len(), 1);
        assert!(store.explain("p2", ResourceType::Route, "9080").is_none());
        assert!(store.explain("p1", ResourceType::Route, "80").is_none());
    }

    #[test]
    fn parses_type_and_name() {
        assert_eq!(
            parse_resource("cluster/outbound|9080||a.b.svc.cluster.local").unwrap(),
            (
                ResourceType::Cluster,
                "outbound|9080||a.b.svc.cluster.local".to_string()
            )
        );
        assert_eq!(
            parse_resource("RDS/9080").unwrap(),
            (ResourceType::Route, "9080".to_string())
        );
        assert!(parse_resource("9080").is_err());
        assert!(parse_resource("secret/x").is_err());
        assert!(parse_resource("route/").is_err());
    }
}
