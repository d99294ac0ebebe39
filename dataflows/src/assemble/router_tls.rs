//! A gateway proxy's TLS servers, shared by the dataflow and the naive recompute: which
//! Secrets a terminating server takes its certificate from (its workload's namespace, as
//! Istio allows, or, for a Gateway API certificate a ReferenceGrant allows, the Secret's
//! own), the SNI chains of HTTPS, terminating TLS and PASSTHROUGH servers, and each HTTPS
//! server's own route configuration (with the 421s of its misdirected hosts). What cannot
//! be served fails closed: a server whose Secret is missing or invalid, or a `tls[]` route
//! whose SNI names the server does not serve, gets no chain, and an error names the
//! Gateway (or VirtualService), the field and the Secret.

use super::binding::{add_via, listen_port, server_vhosts, sort_vhosts};
use crate::model::*;
use crate::rules::{gateway_domain, host_matches};
use crate::translate::gateway_tls::{https_route_name, server_names, TlsChain, TlsChains};
use crate::translate::{route, secret, tcp};
use std::collections::{BTreeMap, BTreeSet};

/// A router's TLS listeners, HTTPS route configurations and SDS secrets (each with its
/// inputs), the errors of what it cannot serve, and the addresses and ports it holds.
#[derive(Default)]
pub struct TlsServers {
    pub resources: Vec<(Resource, BTreeSet<ConfigKey>)>,
    pub errors: Vec<ConfigError>,
    /// Each with the Gateways whose servers it serves.
    pub ports: BTreeMap<(String, u16), BTreeSet<ConfigKey>>,
}

/// The SDS resources a terminating `server` of `gw` needs from the Secrets of `namespace`
/// (the gateway workload's), each with the Secret it comes from; none for files. An error
/// naming the Gateway, the field and the Secret when one is missing or cannot be served.
pub fn credential(
    namespace: &str,
    gw: &Gateway,
    server: &GatewayServer,
    secrets: &[&TlsSecret],
) -> Result<Vec<(Resource, ConfigKey)>, ConfigError> {
    let Some(tls) = server.tls.as_deref() else {
        return Ok(Vec::new());
    };
    let Some(credential) = tls.credential.as_ref() else {
        return Ok(Vec::new());
    };
    let (Some((namespace, name)), Some((cert_name, ca_name))) = (
        credential.secret(namespace),
        secret::credential_names(credential),
    ) else {
        return Ok(Vec::new());
    };
    let find = |n: &str| {
        secrets
            .iter()
            .find(|s| s.key.namespace == namespace && s.key.name == n)
    };
    let fail = |why: String| ConfigError {
        object: gw.key.clone(),
        code: ErrorCode::GatewaySecret,
        message: format!(
            "{}.tls.credentialName: Secret {namespace}/{name} {why}; the server's filter chain \
             (port {}) is not generated",
            server.field, server.port
        ),
    };
    let Some(s) = find(name) else {
        return Err(fail(match &tls.credential {
            Some(Credential::Granted { .. }) => "does not exist".into(),
            _ => "does not exist (a gateway uses Secrets of its workload's namespace only)".into(),
        }));
    };
    let id = s.serving_identity().map_err(fail)?;
    let mut out = vec![(secret::certificate(&cert_name, id), s.key.clone())];
    if let Some(c) = &tls.client_ca {
        // A Gateway API frontend validation: its CA bundle, from ConfigMaps.
        out.push((secret::validation(&c.sds_name, &c.pem), gw.key.clone()));
    } else if matches!(
        tls.mode,
        ServerTlsMode::Mutual | ServerTlsMode::OptionalMutual
    ) {
        let companion = format!("{name}-cacert");
        let ca = match &s.ca {
            Some(ca) => (ca.clone(), s.key.clone()),
            None => match find(&companion) {
                Some(c) if c.problem.is_some() => {
                    return Err(fail(format!(
                        "has no CA certificate, and Secret {namespace}/{companion} cannot be \
                         served: {}",
                        c.problem.as_deref().unwrap_or_default()
                    )))
                }
                Some(c) if c.ca.is_some() => (
                    c.ca.as_ref().unwrap_or(&String::new()).clone(),
                    c.key.clone(),
                ),
                _ => {
                    return Err(fail(format!(
                        "has no CA certificate (ca.crt or cacert) for {}, nor does a \
                         Secret {namespace}/{companion}",
                        if tls.mode == ServerTlsMode::Mutual {
                            "MUTUAL"
                        } else {
                            "OPTIONAL_MUTUAL"
                        }
                    )))
                }
            },
        };
        out.push((secret::validation(&ca_name, &ca.0), ca.1));
    }
    Ok(out)
}

