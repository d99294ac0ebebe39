//! The Gateway API, translated: Gateway API objects → the Gateways and VirtualServices the
//! rest of the dataflow serves ([`crate::rules::gateway_api`] says how). A route meets the
//! ReferenceGrants of the namespaces its backends are in and the Gateways its parents name;
//! the routes of one (listener, hostname) meet in one group, so a route's edit re-sorts only
//! the hostnames it is on.

use super::Coll;
use crate::model::*;
use crate::rules::gateway_api as rules;

/// What the Gateway API objects become.
pub(super) struct Translated<'s> {
    pub gateways: Coll<'s, (ConfigKey, Gateway)>,
    pub virtual_services: Coll<'s, (ConfigKey, VirtualService)>,
}

pub(super) fn translate<'s>(objects: &Coll<'s, (ConfigKey, GatewayApiObject)>) -> Translated<'s> {
    let kube_gateways = objects.clone().flat_map(|(k, o)| match o {
        GatewayApiObject::Gateway(g) if g.owned() => Some(((k.namespace, k.name), g)),
        _ => None,
    });
    let routes = objects.clone().flat_map(|(_, o)| match o {
        GatewayApiObject::HttpRoute(r) => Some(r),
        _ => None,
    });
    let grants = objects.clone().flat_map(|(k, o)| match o {
        GatewayApiObject::ReferenceGrant(g) => Some((k.namespace, g)),
        _ => None,
    });
    let gateways = kube_gateways.clone().flat_map(|(_, g)| {
        rules::listener_gateways(&g)
            .into_iter()
            .map(|gw| (gw.key.clone(), gw))
    });

    // Each route with the grants of the other namespaces its backends are in (an empty
    // list for a route with none: every route passes the reduce).
    let foreign = routes.clone().flat_map(|r| {
        let mut namespaces: Vec<String> = r
            .rules
            .iter()
            .flat_map(|rule| &rule.backends)
            .map(|b| b.namespace.clone())
            .filter(|ns| *ns != r.key.namespace)
            .collect();
        namespaces.sort();
        namespaces.dedup();
        let key = r.key.clone();
        namespaces.into_iter().map(move |ns| (ns, key.clone()))
    });
    let granted = foreign
        .join_map(grants, |_, route, g| (route.clone(), Some(g.clone())))
        .concat(routes.clone().map(|r| (r.key, None)))
        .reduce(|_, vals: &[(&Option<ReferenceGrant>, isize)], out| {
            let grants: Vec<ReferenceGrant> =
                vals.iter().filter_map(|(g, _)| (*g).clone()).collect();
            out.push((grants, 1isize));
        });
    let with_grants = routes
        .map(|r| (r.key.clone(), r))
        .join_map(granted, |_, r, g| (r.clone(), g.clone()));

    // Each route at the Gateways its parents name.
    let by_parent = with_grants.flat_map(|(r, g)| {
        let mut parents: Vec<(String, String)> = r
            .parents
            .iter()
            .filter(|p| p.kind == ParentKind::Gateway)
            .map(|p| (p.namespace.clone(), p.name.clone()))
            .collect();
        parents.sort();
        parents.dedup();
        parents
            .into_iter()
            .map(move |p| (p, (r.clone(), g.clone())))
    });
    let attached = by_parent.join_map(kube_gateways, |_, (r, grants), gw| {
        rules::attach(r, gw, grants)
    });
    let virtual_services = attached
        .flat_map(|rows| rows)
        .reduce(
            |key, vals: &[(&(rules::RouteOrder, Vec<HttpRoute>), isize)], out| {
                let entries = vals.iter().map(|(e, _)| (*e).clone()).collect();
                out.push((rules::merge(key, entries), 1isize));
            },
        )
        .map(|(_, vs)| (vs.key.clone(), vs));
    Translated {
        gateways,
        virtual_services,
    }
}
