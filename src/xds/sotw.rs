//! State-of-the-World ADS, as a pure state machine per stream. CDS and LDS responses carry
//! the full set; EDS and RDS responses carry the subscribed resources that changed (all of
//! them when the subscription changes). Stale nonces are ignored; one response in flight
//! per type; a NACK is recorded and the rejected version is not resent.

use super::{
    nack_message, resource_type, wildcard_by_default, Events, Feedback, Nack, Nonces,
    ProtocolError, Push, Subscription, MAX_NAMES,
};
use crate::hub::view::ProxyView;
use dataflows::materialize::Name;
use dataflows::model::ResourceType;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap};

#[derive(Default, Debug)]
struct TypeState {
    names: BTreeSet<String>,
    wildcard: bool,
    /// Name → version last sent.
    sent: HashMap<Name, Name>,
    latest_nonce: Option<String>,
    in_flight: bool,
    /// The subscription changed: answer with everything it now asks for.
    must_respond: bool,
    version: u64,
    /// Names to send even if unchanged: the ClusterLoadAssignment of a cluster that was
    /// just updated, which Envoy needs to finish warming it.
    resend: BTreeSet<Name>,
}

#[derive(Default, Debug)]
pub struct SotwStream {
    types: BTreeMap<ResourceType, TypeState>,
    /// The hub generation last pushed in full (full-push baseline only).
    generation: u64,
    nonces: Nonces,
    /// Answers to requests for types meshflow does not serve, sent with the next look.
    unserved: Vec<DiscoveryResponse>,
    /// ACKs, NACKs, pushes and subscription changes since the server last took them.
    pub events: Events,
}

impl SotwStream {
    pub fn on_request(&mut self, req: &DiscoveryRequest) -> Result<(), ProtocolError> {
        let t = match resource_type(&req.type_url) {
            Ok(t) => t,
            // As for Delta: a type meshflow does not serve, asked on a stream that asks for
            // others too, is answered empty (and its ACKs ignored); alone, it is refused.
            Err(e) if self.types.is_empty() && self.unserved.is_empty() => return Err(e),
            Err(_) => {
                if req.response_nonce.is_empty() {
                    self.unserved.push(DiscoveryResponse {
                        type_url: req.type_url.clone(),
                        nonce: self.nonces.issue(),
                        ..Default::default()
                    });
                }
                return Ok(());
            }
        };
        if req.resource_names.len() > MAX_NAMES {
            return Err(ProtocolError::TooManyNames(req.resource_names.len()));
        }
        let st = self.types.entry(t).or_default();
        if !req.response_nonce.is_empty() {
            if st.latest_nonce.as_deref() != Some(req.response_nonce.as_str()) {
                return Ok(()); // stale: a newer response is on its way
            }
            st.in_flight = false;
            match &req.error_detail {
                Some(status) => self.events.feedback(Feedback::Nack(Nack {
                    rtype: t,
                    nonce: req.response_nonce.clone(),
                    message: nack_message(&status.message),
                })),
                None => self.events.feedback(Feedback::Ack {
                    rtype: t,
                    nonce: req.response_nonce.clone(),
                }),
            }
        }
        let names: BTreeSet<String> = req
            .resource_names
            .iter()
            .filter(|n| *n != "*")
            .cloned()
            .collect();
        let wildcard = wildcard_by_default(t)
            && (req.resource_names.is_empty() || req.resource_names.iter().any(|n| n == "*"));
        if names != st.names || wildcard != st.wildcard {
            self.events.subscriptions_changed();
        }
        if req.response_nonce.is_empty() || names != st.names || wildcard != st.wildcard {
            st.must_respond = true;
        }
        st.names = names;
        st.wildcard = wildcard;
        Ok(())
    }

    /// The stream's subscriptions per type (for the debug API).
    /// A response is waiting for its ACK or NACK.
    pub fn in_flight(&self) -> bool {
        self.types.values().any(|st| st.in_flight)
    }

    pub fn subscriptions(&self) -> Vec<Subscription> {
        self.types
            .iter()
            .map(|(t, st)| Subscription {
                rtype: Some(*t),
                wildcard: st.wildcard,
                names: st.names.iter().map(|n| Name::from(n.as_str())).collect(),
            })
            .collect()
    }

