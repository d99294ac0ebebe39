//! LDS for TCP traffic: which `tcp[]` route of a VirtualService a connection takes (the
//! first that matches, as Istio orders them) and the `envoy.filters.network.tcp_proxy`
//! filter chains that carry it out, for sidecar outbound listeners and gateway TCP servers.
//!
//! A sidecar's captured port is one listener `0.0.0.0_PORT` (reached from `virtualOutbound`)
//! whose chains tell the TCP services sharing the port apart by the connection's original
//! destination (`prefix_ranges`: the service's addresses, or a route's
//! `destinationSubnets`); Istio names a listener per service address (`VIP_PORT`) instead,
//! which routes the same connections the same way. Where a port also carries HTTP services,
//! their connection manager is the chain without a match. A TLS service's `tls[]` routes add
//! chains matched by SNI name on the same addresses ([`sni_chains`]), with the TLS inspector.
//! A TLS service without an address of its own (a ServiceEntry without `addresses`, a
//! headless Service) is told apart by name alone, as Istio does: chains matched by its
//! `tls[]` routes' names and by its own host name, on any address.

use super::listener::{
    bind_flag, http_chain, http_inspector_filter, listener_name, tcp_to, tls_inspector_filter,
    PLAINTEXT_HTTP_ALPN,
};
use super::{outbound_cluster_name, socket_address};
use crate::model::{
    Protocol, ResolvedVs, Resource, ResourceType, RouteDestination, Service, Source, TcpMatch,
    TcpTimeout, TcpTimeouts, TlsMatch,
};
use envoy_types::pb::envoy::config::core::v3::{CidrRange, TrafficDirection};
use envoy_types::pb::envoy::config::listener::v3::FilterChainMatch;
use envoy_types::pb::envoy::config::listener::v3::{filter, Filter, FilterChain, Listener};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
    tcp_proxy::{weighted_cluster::ClusterWeight, ClusterSpecifier, WeightedCluster},
    TcpProxy,
};
use envoy_types::pb::google::protobuf::UInt32Value;
use envoy_types::util::pack_any;
use prost::Message;
use std::collections::{BTreeMap, BTreeSet};

/// Where a set of connections goes: `(cluster, weight)`, weights 0 left out.
pub type Destinations = Vec<(String, u32)>;

/// One chain of a destination: the destination CIDRs it is for (empty: whatever else
/// reaches it) and where it sends connections.
pub type TcpChain = (Vec<String>, Destinations);

/// A TCP route's destinations as clusters, the ports resolved as HTTP routes resolve them.
pub(crate) fn destinations(route: &[RouteDestination], port: u16, vs: &ResolvedVs) -> Destinations {
    route
        .iter()
        .filter(|d| d.weight > 0)
        .map(|d| {
            let p = super::route::resolve_port(d, port, vs);
            (
                outbound_cluster_name(p, d.subset.as_deref(), &d.host),
                d.weight,
            )
        })
        .collect()
}

/// Whether a match applies on `port` through `via` (gateways `namespace/name`, or `mesh`)
/// for the proxies of `source`.
fn applies(m: &TcpMatch, port: u16, via: &[String], source: Source) -> bool {
    m.port.is_none_or(|p| p == port)
        && (m.gateways.is_empty() || m.gateways.iter().any(|g| via.contains(g)))
        && source.admits(m.source_namespace.as_ref(), m.source_labels.as_ref())
}

