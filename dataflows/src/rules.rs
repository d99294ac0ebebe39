//! Istio's selection and visibility rules as plain predicates, shared by the incremental
//! dataflow and the naive recompute used as its oracle.

use crate::model::*;
use std::collections::BTreeMap;

/// `exportTo`: empty or `*` is everyone, `.` the owner's namespace, `~` no one.
pub fn exported_to(export_to: &[String], owner_ns: &str, ns: &str) -> bool {
    export_to.is_empty()
        || export_to
            .iter()
            .any(|e| e == "*" || (e == "." && owner_ns == ns) || e == ns)
}

/// A host pattern: `*`, `*.suffix`, or an exact name.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}")),
        None => pattern == host,
    }
}

/// How closely a VirtualService host covers a service host, lower first; `None` when it does
/// not cover it. As Istio picks the VirtualService of a sidecar's service: the host itself
/// (a wildcard service's own pattern included), then the longest wildcard that covers it
/// (`*.b.example.com` before `*.example.com` before `*`).
pub fn vs_host_specificity(vs_host: &str, host: &str) -> Option<(u8, usize)> {
    if vs_host == host {
        Some((0, 0))
    } else if host_matches(vs_host, host) {
        Some((1, usize::MAX - vs_host.len()))
    } else {
        None
    }
}

/// Every VirtualService host that may cover `host` ([`vs_host_specificity`]): the host
/// itself, `*.` before each suffix after a dot, and `*`. Joining on these finds the
/// wildcard VirtualServices of a host without comparing it to every VirtualService.
pub fn covering_patterns(host: &str) -> Vec<String> {
    let mut out = vec![host.to_string()];
    for (i, c) in host.char_indices() {
        if c == '.' {
            let pattern = format!("*.{}", &host[i + 1..]);
            if vs_host_specificity(&pattern, host).is_some() && !out.contains(&pattern) {
                out.push(pattern);
            }
        }
    }
    if host != "*" {
        out.push("*".to_string());
    }
    out
}

/// Whether two host patterns have a name in common, as Istio compares an egress listener's
/// imported hosts with a VirtualService's: equal names, a wildcard covering the other
/// name, or two wildcards one of which covers the other.
pub fn hosts_overlap(a: &str, b: &str) -> bool {
    match (a.strip_prefix('*'), b.strip_prefix('*')) {
        (Some(sa), Some(sb)) => sa.ends_with(sb) || sb.ends_with(sa),
        (Some(sa), None) => b.ends_with(sa),
        (None, Some(sb)) => a.ends_with(sb),
        (None, None) => a == b,
    }
}

/// A mesh VirtualService none of whose hosts names or covers any service of the registry:
/// Istio still gives sidecars a virtual host for each of its hosts, on the route
/// configuration of port 80 only (its `serviceByPort[80]` fallback), through the egress
/// listener serving that port. Does the scope in `scope_ns` with these egress `listeners`
/// see `vs` there? Its `exportTo` must admit the namespace, and one of the listener's
/// `ns/host` patterns must reach the VirtualService's namespace and overlap one of its
/// hosts. Proxyless clients have no port-80 route configuration.
pub fn sidecar_sees_hostless_vs(
    listeners: &[EgressListener],
    scope_ns: &str,
    proxyless: bool,
    vs: &VirtualService,
) -> bool {
    if proxyless || vs_rank(vs, scope_ns).is_none() {
        return false;
    }
    let serving = listeners
        .iter()
        .find(|l| l.port.as_ref().is_some_and(|p| p.number == 80))
        .or_else(|| listeners.iter().find(|l| l.port.is_none()));
    let Some(l) = serving else {
        return false;
    };
    listener_imports_vs(l, scope_ns, vs)
}

/// Does an egress listener import `vs`, as Istio's Sidecar scope selects VirtualServices:
/// one of its `ns/host` patterns reaches the VirtualService's own namespace (not its
/// hosts') and overlaps one of its hosts.
fn listener_imports_vs(l: &EgressListener, scope_ns: &str, vs: &VirtualService) -> bool {
    l.hosts.iter().any(|pattern| {
        egress_pattern(pattern, scope_ns).is_some_and(|(ns, host)| {
            let ns_ok = match ns {
                NsKey::Any => true,
                NsKey::Ns(n) => n == vs.key.namespace,
            };
            ns_ok && vs.hosts.iter().any(|h| hosts_overlap(&host, h))
        })
    })
}

/// The egress listeners (their indexes in `listeners`) of a sidecar scope that import the
/// mesh VirtualService `vs`. Istio selects VirtualServices per egress listener: a port's
/// routes (and TCP chains) use only those the listener serving the port imports, so a
/// VirtualService a listener's `hosts` do not import governs none of its hosts on that
/// listener's ports (a Sidecar importing `./*` keeps out the VirtualServices of other
/// namespaces, even for its own services), whatever the scope's other listeners import.
pub fn listeners_importing_vs(
    listeners: &[EgressListener],
    scope_ns: &str,
    vs: &VirtualService,
) -> Vec<usize> {
    listeners
        .iter()
        .enumerate()
        .filter(|(_, l)| listener_imports_vs(l, scope_ns, vs))
        .map(|(i, _)| i)
        .collect()
}