/// Every credential error of `gw`'s servers for a workload in `namespace` (the analysis
/// `validate` prints, with no proxy connected).
pub fn credential_errors(
    namespace: &str,
    gw: &Gateway,
    secrets: &[&TlsSecret],
) -> Vec<ConfigError> {
    gw.servers
        .iter()
        .filter_map(|s| credential(namespace, gw, s, secrets).err())
        .collect()
}

/// The TLS servers of a router in `namespace`: listeners per address and port not already
/// an HTTP server's (`http`), for its proxies (`source`).
#[allow(clippy::too_many_arguments)] // the router's inputs, each of its own kind
pub fn servers(
    source: Source,
    namespace: &str,
    gateways: &[&Gateway],
    vss: &[(&ConfigKey, &ResolvedVs)],
    secrets: &[&TlsSecret],
    hashing: &Hashing,
    idle: &TcpTimeouts,
    http: &BTreeMap<(String, u16), BTreeSet<ConfigKey>>,
    clusters: &[String],
    ports: &[(u16, u16)],
) -> TlsServers {
    let mut out = TlsServers::default();
    let mut listeners: BTreeMap<(String, u16), (TlsChains, BTreeSet<ConfigKey>)> = BTreeMap::new();
    for gw in gateways {
        for server in &gw.servers {
            let Some(tls) = server.tls.as_deref() else {
                continue;
            };
            let addr = server.bind.clone().unwrap_or_else(|| "0.0.0.0".into());
            let key = (addr, listen_port(ports, server.port));
            // A clash within one Gateway is left out (and said) when it is read.
            if let Some(holders) = http.get(&key) {
                if !holders.contains(&gw.key) {
                    out.errors
                        .extend(ConfigError::port_clash(gw, server, holders, "HTTP"));
                }
                continue;
            }
            let (chains, inputs) = listeners.entry(key).or_default();
            inputs.insert(gw.key.clone());
            match tls.mode {
                ServerTlsMode::Simple
                | ServerTlsMode::Mutual
                | ServerTlsMode::OptionalMutual
                | ServerTlsMode::IstioMutual => {
                    let material = match credential(namespace, gw, server, secrets) {
                        Ok(m) => m,
                        Err(e) => {
                            out.errors.push(e);
                            continue;
                        }
                    };
                    if tls.tcp {
                        let added =
                            terminate_tcp(gw, server, tls, vss, source, idle, chains, inputs);
                        // A Gateway API listener's TLSRoutes: chains by their SNI names.
                        let by_sni = if tls.sni_routes {
                            let at = (source, idle, Some(tls));
                            sni_routes(gw, server, vss, at, chains, inputs, &mut out.errors)
                        } else {
                            0
                        };
                        match (added, by_sni) {
                            (Added::All | Added::Some, _) | (_, 1..) => {
                                for (r, from) in material {
                                    inputs.insert(from.clone());
                                    out.resources.push((r, [gw.key.clone(), from].into()));
                                }
                            }
                            (Added::Taken, 0) => out.errors.push(taken(gw, server)),
                            (Added::NoRoute, 0) => {}
                        }
                        continue;
                    }
                    let name = https_route_name(
                        server.port,
                        &server.port_name,
                        &gw.key.name,
                        &gw.key.namespace,
                        server.bind.as_deref(),
                    );
                    let chain = TlsChain::Terminate {
                        tls,
                        route: name.clone(),
                    };
                    if chains.add(server_names(&server.hosts), chain).is_none() {
                        out.errors.push(taken(gw, server));
                        continue;
                    }
                    for (r, from) in material {
                        inputs.insert(from.clone());
                        out.resources.push((r, [gw.key.clone(), from].into()));
                    }
                    let mut route_inputs: BTreeSet<ConfigKey> = [gw.key.clone()].into();
                    let mut vhosts = route::GatewayVhosts::new();
                    server_vhosts(gw, server, vss, &mut route_inputs, &mut vhosts);
                    sort_vhosts(&mut vhosts);
                    let misdirected = misdirected(server, tls, &mut vhosts);
                    let rc = route::gateway_route_config(
                        &name,
                        server.port,
                        true,
                        source,
                        &vhosts,
                        &BTreeSet::new(),
                        &misdirected,
                        hashing,
                    );
                    out.resources.push((rc, route_inputs));
                }
                ServerTlsMode::Passthrough => {
                    let at = (source, idle, None);
                    sni_routes(gw, server, vss, at, chains, inputs, &mut out.errors);
                }
                ServerTlsMode::AutoPassthrough => auto_passthrough(server, clusters, idle, chains),
            }
        }
    }
    for ((addr, port), (chains, inputs)) in listeners {
        if chains.is_empty() {
            continue;
        }
        let gateways = inputs
            .iter()
            .filter(|k| k.kind == Kind::Gateway)
            .cloned()
            .collect();
        out.resources.push((chains.listener(&addr, port), inputs));
        out.ports.insert((addr, port), gateways);
    }
    out
}

