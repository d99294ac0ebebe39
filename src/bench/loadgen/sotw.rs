//! One simulated proxy's State-of-the-World stream.

use super::*;

#[derive(Default, Clone)]
pub(super) struct SotwType {
    version_info: String,
    nonce: String,
}

pub(super) async fn run_sotw(
    h: &ProxyHandle,
    shared: &Shared,
    channel: Channel,
    node: Node,
) -> Result<(), String> {
    let mut client = AggregatedDiscoveryServiceClient::new(channel)
        .max_decoding_message_size(MAX_RESPONSE_BYTES);
    let (tx, rx) = mpsc::channel::<DiscoveryRequest>(16);
    let send = |req: DiscoveryRequest| {
        let tx = tx.clone();
        async move {
            tx.send(req)
                .await
                .map_err(|_| "the request stream closed".to_string())
        }
    };
    send(DiscoveryRequest {
        node: Some(node),
        type_url: CDS.type_url().into(),
        ..Default::default()
    })
    .await?;
    let mut inbound = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .map_err(|e| format!("opening the SotW stream: {e}"))?
        .into_inner();
    h.lock().connected_at = Some(Instant::now());
    let mut derived = Derived::default();
    let mut types: [SotwType; ResourceType::COUNT] = Default::default();
    let mut lds_requested = false;
    while let Some(resp) = inbound
        .message()
        .await
        .map_err(|e| format!("SotW stream: {e}"))?
    {
        let now = Instant::now();
        shared.touch(now);
        let Some(t) = ResourceType::from_type_url(&resp.type_url) else {
            h.lock().undecodable += 1;
            continue;
        };
        let i = type_index(t);
        types[i] = SotwType {
            version_info: resp.version_info.clone(),
            nonce: resp.nonce.clone(),
        };
        let mut requests: Vec<DiscoveryRequest> = Vec::new();
        let (eds_names, rds_names);
        {
            let mut st = h.lock();
            sotw_apply(&mut st, &mut derived, t, &resp, now);
            let mut follow = |st: &mut ProxyState, sub: ResourceType, wanted| {
                let (add, drop) = resubscribe(st, sub, wanted, now);
                if !add.is_empty() || !drop.is_empty() {
                    let names = if sub == EDS {
                        &st.eds_subscribed
                    } else {
                        &st.rds_subscribed
                    };
                    let last = &types[type_index(sub)];
                    requests.push(DiscoveryRequest {
                        type_url: sub.type_url().into(),
                        version_info: last.version_info.clone(),
                        response_nonce: last.nonce.clone(),
                        resource_names: names.iter().cloned().collect(),
                        ..Default::default()
                    });
                }
            };
            match t {
                ResourceType::Cluster => follow(&mut st, EDS, derived.eds()),
                ResourceType::Listener => follow(&mut st, RDS, derived.rds()),
                _ => {}
            }
            if st.synced_at.is_none() && st.is_synced() {
                st.synced_at = Some(now);
            }
            eds_names = st.eds_subscribed.iter().cloned().collect::<Vec<_>>();
            rds_names = st.rds_subscribed.iter().cloned().collect::<Vec<_>>();
        }
        for req in requests {
            send(req).await?;
        }
        // The ACK carries the current subscription of its type (every SotW request does).
        let names = match t {
            ResourceType::Endpoint => eds_names,
            ResourceType::Route => rds_names,
            _ => Vec::new(),
        };
        send(DiscoveryRequest {
            type_url: resp.type_url.clone(),
            version_info: resp.version_info.clone(),
            response_nonce: resp.nonce.clone(),
            resource_names: names,
            ..Default::default()
        })
        .await?;
        if t == CDS && !lds_requested {
            lds_requested = true;
            send(DiscoveryRequest {
                type_url: LDS.type_url().into(),
                ..Default::default()
            })
            .await?;
        }
    }
    Ok(())
}

/// Applies a SotW response: CDS/LDS carry the full set (what is missing is removed),
/// EDS/RDS carry only the resources sent.
pub(super) fn sotw_apply(
    st: &mut ProxyState,
    derived: &mut Derived,
    t: ResourceType,
    resp: &DiscoveryResponse,
    now: Instant,
) {
    let i = type_index(t);
    st.last_message_at = Some(now);
    st.counters.messages[i] += 1;
    st.counters.bytes[i] += resp.encoded_len() as u64;
    st.counters.resources[i] += resp.resources.len() as u64;
    st.got[i] = true;
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for any in &resp.resources {
        let body = any.value.as_slice();
        let Some(name) = name_of(t, body) else {
            st.undecodable += 1;
            continue;
        };
        match t {
            ResourceType::Cluster => derived.on_cluster(&name, Some(body)),
            ResourceType::Listener => derived.on_listener(&name, Some(body)),
            _ => {}
        }
        let subscribed = match t {
            ResourceType::Endpoint => st.eds_subscribed.contains(&name),
            ResourceType::Route => st.rds_subscribed.contains(&name),
            _ => true,
        };
        if !subscribed {
            // Envoy ignores resources it did not ask for (a response that crossed an
            // unsubscription).
            continue;
        }
        seen.insert(name.clone());
        record_arrival(st, t, (name, Some(body)), version_of(body), now);
    }
    if matches!(t, ResourceType::Cluster | ResourceType::Listener) {
        let gone: Vec<String> = st.held[i]
            .keys()
            .filter(|n| !seen.contains(*n))
            .cloned()
            .collect();
        st.counters.removed[i] += gone.len() as u64;
        for n in gone {
            st.forget(i, &n, now);
            match t {
                ResourceType::Cluster => derived.on_cluster(&n, None),
                _ => derived.on_listener(&n, None),
            }
        }
    }
}
