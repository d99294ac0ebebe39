//! Delta ADS, as a pure state machine per stream: subscriptions (wildcard and named), what
//! the client holds (from `initial_resource_versions` and what was sent), one response in
//! flight per type, ACK/NACK. It reads a [`ProxyView`] and produces responses; it does no I/O.

use super::hub::ProxyView;
use super::{
    resource_type, wildcard_by_default, Feedback, Nack, ProtocolError, Push, Subscription,
    MAX_NAMES,
};
use dataflows::model::ResourceType;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, Resource,
};
use envoy_types::pb::google::protobuf::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

#[derive(Default, Debug)]
struct TypeState {
    wildcard: bool,
    names: HashSet<String>,
    /// Name → version the client holds (or was last sent).
    client: HashMap<String, String>,
    in_flight: Option<String>,
    /// Names to send even though the client holds their version: the ClusterLoadAssignment
    /// of a cluster that was just updated, which Envoy needs to finish warming it.
    resend: BTreeSet<String>,
    /// The client is waiting for an answer (first request, new subscriptions) even if
    /// there is nothing to send: Envoy would otherwise wait out its initial fetch timeout.
    must_respond: bool,
    /// Newly subscribed names: answered as removed if they do not exist.
    asked: BTreeSet<String>,
    /// The proxy's change count of this type ([`ProxyView::changes`]) when its resources
    /// were last compared with what the client holds, if nothing else (subscriptions)
    /// changed since: while it is the same, there is nothing to compare again.
    compared_at: Option<u64>,
}

#[derive(Default, Debug)]
pub struct DeltaStream {
    types: BTreeMap<ResourceType, TypeState>,
    nonce: u64,
    /// ACKs and NACKs received since the server last drained them.
    pub feedback: Vec<Feedback>,
    /// Responses produced since the server last drained them.
    pub pushes: Vec<Push>,
    /// Bumped whenever a subscription changes (debug snapshots are retaken then).
    pub subscription_generation: u64,
}

impl DeltaStream {
    /// Takes in one request: subscription changes and ACK/NACK of a previous response.
    pub fn on_request(
        &mut self,
        req: &DeltaDiscoveryRequest,
    ) -> Result<ResourceType, ProtocolError> {
        let t = resource_type(&req.type_url)?;
        let n = req.resource_names_subscribe.len()
            + req.resource_names_unsubscribe.len()
            + req.initial_resource_versions.len();
        if n > MAX_NAMES {
            return Err(ProtocolError::TooManyNames(n));
        }
        let first = !self.types.contains_key(&t);
        let st = self.types.entry(t).or_default();
        if !req.resource_names_subscribe.is_empty() || !req.resource_names_unsubscribe.is_empty() {
            st.compared_at = None;
        }
        if first {
            st.client = req.initial_resource_versions.clone();
            // The legacy wildcard: a first CDS/LDS request that names nothing.
            st.wildcard = wildcard_by_default(t) && req.resource_names_subscribe.is_empty();
            // A client resuming with versions already has what it needs to run.
            st.must_respond = req.initial_resource_versions.is_empty();
            if !req.initial_resource_versions.is_empty() {
                self.feedback.push(Feedback::Resumed {
                    rtype: t,
                    versions: req.initial_resource_versions.clone(),
                });
            }
            self.subscription_generation += 1;
        }
        if !req.resource_names_subscribe.is_empty() || !req.resource_names_unsubscribe.is_empty() {
            self.subscription_generation += 1;
        }
        if !req.response_nonce.is_empty() {
            if st.in_flight.as_deref() == Some(req.response_nonce.as_str()) {
                st.in_flight = None;
            }
            match &req.error_detail {
                Some(status) => self.feedback.push(Feedback::Nack(Nack {
                    rtype: t,
                    nonce: req.response_nonce.clone(),
                    message: status.message.clone(),
                })),
                None => self.feedback.push(Feedback::Ack {
                    rtype: t,
                    nonce: req.response_nonce.clone(),
                }),
            }
        }
        for name in &req.resource_names_subscribe {
            if name == "*" {
                st.wildcard = true;
            } else {
                st.names.insert(name.clone());
                if !st.client.contains_key(name) {
                    st.asked.insert(name.clone());
                    st.must_respond = true;
                }
            }
        }
        for name in &req.resource_names_unsubscribe {
            if name == "*" {
                st.wildcard = false;
            } else {
                st.names.remove(name);
            }
            // The client drops unsubscribed resources itself; forget them so a later
            // subscription sends them again.
            if !st.wildcard {
                st.client.remove(name);
            }
        }
        Ok(t)
    }

