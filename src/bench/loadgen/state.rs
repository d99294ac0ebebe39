//! What each simulated proxy holds and counts, and its subscriptions.

use super::*;

/// A resource version held, and when it arrived.
#[derive(Clone, Debug)]
pub struct Held {
    pub version: String,
    pub at: Instant,
}

/// Counts of what was received, per type (CDS, EDS, LDS, RDS).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub messages: [u64; ResourceType::COUNT],
    pub resources: [u64; ResourceType::COUNT],
    pub removed: [u64; ResourceType::COUNT],
    pub bytes: [u64; ResourceType::COUNT],
}

impl Counters {
    pub fn add(&mut self, o: &Counters) {
        for i in 0..4 {
            self.messages[i] += o.messages[i];
            self.resources[i] += o.resources[i];
            self.removed[i] += o.removed[i];
            self.bytes[i] += o.bytes[i];
        }
    }

    /// `self - earlier`, saturating.
    pub fn since(&self, earlier: &Counters) -> Counters {
        let mut out = Counters::default();
        for i in 0..4 {
            out.messages[i] = self.messages[i].saturating_sub(earlier.messages[i]);
            out.resources[i] = self.resources[i].saturating_sub(earlier.resources[i]);
            out.removed[i] = self.removed[i].saturating_sub(earlier.removed[i]);
            out.bytes[i] = self.bytes[i].saturating_sub(earlier.bytes[i]);
        }
        out
    }

    pub fn total_messages(&self) -> u64 {
        self.messages.iter().sum()
    }
    pub fn total_resources(&self) -> u64 {
        self.resources.iter().sum()
    }
    pub fn total_bytes(&self) -> u64 {
        self.bytes.iter().sum()
    }

    pub fn json(&self) -> serde_json::Value {
        let per = |a: &[u64; ResourceType::COUNT]| serde_json::json!({"CDS": a[0], "EDS": a[1], "LDS": a[2], "RDS": a[3], "total": a.iter().sum::<u64>()});
        serde_json::json!({
            "messages": per(&self.messages),
            "resources": per(&self.resources),
            "removed": per(&self.removed),
            "bytes": per(&self.bytes),
        })
    }
}

/// Everything recorded for one simulated proxy.
#[derive(Debug, Default)]
pub struct ProxyState {
    /// Per type: name → version held and its arrival.
    pub held: [HashMap<String, Held>; ResourceType::COUNT],
    /// Per type: name → when it was last removed (by the server or by unsubscribing).
    pub removed_at: [HashMap<String, Instant>; ResourceType::COUNT],
    pub counters: Counters,
    /// When its (latest) stream opened.
    pub connected_at: Option<Instant>,
    /// Which server (position in [`Config::servers`]) its stream is on.
    pub server: usize,
    /// Streams opened again after one ended (failover).
    pub reconnects: u32,
    /// Why its last stream ended, when it failed over.
    pub disconnected: Option<String>,
    /// When it first held CDS, LDS and every EDS/RDS name it subscribed to.
    pub synced_at: Option<Instant>,
    pub last_message_at: Option<Instant>,
    /// The stream failed or ended: why.
    pub error: Option<String>,
    /// Per type: name → the body held, kept only when asked ([`Loadgen::start_nodes`]): a
    /// bench's thousands of proxies would each copy what the server shares.
    pub bodies: Option<[HashMap<String, Vec<u8>>; ResourceType::COUNT]>,
    /// Delta resources whose version is not the content hash of their body.
    pub version_mismatches: u64,
    /// Responses whose type URL or body could not be read.
    pub undecodable: u64,
    pub(super) eds_subscribed: BTreeSet<String>,
    pub(super) rds_subscribed: BTreeSet<String>,
    pub(super) got: [bool; ResourceType::COUNT],
    /// Route configurations held that carry `vhds` (`serve --vhds`): their virtual hosts
    /// are subscribed to by the route configuration's name and held (and counted) as RDS
    /// resources named `ROUTE/HOST`.
    pub(super) vhds_routes: BTreeSet<String>,
    pub(super) vhds_subscribed: BTreeSet<String>,
    /// A VHDS subscription not answered yet.
    pub(super) vhds_waiting: bool,
}

impl ProxyState {
    /// What it holds: (type, name) → version.
    pub fn held_versions(&self) -> BTreeMap<(ResourceType, String), String> {
        let mut out = BTreeMap::new();
        for t in ResourceType::ALL {
            for (name, h) in &self.held[type_index(t)] {
                out.insert((t, name.clone()), h.version.clone());
            }
        }
        out
    }

    pub fn version(&self, t: ResourceType, name: &str) -> Option<&Held> {
        self.held[type_index(t)].get(name)
    }

    /// The bodies held, as `(type, name, encoded body)` (none unless kept).
    pub fn held_bodies(&self) -> impl Iterator<Item = (ResourceType, &str, &[u8])> {
        ResourceType::ALL
            .into_iter()
            .zip(self.bodies.iter().flatten())
            .flat_map(|(t, of_type)| {
                of_type
                    .iter()
                    .map(move |(name, body)| (t, name.as_str(), body.as_slice()))
            })
    }

    /// Drops `name` of type index `i` from what is held (removed by the server, or no
    /// longer subscribed).
    pub(super) fn forget(&mut self, i: usize, name: &str, now: Instant) {
        if self.held[i].remove(name).is_some() {
            self.removed_at[i].insert(name.to_string(), now);
        }
        if let Some(bodies) = &mut self.bodies {
            bodies[i].remove(name);
        }
    }

    pub(super) fn is_synced(&self) -> bool {
        self.got[0]
            && self.got[2]
            && self
                .eds_subscribed
                .iter()
                .all(|n| self.held[1].contains_key(n))
            && self
                .rds_subscribed
                .iter()
                .all(|n| self.held[3].contains_key(n))
            && !self.vhds_waiting
    }

    /// The VHDS subscription change the route configurations held call for: (subscribe,
    /// unsubscribe); the virtual hosts of a route configuration no longer subscribed are
    /// forgotten, as Envoy drops them with it.
    pub(super) fn follow_vhds(&mut self, now: Instant) -> (Vec<String>, Vec<String>) {
        let wanted: BTreeSet<String> = self
            .vhds_routes
            .intersection(&self.rds_subscribed)
            .cloned()
            .collect();
        let (add, drop) = diff_sets(&self.vhds_subscribed, &wanted);
        for r in &drop {
            let prefix = format!("{r}/");
            let gone: Vec<String> = self.held[3]
                .keys()
                .filter(|n| n.starts_with(&prefix))
                .cloned()
                .collect();
            for n in gone {
                self.forget(3, &n, now);
            }
        }
        if !add.is_empty() {
            self.vhds_waiting = true;
        }
        self.vhds_subscribed = wanted;
        (add, drop)
    }
}

/// One simulated proxy.
pub struct ProxyHandle {
    pub index: usize,
    pub id: String,
    pub(super) state: Mutex<ProxyState>,
}

impl ProxyHandle {
    pub fn lock(&self) -> MutexGuard<'_, ProxyState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
