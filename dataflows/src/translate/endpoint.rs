//! EDS: one ClusterLoadAssignment per EDS cluster, shared by every proxy holding it; and
//! the inline assignments of DNS clusters, built the same way.

use super::socket_address;
use crate::model::{
    priority_entry, priority_label_value, ClientClass, Endpoint, InlineHost, LocalityDistribute,
    LocalityMode, Resource, ResourceType,
};
use envoy_types::pb::envoy::config::core::v3::{address, Address, HealthStatus, Locality, Pipe};
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint::HostIdentifier, ClusterLoadAssignment, Endpoint as EnvoyEndpoint, LbEndpoint,
    LocalityLbEndpoints,
};
use envoy_types::pb::google::protobuf::UInt32Value;
use prost::Message;

/// The endpoint metadata Envoy picks a cluster's transport socket by
/// (`filter_metadata["envoy.transport_socket_match"]`), and the value of its `tlsMode` key
/// for an endpoint that runs a sidecar: Istio's names. The clusters' auto mTLS matches on
/// them (re-exported as `translate::cluster::{TRANSPORT_SOCKET_MATCH, TLS_MODE_ISTIO}`).
pub const TRANSPORT_SOCKET_MATCH: &str = "envoy.transport_socket_match";
pub const TLS_MODE_ISTIO: &str = "istio";

/// The assignment for `cluster` from its endpoints, in a canonical order (sorted, deduplicated)
/// so equal sets encode to equal bytes. Endpoints that are not ready are left out, as Istio does.
/// Endpoints are grouped by locality (Istio's `region/zone/subzone`); each carries its
/// weight, and each group the sum of its endpoints' weights, as Istio sends them.
pub fn load_assignment<'a>(
    cluster: &str,
    endpoints: impl IntoIterator<Item = &'a Endpoint>,
) -> Resource {
    load_assignment_for(cluster, endpoints, None)
}

/// As [`load_assignment`], for a client in locality `client` (`region/zone/subzone`, ""
/// unknown) when `mode` balances by locality: [`apply_locality`].
pub fn load_assignment_for<'a>(
    cluster: &str,
    endpoints: impl IntoIterator<Item = &'a Endpoint>,
    locality: Option<(&LocalityMode, &ClientClass)>,
) -> Resource {
    // Under `failoverPriority`, each endpoint's rank by the labels it shares with the
    // client.
    let ranked = locality.and_then(|(mode, client)| match mode {
        LocalityMode::Prioritized { labels, .. } => {
            Some((labels, client.labels.as_deref().unwrap_or_default()))
        }
        _ => None,
    });
    let addrs = endpoints
        .into_iter()
        .filter(|e| e.ready)
        .map(|e| {
            let rank = ranked.map_or(0, |(labels, values)| {
                label_rank(labels, values, &e.labels, &e.placement.locality)
            });
            (
                e.placement.locality.as_str(),
                rank,
                e.ip.as_str(),
                e.port,
                e.placement.weight.unwrap_or(1).max(1),
                takes_mtls(e),
            )
        })
        .collect();
    let mut cla = ranked_assignment(cluster, addrs);
    if let Some((mode, client)) = locality {
        apply_locality(&mut cla, mode, &client.locality);
    }
    Resource::new(
        ResourceType::Endpoint,
        cluster.to_string(),
        cla.encode_to_vec(),
    )
}

/// Istio's rank of an endpoint under `failoverPriority` `labels` for a client with
/// `values` of the labels read: 0 when it shares every label, else the number of labels
/// from the first one it does not share to the end (a label counts only when every
/// earlier one is shared). A `key=value` entry compares with that value instead of the
/// client's; a label either side lacks is "".
fn label_rank(
    labels: &[String],
    values: &[(String, String)],
    own: &crate::model::Labels,
    locality: &str,
) -> u32 {
    for (j, entry) in labels.iter().enumerate() {
        let (key, fixed) = priority_entry(entry);
        let client = fixed.unwrap_or_else(|| {
            values
                .iter()
                .find(|(k, _)| k == key)
                .map_or("", |(_, v)| v.as_str())
        });
        if client != priority_label_value(key, own, locality) {
            return u32::try_from(labels.len() - j).unwrap_or(u32::MAX);
        }
    }
    0
}

