//! LDS: outbound HTTP listeners (RDS by port name), bound egress listeners, gateway
//! listeners, and the `virtualOutbound`/`virtualInbound` capture listeners.

use super::{duration_ms, inbound_cluster_name, socket_address, PASSTHROUGH_CLUSTER};
use crate::model::{Resource, ResourceType};
use envoy_types::pb::envoy::config::core::v3::TrafficDirection;
use envoy_types::pb::envoy::config::listener::v3::ApiListener;
use envoy_types::pb::envoy::config::listener::v3::{
    filter, listener_filter, Filter, FilterChain, FilterChainMatch, Listener, ListenerFilter,
};
use envoy_types::pb::envoy::config::route::v3::{
    route::Action, route_action::ClusterSpecifier, route_match::PathSpecifier, Route, RouteAction,
    RouteConfiguration, RouteMatch, VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::listener::original_dst::v3::OriginalDst;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::{PathWithEscapedSlashesAction, RouteSpecifier, UpgradeConfig},
    http_filter, HttpConnectionManager, HttpFilter, Rds,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use envoy_types::pb::google::protobuf::{BoolValue, UInt32Value};
use envoy_types::util::pack_any;
use prost::Message;

fn router_filter() -> HttpFilter {
    HttpFilter {
        name: "envoy.filters.http.router".into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(
            Router::default(),
        ))),
        ..Default::default()
    }
}

/// The CORS filter, before the fault filter as in Istio's chain: routes with `corsPolicy`
/// configure it per route; elsewhere it lets requests through untouched.
fn cors_filter() -> HttpFilter {
    HttpFilter {
        name: super::route::CORS_FILTER.into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(
            envoy_types::pb::envoy::extensions::filters::http::cors::v3::Cors::default(),
        ))),
        ..Default::default()
    }
}

/// The fault filter with no fault of its own: VirtualService routes with `fault` configure it
/// per route (`typed_per_filter_config`), as Istio does.
fn fault_filter() -> HttpFilter {
    HttpFilter {
        name: super::route::FAULT_FILTER.into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(
            envoy_types::pb::envoy::extensions::filters::http::fault::v3::HttpFault::default(),
        ))),
        ..Default::default()
    }
}

pub(super) fn hcm_filter(hcm: HttpConnectionManager) -> Filter {
    Filter {
        name: "envoy.filters.network.http_connection_manager".into(),
        config_type: Some(filter::ConfigType::TypedConfig(pack_any(hcm))),
    }
}

