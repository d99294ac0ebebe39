//! Istio's selection and visibility rules as plain predicates, shared by the incremental
//! dataflow and the naive recompute used as its oracle.

use crate::model::*;

/// `exportTo`: empty or `*` is everyone, `.` the owner's namespace, `~` no one.
pub fn exported_to(export_to: &[String], owner_ns: &str, ns: &str) -> bool {
    export_to.is_empty()
        || export_to
            .iter()
            .any(|e| e == "*" || (e == "." && owner_ns == ns) || e == ns)
}

/// A host pattern: `*`, `*.suffix`, or an exact name.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}")),
        None => pattern == host,
    }
}

/// How closely a VirtualService host covers a service host, lower first; `None` when it does
/// not cover it. As Istio picks the VirtualService of a sidecar's service: the host itself
/// (a wildcard service's own pattern included), then the longest wildcard that covers it
/// (`*.b.example.com` before `*.example.com` before `*`).
pub fn vs_host_specificity(vs_host: &str, host: &str) -> Option<(u8, usize)> {
    if vs_host == host {
        Some((0, 0))
    } else if host_matches(vs_host, host) {
        Some((1, usize::MAX - vs_host.len()))
    } else {
        None
    }
}

/// Every VirtualService host that may cover `host` ([`vs_host_specificity`]): the host
/// itself, `*.` before each suffix after a dot, and `*`. Joining on these finds the
/// wildcard VirtualServices of a host without comparing it to every VirtualService.
pub fn covering_patterns(host: &str) -> Vec<String> {
    let mut out = vec![host.to_string()];
    for (i, c) in host.char_indices() {
        if c == '.' {
            let pattern = format!("*.{}", &host[i + 1..]);
            if vs_host_specificity(&pattern, host).is_some() && !out.contains(&pattern) {
                out.push(pattern);
            }
        }
    }
    if host != "*" {
        out.push("*".to_string());
    }
    out
}

/// Whether two host patterns have a name in common, as Istio compares an egress listener's
/// imported hosts with a VirtualService's: equal names, a wildcard covering the other
/// name, or two wildcards one of which covers the other.
pub fn hosts_overlap(a: &str, b: &str) -> bool {
    match (a.strip_prefix('*'), b.strip_prefix('*')) {
        (Some(sa), Some(sb)) => sa.ends_with(sb) || sb.ends_with(sa),
        (Some(sa), None) => b.ends_with(sa),
        (None, Some(sb)) => a.ends_with(sb),
        (None, None) => a == b,
    }
}

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

/// Does a sidecar scope whose egress listeners are `listeners` import the mesh
/// VirtualService `vs` through any of them? A VirtualService a Sidecar's `egress[].hosts`
/// do not import governs none of its hosts for that scope (Istio): a Sidecar importing
/// `./*` keeps out the VirtualServices of other namespaces, even for its own services.
pub fn egress_imports_vs(
    listeners: &[EgressListener],
    scope_ns: &str,
    vs: &VirtualService,
) -> bool {
    listeners
        .iter()
        .any(|l| listener_imports_vs(l, scope_ns, vs))
}

/// Every label of `selector` is present in `labels` with the same value.
pub fn labels_match(selector: &Labels, labels: &Labels) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
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

/// A Gateway applies to a router whose labels match its (non-empty) selector.
pub fn gateway_selects(gw: &Gateway, proxy: &Proxy) -> bool {
    !gw.selector.is_empty() && labels_match(&gw.selector, &proxy.labels)
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

/// The namespace a cluster-local hostname belongs to (`name.ns.svc.<suffix>`).
pub fn host_namespace<'a>(host: &'a str, suffix: &str) -> Option<&'a str> {
    let prefix = host.strip_suffix(suffix)?.strip_suffix(".svc.")?;
    prefix.split_once('.').map(|(_, ns)| ns)
}

/// Rank of a DestinationRule for a service in `svc_ns`, seen from the proxies of `scope`
/// (lower wins): a rule with a `workloadSelector` applies only to the proxies of its own
/// namespace it selects, and before any other; then Istio's lookup path is the proxy's
/// namespace, the service's namespace, the root namespace; a rule anywhere else does not
/// apply, whatever it exports.
pub fn dr_rank(dr: &DestinationRule, scope: &ScopeKey, svc_ns: &str, root_ns: &str) -> Option<u8> {
    let ns = dr.key.namespace.as_str();
    let scope_ns = scope.namespace();
    if let Some(sel) = &dr.selector {
        return (ns == scope_ns && scope.source_labels().contains(sel)).then_some(0);
    }
    if !exported_to(&dr.export_to, ns, scope_ns) {
        return None;
    }
    if ns == scope_ns {
        Some(1)
    } else if ns == svc_ns {
        Some(2)
    } else if ns == root_ns {
        Some(3)
    } else {
        None
    }
}

