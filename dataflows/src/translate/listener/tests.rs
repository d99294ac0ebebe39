//! Tests of a proxy's idle timeout over every listener it may get.

use super::*;
use crate::model::{InboundPort, Proxying};
use crate::translate::PASSTHROUGH_CLUSTER;

/// Per filter of each chain (the default chain last): the filter's kind and its idle
/// timeout in milliseconds (a connection manager's `common_http_protocol_options`).
fn idle_of(r: &Resource) -> Vec<(String, &'static str, Option<i64>)> {
    let l = Listener::decode(&r.body.0[..]).expect("a listener");
    let ms = |d: Option<envoy_types::pb::google::protobuf::Duration>| {
        d.map(|d| d.seconds * 1000 + i64::from(d.nanos) / 1_000_000)
    };
    l.filter_chains
        .iter()
        .chain(l.default_filter_chain.iter())
        .flat_map(|c| c.filters.iter().map(move |f| (c.name.clone(), f)))
        .map(|(chain, f)| {
            let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
                return (chain, "other", None);
            };
            if let Ok(h) = HttpConnectionManager::decode(&any.value[..]) {
                if any.type_url.ends_with("HttpConnectionManager") {
                    let idle = h.common_http_protocol_options.and_then(|o| o.idle_timeout);
                    return (chain, "hcm", ms(idle));
                }
            }
            let t = TcpProxy::decode(&any.value[..]).expect("a tcp_proxy");
            (chain, "tcp", ms(t.idle_timeout))
        })
        .collect()
}

/// A proxy's `IDLE_TIMEOUT` is the idle timeout of every connection manager and of
/// every `tcp_proxy` (inbound, catch-all, outbound) of its listeners; an outbound one
/// whose DestinationRule sets an idle timeout keeps the rule's. API listeners and other
/// resources are left alone.
#[test]
fn idle_timeout_reaches_every_connection_manager_and_tcp_proxy() {
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
    let vin = virtual_inbound(&ports, None);
    assert!(idle_of(&vin).iter().all(|(_, _, idle)| idle.is_none()));
    let with = idle_of(&with_idle_timeout(&vin, 1_500_000_000));
    // Two HTTP chains, three TCP ones (mTLS, the application's TLS, plaintext) and the
    // catch-all.
    assert_eq!(with.len(), 6);
    assert!(
        with.iter().all(|(_, _, idle)| *idle == Some(1500)),
        "{with:?}"
    );
    assert!(with.iter().any(|(_, kind, _)| *kind == "hcm"));
    let out = with_idle_timeout(&virtual_outbound(PASSTHROUGH_CLUSTER), 0);
    assert_eq!(
        idle_of(&out),
        vec![("virtualOutbound-catchall-tcp".into(), "tcp", Some(0))]
    );
    let http = with_idle_timeout(
        &http_listener("0.0.0.0", 8080, true, "http.8080", true),
        2_000_000_000,
    );
    assert_eq!(idle_of(&http), vec![(String::new(), "hcm", Some(2000))]);
    // Proxyless clients' API listeners and resources other than listeners: as built.
    let api = &api_listeners("a.ns.svc.cluster.local", 9080, "ns", "cluster.local")[0];
    assert_eq!(with_idle_timeout(api, 1_000_000_000), *api);
    let route = Resource::new(ResourceType::Route, "9080".into(), vec![1, 2, 3]);
    assert_eq!(with_idle_timeout(&route, 1_000_000_000), route);
}
