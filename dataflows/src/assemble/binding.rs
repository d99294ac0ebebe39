//! How a router's servers are bound: the port each listens on, and the VirtualServices
//! bound to its Gateway, by the domains the server serves for them; shared by its HTTP,
//! TCP and TLS servers.

use crate::model::*;
use crate::rules::gateway_domain;
use crate::translate::route;
use std::collections::{BTreeMap, BTreeSet};

/// A router's listeners by address and port listened on, with the objects they come from.
pub(crate) type Listeners = BTreeMap<(String, u16), BTreeSet<ConfigKey>>;

/// Where a router's server of `port` listens, under the router's port map
/// ([`ScopeKey::gateway_ports`]).
pub(crate) fn listen_port(ports: &[(u16, u16)], port: u16) -> u16 {
    ports
        .iter()
        .find(|(p, _)| *p == port)
        .map_or(port, |(_, target)| *target)
}

/// Adds to `vhosts` the domains `server` of `gw` serves for the VirtualServices bound to
/// it (recording them in `inputs`); the domains added.
pub(crate) fn server_vhosts(
    gw: &Gateway,
    server: &GatewayServer,
    vss: &[(&ConfigKey, &ResolvedVs)],
    inputs: &mut BTreeSet<ConfigKey>,
    vhosts: &mut route::GatewayVhosts,
) -> Vec<String> {
    let mut domains = Vec::new();
    for (_, rvs) in vss.iter().filter(|(k, _)| **k == gw.key) {
        let vs_ns = &rvs.vs.key.namespace;
        for vs_host in &rvs.vs.hosts {
            for server_host in &server.hosts {
                if let Some(domain) = gateway_domain(server_host, &gw.key.namespace, vs_ns, vs_host)
                {
                    inputs.insert(rvs.vs.key.clone());
                    add_via(vhosts.entry(domain.clone()).or_default(), rvs, &gw.key);
                    domains.push(domain);
                }
            }
        }
    }
    domains
}

/// Each domain's VirtualServices in key order, each with its gateways sorted: the order
/// routes are concatenated in, the same whichever order inputs arrived in.
pub(crate) fn sort_vhosts(vhosts: &mut route::GatewayVhosts) {
    vhosts.values_mut().for_each(sort_vhost);
}

/// One domain's VirtualServices in key order, each with its gateways sorted.
pub(crate) fn sort_vhost(list: &mut Vec<(ResolvedVs, Vec<String>)>) {
    list.sort_by(|a, b| a.0.vs.key.cmp(&b.0.vs.key));
    for (_, via) in list.iter_mut() {
        via.sort();
    }
}

/// A VirtualService reached through gateway `gw`, added to `list` once with every gateway
/// it came through.
pub(crate) fn add_via(list: &mut Vec<(ResolvedVs, Vec<String>)>, rvs: &ResolvedVs, gw: &ConfigKey) {
    let via = format!("{}/{}", gw.namespace, gw.name);
    match list.iter_mut().find(|(v, _)| v.vs.key == rvs.vs.key) {
        Some((_, gws)) if !gws.contains(&via) => gws.push(via),
        Some(_) => {}
        None => list.push((rvs.clone(), vec![via])),
    }
}
