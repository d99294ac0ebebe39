//! Delta ADS, as a pure state machine per stream: subscriptions (wildcard and named), what
//! the client holds (from `initial_resource_versions` and what was sent), one response in
//! flight per type, ACK/NACK. It reads a [`ProxyView`] and produces responses; it does no I/O.

use super::{
    nack_message, resource_type, wildcard_by_default, Events, Feedback, Nack, Nonces,
    ProtocolError, Push, Subscription, MAX_NAMES,
};
use crate::hub::vhds::VIRTUAL_HOST_TYPE_URL;
use crate::hub::view::ProxyView;
use dataflows::materialize::{Name, Stamp};
use dataflows::model::{Body, ResourceType};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, Resource,
};
use envoy_types::pb::google::protobuf::Any;
// hashbrown's maps hash with foldhash: every comparison of a stream's held set with the
// proxy's resources looks up each name here (a tenth of the server's CPU under SipHash while
// 25,000 proxies connect).
use hashbrown::{HashMap, HashSet};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Default, Debug)]
struct TypeState {
    wildcard: bool,
    names: HashSet<Name>,
    /// Name → version the client holds (or was last sent). Names and versions are the
    /// hub's shared copies, so ten thousand streams holding one name hold one allocation.
    client: HashMap<Name, Name>,
    in_flight: Option<String>,
    /// The nonce of the latest response of this type: the only one an ACK or NACK may name.
    last_nonce: Option<String>,
    /// Names to send even though the client holds their version: the ClusterLoadAssignment
    /// of a cluster that was just updated, which Envoy needs to finish warming it.
    resend: BTreeSet<Name>,
    /// The client is waiting for an answer (first request, new subscriptions) even if
    /// there is nothing to send: Envoy would otherwise wait out its initial fetch timeout.
    must_respond: bool,
    /// Newly subscribed names: compared with what the client holds at the next look, and
    /// answered as removed if they do not exist. (VHDS keeps only those the client does not
    /// hold: they are the on-demand requests its aliases answer.)
    asked: BTreeSet<Name>,
    /// Where the proxy's resources of this type stood ([`Held::stamp`]) when they were last
    /// compared with what the client holds, if nothing else (subscriptions) changed since:
    /// while it is the same there is nothing to compare, and after it only the names
    /// changed since need a look ([`Held::changed_since`]).
    ///
    /// [`Held::stamp`]: dataflows::materialize::Held::stamp
    /// [`Held::changed_since`]: dataflows::materialize::Held::changed_since
    compared_at: Option<Stamp>,
}

impl TypeState {
    /// Nothing changed on either side since the last comparison at `stamp`: no resource,
    /// no subscription, nothing to resend or answer.
    fn settled(&self, stamp: Stamp) -> bool {
        self.compared_at == Some(stamp)
            && self.resend.is_empty()
            && self.asked.is_empty()
            && !self.must_respond
    }
}

#[derive(Default, Debug)]
pub struct DeltaStream {
    types: BTreeMap<ResourceType, TypeState>,
    /// VHDS virtual hosts (`serve --vhds`): subscribed by route configuration name (a
    /// namespace: every `ROUTE/…`) or, on demand, `ROUTE/DOMAIN`.
    vhosts: Option<TypeState>,
    nonces: Nonces,
    /// Answers to requests for types meshflow does not serve, sent with the next look.
    unserved: Vec<DeltaDiscoveryResponse>,
    /// ACKs, NACKs, pushes and subscription changes since the server last took them.
    pub events: Events,
    /// The last CDS response left clusters for the next one ([`MAX_RESPONSE_BYTES`]).
    clusters_incomplete: bool,
    /// A request since the last [`DeltaStream::pending`] asked for something (first
    /// request, subscriptions, NACK): only a plain ACK leaves it false.
    asked_since_look: bool,
    /// The last `pending` left work for after an ACK (a type in flight whose resources or
    /// subscriptions moved on, the rest of a split response).
    deferred: bool,
    /// The latest epoch of the view's forced resends already taken ([`ProxyView::forced`]).
    forced_seen: u64,
}

/// A response carries resources until its bodies reach this size; the rest follow, one
/// response per ACK. Bounds what one stream has encoded and queued at a time while ten
/// thousand proxies take their first configs (270 KB each on shape L). Each response is
/// then freed once written ([`super::grpc`]); no stream keeps an encode buffer.
pub const MAX_RESPONSE_BYTES: usize = 32 * 1024;

