//! Analysis across objects, as `istioctl analyze` does it (its IST0101
//! ReferencedResourceNotFound): a VirtualService destination naming a subset that no
//! DestinationRule of its host defines (Envoy answers 503 for it), and a VirtualService
//! bound to a gateway no Gateway defines (its routes reach no proxy through it).
//! In: VirtualServices, DestinationRules, Gateways. Out: one [`ConfigError`] per such
//! reference and VirtualService, retracted when the referenced object appears or the
//! reference changes.

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

/// A VirtualService's `gateways` entry (other than `mesh`) naming no Gateway.
pub(super) fn undefined_gateways<'s>(
    vss: &Coll<'s, (ConfigKey, VirtualService)>,
    gateways: &Coll<'s, (ConfigKey, Gateway)>,
) -> Coll<'s, ConfigError> {
    let wanted = vss.clone().flat_map(|(key, vs)| {
        let mut out: Vec<(String, ConfigKey)> = vs
            .gateways
            .iter()
            .filter(|g| *g != "mesh")
            .map(|g| (g.clone(), key.clone()))
            .collect();
        out.sort();
        out.dedup();
        out
    });
    let defined = gateways
        .clone()
        .map(|(key, _)| format!("{}/{}", key.namespace, key.name))
        .distinct();
    wanted.antijoin(defined).map(|(gateway, key)| ConfigError {
        object: key,
        code: ErrorCode::GatewayNotDefined,
        message: format!(
            "gateway {gateway} is defined by no Gateway: the VirtualService reaches no \
                 proxy through it (IST0101 ReferencedResourceNotFound)"
        ),
    })
}
