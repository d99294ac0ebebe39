//! `meshflow demo --no-envoy`: the gateway and the sidecar played by meshflow's own simulated
//! proxies, with real answers.
//!
//! Each is a real Delta ADS client of the bench's load generator (`bench::loadgen`), with the
//! identity of the example's Envoy bootstrap, subscribing and ACKing as Envoy does and keeping
//! the bodies it is sent. A request is followed through exactly that config by the routing
//! simulation (`dataflows::simulate`: listener → filter chain → route configuration → virtual
//! host → route → clusters → endpoints), and then really sent, over HTTP, to the endpoint it
//! chose, whose workload answers with its name. What is simulated is only Envoy's data path;
//! what the proxy holds is what meshflow pushed it.
//!
//! Where the simulation leaves a choice (among weighted clusters, among endpoints), the choice
//! is smooth weighted round robin (as nginx does): deterministic, so a 50/25/25 split shows as
//! exactly that, where Envoy's random pick only comes close.

use super::envoy::bootstrap_json;
use super::http::{self, Landed};
use crate::bench::loadgen::{Loadgen, Protocol};
use dataflows::simulate::{Call, ProxyConfig, Upstream};
use envoy_types::pb::envoy::config::core::v3::{Locality, Node};
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, Struct, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The simulated proxies, in the order of the bootstraps given to [`Simulated::start`].
pub struct Simulated {
    loadgen: Loadgen,
    /// Per proxy: its decoded config, if decoded yet.
    decoded: Mutex<Vec<Option<Decoded>>>,
    /// Smooth weighted round robin state per set of choices.
    picks: Mutex<HashMap<String, Vec<i64>>>,
}

impl Simulated {
    /// Connects one simulated proxy per bootstrap (the example's YAML) to `xds`.
    pub async fn start(xds: SocketAddr, bootstraps: &[&str]) -> Result<Simulated, String> {
        let nodes = bootstraps
            .iter()
            .map(|b| node_of(b))
            .collect::<Result<Vec<_>, _>>()?;
        let loadgen = Loadgen::start_nodes(xds, Protocol::Delta, nodes, true).await?;
        Ok(Simulated {
            decoded: Mutex::new(vec![None; loadgen.proxies.len()]),
            loadgen,
            picks: Mutex::default(),
        })
    }

    /// Proxy `proxy` routes `call`; the request then goes to the endpoint chosen.
    pub async fn send(&self, proxy: usize, call: Call) -> Landed {
        let config = match self.config(proxy) {
            Ok(c) => c,
            Err(e) => return Landed::Failed(e),
        };
        let outcome = config.simulate(&call);
        if let Some(status) = outcome.status() {
            return Landed::Status(u16::try_from(status).unwrap_or(u16::MAX));
        }
        if let Err(no_match) = &outcome.result {
            return Landed::Failed(format!("{no_match:?}"));
        }
        let Some(endpoint) = self.choose(outcome.upstreams()) else {
            // Envoy answers 503 when the cluster it picked has no healthy endpoint.
            return Landed::Status(503);
        };
        match endpoint.parse() {
            Ok(addr) => http::get(addr, &call.authority, &call.path).await,
            Err(_) => Landed::Failed(format!("endpoint {endpoint} is not an ip:port")),
        }
    }

    /// Proxy `proxy`'s config, decoded again only after it received something.
    fn config(&self, proxy: usize) -> Result<Arc<ProxyConfig>, String> {
        let handle = self
            .loadgen
            .proxies
            .get(proxy)
            .ok_or_else(|| format!("no simulated proxy {proxy}"))?;
        let st = handle.lock();
        if let Some(e) = &st.error {
            return Err(format!("{}: {e}", handle.id));
        }
        let mut decoded = self.decoded.lock().unwrap_or_else(|e| e.into_inner());
        let slot = decoded
            .get_mut(proxy)
            .ok_or_else(|| format!("no simulated proxy {proxy}"))?;
        match slot {
            Some(d) if d.after == st.last_message_at => Ok(d.config.clone()),
            _ => {
                let config = Arc::new(ProxyConfig::from_bodies(st.held_bodies()));
                *slot = Some(Decoded {
                    after: st.last_message_at,
                    config: config.clone(),
                });
                Ok(config)
            }
        }
    }

