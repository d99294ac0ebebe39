//! Services: one per hostname. In: every `(hostname, Service)` from all sources. Out: the
//! service in effect per hostname (what every later stage joins on) and a [`ConfigError`] for
//! each service that another one of the same hostname shadows.

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
