//! Steps 1 and 2: the listener that takes a connection (binding, original-destination
//! hand-off, inbound capture) and its filter chain, by Envoy's `FilterChainMatch` order.

use super::{Call, NoMatch, Outcome, ProxyConfig};
use envoy_types::pb::envoy::config::core::v3::{address, socket_address, Address};
use envoy_types::pb::envoy::config::listener::v3::{FilterChain, Listener};
use std::net::IpAddr;

impl ProxyConfig {
    /// Step 1: the listener that handles a connection to `call`'s destination.
    pub(super) fn select_listener<'a>(
        &'a self,
        call: &Call,
        out: &mut Outcome,
    ) -> Result<&'a Listener, NoMatch> {
        if call.inbound {
            // iptables sends captured inbound connections to the inbound capture listener
            // (an inbound listener reading the original destination: Istio's
            // `virtualInbound`), which keeps them and matches its chains on that
            // destination.
            let inbound = self.listeners.values().find(|l| {
                binds(l)
                    && l.traffic_direction
                        == envoy_types::pb::envoy::config::core::v3::TrafficDirection::Inbound
                            as i32
                    && l.listener_filters
                        .iter()
                        .any(|f| f.name.contains("original_dst"))
            });
            return inbound.ok_or(NoMatch::NoListener { port: call.port });
        }
        let capture = self
            .listeners
            .values()
            .find(|l| l.use_original_dst.is_some_and(|b| b.value) && binds(l));
        let on_port = |l: &&Listener| {
            listener_port(l) == call.port
                && l.api_listener.is_none()
                && Some(l.name.as_str()) != capture.map(|c| c.name.as_str())
        };
        let exact = |l: &&Listener| {
            call.address
                .as_deref()
                .is_some_and(|a| same_ip(&listener_ip(l), a))
        };
        let wildcard = |l: &&Listener| is_wildcard(&listener_ip(l));
        let bound: Vec<&Listener> = self
            .listeners
            .values()
            .filter(|l| binds(l))
            .filter(on_port)
            .collect();
        // A listener bound to the destination itself takes the connection (loopback
        // destinations are not redirected).
        if let Some(l) = bound.iter().copied().find(exact) {
            return Ok(l);
        }
        if let Some(c) = capture {
            // `use_original_dst`: hand-off to the listener of the original destination, exact
            // address first, then the wildcard on its port; else the capture listener itself.
            out.captured_by = Some(c.name.clone());
            let all: Vec<&Listener> = self.listeners.values().filter(on_port).collect();
            let target = all
                .iter()
                .copied()
                .find(exact)
                .or_else(|| all.iter().copied().find(wildcard));
            return Ok(target.unwrap_or(c));
        }
        if let Some(l) = bound.iter().copied().find(wildcard) {
            return Ok(l);
        }
        if call.address.is_none() && !bound.is_empty() {
            if bound.len() > 1 {
                out.warnings.push(format!(
                    "several listeners on port {} and no destination address: took {}",
                    call.port, bound[0].name
                ));
            }
            return Ok(bound[0]);
        }
        Err(NoMatch::NoListener { port: call.port })
    }
}

fn binds(l: &Listener) -> bool {
    l.bind_to_port.is_none_or(|b| b.value)
}

pub(super) fn socket(a: Option<&Address>) -> Option<(&str, u32)> {
    match a?.address.as_ref()? {
        address::Address::SocketAddress(s) => {
            let port = match s.port_specifier {
                Some(socket_address::PortSpecifier::PortValue(p)) => p,
                _ => 0,
            };
            Some((s.address.as_str(), port))
        }
        _ => None,
    }
}

pub(super) fn listener_port(l: &Listener) -> u16 {
    socket(l.address.as_ref())
        .and_then(|(_, p)| u16::try_from(p).ok())
        .unwrap_or(0)
}

fn listener_ip(l: &Listener) -> String {
    socket(l.address.as_ref())
        .map(|(ip, _)| ip.to_string())
        .unwrap_or_default()
}

fn is_wildcard(ip: &str) -> bool {
    ip.parse::<IpAddr>().is_ok_and(|a| a.is_unspecified())
}

