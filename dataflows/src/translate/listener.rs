//! LDS: outbound HTTP listeners (RDS by port name), bound egress listeners, gateway
//! listeners, and the `virtualOutbound`/`virtualInbound` capture listeners.

use super::{duration_ms, inbound_cluster_name, socket_address, PASSTHROUGH_CLUSTER};
use crate::model::{InboundPort, Resource, ResourceType};
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

pub(super) fn tls_inspector_filter() -> ListenerFilter {
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
/// with the workload certificate, a client certificate of the mesh required. An HTTP port's
/// chain passes the client's identity to the application in `x-forwarded-client-cert`; a
/// TCP port's proxies the bytes to the same cluster.
fn inbound_chain(port: InboundPort, mtls: bool) -> FilterChain {
    let cluster = inbound_cluster_name(port.port);
    let mut chain = FilterChain {
        name: cluster.clone(),
        filter_chain_match: Some(FilterChainMatch {
            destination_port: Some(UInt32Value {
                value: port.port as u32,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    if mtls {
        chain.name = format!("{}-mtls", chain.name);
        if let Some(m) = chain.filter_chain_match.as_mut() {
            m.transport_protocol = "tls".into();
            m.application_protocols = INBOUND_MTLS_ALPN.iter().map(|a| a.to_string()).collect();
        }
        chain.transport_socket = Some(super::secret::inbound_mtls());
    }
    chain.filters = vec![if port.tcp {
        tcp_to(&cluster, &cluster)
    } else {
        hcm_filter(inbound_hcm(port.port, &cluster, mtls))
    }];
    chain
}

/// The connection manager of an HTTP inbound chain: every request to `cluster`.
fn inbound_hcm(port: u16, cluster: &str, mtls: bool) -> HttpConnectionManager {
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::{
        ForwardClientCertDetails, SetCurrentClientCertDetails,
    };
    let mut hcm = HttpConnectionManager {
        route_specifier: Some(RouteSpecifier::RouteConfig(RouteConfiguration {
            name: cluster.to_string(),
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
                        cluster_specifier: Some(ClusterSpecifier::Cluster(cluster.to_string())),
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
        ..base_hcm(cluster)
    };
    if mtls {
        hcm.forward_client_cert_details = ForwardClientCertDetails::AppendForward as i32;
        hcm.set_current_client_cert_details = Some(SetCurrentClientCertDetails {
            uri: true,
            dns: true,
            subject: Some(BoolValue { value: true }),
            ..Default::default()
        });
    }
    hcm
}

/// The listener of a Sidecar `ingress` port the proxy binds itself, `inbound_BIND_PORT`
/// (apart from `BIND_PORT`, the name of an outbound listener on the same port: with `bind`
/// unset both would be `0.0.0.0_PORT`): the plaintext and the mTLS chain of
/// [`virtual_inbound`]'s ports, to `inbound|PORT||`.
pub fn ingress_listener(addr: &str, port: InboundPort) -> Resource {
    let listener = Listener {
        name: format!("inbound_{}", listener_name(addr, port.port)),
        address: Some(socket_address(addr, port.port)),
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

/// `virtualInbound` on 15006: per port of the proxy's own workload (sorted, one each), a
/// plaintext chain (HTTP, or TCP) and, beside it, an mTLS chain for connections of other
/// sidecars (TLS with Istio's ALPN), each to `inbound|PORT||`: Istio's default PERMISSIVE
/// mode, as no PeerAuthentication is read. Other ports pass through.
pub fn virtual_inbound(ports: &[InboundPort]) -> Resource {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Protocol;

    fn filters_of(r: &Resource) -> Vec<(String, Vec<String>)> {
        let l = Listener::decode(&r.body.0[..]).expect("a listener");
        l.filter_chains
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    c.filters.iter().map(|f| f.name.clone()).collect(),
                )
            })
            .collect()
    }

    /// A TCP port's inbound chains (plaintext and mTLS) proxy bytes; an HTTP port's run the
    /// connection manager; the catch-all passes through.
    #[test]
    fn virtual_inbound_proxies_tcp_ports_as_tcp() {
        let ports = [
            InboundPort {
                port: 9080,
                tcp: false,
            },
            InboundPort {
                port: 27017,
                tcp: true,
            },
        ];
        let hcm = "envoy.filters.network.http_connection_manager".to_string();
        let tcp = "envoy.filters.network.tcp_proxy".to_string();
        assert_eq!(
            filters_of(&virtual_inbound(&ports)),
            vec![
                ("inbound|9080||".into(), vec![hcm.clone()]),
                ("inbound|9080||-mtls".into(), vec![hcm]),
                ("inbound|27017||".into(), vec![tcp.clone()]),
                ("inbound|27017||-mtls".into(), vec![tcp.clone()]),
                ("virtualInbound-catchall-tcp".into(), vec![tcp]),
            ]
        );
    }

    #[test]
    fn merged_ports_are_tcp_when_any_service_reaches_them_as_tcp() {
        let merged = InboundPort::merged([
            (9080, Protocol::Http),
            (27017, Protocol::Http),
            (27017, Protocol::Tcp),
            (8443, Protocol::Tls),
        ]);
        let tcp: Vec<(u16, bool)> = merged.iter().map(|p| (p.port, p.tcp)).collect();
        assert_eq!(tcp, vec![(8443, true), (9080, false), (27017, true)]);
        // A Sidecar's ingress ports replace the workload's own (as in Istio); one reached
        // only by its own listener (captureMode NONE) is not in `virtualInbound`.
        let of = InboundPort::of_proxy(
            [(9080, Protocol::Http)],
            [
                (
                    InboundPort {
                        port: 9080,
                        tcp: true,
                    },
                    false,
                ),
                (
                    InboundPort {
                        port: 7000,
                        tcp: false,
                    },
                    false,
                ),
                (
                    InboundPort {
                        port: 7001,
                        tcp: true,
                    },
                    true,
                ),
            ],
        );
        let tcp: Vec<(u16, bool)> = of.iter().map(|p| (p.port, p.tcp)).collect();
        assert_eq!(tcp, vec![(7001, true)]);
        // Without ingress ports, the workload's own.
        let of = InboundPort::of_proxy([(9080, Protocol::Http)], []);
        assert_eq!(
            of,
            vec![InboundPort {
                port: 9080,
                tcp: false
            }]
        );
    }
}