/// A DNS cluster's inline assignment of `hosts` for clients of `client` under `mode`:
/// ranked by `failoverPriority` and balanced by locality exactly as an EDS assignment of
/// the same endpoints ([`load_assignment_for`]).
pub(crate) fn localized_assignment(
    cluster: &str,
    hosts: &[InlineHost],
    mode: &LocalityMode,
    client: &ClientClass,
) -> ClusterLoadAssignment {
    let values = client.labels.as_deref().unwrap_or_default();
    let addrs = hosts
        .iter()
        .map(|h| {
            let rank = match mode {
                LocalityMode::Prioritized { labels, .. } => {
                    label_rank(labels, values, &h.labels, &h.locality)
                }
                _ => 0,
            };
            (
                h.locality.as_str(),
                rank,
                h.address.as_str(),
                h.port,
                h.weight,
                runs_sidecar(&h.labels),
            )
        })
        .collect();
    let mut cla = ranked_assignment(cluster, addrs);
    apply_locality(&mut cla, mode, &client.locality);
    cla
}

/// Istio's locality load balancing of an assignment for a client in locality `client`:
/// with `distribute`, the first entry whose `from` the client matches weighs each `to`
/// locality's groups by its percentage (shared among the groups a wildcard matches, in
/// proportion to their weights, rounded up) and empties the groups no `to` names; with
/// failover, each group's priority is 0 for the client's own subzone, 1 its zone, 2 its
/// region, 3 elsewhere — 4 for a region other than the one a `failover` entry from the
/// client's region names — renumbered from 0 without gaps. Under `failoverPriority` the
/// groups' label ranks (set by [`load_assignment_for`]) are renumbered from 0 without
/// gaps, and only with `failover` entries ranked by locality on top of that.
pub fn apply_locality(cla: &mut ClusterLoadAssignment, mode: &LocalityMode, client: &str) {
    let client = parse_locality(client);
    match mode {
        LocalityMode::Distribute(entries) => distribute(cla, &client, entries),
        LocalityMode::Failover(failover) => failover_ranks(cla, failover, &client),
        LocalityMode::Prioritized { failover, .. } => {
            let ranks: Vec<u32> = cla.endpoints.iter().map(|g| g.priority).collect();
            renumber(cla, ranks);
            if !failover.is_empty() {
                failover_ranks(cla, failover, &client);
            }
        }
    }
}

/// Each group's priority by what its locality shares with `client` (and the region
/// `failover`s), under the priority it has (`priority * 5 + rank`, as Istio composes them).
fn failover_ranks(
    cla: &mut ClusterLoadAssignment,
    failover: &[(String, String)],
    client: &Locality,
) {
    let ranks: Vec<u32> = cla
        .endpoints
        .iter()
        .map(|g| {
            let at = g.locality.clone().unwrap_or_default();
            let mut rank = lb_priority(client, &at);
            if rank == 3 {
                if let Some((_, to)) = failover.iter().find(|(from, _)| *from == client.region) {
                    if at.region != *to {
                        rank = 4;
                    }
                }
            }
            g.priority * 5 + rank
        })
        .collect();
    renumber(cla, ranks);
}

/// Sets each group's priority to its rank's place among the distinct ranks (0, 1, … with
/// no gap, as Envoy requires).
fn renumber(cla: &mut ClusterLoadAssignment, ranks: Vec<u32>) {
    let mut levels = ranks.clone();
    levels.sort_unstable();
    levels.dedup();
    for (g, rank) in cla.endpoints.iter_mut().zip(ranks) {
        g.priority = levels.binary_search(&rank).unwrap_or_default() as u32;
    }
}

