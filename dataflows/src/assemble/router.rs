//! A gateway proxy's (a router's) resources: the listeners of its Gateways' HTTP and TCP
//! servers, their route configurations, and those of its TLS servers (`router_tls.rs`),
//! each with the Gateways, VirtualServices and Secrets it was built from.

use super::binding::{add_via, listen_port, server_vhosts, sort_vhosts, Listeners};
use super::router_tls;
use crate::model::*;
use crate::rules::{exported_to, gateway_domain};
use crate::translate::{listener, route, tcp};
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
    // As Istio (`VirtualServicesForGateway` of the proxy's namespace): a VirtualService bound
    // to a Gateway serves the gateway proxies of the namespaces it is exported to, wherever
    // the Gateway resource itself lives.
    let vss: Vec<(&ConfigKey, &ResolvedVs)> = vss
        .iter()
        .filter(|(_, rvs)| exported_to(&rvs.vs.export_to, &rvs.vs.key.namespace, namespace))
        .copied()
        .collect();
    let vss = vss.as_slice();
    let mut listeners: BTreeMap<(String, u16), BTreeSet<ConfigKey>> = BTreeMap::new();
    // Per address and port listened on: the route configuration's name and the server port
    // its routes are built for (the first server's, where several ports listen on one);
    // per domain, the VirtualServices with the gateways they came through; the domains an
    // `httpsRedirect` server sends to https.
    let mut routes: BTreeMap<(String, u16), HttpRoutes> = BTreeMap::new();
    let mut route_inputs: BTreeMap<(String, u16), BTreeSet<ConfigKey>> = BTreeMap::new();
    for gw in gateways {
        for server in gw.servers.iter().filter(|s| s.protocol.is_http()) {
            let addr = server.bind.clone().unwrap_or_else(|| "0.0.0.0".into());
            let key = (addr, listen_port(ports, server.port));
            listeners
                .entry(key.clone())
                .or_default()
                .insert(gw.key.clone());
            let inputs = route_inputs.entry(key.clone()).or_default();
            inputs.insert(gw.key.clone());
            let HttpRoutes {
                vhosts, redirect, ..
            } = routes.entry(key.clone()).or_insert_with(|| HttpRoutes {
                name: http_route_name(key.1, server.bind.as_deref()),
                port: server.port,
                vhosts: Default::default(),
                redirect: Default::default(),
            });
            let domains = server_vhosts(gw, server, vss, inputs, vhosts);
            if server.https_redirect {
                // Istio redirects a server's hosts even where no VirtualService serves them.
                for host in server.hosts.iter() {
                    let bare = host.split_once('/').map_or(host.as_str(), |(_, h)| h);
                    vhosts.entry(bare.to_string()).or_default();
                    redirect.insert(bare.to_string());
                }
                redirect.extend(domains);
            }
        }
    }
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
    let mut out: Vec<(Resource, BTreeSet<ConfigKey>)> = Vec::new();
    for ((addr, port), inputs) in listeners {
        if let Some(r) = routes.get(&(addr.clone(), port)) {
            out.push((
                listener::http_listener(&addr, port, true, &r.name, true),
                inputs,
            ));
        }
    }
    out.extend(tcp_listeners);
    out.extend(tls.resources);
    for (key, mut r) in routes {
        sort_vhosts(&mut r.vhosts);
        let inputs = route_inputs.remove(&key).unwrap_or_default();
        out.push((
            route::gateway_route_config(&r.name, r.port, source, &r.vhosts, &r.redirect, hashing),
            inputs,
        ));
    }
    Router {
        resources: out,
        errors,
    }
}

/// The HTTP routes of a router's listener (see [`router_resources`]).
struct HttpRoutes {
    name: String,
    port: u16,
    vhosts: route::GatewayVhosts,
    redirect: BTreeSet<String>,
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
