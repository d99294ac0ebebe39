//! Gateway proxies (routers). In: router scopes (each names the Gateways selecting it),
//! Gateways, VirtualServices and their resolved form, and TLS Secrets. Out: each router
//! scope's listeners, routes and SDS secrets, with the Gateways, VirtualServices and Secrets
//! each was built from, and the errors of servers that cannot be served (fail closed).
//!
//! A scope joins only the Secrets its servers name (`credentialName` and its `-cacert`
//! companion) in its own namespace (a Gateway API certificate a ReferenceGrant allows: in
//! its own), so a Secret change reaches only the gateways using it.

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
    /// The idle timeout of a host the TCP and TLS routes go to, where its rule sets one.
    Idle(Hostname, TcpTimeout),
    Secret(TlsSecret),
    /// An outbound cluster of the scope, for its AUTO_PASSTHROUGH servers.
    Cluster(String),
}

/// The Secrets (namespace, name) a Gateway's servers may take from a workload in `ns` (or,
/// for a Gateway API certificate a ReferenceGrant allows, from its own namespace).
pub(super) fn wanted_secrets(ns: &str, gw: &Gateway) -> Vec<(String, String)> {
    gw.servers
        .iter()
        .filter_map(|s| s.tls.as_deref()?.credential.as_ref()?.secret(ns))
        .flat_map(|(ns, name)| {
            [
                (ns.to_string(), name.to_string()),
                (ns.to_string(), format!("{name}-cacert")),
            ]
        })
        .collect()
}

#[allow(clippy::too_many_arguments)] // the router inputs, each its own collection
pub(super) fn routers<'s>(
    scopes: &Coll<'s, ScopeKey>,
    gateways: Coll<'s, (ConfigKey, Gateway)>,
    vss: Coll<'s, (ConfigKey, VirtualService)>,
    resolved: Coll<'s, (ConfigKey, ResolvedVs)>,
    hashing: &Coll<'s, ((ScopeKey, Hostname), HostHashing)>,
    tcp_idle: &Coll<'s, ((ScopeKey, Hostname), TcpTimeout)>,
    secrets: &Coll<'s, ((String, String), TlsSecret)>,
    clusters: &Coll<'s, (ScopeKey, Resource)>,
    services: &Coll<'s, (Hostname, HostServices)>,
) -> (
    Built<'s, ScopeKey>,
    Coll<'s, ConfigError>,
    Coll<'s, ScopeKey>,
) {
    let router_gw = scopes.clone().flat_map(|s| match &s {
        ScopeKey::Router { gateways, .. } => {
            gateways.iter().map(|g| (g.clone(), s.clone())).collect()
        }
        _ => Vec::new(),
    });
    let router_gws = router_gw
        .clone()
        .join_map(gateways.clone(), |_, s, gw| (s.clone(), gw.clone()));
    // Routers with an `ISTIO_MUTUAL` server: their proxies need their workload identity.
    let mtls_scopes = router_gws
        .clone()
        .filter(|(_, gw)| gw.uses_istio_mutual())
        .map(|(s, _)| s)
        .distinct();
    let router_secret_items = router_gws
        .clone()
        .flat_map(|(s, gw)| {
            wanted_secrets(s.namespace(), &gw)
                .into_iter()
                .map(move |k| (k, s.clone()))
                .collect::<Vec<_>>()
        })
        .distinct()
        .join_map(secrets.clone(), |_, s, secret| {
            (s.clone(), GwItem::Secret(secret.clone()))
        });
    // Routers with an AUTO_PASSTHROUGH server take the names of their outbound clusters
    // (only those: the others never depend on them).
    let auto_scopes = router_gws
        .clone()
        .filter(|(_, gw)| gw.uses_auto_passthrough())
        .map(|(s, _)| s)
        .distinct();
    let router_cluster_items = clusters
        .clone()
        .filter(|(_, r)| r.rtype == ResourceType::Cluster && r.name.starts_with("outbound|"))
        .map(|(s, r)| (s, r.name))
        .semijoin(auto_scopes)
        .map(|(s, name)| {
            (
                crate::translate::outbound_cluster_host(&name).to_string(),
                (s, name),
            )
        })
        // Not those of services outside the mesh, as Istio's AUTO_PASSTHROUGH servers (the
        // service the gateway's namespace gets).
        .join_map(services.clone(), |h, (s, name), set| {
            set.for_namespace(s.namespace())
                .is_some_and(|svc| !svc.mesh_external)
                .then(|| (s.clone(), (h.clone(), name.clone())))
        })
        .flat_map(|x| x);
    // The hosts of those clusters: their AUTO_PASSTHROUGH chains take the hosts' TCP limits.
    let auto_hosts = router_cluster_items
        .clone()
        .map(|(s, (h, _))| ((s, h), ()))
        .distinct();
    let router_cluster_items =
        router_cluster_items.map(|(s, (_, name))| (s, GwItem::Cluster(name)));
    let router_gw_items = router_gws.clone().map(|(s, gw)| (s, GwItem::Gateway(gw)));
    let vs_by_gw = vss.flat_map(|(k, vs)| {
        vs.gateways
            .iter()
            .filter_map(rules::gateway_ref_str)
            .map(|g| (g, k.clone()))
            .collect::<Vec<_>>()
    });
    // Each VirtualService bound to a Gateway of a scope, by that Gateway.
    let bound = router_gw
        .join_map(vs_by_gw, |g, s, vk| (vk.clone(), (s.clone(), g.clone())))
        .join_map(resolved, |_, (s, g), rvs| {
            (g.clone(), (s.clone(), rvs.clone()))
        });
    let http_routes = super::router_routes::http(&router_gws, &bound, &gateways, hashing);
    // The scope's other resources take the VirtualServices of the Gateways with servers
    // other than plain HTTP only: an HTTPRoute's edit does not rebuild them.
    let beyond_http = gateways
        .filter(|(_, gw)| gw.serves_beyond_http())
        .map(|(k, _)| k);
    let router_vs_items = bound
        .semijoin(beyond_http)
        .map(|(g, (s, rvs))| (s, GwItem::Vs(g, rvs)));
    let router_hash_items = router_vs_items
        .clone()
        .flat_map(|(s, item)| match item {
            GwItem::Vs(_, rvs) => crate::translate::route::routed_hosts_of(&rvs)
                .into_iter()
                .map(|h| ((s.clone(), h), ()))
                .collect(),
            _ => Vec::new(),
        })
        .distinct()
        .join_map(hashing.clone(), |(s, h), _, hh| {
            (s.clone(), GwItem::Hash(h.clone(), hh.clone()))
        });
    let router_idle_items = router_vs_items
        .clone()
        .flat_map(|(s, item)| match item {
            GwItem::Vs(_, rvs) => {
                let tcp = rvs.vs.tcp.iter().flat_map(|r| r.route.iter());
                let tls = rvs.vs.tls.iter().flat_map(|r| r.route.iter());
                tcp.chain(tls)
                    .map(|d| ((s.clone(), d.host.clone()), ()))
                    .collect()
            }
            _ => Vec::new(),
        })
        .concat(auto_hosts)
        .distinct()
        .join_map(tcp_idle.clone(), |(s, h), _, ms| {
            (s.clone(), GwItem::Idle(h.clone(), *ms))
        });
    // A router's resources depend on all its Gateways and VirtualServices together (servers
    // of several Gateways share a port), so they are built from the scope's whole group.
    let router_out = router_gw_items
        .concat(router_vs_items)
        .concat(router_hash_items)
        .concat(router_idle_items)
        .concat(router_secret_items)
        .concat(router_cluster_items)
        .reduce(|s, vals: &[(&GwItem, isize)], out| {
            let built = resources(s, vals);
            out.extend(built.resources.into_iter().map(|r| (Ok(r), 1isize)));
            out.extend(built.errors.into_iter().map(|e| (Err(e), 1isize)));
        });
    let errors = router_out.clone().flat_map(|(_, r)| r.err()).distinct();
    let router_out = router_out.flat_map(|(s, r)| r.ok().map(|r| (s, r)));
    let provenance = router_out.clone().flat_map(|(s, (r, inputs))| {
        let key = (Holder::Scope(s), r.rtype, r.name);
        inputs
            .into_iter()
            .map(move |k| (key.clone(), k))
            .collect::<Vec<_>>()
    });
    let built = Built {
        resources: router_out.map(|(s, (r, _))| (s, r)),
        provenance,
    };
    (built.concat(http_routes), errors, mtls_scopes)
}