/// The domains a terminating HTTPS server answers 421 for (its `misdirected` siblings: the
/// other HTTPS listeners of its Gateway API Gateway on its port). A domain of the server's
/// own virtual hosts that a sibling matches more specifically than the server's listener
/// hostname does leaves its routes and is answered 421 as well (the spec: another listener
/// with an exact match or a more specific wildcard takes it); a sibling hostname the server
/// keeps a virtual host of is not repeated (its domains would clash). Where a sibling is
/// less specific than the server (a wildcard covering its hostname, or none), a host of the
/// server's own hostname without routes answers 404 from an empty virtual host of that
/// hostname, not the sibling's 421: the server's listener is the one that matches it.
fn misdirected(
    server: &GatewayServer,
    tls: &ServerTls,
    vhosts: &mut route::GatewayVhosts,
) -> BTreeSet<String> {
    if tls.misdirected.is_empty() {
        return BTreeSet::new();
    }
    let own = server
        .hosts
        .first()
        .and_then(|h| h.split_once('/'))
        .map_or("*", |(_, h)| h);
    let claimed: Vec<String> = vhosts
        .keys()
        .filter(|d| {
            tls.misdirected
                .iter()
                .any(|s| crate::rules::gateway_api::misdirected_to(s, own, d))
        })
        .cloned()
        .collect();
    let mut out: BTreeSet<String> = claimed.into_iter().collect();
    for d in &out {
        vhosts.remove(d);
    }
    out.extend(
        tls.misdirected
            .iter()
            .filter(|s| !vhosts.contains_key(*s))
            .cloned(),
    );
    let covered = tls
        .misdirected
        .iter()
        .any(|s| s != own && crate::rules::gateway_api::hostname_covers(s, own));
    if own != "*" && covered && !out.contains(own) {
        vhosts.entry(own.to_string()).or_default();
    }
    out
}

/// What became of a terminating TLS server's chains.
enum Added {
    All,
    /// Some chains, not all: earlier servers took the rest of its names.
    Some,
    /// None: earlier servers took every name.
    Taken,
    /// No `tcp[]` route applies: no chain (Istio generates none either).
    NoRoute,
}

/// Whether the VirtualService, bound to the gateway (and exported to the router's
/// namespace: [`crate::assemble::router_resources`] keeps only those), names a host the
/// server serves.
fn server_takes(gw: &Gateway, server: &GatewayServer, rvs: &ResolvedVs) -> bool {
    let vs_ns = &rvs.vs.key.namespace;
    rvs.vs.hosts.iter().any(|h| {
        server
            .hosts
            .iter()
            .any(|sh| gateway_domain(sh, &gw.key.namespace, vs_ns, h).is_some())
    })
}

