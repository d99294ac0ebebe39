//! Gateway proxies' HTTP route configurations (`http.PORT`), one virtual host at a time.
//! In: router scopes' Gateways, the VirtualServices bound to them, hash keys. Out: each
//! route configuration with the Gateways and VirtualServices it was built from.
//!
//! A gateway's route configuration can hold thousands of virtual hosts (one per HTTPRoute
//! hostname). Each virtual host is built and encoded in a group of its own (scope, route
//! configuration, domain), and the route configuration is assembled from those bytes: a
//! route's edit rebuilds its own virtual host and copies the others', instead of
//! translating every VirtualService of the gateway again.

use super::{Built, Coll};
use crate::assemble::{self, HttpRouteConfig};
use crate::model::*;
use crate::translate::route;
use prost::Message;
use serde::{Deserialize, Serialize};

/// A row of one virtual host.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum VhostRow {
    /// A VirtualService serving the domain, through the Gateway keyed.
    Vs(ResolvedVs, ConfigKey),
    /// An `httpsRedirect` server serves the domain: plaintext requests get a 301.
    Redirect,
    /// The hash keys of a host the virtual host's routes go to.
    Hash(Hostname, HostHashing),
}

/// A row of one route configuration: it exists (some HTTP server listens for it), or one
/// of its virtual hosts, encoded, by domain (the order they are served in).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum ConfigRow {
    Exists,
    Vhost(String, Vec<u8>),
}

/// (scope, route configuration name, server port, domain).
type VhostKey = (ScopeKey, String, u16, String);

/// The HTTP route configurations of router scopes. `router_gws`: each scope's Gateways;
/// `bound`: each VirtualService bound to a Gateway of a scope, by that Gateway's key;
/// `gateways`: the Gateways by key; `hashing`: the hash keys of hosts, per scope.
pub(super) fn http<'s>(
    router_gws: &Coll<'s, (ScopeKey, Gateway)>,
    bound: &Coll<'s, (ConfigKey, (ScopeKey, ResolvedVs))>,
    gateways: &Coll<'s, (ConfigKey, Gateway)>,
    hashing: &Coll<'s, ((ScopeKey, Hostname), HostHashing)>,
) -> Built<'s, ScopeKey> {
    // Each scope's route configurations, from its Gateways alone.
    let configs = router_gws
        .clone()
        .reduce(|s, vals: &[(&Gateway, isize)], out| {
            let gws: Vec<&Gateway> = vals.iter().map(|(g, _)| *g).collect();
            for (at, (rc, inputs)) in assemble::http_route_configs(&gws, s.gateway_ports()) {
                out.push(((at, rc, inputs), 1isize));
            }
        });
    let config_at = configs
        .clone()
        .map(|(s, ((addr, listen), rc, _))| ((s, addr, listen), rc));
    let config_provenance = configs.flat_map(|(s, (_, rc, gws))| {
        let key = (Holder::Scope(s), ResourceType::Route, rc.name);
        gws.into_iter()
            .map(move |g| (key.clone(), g))
            .collect::<Vec<_>>()
    });

    // Where each VirtualService is served (address, port listened on, domain), and the
    // hosts `httpsRedirect` servers redirect, by where they listen.
    let placed = bound
        .clone()
        .join_map(gateways.clone(), |g, (s, rvs), gw| {
            assemble::http_placements(gw, rvs, s.namespace(), s.gateway_ports())
                .into_iter()
                .map(|p| {
                    let at = (s.clone(), p.at.0, p.at.1);
                    (
                        at,
                        (p.domain, p.https_redirect, Some((rvs.clone(), g.clone()))),
                    )
                })
                .collect::<Vec<_>>()
        })
        .flat_map(|rows| rows);
    let redirects = router_gws.clone().flat_map(|(s, gw)| {
        assemble::https_redirect_hosts(&gw, s.gateway_ports())
            .into_iter()
            .map(|((addr, listen), host)| ((s.clone(), addr, listen), (host, true, None)))
            .collect::<Vec<_>>()
    });
    let rows = placed.concat(redirects).join_map(
        config_at.clone(),
        |(s, _, _), (domain, redirect, vs), rc| {
            let key: VhostKey = (s.clone(), rc.name.clone(), rc.port, domain.clone());
            (key, (*redirect, vs.clone()))
        },
    );
    let vs_provenance = rows.clone().flat_map(|((s, name, _, _), (_, vs))| {
        vs.map(|(rvs, _)| ((Holder::Scope(s), ResourceType::Route, name), rvs.vs.key))
    });
    let vhost_rows = rows.flat_map(|(key, (redirect, vs))| {
        let redirect = redirect.then(|| (key.clone(), VhostRow::Redirect));
        let vs = vs.map(|(rvs, g)| (key, VhostRow::Vs(rvs, g)));
        redirect.into_iter().chain(vs)
    });
    // The hash keys of the hosts each virtual host's routes go to.
    let hash_rows = vhost_rows
        .clone()
        .flat_map(|(key, row)| match row {
            VhostRow::Vs(rvs, _) => route::routed_hosts_of(&rvs)
                .into_iter()
                .map(|h| ((key.0.clone(), h), key.clone()))
                .collect(),
            _ => Vec::new(),
        })
        .distinct()
        .join_map(hashing.clone(), |(_, h), key, hh| {
            (key.clone(), VhostRow::Hash(h.clone(), hh.clone()))
        });
    let vhosts =
        vhost_rows
            .concat(hash_rows)
            .reduce(|key: &VhostKey, vals: &[(&VhostRow, isize)], out| {
                if let Some(bytes) = vhost(key, vals) {
                    out.push((bytes, 1isize));
                }
            });

    let resources = vhosts
        .map(|((s, name, _, domain), bytes)| ((s, name), ConfigRow::Vhost(domain, bytes)))
        .concat(
            config_at
                .map(|((s, _, _), rc): (_, HttpRouteConfig)| ((s, rc.name), ConfigRow::Exists)),
        )
        .reduce(|(_, name), vals: &[(&ConfigRow, isize)], out| {
            if !vals.iter().any(|(r, _)| **r == ConfigRow::Exists) {
                return;
            }
            let vhosts = vals.iter().filter_map(|(r, _)| match r {
                ConfigRow::Vhost(_, bytes) => Some(bytes.as_slice()),
                ConfigRow::Exists => None,
            });
            out.push((route::gateway_route_config_of(name, vhosts), 1isize));
        })
        .map(|((s, _), r)| (s, r));
    Built {
        resources,
        provenance: config_provenance.concat(vs_provenance).distinct(),
    }
}

/// One virtual host, encoded, from its rows; none if no VirtualService or redirect makes
/// it (hash keys alone do not).
fn vhost((s, _, port, domain): &VhostKey, vals: &[(&VhostRow, isize)]) -> Option<Vec<u8>> {
    let mut list = Vec::new();
    let mut redirect = false;
    let mut hashing = Hashing::new();
    for (row, _) in vals {
        match row {
            VhostRow::Vs(rvs, g) => assemble::add_via(&mut list, rvs, g),
            VhostRow::Redirect => redirect = true,
            VhostRow::Hash(h, hh) => {
                hashing.insert(h.clone(), hh.clone());
            }
        }
    }
    if list.is_empty() && !redirect {
        return None;
    }
    assemble::sort_vhost(&mut list);
    let vh = route::gateway_vhost(domain, *port, false, s.source(), &list, redirect, &hashing);
    Some(vh.encode_to_vec())
}
