//! A ServiceEntry (its services, endpoints, DNS endpoints and workload selection) and a
//! WorkloadEntry (a workload), which share the fields of an endpoint.

use super::fields::{
    cidr, export_to, is_fqdn, port_u16, protocol_of, report_ignored, server_protocol, spec,
};
use super::Result;
use crate::config::findings::Finding;
use crate::config::{istio, Invalid};
use dataflows::model::{self as m, ConfigKey, Record};
use serde_yaml_ng::Value;

pub(super) fn service_entry(
    key: &ConfigKey,
    value: &Value,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (istio::ServiceEntrySpec, _) = spec(value)?;
    report_ignored(&ignored, findings, |_| None);
    if s.hosts.is_empty() {
        return Err(Invalid::field(
            "spec.hosts",
            "at least one host is required",
        ));
    }
    let resolution = resolution(s.resolution.as_deref())?;
    // Istio's default location is MESH_EXTERNAL.
    let mesh_external = match s.location.as_deref() {
        None | Some("MESH_EXTERNAL") => true,
        Some("MESH_INTERNAL") => false,
        Some(other) => {
            return Err(Invalid::field(
                "spec.location",
                format!("unknown location {other:?} (MESH_EXTERNAL or MESH_INTERNAL)"),
            ))
        }
    };
    let (ports, target_ports) = entry_ports(&s.ports)?;
    let addresses = s
        .addresses
        .iter()
        .enumerate()
        .map(|(i, a)| cidr(a, &format!("spec.addresses[{i}]")))
        .collect::<Result<Vec<_>>>()?;
    let exports = export_to(&s.export_to, "spec.exportTo")?;
    // With resolution NONE, sidecars send connections to their original destination and
    // gateways balance over the endpoints (EDS), as Istio's routers do: the endpoints (and the
    // workloads a selector picks) are records for those.
    let dns = matches!(
        resolution,
        m::Resolution::Dns | m::Resolution::DnsRoundRobin
    );
    let dns_endpoints = if dns {
        dns_endpoints(&s, &ports, &target_ports)?
    } else {
        Vec::new()
    };
    if dns && s.endpoints.is_empty() {
        // Envoy resolves the hosts themselves: each must be a name DNS can answer.
        for (i, host) in s.hosts.iter().enumerate() {
            if !is_fqdn(host) {
                return Err(Invalid::field(
                    format!("spec.hosts[{i}]"),
                    format!(
                        "{host:?} is not a fully qualified domain name, which resolution {} \
                         needs when no endpoints are given",
                        s.resolution.as_deref().unwrap_or_default()
                    ),
                ));
            }
        }
    }
    let unix = s.endpoints.iter().any(|e| e.address.starts_with("unix://"));
    if unix && ports.len() != 1 {
        return Err(Invalid::field(
            "spec.ports",
            "exactly one port is allowed beside unix domain socket endpoints",
        ));
    }
    if s.workload_selector.is_some() && !s.endpoints.is_empty() {
        return Err(Invalid::field(
            "spec.workloadSelector",
            "only one of workloadSelector or endpoints is allowed",
        ));
    }
    // Where a selected workload receives traffic when it names no port of its own.
    let selection = s
        .workload_selector
        .as_ref()
        .map(|sel| m::WorkloadSelection {
            origin: key.clone(),
            labels: sel.labels.clone(),
            ports: ports
                .iter()
                .zip(&target_ports)
                .map(|(p, t)| m::SelectedPort {
                    name: p.name.clone(),
                    target: t.unwrap_or(p.port),
                })
                .collect(),
        });
    if selection.is_some() && dns {
        findings.push(Finding::warning(
            "spec.workloadSelector",
            format!(
                "with resolution {}, the selected workloads are not used: the hosts \
                 themselves are resolved",
                s.resolution.as_deref().unwrap_or("NONE")
            ),
        ));
    }
    // A host resolved itself is reached at the port's targetPort, as Istio does.
    let host_target_ports: std::collections::BTreeMap<String, u16> =
        if dns && s.endpoints.is_empty() {
            ports
                .iter()
                .zip(&target_ports)
                .filter_map(|(p, t)| Some((p.name.clone(), (*t)?)))
                .collect()
        } else {
            std::collections::BTreeMap::new()
        };
    let mut out = Vec::new();
    for host in &s.hosts {
        out.push(Record::Service(m::Service {
            control_plane: false,
            hostname: host.clone(),
            origin: key.clone(),
            ports: ports.clone(),
            export_to: exports.clone(),
            resolution,
            addresses: addresses.clone(),
            dns_endpoints: dns_endpoints.clone(),
            host_target_ports: host_target_ports.clone(),
            subject_alt_names: s.subject_alt_names.clone(),
            mesh_external,
            prefer_close: false,
            headless: false,
            alias_for: None,
            aliases: Vec::new(),
        }));
        if dns {
            continue;
        }
        if let Some(sel) = &selection {
            out.push(Record::Selection(host.clone(), sel.clone()));
        }
        out.extend(endpoint_records(key, host, &s, &ports, &target_ports)?);
    }
    Ok(out)
}

