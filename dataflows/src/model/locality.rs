//! Locality load balancing: Istio's `localityLbSetting` (of a DestinationRule or the mesh),
//! the topology labels `failoverPriority` reads, and what an EDS cluster's assignment is
//! built from for each class of clients.

use super::{Labels, ScopeKey, Service, TrafficPolicy};
use serde::{Deserialize, Serialize};

/// Istio's `localityLbSetting` (of a DestinationRule's `loadBalancer` or of the mesh
/// config), as validated: `distribute` and `failover` are never both given.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LocalityLbSetting {
    /// `enabled` (unset: on).
    pub enabled: Option<bool>,
    pub distribute: Vec<LocalityDistribute>,
    /// `failover[]` `(from, to)`: regions.
    pub failover: Vec<(String, String)>,
    /// `failoverPriority[]`: label keys (`key`: the client's value) or `key=value` pairs,
    /// most important first.
    #[serde(default)]
    pub failover_priority: Vec<String>,
}

/// One `distribute` entry: clients in `from` (`region/zone/subzone`, a trailing `*`
/// matches any) send each `to` locality its percentage.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LocalityDistribute {
    pub from: String,
    /// Locality (possibly with a trailing `*`) → weight; the weights sum to 100.
    pub to: Vec<(String, u32)>,
}

/// What locality load balancing does to one EDS cluster's assignment, relative to the
/// client proxy's locality: Istio's `ApplyLocalityLoadBalancer`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum LocalityMode {
    /// Locality groups weighted per the first entry whose `from` the client matches.
    Distribute(Vec<LocalityDistribute>),
    /// Priorities by how much of the client's locality a group shares, with these
    /// `(from, to)` region failovers.
    Failover(Vec<(String, String)>),
    /// `failoverPriority`: priorities by how many of these labels (in order) an endpoint
    /// shares with the client; then, with `failover` entries, by locality as `Failover`
    /// on top (Istio applies both in that order).
    Prioritized {
        labels: Vec<String>,
        failover: Vec<(String, String)>,
    },
}

impl LocalityMode {
    /// The mode for a cluster of `service` under `policy` (its rule's, merged for the
    /// subset and port), as Istio's `GetLocalityLbSetting` picks the setting: the policy's,
    /// else the service's `trafficDistribution: PreferClose` (priorities by
    /// [`PREFER_CLOSE_LABELS`], applied without outlier detection too), else the mesh's:
    /// `distribute` applies as it is; other priorities only with `outlierDetection`
    /// (without it Envoy would never fail over); nothing when the setting in effect has
    /// `enabled: false`.
    pub fn of(
        policy: &TrafficPolicy,
        mesh: Option<&LocalityLbSetting>,
        service: &Service,
    ) -> Option<LocalityMode> {
        if policy.locality_lb.is_none() && service.prefer_close {
            return Some(LocalityMode::Prioritized {
                labels: PREFER_CLOSE_LABELS.map(String::from).to_vec(),
                failover: Vec::new(),
            });
        }
        // Istio's mesh config defaults to `{enabled: true}`.
        let builtin = LocalityLbSetting::default();
        let setting = policy.locality_lb.as_deref().or(mesh).unwrap_or(&builtin);
        if setting.enabled == Some(false) {
            return None;
        }
        if !setting.distribute.is_empty() {
            return Some(LocalityMode::Distribute(setting.distribute.clone()));
        }
        policy.outlier_detection.as_ref()?;
        Some(match setting.failover_priority.is_empty() {
            true => LocalityMode::Failover(setting.failover.clone()),
            false => LocalityMode::Prioritized {
                labels: setting.failover_priority.clone(),
                failover: setting.failover.clone(),
            },
        })
    }

    /// The label keys whose client values this mode reads (`key=value` entries fix theirs).
    pub fn client_label_keys(&self) -> Vec<&str> {
        match self {
            LocalityMode::Prioritized { labels, .. } => read_keys(labels).collect(),
            _ => Vec::new(),
        }
    }

    /// Whether Istio sets the cluster's `locality_weighted_lb_config` for it: with
    /// `distribute`, or `failover` entries.
    pub fn weighted(&self) -> bool {
        match self {
            LocalityMode::Distribute(_) => true,
            LocalityMode::Failover(f) | LocalityMode::Prioritized { failover: f, .. } => {
                !f.is_empty()
            }
        }
    }
}

