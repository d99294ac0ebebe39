//! Analysis across objects, as `istioctl analyze` does it (its IST0101
//! ReferencedResourceNotFound): a VirtualService destination naming a subset that no
//! DestinationRule of its host defines (Envoy answers 503 for it), and a VirtualService
//! bound to a gateway no Gateway defines (its routes reach no proxy through it), a
//! destination host no service defines (503 as well), a destination port its host does not
//! have or a destination without a port whose host has several (IST0112), and a Gateway whose selector matches
//! no workload (no proxy serves its servers), and a Gateway TLS server whose Secret is
//! missing or cannot be served in the namespace of a workload it selects; a Kubernetes
//! `ExternalName` alias that resolves to no service, and a destination naming an alias whose
//! named host has no cluster (`MF0015`, warnings); VirtualService rules no request reaches
//! and matches an earlier one takes whole (`MF0023`, `MF0024`, warnings:
//! [`rules::shadowed_rules`]); ports sidecars must guess about (`MF0025`–`MF0027`); Sidecars
//! that leave a workload to a tie-break (`MF0028`, `MF0029`); a VirtualService bound to a
//! Gateway that serves none of its hosts (`MF0030`); one certificate on the TLS servers of
//! two Gateways of the same workloads (`MF0031`).
//! In: VirtualServices, DestinationRules, Gateways, services, workloads, Secrets. Out: one
//! [`ConfigError`] per such reference and object, retracted when the referenced object
//! appears or the reference changes.

use super::Coll;
use crate::model::*;
use crate::rules;

/// What each VirtualService's destinations (of `http`, `tcp` and `tls` routes, and mirrors)
/// reference (`pick`), once per VirtualService, with the field of the first destination
/// that does (`spec.http[0].route[1].destination`).
fn references<'s, R: differential_dataflow::ExchangeData + std::hash::Hash>(
    vss: &Coll<'s, (ConfigKey, VirtualService)>,
    pick: fn(&RouteDestination) -> Option<R>,
) -> Coll<'s, (R, (ConfigKey, String))> {
    vss.clone().flat_map(move |(key, vs)| {
        let at =
            |kind: &str, i: usize, j: usize| format!("spec.{kind}[{i}].route[{j}].destination");
        let mut named: Vec<(String, &RouteDestination)> = Vec::new();
        for (i, r) in vs.http.iter().enumerate() {
            named.extend(
                r.route
                    .iter()
                    .enumerate()
                    .map(|(j, d)| (at("http", i, j), d)),
            );
            named.extend(r.mirrors.iter().enumerate().map(|(j, m)| {
                (
                    format!("spec.http[{i}].mirrors[{j}].destination"),
                    &m.destination,
                )
            }));
        }
        for (i, r) in vs.tcp.iter().enumerate() {
            named.extend(
                r.route
                    .iter()
                    .enumerate()
                    .map(|(j, d)| (at("tcp", i, j), d)),
            );
        }
        for (i, r) in vs.tls.iter().enumerate() {
            named.extend(
                r.route
                    .iter()
                    .enumerate()
                    .map(|(j, d)| (at("tls", i, j), d)),
            );
        }
        let mut out: Vec<(R, (ConfigKey, String))> = Vec::new();
        for (field, d) in named {
            if let Some(r) = pick(d) {
                if !out.iter().any(|(o, _)| *o == r) {
                    out.push((r, (key.clone(), field)));
                }
            }
        }
        out
    })
}

/// What the analyses below read.
pub(super) struct Inputs<'a, 's> {
    pub virtual_services: &'a Coll<'s, (ConfigKey, VirtualService)>,
    pub sidecars: &'a Coll<'s, (ConfigKey, Sidecar)>,
    pub destination_rules: &'a Coll<'s, (ConfigKey, DestinationRule)>,
    pub gateways: &'a Coll<'s, (ConfigKey, Gateway)>,
    pub workloads: &'a Coll<'s, (String, Workload)>,
    /// `(gateway, workload)` of every workload a Gateway selects ([`gateway_workloads`]).
    pub gateway_workloads: &'a Coll<'s, (ConfigKey, Workload)>,
    /// The services as defined, aliases unresolved.
    pub services: &'a Coll<'s, (Hostname, HostServices)>,
    /// The services with `ExternalName` aliases resolved.
    pub aliased: &'a Coll<'s, (Hostname, HostServices)>,
    /// Every definition as its object writes it, before one namespace's merge.
    pub defined: &'a Coll<'s, (Hostname, Service)>,
    /// The endpoints, resolved to their services' ports.
    pub endpoints: &'a super::endpoints::Resolved<'s>,
    pub security: &'a Coll<'s, (ConfigKey, SecurityPolicy)>,
    pub proxies: &'a Coll<'s, (ProxyId, Proxy)>,
    pub mesh: &'a super::mesh::Mesh<'s>,
}

/// Every finding of the reference analyses that needs no built resource: subsets,
/// gateways, hosts and ports a VirtualService names but nothing defines, gateways no
/// workload runs, conflicting mesh VirtualServices, missing delegates, unresolved aliases.
pub(super) fn findings<'s>(i: Inputs<'_, 's>) -> Coll<'s, ConfigError> {
    let vss = i.virtual_services;
    undefined_subsets(vss, i.destination_rules)
        .concat(undefined_gateways(vss, i.gateways))
        .concat(undefined_hosts(vss, i.services))
        .concat(undefined_ports(vss, i.services))
        .concat(unselected_gateways(i.gateways, i.gateway_workloads))
        .concat(conflicting_mesh_vss(vss))
        .concat(undefined_delegates(vss))
        .concat(unresolved_aliases(vss, i.services, i.aliased))
        .concat(vss.clone().flat_map(|(_, vs)| rules::shadowed_rules(&vs)))
        .concat(port_findings(i.defined))
        .concat(ambiguous_sidecars(i.sidecars, i.workloads, i.proxies))
        .concat(hosts_not_in_gateways(vss, i.gateways))
        .concat(duplicate_certificates(i.gateways))
        .concat(unknown_rule_hosts(i.destination_rules, i.services))
        .concat(subsets_selecting_nothing(i.destination_rules, i.endpoints))
        .concat(gateways_sharing_hosts(i.gateways, i.gateway_workloads))
        .concat(claim_routes_unverified(
            vss,
            i.gateway_workloads,
            i.workloads,
            i.security,
            i.mesh,
        ))
        .concat(gateway_ports_not_on_services(
            i.gateways,
            i.gateway_workloads,
            i.endpoints,
        ))
}