/// The chains the `tcp[]` routes of `vss` (each with the gateways it applies through, in
/// precedence order) make on `port`. Routes are taken in order: a route whose applicable
/// matches name `destinationSubnets` gets a chain for those subnets (a subnet an earlier
/// route took stays with it; a sidecar narrows them to the service's addresses); the first route that applies to every destination is the
/// default (empty CIDRs) and ends the walk. Without one, `fallback` (a sidecar's service
/// cluster) is the default, if given.
pub fn chains(
    vss: &[(&ResolvedVs, &[String])],
    port: u16,
    source: Source,
    fallback: Option<&str>,
) -> Vec<TcpChain> {
    let mut out: Vec<TcpChain> = Vec::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for (vs, via) in vss {
        for route in &vs.vs.tcp {
            let dests = destinations(&route.route, port, vs);
            if dests.is_empty() {
                continue;
            }
            let live: Vec<&TcpMatch> = route
                .matches
                .iter()
                .filter(|m| applies(m, port, via, source))
                .collect();
            if !route.matches.is_empty() && live.is_empty() {
                continue;
            }
            if route.matches.is_empty() || live.iter().any(|m| m.destination_subnets.is_empty()) {
                out.push((Vec::new(), dests));
                return out;
            }
            let subnets: Vec<String> = live
                .iter()
                .flat_map(|m| m.destination_subnets.iter())
                .filter(|s| taken.insert((*s).clone()))
                .cloned()
                .collect();
            if !subnets.is_empty() {
                out.push((subnets, dests));
            }
        }
    }
    if let Some(cluster) = fallback {
        out.push((Vec::new(), vec![(cluster.to_string(), 100)]));
    }
    out
}

/// A canonical CIDR (`10.0.0.0/8`) as its address bits (IPv4 mapped into IPv6's space, so
/// the families never mix) and prefix length in that space.
fn bits(cidr: &str) -> Option<(u128, u32)> {
    let (addr, len) = cidr.split_once('/')?;
    let len: u32 = len.parse().ok()?;
    match addr.parse::<std::net::IpAddr>().ok()? {
        std::net::IpAddr::V4(v4) => Some((u128::from(v4.to_ipv6_mapped()), len + 96)),
        std::net::IpAddr::V6(v6) => Some((u128::from(v6), len)),
    }
}

/// Whether CIDR `outer` holds every address of `inner`.
fn contains(outer: (u128, u32), inner: (u128, u32)) -> bool {
    let mask = u128::MAX.checked_shl(128 - outer.1).unwrap_or(0);
    outer.1 <= inner.1 && inner.0 & mask == outer.0 & mask
}

/// The parts of `addresses` inside `subnets`: each address a subnet holds, and each subnet
/// inside an address (a ServiceEntry's address block); sorted, once each.
fn intersect(addresses: &[String], subnets: &[String]) -> Vec<String> {
    let mut out = BTreeSet::new();
    for a in addresses {
        for s in subnets {
            let (Some(ab), Some(sb)) = (bits(a), bits(s)) else {
                continue;
            };
            if contains(sb, ab) {
                out.insert(a.clone());
            } else if contains(ab, sb) {
                out.insert(s.clone());
            }
        }
    }
    out.into_iter().collect()
}

/// `10.0.0.0/8` as Envoy's range (a bare address is a host route).
pub(super) fn cidr(s: &str) -> CidrRange {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, l.parse().unwrap_or(0)),
        None => (s, if s.contains(':') { 128 } else { 32 }),
    };
    CidrRange {
        address_prefix: addr.to_string(),
        prefix_len: Some(UInt32Value { value: len }),
    }
}

/// The limits Istio gives the `tcp_proxy` of a route to `dests`: those of the rule of the
/// first destination's host, if `timeouts` has them.
pub fn timeout_of(timeouts: &TcpTimeouts, dests: &Destinations) -> TcpTimeout {
    dests
        .first()
        .and_then(|(cluster, _)| super::outbound_cluster_parts(cluster))
        .and_then(|(_, _, host)| timeouts.get(host).copied())
        .unwrap_or_default()
}

/// The tcp_proxy filter for `dests`: one cluster, or Envoy's weighted clusters; `limits`:
/// its idle timeout (unset: Envoy's default, 1h) and longest connection.
pub(super) fn tcp_proxy(dests: &Destinations, stat_prefix: &str, limits: TcpTimeout) -> Filter {
    let proxy = match dests.as_slice() {
        [(cluster, _)] => TcpProxy {
            stat_prefix: cluster.clone(),
            cluster_specifier: Some(ClusterSpecifier::Cluster(cluster.clone())),
            ..Default::default()
        },
        _ => TcpProxy {
            stat_prefix: stat_prefix.to_string(),
            cluster_specifier: Some(ClusterSpecifier::WeightedClusters(WeightedCluster {
                clusters: dests
                    .iter()
                    .map(|(name, weight)| ClusterWeight {
                        name: name.clone(),
                        weight: *weight,
                        ..Default::default()
                    })
                    .collect(),
            })),
            ..Default::default()
        },
    };
    let proxy = TcpProxy {
        idle_timeout: limits.idle_ms.map(super::duration_ms),
        max_downstream_connection_duration: limits.max_duration_ms.map(super::duration_ms),
        ..proxy
    };
    Filter {
        name: "envoy.filters.network.tcp_proxy".into(),
        config_type: Some(filter::ConfigType::TypedConfig(pack_any(proxy))),
    }
}