/// The topology labels whose values come from a locality (`region/zone/subzone`), as Istio
/// adds them to a proxy's and an endpoint's labels, with the part of the locality each is.
pub const TOPOLOGY_LABELS: [(&str, usize); 3] = [
    ("topology.kubernetes.io/region", 0),
    ("topology.kubernetes.io/zone", 1),
    ("topology.istio.io/subzone", 2),
];

/// The label Istio gives a workload (and a proxy) its network: a WorkloadEntry's or
/// ServiceEntry endpoint's `network`, a proxy's `NETWORK` metadata, where the workload has
/// no such label of its own.
pub const NETWORK_LABEL: &str = "topology.istio.io/network";

/// The labels a service with `trafficDistribution: PreferClose` prefers its clients'
/// values of, most important first (Istio's order: network, region, zone, subzone).
pub const PREFER_CLOSE_LABELS: [&str; 4] = [
    NETWORK_LABEL,
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.istio.io/subzone",
];

/// The value of label `key` for a workload with `labels` in `locality`: a topology label
/// is the locality's part where the locality has it (Istio's `AugmentLabels` overrides
/// the workload's own), any other label the workload's; "" when absent.
pub fn priority_label_value<'a>(key: &str, labels: &'a Labels, locality: &'a str) -> &'a str {
    let part = TOPOLOGY_LABELS
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, i)| locality.split('/').nth(*i))
        .filter(|p| !p.is_empty());
    part.or_else(|| labels.get(key).map(String::as_str))
        .unwrap_or_default()
}

/// The keys of a setting's `failoverPriority` entries that read the client's value.
pub fn failover_priority_keys(l: &LocalityLbSetting) -> Vec<String> {
    read_keys(&l.failover_priority)
        .map(str::to_string)
        .collect()
}

/// The keys of `failoverPriority` entries that read the client's value (not `key=value`).
fn read_keys(entries: &[String]) -> impl Iterator<Item = &str> {
    entries
        .iter()
        .map(|e| priority_entry(e))
        .filter(|(_, fixed)| fixed.is_none())
        .map(|(k, _)| k)
}

/// The key of a `failoverPriority` entry, and the value it fixes (`key=value`), if any.
pub fn priority_entry(entry: &str) -> (&str, Option<&str>) {
    match entry.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (entry, None),
    }
}

/// What an EDS cluster's assignment is built from: its subset's labels (empty: the host's
/// own cluster) and the locality load balancing in effect for it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EdsSel {
    pub labels: Labels,
    pub locality: Option<Box<LocalityMode>>,
    /// A DNS cluster's own hosts where locality load balancing applies to them: such a
    /// cluster carries its assignment inline, so the cluster itself is built per client
    /// class from these (`translate::cluster::localized_dns`). `None` for an EDS cluster.
    #[serde(default)]
    pub inline_hosts: Option<Vec<InlineHost>>,
    /// The namespace of the service whose endpoints it takes: a host several namespaces
    /// define has a service (and endpoints) per namespace.
    #[serde(default)]
    pub service_namespace: String,
}

impl EdsSel {
    /// The clients an assignment under this selection is built for: the scope's locality
    /// (and its values of the labels a `failoverPriority` reads) where locality load
    /// balancing applies, else the one shared assignment's (all default).
    pub fn client_class(&self, s: &ScopeKey) -> ClientClass {
        let Some(mode) = self.locality.as_deref() else {
            return ClientClass::default();
        };
        let keys = mode.client_label_keys();
        let labels = match mode {
            LocalityMode::Prioritized { .. } => Some(
                s.priority_labels()
                    .unwrap_or_default()
                    .iter()
                    .filter(|(k, _)| keys.contains(&k.as_str()))
                    .cloned()
                    .collect(),
            ),
            _ => None,
        };
        ClientClass {
            locality: s.locality().to_string(),
            labels,
        }
    }
}

/// One host of a DNS cluster's inline assignment, with what locality load balancing reads.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InlineHost {
    pub locality: String,
    pub labels: Labels,
    pub address: String,
    pub port: u16,
    pub weight: u32,
}

/// The clients one assignment is built for: those in `locality` ("" unknown or unused)
/// and, under `failoverPriority`, with these values of the labels it reads (`None`: no
/// `failoverPriority` applies).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClientClass {
    pub locality: String,
    pub labels: Option<Vec<(String, String)>>,
}