/// Every label of `selector` is present in `labels` with the same value.
pub fn labels_match(selector: &Labels, labels: &Labels) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Which namespaces an egress `ns/host` pattern reaches, seen from `scope_ns`.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum NsKey {
    Any,
    Ns(String),
}

/// Splits an egress host pattern into the namespace it selects and the host pattern;
/// `None` for `~/…` (nothing).
pub fn egress_pattern(pattern: &str, scope_ns: &str) -> Option<(NsKey, String)> {
    let (ns, host) = pattern.split_once('/').unwrap_or(("*", pattern));
    let key = match ns {
        "*" => NsKey::Any,
        "." => NsKey::Ns(scope_ns.to_string()),
        "~" => return None,
        n => NsKey::Ns(n.to_string()),
    };
    Some((key, host.to_string()))
}

/// Does egress pattern `pattern` make `svc` visible to a proxy in `scope_ns`?
pub fn egress_visible(pattern: &str, scope_ns: &str, svc: &Service) -> bool {
    match egress_pattern(pattern, scope_ns) {
        None => false,
        Some((ns, host)) => {
            let ns_ok = match ns {
                NsKey::Any => true,
                NsKey::Ns(n) => n == svc.namespace(),
            };
            ns_ok
                && host_matches(&host, &svc.hostname)
                && exported_to(&svc.export_to, svc.namespace(), scope_ns)
        }
    }
}

/// Rank of a Sidecar for a sidecar proxy (lower wins): a workloadSelector match in the
/// proxy's namespace, then the namespace default, then the root namespace default.
pub fn sidecar_rank(sc: &Sidecar, proxy: &Proxy, root_ns: &str) -> Option<u8> {
    if sc.key.namespace == proxy.namespace {
        match &sc.selector {
            Some(sel) if !sel.is_empty() => labels_match(sel, &proxy.labels).then_some(0),
            _ => Some(1),
        }
    } else if sc.key.namespace == root_ns && sc.selector.is_none() {
        Some(2)
    } else {
        None
    }
}

/// A Gateway applies to a router whose labels match its (non-empty) selector.
pub fn gateway_selects(gw: &Gateway, proxy: &Proxy) -> bool {
    !gw.selector.is_empty() && labels_match(&gw.selector, &proxy.labels)
}

/// The egress listeners of a scope: the Sidecar's, or one catch-all `*/*` listener.
pub fn egress_listeners(sc: Option<&Sidecar>) -> Vec<EgressListener> {
    match sc {
        Some(sc) if !sc.egress.is_empty() => sc.egress.clone(),
        _ => vec![EgressListener {
            port: None,
            bind: None,
            capture_none: false,
            hosts: vec!["*/*".into()],
        }],
    }
}

/// The namespace a cluster-local hostname belongs to (`name.ns.svc.<suffix>`).
pub fn host_namespace<'a>(host: &'a str, suffix: &str) -> Option<&'a str> {
    let prefix = host.strip_suffix(suffix)?.strip_suffix(".svc.")?;
    prefix.split_once('.').map(|(_, ns)| ns)
}

/// The `exportTo` of a DestinationRule as Istio indexes it: a rule with a
/// `workloadSelector` is its namespace's only (`.`), whatever it says; the others' list,
/// sorted, once each (the mesh's default already filled in where it set none).
pub fn dr_export_set(dr: &DestinationRule) -> Vec<String> {
    if dr.selector.is_some() {
        return vec![".".to_string()];
    }
    let mut out = dr.export_to.clone();
    out.sort();
    out.dedup();
    out
}

/// Which of Istio's per-namespace indexes of DestinationRules an entry is in: each is
/// merged on its own, so a rule may be merged into another in one and an entry of its
/// own in the next.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum DrIndex {
    /// The rules a namespace exports to itself: what its own proxies look at first.
    Local,
    /// The rules a namespace exports to other namespaces (not to itself alone).
    Exported,
    /// The rules a namespace exports to itself alone: what proxies of the root namespace
    /// look at first (kept for every namespace; read for the root only).
    RootLocal,
}

/// One DestinationRule as the lookup sees it, after the rules of one namespace for one
/// host have been merged ([`consolidate_drs`]): the rule it starts from, where it is and
/// what it covers.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct DrEntry {
    /// The host it is written for: a name or a wildcard (`*.example.com`, `*`).
    pub host: Hostname,
    pub namespace: String,
    pub index: DrIndex,
    /// Its place among the entries of its index, namespace and host (merge order).
    pub order: usize,
    /// What names the merged rule: the key of the rule it starts from, which the merged
    /// rule keeps. (The merged rule of an entry is the same in every index that has it,
    /// except in `RootLocal`, where fewer rules may merge: its name there ends in
    /// `#root-local`, which no Kubernetes name can.)
    pub key: ConfigKey,
    pub selector: Option<Labels>,
    /// [`dr_export_set`] of the rule it starts from.
    pub export: Vec<String>,
    /// Its merged policy names a `credentialName`.
    pub creds: bool,
}

