//! Unit tests of the routing simulation, by step: matching (virtual hosts, headers, paths),
//! listeners and chains, transport sockets, route effects; with the hand-built listeners
//! and sockets they share.

mod chains;
mod effects;
mod matching;
mod transport;

use crate::simulate::transport::SOCKET_MATCH_KEY;
use envoy_types::pb::envoy::config::core::v3::{address, socket_address, Address, TransportSocket};
use envoy_types::pb::envoy::config::listener::v3::{filter, FilterChain, Listener};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use envoy_types::pb::google::protobuf::Any;

/// A listener on `0.0.0.0:port` with `chains` (and the TLS inspector when `inspect`).
fn listener(port: u32, chains: Vec<FilterChain>, inspect: bool) -> Listener {
    use envoy_types::pb::envoy::config::listener::v3::ListenerFilter;
    Listener {
        name: format!("0.0.0.0_{port}"),
        address: Some(Address {
            address: Some(address::Address::SocketAddress(
                envoy_types::pb::envoy::config::core::v3::SocketAddress {
                    address: "0.0.0.0".into(),
                    port_specifier: Some(socket_address::PortSpecifier::PortValue(port)),
                    ..Default::default()
                },
            )),
        }),
        filter_chains: chains,
        listener_filters: if inspect {
            vec![ListenerFilter {
                name: "envoy.filters.listener.tls_inspector".into(),
                ..Default::default()
            }]
        } else {
            Vec::new()
        },
        ..Default::default()
    }
}

fn tcp_chain(name: &str, cluster: &str) -> FilterChain {
    use envoy_types::util::pack_any;
    FilterChain {
        name: name.into(),
        filters: vec![envoy_types::pb::envoy::config::listener::v3::Filter {
            name: "tcp".into(),
            config_type: Some(filter::ConfigType::TypedConfig(pack_any(TcpProxy {
                cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(cluster.into())),
                ..Default::default()
            }))),
        }],
        ..Default::default()
    }
}

fn hcm_chain(name: &str, hcm: HttpConnectionManager) -> FilterChain {
    use envoy_types::util::pack_any;
    FilterChain {
        name: name.into(),
        filters: vec![envoy_types::pb::envoy::config::listener::v3::Filter {
            name: "hcm".into(),
            config_type: Some(filter::ConfigType::TypedConfig(pack_any(hcm))),
        }],
        ..Default::default()
    }
}

fn socket(name: &str, any: Any) -> TransportSocket {
    use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
    TransportSocket {
        name: name.into(),
        config_type: Some(ConfigType::TypedConfig(any)),
    }
}

fn string_struct(pairs: &[(&str, &str)]) -> envoy_types::pb::google::protobuf::Struct {
    use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
    Struct {
        fields: pairs
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    Value {
                        kind: Some(Kind::StringValue(v.to_string())),
                    },
                )
            })
            .collect(),
    }
}

fn socket_metadata(
    pairs: &[(&str, &str)],
) -> Option<envoy_types::pb::envoy::config::core::v3::Metadata> {
    Some(envoy_types::pb::envoy::config::core::v3::Metadata {
        filter_metadata: [(SOCKET_MATCH_KEY.to_string(), string_struct(pairs))].into(),
        ..Default::default()
    })
}
