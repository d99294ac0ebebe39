//! Kubernetes `ExternalName` aliases: chains resolved to the host at their end, the
//! services in effect with their aliases, and route destinations that name an alias.

use crate::model::*;
use std::collections::BTreeMap;

/// Each `ExternalName` alias resolved to the host at the end of its chain (`raw`: alias host
/// → the host it names), as Istio's `resolveServiceAliases` does: chains of any length
/// resolve; an alias whose chain comes back to a host already on it (a loop, which Istio
/// drops as Kubernetes DNS answers NXDOMAIN for it) is left out.
pub fn resolve_aliases(raw: &BTreeMap<Hostname, Hostname>) -> BTreeMap<Hostname, Hostname> {
    raw.keys()
        .filter_map(|alias| match alias_chain(raw, alias) {
            (chain, false) => Some((alias.clone(), (*chain.last()?).clone())),
            (_, true) => None,
        })
        .collect()
}

/// The hosts the chain from `alias` passes through (`raw`: alias host → the host it
/// names), in order: the host it names, the host that one names, and so on to the end of
/// the chain, or to the first host seen again; and whether it came back (a loop).
pub fn alias_chain<'a>(
    raw: &'a BTreeMap<Hostname, Hostname>,
    alias: &'a Hostname,
) -> (Vec<&'a Hostname>, bool) {
    let mut seen = std::collections::BTreeSet::from([alias]);
    let mut chain = Vec::new();
    let mut at = alias;
    while let Some(next) = raw.get(at) {
        if !seen.insert(next) {
            return (chain, true);
        }
        chain.push(next);
        at = next;
    }
    (chain, false)
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
}