/// A Gateway with a TLS server whose certificate (the same `credentialName`, or the same
/// certificate and key files) a server of another Gateway also uses, where that Gateway
/// selects every workload this one does (its selector holds this one's labels): clients
/// that reuse one HTTP/2 connection for both servers' hosts may reach the wrong one and get
/// 404s (`MF0031`, a warning, Istio's IST0138). Gateways are few: they are paired whole.
fn duplicate_certificates<'s>(gateways: &Coll<'s, (ConfigKey, Gateway)>) -> Coll<'s, ConfigError> {
    let certificates = |g: &Gateway| -> Vec<String> {
        let mut out: Vec<String> = g
            .servers
            .iter()
            .filter_map(|s| match s.tls.as_ref()?.credential.as_ref()? {
                Credential::Secret(name) => Some(format!("credentialName {name}")),
                Credential::Granted { namespace, name } => {
                    Some(format!("certificateRef {namespace}/{name}"))
                }
                Credential::Files { cert, key, .. } => Some(format!("files {cert} and {key}")),
            })
            .collect();
        out.sort();
        out.dedup();
        out
    };
    let all = gateways.clone().map(|(k, g)| ((), (k, g)));
    all.clone()
        .join_map(all, move |_, (ka, ga), (kb, gb)| {
            let covers = ga
                .selector
                .iter()
                .all(|(k, v)| gb.selector.get(k) == Some(v));
            if ka == kb || !covers {
                return None;
            }
            let theirs = certificates(gb);
            let shared: Vec<String> = certificates(ga)
                .into_iter()
                .filter(|c| theirs.contains(c))
                .collect();
            (!shared.is_empty()).then(|| ConfigError {
                object: ka.clone(),
                code: ErrorCode::DuplicateCertificate,
                message: format!(
                    "spec.servers: the {} of a TLS server is also used by Gateway {}/{} for \
                     the same workloads: clients that reuse one HTTP/2 connection for both \
                     servers' hosts may reach the wrong one (404)",
                    shared.join(", "),
                    kb.namespace,
                    kb.name
                ),
            })
        })
        .flat_map(|e| e)
        .distinct()
}

/// A VirtualService bound to a Gateway none of whose servers serves any of its hosts (for
/// the VirtualService's namespace): its routes reach no proxy through that Gateway
/// (`MF0030`, a warning, Istio's IST0132). As Istio, one matching host is enough: hosts
/// meant for another of its gateways are not reported.
fn hosts_not_in_gateways<'s>(
    vss: &Coll<'s, (ConfigKey, VirtualService)>,
    gateways: &Coll<'s, (ConfigKey, Gateway)>,
) -> Coll<'s, ConfigError> {
    let bound = vss.clone().flat_map(|(key, vs)| {
        let mut refs: Vec<ConfigKey> = vs
            .gateways
            .iter()
            .filter_map(|g| rules::gateway_ref(g))
            .collect();
        refs.sort();
        refs.dedup();
        refs.into_iter()
            .map(|g| (g, (key.clone(), vs.hosts.clone())))
            .collect::<Vec<_>>()
    });
    bound
        .join_map(gateways.clone(), |gw, (key, hosts), g| {
            let served = g.servers.iter().flat_map(|s| &s.hosts).any(|server_host| {
                hosts.iter().any(|h| {
                    rules::gateway_domain(server_host, &gw.namespace, &key.namespace, h).is_some()
                })
            });
            (!served).then(|| ConfigError {
                object: key.clone(),
                code: ErrorCode::HostNotInGateway,
                message: format!(
                    "spec.gateways: Gateway {}/{} serves none of the hosts [{}] to namespace \
                     {}: the VirtualService's routes reach no proxy through it",
                    gw.namespace,
                    gw.name,
                    hosts.join(", "),
                    key.namespace
                ),
            })
        })
        .flat_map(|e| e)
}

