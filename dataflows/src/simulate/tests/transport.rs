//! Transport sockets: the unsupported or broken ones reported, and the metadata matches that
//! pick each endpoint's socket.

use super::{listener, socket, socket_metadata, string_struct, tcp_chain};
use crate::simulate::transport::{transport, Side, UPSTREAM_TLS_TYPE};
use crate::simulate::{Call, ProxyConfig, Transport};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::{address, socket_address, Address, TransportSocket};
use envoy_types::pb::envoy::config::endpoint::v3::{lb_endpoint, ClusterLoadAssignment};
use envoy_types::pb::google::protobuf::Any;

/// Transport sockets this simulation does not read (an unknown type, a body that does not
/// decode, a context for the other end, no config at all) are reported as such, in the
/// outcome and its warnings: never a panic, never taken as plaintext.
#[test]
fn unknown_or_broken_transport_sockets_are_reported() {
    use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::DownstreamTlsContext;
    use envoy_types::util::pack_any;
    let alts = Any {
        type_url: "type.googleapis.com/envoy.extensions.transport_sockets.alts.v3.Alts".into(),
        value: vec![1, 2, 3],
    };
    let broken = Any {
        type_url: format!("type.googleapis.com/{UPSTREAM_TLS_TYPE}"),
        value: vec![0xff, 0xff, 0xff],
    };
    let cases = [
        (socket("alts", alts), "not modelled"),
        (socket("tls", broken), "did not decode"),
        (
            socket("tls", pack_any(DownstreamTlsContext::default())),
            "other end",
        ),
        (
            TransportSocket {
                name: "custom".into(),
                config_type: None,
            },
            "no typed config",
        ),
    ];
    for (ts, why) in cases {
        let cluster = Cluster {
            name: "c".into(),
            transport_socket: Some(ts.clone()),
            ..Default::default()
        };
        let config = ProxyConfig {
            listeners: [(
                "l".to_string(),
                listener(80, vec![tcp_chain("t", "c")], false),
            )]
            .into(),
            clusters: [("c".to_string(), cluster)].into(),
            ..Default::default()
        };
        let o = config.simulate(&Call::connect(80));
        match &o.upstreams()[0].transport {
            Transport::Unsupported { why: w, .. } => assert!(w.contains(why), "{w}"),
            other => panic!("{other:?}"),
        }
        assert!(
            o.warnings.iter().any(|w| w.contains("not modelled")),
            "{:?}",
            o.warnings
        );
    }
    // raw_buffer, typed or by name alone, is plaintext.
    let raw = TransportSocket {
        name: "envoy.transport_sockets.raw_buffer".into(),
        config_type: None,
    };
    assert_eq!(transport(&raw, Side::Upstream), Transport::Plaintext);
    let typed = TransportSocket {
        config_type: Some(ConfigType::TypedConfig(pack_any(
            envoy_types::pb::envoy::extensions::transport_sockets::raw_buffer::v3::RawBuffer {},
        ))),
        ..raw
    };
    assert_eq!(transport(&typed, Side::Upstream), Transport::Plaintext);
}

