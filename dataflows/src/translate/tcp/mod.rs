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
//!
//! This file builds a gateway's TCP server listener; `chains.rs` decides routes and builds
//! the chains, `sidecar.rs` a sidecar's outbound listener of a port.

mod chains;
mod sidecar;

pub(crate) use chains::destinations;
pub(super) use chains::tcp_proxy;
pub use chains::{chains, sni_chains, timeout_of, Destinations, SniChain, TcpChain};
pub use sidecar::{sidecar_listener, OutboundPort, SidecarListener, TcpTarget};

use crate::model::{ResolvedVs, Resource, Source, TcpTimeouts};
use crate::translate::listener::listener_name;
use chains::{encode, outbound, Chains};

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
