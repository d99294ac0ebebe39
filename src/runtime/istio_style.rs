//! The istio-style baseline: a model of how Istio 1.22+ decides its pushes, computed with
//! meshflow's own translation and encoders (`dataflows::naive`), so that what is measured
//! is the push algorithm and not a second implementation of the translation.
//!
//! What it models, per epoch (the runtime's debounce window, the same for every engine):
//! - The index of every kind is rebuilt from the whole snapshot (a superset of Istio's
//!   "the index of each changed kind is rebuilt whole").
//! - Which proxies: a sidecar is pushed when its Sidecar scope depends on a changed config
//!   (the config's hosts are visible to it, before or after the change; a Sidecar change
//!   pushes its namespace, or every sidecar from the root namespace); routers (gateways)
//!   are not scoped, except for Services (ServiceEntries), which push the routers that see
//!   them; Sidecars do not push routers, Gateways and Secrets do not push sidecars.
//! - Which types: an endpoint-only change rebuilds and pushes the load assignments of the
//!   changed services only, to the proxies that hold them ("incremental EDS"); a config
//!   change rebuilds the pushed proxy's whole config, and the push resends the clusters of
//!   the changed services plus the inbound clusters, and every listener and route
//!   configuration the proxy holds, changed or not (Delta xDS, removals as in SotW).
//! - A cache of built resources shared across proxies: what the proxies of one scope hold
//!   alike is built once per epoch ([`naive::compute_planned`]).
//!
//! What it simplifies (each in the faster direction, or neutral): no 10 s debounce maximum
//! (the runtime's window is a fixed one); proxies not pushed are not rebuilt at all; a
//! config change rebuilds the pushed proxies' configs in one pass rather than per type;
//! the load assignments of an endpoint change are built once per scope and shared.
//!
//! The engine reports the differences of what proxies hold in the dataflow's output form
//! (every resource per proxy, as the full-push baseline does) plus, per proxy, the names the
//! push resends even though they did not change ([`Resend`]).

use crate::hub::Resend;
use dataflows::driver::{Batch, EpochOutput};
use dataflows::model::{
    Hostname, MeshConfig, Proxy, ProxyId, ProxyKind, Record, Resource, ResourceType, ScopeKey,
};
use dataflows::naive::{self, Plan, ProxyConfigs, Snapshot};
use std::collections::{BTreeMap, BTreeSet, HashMap};

pub struct IstioStyle {
    mesh: MeshConfig,
    inputs: BTreeMap<Record, isize>,
    /// The records with a positive count, kept as they change (not rebuilt per epoch).
    snapshot: Snapshot,
    /// What every connected proxy holds.
    held: ProxyConfigs,
    proxies: BTreeMap<ProxyId, Proxy>,
    /// Each computed proxy's scope, and the hosts each scope saw when last computed.
    scope: HashMap<ProxyId, ScopeKey>,
    hosts: HashMap<ScopeKey, BTreeSet<Hostname>>,
    /// The proxies holding a load assignment of each host.
    watchers: HashMap<Hostname, BTreeSet<ProxyId>>,
    /// Hosts with an endpoint at each IP, and the hosts selecting workloads per namespace:
    /// what a Workload change affects.
    ip_hosts: HashMap<String, BTreeMap<Hostname, usize>>,
    selecting: HashMap<String, BTreeMap<Hostname, usize>>,
}

/// What an epoch's input changes touch, by Istio's push categories.
#[derive(Default, Debug)]
struct Touched {
    /// Hosts whose endpoints changed (incremental EDS).
    eds_hosts: BTreeSet<Hostname>,
    /// Hosts of changed Services, VirtualServices and DestinationRules.
    config_hosts: BTreeSet<Hostname>,
    /// Hosts of changed Services (the only changes routers are scoped for).
    service_hosts: BTreeSet<Hostname>,
    /// A VirtualService, DestinationRule, Gateway or Secret changed: every router is pushed.
    routers: bool,
    /// Namespaces of changed Sidecars.
    sidecar_namespaces: BTreeSet<String>,
    /// IPs whose endpoints or workloads changed (the inbound side of proxies at them).
    ips: BTreeSet<String>,
    /// The mesh settings changed: everything is pushed.
    everything: bool,
    up: BTreeSet<ProxyId>,
    down: BTreeSet<ProxyId>,
}

