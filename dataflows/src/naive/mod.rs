//! A naive full recompute of every proxy's resources from a snapshot of the inputs: plain
//! loops over everything, no incrementality. It exists as the oracle the dataflow is tested
//! against (and as the full-push baseline's engine): same rules, same builders, no joins.
//! Lookups are indexed (endpoints by host and port, workloads by IP) so a full recompute
//! costs what rebuilding every proxy's config costs, not a scan of every endpoint per
//! cluster.

mod clusters;
mod prepare;
mod router;
mod sidecar;
mod view;

use crate::assemble;
use crate::model::*;
use clusters::{clusters_of, scope_clusters, EndpointIndex};
use prepare::prepare;
use router::router;
use sidecar::{inbound, sidecar_outbound};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use view::View;

/// The state of all inputs at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub records: BTreeSet<Record>,
}

/// Per proxy, per (type, name): the resource it should hold.
pub type ProxyConfigs = BTreeMap<ProxyId, BTreeMap<(ResourceType, String), Resource>>;

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
        with_file_secrets(&mut res);
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
        if full {
            with_file_secrets(&mut res);
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

/// With the secrets of the files the resources name (`translate::secret::file_secrets`).
fn with_file_secrets(res: &mut Vec<Resource>) {
    let files: Vec<Resource> = res
        .iter()
        .flat_map(crate::translate::secret::file_secrets)
        .collect();
    res.extend(files);
}

/// A scope's resources as its proxies get them: listeners with their `IDLE_TIMEOUT` and the
/// mesh's `pathNormalization`, and a router scope's refusals.
fn with_idle_timeout(s: &ScopeKey, res: Vec<Resource>) -> Vec<Resource> {
    res.into_iter()
        .map(|r| assemble::apply_idle_timeout(s.idle_timeout_ns(), r))
        .map(|r| assemble::apply_path_normalization(s.path_normalization(), r))
        .filter_map(|r| assemble::apply_router_security(s, r))
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
            v.service(s.namespace(), h)
                .and_then(|svc| v.dr_for(s, svc))
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
    // A STRICT catch-all, or a STRICT `ingress` port's mTLS chains.
    let strict = !*interception_none && v.inbound_security(p).names_certificate();
    // An `ingress` listener without `tls` has an mTLS chain; `ingress` replaces the proxy's
    // own ports.
    let ingress = v.sidecar_spec(s).map(|sc| &sc.ingress);
    let mtls_ingress = ingress.is_some_and(|i| i.iter().any(|l| l.tls.is_none()));
    let own_port = !*interception_none
        && ingress.is_none_or(|i| i.is_empty())
        && p.ips
            .iter()
            .any(|ip| index.by_ip.get(ip.as_str()).is_some_and(|e| !e.is_empty()));
    mtls || mtls_ingress || own_port || strict
}
