//! The per-proxy (inbound) part: the only resources not shared by a scope, because they
//! depend on the proxy's own IPs. In: proxies, resolved endpoints. Out: `(proxy, resource)`
//! for each inbound cluster and the `virtualInbound` listener, with the endpoints and
//! workloads each inbound cluster comes from. Proxyless clients and routers have none.
//! Also per proxy: the SDS resources of its workload identity (`ROOTCA` and the stand-in
//! of its `default` certificate), for sidecars and routers whose config names them (an
//! `ISTIO_MUTUAL` cluster, an inbound mTLS chain): SDS is sent by subscription only, so a
//! proxy holding what it never asks for would show as never in sync.

use super::clusters::Placed;
use super::endpoints::Resolved;
use super::mesh::Mesh;
use super::visibility::Visible;
use super::{Built, Coll};
use crate::model::*;
use crate::rules;
use crate::translate::{self, cluster, listener, secret};
use serde::{Deserialize, Serialize};

/// What a captured sidecar's `virtualInbound` is built from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum InboundRow {
    /// The proxy is captured (its listener exists even with no port), with its node
    /// metadata `IDLE_TIMEOUT`.
    Captured(Option<u64>),
    /// A port of its own endpoints, with the protocol of a service port reaching it.
    Own(u16, Protocol),
    /// A Sidecar `ingress` port, and whether it is reached through `virtualInbound`.
    Ingress(InboundPort, bool),
    /// What the security policies selecting the proxy make it refuse.
    Security(InboundSecurity),
}

/// What one inbound cluster of a proxy is built from ([`crate::assemble::inbound_cluster_spec`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum Part {
    /// The service port reaching the proxy's port.
    Own(OwnPort),
    /// The proxy's Sidecar, where it says something of the inbound side.
    Sidecar(SidecarInbound),
    /// The connection pools of the inbound DestinationRule of `Own`'s host, and the rule.
    Rule(InboundRulePools, ConfigKey),
}

/// What the per-(proxy, port) reduce yields: the cluster's spec, and the rule it took its
/// pool from (provenance).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum SpecOut {
    Spec(InboundClusterSpec),
    From(ConfigKey),
}

/// The inputs of the inbound side that the scope stage knows.
pub(super) struct ScopeInputs<'s> {
    /// `(proxy, scope)` of every connected proxy.
    pub proxy_scopes: Coll<'s, (ProxyId, ScopeKey)>,
    /// `(scope, Sidecar inbound parts)`, for sidecar scopes (not proxyless) whose Sidecar
    /// has `ingress` or `inboundConnectionPool`.
    pub sidecars: Coll<'s, (ScopeKey, SidecarInbound)>,
    /// `ingress_ports`: the Sidecar `ingress` ports of each proxy (see
    /// [`crate::assemble::ingress_ports`]).
    pub ingress_ports: Coll<'s, (ProxyId, (InboundPort, bool))>,
    /// `(scope, host)`: what each scope sees ([`super::visibility::Visible::scope_hosts`]).
    pub scope_hosts: Coll<'s, (ScopeKey, Hostname)>,
    /// Whose service of a host several namespaces define each scope gets
    /// ([`super::visibility::Visible::picks`]).
    pub picks: Coll<'s, ((ScopeKey, Hostname), String)>,
    /// Every DestinationRule entry with the hosts it covers ([`super::clusters::Placed`]).
    pub placed: Placed<'s>,
    /// `(entry key, merged rule)` of every entry.
    pub merged_rules: Coll<'s, (ConfigKey, DestinationRule)>,
}