impl Touched {
    fn config(&self) -> bool {
        !self.config_hosts.is_empty()
            || self.routers
            || !self.sidecar_namespaces.is_empty()
            || self.everything
    }
}

/// `outbound|PORT|SUBSET|HOST` → HOST (`None` for other names).
fn outbound_host(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("outbound|")?;
    rest.splitn(3, '|').nth(2)
}

fn count(map: &mut HashMap<String, BTreeMap<Hostname, usize>>, key: &str, host: &str, d: isize) {
    let hosts = map.entry(key.to_string()).or_default();
    let n = hosts.entry(host.to_string()).or_insert(0);
    *n = n.saturating_add_signed(d);
    if *n == 0 {
        hosts.remove(host);
    }
    if hosts.is_empty() {
        map.remove(key);
    }
}

impl IstioStyle {
    pub fn new(mesh: MeshConfig) -> IstioStyle {
        IstioStyle {
            mesh,
            inputs: BTreeMap::new(),
            snapshot: Snapshot::default(),
            held: ProxyConfigs::new(),
            proxies: BTreeMap::new(),
            scope: HashMap::new(),
            hosts: HashMap::new(),
            watchers: HashMap::new(),
            ip_hosts: HashMap::new(),
            selecting: HashMap::new(),
        }
    }

