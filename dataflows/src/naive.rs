//! A naive full recompute of every proxy's resources from a snapshot of the inputs: plain
//! loops over everything, no incrementality. It exists as the oracle the dataflow is tested
//! against (and as the full-push baseline's engine): same rules, same builders, no joins.
//! Lookups are indexed (endpoints by host and port, workloads by IP) so a full recompute
//! costs what rebuilding every proxy's config costs, not a scan of every endpoint per
//! cluster.

use crate::assemble::{self, PortListener, TcpPort};
use crate::model::*;
use crate::rules;
use crate::translate::tcp::TcpTarget;
use crate::translate::{cluster, endpoint, listener, route};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The state of all inputs at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub records: BTreeSet<Record>,
}

/// Per proxy, per (type, name): the resource it should hold.
pub type ProxyConfigs = BTreeMap<ProxyId, BTreeMap<(ResourceType, String), Resource>>;

struct View<'a> {
    services: BTreeMap<&'a str, &'a Service>,
    /// The `ExternalName` alias services in effect (one per host), apart from `services`:
    /// they build nothing of their own, but a VirtualService may govern their names.
    alias_services: BTreeMap<&'a str, &'a Service>,
    endpoints: Vec<(&'a Hostname, &'a RawEndpoint)>,
    workloads: Vec<&'a Workload>,
    selections: Vec<(&'a Hostname, &'a WorkloadSelection)>,
    vss: Vec<&'a VirtualService>,
    drs: Vec<&'a DestinationRule>,
    /// The rules merged per namespace and host, as the lookup sees them.
    dr_entries: Vec<(rules::DrEntry, DestinationRule)>,
    gateways: BTreeMap<&'a ConfigKey, &'a Gateway>,
    sidecars: Vec<&'a Sidecar>,
    proxies: Vec<&'a Proxy>,
    secrets: Vec<&'a TlsSecret>,
    /// Every `sourceLabels` selector of the VirtualServices, sorted.
    source_selectors: Vec<Labels>,
    /// The mesh settings in effect.
    mesh: MeshSettings,
    /// Some rule (or the mesh config) may balance by locality: proxies with a locality
    /// are scoped by it.
    by_locality: bool,
    /// The label keys some `failoverPriority` reads of a client, sorted: proxies are
    /// scoped by their values of them.
    priority_keys: Vec<String>,
    /// Per IP of a router, `(service port, host, target port)` of each endpoint there: where
    /// its servers listen ([`rules::gateway_ports`]).
    router_targets: HashMap<String, Vec<(u16, Hostname, u16)>>,
}

impl<'a> View<'a> {
    fn new(snap: &'a Snapshot, mesh: MeshSettings) -> Self {
        let mut v = View {
            mesh,
            services: BTreeMap::new(),
            alias_services: BTreeMap::new(),
            endpoints: Vec::new(),
            workloads: Vec::new(),
            selections: Vec::new(),
            vss: Vec::new(),
            drs: Vec::new(),
            dr_entries: Vec::new(),
            gateways: BTreeMap::new(),
            sidecars: Vec::new(),
            proxies: Vec::new(),
            secrets: Vec::new(),
            source_selectors: Vec::new(),
            by_locality: false,
            priority_keys: Vec::new(),
            router_targets: HashMap::new(),
        };
        // Records iterate in order, so the first service per host is the least one.
        for r in &snap.records {
            match r {
                Record::Service(s) if s.alias_for.is_some() => {
                    v.alias_services.entry(s.hostname.as_str()).or_insert(s);
                }
                Record::Service(s) => {
                    v.services.entry(s.hostname.as_str()).or_insert(s);
                }
                Record::Endpoint(h, e) => v.endpoints.push((h, e)),
                Record::Workload(w) => v.workloads.push(w),
                Record::VirtualService(vs) => v.vss.push(vs),
                Record::DestinationRule(dr) => v.drs.push(dr),
                Record::Gateway(g) => {
                    v.gateways.insert(&g.key, g);
                }
                Record::Sidecar(s) => v.sidecars.push(s),
                Record::Proxy(p) => v.proxies.push(p),
                Record::Secret(s) => v.secrets.push(s),
                Record::Selection(h, sel) => v.selections.push((h, sel)),
                Record::Mesh(_) => {}
            }
        }
        let mut by_place: BTreeMap<(&str, &str), Vec<&DestinationRule>> = BTreeMap::new();
        for dr in &v.drs {
            by_place
                .entry((dr.key.namespace.as_str(), dr.host.as_str()))
                .or_default()
                .push(dr);
        }
        v.dr_entries = by_place
            .values()
            .flat_map(|list| rules::consolidate_drs(list))
            .map(|(e, dr, _)| (e, dr))
            .collect();
        v.source_selectors = v.vss.iter().flat_map(|vs| vs.source_selectors()).collect();
        v.source_selectors
            .extend(v.drs.iter().filter_map(|dr| dr.selector.clone()));
        v.source_selectors.sort();
        v.source_selectors.dedup();
        v.by_locality =
            v.mesh.distributes_by_locality() || v.drs.iter().any(|dr| dr.may_balance_by_locality());
        v.priority_keys = v.mesh.failover_priority_keys();
        v.priority_keys
            .extend(v.drs.iter().flat_map(|dr| dr.failover_priority_keys()));
        if v.services.values().any(|s| s.prefer_close) {
            v.priority_keys
                .extend(PREFER_CLOSE_LABELS.iter().map(|k| k.to_string()));
        }
        v.priority_keys.sort();
        v.priority_keys.dedup();
        let router_ips: BTreeSet<&str> = v
            .proxies
            .iter()
            .filter(|p| p.kind == ProxyKind::Router)
            .flat_map(|p| p.ips.iter().map(String::as_str))
            .collect();
        if !router_ips.is_empty() {
            let at_routers = v.resolved_endpoints_where(|_| true, |ip| router_ips.contains(ip));
            for ((host, port), ep) in at_routers {
                let rows = v.router_targets.entry(ep.ip.clone()).or_default();
                rows.push((port, host, ep.port));
            }
        }
        v
    }

