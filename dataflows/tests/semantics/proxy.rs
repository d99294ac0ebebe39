//! Proxies coming and going, and what a proxy's own node metadata changes
//! (`IDLE_TIMEOUT`).

use crate::support::{
    destination_rule, endpoint, gateway, host, outbound, px, router_proxy, service, service_on,
    set, sidecar_proxy, virtual_service, Diffs, Mesh,
};
use dataflows::model::*;
use prost::Message;
use std::collections::BTreeSet;

/// Retracting a proxy's record (its stream closed) retracts every resource it held (its
/// accumulated state becomes empty) and produces no diff for any other proxy, including one
/// in the same namespace and scope.
#[test]
fn proxy_disconnect_removes_all_its_resources() {
    let mut m = Mesh::new();
    let leaving = sidecar_proxy("leaving", "default", "10.0.0.1", &[("app", "reviews")]);
    let staying = sidecar_proxy("staying", "default", "10.1.0.2", &[("app", "client")]);
    let router = router_proxy(
        "gw",
        "istio-system",
        "10.1.0.9",
        &[("istio", "ingressgateway")],
    );
    m.insert(vec![
        service("reviews", "default"),
        service("ratings", "other"),
        endpoint("reviews", "default", "10.0.0.1", true),
        gateway(
            "istio-system",
            "gw",
            &[("istio", "ingressgateway")],
            &[(8080, None)],
        ),
        px(&leaving),
        px(&staying),
        px(&router),
    ]);
    let held_before = m.all(&leaving);
    assert!(
        held_before.iter().any(|k| k.name == "inbound|9080||"),
        "the leaving proxy has its inbound part"
    );
    let staying_before = m.all(&staying);
    assert!(!staying_before.is_empty());

    let diffs = m.retract(vec![px(&leaving)]);
    assert!(
        m.all(&leaving).is_empty(),
        "left behind: {:?}",
        m.all(&leaving)
    );
    let mut expected: Diffs = held_before
        .into_iter()
        .map(|k| ((leaving.id.clone(), k), -1))
        .collect();
    expected.sort();
    assert_eq!(
        diffs, expected,
        "exactly the retraction of everything it held"
    );
    assert_eq!(m.all(&staying), staying_before);

    let router_before = m.all(&router);
    let diffs = m.retract(vec![px(&router)]);
    assert!(m.all(&router).is_empty());
    assert_eq!(diffs.len(), router_before.len());
    assert!(diffs.iter().all(|((p, _), d)| *p == router.id && *d == -1));
}

/// Per filter of a listener's chains (the default chain last): where it sends connections
/// (a `tcp_proxy`'s cluster, `hcm` for a connection manager) and its idle timeout in ms.
fn idle_timeouts(
    l: &envoy_types::pb::envoy::config::listener::v3::Listener,
) -> Vec<(String, Option<i64>)> {
    use envoy_types::pb::envoy::config::listener::v3::filter::ConfigType;
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
    use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
        tcp_proxy::ClusterSpecifier, TcpProxy,
    };
    let ms = |d: Option<envoy_types::pb::google::protobuf::Duration>| {
        d.map(|d| d.seconds * 1000 + i64::from(d.nanos) / 1_000_000)
    };
    l.filter_chains
        .iter()
        .chain(l.default_filter_chain.iter())
        .flat_map(|c| c.filters.iter())
        .map(|f| {
            let Some(ConfigType::TypedConfig(any)) = &f.config_type else {
                panic!("a typed config");
            };
            if any.type_url.ends_with("HttpConnectionManager") {
                let h =
                    HttpConnectionManager::decode(&any.value[..]).expect("a connection manager");
                let idle = h.common_http_protocol_options.and_then(|o| o.idle_timeout);
                return ("hcm".to_string(), ms(idle));
            }
            let t = TcpProxy::decode(&any.value[..]).expect("a tcp_proxy");
            let to = match t.cluster_specifier {
                Some(ClusterSpecifier::Cluster(c)) => c,
                other => format!("{other:?}"),
            };
            (to, ms(t.idle_timeout))
        })
        .collect()
}

