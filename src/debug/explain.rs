//! `explain`: which input objects a resource a proxy holds was built from.
//!
//! The hub keeps the provenance ([`crate::hub::provenance`]); this module answers the
//! question for every debug surface alike, as a [`model::Explanation`] (the CLI renders
//! it for the terminal).

use super::error::DebugError;
use super::model::{self, Explanation, Input};
use crate::hub::provenance::Provenance;
use dataflows::model::ResourceType;

/// Answers `explain` for `proxy` (node id or `pod.namespace`) and `resource` (`TYPE/NAME`),
/// for every debug surface alike.
pub fn explain(
    hub: &crate::hub::Hub,
    proxy: &str,
    resource: &str,
) -> Result<Explanation, DebugError> {
    if proxy.is_empty() {
        return Err(DebugError::BadRequest("proxy: required".into()));
    }
    let (rtype, name) = parse_resource(resource).map_err(DebugError::BadRequest)?;
    let (id, held) = hub.read(|st| {
        let id = model::resolve_proxy(
            super::status::connected(st).map(|e| e.proxy.id.as_str()),
            proxy,
        )?;
        let held = st.proxy(&id).is_some() && st.held(&id).contains(rtype, &name);
        Ok::<_, DebugError>((id, held))
    })?;
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
    Err(DebugError::NotFound(format!(
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