/// The inbound side's inputs from the scope stage, and the proxies whose scope has an
/// `ISTIO_MUTUAL` cluster (`mtls_scopes`): each proxy's Sidecar `ingress` ports and its
/// scope's Sidecar inbound parts (proxyless clients have neither).
pub(super) fn scope_inputs<'s>(
    proxy_scopes: &Coll<'s, (ProxyId, ScopeKey)>,
    specs: &Coll<'s, (ScopeKey, ScopeSpec)>,
    mtls_scopes: Coll<'s, ScopeKey>,
    visible: &Visible<'s>,
    placed: &Placed<'s>,
    merged_rules: &Coll<'s, (ConfigKey, DestinationRule)>,
) -> (ScopeInputs<'s>, Coll<'s, ProxyId>) {
    let by_scope = proxy_scopes.clone().map(|(id, s)| (s, id));
    let mtls_proxies = by_scope
        .clone()
        .semijoin(mtls_scopes.distinct())
        .map(|(_, id)| id);
    let ingress_ports = by_scope
        .join_map(specs.clone(), |s, id, spec| {
            if s.is_proxyless() {
                return Vec::new();
            }
            crate::assemble::ingress_ports(spec)
                .into_iter()
                .map(|p| (id.clone(), p))
                .collect::<Vec<_>>()
        })
        .flat_map(|x| x);
    let sidecars = specs.clone().flat_map(|(s, spec)| {
        if s.is_proxyless() {
            return None;
        }
        let sc = spec.sidecar.as_ref().and_then(SidecarInbound::of)?;
        Some((s, sc))
    });
    let inputs = ScopeInputs {
        proxy_scopes: proxy_scopes.clone(),
        sidecars,
        ingress_ports,
        scope_hosts: visible.scope_hosts.clone(),
        picks: visible.picks.clone(),
        placed: placed.clone(),
        merged_rules: merged_rules.clone(),
    };
    (inputs, mtls_proxies)
}

/// `services`: the protocol of each port. Inbound clusters: one per port of the proxy's own
/// endpoints (or per Sidecar `ingress` listener, which then replace them, as Istio builds
/// inbound from `ingress` only; a proxy with `INTERCEPTION_MODE: NONE` and no `ingress`
/// has none), with the connection pool of the Sidecar, else of the
/// inbound DestinationRule of the port's service (the rule the proxy's scope has for the
/// host, not one with a `workloadSelector`, as Istio looks it up for inbound traffic): a
/// rule change reaches only the inbound clusters of its host's workloads.
pub(super) fn per_proxy<'s>(
    proxies: Coll<'s, (ProxyId, Proxy)>,
    endpoints: Resolved<'s>,
    services: &Coll<'s, (Hostname, HostServices)>,
    mesh: &Mesh<'s>,
    scope: ScopeInputs<'s>,
    mtls: Coll<'s, ProxyId>,
    security: Coll<'s, (ProxyId, InboundSecurity)>,
) -> Built<'s, ProxyId> {
    let ScopeInputs {
        proxy_scopes,
        sidecars,
        ingress_ports,
        scope_hosts,
        picks,
        placed,
        merged_rules,
    } = scope;
    let sidecar_proxies = proxies
        .clone()
        .filter(|(_, p)| p.kind == ProxyKind::Sidecar);
    // The Sidecar of each proxy, where it says something of the inbound side.
    let proxy_sidecar = proxy_scopes
        .clone()
        .map(|(id, s)| (s, id))
        .join_map(sidecars, |_, id, sc| (id.clone(), sc.clone()));
    // A Sidecar with `ingress` listeners replaces the proxy's own inbound ports, as in Istio.
    let with_ingress = proxy_sidecar
        .clone()
        .filter(|(_, sc)| !sc.ingress.is_empty())
        .map(|(id, _)| id)
        .distinct();
    let own = OwnPorts::of(&sidecar_proxies, endpoints, services, &with_ingress);
    let identity = workload_secrets(
        &proxies,
        &sidecar_proxies,
        &own,
        &proxy_sidecar,
        &with_ingress,
        mtls.concat(
            security
                .clone()
                .filter(|(_, s)| s.names_certificate())
                .map(|(id, _)| id),
        ),
        mesh,
    );
    let provenance = own
        .origins
        .map(|((id, port), origins)| (id, (port, origins)))
        .antijoin(with_ingress)
        .flat_map(|(id, (port, origins))| {
            let key = inbound_cluster_key(id, port);
            origins
                .into_iter()
                .map(move |o| (key.clone(), o))
                .collect::<Vec<_>>()
        })
        .distinct();
    let rule_parts = rule_parts(
        &own.least,
        proxy_scopes,
        (scope_hosts, picks),
        placed,
        merged_rules,
    );
    let clusters = inbound_clusters(own.least, proxy_sidecar, rule_parts, mesh);
    let virtual_inbound = virtual_inbound(
        sidecar_proxies,
        own.protocols,
        ingress_ports,
        security,
        mesh,
    );
    Built {
        resources: clusters.resources.concat(virtual_inbound).concat(identity),
        provenance: provenance.concat(clusters.provenance),
    }
}

/// The provenance key of the inbound cluster of a proxy's port.
fn inbound_cluster_key(id: ProxyId, port: u16) -> (Holder, ResourceType, String) {
    (
        Holder::Proxy(id),
        ResourceType::Cluster,
        translate::inbound_cluster_name(port),
    )
}

