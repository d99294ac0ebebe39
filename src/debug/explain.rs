//! `explain`: which input objects a resource a proxy holds was built from.
//!
//! The hub keeps the provenance ([`crate::hub::provenance`]); this module answers the
//! question for every debug surface alike and renders it for the CLI.

use crate::hub::provenance::Provenance;
use dataflows::model::ResourceType;

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
    hub: &crate::hub::Hub,
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
    if let Some(Provenance { holder, inputs }) = hub.provenance.lookup(&id, rtype, &name) {
        return Ok(Explanation {
            proxy: id,
            rtype: rtype.short().to_string(),
            name,
            scope: holder,
            inputs: inputs
                .into_iter()
                .map(|k| Input {
                    kind: format!("{:?}", k.kind),
                    namespace: k.namespace,
                    name: k.name,
                })
                .collect(),
        });
    }
    if held && !hub.engine().pushes_everything() {
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
    let why = if hub.engine().pushes_everything() {
        " (the full-push engine does not compute provenance)"
    } else {
        ""
    };
    Err(ExplainError::NotFound(format!(
        "proxy {id} holds no {} named {name:?}{why}",
        rtype.short()
    )))
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