    /// The stream's subscriptions per type (for the debug API).
    pub fn subscriptions(&self) -> Vec<Subscription> {
        self.types
            .iter()
            .map(|(t, st)| Subscription {
                rtype: Some(*t),
                wildcard: st.wildcard,
                names: st.names.iter().cloned().collect(),
            })
            .collect()
    }

    /// Responses to send now, in make-before-break order (CDS, EDS, LDS, RDS), for every
    /// type with no response in flight whose subscribed resources differ from what the
    /// client holds.
    pub fn pending(&mut self, view: &ProxyView<'_>) -> Vec<DeltaDiscoveryResponse> {
        let mut out = Vec::new();
        for t in ResourceType::ALL {
            let Some(st) = self.types.get_mut(&t) else {
                continue;
            };
            if st.in_flight.is_some() {
                continue;
            }
            let changes = view.changes(t);
            if st.compared_at == Some(changes)
                && st.resend.is_empty()
                && st.asked.is_empty()
                && !st.must_respond
            {
                // Nothing changed on either side since the last comparison.
                continue;
            }
            st.compared_at = Some(changes);
            let resend = std::mem::take(&mut st.resend);
            let current = view.versions(t);
            let subscribed = |name: &str| st.wildcard || st.names.contains(name);
            let mut resources = Vec::new();
            let mut sent = Vec::new();
            let mut bytes = 0usize;
            for (name, version) in current {
                if !subscribed(name)
                    || (st.client.get(name) == Some(version) && !resend.contains(name))
                {
                    continue;
                }
                let Some(body) = view.body(t, name, version) else {
                    continue;
                };
                bytes += body.0.len();
                resources.push(Resource {
                    name: name.clone(),
                    version: version.clone(),
                    resource: Some(Any {
                        type_url: t.type_url().to_string(),
                        value: body.0.to_vec(),
                    }),
                    ..Default::default()
                });
                sent.push((name.clone(), version.clone()));
            }
            let mut removed: Vec<String> = st
                .client
                .keys()
                .filter(|n| !current.contains_key(*n) && subscribed(n))
                .cloned()
                .collect();
            // Names just asked for that do not exist: say so, so the client does not wait.
            for n in std::mem::take(&mut st.asked) {
                if !current.contains_key(&n) && !st.client.contains_key(&n) && st.names.contains(&n)
                {
                    removed.push(n);
                }
            }
            removed.sort();
            removed.dedup();
            if resources.is_empty() && removed.is_empty() && !st.must_respond {
                continue;
            }
            st.must_respond = false;
            for n in &removed {
                st.client.remove(n);
            }
            // Clusters the client held in another version are being updated.
            let updated: Vec<String> = sent
                .iter()
                .filter(|(n, _)| st.client.contains_key(n))
                .map(|(n, _)| n.clone())
                .collect();
            for (n, v) in sent {
                st.client.insert(n, v);
            }
            self.nonce += 1;
            let nonce = self.nonce.to_string();
            st.in_flight = Some(nonce.clone());
            self.pushes.push(Push {
                rtype: t,
                nonce: nonce.clone(),
                bytes,
                resources: resources
                    .iter()
                    .map(|r| (r.name.clone(), r.version.clone()))
                    .collect(),
                removed: removed.clone(),
                full_set: false,
            });
            out.push(DeltaDiscoveryResponse {
                type_url: t.type_url().to_string(),
                resources,
                removed_resources: removed,
                nonce,
                ..Default::default()
            });
            if t == ResourceType::Cluster {
                if let Some(eds) = self.types.get_mut(&ResourceType::Endpoint) {
                    eds.resend.extend(updated);
                }
            }
        }
        out
    }
}
