//! The Delta and SotW state machines against a proxy view fed by hand-made epochs.

use super::delta::DeltaStream;
use super::sotw::SotwStream;
use super::{Feedback, StreamEvent};
use crate::hub::view::{Bodies, ProxyView};
use dataflows::driver::EpochOutput;
use dataflows::materialize::Materialized;
use dataflows::model::{Resource, ResourceType};
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use std::cell::RefCell;

const ID: &str = "sidecar~10.0.0.1~a.default~default.svc.cluster.local";

/// What one proxy is served, built from hand-made epochs as the hub builds it (a
/// materialized set and its bodies), without a hub.
#[derive(Default)]
struct Served(RefCell<(Materialized, Bodies)>);

impl Served {
    fn with_view<R>(&self, id: &str, f: impl FnOnce(&ProxyView<'_>) -> R) -> Option<R> {
        let st = self.0.borrow();
        Some(f(&ProxyView::new(st.0.held(id), &st.1, 0)))
    }
}

fn hub() -> Served {
    Served::default()
}

fn res(t: ResourceType, name: &str, body: &str) -> Resource {
    Resource::new(t, name.into(), body.as_bytes().to_vec())
}

/// Applies an epoch in which `add` resources appear for the proxy and `del` disappear.
fn epoch(hub: &Served, n: u64, add: &[Resource], del: &[Resource]) {
    let mut out = EpochOutput {
        epoch: n,
        ..Default::default()
    };
    for (rs, d) in [(add, 1), (del, -1)] {
        for r in rs {
            out.proxy_resources.push(((ID.to_string(), r.key()), d));
            out.bodies.push((r.clone(), d));
        }
    }
    let mut st = hub.0.borrow_mut();
    let (held, bodies) = &mut *st;
    bodies.add(held, std::mem::take(&mut out.bodies));
    held.apply(&out, false);
    bodies.retire();
}

#[test]
fn delta_sends_changes_only_and_resends_eds_of_updated_clusters() {
    let hub = hub();
    let c1 = res(ResourceType::Cluster, "c1", "c1-a");
    let e1 = res(ResourceType::Endpoint, "c1", "e1-a");
    epoch(&hub, 1, &[c1.clone(), e1.clone()], &[]);
    let mut s = DeltaStream::default();
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: ResourceType::Cluster.type_url().into(),
        ..Default::default()
    })
    .unwrap();
    let r = hub.with_view(ID, |v| s.pending(v)).unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].resources[0].name, "c1");
    // Nothing more until the ACK, even if something changes.
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: ResourceType::Endpoint.type_url().into(),
        resource_names_subscribe: vec!["c1".into()],
        ..Default::default()
    })
    .unwrap();
    let r2 = hub.with_view(ID, |v| s.pending(v)).unwrap();
    assert_eq!(r2.len(), 1, "EDS answered, CDS still in flight");
    assert_eq!(r2[0].type_url, ResourceType::Endpoint.type_url());
    for resp in r.iter().chain(&r2) {
        s.on_request_unshared(&DeltaDiscoveryRequest {
            type_url: resp.type_url.clone(),
            response_nonce: resp.nonce.clone(),
            ..Default::default()
        })
        .unwrap();
    }
    assert!(
        hub.with_view(ID, |v| s.pending(v)).unwrap().is_empty(),
        "all held, nothing to send"
    );

    // The cluster is updated, its endpoints are not: both go out, CDS first.
    let c1b = res(ResourceType::Cluster, "c1", "c1-b");
    epoch(&hub, 2, &[c1b], &[c1]);
    let r3 = hub.with_view(ID, |v| s.pending(v)).unwrap();
    let types: Vec<&str> = r3.iter().map(|r| r.type_url.as_str()).collect();
    assert_eq!(
        types,
        vec![
            ResourceType::Cluster.type_url(),
            ResourceType::Endpoint.type_url()
        ]
    );
    assert_eq!(
        r3[1].resources[0].version, e1.version,
        "the same assignment, resent for warming"
    );
}