/// One router scope's resources but its HTTP route configurations
/// ([`super::router_routes`]), each with its inputs, sorted and deduplicated, and its
/// errors.
fn resources(s: &ScopeKey, vals: &[(&GwItem, isize)]) -> assemble::Router {
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
    let idle: TcpTimeouts = vals
        .iter()
        .filter_map(|(v, _)| match v {
            GwItem::Idle(h, ms) => Some((h.clone(), *ms)),
            _ => None,
        })
        .collect();
    let secrets: Vec<&TlsSecret> = vals
        .iter()
        .filter_map(|(v, _)| match v {
            GwItem::Secret(s) => Some(s),
            _ => None,
        })
        .collect();
    let clusters: Vec<String> = vals
        .iter()
        .filter_map(|(v, _)| match v {
            GwItem::Cluster(name) => Some(name.clone()),
            _ => None,
        })
        .collect();
    let mut out = assemble::router_servers(
        s.source(),
        s.namespace(),
        &gws,
        &vss,
        &secrets,
        &hashing,
        &idle,
        &clusters,
        s.gateway_ports(),
    );
    // One record per resource, whatever the number of servers that built it (a Secret two
    // Gateways' servers name is built twice, with different inputs): the scope's resources
    // are a set downstream, and a second copy would make one server's removal retract it.
    out.resources.sort();
    out.resources.dedup_by(|b, a| {
        if a.0 == b.0 {
            a.1.append(&mut b.1);
            true
        } else {
            false
        }
    });
    out
}