/// Proves Istio's per-proxy node metadata `IDLE_TIMEOUT`: it is the idle timeout of every
/// connection manager and `tcp_proxy` of the proxy's listeners — outbound HTTP and TCP,
/// `virtualOutbound`'s catch-all, `virtualInbound` (HTTP and catch-all), a gateway's — except
/// a TCP route's whose host's DestinationRule sets `tcp.idleTimeout` (the rule wins, as in
/// Istio); a proxy of the same namespace without it is scoped apart and keeps Envoy's
/// defaults; a proxy that stops sending it gets that proxy's listeners again.
#[test]
fn idle_timeout_metadata_reaches_every_listener_of_its_proxy() {
    let mut m = Mesh::new();
    let tcp_service = |name: &str, addr: &str| {
        let Record::Service(mut s) = service_on(name, "default", 27017) else {
            unreachable!()
        };
        s.ports[0].protocol = Protocol::Tcp;
        s.ports[0].name = "tcp".into();
        s.addresses = vec![addr.to_string()];
        Record::Service(s)
    };
    let Record::DestinationRule(mut cache_rule) =
        destination_rule("default", "cache", &host("cache", "default"), &[])
    else {
        unreachable!()
    };
    cache_rule.traffic_policy = Some(TrafficPolicy {
        connection_pool: Some(Box::new(ConnectionPool {
            tcp_idle_timeout_ms: Some(30_000),
            ..Default::default()
        })),
        ..Default::default()
    });
    let quick = Proxy {
        idle_timeout_ns: Some(1_000_000_000),
        ..sidecar_proxy("quick", "default", "10.0.0.1", &[])
    };
    let plain = sidecar_proxy("plain", "default", "10.0.0.2", &[]);
    let gw = Proxy {
        idle_timeout_ns: Some(2_500_000_000),
        ..router_proxy(
            "gw",
            "istio-system",
            "10.0.0.9",
            &[("istio", "ingressgateway")],
        )
    };
    m.insert(vec![
        service("reviews", "default"),
        // `quick` serves reviews: its `virtualInbound` has connection managers too.
        endpoint("reviews", "default", "10.0.0.1", true),
        tcp_service("db", "10.96.0.10"),
        tcp_service("cache", "10.96.0.11"),
        Record::DestinationRule(cache_rule),
        gateway(
            "istio-system",
            "gw",
            &[("istio", "ingressgateway")],
            &[(8080, None)],
        ),
        virtual_service(
            "istio-system",
            "gw-routes",
            &["*"],
            &["gw"],
            &host("reviews", "default"),
        ),
        px(&quick),
        px(&plain),
        px(&gw),
    ]);
    let names = set(&[
        "0.0.0.0_9080",
        "0.0.0.0_27017",
        "virtualOutbound",
        "virtualInbound",
    ]);
    assert_eq!(m.listeners(&quick), names);
    assert_eq!(m.listeners(&plain), names);
    let cache = outbound(27017, "", "cache", "default");
    for name in &names {
        for (to, idle) in idle_timeouts(&m.listener_body(&quick, name)) {
            let want = if to == cache { 30_000 } else { 1_000 };
            assert_eq!(idle, Some(want), "quick's {name} to {to}");
        }
        for (to, idle) in idle_timeouts(&m.listener_body(&plain, name)) {
            let want = (to == cache).then_some(30_000);
            assert_eq!(idle, want, "plain's {name} to {to}");
        }
    }
    let seen: BTreeSet<String> = idle_timeouts(&m.listener_body(&quick, "virtualInbound"))
        .into_iter()
        .chain(idle_timeouts(&m.listener_body(&quick, "0.0.0.0_27017")))
        .map(|(to, _)| to)
        .collect();
    assert!(
        seen.contains("hcm")
            && seen.contains(&cache)
            && seen.contains(&outbound(27017, "", "db", "default")),
        "{seen:?}"
    );
    let gw_idle = idle_timeouts(&m.listener_body(&gw, "0.0.0.0_8080"));
    assert_eq!(gw_idle, vec![("hcm".to_string(), Some(2_500))]);

    // Without the metadata (reconnected), `quick` shares `plain`'s scope and listeners.
    let shared = ["0.0.0.0_9080", "0.0.0.0_27017", "virtualOutbound"];
    let versions = |m: &Mesh, p: &Proxy| -> Vec<String> {
        shared
            .iter()
            .map(|n| m.version(p, ResourceType::Listener, n))
            .collect()
    };
    assert_ne!(versions(&m, &quick), versions(&m, &plain));
    let unhurried = Proxy {
        idle_timeout_ns: None,
        ..quick.clone()
    };
    m.replace(px(&quick), px(&unhurried));
    assert_eq!(versions(&m, &unhurried), versions(&m, &plain));
    for (to, idle) in idle_timeouts(&m.listener_body(&unhurried, "virtualInbound")) {
        assert_eq!(idle, None, "virtualInbound to {to}");
    }
}

