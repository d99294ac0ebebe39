//! Analysis across objects, as `istioctl analyze` does it: a VirtualService destination
//! naming a subset that no DestinationRule of its host defines (Envoy answers 503 for it).
//! In: VirtualServices and DestinationRules. Out: one [`ConfigError`] per such destination
//! and VirtualService, retracted when a rule defines the subset or the route changes.

use super::Coll;
use crate::model::*;

pub(super) fn undefined_subsets<'s>(
    vss: &Coll<'s, (ConfigKey, VirtualService)>,
    drs: &Coll<'s, (ConfigKey, DestinationRule)>,
) -> Coll<'s, ConfigError> {
    let wanted = vss.clone().flat_map(|(key, vs)| {
        let mut out: Vec<((Hostname, String), ConfigKey)> = vs
            .http
            .iter()
            .flat_map(|r| {
                r.route
                    .iter()
                    .chain(r.mirrors.iter().map(|m| &m.destination))
            })
            .filter_map(|d| Some(((d.host.clone(), d.subset.clone()?), key.clone())))
            .collect();
        out.sort();
        out.dedup();
        out
    });
    let defined = drs
        .clone()
        .flat_map(|(_, dr)| {
            dr.subsets
                .iter()
                .map(|s| (dr.host.clone(), s.name.clone()))
                .collect::<Vec<_>>()
        })
        .distinct();
    wanted
        .antijoin(defined)
        .map(|((host, subset), key)| ConfigError {
            object: key,
            code: ErrorCode::SubsetNotDefined,
            message: format!(
                "subset {subset:?} of host {host} is defined by no DestinationRule: requests \
                 routed to it are answered 503 (IST0101 ReferencedResourceNotFound)"
            ),
        })
}
