//! Clusters per scope and their load assignments, from the resolved endpoints indexed by host
//! and port and by IP ([`EndpointIndex`]).

use super::view::View;
use crate::assemble;
use crate::model::*;
use crate::rules;
use crate::translate::{cluster, endpoint};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Clusters per scope (its fixed ones first) with the subset labels of each EDS cluster,
/// built once per scope however many proxies share it.
pub(super) fn scope_clusters<'s>(
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
pub(super) fn clusters_of(
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
        let Some(svc) = v.service(s.namespace(), h) else {
            continue;
        };
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
pub(super) struct EndpointIndex<'e> {
    by_host: HashMap<(&'e str, u16), Vec<&'e Endpoint>>,
    /// Each with the host and service port it was resolved to.
    pub(super) by_ip: HashMap<&'e str, Vec<(&'e str, u16, &'e Endpoint)>>,
    /// The services whose endpoints run as known service accounts, with their SPIFFE
    /// identities added: built once per recompute, not per scope.
    /// Keyed by host and the namespace of the service.
    identified: HashMap<(&'e str, &'e str), Service>,
}

impl<'e> EndpointIndex<'e> {
    pub(super) fn new(eps: &'e [((Hostname, u16), Endpoint)], v: &View) -> Self {
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
        let mut identities: HashMap<(&str, &str), BTreeSet<&(String, String)>> = HashMap::new();
        for ((h, _), ep) in eps {
            if let Some(id) = &ep.identity {
                identities
                    .entry((h.as_str(), ep.service_namespace()))
                    .or_default()
                    .insert(id);
            }
        }
        let identified = identities
            .into_iter()
            .filter_map(|((h, ns), ids)| {
                let svc = v.service_of_namespace(h, ns)?;
                let ids: Vec<String> = ids
                    .into_iter()
                    .map(|(ns, sa)| v.mesh.spiffe_id(ns, sa))
                    .collect();
                Some(((h, ns), svc.with_identities(&ids)))
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
        self.identified
            .get(&(svc.hostname.as_str(), svc.namespace()))
            .unwrap_or(svc)
    }

    /// An assignment per (cluster, subset labels) from the endpoints of that host and port
    /// (endpoints looked up by host and port, in order; still rebuilt for every proxy).
    pub(super) fn load_assignment(&self, c: &Resource, sel: &EdsSel, s: &ScopeKey) -> Resource {
        let (host, port) = cluster_host_port(&c.name);
        let members = self
            .by_host
            .get(&(host.as_str(), port))
            .into_iter()
            .flatten()
            .copied()
            .filter(|ep| {
                ep.service_namespace() == sel.service_namespace
                    && rules::labels_match(&sel.labels, &ep.labels)
            });
        let class = sel.client_class(s);
        let locality = sel.locality.as_deref().map(|m| (m, &class));
        endpoint::load_assignment_for(&c.name, members, locality)
    }
}

/// `outbound|PORT|SUBSET|HOST` → (HOST, PORT).
fn cluster_host_port(name: &str) -> (String, u16) {
    let (port, _, host) = crate::translate::outbound_cluster_parts(name).unwrap_or_default();
    (host.to_string(), port.parse().unwrap_or(0))
}
