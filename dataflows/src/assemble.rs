//! Scope-level assembly shared by the dataflow and the naive recompute: given the inputs a
//! scope sees, which resources it holds. The dataflow decides *what* each scope sees
//! incrementally; these functions decide what that means in Envoy terms.

use crate::model::*;
use crate::rules::{egress_bind, egress_listeners, exported_to, gateway_domain};
use crate::translate::tcp::{OutboundPort, TcpTarget};
use crate::translate::{cluster, listener, route, tcp};
use std::collections::{BTreeMap, BTreeSet};

/// Clusters every proxy of a scope holds whatever it sees. Gateways have no original
/// destination listeners, so only sidecars get `PassthroughCluster`; proxyless clients
/// name every cluster they use, so they need neither.
pub fn fixed_clusters(scope: &ScopeKey, connect_timeout_ms: u64) -> Vec<Resource> {
    match scope {
        ScopeKey::Sidecar {
            proxyless: true, ..
        } => Vec::new(),
        ScopeKey::Sidecar { .. } => vec![
            cluster::passthrough(connect_timeout_ms),
            cluster::blackhole(),
        ],
        ScopeKey::Router { .. } => vec![cluster::blackhole()],
    }
}

/// Resource `r` as proxies whose node metadata says `IDLE_TIMEOUT` (`idle_ns`) get it: a
/// listener with their idle timeout ([`listener::with_idle_timeout`]); anything else, and
/// anything for proxies without one, as built. Applied to every listener of a scope
/// ([`ScopeKey::idle_timeout_ns`]) and to a proxy's own `virtualInbound`.
pub fn apply_idle_timeout(idle_ns: Option<u64>, r: Resource) -> Resource {
    match idle_ns {
        Some(ns) if r.rtype == ResourceType::Listener => listener::with_idle_timeout(&r, ns),
        _ => r,
    }
}

/// Listeners of a sidecar scope that do not depend on services: one per explicit egress
/// listener, plus `virtualOutbound` where traffic is captured, and the listeners and
/// clusters of its `ingress`. Proxyless clients have no
/// sockets to listen on.
pub fn sidecar_fixed_listeners(
    spec: &ScopeSpec,
    interception_none: bool,
    proxyless: bool,
) -> Vec<Resource> {
    let mut out = Vec::new();
    if proxyless {
        return out;
    }
    for l in egress_listeners(spec.sidecar.as_ref()) {
        if let Some(port) = &l.port {
            if port.protocol.is_http() {
                let (addr, bind) = egress_bind(&l, interception_none);
                out.push(listener::http_listener(
                    &addr,
                    port.number,
                    bind,
                    &port.number.to_string(),
                    true,
                ));
            }
        }
    }
    if !interception_none {
        out.push(listener::virtual_outbound(&spec.outbound_fallback()));
    }
    out.extend(sidecar_ingress(spec, interception_none));
    out
}

/// The listeners of the Sidecar's `ingress` the proxy binds itself; a captured proxy reaches
/// the port's cluster through `virtualInbound`.
fn sidecar_ingress(spec: &ScopeSpec, interception_none: bool) -> Vec<Resource> {
    spec.sidecar
        .iter()
        .flat_map(|s| &s.ingress)
        .filter(|l| interception_none || l.capture_none)
        .map(|l| {
            let addr = l.bind.as_deref().unwrap_or("0.0.0.0");
            listener::ingress_listener(addr, l.inbound(), spec.detection_timeout_ms)
        })
        .collect()
}

/// The Sidecar's `ingress` ports, each with whether a captured proxy reaches it through
/// `virtualInbound` (not `captureMode: NONE`, which binds a listener of its own).
pub fn ingress_ports(spec: &ScopeSpec) -> Vec<(InboundPort, bool)> {
    spec.sidecar
        .iter()
        .flat_map(|s| &s.ingress)
        .map(|l| (l.inbound(), !l.capture_none))
        .collect()
}

/// What the inbound cluster of a proxy's `port` is built from, if it has one: its
/// Sidecar's `ingress` listener for the port (to its `defaultEndpoint`), else — unless the
/// Sidecar has `ingress` listeners, which replace the proxy's own ports, as in Istio — the
/// service port `own` reaching it (to the application on loopback). Its connection pool:
/// the Sidecar's for the port ([`SidecarInbound::pool`]), else that of `rule`, the pools of
/// the DestinationRule of `own`'s host ([`inbound_pool_at`] the service port, or for an
/// `ingress` listener at its port, as Istio looks it up).
pub fn inbound_cluster_spec(
    port: u16,
    own: Option<&OwnPort>,
    sidecar: Option<&SidecarInbound>,
    rule: Option<&InboundRulePools>,
) -> Option<InboundClusterSpec> {
    let ingress = sidecar.and_then(|s| s.ingress.iter().find(|l| l.port == port));
    let replaced = sidecar.is_some_and(|s| !s.ingress.is_empty());
    let (endpoint, protocol, policy_port) = match (ingress, own) {
        (Some(l), _) => (l.endpoint.clone(), l.protocol, l.port),
        (None, Some(o)) if !replaced => {
            (("127.0.0.1".to_string(), port), o.protocol, o.service_port)
        }
        _ => return None,
    };
    let pool = sidecar
        .and_then(|s| s.pool(port))
        .or_else(|| own.and(rule).and_then(|r| inbound_pool_at(r, policy_port)))
        .cloned();
    Some(InboundClusterSpec {
        port,
        endpoint,
        protocol,
        pool,
        fail_closed: ingress.and_then(|l| l.fail_closed.clone()),
    })
}