/// The chains of a TLS server that terminates (`tls.tcp`): it takes the `tcp[]` routes
/// of the VirtualServices bound to the gateway whose hosts it serves, as a TCP server
/// does ([`tcp::chains`]: the first route that applies, with `destinationSubnets` as
/// address ranges), each a chain matched on the server's hosts as SNI names that
/// terminates with the server's certificate and passes the decrypted stream on.
#[allow(clippy::too_many_arguments)] // the server, its routes and what it adds to
fn terminate_tcp<'a>(
    gw: &Gateway,
    server: &GatewayServer,
    tls: &'a ServerTls,
    vss: &[(&ConfigKey, &ResolvedVs)],
    source: Source,
    idle: &TcpTimeouts,
    chains: &mut TlsChains<'a>,
    inputs: &mut BTreeSet<ConfigKey>,
) -> Added {
    let mut bound: Vec<(ResolvedVs, Vec<String>)> = Vec::new();
    for (_, rvs) in vss.iter().filter(|(k, _)| **k == gw.key) {
        let serves = server_takes(gw, server, rvs);
        if serves && !rvs.vs.tcp.is_empty() {
            inputs.insert(rvs.vs.key.clone());
            add_via(&mut bound, rvs, &gw.key);
        }
    }
    bound.sort_by(|a, b| a.0.vs.key.cmp(&b.0.vs.key));
    for (_, via) in bound.iter_mut() {
        via.sort();
    }
    let pairs: Vec<(&ResolvedVs, &[String])> =
        bound.iter().map(|(v, g)| (v, g.as_slice())).collect();
    let list = tcp::chains(&pairs, server.port, source, None);
    if list.is_empty() {
        return Added::NoRoute;
    }
    let names = server_names(&server.hosts);
    let total = list.len();
    let mut added = 0;
    for (ranges, dests) in list {
        let timeout = tcp::timeout_of(idle, &dests);
        let chain = TlsChain::TerminateTcp {
            tls,
            ranges,
            dests,
            timeout,
        };
        if chains.add(names.clone(), chain).is_some() {
            added += 1;
        }
    }
    match added {
        0 => Added::Taken,
        n if n == total => Added::All,
        _ => Added::Some,
    }
}

/// The chains of an AUTO_PASSTHROUGH server: one per outbound cluster of the gateway's
/// scope (`outbound|PORT|SUBSET|HOST`) whose host the server's hosts match, matched on the
/// SNI Istio's clients send for it (`outbound_.PORT_.SUBSET_.HOST`: `outbound_.9080_._.HOST`
/// for no subset), a
/// `tcp_proxy` to that cluster. A name no chain claims is refused (no chain matches).
fn auto_passthrough(
    server: &GatewayServer,
    clusters: &[String],
    idle: &TcpTimeouts,
    chains: &mut TlsChains,
) {
    let sorted: BTreeSet<&String> = clusters.iter().collect();
    for name in sorted {
        let Some((port, subset, host)) = crate::translate::outbound_cluster_parts(name) else {
            continue;
        };
        let serves = server.hosts.iter().any(|sh| {
            let bare = sh.split_once('/').map_or(sh.as_str(), |(_, h)| h);
            host_matches(bare, host)
        });
        if !serves {
            continue;
        }
        let sni = format!("outbound_.{port}_.{subset}_.{host}");
        // Istio gives each chain the limits of the host's rule, as to a TCP route's.
        let dests = vec![(name.clone(), 100)];
        let chain = TlsChain::Passthrough {
            ranges: Vec::new(),
            timeout: tcp::timeout_of(idle, &dests),
            dests,
        };
        // A name an earlier server on the port took stays with it.
        let _ = chains.add(vec![sni], chain);
    }
}

/// What is said of a server whose SNI names earlier servers on its port already take.
fn taken(gw: &Gateway, server: &GatewayServer) -> ConfigError {
    ConfigError {
        object: gw.key.clone(),
        code: ErrorCode::TlsRouteUnmatched,
        message: format!(
            "{}.hosts: every host is already served by an earlier TLS server on port {}; this \
             server gets no filter chain",
            server.field, server.port
        ),
    }
}

