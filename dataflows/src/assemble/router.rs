//! A gateway proxy's (a router's) resources: the listeners of its Gateways' HTTP and TCP
//! servers, their route configurations, and those of its TLS servers (`router_tls.rs`),
//! each with the Gateways, VirtualServices and Secrets it was built from.

use super::binding::{add_via, listen_port, sort_vhosts, Listeners};
use super::router_tls;
use crate::model::*;
use crate::rules::{exported_to, gateway_domain};
use crate::translate::{listener, route, tcp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What a gateway proxy holds, each resource with the Gateways, VirtualServices and
/// Secrets it was built from, and what its servers cannot be served for.
#[derive(Default)]
pub struct Router {
    pub resources: Vec<(Resource, BTreeSet<ConfigKey>)>,
    pub errors: Vec<ConfigError>,
}

/// Listeners, route configurations and SDS secrets of a gateway proxy in `namespace`
/// selected by `gateways`, with the VirtualServices bound to each gateway (`(gateway, vs)`
/// pairs) and the Secrets of that namespace its servers name.
/// `hashing`: the consistent-hash keys of the hosts the routes go to; `idle`: the idle
/// timeouts of the hosts TCP and TLS routes go to; `source`: who the
/// proxies are, for the routes' source conditions; `clusters`: the names of the scope's
/// outbound clusters, for AUTO_PASSTHROUGH servers (the dataflow gives them only to scopes
/// with one).
/// `ports`: where servers of each port listen ([`ScopeKey::gateway_ports`]): listeners
/// and the `http.PORT` route configurations are named for the port listened on, while the
/// routes themselves (their `port` matches, virtual host names, `FROM_REQUEST_PORT`
/// redirects) and HTTPS route configurations keep the server's port, as Istio builds them.
#[allow(clippy::too_many_arguments)] // the router's inputs, each of its own kind
pub fn router_resources(
    source: Source,
    namespace: &str,
    gateways: &[&Gateway],
    vss: &[(&ConfigKey, &ResolvedVs)],
    secrets: &[&TlsSecret],
    hashing: &Hashing,
    idle: &TcpTimeouts,
    clusters: &[String],
    ports: &[(u16, u16)],
) -> Router {
    let mut out = router_servers(
        source, namespace, gateways, vss, secrets, hashing, idle, clusters, ports,
    );
    out.resources.extend(http_route_resources(
        source, namespace, gateways, vss, hashing, ports,
    ));
    out
}

/// What [`router_resources`] gives but the route configurations of the HTTP servers: the
/// dataflow builds those one virtual host at a time (`flow/router_routes.rs`).
#[allow(clippy::too_many_arguments)] // the router's inputs, each of its own kind
pub fn router_servers(
    source: Source,
    namespace: &str,
    gateways: &[&Gateway],
    vss: &[(&ConfigKey, &ResolvedVs)],
    secrets: &[&TlsSecret],
    hashing: &Hashing,
    idle: &TcpTimeouts,
    clusters: &[String],
    ports: &[(u16, u16)],
) -> Router {
    // As Istio (`VirtualServicesForGateway` of the proxy's namespace): a VirtualService bound
    // to a Gateway serves the gateway proxies of the namespaces it is exported to, wherever
    // the Gateway resource itself lives.
    let vss: Vec<(&ConfigKey, &ResolvedVs)> = vss
        .iter()
        .filter(|(_, rvs)| exported_to(&rvs.vs.export_to, &rvs.vs.key.namespace, namespace))
        .copied()
        .collect();
    let vss = vss.as_slice();
    let configs = http_route_configs(gateways, ports);
    let listeners: Listeners = configs
        .iter()
        .map(|(at, (_, gws))| (at.clone(), gws.clone()))
        .collect();
    let tls = router_tls::servers(
        source, namespace, gateways, vss, secrets, hashing, idle, &listeners, clusters, ports,
    );
    let mut errors = tls.errors;
    let tcp_listeners = gateway_tcp_listeners(
        source,
        gateways,
        vss,
        idle,
        (&listeners, &tls.ports),
        ports,
        &mut errors,
    );
    let mut out: Vec<(Resource, BTreeSet<ConfigKey>)> = configs
        .into_iter()
        .map(|((addr, port), (rc, inputs))| {
            let l = listener::http_listener(&addr, port, true, &rc.name, true);
            (l, inputs)
        })
        .collect();
    out.extend(tcp_listeners);
    out.extend(tls.resources);
    Router {
        resources: out,
        errors,
    }
}

/// The route configurations of a router's HTTP servers, each with the Gateways and
/// VirtualServices it was built from.
fn http_route_resources(
    source: Source,
    namespace: &str,
    gateways: &[&Gateway],
    vss: &[(&ConfigKey, &ResolvedVs)],
    hashing: &Hashing,
    ports: &[(u16, u16)],
) -> Vec<(Resource, BTreeSet<ConfigKey>)> {
    let mut routes = http_route_configs(gateways, ports);
    // Per route configuration: each domain's VirtualServices with the gateways they came
    // through, and the domains an `httpsRedirect` server sends to https.
    let mut vhosts: BTreeMap<(String, u16), (route::GatewayVhosts, BTreeSet<String>)> =
        BTreeMap::new();
    for gw in gateways {
        for (_, rvs) in vss.iter().filter(|(k, _)| **k == gw.key) {
            for p in http_placements(gw, rvs, namespace, ports) {
                if let Some((_, inputs)) = routes.get_mut(&p.at) {
                    inputs.insert(rvs.vs.key.clone());
                }
                let (domains, redirect) = vhosts.entry(p.at).or_default();
                add_via(domains.entry(p.domain.clone()).or_default(), rvs, &gw.key);
                if p.https_redirect {
                    redirect.insert(p.domain);
                }
            }
        }
        for (at, host) in https_redirect_hosts(gw, ports) {
            let (domains, redirect) = vhosts.entry(at).or_default();
            domains.entry(host.clone()).or_default();
            redirect.insert(host);
        }
    }
    routes
        .into_iter()
        .map(|(at, (rc, inputs))| {
            let (mut domains, redirect) = vhosts.remove(&at).unwrap_or_default();
            sort_vhosts(&mut domains);
            let r = route::gateway_route_config(
                &rc.name,
                rc.port,
                false,
                source,
                &domains,
                &redirect,
                &BTreeSet::new(),
                hashing,
            );
            (r, inputs)
        })
        .collect()
}

/// The route configuration a router's HTTP servers on one address and port listened on
/// share.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HttpRouteConfig {
    /// `http.PORT`, or `http.PORT.BIND` ([`http_route_name`]).
    pub name: String,
    /// The server port its routes are built for: the first server's, where servers of
    /// several ports listen on one.
    pub port: u16,
}