/// Sidecars that leave a workload's configuration to a tie-break: several with a
/// `workloadSelector` selecting one workload (`MF0028`, Istio's IST0110), several without
/// one in a namespace (`MF0029`, IST0111). Each is reported, naming the others; meshflow
/// applies the first by name. Errors, as in Istio.
fn ambiguous_sidecars<'s>(
    sidecars: &Coll<'s, (ConfigKey, Sidecar)>,
    workloads: &Coll<'s, (String, Workload)>,
    proxies: &Coll<'s, (ProxyId, Proxy)>,
) -> Coll<'s, ConfigError> {
    let report = |code, keys: &[&ConfigKey], what: String| {
        let names: Vec<String> = keys.iter().map(|k| k.name.clone()).collect();
        keys.iter()
            .map(|k| ConfigError {
                object: (*k).clone(),
                code,
                message: format!(
                    "the Sidecars [{}] of namespace {} {what}: only one applies (the first \
                     by name)",
                    names.join(", "),
                    k.namespace
                ),
            })
            .collect::<Vec<_>>()
    };
    let namespace_wide = sidecars
        .clone()
        .filter(|(_, sc)| sc.selector.as_ref().is_none_or(|s| s.is_empty()))
        .map(|(k, _)| (k.namespace.clone(), k))
        .reduce(move |_, vals: &[(&ConfigKey, isize)], out| {
            if vals.len() > 1 {
                let keys: Vec<&ConfigKey> = vals.iter().map(|(k, _)| *k).collect();
                for e in report(
                    ErrorCode::SidecarsWithoutSelector,
                    &keys,
                    "have no workloadSelector".to_string(),
                ) {
                    out.push((e, 1isize));
                }
            }
        })
        .map(|(_, e)| e);
    let selecting = sidecars.clone().flat_map(|(k, sc)| {
        sc.selector
            .filter(|s| !s.is_empty())
            .map(|sel| (k.namespace.clone(), (k, sel)))
    });
    let pairs = workloads
        .clone()
        .map(|(_, w)| (w.origin.namespace.clone(), (w.origin, w.labels)))
        .join_map(selecting.clone(), |_, (origin, labels), (k, sel)| {
            rules::labels_match(sel, labels).then(|| (origin.clone(), k.clone()))
        })
        .flat_map(|x| x);
    // A selector no workload of its namespace matches (Istio's IST0101 for a Sidecar's
    // selector): a warning here, as for security policies (MF0020). A connected proxy the
    // selector matches counts as a workload (files may hold no Pods).
    let proxied = proxies
        .clone()
        .map(|(_, p)| (p.namespace.clone(), p.labels))
        .join_map(selecting.clone(), |_, labels, (k, sel)| {
            rules::labels_match(sel, labels).then(|| k.clone())
        })
        .flat_map(|x| x);
    let unmatched = selecting
        .map(|(_, (k, _))| (k, ()))
        .antijoin(pairs.clone().map(|(_, k)| k).concat(proxied).distinct())
        .map(|(k, ())| ConfigError {
            message: format!(
                "spec.workloadSelector: matches no workload (Pod or WorkloadEntry) of namespace \
                 {}: the Sidecar applies to nothing yet (IST0101 ReferencedResourceNotFound)",
                k.namespace
            ),
            object: k,
            code: ErrorCode::SidecarSelectsNothing,
        });
    let selected = pairs
        .reduce(move |origin, vals: &[(&ConfigKey, isize)], out| {
            if vals.len() > 1 {
                let keys: Vec<&ConfigKey> = vals.iter().map(|(k, _)| *k).collect();
                let what = format!(
                    "select the same workload ({:?} {})",
                    origin.kind, origin.name
                );
                for e in report(ErrorCode::SidecarSelectorsConflict, &keys, what) {
                    out.push((e, 1isize));
                }
            }
        })
        .map(|(_, e)| e);
    namespace_wide.concat(selected).concat(unmatched)
}

/// A DestinationRule whose host no service's host is or covers (Istio's IST0174
/// UnknownDestinationRuleHost, a warning): it applies to nothing yet.
fn unknown_rule_hosts<'s>(
    drs: &Coll<'s, (ConfigKey, DestinationRule)>,
    services: &Coll<'s, (Hostname, HostServices)>,
) -> Coll<'s, ConfigError> {
    let covered = services
        .clone()
        .flat_map(|(h, _)| rules::covering_patterns(&h))
        .distinct();
    drs.clone()
        .map(|(k, dr)| (dr.host, k))
        .antijoin(covered)
        .map(|(host, k)| ConfigError {
            object: k,
            code: ErrorCode::DestinationRuleHostUnknown,
            message: format!(
                "spec.host: {host} is the host of no Service or ServiceEntry (nor covers one): \
                 the rule applies to nothing (IST0174 UnknownDestinationRuleHost)"
            ),
        })
}

/// A subset whose labels select none of its host's endpoints, where the host has some
/// (Istio's IST0173 DestinationRuleSubsetNotSelectPods): requests routed to it find no
/// upstream (503). A subset without labels takes every endpoint; a host without endpoints
/// (files with no EndpointSlices, a DNS entry) says nothing. A warning where Istio's is an
/// error: endpoints come and go with rollouts.
fn subsets_selecting_nothing<'s>(
    drs: &Coll<'s, (ConfigKey, DestinationRule)>,
    endpoints: &super::endpoints::Resolved<'s>,
) -> Coll<'s, ConfigError> {
    let subsets = drs.clone().flat_map(|(k, dr)| {
        dr.subsets
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.labels.is_empty())
            .map(|(i, s)| {
                (
                    dr.host.clone(),
                    (k.clone(), i, s.name.clone(), s.labels.clone()),
                )
            })
            .collect::<Vec<_>>()
    });
    let labelled = endpoints
        .clone()
        .map(|((h, _), ep)| (h, ep.labels))
        .distinct();
    subsets
        .join_map(labelled, |h, (k, i, name, labels), ep| {
            (
                (h.clone(), k.clone(), *i, name.clone()),
                rules::labels_match(labels, ep),
            )
        })
        .reduce(|_, vals: &[(&bool, isize)], out| {
            if !vals.iter().any(|(m, _)| **m) {
                out.push(((), 1isize))
            }
        })
        .map(|((h, k, i, name), ())| ConfigError {
            object: k,
            code: ErrorCode::SubsetSelectsNothing,
            message: format!(
                "spec.subsets[{i}]: subset {name:?} selects none of the endpoints of {h}: \
                 requests routed to it are answered 503 (IST0173 \
                 DestinationRuleSubsetNotSelectPods)"
            ),
        })
}

/// What puts two Gateways' servers on one proxy: the same selector, or a workload both
/// select.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
enum Together {
    Selector(Labels),
    Workload(ConfigKey),
}