#[test]
fn delta_nack_is_recorded_and_not_resent() {
    let hub = hub();
    epoch(&hub, 1, &[res(ResourceType::Listener, "l", "bad")], &[]);
    let mut s = DeltaStream::default();
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: ResourceType::Listener.type_url().into(),
        ..Default::default()
    })
    .unwrap();
    let r = hub.with_view(ID, |v| s.pending(v)).unwrap();
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: r[0].type_url.clone(),
        response_nonce: r[0].nonce.clone(),
        error_detail: rejected("invalid listener"),
        ..Default::default()
    })
    .unwrap();
    let feedback: Vec<Feedback> = s
        .events
        .take(None)
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::Feedback(f) => Some(f),
            _ => None,
        })
        .collect();
    assert!(matches!(&feedback[..], [Feedback::Nack(n)] if n.message == "invalid listener"));
    assert!(
        hub.with_view(ID, |v| s.pending(v)).unwrap().is_empty(),
        "the rejected version is not resent"
    );
    epoch(
        &hub,
        2,
        &[res(ResourceType::Listener, "l", "good")],
        &[res(ResourceType::Listener, "l", "bad")],
    );
    let r = hub.with_view(ID, |v| s.pending(v)).unwrap();
    assert_eq!(r.len(), 1, "a later, different version is sent");
}

#[test]
fn delta_removals_and_initial_versions() {
    let hub = hub();
    let a = res(ResourceType::Cluster, "a", "a1");
    let b = res(ResourceType::Cluster, "b", "b1");
    epoch(&hub, 1, &[a.clone(), b.clone()], &[]);
    let mut s = DeltaStream::default();
    // The client reconnects holding `a` (current), `b` (stale) and `gone` (deleted).
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: ResourceType::Cluster.type_url().into(),
        initial_resource_versions: [
            ("a".to_string(), a.version.clone()),
            ("b".to_string(), "old".to_string()),
            ("gone".to_string(), "x".to_string()),
        ]
        .into(),
        ..Default::default()
    })
    .unwrap();
    let r = hub.with_view(ID, |v| s.pending(v)).unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(
        r[0].resources
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        vec!["b"]
    );
    assert_eq!(r[0].removed_resources, vec!["gone".to_string()]);
}

#[test]
fn sotw_ignores_stale_nonces_and_resends_eds_after_cluster_update() {
    let hub = hub();
    let c = res(ResourceType::Cluster, "c", "c1");
    let e = res(ResourceType::Endpoint, "c", "e1");
    epoch(&hub, 1, &[c.clone(), e.clone()], &[]);
    let mut s = SotwStream::default();
    let cds = ResourceType::Cluster.type_url().to_string();
    let eds = ResourceType::Endpoint.type_url().to_string();
    s.on_request(&DiscoveryRequest {
        type_url: cds.clone(),
        ..Default::default()
    })
    .unwrap();
    s.on_request(&DiscoveryRequest {
        type_url: eds.clone(),
        resource_names: vec!["c".into()],
        ..Default::default()
    })
    .unwrap();
    let r = hub.with_view(ID, |v| s.pending(v)).unwrap();
    assert_eq!(r.len(), 2);
    for resp in &r {
        let names = if resp.type_url == eds {
            vec!["c".to_string()]
        } else {
            vec![]
        };
        s.on_request(&DiscoveryRequest {
            type_url: resp.type_url.clone(),
            resource_names: names,
            response_nonce: resp.nonce.clone(),
            ..Default::default()
        })
        .unwrap();
    }
    // A stale nonce with a different subscription is ignored.
    s.on_request(&DiscoveryRequest {
        type_url: eds.clone(),
        resource_names: vec![],
        response_nonce: "0".into(),
        ..Default::default()
    })
    .unwrap();
    assert!(hub.with_view(ID, |v| s.pending(v)).unwrap().is_empty());

    epoch(&hub, 2, &[res(ResourceType::Cluster, "c", "c2")], &[c]);
    let r = hub.with_view(ID, |v| s.pending(v)).unwrap();
    assert_eq!(
        r.len(),
        2,
        "CDS full set, then the unchanged assignment again"
    );
    assert_eq!(r[1].type_url, eds);
    assert_eq!(r[1].resources.len(), 1);
}