    /// Applies a batch, decides the push as Istio would, rebuilds what it pushes, and
    /// reports the difference (and what the push resends unchanged).
    pub fn step(&mut self, batch: Batch) -> (EpochOutput, Resend) {
        let mut t = Touched::default();
        for (r, d) in batch.changes {
            self.classify(&r, d, &mut t);
            let n = self.inputs.entry(r.clone()).or_insert(0);
            let was = *n > 0;
            *n += d;
            let is = *n > 0;
            if *n == 0 {
                self.inputs.remove(&r);
            }
            if was != is {
                self.index(&r, if is { 1 } else { -1 });
                if is {
                    self.snapshot.records.insert(r);
                } else {
                    self.snapshot.records.remove(&r);
                }
            }
        }
        // Routes to a service depend on its ports: the routes' own hosts change with it.
        if !t.service_hosts.is_empty() {
            for r in &self.snapshot.records {
                let Record::VirtualService(vs) = r else {
                    continue;
                };
                let tcp = vs.tcp.iter().flat_map(|r| r.route.iter());
                if vs
                    .http
                    .iter()
                    .flat_map(|r| r.route.iter())
                    .chain(tcp)
                    .any(|d| t.service_hosts.contains(&d.host))
                {
                    t.config_hosts.extend(vs.hosts.iter().cloned());
                }
            }
        }
        let mut out = EpochOutput {
            epoch: batch.epoch,
            ..Default::default()
        };
        let mut resend = Resend::new();
        let mut bodies: BTreeMap<dataflows::model::ResourceKey, (Resource, isize)> =
            BTreeMap::new();
        for id in &t.down {
            if self.proxies.contains_key(id) {
                continue;
            }
            self.unwatch(id);
            self.scope.remove(id);
            if let Some(old) = self.held.remove(id) {
                for r in old.into_values() {
                    out.proxy_resources.push(((id.clone(), r.key()), -1));
                    bodies.entry(r.key()).or_insert((r, 0)).1 -= 1;
                }
            }
        }
        // Connected proxies' scopes are asked about only when a config changed: an
        // endpoint-only epoch is decided from the watchers alone.
        let known: Vec<ScopeKey> = if t.config() {
            let mut k: Vec<ScopeKey> = self.scope.values().cloned().collect();
            k.sort();
            k.dedup();
            k
        } else {
            Vec::new()
        };
        let planned = {
            let this = &*self;
            naive::compute_planned(&this.mesh, &this.snapshot, &known, |after| {
                this.plan(&t, after)
            })
        };
        let naive::Planned {
            configs,
            scopes,
            hosts,
            plan,
        } = planned;
        let eds_only: BTreeSet<&ProxyId> = configs
            .keys()
            .filter(|id| !plan.full.contains(*id))
            .collect();
        for (id, new) in &configs {
            if !self.proxies.contains_key(id) {
                continue;
            }
            let partial = eds_only.contains(id);
            let old = self.held.entry(id.clone()).or_default();
            // Old entries this rebuild covers: all of them, or the assignments of the hosts.
            let covered = |k: &(ResourceType, String)| {
                !partial
                    || (k.0 == ResourceType::Endpoint
                        && outbound_host(&k.1).is_some_and(|h| t.eds_hosts.contains(h)))
            };
            let gone: Vec<(ResourceType, String)> = old
                .keys()
                .filter(|k| covered(k) && !new.contains_key(*k))
                .cloned()
                .collect();
            for k in gone {
                if let Some(r) = old.remove(&k) {
                    out.proxy_resources.push(((id.clone(), r.key()), -1));
                    bodies.entry(r.key()).or_insert((r, 0)).1 -= 1;
                }
            }
            for (k, r) in new {
                match old.get(k) {
                    Some(o) if o.version == r.version => continue,
                    Some(o) => {
                        out.proxy_resources.push(((id.clone(), o.key()), -1));
                        bodies.entry(o.key()).or_insert((o.clone(), 0)).1 -= 1;
                    }
                    None => {}
                }
                out.proxy_resources.push(((id.clone(), r.key()), 1));
                bodies.entry(r.key()).or_insert((r.clone(), 0)).1 += 1;
                old.insert(k.clone(), r.clone());
            }
        }
        // What the push resends: the assignments of the changed services to whoever holds
        // them; to a proxy pushed for a config change (not one just connected, whose first
        // request asks for everything), the clusters of the changed services and its inbound
        // clusters, and every listener and route configuration it holds.
        for id in configs.keys() {
            let Some(held) = self.held.get(id) else {
                continue;
            };
            let partial = eds_only.contains(id);
            let fresh = t.up.contains(id);
            if fresh {
                continue;
            }
            let all_clusters = t.everything
                || scopes.get(id).is_some_and(|s| match s {
                    ScopeKey::Sidecar { namespace, .. } => {
                        t.sidecar_namespaces.contains(namespace)
                            || t.sidecar_namespaces.contains(&self.mesh.root_namespace)
                    }
                    ScopeKey::Router { .. } => false,
                });
            for (rtype, name) in held.keys() {
                let host = outbound_host(name);
                let resent = match rtype {
                    ResourceType::Endpoint => host.is_some_and(|h| t.eds_hosts.contains(h)),
                    _ if partial => false,
                    ResourceType::Listener | ResourceType::Route => true,
                    ResourceType::Cluster => {
                        all_clusters
                            || name.starts_with("inbound|")
                            || host.is_some_and(|h| t.config_hosts.contains(h))
                    }
                    ResourceType::Secret => false,
                };
                if resent {
                    resend.push((id.clone(), *rtype, name.clone()));
                }
            }
        }
        // The watchers and scopes of the proxies rebuilt whole.
        for (id, s) in scopes {
            if !self.proxies.contains_key(&id) || eds_only.contains(&id) {
                continue;
            }
            self.unwatch(&id);
            if let Some(held) = self.held.get(&id) {
                for (rtype, name) in held.keys() {
                    if *rtype == ResourceType::Endpoint {
                        if let Some(h) = outbound_host(name) {
                            self.watchers
                                .entry(h.to_string())
                                .or_default()
                                .insert(id.clone());
                        }
                    }
                }
            }
            self.scope.insert(id, s);
        }
        let used: BTreeSet<&ScopeKey> = self.scope.values().collect();
        let mut kept: HashMap<ScopeKey, BTreeSet<Hostname>> = hosts
            .into_iter()
            .filter(|(s, _)| used.contains(s))
            .collect();
        // Scopes not asked about this epoch keep what they saw.
        for (s, h) in self.hosts.drain() {
            if used.contains(&s) {
                kept.entry(s).or_insert(h);
            }
        }
        self.hosts = kept;
        // Bodies are counted per holder, as the full-push baseline counts them.
        out.bodies = bodies.into_values().filter(|(_, d)| *d != 0).collect();
        (out, resend)
    }

