//! EDS: one ClusterLoadAssignment per EDS cluster, shared by every proxy holding it.

use super::socket_address;
use crate::model::{Endpoint, LocalityDistribute, LocalityMode, Resource, ResourceType};
use envoy_types::pb::envoy::config::core::v3::{address, Address, HealthStatus, Locality, Pipe};
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint::HostIdentifier, ClusterLoadAssignment, Endpoint as EnvoyEndpoint, LbEndpoint,
    LocalityLbEndpoints,
};
use envoy_types::pb::google::protobuf::UInt32Value;
use prost::Message;

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
    locality: Option<(&LocalityMode, &str)>,
) -> Resource {
    let addrs = endpoints
        .into_iter()
        .filter(|e| e.ready)
        .map(|e| {
            (
                e.placement.locality.as_str(),
                e.ip.as_str(),
                e.port,
                e.placement.weight.unwrap_or(1).max(1),
            )
        })
        .collect();
    let mut cla = assignment(cluster, addrs);
    if let Some((mode, client)) = locality {
        apply_locality(&mut cla, mode, client);
    }
    Resource::new(
        ResourceType::Endpoint,
        cluster.to_string(),
        cla.encode_to_vec(),
    )
}

/// Istio's locality load balancing of an assignment for a client in locality `client`:
/// with `distribute`, the first entry whose `from` the client matches weighs each `to`
/// locality's groups by its percentage (shared among the groups a wildcard matches, in
/// proportion to their weights, rounded up) and empties the groups no `to` names; with
/// failover, each group's priority is 0 for the client's own subzone, 1 its zone, 2 its
/// region, 3 elsewhere — 4 for a region other than the one a `failover` entry from the
/// client's region names — renumbered from 0 without gaps.
pub fn apply_locality(cla: &mut ClusterLoadAssignment, mode: &LocalityMode, client: &str) {
    let client = parse_locality(client);
    match mode {
        LocalityMode::Distribute(entries) => distribute(cla, &client, entries),
        LocalityMode::Failover(failover) => {
            let ranks: Vec<u32> = cla
                .endpoints
                .iter()
                .map(|g| {
                    let at = g.locality.clone().unwrap_or_default();
                    let mut rank = lb_priority(&client, &at);
                    if rank == 3 {
                        if let Some((_, to)) =
                            failover.iter().find(|(from, _)| *from == client.region)
                        {
                            if at.region != *to {
                                rank = 4;
                            }
                        }
                    }
                    g.priority * 5 + rank
                })
                .collect();
            let mut levels = ranks.clone();
            levels.sort_unstable();
            levels.dedup();
            for (g, rank) in cla.endpoints.iter_mut().zip(ranks) {
                g.priority = levels.binary_search(&rank).unwrap_or_default() as u32;
            }
        }
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

/// The assignment of `(locality, address, port, weight)` entries in a canonical order,
/// grouped by locality: the body of an EDS resource, and the inline hosts of a DNS cluster.
/// An address `unix://PATH` is a Unix domain socket (its port means nothing).
pub(crate) fn assignment(
    cluster: &str,
    mut addrs: Vec<(&str, &str, u16, u32)>,
) -> ClusterLoadAssignment {
    addrs.sort();
    // One entry per address in a locality (the least weight, by the order above).
    addrs.dedup_by(|b, a| (a.0, a.1, a.2) == (b.0, b.1, b.2));
    let mut groups: Vec<LocalityLbEndpoints> = Vec::new();
    let mut current: Option<&str> = None;
    for (locality, ip, port, weight) in addrs {
        if current != Some(locality) {
            current = Some(locality);
            groups.push(LocalityLbEndpoints {
                // Always present, if empty: gRPC's xDS client rejects a group without one.
                locality: Some(parse_locality(locality)),
                load_balancing_weight: Some(UInt32Value { value: 0 }),
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
            ..Default::default()
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
            .map(|((loc, w), ip)| (*loc, ip.as_str(), 80, *w))
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