impl DrEntry {
    /// Exported to a client in `ns`, as Istio checks an exported rule.
    fn exported_to(&self, ns: &str) -> bool {
        self.export.is_empty() || self.export.iter().any(|e| e == "*" || e == ns)
    }
}

/// In Istio's index of a namespace's own rules: exported to that namespace.
fn dr_local(export: &[String], ns: &str) -> bool {
    export.is_empty() || export.iter().any(|e| e == "*" || e == "." || e == ns)
}

/// Exported to its own namespace alone: not in Istio's index of exported rules.
fn dr_private_only(export: &[String], ns: &str) -> bool {
    export.len() == 1 && (export[0] == "." || export[0] == ns)
}

/// The order Istio merges and lists the rules of one namespace for one host in: rules
/// with a `workloadSelector` first, then by creation time, which meshflow does not have:
/// by name instead.
fn merge_order(a: &DestinationRule, b: &DestinationRule) -> std::cmp::Ordering {
    (a.selector.is_none(), &a.key).cmp(&(b.selector.is_none(), &b.key))
}

/// One merged rule: the rule it starts from, its `exportTo`, the merged rule, and the
/// keys of the rules merged into it, in order.
type MergedDr = (Vec<String>, DestinationRule, Vec<ConfigKey>);

/// Istio's merge of `rules` (already in [`merge_order`]), see [`consolidate_drs`].
fn merge_run(rules: &[&DestinationRule]) -> Vec<MergedDr> {
    let mut out: Vec<MergedDr> = Vec::new();
    for r in rules {
        let export = dr_export_set(r);
        let mut append = true;
        for (entry_export, merged, from) in out.iter_mut() {
            // Istio's test, entry by entry: the last comparison decides whether the rule
            // also becomes an entry of its own.
            let export_ok = export == *entry_export
                || (!entry_export.is_empty() && entry_export.iter().all(|e| export.contains(e)));
            if !export_ok || merged.selector != r.selector {
                append = true;
                continue;
            }
            append = false;
            for sub in &r.subsets {
                if !merged.subsets.iter().any(|s| s.name == sub.name) {
                    merged.subsets.push(sub.clone());
                }
            }
            if merged.traffic_policy.is_none() {
                merged.traffic_policy = r.traffic_policy.clone();
            }
            from.push(r.key.clone());
        }
        if append {
            out.push((export, (*r).clone(), vec![r.key.clone()]));
        }
    }
    out
}

/// Merges the DestinationRules of one namespace for one host (exact or wildcard) as Istio
/// does, in [`merge_order`], once per index ([`DrIndex`]) over the rules it holds: a later
/// rule whose `exportTo` equals that of an earlier entry, or includes it, is merged into
/// that entry (its subsets whose names are new are appended; its `trafficPolicy` is taken
/// only if the entry has none yet); it is an entry of its own unless it merged into the
/// last entry (Istio's enhanced merge, on by default, compares it with every entry and the
/// last comparison decides). Rules with a `workloadSelector` merge only with rules of the
/// same selector; unlike Istio, a rule without one never merges with one with (Istio
/// would fold a selector-less `exportTo: ["."]` rule into an earlier one with a selector,
/// which the proxies it does not select would then miss).
///
/// Each entry is returned with its merged rule (key, host, `exportTo` and selector of the
/// rule it starts from) and the keys of the rules merged into it, in order.
pub fn consolidate_drs(
    rules: &[&DestinationRule],
) -> Vec<(DrEntry, DestinationRule, Vec<ConfigKey>)> {
    let mut sorted: Vec<&DestinationRule> = rules.to_vec();
    sorted.sort_by(|a, b| merge_order(a, b));
    let mut out = Vec::new();
    for index in [DrIndex::Local, DrIndex::Exported, DrIndex::RootLocal] {
        let held: Vec<&DestinationRule> = sorted
            .iter()
            .copied()
            .filter(|r| {
                let export = dr_export_set(r);
                let ns = r.key.namespace.as_str();
                match index {
                    DrIndex::Local => dr_local(&export, ns),
                    DrIndex::Exported => !dr_private_only(&export, ns),
                    DrIndex::RootLocal => dr_private_only(&export, ns),
                }
            })
            .collect();
        for (order, (export, merged, from)) in merge_run(&held).into_iter().enumerate() {
            let mut key = merged.key.clone();
            if index == DrIndex::RootLocal {
                key.name.push_str("#root-local");
            }
            let entry = DrEntry {
                host: merged.host.clone(),
                namespace: merged.key.namespace.clone(),
                index,
                order,
                key,
                selector: merged.selector.clone(),
                export,
                creds: !merged.credential_tls().is_empty(),
            };
            out.push((entry, merged, from));
        }
    }
    out
}

