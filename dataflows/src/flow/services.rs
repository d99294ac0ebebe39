//! Services: one per hostname. In: every `(hostname, Service)` from all sources. Out: the
//! service in effect per hostname (what every later stage joins on) and a [`ConfigError`] for
//! each service that another one of the same hostname shadows. [`with_aliases`]: those
//! services with Kubernetes `ExternalName` aliases resolved, as every later stage but the
//! analysis of references sees them.

use super::Coll;
use crate::model::*;
use crate::rules;

pub(super) struct Services<'s> {
    /// The service in effect per hostname.
    pub chosen: Coll<'s, (Hostname, Service)>,
    /// One error per shadowed service, retracted when the conflict goes.
    pub conflicts: Coll<'s, ConfigError>,
}

/// Kubernetes Services win over ServiceEntries, then by name: the order `Service` sorts in,
/// so the winner is the first value of each hostname's group.
pub(super) fn one_per_host<'s>(all: Coll<'s, (Hostname, Service)>) -> Services<'s> {
    let chosen = all
        .clone()
        .reduce(|_h, vals, out| out.push((vals[0].0.clone(), 1isize)));
    let conflicts = all.reduce(|h, vals, out| {
        for (svc, _) in vals.iter().skip(1) {
            out.push((
                ConfigError {
                    object: svc.origin.clone(),
                    code: ErrorCode::HostConflict,
                    message: format!("host {h} is already defined by {}", vals[0].0.origin),
                },
                1isize,
            ))
        }
    });
    Services {
        chosen,
        conflicts: conflicts.map(|(_, e)| e),
    }
}

/// The services in effect with `ExternalName` aliases resolved ([`rules::with_aliases`]): an
/// alias service leaves, and the service its chain ends at lists it among its
/// [`Service::aliases`]. Chains resolve by pointer jumping, [`rules::ALIAS_ROUNDS`] joins of
/// the alias relation with itself, so a change touches only the aliases on its chains and
/// the services they end at.
pub(super) fn with_aliases<'s>(
    chosen: &Coll<'s, (Hostname, Service)>,
) -> Coll<'s, (Hostname, Service)> {
    let raw = chosen
        .clone()
        .flat_map(|(h, s)| s.alias_for.map(|t| (h, t)));
    let alias_hosts = raw.clone().map(|(a, _)| a);
    // `(alias, target)`: after round i, the host 2^i hops down the alias's chain, or the end
    // of the chain if nearer.
    let mut resolved = raw;
    for _ in 0..rules::ALIAS_ROUNDS {
        let by_target = resolved.clone().map(|(a, t)| (t, a));
        let ended = by_target
            .clone()
            .antijoin(alias_hosts.clone())
            .map(|(t, a)| (a, t));
        let jumped = by_target.join_map(resolved.clone(), |_, a, t| (a.clone(), t.clone()));
        resolved = ended.concat(jumped);
    }
    // Chains still ending at an alias loop or run too long: they resolve to nothing.
    let aliases = resolved.map(|(a, t)| (t, a)).antijoin(alias_hosts).reduce(
        |_, vals: &[(&Hostname, isize)], out| {
            out.push((
                vals.iter().map(|(a, _)| (*a).clone()).collect::<Vec<_>>(),
                1isize,
            ))
        },
    );
    let concrete = chosen.clone().filter(|(_, s)| s.alias_for.is_none());
    let with = concrete.clone().join_map(aliases.clone(), |h, s, aliases| {
        let mut s = s.clone();
        s.aliases = aliases.clone();
        (h.clone(), s)
    });
    let without = concrete.antijoin(aliases.map(|(h, _)| h));
    with.concat(without)
}
