//! Inbound listeners: `virtualInbound` on 15006, with a plaintext and an mTLS chain (or
//! Istio's five, for a port whose protocol is told per connection) per port of the proxy's
//! own workload, and the listeners of Sidecar `ingress` ports the proxy binds itself.

use super::filters::{
    base_hcm, hcm_filter, http_inspector_filter, listener_name, original_dst_filter, tcp_to,
    tls_inspector_filter, PLAINTEXT_HTTP_ALPN,
};
use crate::model::{
    InboundMtls, InboundPort, InboundSecurity, MtlsMode, Proxying, Resource, ResourceType,
};
use crate::translate::{duration_ms, inbound_cluster_name, socket_address, PASSTHROUGH_CLUSTER};
use envoy_types::pb::envoy::config::core::v3::TrafficDirection;
use envoy_types::pb::envoy::config::listener::v3::{
    FilterChain, FilterChainMatch, Listener, ListenerFilter,
};
use envoy_types::pb::envoy::config::route::v3::{
    route::Action, route_action::ClusterSpecifier, route_match::PathSpecifier, Route, RouteAction,
    RouteConfiguration, RouteMatch, VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, HttpConnectionManager,
};
use envoy_types::pb::google::protobuf::{BoolValue, UInt32Value};
use prost::Message;

/// The ALPN values of a sidecar's mTLS, as Istio's proxies offer them (the HTTP ones are
/// what Istio's own outbound side sends; meshflow's sends the first two).
const INBOUND_MTLS_ALPN: [&str; 5] = [
    "istio-peer-exchange",
    "istio",
    "istio-http/1.0",
    "istio-http/1.1",
    "istio-h2",
];

/// Over mTLS, the ALPN an Istio client sends for HTTP it detected, and for the rest.
const MTLS_HTTP_ALPN: [&str; 3] = ["istio-http/1.0", "istio-http/1.1", "istio-h2"];

const MTLS_TCP_ALPN: [&str; 2] = ["istio-peer-exchange", "istio"];

/// The HTTP inspector for the ports of `detected` only (`filter_disabled` on every other
/// destination port): on a port proxied as TCP it would hold up a server that speaks first.
fn http_inspector_on(detected: &[u16]) -> ListenerFilter {
    use envoy_types::pb::envoy::config::listener::v3::listener_filter_chain_match_predicate::{
        MatchSet, Rule,
    };
    use envoy_types::pb::envoy::config::listener::v3::ListenerFilterChainMatchPredicate as Predicate;
    use envoy_types::pb::envoy::r#type::v3::Int32Range;
    let on = detected
        .iter()
        .map(|&p| Predicate {
            rule: Some(Rule::DestinationPortRange(Int32Range {
                start: p as i32,
                end: p as i32 + 1,
            })),
        })
        .collect();
    ListenerFilter {
        filter_disabled: Some(Predicate {
            rule: Some(Rule::NotMatch(Box::new(Predicate {
                rule: Some(Rule::OrMatch(MatchSet { rules: on })),
            }))),
        }),
        ..http_inspector_filter()
    }
}

