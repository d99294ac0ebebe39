//! Which `tcp[]` or `tls[]` route of a VirtualService a connection takes (the first that
//! matches, as Istio orders them), and the `tcp_proxy` filter chains and listeners that
//! carry it out, for sidecars' outbound listeners and gateways' TCP servers alike.

use crate::model::{
    L4Match, ResolvedVs, Resource, ResourceType, RouteDestination, Source, TcpTimeout, TcpTimeouts,
};
use crate::translate::listener::{http_chain, PLAINTEXT_HTTP_ALPN};
use crate::translate::{outbound_cluster_name, socket_address};
use envoy_types::pb::envoy::config::core::v3::TrafficDirection;
use envoy_types::pb::envoy::config::listener::v3::FilterChainMatch;
use envoy_types::pb::envoy::config::listener::v3::{filter, Filter, FilterChain, Listener};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
    tcp_proxy::{weighted_cluster::ClusterWeight, ClusterSpecifier, WeightedCluster},
    TcpProxy,
};
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
            let p = crate::translate::route::resolve_port(d, port, vs);
            (
                outbound_cluster_name(p, d.subset.as_deref(), &d.host),
                d.weight,
            )
        })
        .collect()
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
            let live: Vec<&L4Match> = route
                .matches
                .iter()
                .filter(|m| m.applies(port, via, source))
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
pub(super) fn intersect(addresses: &[String], subnets: &[String]) -> Vec<String> {
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

/// The limits Istio gives the `tcp_proxy` of a route to `dests`: those of the rule of the
/// first destination's host, if `timeouts` has them.
pub fn timeout_of(timeouts: &TcpTimeouts, dests: &Destinations) -> TcpTimeout {
    dests
        .first()
        .and_then(|(cluster, _)| crate::translate::outbound_cluster_parts(cluster))
        .and_then(|(_, _, host)| timeouts.get(host).copied())
        .unwrap_or_default()
}

/// The tcp_proxy filter for `dests`: one cluster, or Envoy's weighted clusters; `limits`:
/// its idle timeout (unset: Envoy's default, 1h) and longest connection.
pub(in crate::translate) fn tcp_proxy(
    dests: &Destinations,
    stat_prefix: &str,
    limits: TcpTimeout,
) -> Filter {
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
        idle_timeout: limits.idle_ms.map(crate::translate::duration_ms),
        max_downstream_connection_duration: limits
            .max_duration_ms
            .map(crate::translate::duration_ms),
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
            prefix_ranges: ranges.iter().map(|r| crate::translate::cidr(r)).collect(),
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
pub(super) struct Chains {
    pub(super) chains: Vec<FilterChain>,
    /// `(CIDR, SNI name)` taken (`""` for no name), with where its chain sends connections.
    taken: BTreeMap<(String, String), Destinations>,
    pub(super) no_match_taken: bool,
    /// Some chain matches SNI names: the listener needs the TLS inspector.
    pub(super) sni: bool,
    /// The idle timeouts of the destinations' `tcp_proxy`.
    idle: TcpTimeouts,
    /// Some chain matches what the HTTP inspector reports: the listener needs it.
    pub(super) http_detected: bool,
}

impl Chains {
    pub(super) fn new(no_match_taken: bool, idle: &TcpTimeouts) -> Chains {
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
    pub(super) fn detect_http(
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
    pub(super) fn add(&mut self, name: String, ranges: Vec<String>, dests: &Destinations) -> bool {
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
    pub(super) fn add_sni(
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
    pub(super) fn holder(&self, range: &str, name: &str) -> Option<&Destinations> {
        self.taken.get(&(range.to_string(), name.to_string()))
    }
}

/// Whether address range `outer` (`""`: any) holds all of `inner`.
pub(super) fn covers(outer: &str, inner: &str) -> bool {
    if outer.is_empty() {
        return true;
    }
    match (bits(outer), bits(inner)) {
        (Some(o), Some(i)) => contains(o, i),
        _ => false,
    }
}

/// How specific a range is (`""`: least of all).
pub(super) fn specificity(range: &str) -> i64 {
    bits(range).map_or(-1, |(_, len)| i64::from(len))
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
            .filter(|m| m.applies(port, &[crate::translate::route::MESH], source))
        {
            let names = crate::translate::hosts::server_names(&m.sni_hosts);
            let ranges = m.destination_subnets.clone();
            if !out.iter().any(|(n, r, _)| *n == names && *r == ranges) {
                out.push((names, ranges, dests.clone()));
            }
        }
    }
    out
}

/// An outbound listener `name` on `addr:port` with `filter_chains`.
pub(super) fn outbound(
    name: String,
    addr: &str,
    port: u16,
    filter_chains: Vec<FilterChain>,
) -> Listener {
    Listener {
        name,
        address: Some(socket_address(addr, port)),
        filter_chains,
        traffic_direction: TrafficDirection::Outbound as i32,
        ..Default::default()
    }
}

pub(super) fn encode(listener: Listener) -> Resource {
    Resource::new(
        ResourceType::Listener,
        listener.name.clone(),
        listener.encode_to_vec(),
    )
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
    /// A proxy's `IDLE_TIMEOUT` ([`crate::translate::listener::with_idle_timeout`]) leaves
    /// a chain's own idle timeout (a DestinationRule's, even 0) as it is, and fills in one
    /// whose rule set only a longest duration.
    #[test]
    fn a_chains_own_idle_timeout_wins_over_the_proxys() {
        let dests = vec![("outbound|27017||db.ns.svc.cluster.local".to_string(), 100)];
        let chain = |idle_ms, max_duration_ms| FilterChain {
            name: format!("{idle_ms:?}"),
            filters: vec![tcp_proxy(
                &dests,
                "db",
                TcpTimeout {
                    idle_ms,
                    max_duration_ms,
                },
            )],
            ..Default::default()
        };
        let l = Listener {
            name: "0.0.0.0_27017".into(),
            filter_chains: vec![chain(Some(5_000), None), chain(Some(0), None)],
            default_filter_chain: Some(chain(None, Some(60_000))),
            ..Default::default()
        };
        let r = Resource::new(ResourceType::Listener, l.name.clone(), l.encode_to_vec());
        let out = crate::translate::listener::with_idle_timeout(&r, 1_000_000_000);
        let out = Listener::decode(&out.body.0[..]).expect("a listener");
        let idle: Vec<Option<i64>> = out
            .filter_chains
            .iter()
            .chain(out.default_filter_chain.iter())
            .map(|c| {
                let Some(filter::ConfigType::TypedConfig(any)) = &c.filters[0].config_type else {
                    panic!("a typed config");
                };
                let t = TcpProxy::decode(&any.value[..]).expect("a tcp_proxy");
                t.idle_timeout
                    .map(|d| d.seconds * 1000 + i64::from(d.nanos) / 1_000_000)
            })
            .collect();
        assert_eq!(idle, vec![Some(5_000), Some(0), Some(1_000)]);
    }

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