fn chain(
    name: String,
    ranges: &[String],
    names: Vec<String>,
    dests: &Destinations,
    idle: &TcpTimeouts,
) -> FilterChain {
    FilterChain {
        filter_chain_match: (!ranges.is_empty() || !names.is_empty()).then(|| FilterChainMatch {
            prefix_ranges: ranges.iter().map(|r| cidr(r)).collect(),
            server_names: names,
            ..Default::default()
        }),
        filters: vec![tcp_proxy(dests, &name, timeout_of(idle, dests))],
        name,
        ..Default::default()
    }
}

/// Builds a listener's chains from each destination's chains, in order: a CIDR (with an
/// SNI name, or none) is kept by the first chain naming it (Envoy refuses a listener whose
/// chains match alike), and only one chain may go without any match (`no_match_taken`:
/// another already does).
struct Chains {
    chains: Vec<FilterChain>,
    /// `(CIDR, SNI name)` taken (`""` for no name), with where its chain sends connections.
    taken: BTreeMap<(String, String), Destinations>,
    no_match_taken: bool,
    /// Some chain matches SNI names: the listener needs the TLS inspector.
    sni: bool,
    /// The idle timeouts of the destinations' `tcp_proxy`.
    idle: TcpTimeouts,
    /// Some chain matches what the HTTP inspector reports: the listener needs it.
    http_detected: bool,
}

impl Chains {
    fn new(no_match_taken: bool, idle: &TcpTimeouts) -> Chains {
        Chains {
            chains: Vec::new(),
            taken: BTreeMap::new(),
            no_match_taken,
            sni: false,
            idle: idle.clone(),
            http_detected: false,
        }
    }

    /// For a service whose protocol is told per connection, whose chains start at `first`:
    /// on the address ranges they match (and, where one matches none, on any address), a
    /// chain for plaintext HTTP as the HTTP inspector reports it, to the port's connection
    /// manager (RDS `route_name`), and beside each TCP chain its twin for other plaintext
    /// bytes. Envoy picks the most specific transport protocol before it looks at
    /// application protocols and never falls back: without the twins a plaintext
    /// connection that is not HTTP would find no chain. TLS takes the TCP chains as before.
    /// The service's chains without an address exist only where it took the listener's
    /// no-match level (no HTTP services, no earlier service without an address there): its
    /// chains for any address then hold that level whole.
    fn detect_http(
        &mut self,
        first: usize,
        listener: &str,
        route_name: &str,
        host: &str,
        port: u16,
    ) {
        let added: Vec<FilterChain> = self.chains[first..].to_vec();
        let mut ranged = Vec::new();
        let mut unranged = false;
        for c in &added {
            let m = c.filter_chain_match.clone().unwrap_or_default();
            if !m.server_names.is_empty() {
                continue;
            }
            if m.prefix_ranges.is_empty() {
                unranged = true;
            }
            for r in &m.prefix_ranges {
                if !ranged.contains(r) {
                    ranged.push(r.clone());
                }
            }
            let mut twin = c.clone();
            twin.name = format!("{}-raw", c.name);
            twin.filter_chain_match = Some(FilterChainMatch {
                transport_protocol: "raw_buffer".into(),
                ..m
            });
            self.chains.push(twin);
        }
        let plaintext_http = |name: String, prefix_ranges| {
            let mut c = http_chain(listener, route_name, false);
            c.name = name;
            c.filter_chain_match = Some(FilterChainMatch {
                prefix_ranges,
                transport_protocol: "raw_buffer".into(),
                application_protocols: PLAINTEXT_HTTP_ALPN.iter().map(|a| a.to_string()).collect(),
                ..Default::default()
            });
            c
        };
        if !ranged.is_empty() {
            self.chains
                .push(plaintext_http(format!("{host}:{port}#http"), ranged));
        }
        if unranged {
            self.chains.push(plaintext_http(
                format!("{host}:{port}#http-any"),
                Vec::new(),
            ));
        }
        self.http_detected = true;
    }