    /// The push Istio would decide for this epoch; `after` is the hosts each known scope
    /// sees in the new snapshot.
    fn plan(&self, t: &Touched, after: &HashMap<ScopeKey, BTreeSet<Hostname>>) -> Plan {
        let mut plan = Plan {
            eds_hosts: t.eds_hosts.clone(),
            ..Default::default()
        };
        for id in self.proxies.keys() {
            if self.full_push(t, id, after) {
                plan.full.insert(id.clone());
            }
        }
        for h in &t.eds_hosts {
            for id in self.watchers.get(h).into_iter().flatten() {
                if !plan.full.contains(id) && self.proxies.contains_key(id) {
                    plan.eds.insert(id.clone());
                }
            }
        }
        plan
    }

    /// Whether a config change of this epoch pushes proxy `id` (whole config): the hosts
    /// its scope saw before the change and those it sees after (`after`) both count.
    fn full_push(
        &self,
        t: &Touched,
        id: &ProxyId,
        after: &HashMap<ScopeKey, BTreeSet<Hostname>>,
    ) -> bool {
        let Some(p) = self.proxies.get(id) else {
            return false;
        };
        if t.up.contains(id) || t.everything || p.ips.iter().any(|ip| t.ips.contains(ip)) {
            return true;
        }
        let Some(s) = self.scope.get(id) else {
            return true;
        };
        let sees = |hosts: &BTreeSet<Hostname>| -> bool {
            let before = self.hosts.get(s);
            let now = after.get(s);
            before
                .into_iter()
                .chain(now)
                .any(|seen| hosts.iter().any(|h| seen.contains(h)))
        };
        match p.kind {
            ProxyKind::Router => t.routers || sees(&t.service_hosts),
            ProxyKind::Sidecar | ProxyKind::Proxyless => {
                t.sidecar_namespaces.contains(&p.namespace)
                    || t.sidecar_namespaces.contains(&self.mesh.root_namespace)
                    || sees(&t.config_hosts)
            }
        }
    }

    /// Files one input change under Istio's push categories.
    fn classify(&self, r: &Record, d: isize, t: &mut Touched) {
        match r {
            Record::Service(s) => {
                t.config_hosts.insert(s.hostname.clone());
                t.service_hosts.insert(s.hostname.clone());
                t.eds_hosts.insert(s.hostname.clone());
                // An ExternalName alias changes the virtual hosts of the services its chain
                // passes through to its end: Istio marks them updated too
                // (`resolveServiceAliases`). Chains of any length, up to a loop.
                if let Some(target) = &s.alias_for {
                    let raw: BTreeMap<Hostname, Hostname> = self
                        .snapshot
                        .records
                        .iter()
                        .filter_map(|r| match r {
                            Record::Service(a) => Some((a.hostname.clone(), a.alias_for.clone()?)),
                            _ => None,
                        })
                        .chain([(s.hostname.clone(), target.clone())])
                        .collect();
                    for h in dataflows::rules::alias_chain(&raw, &s.hostname).0 {
                        t.config_hosts.insert(h.clone());
                        t.service_hosts.insert(h.clone());
                    }
                }
            }
            Record::Endpoint(h, e) => {
                t.eds_hosts.insert(h.clone());
                t.ips.insert(e.ip.clone());
            }
            Record::Workload(w) => {
                t.ips.insert(w.ip.clone());
                if let Some(hosts) = self.ip_hosts.get(&w.ip) {
                    t.eds_hosts.extend(hosts.keys().cloned());
                }
                if let Some(hosts) = self.selecting.get(&w.origin.namespace) {
                    t.eds_hosts.extend(hosts.keys().cloned());
                }
            }
            Record::Selection(h, _) => {
                t.eds_hosts.insert(h.clone());
            }
            Record::VirtualService(vs) => {
                t.config_hosts.extend(vs.hosts.iter().cloned());
                t.routers = true;
            }
            Record::DestinationRule(dr) => {
                t.config_hosts.insert(dr.host.clone());
                t.routers = true;
            }
            // The Gateway API routes gateways only (mesh routes are not served yet).
            Record::Gateway(_) | Record::Secret(_) | Record::GatewayApi(_) => t.routers = true,
            Record::Sidecar(sc) => {
                t.sidecar_namespaces.insert(sc.key.namespace.clone());
            }
            Record::Mesh(_) => t.everything = true,
            // A policy changes inbound listeners of the proxies it selects; Istio pushes
            // every proxy on a security policy change.
            Record::Security(_) => t.everything = true,
            Record::MtlsHold(_) => t.everything = true,
            Record::Proxy(p) => {
                if d > 0 {
                    t.up.insert(p.id.clone());
                    t.down.remove(&p.id);
                } else {
                    t.down.insert(p.id.clone());
                }
            }
        }
    }