/// A secret of certificate files the proxy reads itself (`file-cert:`, `file-root:`).
pub(super) fn is_file_secret(name: &str) -> bool {
    dataflows::model::FileSecret::parse(name).is_some()
}

/// A Delta response as a stream produces it: the message, each resource's `Any` without
/// its value, and beside it the resources' encoded bodies, shared with the hub. Nothing
/// copies a body: [`super::grpc::delta_frame`] writes the gRPC frame around them (a 53 KB
/// route configuration pushed to two thousand proxies used to be copied twice per proxy,
/// into the `Any` and into the frame).
#[derive(Debug, Clone, Default)]
pub struct DeltaOut {
    pub message: DeltaDiscoveryResponse,
    /// The body of `message.resources[i]`'s `Any`, for each `i` (none for a resource whose
    /// `Any` carries its own value).
    pub bodies: Vec<Option<Body>>,
}

impl DeltaOut {
    fn new(message: DeltaDiscoveryResponse, bodies: Vec<Option<Body>>) -> Self {
        DeltaOut { message, bodies }
    }

    /// The whole message, each body copied into its `Any` (tests, in-process clients).
    pub fn into_message(self) -> DeltaDiscoveryResponse {
        let mut m = self.message;
        for (r, body) in m.resources.iter_mut().zip(self.bodies) {
            if let (Some(any), Some(body)) = (r.resource.as_mut(), body) {
                any.value = body.0.to_vec();
            }
        }
        m
    }
}

impl From<DeltaDiscoveryResponse> for DeltaOut {
    fn from(message: DeltaDiscoveryResponse) -> Self {
        DeltaOut::new(message, Vec::new())
    }
}

