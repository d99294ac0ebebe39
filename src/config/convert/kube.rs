//! Kubernetes kinds: a Service to its service record, Endpoints and EndpointSlices to
//! endpoints, a Pod to its workloads, a Namespace to its labels (what Gateway listeners'
//! namespace selectors match). (A Secret is [`crate::config::secret`]'s.)

use super::fields::{cidr, export_to, is_fqdn, metadata_map, port_u16, protocol_of, typed};
use super::Result;
use crate::config::findings::{Finding, IGNORED};
use crate::config::Invalid;
use dataflows::model::{self as m, ConfigKey, Labels, MeshConfig, Record};
use serde_yaml_ng::Value;

/// A Namespace's labels, with the name label Kubernetes gives every Namespace (a file may
/// leave it out; the API server never does).
pub(super) fn namespace(key: &ConfigKey, value: &Value) -> Result<Vec<Record>> {
    let mut labels = metadata_map(value, "labels");
    labels
        .entry(m::NAMESPACE_NAME_LABEL.to_string())
        .or_insert_with(|| key.name.clone());
    Ok(vec![Record::GatewayApi(m::GatewayApiObject::Namespace(
        m::NamespaceLabels {
            key: key.clone(),
            labels,
        },
    ))])
}

pub(super) fn service(
    key: &ConfigKey,
    value: Value,
    mesh: &MeshConfig,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let annotations = metadata_map(&value, "annotations");
    let labels = metadata_map(&value, "labels");
    let control_plane =
        labels.contains_key("istio") || labels.get("release").is_some_and(|r| r == "istio");
    let svc: k8s_openapi::api::core::v1::Service = typed(value, "")?;
    let spec = svc.spec.unwrap_or_default();
    service_fields_not_read(&spec, findings);
    istio_annotations_not_read(&annotations, findings);
    let prefer_close = prefers_close(&spec, &annotations);
    let headless = spec.cluster_ip.as_deref() == Some("None");
    // An ExternalName service is an alias of the host it names, as Istio (1.21 and later)
    // treats it: the service of that host answers to its names too; it has no cluster IPs,
    // no endpoints and no cluster of its own (the dataflow resolves it).
    let external_name = match spec.type_.as_deref() {
        Some("ExternalName") => match spec.external_name.as_deref() {
            Some(n) if is_fqdn(n) || n.parse::<std::net::IpAddr>().is_ok() => Some(n.to_string()),
            other => {
                return Err(Invalid::field(
                    "spec.externalName",
                    format!("{other:?} is not a DNS name an ExternalName service can point at"),
                ))
            }
        },
        _ => None,
    };
    let addresses = match external_name {
        Some(_) => Vec::new(),
        None => cluster_ips(&spec)?,
    };
    let mut ports = Vec::new();
    for (i, p) in spec.ports.unwrap_or_default().iter().enumerate() {
        let name = p.name.clone().unwrap_or_default();
        match p.protocol.as_deref() {
            None | Some("TCP") => {}
            // UDP/SCTP ports carry no HTTP or TCP proxy config.
            Some("UDP" | "SCTP") => continue,
            // The API server refuses any other; a file can hold one. Istio reads every port
            // but a UDP one as TCP (by its name and appProtocol): so does meshflow, saying so.
            Some(other) => findings.push(Finding::warning(
                format!("spec.ports[{i}].protocol"),
                format!(
                    "{other:?} is not a Kubernetes port protocol (TCP, UDP, SCTP); read as TCP, \
                     as Istio reads it"
                ),
            )),
        }
        let port = port_u16(p.port.into(), &format!("spec.ports[{i}].port"))?;
        if ports.iter().any(|q: &m::ServicePort| q.port == port) {
            return Err(Invalid::field(
                format!("spec.ports[{i}].port"),
                format!("port {port} is listed twice"),
            ));
        }
        let protocol = protocol_of(&name, p.app_protocol.as_deref());
        let port = m::ServicePort {
            protocol,
            name,
            port,
        };
        ports.push(port);
    }
    let resolution_is_external_name = external_name.is_some();
    let exports: Vec<String> = annotations
        .get("networking.istio.io/exportTo")
        .map(|s| s.split(',').map(|e| e.trim().to_string()).collect())
        .unwrap_or_default();
    Ok(vec![Record::Service(m::Service {
        hostname: format!("{}.{}.svc.{}", key.name, key.namespace, mesh.domain_suffix),
        origin: key.clone(),
        export_to: export_to(
            &exports,
            "metadata.annotations[networking.istio.io/exportTo]",
        )?,
        resolution: match external_name {
            Some(_) => m::Resolution::Dns,
            None => m::Resolution::Static,
        },
        dns_endpoints: Vec::new(),
        host_target_ports: Default::default(),
        ports,
        addresses,
        subject_alt_names: Vec::new(),
        // Istio treats an ExternalName Service as outside the mesh.
        mesh_external: resolution_is_external_name,
        prefer_close,
        headless,
        alias_for: external_name.map(|n| n.trim_end_matches('.').to_ascii_lowercase()),
        aliases: Vec::new(),
        control_plane,
    })])
}

