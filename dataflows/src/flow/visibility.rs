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
    /// `((scope, host), namespace)` for the hosts several namespaces define: whose service
    /// the scope gets ([`HostServices::for_namespace`]). A host one namespace defines has
    /// no row: its one service is every scope's.
    pub picks: Coll<'s, ((ScopeKey, Hostname), String)>,
}

impl<'s> Visible<'s> {
    /// `(host, scope)`, for joins keyed by host.
    pub fn host_scopes(&self) -> Coll<'s, (Hostname, ScopeKey)> {
        self.scope_hosts.clone().map(|(s, h)| (h, s))
    }
}

/// `rows` of `(scope, host)` with the namespace whose service the scope gets where several
/// namespaces define the host (`picks`, [`Visible::picks`]), `None` where one does: what
/// DestinationRule lookups read the service's namespace from.
pub(super) fn with_picks<'s>(
    rows: Coll<'s, ((ScopeKey, Hostname), ())>,
    picks: &Coll<'s, ((ScopeKey, Hostname), String)>,
) -> Coll<'s, ((ScopeKey, Hostname), Option<String>)> {
    let picked = rows
        .clone()
        .join_map(picks.clone(), |k, (), ns| (k.clone(), Some(ns.clone())));
    picked.concat(
        rows.antijoin(picks.clone().map(|(k, _)| k))
            .map(|(k, ())| (k, None)),
    )
}

/// Joined on the namespace a pattern names so a scoped Sidecar never meets services outside
/// its namespaces (`*/` patterns join on [`NsKey::Any`], which every service is also under).
pub(super) fn hosts<'s>(
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
    services: &Coll<'s, (Hostname, HostServices)>,
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
    // Under each namespace that defines the host, and once under any.
    let svc_by_ns = services.clone().flat_map(|(_, set)| {
        let mut rows: Vec<(NsKey, HostServices)> = set
            .all()
            .iter()
            .map(|s| (NsKey::Ns(s.namespace().to_string()), set.clone()))
            .collect();
        rows.push((NsKey::Any, set));
        rows
    });
    // An `ns/host` pattern imports the host if `ns`'s service of it is exported to the
    // scope; the scope then gets the service its namespace picks
    // ([`HostServices::for_namespace`]), as every later stage reads it.
    let views = view_rules
        .join_map(svc_by_ns, |key, (view, host_pat), set| {
            let viewer = view.0.namespace();
            let exported = match key {
                NsKey::Any => set.for_namespace(viewer).is_some(),
                NsKey::Ns(ns) => set
                    .of_namespace(ns)
                    .is_some_and(|s| rules::exported_to(&s.export_to, ns, viewer)),
            };
            (exported && rules::host_matches(host_pat, set.hostname()))
                .then(|| (view.clone(), set.hostname().clone()))
        })
        .flat_map(|x| x)
        .distinct();
    let scope_hosts = views.clone().map(|((s, _), h)| (s, h)).distinct();
    let contested = services.clone().filter(|(_, set)| set.all().len() > 1);
    let picks = scope_hosts
        .clone()
        .map(|(s, h)| (h, s))
        .join_map(contested, |h, s, set| {
            let svc = set.for_namespace(s.namespace())?;
            Some(((s.clone(), h.clone()), svc.namespace().to_string()))
        })
        .flat_map(|x| x);
    Visible {
        views,
        scope_hosts,
        picks,
    }
}

/// What each visible service gets from the egress listener that made it visible: `rows` of
/// `(scope, egress listeners, listener index, service, spec)` for sidecar scopes, as
/// `((scope, host), T)` rows, distinct. Routes and TCP listeners both start here.
pub(super) fn per_listener<'s, T, F>(
    visible: &Visible<'s>,
    services: &Coll<'s, (Hostname, HostServices)>,
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
        .join_map(services.clone(), |_, (s, idx), set| {
            set.for_namespace(s.namespace())
                .map(|svc| (s.clone(), (*idx, svc.clone())))
        })
        .flat_map(|x| x)
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