    /// An endpoint among the upstreams' (by their weights), then among its cluster's healthy
    /// endpoints.
    fn choose(&self, upstreams: &[Upstream]) -> Option<String> {
        let mut picks = self.picks.lock().unwrap_or_else(|e| e.into_inner());
        let weights: Vec<u32> = upstreams.iter().map(|u| u.weight.unwrap_or(1)).collect();
        let key: Vec<&str> = upstreams.iter().map(|u| u.cluster.as_str()).collect();
        let upstream = &upstreams[smooth_pick(&mut picks, key.join(" "), &weights)?];
        let healthy: Vec<&str> = upstream
            .endpoints
            .iter()
            .filter(|e| e.healthy)
            .map(|e| e.address.as_str())
            .collect();
        let weights: Vec<u32> = vec![1; healthy.len()];
        let i = smooth_pick(
            &mut picks,
            format!("{}/endpoints", upstream.cluster),
            &weights,
        )?;
        Some(healthy[i].to_string())
    }
}

/// A proxy's config, decoded after the message that arrived at `after`.
#[derive(Clone)]
struct Decoded {
    after: Option<Instant>,
    config: Arc<ProxyConfig>,
}

/// Smooth weighted round robin: each choice adds every weight to its current value and takes
/// the largest, which then gives back the total. `None` when every weight is zero.
fn smooth_pick(
    state: &mut HashMap<String, Vec<i64>>,
    key: String,
    weights: &[u32],
) -> Option<usize> {
    let total: i64 = weights.iter().map(|w| i64::from(*w)).sum();
    if total == 0 {
        return None;
    }
    let current = state.entry(key).or_default();
    current.resize(weights.len(), 0);
    for (c, w) in current.iter_mut().zip(weights) {
        *c += i64::from(*w);
    }
    let (best, _) = current
        .iter()
        .enumerate()
        .filter(|(i, _)| weights[*i] > 0)
        .max_by_key(|(i, c)| (**c, std::cmp::Reverse(*i)))?;
    current[best] -= total;
    Some(best)
}

/// The xDS node of a bootstrap: id, cluster, and metadata as Envoy sends them.
pub fn node_of(bootstrap_yaml: &str) -> Result<Node, String> {
    let b = bootstrap_json(bootstrap_yaml)?;
    let node = &b["node"];
    let id = node["id"]
        .as_str()
        .ok_or("the bundled Envoy bootstrap has no node id")?;
    let metadata = match to_value(&node["metadata"]).kind {
        Some(Kind::StructValue(s)) => Some(s),
        _ => None,
    };
    let part = |k: &str| node["locality"][k].as_str().unwrap_or_default().to_string();
    let locality = node["locality"].is_object().then(|| Locality {
        region: part("region"),
        zone: part("zone"),
        sub_zone: part("sub_zone"),
    });
    Ok(Node {
        id: id.to_string(),
        cluster: node["cluster"].as_str().unwrap_or_default().to_string(),
        metadata,
        locality,
        ..Default::default()
    })
}

/// JSON as a protobuf `Value` (what Envoy makes of its bootstrap's node metadata).
fn to_value(v: &serde_json::Value) -> Value {
    let kind = match v {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(to_value).collect(),
        }),
        serde_json::Value::Object(fields) => Kind::StructValue(Struct {
            fields: fields
                .iter()
                .map(|(k, v)| (k.clone(), to_value(v)))
                .collect(),
        }),
    };
    Value { kind: Some(kind) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smooth_weighted_round_robin_splits_exactly() {
        let mut state = HashMap::new();
        let mut counts = [0; 3];
        for _ in 0..100 {
            let i = smooth_pick(&mut state, "k".into(), &[50, 25, 25]).expect("a pick");
            counts[i] += 1;
        }
        assert_eq!(counts, [50, 25, 25]);
        assert_eq!(smooth_pick(&mut state, "z".into(), &[0, 0]), None);
        assert_eq!(smooth_pick(&mut state, "one".into(), &[0, 7]), Some(1));
    }

    #[test]
    fn nodes_carry_the_bootstraps_identity_and_metadata() {
        let node = node_of(super::super::config::SIDECAR_BOOTSTRAP).expect("node");
        assert_eq!(
            node.id,
            "sidecar~127.0.1.50~sleep.default~default.svc.cluster.local"
        );
        let meta = node.metadata.expect("metadata");
        assert_eq!(
            meta.fields["NAMESPACE"].kind,
            Some(Kind::StringValue("default".into()))
        );
        assert!(matches!(
            &meta.fields["LABELS"].kind,
            Some(Kind::StructValue(s)) if s.fields["app"].kind == Some(Kind::StringValue("sleep".into()))
        ));
    }
}