/// What merging the rules of one namespace for one host leaves unused, one warning per
/// rule merged into an earlier one: which subsets of it an earlier rule already defines
/// (Istio keeps the first), and whether its `trafficPolicy` is set aside.
pub fn dr_merge_warnings(rules: &[&DestinationRule]) -> Vec<ConfigError> {
    let consolidated = consolidate_drs(rules);
    let mut out = Vec::new();
    for r in rules {
        let mut into: Vec<&(DrEntry, DestinationRule, Vec<ConfigKey>)> = consolidated
            .iter()
            .filter(|(e, m, from)| {
                m.key != r.key && from.contains(&r.key) && e.index != DrIndex::RootLocal
            })
            .collect();
        into.sort_by(|a, b| a.1.key.cmp(&b.1.key));
        into.dedup_by(|a, b| a.1.key == b.1.key);
        let Some((_, merged, _)) = into.first() else {
            continue;
        };
        let mut notes = Vec::new();
        // The subsets the merged rule takes from an earlier rule, not from this one.
        let shadowed: Vec<&str> = r
            .subsets
            .iter()
            .filter(|s| merged.subsets.iter().any(|m| m.name == s.name && m != *s))
            .map(|s| s.name.as_str())
            .collect();
        if !shadowed.is_empty() {
            notes.push(format!(
                "its subset(s) {} are defined by an earlier rule too, whose definition applies",
                shadowed.join(", ")
            ));
        }
        if r.traffic_policy.is_some() && merged.traffic_policy != r.traffic_policy {
            notes.push("its trafficPolicy is not used (an earlier rule's applies)".to_string());
        }
        let names: Vec<String> = into.iter().map(|(_, m, _)| m.key.name.clone()).collect();
        out.push(ConfigError {
            object: r.key.clone(),
            code: ErrorCode::DestinationRuleMerged,
            message: format!(
                "host {} has another DestinationRule in namespace {}: this one is merged into \
                 {} (rules merge in name order, as Istio merges them by creation time){}",
                r.host,
                r.key.namespace,
                names.join(", "),
                if notes.is_empty() {
                    String::new()
                } else {
                    format!("; {}", notes.join("; "))
                }
            ),
        });
    }
    out
}

/// The DestinationRule entry a proxy of `scope` uses for `host` (of a service in
/// `svc_ns`), among `entries` (those whose host covers it; others are ignored), as Istio
/// looks it up: first the rules its own namespace exports to itself (for a proxy in the
/// root namespace, those the root exports to itself alone), then those the service's
/// namespace exports to the proxy's, then those the root namespace exports to it. In each
/// namespace only the rules of the most specific host that covers it count (the host
/// itself, else the longest wildcard); once a namespace has some, the lookup stops there:
/// the entry of a `workloadSelector` the proxy matches, else the last entry without a
/// selector, else none.
pub fn dr_in_effect<'e>(
    entries: &[&'e DrEntry],
    scope: &ScopeKey,
    host: &str,
    svc_ns: &str,
    root_ns: &str,
) -> Option<&'e DrEntry> {
    dr_lookup(entries, scope, host, svc_ns, root_ns, true)
}

/// The entry whose connection pool a proxy's inbound clusters for `host` take: the same
/// lookup as [`dr_in_effect`], then the last entry without a `workloadSelector` (Istio
/// honours selectors for outbound traffic only).
pub fn dr_in_effect_inbound<'e>(
    entries: &[&'e DrEntry],
    scope: &ScopeKey,
    host: &str,
    svc_ns: &str,
    root_ns: &str,
) -> Option<&'e DrEntry> {
    dr_lookup(entries, scope, host, svc_ns, root_ns, false)
}

fn dr_lookup<'e>(
    entries: &[&'e DrEntry],
    scope: &ScopeKey,
    host: &str,
    svc_ns: &str,
    root_ns: &str,
    outbound: bool,
) -> Option<&'e DrEntry> {
    let p = scope.namespace();
    let most_specific = |keep: &dyn Fn(&DrEntry) -> bool| -> Vec<&'e DrEntry> {
        let covering: Vec<(&'e DrEntry, (u8, usize))> = entries
            .iter()
            .copied()
            .filter(|e| keep(e))
            .filter_map(|e| vs_host_specificity(&e.host, host).map(|s| (e, s)))
            .collect();
        let Some(best) = covering.iter().map(|(_, s)| *s).min() else {
            return Vec::new();
        };
        let mut list: Vec<&'e DrEntry> = covering
            .into_iter()
            .filter(|(_, s)| *s == best)
            .map(|(e, _)| e)
            .collect();
        list.sort_by_key(|e| e.order);
        list
    };
    let choose = |list: Vec<&'e DrEntry>| -> Option<&'e DrEntry> {
        list.iter()
            .copied()
            .find(|e| {
                outbound
                    && e.namespace == p
                    && e.selector
                        .as_ref()
                        .is_some_and(|sel| scope.source_labels().contains(sel))
            })
            .or_else(|| list.iter().copied().rev().find(|e| e.selector.is_none()))
    };
    let own = if p != root_ns {
        most_specific(&|e| e.index == DrIndex::Local && e.namespace == p)
    } else {
        most_specific(&|e| e.index == DrIndex::RootLocal && e.namespace == root_ns)
    };
    if !own.is_empty() {
        return choose(own);
    }
    for ns in [svc_ns, root_ns] {
        let list: Vec<&'e DrEntry> =
            most_specific(&|e| e.index == DrIndex::Exported && e.namespace == ns)
                .into_iter()
                .filter(|e| e.exported_to(p))
                .collect();
        if !list.is_empty() {
            return choose(list);
        }
    }
    None
}