    /// Adds the chain if anything is left of it; whether it was.
    fn add(&mut self, name: String, ranges: Vec<String>, dests: &Destinations) -> bool {
        if ranges.is_empty() {
            if self.no_match_taken {
                return false;
            }
            self.no_match_taken = true;
            self.chains
                .push(chain(name, &[], Vec::new(), dests, &self.idle));
            return true;
        }
        let ranges: Vec<String> = ranges
            .into_iter()
            .filter(|r| self.claim(r, "", dests))
            .collect();
        if ranges.is_empty() {
            return false;
        }
        self.chains
            .push(chain(name, &ranges, Vec::new(), dests, &self.idle));
        true
    }

    /// Adds a chain for SNI `names` (empty: any name, as a chain without one) on `range`
    /// (`""`: any address), with what is left of the names; whether it was.
    fn add_sni(
        &mut self,
        name: String,
        range: &str,
        names: &[String],
        dests: &Destinations,
    ) -> bool {
        let ranges: Vec<String> = if range.is_empty() {
            Vec::new()
        } else {
            vec![range.to_string()]
        };
        if names.is_empty() {
            return self.add(name, ranges, dests);
        }
        let left: Vec<String> = names
            .iter()
            .filter(|n| self.claim(range, n, dests))
            .cloned()
            .collect();
        if left.is_empty() {
            return false;
        }
        self.sni = true;
        self.chains
            .push(chain(name, &ranges, left, dests, &self.idle));
        true
    }

    /// Takes `(range, name)` for `dests`; false if a chain already has it.
    fn claim(&mut self, range: &str, name: &str, dests: &Destinations) -> bool {
        let key = (range.to_string(), name.to_string());
        if self.taken.contains_key(&key) {
            return false;
        }
        self.taken.insert(key, dests.clone());
        true
    }

    /// Where the chain holding SNI `name` on `range` sends connections, if one does.
    fn holder(&self, range: &str, name: &str) -> Option<&Destinations> {
        self.taken.get(&(range.to_string(), name.to_string()))
    }
}

/// Whether address range `outer` (`""`: any) holds all of `inner`.
fn covers(outer: &str, inner: &str) -> bool {
    if outer.is_empty() {
        return true;
    }
    match (bits(outer), bits(inner)) {
        (Some(o), Some(i)) => contains(o, i),
        _ => false,
    }
}

/// How specific a range is (`""`: least of all).
fn specificity(range: &str) -> i64 {
    bits(range).map_or(-1, |(_, len)| i64::from(len))
}

/// Whether a TLS match applies on `port` of a sidecar (gateway `mesh`) for `source`.
fn tls_applies(m: &TlsMatch, port: u16, source: Source) -> bool {
    m.port.is_none_or(|p| p == port)
        && (m.gateways.is_empty() || m.gateways.iter().any(|g| g == super::route::MESH))
        && source.admits(m.source_namespace.as_ref(), m.source_labels.as_ref())
}

/// One SNI chain of a sidecar's TLS port: the SNI names (empty: any), the destination
/// CIDRs (empty: the service's), and where it sends connections.
pub type SniChain = (Vec<String>, Vec<String>, Destinations);

/// The SNI chains the `tls[]` routes of a mesh VirtualService make on a sidecar's TLS
/// `port`: one per applicable match, in order (Istio's), the same runtime match once.
pub fn sni_chains(vs: &ResolvedVs, port: u16, source: Source) -> Vec<SniChain> {
    let mut out: Vec<SniChain> = Vec::new();
    for route in &vs.vs.tls {
        let dests = destinations(&route.route, port, vs);
        if dests.is_empty() {
            continue;
        }
        for m in route
            .matches
            .iter()
            .filter(|m| tls_applies(m, port, source))
        {
            let names = super::hosts::server_names(&m.sni_hosts);
            let ranges = m.destination_subnets.clone();
            if !out.iter().any(|(n, r, _)| *n == names && *r == ranges) {
                out.push((names, ranges, dests.clone()));
            }
        }
    }
    out
}