/// Istio's auto mTLS: `transport_socket_matches` send mTLS to endpoints whose metadata
/// under `envoy.transport_socket_match` says `tlsMode: istio` (or whose locality's does),
/// plaintext to the rest by the empty match; without a matching entry an endpoint gets
/// the cluster's own socket.
#[test]
fn transport_socket_matches_pick_each_endpoints_socket() {
    use envoy_types::pb::envoy::config::cluster::v3::cluster::TransportSocketMatch;
    use envoy_types::pb::envoy::config::endpoint::v3::{Endpoint, LbEndpoint, LocalityLbEndpoints};
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        common_tls_context::{CombinedCertificateValidationContext, ValidationContextType},
        CommonTlsContext, SdsSecretConfig, UpstreamTlsContext,
    };
    use envoy_types::util::pack_any;
    let sds = |n: &str| SdsSecretConfig {
        name: n.into(),
        ..Default::default()
    };
    let mtls = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            alpn_protocols: vec!["istio-peer-exchange".into(), "istio".into()],
            tls_certificate_sds_secret_configs: vec![sds("default")],
            validation_context_type: Some(ValidationContextType::CombinedValidationContext(
                CombinedCertificateValidationContext {
                    validation_context_sds_secret_config: Some(sds("ROOTCA")),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }),
        sni: "outbound_.80_._.a.example".into(),
        ..Default::default()
    };
    let endpoint = |ip: &str, meta: &[(&str, &str)]| LbEndpoint {
        host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
            address: Some(Address {
                address: Some(address::Address::SocketAddress(
                    envoy_types::pb::envoy::config::core::v3::SocketAddress {
                        address: ip.into(),
                        port_specifier: Some(socket_address::PortSpecifier::PortValue(80)),
                        ..Default::default()
                    },
                )),
            }),
            ..Default::default()
        })),
        metadata: (!meta.is_empty()).then(|| socket_metadata(meta)).flatten(),
        ..Default::default()
    };
    let assignment = ClusterLoadAssignment {
        endpoints: vec![
            LocalityLbEndpoints {
                lb_endpoints: vec![
                    endpoint("10.0.0.1", &[("tlsMode", "istio")]),
                    endpoint("10.0.0.2", &[("tlsMode", "disabled")]),
                    endpoint("10.0.0.3", &[]),
                ],
                ..Default::default()
            },
            LocalityLbEndpoints {
                metadata: socket_metadata(&[("tlsMode", "istio")]),
                lb_endpoints: vec![endpoint("10.0.1.1", &[])],
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let matches = |with_plaintext: bool| {
        let mut m = vec![TransportSocketMatch {
            name: "tlsMode-istio".into(),
            r#match: Some(string_struct(&[("tlsMode", "istio")])),
            transport_socket: Some(socket(
                "envoy.transport_sockets.tls",
                pack_any(mtls.clone()),
            )),
        }];
        if with_plaintext {
            m.push(TransportSocketMatch {
                name: "tlsMode-disabled".into(),
                r#match: Some(Default::default()),
                transport_socket: Some(TransportSocket {
                    name: "envoy.transport_sockets.raw_buffer".into(),
                    config_type: None,
                }),
            });
        }
        m
    };
    for with_plaintext in [true, false] {
        let cluster = Cluster {
            name: "c".into(),
            load_assignment: Some(assignment.clone()),
            transport_socket_matches: matches(with_plaintext),
            ..Default::default()
        };
        let config = ProxyConfig {
            listeners: [(
                "l".to_string(),
                listener(80, vec![tcp_chain("t", "c")], false),
            )]
            .into(),
            clusters: [("c".to_string(), cluster)].into(),
            ..Default::default()
        };
        let o = config.simulate(&Call::connect(80));
        let up = &o.upstreams()[0];
        assert_eq!(up.socket_matches.len(), if with_plaintext { 2 } else { 1 });
        assert_eq!(up.socket_matches[0].criteria, ["tlsMode=\"istio\""]);
        let sockets: Vec<(String, Option<String>, bool)> = up
            .endpoints
            .iter()
            .map(|e| {
                let mutual = up.transport_of(e).tls().is_some_and(|t| t.istio_mutual);
                (e.address.clone(), e.socket.clone(), mutual)
            })
            .collect();
        let plain = with_plaintext.then(|| "tlsMode-disabled".to_string());
        assert_eq!(
            sockets,
            [
                ("10.0.0.1:80".into(), Some("tlsMode-istio".into()), true),
                ("10.0.0.2:80".into(), plain.clone(), false),
                ("10.0.0.3:80".into(), plain.clone(), false),
                // The locality's metadata, where the endpoint's matches nothing.
                (
                    "10.0.1.1:80".into(),
                    Some(if with_plaintext {
                        "tlsMode-disabled".into()
                    } else {
                        "tlsMode-istio".into()
                    }),
                    !with_plaintext
                ),
            ],
            "with a plaintext entry: {with_plaintext}"
        );
        let t = up.transport_of(&up.endpoints[0]).tls().expect("mTLS");
        assert_eq!(t.sni.as_deref(), Some("outbound_.80_._.a.example"));
        assert_eq!(up.transport, Transport::Plaintext, "no socket of its own");
        assert!(o.warnings.is_empty(), "{:?}", o.warnings);
    }
}