/// Per address and port listened on by a router's HTTP servers: their route configuration,
/// and the Gateways with a server there (what its listener is built from).
pub fn http_route_configs(
    gateways: &[&Gateway],
    ports: &[(u16, u16)],
) -> BTreeMap<(String, u16), (HttpRouteConfig, BTreeSet<ConfigKey>)> {
    let mut out: BTreeMap<(String, u16), (HttpRouteConfig, BTreeSet<ConfigKey>)> = BTreeMap::new();
    for gw in gateways {
        for server in gw.servers.iter().filter(|s| s.protocol.is_http()) {
            let (addr, listen) = server_at(server, ports);
            let (_, inputs) = out.entry((addr, listen)).or_insert_with(|| {
                let rc = HttpRouteConfig {
                    name: http_route_name(listen, server.bind.as_deref()),
                    port: server.port,
                };
                (rc, BTreeSet::new())
            });
            inputs.insert(gw.key.clone());
        }
    }
    out
}

/// One domain a VirtualService is served on by an HTTP server of a router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpPlacement {
    /// Where the server listens (address, port listened on): its route configuration.
    pub at: (String, u16),
    pub domain: String,
    /// The server redirects plaintext requests to https (`httpsRedirect`).
    pub https_redirect: bool,
}

/// Where `rvs`, bound to `gw`, is served by `gw`'s HTTP servers on a router in `namespace`:
/// a domain per server host that takes one of its hosts; none if the VirtualService is not
/// exported to that namespace.
pub fn http_placements(
    gw: &Gateway,
    rvs: &ResolvedVs,
    namespace: &str,
    ports: &[(u16, u16)],
) -> Vec<HttpPlacement> {
    if !exported_to(&rvs.vs.export_to, &rvs.vs.key.namespace, namespace) {
        return Vec::new();
    }
    let vs_ns = &rvs.vs.key.namespace;
    let mut out = Vec::new();
    for server in gw.servers.iter().filter(|s| s.protocol.is_http()) {
        for vs_host in &rvs.vs.hosts {
            for server_host in &server.hosts {
                if let Some(domain) = gateway_domain(server_host, &gw.key.namespace, vs_ns, vs_host)
                {
                    out.push(HttpPlacement {
                        at: server_at(server, ports),
                        domain,
                        https_redirect: server.https_redirect,
                    });
                }
            }
        }
    }
    out
}

