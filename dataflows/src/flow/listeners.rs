//! Sidecar listeners that are not a route's catch-all (that one is [`super::routes`]'): the
//! fixed listeners of each sidecar scope (from its Sidecar spec) and the API listeners of
//! proxyless gRPC clients (from the route ports), with the latter's provenance.

use super::routes::Ports;
use super::{Built, Coll};
use crate::assemble;
use crate::model::*;
use crate::translate::listener;

pub(super) fn sidecar<'s>(
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
    ports: Ports<'s>,
    domain_suffix: &str,
) -> Built<'s, ScopeKey> {
    let api = api_listeners(ports, domain_suffix);
    let fixed = specs.clone().flat_map(|(s, spec)| match &s {
        ScopeKey::Sidecar {
            interception_none,
            proxyless,
            ..
        } => {
            let sec = s.ingress_security().cloned().unwrap_or_default();
            assemble::sidecar_fixed_listeners(&spec, *interception_none, *proxyless, &sec)
        }
        .into_iter()
        .map(|r| (s.clone(), r))
        .collect(),
        ScopeKey::Router { .. } => Vec::new(),
    });
    Built {
        resources: fixed.concat(api.resources),
        provenance: api.provenance,
    }
}

/// Proxyless clients look up one API listener per `host:port` they may dial (each name of
/// the host); it comes from that host's service.
fn api_listeners<'s>(ports: Ports<'s>, domain_suffix: &str) -> Built<'s, ScopeKey> {
    let suffix = domain_suffix.to_string();
    let rows = ports
        .filter(|((s, _), _)| {
            matches!(
                s,
                ScopeKey::Sidecar {
                    proxyless: true,
                    ..
                }
            )
        })
        .flat_map(move |((s, h), (port, _, _, svc, _))| {
            listener::api_listeners(&h, port, s.namespace(), &suffix)
                .into_iter()
                .map(|l| (s.clone(), l, svc.origin.clone()))
                .collect::<Vec<_>>()
        });
    let provenance = rows
        .clone()
        .map(|(s, l, o)| ((Holder::Scope(s), ResourceType::Listener, l.name), o));
    Built {
        resources: rows.map(|(s, l, _)| (s, l)),
        provenance,
    }
}