/// Could an entry in `ns` be looked up by a proxy in `scope_ns` for a service in `svc_ns`
/// ([`dr_in_effect`] reads no other): what the dataflow keeps before choosing.
pub fn dr_entry_relevant(ns: &str, scope_ns: &str, svc_ns: &str, root_ns: &str) -> bool {
    ns == scope_ns || ns == svc_ns || ns == root_ns
}

/// Rank of a mesh VirtualService for a proxy in `scope_ns` (lower wins): its own namespace
/// first, then others that export to it. Among VirtualServices covering a host this decides
/// only between equally specific hosts ([`vs_host_specificity`] comes first).
pub fn vs_rank(vs: &VirtualService, scope_ns: &str) -> Option<u8> {
    let ns = vs.key.namespace.as_str();
    (vs.binds_mesh() && exported_to(&vs.export_to, ns, scope_ns))
        .then_some(u8::from(ns != scope_ns))
}

/// `gateways` entries of a VirtualService name Gateways as `ns/name`.
pub fn gateway_ref(reference: &str) -> Option<ConfigKey> {
    if reference == "mesh" {
        return None;
    }
    let (ns, name) = reference.split_once('/')?;
    Some(ConfigKey::new(Kind::Gateway, ns, name))
}

/// How an explicit egress listener binds: (address, bind_to_port).
pub fn egress_bind(l: &EgressListener, interception_none: bool) -> (String, bool) {
    let capture_none = l.capture_none || interception_none;
    let addr = l.bind.clone().unwrap_or_else(|| {
        if capture_none {
            "127.0.0.1".into()
        } else {
            "0.0.0.0".into()
        }
    });
    (addr, capture_none || l.bind.is_some())
}

/// The sidecar route configurations a visible service joins through egress listener
/// `idx`: `(port, allow_any, catch_all)`. An explicit listener serves only its own port; the
/// catch-all serves every other HTTP port, and only where traffic is captured (a port whose
/// protocol is told per connection gets its routes, not the port's catch-all HTTP chain).
///
/// A proxyless gRPC client dials services by name, so every port of a service it sees gets
/// routes whatever its declared protocol (gRPC speaks HTTP/2 on it regardless), with no
/// passthrough host and no capture listener.
pub fn sidecar_route_ports(
    listeners: &[EgressListener],
    idx: usize,
    svc: &Service,
    interception_none: bool,
    proxyless: bool,
    spec: &ScopeSpec,
) -> Vec<(u16, UnknownHosts, bool)> {
    let Some(l) = listeners.get(idx) else {
        return Vec::new();
    };
    if proxyless {
        let explicit = explicit_ports(listeners);
        return svc
            .ports
            .iter()
            .map(|p| p.port)
            .filter(|p| match &l.port {
                Some(ep) => *p == ep.number,
                None => !explicit.contains(p),
            })
            .map(|p| (p, UnknownHosts::None, false))
            .collect();
    }
    // A port whose protocol is told per connection gets routes for what is told HTTP, on
    // chains for the service's own addresses ([`sidecar_tcp_ports`]), not the catch-all's.
    let http_ports = svc
        .ports
        .iter()
        .filter(|p| p.protocol.carries_http())
        .map(|p| (p.port, p.protocol.is_http()));
    match &l.port {
        // A TCP egress listener proxies its port as TCP ([`sidecar_tcp_ports`]): no routes.
        Some(ep) if ep.protocol.is_tcp() => Vec::new(),
        Some(ep) => {
            let unknown = if egress_bind(l, interception_none).1 {
                UnknownHosts::None
            } else {
                UnknownHosts::captured(spec)
            };
            // One naming no protocol routes what it tells HTTP for every service on its
            // port, whatever the port declares (the listener's protocol governs).
            let detects = ep.protocol == Protocol::Auto;
            svc.ports
                .iter()
                .filter(|p| p.port == ep.number && (detects || p.protocol.carries_http()))
                .map(|p| (p.port, unknown.clone(), false))
                .collect()
        }
        None if interception_none => Vec::new(),
        None => {
            let explicit = explicit_ports(listeners);
            http_ports
                .filter(|(p, _)| !explicit.contains(p))
                .map(|(p, declared)| (p, UnknownHosts::captured(spec), declared))
                .collect()
        }
    }
}

/// Hosts of a gateway server that a VirtualService in `vs_ns` may attach to, as
/// the domain it serves: the more specific of the two patterns.
pub fn gateway_domain(
    server_host: &str,
    gw_ns: &str,
    vs_ns: &str,
    vs_host: &str,
) -> Option<String> {
    let (ns, host) = server_host.split_once('/').unwrap_or(("*", server_host));
    let ns_ok = ns == "*" || (ns == "." && gw_ns == vs_ns) || ns == vs_ns;
    if !ns_ok {
        return None;
    }
    if host_matches(host, vs_host) {
        Some(vs_host.to_string())
    } else if host_matches(vs_host, host) {
        Some(host.to_string())
    } else {
        None
    }
}

/// As [`gateway_ref`], owning its input for use in dataflow closures.
#[allow(clippy::ptr_arg)] // `filter_map` over `&String` items needs exactly this signature
pub fn gateway_ref_str(reference: &String) -> Option<ConfigKey> {
    gateway_ref(reference)
}

