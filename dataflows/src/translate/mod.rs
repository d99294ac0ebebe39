//! Translation from domain records to Envoy v3 resources: the one place that builds
//! protobufs. Every builder is a pure function whose output is encoded once with prost
//! and addressed by its content hash (see [`crate::model::Resource`]).
//!
//! May import: `crate::model` and Envoy's protos (`envoy-types`); nothing of the dataflow.

pub mod cluster;
pub mod endpoint;
pub mod gateway_tls;
pub mod hosts;
pub mod listener;
pub mod route;
pub mod secret;
pub mod tcp;

use envoy_types::pb::envoy::config::core::v3::{address, Address};
use envoy_types::pb::envoy::config::core::v3::{
    config_source::ConfigSourceSpecifier, socket_address::PortSpecifier, AggregatedConfigSource,
    ApiVersion, ConfigSource, SocketAddress,
};
use envoy_types::pb::google::protobuf::Duration;

/// A config source that says "over the same ADS stream".
pub(crate) fn ads() -> ConfigSource {
    ConfigSource {
        config_source_specifier: Some(ConfigSourceSpecifier::Ads(AggregatedConfigSource {})),
        resource_api_version: ApiVersion::V3 as i32,
        ..Default::default()
    }
}

pub(crate) fn duration_ms(ms: u64) -> Duration {
    Duration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

/// A duration given in nanoseconds (a Go `time.Duration`, as Istio's agent sends them).
pub(crate) fn duration_ns(ns: u64) -> Duration {
    Duration {
        seconds: (ns / 1_000_000_000) as i64,
        nanos: (ns % 1_000_000_000) as i32,
    }
}

pub(crate) fn socket_address(ip: &str, port: u16) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: ip.to_string(),
            port_specifier: Some(PortSpecifier::PortValue(port as u32)),
            ..Default::default()
        })),
    }
}

/// Istio's outbound cluster name: `outbound|PORT|SUBSET|HOST`.
pub fn outbound_cluster_name(port: u16, subset: Option<&str>, host: &str) -> String {
    format!("outbound|{}|{}|{}", port, subset.unwrap_or(""), host)
}

/// The parts of an outbound cluster name `outbound|PORT|SUBSET|HOST`: (PORT, SUBSET, HOST)
/// as written; `None` for another name.
pub fn outbound_cluster_parts(name: &str) -> Option<(&str, &str, &str)> {
    let mut parts = name.splitn(4, '|');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("outbound"), Some(port), Some(subset), Some(host)) => Some((port, subset, host)),
        _ => None,
    }
}

/// The host of an outbound cluster name ("" for another name).
pub fn outbound_cluster_host(name: &str) -> &str {
    outbound_cluster_parts(name).map_or("", |(_, _, host)| host)
}

/// Istio's inbound cluster name: `inbound|PORT||`.
pub fn inbound_cluster_name(port: u16) -> String {
    format!("inbound|{port}||")
}

pub const PASSTHROUGH_CLUSTER: &str = "PassthroughCluster";
pub const BLACKHOLE_CLUSTER: &str = "BlackHoleCluster";
