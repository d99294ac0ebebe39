//! Visibility: which services each scope may see. In: each scope's Sidecar spec, the services
//! in effect. Out: hosts per (scope, egress listener) and per scope. Every later scope-level
//! stage starts from these rows, so a service outside a scope's view never costs it work.

use super::Coll;
use crate::model::*;
use crate::rules::{self, NsKey};

pub(super) struct Visible<'s> {
    /// `((scope, egress listener index), host)`: the ports a host gets depend on the listener.
    pub views: Coll<'s, ((ScopeKey, usize), Hostname)>,
    /// `(scope, host)`: every host a scope sees through any of its listeners.
    pub scope_hosts: Coll<'s, (ScopeKey, Hostname)>,
}

impl<'s> Visible<'s> {
    /// `(host, scope)`, for joins keyed by host.
    pub fn host_scopes(&self) -> Coll<'s, (Hostname, ScopeKey)> {
        self.scope_hosts.clone().map(|(s, h)| (h, s))
    }
}

/// Joined on the namespace a pattern names so a scoped Sidecar never meets services outside
/// its namespaces (`*/` patterns join on [`NsKey::Any`], which every service is also under).
pub(super) fn hosts<'s>(
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
    services: &Coll<'s, (Hostname, Service)>,
) -> Visible<'s> {
    let view_rules = specs.clone().flat_map(|(s, spec)| {
        let mut rows = Vec::new();
        for (idx, l) in rules::egress_listeners(spec.sidecar.as_ref())
            .iter()
            .enumerate()
        {
            for pattern in &l.hosts {
                if let Some((ns, host)) = rules::egress_pattern(pattern, s.namespace()) {
                    rows.push((ns, ((s.clone(), idx), host)));
                }
            }
        }
        rows
    });
    let svc_by_ns = services.clone().flat_map(|(_, svc)| {
        [
            (NsKey::Any, svc.clone()),
            (NsKey::Ns(svc.namespace().to_string()), svc),
        ]
    });
    let views = view_rules
        .join_map(svc_by_ns, |_, (view, host_pat), svc| {
            (rules::host_matches(host_pat, &svc.hostname)
                && rules::exported_to(&svc.export_to, svc.namespace(), view.0.namespace()))
            .then(|| (view.clone(), svc.hostname.clone()))
        })
        .flat_map(|x| x)
        .distinct();
    let scope_hosts = views.clone().map(|((s, _), h)| (s, h)).distinct();
    Visible { views, scope_hosts }
}