/// The connection manager settings Istio uses everywhere: normalized paths with escaped
/// slashes kept, websocket upgrades allowed.
fn base_hcm(stat_prefix: &str) -> HttpConnectionManager {
    HttpConnectionManager {
        stat_prefix: stat_prefix.to_string(),
        http_filters: vec![cors_filter(), fault_filter(), router_filter()],
        normalize_path: Some(BoolValue { value: true }),
        path_with_escaped_slashes_action: PathWithEscapedSlashesAction::KeepUnchanged as i32,
        upgrade_configs: vec![UpgradeConfig {
            upgrade_type: "websocket".into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub(super) fn rds_hcm(stat_prefix: &str, route_name: &str, edge: bool) -> HttpConnectionManager {
    HttpConnectionManager {
        route_specifier: Some(RouteSpecifier::Rds(Rds {
            config_source: Some(super::ads()),
            route_config_name: route_name.to_string(),
        })),
        // At the edge (gateways) the peer is the real client.
        use_remote_address: edge.then_some(BoolValue { value: true }),
        ..base_hcm(stat_prefix)
    }
}

/// The API listeners a proxyless gRPC client looks up for `xds:///NAME:port`: one per name
/// a client in `proxy_ns` may dial the host by (the FQDN and, for a cluster-local service,
/// `name.ns.svc`, `name.ns` and, from its own namespace, `name`: the names the port's route
/// configuration also carries as domains), each taking that route configuration. Faults
/// are injected (gRPC implements the filter); CORS is not, its per-route config is optional.
pub fn api_listeners(host: &str, port: u16, proxy_ns: &str, domain_suffix: &str) -> Vec<Resource> {
    let suffix = format!(":{port}");
    super::route::domains(host, port, proxy_ns, domain_suffix)
        .into_iter()
        .filter(|d| d.ends_with(&suffix))
        .map(|name| {
            let hcm = HttpConnectionManager {
                route_specifier: Some(RouteSpecifier::Rds(Rds {
                    config_source: Some(super::ads()),
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

/// Istio's listener name: `ADDRESS_PORT`.
pub fn listener_name(ip: &str, port: u16) -> String {
    format!("{ip}_{port}")
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

/// The filter chain of an outbound HTTP listener `name`: a connection manager taking its
/// routes from RDS `route_name`.
pub(super) fn http_chain(name: &str, route_name: &str, edge: bool) -> FilterChain {
    FilterChain {
        filters: vec![hcm_filter(rds_hcm(
            &format!("outbound_{name}"),
            route_name,
            edge,
        ))],
        ..Default::default()
    }
}

/// `bind_to_port` as Envoy reads it: unset means bound.
pub(super) fn bind_flag(bind_to_port: bool) -> Option<BoolValue> {
    if bind_to_port {
        None
    } else {
        Some(BoolValue { value: false })
    }
}

pub(super) fn tcp_to(cluster: &str, stat_prefix: &str) -> Filter {
    Filter {
        name: "envoy.filters.network.tcp_proxy".into(),
        config_type: Some(filter::ConfigType::TypedConfig(pack_any(TcpProxy {
            stat_prefix: stat_prefix.into(),
            cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(cluster.into())),
            ..Default::default()
        }))),
    }
}

fn original_dst_filter() -> ListenerFilter {
    ListenerFilter {
        name: "envoy.filters.listener.original_dst".into(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(pack_any(
            OriginalDst {},
        ))),
        ..Default::default()
    }
}

fn tls_inspector_filter() -> ListenerFilter {
    ListenerFilter {
        name: "envoy.filters.listener.tls_inspector".into(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(pack_any(
            envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector::default(),
        ))),
        ..Default::default()
    }
}

/// The ALPN values of a sidecar's mTLS, as Istio's proxies offer them (the HTTP ones are
/// what Istio's own outbound side sends; meshflow's sends the first two).
const INBOUND_MTLS_ALPN: [&str; 5] = [
    "istio-peer-exchange",
    "istio",
    "istio-http/1.0",
    "istio-http/1.1",
    "istio-h2",
];

/// One inbound chain of `port`: plaintext, or (`mtls`) TLS with Istio's ALPN terminated
/// with the workload certificate, a client certificate of the mesh required, the client's
/// identity passed to the application in `x-forwarded-client-cert`.
fn inbound_chain(port: u16, mtls: bool) -> FilterChain {
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::{
        ForwardClientCertDetails, SetCurrentClientCertDetails,
    };
    let cluster = inbound_cluster_name(port);
    let mut hcm = HttpConnectionManager {
        route_specifier: Some(RouteSpecifier::RouteConfig(RouteConfiguration {
            name: cluster.clone(),
            virtual_hosts: vec![VirtualHost {
                name: format!("inbound|http|{port}"),
                domains: vec!["*".into()],
                routes: vec![Route {
                    name: "default".into(),
                    r#match: Some(RouteMatch {
                        path_specifier: Some(PathSpecifier::Prefix("/".into())),
                        ..Default::default()
                    }),
                    action: Some(Action::Route(RouteAction {
                        cluster_specifier: Some(ClusterSpecifier::Cluster(cluster.clone())),
                        timeout: Some(duration_ms(0)),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            validate_clusters: Some(BoolValue { value: false }),
            ..Default::default()
        })),
        ..base_hcm(&cluster)
    };
    let mut chain = FilterChain {
        name: cluster,
        filter_chain_match: Some(FilterChainMatch {
            destination_port: Some(UInt32Value { value: port as u32 }),
            ..Default::default()
        }),
        ..Default::default()
    };
    if mtls {
        hcm.forward_client_cert_details = ForwardClientCertDetails::AppendForward as i32;
        hcm.set_current_client_cert_details = Some(SetCurrentClientCertDetails {
            uri: true,
            dns: true,
            subject: Some(BoolValue { value: true }),
            ..Default::default()
        });
        chain.name = format!("{}-mtls", chain.name);
        if let Some(m) = chain.filter_chain_match.as_mut() {
            m.transport_protocol = "tls".into();
            m.application_protocols = INBOUND_MTLS_ALPN.iter().map(|a| a.to_string()).collect();
        }
        chain.transport_socket = Some(super::secret::inbound_mtls());
    }
    chain.filters = vec![hcm_filter(hcm)];
    chain
}

/// The listener of a Sidecar `ingress` port the proxy binds itself, `inbound_BIND_PORT`
/// (apart from `BIND_PORT`, the name of an outbound listener on the same port: with `bind`
/// unset both would be `0.0.0.0_PORT`): the plaintext and the mTLS chain of
/// [`virtual_inbound`]'s ports, to `inbound|PORT||`.
pub fn ingress_listener(addr: &str, port: u16) -> Resource {
    let listener = Listener {
        name: format!("inbound_{}", listener_name(addr, port)),
        address: Some(socket_address(addr, port)),
        listener_filters: vec![tls_inspector_filter()],
        continue_on_listener_filters_timeout: true,
        filter_chains: vec![inbound_chain(port, false), inbound_chain(port, true)],
        traffic_direction: TrafficDirection::Inbound as i32,
        ..Default::default()
    };
    Resource::new(
        ResourceType::Listener,
        listener.name.clone(),
        listener.encode_to_vec(),
    )
}

/// `virtualOutbound` on 15001: captured outbound connections are handed to the listener for
/// their original destination; the rest pass through, or with `registry_only` are dropped
/// (`BlackHoleCluster`), as Istio's REGISTRY_ONLY does.
pub fn virtual_outbound(registry_only: bool) -> Resource {
    let catchall = if registry_only {
        super::BLACKHOLE_CLUSTER
    } else {
        PASSTHROUGH_CLUSTER
    };
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

/// `virtualInbound` on 15006: per port of the proxy's own workload (sorted), a plaintext
/// HTTP chain and, beside it, an mTLS chain for connections of other sidecars (TLS with
/// Istio's ALPN), each routing to `inbound|PORT||`: Istio's default PERMISSIVE mode, as no
/// PeerAuthentication is read. Other ports pass through.
pub fn virtual_inbound(ports: &[u16]) -> Resource {
    let mut ports = ports.to_vec();
    ports.sort();
    ports.dedup();
    let mut chains: Vec<FilterChain> = ports
        .iter()
        .flat_map(|&port| [inbound_chain(port, false), inbound_chain(port, true)])
        .collect();
    chains.push(FilterChain {
        name: "virtualInbound-catchall-tcp".into(),
        filters: vec![tcp_to(PASSTHROUGH_CLUSTER, "InboundPassthroughCluster")],
        ..Default::default()
    });
    let listener = Listener {
        name: "virtualInbound".into(),
        address: Some(socket_address("0.0.0.0", 15006)),
        // The TLS inspector tells an mTLS connection (and its ALPN) from a plaintext one.
        listener_filters: vec![original_dst_filter(), tls_inspector_filter()],
        // A server that speaks first (no client bytes to inspect) is not held up for ever.
        continue_on_listener_filters_timeout: true,
        filter_chains: chains,
        traffic_direction: TrafficDirection::Inbound as i32,
        ..Default::default()
    };
    Resource::new(
        ResourceType::Listener,
        listener.name.clone(),
        listener.encode_to_vec(),
    )
}