/// A sidecar's own ports: the endpoints at its IPs, for proxies that have an inbound side.
struct OwnPorts<'s> {
    /// `((proxy, port), origins)`: the objects each endpoint at the proxy's port came from.
    origins: Coll<'s, ((ProxyId, u16), Vec<ConfigKey>)>,
    /// `((proxy, port), service port)`: the least service port reaching it.
    least: Coll<'s, ((ProxyId, u16), OwnPort)>,
    /// The `virtualInbound` rows of the proxy's ports, with their protocols.
    protocols: Coll<'s, (ProxyId, InboundRow)>,
}

impl<'s> OwnPorts<'s> {
    fn of(
        sidecar_proxies: &Coll<'s, (ProxyId, Proxy)>,
        endpoints: Resolved<'s>,
        services: &Coll<'s, (Hostname, HostServices)>,
        with_ingress: &Coll<'s, ProxyId>,
    ) -> Self {
        let proxy_ips = sidecar_proxies.clone().flat_map(|(id, p)| {
            p.ips
                .iter()
                .map(|ip| (ip.clone(), id.clone()))
                .collect::<Vec<_>>()
        });
        // Each endpoint serves its own namespace's service of the host.
        let protocols = services.clone().flat_map(|(h, set)| {
            set.all()
                .iter()
                .flat_map(|s| {
                    let ns = s.namespace().to_string();
                    let h = h.clone();
                    s.ports
                        .iter()
                        .map(move |p| ((h.clone(), p.port, ns.clone()), p.protocol))
                })
                .collect::<Vec<_>>()
        });
        let endpoints = endpoints.map(|((h, sp), ep)| {
            let ns = ep.service_namespace().to_string();
            ((h, sp, ns), ep)
        });
        let endpoints = endpoints.join_map(protocols, |(h, sp, _), ep, protocol| {
            (
                ep.clone(),
                OwnPort {
                    host: h.clone(),
                    service_port: *sp,
                    protocol: *protocol,
                },
            )
        });
        // A proxy without capture (`INTERCEPTION_MODE: NONE`) whose Sidecar has no `ingress`
        // has no inbound side at all: Istio builds neither listeners nor clusters from its
        // own ports then (binding them would take the application's ports).
        let no_inbound = sidecar_proxies
            .clone()
            .filter(|(_, p)| p.interception_none)
            .map(|(id, _)| (id, ()))
            .antijoin(with_ingress.clone())
            .map(|(id, ())| id);
        let rows = proxy_ips
            .join_map(
                endpoints.map(|(ep, own)| (ep.ip, (ep.port, own, ep.origins))),
                |_, id, (port, own, origins)| (id.clone(), (*port, own.clone(), origins.clone())),
            )
            .antijoin(no_inbound)
            .map(|(id, (port, own, origins))| ((id, port), (own, origins)));
        let protocols = rows
            .clone()
            .map(|((id, port), (own, _))| (id, InboundRow::Own(port, own.protocol)))
            .distinct();
        let least = rows
            .clone()
            .map(|(k, (own, _))| (k, own))
            .reduce(|_, vals: &[(&OwnPort, isize)], out| out.push((vals[0].0.clone(), 1isize)));
        OwnPorts {
            origins: rows.map(|(k, (_, origins))| (k, origins)),
            least,
            protocols,
        }
    }
}

/// The SDS resources of the workload identity of each proxy that names its workload
/// certificate: an `ISTIO_MUTUAL` cluster (`mtls`), `virtualInbound`'s mTLS chain of a port
/// of its own (unless `ingress` replaces them), or a Sidecar `ingress` listener without
/// `tls` (one with `tls` has no mTLS chain).
fn workload_secrets<'s>(
    proxies: &Coll<'s, (ProxyId, Proxy)>,
    sidecar_proxies: &Coll<'s, (ProxyId, Proxy)>,
    own: &OwnPorts<'s>,
    proxy_sidecar: &Coll<'s, (ProxyId, SidecarInbound)>,
    with_ingress: &Coll<'s, ProxyId>,
    mtls: Coll<'s, ProxyId>,
    mesh: &Mesh<'s>,
) -> Coll<'s, (ProxyId, Resource)> {
    let captured_ids = sidecar_proxies
        .clone()
        .filter(|(_, p)| !p.interception_none)
        .map(|(id, _)| id);
    let mtls_ingress = proxy_sidecar
        .clone()
        .filter(|(_, sc)| sc.ingress.iter().any(|l| l.tls.is_none()))
        .map(|(id, _)| id)
        .distinct();
    let referencing = own
        .origins
        .clone()
        .map(|(k, _)| k)
        .distinct()
        .map(|(id, _)| (id, ()))
        .semijoin(captured_ids)
        .antijoin(with_ingress.clone())
        .map(|(id, ())| id)
        .concat(mtls_ingress)
        .concat(mtls)
        .distinct();
    // A proxy's identity (namespace, service account) and the mesh's trust domain and root.
    proxies
        .clone()
        .semijoin(referencing)
        .map(|(id, p)| ((), (id, p)))
        .join_map(mesh.clone(), |_, (id, p), m| {
            secret::workload_secrets(p, m)
                .into_iter()
                .map(|r| (id.clone(), r))
                .collect::<Vec<_>>()
        })
        .flat_map(|x| x)
}