/// A ServiceEntry's `resolution` (unset: NONE).
fn resolution(resolution: Option<&str>) -> Result<m::Resolution> {
    Ok(match resolution {
        None | Some("NONE") => m::Resolution::None,
        Some("STATIC") => m::Resolution::Static,
        Some("DNS") => m::Resolution::Dns,
        Some("DNS_ROUND_ROBIN") => m::Resolution::DnsRoundRobin,
        // Istio 1.29's dynamic forward proxy for wildcard hosts: no cluster meshflow could
        // build would resolve the host the request names, so the entry is refused by name
        // rather than served as something else.
        Some("DYNAMIC_DNS") => {
            return Err(Invalid::field(
                "spec.resolution",
                "DYNAMIC_DNS (Istio's dynamic forward proxy) is not supported yet; the entry \
                 is not served",
            ))
        }
        Some(other) => {
            return Err(Invalid::field(
                "spec.resolution",
                format!("unknown resolution {other:?}"),
            ))
        }
    })
}

/// A ServiceEntry's `ports`, and where each port's endpoints receive traffic when an
/// endpoint names no port of its own (its `targetPort`).
fn entry_ports(list: &[istio::ServicePort]) -> Result<(Vec<m::ServicePort>, Vec<Option<u16>>)> {
    let mut ports = Vec::new();
    // Where each port's endpoints receive traffic when an endpoint names no port of its own.
    let mut target_ports = Vec::new();
    for (i, p) in list.iter().enumerate() {
        target_ports.push(
            p.target_port
                .map(|t| port_u16(t, &format!("spec.ports[{i}].targetPort")))
                .transpose()?,
        );
        let proto = if p.protocol.is_empty() {
            protocol_of(&p.name, None)
        } else {
            server_protocol(&p.protocol)
        };
        let port = m::ServicePort {
            name: p.name.clone(),
            port: port_u16(p.number, &format!("spec.ports[{i}].number"))?,
            protocol: proto,
        };
        ports.push(port);
    }
    Ok((ports, target_ports))
}

/// The endpoint records of host `host` of a ServiceEntry not resolved by DNS: each endpoint
/// (an IP or a unix domain socket) at each port of the entry.
fn endpoint_records(
    key: &ConfigKey,
    host: &str,
    s: &istio::ServiceEntrySpec,
    ports: &[m::ServicePort],
    target_ports: &[Option<u16>],
) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    for (ei, ep) in s.endpoints.iter().enumerate() {
        let unix = ep.address.starts_with("unix://");
        if unix && (ep.address.len() == "unix://".len() || !ep.ports.is_empty()) {
            return Err(Invalid::field(
                format!("spec.endpoints[{ei}]"),
                format!(
                    "{:?}: a unix domain socket endpoint needs a path and takes no ports",
                    ep.address
                ),
            ));
        }
        if !unix && ep.address.parse::<std::net::IpAddr>().is_err() {
            return Err(Invalid::field(
                format!("spec.endpoints[{ei}].address"),
                format!("{:?} is not an IP address", ep.address),
            ));
        }
        let placement = placement(ep, &format!("spec.endpoints[{ei}]"))?;
        for (p, target_port) in ports.iter().zip(target_ports) {
            let target = endpoint_port(ep, ei, p, *target_port)?;
            out.push(Record::Endpoint(
                host.to_string(),
                m::RawEndpoint {
                    ip: ep.address.clone(),
                    port_name: p.name.clone(),
                    port: target,
                    ready: true,
                    labels: labels_with_network(ep),
                    origin: key.clone(),
                    placement: placement.clone(),
                    service_account: ep.service_account.clone(),
                },
            ));
        }
    }
    Ok(out)
}

