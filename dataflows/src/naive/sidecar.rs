//! A sidecar scope's outbound side (route configurations and listeners per port) and a
//! sidecar proxy's inbound side (its own ports).

use super::clusters::EndpointIndex;
use super::view::View;
use super::with_idle_timeout;
use crate::assemble::{self, PortListener, TcpPort};
use crate::model::*;
use crate::rules;
use crate::translate::tcp::TcpTarget;
use crate::translate::{cluster, listener, route};
use std::collections::{BTreeMap, BTreeSet};

/// The egress listener at `idx` alone: VirtualServices are selected per egress listener.
fn listener_at(listeners: &[EgressListener], idx: usize) -> &[EgressListener] {
    listeners.get(idx..=idx).unwrap_or(&[])
}

/// Per port of a sidecar: (address, bound) of its TCP listener, and its TCP services.
type TcpPorts<'a> = BTreeMap<u16, (PortListener, BTreeMap<&'a str, Vec<ResolvedVs>>)>;

/// A sidecar scope's route configurations and outbound listeners.
pub(super) fn sidecar_outbound(
    v: &View,
    mesh: &MeshConfig,
    s: &ScopeKey,
    interception_none: bool,
    proxyless: bool,
) -> Vec<Resource> {
    let mut res = Vec::new();
    let spec = ScopeSpec::new(v.sidecar_spec(s).cloned(), &v.mesh);
    let listeners = rules::egress_listeners(spec.sidecar.as_ref());
    let mut rows: BTreeMap<u16, (UnknownHosts, BTreeMap<&str, Option<ResolvedVs>>)> =
        BTreeMap::new();
    let mut catch_all_ports = BTreeSet::new();
    let mut api_listeners = BTreeSet::new();
    // Per port: how its TCP listener is reached, and the TCP services on it.
    let mut tcp_ports: TcpPorts = BTreeMap::new();
    for (port, allow_any) in assemble::sidecar_fixed_routes(&spec, interception_none, proxyless) {
        rows.entry(port).or_insert((allow_any, BTreeMap::new()));
    }
    for (idx, hosts) in v.view_hosts(s).into_iter().enumerate() {
        for h in hosts {
            let Some(svc) = v.service(s.namespace(), h) else {
                continue;
            };
            for (port, addr, bind, detect) in
                rules::sidecar_tcp_ports(&listeners, idx, svc, interception_none, proxyless)
            {
                let entry = tcp_ports.entry(port).or_insert((
                    PortListener::new(addr, bind, detect, &spec),
                    BTreeMap::new(),
                ));
                let covering = v.vss_covering(s, listener_at(&listeners, idx), h);
                entry
                    .1
                    .insert(h, covering.into_iter().map(|vs| v.resolve(vs)).collect());
            }
            for (port, allow_any, catch_all) in rules::sidecar_route_ports(
                &listeners,
                idx,
                svc,
                interception_none,
                proxyless,
                &spec,
            ) {
                if proxyless {
                    api_listeners.insert((h, port));
                }
                if catch_all {
                    catch_all_ports.insert(port);
                }
                let entry = rows
                    .entry(port)
                    .or_insert((allow_any.clone(), BTreeMap::new()));
                entry.0 = allow_any;
                entry.1.insert(
                    h,
                    v.vs_for(s, listener_at(&listeners, idx), h)
                        .map(|vs| v.resolve(vs)),
                );
            }
        }
    }
    let mut alias_rows = alias_rows(v, s, &spec, &listeners, interception_none, proxyless);
    let hashing = v.hashing(s);
    for (port, (allow_any, vhosts)) in rows {
        let vhosts = route::SidecarVhosts {
            aliases: alias_rows.remove(&port).unwrap_or_default(),
            services: vhosts
                .into_iter()
                .filter_map(|(h, vs)| Some((v.service(s.namespace(), h)?.clone(), vs)))
                .collect(),
            hostless: if port == 80 {
                v.hostless_vss(s, &listeners, proxyless)
            } else {
                Vec::new()
            },
        };
        res.push(route::sidecar_route_config(
            port,
            s,
            &mesh.domain_suffix,
            &vhosts,
            allow_any,
            spec.default_retries.as_ref(),
            &hashing,
        ));
    }
    let http_ports = if interception_none {
        BTreeSet::new()
    } else {
        catch_all_ports
    };
    let listener_ports: BTreeSet<u16> =
        http_ports.iter().chain(tcp_ports.keys()).copied().collect();
    let idle = v.tcp_idle(s);
    for port in listener_ports {
        let tcp = tcp_ports.get(&port).map(|(how, targets)| {
            let targets: Vec<TcpTarget> = targets
                .iter()
                .filter_map(|(h, vs)| Some((v.service(s.namespace(), h)?.clone(), vs.clone())))
                .collect();
            (how, targets)
        });
        // The services it cannot reach are the dataflow's to report, not the oracle's.
        res.extend(
            assemble::sidecar_port_listener(
                s.source(),
                port,
                http_ports.contains(&port),
                tcp.as_ref().map(|(how, targets)| TcpPort {
                    how,
                    targets,
                    idle: &idle,
                }),
            )
            .listener,
        );
    }
    res.extend(assemble::sidecar_fixed_listeners(
        &spec,
        interception_none,
        proxyless,
        &s.ingress_security().cloned().unwrap_or_default(),
    ));
    res.extend(api_listeners.into_iter().flat_map(|(h, port)| {
        listener::api_listeners(h, port, s.namespace(), &mesh.domain_suffix)
    }));
    with_idle_timeout(s, res)
}