#[test]
fn delta_answers_empty_wildcards_and_unknown_names() {
    let hub = hub();
    epoch(&hub, 1, &[res(ResourceType::Cluster, "c", "c1")], &[]);
    let mut s = DeltaStream::default();
    // No listeners at all: the first LDS request still gets an (empty) answer.
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: ResourceType::Listener.type_url().into(),
        ..Default::default()
    })
    .unwrap();
    // An assignment that does not exist is answered as removed.
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: ResourceType::Endpoint.type_url().into(),
        resource_names_subscribe: vec!["nope".into()],
        ..Default::default()
    })
    .unwrap();
    let r = hub.with_view(ID, |v| s.pending(v)).unwrap();
    assert_eq!(r.len(), 2);
    let eds = r
        .iter()
        .find(|r| r.type_url == ResourceType::Endpoint.type_url())
        .unwrap();
    assert_eq!(eds.removed_resources, vec!["nope".to_string()]);
    let lds = r
        .iter()
        .find(|r| r.type_url == ResourceType::Listener.type_url())
        .unwrap();
    assert!(lds.resources.is_empty() && lds.removed_resources.is_empty());
    // It appears when it is created.
    for resp in &r {
        s.on_request_unshared(&DeltaDiscoveryRequest {
            type_url: resp.type_url.clone(),
            response_nonce: resp.nonce.clone(),
            ..Default::default()
        })
        .unwrap();
    }
    epoch(&hub, 2, &[res(ResourceType::Endpoint, "nope", "now")], &[]);
    let r = hub.with_view(ID, |v| s.pending(v)).unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].resources[0].name, "nope");
}

/// A first config larger than [`MAX_RESPONSE_BYTES`] goes out in several CDS responses, one
/// per ACK, with every cluster exactly once; listeners wait until the last cluster is sent.
#[test]
fn delta_splits_large_responses_and_holds_listeners_until_clusters_are_complete() {
    use super::delta::MAX_RESPONSE_BYTES;
    let hub = hub();
    let body = "x".repeat(4096);
    let clusters: Vec<Resource> = (0..(3 * MAX_RESPONSE_BYTES / 4096))
        .map(|i| {
            res(
                ResourceType::Cluster,
                &format!("c{i:03}"),
                &format!("{i}{body}"),
            )
        })
        .collect();
    let listener = res(ResourceType::Listener, "l", "l-a");
    let mut all = clusters.clone();
    all.push(listener.clone());
    epoch(&hub, 1, &all, &[]);
    let mut s = DeltaStream::default();
    for t in [ResourceType::Cluster, ResourceType::Listener] {
        s.on_request_unshared(&DeltaDiscoveryRequest {
            type_url: t.type_url().into(),
            ..Default::default()
        })
        .unwrap();
    }
    let mut received = std::collections::BTreeSet::new();
    let mut responses = 0;
    loop {
        let r = hub.with_view(ID, |v| s.pending(v)).unwrap();
        if r.is_empty() {
            break;
        }
        for resp in &r {
            if resp.type_url == ResourceType::Listener.type_url() {
                assert_eq!(
                    received.len(),
                    clusters.len(),
                    "a listener went out before every cluster"
                );
            } else {
                responses += 1;
                let size: usize = resp
                    .resources
                    .iter()
                    .map(|x| x.resource.as_ref().map_or(0, |a| a.value.len()))
                    .sum();
                assert!(
                    size <= MAX_RESPONSE_BYTES + 4200,
                    "{size} bytes in one response"
                );
                for x in &resp.resources {
                    assert!(received.insert(x.name.clone()), "{} sent twice", x.name);
                }
            }
            s.on_request_unshared(&DeltaDiscoveryRequest {
                type_url: resp.type_url.clone(),
                response_nonce: resp.nonce.clone(),
                ..Default::default()
            })
            .unwrap();
        }
        assert!(responses < 100, "does not converge");
    }
    assert_eq!(received.len(), clusters.len());
    assert!(responses >= 3, "{responses} CDS responses for 3× the limit");
}