/// The scope of a sidecar-scoped proxy under the Sidecar resource `sidecar` (if any). A
/// proxyless client captures nothing, whatever its metadata says, and has no connection
/// manager or `tcp_proxy` an `IDLE_TIMEOUT` would apply to.
pub fn sidecar_scope(p: &Proxy, sidecar: Option<ConfigKey>) -> ScopeKey {
    let proxyless = p.kind == ProxyKind::Proxyless;
    ScopeKey::Sidecar {
        namespace: p.namespace.clone(),
        sidecar,
        interception_none: p.interception_none || proxyless,
        proxyless,
        source_labels: Vec::new(),
        locality: None,
        priority_labels: None,
        idle_timeout_ns: p.idle_timeout_ns.filter(|_| !proxyless),
    }
}

/// The scope of a router in its namespace, selected by `gateways` (sorted).
pub fn router_scope(p: &Proxy, gateways: Vec<ConfigKey>) -> ScopeKey {
    ScopeKey::Router {
        namespace: p.namespace.clone(),
        gateways,
        source_labels: Vec::new(),
        locality: None,
        priority_labels: None,
        idle_timeout_ns: p.idle_timeout_ns,
        ports: Vec::new(),
    }
}

/// Where a router's servers listen, from the services of its own workload: `targets` holds
/// `(service port, host, target port)` for every endpoint of a service at one of the
/// router's IPs. As Istio's gateways (`resolvePorts` for gateways selected by labels), a
/// server of port N listens on the target port of the first such service with a port N, and
/// on N itself where none has one; meshflow takes the services in host order. Only the ports
/// that change are kept, sorted: a router without a Service of its own keeps an empty map,
/// and so its scope.
pub fn gateway_ports<'a>(
    targets: impl IntoIterator<Item = (u16, &'a str, u16)>,
) -> Vec<(u16, u16)> {
    let mut first: BTreeMap<u16, (&str, u16)> = BTreeMap::new();
    for (port, host, target) in targets {
        let e = first.entry(port).or_insert((host, target));
        if (host, target) < *e {
            *e = (host, target);
        }
    }
    first
        .into_iter()
        .filter(|(port, (_, target))| port != target)
        .map(|(port, (_, target))| (port, target))
        .collect()
}

/// The ports explicit egress listeners claim: the catch-all listener leaves them alone.
fn explicit_ports(listeners: &[EgressListener]) -> Vec<u16> {
    listeners
        .iter()
        .filter_map(|l| l.port.as_ref().map(|p| p.number))
        .collect()
}

/// The sidecar TCP listeners a visible service joins through egress listener `idx`:
/// `(port, address, bind_to_port, detect)`, `detect`: the listener names no protocol, so it
/// tells HTTP from TCP per connection for every service on it (as Istio's listener protocol
/// governs its services). An explicit egress listener of protocol TCP takes the
/// service's port of its number (proxied as TCP whatever the port's own protocol, as the
/// listener declares); the catch-all takes every TCP port no explicit listener claims, and
/// only where traffic is captured, and the TCP side of each port whose protocol is told per
/// connection. Proxyless clients speak gRPC only.
pub fn sidecar_tcp_ports(
    listeners: &[EgressListener],
    idx: usize,
    svc: &Service,
    interception_none: bool,
    proxyless: bool,
) -> Vec<(u16, String, bool, bool)> {
    let Some(l) = listeners.get(idx) else {
        return Vec::new();
    };
    if proxyless {
        return Vec::new();
    }
    match &l.port {
        Some(ep) if ep.protocol.carries_tcp() => {
            let (addr, bind) = egress_bind(l, interception_none);
            let detect = ep.protocol == Protocol::Auto;
            svc.ports
                .iter()
                .filter(|p| p.port == ep.number)
                .map(|p| (p.port, addr.clone(), bind, detect))
                .collect()
        }
        Some(_) => Vec::new(),
        None if interception_none => Vec::new(),
        None => {
            let explicit = explicit_ports(listeners);
            svc.ports
                .iter()
                .filter(|p| p.protocol.carries_tcp() && !explicit.contains(&p.port))
                .map(|p| (p.port, "0.0.0.0".to_string(), false, false))
                .collect()
        }
    }
}

/// Each `ExternalName` alias resolved to the host at the end of its chain (`raw`: alias host
/// → the host it names), as Istio's `resolveServiceAliases` does: chains of any length
/// resolve; an alias whose chain comes back to a host already on it (a loop, which Istio
/// drops as Kubernetes DNS answers NXDOMAIN for it) is left out.
pub fn resolve_aliases(raw: &BTreeMap<Hostname, Hostname>) -> BTreeMap<Hostname, Hostname> {
    raw.iter()
        .filter_map(|(alias, target)| {
            let mut seen = std::collections::BTreeSet::from([alias, target]);
            let mut t = target;
            while let Some(next) = raw.get(t) {
                if !seen.insert(next) {
                    return None;
                }
                t = next;
            }
            Some((alias.clone(), t.clone()))
        })
        .collect()
}