    /// Endpoints resolved to `(host, service port)` with workload labels.
    fn resolved_endpoints(&self) -> Vec<((Hostname, u16), Endpoint)> {
        self.resolved_endpoints_of(None)
    }

    /// [`View::resolved_endpoints`], of the hosts in `only` if given.
    fn resolved_endpoints_of(
        &self,
        only: Option<&BTreeSet<Hostname>>,
    ) -> Vec<((Hostname, u16), Endpoint)> {
        self.resolved_endpoints_where(|h| only.is_none_or(|o| o.contains(h)), |_| true)
    }

    /// [`View::resolved_endpoints`] of the hosts `wanted` takes, at the IPs `at` takes.
    fn resolved_endpoints_where(
        &self,
        wanted: impl Fn(&str) -> bool,
        at: impl Fn(&str) -> bool,
    ) -> Vec<((Hostname, u16), Endpoint)> {
        // Workloads by IP, in record order (a lookup, not a scan per endpoint).
        let mut by_ip: HashMap<&str, Vec<&Workload>> = HashMap::new();
        for w in &self.workloads {
            by_ip.entry(w.ip.as_str()).or_default().push(w);
        }
        let mut out = Vec::new();
        for (h, e) in &self.endpoints {
            if !wanted(h) || !at(&e.ip) {
                continue;
            }
            let Some(svc) = self.services.get(h.as_str()) else {
                continue;
            };
            let port = match svc.ports.as_slice() {
                [only] if e.port_name.is_empty() => Some(only),
                ports => ports.iter().find(|p| p.name == e.port_name),
            };
            let Some(port) = port else { continue };
            match by_ip.get(e.ip.as_str()) {
                None => out.push((((*h).clone(), port.port), Endpoint::resolved(e, None))),
                Some(wls) => {
                    for w in wls {
                        out.push((((*h).clone(), port.port), Endpoint::resolved(e, Some(w))));
                    }
                }
            }
        }
        // What ServiceEntries select: every workload of the entry's namespace whose labels
        // match, on every port of the entry the service in effect has.
        for (h, sel) in &self.selections {
            if !wanted(h) {
                continue;
            }
            let Some(svc) = self.services.get(h.as_str()) else {
                continue;
            };
            // A selected endpoint is at its workload's IP: workloads elsewhere are skipped
            // before their labels are matched.
            for w in self.workloads.iter().filter(|w| at(&w.ip)) {
                if w.origin.namespace != sel.origin.namespace
                    || !rules::labels_match(&sel.labels, &w.labels)
                {
                    continue;
                }
                for p in &sel.ports {
                    if let Some(port) = svc.ports.iter().find(|sp| sp.name == p.name) {
                        out.push((((*h).clone(), port.port), Endpoint::selected(sel, p, w)));
                    }
                }
            }
        }
        out
    }

    fn scope_of(&self, p: &Proxy) -> ScopeKey {
        let matched = self
            .source_selectors
            .iter()
            .filter(|sel| rules::labels_match(sel, &p.labels))
            .cloned()
            .collect();
        let s = match p.kind {
            ProxyKind::Sidecar | ProxyKind::Proxyless => {
                let chosen = self
                    .sidecars
                    .iter()
                    .filter_map(|sc| {
                        rules::sidecar_rank(sc, p, &self.mesh.root_namespace).map(|r| (r, &sc.key))
                    })
                    .min();
                rules::sidecar_scope(p, chosen.map(|(_, k)| k.clone()))
            }
            ProxyKind::Router => {
                let targets = p
                    .ips
                    .iter()
                    .filter_map(|ip| self.router_targets.get(ip))
                    .flatten()
                    .map(|(port, host, target)| (*port, host.as_str(), *target));
                rules::router_scope(
                    p,
                    self.gateways
                        .values()
                        .filter(|g| rules::gateway_selects(g, p))
                        .map(|g| g.key.clone())
                        .collect(),
                )
                .with_gateway_ports(rules::gateway_ports(targets))
            }
        };
        let mut s = s.with_source_labels(matched);
        if self.by_locality && !p.locality.is_empty() {
            s = s.with_locality(p.locality.clone());
        }
        if !self.priority_keys.is_empty() {
            let values = self.priority_keys.iter().map(|k| {
                let v = priority_label_value(k, &p.labels, &p.locality);
                (k.clone(), v.to_string())
            });
            s = s.with_priority_labels(values.collect());
        }
        s
    }

