//! LDS for a gateway's TLS servers: one listener per address and port whose filter chains
//! are told apart by SNI (`tls_inspector`): a terminating chain per HTTPS server (its
//! certificate, then HTTP routing by the server's own route configuration), a terminating
//! `tcp_proxy` chain per `tcp[]` chain of a TLS server that terminates, and a `tcp_proxy`
//! chain per `tls[]` route of a PASSTHROUGH server (by its `sniHosts`).

pub use super::hosts::server_names;

use super::cidr;
use super::listener::{hcm_filter, listener_name, rds_hcm};
use super::secret::downstream_tls;
use super::socket_address;
use super::tcp::{tcp_proxy, Destinations};
use crate::model::{Resource, ResourceType, ServerTls, TcpTimeout};
use envoy_types::pb::envoy::config::core::v3::TrafficDirection;
use envoy_types::pb::envoy::config::listener::v3::{
    listener_filter, FilterChain, FilterChainMatch, Listener, ListenerFilter,
};
use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use envoy_types::util::pack_any;
use prost::Message;
use std::collections::BTreeSet;

/// What one filter chain of a TLS listener does.
pub enum TlsChain<'a> {
    /// Terminate with `tls`, then route HTTP by route configuration `route`.
    Terminate { tls: &'a ServerTls, route: String },
    /// Pass the connection through to `dests`, for destination addresses in `ranges`
    /// (empty: any).
    Passthrough {
        ranges: Vec<String>,
        dests: Destinations,
        /// The `tcp_proxy`'s idle timeout (a route's: its first destination's rule's).
        timeout: TcpTimeout,
    },
    /// Terminate with `tls`, then pass the decrypted stream to `dests` (a TLS server's
    /// `tcp[]` routes), for destination addresses in `ranges` (empty: any).
    TerminateTcp {
        tls: &'a ServerTls,
        ranges: Vec<String>,
        dests: Destinations,
        timeout: TcpTimeout,
    },
}

/// Istio's route configuration name of an HTTPS server: `https.PORT.PORTNAME.GATEWAY.NS`,
/// with `.BIND` where the server binds; `PORT` is the server's, not the one listened on.
pub fn https_route_name(
    port: u16,
    port_name: &str,
    gateway: &str,
    namespace: &str,
    bind: Option<&str>,
) -> String {
    match bind {
        Some(b) => format!("https.{port}.{port_name}.{gateway}.{namespace}.{b}"),
        None => format!("https.{port}.{port_name}.{gateway}.{namespace}"),
    }
}

/// Chains of one listener, in order: an SNI name (with its address ranges) is kept by the
/// first chain naming it, since Envoy refuses a listener whose chains match alike.
#[derive(Default)]
pub struct TlsChains<'a> {
    chains: Vec<(Vec<String>, TlsChain<'a>)>,
    taken: BTreeSet<(String, Vec<String>)>,
}

impl<'a> TlsChains<'a> {
    /// Adds a chain for SNI `names` (empty: any); what is left of the names once earlier
    /// chains took theirs (`None`: nothing, the chain is not added).
    pub fn add(&mut self, names: Vec<String>, chain: TlsChain<'a>) -> Option<Vec<String>> {
        let ranges = match &chain {
            TlsChain::Passthrough { ranges, .. } | TlsChain::TerminateTcp { ranges, .. } => {
                ranges.clone()
            }
            TlsChain::Terminate { .. } => Vec::new(),
        };
        let keys: Vec<String> = if names.is_empty() {
            vec![String::new()]
        } else {
            names
        };
        let left: Vec<String> = keys
            .into_iter()
            .filter(|n| self.taken.insert((n.clone(), ranges.clone())))
            .collect();
        if left.is_empty() {
            return None;
        }
        let names: Vec<String> = left.iter().filter(|n| !n.is_empty()).cloned().collect();
        self.chains.push((names.clone(), chain));
        Some(names)
    }

    pub fn is_empty(&self) -> bool {
        self.chains.is_empty()
    }

    /// The listener on `addr:port` holding these chains.
    pub fn listener(self, addr: &str, port: u16) -> Resource {
        let name = listener_name(addr, port);
        let filter_chains = self
            .chains
            .into_iter()
            .enumerate()
            .map(|(i, (names, chain))| build_chain(&name, i, names, chain))
            .collect();
        let listener = Listener {
            name: name.clone(),
            address: Some(socket_address(addr, port)),
            filter_chains,
            listener_filters: vec![ListenerFilter {
                name: "envoy.filters.listener.tls_inspector".into(),
                config_type: Some(listener_filter::ConfigType::TypedConfig(pack_any(
                    TlsInspector::default(),
                ))),
                ..Default::default()
            }],
            traffic_direction: TrafficDirection::Outbound as i32,
            ..Default::default()
        };
        Resource::new(ResourceType::Listener, name, listener.encode_to_vec())
    }
}

fn build_chain(listener: &str, i: usize, names: Vec<String>, chain: TlsChain) -> FilterChain {
    let chain_name = format!("{listener}#{i}");
    match chain {
        TlsChain::Terminate { tls, route } => FilterChain {
            filter_chain_match: (!names.is_empty()).then(|| FilterChainMatch {
                server_names: names,
                ..Default::default()
            }),
            filters: vec![hcm_filter(rds_hcm(
                &format!("outbound_{listener}"),
                &route,
                true,
            ))],
            transport_socket: Some(downstream_tls(tls, true)),
            name: chain_name,
            ..Default::default()
        },
        TlsChain::TerminateTcp {
            tls,
            ranges,
            dests,
            timeout,
        } => FilterChain {
            filter_chain_match: (!names.is_empty() || !ranges.is_empty()).then(|| {
                FilterChainMatch {
                    server_names: names,
                    prefix_ranges: ranges.iter().map(|r| cidr(r)).collect(),
                    ..Default::default()
                }
            }),
            filters: vec![tcp_proxy(&dests, &chain_name, timeout)],
            transport_socket: Some(downstream_tls(tls, false)),
            name: chain_name,
            ..Default::default()
        },
        TlsChain::Passthrough {
            ranges,
            dests,
            timeout,
        } => FilterChain {
            filter_chain_match: Some(FilterChainMatch {
                server_names: names,
                prefix_ranges: ranges.iter().map(|r| cidr(r)).collect(),
                ..Default::default()
            }),
            filters: vec![tcp_proxy(&dests, &chain_name, timeout)],
            name: chain_name,
            ..Default::default()
        },
    }
}