/// The services in effect with `ExternalName` aliases resolved: each alias service leaves
/// (it has no cluster, listener or virtual host of its own), and the service each resolves
/// to lists it among its [`Service::aliases`], sorted.
pub fn with_aliases<'s>(services: impl IntoIterator<Item = &'s Service>) -> Vec<Service> {
    let services: Vec<&Service> = services.into_iter().collect();
    let raw: BTreeMap<Hostname, Hostname> = services
        .iter()
        .filter_map(|s| Some((s.hostname.clone(), s.alias_for.clone()?)))
        .collect();
    let mut aliases: BTreeMap<Hostname, Vec<Hostname>> = BTreeMap::new();
    for (alias, target) in resolve_aliases(&raw) {
        aliases.entry(target).or_default().push(alias);
    }
    services
        .into_iter()
        .filter(|s| s.alias_for.is_none())
        .map(|s| {
            let mut s = s.clone();
            s.aliases = aliases.get(&s.hostname).cloned().unwrap_or_default();
            s
        })
        .collect()
}

/// An `ExternalName` alias as route destinations see it: the host it names and its ports.
pub type AliasTarget = (Hostname, Vec<u16>);

/// The alias services among `services` (one per host), by host.
pub fn alias_targets<'s>(
    services: impl IntoIterator<Item = &'s Service>,
) -> BTreeMap<Hostname, AliasTarget> {
    services
        .into_iter()
        .filter_map(|s| {
            let target = s.alias_for.clone()?;
            Some((
                s.hostname.clone(),
                (target, s.ports.iter().map(|p| p.port).collect()),
            ))
        })
        .collect()
}