impl DeltaStream {
    /// Takes in one request: subscription changes and ACK/NACK of a previous response.
    /// `name` gives the shared copy of a resource name or version.
    pub fn on_request(
        &mut self,
        req: &DeltaDiscoveryRequest,
        name: &dyn Fn(&str) -> Name,
    ) -> Result<(), ProtocolError> {
        // VHDS virtual hosts are route content: their NACKs are recorded as RDS's.
        let vhost = req.type_url == VIRTUAL_HOST_TYPE_URL;
        let t = match resource_type(&req.type_url) {
            _ if vhost => ResourceType::Route,
            Ok(t) => t,
            // A type meshflow does not serve (SDS secrets, say) asked on a stream that also
            // asks for others: answered as holding none of the names, so the client stops
            // waiting for it, and the stream goes on. A stream that asks for nothing else
            // is refused: it has nothing to be served.
            Err(e)
                if self.types.is_empty() && self.unserved.is_empty() && self.vhosts.is_none() =>
            {
                return Err(e)
            }
            Err(_) => {
                if req.response_nonce.is_empty() || !req.resource_names_subscribe.is_empty() {
                    self.asked_since_look = true;
                    self.unserved.push(DeltaDiscoveryResponse {
                        type_url: req.type_url.clone(),
                        removed_resources: req.resource_names_subscribe.clone(),
                        nonce: self.nonces.issue(),
                        ..Default::default()
                    });
                }
                return Ok(());
            }
        };
        let n = req.resource_names_subscribe.len()
            + req.resource_names_unsubscribe.len()
            + req.initial_resource_versions.len();
        if n > MAX_NAMES {
            return Err(ProtocolError::TooManyNames(n));
        }
        let first = if vhost {
            self.vhosts.is_none()
        } else {
            !self.types.contains_key(&t)
        };
        let plain_ack = !first
            && !req.response_nonce.is_empty()
            && req.error_detail.is_none()
            && req.resource_names_subscribe.is_empty()
            && req.resource_names_unsubscribe.is_empty();
        self.asked_since_look |= !plain_ack;
        let st = if vhost {
            self.vhosts.get_or_insert_with(TypeState::default)
        } else {
            self.types.entry(t).or_default()
        };
        // A change of the wildcard (or of VHDS's subscriptions, which are compared whole)
        // needs the whole held set compared again; named subscriptions only need their
        // own names looked at (`asked`), so a proxy subscribing to a new cluster's
        // assignment does not compare its hundreds of others.
        let wildcard_moved = req
            .resource_names_subscribe
            .iter()
            .chain(&req.resource_names_unsubscribe)
            .any(|n| n == "*");
        let names_moved =
            !req.resource_names_subscribe.is_empty() || !req.resource_names_unsubscribe.is_empty();
        if wildcard_moved || (vhost && names_moved) {
            st.compared_at = None;
        }
        if first {
            st.client = req
                .initial_resource_versions
                .iter()
                .map(|(n, v)| (name(n), name(v)))
                .collect();
            // The legacy wildcard: a first CDS/LDS request that names nothing. Envoy 1.40's
            // VHDS over ADS names nothing either (not the route configuration it wants the
            // virtual hosts of): every route configuration the client holds.
            st.wildcard =
                (wildcard_by_default(t) || vhost) && req.resource_names_subscribe.is_empty();
            // A client resuming with versions already has what it needs to run.
            st.must_respond = req.initial_resource_versions.is_empty();
            if !req.initial_resource_versions.is_empty() && !vhost {
                self.events.feedback(Feedback::Resumed {
                    rtype: t,
                    versions: req.initial_resource_versions.clone(),
                });
            }
            self.events.subscriptions_changed();
        }
        if !req.resource_names_subscribe.is_empty() || !req.resource_names_unsubscribe.is_empty() {
            self.events.subscriptions_changed();
        }
        // Only the latest response of the type can be answered (in flight, or answered
        // already and answered again): an ACK or NACK of a nonce this stream never sent for
        // the type is ignored, as SotW ignores stale nonces.
        if !req.response_nonce.is_empty()
            && st.last_nonce.as_deref() == Some(req.response_nonce.as_str())
        {
            if st.in_flight.as_deref() == Some(req.response_nonce.as_str()) {
                st.in_flight = None;
            }
            match &req.error_detail {
                Some(status) => self.events.feedback(Feedback::Nack(Nack {
                    rtype: t,
                    nonce: req.response_nonce.clone(),
                    message: nack_message(&status.message),
                })),
                // The hub tracks one response in flight per type: a virtual host's ACK is
                // not an RDS one.
                None if vhost => {}
                None => self.events.feedback(Feedback::Ack {
                    rtype: t,
                    nonce: req.response_nonce.clone(),
                }),
            }
        }
        let added = req
            .resource_names_subscribe
            .iter()
            .filter(|n| *n != "*" && !st.names.contains(n.as_str()))
            .count();
        if st.names.len() + added > MAX_NAMES {
            return Err(ProtocolError::TooManySubscribed(st.names.len() + added));
        }
        for n in &req.resource_names_subscribe {
            if n == "*" {
                st.wildcard = true;
            } else {
                let n = name(n);
                let held = st.client.contains_key(&n);
                if !held {
                    st.must_respond = true;
                }
                if !held || !vhost {
                    st.asked.insert(n.clone());
                }
                st.names.insert(n);
            }
        }
        for n in &req.resource_names_unsubscribe {
            if n == "*" {
                st.wildcard = false;
            } else {
                st.names.remove(n.as_str());
            }
            // The client drops unsubscribed resources itself; forget them so a later
            // subscription sends them again.
            if !st.wildcard {
                st.client.remove(n.as_str());
            }
        }
        Ok(())
    }

    /// [`DeltaStream::on_request`] with names of its own (tests without a hub).
    #[cfg(test)]
    pub fn on_request_unshared(
        &mut self,
        req: &DeltaDiscoveryRequest,
    ) -> Result<(), ProtocolError> {
        self.on_request(req, &|n| Name::from(n))
    }

    /// A response is waiting for its ACK or NACK.
    pub fn in_flight(&self) -> bool {
        self.types
            .values()
            .chain(&self.vhosts)
            .any(|st| st.in_flight.is_some())
    }

    /// Whether [`DeltaStream::pending`] could have anything to send that it did not have
    /// at its last call, short of a change of the proxy's resources (which the hub signals
    /// separately): false after a plain ACK of a response that left nothing behind, the
    /// common case of a push to ten thousand proxies, where a look would cost a lock.
    pub fn wants_look(&self) -> bool {
        self.asked_since_look || self.deferred
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
        self.pending_out(view)
            .into_iter()
            .map(DeltaOut::into_message)
            .collect()
    }

