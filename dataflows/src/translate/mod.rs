//! Translation from domain records to Envoy v3 resources: the one place that builds
//! protobufs. Every builder is a pure function whose output is encoded once with prost
//! and addressed by its content hash (see [`crate::model::Resource`]).
//!
//! May import: `crate::model` and Envoy's protos (`envoy-types`); nothing of the dataflow.

pub mod claims;
pub mod cluster;
pub mod endpoint;
pub mod gateway_tls;
pub mod hosts;
pub mod listener;
pub mod route;
pub mod secret;
pub mod tcp;

// The names of Istio's clusters live in the model, which names clusters in its records.
pub use crate::model::names::{
    inbound_cluster_name, outbound_cluster_host, outbound_cluster_name, outbound_cluster_parts,
    BLACKHOLE_CLUSTER, PASSTHROUGH_CLUSTER,
};

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

/// `10.0.0.0/8` as Envoy's range (a bare address is a host route).
pub(crate) fn cidr(s: &str) -> envoy_types::pb::envoy::config::core::v3::CidrRange {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, l.parse().unwrap_or(0)),
        None => (s, if s.contains(':') { 128 } else { 32 }),
    };
    envoy_types::pb::envoy::config::core::v3::CidrRange {
        address_prefix: addr.to_string(),
        prefix_len: Some(envoy_types::pb::google::protobuf::UInt32Value { value: len }),
    }
}