/// The fields of a Service spec that change where or how its traffic goes and that meshflow
/// does not read, each a warning. (`publishNotReadyAddresses` needs no reading: Kubernetes
/// marks such a service's endpoints ready in its EndpointSlices.)
fn service_fields_not_read(
    spec: &k8s_openapi::api::core::v1::ServiceSpec,
    findings: &mut Vec<Finding>,
) {
    let mut not_read = |field: &str, what: &str| {
        findings.push(Finding::warning(
            format!("spec.{field}"),
            format!("{what}; {IGNORED}"),
        ))
    };
    if spec.internal_traffic_policy.as_deref() == Some("Local") {
        not_read(
            "internalTrafficPolicy",
            "Local: meshflow sends to every endpoint of the service, not only those on the client's node",
        );
    }
    if let Some(d) = spec
        .traffic_distribution
        .as_deref()
        .filter(|d| !matches!(*d, "PreferClose" | "PreferSameZone"))
    {
        not_read(
            "trafficDistribution",
            &format!(
                "{:?}: meshflow prefers close endpoints for PreferClose and PreferSameZone only; \
                 this service's clients balance over every endpoint as its DestinationRule says",
                d.chars().take(64).collect::<String>()
            ),
        );
    }
    if spec.session_affinity.as_deref() == Some("ClientIP") {
        not_read(
            "sessionAffinity",
            "ClientIP: meshflow keeps no client on one endpoint (a DestinationRule's consistentHash useSourceIp does)",
        );
    }
    if spec
        .external_ips
        .as_ref()
        .is_some_and(|ips| !ips.is_empty())
    {
        not_read(
            "externalIPs",
            "meshflow serves the service at its cluster IPs only",
        );
    }
}

/// The Istio annotations (of a domain ending in `istio.io`) meshflow reads on a Service.
const SERVICE_ANNOTATIONS: [&str; 2] = [
    "networking.istio.io/exportTo",
    TRAFFIC_DISTRIBUTION_ANNOTATION,
];

/// Each Istio annotation (of a domain ending in `istio.io`) on a Service that meshflow does
/// not read, by name: one Istio does not know, one meant for another kind (a Pod's
/// `sidecar.istio.io/…`), or one meshflow does not translate (Istio's IST0108
/// UnknownAnnotation and IST0107 MisplacedAnnotation, as meshflow can tell them).
fn istio_annotations_not_read(annotations: &Labels, findings: &mut Vec<Finding>) {
    for name in annotations.keys() {
        let domain = name.split_once('/').map_or("", |(d, _)| d);
        if domain.ends_with("istio.io") && !SERVICE_ANNOTATIONS.contains(&name.as_str()) {
            findings.push(Finding::warning(
                format!("metadata.annotations[{name}]"),
                format!(
                    "{IGNORED} on a Service (meshflow reads {} there; Istio's IST0107/IST0108 \
                     say whether Istio does)",
                    SERVICE_ANNOTATIONS.join(", ")
                ),
            ));
        }
    }
}

/// Istio's annotation naming a Service's traffic distribution where its spec has none.
const TRAFFIC_DISTRIBUTION_ANNOTATION: &str = "networking.istio.io/traffic-distribution";

/// Whether the Service prefers close endpoints, as Istio reads it: `spec.trafficDistribution`
/// `PreferClose` or `PreferSameZone` (Kubernetes' newer name for it); without the field,
/// the annotation `networking.istio.io/traffic-distribution: PreferClose` (any case).
fn prefers_close(spec: &k8s_openapi::api::core::v1::ServiceSpec, annotations: &Labels) -> bool {
    match spec.traffic_distribution.as_deref() {
        Some(d) => matches!(d, "PreferClose" | "PreferSameZone"),
        None => annotations
            .get(TRAFFIC_DISTRIBUTION_ANNOTATION)
            .is_some_and(|v| v.eq_ignore_ascii_case("PreferClose")),
    }
}

/// A Service's `clusterIPs` (else `clusterIP`) as CIDRs; none for a headless one.
fn cluster_ips(spec: &k8s_openapi::api::core::v1::ServiceSpec) -> Result<Vec<String>> {
    let (field, ips) = match &spec.cluster_ips {
        Some(ips) if !ips.is_empty() => ("spec.clusterIPs", ips.clone()),
        _ => ("spec.clusterIP", spec.cluster_ip.iter().cloned().collect()),
    };
    let mut out = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        if ip.is_empty() || ip == "None" {
            continue;
        }
        let f = if field == "spec.clusterIPs" {
            format!("{field}[{i}]")
        } else {
            field.to_string()
        };
        out.push(cidr(ip, &f)?);
    }
    Ok(out)
}

