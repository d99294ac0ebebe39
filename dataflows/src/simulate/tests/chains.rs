//! Listeners and filter chains, end to end through hand-built listeners: chain selection by
//! port, IP range, transport and ALPN, TLS termination, and every kind of route action.

use super::{hcm_chain, listener, socket, tcp_chain};
use crate::simulate::{Action, Call, Discovery, NoMatch, ProxyConfig, Source, Transport};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::{address, socket_address, Address, HealthStatus};
use envoy_types::pb::envoy::config::endpoint::v3::{lb_endpoint, ClusterLoadAssignment};
use envoy_types::pb::envoy::config::listener::v3::{filter, FilterChain, Listener};
use envoy_types::pb::envoy::config::route::v3::{
    redirect_action, route::Action as RouteActionKind, route_action::ClusterSpecifier,
    route_match::PathSpecifier, Route, RouteAction, RouteConfiguration, RouteMatch, VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, http_connection_manager::StripPortMode,
    HttpConnectionManager,
};

/// A socket address `ip:port`.
fn addr(ip: &str, port: u32) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(
            envoy_types::pb::envoy::config::core::v3::SocketAddress {
                address: ip.into(),
                port_specifier: Some(socket_address::PortSpecifier::PortValue(port)),
                ..Default::default()
            },
        )),
    }
}

