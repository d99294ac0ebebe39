//! The Sidecar resource: which Sidecar a proxy takes, what its egress listeners make
//! visible (services, VirtualServices) and how they bind, which route configurations and
//! TCP listeners a service joins through them, and a sidecar proxy's scope.

use super::hosts::{exported_to, host_matches, hosts_overlap, labels_match};
use super::virtual_service::vs_rank;
use crate::model::*;

/// A mesh VirtualService none of whose hosts names or covers any service of the registry:
/// Istio still gives sidecars a virtual host for each of its hosts, on the route
/// configuration of port 80 only (its `serviceByPort[80]` fallback), through the egress
/// listener serving that port. Does the scope in `scope_ns` with these egress `listeners`
/// see `vs` there? Its `exportTo` must admit the namespace, and one of the listener's
/// `ns/host` patterns must reach the VirtualService's namespace and overlap one of its
/// hosts. Proxyless clients have no port-80 route configuration.
pub fn sidecar_sees_hostless_vs(
    listeners: &[EgressListener],
    scope_ns: &str,
    proxyless: bool,
    vs: &VirtualService,
) -> bool {
    if proxyless || vs_rank(vs, scope_ns).is_none() {
        return false;
    }
    let serving = listeners
        .iter()
        .find(|l| l.port.as_ref().is_some_and(|p| p.number == 80))
        .or_else(|| listeners.iter().find(|l| l.port.is_none()));
    let Some(l) = serving else {
        return false;
    };
    listener_imports_vs(l, scope_ns, vs)
}

/// Does an egress listener import `vs`, as Istio's Sidecar scope selects VirtualServices:
/// one of its `ns/host` patterns reaches the VirtualService's own namespace (not its
/// hosts') and overlaps one of its hosts.
fn listener_imports_vs(l: &EgressListener, scope_ns: &str, vs: &VirtualService) -> bool {
    l.hosts.iter().any(|pattern| {
        egress_pattern(pattern, scope_ns).is_some_and(|(ns, host)| {
            let ns_ok = match ns {
                NsKey::Any => true,
                NsKey::Ns(n) => n == vs.key.namespace,
            };
            ns_ok && vs.hosts.iter().any(|h| hosts_overlap(&host, h))
        })
    })
}

/// The egress listeners (their indexes in `listeners`) of a sidecar scope that import the
/// mesh VirtualService `vs`. Istio selects VirtualServices per egress listener: a port's
/// routes (and TCP chains) use only those the listener serving the port imports, so a
/// VirtualService a listener's `hosts` do not import governs none of its hosts on that
/// listener's ports (a Sidecar importing `./*` keeps out the VirtualServices of other
/// namespaces, even for its own services), whatever the scope's other listeners import.
pub fn listeners_importing_vs(
    listeners: &[EgressListener],
    scope_ns: &str,
    vs: &VirtualService,
) -> Vec<usize> {
    listeners
        .iter()
        .enumerate()
        .filter(|(_, l)| listener_imports_vs(l, scope_ns, vs))
        .map(|(i, _)| i)
        .collect()
}

/// Which namespaces an egress `ns/host` pattern reaches, seen from `scope_ns`.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum NsKey {
    Any,
    Ns(String),
}

/// Splits an egress host pattern into the namespace it selects and the host pattern;
/// `None` for `~/…` (nothing).
pub fn egress_pattern(pattern: &str, scope_ns: &str) -> Option<(NsKey, String)> {
    let (ns, host) = pattern.split_once('/').unwrap_or(("*", pattern));
    let key = match ns {
        "*" => NsKey::Any,
        "." => NsKey::Ns(scope_ns.to_string()),
        "~" => return None,
        n => NsKey::Ns(n.to_string()),
    };
    Some((key, host.to_string()))
}

/// Does egress pattern `pattern` make `svc` visible to a proxy in `scope_ns`?
pub fn egress_visible(pattern: &str, scope_ns: &str, svc: &Service) -> bool {
    match egress_pattern(pattern, scope_ns) {
        None => false,
        Some((ns, host)) => {
            let ns_ok = match ns {
                NsKey::Any => true,
                NsKey::Ns(n) => n == svc.namespace(),
            };
            ns_ok
                && host_matches(&host, &svc.hostname)
                && exported_to(&svc.export_to, svc.namespace(), scope_ns)
        }
    }
}

/// Rank of a Sidecar for a sidecar proxy (lower wins): a workloadSelector match in the
/// proxy's namespace, then the namespace default, then the root namespace default.
pub fn sidecar_rank(sc: &Sidecar, proxy: &Proxy, root_ns: &str) -> Option<u8> {
    if sc.key.namespace == proxy.namespace {
        match &sc.selector {
            Some(sel) if !sel.is_empty() => labels_match(sel, &proxy.labels).then_some(0),
            _ => Some(1),
        }
    } else if sc.key.namespace == root_ns && sc.selector.is_none() {
        Some(2)
    } else {
        None
    }
}

/// The egress listeners of a scope: the Sidecar's, or one catch-all `*/*` listener.
pub fn egress_listeners(sc: Option<&Sidecar>) -> Vec<EgressListener> {
    match sc {
        Some(sc) if !sc.egress.is_empty() => sc.egress.clone(),
        _ => vec![EgressListener {
            port: None,
            bind: None,
            capture_none: false,
            hosts: vec!["*/*".into()],
        }],
    }
}

/// How an explicit egress listener binds: (address, bind_to_port).
pub fn egress_bind(l: &EgressListener, interception_none: bool) -> (String, bool) {
    let capture_none = l.capture_none || interception_none;
    let addr = l.bind.clone().unwrap_or_else(|| {
        if capture_none {
            "127.0.0.1".into()
        } else {
            "0.0.0.0".into()
        }
    });
    (addr, capture_none || l.bind.is_some())
}