/// A NACK's error detail.
fn rejected(message: impl Into<String>) -> Option<RpcStatus> {
    Some(RpcStatus {
        code: 3,
        message: message.into(),
        details: vec![],
    })
}

fn feedback_of(events: Vec<StreamEvent>) -> Vec<Feedback> {
    events
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::Feedback(f) => Some(f),
            _ => None,
        })
        .collect()
}

/// A Delta ACK or NACK of a nonce the stream never sent for the type is ignored: it cannot
/// mark the proxy NACKED.
#[test]
fn delta_ignores_answers_to_unknown_nonces() {
    let hub = hub();
    epoch(&hub, 1, &[res(ResourceType::Listener, "l", "ok")], &[]);
    let mut s = DeltaStream::default();
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: ResourceType::Listener.type_url().into(),
        ..Default::default()
    })
    .unwrap();
    let r = hub.with_view(ID, |v| s.pending(v)).unwrap();
    let nack = |nonce: &str| DeltaDiscoveryRequest {
        type_url: ResourceType::Listener.type_url().into(),
        response_nonce: nonce.into(),
        error_detail: rejected("forged"),
        ..Default::default()
    };
    s.events.take(None);
    s.on_request_unshared(&nack("999")).unwrap();
    assert!(feedback_of(s.events.take(None)).is_empty(), "unknown nonce");
    assert!(s.in_flight(), "the real response is still in flight");
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: ResourceType::Listener.type_url().into(),
        response_nonce: r[0].nonce.clone(),
        ..Default::default()
    })
    .unwrap();
    assert!(matches!(
        &feedback_of(s.events.take(None))[..],
        [Feedback::Ack { .. }]
    ));
}

/// Nonces differ per stream and do not start from a guessable counter.
#[test]
fn nonces_are_not_guessable() {
    let hub = hub();
    epoch(&hub, 1, &[res(ResourceType::Cluster, "c", "c1")], &[]);
    let first = || {
        let mut s = DeltaStream::default();
        s.on_request_unshared(&DeltaDiscoveryRequest {
            type_url: ResourceType::Cluster.type_url().into(),
            ..Default::default()
        })
        .unwrap();
        hub.with_view(ID, |v| s.pending(v)).unwrap()[0]
            .nonce
            .clone()
    };
    let (a, b) = (first(), first());
    assert_ne!(a, b);
    assert!(a.len() >= 16 && a != "1", "{a}");
}

/// A type meshflow does not serve, asked on a stream that asks for served types too, is
/// answered as holding none of its names (Delta) or as empty (SotW), and the stream goes
/// on; alone on a new stream it is refused.
#[test]
fn unserved_types_are_answered_empty_on_a_serving_stream() {
    // ECDS: extension configs, which meshflow does not serve.
    const UNSERVED: &str = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig";
    let hub = hub();
    epoch(&hub, 1, &[res(ResourceType::Cluster, "c", "c1")], &[]);
    let mut d = DeltaStream::default();
    let unserved = DeltaDiscoveryRequest {
        type_url: UNSERVED.into(),
        resource_names_subscribe: vec!["default".into()],
        ..Default::default()
    };
    assert!(d.on_request_unshared(&unserved).is_err(), "alone: refused");
    d.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: ResourceType::Cluster.type_url().into(),
        ..Default::default()
    })
    .unwrap();
    d.on_request_unshared(&unserved).unwrap();
    let r = hub.with_view(ID, |v| d.pending(v)).unwrap();
    let types: Vec<&str> = r.iter().map(|x| x.type_url.as_str()).collect();
    assert_eq!(types, vec![UNSERVED, ResourceType::Cluster.type_url()]);
    assert_eq!(r[0].removed_resources, vec!["default".to_string()]);
    assert!(r[0].resources.is_empty());
    // Its ACK is no answer to anything served.
    d.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: UNSERVED.into(),
        response_nonce: r[0].nonce.clone(),
        ..Default::default()
    })
    .unwrap();
    assert!(hub.with_view(ID, |v| d.pending(v)).unwrap().is_empty());

    let mut s = SotwStream::default();
    s.on_request(&DiscoveryRequest {
        type_url: ResourceType::Cluster.type_url().into(),
        ..Default::default()
    })
    .unwrap();
    s.on_request(&DiscoveryRequest {
        type_url: UNSERVED.into(),
        resource_names: vec!["default".into()],
        ..Default::default()
    })
    .unwrap();
    let r = hub.with_view(ID, |v| s.pending(v)).unwrap();
    assert_eq!(r[0].type_url, UNSERVED);
    assert!(r[0].resources.is_empty());
    assert_eq!(r[1].type_url, ResourceType::Cluster.type_url());
}