/// How much of the client's locality `at` shares: 0 all of it, 1 region and zone, 2 the
/// region, 3 nothing.
fn lb_priority(client: &Locality, at: &Locality) -> u32 {
    match (
        client.region == at.region,
        client.zone == at.zone,
        client.sub_zone == at.sub_zone,
    ) {
        (true, true, true) => 0,
        (true, true, false) => 1,
        (true, false, _) => 2,
        (false, _, _) => 3,
    }
}

/// Whether locality `l` is in `pattern` (`region/zone/subzone`; a `*` part, or a zone or
/// subzone left out, matches any).
pub fn locality_matches(l: &Locality, pattern: &str) -> bool {
    let mut parts = pattern.splitn(3, '/');
    let (region, zone, sub_zone) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    (region == "*" || l.region == region)
        && (zone == "*" || zone.is_empty() || l.zone == zone)
        && (sub_zone == "*" || sub_zone.is_empty() || l.sub_zone == sub_zone)
}

fn distribute(cla: &mut ClusterLoadAssignment, client: &Locality, entries: &[LocalityDistribute]) {
    let Some(entry) = entries.iter().find(|e| locality_matches(client, &e.from)) else {
        return;
    };
    let mut unmatched = vec![true; cla.endpoints.len()];
    for (to, percent) in &entry.to {
        let mut members: Vec<(usize, u64)> = Vec::new();
        for (i, g) in cla.endpoints.iter().enumerate() {
            let at = g.locality.clone().unwrap_or_default();
            if unmatched[i] && locality_matches(&at, to) {
                unmatched[i] = false;
                let w = g.load_balancing_weight.as_ref().map_or(1, |w| w.value);
                members.push((i, u64::from(w)));
            }
        }
        let total: u64 = members.iter().map(|(_, w)| w).sum();
        for (i, w) in members {
            let share = (w * u64::from(*percent)).div_ceil(total.max(1));
            if share > 0 {
                cla.endpoints[i].load_balancing_weight = Some(UInt32Value {
                    value: u32::try_from(share).unwrap_or(u32::MAX),
                });
            }
        }
    }
    for (g, unmatched) in cla.endpoints.iter_mut().zip(unmatched) {
        if unmatched {
            g.lb_endpoints.clear();
        }
    }
}

/// Whether an endpoint's workload runs a sidecar that takes the mesh's mutual TLS: Istio's
/// label `security.istio.io/tlsMode: istio`, which its injector gives such pods.
pub fn runs_sidecar(labels: &crate::model::Labels) -> bool {
    labels
        .get(TLS_MODE_LABEL)
        .is_some_and(|v| v.eq_ignore_ascii_case(TLS_MODE_ISTIO))
}

/// Whether auto mTLS clients speak the mesh's mTLS to an endpoint: it runs a sidecar
/// ([`runs_sidecar`]) and its workload's PeerAuthentication does not disable mTLS on its
/// port (Istio's `mtls_checker` alike).
pub fn takes_mtls(e: &Endpoint) -> bool {
    runs_sidecar(&e.labels) && !e.mtls_disabled
}

/// The workload label saying whether it takes the mesh's mutual TLS (Istio's).
pub const TLS_MODE_LABEL: &str = "security.istio.io/tlsMode";

/// The assignment of `(locality, address, port, weight, runs a sidecar)` entries in a
/// canonical order, grouped by locality: the body of an EDS resource, and the inline hosts
/// of a DNS cluster. An address `unix://PATH` is a Unix domain socket (its port means
/// nothing).
pub(crate) fn assignment(
    cluster: &str,
    addrs: Vec<(&str, &str, u16, u32, bool)>,
) -> ClusterLoadAssignment {
    let ranked = addrs
        .into_iter()
        .map(|(locality, ip, port, weight, mtls)| (locality, 0, ip, port, weight, mtls))
        .collect();
    ranked_assignment(cluster, ranked)
}