    /// Keeps the lookups of the connected proxies and of what a Workload change affects.
    fn index(&mut self, r: &Record, d: isize) {
        match r {
            Record::Endpoint(h, e) => count(&mut self.ip_hosts, &e.ip, h, d),
            Record::Selection(h, sel) => count(&mut self.selecting, &sel.origin.namespace, h, d),
            Record::Proxy(p) => {
                if d > 0 {
                    self.proxies.insert(p.id.clone(), p.clone());
                } else {
                    self.proxies.remove(&p.id);
                }
            }
            _ => {}
        }
    }

    fn unwatch(&mut self, id: &ProxyId) {
        if let Some(held) = self.held.get(id) {
            for (rtype, name) in held.keys() {
                if *rtype != ResourceType::Endpoint {
                    continue;
                }
                let Some(h) = outbound_host(name) else {
                    continue;
                };
                if let Some(w) = self.watchers.get_mut(h) {
                    w.remove(id);
                    if w.is_empty() {
                        self.watchers.remove(h);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::IstioStyle;
    use crate::hub::Resend;
    use dataflows::driver::{Batch, EpochOutput};
    use dataflows::model::{
        ConfigKey, Kind, MeshConfig, ProxyId, Record, ResourceType, Service, ServicePort,
    };
    use dataflows::naive::{self, Snapshot};
    use dataflows::synth::{self, Shape};
    use std::collections::{BTreeMap, BTreeSet};

    /// 12 services in 3 namespaces (every 4th with a DestinationRule and VirtualService:
    /// svc-0 in ns-0, svc-4 in ns-1, svc-8 in ns-2), 8 proxies, each namespace's Sidecar
    /// importing itself and ns-0.
    fn shape() -> Shape {
        Shape {
            services: 12,
            endpoints_per_service: 2,
            namespaces: 3,
            proxies: 8,
            ..Shape::small()
        }
    }

    struct Run {
        engine: IstioStyle,
        records: BTreeSet<Record>,
        mesh: MeshConfig,
        epoch: u64,
    }

    impl Run {
        fn start() -> Run {
            let mesh = MeshConfig::default();
            let mut run = Run {
                engine: IstioStyle::new(mesh.clone()),
                records: BTreeSet::new(),
                mesh: mesh.clone(),
                epoch: 0,
            };
            let all = synth::records(&shape(), &mesh);
            run.step(all.into_iter().map(|r| (r, 1)).collect());
            run
        }

        /// One epoch; checks the engine's held configs against the full recompute.
        fn step(&mut self, changes: Vec<(Record, isize)>) -> (EpochOutput, Resend) {
            for (r, d) in &changes {
                if *d > 0 {
                    self.records.insert(r.clone());
                } else {
                    self.records.remove(r);
                }
            }
            self.epoch += 1;
            let out = self.engine.step(Batch {
                epoch: self.epoch,
                changes,
            });
            let expected = naive::compute(
                &self.mesh,
                &Snapshot {
                    records: self.records.clone(),
                },
            );
            let held: BTreeMap<_, _> = self
                .engine
                .held
                .iter()
                .filter(|(_, c)| !c.is_empty())
                .map(|(id, c)| (id.clone(), c.clone()))
                .collect();
            assert_eq!(held.len(), expected.len());
            for (id, c) in &expected {
                let versions =
                    |c: &BTreeMap<(ResourceType, String), dataflows::model::Resource>| {
                        c.iter()
                            .map(|(k, r)| (k.clone(), r.version.clone()))
                            .collect::<Vec<_>>()
                    };
                assert_eq!(versions(&held[id]), versions(c), "{id}");
            }
            out
        }

        /// Proxies that see service `s` (hold one of its clusters).
        fn seeing(&self, s: usize) -> BTreeSet<ProxyId> {
            let host = synth::hostname(s, &shape(), &self.mesh);
            self.engine
                .held
                .iter()
                .filter(|(_, c)| {
                    c.keys().any(|(t, n)| {
                        *t == ResourceType::Cluster && super::outbound_host(n) == Some(&host)
                    })
                })
                .map(|(id, _)| id.clone())
                .collect()
        }
    }

    fn by_proxy(resend: &Resend) -> BTreeMap<ProxyId, BTreeSet<(ResourceType, String)>> {
        let mut out: BTreeMap<ProxyId, BTreeSet<(ResourceType, String)>> = BTreeMap::new();
        for (id, t, n) in resend {
            out.entry(id.clone()).or_default().insert((*t, n.clone()));
        }
        out
    }

    #[test]
    fn istio_style_endpoint_change_pushes_only_that_services_assignments_to_watchers() {
        let mut run = Run::start();
        // svc-5 lives in ns-2: seen by ns-2's proxies only.
        let old = synth::endpoint(5, 0, &shape(), &run.mesh);
        let Record::Endpoint(h, mut e) = old.clone() else {
            panic!("not an endpoint")
        };
        e.ip = "10.254.0.1".into();
        let watchers = run.seeing(5);
        assert!(!watchers.is_empty() && watchers.len() < 8, "{watchers:?}");
        let (out, resend) = run.step(vec![(old, -1), (Record::Endpoint(h.clone(), e), 1)]);
        assert!(out
            .proxy_resources
            .iter()
            .all(|((id, k), _)| k.rtype == ResourceType::Endpoint && watchers.contains(id)));
        let pushed = by_proxy(&resend);
        assert_eq!(pushed.keys().cloned().collect::<BTreeSet<_>>(), watchers);
        for names in pushed.values() {
            assert!(names.iter().all(|(t, n)| *t == ResourceType::Endpoint
                && super::outbound_host(n) == Some(h.as_str())));
        }
    }

    #[test]
    fn istio_style_vs_change_resends_the_whole_listener_and_route_sets_of_scoped_proxies() {
        let mut run = Run::start();
        // svc-4 lives in ns-1: seen by ns-1's proxies only.
        let s = 4;
        let seeing = run.seeing(s);
        assert!(!seeing.is_empty() && seeing.len() < 8, "{seeing:?}");
        let old = synth::vs(s, 90, &shape(), &run.mesh);
        let new = synth::vs(s, 50, &shape(), &run.mesh);
        let (_, resend) = run.step(vec![
            (Record::VirtualService(old), -1),
            (Record::VirtualService(new), 1),
        ]);
        let pushed = by_proxy(&resend);
        assert_eq!(pushed.keys().cloned().collect::<BTreeSet<_>>(), seeing);
        for (id, names) in &pushed {
            let held = &run.engine.held[id];
            for t in [ResourceType::Listener, ResourceType::Route] {
                let all: BTreeSet<_> = held.keys().filter(|(x, _)| *x == t).cloned().collect();
                assert!(!all.is_empty());
                assert!(all.is_subset(names), "{id}: {t:?} not all resent");
            }
            // Only the changed service's clusters (and inbound ones) among the clusters.
            let host = synth::hostname(s, &shape(), &run.mesh);
            assert!(names
                .iter()
                .filter(|(t, _)| *t == ResourceType::Cluster)
                .all(|(_, n)| n.starts_with("inbound|")
                    || super::outbound_host(n) == Some(host.as_str())));
        }
    }

    #[test]
    fn istio_style_service_nobody_imports_pushes_nothing() {
        let mut run = Run::start();
        let svc = Service {
            control_plane: false,
            subject_alt_names: Vec::new(),
            mesh_external: false,
            prefer_close: false,
            headless: false,
            alias_for: None,
            aliases: Vec::new(),
            hostname: "lonely.unrelated.svc.cluster.local".into(),
            origin: ConfigKey::new(Kind::Service, "unrelated", "lonely"),
            ports: vec![ServicePort {
                name: "http".into(),
                port: 80,
                protocol: dataflows::model::Protocol::Http,
            }],
            export_to: vec![],
            resolution: dataflows::model::Resolution::Static,
            addresses: vec![],
            dns_endpoints: vec![],
            host_target_ports: Default::default(),
        };
        let (out, resend) = run.step(vec![(Record::Service(svc), 1)]);
        assert!(out.proxy_resources.is_empty(), "{:?}", out.proxy_resources);
        assert!(resend.is_empty(), "{resend:?}");
    }
}
