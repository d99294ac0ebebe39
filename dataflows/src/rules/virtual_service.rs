//! VirtualServices: which mesh VirtualService a proxy takes first, and the hosts a
//! VirtualService's routes send to.

use super::hosts::exported_to;
use crate::model::*;

/// Rank of a mesh VirtualService for a proxy in `scope_ns` (lower wins): its own namespace
/// first, then others that export to it. Among VirtualServices covering a host this decides
/// only between equally specific hosts
/// ([`vs_host_specificity`](super::hosts::vs_host_specificity) comes first).
pub fn vs_rank(vs: &VirtualService, scope_ns: &str) -> Option<u8> {
    let ns = vs.key.namespace.as_str();
    (vs.binds_mesh() && exported_to(&vs.export_to, ns, scope_ns))
        .then_some(u8::from(ns != scope_ns))
}

/// Every destination host of a VirtualService's routes and mirrors (HTTP, TCP, TLS), once.
pub fn destination_hosts(vs: &VirtualService) -> Vec<Hostname> {
    let mut hosts: Vec<Hostname> = vs
        .http
        .iter()
        .flat_map(|r| {
            r.route
                .iter()
                .chain(r.mirrors.iter().map(|m| &m.destination))
        })
        .chain(vs.tcp.iter().flat_map(|r| r.route.iter()))
        .chain(vs.tls.iter().flat_map(|r| r.route.iter()))
        .map(|d| d.host.clone())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}