/// A chain matched on `port`, a transport protocol (`""`: any) and application protocols.
fn port_chain(name: String, port: u16, transport: &str, alpn: &[&str]) -> FilterChain {
    FilterChain {
        name,
        filter_chain_match: Some(FilterChainMatch {
            destination_port: Some(UInt32Value { value: port as u32 }),
            transport_protocol: transport.into(),
            application_protocols: alpn.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The inbound chains of `port`, each to `inbound|PORT||`: plaintext and (Istio's
/// PERMISSIVE mode) TLS with Istio's ALPN terminated with the workload certificate, a client
/// certificate of the mesh required. An HTTP port's chains run the connection manager, which
/// passes an mTLS client's identity to the application in `x-forwarded-client-cert`; a TCP
/// port's proxy the bytes. A port whose protocol is told per connection gets Istio's five
/// chains: HTTP over mTLS (`istio-http/*`), plaintext HTTP (as the HTTP inspector reports
/// it), other mTLS (`istio`, `istio-peer-exchange`), other plaintext, and TLS the
/// application itself speaks (no Istio ALPN), passed through as bytes.
///
/// A Sidecar `ingress` port with `tls` has one chain instead, as Istio builds it: TLS (any
/// ALPN) terminated with the listener's certificate, offering `h2` and `http/1.1`, the
/// client certificate verified as the mode says, then the connection manager (passing a
/// client certificate's details in `x-forwarded-client-cert`) or `tcp_proxy`; the application
/// receives plaintext. Plaintext, and the mesh's mTLS, find no chain there: Istio honours
/// `tls` only where the port's mTLS is disabled, so the two never share the port.
///
/// `sec`: the security policies' part. A port in STRICT mode keeps its mTLS chains only
/// (and an `ingress` port's `tls` is set aside for them, as Istio honours it only where
/// mTLS is disabled), DISABLE its plaintext ones. [`secure`] adds token verification and
/// authorization afterwards.
fn inbound_chains(
    port: &InboundPort,
    sec: &InboundSecurity,
    mtls: &InboundMtls,
) -> Vec<FilterChain> {
    let cluster = inbound_cluster_name(port.port);
    let p = port.port;
    let strict = sec.strict(p);
    let terminated = || crate::translate::secret::inbound_mtls(mtls);
    let http = |mut c: FilterChain, tls: bool| {
        if tls {
            c.transport_socket = Some(terminated());
        }
        c.filters = vec![hcm_filter(inbound_hcm(p, &cluster, tls))];
        c
    };
    if let Some(tls) = port.tls.as_ref().filter(|_| !strict) {
        let mut chain = port_chain(format!("{cluster}-ingress-tls"), p, "tls", &[]);
        chain.transport_socket = Some(crate::translate::secret::downstream_tls(tls, true));
        // The port's protocol after termination; one told per connection is not generated
        // with `tls` (the conversion fails it closed), and would go on as TCP here.
        chain.filters = vec![match port.proxying {
            Proxying::Http => hcm_filter(inbound_hcm(p, &cluster, true)),
            Proxying::Tcp | Proxying::Detected => tcp_to(&cluster, &cluster),
        }];
        return vec![chain];
    }
    let tcp = |mut c: FilterChain, tls: bool| {
        if tls {
            c.transport_socket = Some(terminated());
        }
        c.filters = vec![tcp_to(&cluster, &cluster)];
        c
    };
    let name = |suffix: &str| format!("{cluster}{suffix}");
    let chains = match port.proxying {
        Proxying::Http => vec![
            http(port_chain(name(""), p, "", &[]), false),
            http(
                port_chain(name("-mtls"), p, "tls", &INBOUND_MTLS_ALPN),
                true,
            ),
        ],
        // Istio's permissive TCP chains: the mesh's mTLS, the application's own TLS passed
        // through as it is (Envoy narrows to the `tls` chains once the TLS inspector sees
        // TLS, so without this chain a client's TLS of any other ALPN found none), and the
        // rest in plaintext.
        Proxying::Tcp => vec![
            tcp(port_chain(name(""), p, "", &[]), false),
            tcp(
                port_chain(name("-mtls"), p, "tls", &INBOUND_MTLS_ALPN),
                true,
            ),
            tcp(port_chain(name("-tls"), p, "tls", &[]), false),
        ],
        Proxying::Detected => vec![
            http(port_chain(name("-mtls"), p, "tls", &MTLS_HTTP_ALPN), true),
            http(
                port_chain(name(""), p, "raw_buffer", &PLAINTEXT_HTTP_ALPN),
                false,
            ),
            tcp(
                port_chain(name("-mtls-tcp"), p, "tls", &MTLS_TCP_ALPN),
                true,
            ),
            tcp(port_chain(name("-tcp"), p, "raw_buffer", &[]), false),
            tcp(port_chain(name("-tls"), p, "tls", &[]), false),
        ],
    };
    by_mode(chains, sec.mode_for(p))
}

/// The chains of a port that its PeerAuthentication mode keeps. STRICT: only those that
/// terminate the mesh's mTLS (a client certificate of the mesh required); plaintext, and
/// TLS the application speaks itself, find no chain. DISABLE: only those that do not
/// (Istio's plaintext chains; TLS the application speaks passes as bytes). PERMISSIVE: all.
fn by_mode(chains: Vec<FilterChain>, mode: MtlsMode) -> Vec<FilterChain> {
    match mode {
        MtlsMode::Strict => chains
            .into_iter()
            .filter(|c| c.transport_socket.is_some())
            .collect(),
        MtlsMode::Disable => chains
            .into_iter()
            .filter(|c| c.transport_socket.is_none())
            .collect(),
        MtlsMode::Permissive | MtlsMode::Unset => chains,
    }
}

/// Every chain of `chains` with what the workload's security policies make it refuse
/// ([`super::refusals::Refusals::authorize`]).
fn secure(mut chains: Vec<FilterChain>, sec: &InboundSecurity) -> Vec<FilterChain> {
    let refusals = super::refusals::Refusals::of(sec);
    for c in &mut chains {
        refusals.authorize(c);
    }
    chains
}

/// The connection manager of an HTTP inbound chain: every request to `cluster`. `tls`: the
/// chain terminates TLS (the mesh's, or an `ingress` listener's), so a client certificate's
/// details reach the application in `x-forwarded-client-cert`, as Istio passes them.
/// What the security policies add comes after ([`secure`]).
fn inbound_hcm(port: u16, cluster: &str, tls: bool) -> HttpConnectionManager {
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
    if tls {
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
/// `detection_ms`: the mesh's `protocolDetectionTimeout`, how long the inspectors wait.
/// `sec`: the security stopgap's part, as for [`virtual_inbound_secured`]'s ports (the
/// scope of proxies that bind such a listener is split by it).
pub fn ingress_listener(
    addr: &str,
    port: InboundPort,
    detection_ms: Option<u64>,
    sec: &InboundSecurity,
    mtls: &InboundMtls,
) -> Resource {
    let listener = Listener {
        name: format!("inbound_{}", listener_name(addr, port.port)),
        address: Some(socket_address(addr, port.port)),
        listener_filters: match port.proxying {
            Proxying::Detected => vec![tls_inspector_filter(), http_inspector_filter()],
            _ => vec![tls_inspector_filter()],
        },
        continue_on_listener_filters_timeout: true,
        listener_filters_timeout: detection_ms.map(duration_ms),
        filter_chains: secure(inbound_chains(&port, sec, mtls), sec),
        traffic_direction: TrafficDirection::Inbound as i32,
        ..Default::default()
    };
    Resource::new(
        ResourceType::Listener,
        listener.name.clone(),
        listener.encode_to_vec(),
    )
}

/// The chains of `virtualInbound` for ports no service declares (`declared`), to
/// `InboundPassthroughCluster` as bytes: first, as Istio adds them, one set per
/// `portLevelMtls` port of the workload's policy that is not declared, matched on that port
/// and kept by its mode; then the catch-all, kept by the workload's mode. Without the
/// per-port sets a STRICT port of a PERMISSIVE workload would take plaintext through the
/// catch-all.
fn passthrough_chains(
    sec: &InboundSecurity,
    declared: &[u16],
    mtls: &InboundMtls,
) -> Vec<FilterChain> {
    let set = |name: &str, port: Option<u16>, mode: MtlsMode| {
        let matched = |transport: &str, alpn: &[&str]| FilterChainMatch {
            destination_port: port.map(|p| UInt32Value { value: p as u32 }),
            transport_protocol: transport.into(),
            application_protocols: alpn.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        };
        let suffix = port.map(|p| format!("-{p}")).unwrap_or_default();
        let catch_all = tcp_to(PASSTHROUGH_CLUSTER, "InboundPassthroughCluster");
        let mtls = FilterChain {
            name: format!("{name}-mtls{suffix}"),
            filter_chain_match: Some(matched("tls", &INBOUND_MTLS_ALPN)),
            transport_socket: Some(crate::translate::secret::inbound_mtls(mtls)),
            filters: vec![catch_all.clone()],
            ..Default::default()
        };
        let plain = FilterChain {
            name: format!("{name}-tcp{suffix}"),
            // The catch-all matches everything (no match at all, as it always had).
            filter_chain_match: port.map(|_| matched("", &[])),
            filters: vec![catch_all],
            ..Default::default()
        };
        // Under PERMISSIVE the catch-all passes the mesh's mTLS through as bytes too (the
        // application's port is not known to take it), as it always has.
        match mode {
            MtlsMode::Strict => vec![mtls],
            _ => vec![plain],
        }
    };
    let mut chains: Vec<FilterChain> = sec
        .ports
        .iter()
        .filter(|(p, _)| !declared.contains(p))
        .flat_map(|(p, m)| set("virtualInbound-catchall", Some(*p), *m))
        .collect();
    chains.extend(set("virtualInbound-catchall", None, sec.mode_for(0)));
    chains
}

/// `virtualInbound` on 15006: per port of the proxy's own workload (sorted, one each), a
/// plaintext chain (HTTP, or TCP) and, beside it, an mTLS chain for connections of other
/// sidecars (TLS with Istio's ALPN), each to `inbound|PORT||`: Istio's default PERMISSIVE
/// mode, as no PeerAuthentication is read. Other ports pass through.
/// `detection_ms`: the mesh's `protocolDetectionTimeout`, how long the inspectors wait for
/// a client's first bytes (`0`: for ever; `None`: Envoy's 15 s) before going on.
pub fn virtual_inbound(ports: &[InboundPort], detection_ms: Option<u64>) -> Resource {
    let (sec, mtls) = (InboundSecurity::default(), InboundMtls::default());
    virtual_inbound_secured(ports, detection_ms, &sec, &mtls)
}

/// [`virtual_inbound`] with the security policies' part `sec` (see [`inbound_chains`]):
/// besides each port's chains, the catch-all of ports no service declares takes the
/// mesh's mTLS only where the workload's mode is STRICT, and is gone where a
/// RequestAuthentication selects the workload (it proxies bytes, so it cannot see a
/// token where Istio's would check it); with deny-all, every chain denies.
pub fn virtual_inbound_secured(
    ports: &[InboundPort],
    detection_ms: Option<u64>,
    sec: &InboundSecurity,
    mtls: &InboundMtls,
) -> Resource {
    let mut chains: Vec<FilterChain> = ports
        .iter()
        .flat_map(|p| inbound_chains(p, sec, mtls))
        .collect();
    let detected: Vec<u16> = ports
        .iter()
        .filter(|p| p.proxying == Proxying::Detected)
        .map(|p| p.port)
        .collect();
    let mut listener_filters = vec![original_dst_filter(), tls_inspector_filter()];
    if !detected.is_empty() {
        listener_filters.push(http_inspector_on(&detected));
    }
    if !sec.checks_tokens() {
        // No catch-all where a RequestAuthentication selects the workload: HTTP to an
        // undeclared port is refused rather than passed unchecked.
        let declared: Vec<u16> = ports.iter().map(|p| p.port).collect();
        chains.extend(passthrough_chains(sec, &declared, mtls));
    }
    let chains = secure(chains, sec);
    let listener = Listener {
        name: "virtualInbound".into(),
        address: Some(socket_address("0.0.0.0", 15006)),
        // The TLS inspector tells an mTLS connection (and its ALPN) from a plaintext one;
        // the HTTP inspector, on ports told per connection, HTTP from other bytes.
        listener_filters,
        // A server that speaks first (no client bytes to inspect) is not held up for ever.
        continue_on_listener_filters_timeout: true,
        listener_filters_timeout: detection_ms.map(duration_ms),
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
    use envoy_types::pb::envoy::config::listener::v3::filter;

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
                proxying: Proxying::Http,
                tls: None,
            },
            InboundPort {
                port: 27017,
                proxying: Proxying::Tcp,
                tls: None,
            },
        ];
        let hcm = "envoy.filters.network.http_connection_manager".to_string();
        let tcp = "envoy.filters.network.tcp_proxy".to_string();
        assert_eq!(
            filters_of(&virtual_inbound(&ports, None)),
            vec![
                ("inbound|9080||".into(), vec![hcm.clone()]),
                ("inbound|9080||-mtls".into(), vec![hcm]),
                ("inbound|27017||".into(), vec![tcp.clone()]),
                ("inbound|27017||-mtls".into(), vec![tcp.clone()]),
                ("inbound|27017||-tls".into(), vec![tcp.clone()]),
                ("virtualInbound-catchall-tcp".into(), vec![tcp]),
            ]
        );
    }

    /// A port told per connection gets Istio's five chains (HTTP over mTLS and plaintext
    /// HTTP by ALPN to the connection manager; other mTLS, other plaintext and the
    /// application's own TLS as bytes); the HTTP inspector runs on that port only, and the
    /// mesh's detection timeout bounds the wait for the first bytes.
    #[test]
    fn virtual_inbound_tells_protocols_apart_on_ports_that_name_none() {
        let ports = [
            InboundPort {
                port: 9080,
                proxying: Proxying::Http,
                tls: None,
            },
            InboundPort {
                port: 7000,
                proxying: Proxying::Detected,
                tls: None,
            },
        ];
        let r = virtual_inbound(&ports, Some(500));
        let l = Listener::decode(&r.body.0[..]).expect("a listener");
        let detected: Vec<(String, String, Vec<String>, String)> = l
            .filter_chains
            .iter()
            .filter(|c| c.name.starts_with("inbound|7000||"))
            .map(|c| {
                let m = c.filter_chain_match.clone().unwrap_or_default();
                let filter = c.filters[0]
                    .name
                    .rsplit('.')
                    .next()
                    .unwrap_or("")
                    .to_string();
                (
                    c.name.clone(),
                    m.transport_protocol,
                    m.application_protocols,
                    filter,
                )
            })
            .collect();
        let alpn = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let hcm = "http_connection_manager".to_string();
        let tcp = "tcp_proxy".to_string();
        assert_eq!(
            detected,
            vec![
                (
                    "inbound|7000||-mtls".into(),
                    "tls".into(),
                    alpn(&MTLS_HTTP_ALPN),
                    hcm.clone()
                ),
                (
                    "inbound|7000||".into(),
                    "raw_buffer".into(),
                    alpn(&PLAINTEXT_HTTP_ALPN),
                    hcm
                ),
                (
                    "inbound|7000||-mtls-tcp".into(),
                    "tls".into(),
                    alpn(&MTLS_TCP_ALPN),
                    tcp.clone()
                ),
                (
                    "inbound|7000||-tcp".into(),
                    "raw_buffer".into(),
                    vec![],
                    tcp.clone()
                ),
                ("inbound|7000||-tls".into(), "tls".into(), vec![], tcp),
            ]
        );
        let inspector = l
            .listener_filters
            .iter()
            .find(|f| f.name == "envoy.filters.listener.http_inspector")
            .expect("the HTTP inspector");
        let off = format!("{:?}", inspector.filter_disabled);
        assert!(
            off.contains("NotMatch") && off.contains("start: 7000, end: 7001"),
            "{off}"
        );
        assert!(!off.contains("9080"), "{off}");
        assert_eq!(l.listener_filters_timeout, Some(duration_ms(500)));
        // Without such a port, no HTTP inspector; without a mesh setting, Envoy's timeout.
        let plain = Listener::decode(&virtual_inbound(&ports[..1], None).body.0[..]).unwrap();
        assert!(plain
            .listener_filters
            .iter()
            .all(|f| !f.name.contains("http_inspector")));
        assert_eq!(plain.listener_filters_timeout, None);
    }

    /// A Sidecar `ingress` port's `tls` of `mode` with certificate files (a CA for the
    /// modes that verify clients).
    fn ingress_tls(mode: crate::model::ServerTlsMode) -> Option<Box<crate::model::ServerTls>> {
        use crate::model::{Credential, ServerTls, ServerTlsMode};
        Some(Box::new(ServerTls {
            mode,
            credential: Some(Credential::Files {
                cert: "/etc/certs/cert.pem".into(),
                key: "/etc/certs/key.pem".into(),
                ca: (mode != ServerTlsMode::Simple).then(|| "/etc/certs/ca.pem".into()),
            }),
            min_version: Some(3),
            max_version: None,
            cipher_suites: vec!["ECDHE-RSA-AES256-GCM-SHA384".into()],
            subject_alt_names: vec![],
            tcp: false,
            misdirected: Vec::new(),
            sni_routes: false,
            client_ca: None,
        }))
    }

    /// The downstream TLS context of chain `c`.
    fn downstream_of(
        c: &FilterChain,
    ) -> envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::DownstreamTlsContext {
        use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
        let Some(ConfigType::TypedConfig(any)) = c
            .transport_socket
            .as_ref()
            .and_then(|t| t.config_type.clone())
        else {
            panic!("no transport socket on {}", c.name);
        };
        prost::Message::decode(&any.value[..]).expect("a DownstreamTlsContext")
    }

    /// An `ingress` port with `tls` has one chain, on TLS of any ALPN, terminated with the
    /// listener's certificate files (offering h2 and http/1.1, its versions and suites, a
    /// client certificate required by MUTUAL and verified against its CA), to the port's
    /// inbound cluster: the connection manager for HTTP, passing a client certificate's
    /// details on; `tcp_proxy` for TCP. No plaintext or mTLS chain for that port; the other
    /// ports keep theirs.
    #[test]
    fn ingress_tls_ports_have_one_terminating_chain() {
        use crate::model::ServerTlsMode;
        use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::ForwardClientCertDetails;
        use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::common_tls_context::ValidationContextType;
        let ports = [
            InboundPort {
                port: 8443,
                proxying: Proxying::Http,
                tls: ingress_tls(ServerTlsMode::Simple),
            },
            InboundPort {
                port: 9080,
                proxying: Proxying::Http,
                tls: None,
            },
            InboundPort {
                port: 9443,
                proxying: Proxying::Tcp,
                tls: ingress_tls(ServerTlsMode::Mutual),
            },
        ];
        let r = virtual_inbound(&ports, None);
        let hcm = "envoy.filters.network.http_connection_manager".to_string();
        let tcp = "envoy.filters.network.tcp_proxy".to_string();
        assert_eq!(
            filters_of(&r),
            vec![
                ("inbound|8443||-ingress-tls".into(), vec![hcm.clone()]),
                ("inbound|9080||".into(), vec![hcm.clone()]),
                ("inbound|9080||-mtls".into(), vec![hcm]),
                ("inbound|9443||-ingress-tls".into(), vec![tcp.clone()]),
                ("virtualInbound-catchall-tcp".into(), vec![tcp]),
            ]
        );
        let l = Listener::decode(&r.body.0[..]).expect("a listener");
        let chain = |name: &str| {
            l.filter_chains
                .iter()
                .find(|c| c.name == name)
                .unwrap_or_else(|| panic!("{name}"))
        };
        let simple = chain("inbound|8443||-ingress-tls");
        let m = simple.filter_chain_match.as_ref().expect("a match");
        assert_eq!(m.destination_port, Some(UInt32Value { value: 8443 }));
        assert_eq!(m.transport_protocol, "tls");
        assert!(m.application_protocols.is_empty(), "{m:?}");
        let ctx = downstream_of(simple);
        assert_eq!(ctx.require_client_certificate, None);
        let common = ctx.common_tls_context.expect("a common context");
        assert_eq!(common.alpn_protocols, vec!["h2", "http/1.1"]);
        let files = format!("{:?}", common.tls_certificate_sds_secret_configs);
        assert!(
            files.contains("file-cert:/etc/certs/cert.pem~/etc/certs/key.pem"),
            "{files}"
        );
        assert!(common.validation_context_type.is_none());
        let params = common.tls_params.expect("TLS parameters");
        assert_eq!(params.tls_minimum_protocol_version, 3);
        assert_eq!(params.cipher_suites, vec!["ECDHE-RSA-AES256-GCM-SHA384"]);
        let Some(filter::ConfigType::TypedConfig(any)) = &simple.filters[0].config_type else {
            panic!("no connection manager config");
        };
        let manager = HttpConnectionManager::decode(&any.value[..]).expect("a connection manager");
        assert_eq!(
            manager.forward_client_cert_details,
            ForwardClientCertDetails::AppendForward as i32
        );
        assert!(format!("{:?}", manager.route_specifier).contains("inbound|8443||"));

        let mutual = downstream_of(chain("inbound|9443||-ingress-tls"));
        assert_eq!(
            mutual.require_client_certificate,
            Some(BoolValue { value: true })
        );
        let Some(ValidationContextType::CombinedValidationContext(v)) = mutual
            .common_tls_context
            .expect("a common context")
            .validation_context_type
        else {
            panic!("no validation context");
        };
        let ca = v
            .validation_context_sds_secret_config
            .expect("the CA over SDS");
        assert_eq!(ca.name, "file-root:/etc/certs/ca.pem");

        // OPTIONAL_MUTUAL verifies a certificate presented without requiring one.
        let optional = InboundPort {
            port: 8443,
            proxying: Proxying::Http,
            tls: ingress_tls(ServerTlsMode::OptionalMutual),
        };
        let r = virtual_inbound(std::slice::from_ref(&optional), None);
        let l = Listener::decode(&r.body.0[..]).expect("a listener");
        let ctx = downstream_of(&l.filter_chains[0]);
        assert_eq!(ctx.require_client_certificate, None);
        assert!(ctx
            .common_tls_context
            .is_some_and(|c| c.validation_context_type.is_some()));

        // The listener a proxy binds for the port: the same one chain, behind the TLS
        // inspector that tells TLS from plaintext.
        let bound = ingress_listener(
            "10.0.0.1",
            optional,
            Some(100),
            &Default::default(),
            &Default::default(),
        );
        let bl = Listener::decode(&bound.body.0[..]).expect("a listener");
        assert_eq!(bl.name, "inbound_10.0.0.1_8443");
        assert_eq!(
            filters_of(&bound),
            vec![(
                "inbound|8443||-ingress-tls".into(),
                vec!["envoy.filters.network.http_connection_manager".to_string()]
            )]
        );
        assert_eq!(
            bl.listener_filters
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>(),
            vec!["envoy.filters.listener.tls_inspector"]
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
        let tcp: Vec<(u16, bool)> = merged
            .iter()
            .map(|p| (p.port, p.proxying == Proxying::Tcp))
            .collect();
        assert_eq!(tcp, vec![(8443, true), (9080, false), (27017, true)]);
        // A Sidecar's ingress ports replace the workload's own (as in Istio); one reached
        // only by its own listener (captureMode NONE) is not in `virtualInbound`.
        let of = InboundPort::of_proxy(
            [(9080, Protocol::Http)],
            [
                (
                    InboundPort {
                        port: 9080,
                        proxying: Proxying::Tcp,
                        tls: None,
                    },
                    false,
                ),
                (
                    InboundPort {
                        port: 7000,
                        proxying: Proxying::Http,
                        tls: None,
                    },
                    false,
                ),
                (
                    InboundPort {
                        port: 7001,
                        proxying: Proxying::Tcp,
                        tls: None,
                    },
                    true,
                ),
            ],
        );
        let tcp: Vec<(u16, bool)> = of
            .iter()
            .map(|p| (p.port, p.proxying == Proxying::Tcp))
            .collect();
        assert_eq!(tcp, vec![(7001, true)]);
        // Without ingress ports, the workload's own.
        let of = InboundPort::of_proxy([(9080, Protocol::Http)], []);
        assert_eq!(
            of,
            vec![InboundPort {
                port: 9080,
                proxying: Proxying::Http,
                tls: None,
            }]
        );
    }
}
