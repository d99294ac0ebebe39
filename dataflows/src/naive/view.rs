//! The snapshot read once per recompute ([`View`]): its records by kind, the rules merged per
//! namespace and host, and the lookups every stage asks of them (scopes, visible hosts, the
//! rule or VirtualService in effect, resolved endpoints).

use super::Snapshot;
use crate::model::*;
use crate::rules;
use crate::translate::cluster;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The records of a snapshot by kind, with what the stages look up in them.
pub(super) struct View<'a> {
    /// Per host, its service in each namespace that defines it (Kubernetes Services first,
    /// then by namespace): a scope gets the one its namespace picks ([`View::service`]).
    pub(super) services: BTreeMap<&'a str, Vec<&'a Service>>,
    /// The `ExternalName` alias services in effect (one per host), apart from `services`:
    /// they build nothing of their own, but a VirtualService may govern their names.
    pub(super) alias_services: BTreeMap<&'a str, Vec<&'a Service>>,
    endpoints: Vec<(&'a Hostname, &'a RawEndpoint)>,
    /// With what their clients must know of their PeerAuthentications ([`Workload::peer`]).
    workloads: Vec<Workload>,
    selections: Vec<(&'a Hostname, &'a WorkloadSelection)>,
    pub(super) vss: Vec<&'a VirtualService>,
    drs: Vec<&'a DestinationRule>,
    /// The rules merged per namespace and host, as the lookup sees them.
    dr_entries: Vec<(rules::DrEntry, DestinationRule)>,
    pub(super) gateways: BTreeMap<&'a ConfigKey, &'a Gateway>,
    sidecars: Vec<&'a Sidecar>,
    pub(super) proxies: Vec<&'a Proxy>,
    pub(super) secrets: Vec<&'a TlsSecret>,
    pub(super) security: Vec<&'a SecurityPolicy>,
    /// PeerAuthentication changes held part-way, by the workload's (namespace, IP).
    holds: BTreeMap<(&'a str, &'a str), Vec<&'a MtlsHold>>,
    /// Every `sourceLabels` selector of the VirtualServices, sorted.
    source_selectors: Vec<Labels>,
    /// The mesh settings in effect.
    pub(super) mesh: MeshSettings,
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
    /// What the security policies applying to `p` make its inbound side refuse: for a
    /// sidecar with its traffic captured (the proxies the stopgap reaches).
    pub(super) fn inbound_security(&self, p: &Proxy) -> InboundSecurity {
        if p.kind != ProxyKind::Sidecar || p.interception_none {
            return InboundSecurity::default();
        }
        let sec = self.composed_security(p);
        if sec.is_open() {
            InboundSecurity::default()
        } else {
            sec
        }
    }

    /// The policies that apply to `p` and fail it closed (for a sidecar: every one, as its
    /// bound `ingress` listeners take them whether its traffic is captured or not), composed.
    fn composed_security(&self, p: &Proxy) -> InboundSecurity {
        let root = self.mesh.root_namespace.as_str();
        let applying = self.security.iter().copied().filter(|s| {
            s.applies(&p.namespace, &p.labels, root) && s.composes(p.kind, !p.interception_none)
        });
        let mut sec = InboundSecurity::compose(applying, root)
            .with_trust_domains(&self.mesh.inbound_mtls.trust_domains);
        if p.kind == ProxyKind::Sidecar {
            for ip in &p.ips {
                for h in self
                    .holds
                    .get(&(p.namespace.as_str(), ip.as_str()))
                    .into_iter()
                    .flatten()
                {
                    sec = h.bridge(sec);
                }
            }
        }
        if sec.custom.is_empty() {
            return sec;
        }
        let by_host = self
            .services
            .iter()
            .map(|(h, list)| {
                let mut ns: Vec<String> = list.iter().map(|s| s.origin.namespace.clone()).collect();
                ns.sort();
                (h.to_string(), ns)
            })
            .collect();
        sec.with_providers(&resolve_providers(&self.mesh.ext_authz, &by_host))
    }

    pub(super) fn new(snap: &'a Snapshot, mesh: MeshSettings) -> Self {
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
            security: Vec::new(),
            holds: BTreeMap::new(),
            source_selectors: Vec::new(),
            by_locality: false,
            priority_keys: Vec::new(),
            router_targets: HashMap::new(),
        };
        // Records iterate in order, so the first service per host is the least one.
        for r in &snap.records {
            match r {
                Record::Service(s) if s.alias_for.is_some() => {
                    v.alias_services
                        .entry(s.hostname.as_str())
                        .or_default()
                        .push(s);
                }
                Record::Service(s) => {
                    v.services.entry(s.hostname.as_str()).or_default().push(s);
                }
                Record::Endpoint(h, e) => v.endpoints.push((h, e)),
                Record::Workload(w) => v.workloads.push(w.clone()),
                Record::VirtualService(vs) => v.vss.push(vs),
                Record::DestinationRule(dr) => v.drs.push(dr),
                Record::Gateway(g) => {
                    v.gateways.insert(&g.key, g);
                }
                Record::Sidecar(s) => v.sidecars.push(s),
                Record::Proxy(p) => v.proxies.push(p),
                Record::Secret(s) => v.secrets.push(s),
                Record::Selection(h, sel) => v.selections.push((h, sel)),
                Record::Security(p) => v.security.push(p),
                Record::MtlsHold(h) => v
                    .holds
                    .entry((h.workload.namespace.as_str(), h.ip.as_str()))
                    .or_default()
                    .push(h),
                // Translated into Gateways and VirtualServices by `prepare`.
                Record::Mesh(_) | Record::GatewayApi(_) => {}
            }
        }
        let root = v.mesh.root_namespace.clone();
        for w in &mut v.workloads {
            w.peer = PeerModes::client_view(v.security.iter().copied(), w, &root);
            let held = v.holds.get(&(w.origin.namespace.as_str(), w.ip.as_str()));
            if let Some(h) = held.into_iter().flatten().find(|h| h.workload == w.origin) {
                w.peer = h.client_view().cloned();
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
        if v.services.values().flatten().any(|s| s.prefer_close) {
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
    pub(super) fn resolved_endpoints(&self) -> Vec<((Hostname, u16), Endpoint)> {
        self.resolved_endpoints_of(None)
    }

    /// [`View::resolved_endpoints`], of the hosts in `only` if given.
    pub(super) fn resolved_endpoints_of(
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
            // Each endpoint serves its own namespace's service of the host.
            let Some(svc) = self.service_of_namespace(h, &e.origin.namespace) else {
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
            let Some(svc) = self.service_of_namespace(h, &sel.origin.namespace) else {
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

    pub(super) fn scope_of(&self, p: &Proxy) -> ScopeKey {
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
                        rules::sidecar_rank(sc, p, &self.mesh.root_namespace).map(|r| (r, sc))
                    })
                    .min_by(|a, b| (a.0, &a.1.key).cmp(&(b.0, &b.1.key)));
                let s = rules::sidecar_scope(p, chosen.map(|(_, sc)| sc.key.clone()));
                let binds = chosen.is_some_and(|(_, sc)| {
                    p.kind == ProxyKind::Sidecar && rules::binds_ingress(sc, p.interception_none)
                });
                let sec = self.composed_security(p);
                if binds && !sec.is_open() {
                    s.with_security(sec)
                } else {
                    s
                }
            }
            ProxyKind::Router => {
                let targets = p
                    .ips
                    .iter()
                    .filter_map(|ip| self.router_targets.get(ip))
                    .flatten()
                    .map(|(port, host, target)| (*port, host.as_str(), *target));
                let s = rules::router_scope(
                    p,
                    self.gateways
                        .values()
                        .filter(|g| rules::gateway_selects(g, p))
                        .map(|g| g.key.clone())
                        .collect(),
                )
                .with_gateway_ports(rules::gateway_ports(targets));
                match self.composed_security(p).for_router() {
                    Some(sec) => s.with_security(sec),
                    None => s,
                }
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
        s.with_path_normalization(self.mesh.path_normalization)
    }

    pub(super) fn sidecar_spec(&self, s: &ScopeKey) -> Option<&'a Sidecar> {
        match s {
            ScopeKey::Sidecar {
                sidecar: Some(k), ..
            } => self.sidecars.iter().copied().find(|sc| &sc.key == k),
            _ => None,
        }
    }

    /// The service of host `h` proxies reading config in namespace `ns` get
    /// ([`HostServices::for_namespace`]).
    pub(super) fn service(&self, ns: &str, h: &str) -> Option<&'a Service> {
        let list = self.services.get(h)?;
        pick_for_namespace(list, ns).map(|i| list[i])
    }

    /// The service namespace `ns` defines for host `h`, if any.
    pub(super) fn service_of_namespace(&self, h: &str, ns: &str) -> Option<&'a Service> {
        self.services
            .get(h)?
            .iter()
            .copied()
            .find(|s| s.namespace() == ns)
    }

    /// Hosts visible through each egress listener of the scope.
    pub(super) fn view_hosts(&self, s: &ScopeKey) -> Vec<BTreeSet<&'a str>> {
        self.view_hosts_of(s, &self.services)
    }

    /// Per egress listener of the scope, the hosts of `services` it sees.
    pub(super) fn view_hosts_of(
        &self,
        s: &ScopeKey,
        services: &BTreeMap<&'a str, Vec<&'a Service>>,
    ) -> Vec<BTreeSet<&'a str>> {
        let spec = self.sidecar_spec(s);
        rules::egress_listeners(spec)
            .iter()
            .map(|l| {
                services
                    .iter()
                    .filter(|(_, list)| {
                        l.hosts.iter().any(|pat| {
                            list.iter()
                                .any(|svc| rules::egress_visible(pat, s.namespace(), svc))
                        })
                    })
                    .map(|(h, _)| *h)
                    .collect()
            })
            .collect()
    }

    pub(super) fn dr_for(&self, s: &ScopeKey, svc: &Service) -> Option<&DestinationRule> {
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
    pub(super) fn inbound_dr_for(&self, s: &ScopeKey, svc: &Service) -> Option<&DestinationRule> {
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
    pub(super) fn hashing(&self, s: &ScopeKey) -> Hashing {
        let hosts: BTreeSet<&str> = self.view_hosts(s).into_iter().flatten().collect();
        hosts
            .into_iter()
            .filter_map(|h| {
                let hh = cluster::hashing(self.dr_for(s, self.service(s.namespace(), h)?)?);
                (!hh.is_empty()).then(|| (h.to_string(), hh))
            })
            .collect()
    }

    /// The rule's own `tcp.idleTimeout` of the hosts the scope sees, where the rule in effect
    /// sets one.
    pub(super) fn tcp_idle(&self, s: &ScopeKey) -> TcpTimeouts {
        let hosts: BTreeSet<&str> = self.view_hosts(s).into_iter().flatten().collect();
        hosts
            .into_iter()
            .filter_map(|h| {
                let t = self
                    .dr_for(s, self.service(s.namespace(), h)?)?
                    .tcp_timeout()?;
                Some((h.to_string(), t))
            })
            .collect()
    }

    pub(super) fn resolve(&self, vs: &VirtualService) -> ResolvedVs {
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
            // The service the VirtualService's own namespace gets, as the dataflow resolves it.
            let svc = self
                .service(&vs.key.namespace, &d.host)
                .or_else(|| self.services.get(d.host.as_str())?.first().copied());
            if let Some(svc) = svc {
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
    pub(super) fn hostless_vss(
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

    pub(super) fn vs_for(
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
    pub(super) fn vss_covering(
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