/// An inline route configuration with a direct response, a redirect and a route by
/// `cluster_header`, port stripped from the authority.
fn inline_hcm() -> HttpConnectionManager {
    use envoy_types::pb::envoy::config::core::v3::{data_source, DataSource};
    use envoy_types::pb::envoy::config::route::v3::{
        route, route_match, DirectResponseAction, RedirectAction, Route,
    };

    let route = |name: &str, prefix: &str, action: route::Action| Route {
        name: name.into(),
        r#match: Some(RouteMatch {
            path_specifier: Some(route_match::PathSpecifier::Prefix(prefix.into())),
            ..Default::default()
        }),
        action: Some(action),
        ..Default::default()
    };
    HttpConnectionManager {
        route_specifier: Some(RouteSpecifier::RouteConfig(RouteConfiguration {
            name: "inline".into(),
            virtual_hosts: vec![VirtualHost {
                name: "all".into(),
                domains: vec!["*".into()],
                routes: vec![
                    route(
                        "direct",
                        "/health",
                        route::Action::DirectResponse(DirectResponseAction {
                            status: 200,
                            body: Some(DataSource {
                                specifier: Some(data_source::Specifier::InlineString("ok".into())),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                    ),
                    route(
                        "redirect",
                        "/old",
                        route::Action::Redirect(RedirectAction {
                            host_redirect: "new.example.com".into(),
                            response_code: redirect_action::RedirectResponseCode::Found as i32,
                            ..Default::default()
                        }),
                    ),
                    route(
                        "by-header",
                        "/",
                        route::Action::Route(RouteAction {
                            cluster_specifier: Some(ClusterSpecifier::ClusterHeader(
                                "x-cluster".into(),
                            )),
                            ..Default::default()
                        }),
                    ),
                ],
                ..Default::default()
            }],
            ..Default::default()
        })),
        strip_port_mode: Some(StripPortMode::StripAnyHostPort(true)),
        ..Default::default()
    }
}

/// The hand-built listener (chains by IP range, port and transport, and a default) and a
/// static cluster whose one endpoint is unhealthy.
fn hand_built_config() -> ProxyConfig {
    use envoy_types::pb::envoy::config::core::v3::CidrRange;
    use envoy_types::pb::envoy::config::endpoint::v3::{Endpoint, LbEndpoint, LocalityLbEndpoints};
    use envoy_types::pb::envoy::config::listener::v3::FilterChainMatch;
    use envoy_types::pb::google::protobuf::UInt32Value;
    use envoy_types::util::pack_any;

    let hcm = inline_hcm();
    let chain = |name: &str, m: Option<FilterChainMatch>| FilterChain {
        name: name.into(),
        filter_chain_match: m,
        filters: vec![envoy_types::pb::envoy::config::listener::v3::Filter {
            name: "hcm".into(),
            config_type: Some(filter::ConfigType::TypedConfig(pack_any(hcm.clone()))),
        }],
        ..Default::default()
    };
    let range = |ip: &str, len: u32| CidrRange {
        address_prefix: ip.into(),
        prefix_len: Some(UInt32Value { value: len }),
    };
    let listener = Listener {
        name: "l".into(),
        address: Some(addr("0.0.0.0", 80)),
        filter_chains: vec![
            chain(
                "wide",
                Some(FilterChainMatch {
                    prefix_ranges: vec![range("10.0.0.0", 8)],
                    ..Default::default()
                }),
            ),
            chain(
                "narrow",
                Some(FilterChainMatch {
                    prefix_ranges: vec![range("10.1.0.0", 16)],
                    ..Default::default()
                }),
            ),
            chain(
                "other-port",
                Some(FilterChainMatch {
                    destination_port: Some(UInt32Value { value: 81 }),
                    ..Default::default()
                }),
            ),
            chain(
                "tls-only",
                Some(FilterChainMatch {
                    transport_protocol: "tls".into(),
                    ..Default::default()
                }),
            ),
        ],
        default_filter_chain: Some(chain("", None)),
        ..Default::default()
    };
    let cluster = Cluster {
        name: "static".into(),
        load_assignment: Some(ClusterLoadAssignment {
            endpoints: vec![LocalityLbEndpoints {
                locality: Some(envoy_types::pb::envoy::config::core::v3::Locality {
                    region: "r".into(),
                    zone: "z".into(),
                    ..Default::default()
                }),
                lb_endpoints: vec![LbEndpoint {
                    host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                        address: Some(addr("10.5.5.5", 8080)),
                        ..Default::default()
                    })),
                    health_status: HealthStatus::Unhealthy as i32,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    ProxyConfig {
        listeners: [("l".to_string(), listener)].into(),
        clusters: [("static".to_string(), cluster)].into(),
        ..Default::default()
    }
}

/// A hand-built listener the dataflow never emits: filter chains chosen by destination port
/// and IP range (most specific first, else the default chain), an inline route
/// configuration, and every kind of route action.
#[test]
fn hand_built_listener_covers_chains_and_actions() {
    let config = hand_built_config();
    let sim = |call: Call| config.simulate(&call);

    let o = sim(Call::get("x:80", 80, "/health").to_address("10.1.2.3"));
    assert_eq!(o.filter_chain.as_deref(), Some("narrow"));
    assert_eq!(o.route_config.as_deref(), Some("inline"));
    assert_eq!(
        o.result,
        Ok(Action::DirectResponse {
            status: 200,
            body: Some("ok".into())
        })
    );
    assert_eq!(o.status(), Some(200));
    let o = sim(Call::get("x", 80, "/old").to_address("10.2.0.1"));
    assert_eq!(o.filter_chain.as_deref(), Some("wide"));
    assert_eq!(o.status(), Some(302));
    assert!(
        matches!(&o.result, Ok(Action::Redirect { host: Some(h), .. }) if h == "new.example.com")
    );
    let o = sim(Call::get("x", 80, "/").to_address("192.168.0.1"));
    assert_eq!(o.filter_chain.as_deref(), Some("default_filter_chain"));
    assert_eq!(
        o.result,
        Err(NoMatch::ClusterHeaderMissing {
            header: "x-cluster".into()
        })
    );
    assert_eq!(o.status(), Some(503));
    let o = sim(Call::get("x", 80, "/").header("X-Cluster", "static"));
    assert_eq!(o.cluster(), Some("static"));
    let up = &o.upstreams()[0];
    assert_eq!(up.discovery, Discovery::Static);
    assert_eq!(up.endpoints[0].locality.as_deref(), Some("r/z/"));
    assert!(!up.endpoints[0].healthy);
    assert_eq!(o.status(), Some(503), "only an unhealthy endpoint");
    let o = sim(Call::get("x", 80, "/").header("x-cluster", "nope"));
    assert_eq!(o.upstreams()[0].discovery, Discovery::NotFound);
    assert_eq!(o.status(), Some(503));
}

/// TLS calls and chains: the TLS inspector reads SNI and ALPN (Envoy adds it where a
/// chain matches on them); without it a TLS connection is `raw_buffer`. A chain that
/// terminates TLS refuses plaintext, and an HTTP chain that does not cannot read TLS.
#[test]
fn tls_calls_select_chains_by_transport_and_alpn() {
    use envoy_types::pb::envoy::config::listener::v3::FilterChainMatch;
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
        CommonTlsContext, DownstreamTlsContext, SdsSecretConfig,
    };
    use envoy_types::pb::google::protobuf::BoolValue;
    use envoy_types::util::pack_any;
    let hcm = HttpConnectionManager {
        route_specifier: Some(RouteSpecifier::RouteConfig(RouteConfiguration {
            name: "inline".into(),
            virtual_hosts: vec![VirtualHost {
                name: "all".into(),
                domains: vec!["*".into()],
                routes: vec![Route {
                    r#match: Some(RouteMatch {
                        path_specifier: Some(PathSpecifier::Prefix("/".into())),
                        ..Default::default()
                    }),
                    action: Some(RouteActionKind::Route(RouteAction {
                        cluster_specifier: Some(ClusterSpecifier::Cluster("app".into())),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        })),
        ..Default::default()
    };
    let matching = |transport: &str, alpn: &[&str]| FilterChainMatch {
        transport_protocol: transport.into(),
        application_protocols: alpn.iter().map(|a| a.to_string()).collect(),
        ..Default::default()
    };
    let terminating = DownstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificate_sds_secret_configs: vec![SdsSecretConfig {
                name: "kubernetes://cert".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        require_client_certificate: Some(BoolValue { value: true }),
        ..Default::default()
    };
    let mut mtls = hcm_chain("mtls", hcm.clone());
    mtls.filter_chain_match = Some(matching("tls", &["istio-peer-exchange", "istio"]));
    mtls.transport_socket = Some(socket(
        "envoy.transport_sockets.tls",
        pack_any(terminating.clone()),
    ));
    let mut tls_bytes = tcp_chain("tls-passthrough", "passthrough");
    tls_bytes.filter_chain_match = Some(matching("tls", &[]));
    let plain = hcm_chain("plain", hcm.clone());
    let config = |chains: Vec<FilterChain>, inspect: bool| ProxyConfig {
        listeners: [("l".to_string(), listener(80, chains, inspect))].into(),
        ..Default::default()
    };
    let permissive = config(vec![mtls.clone(), tls_bytes.clone(), plain.clone()], true);
    let get = || Call::get("a", 80, "/");
    let o = permissive.simulate(&get());
    assert_eq!(o.filter_chain.as_deref(), Some("plain"));
    assert_eq!(o.downstream_tls, None);
    let o = permissive.simulate(&get().istio_mtls("outbound_.80_._.a"));
    assert_eq!(o.filter_chain.as_deref(), Some("mtls"), "{o:#?}");
    let t = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("TLS");
    assert!(t.require_client_certificate && !t.istio_mutual);
    assert_eq!(t.certificates, [Source::Sds("kubernetes://cert".into())]);
    assert_eq!(o.cluster(), Some("app"));
    // Other TLS goes by its transport alone, to the chain naming no ALPN.
    let o = permissive.simulate(&Call::tls(80, "a").over_tls(Some("a"), &["h2"]));
    assert_eq!(o.filter_chain.as_deref(), Some("tls-passthrough"));
    assert_eq!(o.cluster(), Some("passthrough"));

    // Without an inspector (and no chain Envoy would add one for) TLS is raw_buffer.
    let blind = config(vec![plain.clone()], false);
    let o = blind.simulate(&get().istio_mtls("x"));
    assert_eq!(
        o.result,
        Err(NoMatch::TlsNotTerminated {
            filter_chain: "plain".into()
        })
    );
    // A chain matching on the transport makes Envoy add the inspector itself.
    let o = config(vec![mtls.clone()], false).simulate(&get().istio_mtls("x"));
    assert_eq!(o.filter_chain.as_deref(), Some("mtls"), "{o:#?}");
    // A terminating chain refuses plaintext.
    let mut only_tls = mtls;
    only_tls.filter_chain_match = None;
    let o = config(vec![only_tls], true).simulate(&get());
    assert_eq!(
        o.result,
        Err(NoMatch::TlsExpected {
            filter_chain: "mtls".into()
        })
    );
    assert_eq!(o.status(), None, "the connection is closed, no HTTP answer");
}