/// The endpoints of a DNS or DNS_ROUND_ROBIN entry, which Envoy resolves in place of its
/// hosts: each a host name or IP, with its port for every port of the entry.
fn dns_endpoints(
    s: &istio::ServiceEntrySpec,
    ports: &[m::ServicePort],
    target_ports: &[Option<u16>],
) -> Result<Vec<m::DnsEndpoint>> {
    if s.resolution.as_deref() == Some("DNS_ROUND_ROBIN") && s.endpoints.len() > 1 {
        return Err(Invalid::field(
            "spec.endpoints",
            "resolution DNS_ROUND_ROBIN allows at most one endpoint",
        ));
    }
    s.endpoints
        .iter()
        .enumerate()
        .map(|(ei, ep)| {
            if ep.address.parse::<std::net::IpAddr>().is_err() && !is_fqdn(&ep.address) {
                return Err(Invalid::field(
                    format!("spec.endpoints[{ei}].address"),
                    format!(
                        "{:?} is not a fully qualified domain name or an IP address",
                        ep.address
                    ),
                ));
            }
            let ports = ports
                .iter()
                .zip(target_ports)
                .map(|(p, target)| Ok((p.name.clone(), endpoint_port(ep, ei, p, *target)?)))
                .collect::<Result<_>>()?;
            Ok(m::DnsEndpoint {
                address: ep.address.clone(),
                ports,
                labels: labels_with_network(ep),
                placement: placement(ep, &format!("spec.endpoints[{ei}]"))?,
                service_account: ep.service_account.clone(),
            })
        })
        .collect()
}

/// The port endpoint `ei` of a ServiceEntry listens on for the entry's port `p`: its own
/// `ports` entry by the port's name, else the port's targetPort, else its number.
fn endpoint_port(
    ep: &istio::WorkloadEntrySpec,
    ei: usize,
    p: &m::ServicePort,
    target_port: Option<u16>,
) -> Result<u16> {
    match ep.ports.get(&p.name) {
        Some(n) => port_u16(*n, &format!("spec.endpoints[{ei}].ports.{}", p.name)),
        None => Ok(target_port.unwrap_or(p.port)),
    }
}

pub(super) fn workload_entry(
    key: &ConfigKey,
    value: &Value,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (istio::WorkloadEntrySpec, _) = spec(value)?;
    report_ignored(&ignored, findings, |_| None);
    if s.address.parse::<std::net::IpAddr>().is_err() {
        return Err(Invalid::field(
            "spec.address",
            format!("{:?} is not an IP address", s.address),
        ));
    }
    let ports = s
        .ports
        .iter()
        .map(|(name, n)| Ok((name.clone(), port_u16(*n, &format!("spec.ports.{name}"))?)))
        .collect::<Result<_>>()?;
    Ok(vec![Record::Workload(m::Workload {
        ip: s.address.clone(),
        labels: labels_with_network(&s),
        origin: key.clone(),
        ports,
        placement: placement(&s, "spec")?,
        service_account: s.service_account.clone(),
        peer: None,
    })])
}

/// A WorkloadEntry's (or ServiceEntry endpoint's) labels, with its `network` as the label
/// `topology.istio.io/network` where it has no such label, as Istio labels endpoints (a
/// `failoverPriority` on that label and a subset's selector read it). Without network
/// gateways in the mesh networks, Istio reaches endpoints on every network directly, and so
/// does meshflow.
fn labels_with_network(s: &istio::WorkloadEntrySpec) -> m::Labels {
    let mut labels = s.labels.clone();
    if let Some(network) = s.network.as_deref().filter(|n| !n.is_empty()) {
        labels
            .entry(m::NETWORK_LABEL.to_string())
            .or_insert_with(|| network.to_string());
    }
    labels
}

/// A WorkloadEntry's (or ServiceEntry endpoint's) `locality` and `weight`.
fn placement(s: &istio::WorkloadEntrySpec, field: &str) -> Result<m::Placement> {
    let weight = match s.weight {
        // Istio's zero is "unset".
        None | Some(0) => None,
        Some(w) => Some(u32::try_from(w).map_err(|_| {
            Invalid::field(
                format!("{field}.weight"),
                format!("{w} is not a weight (0 to 4294967295)"),
            )
        })?),
    };
    let locality = s.locality.clone().unwrap_or_default();
    if locality.split('/').count() > 3 {
        return Err(Invalid::field(
            format!("{field}.locality"),
            format!("{locality:?} is not a locality (region/zone/subzone)"),
        ));
    }
    Ok(m::Placement { locality, weight })
}
