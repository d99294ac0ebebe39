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

/// Endpoints with the labels (and placement) of their workload, joined by IP, and the
/// endpoints ServiceEntries select, resolved to service ports.
pub(super) fn resolve<'s>(
    endpoints: Coll<'s, (Hostname, RawEndpoint)>,
    workloads: Coll<'s, (String, Workload)>,
    selections: Coll<'s, (Hostname, WorkloadSelection)>,
    services: &Coll<'s, (Hostname, HostServices)>,
) -> Resolved<'s> {
    let ep_by_ip = endpoints.map(|(h, e)| (e.ip.clone(), (h, e)));
    let labeled = ep_by_ip
        .clone()
        .join_map(workloads.clone(), |_, (h, e), w| {
            (h.clone(), (e.clone(), Some(w.clone())))
        });
    let unlabeled = ep_by_ip
        .antijoin(workloads.clone().map(|(ip, _)| ip).distinct())
        .map(|(_, (h, e))| (h, (e, None)));
    // A selector meets the workloads of its namespace; each match is an endpoint per port.
    let selected = selections
        .map(|(h, sel)| (sel.origin.namespace.clone(), (h, sel)))
        .join_map(
            workloads.map(|(_, w)| (w.origin.namespace.clone(), w)),
            |_, (h, sel), w| {
                if !rules::labels_match(&sel.labels, &w.labels) {
                    return Vec::new();
                }
                sel.ports
                    .iter()
                    .map(|p| (h.clone(), (p.name.clone(), Endpoint::selected(sel, p, w))))
                    .collect()
            },
        )
        .flat_map(|x| x)
        .join_map(services.clone(), |h, (name, ep), set| {
            let port = set
                .of_namespace(ep.service_namespace())?
                .ports
                .iter()
                .find(|p| &p.name == name)?;
            Some(((h.clone(), port.port), ep.clone()))
        })
        .flat_map(|x| x);
    labeled
        .concat(unlabeled)
        // Each endpoint serves the service of its own namespace (Istio's endpoint shards are
        // per host and namespace).
        .join_map(services.clone(), |h, (e, w), set| {
            let svc = set.of_namespace(&e.origin.namespace)?;
            let port = match svc.ports.as_slice() {
                [only] if e.port_name.is_empty() => Some(only),
                ports => ports.iter().find(|p| p.name == e.port_name),
            }?;
            Some(((h.clone(), port.port), Endpoint::resolved(e, w.as_ref())))
        })
        .flat_map(|x| x)
        .concat(selected)
}

/// What goes into a service's identities: the service, or one identity of its endpoints.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
enum IdentityItem {
    // Boxed: a service is many times the size of an identity.
    Service(Box<HostServices>),
    /// An identity of an endpoint of the namespace's service.
    Identity(String, String),
}

/// The services in effect, each with the SPIFFE identities of its endpoints among its
/// `subject_alt_names` (what `ISTIO_MUTUAL` clusters pin servers to). An endpoint change
/// reaches the clusters only when it changes a service's set of identities.
pub(super) fn identified<'s>(
    resolved: &Resolved<'s>,
    services: &Coll<'s, (Hostname, HostServices)>,
    mesh: &super::mesh::Mesh<'s>,
) -> Coll<'s, (Hostname, HostServices)> {
    let identities = resolved
        .clone()
        .flat_map(|((h, _), ep)| {
            let svc_ns = ep.service_namespace().to_string();
            ep.identity.map(|i| ((), (h, svc_ns, i)))
        })
        .distinct()
        .join_map(mesh.clone(), |_, (h, svc_ns, (ns, sa)), m| {
            (
                h.clone(),
                IdentityItem::Identity(svc_ns.clone(), m.spiffe_id(ns, sa)),
            )
        });
    services
        .clone()
        .map(|(h, svc)| (h, IdentityItem::Service(Box::new(svc))))
        .concat(identities)
        .reduce(|_, vals: &[(&IdentityItem, isize)], out| {
            let mut set = None;
            let mut ids = Vec::new();
            for (v, _) in vals {
                match v {
                    IdentityItem::Service(s) => set = Some(&**s),
                    IdentityItem::Identity(ns, id) => ids.push((ns, id)),
                }
            }
            if let Some(set) = set {
                let set = set.map_each(|svc| {
                    let own = ids.iter().filter(|(ns, _)| *ns == svc.namespace());
                    *svc = svc.with_identities(own.map(|(_, id)| *id));
                });
                out.push((set, 1isize));
            }
        })
}

/// One ClusterLoadAssignment per EDS cluster name and client locality class, shared by all
/// scopes of that class: one class for a cluster that does not balance by locality, one
/// per locality (and, under `failoverPriority`, per values of the labels it reads) of the
/// scopes holding it for one that does.
pub(super) fn assignments<'s>(eds: Eds<'s>, resolved: &Resolved<'s>) -> Built<'s, ScopeKey> {
    // Keyed by (name, selection): two scopes may see the same subset name defined by
    // different DestinationRules, and each must get its own rule's endpoints.
    let cla_members = eds
        .defs
        .clone()
        .join_map(resolved.clone(), |_, (name, sel), ep| {
            (ep.service_namespace() == sel.service_namespace
                && rules::labels_match(&sel.labels, &ep.labels))
            .then(|| ((name.clone(), sel.clone()), ep.clone()))
        })
        .flat_map(|x| x);
    let cla_origins = cla_members
        .clone()
        .flat_map(|(def, ep)| ep.origins.into_iter().map(move |o| (def.clone(), o)))
        .distinct();
    let per_class = eds.per_scope.clone().map(|(def, s)| {
        let class = def.1.client_class(&s);
        ((def, class), s)
    });
    let classes = per_class.clone().map(|(k, _)| k).distinct();
    // Each member once per class of its definition (one class unless it balances by
    // locality); the class itself joins as `None`, so a cluster with no member still gets
    // its (empty) assignment.
    let class_members = classes.clone().join_map(cla_members, |def, class, ep| {
        ((def.clone(), class.clone()), Some(ep.clone()))
    });
    let clas = class_members.concat(classes.map(|k| (k, None))).reduce(
        |((name, sel), class): &((String, EdsSel), ClientClass),
         vals: &[(&Option<Endpoint>, isize)],
         out| {
            let members = vals.iter().filter_map(|(v, _)| v.as_ref());
            let locality = sel.locality.as_deref().map(|m| (m, class));
            out.push((
                endpoint::load_assignment_for(name, members, locality),
                1isize,
            ))
        },
    );
    let resources = per_class.join_map(clas, |_, s, cla| (s.clone(), cla.clone()));
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