/// Servers of two Gateways that one proxy runs (the same selector, or a workload both
/// select) of one protocol on one port and bind that list the same host (Istio's IST0145
/// ConflictingGateways, on each Gateway): the proxy serves them on one listener, the
/// VirtualServices of both answering for that host. (Two protocols on one port are the
/// other MF0011, which the router's assembly reports.) Grouped by (what puts them
/// together, port, protocol, bind, host), so no Gateway is compared with every other.
fn gateways_sharing_hosts<'s>(
    gateways: &Coll<'s, (ConfigKey, Gateway)>,
    selected: &Coll<'s, (ConfigKey, Workload)>,
) -> Coll<'s, ConfigError> {
    type Spot = (Together, (u16, Protocol), Option<String>, String);
    let spots = |together: &Together, gw: &Gateway| -> Vec<Spot> {
        let mut out: Vec<Spot> = gw
            .servers
            .iter()
            .flat_map(|s| {
                s.hosts.iter().map(|h| {
                    (
                        together.clone(),
                        (s.port, s.protocol),
                        s.bind.clone(),
                        h.clone(),
                    )
                })
            })
            .collect();
        out.sort();
        out.dedup();
        out
    };
    let by_selector = gateways.clone().flat_map(move |(k, gw)| {
        spots(&Together::Selector(gw.selector.clone()), &gw)
            .into_iter()
            .map(|spot| (spot, k.clone()))
            .collect::<Vec<_>>()
    });
    let by_workload = selected
        .clone()
        .map(|(k, w)| (k, w.origin))
        .join_map(gateways.clone(), move |k, w, gw| {
            spots(&Together::Workload(w.clone()), gw)
                .into_iter()
                .map(|spot| (spot, k.clone()))
                .collect::<Vec<_>>()
        })
        .flat_map(|x| x);
    by_selector
        .concat(by_workload)
        .distinct()
        .reduce(
            |(_, (port, _), _, host), vals: &[(&ConfigKey, isize)], out| {
                for (k, _) in vals {
                    for (other, _) in vals.iter().filter(|(o, _)| o != k) {
                        out.push((
                            ((*k).clone(), *port, host.clone(), (*other).clone()),
                            1isize,
                        ));
                    }
                }
            },
        )
        .map(|(_, pair)| pair)
        .distinct()
        .map(|(k, port, host, other)| ((k, port, host), other))
        .reduce(|_, vals: &[(&ConfigKey, isize)], out| {
            let others: Vec<String> = vals
                .iter()
                .map(|(o, _)| format!("{}/{}", o.namespace, o.name))
                .collect();
            out.push((others.join(", "), 1isize))
        })
        .map(|((k, port, host), others)| ConfigError {
            object: k,
            code: ErrorCode::GatewayHostShared,
            message: format!(
                "spec.servers: port {port} serves host {host:?} here and in Gateway {others} \
                 on the same workloads: one listener serves both, the VirtualServices of both \
                 answering for it (IST0145 ConflictingGateways)"
            ),
        })
}

/// A VirtualService bound to a Gateway that routes on a JWT claim (`@request.auth.claims…`
/// in `headers` or `withoutHeaders`) where no RequestAuthentication applies to a workload
/// the Gateway selects (Istio's IST0149): that gateway never verifies a token, so the
/// condition never holds there. One error per (gateway, workload).
fn claim_routes_unverified<'s>(
    vss: &Coll<'s, (ConfigKey, VirtualService)>,
    selected: &Coll<'s, (ConfigKey, Workload)>,
    workloads: &Coll<'s, (String, Workload)>,
    policies: &Coll<'s, (ConfigKey, SecurityPolicy)>,
    mesh: &super::mesh::Mesh<'s>,
) -> Coll<'s, ConfigError> {
    let claims = vss.clone().flat_map(|(k, vs)| {
        let key = vs
            .http
            .iter()
            .flat_map(|r| &r.matches)
            .flat_map(|m| m.headers.keys().chain(m.without_headers.keys()))
            .find(|h| is_claim_condition(h))
            .cloned();
        let Some(key) = key else {
            return Vec::new();
        };
        vs.gateways
            .iter()
            .filter_map(|g| rules::gateway_ref(g))
            .map(|g| (g, (k.clone(), key.clone())))
            .collect()
    });
    let jwt = policies
        .clone()
        .filter(|(k, _)| k.kind == Kind::RequestAuthentication);
    let verified = super::security::applying(jwt, workloads, mesh)
        .map(|(w, _)| w)
        .distinct();
    selected
        .clone()
        .map(|(g, w)| (w.origin.clone(), g))
        .antijoin(verified)
        .map(|(w, g)| (g, w))
        .join_map(claims, |g, w, (vs, key)| ConfigError {
            object: vs.clone(),
            code: ErrorCode::ClaimRouteUnverified,
            message: format!(
                "spec.http: routes on the JWT claim {key:?} through Gateway {}/{}, and no \
                 RequestAuthentication applies to its workload {} {}/{}: that gateway never \
                 verifies a token, so the condition never holds there (IST0149 \
                 JwtClaimBasedRoutingWithoutRequestAuthN)",
                g.namespace, g.name, w.kind, w.namespace, w.name
            ),
        })
}