pub(super) fn endpoint_slice(
    key: &ConfigKey,
    value: Value,
    mesh: &MeshConfig,
) -> Result<Vec<Record>> {
    let labels = metadata_map(&value, "labels");
    let slice: k8s_openapi::api::discovery::v1::EndpointSlice = typed(value, "")?;
    let Some(service) = labels.get("kubernetes.io/service-name") else {
        return Err(Invalid::field(
            "metadata.labels[kubernetes.io/service-name]",
            "an EndpointSlice must name its Service in this label",
        ));
    };
    if slice.address_type == "FQDN" {
        return Err(Invalid::field(
            "addressType",
            "FQDN EndpointSlices are not supported",
        ));
    }
    let host = format!("{service}.{}.svc.{}", key.namespace, mesh.domain_suffix);
    let mut out = Vec::new();
    for (pi, p) in slice.ports.unwrap_or_default().iter().enumerate() {
        let Some(port) = p.port else { continue };
        let port = port_u16(port.into(), &format!("ports[{pi}].port"))?;
        for (ei, ep) in slice.endpoints.iter().flatten().enumerate() {
            let ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
            for (ai, ip) in ep.addresses.iter().enumerate() {
                let field = format!("endpoints[{ei}].addresses[{ai}]");
                out.push(endpoint_record(
                    key,
                    &host,
                    ip,
                    p.name.as_deref(),
                    port,
                    ready,
                    &field,
                )?);
            }
        }
    }
    Ok(out)
}

/// One endpoint of a Kubernetes Endpoints/EndpointSlice object, its address validated.
fn endpoint_record(
    key: &ConfigKey,
    host: &str,
    ip: &str,
    port_name: Option<&str>,
    port: u16,
    ready: bool,
    field: &str,
) -> Result<Record> {
    if ip.parse::<std::net::IpAddr>().is_err() {
        return Err(Invalid::field(
            field,
            format!("{ip:?} is not an IP address"),
        ));
    }
    Ok(Record::Endpoint(
        host.to_string(),
        m::RawEndpoint {
            ip: ip.to_string(),
            port_name: port_name.unwrap_or_default().to_string(),
            port,
            ready,
            labels: Labels::new(),
            origin: key.clone(),
            placement: m::Placement::default(),
            service_account: None,
        },
    ))
}

pub(super) fn endpoints(key: &ConfigKey, value: Value, mesh: &MeshConfig) -> Result<Vec<Record>> {
    let eps: k8s_openapi::api::core::v1::Endpoints = typed(value, "")?;
    let host = format!("{}.{}.svc.{}", key.name, key.namespace, mesh.domain_suffix);
    let mut out = Vec::new();
    for (si, subset) in eps.subsets.unwrap_or_default().iter().enumerate() {
        for (pi, p) in subset.ports.iter().flatten().enumerate() {
            let port = port_u16(p.port.into(), &format!("subsets[{si}].ports[{pi}].port"))?;
            let ready = subset.addresses.iter().flatten().map(|a| (a, true));
            let not_ready = subset
                .not_ready_addresses
                .iter()
                .flatten()
                .map(|a| (a, false));
            for (a, ready) in ready.chain(not_ready) {
                let field = format!("subsets[{si}].addresses");
                out.push(endpoint_record(
                    key,
                    &host,
                    &a.ip,
                    p.name.as_deref(),
                    port,
                    ready,
                    &field,
                )?);
            }
        }
    }
    Ok(out)
}

pub(super) fn pod(key: &ConfigKey, value: Value) -> Result<Vec<Record>> {
    let labels = metadata_map(&value, "labels");
    let pod: k8s_openapi::api::core::v1::Pod = typed(value, "")?;
    let status = pod.status.unwrap_or_default();
    let mut ips: Vec<String> = status
        .pod_ips
        .unwrap_or_default()
        .into_iter()
        .map(|p| p.ip)
        .collect();
    if let Some(ip) = status.pod_ip {
        if !ips.contains(&ip) {
            ips.insert(0, ip);
        }
    }
    let placement = m::Placement {
        locality: pod_locality(&labels),
        weight: None,
    };
    // Every Pod runs as a service account: `default` unless it names one.
    let service_account = pod
        .spec
        .as_ref()
        .and_then(|s| {
            s.service_account_name
                .clone()
                .or_else(|| s.service_account.clone())
        })
        .filter(|sa| !sa.is_empty())
        .unwrap_or_else(|| "default".to_string());
    // A pod without an IP yet has no endpoints to label; that is not an error.
    Ok(ips
        .into_iter()
        .map(|ip| {
            Record::Workload(m::Workload {
                ip,
                labels: labels.clone(),
                origin: key.clone(),
                ports: Default::default(),
                placement: placement.clone(),
                service_account: Some(service_account.clone()),
                peer: None,
            })
        })
        .collect())
}

/// A Pod's locality as Istio reads it from the Pod: the `istio-locality` label
/// (`region.zone.subzone`), else the topology labels it carries; empty if none.
fn pod_locality(labels: &Labels) -> String {
    if let Some(l) = labels.get("istio-locality") {
        return l.splitn(3, '.').collect::<Vec<_>>().join("/");
    }
    let get = |k: &str| labels.get(k).map(String::as_str).unwrap_or_default();
    let parts = [
        get("topology.kubernetes.io/region"),
        get("topology.kubernetes.io/zone"),
        get("topology.istio.io/subzone"),
    ];
    if parts.iter().all(|p| p.is_empty()) {
        return String::new();
    }
    parts.join("/").trim_end_matches('/').to_string()
}
