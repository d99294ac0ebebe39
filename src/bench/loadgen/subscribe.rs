//! Reading the names a response subscribes to (EDS names of clusters, RDS names of
//! listeners) and recording each arrival, as Envoy would.

use super::*;

/// What a resource body says about the names it makes the proxy subscribe to.
pub(super) fn eds_name_of(body: &[u8]) -> Option<String> {
    let c = Cluster::decode(body).ok()?;
    let eds = matches!(c.cluster_discovery_type,
        Some(ClusterDiscoveryType::Type(t)) if t == DiscoveryType::Eds as i32);
    if !eds {
        return None;
    }
    let service_name = c
        .eds_cluster_config
        .map(|e| e.service_name)
        .filter(|n| !n.is_empty());
    Some(service_name.unwrap_or(c.name))
}

pub(super) fn rds_names_of(body: &[u8]) -> Vec<String> {
    let Ok(l) = Listener::decode(body) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for chain in l.filter_chains.iter().chain(l.default_filter_chain.iter()) {
        for f in &chain.filters {
            let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
                continue;
            };
            if !any.type_url.ends_with(".HttpConnectionManager") {
                continue;
            }
            let Ok(hcm) = HttpConnectionManager::decode(any.value.as_slice()) else {
                continue;
            };
            if let Some(RouteSpecifier::Rds(rds)) = hcm.route_specifier {
                out.push(rds.route_config_name);
            }
        }
    }
    out
}

/// The name inside a SotW resource body.
/// Whether a route configuration's virtual hosts come over VHDS: it has field 9
/// (`vhds`). Scans the top-level fields only, skipping their contents, so the virtual
/// hosts of every route configuration every simulated proxy receives are not decoded.
pub(super) fn has_vhds(mut body: &[u8]) -> bool {
    use prost::encoding::{decode_varint, WireType};
    while !body.is_empty() {
        let Ok(key) = decode_varint(&mut body) else {
            return false;
        };
        if key >> 3 == 9 {
            return true;
        }
        let skip = match WireType::try_from(key & 7) {
            Ok(WireType::Varint) => decode_varint(&mut body).map(|_| 0),
            Ok(WireType::SixtyFourBit) => Ok(8),
            Ok(WireType::ThirtyTwoBit) => Ok(4),
            Ok(WireType::LengthDelimited) => decode_varint(&mut body),
            _ => return false,
        };
        match skip {
            Ok(n) if (n as usize) <= body.len() => body = &body[n as usize..],
            _ => return false,
        }
    }
    false
}

pub(super) fn name_of(t: ResourceType, body: &[u8]) -> Option<String> {
    match t {
        ResourceType::Cluster => Cluster::decode(body).ok().map(|c| c.name),
        ResourceType::Endpoint => ClusterLoadAssignment::decode(body)
            .ok()
            .map(|c| c.cluster_name),
        ResourceType::Listener => Listener::decode(body).ok().map(|l| l.name),
        ResourceType::Route => RouteConfiguration::decode(body).ok().map(|r| r.name),
        ResourceType::Secret => {
            envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret::decode(body)
                .ok()
                .map(|s| s.name)
        }
    }
}

/// Per-stream subscription bookkeeping shared by both protocols: which EDS/RDS names the
/// clusters and listeners held call for.
#[derive(Default)]
pub(super) struct Derived {
    cluster_eds: HashMap<String, Option<String>>,
    listener_rds: HashMap<String, Vec<String>>,
}

impl Derived {
    pub(super) fn on_cluster(&mut self, name: &str, body: Option<&[u8]>) {
        match body {
            Some(b) => {
                self.cluster_eds.insert(name.to_string(), eds_name_of(b));
            }
            None => {
                self.cluster_eds.remove(name);
            }
        }
    }

    pub(super) fn on_listener(&mut self, name: &str, body: Option<&[u8]>) {
        match body {
            Some(b) => {
                self.listener_rds.insert(name.to_string(), rds_names_of(b));
            }
            None => {
                self.listener_rds.remove(name);
            }
        }
    }

    pub(super) fn eds(&self) -> BTreeSet<String> {
        self.cluster_eds.values().flatten().cloned().collect()
    }

    pub(super) fn rds(&self) -> BTreeSet<String> {
        self.listener_rds.values().flatten().cloned().collect()
    }
}

/// A subscription change: (added, removed).
pub(super) fn diff_sets(
    old: &BTreeSet<String>,
    new: &BTreeSet<String>,
) -> (Vec<String>, Vec<String>) {
    (
        new.difference(old).cloned().collect(),
        old.difference(new).cloned().collect(),
    )
}

/// Applies a new EDS/RDS subscription to the recorded state: names dropped are removed from
/// what the proxy holds (Envoy forgets them). Returns (subscribe, unsubscribe).
pub(super) fn resubscribe(
    st: &mut ProxyState,
    t: ResourceType,
    wanted: BTreeSet<String>,
    now: Instant,
) -> (Vec<String>, Vec<String>) {
    let current = if t == EDS {
        &st.eds_subscribed
    } else {
        &st.rds_subscribed
    };
    let (add, drop) = diff_sets(current, &wanted);
    for n in &drop {
        st.forget(type_index(t), n, now);
    }
    if t == EDS {
        st.eds_subscribed = wanted;
    } else {
        st.rds_subscribed = wanted;
    }
    (add, drop)
}

pub(super) fn record_arrival(
    st: &mut ProxyState,
    t: ResourceType,
    (name, body): (String, Option<&[u8]>),
    version: String,
    now: Instant,
) {
    if let (Some(bodies), Some(body)) = (&mut st.bodies, body) {
        bodies[type_index(t)].insert(name.clone(), body.to_vec());
    }
    let map = &mut st.held[type_index(t)];
    match map.get_mut(&name) {
        Some(h) if h.version == version => {}
        Some(h) => {
            h.version = version;
            h.at = now;
        }
        None => {
            map.insert(name, Held { version, at: now });
        }
    }
}