    /// [`DeltaStream::pending`] with the bodies kept apart, as the server frames them.
    /// Sends `name` of type `t` again at the next look, if the client holds it.
    pub fn resend(&mut self, t: ResourceType, name: Name) {
        if let Some(st) = self.types.get_mut(&t) {
            if st.client.contains_key(&name) {
                st.resend.insert(name);
            }
        }
    }

    /// Sends every file secret the client holds again at the next look (see
    /// `Protocol::retry_file_secrets`); each goes alone, as always.
    pub fn retry_file_secrets(&mut self) {
        if let Some(st) = self.types.get_mut(&ResourceType::Secret) {
            let files: Vec<Name> = st
                .client
                .keys()
                .filter(|n| is_file_secret(n))
                .cloned()
                .collect();
            st.resend.extend(files);
        }
    }

    pub fn pending_out(&mut self, view: &ProxyView<'_>) -> Vec<DeltaOut> {
        let mut out: Vec<DeltaOut> = std::mem::take(&mut self.unserved)
            .into_iter()
            .map(DeltaOut::from)
            .collect();
        // What the engine's push resends unchanged joins each type's resends (the
        // istio-style baseline's whole listener and route sets).
        for (epoch, t, name) in view.forced {
            if *epoch <= self.forced_seen {
                continue;
            }
            if let Some(st) = self.types.get_mut(t) {
                st.resend.insert(name.clone());
            }
        }
        if let Some(latest) = view.forced.iter().map(|(e, _, _)| *e).max() {
            self.forced_seen = self.forced_seen.max(latest);
        }
        out.extend(self.compare(view));
        out.extend(self.compare_vhosts(view));
        self.asked_since_look = false;
        let held = view.held();
        let clusters_incomplete = self.clusters_incomplete;
        let vhosts = self.vhosts.iter().map(|st| (ResourceType::Route, st));
        self.deferred = self
            .types
            .iter()
            .map(|(t, st)| (*t, st))
            .chain(vhosts)
            .any(|(t, st)| {
                let gated = clusters_incomplete
                    && matches!(t, ResourceType::Listener | ResourceType::Route);
                (st.in_flight.is_some() || gated) && !st.settled(held.stamp(t))
            });
        out
    }