    fn sidecar_spec(&self, s: &ScopeKey) -> Option<&'a Sidecar> {
        match s {
            ScopeKey::Sidecar {
                sidecar: Some(k), ..
            } => self.sidecars.iter().copied().find(|sc| &sc.key == k),
            _ => None,
        }
    }

    /// Hosts visible through each egress listener of the scope.
    fn view_hosts(&self, s: &ScopeKey) -> Vec<BTreeSet<&'a str>> {
        self.view_hosts_of(s, &self.services)
    }

    /// Per egress listener of the scope, the hosts of `services` it sees.
    fn view_hosts_of(
        &self,
        s: &ScopeKey,
        services: &BTreeMap<&'a str, &'a Service>,
    ) -> Vec<BTreeSet<&'a str>> {
        let spec = self.sidecar_spec(s);
        rules::egress_listeners(spec)
            .iter()
            .map(|l| {
                services
                    .iter()
                    .filter(|(_, svc)| {
                        l.hosts
                            .iter()
                            .any(|pat| rules::egress_visible(pat, s.namespace(), svc))
                    })
                    .map(|(h, _)| *h)
                    .collect()
            })
            .collect()
    }

    fn dr_for(&self, s: &ScopeKey, svc: &Service) -> Option<&DestinationRule> {
        let root = self.mesh.root_namespace.as_str();
        let entries: Vec<&rules::DrEntry> = self.dr_entries.iter().map(|(e, _)| e).collect();
        let chosen = rules::dr_in_effect(&entries, s, &svc.hostname, svc.namespace(), root)?;
        self.dr_entries
            .iter()
            .find(|(e, _)| e == chosen)
            .map(|(_, dr)| dr)
    }

    /// The rule whose connection pool a scope's inbound clusters for `svc` take: the lookup
    /// of [`View::dr_for`], of the entries without a `workloadSelector`.
    fn inbound_dr_for(&self, s: &ScopeKey, svc: &Service) -> Option<&DestinationRule> {
        let root = self.mesh.root_namespace.as_str();
        let entries: Vec<&rules::DrEntry> = self.dr_entries.iter().map(|(e, _)| e).collect();
        let chosen =
            rules::dr_in_effect_inbound(&entries, s, &svc.hostname, svc.namespace(), root)?;
        self.dr_entries
            .iter()
            .find(|(e, _)| e == chosen)
            .map(|(_, dr)| dr)
    }

    /// The hash keys of the hosts the scope sees, where the rule in effect hashes.
    fn hashing(&self, s: &ScopeKey) -> Hashing {
        let hosts: BTreeSet<&str> = self.view_hosts(s).into_iter().flatten().collect();
        hosts
            .into_iter()
            .filter_map(|h| {
                let hh = cluster::hashing(self.dr_for(s, self.services[h])?);
                (!hh.is_empty()).then(|| (h.to_string(), hh))
            })
            .collect()
    }

    /// The rule's own `tcp.idleTimeout` of the hosts the scope sees, where the rule in effect
    /// sets one.
    fn tcp_idle(&self, s: &ScopeKey) -> TcpTimeouts {
        let hosts: BTreeSet<&str> = self.view_hosts(s).into_iter().flatten().collect();
        hosts
            .into_iter()
            .filter_map(|h| {
                let t = self.dr_for(s, self.services[h])?.tcp_timeout()?;
                Some((h.to_string(), t))
            })
            .collect()
    }

    fn resolve(&self, vs: &VirtualService) -> ResolvedVs {
        let mut dest_ports = BTreeMap::new();
        let tcp = vs.tcp.iter().flat_map(|r| r.route.iter());
        let tls = vs.tls.iter().flat_map(|r| r.route.iter());
        for d in vs
            .http
            .iter()
            .flat_map(|r| r.route.iter())
            .chain(tcp)
            .chain(tls)
        {
            if let Some(svc) = self.services.get(d.host.as_str()) {
                dest_ports.insert(d.host.clone(), svc.ports.iter().map(|p| p.port).collect());
            }
        }
        ResolvedVs {
            vs: vs.clone(),
            dest_ports,
        }
    }

    /// The mesh VirtualServices none of whose hosts names or covers a service, that the
    /// scope sees on port 80.
    fn hostless_vss(
        &self,
        s: &ScopeKey,
        listeners: &[EgressListener],
        proxyless: bool,
    ) -> Vec<ResolvedVs> {
        self.vss
            .iter()
            .copied()
            .filter(|vs| vs.binds_mesh() && !vs.hosts.is_empty())
            .filter(|vs| {
                !vs.hosts.iter().any(|h| {
                    self.services
                        .keys()
                        .any(|svc| rules::vs_host_specificity(h, svc).is_some())
                })
            })
            .filter(|vs| rules::sidecar_sees_hostless_vs(listeners, s.namespace(), proxyless, vs))
            .map(|vs| self.resolve(vs))
            .collect()
    }

    fn vs_for(
        &self,
        s: &ScopeKey,
        listeners: &[EgressListener],
        host: &str,
    ) -> Option<&'a VirtualService> {
        self.vss_covering(s, listeners, host).into_iter().next()
    }

    /// Every mesh VirtualService `listeners` (the egress listener serving a port) import
    /// that covers `host`, most specific host first, then by rank and key: the first is the
    /// one in effect.
    fn vss_covering(
        &self,
        s: &ScopeKey,
        listeners: &[EgressListener],
        host: &str,
    ) -> Vec<&'a VirtualService> {
        let mut list: Vec<_> = self
            .vss
            .iter()
            .copied()
            .filter(|vs| !rules::listeners_importing_vs(listeners, s.namespace(), vs).is_empty())
            .filter_map(|vs| {
                let spec = vs
                    .hosts
                    .iter()
                    .filter_map(|h| rules::vs_host_specificity(h, host))
                    .min()?;
                rules::vs_rank(vs, s.namespace()).map(|r| ((spec, r, &vs.key), vs))
            })
            .collect();
        list.sort_by(|a, b| a.0.cmp(&b.0));
        list.into_iter().map(|(_, vs)| vs).collect()
    }
}

