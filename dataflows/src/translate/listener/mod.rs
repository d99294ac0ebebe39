//! LDS: outbound HTTP listeners (RDS by port name), bound egress listeners, gateway
//! listeners, and the `virtualOutbound`/`virtualInbound` capture listeners. This file holds
//! the outbound ones, the API listeners of proxyless gRPC clients, and a proxy's idle
//! timeout; `inbound.rs` the inbound ones; `filters.rs` the pieces they share; `rbac.rs`
//! the security stopgap's RBAC filters.

pub mod ext_authz;
mod filters;
mod inbound;
pub mod jwt;
pub mod rbac;
mod refusals;
#[cfg(test)]
mod tests;

pub use filters::listener_name;
pub(super) use filters::{
    bind_flag, hcm_filter, http_chain, http_inspector_filter, rds_hcm, tcp_to,
    tls_inspector_filter, PLAINTEXT_HTTP_ALPN,
};
pub use inbound::{ingress_listener, virtual_inbound, virtual_inbound_secured};

use crate::model::{PathNormalization, Resource, ResourceType};
use crate::translate::socket_address;
use envoy_types::pb::envoy::config::core::v3::{HttpProtocolOptions, TrafficDirection};
use envoy_types::pb::envoy::config::listener::v3::{filter, ApiListener, FilterChain, Listener};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, HttpConnectionManager, Rds,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::TcpProxy;
use envoy_types::pb::google::protobuf::BoolValue;
use envoy_types::util::pack_any;
use filters::{fault_filter, router_filter};
use prost::Message;

/// The API listeners a proxyless gRPC client looks up for `xds:///NAME:port`: one per name
/// a client in `proxy_ns` may dial the host by (the FQDN and, for a cluster-local service,
/// `name.ns.svc`, `name.ns` and, from its own namespace, `name`: the names the port's route
/// configuration also carries as domains), each taking that route configuration. Faults
/// are injected (gRPC implements the filter); CORS is not, its per-route config is optional.
pub fn api_listeners(host: &str, port: u16, proxy_ns: &str, domain_suffix: &str) -> Vec<Resource> {
    let suffix = format!(":{port}");
    crate::translate::route::domains(host, port, proxy_ns, domain_suffix)
        .into_iter()
        .filter(|d| d.ends_with(&suffix))
        .map(|name| {
            let hcm = HttpConnectionManager {
                route_specifier: Some(RouteSpecifier::Rds(Rds {
                    config_source: Some(crate::translate::ads()),
                    route_config_name: port.to_string(),
                })),
                http_filters: vec![fault_filter(), router_filter()],
                ..Default::default()
            };
            let listener = Listener {
                name: name.clone(),
                api_listener: Some(ApiListener {
                    api_listener: Some(pack_any(hcm)),
                }),
                ..Default::default()
            };
            Resource::new(ResourceType::Listener, name, listener.encode_to_vec())
        })
        .collect()
}

/// An outbound HTTP listener on `ip:port` that takes its routes from RDS `route_name`.
/// `bind_to_port: false` listeners only receive connections handed over by `virtualOutbound`;
/// `edge` listeners (gateways) face clients directly.
pub fn http_listener(
    ip: &str,
    port: u16,
    bind_to_port: bool,
    route_name: &str,
    edge: bool,
) -> Resource {
    let name = listener_name(ip, port);
    let listener = Listener {
        name: name.clone(),
        address: Some(socket_address(ip, port)),
        filter_chains: vec![http_chain(&name, route_name, edge)],
        bind_to_port: bind_flag(bind_to_port),
        traffic_direction: TrafficDirection::Outbound as i32,
        ..Default::default()
    };
    Resource::new(ResourceType::Listener, name, listener.encode_to_vec())
}

/// `virtualOutbound` on 15001: captured outbound connections are handed to the listener for
/// their original destination; the rest go to `catchall`: `PassthroughCluster`, the
/// Sidecar's `egressProxy` cluster, or under REGISTRY_ONLY `BlackHoleCluster` (dropped), as
/// Istio does.
pub fn virtual_outbound(catchall: &str) -> Resource {
    let listener = Listener {
        name: "virtualOutbound".into(),
        address: Some(socket_address("0.0.0.0", 15001)),
        use_original_dst: Some(BoolValue { value: true }),
        filter_chains: vec![FilterChain {
            name: "virtualOutbound-catchall-tcp".into(),
            filters: vec![tcp_to(catchall, catchall)],
            ..Default::default()
        }],
        traffic_direction: TrafficDirection::Outbound as i32,
        ..Default::default()
    };
    Resource::new(
        ResourceType::Listener,
        listener.name.clone(),
        listener.encode_to_vec(),
    )
}