/// `ExternalName` aliases that a VirtualService of their own governs, per HTTP port they
/// declare.
fn alias_rows(
    v: &View,
    s: &ScopeKey,
    spec: &ScopeSpec,
    listeners: &[EgressListener],
    interception_none: bool,
    proxyless: bool,
) -> BTreeMap<u16, Vec<(Service, ResolvedVs)>> {
    let mut alias_rows: BTreeMap<u16, Vec<(Service, ResolvedVs)>> = BTreeMap::new();
    for (idx, hosts) in v
        .view_hosts_of(s, &v.alias_services)
        .into_iter()
        .enumerate()
    {
        for h in hosts {
            let alias = v.alias_services[h][0];
            let Some(vs) = v.vs_for(s, listener_at(listeners, idx), h) else {
                continue;
            };
            for (port, _, _) in rules::sidecar_route_ports(
                listeners,
                idx,
                alias,
                interception_none,
                proxyless,
                spec,
            ) {
                alias_rows
                    .entry(port)
                    .or_default()
                    .push((alias.clone(), v.resolve(vs)));
            }
        }
    }
    alias_rows
}

/// The proxy's own ports; a proxyless client, a router, and a sidecar without capture
/// whose Sidecar has no `ingress` have no inbound side.
pub(super) fn inbound(v: &View, index: &EndpointIndex, p: &Proxy, s: &ScopeKey) -> Vec<Resource> {
    let ScopeKey::Sidecar {
        interception_none,
        proxyless,
        ..
    } = s
    else {
        return Vec::new();
    };
    let (interception_none, proxyless) = (*interception_none, *proxyless);
    let sidecar = v
        .sidecar_spec(s)
        .filter(|_| !proxyless)
        .and_then(SidecarInbound::of);
    let connect_timeout_ms = v.mesh.connect_timeout_ms;
    // Without capture and without Sidecar `ingress`, the proxy has no inbound side: its own
    // ports give neither listeners nor clusters, as in Istio.
    let no_inbound = interception_none && sidecar.as_ref().is_none_or(|sc| sc.ingress.is_empty());
    // Each own endpoint's port, with the service port it serves.
    let own_ports: Vec<(u16, OwnPort)> = p
        .ips
        .iter()
        .filter(|_| !proxyless && !no_inbound)
        .flat_map(|ip| index.by_ip.get(ip.as_str()).into_iter().flatten())
        .filter_map(|(h, svc_port, ep)| {
            let svc = v.service_of_namespace(h, ep.service_namespace())?;
            let sp = svc.ports.iter().find(|sp| sp.port == *svc_port)?;
            let own = OwnPort {
                host: h.to_string(),
                service_port: *svc_port,
                protocol: sp.protocol,
            };
            Some((ep.port, own))
        })
        .collect();
    let own: Vec<(u16, Protocol)> = own_ports.iter().map(|(p, o)| (*p, o.protocol)).collect();
    // Per port, the least service port reaching it.
    let mut chosen: BTreeMap<u16, &OwnPort> = BTreeMap::new();
    for (port, o) in &own_ports {
        let e = chosen.entry(*port).or_insert(o);
        if o < *e {
            *e = o;
        }
    }
    let mut ports: BTreeSet<u16> = chosen.keys().copied().collect();
    ports.extend(
        sidecar
            .iter()
            .flat_map(|sc| sc.ingress.iter().map(|l| l.port)),
    );
    let seen: BTreeSet<&str> = if chosen.is_empty() {
        BTreeSet::new()
    } else {
        v.view_hosts(s).into_iter().flatten().collect()
    };
    let mut res: Vec<Resource> = ports
        .iter()
        .filter_map(|port| {
            let own = chosen.get(port).copied();
            let rule = own
                .filter(|o| seen.contains(o.host.as_str()))
                .and_then(|o| v.inbound_dr_for(s, v.service(s.namespace(), &o.host)?))
                .map(|dr| dr.inbound_pools())
                .filter(|pools| !pools.is_empty());
            let spec = assemble::inbound_cluster_spec(*port, own, sidecar.as_ref(), rule.as_ref())?;
            Some(cluster::inbound(&spec, connect_timeout_ms))
        })
        .collect();
    if !interception_none {
        let ingress_ports = if proxyless {
            Vec::new()
        } else {
            assemble::ingress_ports(&ScopeSpec::new(v.sidecar_spec(s).cloned(), &v.mesh))
        };
        let l = listener::virtual_inbound_secured(
            &InboundPort::of_proxy(own, ingress_ports),
            v.mesh.protocol_detection_timeout_ms,
            &v.inbound_security(p),
            &v.mesh.inbound_mtls,
        );
        let l = assemble::apply_path_normalization(v.mesh.path_normalization, l);
        res.push(assemble::apply_idle_timeout(p.idle_timeout_ns, l));
    }
    res
}