/// Rank of a mesh VirtualService for a proxy in `scope_ns` (lower wins): its own namespace
/// first, then others that export to it. Among VirtualServices covering a host this decides
/// only between equally specific hosts ([`vs_host_specificity`] comes first).
pub fn vs_rank(vs: &VirtualService, scope_ns: &str) -> Option<u8> {
    let ns = vs.key.namespace.as_str();
    (vs.binds_mesh() && exported_to(&vs.export_to, ns, scope_ns))
        .then_some(u8::from(ns != scope_ns))
}

/// `gateways` entries of a VirtualService name Gateways as `ns/name`.
pub fn gateway_ref(reference: &str) -> Option<ConfigKey> {
    if reference == "mesh" {
        return None;
    }
    let (ns, name) = reference.split_once('/')?;
    Some(ConfigKey::new(Kind::Gateway, ns, name))
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
/// catch-all serves every other HTTP port, and only where traffic is captured.
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
    let http_ports = svc
        .ports
        .iter()
        .filter(|p| p.protocol.is_http())
        .map(|p| p.port);
    match &l.port {
        // A TCP egress listener proxies its port as TCP ([`sidecar_tcp_ports`]): no routes.
        Some(ep) if ep.protocol.is_tcp() => Vec::new(),
        Some(ep) => {
            let unknown = if egress_bind(l, interception_none).1 {
                UnknownHosts::None
            } else {
                UnknownHosts::captured(spec)
            };
            http_ports
                .filter(|p| *p == ep.number)
                .map(|p| (p, unknown.clone(), false))
                .collect()
        }
        None if interception_none => Vec::new(),
        None => {
            let explicit = explicit_ports(listeners);
            http_ports
                .filter(|p| !explicit.contains(p))
                .map(|p| (p, UnknownHosts::captured(spec), true))
                .collect()
        }
    }
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

/// The scope of a sidecar-scoped proxy under the Sidecar resource `sidecar` (if any). A
/// proxyless client captures nothing, whatever its metadata says.
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
    }
}

/// The ports explicit egress listeners claim: the catch-all listener leaves them alone.
fn explicit_ports(listeners: &[EgressListener]) -> Vec<u16> {
    listeners
        .iter()
        .filter_map(|l| l.port.as_ref().map(|p| p.number))
        .collect()
}

/// The sidecar TCP listeners a visible service joins through egress listener `idx`:
/// `(port, address, bind_to_port)`. An explicit egress listener of protocol TCP takes the
/// service's port of its number (proxied as TCP whatever the port's own protocol, as the
/// listener declares); the catch-all takes every TCP port no explicit listener claims, and
/// only where traffic is captured. Proxyless clients speak gRPC only.
pub fn sidecar_tcp_ports(
    listeners: &[EgressListener],
    idx: usize,
    svc: &Service,
    interception_none: bool,
    proxyless: bool,
) -> Vec<(u16, String, bool)> {
    let Some(l) = listeners.get(idx) else {
        return Vec::new();
    };
    if proxyless {
        return Vec::new();
    }
    match &l.port {
        Some(ep) if ep.protocol.is_tcp() => {
            let (addr, bind) = egress_bind(l, interception_none);
            svc.ports
                .iter()
                .filter(|p| p.port == ep.number)
                .map(|p| (p.port, addr.clone(), bind))
                .collect()
        }
        Some(_) => Vec::new(),
        None if interception_none => Vec::new(),
        None => {
            let explicit = explicit_ports(listeners);
            svc.ports
                .iter()
                .filter(|p| p.protocol.is_tcp() && !explicit.contains(&p.port))
                .map(|p| (p.port, "0.0.0.0".to_string(), false))
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The patterns a host is joined on are exactly the VirtualService hosts that cover it,
    /// ranked as Istio ranks them: the host itself, then longer wildcards before shorter.
    #[test]
    fn covering_patterns_are_the_hosts_that_cover_and_rank_by_specificity() {
        let hosts = [
            "a.b.example.com",
            "*.cdn.example",
            "example.com",
            "*",
            "localhost",
        ];
        let candidates = [
            "a.b.example.com",
            "*.b.example.com",
            "*.example.com",
            "*.com",
            "*",
            "*.cdn.example",
            "*.example",
            "*.x.cdn.example",
            "b.example.com",
            "example.com",
            "*.localhost",
            "localhost",
        ];
        for h in hosts {
            let patterns = covering_patterns(h);
            for c in candidates {
                assert_eq!(
                    patterns.iter().any(|p| p == c),
                    vs_host_specificity(c, h).is_some(),
                    "{c} covering {h}: {patterns:?}"
                );
            }
        }
        let rank = |p: &str| vs_host_specificity(p, "a.b.example.com");
        assert!(rank("a.b.example.com") < rank("*.b.example.com"));
        assert!(rank("*.b.example.com") < rank("*.example.com"));
        assert!(rank("*.example.com") < rank("*"));
        assert_eq!(rank("b.example.com"), None);
        assert_eq!(
            vs_host_specificity("*.cdn.example", "*.cdn.example"),
            Some((0, 0))
        );
        assert!(vs_host_specificity("*.example", "*.cdn.example").is_some());
        assert_eq!(
            vs_host_specificity("*.x.cdn.example", "*.cdn.example"),
            None
        );
    }
}
