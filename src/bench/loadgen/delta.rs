//! One simulated proxy's Delta xDS stream.

use super::*;

/// What a proxy's Delta streams carry from one to the next (one, unless it fails over).
#[derive(Default)]
pub(super) struct Session {
    /// Which EDS/RDS names its clusters and listeners call for.
    derived: Derived,
    lds_requested: bool,
    /// A stream opened in this session (the next one resumes).
    pub(super) opened: bool,
    /// The latest stream opened (the server answered its request).
    pub(super) live: bool,
}

/// The requests that open a stream: wildcard CDS carrying the node; on a resumed session,
/// every type held again, each with `initial_resource_versions` (what the proxy holds) and
/// its EDS/RDS names, as Envoy resubscribes after a reconnect.
fn opening_requests(h: &ProxyHandle, node: Node, session: &Session) -> Vec<DeltaDiscoveryRequest> {
    let first = DeltaDiscoveryRequest {
        node: Some(node),
        type_url: CDS.type_url().into(),
        ..Default::default()
    };
    if !session.opened {
        return vec![first];
    }
    let st = h.lock();
    // One type asked for again: the names it subscribes to (none for a wildcard type) and
    // the versions it holds.
    let resume = |t: ResourceType, names: &BTreeSet<String>| DeltaDiscoveryRequest {
        type_url: t.type_url().into(),
        resource_names_subscribe: names.iter().cloned().collect(),
        initial_resource_versions: st.held[type_index(t)]
            .iter()
            .map(|(n, held)| (n.clone(), held.version.clone()))
            .collect(),
        ..Default::default()
    };
    let wildcard = BTreeSet::new();
    let mut out = vec![DeltaDiscoveryRequest {
        node: first.node,
        ..resume(CDS, &wildcard)
    }];
    if !st.eds_subscribed.is_empty() {
        out.push(resume(EDS, &st.eds_subscribed));
    }
    if session.lds_requested {
        out.push(resume(LDS, &wildcard));
    }
    if !st.rds_subscribed.is_empty() {
        out.push(resume(RDS, &st.rds_subscribed));
    }
    out
}

pub(super) async fn run_delta(
    h: &ProxyHandle,
    shared: &Shared,
    channel: Channel,
    node: Node,
    session: &mut Session,
) -> Result<(), String> {
    let mut client = AggregatedDiscoveryServiceClient::new(channel)
        .max_decoding_message_size(MAX_RESPONSE_BYTES);
    let (tx, rx) = mpsc::channel::<DeltaDiscoveryRequest>(16);
    let send = |req: DeltaDiscoveryRequest| {
        let tx = tx.clone();
        async move {
            tx.send(req)
                .await
                .map_err(|_| "the request stream closed".to_string())
        }
    };
    // Wildcard CDS (the legacy form: a first request naming nothing), carrying the node;
    // resuming, every type held.
    for req in opening_requests(h, node, session) {
        send(req).await?;
    }
    let mut inbound = client
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .map_err(|e| format!("opening the Delta stream: {e}"))?
        .into_inner();
    {
        let mut st = h.lock();
        st.connected_at = Some(Instant::now());
        if session.opened {
            st.reconnects += 1;
        }
    }
    session.opened = true;
    session.live = true;
    while let Some(resp) = inbound
        .message()
        .await
        .map_err(|e| format!("Delta stream: {e}"))?
    {
        let now = Instant::now();
        shared.touch(now);
        let bytes = resp.encoded_len() as u64;
        // VHDS virtual hosts are route content: counted and held as RDS.
        let vhost = resp.type_url == VIRTUAL_HOST_TYPE_URL;
        let Some(t) =
            ResourceType::from_type_url(&resp.type_url).or(vhost.then_some(ResourceType::Route))
        else {
            h.lock().undecodable += 1;
            continue;
        };
        let i = type_index(t);
        let mut subs: Vec<DeltaDiscoveryRequest> = Vec::new();
        {
            let mut st = h.lock();
            if vhost {
                st.vhds_waiting = false;
            }
            st.last_message_at = Some(now);
            st.counters.messages[i] += 1;
            st.counters.bytes[i] += bytes;
            st.counters.resources[i] += resp.resources.len() as u64;
            st.counters.removed[i] += resp.removed_resources.len() as u64;
            st.got[i] = true;
            for r in &resp.resources {
                let body = r.resource.as_ref().map(|a| a.value.as_slice());
                if let Some(b) = body {
                    if version_of(b) != r.version {
                        st.version_mismatches += 1;
                    }
                }
                match t {
                    ResourceType::Cluster => session.derived.on_cluster(&r.name, body),
                    ResourceType::Listener => session.derived.on_listener(&r.name, body),
                    ResourceType::Route if !vhost => {
                        if body.is_some_and(has_vhds) {
                            st.vhds_routes.insert(r.name.clone());
                        } else {
                            st.vhds_routes.remove(&r.name);
                        }
                    }
                    _ => {}
                }
                record_arrival(&mut st, t, (r.name.clone(), body), r.version.clone(), now);
            }
            for n in &resp.removed_resources {
                st.forget(i, n, now);
                match t {
                    ResourceType::Cluster => session.derived.on_cluster(n, None),
                    ResourceType::Listener => session.derived.on_listener(n, None),
                    ResourceType::Route if !vhost => {
                        st.vhds_routes.remove(n);
                    }
                    _ => {}
                }
            }
            let mut follow = |st: &mut ProxyState, sub: ResourceType, wanted| {
                let (add, drop) = resubscribe(st, sub, wanted, now);
                if !add.is_empty() || !drop.is_empty() {
                    subs.push(DeltaDiscoveryRequest {
                        type_url: sub.type_url().into(),
                        resource_names_subscribe: add,
                        resource_names_unsubscribe: drop,
                        ..Default::default()
                    });
                }
            };
            match t {
                ResourceType::Cluster => follow(&mut st, EDS, session.derived.eds()),
                ResourceType::Listener => follow(&mut st, RDS, session.derived.rds()),
                _ => {}
            }
            if matches!(t, ResourceType::Listener | ResourceType::Route) && !vhost {
                let (add, drop) = st.follow_vhds(now);
                if !add.is_empty() || !drop.is_empty() {
                    subs.push(DeltaDiscoveryRequest {
                        type_url: VIRTUAL_HOST_TYPE_URL.into(),
                        resource_names_subscribe: add,
                        resource_names_unsubscribe: drop,
                        ..Default::default()
                    });
                }
            }
            if st.synced_at.is_none() && st.is_synced() {
                st.synced_at = Some(now);
            }
        }
        // As Envoy: new EDS/RDS subscriptions while the clusters/listeners warm, then the ACK.
        for req in subs {
            send(req).await?;
        }
        send(DeltaDiscoveryRequest {
            type_url: resp.type_url.clone(),
            response_nonce: resp.nonce.clone(),
            ..Default::default()
        })
        .await?;
        if t == CDS && !session.lds_requested {
            session.lds_requested = true;
            send(DeltaDiscoveryRequest {
                type_url: LDS.type_url().into(),
                ..Default::default()
            })
            .await?;
        }
    }
    Ok(())
}