/// A Gateway server port that is neither a port nor a target port of the services whose
/// endpoints run on the workloads the Gateway selects (Istio's IST0162
/// GatewayPortNotDefinedOnService, a warning): clients through the gateway's Service cannot
/// reach it. Checked where some endpoint runs on those workloads (meshflow reads Services'
/// endpoints, not their selectors).
fn gateway_ports_not_on_services<'s>(
    gateways: &Coll<'s, (ConfigKey, Gateway)>,
    selected: &Coll<'s, (ConfigKey, Workload)>,
    endpoints: &super::endpoints::Resolved<'s>,
) -> Coll<'s, ConfigError> {
    // `(IP, gateway)` of every workload it selects.
    let at = selected.clone().map(|(key, w)| (w.ip, key)).distinct();
    let served = endpoints
        .clone()
        .map(|((_, port), ep)| (ep.ip, (port, ep.port)))
        .distinct();
    at.join_map(served, |_, key, ports| (key.clone(), *ports))
        .distinct()
        .map(|(key, (port, target))| (key, Some((port, target))))
        .concat(gateways.clone().map(|(k, _)| (k, None)))
        .join_map(gateways.clone(), |k, ports, gw| {
            ((k.clone(), gw.clone()), *ports)
        })
        .reduce(|(_, gw), vals: &[(&Option<(u16, u16)>, isize)], out| {
            let ports: Vec<(u16, u16)> = vals.iter().filter_map(|(p, _)| **p).collect();
            if ports.is_empty() {
                return;
            }
            let mut list: Vec<String> = ports.iter().map(|(p, t)| format!("{p}→{t}")).collect();
            list.sort();
            list.dedup();
            for (i, server) in gw.servers.iter().enumerate() {
                let n = server.port;
                if ports.iter().any(|(p, t)| *p == n || *t == n) {
                    continue;
                }
                out.push((
                    format!(
                        "spec.servers[{i}].port.number: port {n} is neither a port nor a target \
                         port of the services whose endpoints run on the workloads the Gateway \
                         selects ({}): clients through those services cannot reach it \
                         (IST0162 GatewayPortNotDefinedOnService)",
                        list.join(", ")
                    ),
                    1isize,
                ))
            }
        })
        .map(|((k, _), message)| ConfigError {
            object: k,
            code: ErrorCode::GatewayPortNotOnService,
            message,
        })
}

/// Per service, what its ports say about how sidecars will carry them: a ServiceEntry TCP
/// port (or one whose protocol is detected) without addresses (`MF0025`, Istio's IST0134);
/// a Kubernetes Service port whose name and `appProtocol` name no protocol (`MF0026`,
/// IST0118); an `ExternalName` Service port so named, or named `tcp` (`MF0027`, IST0150);
/// not Istio's own Services ([`Service::control_plane`]), as Istio. Warnings, once per
/// object (a ServiceEntry of several hosts says it once).
fn port_findings<'s>(services: &Coll<'s, (Hostname, Service)>) -> Coll<'s, ConfigError> {
    services
        .clone()
        .flat_map(|(_, s)| {
            let error = |code, message: String| ConfigError {
                object: s.origin.clone(),
                code,
                message,
            };
            let detected = |p: &ServicePort| p.protocol == Protocol::Auto;
            let mut out = Vec::new();
            match s.origin.kind {
                Kind::ServiceEntry if s.addresses.is_empty() => {
                    for (i, p) in s.ports.iter().enumerate() {
                        if p.protocol == Protocol::Tcp || detected(p) {
                            out.push(error(
                                ErrorCode::AddressesRequired,
                                format!(
                                    "spec.ports[{i}]: port {} ({}) carries TCP and the entry has \
                                     no addresses: sidecars can tell its connections apart by \
                                     port only, so every TCP service on that port shares one \
                                     route",
                                    p.port,
                                    if detected(p) {
                                        "protocol detected"
                                    } else {
                                        "TCP"
                                    }
                                ),
                            ));
                        }
                    }
                }
                Kind::Service if s.control_plane => {}
                Kind::Service if s.alias_for.is_some() => {
                    for p in s.ports.iter().filter(|p| detected(p) || p.name == "tcp") {
                        out.push(error(
                            ErrorCode::ExternalNamePortName,
                            format!(
                                "spec.ports: port {:?} ({}) of an ExternalName Service: its name \
                                 names no protocol, or names tcp; traffic to it may not pass as \
                                 the application expects",
                                p.name, p.port
                            ),
                        ));
                    }
                }
                Kind::Service => {
                    for p in s.ports.iter().filter(|p| detected(p)) {
                        out.push(error(
                            ErrorCode::PortNameConvention,
                            format!(
                                "spec.ports: port {:?} ({}): neither its name (PROTOCOL or \
                                 PROTOCOL-SUFFIX) nor its appProtocol names a protocol, so \
                                 sidecars detect the protocol per connection",
                                p.name, p.port
                            ),
                        ));
                    }
                }
                _ => {}
            }
            out
        })
        .distinct()
}

fn undefined_subsets<'s>(
    vss: &Coll<'s, (ConfigKey, VirtualService)>,
    drs: &Coll<'s, (ConfigKey, DestinationRule)>,
) -> Coll<'s, ConfigError> {
    let wanted = references(vss, |d| Some((d.host.clone(), d.subset.clone()?)));
    let defined = drs
        .clone()
        .flat_map(|(_, dr)| {
            dr.subsets
                .iter()
                .map(|s| (dr.host.clone(), s.name.clone()))
                .collect::<Vec<_>>()
        })
        .distinct();
    // A subset counts wherever a rule whose host covers the destination's defines it: the
    // host itself or a wildcard (merged rules define the union of their subsets).
    let found = wanted
        .clone()
        .map(|(hs, _)| hs)
        .distinct()
        .flat_map(|(host, subset)| {
            rules::covering_patterns(&host)
                .into_iter()
                .map(move |p| ((p, subset.clone()), host.clone()))
        })
        .semijoin(defined)
        .map(|((_, subset), host)| (host, subset))
        .distinct();
    wanted
        .antijoin(found)
        .map(|((host, subset), (key, at))| ConfigError {
            object: key,
            code: ErrorCode::SubsetNotDefined,
            message: format!(
                "{at}.subset: subset {subset:?} of host {host} is defined by no \
                 DestinationRule: requests routed to it are answered 503 (IST0101 \
                 ReferencedResourceNotFound)"
            ),
        })
}

/// A VirtualService's `gateways` entry (other than `mesh`) naming no Gateway.
fn undefined_gateways<'s>(
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