/// One TCP service reached through a sidecar listener, with every mesh VirtualService
/// covering its host, in precedence order: Istio's sidecars try the `tcp[]` and `tls[]`
/// routes of each in turn.
pub type TcpTarget = (Service, Vec<ResolvedVs>);

/// How a sidecar's outbound listener on a port is reached and what else it carries.
pub struct OutboundPort<'a> {
    /// `0.0.0.0`, or an egress listener's `bind`.
    pub addr: &'a str,
    pub port: u16,
    /// Bound itself (`captureMode: NONE`, `bind`), else handed over by `virtualOutbound`.
    pub bind: bool,
    /// HTTP services share the port: their connection manager (RDS `PORT`) takes what no
    /// TCP chain matches.
    pub http: bool,
    /// Where connections no chain matches go on a captured listener (`PassthroughCluster`,
    /// or `BlackHoleCluster` under REGISTRY_ONLY).
    pub fallback: &'a str,
    /// The proxies it is for, for `sourceNamespace` and `sourceLabels`.
    pub source: Source<'a>,
    /// The idle timeouts of the hosts its routes go to ([`TcpTimeouts`]).
    pub idle: &'a TcpTimeouts,
    /// The mesh's `protocolDetectionTimeout`: how long the HTTP inspector waits, where a
    /// service's protocol is told per connection (`None`: Envoy's 15 s).
    pub detection_ms: Option<u64>,
    /// An egress listener naming no protocol: every service on it is told per connection,
    /// not only those whose port names none.
    pub detect: bool,
}

/// Whether a TLS service on `p`'s port is told apart by the name its clients send (SNI),
/// as Istio tells it: on a listener for any address (`0.0.0.0`, `::`), a service without an
/// address of its own, or any service where the listener is bound itself (no address
/// tells services apart there). A listener bound to one address serves its first service
/// instead, as for TCP.
fn by_name(p: &OutboundPort, svc: &Service) -> bool {
    let wildcard = matches!(p.addr, "0.0.0.0" | "::" | "[::]");
    wildcard
        && (p.bind || svc.addresses.is_empty())
        && svc
            .ports
            .iter()
            .any(|sp| sp.port == p.port && sp.protocol == Protocol::Tls)
}