/// The hosts `gw`'s `httpsRedirect` HTTP servers redirect, where each listens: Istio gives
/// each a virtual host that redirects, even where no VirtualService serves it.
pub fn https_redirect_hosts(gw: &Gateway, ports: &[(u16, u16)]) -> Vec<((String, u16), String)> {
    gw.servers
        .iter()
        .filter(|s| s.protocol.is_http() && s.https_redirect)
        .flat_map(|server| {
            server.hosts.iter().map(|host| {
                let bare = host.split_once('/').map_or(host.as_str(), |(_, h)| h);
                (server_at(server, ports), bare.to_string())
            })
        })
        .collect()
}

/// The address and port a server listens on.
fn server_at(server: &GatewayServer, ports: &[(u16, u16)]) -> (String, u16) {
    let addr = server.bind.clone().unwrap_or_else(|| "0.0.0.0".into());
    (addr, listen_port(ports, server.port))
}

/// The route configuration of a router's HTTP servers listening on `port` (at `bind`, if
/// they bind): `http.PORT`, or `http.PORT.BIND`, as Istio names it.
fn http_route_name(port: u16, bind: Option<&str>) -> String {
    match bind {
        Some(b) => format!("http.{port}.{b}"),
        None => format!("http.{port}"),
    }
}

/// The listeners of TCP servers (no `tls`), per address and port, from the `tcp` routes of
/// the VirtualServices bound to their Gateway whose hosts the server serves. A port an HTTP
/// server already holds stays HTTP: one listener cannot be both without telling the
/// protocols apart, which Istio does not do at a gateway either.
/// `taken`: the listeners of HTTP servers, and of TLS ones, by address and port listened on.
fn gateway_tcp_listeners(
    source: Source,
    gateways: &[&Gateway],
    vss: &[(&ConfigKey, &ResolvedVs)],
    idle: &TcpTimeouts,
    taken: (&Listeners, &Listeners),
    ports: &[(u16, u16)],
    errors: &mut Vec<ConfigError>,
) -> Vec<(Resource, BTreeSet<ConfigKey>)> {
    // Per address and port listened on: the server port its routes match (the first
    // server's), the VirtualServices with the gateways they came through, the inputs.
    type Servers =
        BTreeMap<(String, u16), (u16, Vec<(ResolvedVs, Vec<String>)>, BTreeSet<ConfigKey>)>;
    let (http, tls) = taken;
    let mut servers: Servers = BTreeMap::new();
    for gw in gateways {
        for server in gw.servers.iter().filter(|s| s.protocol == Protocol::Tcp) {
            let addr = server.bind.clone().unwrap_or_else(|| "0.0.0.0".into());
            let key = (addr, listen_port(ports, server.port));
            // A clash within one Gateway is left out (and said) when it is read.
            if let Some(holders) = http.get(&key) {
                if !holders.contains(&gw.key) {
                    errors.extend(ConfigError::port_clash(gw, server, holders, "HTTP"));
                }
                continue;
            }
            if let Some(holders) = tls.get(&key) {
                errors.extend(ConfigError::port_clash(gw, server, holders, "HTTPS/TLS"));
                continue;
            }
            let (_, list, inputs) = servers
                .entry(key)
                .or_insert_with(|| (server.port, Vec::new(), BTreeSet::new()));
            inputs.insert(gw.key.clone());
            for (_, rvs) in vss.iter().filter(|(k, _)| **k == gw.key) {
                let vs_ns = &rvs.vs.key.namespace;
                let serves = rvs.vs.hosts.iter().any(|h| {
                    server
                        .hosts
                        .iter()
                        .any(|sh| gateway_domain(sh, &gw.key.namespace, vs_ns, h).is_some())
                });
                if serves {
                    inputs.insert(rvs.vs.key.clone());
                    add_via(list, rvs, &gw.key);
                }
            }
        }
    }
    let mut out = Vec::new();
    for ((addr, listen), (port, mut list, inputs)) in servers {
        list.sort_by(|a, b| a.0.vs.key.cmp(&b.0.vs.key));
        for (_, via) in list.iter_mut() {
            via.sort();
        }
        let pairs: Vec<(&ResolvedVs, &[String])> =
            list.iter().map(|(v, g)| (v, g.as_slice())).collect();
        if let Some(l) = tcp::gateway_listener(&addr, (listen, port), &pairs, source, idle) {
            out.push((l, inputs));
        }
    }
    out
}