/// The mesh settings in effect, and the snapshot with the mesh's defaults applied and
/// delegating routes expanded, as the dataflow routes them (borrowed when nothing changes).
fn prepare<'s>(mesh: &MeshConfig, snap: &'s Snapshot) -> (MeshSettings, Cow<'s, Snapshot>) {
    // Mesh records sort last (the last variant of `Record`): read from the end, not a scan.
    let settings = MeshSettings::in_effect(
        snap.records.iter().rev().map_while(|r| match r {
            Record::Mesh(m) => Some(m),
            _ => None,
        }),
        mesh,
    );
    let mut snap = Cow::Borrowed(snap);
    // The mesh's defaults complete the records that take them, as the dataflow's `mesh`
    // stage does; with none to apply (the usual case) the snapshot is used as it is.
    if !settings.completes_nothing() {
        snap = Cow::Owned(Snapshot {
            records: snap
                .records
                .iter()
                .map(|r| settings.complete(r.clone()))
                .collect(),
        });
    }
    // `ExternalName` aliases resolved, as the dataflow's `services` stage resolves them:
    // the service in effect per host (the least record), alias ones gone, the rest with the
    // aliases that resolve to them. Route destinations naming one are retargeted below.
    let mut alias_targets = BTreeMap::new();
    if snap
        .records
        .iter()
        .any(|r| matches!(r, Record::Service(s) if s.alias_for.is_some()))
    {
        let mut chosen: BTreeMap<&str, &Service> = BTreeMap::new();
        for r in &snap.records {
            if let Record::Service(s) = r {
                chosen.entry(s.hostname.as_str()).or_insert(s);
            }
        }
        alias_targets = rules::alias_targets(chosen.values().copied());
        let resolved: BTreeMap<Hostname, Service> = rules::with_aliases(chosen.values().copied())
            .into_iter()
            .map(|s| (s.hostname.clone(), s))
            .collect();
        let mut records = BTreeSet::new();
        for r in &snap.records {
            match r {
                // The alias in effect for its host stays, for the VirtualServices of its own
                // names (`View::alias_services`).
                Record::Service(s)
                    if s.alias_for.is_some() && chosen.get(s.hostname.as_str()) == Some(&s) =>
                {
                    records.insert(r.clone());
                }
                Record::Service(s) if !resolved.contains_key(&s.hostname) => {}
                Record::Service(s) if chosen.get(s.hostname.as_str()) == Some(&s) => {
                    records.insert(Record::Service(resolved[&s.hostname].clone()));
                }
                other => {
                    records.insert(other.clone());
                }
            }
        }
        snap = Cow::Owned(Snapshot { records });
    }
    if snap
        .records
        .iter()
        .any(|r| matches!(r, Record::VirtualService(vs) if !vs.delegates().is_empty()))
    {
        let all: BTreeMap<ConfigKey, VirtualService> = snap
            .records
            .iter()
            .filter_map(|r| match r {
                Record::VirtualService(vs) => Some((vs.key.clone(), vs.clone())),
                _ => None,
            })
            .collect();
        snap = Cow::Owned(Snapshot {
            records: snap
                .records
                .iter()
                .map(|r| match r {
                    Record::VirtualService(vs) if !vs.delegates().is_empty() => {
                        Record::VirtualService(crate::delegation::expand(vs, &all))
                    }
                    other => other.clone(),
                })
                .collect(),
        });
    }
    if !alias_targets.is_empty() {
        snap = Cow::Owned(Snapshot {
            records: snap
                .records
                .iter()
                .map(|r| match r {
                    Record::VirtualService(vs) => {
                        Record::VirtualService(rules::with_alias_destinations(vs, &alias_targets))
                    }
                    other => other.clone(),
                })
                .collect(),
        });
    }
    (settings, snap)
}

/// Computes every connected proxy's resources from scratch.
pub fn compute(mesh: &MeshConfig, snap: &Snapshot) -> ProxyConfigs {
    let (settings, snap) = prepare(mesh, snap);
    let snap = snap.as_ref();
    let v = View::new(snap, settings);
    let eps = v.resolved_endpoints();
    let index = EndpointIndex::new(&eps, &v);
    let scopes: Vec<(&Proxy, ScopeKey)> = v.proxies.iter().map(|p| (*p, v.scope_of(p))).collect();
    let scope_clusters = scope_clusters(&v, &index, &scopes);

    let mut out = ProxyConfigs::new();
    // Identical bodies built for different proxies are kept once (the work of building
    // them for every proxy is still done): a full recompute of a large mesh must fit in
    // memory.
    let mut bodies: HashMap<(ResourceType, String), Body> = HashMap::new();
    for (p, s) in &scopes {
        let mut res: Vec<Resource> = Vec::new();
        for (c, sel) in &scope_clusters[s] {
            res.push(c.clone());
            if let Some(sel) = sel {
                res.push(index.load_assignment(c, sel, s));
            }
        }
        match s {
            ScopeKey::Sidecar {
                interception_none,
                proxyless,
                ..
            } => {
                res.extend(sidecar_outbound(
                    &v,
                    mesh,
                    s,
                    *interception_none,
                    *proxyless,
                ));
                res.extend(inbound(&v, &index, p, s));
            }
            ScopeKey::Router {
                gateways,
                namespace,
                ..
            } => {
                let names: Vec<String> = scope_clusters[s]
                    .iter()
                    .map(|(c, _)| c.name.clone())
                    .collect();
                res.extend(router(&v, s, namespace, gateways, &names))
            }
        }
        if names_workload_certificate(&v, &index, p, s) {
            res.extend(crate::translate::secret::workload_secrets(p, &v.mesh));
        }
        // A proxy that holds nothing (a proxyless client seeing no service) has no entry,
        // as in the dataflow's output, which only knows proxies through their resources.
        for mut r in res {
            match bodies.get(&(r.rtype, r.version.clone())) {
                Some(b) if b.0 == r.body.0 => r.body = b.clone(),
                Some(_) => {}
                None => {
                    bodies.insert((r.rtype, r.version.clone()), r.body.clone());
                }
            }
            out.entry(p.id.clone())
                .or_default()
                .insert((r.rtype, r.name.clone()), r);
        }
    }
    out
}

/// What one partial recompute rebuilds (the push of an epoch, for the istio-style
/// baseline, which decides it from the hosts each scope sees).
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Proxies whose whole config is rebuilt.
    pub full: BTreeSet<ProxyId>,
    /// Proxies of which only the load assignments of `eds_hosts` are rebuilt.
    pub eds: BTreeSet<ProxyId>,
    pub eds_hosts: BTreeSet<Hostname>,
}