/// A sidecar's outbound listener for TCP services `targets` (sorted by host here). On a
/// captured listener each service's default chain matches its addresses; a service without
/// any takes the chain without a match, unless HTTP services or an earlier such service
/// have it (Istio drops a TCP listener that conflicts with HTTP on the port alike). A TLS
/// service told apart by name ([`by_name`]) gets chains matched by SNI: its `tls[]` routes'
/// names, then its own host name (a wildcard host as Envoy's wildcard name). A bound
/// listener serves the first other service only: nothing tells their connections apart.
///
/// Also the services the listener cannot reach at all (none of their chains is left, or
/// their host name is held by an earlier service's chain): the caller reports them, as
/// nothing of a service may vanish without a word.
pub fn sidecar_listener(p: &OutboundPort, targets: &[TcpTarget]) -> SidecarListener {
    let name = listener_name(p.addr, p.port);
    let mut sorted: Vec<&TcpTarget> = targets.iter().collect();
    sorted.sort_by(|a, b| a.0.hostname.cmp(&b.0.hostname));
    let mut unreachable = Vec::new();
    if p.bind {
        let mut first = true;
        sorted.retain(|t| {
            if by_name(p, &t.0) {
                return true;
            }
            let keep = std::mem::replace(&mut first, false);
            if !keep {
                unreachable.push(t.0.clone());
            }
            keep
        });
    }
    let mut built = Chains::new(p.http, p.idle);
    let mesh = [super::route::MESH.to_string()];
    for (svc, vs) in sorted {
        let named = by_name(p, svc);
        let fallback = outbound_cluster_name(p.port, None, &svc.hostname);
        let vss: Vec<(&ResolvedVs, &[String])> = vs.iter().map(|v| (v, mesh.as_slice())).collect();
        // On a captured listener a chain is for this service's connections only: its
        // addresses, or those of them inside a route's `destinationSubnets` (a subnet
        // wider than the service must not draw other destinations to its route).
        let narrow = |ranges: Vec<String>| -> Option<Vec<String>> {
            match (ranges.is_empty(), p.bind || svc.addresses.is_empty()) {
                (true, false) => Some(svc.addresses.clone()),
                (false, false) => {
                    let within = intersect(&svc.addresses, &ranges);
                    (!within.is_empty()).then_some(within)
                }
                (_, true) => Some(ranges),
            }
        };
        let tcp_list: Vec<(usize, TcpChain)> = chains(&vss, p.port, p.source, Some(&fallback))
            .into_iter()
            .enumerate()
            .filter_map(|(i, (ranges, dests))| narrow(ranges).map(|r| (i, (r, dests))))
            .collect();
        let tls_port = svc
            .ports
            .iter()
            .any(|sp| sp.port == p.port && sp.protocol == Protocol::Tls);
        let sni_list: Vec<SniChain> = match tls_port {
            true => vs
                .iter()
                .flat_map(|v| sni_chains(v, p.port, p.source))
                .filter_map(|(names, ranges, dests)| narrow(ranges).map(|r| (names, r, dests)))
                .collect(),
            false => Vec::new(),
        };
        let detected = p.detect
            || svc
                .ports
                .iter()
                .any(|sp| sp.port == p.port && sp.protocol == Protocol::Auto);
        let first = built.chains.len();
        let reached = if named {
            add_named_service_chains(&mut built, svc, p.port, &tcp_list, &sni_list)
        } else {
            add_service_chains(&mut built, svc, p.port, &tcp_list, &sni_list)
        };
        if detected && reached {
            built.detect_http(first, &name, &p.port.to_string(), &svc.hostname, p.port);
        }
        if !reached {
            unreachable.push(svc.clone());
        }
    }
    let mut filter_chains = built.chains;
    if p.http {
        filter_chains.push(http_chain(&name, &p.port.to_string(), false));
    }
    // What reaches a captured port for an address no service claims leaves as it would
    // without the listener: through the mesh's outbound policy.
    let default_filter_chain = (!p.bind && !built.no_match_taken).then(|| FilterChain {
        name: "PassthroughFilterChain".into(),
        filters: vec![tcp_to(p.fallback, p.fallback)],
        ..Default::default()
    });
    // SNI chains need the TLS inspector; a connection whose first bytes are not a TLS
    // handshake (or come late) carries no name, and takes the chain without one. Chains of
    // services whose protocol is told per connection need the HTTP inspector too; a
    // connection that sends nothing in time goes on as TCP.
    let mut listener_filters = Vec::new();
    if built.sni || built.http_detected {
        listener_filters.push(tls_inspector_filter());
    }
    if built.http_detected {
        listener_filters.push(http_inspector_filter());
    }
    let continue_on_listener_filters_timeout = !listener_filters.is_empty();
    let listener_filters_timeout = p
        .detection_ms
        .filter(|_| built.http_detected)
        .map(super::duration_ms);
    let listener = (!filter_chains.is_empty()).then(|| {
        encode(Listener {
            default_filter_chain,
            bind_to_port: bind_flag(p.bind),
            listener_filters,
            continue_on_listener_filters_timeout,
            listener_filters_timeout,
            ..outbound(name, p.addr, p.port, filter_chains)
        })
    });
    SidecarListener {
        listener,
        unreachable,
    }
}

