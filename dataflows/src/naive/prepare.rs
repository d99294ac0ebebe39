//! The first stage: the mesh settings in effect, and the snapshot completed as the dataflow's
//! own first stages complete it (mesh defaults, `ExternalName` aliases, delegation).

use super::Snapshot;
use crate::model::*;
use crate::rules;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

/// The mesh settings in effect, and the snapshot with the mesh's defaults applied and
/// delegating routes expanded, as the dataflow routes them (borrowed when nothing changes).
pub(super) fn prepare<'s>(
    mesh: &MeshConfig,
    snap: &'s Snapshot,
) -> (MeshSettings, Cow<'s, Snapshot>) {
    let mut snap = Cow::Borrowed(snap);
    // The Gateway API's objects become Gateways and VirtualServices, as the dataflow's
    // `gateway_api` stage makes them, before anything reads those.
    let api: Vec<&GatewayApiObject> = snap
        .records
        .iter()
        .filter_map(|r| match r {
            Record::GatewayApi(o) => Some(o),
            _ => None,
        })
        .collect();
    if !api.is_empty() {
        let services: BTreeSet<&str> = snap
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Service(s) => Some(s.hostname.as_str()),
                _ => None,
            })
            .collect();
        let (gateways, vss) =
            rules::gateway_api::translate_all(&api, &services, &mesh.domain_suffix);
        let defined: Vec<&Service> = snap
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Service(s) => Some(s),
                _ => None,
            })
            .collect();
        let (drs, _) = rules::backend_tls::translate_all(&api, &defined, &mesh.domain_suffix);
        let mut records = snap.records.clone();
        records.extend(gateways.into_iter().map(Record::Gateway));
        records.extend(vss.into_iter().map(Record::VirtualService));
        records.extend(drs.into_iter().map(Record::DestinationRule));
        snap = Cow::Owned(Snapshot { records });
    }
    // Mesh records sort last (the last variant of `Record`): read from the end, not a scan.
    let settings = MeshSettings::in_effect(
        snap.records.iter().rev().map_while(|r| match r {
            Record::Mesh(m) => Some(m),
            _ => None,
        }),
        mesh,
    );
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
    // One service per host and namespace, as the dataflow's `services` stage keeps them:
    // a namespace's ServiceEntries of one host merged ([`HostServices::fold`]).
    let mut defs: BTreeMap<&str, Vec<&Service>> = BTreeMap::new();
    for r in &snap.records {
        if let Record::Service(s) = r {
            defs.entry(s.hostname.as_str()).or_default().push(s);
        }
    }
    if defs.values().any(|d| d.len() > 1) {
        let folded: Vec<Record> = defs
            .values()
            .flat_map(|d| {
                let (set, _) = HostServices::fold(d.iter().copied());
                set.all()
                    .iter()
                    .cloned()
                    .map(Record::Service)
                    .collect::<Vec<_>>()
            })
            .collect();
        let records = snap
            .records
            .iter()
            .filter(|r| !matches!(r, Record::Service(_)))
            .cloned()
            .chain(folded)
            .collect();
        snap = Cow::Owned(Snapshot { records });
    } else {
        drop(defs);
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
                // Another namespace's service of the host: the same aliases resolve to it.
                Record::Service(s) => {
                    let mut s = s.clone();
                    s.aliases = resolved[&s.hostname].aliases.clone();
                    records.insert(Record::Service(s));
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