    /// Sends `name` of type `t` again at the next look, if the client asked for it.
    pub fn resend(&mut self, t: ResourceType, name: Name) {
        if let Some(st) = self.types.get_mut(&t) {
            if st.names.contains(&*name) {
                st.resend.insert(name);
            }
        }
    }

    /// Sends every file secret the client asked for again at the next look (see
    /// `Protocol::retry_file_secrets`).
    pub fn retry_file_secrets(&mut self) {
        if let Some(st) = self.types.get_mut(&ResourceType::Secret) {
            let files = st
                .names
                .iter()
                .filter(|n| super::delta::is_file_secret(n))
                .map(|n| Name::from(n.as_str()));
            st.resend.extend(files);
        }
    }

    pub fn pending(&mut self, view: &ProxyView<'_>) -> Vec<DiscoveryResponse> {
        let mut out = std::mem::take(&mut self.unserved);
        if view.generation != self.generation {
            // The baseline pushes everything on every change, as if each were the first.
            self.generation = view.generation;
            for st in self.types.values_mut() {
                st.must_respond = true;
            }
        }
        for t in ResourceType::ALL {
            let Some(st) = self.types.get_mut(&t) else {
                continue;
            };
            if st.in_flight {
                continue;
            }
            let held = view.held();
            let resend = std::mem::take(&mut st.resend);
            let mut updated: Vec<Name> = Vec::new();
            let chosen: Vec<(&Name, &Name)> = if wildcard_by_default(t) {
                // Full set every time, sent when anything in it changed.
                let selected: Vec<_> = held
                    .iter(t)
                    .filter(|(n, _)| st.wildcard || st.names.contains(&***n))
                    .collect();
                let unchanged = selected.len() == st.sent.len()
                    && selected.iter().all(|(n, v)| st.sent.get(*n) == Some(*v));
                if unchanged && !st.must_respond {
                    continue;
                }
                updated = selected
                    .iter()
                    .filter(|(n, v)| st.sent.get(*n).is_some_and(|old| old != *v))
                    .map(|(n, _)| (*n).clone())
                    .collect();
                st.sent = selected
                    .iter()
                    .map(|(n, v)| ((*n).clone(), (*v).clone()))
                    .collect();
                selected
            } else {
                st.sent.retain(|n, _| st.names.contains(&**n));
                let selected: Vec<_> = held
                    .iter(t)
                    .filter(|(n, v)| {
                        st.names.contains(&***n)
                            && (st.must_respond
                                || resend.contains(*n)
                                || st.sent.get(*n) != Some(*v))
                    })
                    .collect();
                // A secret of certificate files goes alone, before the others, as over Delta
                // (`delta.rs`): a missing file makes Envoy refuse the whole response.
                let mut selected = selected;
                if t == ResourceType::Secret {
                    selected.sort_by_key(|(n, _)| !super::delta::is_file_secret(n));
                    if selected
                        .first()
                        .is_some_and(|(n, _)| super::delta::is_file_secret(n))
                    {
                        for (n, _) in selected.drain(1..) {
                            st.resend.insert(n.clone());
                        }
                    }
                }
                if selected.is_empty() && !st.must_respond {
                    continue;
                }
                for (n, v) in &selected {
                    st.sent.insert((*n).clone(), (*v).clone());
                }
                selected
            };
            let mut carried = Vec::with_capacity(chosen.len());
            let mut bytes = 0usize;
            let resources: Vec<Any> = chosen
                .iter()
                .filter_map(|(n, v)| {
                    let b = view.body(t, n, v)?;
                    let b = &b;
                    carried.push(((*n).clone(), (*v).clone()));
                    bytes += b.0.len();
                    Some(Any {
                        type_url: t.type_url().to_string(),
                        value: b.0.to_vec(),
                    })
                })
                .collect();
            st.must_respond = false;
            st.in_flight = true;
            st.version += 1;
            let nonce = self.nonces.issue();
            st.latest_nonce = Some(nonce.clone());
            self.events.push(Push {
                rtype: t,
                nonce: nonce.clone(),
                bytes,
                resources: carried,
                removed: Vec::new(),
                full_set: wildcard_by_default(t),
            });
            out.push(DiscoveryResponse {
                version_info: st.version.to_string(),
                resources,
                type_url: t.type_url().to_string(),
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