/// VirtualServices bound to the mesh that name the same host (Istio's IST0109): sidecars
/// take one of them for the host (`rules::vs_rank`), the others' routes for it are not
/// used. Each is told which others name the host.
fn conflicting_mesh_vss<'s>(vss: &Coll<'s, (ConfigKey, VirtualService)>) -> Coll<'s, ConfigError> {
    vss.clone()
        .filter(|(_, vs)| vs.binds_mesh())
        .flat_map(|(key, vs)| {
            let mut hosts = vs.hosts.clone();
            hosts.sort();
            hosts.dedup();
            let exports = exported_namespaces(&key, &vs.export_to);
            hosts
                .into_iter()
                .map(move |h| (h, (key.clone(), exports.clone())))
        })
        .reduce(|host, vals: &[(&Exported, isize)], out| {
            for ((key, exports), _) in vals {
                // Only those some namespace sees both of compete.
                let others: Vec<String> = vals
                    .iter()
                    .filter(|((k, e), _)| k != key && overlap(exports, e))
                    .map(|((k, _), _)| format!("{}/{}", k.namespace, k.name))
                    .collect();
                if others.is_empty() {
                    continue;
                }
                out.push((
                    ConfigError {
                        object: key.clone(),
                        code: ErrorCode::VirtualServiceConflict,
                        message: format!(
                            "host {host} is also routed for the mesh by VirtualService {}: \
                             sidecars use one VirtualService per host, so the routes of the \
                             others are not used for it; merge them or give each its own host \
                             (IST0109 ConflictingMeshGatewayVirtualServiceHosts)",
                            others.join(", ")
                        ),
                    },
                    1isize,
                ));
            }
        })
        .map(|(_, e)| e)
}

/// A VirtualService and the namespaces it is exported to (`None`: all).
type Exported = (ConfigKey, Option<Vec<String>>);

/// The namespaces an `exportTo` list reaches (`None`: all of them).
fn exported_namespaces(key: &ConfigKey, export_to: &[String]) -> Option<Vec<String>> {
    if export_to.is_empty() || export_to.iter().any(|e| e == "*") {
        return None;
    }
    let mut out: Vec<String> = export_to
        .iter()
        .map(|e| match e.as_str() {
            "." => key.namespace.clone(),
            ns => ns.to_string(),
        })
        .collect();
    out.sort();
    out.dedup();
    Some(out)
}

fn overlap(a: &Option<Vec<String>>, b: &Option<Vec<String>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.iter().any(|ns| b.contains(ns)),
        _ => true,
    }
}

/// A route delegating to a VirtualService that does not exist, or has hosts (only one
/// without hosts can be delegated to): the route is not generated.
fn undefined_delegates<'s>(vss: &Coll<'s, (ConfigKey, VirtualService)>) -> Coll<'s, ConfigError> {
    let wanted = vss
        .clone()
        .flat_map(|(k, vs)| vs.delegates().into_iter().map(move |d| (d, k.clone())));
    let defined = vss
        .clone()
        .filter(|(_, vs)| vs.hosts.is_empty())
        .map(|(k, _)| k)
        .distinct();
    wanted.antijoin(defined).map(|(d, key)| ConfigError {
        object: key,
        code: ErrorCode::DelegateNotFound,
        message: format!(
            "delegate {}/{} is no VirtualService without hosts: the routes delegating to it \
             are not generated (IST0101 ReferencedResourceNotFound)",
            d.namespace, d.name
        ),
    })
}

/// A route or mirror destination host no service (Service or ServiceEntry) defines, or
/// whose services are exported to none of the namespaces the VirtualService is (Istio's
/// IST0101 for a host, exportTo included).
fn undefined_hosts<'s>(
    vss: &Coll<'s, (ConfigKey, VirtualService)>,
    services: &Coll<'s, (Hostname, HostServices)>,
) -> Coll<'s, ConfigError> {
    let wanted = references(vss, |d| Some(d.host.clone()));
    let defined = services.clone().map(|(h, _)| h).distinct();
    let missing = wanted
        .clone()
        .antijoin(defined)
        .map(|(host, (key, at))| ConfigError {
            object: key,
            code: ErrorCode::HostNotFound,
            message: format!(
                "{at}.host: host {host} is defined by no Service or ServiceEntry: requests \
                 routed to it are answered 503 (IST0101 ReferencedResourceNotFound)"
            ),
        });
    let exports = vss.clone().map(|(key, vs)| (key, vs.export_to)).distinct();
    let hidden = wanted
        .map(|(host, (key, at))| (key, (host, at)))
        .join_map(exports, |key, (host, at), export_to| {
            (host.clone(), (key.clone(), at.clone(), export_to.clone()))
        })
        .join_map(services.clone(), |host, (key, at, export_to), set| {
            let scopes: Vec<&str> = if export_to.is_empty() {
                vec![key.namespace.as_str()]
            } else {
                export_to
                    .iter()
                    .map(|e| {
                        if e == "." {
                            key.namespace.as_str()
                        } else {
                            e.as_str()
                        }
                    })
                    .collect()
            };
            let seen = scopes.iter().any(|ns| match *ns {
                "*" => set
                    .all()
                    .iter()
                    .any(|s| s.export_to.is_empty() || s.export_to.iter().any(|e| e == "*")),
                ns => set.for_namespace(ns).is_some(),
            });
            (!seen).then(|| {
                let defs: Vec<String> = set.all().iter().map(|s| s.origin.to_string()).collect();
                ConfigError {
                    object: key.clone(),
                    code: ErrorCode::HostNotFound,
                    message: format!(
                        "{at}.host: host {host} is defined ({}) but not exported to namespace \
                         {}: requests routed to it there are answered 503 (IST0101 \
                         ReferencedResourceNotFound)",
                        defs.join(", "),
                        scopes.join(", ")
                    ),
                }
            })
        })
        .flat_map(|x| x);
    missing.concat(hidden)
}

