//! Endpoints. [`resolve`]: raw endpoints + workloads + services in effect → endpoints with
//! their workload's labels, keyed by (host, service port). [`assignments`]: those endpoints +
//! the EDS clusters of [`super::clusters`] → one ClusterLoadAssignment per EDS cluster,
//! shared by all scopes that hold the cluster, with its provenance.

use super::clusters::Eds;
use super::{Built, Coll};
use crate::model::*;
use crate::rules;
use crate::translate::endpoint;

/// An endpoint keyed by the (host, service port) it serves.
pub(super) type Resolved<'s> = Coll<'s, ((Hostname, u16), Endpoint)>;

/// Endpoints with the labels of their workload (joined by IP), resolved to service ports.
pub(super) fn resolve<'s>(
    endpoints: Coll<'s, (Hostname, RawEndpoint)>,
    workloads: Coll<'s, (String, Workload)>,
    services: &Coll<'s, (Hostname, Service)>,
) -> Resolved<'s> {
    let ep_by_ip = endpoints.map(|(h, e)| (e.ip.clone(), (h, e)));
    let wl_labels = workloads.map(|(ip, w)| (ip, (w.labels, Some(w.origin))));
    let labeled = ep_by_ip
        .clone()
        .join_map(wl_labels.clone(), |_, (h, e), l| {
            (h.clone(), (e.clone(), l.clone()))
        });
    let unlabeled = ep_by_ip
        .antijoin(wl_labels.map(|(ip, _)| ip).distinct())
        .map(|(_, (h, e))| (h, (e, (Labels::new(), None))));
    labeled
        .concat(unlabeled)
        .join_map(services.clone(), |h, (e, (wl, wl_origin)), svc| {
            let port = match svc.ports.as_slice() {
                [only] if e.port_name.is_empty() => Some(only),
                ports => ports.iter().find(|p| p.name == e.port_name),
            }?;
            Some((
                (h.clone(), port.port),
                Endpoint::resolved(e, wl.clone(), wl_origin.as_ref()),
            ))
        })
        .flat_map(|x| x)
}

/// One ClusterLoadAssignment per EDS cluster name, shared by all scopes.
pub(super) fn assignments<'s>(eds: Eds<'s>, resolved: &Resolved<'s>) -> Built<'s, ScopeKey> {
    // Keyed by (name, subset labels): two scopes may see the same subset name defined by
    // different DestinationRules, and each must get its own rule's endpoints.
    let cla_members = eds
        .defs
        .clone()
        .join_map(resolved.clone(), |_, (name, sel), ep| {
            rules::labels_match(sel, &ep.labels)
                .then(|| ((name.clone(), sel.clone()), Some(ep.clone())))
        })
        .flat_map(|x| x);
    let cla_origins = cla_members
        .clone()
        .flat_map(|(def, ep)| {
            ep.map(|ep| ep.origins.into_iter().map(move |o| (def.clone(), o)))
                .into_iter()
                .flatten()
        })
        .distinct();
    // The definition itself joins as `None` so a cluster with no member still gets its
    // (empty) assignment.
    let clas = cla_members
        .concat(eds.defs.map(|(_, def)| (def, None)))
        .reduce(
            |(name, _): &(String, Labels), vals: &[(&Option<Endpoint>, isize)], out| {
                out.push((
                    endpoint::load_assignment(name, vals.iter().filter_map(|(v, _)| v.as_ref())),
                    1isize,
                ))
            },
        );
    let resources = eds
        .per_scope
        .clone()
        .join_map(clas, |_, s, cla| (s.clone(), cla.clone()));
    // An assignment also comes from the EndpointSlices and Pods of its members.
    let provenance = eds.per_scope.join_map(cla_origins, |(name, _), s, o| {
        (
            (
                Holder::Scope(s.clone()),
                ResourceType::Endpoint,
                name.clone(),
            ),
            o.clone(),
        )
    });
    Built {
        resources,
        provenance,
    }
}