/// The sidecar route configurations a visible service joins through egress listener
/// `idx`: `(port, allow_any, catch_all)`. An explicit listener serves only its own port; the
/// catch-all serves every other HTTP port, and only where traffic is captured (a port whose
/// protocol is told per connection gets its routes, not the port's catch-all HTTP chain).
///
/// A proxyless gRPC client dials services by name, so every port of a service it sees gets
/// routes whatever its declared protocol (gRPC speaks HTTP/2 on it regardless), with no
/// passthrough host and no capture listener.
pub fn sidecar_route_ports(
    listeners: &[EgressListener],
    idx: usize,
    svc: &Service,
    interception_none: bool,
    proxyless: bool,
    spec: &ScopeSpec,
) -> Vec<(u16, UnknownHosts, bool)> {
    let Some(l) = listeners.get(idx) else {
        return Vec::new();
    };
    if proxyless {
        let explicit = explicit_ports(listeners);
        return svc
            .ports
            .iter()
            .map(|p| p.port)
            .filter(|p| match &l.port {
                Some(ep) => *p == ep.number,
                None => !explicit.contains(p),
            })
            .map(|p| (p, UnknownHosts::None, false))
            .collect();
    }
    // A port whose protocol is told per connection gets routes for what is told HTTP, on
    // chains for the service's own addresses ([`sidecar_tcp_ports`]), not the catch-all's.
    let http_ports = svc
        .ports
        .iter()
        .filter(|p| p.protocol.carries_http())
        .map(|p| (p.port, p.protocol.is_http()));
    match &l.port {
        // A TCP egress listener proxies its port as TCP ([`sidecar_tcp_ports`]): no routes.
        Some(ep) if ep.protocol.is_tcp() => Vec::new(),
        Some(ep) => {
            let unknown = if egress_bind(l, interception_none).1 {
                UnknownHosts::None
            } else {
                UnknownHosts::captured(spec)
            };
            // One naming no protocol routes what it tells HTTP for every service on its
            // port, whatever the port declares (the listener's protocol governs).
            let detects = ep.protocol == Protocol::Auto;
            svc.ports
                .iter()
                .filter(|p| p.port == ep.number && (detects || p.protocol.carries_http()))
                .map(|p| (p.port, unknown.clone(), false))
                .collect()
        }
        None if interception_none => Vec::new(),
        None => {
            let explicit = explicit_ports(listeners);
            http_ports
                .filter(|(p, _)| !explicit.contains(p))
                .map(|(p, declared)| (p, UnknownHosts::captured(spec), declared))
                .collect()
        }
    }
}

/// The scope of a sidecar-scoped proxy under the Sidecar resource `sidecar` (if any). A
/// proxyless client captures nothing, whatever its metadata says, and has no connection
/// manager or `tcp_proxy` an `IDLE_TIMEOUT` would apply to.
pub fn sidecar_scope(p: &Proxy, sidecar: Option<ConfigKey>) -> ScopeKey {
    let proxyless = p.kind == ProxyKind::Proxyless;
    ScopeKey::Sidecar {
        namespace: p.namespace.clone(),
        sidecar,
        interception_none: p.interception_none || proxyless,
        proxyless,
        source_labels: Vec::new(),
        locality: None,
        priority_labels: None,
        idle_timeout_ns: p.idle_timeout_ns.filter(|_| !proxyless),
        path_normalization: Default::default(),
        security: None,
    }
}

/// Whether a proxy under `sc` binds Sidecar `ingress` listeners itself: every one without
/// traffic capture (`interception_none`), those with `captureMode: NONE` otherwise.
pub fn binds_ingress(sc: &Sidecar, interception_none: bool) -> bool {
    sc.ingress
        .iter()
        .any(|l| interception_none || l.capture_none)
}

/// The ports explicit egress listeners claim: the catch-all listener leaves them alone.
fn explicit_ports(listeners: &[EgressListener]) -> Vec<u16> {
    listeners
        .iter()
        .filter_map(|l| l.port.as_ref().map(|p| p.number))
        .collect()
}

/// The sidecar TCP listeners a visible service joins through egress listener `idx`:
/// `(port, address, bind_to_port, detect)`, `detect`: the listener names no protocol, so it
/// tells HTTP from TCP per connection for every service on it (as Istio's listener protocol
/// governs its services). An explicit egress listener of protocol TCP takes the
/// service's port of its number (proxied as TCP whatever the port's own protocol, as the
/// listener declares); the catch-all takes every TCP port no explicit listener claims, and
/// only where traffic is captured, and the TCP side of each port whose protocol is told per
/// connection. Proxyless clients speak gRPC only.
pub fn sidecar_tcp_ports(
    listeners: &[EgressListener],
    idx: usize,
    svc: &Service,
    interception_none: bool,
    proxyless: bool,
) -> Vec<(u16, String, bool, bool)> {
    let Some(l) = listeners.get(idx) else {
        return Vec::new();
    };
    if proxyless {
        return Vec::new();
    }
    match &l.port {
        Some(ep) if ep.protocol.carries_tcp() => {
            let (addr, bind) = egress_bind(l, interception_none);
            let detect = ep.protocol == Protocol::Auto;
            svc.ports
                .iter()
                .filter(|p| p.port == ep.number)
                .map(|p| (p.port, addr.clone(), bind, detect))
                .collect()
        }
        Some(_) => Vec::new(),
        None if interception_none => Vec::new(),
        None => {
            let explicit = explicit_ports(listeners);
            svc.ports
                .iter()
                .filter(|p| p.protocol.carries_tcp() && !explicit.contains(&p.port))
                .map(|p| (p.port, "0.0.0.0".to_string(), false, false))
                .collect()
        }
    }
}