    fn compare(&mut self, view: &ProxyView<'_>) -> Vec<DeltaOut> {
        let mut out = Vec::new();
        for t in ResourceType::ALL {
            let Some(st) = self.types.get_mut(&t) else {
                continue;
            };
            if st.in_flight.is_some() {
                continue;
            }
            // Listeners and routes wait until every cluster has been sent: they may refer
            // to any of them (make before break, also while a proxy starts).
            if self.clusters_incomplete && matches!(t, ResourceType::Listener | ResourceType::Route)
            {
                continue;
            }
            let held = view.held();
            let stamp = held.stamp(t);
            if st.settled(stamp) {
                // Nothing changed on either side since the last comparison.
                continue;
            }
            // Only the names changed since the last comparison need a look, if that is known.
            let candidates = st.compared_at.and_then(|s| held.changed_since(t, &s));
            st.compared_at = Some(stamp);
            let resend = std::mem::take(&mut st.resend);
            let subscribed = |name: &str| st.wildcard || st.names.contains(name);
            // Under VHDS a route configuration is served without its virtual hosts, in a
            // version of its own: what the client holds is compared with that.
            let vhds = view.vhds.filter(|_| t == ResourceType::Route);
            let served = |name: &Name, version: &Name| -> Option<(Name, Option<Body>)> {
                match vhds {
                    None => Some((version.clone(), None)),
                    Some(cache) => {
                        let s = cache.split(name, version, || view.body(t, name, version))?;
                        Some((s.route_version.clone(), Some(s.route.clone())))
                    }
                }
            };
            // (name, version, body if not the stored one) to send, and names to remove.
            let mut changed: Vec<(Name, Name, Option<Body>)> = Vec::new();
            let mut removed: Vec<Name> = Vec::new();
            let differs = |name: &Name, version: &Name| {
                st.client.get(name) != Some(version) || resend.contains(name)
            };
            match candidates {
                Some(mut names) => {
                    names.extend(resend.iter().cloned());
                    names.extend(st.asked.iter().cloned());
                    names.sort();
                    names.dedup();
                    for n in names {
                        match held.get_entry(t, &n) {
                            Some((name, version)) => {
                                if !subscribed(name) {
                                    continue;
                                }
                                if let Some((v, b)) = served(name, version) {
                                    if differs(name, &v) {
                                        changed.push((name.clone(), v, b));
                                    }
                                }
                            }
                            None => {
                                if st.client.contains_key(&n) && subscribed(&n) {
                                    removed.push(n);
                                }
                            }
                        }
                    }
                }
                None => {
                    for (name, version) in held.iter(t) {
                        if !subscribed(name) {
                            continue;
                        }
                        if let Some((v, b)) = served(name, version) {
                            if differs(name, &v) {
                                changed.push((name.clone(), v, b));
                            }
                        }
                    }
                    removed.extend(
                        st.client
                            .keys()
                            .filter(|n| !held.contains(t, n) && subscribed(n))
                            .cloned(),
                    );
                }
            }
            // A secret of files the proxy reads itself goes alone, before the others: Envoy
            // refuses a whole response when one file is missing, and this one must not take
            // the workload certificate or another file's secret with it (nor follow an
            // accepted response of the same epoch, which would clear its objects of blame).
            let alone = |name: &Name| t == ResourceType::Secret && is_file_secret(name);
            changed.sort_by_key(|(name, _, _)| !alone(name));
            let mut resources = Vec::new();
            let mut bodies = Vec::new();
            let mut sent: Vec<(Name, Name)> = Vec::new();
            let mut bytes = 0usize;
            let mut rest = changed.into_iter();
            let mut truncated = false;
            let mut sent_alone = false;
            for (name, version, body) in rest.by_ref() {
                if bytes >= MAX_RESPONSE_BYTES || sent_alone || (alone(&name) && !sent.is_empty()) {
                    // The rest goes in the next response, after this one's ACK.
                    truncated = true;
                    if resend.contains(&name) {
                        st.resend.insert(name.clone());
                    }
                    break;
                }
                let Some(body) = body.or_else(|| view.body(t, &name, &version)) else {
                    continue;
                };
                bytes += body.0.len();
                resources.push(Resource {
                    name: name.to_string(),
                    version: version.to_string(),
                    resource: Some(Any {
                        type_url: t.type_url().to_string(),
                        value: Vec::new(),
                    }),
                    ..Default::default()
                });
                bodies.push(Some(body));
                sent_alone = alone(&name);
                sent.push((name, version));
            }
            if truncated {
                st.resend.extend(
                    rest.filter(|(n, _, _)| resend.contains(n))
                        .map(|(n, _, _)| n),
                );
                // What was left out differs from what the client holds: compare it all again.
                st.compared_at = None;
            }
            if t == ResourceType::Cluster {
                self.clusters_incomplete = truncated;
            }
            // Names just asked for that do not exist: say so, so the client does not wait.
            for n in std::mem::take(&mut st.asked) {
                if !held.contains(t, &n) && !st.client.contains_key(&n) && st.names.contains(&n) {
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
            let updated: Vec<Name> = sent
                .iter()
                .filter(|(n, _)| st.client.contains_key(n))
                .map(|(n, _)| n.clone())
                .collect();
            for (n, v) in &sent {
                st.client.insert(n.clone(), v.clone());
            }
            let sent_now = sent;
            let nonce = self.nonces.issue();
            st.in_flight = Some(nonce.clone());
            st.last_nonce = Some(nonce.clone());
            let removed_resources = removed.iter().map(|n| n.to_string()).collect();
            self.events.push(Push {
                rtype: t,
                nonce: nonce.clone(),
                bytes,
                resources: sent_now,
                removed,
                full_set: false,
            });
            out.push(DeltaOut::new(
                DeltaDiscoveryResponse {
                    type_url: t.type_url().to_string(),
                    resources,
                    removed_resources,
                    nonce,
                    ..Default::default()
                },
                bodies,
            ));
            if t == ResourceType::Cluster {
                if let Some(eds) = self.types.get_mut(&ResourceType::Endpoint) {
                    eds.resend.extend(updated);
                }
            }
            // The route configurations the client holds changed: so may the virtual hosts
            // of a wildcard VHDS subscription.
            if t == ResourceType::Route {
                if let Some(v) = self.vhosts.as_mut() {
                    v.compared_at = None;
                }
            }
        }
        out
    }

    /// The VHDS virtual hosts due (`serve --vhds`): every virtual host of each route
    /// configuration the client subscribed to by name, and the ones it asked for on demand
    /// as `ROUTE/DOMAIN` (sent with that name as an alias; a name that resolves to none is
    /// answered as removed, so the request does not wait). Without VHDS every name asked
    /// is answered as removed.
    fn compare_vhosts(&mut self, view: &ProxyView<'_>) -> Option<DeltaOut> {
        // A wildcard subscription: the virtual hosts of every route configuration the client
        // holds.
        let routes_held: Vec<Name> = match (&self.vhosts, self.types.get(&ResourceType::Route)) {
            (Some(v), Some(rds)) if v.wildcard => rds.client.keys().cloned().collect(),
            _ => Vec::new(),
        };
        let st = self.vhosts.as_mut()?;
        if st.in_flight.is_some() || self.clusters_incomplete {
            return None;
        }
        let held = view.held();
        let stamp = held.stamp(ResourceType::Route);
        if st.settled(stamp) {
            return None;
        }
        st.compared_at = Some(stamp);
        let resend = std::mem::take(&mut st.resend);
        let asked = std::mem::take(&mut st.asked);
        // name → (version, body, aliases asked for it now)
        let mut due: BTreeMap<Name, (Name, Body, Vec<String>)> = BTreeMap::new();
        let mut unknown: Vec<Name> = Vec::new();
        let split = |route: &str| {
            let cache = view.vhds?;
            let (name, version) = held.get_entry(ResourceType::Route, route)?;
            cache.split(name, version, || {
                view.body(ResourceType::Route, name, version)
            })
        };
        let mut names: Vec<&Name> = st.names.iter().chain(&routes_held).collect();
        names.sort();
        names.dedup();
        for n in names {
            if let Some(s) = split(n) {
                for vh in &s.vhosts {
                    due.entry(vh.name.clone())
                        .or_insert_with(|| (vh.version.clone(), vh.body.clone(), Vec::new()));
                }
                continue;
            }
            let found = n.rsplit_once('/').and_then(|(route, host)| {
                let s = split(route)?;
                let vh = s
                    .vhosts
                    .iter()
                    .find(|v| *v.name == **n)
                    .or_else(|| s.resolve(host))?;
                Some(vh.clone())
            });
            match found {
                Some(vh) => {
                    let e = due
                        .entry(vh.name.clone())
                        .or_insert_with(|| (vh.version.clone(), vh.body.clone(), Vec::new()));
                    if asked.contains(n) && *vh.name != **n {
                        e.2.push(n.to_string());
                    }
                }
                None if asked.contains(n) => unknown.push(n.clone()),
                None => {}
            }
        }
        let mut resources = Vec::new();
        let mut bodies = Vec::new();
        let mut sent: Vec<(Name, Name)> = Vec::new();
        for (name, (version, body, aliases)) in &due {
            if st.client.get(name) == Some(version) && !resend.contains(name) && aliases.is_empty()
            {
                continue;
            }
            resources.push(Resource {
                name: name.to_string(),
                version: version.to_string(),
                aliases: aliases.clone(),
                resource: Some(Any {
                    type_url: VIRTUAL_HOST_TYPE_URL.to_string(),
                    value: Vec::new(),
                }),
                ..Default::default()
            });
            bodies.push(Some(body.clone()));
            sent.push((name.clone(), version.clone()));
        }
        let mut removed: Vec<Name> = st
            .client
            .keys()
            .filter(|n| !due.contains_key(*n))
            .cloned()
            .collect();
        removed.extend(unknown.into_iter().filter(|n| !due.contains_key(n)));
        removed.sort();
        removed.dedup();
        if resources.is_empty() && removed.is_empty() && !st.must_respond {
            return None;
        }
        st.must_respond = false;
        for n in &removed {
            st.client.remove(n);
        }
        for (n, v) in sent {
            st.client.insert(n, v);
        }
        let nonce = self.nonces.issue();
        st.in_flight = Some(nonce.clone());
        st.last_nonce = Some(nonce.clone());
        Some(DeltaOut::new(
            DeltaDiscoveryResponse {
                type_url: VIRTUAL_HOST_TYPE_URL.to_string(),
                resources,
                removed_resources: removed.iter().map(|n| n.to_string()).collect(),
                nonce,
                ..Default::default()
            },
            bodies,
        ))
    }
}