/// Listener `r` as a proxy whose node metadata says `IDLE_TIMEOUT` gets it, as Istio builds
/// it for that proxy: every connection manager's idle timeout
/// (`common_http_protocol_options.idle_timeout`: outbound, inbound, gateway), and the idle
/// timeout of every `tcp_proxy` that has none of its own — inbound chains, the catch-alls
/// of `virtualOutbound`, `virtualInbound` and of a port's listener, outbound TCP and TLS
/// routes. A route's `tcp_proxy` has one only where its DestinationRule sets `tcp.idleTimeout`
/// (the one idle timeout a builder here gives it), which wins, as in Istio. `0`: none.
///
/// One pass over a built listener rather than a parameter of every builder: no listener a
/// proxy gets can miss it, and the dataflow and the naive recompute apply the same function
/// to the same bodies. API listeners (proxyless gRPC) have no filter chains and are left
/// alone, as Istio gives them none. Other resources come back as they are.
///
/// The listener is decoded and encoded again: its builders set no map field with more than
/// one entry (prost's maps are `HashMap`s), so the encoding stays deterministic.
/// A gateway's listener with what its security policies make it refuse (`sec`, see
/// [`crate::model::InboundSecurity::for_router`] and [`refusals::Refusals::authorize`]). Other resources
/// pass as they are. `None` (no listener: the port is closed) for a listener that cannot
/// be read back, so that a refusal is never lost.
pub fn with_refusals(r: Resource, sec: &crate::model::InboundSecurity) -> Option<Resource> {
    if r.rtype != ResourceType::Listener {
        return Some(r);
    }
    let mut listener = Listener::decode(&r.body.0[..]).ok()?;
    let chains = listener
        .filter_chains
        .iter_mut()
        .chain(listener.default_filter_chain.iter_mut());
    let refusals = refusals::Refusals::of(sec);
    for chain in chains {
        refusals.authorize(chain);
    }
    Some(Resource::new(
        ResourceType::Listener,
        r.name,
        listener.encode_to_vec(),
    ))
}

/// Listener `r` with every connection manager under the mesh's `pathNormalization` `n`, as
/// Istio sets it on each: `NONE` leaves paths alone, `BASE` resolves dot segments,
/// `MERGE_SLASHES` also merges slashes, `DECODE_AND_MERGE_SLASHES` also decodes escaped
/// slashes and forwards the decoded path. A connection manager whose requests a security
/// policy checks keeps the strictest normalization it was built with (`refusals.rs` sets
/// it): a weaker mesh setting must not reopen the bypasses of CVE-2021-31920.
pub fn with_path_normalization(r: &Resource, n: PathNormalization) -> Resource {
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::PathWithEscapedSlashesAction as Escaped;
    let (normalize, merge, escaped) = match n {
        PathNormalization::None => (false, false, Escaped::KeepUnchanged),
        PathNormalization::Base => (true, false, Escaped::KeepUnchanged),
        PathNormalization::MergeSlashes => (true, true, Escaped::KeepUnchanged),
        PathNormalization::DecodeAndMergeSlashes => (true, true, Escaped::UnescapeAndForward),
    };
    rewrite_filters(r, |any| {
        if !any.type_url.ends_with(".HttpConnectionManager") {
            return;
        }
        let Ok(mut hcm) = HttpConnectionManager::decode(&any.value[..]) else {
            return;
        };
        if hcm.path_with_escaped_slashes_action == Escaped::UnescapeAndRedirect as i32 {
            return; // checked by a security policy: the strictest stays
        }
        hcm.normalize_path = Some(BoolValue { value: normalize });
        hcm.merge_slashes = merge;
        hcm.path_with_escaped_slashes_action = escaped as i32;
        *any = pack_any(hcm);
    })
}

/// Listener `r` with the node metadata `IDLE_TIMEOUT` (`idle_ns`) on every connection manager
/// and on every `tcp_proxy` that has no idle timeout of its own (a DestinationRule's wins).
pub fn with_idle_timeout(r: &Resource, idle_ns: u64) -> Resource {
    if r.rtype != ResourceType::Listener {
        return r.clone();
    }
    let idle = crate::translate::duration_ns(idle_ns);
    rewrite_filters(r, |any| {
        if any.type_url.ends_with(".HttpConnectionManager") {
            if let Ok(mut hcm) = HttpConnectionManager::decode(&any.value[..]) {
                let options = hcm.common_http_protocol_options.take().unwrap_or_default();
                hcm.common_http_protocol_options = Some(HttpProtocolOptions {
                    idle_timeout: Some(idle),
                    ..options
                });
                *any = pack_any(hcm);
            }
        } else if any.type_url.ends_with(".TcpProxy") {
            if let Ok(mut proxy) = TcpProxy::decode(&any.value[..]) {
                if proxy.idle_timeout.is_none() {
                    proxy.idle_timeout = Some(idle);
                    *any = pack_any(proxy);
                }
            }
        }
    })
}

/// Listener `r` with `f` run on the typed config of every filter of its chains (the default
/// chain's too); `r` as it is if it does not decode.
fn rewrite_filters(
    r: &Resource,
    mut f: impl FnMut(&mut envoy_types::pb::google::protobuf::Any),
) -> Resource {
    let Ok(mut listener) = Listener::decode(&r.body.0[..]) else {
        return r.clone();
    };
    let chains = listener
        .filter_chains
        .iter_mut()
        .chain(listener.default_filter_chain.iter_mut());
    for filter in chains.flat_map(|c| c.filters.iter_mut()) {
        if let Some(filter::ConfigType::TypedConfig(any)) = &mut filter.config_type {
            f(any);
        }
    }
    Resource::new(
        ResourceType::Listener,
        r.name.clone(),
        listener.encode_to_vec(),
    )
}