/// A NACK's message is kept (and logged) cut to `MAX_NACK_MESSAGE` bytes.
#[test]
fn nack_messages_are_bounded() {
    let hub = hub();
    epoch(&hub, 1, &[res(ResourceType::Listener, "l", "x")], &[]);
    let mut s = SotwStream::default();
    s.on_request(&DiscoveryRequest {
        type_url: ResourceType::Listener.type_url().into(),
        ..Default::default()
    })
    .unwrap();
    let r = hub.with_view(ID, |v| s.pending(v)).unwrap();
    s.on_request(&DiscoveryRequest {
        type_url: ResourceType::Listener.type_url().into(),
        response_nonce: r[0].nonce.clone(),
        error_detail: rejected("é".repeat(1 << 20)),
        ..Default::default()
    })
    .unwrap();
    let fb = feedback_of(s.events.take(None));
    let [Feedback::Nack(n)] = &fb[..] else {
        panic!("{fb:?}")
    };
    assert!(
        n.message.len() <= super::MAX_NACK_MESSAGE + 64,
        "{}",
        n.message.len()
    );
    assert!(n.message.ends_with("more bytes not kept)"));
}

/// A NACK's message reaches terminals: control characters but newlines and tabs are escaped.
#[test]
fn nack_messages_escape_control_characters() {
    assert_eq!(
        super::nack_message("bad\x1b[31m\nline\t2"),
        "bad\\u{1b}[31m\nline\t2"
    );
}

/// A Delta stream's subscriptions to one type are bounded across requests, not only per
/// request; the debug port is shown at most `SHOWN_NAMES` of them and a count of the rest.
#[test]
fn delta_subscriptions_are_bounded_per_stream() {
    let mut s = DeltaStream::default();
    let subscribe = |from: usize, n: usize| DeltaDiscoveryRequest {
        type_url: ResourceType::Endpoint.type_url().into(),
        resource_names_subscribe: (from..from + n).map(|i| format!("c{i}")).collect(),
        ..Default::default()
    };
    s.on_request_unshared(&subscribe(0, 60_000)).unwrap();
    s.on_request_unshared(&subscribe(0, 60_000)).unwrap(); // the same names again
    let shown = &s.subscriptions()[0].shown_names();
    assert_eq!(shown.len(), super::SHOWN_NAMES + 1);
    assert_eq!(shown.last().map(String::as_str), Some("… and 59000 more"));
    let err = s
        .on_request_unshared(&subscribe(60_000, 40_001))
        .unwrap_err();
    assert_eq!(err, super::ProtocolError::TooManySubscribed(100_001));
}