fn same_ip(a: &str, b: &str) -> bool {
    match (a.parse::<IpAddr>(), b.parse::<IpAddr>()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Whether `ip` lies in `prefix/len`; the length of the match when it does.
pub(super) fn in_cidr(ip: &str, prefix: &str, len: u32) -> Option<u32> {
    let (ip, prefix) = (ip.parse::<IpAddr>().ok()?, prefix.parse::<IpAddr>().ok()?);
    let (a, b, bits) = match (ip, prefix) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u32::from(a) as u128, u32::from(b) as u128, 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return None,
    };
    let len = len.min(bits);
    let shift = bits - len;
    let same = len == 0 || (a >> shift) == (b >> shift);
    same.then_some(len)
}

/// Step 2: Envoy's filter chain match. For each criterion in order, chains that name a value
/// matching the connection win over chains that name none; chains naming other values drop out.
pub(super) fn select_filter_chain<'a>(
    l: &'a Listener,
    call: &Call,
    out: &mut Outcome,
) -> Option<(usize, &'a FilterChain)> {
    let http_inspector = l
        .listener_filters
        .iter()
        .any(|f| f.name.contains("http_inspector"));
    // The HTTP inspector reports plaintext HTTP only (it leaves TLS alone).
    let seen_http = http_inspector && call.http && !call.is_tls();
    // The TLS inspector (which Envoy adds by itself where a chain matches on what it
    // reports) tells TLS from plaintext and reads the handshake's SNI and ALPN; without
    // it a TLS connection is `raw_buffer` with neither.
    let tls_inspector = l
        .listener_filters
        .iter()
        .any(|f| f.name.contains("tls_inspector"))
        || l.filter_chains.iter().any(needs_tls_inspector);
    let tls = call.is_tls() && tls_inspector;
    let sni = call.sni.as_deref().filter(|_| tls);
    let alpn: Vec<&str> = if tls {
        call.alpn.iter().map(String::as_str).collect()
    } else if seen_http {
        vec!["http/1.1"]
    } else {
        Vec::new()
    };
    let mut chains: Vec<(usize, &FilterChain)> = l.filter_chains.iter().enumerate().collect();
    let m = |c: &FilterChain| c.filter_chain_match.clone().unwrap_or_default();
    // Each criterion gives, per chain: None (not named), Some(None) (named, no match),
    // Some(Some(specificity)) (named and matching).
    type Criterion<'c> = Box<dyn Fn(&FilterChain) -> Option<Option<u32>> + 'c>;
    let criteria: Vec<Criterion> = vec![
        Box::new(|c| {
            m(c).destination_port
                .map(|p| (p.value == u32::from(call.port)).then_some(0))
        }),
        Box::new(|c| {
            let ranges = m(c).prefix_ranges;
            (!ranges.is_empty()).then(|| {
                let ip = call.address.as_deref()?;
                ranges
                    .iter()
                    .filter_map(|r| {
                        in_cidr(ip, &r.address_prefix, r.prefix_len.map_or(0, |l| l.value))
                    })
                    .max()
            })
        }),
        // A plaintext call carries no SNI; a TLS one matches a name exactly, else the
        // longest wildcard suffix (`*.example.com`), as Envoy picks them.
        Box::new(|c| {
            let names = m(c).server_names;
            (!names.is_empty()).then(|| {
                let sni = sni?;
                names.iter().filter_map(|n| sni_match(n, sni)).max()
            })
        }),
        Box::new(|c| {
            let t = m(c).transport_protocol;
            let seen = if tls { "tls" } else { "raw_buffer" };
            (!t.is_empty()).then(|| (t == seen).then_some(0))
        }),
        // Any protocol the connection offers (TLS: its ALPN; plaintext: what the HTTP
        // inspector saw) that the chain names.
        Box::new(|c| {
            let protos = m(c).application_protocols;
            (!protos.is_empty()).then(|| {
                protos
                    .iter()
                    .any(|p| alpn.contains(&p.as_str()))
                    .then_some(0)
            })
        }),
    ];
    for criterion in &criteria {
        let judged: Vec<(usize, &FilterChain, Option<Option<u32>>)> =
            chains.iter().map(|(i, c)| (*i, *c, criterion(c))).collect();
        let best = judged.iter().filter_map(|(_, _, j)| j.flatten()).max();
        chains = judged
            .into_iter()
            .filter(|(_, _, j)| match best {
                Some(b) => *j == Some(Some(b)),
                None => j.is_none(),
            })
            .map(|(i, c, _)| (i, c))
            .collect();
    }
    if chains.len() > 1 {
        out.warnings.push(format!(
            "listener {}: {} filter chains match alike; took the first",
            l.name,
            chains.len()
        ));
    }
    chains
        .first()
        .copied()
        .or_else(|| l.default_filter_chain.as_ref().map(|c| (usize::MAX, c)))
}

/// Whether Envoy adds the TLS inspector for this chain: it matches on a TLS transport, or,
/// naming no transport, on server names or application protocols.
fn needs_tls_inspector(c: &FilterChain) -> bool {
    c.filter_chain_match.as_ref().is_some_and(|m| {
        m.transport_protocol == "tls"
            || (m.transport_protocol.is_empty()
                && (!m.server_names.is_empty() || !m.application_protocols.is_empty()))
    })
}

/// How specifically server name `name` matches SNI `sni`: exactly (above any wildcard), or
/// as a wildcard `*.suffix` by the suffix's length; `None`: no match.
fn sni_match(name: &str, sni: &str) -> Option<u32> {
    if name.eq_ignore_ascii_case(sni) {
        return Some(u32::MAX);
    }
    let suffix = name.strip_prefix('*')?;
    let longer = sni.len() > suffix.len();
    let ends = sni
        .get(sni.len().saturating_sub(suffix.len())..)
        .is_some_and(|end| end.eq_ignore_ascii_case(suffix));
    (suffix.starts_with('.') && longer && ends).then(|| u32::try_from(suffix.len()).unwrap_or(0))
}
