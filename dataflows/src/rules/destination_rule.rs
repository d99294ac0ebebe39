//! DestinationRules: how the rules of one namespace for one host merge (Istio's
//! consolidation, per index), what merging leaves unused, and which entry a proxy uses
//! for a host, outbound and inbound.

use super::hosts::vs_host_specificity;
use crate::model::*;

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
        // A BackendTLSPolicy's rule (they sort after the written ones) fills the TLS of
        // every written entry of the host, whatever its `exportTo` or selector — a written
        // rule that did not take it would send plaintext to its proxies — and is an entry
        // of its own only where there is none.
        if r.key.kind == Kind::BackendTlsPolicy && !out.is_empty() {
            for (_, merged, from) in out.iter_mut() {
                fill_policy_tls(merged, r);
                from.push(r.key.clone());
            }
            continue;
        }
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
            if r.key.kind == Kind::BackendTlsPolicy {
                fill_policy_tls(merged, r);
            } else if merged.traffic_policy.is_none() {
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

/// A BackendTLSPolicy's rule merged into an earlier entry (a written rule goes first, as
/// Istio orders them): it fills the `tls` the entry leaves unset — the entry's own, and
/// on a port, that port's entry (a port the entry has none for gets one, with the entry's
/// other settings, so that only `tls` differs there) — and nothing else.
fn fill_policy_tls(merged: &mut DestinationRule, policy: &DestinationRule) {
    let Some(from) = &policy.traffic_policy else {
        return;
    };
    let into = merged.traffic_policy.get_or_insert_with(Default::default);
    // The policies' ports first: on its own port a sectioned policy goes before one on the
    // whole Service.
    for (port, entry) in &from.port_level {
        match into.port_level.iter_mut().find(|(p, _)| p == port) {
            Some((_, e)) if !e.sets_tls() => e.tls = entry.tls.clone(),
            Some(_) => {}
            None => {
                let mut e = into.at_port(None).0;
                e.tls = entry.tls.clone();
                e.tls_disabled = false;
                into.port_level.push((*port, e));
            }
        }
    }
    if from.tls.is_some() && !into.sets_tls() {
        into.tls = from.tls.clone();
    }
    // A written port entry replaces the settings above it whole, the rule's and a
    // subset's: one that leaves `tls` unset would send plaintext where the policy requires
    // TLS. Each takes the policy's TLS for its port.
    let tls_at = |port: u16| {
        from.port_level
            .iter()
            .find(|(p, _)| *p == port)
            .and_then(|(_, e)| e.tls.clone())
            .or_else(|| from.tls.clone())
    };
    for (port, e) in into.port_level.iter_mut() {
        if !e.sets_tls() {
            e.tls = tls_at(*port);
        }
    }
    into.port_level.sort_by_key(|(p, _)| *p);
    for sub in &mut merged.subsets {
        for (port, e) in sub
            .traffic_policy
            .iter_mut()
            .flat_map(|tp| tp.port_level.iter_mut())
        {
            if !e.sets_tls() {
                e.tls = tls_at(*port);
            }
        }
    }
}

/// Where a BackendTLSPolicy's rule merged into `merged` is not in effect, because the
/// written rule sets `tls` there first: "the whole Service", "port N".
pub fn policy_tls_overridden(merged: &DestinationRule, policy: &DestinationRule) -> Vec<String> {
    let Some(from) = &policy.traffic_policy else {
        return Vec::new();
    };
    let Some(into) = &merged.traffic_policy else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if from.tls.is_some() && into.tls != from.tls {
        out.push("the whole Service".to_string());
    }
    for (port, e) in &into.port_level {
        let wanted = from
            .port_level
            .iter()
            .find(|(p, _)| p == port)
            .map(|(_, w)| &w.tls)
            .unwrap_or(&from.tls);
        if wanted.is_some() && e.tls != *wanted {
            out.push(format!("port {port}"));
        }
    }
    for sub in &merged.subsets {
        for (port, e) in sub
            .traffic_policy
            .iter()
            .flat_map(|tp| tp.port_level.iter())
        {
            let wanted = from
                .port_level
                .iter()
                .find(|(p, _)| p == port)
                .map(|(_, w)| &w.tls)
                .unwrap_or(&from.tls);
            if wanted.is_some() && e.tls != *wanted {
                out.push(format!("subset {} port {port}", sub.name));
            }
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
        let in_index = |r: &DestinationRule| {
            let export = dr_export_set(r);
            let ns = r.key.namespace.as_str();
            match index {
                DrIndex::Local => dr_local(&export, ns),
                DrIndex::Exported => !dr_private_only(&export, ns),
                DrIndex::RootLocal => dr_private_only(&export, ns),
            }
        };
        // A BackendTLSPolicy's rule also fills the written entries of an index its own
        // export does not reach: every entry of the host must originate its TLS.
        let written = sorted
            .iter()
            .any(|r| r.key.kind != Kind::BackendTlsPolicy && in_index(r));
        let held: Vec<&DestinationRule> = sorted
            .iter()
            .copied()
            .filter(|r| in_index(r) || (written && r.key.kind == Kind::BackendTlsPolicy))
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
        if r.key.kind == Kind::BackendTlsPolicy {
            // A policy fills what the written rules leave: said only where they set `tls`.
            let held = policy_tls_overridden(merged, r);
            if !held.is_empty() {
                let names: Vec<&str> = into.iter().map(|(_, m, _)| m.key.name.as_str()).collect();
                out.push(ConfigError {
                    object: r.key.clone(),
                    code: ErrorCode::DestinationRuleMerged,
                    message: format!(
                        "host {}: DestinationRule {} sets its own tls, which applies instead of \
                         this policy's on {} (a written DestinationRule goes first, as in Istio)",
                        r.host,
                        names.join(", "),
                        held.join(", ")
                    ),
                });
            }
            continue;
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::sidecar::sidecar_scope;

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