/// Every destination host of a VirtualService's routes and mirrors (HTTP, TCP, TLS), once.
pub fn destination_hosts(vs: &VirtualService) -> Vec<Hostname> {
    let mut hosts: Vec<Hostname> = vs
        .http
        .iter()
        .flat_map(|r| {
            r.route
                .iter()
                .chain(r.mirrors.iter().map(|m| &m.destination))
        })
        .chain(vs.tcp.iter().flat_map(|r| r.route.iter()))
        .chain(vs.tls.iter().flat_map(|r| r.route.iter()))
        .map(|d| d.host.clone())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// `vs` with each route or mirror destination that names an `ExternalName` alias sent where
/// Istio's `GetDestinationCluster` sends it: the host the alias names (one hop: an alias of an
/// alias names a host without a cluster, as in Istio), remembering the alias
/// ([`RouteDestination::via_alias`]): without a port of its own the destination goes to the
/// alias's only port, else the port the request arrived on — and a sidecar's route for a port
/// the alias does not declare keeps the alias's host (see `translate::route`).
pub fn with_alias_destinations(
    vs: &VirtualService,
    aliases: &BTreeMap<Hostname, AliasTarget>,
) -> VirtualService {
    let mut vs = vs.clone();
    let retarget = |d: &mut RouteDestination| {
        if let Some((target, ports)) = aliases.get(&d.host) {
            let alias = std::mem::replace(&mut d.host, target.clone());
            d.via_alias = Some(AliasVia {
                host: alias,
                ports: ports.clone(),
            });
        }
    };
    for r in &mut vs.http {
        r.route.iter_mut().for_each(retarget);
        r.mirrors
            .iter_mut()
            .for_each(|m| retarget(&mut m.destination));
    }
    for r in &mut vs.tcp {
        r.route.iter_mut().for_each(retarget);
    }
    for r in &mut vs.tls {
        r.route.iter_mut().for_each(retarget);
    }
    vs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain of aliases of any length resolves to its end; one that comes back to a host
    /// on it (a loop, or an alias naming itself) resolves to nothing, as in Istio.
    #[test]
    fn alias_chains_of_any_length_resolve_and_loops_do_not() {
        let name = |i: usize| format!("a{i}.default.svc.cluster.local");
        let mut raw: BTreeMap<Hostname, Hostname> =
            (0..100).map(|i| (name(i), name(i + 1))).collect();
        let resolved = resolve_aliases(&raw);
        assert_eq!(resolved.len(), 100);
        assert_eq!(resolved[&name(0)], name(100));
        raw.insert(name(99), name(50));
        raw.insert("self.example".into(), "self.example".into());
        let resolved = resolve_aliases(&raw);
        assert!(resolved.is_empty(), "{resolved:?}");
    }

    /// The patterns a host is joined on are exactly the VirtualService hosts that cover it,
    /// ranked as Istio ranks them: the host itself, then longer wildcards before shorter.
    #[test]
    fn covering_patterns_are_the_hosts_that_cover_and_rank_by_specificity() {
        let hosts = [
            "a.b.example.com",
            "*.cdn.example",
            "example.com",
            "*",
            "localhost",
        ];
        let candidates = [
            "a.b.example.com",
            "*.b.example.com",
            "*.example.com",
            "*.com",
            "*",
            "*.cdn.example",
            "*.example",
            "*.x.cdn.example",
            "b.example.com",
            "example.com",
            "*.localhost",
            "localhost",
        ];
        for h in hosts {
            let patterns = covering_patterns(h);
            for c in candidates {
                assert_eq!(
                    patterns.iter().any(|p| p == c),
                    vs_host_specificity(c, h).is_some(),
                    "{c} covering {h}: {patterns:?}"
                );
            }
        }
        let rank = |p: &str| vs_host_specificity(p, "a.b.example.com");
        assert!(rank("a.b.example.com") < rank("*.b.example.com"));
        assert!(rank("*.b.example.com") < rank("*.example.com"));
        assert!(rank("*.example.com") < rank("*"));
        assert_eq!(rank("b.example.com"), None);
        assert_eq!(
            vs_host_specificity("*.cdn.example", "*.cdn.example"),
            Some((0, 0))
        );
        assert!(vs_host_specificity("*.example", "*.cdn.example").is_some());
        assert_eq!(
            vs_host_specificity("*.x.cdn.example", "*.cdn.example"),
            None
        );
    }
    fn dr(ns: &str, name: &str, host: &str, export: &[&str], subsets: &[&str]) -> DestinationRule {
        DestinationRule {
            key: ConfigKey::new(Kind::DestinationRule, ns, name),
            host: host.to_string(),
            export_to: export.iter().map(|e| e.to_string()).collect(),
            traffic_policy: None,
            subsets: subsets
                .iter()
                .map(|n| Subset {
                    name: n.to_string(),
                    labels: Labels::new(),
                    traffic_policy: None,
                })
                .collect(),
            selector: None,
        }
    }

    fn names(dr: &DestinationRule) -> Vec<&str> {
        dr.subsets.iter().map(|s| s.name.as_str()).collect()
    }

    /// Istio's enhanced merge, per index: equal `exportTo` merges; a later rule exporting
    /// to more namespaces merges into the earlier entry too, and is an entry of its own in
    /// the index of exported rules, where that entry is not; the key kept is the first's.
    #[test]
    fn consolidation_merges_by_export_to_as_istio_does() {
        let a = dr("ns", "a", "h", &["."], &["a"]);
        let b = dr("ns", "b", "h", &["."], &["a", "b"]);
        let c = dr("ns", "c", "h", &[".", "x"], &["c"]);
        let d = dr("ns", "d", "h", &["y"], &["d"]);
        let out = consolidate_drs(&[&d, &c, &b, &a]);
        let got: Vec<(&str, DrIndex, Vec<&str>, Vec<&str>)> = out
            .iter()
            .map(|(e, m, from)| {
                (
                    e.key.name.as_str(),
                    e.index,
                    names(m),
                    from.iter().map(|k| k.name.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "a",
                    DrIndex::Local,
                    vec!["a", "b", "c"],
                    vec!["a", "b", "c"]
                ),
                ("c", DrIndex::Exported, vec!["c"], vec!["c"]),
                ("d", DrIndex::Exported, vec!["d"], vec!["d"]),
                (
                    "a#root-local",
                    DrIndex::RootLocal,
                    vec!["a", "b"],
                    vec!["a", "b"]
                ),
            ]
        );
        let warnings = dr_merge_warnings(&[&a, &b, &c, &d]);
        let objects: Vec<&str> = warnings.iter().map(|w| w.object.name.as_str()).collect();
        assert_eq!(objects, vec!["b", "c"]);
    }

    /// The lookup stops at the first namespace with a rule covering the host; a proxy of
    /// the root namespace looks at the root's private rules first, then the service's
    /// namespace, then the root's exported rules.
    #[test]
    fn lookup_order_and_root_namespace_proxies() {
        let scope = |ns: &str| {
            sidecar_scope(
                &Proxy {
                    id: "p".into(),
                    kind: ProxyKind::Sidecar,
                    ips: vec![],
                    namespace: ns.into(),
                    labels: Labels::new(),
                    interception_none: false,
                    service_account: None,
                    locality: String::new(),
                    idle_timeout_ns: None,
                },
                None,
            )
        };
        let host = "r.svc-ns.svc.cluster.local";
        let rules = [
            dr("root", "root-public", "*", &["*"], &[]),
            dr("svc-ns", "svc-exact", host, &["*"], &[]),
            dr("client", "client-wild", "*.svc.cluster.local", &["."], &[]),
        ];
        let entries: Vec<(DrEntry, DestinationRule, Vec<ConfigKey>)> =
            rules.iter().flat_map(|r| consolidate_drs(&[r])).collect();
        let refs: Vec<&DrEntry> = entries.iter().map(|(e, _, _)| e).collect();
        let pick = |ns: &str| {
            dr_in_effect(&refs, &scope(ns), host, "svc-ns", "root").map(|e| e.key.name.clone())
        };
        assert_eq!(pick("client").as_deref(), Some("client-wild"));
        assert_eq!(pick("elsewhere").as_deref(), Some("svc-exact"));
        assert_eq!(pick("root").as_deref(), Some("svc-exact"));
        let only_root: Vec<&DrEntry> = refs
            .iter()
            .copied()
            .filter(|e| e.key.name == "root-public")
            .collect();
        assert_eq!(
            dr_in_effect(&only_root, &scope("root"), host, "svc-ns", "root").map(|e| &e.key.name),
            Some(&"root-public".to_string())
        );
    }
}