/// Adds a service's chains to a sidecar listener: its SNI chains first (`sni`: on each
/// of their ranges, and on each narrower TCP range inside one, since Envoy picks the most
/// specific address before it looks at names), then its TCP chains (`tcp`), then, for each
/// range only SNI chains name, a chain without a name to where the TCP chains would send
/// that range (a connection whose name no route claims goes where it went before). A range
/// `""` (none in the lists) means any address. Whether any chain was added.
fn add_service_chains(
    built: &mut Chains,
    svc: &Service,
    port: u16,
    tcp: &[(usize, TcpChain)],
    sni: &[SniChain],
) -> bool {
    let any = || vec![String::new()];
    let ranges_of = |r: &Vec<String>| if r.is_empty() { any() } else { r.clone() };
    let mut reached = false;
    let mut sni_ranges: Vec<String> = Vec::new();
    for (_, ranges, _) in sni {
        for r in ranges_of(ranges) {
            if !sni_ranges.contains(&r) {
                sni_ranges.push(r);
            }
        }
    }
    let mut all = sni_ranges.clone();
    for (_, (ranges, _)) in tcp {
        for r in ranges_of(ranges) {
            if !all.contains(&r) && sni_ranges.iter().any(|o| covers(o, &r)) {
                all.push(r);
            }
        }
    }
    for (i, (names, ranges, dests)) in sni.iter().enumerate() {
        let own = ranges_of(ranges);
        let mine = all.iter().filter(|r| own.iter().any(|o| covers(o, r)));
        for (j, r) in mine.enumerate() {
            let name = format!("{}:{port}#tls{i}.{j}", svc.hostname);
            reached |= built.add_sni(name, r, names, dests);
        }
    }
    for (i, (ranges, dests)) in tcp {
        reached |= built.add(
            format!("{}:{port}#{i}", svc.hostname),
            ranges.clone(),
            dests,
        );
    }
    for (j, r) in sni_ranges.iter().enumerate() {
        if tcp
            .iter()
            .any(|(_, (ranges, _))| ranges_of(ranges).contains(r))
        {
            continue;
        }
        let best = tcp
            .iter()
            .flat_map(|(_, (ranges, dests))| ranges_of(ranges).into_iter().map(move |o| (o, dests)))
            .filter(|(o, _)| covers(o, r))
            .max_by_key(|(o, _)| specificity(o));
        if let Some((_, dests)) = best {
            let name = format!("{}:{port}#sni-default{j}", svc.hostname);
            let ranges = if r.is_empty() {
                Vec::new()
            } else {
                vec![r.clone()]
            };
            reached |= built.add(name, ranges, dests);
        }
    }
    reached
}

/// Adds the chains of a TLS service told apart by name ([`by_name`]): its SNI chains
/// (`sni`; a match for any name is for the service's own names), then its TCP chains
/// (`tcp`: where the service's own names go) matched by its host name. Each goes on every
/// range of the service's chains its own ranges cover (`""`: any address), since Envoy picks
/// the most specific address before it looks at names. A connection whose name none of
/// these claims takes the listener's chain without a name, as before. Whether the service
/// is reached: its host names, on any address, go where its own chains send them (an
/// earlier service's chain may hold a name first: then it is not).
fn add_named_service_chains(
    built: &mut Chains,
    svc: &Service,
    port: u16,
    tcp: &[(usize, TcpChain)],
    sni: &[SniChain],
) -> bool {
    let own_names = super::hosts::server_names(std::slice::from_ref(&svc.hostname));
    // (chain name, SNI names, ranges, destinations), in precedence order.
    let mut list: Vec<(String, &[String], &[String], &Destinations)> = Vec::new();
    for (i, (names, ranges, dests)) in sni.iter().enumerate() {
        let names = if names.is_empty() { &own_names } else { names };
        list.push((
            format!("{}:{port}#tls{i}", svc.hostname),
            names,
            ranges,
            dests,
        ));
    }
    for (i, (ranges, dests)) in tcp {
        list.push((
            format!("{}:{port}#{i}", svc.hostname),
            &own_names,
            ranges,
            dests,
        ));
    }
    let mut all = vec![String::new()];
    for (_, _, ranges, _) in &list {
        for r in ranges.iter() {
            if !all.contains(r) {
                all.push(r.clone());
            }
        }
    }
    let mut added = false;
    for (name, names, ranges, dests) in &list {
        let own: Vec<&str> = if ranges.is_empty() {
            vec![""]
        } else {
            ranges.iter().map(String::as_str).collect()
        };
        let mine = all.iter().filter(|r| own.iter().any(|o| covers(o, r)));
        for (j, r) in mine.enumerate() {
            added |= built.add_sni(format!("{name}.{j}"), r, names, dests);
        }
    }
    if own_names.is_empty() {
        // A host of any name (`*`): its chain is the one without a name.
        return added;
    }
    own_names.iter().all(|h| {
        let wanted = list
            .iter()
            .find(|(_, names, ranges, _)| ranges.is_empty() && names.contains(h))
            .map(|(_, _, _, dests)| *dests);
        wanted.is_some() && built.holder("", h) == wanted
    })
}

