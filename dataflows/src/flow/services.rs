//! Services: one per hostname. In: every `(hostname, Service)` from all sources. Out: the
//! service in effect per hostname (what every later stage joins on) and a [`ConfigError`] for
//! each service that another one of the same hostname shadows. [`with_aliases`]: those
//! services with Kubernetes `ExternalName` aliases resolved, as every later stage but the
//! analysis of references sees them.

use super::Coll;
use crate::model::*;

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

/// The services in effect with `ExternalName` aliases resolved
/// ([`crate::rules::with_aliases`]): an alias service leaves, and the service its chain ends
/// at lists it among its [`Service::aliases`]. Chains of any length resolve, as in Istio: an iteration gathers
/// every host on each alias's chain (a monotone set, so it converges even where a chain
/// loops), and the one host on it that is no alias is where the chain ends; a chain that
/// loops has none and resolves to nothing. A change touches only the aliases on its chains
/// and the services they end at.
pub(super) fn with_aliases<'s>(
    chosen: &Coll<'s, (Hostname, Service)>,
) -> Coll<'s, (Hostname, Service)> {
    use differential_dataflow::operators::Iterate;
    let raw = chosen
        .clone()
        .flat_map(|(h, s)| s.alias_for.map(|t| (h, t)));
    let alias_hosts = raw.clone().map(|(a, _)| a);
    // `(alias, host)`: every host on the alias's chain, after the first hop.
    let on_chain = raw.clone().iterate(|scope, reached| {
        let raw = raw.enter(scope);
        reached
            .map(|(a, h)| (h, a))
            .join_map(raw.clone(), |_, a, next| (a.clone(), next.clone()))
            .concat(raw)
            .distinct()
    });
    let aliases = on_chain.map(|(a, h)| (h, a)).antijoin(alias_hosts).reduce(
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
