//! A sidecar's outbound listener of a port with TCP services: its chains tell the services
//! sharing the port apart by original destination address, or by SNI name for a TLS
//! service without an address of its own.

use super::chains::{
    chains, covers, encode, intersect, outbound, sni_chains, specificity, Chains, Destinations,
    SniChain, TcpChain,
};
use crate::model::{Protocol, ResolvedVs, Resource, Service, Source, TcpTimeouts};
use crate::translate::listener::{
    bind_flag, http_chain, http_inspector_filter, listener_name, tcp_to, tls_inspector_filter,
};
use crate::translate::outbound_cluster_name;
use envoy_types::pb::envoy::config::listener::v3::{FilterChain, Listener};

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
    let mesh = [crate::translate::route::MESH.to_string()];
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
        .map(crate::translate::duration_ms);
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
    let own_names = crate::translate::hosts::server_names(std::slice::from_ref(&svc.hostname));
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