/// A sidecar port's listener, and the TCP services it cannot reach.
#[derive(Default)]
pub struct SidecarListener {
    pub listener: Option<Resource>,
    pub unreachable: Vec<Service>,
}

/// An outbound listener `name` on `addr:port` with `filter_chains`.
fn outbound(name: String, addr: &str, port: u16, filter_chains: Vec<FilterChain>) -> Listener {
    Listener {
        name,
        address: Some(socket_address(addr, port)),
        filter_chains,
        traffic_direction: TrafficDirection::Outbound as i32,
        ..Default::default()
    }
}

fn encode(listener: Listener) -> Resource {
    Resource::new(
        ResourceType::Listener,
        listener.name.clone(),
        listener.encode_to_vec(),
    )
}

/// A gateway's TCP server listener on `addr:listen` from the VirtualServices bound to it
/// (each with the gateways it came through, in precedence order), whose routes match the
/// server's `port`; none when no `tcp` route applies (Istio generates no listener for such
/// a server either).
pub fn gateway_listener(
    addr: &str,
    (listen, port): (u16, u16),
    vss: &[(&ResolvedVs, &[String])],
    source: Source,
    idle: &TcpTimeouts,
) -> Option<Resource> {
    let name = listener_name(addr, listen);
    let list = chains(vss, port, source, None);
    let mut built = Chains::new(false, idle);
    for (i, (ranges, dests)) in list.into_iter().enumerate() {
        built.add(format!("{name}#{i}"), ranges, &dests);
    }
    if built.chains.is_empty() {
        return None;
    }
    Some(encode(outbound(name, addr, listen, built.chains)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::TcpProxy;

    /// (idle timeout, longest connection) of a `tcp_proxy`, in seconds.
    fn limits(f: &Filter) -> (Option<i64>, Option<i64>) {
        let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
            panic!("a typed config");
        };
        let p = TcpProxy::decode(&*any.value).expect("a tcp_proxy");
        (
            p.idle_timeout.map(|d| d.seconds),
            p.max_downstream_connection_duration.map(|d| d.seconds),
        )
    }

    /// A route's `tcp_proxy` takes the idle timeout and longest connection of its first
    /// destination's host (a split included); a host without them, and a cluster not of a
    /// service, take none.
    #[test]
    fn tcp_proxy_takes_the_first_destinations_limits() {
        let both = TcpTimeout {
            idle_ms: Some(30_000),
            max_duration_ms: Some(60_000),
        };
        let idle: TcpTimeouts = [("a.ns.svc.cluster.local".to_string(), both)].into();
        let one: Destinations = vec![("outbound|80|v1|a.ns.svc.cluster.local".into(), 100)];
        let split: Destinations = vec![
            ("outbound|80||a.ns.svc.cluster.local".into(), 50),
            ("outbound|80||b.ns.svc.cluster.local".into(), 50),
        ];
        let other: Destinations = vec![("outbound|80||b.ns.svc.cluster.local".into(), 100)];
        let passthrough: Destinations = vec![("PassthroughCluster".into(), 100)];
        assert_eq!(timeout_of(&idle, &one), both);
        assert_eq!(timeout_of(&idle, &split), both);
        assert_eq!(timeout_of(&idle, &other), TcpTimeout::default());
        assert_eq!(timeout_of(&idle, &passthrough), TcpTimeout::default());
        assert_eq!(
            limits(&tcp_proxy(&one, "x", timeout_of(&idle, &one))),
            (Some(30), Some(60))
        );
        assert_eq!(
            limits(&tcp_proxy(&split, "x", timeout_of(&idle, &split))),
            (Some(30), Some(60))
        );
        assert_eq!(
            limits(&tcp_proxy(&other, "x", TcpTimeout::default())),
            (None, None)
        );
    }
}