/// A route configuration with two virtual hosts, the second's route named `tag`.
fn route_with_vhosts(tag: &str) -> Resource {
    use envoy_types::pb::envoy::config::route::v3::{Route, RouteConfiguration, VirtualHost};
    use prost::Message;
    let vh = |name: &str, route: &str| VirtualHost {
        name: name.into(),
        domains: vec![name.into(), name.split(':').next().unwrap_or(name).into()],
        routes: vec![Route {
            name: route.into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let rc = RouteConfiguration {
        name: "80".into(),
        virtual_hosts: vec![vh("a:80", "a"), vh("b:80", tag)],
        ..Default::default()
    };
    Resource::new(ResourceType::Route, "80".into(), rc.encode_to_vec())
}

/// `serve --vhds`: the route configuration goes without virtual hosts; subscribing to its
/// name as VHDS sends every virtual host as `ROUTE/HOST`; a change of one virtual host
/// sends that one only (no route configuration); an on-demand `ROUTE/DOMAIN` gets the
/// virtual host listing it, with the name as an alias, and an unknown one is removed.
#[test]
fn delta_vhds_sends_changed_virtual_hosts_only() {
    use crate::hub::vhds::{VhdsCache, VIRTUAL_HOST_TYPE_URL};
    use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
    use prost::Message;
    let hub = hub();
    let cache = VhdsCache::default();
    let look = |s: &mut DeltaStream| {
        let st = hub.0.borrow();
        s.pending(&ProxyView::new(st.0.held(ID), &st.1, 0).with_vhds(Some(&cache)))
    };
    let ack =
        |s: &mut DeltaStream,
         r: &envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryResponse| {
            s.on_request_unshared(&DeltaDiscoveryRequest {
                type_url: r.type_url.clone(),
                response_nonce: r.nonce.clone(),
                ..Default::default()
            })
            .unwrap();
        };
    let r1 = route_with_vhosts("b1");
    epoch(&hub, 1, std::slice::from_ref(&r1), &[]);
    let mut s = DeltaStream::default();
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: ResourceType::Route.type_url().into(),
        resource_names_subscribe: vec!["80".into()],
        ..Default::default()
    })
    .unwrap();
    let r = look(&mut s);
    assert_eq!(r.len(), 1);
    let rc =
        RouteConfiguration::decode(&r[0].resources[0].resource.as_ref().expect("body").value[..])
            .expect("a route configuration");
    assert!(rc.virtual_hosts.is_empty() && rc.vhds.is_some(), "{rc:?}");
    ack(&mut s, &r[0]);
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: VIRTUAL_HOST_TYPE_URL.into(),
        resource_names_subscribe: vec!["80".into()],
        ..Default::default()
    })
    .unwrap();
    let r = look(&mut s);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].type_url, VIRTUAL_HOST_TYPE_URL);
    let names: Vec<&str> = r[0].resources.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["80/a:80", "80/b:80"]);
    ack(&mut s, &r[0]);
    assert!(look(&mut s).is_empty());

    // One virtual host changes: it alone is sent, the route configuration is not.
    epoch(&hub, 2, &[route_with_vhosts("b2")], &[r1]);
    let r = look(&mut s);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].type_url, VIRTUAL_HOST_TYPE_URL);
    let names: Vec<&str> = r[0].resources.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["80/b:80"]);
    ack(&mut s, &r[0]);

    // On demand: a domain of a virtual host, and one nobody lists.
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: VIRTUAL_HOST_TYPE_URL.into(),
        resource_names_subscribe: vec!["80/a".into(), "80/nowhere".into()],
        ..Default::default()
    })
    .unwrap();
    let r = look(&mut s);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].resources.len(), 1);
    assert_eq!(r[0].resources[0].name, "80/a:80");
    assert_eq!(r[0].resources[0].aliases, ["80/a"]);
    assert_eq!(r[0].removed_resources, ["80/nowhere"]);
}