/// As [`assignment`], from `(locality, rank, address, port, weight, runs a sidecar)`
/// entries: a locality's endpoints of different ranks are groups of their own (Istio's
/// split of a locality by `failoverPriority`), each with its rank as its priority and the
/// sum of its endpoints' weights as its weight. An endpoint that runs a sidecar carries
/// Istio's `tlsMode: istio` transport socket metadata, which auto mTLS clusters match.
fn ranked_assignment(
    cluster: &str,
    mut addrs: Vec<(&str, u32, &str, u16, u32, bool)>,
) -> ClusterLoadAssignment {
    addrs.sort_by(|a, b| (a.0, a.2, a.3, a.4, a.1).cmp(&(b.0, b.2, b.3, b.4, b.1)));
    // One entry per address in a locality (the least weight, by the order above).
    addrs.dedup_by(|b, a| (a.0, a.2, a.3) == (b.0, b.2, b.3));
    addrs.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut groups: Vec<LocalityLbEndpoints> = Vec::new();
    let mut current: Option<(&str, u32)> = None;
    for (locality, rank, ip, port, weight, mtls) in addrs {
        if current != Some((locality, rank)) {
            current = Some((locality, rank));
            groups.push(LocalityLbEndpoints {
                // Always present, if empty: gRPC's xDS client rejects a group without one.
                locality: Some(parse_locality(locality)),
                load_balancing_weight: Some(UInt32Value { value: 0 }),
                priority: rank,
                ..Default::default()
            });
        }
        let group = groups.last_mut().expect("pushed above");
        group.lb_endpoints.push(LbEndpoint {
            host_identifier: Some(HostIdentifier::Endpoint(EnvoyEndpoint {
                address: Some(endpoint_address(ip, port)),
                ..Default::default()
            })),
            health_status: HealthStatus::Healthy as i32,
            load_balancing_weight: Some(UInt32Value { value: weight }),
            metadata: mtls.then(tls_mode_metadata),
        });
        if let Some(w) = group.load_balancing_weight.as_mut() {
            w.value = w.value.saturating_add(weight);
        }
    }
    ClusterLoadAssignment {
        cluster_name: cluster.to_string(),
        endpoints: groups,
        ..Default::default()
    }
}