/// A partial recompute's result.
#[derive(Debug, Default)]
pub struct Planned {
    /// Per rebuilt proxy: everything it should hold (the plan's `full`), or the load
    /// assignments of the plan's hosts it should hold (`eds`).
    pub configs: ProxyConfigs,
    /// The scope of every rebuilt proxy.
    pub scopes: BTreeMap<ProxyId, ScopeKey>,
    /// The hosts each scope sees: the scopes asked about, and those of the rebuilt proxies.
    pub hosts: HashMap<ScopeKey, BTreeSet<Hostname>>,
    /// What `decide` asked for.
    pub plan: Plan,
}

/// Rebuilds some proxies' configs (or only some of their load assignments) with the same
/// rules and builders as [`compute`]. `decide` is given the hosts each of the `known` scopes
/// sees in this snapshot and returns what to rebuild. Whatever proxies of one scope share
/// is built once per scope (a cache of built resources shared across proxies); only the
/// inbound side is built per proxy.
pub fn compute_planned<'k>(
    mesh: &MeshConfig,
    snap: &Snapshot,
    known: impl IntoIterator<Item = &'k ScopeKey>,
    decide: impl FnOnce(&HashMap<ScopeKey, BTreeSet<Hostname>>) -> Plan,
) -> Planned {
    let (settings, snap) = prepare(mesh, snap);
    let v = View::new(snap.as_ref(), settings);
    let mut hosts: HashMap<ScopeKey, BTreeSet<Hostname>> = HashMap::new();
    for s in known {
        if !hosts.contains_key(s) {
            hosts.insert(s.clone(), visible_hosts(&v, s));
        }
    }
    let plan = decide(&hosts);
    // Only assignments to rebuild: only the endpoints of their hosts are resolved.
    let only = plan.full.is_empty().then_some(&plan.eds_hosts);
    let eps = v.resolved_endpoints_of(only);
    let index = EndpointIndex::new(&eps, &v);
    let mut out = Planned::default();
    let mut shared: HashMap<(ScopeKey, bool), Vec<Resource>> = HashMap::new();
    for p in &v.proxies {
        let full = plan.full.contains(&p.id);
        if !full && !plan.eds.contains(&p.id) {
            continue;
        }
        let s = v.scope_of(p);
        if !hosts.contains_key(&s) {
            hosts.insert(s.clone(), visible_hosts(&v, &s));
        }
        let part = shared.entry((s.clone(), full)).or_insert_with(|| {
            scope_part(&v, mesh, &index, &s, (!full).then_some(&plan.eds_hosts))
        });
        let mut res = part.clone();
        if full {
            res.extend(inbound(&v, &index, p, &s));
        }
        if full && names_workload_certificate(&v, &index, p, &s) {
            res.extend(crate::translate::secret::workload_secrets(p, &v.mesh));
        }
        let held = out.configs.entry(p.id.clone()).or_default();
        for r in res {
            held.insert((r.rtype, r.name.clone()), r);
        }
        out.scopes.insert(p.id.clone(), s);
    }
    out.hosts = hosts;
    out.plan = plan;
    out
}

/// Every host a scope sees, through any of its egress listeners.
fn visible_hosts(v: &View, s: &ScopeKey) -> BTreeSet<Hostname> {
    // `ExternalName` aliases too: a VirtualService of an alias's host routes its names.
    v.view_hosts(s)
        .into_iter()
        .chain(v.view_hosts_of(s, &v.alias_services))
        .flatten()
        .map(str::to_string)
        .collect()
}

/// What every proxy of scope `s` holds alike, in [`compute`]'s order; with `only`, just
/// the load assignments of those hosts.
fn scope_part(
    v: &View,
    mesh: &MeshConfig,
    index: &EndpointIndex,
    s: &ScopeKey,
    only: Option<&BTreeSet<Hostname>>,
) -> Vec<Resource> {
    let mut res = Vec::new();
    let mut names = Vec::new();
    for (c, sel) in clusters_of(v, index, s, only) {
        names.push(c.name.clone());
        let assignment = sel.as_ref().map(|sel| index.load_assignment(&c, sel, s));
        if only.is_none() {
            res.push(c);
        }
        res.extend(assignment);
    }
    if only.is_some() {
        return res;
    }
    match s {
        ScopeKey::Sidecar {
            interception_none,
            proxyless,
            ..
        } => res.extend(sidecar_outbound(v, mesh, s, *interception_none, *proxyless)),
        ScopeKey::Router {
            gateways,
            namespace,
            ..
        } => res.extend(router(v, s, namespace, gateways, &names)),
    }
    res
}

/// Clusters per scope (its fixed ones first) with the subset labels of each EDS cluster,
/// built once per scope however many proxies share it.
fn scope_clusters<'s>(
    v: &View,
    index: &EndpointIndex,
    scopes: &'s [(&Proxy, ScopeKey)],
) -> BTreeMap<&'s ScopeKey, Vec<(Resource, Option<EdsSel>)>> {
    let mut scope_clusters: BTreeMap<&ScopeKey, Vec<(Resource, Option<EdsSel>)>> = BTreeMap::new();
    for (_, s) in scopes {
        if scope_clusters.contains_key(s) {
            continue;
        }
        let list = clusters_of(v, index, s, None);
        scope_clusters.insert(s, list);
    }
    scope_clusters
}