/// Envoy 1.40's VHDS request over ADS names no resource: the virtual hosts of every route
/// configuration the client holds are sent, and follow a route configuration it gains.
#[test]
fn delta_vhds_wildcard_follows_route_configurations_held() {
    use crate::hub::vhds::{VhdsCache, VIRTUAL_HOST_TYPE_URL};
    let hub = hub();
    let cache = VhdsCache::default();
    let look = |s: &mut DeltaStream| {
        let st = hub.0.borrow();
        s.pending(&ProxyView::new(st.0.held(ID), &st.1, 0).with_vhds(Some(&cache)))
    };
    epoch(&hub, 1, &[route_with_vhosts("b1")], &[]);
    let mut s = DeltaStream::default();
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: ResourceType::Route.type_url().into(),
        resource_names_subscribe: vec!["80".into()],
        ..Default::default()
    })
    .unwrap();
    let r = look(&mut s);
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: ResourceType::Route.type_url().into(),
        response_nonce: r[0].nonce.clone(),
        ..Default::default()
    })
    .unwrap();
    s.on_request_unshared(&DeltaDiscoveryRequest {
        type_url: VIRTUAL_HOST_TYPE_URL.into(),
        ..Default::default()
    })
    .unwrap();
    let r = look(&mut s);
    assert_eq!(r.len(), 1, "{r:?}");
    let names: Vec<&str> = r[0].resources.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["80/a:80", "80/b:80"]);
}

/// Named subscriptions added one request at a time are answered with exactly the new names
/// (current versions, or removed when they do not exist), never with resources the stream
/// is not subscribed to; a name unsubscribed and subscribed again is sent again.
#[test]
fn delta_named_subscriptions_send_exactly_the_new_names() {
    let hub = hub();
    let e = |n: &str, v: &str| res(ResourceType::Endpoint, n, v);
    epoch(
        &hub,
        1,
        &[e("e1", "1"), e("e2", "1"), e("e3", "1"), e("e4", "1")],
        &[],
    );
    let mut s = DeltaStream::default();
    let ask = |s: &mut DeltaStream, sub: &[&str], unsub: &[&str]| {
        s.on_request_unshared(&DeltaDiscoveryRequest {
            type_url: ResourceType::Endpoint.type_url().into(),
            resource_names_subscribe: sub.iter().map(|n| n.to_string()).collect(),
            resource_names_unsubscribe: unsub.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        })
        .unwrap();
        let r = hub.with_view(ID, |v| s.pending(v)).unwrap();
        for resp in &r {
            s.on_request_unshared(&DeltaDiscoveryRequest {
                type_url: resp.type_url.clone(),
                response_nonce: resp.nonce.clone(),
                ..Default::default()
            })
            .unwrap();
        }
        r.iter()
            .map(|r| {
                let sent: Vec<String> = r
                    .resources
                    .iter()
                    .map(|x| {
                        format!(
                            "{}@{}",
                            x.name,
                            x.resource.as_ref().map_or(0, |a| a.value.len())
                        )
                    })
                    .collect();
                (sent, r.removed_resources.clone())
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ask(&mut s, &["e1"], &[]),
        vec![(vec!["e1@1".to_string()], vec![])]
    );
    assert_eq!(
        ask(&mut s, &["e2", "missing"], &[]),
        vec![(vec!["e2@1".to_string()], vec!["missing".to_string()])]
    );
    // e3 changes while nobody subscribes to it: nothing goes out.
    epoch(&hub, 2, &[e("e3", "22")], &[e("e3", "1")]);
    assert!(hub.with_view(ID, |v| s.pending(v)).unwrap().is_empty());
    // Subscribed now: its current version, and nothing else.
    assert_eq!(
        ask(&mut s, &["e3"], &[]),
        vec![(vec!["e3@2".to_string()], vec![])]
    );
    // Unsubscribed e1 changes: nothing; subscribed again: sent again, in its new version.
    assert_eq!(ask(&mut s, &[], &["e1"]), vec![]);
    epoch(&hub, 3, &[e("e1", "333")], &[e("e1", "1")]);
    assert!(hub.with_view(ID, |v| s.pending(v)).unwrap().is_empty());
    assert_eq!(
        ask(&mut s, &["e1"], &[]),
        vec![(vec!["e1@3".to_string()], vec![])]
    );
    // A subscription to a name the stream already has: nothing to send.
    assert_eq!(ask(&mut s, &["e2"], &[]), vec![]);
}