/// `filter_metadata["envoy.transport_socket_match"] = {tlsMode: istio}`.
fn tls_mode_metadata() -> envoy_types::pb::envoy::config::core::v3::Metadata {
    use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
    let mode = Value {
        kind: Some(Kind::StringValue(TLS_MODE_ISTIO.into())),
    };
    let fields = [("tlsMode".to_string(), mode)].into_iter().collect();
    envoy_types::pb::envoy::config::core::v3::Metadata {
        filter_metadata: [(TRANSPORT_SOCKET_MATCH.to_string(), Struct { fields })]
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

/// An endpoint's address: a Unix domain socket for `unix://PATH` (a ServiceEntry endpoint
/// Istio allows with STATIC resolution), else an IP or host name and port.
fn endpoint_address(ip: &str, port: u16) -> Address {
    match ip.strip_prefix("unix://") {
        Some(path) => Address {
            address: Some(address::Address::Pipe(Pipe {
                path: path.to_string(),
                mode: 0,
            })),
        },
        None => socket_address(ip, port),
    }
}

/// Istio's `region/zone/subzone`, any part possibly missing.
pub fn parse_locality(s: &str) -> Locality {
    let mut parts = s.splitn(3, '/').map(str::to_string);
    Locality {
        region: parts.next().unwrap_or_default(),
        zone: parts.next().unwrap_or_default(),
        sub_zone: parts.next().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An assignment with one endpoint per `(locality, weight)` group.
    fn cla(groups: &[(&str, u32)]) -> ClusterLoadAssignment {
        let ips: Vec<String> = (0..groups.len()).map(|i| format!("10.0.0.{i}")).collect();
        let addrs = groups
            .iter()
            .zip(&ips)
            .map(|((loc, w), ip)| (*loc, ip.as_str(), 80, *w, false))
            .collect();
        assignment("c", addrs)
    }

    /// `(locality, priority, weight, endpoints)` per group.
    fn shape(cla: &ClusterLoadAssignment) -> Vec<(String, u32, u32, usize)> {
        cla.endpoints
            .iter()
            .map(|g| {
                let l = g.locality.clone().unwrap_or_default();
                (
                    format!("{}/{}/{}", l.region, l.zone, l.sub_zone),
                    g.priority,
                    g.load_balancing_weight.as_ref().map_or(0, |w| w.value),
                    g.lb_endpoints.len(),
                )
            })
            .collect()
    }

    #[test]
    fn failover_ranks_groups_by_what_they_share_with_the_client() {
        let mut a = cla(&[
            ("r1/z1/s1", 1),
            ("r1/z1/s2", 1),
            ("r1/z2", 1),
            ("r2/z1", 1),
            ("r3", 1),
        ]);
        apply_locality(&mut a, &LocalityMode::Failover(Vec::new()), "r1/z1/s1");
        let prios: Vec<u32> = shape(&a).iter().map(|g| g.1).collect();
        assert_eq!(prios, vec![0, 1, 2, 3, 3]);
        // A failover from the client's region puts its `to` region ahead of the others.
        let mut a = cla(&[("r1/z1", 1), ("r2/z1", 1), ("r3/z1", 1)]);
        let failover = vec![("r1".to_string(), "r3".to_string())];
        apply_locality(&mut a, &LocalityMode::Failover(failover.clone()), "r1/z1");
        let prios: Vec<u32> = shape(&a).iter().map(|g| g.1).collect();
        assert_eq!(prios, vec![0, 2, 1]);
        // Not from the client's region: no effect, and priorities have no gaps.
        let mut a = cla(&[("r2/z1", 1), ("r3/z1", 1)]);
        apply_locality(&mut a, &LocalityMode::Failover(failover), "r4/z1");
        let prios: Vec<u32> = shape(&a).iter().map(|g| g.1).collect();
        assert_eq!(prios, vec![0, 0]);
    }

    /// An endpoint at `ip` in `locality` with `labels`.
    fn ep(ip: &str, locality: &str, labels: &[(&str, &str)]) -> Endpoint {
        Endpoint {
            ip: ip.into(),
            port: 80,
            ready: true,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            origins: Vec::new(),
            placement: crate::model::Placement {
                locality: locality.into(),
                weight: None,
            },
            identity: None,
            mtls_disabled: false,
        }
    }

    fn decoded(r: &Resource) -> ClusterLoadAssignment {
        ClusterLoadAssignment::decode(&r.body.0[..]).expect("an assignment")
    }

    #[test]
    fn failover_priority_ranks_endpoints_by_the_labels_they_share_in_order() {
        let mode = LocalityMode::Prioritized {
            labels: vec![
                "tier=gold".into(),
                "app".into(),
                "topology.kubernetes.io/zone".into(),
            ],
            failover: Vec::new(),
        };
        let client = ClientClass {
            locality: "r1/z1".into(),
            labels: Some(vec![
                ("app".into(), "a".into()),
                ("topology.kubernetes.io/zone".into(), "z1".into()),
            ]),
        };
        let eps = [
            // All three: rank 0. Tier and app: 1. Tier only: 2. Not even the tier: 3.
            ep("10.0.0.1", "r1/z1", &[("tier", "gold"), ("app", "a")]),
            ep("10.0.0.2", "r1/z2", &[("tier", "gold"), ("app", "a")]),
            ep("10.0.0.3", "r1/z1", &[("tier", "gold"), ("app", "b")]),
            // The zone matches but an earlier label does not: it does not count.
            ep("10.0.0.4", "r1/z1", &[("app", "a")]),
            // A zone label loses to the endpoint's locality.
            ep(
                "10.0.0.5",
                "r1/z2",
                &[
                    ("tier", "gold"),
                    ("app", "a"),
                    ("topology.kubernetes.io/zone", "z1"),
                ],
            ),
        ];
        let cla = decoded(&load_assignment_for("c", &eps, Some((&mode, &client))));
        // Groups per (locality, rank), priorities renumbered from 0 without gaps; each
        // group's weight is the sum of its endpoints'.
        assert_eq!(
            shape(&cla),
            vec![
                ("r1/z1/".into(), 0, 1, 1),
                ("r1/z1/".into(), 2, 1, 1),
                ("r1/z1/".into(), 3, 1, 1),
                ("r1/z2/".into(), 1, 2, 2),
            ]
        );
        // A client without labels (or locality) has "" for each label it reads: the fixed
        // tier still ranks endpoints, its app and zone match no endpoint here.
        let bare = ClientClass {
            locality: String::new(),
            labels: Some(Vec::new()),
        };
        let cla = decoded(&load_assignment_for("c", &eps, Some((&mode, &bare))));
        let prios: Vec<u32> = shape(&cla).iter().map(|g| g.1).collect();
        assert_eq!(prios, vec![0, 1, 0], "{cla:?}");
        // With failover entries, locality ranks come on top of the label ranks.
        let both = LocalityMode::Prioritized {
            labels: vec!["app".into()],
            failover: vec![("r1".into(), "r2".into())],
        };
        let eps = [
            ep("10.0.0.1", "r1/z1", &[("app", "a")]),
            ep("10.0.0.2", "r2/z1", &[("app", "a")]),
            ep("10.0.0.3", "r1/z1", &[("app", "b")]),
        ];
        let cla = decoded(&load_assignment_for("c", &eps, Some((&both, &client))));
        let prios: Vec<(String, u32)> = shape(&cla).into_iter().map(|g| (g.0, g.1)).collect();
        assert_eq!(
            prios,
            vec![
                ("r1/z1/".into(), 0),
                ("r1/z1/".into(), 2),
                ("r2/z1/".into(), 1)
            ]
        );
    }

    #[test]
    fn distribute_weighs_the_first_matching_entry_and_empties_the_rest() {
        let mode = LocalityMode::Distribute(vec![
            LocalityDistribute {
                from: "r1/z1/*".into(),
                to: vec![("r1/z1/*".into(), 75), ("r2/*".into(), 25)],
            },
            LocalityDistribute {
                from: "*".into(),
                to: vec![("r3".into(), 100)],
            },
        ]);
        let groups = [("r1/z1", 2), ("r2/z1", 1), ("r2/z2", 2), ("r3/z9", 4)];
        let mut a = cla(&groups);
        apply_locality(&mut a, &mode, "r1/z1/s7");
        assert_eq!(
            shape(&a),
            vec![
                ("r1/z1/".to_string(), 0, 75, 1),
                // 25 shared by weight 1:2, rounded up.
                ("r2/z1/".to_string(), 0, 9, 1),
                ("r2/z2/".to_string(), 0, 17, 1),
                ("r3/z9/".to_string(), 0, 4, 0),
            ]
        );
        // Another client takes the catch-all entry.
        let mut a = cla(&groups);
        apply_locality(&mut a, &mode, "r2/z1");
        let kept: Vec<(String, u32, usize)> = shape(&a)
            .into_iter()
            .map(|(l, _, w, n)| (l, w, n))
            .collect();
        assert_eq!(
            kept,
            vec![
                ("r1/z1/".to_string(), 2, 0),
                ("r2/z1/".to_string(), 1, 0),
                ("r2/z2/".to_string(), 2, 0),
                ("r3/z9/".to_string(), 100, 1),
            ]
        );
        // A client no entry matches (`*` matches even a client of no locality): as it was.
        let LocalityMode::Distribute(entries) = &mode else {
            unreachable!()
        };
        let first_only = LocalityMode::Distribute(entries[..1].to_vec());
        let mut a = cla(&groups);
        apply_locality(&mut a, &first_only, "r2/z1");
        assert_eq!(a, cla(&groups));
        let mut a = cla(&groups);
        apply_locality(&mut a, &mode, "");
        assert_eq!(shape(&a)[3], ("r3/z9/".to_string(), 0, 100, 1));
    }
}