/// A destination whose port its host does not have, or that names no port where its host
/// has several (Istio's IST0112): Istio then routes to the port the request arrived on (on
/// sidecars even where the host has one port only: `route::destination_at`), a cluster that
/// exists only if the host has that port too.
fn undefined_ports<'s>(
    vss: &Coll<'s, (ConfigKey, VirtualService)>,
    services: &Coll<'s, (Hostname, HostServices)>,
) -> Coll<'s, ConfigError> {
    let wanted = references(vss, |d| Some((d.host.clone(), d.port)));
    // The ports of the service the VirtualService's namespace gets.
    wanted
        .map(|((host, port), referrer)| (host, (port, referrer)))
        .join_map(services.clone(), |host, (port, referrer), set| {
            let svc = set
                .for_namespace(&referrer.0.namespace)
                .unwrap_or(set.first());
            let mut ports: Vec<u16> = svc.ports.iter().map(|p| p.port).collect();
            ports.sort();
            ports.dedup();
            (host.clone(), *port, referrer.clone(), ports)
        })
        .flat_map(|(host, port, (key, at), ports)| {
            let list = ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            let (code, message) = match port {
                Some(p) if !ports.contains(&p) => (
                    ErrorCode::PortNotFound,
                    format!(
                        "{at}.port: port {p} of host {host} is defined by no Service or \
                         ServiceEntry (its \
                         ports: {list}): requests routed to it are answered 503 (IST0101 \
                         ReferencedResourceNotFound)"
                    ),
                ),
                None if ports.len() > 1 => (
                    ErrorCode::PortSelectorRequired,
                    format!(
                        "{at}.port: a destination of host {host} names no port and the host has \
                         several \
                         ({list}): it is sent to the port the request arrived on, and answered \
                         503 where the host has no such port; add destination.port \
                         (IST0112 VirtualServiceDestinationPortSelectorRequired)"
                    ),
                ),
                _ => return None,
            };
            Some(ConfigError {
                object: key,
                code,
                message,
            })
        })
}

/// A Gateway whose selector matches the labels of no workload (Pod or WorkloadEntry): no
/// proxy takes its servers. Selectors are matched on their first label, then whole, as
/// `scopes` matches them against proxies; Istio matches them across namespaces.
/// `(gateway, namespace)` for every namespace holding a workload the Gateway selects.
fn selected_namespaces<'s>(
    selected: &Coll<'s, (ConfigKey, Workload)>,
) -> Coll<'s, (ConfigKey, String)> {
    selected
        .clone()
        .map(|(key, w)| (key, w.origin.namespace))
        .distinct()
}

/// `(gateway, workload)` for every workload (Pod or WorkloadEntry) a Gateway's selector
/// matches, in any namespace as Istio matches them; selectors joined on their first label.
/// Computed once: every analysis of Gateways' workloads reads it.
pub(super) fn gateway_workloads<'s>(
    gateways: &Coll<'s, (ConfigKey, Gateway)>,
    workloads: &Coll<'s, (String, Workload)>,
) -> Coll<'s, (ConfigKey, Workload)> {
    let by_first = gateways.clone().flat_map(|(key, gw)| {
        let first = gw
            .selector
            .iter()
            .next()
            .map(|(k, v)| (k.clone(), v.clone()));
        first.map(|label| (label, (key, gw.selector, gw.same_namespace)))
    });
    let labelled = workloads.clone().flat_map(|(_, w)| {
        w.labels
            .iter()
            .map(|(k, v)| ((k.clone(), v.clone()), w.clone()))
            .collect::<Vec<_>>()
    });
    by_first
        .join_map(labelled, |_, (key, selector, same_namespace), w| {
            // A Gateway API Gateway's deployment is in its own namespace.
            let here = !same_namespace || w.origin.namespace == key.namespace;
            (here && crate::rules::labels_match(selector, &w.labels))
                .then(|| (key.clone(), w.clone()))
        })
        .flat_map(|k| k)
        .distinct()
}

/// The Secrets the TLS servers of each Gateway name, checked in every namespace where a
/// workload it selects runs (Istio's rule: a gateway uses its own namespace's Secrets):
/// `validate` reports a missing or invalid one with no proxy connected.
pub(super) fn gateway_secrets<'s>(
    gateways: &Coll<'s, (ConfigKey, Gateway)>,
    selected: &Coll<'s, (ConfigKey, Workload)>,
    secrets: &Coll<'s, ((String, String), TlsSecret)>,
) -> Coll<'s, ConfigError> {
    #[derive(
        Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
    )]
    enum Item {
        Gateway(Gateway),
        Secret(TlsSecret),
    }
    let placed = selected_namespaces(selected).join_map(gateways.clone(), |key, ns, gw| {
        ((key.clone(), ns.clone()), gw.clone())
    });
    let found = placed
        .clone()
        .flat_map(|(at, gw)| {
            super::gateways::wanted_secrets(&at.1, &gw)
                .into_iter()
                .map(move |k| (k, at.clone()))
                .collect::<Vec<_>>()
        })
        .join_map(secrets.clone(), |_, at, s| {
            (at.clone(), Item::Secret(s.clone()))
        });
    placed
        .map(|(at, gw)| (at, Item::Gateway(gw)))
        .concat(found)
        .reduce(|(_, ns), vals: &[(&Item, isize)], out| {
            let secrets: Vec<&TlsSecret> = vals
                .iter()
                .filter_map(|(v, _)| match v {
                    Item::Secret(s) => Some(s),
                    Item::Gateway(_) => None,
                })
                .collect();
            for (v, _) in vals {
                if let Item::Gateway(gw) = v {
                    for e in crate::assemble::router_tls::credential_errors(ns, gw, &secrets) {
                        out.push((e, 1isize));
                    }
                }
            }
        })
        .map(|(_, e)| e)
}