/// The chains of a server's `tls[]` routes: one per applicable match of each `tls[]` route
/// of the VirtualServices bound to the gateway whose hosts it serves, for the match's SNI
/// names the server serves — passed through (a PASSTHROUGH server: `terminate` is `None`),
/// or terminated with `terminate` and the decrypted stream passed on (a Gateway API TLS
/// listener that terminates, its TLSRoutes). A match left with none is an error naming it.
/// How many chains were added.
#[allow(clippy::too_many_arguments)] // the server, its routes and what it adds to
fn sni_routes<'a>(
    gw: &Gateway,
    server: &GatewayServer,
    vss: &[(&ConfigKey, &ResolvedVs)],
    (source, idle, terminate): (Source, &TcpTimeouts, Option<&'a ServerTls>),
    chains: &mut TlsChains<'a>,
    inputs: &mut BTreeSet<ConfigKey>,
    errors: &mut Vec<ConfigError>,
) -> usize {
    let mut added = 0;
    let via = format!("{}/{}", gw.key.namespace, gw.key.name);
    let mut bound: Vec<(ResolvedVs, Vec<String>)> = Vec::new();
    for (_, rvs) in vss.iter().filter(|(k, _)| **k == gw.key) {
        let serves = server_takes(gw, server, rvs);
        if serves && !rvs.vs.tls.is_empty() {
            add_via(&mut bound, rvs, &gw.key);
        }
    }
    bound.sort_by(|a, b| a.0.vs.key.cmp(&b.0.vs.key));
    for (rvs, _) in &bound {
        let vs_ns = &rvs.vs.key.namespace;
        inputs.insert(rvs.vs.key.clone());
        for (ri, r) in rvs.vs.tls.iter().enumerate() {
            let dests = tcp::destinations(&r.route, server.port, rvs);
            if dests.is_empty() {
                continue;
            }
            for (mi, m) in r.matches.iter().enumerate() {
                if !m.applies(server.port, &[&via], source) {
                    continue;
                }
                let names: Vec<String> = m
                    .sni_hosts
                    .iter()
                    .filter_map(|sni| {
                        server
                            .hosts
                            .iter()
                            .find_map(|sh| gateway_domain(sh, &gw.key.namespace, vs_ns, sni))
                    })
                    .collect();
                let names = server_names(&names);
                let field = format!("spec.tls[{ri}].match[{mi}].sniHosts");
                if names.is_empty() && !m.sni_hosts.iter().any(|h| h == "*") {
                    errors.push(unmatched(&rvs.vs.key, &field, &m.sni_hosts, gw, server));
                    continue;
                }
                let (ranges, timeout) =
                    (m.destination_subnets.clone(), tcp::timeout_of(idle, &dests));
                let chain = match terminate {
                    None => TlsChain::Passthrough {
                        ranges,
                        dests: dests.clone(),
                        timeout,
                    },
                    Some(tls) => TlsChain::TerminateTcp {
                        tls,
                        ranges,
                        dests: dests.clone(),
                        timeout,
                    },
                };
                if chains.add(names, chain).is_some() {
                    added += 1;
                } else {
                    errors.push(ConfigError {
                        object: rvs.vs.key.clone(),
                        code: ErrorCode::TlsRouteUnmatched,
                        message: format!(
                            "{field}: every name is already routed by an earlier route on \
                             port {} of Gateway {via}; this match gets no filter chain",
                            server.port
                        ),
                    });
                }
            }
        }
    }
    added
}

/// What is said of a `tls[]` match whose SNI names the gateway server does not serve.
fn unmatched(
    vs: &ConfigKey,
    field: &str,
    sni: &[String],
    gw: &Gateway,
    server: &GatewayServer,
) -> ConfigError {
    ConfigError {
        object: vs.clone(),
        code: ErrorCode::TlsRouteUnmatched,
        message: format!(
            "{field}: none of {sni:?} is among the hosts {:?} of Gateway {}/{} {} (port {}); \
             the match gets no filter chain",
            server.hosts, gw.key.namespace, gw.key.name, server.field, server.port
        ),
    }
}
