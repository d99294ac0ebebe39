//! The per-proxy (inbound) part: the only resources not shared by a scope, because they
//! depend on the proxy's own IPs. In: proxies, resolved endpoints. Out: `(proxy, resource)`
//! for each inbound cluster and the `virtualInbound` listener, with the endpoints and
//! workloads each inbound cluster comes from. Proxyless clients and routers have none.
//! Also per proxy: the SDS resources of its workload identity (`ROOTCA` and the stand-in
//! of its `default` certificate), for sidecars and routers whose config names them (an
//! `ISTIO_MUTUAL` cluster, an inbound mTLS chain): SDS is sent by subscription only, so a
//! proxy holding what it never asks for would show as never in sync.

use super::endpoints::Resolved;
use super::mesh::Mesh;
use super::{Built, Coll};
use crate::model::*;
use crate::translate::{self, cluster, listener, secret};
use serde::{Deserialize, Serialize};

/// What a captured sidecar's `virtualInbound` is built from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum InboundRow {
    /// The proxy is captured (its listener exists even with no port).
    Captured,
    /// A port of its own endpoints, with the protocol of a service port reaching it.
    Own(u16, Protocol),
    /// A Sidecar `ingress` port, and whether it is reached through `virtualInbound`.
    Ingress(InboundPort, bool),
}

/// `ingress`: the inbound clusters the proxy's Sidecar `ingress` gives, by port, in place of
/// all those of its own endpoints (as Istio, which then builds inbound from `ingress` only), and `ingress_ports` its ports (see
/// [`crate::assemble::ingress_ports`]); `services`: the protocol of each port.
pub(super) fn per_proxy<'s>(
    proxies: Coll<'s, (ProxyId, Proxy)>,
    endpoints: Resolved<'s>,
    services: &Coll<'s, (Hostname, Service)>,
    mesh: &Mesh<'s>,
    ingress: Coll<'s, (ProxyId, (u16, Resource))>,
    ingress_ports: Coll<'s, (ProxyId, (InboundPort, bool))>,
    mtls: Coll<'s, ProxyId>,
) -> Built<'s, ProxyId> {
    let sidecar_proxies = proxies
        .clone()
        .filter(|(_, p)| p.kind == ProxyKind::Sidecar);
    // The proxy's own service ports: the endpoints at its IPs.
    let proxy_ips = sidecar_proxies.clone().flat_map(|(id, p)| {
        p.ips
            .iter()
            .map(|ip| (ip.clone(), id.clone()))
            .collect::<Vec<_>>()
    });
    let protocols = services.clone().flat_map(|(h, s)| {
        s.ports
            .iter()
            .map(|p| ((h.clone(), p.port), p.protocol))
            .collect::<Vec<_>>()
    });
    let endpoints = endpoints.join_map(protocols, |_, ep, protocol| (ep.clone(), *protocol));
    let inbound_rows = proxy_ips.join_map(
        endpoints.map(|(ep, protocol)| (ep.ip, (ep.port, protocol, ep.origins))),
        |_, id, (port, protocol, origins)| ((id.clone(), *port), (*protocol, origins.clone())),
    );
    let own_protocols = inbound_rows
        .clone()
        .map(|((id, port), (protocol, _))| (id, InboundRow::Own(port, protocol)))
        .distinct();
    let inbound_rows = inbound_rows.map(|(k, (_, origins))| (k, origins));
    let inbound_ports = inbound_rows.clone().map(|(k, _)| k).distinct();
    let captured_ids = sidecar_proxies
        .clone()
        .filter(|(_, p)| !p.interception_none)
        .map(|(id, _)| id);
    // Who names its workload certificate: an `ISTIO_MUTUAL` cluster, `virtualInbound`'s
    // mTLS chain of a port, or a Sidecar `ingress`.
    let referencing = inbound_ports
        .clone()
        .map(|(id, _)| (id, ()))
        .semijoin(captured_ids)
        .map(|(id, ())| id)
        .concat(ingress.clone().map(|(id, _)| id))
        .concat(mtls)
        .distinct();
    // A proxy's identity (namespace, service account) and the mesh's trust domain and root.
    let identity = proxies
        .clone()
        .semijoin(referencing)
        .map(|(id, p)| ((), (id, p)))
        .join_map(mesh.clone(), |_, (id, p), m| {
            secret::workload_secrets(p, m)
                .into_iter()
                .map(|r| (id.clone(), r))
                .collect::<Vec<_>>()
        })
        .flat_map(|x| x);
    // A Sidecar with `ingress` listeners replaces the proxy's own inbound ports, as in Istio.
    let with_ingress = ingress.clone().map(|(id, _)| id).distinct();
    let provenance = inbound_rows
        .map(|((id, port), origins)| (id, (port, origins)))
        .antijoin(with_ingress.clone())
        .flat_map(|(id, (port, origins))| {
            let key = (
                Holder::Proxy(id),
                ResourceType::Cluster,
                translate::inbound_cluster_name(port),
            );
            origins
                .into_iter()
                .map(move |o| (key.clone(), o))
                .collect::<Vec<_>>()
        })
        .distinct();
    let inbound_clusters = inbound_ports
        .clone()
        .antijoin(with_ingress)
        .map(|row| ((), row))
        .join_map(mesh.clone(), |_, (id, port), m| {
            (id.clone(), cluster::inbound(*port, m.connect_timeout_ms))
        });
    // Every captured sidecar has a `virtualInbound`, even with no port of its own: the
    // `Captured` row makes its group exist.
    let captured = sidecar_proxies
        .filter(|(_, p)| !p.interception_none)
        .map(|(id, _)| (id, InboundRow::Captured));
    let virtual_inbound = own_protocols
        .concat(ingress_ports.map(|(id, (p, via))| (id, InboundRow::Ingress(p, via))))
        .concat(captured.clone())
        .semijoin(captured.map(|(id, _)| id).distinct())
        .reduce(|_, vals: &[(&InboundRow, isize)], out| {
            let own = vals.iter().filter_map(|(r, _)| match r {
                InboundRow::Own(port, protocol) => Some((*port, *protocol)),
                _ => None,
            });
            let ingress = vals.iter().filter_map(|(r, _)| match r {
                InboundRow::Ingress(p, via) => Some((*p, *via)),
                _ => None,
            });
            let ports = InboundPort::of_proxy(own, ingress);
            out.push((listener::virtual_inbound(&ports), 1isize));
        });
    Built {
        resources: inbound_clusters
            .concat(ingress.map(|(id, (_, c))| (id, c)))
            .concat(virtual_inbound)
            .concat(identity),
        provenance,
    }
}
