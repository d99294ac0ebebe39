//! `explain`: which input objects a resource a proxy holds was built from.
//!
//! The hub keeps the provenance ([`crate::hub::provenance`]); this module answers the
//! question for every debug surface alike, as a [`model::Explanation`] (the CLI renders
//! it for the terminal).

use super::error::DebugError;
use super::model::{self, Explanation, Input};
use crate::hub::provenance::Provenance;

/// Answers `explain` for `proxy` (node id or `pod.namespace`) and `resource` (`TYPE/NAME`,
/// or a NAME unique among the proxy's resources: [`model::resolve_resource`]), for every
/// debug surface alike.
pub fn explain(
    hub: &crate::hub::Hub,
    proxy: &str,
    resource: &str,
) -> Result<Explanation, DebugError> {
    if proxy.is_empty() {
        return Err(DebugError::BadRequest("proxy: required".into()));
    }
    let (id, rtype, name, held, holders) = hub.read(|st| {
        let id = model::resolve_proxy(
            super::status::connected(st).map(|e| e.proxy.id.as_str()),
            proxy,
        )?;
        let holds = |t, n: &str| st.proxy(&id).is_some() && st.held(&id).contains(t, n);
        let (rtype, name) = model::resolve_resource(&id, resource, holds)?;
        let held = holds(rtype, &name);
        // Who else holds this very version: the proxies a change of it reaches.
        let version = st.held(&id).get(rtype, &name).cloned();
        let mut holders: Vec<String> = super::status::connected(st)
            .map(|e| e.proxy.id.as_str())
            .filter(|p| version.is_some() && st.held(p).get(rtype, &name) == version.as_ref())
            .map(str::to_string)
            .collect();
        holders.sort();
        holders.dedup();
        Ok::<_, DebugError>((id, rtype, name, held, holders))
    })?;
    if let Some(Provenance { holder, inputs }) = hub.provenance.lookup(&id, rtype, &name) {
        return Ok(Explanation {
            proxy: id,
            rtype: rtype.short().to_string(),
            name,
            scope: holder,
            holders,
            inputs: inputs
                .into_iter()
                .map(|k| Input {
                    kind: k.kind.to_string(),
                    namespace: k.namespace,
                    name: k.name,
                })
                .collect(),
        });
    }
    if held && hub.engine().computes_provenance() {
        // Fixed resources (BlackHoleCluster, an unscoped sidecar's virtualOutbound) are
        // built from no input object.
        return Ok(Explanation {
            proxy: id,
            rtype: rtype.short().to_string(),
            name,
            scope: "every proxy of its kind (built in)".into(),
            inputs: Vec::new(),
            holders,
        });
    }
    let why = if hub.engine().computes_provenance() {
        String::new()
    } else {
        format!(
            " (the {} engine does not compute provenance)",
            hub.engine().name()
        )
    };
    Err(DebugError::NotFound(format!(
        "{}{why}",
        model::not_held(&id, rtype, &name)
    )))
}