/// The inbound rule of each (scope, host) some proxy's own port is reached by, where the
/// scope sees the host: the least-ranked rule without a `workloadSelector` (Istio honours
/// selectors for outbound traffic only), if it sets a connection pool. Out: the rule's part
/// of each `(proxy, port)`'s inbound cluster.
fn rule_parts<'s>(
    own: &Coll<'s, ((ProxyId, u16), OwnPort)>,
    proxy_scopes: Coll<'s, (ProxyId, ScopeKey)>,
    (scope_hosts, picks): (
        Coll<'s, (ScopeKey, Hostname)>,
        Coll<'s, ((ScopeKey, Hostname), String)>,
    ),
    placed: Placed<'s>,
    merged_rules: Coll<'s, (ConfigKey, DestinationRule)>,
) -> Coll<'s, ((ProxyId, u16), Part)> {
    let own_scoped = own
        .clone()
        .map(|((id, port), o)| (id, (port, o.host)))
        .join_map(proxy_scopes, |id, (port, h), s| {
            ((s.clone(), h.clone()), (id.clone(), *port))
        });
    let needed = own_scoped
        .clone()
        .map(|(k, _)| (k, ()))
        .distinct()
        .semijoin(scope_hosts);
    let chosen = super::visibility::with_picks(needed, &picks)
        .map(|((s, h), p)| (h, (s, p)))
        .join_map(placed, |h, (s, p), (e, svc_ns, root)| {
            (p.as_ref().is_none_or(|p| p == svc_ns)
                && rules::dr_entry_relevant(&e.namespace, s.namespace(), svc_ns, root))
            .then(|| {
                (
                    (s.clone(), h.clone()),
                    (e.clone(), svc_ns.clone(), root.clone()),
                )
            })
        })
        .flat_map(|x| x)
        .reduce(
            |(s, h), vals: &[(&(rules::DrEntry, String, String), isize)], out| {
                let entries: Vec<&rules::DrEntry> = vals.iter().map(|(v, _)| &v.0).collect();
                let (_, svc_ns, root) = vals[0].0;
                if let Some(e) = rules::dr_in_effect_inbound(&entries, s, h, svc_ns, root) {
                    out.push((e.key.clone(), 1isize));
                }
            },
        );
    let rules = chosen
        .map(|(sh, k)| (k, sh))
        .join_map(merged_rules, |k, sh, dr| {
            let pools = dr.inbound_pools();
            (!pools.is_empty()).then(|| (sh.clone(), (k.clone(), pools)))
        })
        .flat_map(|x| x);
    own_scoped.join_map(rules, |_, (id, port), (key, pools)| {
        ((id.clone(), *port), Part::Rule(pools.clone(), key.clone()))
    })
}