/// A scope's clusters (its fixed ones first) with the subset labels of each EDS cluster;
/// with `only`, the outbound clusters of those hosts alone.
fn clusters_of(
    v: &View,
    index: &EndpointIndex,
    s: &ScopeKey,
    only: Option<&BTreeSet<Hostname>>,
) -> Vec<(Resource, Option<EdsSel>)> {
    let hosts: BTreeSet<&str> = v.view_hosts(s).into_iter().flatten().collect();
    let mut list: Vec<(Resource, Option<EdsSel>)> = match only {
        Some(_) => Vec::new(),
        None => assemble::fixed_clusters(s, v.mesh.connect_timeout_ms)
            .into_iter()
            .map(|r| (r, None))
            .collect(),
    };
    // The Secrets a `credentialName` may take: the scope's namespace's (none for gRPC).
    let ns_secrets: Vec<&TlsSecret> = v
        .secrets
        .iter()
        .copied()
        .filter(|sec| !s.is_proxyless() && sec.key.namespace == s.namespace())
        .collect();
    let client = crate::client_tls::ClientSecrets {
        namespace: if s.is_proxyless() { "" } else { s.namespace() },
        secrets: &ns_secrets,
    };
    for h in hosts {
        if only.is_some_and(|o| !o.contains(h)) {
            continue;
        }
        let svc = v.services[h];
        let dr = v.dr_for(s, svc);
        for (res, _port, labels) in cluster::outbound_all_with(
            index.identified(svc),
            dr,
            s.is_proxyless(),
            &ClusterDefaults::of_client(&v.mesh, matches!(s, ScopeKey::Router { .. })),
            client,
        ) {
            match labels {
                // A DNS cluster balanced by locality: built for this scope's clients.
                Some(sel) if sel.inline_hosts.is_some() => list.push((
                    cluster::localized_dns(&res, &sel, &sel.client_class(s)),
                    None,
                )),
                labels => list.push((res, labels)),
            }
        }
        if let (None, Some(dr), false) = (only, dr, s.is_proxyless()) {
            list.extend(client.resources(dr).into_iter().map(|(r, _)| (r, None)));
        }
    }
    list
}

/// Resolved endpoints looked up by host and port (assignments) and by IP (inbound ports).
struct EndpointIndex<'e> {
    by_host: HashMap<(&'e str, u16), Vec<&'e Endpoint>>,
    /// Each with the host and service port it was resolved to.
    by_ip: HashMap<&'e str, Vec<(&'e str, u16, &'e Endpoint)>>,
    /// The services whose endpoints run as known service accounts, with their SPIFFE
    /// identities added: built once per recompute, not per scope.
    identified: HashMap<&'e str, Service>,
}

impl<'e> EndpointIndex<'e> {
    fn new(eps: &'e [((Hostname, u16), Endpoint)], v: &View) -> Self {
        let mut by_host: HashMap<(&str, u16), Vec<&Endpoint>> = HashMap::new();
        for ((h, port), ep) in eps {
            by_host.entry((h.as_str(), *port)).or_default().push(ep);
        }
        let mut by_ip: HashMap<&str, Vec<(&str, u16, &Endpoint)>> = HashMap::new();
        for ((h, port), ep) in eps {
            by_ip
                .entry(ep.ip.as_str())
                .or_default()
                .push((h.as_str(), *port, ep));
        }
        let mut identities: HashMap<&str, BTreeSet<&(String, String)>> = HashMap::new();
        for ((h, _), ep) in eps {
            if let Some(id) = &ep.identity {
                identities.entry(h.as_str()).or_default().insert(id);
            }
        }
        let identified = identities
            .into_iter()
            .filter_map(|(h, ids)| {
                let svc = v.services.get(h)?;
                let ids: Vec<String> = ids
                    .into_iter()
                    .map(|(ns, sa)| v.mesh.spiffe_id(ns, sa))
                    .collect();
                Some((h, svc.with_identities(&ids)))
            })
            .collect();
        EndpointIndex {
            by_host,
            by_ip,
            identified,
        }
    }

    /// `svc` with the SPIFFE identities of its endpoints, as clusters are built from it.
    fn identified<'s>(&'s self, svc: &'s Service) -> &'s Service {
        self.identified.get(svc.hostname.as_str()).unwrap_or(svc)
    }

    /// An assignment per (cluster, subset labels) from the endpoints of that host and port
    /// (endpoints looked up by host and port, in order; still rebuilt for every proxy).
    fn load_assignment(&self, c: &Resource, sel: &EdsSel, s: &ScopeKey) -> Resource {
        let (host, port) = cluster_host_port(&c.name);
        let members = self
            .by_host
            .get(&(host.as_str(), port))
            .into_iter()
            .flatten()
            .copied()
            .filter(|ep| rules::labels_match(&sel.labels, &ep.labels));
        let class = sel.client_class(s);
        let locality = sel.locality.as_deref().map(|m| (m, &class));
        endpoint::load_assignment_for(&c.name, members, locality)
    }
}

/// The egress listener at `idx` alone: VirtualServices are selected per egress listener.
fn listener_at(listeners: &[EgressListener], idx: usize) -> &[EgressListener] {
    listeners.get(idx..=idx).unwrap_or(&[])
}

/// Per port of a sidecar: (address, bound) of its TCP listener, and its TCP services.
type TcpPorts<'a> = BTreeMap<u16, (PortListener, BTreeMap<&'a str, Vec<ResolvedVs>>)>;

