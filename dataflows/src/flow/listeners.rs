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
) -> Built<'s, ScopeKey> {
    let api = api_listeners(ports);
    let fixed = specs.clone().flat_map(|(s, spec)| match &s {
        ScopeKey::Sidecar {
            interception_none,
            proxyless,
            ..
        } => assemble::sidecar_fixed_listeners(&spec, *interception_none, *proxyless)
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

/// Proxyless clients look up one API listener per `host:port` they may dial; it comes from
/// that host's service.
fn api_listeners<'s>(ports: Ports<'s>) -> Built<'s, ScopeKey> {
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
        .map(|((s, h), (port, .., svc))| (s, h, port, svc.origin));
    let provenance = rows.clone().map(|(s, h, port, o)| {
        (
            (
                Holder::Scope(s),
                ResourceType::Listener,
                listener::api_listener_name(&h, port),
            ),
            o,
        )
    });
    Built {
        resources: rows.map(|(s, h, port, _)| (s, listener::api_listener(&h, port))),
        provenance,
    }
}
