//! The pieces every listener is built from: the HTTP filters and connection manager
//! settings Istio uses everywhere, a `tcp_proxy` to one cluster, the listener filters
//! (original destination, TLS and HTTP inspectors), and Istio's listener names.

use crate::translate::duration_ms;
use envoy_types::pb::envoy::config::listener::v3::{
    filter, listener_filter, Filter, FilterChain, ListenerFilter,
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::listener::original_dst::v3::OriginalDst;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::{PathWithEscapedSlashesAction, RouteSpecifier, UpgradeConfig},
    http_filter, HttpConnectionManager, HttpFilter, Rds,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use envoy_types::pb::google::protobuf::BoolValue;
use envoy_types::util::pack_any;

pub(super) fn router_filter() -> HttpFilter {
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
pub(super) fn cors_filter() -> HttpFilter {
    HttpFilter {
        name: crate::translate::route::CORS_FILTER.into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(
            envoy_types::pb::envoy::extensions::filters::http::cors::v3::Cors::default(),
        ))),
        ..Default::default()
    }
}

/// The fault filter with no fault of its own: VirtualService routes with `fault` configure it
/// per route (`typed_per_filter_config`), as Istio does.
pub(super) fn fault_filter() -> HttpFilter {
    HttpFilter {
        name: crate::translate::route::FAULT_FILTER.into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(
            envoy_types::pb::envoy::extensions::filters::http::fault::v3::HttpFault::default(),
        ))),
        ..Default::default()
    }
}

pub(in crate::translate) fn hcm_filter(hcm: HttpConnectionManager) -> Filter {
    Filter {
        name: "envoy.filters.network.http_connection_manager".into(),
        config_type: Some(filter::ConfigType::TypedConfig(pack_any(hcm))),
    }
}

/// The connection manager settings Istio uses everywhere: normalized paths with escaped
/// slashes kept, websocket upgrades allowed, no stream idle timeout (Envoy's 5 minutes would
/// reset long-lived quiet streams, gRPC streaming among them; routes bound requests).
pub(super) fn base_hcm(stat_prefix: &str) -> HttpConnectionManager {
    HttpConnectionManager {
        stat_prefix: stat_prefix.to_string(),
        stream_idle_timeout: Some(duration_ms(0)),
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

pub(in crate::translate) fn rds_hcm(
    stat_prefix: &str,
    route_name: &str,
    edge: bool,
) -> HttpConnectionManager {
    HttpConnectionManager {
        route_specifier: Some(RouteSpecifier::Rds(Rds {
            config_source: Some(crate::translate::ads()),
            route_config_name: route_name.to_string(),
        })),
        // At the edge (gateways) the peer is the real client.
        use_remote_address: edge.then_some(BoolValue { value: true }),
        ..base_hcm(stat_prefix)
    }
}

/// Istio's listener name: `ADDRESS_PORT`.
pub fn listener_name(ip: &str, port: u16) -> String {
    format!("{ip}_{port}")
}

/// The filter chain of an outbound HTTP listener `name`: a connection manager taking its
/// routes from RDS `route_name`.
pub(in crate::translate) fn http_chain(name: &str, route_name: &str, edge: bool) -> FilterChain {
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
pub(in crate::translate) fn bind_flag(bind_to_port: bool) -> Option<BoolValue> {
    if bind_to_port {
        None
    } else {
        Some(BoolValue { value: false })
    }
}

pub(in crate::translate) fn tcp_to(cluster: &str, stat_prefix: &str) -> Filter {
    Filter {
        name: "envoy.filters.network.tcp_proxy".into(),
        config_type: Some(filter::ConfigType::TypedConfig(pack_any(TcpProxy {
            stat_prefix: stat_prefix.into(),
            cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(cluster.into())),
            ..Default::default()
        }))),
    }
}

pub(super) fn original_dst_filter() -> ListenerFilter {
    ListenerFilter {
        name: "envoy.filters.listener.original_dst".into(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(pack_any(
            OriginalDst {},
        ))),
        ..Default::default()
    }
}

pub(in crate::translate) fn tls_inspector_filter() -> ListenerFilter {
    ListenerFilter {
        name: "envoy.filters.listener.tls_inspector".into(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(pack_any(
            envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector::default(),
        ))),
        ..Default::default()
    }
}

/// What Envoy's HTTP inspector reports for plaintext HTTP/1.1 and HTTP/2 (Istio leaves
/// HTTP/1.0 out unless asked: such connections go on as TCP rather than be refused).
pub(in crate::translate) const PLAINTEXT_HTTP_ALPN: [&str; 2] = ["http/1.1", "h2c"];

/// The HTTP inspector: sets a plaintext connection's application protocol (`http/1.1`,
/// `h2c`) from its first bytes, for chains matched on it. It leaves TLS connections alone.
pub(in crate::translate) fn http_inspector_filter() -> ListenerFilter {
    ListenerFilter {
        name: "envoy.filters.listener.http_inspector".into(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(pack_any(
            envoy_types::pb::envoy::extensions::filters::listener::http_inspector::v3::HttpInspector::default(),
        ))),
        ..Default::default()
    }
}