/// A sidecar scope's route configurations and outbound listeners.
fn sidecar_outbound(
    v: &View,
    mesh: &MeshConfig,
    s: &ScopeKey,
    interception_none: bool,
    proxyless: bool,
) -> Vec<Resource> {
    let mut res = Vec::new();
    let spec = ScopeSpec::new(v.sidecar_spec(s).cloned(), &v.mesh);
    let listeners = rules::egress_listeners(spec.sidecar.as_ref());
    let mut rows: BTreeMap<u16, (UnknownHosts, BTreeMap<&str, Option<ResolvedVs>>)> =
        BTreeMap::new();
    let mut catch_all_ports = BTreeSet::new();
    let mut api_listeners = BTreeSet::new();
    // Per port: how its TCP listener is reached, and the TCP services on it.
    let mut tcp_ports: TcpPorts = BTreeMap::new();
    for (port, allow_any) in assemble::sidecar_fixed_routes(&spec, interception_none, proxyless) {
        rows.entry(port).or_insert((allow_any, BTreeMap::new()));
    }
    for (idx, hosts) in v.view_hosts(s).into_iter().enumerate() {
        for h in hosts {
            let svc = v.services[h];
            for (port, addr, bind, detect) in
                rules::sidecar_tcp_ports(&listeners, idx, svc, interception_none, proxyless)
            {
                let entry = tcp_ports.entry(port).or_insert((
                    PortListener::new(addr, bind, detect, &spec),
                    BTreeMap::new(),
                ));
                let covering = v.vss_covering(s, listener_at(&listeners, idx), h);
                entry
                    .1
                    .insert(h, covering.into_iter().map(|vs| v.resolve(vs)).collect());
            }
            for (port, allow_any, catch_all) in rules::sidecar_route_ports(
                &listeners,
                idx,
                svc,
                interception_none,
                proxyless,
                &spec,
            ) {
                if proxyless {
                    api_listeners.insert((h, port));
                }
                if catch_all {
                    catch_all_ports.insert(port);
                }
                let entry = rows
                    .entry(port)
                    .or_insert((allow_any.clone(), BTreeMap::new()));
                entry.0 = allow_any;
                entry.1.insert(
                    h,
                    v.vs_for(s, listener_at(&listeners, idx), h)
                        .map(|vs| v.resolve(vs)),
                );
            }
        }
    }
    // `ExternalName` aliases that a VirtualService of their own governs, per HTTP port
    // they declare.
    let mut alias_rows: BTreeMap<u16, Vec<(Service, ResolvedVs)>> = BTreeMap::new();
    for (idx, hosts) in v
        .view_hosts_of(s, &v.alias_services)
        .into_iter()
        .enumerate()
    {
        for h in hosts {
            let alias = v.alias_services[h];
            let Some(vs) = v.vs_for(s, listener_at(&listeners, idx), h) else {
                continue;
            };
            for (port, _, _) in rules::sidecar_route_ports(
                &listeners,
                idx,
                alias,
                interception_none,
                proxyless,
                &spec,
            ) {
                alias_rows
                    .entry(port)
                    .or_default()
                    .push((alias.clone(), v.resolve(vs)));
            }
        }
    }
    let hashing = v.hashing(s);
    for (port, (allow_any, vhosts)) in rows {
        let vhosts = route::SidecarVhosts {
            aliases: alias_rows.remove(&port).unwrap_or_default(),
            services: vhosts
                .into_iter()
                .map(|(h, vs)| (v.services[h].clone(), vs))
                .collect(),
            hostless: if port == 80 {
                v.hostless_vss(s, &listeners, proxyless)
            } else {
                Vec::new()
            },
        };
        res.push(route::sidecar_route_config(
            port,
            s,
            &mesh.domain_suffix,
            &vhosts,
            allow_any,
            spec.default_retries.as_ref(),
            &hashing,
        ));
    }
    let http_ports = if interception_none {
        BTreeSet::new()
    } else {
        catch_all_ports
    };
    let listener_ports: BTreeSet<u16> =
        http_ports.iter().chain(tcp_ports.keys()).copied().collect();
    let idle = v.tcp_idle(s);
    for port in listener_ports {
        let tcp = tcp_ports.get(&port).map(|(how, targets)| {
            let targets: Vec<TcpTarget> = targets
                .iter()
                .map(|(h, vs)| (v.services[h].clone(), vs.clone()))
                .collect();
            (how, targets)
        });
        // The services it cannot reach are the dataflow's to report, not the oracle's.
        res.extend(
            assemble::sidecar_port_listener(
                s.source(),
                port,
                http_ports.contains(&port),
                tcp.as_ref().map(|(how, targets)| TcpPort {
                    how,
                    targets,
                    idle: &idle,
                }),
            )
            .listener,
        );
    }
    res.extend(assemble::sidecar_fixed_listeners(
        &spec,
        interception_none,
        proxyless,
    ));
    res.extend(api_listeners.into_iter().flat_map(|(h, port)| {
        listener::api_listeners(h, port, s.namespace(), &mesh.domain_suffix)
    }));
    with_idle_timeout(s, res)
}

/// A scope's resources as its proxies get them: listeners with their `IDLE_TIMEOUT`.
fn with_idle_timeout(s: &ScopeKey, res: Vec<Resource>) -> Vec<Resource> {
    res.into_iter()
        .map(|r| assemble::apply_idle_timeout(s.idle_timeout_ns(), r))
        .collect()
}

/// Whether the proxy's config names its workload certificate: an `ISTIO_MUTUAL` cluster of
/// its scope (with auto mTLS: any cluster), `virtualInbound` with a port of its own (its mTLS
/// chain; unless Sidecar `ingress` replaces them), a Sidecar `ingress` listener without `tls`,
/// a router's `ISTIO_MUTUAL` gateway server.
fn names_workload_certificate(v: &View, index: &EndpointIndex, p: &Proxy, s: &ScopeKey) -> bool {
    let hosts: BTreeSet<&str> = v.view_hosts(s).into_iter().flatten().collect();
    // With auto mTLS, any scope but a proxyless client's may name it.
    let mtls = (v.mesh.auto_mtls && !s.is_proxyless())
        || hosts.iter().any(|h| {
            v.dr_for(s, v.services[h])
                .is_some_and(|dr| dr.uses_istio_mutual())
        });
    let ScopeKey::Sidecar {
        interception_none,
        proxyless,
        ..
    } = s
    else {
        // A router: an `ISTIO_MUTUAL` server of a Gateway selecting it too.
        let ScopeKey::Router { gateways, .. } = s else {
            return mtls;
        };
        return mtls
            || gateways
                .iter()
                .filter_map(|k| v.gateways.get(k))
                .any(|g| g.uses_istio_mutual());
    };
    if *proxyless {
        return mtls;
    }
    // An `ingress` listener without `tls` has an mTLS chain; `ingress` replaces the proxy's
    // own ports.
    let ingress = v.sidecar_spec(s).map(|sc| &sc.ingress);
    let mtls_ingress = ingress.is_some_and(|i| i.iter().any(|l| l.tls.is_none()));
    let own_port = !*interception_none
        && ingress.is_none_or(|i| i.is_empty())
        && p.ips
            .iter()
            .any(|ip| index.by_ip.get(ip.as_str()).is_some_and(|e| !e.is_empty()));
    mtls || mtls_ingress || own_port
}