/// Each proxy's inbound clusters from the parts of each `(proxy, port)`: its own service
/// port, its Sidecar's inbound side and the inbound rule's pools; with the rule as a source
/// where its pool is the cluster's.
fn inbound_clusters<'s>(
    own: Coll<'s, ((ProxyId, u16), OwnPort)>,
    proxy_sidecar: Coll<'s, (ProxyId, SidecarInbound)>,
    rule_parts: Coll<'s, ((ProxyId, u16), Part)>,
    mesh: &Mesh<'s>,
) -> Built<'s, ProxyId> {
    let own_ports = own.clone().map(|((id, port), _)| (id, port));
    let sidecar_parts = own_ports
        .join_map(proxy_sidecar.clone(), |id, port, sc| {
            ((id.clone(), *port), Part::Sidecar(sc.clone()))
        })
        .concat(proxy_sidecar.flat_map(|(id, sc)| {
            sc.ingress
                .iter()
                .map(|l| ((id.clone(), l.port), Part::Sidecar(sc.clone())))
                .collect::<Vec<_>>()
        }))
        .distinct();
    let specs = own
        .map(|(k, o)| (k, Part::Own(o)))
        .concat(sidecar_parts)
        .concat(rule_parts)
        .reduce(|(_, port), vals: &[(&Part, isize)], out| {
            let (mut own, mut sidecar, mut rule) = (None, None, None);
            for (part, _) in vals {
                match part {
                    Part::Own(o) => own = Some(o),
                    Part::Sidecar(s) => sidecar = Some(s),
                    Part::Rule(pools, key) => rule = Some((pools, key)),
                }
            }
            let Some(spec) = crate::assemble::inbound_cluster_spec(
                *port,
                own,
                sidecar,
                rule.map(|(pools, _)| pools),
            ) else {
                return;
            };
            // The rule is a source only where its pool is the cluster's.
            let from_rule = own.is_some()
                && sidecar.and_then(|s| s.pool(*port)).is_none()
                && spec.pool.is_some();
            if let (true, Some((_, key))) = (from_rule, rule) {
                out.push((SpecOut::From(key.clone()), 1isize));
            }
            out.push((SpecOut::Spec(spec), 1isize));
        });
    let provenance = specs.clone().flat_map(|((id, port), b)| match b {
        SpecOut::From(key) => Some((inbound_cluster_key(id, port), key)),
        SpecOut::Spec(_) => None,
    });
    let resources = specs
        .flat_map(|((id, _), b)| match b {
            SpecOut::Spec(spec) => Some(((), (id, spec))),
            SpecOut::From(_) => None,
        })
        .join_map(mesh.clone(), |_, (id, spec), m| {
            (id.clone(), cluster::inbound(spec, m.connect_timeout_ms))
        });
    Built {
        resources,
        provenance,
    }
}

/// Every captured sidecar's `virtualInbound`, from its own ports' protocols and its Sidecar
/// `ingress` ports, with its node metadata `IDLE_TIMEOUT` and what the security policies
/// selecting it make it refuse.
fn virtual_inbound<'s>(
    sidecar_proxies: Coll<'s, (ProxyId, Proxy)>,
    own_protocols: Coll<'s, (ProxyId, InboundRow)>,
    ingress_ports: Coll<'s, (ProxyId, (InboundPort, bool))>,
    security: Coll<'s, (ProxyId, InboundSecurity)>,
    mesh: &Mesh<'s>,
) -> Coll<'s, (ProxyId, Resource)> {
    // Every captured sidecar has a `virtualInbound`, even with no port of its own: the
    // `Captured` row makes its group exist.
    let captured = sidecar_proxies
        .filter(|(_, p)| !p.interception_none)
        .map(|(id, p)| (id, InboundRow::Captured(p.idle_timeout_ns)));
    own_protocols
        .concat(ingress_ports.map(|(id, (p, via))| (id, InboundRow::Ingress(p, via))))
        .concat(captured.clone())
        .concat(security.map(|(id, s)| (id, InboundRow::Security(s))))
        .semijoin(captured.map(|(id, _)| id).distinct())
        .reduce(|_, vals: &[(&InboundRow, isize)], out| {
            let own = vals.iter().filter_map(|(r, _)| match r {
                InboundRow::Own(port, protocol) => Some((*port, *protocol)),
                _ => None,
            });
            let ingress = vals.iter().filter_map(|(r, _)| match r {
                InboundRow::Ingress(p, via) => Some((p.clone(), *via)),
                _ => None,
            });
            let idle = vals.iter().find_map(|(r, _)| match r {
                InboundRow::Captured(idle) => *idle,
                _ => None,
            });
            let sec = vals.iter().find_map(|(r, _)| match r {
                InboundRow::Security(s) => Some(s.clone()),
                _ => None,
            });
            let ports = InboundPort::of_proxy(own, ingress);
            out.push(((ports, idle, sec.unwrap_or_default()), 1isize));
        })
        // The mesh's detection timeout joins once per proxy's ports.
        .map(|(id, ports)| ((), (id, ports)))
        .join_map(mesh.clone(), |_, (id, (ports, idle, sec)), m| {
            let detection = m.protocol_detection_timeout_ms;
            let l = listener::virtual_inbound_secured(ports, detection, sec, &m.inbound_mtls);
            let l = crate::assemble::apply_path_normalization(m.path_normalization, l);
            (id.clone(), crate::assemble::apply_idle_timeout(*idle, l))
        })
}