/// Route configuration names an explicit egress listener needs even with no services
/// (none for proxyless clients: their routes exist only for the services they see).
pub fn sidecar_fixed_routes(
    spec: &ScopeSpec,
    interception_none: bool,
    proxyless: bool,
) -> Vec<(u16, UnknownHosts)> {
    if proxyless {
        return Vec::new();
    }
    egress_listeners(spec.sidecar.as_ref())
        .iter()
        .filter_map(|l| {
            let port = l.port.as_ref().filter(|p| p.protocol.is_http())?;
            let unknown = if egress_bind(l, interception_none).1 {
                UnknownHosts::None
            } else {
                UnknownHosts::captured(spec)
            };
            Some((port.number, unknown))
        })
        .collect()
}

/// The catch-all outbound listener for a captured port (`0.0.0.0_PORT`, not bound).
pub fn catchall_listener(port: u16) -> Resource {
    listener::http_listener("0.0.0.0", port, false, &port.to_string(), false)
}

/// How a sidecar port's TCP listener is reached and what it does beyond its services'
/// chains: from the egress listener that made them visible and the scope's spec.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct PortListener {
    /// `0.0.0.0`, or the egress listener's `bind`.
    pub addr: String,
    /// Bound itself rather than handed over by `virtualOutbound`.
    pub bind: bool,
    /// Its egress listener names no protocol: every service is told per connection.
    pub detect: bool,
    /// Where connections no service claims go ([`ScopeSpec::outbound_fallback`]).
    pub fallback: String,
    /// The mesh's `protocolDetectionTimeout` ([`ScopeSpec::detection_timeout_ms`]).
    pub detection_ms: Option<u64>,
}

impl PortListener {
    /// A listener as [`crate::rules::sidecar_tcp_ports`] places it (`addr`, `bind`,
    /// `detect`), in a scope of `spec`.
    pub fn new(addr: String, bind: bool, detect: bool, spec: &ScopeSpec) -> PortListener {
        PortListener {
            addr,
            bind,
            detect,
            fallback: spec.outbound_fallback(),
            detection_ms: spec.detection_timeout_ms,
        }
    }
}

/// TCP services a sidecar reaches on one port, and how the port's listener is reached.
pub struct TcpPort<'a> {
    pub how: &'a PortListener,
    pub targets: &'a [TcpTarget],
    /// The idle timeouts of the hosts the port's routes go to.
    pub idle: &'a TcpTimeouts,
}

/// The outbound listener of a sidecar port: the HTTP catch-all alone (`http`: HTTP services
/// need it), or, with TCP services on the port, their chains (and the HTTP one); with the
/// TCP services it cannot reach.
pub fn sidecar_port_listener(
    source: Source,
    port: u16,
    http: bool,
    tcp: Option<TcpPort>,
) -> tcp::SidecarListener {
    let Some(t) = tcp.filter(|t| !t.targets.is_empty()) else {
        return tcp::SidecarListener {
            listener: http.then(|| catchall_listener(port)),
            unreachable: Vec::new(),
        };
    };
    let how = t.how;
    let p = OutboundPort {
        addr: &how.addr,
        port,
        bind: how.bind,
        http: http && !how.bind,
        fallback: &how.fallback,
        source,
        idle: t.idle,
        detection_ms: how.detection_ms,
        detect: how.detect,
    };
    tcp::sidecar_listener(&p, t.targets)
}

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
    let tls = crate::gateway_tls::servers(
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

/// A router's listeners by address and port listened on, with the objects they come from.
pub(crate) type Listeners = BTreeMap<(String, u16), BTreeSet<ConfigKey>>;

/// The HTTP routes of a router's listener (see [`router_resources`]).
struct HttpRoutes {
    name: String,
    port: u16,
    vhosts: route::GatewayVhosts,
    redirect: BTreeSet<String>,
}

/// Where a router's server of `port` listens, under the router's port map
/// ([`ScopeKey::gateway_ports`]).
pub(crate) fn listen_port(ports: &[(u16, u16)], port: u16) -> u16 {
    ports
        .iter()
        .find(|(p, _)| *p == port)
        .map_or(port, |(_, target)| *target)
}

/// The route configuration of a router's HTTP servers listening on `port` (at `bind`, if
/// they bind): `http.PORT`, or `http.PORT.BIND`, as Istio names it.
fn http_route_name(port: u16, bind: Option<&str>) -> String {
    match bind {
        Some(b) => format!("http.{port}.{b}"),
        None => format!("http.{port}"),
    }
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
    for list in vhosts.values_mut() {
        list.sort_by(|a, b| a.0.vs.key.cmp(&b.0.vs.key));
        for (_, via) in list.iter_mut() {
            via.sort();
        }
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
                    errors.push(ConfigError::port_taken(gw, server, holders, "HTTP"));
                }
                continue;
            }
            if let Some(holders) = tls.get(&key) {
                errors.push(ConfigError::port_taken(gw, server, holders, "HTTPS/TLS"));
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