/// The proxy's own ports; a proxyless client, a router, and a sidecar without capture
/// whose Sidecar has no `ingress` have no inbound side.
fn inbound(v: &View, index: &EndpointIndex, p: &Proxy, s: &ScopeKey) -> Vec<Resource> {
    let ScopeKey::Sidecar {
        interception_none,
        proxyless,
        ..
    } = s
    else {
        return Vec::new();
    };
    let (interception_none, proxyless) = (*interception_none, *proxyless);
    let sidecar = v
        .sidecar_spec(s)
        .filter(|_| !proxyless)
        .and_then(SidecarInbound::of);
    let connect_timeout_ms = v.mesh.connect_timeout_ms;
    // Without capture and without Sidecar `ingress`, the proxy has no inbound side: its own
    // ports give neither listeners nor clusters, as in Istio.
    let no_inbound = interception_none && sidecar.as_ref().is_none_or(|sc| sc.ingress.is_empty());
    // Each own endpoint's port, with the service port it serves.
    let own_ports: Vec<(u16, OwnPort)> = p
        .ips
        .iter()
        .filter(|_| !proxyless && !no_inbound)
        .flat_map(|ip| index.by_ip.get(ip.as_str()).into_iter().flatten())
        .filter_map(|(h, svc_port, ep)| {
            let svc = v.services.get(h)?;
            let sp = svc.ports.iter().find(|sp| sp.port == *svc_port)?;
            let own = OwnPort {
                host: h.to_string(),
                service_port: *svc_port,
                protocol: sp.protocol,
            };
            Some((ep.port, own))
        })
        .collect();
    let own: Vec<(u16, Protocol)> = own_ports.iter().map(|(p, o)| (*p, o.protocol)).collect();
    // Per port, the least service port reaching it.
    let mut chosen: BTreeMap<u16, &OwnPort> = BTreeMap::new();
    for (port, o) in &own_ports {
        let e = chosen.entry(*port).or_insert(o);
        if o < *e {
            *e = o;
        }
    }
    let mut ports: BTreeSet<u16> = chosen.keys().copied().collect();
    ports.extend(
        sidecar
            .iter()
            .flat_map(|sc| sc.ingress.iter().map(|l| l.port)),
    );
    let seen: BTreeSet<&str> = if chosen.is_empty() {
        BTreeSet::new()
    } else {
        v.view_hosts(s).into_iter().flatten().collect()
    };
    let mut res: Vec<Resource> = ports
        .iter()
        .filter_map(|port| {
            let own = chosen.get(port).copied();
            let rule = own
                .filter(|o| seen.contains(o.host.as_str()))
                .and_then(|o| v.inbound_dr_for(s, v.services.get(o.host.as_str())?))
                .map(|dr| dr.inbound_pools())
                .filter(|pools| !pools.is_empty());
            let spec = assemble::inbound_cluster_spec(*port, own, sidecar.as_ref(), rule.as_ref())?;
            Some(cluster::inbound(&spec, connect_timeout_ms))
        })
        .collect();
    if !interception_none {
        let ingress_ports = if proxyless {
            Vec::new()
        } else {
            assemble::ingress_ports(&ScopeSpec::new(v.sidecar_spec(s).cloned(), &v.mesh))
        };
        let l = listener::virtual_inbound(
            &InboundPort::of_proxy(own, ingress_ports),
            v.mesh.protocol_detection_timeout_ms,
        );
        res.push(assemble::apply_idle_timeout(p.idle_timeout_ns, l));
    }
    res
}

/// A router scope's listeners, routes and secrets, from the Gateways selecting it and the
/// Secrets of its namespace.
fn router(
    v: &View,
    s: &ScopeKey,
    namespace: &str,
    gateways: &[ConfigKey],
    clusters: &[String],
) -> Vec<Resource> {
    let gws: Vec<&Gateway> = gateways
        .iter()
        .filter_map(|k| v.gateways.get(k).copied())
        .collect();
    let resolved: Vec<(ConfigKey, ResolvedVs)> = v
        .vss
        .iter()
        .flat_map(|vs| {
            vs.gateways
                .iter()
                .filter_map(|g| rules::gateway_ref(g))
                .filter(|g| gateways.contains(g))
                .map(|g| (g, v.resolve(vs)))
                .collect::<Vec<_>>()
        })
        .collect();
    let pairs: Vec<(&ConfigKey, &ResolvedVs)> = resolved.iter().map(|(g, r)| (g, r)).collect();
    let secrets: Vec<&TlsSecret> = v
        .secrets
        .iter()
        .copied()
        .filter(|s| s.key.namespace == namespace)
        .collect();
    // AUTO_PASSTHROUGH serves no service outside the mesh.
    let clusters: Vec<String> = clusters
        .iter()
        .filter(|c| c.starts_with("outbound|"))
        .filter(|c| {
            v.services
                .get(crate::translate::outbound_cluster_host(c))
                .is_none_or(|svc| !svc.mesh_external)
        })
        .cloned()
        .collect();
    let res = assemble::router_resources(
        s.source(),
        namespace,
        &gws,
        &pairs,
        &secrets,
        &v.hashing(s),
        &v.tcp_idle(s),
        &clusters,
        s.gateway_ports(),
    )
    .resources
    .into_iter()
    .map(|(r, _)| r)
    .collect();
    with_idle_timeout(s, res)
}

/// `outbound|PORT|SUBSET|HOST` → (HOST, PORT).
fn cluster_host_port(name: &str) -> (String, u16) {
    let (port, _, host) = crate::translate::outbound_cluster_parts(name).unwrap_or_default();
    (host.to_string(), port.parse().unwrap_or(0))
}