/// Per connection manager of a listener's chains (the default chain last): whether it
/// resolves dot segments, merges slashes, and what it does with escaped slashes.
fn path_handling(
    l: &envoy_types::pb::envoy::config::listener::v3::Listener,
) -> Vec<(bool, bool, i32)> {
    use envoy_types::pb::envoy::config::listener::v3::filter::ConfigType;
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
    l.filter_chains
        .iter()
        .chain(l.default_filter_chain.iter())
        .flat_map(|c| c.filters.iter())
        .filter_map(|f| match &f.config_type {
            Some(ConfigType::TypedConfig(any))
                if any.type_url.ends_with("HttpConnectionManager") =>
            {
                let h =
                    HttpConnectionManager::decode(&any.value[..]).expect("a connection manager");
                Some((
                    h.normalize_path.is_some_and(|b| b.value),
                    h.merge_slashes,
                    h.path_with_escaped_slashes_action,
                ))
            }
            _ => None,
        })
        .collect()
}

/// Proves the mesh config's `pathNormalization` on every connection manager of sidecars
/// (outbound HTTP, `virtualInbound`) and gateways, as Istio sets it (`NONE`: nothing;
/// `MERGE_SLASHES`: dot segments and slashes; `DECODE_AND_MERGE_SLASHES`: escaped slashes
/// decoded and forwarded too); a connection manager an AuthorizationPolicy checks keeps the
/// strictest normalization whatever the mesh says; back to `BASE`, every listener is as
/// before the change (the same versions).
#[test]
fn the_mesh_path_normalization_reaches_every_connection_manager() {
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::PathWithEscapedSlashesAction as Escaped;
    let mut m = Mesh::new();
    let server = sidecar_proxy("reviews-1", "default", "10.0.0.1", &[("app", "reviews")]);
    let checked = sidecar_proxy("ratings-1", "default", "10.0.0.2", &[("app", "ratings")]);
    let gw = router_proxy(
        "gw",
        "istio-system",
        "10.0.0.9",
        &[("istio", "ingressgateway")],
    );
    m.insert(vec![
        service("reviews", "default"),
        service("ratings", "default"),
        endpoint("reviews", "default", "10.0.0.1", true),
        endpoint("ratings", "default", "10.0.0.2", true),
        gateway(
            "istio-system",
            "gw",
            &[("istio", "ingressgateway")],
            &[(8080, None)],
        ),
        virtual_service(
            "istio-system",
            "gw-routes",
            &["*"],
            &["gw"],
            &host("reviews", "default"),
        ),
        Record::Security(SecurityPolicy {
            key: ConfigKey::new(Kind::AuthorizationPolicy, "default", "ratings-deny"),
            created: String::new(),
            selector: Some(crate::support::labels(&[("app", "ratings")])),
            effect: PolicyEffect::Authz(AuthzPolicy {
                action: AuthzAction::Deny,
                rules: vec![AuthzRule::default()],
                dry_run: false,
            }),
        }),
        px(&server),
        px(&checked),
        px(&gw),
    ]);
    let listeners = [
        (&server, "0.0.0.0_9080"),
        (&server, "virtualInbound"),
        (&gw, "0.0.0.0_8080"),
    ];
    let before: Vec<String> = listeners
        .iter()
        .map(|(p, n)| m.version(p, ResourceType::Listener, n))
        .collect();
    for (p, n) in listeners {
        for h in path_handling(&m.listener_body(p, n)) {
            assert_eq!(h, (true, false, Escaped::KeepUnchanged as i32), "BASE: {n}");
        }
    }
    let strictest = (true, true, Escaped::UnescapeAndRedirect as i32);
    let checked_inbound = path_handling(&m.listener_body(&checked, "virtualInbound"));
    assert!(checked_inbound.contains(&strictest), "{checked_inbound:?}");

    for (n, want) in [
        (
            PathNormalization::None,
            (false, false, Escaped::KeepUnchanged as i32),
        ),
        (
            PathNormalization::MergeSlashes,
            (true, true, Escaped::KeepUnchanged as i32),
        ),
        (
            PathNormalization::DecodeAndMergeSlashes,
            (true, true, Escaped::UnescapeAndForward as i32),
        ),
    ] {
        let config = crate::support::mesh_settings(|s| s.path_normalization = n);
        m.insert(vec![config.clone()]);
        for (p, name) in listeners {
            let handling = path_handling(&m.listener_body(p, name));
            assert!(!handling.is_empty(), "{name} has connection managers");
            for h in handling {
                assert_eq!(h, want, "{n:?}: {name}");
            }
        }
        // The checked workload's HTTP chains keep the strictest.
        let inbound = path_handling(&m.listener_body(&checked, "virtualInbound"));
        assert!(inbound.contains(&strictest), "{n:?}: {inbound:?}");
        m.retract(vec![config]);
    }
    let after: Vec<String> = listeners
        .iter()
        .map(|(p, n)| m.version(p, ResourceType::Listener, n))
        .collect();
    assert_eq!(after, before, "BASE again: the listeners as built");
}
