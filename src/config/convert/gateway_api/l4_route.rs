//! A TCPRoute or a TLSRoute: connections, not requests. Each rule's backends become one
//! route of Istio's `tcp[]` (TCP) or `tls[]` (TLS, by SNI: the route's hostnames).

use super::super::fields::spec;
use super::super::Result;
use super::http_route::backend;
use super::{created, hostnames, parents, report_route_fields};
use crate::config::findings::Finding;
use crate::config::gateway_api as api;
use dataflows::model::{self as m, ConfigKey, MeshConfig, Record};
use serde_yaml_ng::Value;

pub(in crate::config::convert) fn l4_route(
    key: &ConfigKey,
    value: &Value,
    mesh: &MeshConfig,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (api::L4RouteSpec, _) = spec(value)?;
    report_route_fields(&ignored, findings);
    let ns = &key.namespace;
    let parents = parents(&s.parent_refs, ns, true, findings)?;
    hostnames(&s.hostnames)?;
    if key.kind == m::Kind::TcpRoute && !s.hostnames.is_empty() {
        findings.push(Finding::warning(
            "spec.hostnames",
            "a TCPRoute has no hostnames (TCP carries none): ignored",
        ));
    }
    let rules = s
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            r.backend_refs
                .iter()
                .enumerate()
                .map(|(j, b)| {
                    backend(
                        b,
                        &format!("spec.rules[{i}].backendRefs[{j}]"),
                        ns,
                        mesh,
                        &[],
                        findings,
                    )
                })
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(vec![Record::GatewayApi(m::GatewayApiObject::L4Route(
        m::KubeL4Route {
            key: key.clone(),
            created: created(value),
            parents,
            hostnames: if key.kind == m::Kind::TlsRoute {
                s.hostnames.clone()
            } else {
                Vec::new()
            },
            rules,
        },
    ))])
}
