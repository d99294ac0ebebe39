//! Gateways: which routers a Gateway selects, the references VirtualServices make to
//! Gateways, the domains a server serves for a VirtualService, where a router's servers
//! listen, and a router's scope.

use super::hosts::{host_matches, labels_match};
use crate::model::*;
use std::collections::BTreeMap;

/// A Gateway applies to a router whose labels match its (non-empty) selector (of its own
/// namespace, for one translated from the Gateway API).
pub fn gateway_selects(gw: &Gateway, proxy: &Proxy) -> bool {
    !gw.selector.is_empty()
        && labels_match(&gw.selector, &proxy.labels)
        && (!gw.same_namespace || gw.key.namespace == proxy.namespace)
}

/// `gateways` entries of a VirtualService name Gateways as `ns/name`.
pub fn gateway_ref(reference: &str) -> Option<ConfigKey> {
    if reference == "mesh" {
        return None;
    }
    let (ns, name) = reference.split_once('/')?;
    Some(ConfigKey::new(Kind::Gateway, ns, name))
}

/// Hosts of a gateway server that a VirtualService in `vs_ns` may attach to, as
/// the domain it serves: the more specific of the two patterns.
pub fn gateway_domain(
    server_host: &str,
    gw_ns: &str,
    vs_ns: &str,
    vs_host: &str,
) -> Option<String> {
    let (ns, host) = server_host.split_once('/').unwrap_or(("*", server_host));
    let ns_ok = ns == "*" || (ns == "." && gw_ns == vs_ns) || ns == vs_ns;
    if !ns_ok {
        return None;
    }
    if host_matches(host, vs_host) {
        Some(vs_host.to_string())
    } else if host_matches(vs_host, host) {
        Some(host.to_string())
    } else {
        None
    }
}

/// As [`gateway_ref`], owning its input for use in dataflow closures.
#[allow(clippy::ptr_arg)] // `filter_map` over `&String` items needs exactly this signature
pub fn gateway_ref_str(reference: &String) -> Option<ConfigKey> {
    gateway_ref(reference)
}

/// The scope of a router in its namespace, selected by `gateways` (sorted).
pub fn router_scope(p: &Proxy, gateways: Vec<ConfigKey>) -> ScopeKey {
    ScopeKey::Router {
        namespace: p.namespace.clone(),
        gateways,
        source_labels: Vec::new(),
        locality: None,
        priority_labels: None,
        idle_timeout_ns: p.idle_timeout_ns,
        path_normalization: Default::default(),
        ports: Vec::new(),
        security: None,
    }
}

/// Where a router's servers listen, from the services of its own workload: `targets` holds
/// `(service port, host, target port)` for every endpoint of a service at one of the
/// router's IPs. As Istio's gateways (`resolvePorts` for gateways selected by labels), a
/// server of port N listens on the target port of the first such service with a port N, and
/// on N itself where none has one; meshflow takes the services in host order. Only the ports
/// that change are kept, sorted: a router without a Service of its own keeps an empty map,
/// and so its scope.
pub fn gateway_ports<'a>(
    targets: impl IntoIterator<Item = (u16, &'a str, u16)>,
) -> Vec<(u16, u16)> {
    let mut first: BTreeMap<u16, (&str, u16)> = BTreeMap::new();
    for (port, host, target) in targets {
        let e = first.entry(port).or_insert((host, target));
        if (host, target) < *e {
            *e = (host, target);
        }
    }
    first
        .into_iter()
        .filter(|(port, (_, target))| port != target)
        .map(|(port, (_, target))| (port, target))
        .collect()
}
