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

/// What each visible service gets from the egress listener that made it visible: `rows` of
/// `(scope, egress listeners, listener index, service, spec)` for sidecar scopes, as
/// `((scope, host), T)` rows, distinct. Routes and TCP listeners both start here.
pub(super) fn per_listener<'s, T, F>(
    visible: &Visible<'s>,
    services: &Coll<'s, (Hostname, Service)>,
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
    rows: F,
) -> Coll<'s, ((ScopeKey, Hostname), T)>
where
    T: differential_dataflow::ExchangeData + std::hash::Hash,
    F: Fn(&ListenerView) -> Vec<T> + 'static,
{
    visible
        .views
        .clone()
        .map(|((s, idx), h)| (h, (s, idx)))
        .join_map(services.clone(), |_, (s, idx), svc| {
            (s.clone(), (*idx, svc.clone()))
        })
        .join_map(specs.clone(), move |s, (idx, svc), spec| {
            let ScopeKey::Sidecar {
                interception_none,
                proxyless,
                ..
            } = *s
            else {
                return Vec::new();
            };
            let view = ListenerView {
                listeners: rules::egress_listeners(spec.sidecar.as_ref()),
                idx: *idx,
                service: svc,
                spec,
                interception_none,
                proxyless,
            };
            rows(&view)
                .into_iter()
                .map(|t| ((s.clone(), svc.hostname.clone()), t))
                .collect()
        })
        .flat_map(|rows| rows)
        .distinct()
}

/// A service as seen through one egress listener of a sidecar scope.
pub(super) struct ListenerView<'a> {
    pub listeners: Vec<EgressListener>,
    pub idx: usize,
    pub service: &'a Service,
    pub spec: &'a ScopeSpec,
    pub interception_none: bool,
    pub proxyless: bool,
}
