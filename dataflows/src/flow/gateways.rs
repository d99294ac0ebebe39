//! Gateway proxies (routers). In: router scopes (each names the Gateways selecting it),
//! Gateways, VirtualServices and their resolved form. Out: each router scope's listeners and
//! routes, with the Gateways and VirtualServices each was built from.

use super::{Built, Coll};
use crate::assemble;
use crate::model::*;
use crate::rules;
use serde::{Deserialize, Serialize};

/// What a gateway proxy's resources are computed from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum GwItem {
    Gateway(Gateway),
    Vs(ConfigKey, ResolvedVs),
    /// The hash keys of a host the routes go to, where its rule hashes.
    Hash(Hostname, HostHashing),
}

pub(super) fn routers<'s>(
    scopes: &Coll<'s, ScopeKey>,
    gateways: Coll<'s, (ConfigKey, Gateway)>,
    vss: Coll<'s, (ConfigKey, VirtualService)>,
    resolved: Coll<'s, (ConfigKey, ResolvedVs)>,
    hashing: &Coll<'s, ((ScopeKey, Hostname), HostHashing)>,
) -> Built<'s, ScopeKey> {
    let router_gw = scopes.clone().flat_map(|s| match &s {
        ScopeKey::Router { gateways, .. } => {
            gateways.iter().map(|g| (g.clone(), s.clone())).collect()
        }
        _ => Vec::new(),
    });
    let router_gw_items = router_gw.clone().join_map(gateways, |_, s, gw| {
        (s.clone(), GwItem::Gateway(gw.clone()))
    });
    let vs_by_gw = vss.flat_map(|(k, vs)| {
        vs.gateways
            .iter()
            .filter_map(rules::gateway_ref_str)
            .map(|g| (g, k.clone()))
            .collect::<Vec<_>>()
    });
    let router_vs_items = router_gw
        .join_map(vs_by_gw, |g, s, vk| (vk.clone(), (s.clone(), g.clone())))
        .join_map(resolved, |_, (s, g), rvs| {
            (s.clone(), GwItem::Vs(g.clone(), rvs.clone()))
        });
    let router_hash_items = router_vs_items
        .clone()
        .flat_map(|(s, item)| match item {
            GwItem::Vs(_, rvs) => rvs
                .vs
                .http
                .iter()
                .flat_map(|r| r.route.iter())
                .map(|d| ((s.clone(), d.host.clone()), ()))
                .collect(),
            _ => Vec::new(),
        })
        .distinct()
        .join_map(hashing.clone(), |(s, h), _, hh| {
            (s.clone(), GwItem::Hash(h.clone(), hh.clone()))
        });
    // A router's resources depend on all its Gateways and VirtualServices together (servers
    // of several Gateways share a port), so they are built from the scope's whole group.
    let router_out = router_gw_items
        .concat(router_vs_items)
        .concat(router_hash_items)
        .reduce(|_, vals: &[(&GwItem, isize)], out| {
            out.extend(resources(vals).into_iter().map(|r| (r, 1isize)));
        });
    let provenance = router_out.clone().flat_map(|(s, (r, inputs))| {
        let key = (Holder::Scope(s), r.rtype, r.name);
        inputs
            .into_iter()
            .map(move |k| (key.clone(), k))
            .collect::<Vec<_>>()
    });
    Built {
        resources: router_out.map(|(s, (r, _))| (s, r)),
        provenance,
    }
}

/// One router scope's resources, each with its inputs, sorted and deduplicated.
fn resources(vals: &[(&GwItem, isize)]) -> Vec<(Resource, std::collections::BTreeSet<ConfigKey>)> {
    let gws: Vec<&Gateway> = vals
        .iter()
        .filter_map(|(v, _)| {
            if let GwItem::Gateway(g) = v {
                Some(g)
            } else {
                None
            }
        })
        .collect();
    let vss: Vec<(&ConfigKey, &ResolvedVs)> = vals
        .iter()
        .filter_map(|(v, _)| {
            if let GwItem::Vs(g, r) = v {
                Some((g, r))
            } else {
                None
            }
        })
        .collect();
    let hashing: Hashing = vals
        .iter()
        .filter_map(|(v, _)| match v {
            GwItem::Hash(h, hh) => Some((h.clone(), hh.clone())),
            _ => None,
        })
        .collect();
    let mut res = assemble::router_resources(&gws, &vss, &hashing);
    res.sort();
    res.dedup();
    res
}