fn unselected_gateways<'s>(
    gateways: &Coll<'s, (ConfigKey, Gateway)>,
    selected: &Coll<'s, (ConfigKey, Workload)>,
) -> Coll<'s, ConfigError> {
    let selected = selected_namespaces(selected).map(|(k, _)| k).distinct();
    gateways
        .clone()
        // A Gateway API Gateway's deployment is the operator's (meshflow provisions none):
        // its absence is its status's to say (Programmed), not an Istio analysis of a
        // Gateway nobody wrote.
        .filter(|(_, gw)| !gw.same_namespace)
        .map(|(key, gw)| (key, gw.selector))
        .antijoin(selected)
        .map(|(key, selector)| {
            let labels: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
            ConfigError {
                object: key,
                code: ErrorCode::GatewaySelectsNothing,
                message: format!(
                    "selector {{{}}} matches no workload (Pod or WorkloadEntry): no proxy serves \
                     this Gateway's servers (IST0101 ReferencedResourceNotFound)",
                    labels.join(", ")
                ),
            }
        })
}

/// Kubernetes `ExternalName` aliases that resolve to no service, as `istioctl analyze` flags
/// a host nobody serves (warnings, `MF0015`): the alias Service itself, at
/// `spec.externalName`, where its chain does not end at a service (the host it names is in no
/// registry, or its chain loops or ends at such a host) — its names then stay unknown hosts,
/// passed through or blocked as the outbound traffic policy says; and each VirtualService
/// destination naming an alias whose named host has no cluster (no service, or another
/// alias: routes follow one hop, as Istio's `GetDestinationCluster` does) — requests routed
/// there are answered 503. `services`: one per host, aliases included; `resolved`: the
/// services with aliases resolved ([`super::services::with_aliases`]).
fn unresolved_aliases<'s>(
    vss: &Coll<'s, (ConfigKey, VirtualService)>,
    services: &Coll<'s, (Hostname, HostServices)>,
    resolved: &Coll<'s, (Hostname, HostServices)>,
) -> Coll<'s, ConfigError> {
    let raw = services.clone().flat_map(|(h, s)| {
        let s = s.first();
        s.alias_for.clone().map(|t| (h, (t, s.origin.clone())))
    });
    let resolving = resolved
        .clone()
        .flat_map(|(_, s)| s.first().aliases.clone())
        .distinct();
    let defined = services.clone().map(|(h, _)| h).distinct();
    let by_target = raw
        .clone()
        .antijoin(resolving)
        .map(|(alias, (target, origin))| (target, (alias, origin)));
    let missing = by_target
        .clone()
        .antijoin(defined.clone())
        .map(|(target, (alias, origin))| ConfigError {
            object: origin,
            code: ErrorCode::AliasUnresolved,
            message: format!(
                "spec.externalName: host {target} is defined by no Service or ServiceEntry: \
                 requests for {alias} are routed to no service of the mesh (passed through or \
                 blocked as the outbound traffic policy says), as in Istio"
            ),
        });
    let broken = by_target
        .semijoin(defined)
        .map(|(target, (alias, origin))| ConfigError {
            object: origin,
            code: ErrorCode::AliasUnresolved,
            message: format!(
                "spec.externalName: the chain of ExternalName aliases through {target} loops \
                 or ends at a host no Service or ServiceEntry defines: requests for {alias} \
                 are routed to no service of the mesh (passed through or blocked as the \
                 outbound traffic policy says), as in Istio"
            ),
        });
    // Aliases whose named host has no cluster of its own: it is no service, or an alias.
    let concrete = services
        .clone()
        .filter(|(_, s)| s.first().alias_for.is_none())
        .map(|(h, _)| h);
    let dead_ends = raw
        .map(|(alias, (target, _))| (target, alias))
        .antijoin(concrete)
        .map(|(target, alias)| (alias, target));
    let named = vss.clone().flat_map(|(key, vs)| {
        destination_fields(&vs)
            .into_iter()
            .map(move |(host, field)| (host, (key.clone(), field)))
    });
    let routed = named.join_map(dead_ends, |alias, (key, field), target| ConfigError {
        object: key.clone(),
        code: ErrorCode::AliasUnresolved,
        message: format!(
            "{field}: host {alias} is an ExternalName alias of {target}, which has no cluster \
             (no Service or ServiceEntry defines it, or it is another alias: a destination \
             follows one hop, as in Istio): requests routed to it are answered 503"
        ),
    });
    missing.concat(broken).concat(routed)
}

/// Every route and mirror destination of a VirtualService (`http`, `tcp`, `tls`) with the
/// field path of its host.
fn destination_fields(vs: &VirtualService) -> Vec<(Hostname, String)> {
    let mut out = Vec::new();
    for (i, r) in vs.http.iter().enumerate() {
        for (j, d) in r.route.iter().enumerate() {
            let field = format!("spec.http[{i}].route[{j}].destination.host");
            out.push((d.host.clone(), field));
        }
        for (j, m) in r.mirrors.iter().enumerate() {
            let field = format!("spec.http[{i}].mirrors[{j}].destination.host");
            out.push((m.destination.host.clone(), field));
        }
    }
    for (kind, routes) in [
        ("tcp", vs.tcp.iter().map(|r| &r.route).collect::<Vec<_>>()),
        ("tls", vs.tls.iter().map(|r| &r.route).collect()),
    ] {
        for (i, route) in routes.into_iter().enumerate() {
            for (j, d) in route.iter().enumerate() {
                let field = format!("spec.{kind}[{i}].route[{j}].destination.host");
                out.push((d.host.clone(), field));
            }
        }
    }
    out
}
