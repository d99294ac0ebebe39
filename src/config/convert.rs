//! Conversion of typed Kubernetes/Istio objects into domain records, with validation. The
//! one place that knows both the wire shape and the domain model.

use super::findings::{typed_with_ignored, FieldPath, Finding, IGNORED};
use super::istio;
use super::Invalid;
use dataflows::model::{self as m, ConfigKey, Kind, Labels, MeshConfig, Record};
use serde::de::DeserializeOwned;
use serde_yaml_ng::Value;

type Result<T> = std::result::Result<T, Invalid>;

fn typed<T: DeserializeOwned>(value: Value, prefix: &str) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = match (prefix, path.as_str()) {
            (p, ".") => p.to_string(),
            ("", path) => path.to_string(),
            (p, path) => format!("{p}.{path}"),
        };
        Invalid::field(field, e.into_inner().to_string())
    })
}

/// The spec of an Istio object, and the fields of it meshflow does not read.
fn spec<T: DeserializeOwned + Default>(value: &Value) -> Result<(T, Vec<FieldPath>)> {
    match value.get("spec") {
        None | Some(Value::Null) => Ok((T::default(), Vec::new())),
        Some(s) => typed_with_ignored(s.clone(), "spec"),
    }
}

/// Each field not read is a warning, unless `classify` says more of it.
fn report_ignored(
    ignored: &[FieldPath],
    findings: &mut Vec<Finding>,
    mut classify: impl FnMut(&FieldPath) -> Option<Finding>,
) {
    for p in ignored {
        findings.push(classify(p).unwrap_or_else(|| Finding::warning(p.to_string(), IGNORED)));
    }
}

fn metadata_map(value: &Value, field: &str) -> Labels {
    value
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(|l| l.as_mapping())
        .map(|l| {
            l.iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_string(), yaml_scalar(v)?)))
                .collect()
        })
        .unwrap_or_default()
}

fn yaml_scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn port_u16(n: i64, field: &str) -> Result<u16> {
    u16::try_from(n)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| Invalid::field(field, format!("port {n} is not in 1..65535")))
}

/// Istio's rule for naming protocols by port name prefix (`http-foo`, `grpc`) or
/// `appProtocol`; a port naming none is told per connection (Istio's protocol sniffing).
pub fn protocol_of(name: &str, app_protocol: Option<&str>) -> m::Protocol {
    if !names_protocol(name, app_protocol) {
        return m::Protocol::Auto;
    }
    let p = app_protocol.unwrap_or_else(|| name.split('-').next().unwrap_or(""));
    match p.to_ascii_lowercase().trim_start_matches("kubernetes.io/") {
        "http2" | "h2c" => m::Protocol::Http2,
        "grpc" | "grpc-web" => m::Protocol::Grpc,
        "tls" | "https" => m::Protocol::Tls,
        "tcp" | "mongo" | "mysql" | "redis" => m::Protocol::Tcp,
        _ => m::Protocol::Http,
    }
}

/// The protocol names Istio knows, as a port name's prefix or an `appProtocol`.
const PROTOCOL_NAMES: &[&str] = &[
    "http", "http2", "h2c", "grpc", "grpc-web", "https", "tls", "tcp", "mongo", "mysql", "redis",
];

/// Whether a port's name prefix or `appProtocol` names a protocol Istio knows; where none
/// does, Istio detects the protocol per connection.
fn names_protocol(name: &str, app_protocol: Option<&str>) -> bool {
    let known = |p: &str| PROTOCOL_NAMES.contains(&p.to_ascii_lowercase().as_str());
    match app_protocol {
        Some(p) => known(p) || known(p.trim_start_matches("kubernetes.io/")),
        None => known(name.split('-').next().unwrap_or("")),
    }
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

/// An `HTTPRetry` (a route's `retries`, the mesh's `defaultHttpRetryPolicy`) at `field`,
/// checked as Istio's validation checks it: zero attempts (retries off) with anything else
/// set is refused, and each `retryOn` part is a status code or a condition Envoy knows.
pub(super) fn retries(rt: &istio::HttpRetry, field: &str) -> Result<m::Retries> {
    let attempts = u32::try_from(rt.attempts.unwrap_or(0))
        .map_err(|_| Invalid::field(format!("{field}.attempts"), "must not be negative"))?;
    if attempts == 0
        && (rt.per_try_timeout.is_some()
            || rt.retry_on.as_deref().is_some_and(|o| !o.is_empty())
            || rt.retry_remote_localities.is_some())
    {
        return Err(Invalid::field(
            format!("{field}.attempts"),
            "a retry policy is configured while attempts is 0 (retries disabled)",
        ));
    }
    if let Some(on) = &rt.retry_on {
        for part in on.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let status = part.parse::<u16>().is_ok_and(|c| (100..=599).contains(&c));
            if !status && !RETRY_ON.contains(&part) {
                return Err(Invalid::field(
                    format!("{field}.retryOn"),
                    format!(
                        "{part:?} is neither an HTTP status code nor a retry condition ({})",
                        RETRY_ON.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(m::Retries {
        attempts,
        per_try_timeout_ms: rt
            .per_try_timeout
            .as_deref()
            .map(|t| parse_duration_ms(t, &format!("{field}.perTryTimeout")))
            .transpose()?,
        retry_on: rt.retry_on.clone(),
        remote_localities: rt.retry_remote_localities.unwrap_or(false),
        ignore_previous_hosts: rt.retry_ignore_previous_hosts,
        backoff_ms: rt
            .backoff
            .as_deref()
            .map(
                |t| match parse_duration_ms(t, &format!("{field}.backoff"))? {
                    0 => Err(Invalid::field(
                        format!("{field}.backoff"),
                        "must be at least 1ms",
                    )),
                    ms => Ok(ms),
                },
            )
            .transpose()?,
    })
}

/// The retry conditions Istio accepts in `retryOn`: Envoy's `x-envoy-retry-on` and
/// `x-envoy-retry-grpc-on` policies.
const RETRY_ON: &[&str] = &[
    "5xx",
    "gateway-error",
    "reset",
    "reset-before-request",
    "connect-failure",
    "retriable-4xx",
    "refused-stream",
    "retriable-status-codes",
    "retriable-headers",
    "envoy-ratelimited",
    "http3-post-connect-failure",
    "cancelled",
    "deadline-exceeded",
    "internal",
    "resource-exhausted",
    "unavailable",
];

/// A `corsPolicy` at `field`. `allowOrigins` wins over the older `allowOrigin`, as in Istio.
fn cors(c: &istio::CorsPolicy, field: &str, mesh: &MeshConfig) -> Result<m::Cors> {
    let allow_origins = if c.allow_origins.is_empty() {
        c.allow_origin
            .iter()
            .map(|o| m::StringMatch::Exact(o.clone()))
            .collect()
    } else {
        c.allow_origins
            .iter()
            .enumerate()
            .map(|(i, sm)| string_match(sm, &format!("{field}.allowOrigins[{i}]"), mesh))
            .collect::<Result<Vec<_>>>()?
    };
    let forward_unmatched_preflights = match c.unmatched_preflights.as_deref() {
        None | Some("UNSPECIFIED") | Some("FORWARD") => true,
        Some("IGNORE") => false,
        Some(other) => {
            return Err(Invalid::field(
                format!("{field}.unmatchedPreflights"),
                format!("unknown value {other:?} (FORWARD, IGNORE)"),
            ))
        }
    };
    Ok(m::Cors {
        allow_origins,
        allow_methods: c.allow_methods.clone(),
        allow_headers: c.allow_headers.clone(),
        expose_headers: c.expose_headers.clone(),
        max_age_s: c
            .max_age
            .as_deref()
            .map(|a| parse_duration_ms(a, &format!("{field}.maxAge")).map(|ms| ms / 1000))
            .transpose()?,
        allow_credentials: c.allow_credentials,
        forward_unmatched_preflights,
    })
}

/// Istio's duration strings: `1.5s`, `300ms`, `2m`, `1h`.
pub fn parse_duration_ms(s: &str, field: &str) -> Result<u64> {
    Ok(duration_exact_ms(s, field)?.round() as u64)
}

/// A duration Istio's validation holds to at least 1ms (`agent.ValidateDuration`), in ms.
fn duration_at_least_1ms(v: Option<&str>, field: &str) -> Result<Option<u64>> {
    let Some(text) = v else { return Ok(None) };
    let exact = duration_exact_ms(text, field)?;
    if exact < 1.0 {
        return Err(Invalid::field(
            field,
            format!("{text:?} is below 1ms, the least duration Istio accepts here"),
        ));
    }
    Ok(Some(exact.round() as u64))
}

/// A duration as written, in (possibly fractional) milliseconds.
fn duration_exact_ms(s: &str, field: &str) -> Result<f64> {
    let bad = || {
        Invalid::field(
            field,
            format!("{s:?} is not a duration such as 1.5s or 300ms"),
        )
    };
    let (num, unit_ms) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3_600_000.0)
    } else {
        return Err(bad());
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad());
    }
    Ok(v * unit_ms)
}

/// Expands a short host name relative to the config's namespace, as Istio does:
/// `reviews` → `reviews.NS.svc.SUFFIX`; names with dots and wildcards are kept.
pub fn fqdn(host: &str, ns: &str, mesh: &MeshConfig) -> String {
    if host.contains('.') || host.contains('*') {
        host.to_string()
    } else {
        format!("{host}.{ns}.svc.{}", mesh.domain_suffix)
    }
}

/// An `exportTo` list: `.`, `*`, `~` or namespace names (DNS-1123 labels, as Istio's
/// validation requires).
pub(super) fn export_to(list: &[String], field: &str) -> Result<Vec<String>> {
    let namespace = |e: &str| {
        !e.is_empty()
            && e.len() <= 63
            && e.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !e.starts_with('-')
            && !e.ends_with('-')
    };
    for (i, e) in list.iter().enumerate() {
        if !matches!(e.as_str(), "." | "*" | "~") && !namespace(e) {
            return Err(Invalid::field(
                format!("{field}[{i}]"),
                format!("{e:?} is not \".\", \"*\", \"~\" or a namespace"),
            ));
        }
    }
    Ok(list.to_vec())
}

/// Converts one object to its records, and what there is to say about the parts of it
/// meshflow does not translate.
pub fn convert(
    key: &ConfigKey,
    value: Value,
    mesh: &MeshConfig,
) -> Result<(Vec<Record>, Vec<Finding>)> {
    let mut f = Vec::new();
    let records = match key.kind {
        Kind::Namespace => Ok(Vec::new()),
        Kind::Service => service(key, value, mesh, &mut f),
        Kind::EndpointSlice => endpoint_slice(key, value, mesh),
        Kind::Endpoints => endpoints(key, value, mesh),
        Kind::Pod => pod(key, value),
        Kind::VirtualService => virtual_service(key, &value, mesh, &mut f),
        Kind::DestinationRule => destination_rule(key, &value, mesh, &mut f),
        Kind::Gateway => gateway(key, &value, &mut f),
        Kind::Sidecar => sidecar(key, &value, &mut f),
        Kind::ServiceEntry => service_entry(key, &value, &mut f),
        Kind::WorkloadEntry => workload_entry(key, &value, &mut f),
        // Read by `config::mesh`, never as an object of a config directory.
        Kind::MeshConfig => Ok(Vec::new()),
        Kind::Secret => super::secret::secret(key, &value),
    }?;
    Ok((records, f))
}

fn service(
    key: &ConfigKey,
    value: Value,
    mesh: &MeshConfig,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let annotations = metadata_map(&value, "annotations");
    let svc: k8s_openapi::api::core::v1::Service = typed(value, "")?;
    let spec = svc.spec.unwrap_or_default();
    service_fields_not_read(&spec, findings);
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
        if p.protocol.as_deref().is_some_and(|proto| proto != "TCP") {
            continue; // UDP/SCTP ports carry no HTTP or TCP proxy config
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
    })])
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

fn endpoint_slice(key: &ConfigKey, value: Value, mesh: &MeshConfig) -> Result<Vec<Record>> {
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

fn endpoints(key: &ConfigKey, value: Value, mesh: &MeshConfig) -> Result<Vec<Record>> {
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

fn pod(key: &ConfigKey, value: Value) -> Result<Vec<Record>> {
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

/// A header's or query parameter's match, where Istio's empty match means "present".
fn value_match(sm: &istio::StringMatch, field: &str, mesh: &MeshConfig) -> Result<m::StringMatch> {
    match (&sm.exact, &sm.prefix, &sm.regex) {
        // Istio's catch-all header matches: none, an empty prefix (which Envoy's string
        // matcher would refuse) and the regex `*` (not RE2, which Istio's validation lets
        // through for withoutHeaders) each mean "present".
        (None, None, None) => Ok(m::StringMatch::Present),
        (None, Some(p), None) if p.is_empty() => Ok(m::StringMatch::Present),
        (None, None, Some(r)) if r == "*" => Ok(m::StringMatch::Present),
        _ => string_match(sm, field, mesh),
    }
}

/// Gateway references as `namespace/name` (a bare name is in `ns`), or `mesh`.
fn gateway_refs(list: &[String], ns: &str) -> Vec<String> {
    list.iter()
        .map(|g| {
            if g == "mesh" || g.contains('/') {
                g.clone()
            } else {
                format!("{ns}/{g}")
            }
        })
        .collect()
}

/// The first `headers` or `withoutHeaders` condition of route `f` on a JWT claim
/// (`@request.auth.claims.…`): Istio matches those against the claims its JWT filter
/// verified, not a request header. As a header, a `withoutHeaders` on a claim would match
/// every request.
fn claim_condition(r: &istio::HttpRoute, f: &str) -> Option<String> {
    r.matches.iter().enumerate().find_map(|(mi, mr)| {
        let on_claim = |h: &&String| h.starts_with("@request.auth.claims");
        let header = mr.headers.keys().find(on_claim).map(|h| ("headers", h));
        let without = mr.without_headers.keys().find(on_claim);
        header
            .or(without.map(|h| ("withoutHeaders", h)))
            .map(|(field, h)| format!("{f}.match[{mi}].{field}.{h}"))
    })
}

/// The first `queryParams` condition of route `f` matching by `prefix`, which Istio's API
/// says is not supported for query parameters: the route is left out rather than matching
/// more than written.
fn query_prefix_condition(r: &istio::HttpRoute, f: &str) -> Option<String> {
    r.matches.iter().enumerate().find_map(|(mi, mr)| {
        mr.query_params
            .iter()
            .find(|(_, sm)| sm.prefix.is_some())
            .map(|(q, _)| format!("{f}.match[{mi}].queryParams.{q}.prefix"))
    })
}

/// Whether `name` is an HTTP field name: an RFC 9110 token (letters, digits and
/// ``!#$%&'*+-.^_`|~``).
fn is_header_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.!#$%&'*+^`|~".contains(&b))
}

/// The name of a `headers` (`present` true) or `withoutHeaders` condition at `field` (the
/// map). Refused as Istio's validation refuses it (empty) and where Envoy would refuse the
/// whole route configuration of the port (an empty name, or one with NUL, CR or LF).
/// Istio accepts any other name, and so does meshflow; a name that is neither a token nor a
/// pseudo-header (`:authority`) is never in a request, which a warning says. JWT claim
/// conditions (`@request.auth.claims.…`) never reach here (see [`claim_condition`]).
fn match_header_name(
    name: &str,
    field: &str,
    present: bool,
    findings: &mut Vec<Finding>,
) -> Result<()> {
    if name.is_empty() {
        return Err(Invalid::field(field, "a header name cannot be empty"));
    }
    if name.contains(['\0', '\r', '\n']) {
        return Err(Invalid::field(
            format!("{field}.{}", name.escape_debug()),
            format!(
                "{name:?} is not a header name: Envoy refuses NUL, CR and LF in one (and with \
                 it the route configuration of every route on the port)"
            ),
        ));
    }
    if !is_header_token(name.strip_prefix(':').unwrap_or(name)) {
        findings.push(Finding::warning(
            format!("{field}.{name}"),
            format!(
                "{name:?} is not an HTTP header name (a token, or a pseudo-header such as \
                 :authority): no request carries it, so this condition {}",
                if present {
                    "never holds and the match never applies"
                } else {
                    "always holds"
                }
            ),
        ));
    }
    Ok(())
}

/// One `match` of an HTTP route.
fn http_match(
    mr: &istio::HttpMatchRequest,
    f: &str,
    ns: &str,
    mesh: &MeshConfig,
    findings: &mut Vec<Finding>,
) -> Result<m::HttpMatch> {
    let uri = mr
        .uri
        .as_ref()
        .map(|u| string_match(u, &format!("{f}.uri"), mesh))
        .transpose()?;
    let mut headers = std::collections::BTreeMap::new();
    for (h, sm) in &mr.headers {
        match_header_name(h, &format!("{f}.headers"), true, findings)?;
        headers.insert(
            h.to_ascii_lowercase(),
            value_match(sm, &format!("{f}.headers.{h}"), mesh)?,
        );
    }
    // Istio matches these as the pseudo-headers Envoy sees.
    for (field, header, sm) in [
        ("method", ":method", &mr.method),
        ("authority", ":authority", &mr.authority),
        ("scheme", ":scheme", &mr.scheme),
    ] {
        if let Some(sm) = sm {
            headers.insert(
                header.to_string(),
                string_match(sm, &format!("{f}.{field}"), mesh)?,
            );
        }
    }
    let mut without_headers = std::collections::BTreeMap::new();
    for (h, sm) in &mr.without_headers {
        match_header_name(h, &format!("{f}.withoutHeaders"), false, findings)?;
        without_headers.insert(
            h.to_ascii_lowercase(),
            value_match(sm, &format!("{f}.withoutHeaders.{h}"), mesh)?,
        );
    }
    let mut query_params = std::collections::BTreeMap::new();
    for (q, sm) in &mr.query_params {
        // A prefix never reaches here: its route is left out (see `query_prefix_condition`).
        let field = format!("{f}.queryParams.{q}");
        query_params.insert(q.clone(), value_match(sm, &field, mesh)?);
    }
    let port = mr
        .port
        .map(|p| port_u16(p, &format!("{f}.port")))
        .transpose()?;
    Ok(m::HttpMatch {
        uri,
        ignore_uri_case: mr.ignore_uri_case,
        headers,
        without_headers,
        query_params,
        port,
        gateways: gateway_refs(&mr.gateways, ns),
        source_namespace: mr.source_namespace.clone(),
        source_labels: source_labels(&mr.source_labels, &format!("{f}.sourceLabels"))?,
    })
}

/// A match's `sourceLabels`: a label selector as Kubernetes spells labels (none when empty,
/// which selects every proxy).
fn source_labels(labels: &Labels, field: &str) -> Result<Option<Labels>> {
    for (k, v) in labels {
        if let Err(why) = label_key(k).and_then(|()| label_value(v)) {
            return Err(Invalid::field(format!("{field}.{k}"), why));
        }
    }
    Ok((!labels.is_empty()).then(|| labels.clone()))
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric.
fn label_key(key: &str) -> std::result::Result<(), String> {
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            if prefix.is_empty() || prefix.len() > 253 || !is_fqdn(prefix) {
                return Err(format!("{key:?}: the prefix must be a DNS subdomain"));
            }
            name
        }
        None => key,
    };
    if name.is_empty() {
        return Err(format!("{key:?}: a label key needs a name"));
    }
    label_value(name).map_err(|_| format!("{key:?} is not a valid label key"))
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_` and `.`, starting and
/// ending alphanumeric.
fn label_value(value: &str) -> std::result::Result<(), String> {
    let ok = value.is_empty()
        || (value.len() <= 63
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric())
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')));
    if ok {
        Ok(())
    } else {
        Err(format!("{value:?} is not a valid label value"))
    }
}

fn string_match(sm: &istio::StringMatch, field: &str, mesh: &MeshConfig) -> Result<m::StringMatch> {
    match (&sm.exact, &sm.prefix, &sm.regex) {
        (Some(e), None, None) => Ok(m::StringMatch::Exact(e.clone())),
        (None, Some(p), None) => Ok(m::StringMatch::Prefix(p.clone())),
        // Envoy compiles it with RE2 and rejects the whole route configuration if it does
        // not parse (every route on the port): refused here, naming the field, instead.
        (None, None, Some(r)) => match regex::Regex::new(r) {
            Err(e) => Err(Invalid::field(
                format!("{field}.regex"),
                format!("{r:?} is not a valid RE2 regular expression: {e}"),
            )),
            // Envoy also refuses a regex whose RE2 program is over its limit, with the same
            // effect on the port.
            Ok(_) => match super::re2_size::program_size(r) {
                Some(n) if n > u64::from(mesh.max_regex_program_size) => Err(Invalid::field(
                    format!("{field}.regex"),
                    format!(
                        "{r:?} compiles to an RE2 program of about {n} instructions, over \
                         Envoy's limit of {} (re2.max_program_size.error_level; \
                         --max-regex-program-size): simplify it, e.g. a bounded repetition \
                         like x{{150}} is that many copies of x",
                        mesh.max_regex_program_size
                    ),
                )),
                _ => Ok(m::StringMatch::Regex(r.clone())),
            },
        },
        _ => Err(Invalid::field(
            field,
            "exactly one of exact, prefix or regex is required",
        )),
    }
}

/// The routes of a VirtualService that cannot be generated as written: where a match
/// condition is not read, the route is left out (it would match more than written).
fn routes_not_generated(ignored: &[FieldPath], findings: &mut Vec<Finding>) -> NotGenerated {
    let mut out = NotGenerated::default();
    report_ignored(ignored, findings, |p| {
        // A TCP route whose match reads a condition meshflow cannot honour (`sourceSubnet`,
        // a misspelt one) would match more connections than written.
        if let (Some(ri), Some("match")) = (p.index_under("tls"), p.key_at(2)) {
            out.tls.push(ri);
            return Some(Finding::error(
                p.to_string(),
                format!(
                    "this match condition is not supported by meshflow yet; the route \
                     spec.tls[{ri}] is not generated, so it never matches more connections \
                     than written"
                ),
            ));
        }
        if let (Some(ri), Some("match")) = (p.index_under("tcp"), p.key_at(2)) {
            out.tcp.push(ri);
            return Some(Finding::error(
                p.to_string(),
                format!(
                    "this match condition is not supported by meshflow yet; the route \
                     spec.tcp[{ri}] is not generated, so it never matches more connections \
                     than written"
                ),
            ));
        }
        let ri = p.index_under("http");
        let finding = match (ri, p.key_at(2)) {
            // A match's name and stat prefix restrict nothing: plain warnings.
            (Some(ri), Some("match")) if !matches!(p.key_at(4), Some("name" | "statPrefix")) => {
                Finding::error(
                    p.to_string(),
                    format!(
                        "this match condition is not supported by meshflow yet; the route \
                     spec.http[{ri}] is not generated, so it never matches more traffic than \
                     written"
                    ),
                )
            }
            _ => return None,
        };
        if finding.level == super::findings::Level::Error {
            out.http.extend(ri);
        }
        Some(finding)
    });
    out.tcp.sort();
    out.tcp.dedup();
    out.tls.sort();
    out.tls.dedup();
    out
}

/// The routes [`routes_not_generated`] leaves out, by index.
#[derive(Default)]
struct NotGenerated {
    http: Vec<usize>,
    tcp: Vec<usize>,
    tls: Vec<usize>,
}

/// A route's `route[]`: destinations with weights (a lone destination takes 100; several
/// must add up to 100), as HTTP and TCP routes share them.
/// The destinations of an HTTP (`headers` read) or TCP route (`headers` is not a field of
/// Istio's TCP destinations: refused, as Istio's schema refuses it).
fn weighted_destinations(
    list: &[istio::HttpRouteDestination],
    f: &str,
    ns: &str,
    mesh: &MeshConfig,
    http: bool,
) -> Result<Vec<m::RouteDestination>> {
    let mut route = Vec::new();
    for (di, d) in list.iter().enumerate() {
        let df = format!("{f}.route[{di}]");
        let dest = destination(
            d.destination.as_ref(),
            &format!("{df}.destination"),
            ns,
            mesh,
        )?;
        let weight = match d.weight {
            None if list.len() == 1 => 100,
            None => 0,
            Some(w) if (0..=100).contains(&w) => w as u32,
            Some(w) => {
                return Err(Invalid::field(
                    format!("{df}.weight"),
                    format!("{w} is not in 0..100"),
                ))
            }
        };
        let headers = match &d.headers {
            Some(h) if http => header_ops(h, &format!("{df}.headers"))?,
            Some(_) => {
                return Err(Invalid::field(
                    format!("{df}.headers"),
                    "a TCP route's destination has no headers",
                ))
            }
            None => m::HeaderOps::default(),
        };
        route.push(m::RouteDestination {
            weight,
            headers,
            ..dest
        });
    }
    let total: u32 = route.iter().map(|d| d.weight).sum();
    if route.len() > 1 && total != 100 {
        return Err(Invalid::field(
            format!("{f}.route"),
            format!("weights add up to {total}, not 100"),
        ));
    }
    Ok(route)
}

/// An IP address or CIDR block (`10.0.0.1`, `10.0.0.0/8`, `2001:db8::/32`) as a canonical
/// CIDR: the network address and its prefix length, so equal ranges compare equal (Envoy
/// refuses a listener whose filter chains match the same range twice).
pub fn cidr(s: &str, field: &str) -> Result<String> {
    let bad = || Invalid::field(field, format!("{s:?} is not an IP address or CIDR block"));
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l.parse::<u8>().map_err(|_| bad())?)),
        None => (s, None),
    };
    let ip: std::net::IpAddr = addr.parse().map_err(|_| bad())?;
    Ok(match ip {
        std::net::IpAddr::V4(v4) => {
            let len = len.unwrap_or(32);
            if len > 32 {
                return Err(bad());
            }
            let mask = u32::MAX.checked_shl(u32::from(32 - len)).unwrap_or(0);
            let net = std::net::Ipv4Addr::from(u32::from(v4) & mask);
            format!("{net}/{len}")
        }
        std::net::IpAddr::V6(v6) => {
            let len = len.unwrap_or(128);
            if len > 128 {
                return Err(bad());
            }
            let mask = u128::MAX.checked_shl(u32::from(128 - len)).unwrap_or(0);
            let net = std::net::Ipv6Addr::from(u128::from(v6) & mask);
            format!("{net}/{len}")
        }
    })
}

/// `tcp[]`: each route's matches and weighted destinations; the routes in `skip` are left
/// out (a match condition meshflow cannot honour: reported by [`routes_not_generated`]).
fn tcp_routes(
    routes: &[istio::TcpRoute],
    skip: &[usize],
    ns: &str,
    mesh: &MeshConfig,
) -> Result<Vec<m::TcpRoute>> {
    let mut out = Vec::new();
    for (ri, r) in routes.iter().enumerate() {
        if skip.contains(&ri) {
            continue;
        }
        let f = format!("spec.tcp[{ri}]");
        if r.route.is_empty() {
            return Err(Invalid::field(
                format!("{f}.route"),
                "a TCP route needs destinations",
            ));
        }
        let mut matches = Vec::new();
        for (mi, mr) in r.matches.iter().enumerate() {
            let mf = format!("{f}.match[{mi}]");
            let destination_subnets = mr
                .destination_subnets
                .iter()
                .enumerate()
                .map(|(si, sn)| cidr(sn, &format!("{mf}.destinationSubnets[{si}]")))
                .collect::<Result<Vec<_>>>()?;
            matches.push(m::TcpMatch {
                port: mr
                    .port
                    .map(|p| port_u16(p, &format!("{mf}.port")))
                    .transpose()?,
                destination_subnets,
                gateways: gateway_refs(&mr.gateways, ns),
                source_namespace: mr.source_namespace.clone(),
                source_labels: source_labels(&mr.source_labels, &format!("{mf}.sourceLabels"))?,
            });
        }
        out.push(m::TcpRoute {
            matches,
            route: weighted_destinations(&r.route, &f, ns, mesh, false)?,
        });
    }
    Ok(out)
}

/// `tls[]`: each route's SNI matches and weighted destinations; the routes in `skip` are
/// left out (a match condition meshflow cannot honour). Istio requires `sniHosts` in every
/// match, each within the VirtualService's hosts.
fn tls_routes(
    routes: &[istio::TlsRoute],
    skip: &[usize],
    hosts: &[String],
    ns: &str,
    mesh: &MeshConfig,
) -> Result<Vec<m::TlsRoute>> {
    let mut out = Vec::new();
    for (ri, r) in routes.iter().enumerate() {
        if skip.contains(&ri) {
            continue;
        }
        let f = format!("spec.tls[{ri}]");
        if r.route.is_empty() {
            return Err(Invalid::field(
                format!("{f}.route"),
                "a TLS route needs destinations",
            ));
        }
        if r.matches.is_empty() {
            return Err(Invalid::field(
                format!("{f}.match"),
                "a TLS route needs a match",
            ));
        }
        let mut matches = Vec::new();
        for (mi, mr) in r.matches.iter().enumerate() {
            let mf = format!("{f}.match[{mi}]");
            if mr.sni_hosts.is_empty() {
                return Err(Invalid::field(
                    format!("{mf}.sniHosts"),
                    "a TLS match needs sniHosts",
                ));
            }
            let mut sni_hosts = Vec::new();
            for (si, h) in mr.sni_hosts.iter().enumerate() {
                let full = fqdn(h, ns, mesh);
                let within = hosts.iter().any(|vh| {
                    dataflows::rules::host_matches(vh, &full)
                        || dataflows::rules::host_matches(&full, vh)
                });
                if !within {
                    return Err(Invalid::field(
                        format!("{mf}.sniHosts[{si}]"),
                        format!("{h:?} is not one of the VirtualService's hosts"),
                    ));
                }
                sni_hosts.push(full);
            }
            let destination_subnets = mr
                .destination_subnets
                .iter()
                .enumerate()
                .map(|(si, sn)| cidr(sn, &format!("{mf}.destinationSubnets[{si}]")))
                .collect::<Result<Vec<_>>>()?;
            matches.push(m::TlsMatch {
                sni_hosts,
                port: mr
                    .port
                    .map(|p| port_u16(p, &format!("{mf}.port")))
                    .transpose()?,
                destination_subnets,
                gateways: gateway_refs(&mr.gateways, ns),
                source_namespace: mr.source_namespace.clone(),
                source_labels: source_labels(&mr.source_labels, &format!("{mf}.sourceLabels"))?,
            });
        }
        out.push(m::TlsRoute {
            matches,
            route: weighted_destinations(&r.route, &f, ns, mesh, false)?,
        });
    }
    Ok(out)
}

/// A route's or mirror's destination (weight 100).
fn destination(
    dest: Option<&istio::Destination>,
    field: &str,
    ns: &str,
    mesh: &MeshConfig,
) -> Result<m::RouteDestination> {
    let Some(dest) = dest.filter(|d| !d.host.is_empty()) else {
        return Err(Invalid::field(
            format!("{field}.host"),
            "a destination host is required",
        ));
    };
    let port = dest
        .port
        .as_ref()
        .and_then(|p| p.number)
        .map(|n| port_u16(n, &format!("{field}.port.number")))
        .transpose()?;
    Ok(m::RouteDestination {
        host: fqdn(&dest.host, ns, mesh),
        subset: dest.subset.clone(),
        port,
        weight: 100,
        headers: m::HeaderOps::default(),
        via_alias: None,
    })
}

/// Istio's `percentage.value` (0–100, fractional) in millionths.
fn per_million(p: &istio::Percent, field: &str) -> Result<m::PerMillion> {
    if !(0.0..=100.0).contains(&p.value) {
        return Err(Invalid::field(
            format!("{field}.value"),
            format!("{} is not a percentage in 0..100", p.value),
        ));
    }
    Ok((p.value * 10_000.0).round() as m::PerMillion)
}

fn redirect(rd: &istio::HttpRedirect, f: &str) -> Result<m::Redirect> {
    let code = match rd.redirect_code {
        None => 301,
        Some(c @ (301 | 302 | 303 | 307 | 308)) => c as u32,
        Some(c) => {
            return Err(Invalid::field(
                format!("{f}.redirectCode"),
                format!("{c} is not a redirect code (301, 302, 303, 307, 308)"),
            ))
        }
    };
    // `port` and `derivePort` are one oneof in Istio's API: both is an error.
    let from_request_port = match rd.derive_port.as_deref() {
        None | Some("FROM_PROTOCOL_DEFAULT") => false,
        Some("FROM_REQUEST_PORT") => true,
        Some(other) => {
            return Err(Invalid::field(
                format!("{f}.derivePort"),
                format!("unknown derivePort {other:?} (FROM_PROTOCOL_DEFAULT, FROM_REQUEST_PORT)"),
            ))
        }
    };
    if rd.port.is_some() && rd.derive_port.is_some() {
        return Err(Invalid::field(
            format!("{f}.derivePort"),
            "port and derivePort are alternatives (one oneof): give one",
        ));
    }
    Ok(m::Redirect {
        uri: rd.uri.clone(),
        authority: rd.authority.clone(),
        port: rd
            .port
            .map(|p| port_u16(p, &format!("{f}.port")))
            .transpose()?,
        from_request_port,
        scheme: rd.scheme.clone(),
        code,
    })
}

fn direct_response(d: &istio::HttpDirectResponse, f: &str) -> Result<m::DirectResponse> {
    if !(200..=599).contains(&d.status) {
        return Err(Invalid::field(
            format!("{f}.status"),
            format!("{} is not an HTTP status in 200..599", d.status),
        ));
    }
    Ok(m::DirectResponse {
        status: d.status as u32,
        body: d.body.as_ref().and_then(|b| b.string.clone()),
    })
}

fn rewrite(rw: &istio::HttpRewrite, f: &str, mesh: &MeshConfig) -> Result<m::Rewrite> {
    if rw.uri.is_some() && rw.uri_regex_rewrite.is_some() {
        return Err(Invalid::field(
            format!("{f}.uriRegexRewrite"),
            "a rewrite cannot have both uri and uriRegexRewrite",
        ));
    }
    let uri_regex = match &rw.uri_regex_rewrite {
        None => None,
        Some(r) => {
            let sm = istio::StringMatch {
                regex: Some(r.pattern.clone()),
                ..Default::default()
            };
            string_match(&sm, &format!("{f}.uriRegexRewrite.match"), mesh)?;
            Some((r.pattern.clone(), r.rewrite.clone()))
        }
    };
    Ok(m::Rewrite {
        uri: rw.uri.clone(),
        authority: rw.authority.clone(),
        uri_regex,
    })
}

/// Whether a header name is the request's authority (`host` or `:authority`), which Envoy
/// cannot edit as a header.
fn is_authority_header(name: &str) -> bool {
    name.eq_ignore_ascii_case("host") || name.eq_ignore_ascii_case(":authority")
}

/// The edits of one direction. On requests (`request` true), a `host`/`:authority` set or
/// added becomes the authority rewrite, as in Istio; anywhere else, as in Istio's
/// validation, `host` and `:`-prefixed names are refused (Envoy rejects the configuration).
fn header_edits(ops: &istio::HeaderOperations, f: &str, request: bool) -> Result<m::HeaderEdits> {
    let names = ops
        .set
        .keys()
        .map(|k| (k, "set"))
        .chain(ops.add.keys().map(|k| (k, "add")))
        .chain(ops.remove.iter().map(|k| (k, "remove")));
    let mut authority: Option<(String, &String)> = None;
    for (name, op) in names {
        if is_authority_header(name) {
            let value = match op {
                "set" => ops.set.get(name),
                "add" => ops.add.get(name),
                _ => None,
            };
            match value {
                Some(value) if request => {
                    if let Some((first, _)) = &authority {
                        return Err(Invalid::field(
                            format!("{f}.{op}.{name}"),
                            format!(
                                "the authority is already set by {first}; it can be set in one \
                                 place only"
                            ),
                        ));
                    }
                    authority = Some((format!("{f}.{op}.{name}"), value));
                    continue;
                }
                _ => {
                    return Err(Invalid::field(
                        format!("{f}.{op}"),
                        format!(
                            "{name:?} cannot be {}: Envoy edits the authority only as a \
                             request's host rewrite (set it under request.set)",
                            if op == "remove" {
                                "removed"
                            } else {
                                "edited on a response"
                            }
                        ),
                    ))
                }
            }
        }
        if !is_header_token(name) {
            return Err(Invalid::field(
                format!("{f}.{op}"),
                format!("{name:?} is not an HTTP header name"),
            ));
        }
    }
    let keep = |m: &std::collections::BTreeMap<String, String>| {
        m.iter()
            .filter(|(k, _)| !is_authority_header(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    Ok(m::HeaderEdits {
        set: keep(&ops.set),
        add: keep(&ops.add),
        remove: ops.remove.clone(),
        authority: authority.map(|(_, v)| v.clone()),
    })
}

fn header_ops(h: &istio::Headers, f: &str) -> Result<m::HeaderOps> {
    Ok(m::HeaderOps {
        request: h
            .request
            .as_ref()
            .map(|o| header_edits(o, &format!("{f}.request"), true))
            .transpose()?
            .unwrap_or_default(),
        response: h
            .response
            .as_ref()
            .map(|o| header_edits(o, &format!("{f}.response"), false))
            .transpose()?
            .unwrap_or_default(),
    })
}

/// `mirror` (with `mirrorPercentage`) and `mirrors[]`, as one list.
fn mirrors(r: &istio::HttpRoute, f: &str, ns: &str, mesh: &MeshConfig) -> Result<Vec<m::Mirror>> {
    let mut out = Vec::new();
    if let Some(d) = &r.mirror {
        if !r.mirrors.is_empty() {
            return Err(Invalid::field(
                format!("{f}.mirrors"),
                "a route cannot have both mirror and mirrors",
            ));
        }
        // `mirrorPercentage` wins over the older whole-percent `mirrorPercent`, as in Istio,
        // where a `mirrorPercent` of 0 mirrors nothing.
        let fraction = match (&r.mirror_percentage, r.mirror_percent) {
            (Some(p), _) => Some(per_million(p, &format!("{f}.mirrorPercentage"))?),
            (None, Some(p)) if (0..=100).contains(&p) => Some(p as m::PerMillion * 10_000),
            (None, Some(p)) => {
                return Err(Invalid::field(
                    format!("{f}.mirrorPercent"),
                    format!("{p} is not a percentage in 0..100"),
                ))
            }
            (None, None) => None,
        };
        out.push(m::Mirror {
            destination: destination(Some(d), &format!("{f}.mirror"), ns, mesh)?,
            fraction,
        });
    }
    for (i, mp) in r.mirrors.iter().enumerate() {
        let mf = format!("{f}.mirrors[{i}]");
        out.push(m::Mirror {
            destination: destination(
                mp.destination.as_ref(),
                &format!("{mf}.destination"),
                ns,
                mesh,
            )?,
            fraction: mp
                .percentage
                .as_ref()
                .map(|p| per_million(p, &format!("{mf}.percentage")))
                .transpose()?,
        });
    }
    Ok(out)
}

/// `fault`: a delay or abort whose `percentage` is unset applies to no request (Istio's
/// documented default).
fn fault(
    ft: &istio::HttpFaultInjection,
    f: &str,
    findings: &mut Vec<Finding>,
) -> Result<Option<m::Fault>> {
    let fraction = |p: &Option<istio::Percent>, field: String| {
        p.as_ref()
            .map(|p| per_million(p, &field))
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let delay = match &ft.delay {
        None => None,
        // Istio generates no delay from an exponential one (not implemented there either).
        Some(d) if d.fixed_delay.is_none() && d.exponential_delay.is_some() => {
            findings.push(Finding::warning(
                format!("{f}.delay.exponentialDelay"),
                "not implemented by Istio nor meshflow; this delay is not generated",
            ));
            None
        }
        Some(d) => {
            if d.exponential_delay.is_some() {
                return Err(Invalid::field(
                    format!("{f}.delay"),
                    "a delay has either fixedDelay or exponentialDelay, not both",
                ));
            }
            let Some(fixed) = &d.fixed_delay else {
                return Err(Invalid::field(
                    format!("{f}.delay.fixedDelay"),
                    "a delay needs fixedDelay",
                ));
            };
            let ms = parse_duration_ms(fixed, &format!("{f}.delay.fixedDelay"))?;
            if ms == 0 {
                return Err(Invalid::field(
                    format!("{f}.delay.fixedDelay"),
                    "a delay must be at least 1ms",
                ));
            }
            Some((
                ms,
                fraction(&d.percentage, format!("{f}.delay.percentage"))?,
            ))
        }
    };
    let abort = match &ft.abort {
        None => None,
        Some(a) => {
            // http2Error is reported as not read (Istio does not implement it either); an
            // abort with neither status generates nothing.
            let status = match (a.http_status, a.grpc_status.as_deref()) {
                (Some(_), Some(_)) => {
                    return Err(Invalid::field(
                        format!("{f}.abort"),
                        "an abort has either httpStatus or grpcStatus, not both",
                    ))
                }
                (Some(status), None) if (200..=599).contains(&status) => {
                    m::AbortStatus::Http(status as u32)
                }
                (Some(status), None) => {
                    return Err(Invalid::field(
                        format!("{f}.abort.httpStatus"),
                        format!("{status} is not an HTTP status in 200..599"),
                    ))
                }
                (None, Some(name)) => m::AbortStatus::Grpc(grpc_code(name).ok_or_else(|| {
                    Invalid::field(
                        format!("{f}.abort.grpcStatus"),
                        format!("{name:?} is not a gRPC status name such as UNAVAILABLE"),
                    )
                })?),
                (None, None) => {
                    return Ok(delay.map(|d| m::Fault {
                        delay: Some(d),
                        abort: None,
                    }))
                }
            };
            Some((
                status,
                fraction(&a.percentage, format!("{f}.abort.percentage"))?,
            ))
        }
    };
    Ok((delay.is_some() || abort.is_some()).then_some(m::Fault { delay, abort }))
}

/// A gRPC status by its name (`UNAVAILABLE`), as Istio's `grpcStatus` takes it, or by its
/// number.
fn grpc_code(name: &str) -> Option<u32> {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES
        .iter()
        .position(|n| *n == name)
        .map(|i| i as u32)
        .or_else(|| name.parse().ok().filter(|c: &u32| *c < 17))
}

fn virtual_service(
    key: &ConfigKey,
    value: &Value,
    mesh: &MeshConfig,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (istio::VirtualServiceSpec, _) = spec(value)?;
    let ns = &key.namespace;
    // Without hosts it can only be delegated to: it routes nothing of its own, binds no
    // gateway and delegates no further (Istio supports one level).
    let delegate_only = s.hosts.is_empty();
    if delegate_only {
        if !s.gateways.is_empty() {
            return Err(Invalid::field(
                "spec.gateways",
                "a VirtualService without hosts is a delegate and cannot bind gateways",
            ));
        }
        if !s.tcp.is_empty() || !s.tls.is_empty() {
            return Err(Invalid::field(
                if s.tcp.is_empty() {
                    "spec.tls"
                } else {
                    "spec.tcp"
                },
                "a VirtualService without hosts is a delegate: only http routes are delegated",
            ));
        }
        if let Some(ri) = s.http.iter().position(|r| r.delegate.is_some()) {
            return Err(Invalid::field(
                format!("spec.http[{ri}].delegate"),
                "a delegate VirtualService cannot delegate further (one level only)",
            ));
        }
    }
    let not_generated = routes_not_generated(&ignored, findings);
    let mut http = Vec::new();
    for (ri, r) in s.http.iter().enumerate() {
        if not_generated.http.contains(&ri) {
            continue;
        }
        let f = format!("spec.http[{ri}]");
        if let Some(path) = claim_condition(r, &f) {
            findings.push(Finding::error(
                path,
                format!(
                    "a match on a JWT claim needs a RequestAuthentication, which meshflow does \
                     not read yet; the route {f} is not generated, so it never matches more \
                     traffic than written"
                ),
            ));
            continue;
        }
        if let Some(path) = query_prefix_condition(r, &f) {
            findings.push(Finding::error(
                path,
                format!(
                    "a query parameter matches exact or regex (Istio does not support prefix \
                     there); the route {f} is not generated, so it never matches more \
                     traffic than written"
                ),
            ));
            continue;
        }
        let mut matches = Vec::new();
        for (mi, mr) in r.matches.iter().enumerate() {
            matches.push(http_match(
                mr,
                &format!("{f}.match[{mi}]"),
                ns,
                mesh,
                findings,
            )?);
        }
        // Istio's rule: exactly one of route, redirect, directResponse (or delegate).
        let actions = [
            ("route", !r.route.is_empty()),
            ("redirect", r.redirect.is_some()),
            ("directResponse", r.direct_response.is_some()),
            ("delegate", r.delegate.is_some()),
        ];
        let given: Vec<&str> = actions.iter().filter(|a| a.1).map(|a| a.0).collect();
        match given.as_slice() {
            [] => {
                return Err(Invalid::field(
                    format!("{f}.route"),
                    "a route needs destinations (route), a redirect, a directResponse or a \
                     delegate",
                ))
            }
            [_] => {}
            [a, b, ..] => {
                return Err(Invalid::field(
                    format!("{f}.{b}"),
                    format!("a route cannot have both {a} and {b}"),
                ))
            }
        }
        let delegate = match &r.delegate {
            None => None,
            Some(d) if d.name.is_empty() => {
                return Err(Invalid::field(
                    format!("{f}.delegate.name"),
                    "a delegate needs the name of a VirtualService",
                ))
            }
            Some(d) => Some(ConfigKey::new(
                dataflows::model::Kind::VirtualService,
                d.namespace.as_deref().unwrap_or(ns),
                &d.name,
            )),
        };
        let route = weighted_destinations(&r.route, &f, ns, mesh, true)?;
        let timeout_ms = r
            .timeout
            .as_deref()
            .map(|t| parse_duration_ms(t, &format!("{f}.timeout")))
            .transpose()?;
        let retries = r
            .retries
            .as_ref()
            .map(|rt| retries(rt, &format!("{f}.retries")))
            .transpose()?;
        let rewrite = r
            .rewrite
            .as_ref()
            .map(|rw| rewrite(rw, &format!("{f}.rewrite"), mesh))
            .transpose()?;
        let headers = r
            .headers
            .as_ref()
            .map(|h| header_ops(h, &format!("{f}.headers")))
            .transpose()?
            .unwrap_or_default();
        // As Istio's validation: the authority is rewritten in one place of a route.
        if let (Some(rw), Some(_)) = (
            rewrite.as_ref().and_then(|rw| rw.authority.as_ref()),
            &headers.request.authority,
        ) {
            return Err(Invalid::field(
                format!("{f}.headers.request"),
                format!("the authority is already rewritten to {rw:?} by {f}.rewrite.authority"),
            ));
        }
        http.push(m::HttpRoute {
            name: r.name.clone(),
            matches,
            route,
            delegate,
            timeout_ms,
            retries,
            redirect: r
                .redirect
                .as_ref()
                .map(|rd| redirect(rd, &format!("{f}.redirect")))
                .transpose()?,
            direct_response: r
                .direct_response
                .as_ref()
                .map(|d| direct_response(d, &format!("{f}.directResponse")))
                .transpose()?,
            rewrite,
            headers,
            mirrors: mirrors(r, &f, ns, mesh)?,
            fault: r
                .fault
                .as_ref()
                .map(|ft| fault(ft, &format!("{f}.fault"), findings))
                .transpose()?
                .flatten(),
            cors: r
                .cors_policy
                .as_ref()
                .map(|c| cors(c, &format!("{f}.corsPolicy"), mesh))
                .transpose()?
                .map(Box::new),
        });
    }
    let gateways = gateway_refs(&s.gateways, ns);
    let hosts: Vec<String> = s.hosts.iter().map(|h| fqdn(h, ns, mesh)).collect();
    let tls = tls_routes(&s.tls, &not_generated.tls, &hosts, ns, mesh)?;
    Ok(vec![Record::VirtualService(m::VirtualService {
        key: key.clone(),
        hosts,
        gateways,
        export_to: export_to(&s.export_to, "spec.exportTo")?,
        http,
        tcp: tcp_routes(&s.tcp, &not_generated.tcp, ns, mesh)?,
        tls,
    })])
}

/// A policy's `tls`: what is generated (`SIMPLE`, `MUTUAL` with files or a Secret's
/// `credentialName`, `ISTIO_MUTUAL`), or nothing (`DISABLE`: `Ok((false, None))`, with `true`
/// saying a `tls` was given, which replaces an inherited one). Rejected where Istio's
/// validation rejects.
fn client_tls(
    tls: Option<&istio::ClientTls>,
    field: &str,
    findings: &mut Vec<Finding>,
) -> Result<(bool, Option<m::UpstreamTls>)> {
    let Some(t) = tls else {
        return Ok((false, None));
    };
    let mode = t.mode.as_deref().unwrap_or("DISABLE");
    let credential = t.credential_name.clone().filter(|n| !n.is_empty());
    match mode {
        "DISABLE" => Ok((true, None)),
        // The proxy's own workload certificate and the mesh's root, both over SDS; the
        // files of SIMPLE and MUTUAL have no part in it (Istio requires them empty).
        "ISTIO_MUTUAL" => {
            for (set, name) in [
                (t.client_certificate.is_some(), "clientCertificate"),
                (t.private_key.is_some(), "privateKey"),
                (t.ca_certificates.is_some(), "caCertificates"),
                (t.credential_name.is_some(), "credentialName"),
            ] {
                if set {
                    findings.push(Finding::warning(
                        format!("{field}.{name}"),
                        "not used with ISTIO_MUTUAL: the proxy presents its workload \
                         certificate (SDS `default`) and verifies against the mesh's root \
                         (SDS `ROOTCA`)",
                    ));
                }
            }
            Ok((
                true,
                Some(m::UpstreamTls {
                    sni: t.sni.clone(),
                    subject_alt_names: t.subject_alt_names.clone(),
                    istio_mutual: true,
                    field: field.to_string(),
                    ..Default::default()
                }),
            ))
        }
        // The certificates of a Secret in the client proxy's own namespace, over SDS.
        "SIMPLE" | "MUTUAL" if credential.is_some() => {
            for (set, name) in [
                (t.client_certificate.is_some(), "clientCertificate"),
                (t.private_key.is_some(), "privateKey"),
                (t.ca_certificates.is_some(), "caCertificates"),
                (t.ca_crl.is_some(), "caCrl"),
            ] {
                if set {
                    return Err(Invalid::field(
                        format!("{field}.{name}"),
                        "cannot be given beside credentialName (the Secret holds the \
                         certificates)",
                    ));
                }
            }
            Ok((
                true,
                Some(m::UpstreamTls {
                    sni: t.sni.clone(),
                    subject_alt_names: t.subject_alt_names.clone(),
                    insecure_skip_verify: t.insecure_skip_verify.unwrap_or(false),
                    credential,
                    mutual: mode == "MUTUAL",
                    field: field.to_string(),
                    ..Default::default()
                }),
            ))
        }
        "SIMPLE" | "MUTUAL" => {
            let client_cert = if mode == "MUTUAL" {
                let (Some(cert), Some(key)) = (&t.client_certificate, &t.private_key) else {
                    return Err(Invalid::field(
                        field,
                        "MUTUAL TLS needs clientCertificate and privateKey (or credentialName)",
                    ));
                };
                Some((cert.clone(), key.clone()))
            } else {
                None
            };
            Ok((
                true,
                Some(m::UpstreamTls {
                    client_cert,
                    ca: t.ca_certificates.clone(),
                    crl: t.ca_crl.clone(),
                    sni: t.sni.clone(),
                    subject_alt_names: t.subject_alt_names.clone(),
                    insecure_skip_verify: t.insecure_skip_verify.unwrap_or(false),
                    istio_mutual: false,
                    credential: None,
                    mutual: mode == "MUTUAL",
                    field: field.to_string(),
                }),
            ))
        }
        other => Err(Invalid::field(
            format!("{field}.mode"),
            format!("unknown TLS mode {other:?} (DISABLE, SIMPLE, MUTUAL, ISTIO_MUTUAL)"),
        )),
    }
}

/// A count Istio types as int32/UInt32Value: not negative.
fn count(v: Option<i64>, field: &str) -> Result<Option<u32>> {
    v.map(|n| {
        u32::try_from(n)
            .map_err(|_| Invalid::field(field, format!("{n} is not a count (0 or more)")))
    })
    .transpose()
}

fn duration(v: &Option<String>, field: &str) -> Result<Option<u64>> {
    v.as_deref()
        .map(|d| parse_duration_ms(d, field))
        .transpose()
}

/// A `connectionPool`, checked as Istio's validation checks it: with `tcp` or `http` settings
/// (an empty pool is refused), each setting in range.
fn connection_pool(c: &istio::ConnectionPool, f: &str) -> Result<Option<m::ConnectionPool>> {
    if c.tcp.is_none() && c.http.is_none() {
        return Err(Invalid::field(
            f,
            "a connection pool needs tcp or http settings",
        ));
    }
    let tcp = c.tcp.as_ref();
    let http = c.http.as_ref();
    let keepalive = match tcp.and_then(|t| t.tcp_keepalive.as_ref()) {
        None => None,
        Some(k) => {
            let kf = format!("{f}.tcp.tcpKeepalive");
            let secs = |d: &Option<String>, name: &str| {
                duration(d, &format!("{kf}.{name}")).map(|ms| ms.map(|ms| ms.div_ceil(1000)))
            };
            Some((
                count(k.probes, &format!("{kf}.probes"))?,
                secs(&k.time, "time")?,
                secs(&k.interval, "interval")?,
            ))
        }
    };
    let pool = m::ConnectionPool {
        max_connections: count(
            tcp.and_then(|t| t.max_connections),
            &format!("{f}.tcp.maxConnections"),
        )?,
        max_connection_duration_ms: duration_at_least_1ms(
            tcp.and_then(|t| t.max_connection_duration.as_deref()),
            &format!("{f}.tcp.maxConnectionDuration"),
        )?,
        tcp_keepalive: keepalive,
        max_pending_requests: count(
            http.and_then(|h| h.http1_max_pending_requests),
            &format!("{f}.http.http1MaxPendingRequests"),
        )?,
        max_requests: count(
            http.and_then(|h| h.http2_max_requests),
            &format!("{f}.http.http2MaxRequests"),
        )?,
        max_retries: count(
            http.and_then(|h| h.max_retries),
            &format!("{f}.http.maxRetries"),
        )?,
        max_requests_per_connection: count(
            http.and_then(|h| h.max_requests_per_connection),
            &format!("{f}.http.maxRequestsPerConnection"),
        )?,
        idle_timeout_ms: duration(
            &http.and_then(|h| h.idle_timeout.clone()),
            &format!("{f}.http.idleTimeout"),
        )?,
        tcp_idle_timeout_ms: tcp_idle_timeout(tcp, f)?,
        h2_upgrade: h2_upgrade(http, f)?,
        use_client_protocol: http.and_then(|h| h.use_client_protocol).unwrap_or(false),
        max_concurrent_streams: count(
            http.and_then(|h| h.max_concurrent_streams),
            &format!("{f}.http.maxConcurrentStreams"),
        )?
        .filter(|n| *n > 0),
    };
    // A given `connectionPool` is kept even when it sets nothing meshflow generates: a
    // subset's (or port's) replaces the rule's whole, as Istio merges them.
    Ok(Some(pool))
}

/// `tcp.idleTimeout`: a duration of at least 1ms, or 0s (no timeout), as Istio validates.
fn tcp_idle_timeout(tcp: Option<&istio::TcpSettings>, f: &str) -> Result<Option<u64>> {
    let field = format!("{f}.tcp.idleTimeout");
    let Some(text) = tcp.and_then(|t| t.idle_timeout.as_deref()) else {
        return Ok(None);
    };
    let ms = parse_duration_ms(text, &field)?;
    if ms == 0 && text.trim_end_matches(['m', 's', 'h']).parse::<f64>() != Ok(0.0) {
        return Err(Invalid::field(
            field,
            format!("{text:?} is below 1ms (0s turns the timeout off)"),
        ));
    }
    Ok(Some(ms))
}

/// `http.h2UpgradePolicy` (`DEFAULT`: `None`), and Istio's check that `UPGRADE` does not
/// come with `useClientProtocol`.
fn h2_upgrade(http: Option<&istio::HttpSettings>, f: &str) -> Result<Option<m::H2Upgrade>> {
    let Some(h) = http else { return Ok(None) };
    let field = format!("{f}.http.h2UpgradePolicy");
    let policy = match h.h2_upgrade_policy.as_deref() {
        None | Some("DEFAULT") => None,
        Some("UPGRADE") => Some(m::H2Upgrade::Upgrade),
        Some("DO_NOT_UPGRADE") => Some(m::H2Upgrade::DoNotUpgrade),
        Some(other) => {
            return Err(Invalid::field(
                field,
                format!("unknown h2UpgradePolicy {other:?} (DEFAULT, DO_NOT_UPGRADE, UPGRADE)"),
            ))
        }
    };
    if policy == Some(m::H2Upgrade::Upgrade) && h.use_client_protocol == Some(true) {
        return Err(Invalid::field(
            field,
            "useClientProtocol must not be true when h2UpgradePolicy is UPGRADE",
        ));
    }
    Ok(policy)
}

fn outlier_detection(o: &istio::OutlierDetection, f: &str) -> Result<m::OutlierDetection> {
    let percent = |v: Option<i64>, name: &str| -> Result<Option<u32>> {
        match v {
            Some(p) if !(0..=100).contains(&p) => Err(Invalid::field(
                format!("{f}.{name}"),
                format!("{p} is not a percentage in 0..100"),
            )),
            other => Ok(other.map(|p| p as u32)),
        }
    };
    Ok(m::OutlierDetection {
        consecutive_5xx: count(
            o.consecutive_5xx_errors,
            &format!("{f}.consecutive5xxErrors"),
        )?,
        consecutive_gateway_errors: count(
            o.consecutive_gateway_errors,
            &format!("{f}.consecutiveGatewayErrors"),
        )?,
        consecutive_local_origin_failures: count(
            o.consecutive_local_origin_failures,
            &format!("{f}.consecutiveLocalOriginFailures"),
        )?,
        split_external_local_origin_errors: o.split_external_local_origin_errors,
        interval_ms: duration(&o.interval, &format!("{f}.interval"))?,
        base_ejection_time_ms: duration(&o.base_ejection_time, &format!("{f}.baseEjectionTime"))?,
        max_ejection_percent: percent(o.max_ejection_percent, "maxEjectionPercent")?,
        min_health_percent: percent(o.min_health_percent, "minHealthPercent")?,
    })
}

/// `loadBalancer`: `simple` or `consistentHash`, which Istio's schema makes exclusive.
fn load_balancer(
    lb: Option<&istio::LoadBalancerSettings>,
    field: &str,
) -> Result<Option<m::LoadBalancer>> {
    let Some(lb) = lb else { return Ok(None) };
    let simple = match lb.simple.as_deref() {
        None => None,
        Some("ROUND_ROBIN") => Some(m::LoadBalancer::RoundRobin),
        // UNSPECIFIED is Istio's default algorithm, LEAST_REQUEST (not Envoy's).
        Some("LEAST_REQUEST") | Some("LEAST_CONN") | Some("UNSPECIFIED") => {
            Some(m::LoadBalancer::LeastRequest)
        }
        Some("RANDOM") => Some(m::LoadBalancer::Random),
        Some("PASSTHROUGH") => Some(m::LoadBalancer::Passthrough),
        Some(other) => {
            return Err(Invalid::field(
                format!("{field}.simple"),
                format!("unknown load balancer {other:?}"),
            ))
        }
    };
    let Some(ch) = &lb.consistent_hash else {
        return Ok(simple);
    };
    let f = format!("{field}.consistentHash");
    if simple.is_some() {
        return Err(Invalid::field(
            f,
            "only one of simple or consistentHash may be set",
        ));
    }
    let mut keys = Vec::new();
    if let Some(h) = &ch.http_header_name {
        keys.push(m::HashKey::Header(h.clone()));
    }
    if let Some(c) = &ch.http_cookie {
        if c.name.is_empty() {
            return Err(Invalid::field(
                format!("{f}.httpCookie.name"),
                "a cookie needs a name",
            ));
        }
        keys.push(m::HashKey::Cookie {
            name: c.name.clone(),
            path: c.path.clone().filter(|p| !p.is_empty()),
            ttl_ms: c
                .ttl
                .as_deref()
                .map(|t| parse_duration_ms(t, &format!("{f}.httpCookie.ttl")))
                .transpose()?,
        });
    }
    if ch.use_source_ip == Some(true) {
        keys.push(m::HashKey::SourceIp);
    }
    if let Some(q) = &ch.http_query_parameter_name {
        keys.push(m::HashKey::QueryParameter(q.clone()));
    }
    let key = match keys.len() {
        1 => keys.remove(0),
        0 => {
            return Err(Invalid::field(
                f,
                "a hash key is required (httpHeaderName, httpCookie, useSourceIp or \
                 httpQueryParameterName)",
            ))
        }
        _ => {
            return Err(Invalid::field(
                f,
                "only one hash key may be set (httpHeaderName, httpCookie, useSourceIp, \
                 httpQueryParameterName)",
            ))
        }
    };
    let table = match (&ch.ring_hash, &ch.maglev) {
        (Some(_), Some(_)) => {
            return Err(Invalid::field(
                f,
                "only one of ringHash or maglev may be set",
            ))
        }
        (_, Some(mg)) => m::HashTable::Maglev {
            table_size: mg.table_size,
        },
        (rh, None) => m::HashTable::Ring {
            minimum_size: rh
                .as_ref()
                .and_then(|r| r.minimum_ring_size)
                .or(ch.minimum_ring_size),
        },
    };
    Ok(Some(m::LoadBalancer::ConsistentHash(Box::new(
        m::ConsistentHash { key, table },
    ))))
}

/// `loadBalancer.warmup` (or the older `warmupDurationSecs`): Envoy's slow start, which
/// only round robin and least request honour.
fn warmup(
    lb: &istio::LoadBalancerSettings,
    field: &str,
    findings: &mut Vec<Finding>,
) -> Result<Option<m::Warmup>> {
    let (duration, f) = match (&lb.warmup, &lb.warmup_duration_secs) {
        (Some(w), _) => (w.duration.as_deref(), format!("{field}.warmup")),
        (None, Some(d)) => (Some(d.as_str()), format!("{field}.warmupDurationSecs")),
        (None, None) => return Ok(None),
    };
    let Some(duration) = duration else {
        return Err(Invalid::field(
            format!("{f}.duration"),
            "a warmup needs a duration",
        ));
    };
    let duration_field = if lb.warmup.is_some() {
        format!("{f}.duration")
    } else {
        f.clone()
    };
    let duration_ms = parse_duration_ms(duration, &duration_field)?;
    let w = lb.warmup.as_ref();
    let fraction = |v: Option<f64>, default: f64, name: &str, max: f64| -> Result<u64> {
        let v = v.unwrap_or(default);
        if !(0.0..=max).contains(&v) {
            return Err(Invalid::field(
                format!("{f}.{name}"),
                format!("{v} is out of range (0 to {max})"),
            ));
        }
        Ok((v * 1e6).round() as u64)
    };
    let minimum_percent_micros = fraction(
        w.and_then(|w| w.minimum_percent),
        10.0,
        "minimumPercent",
        100.0,
    )?;
    let aggression_micros = fraction(w.and_then(|w| w.aggression), 1.0, "aggression", 1e6)?;
    if w.and_then(|w| w.aggression) == Some(0.0) {
        return Err(Invalid::field(
            format!("{f}.aggression"),
            "aggression must be greater than 0",
        ));
    }
    if matches!(lb.simple.as_deref(), Some("RANDOM") | Some("PASSTHROUGH"))
        || lb.consistent_hash.is_some()
    {
        findings.push(Finding::warning(
            f,
            "warmup applies to ROUND_ROBIN and LEAST_REQUEST only; ignored with this load \
             balancer, as Envoy does",
        ));
        return Ok(None);
    }
    Ok(Some(m::Warmup {
        duration_ms,
        minimum_percent_micros,
        aggression_micros,
    }))
}

/// A `localityLbSetting`, validated as Istio validates it (at `field`): `distribute` and
/// `failover` not both; each `distribute` entry's weights in 1..=100 summing to 100; its
/// localities (`from`s, and each entry's `to`s) with at most one `*`, at the end, no empty
/// part, none overlapping another; `failover` entries between two different regions, no
/// `*`; no topology label in `failoverPriority` beside `failover`. `failover` or
/// `failoverPriority` without `outlierDetection` (`has_outlier`) is said: it never applies;
/// so is `failoverPriority` beside `distribute`, which wins.
pub(super) fn locality_lb_setting(
    l: &istio::LocalityLbSetting,
    field: &str,
    has_outlier: bool,
    findings: &mut Vec<Finding>,
) -> Result<m::LocalityLbSetting> {
    if !l.distribute.is_empty() && !l.failover.is_empty() {
        return Err(Invalid::field(
            field,
            "distribute and failover cannot both be given",
        ));
    }
    const TOPOLOGY: [&str; 3] = [
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
        "topology.istio.io/subzone",
    ];
    if !l.failover.is_empty() {
        if let Some((i, label)) = l
            .failover_priority
            .iter()
            .enumerate()
            .find(|(_, p)| TOPOLOGY.contains(&p.split('=').next().unwrap_or_default()))
        {
            return Err(Invalid::field(
                format!("{field}.failoverPriority[{i}]"),
                format!("the topology label {label:?} cannot be given beside failover"),
            ));
        }
    }
    let mut distribute = Vec::new();
    for (i, d) in l.distribute.iter().enumerate() {
        let f = format!("{field}.distribute[{i}].to");
        let mut to = Vec::new();
        for (loc, w) in &d.to {
            if !(1..=100).contains(w) {
                return Err(Invalid::field(
                    format!("{f}.{loc}"),
                    format!("locality weight {w} is not in 1..100"),
                ));
            }
            to.push((loc.clone(), *w as u32));
        }
        let total: u32 = to.iter().map(|(_, w)| w).sum();
        if total != 100 {
            return Err(Invalid::field(
                f,
                format!("weights must sum to 100 (they sum to {total})"),
            ));
        }
        check_localities(to.iter().map(|(l, _)| l.as_str()), &f)?;
        distribute.push(m::LocalityDistribute {
            from: d.from.clone(),
            to,
        });
    }
    check_localities(
        l.distribute.iter().map(|d| d.from.as_str()),
        &format!("{field}.distribute"),
    )?;
    let mut failover = Vec::new();
    for (i, fo) in l.failover.iter().enumerate() {
        let f = format!("{field}.failover[{i}]");
        if fo.from == fo.to {
            return Err(Invalid::field(
                f,
                "a failover must be between two different regions",
            ));
        }
        if fo.from.contains('/') || fo.to.contains('/') {
            return Err(Invalid::field(f, "a failover names regions only"));
        }
        if fo.from.contains('*') || fo.to.contains('*') {
            return Err(Invalid::field(f, "a failover region cannot contain '*'"));
        }
        failover.push((fo.from.clone(), fo.to.clone()));
    }
    if (!l.failover.is_empty() || !l.failover_priority.is_empty()) && !has_outlier {
        findings.push(Finding::warning(
            field,
            "failover needs outlierDetection (without it Envoy never fails over): not applied",
        ));
    }
    if !l.failover_priority.is_empty() && !l.distribute.is_empty() {
        findings.push(Finding::warning(
            format!("{field}.failoverPriority"),
            "distribute applies and failoverPriority is ignored (Istio applies one of them)",
        ));
    }
    Ok(m::LocalityLbSetting {
        enabled: l.enabled,
        distribute,
        failover,
        failover_priority: l.failover_priority.clone(),
    })
}

/// Localities of a `distribute` list (at `field`), as Istio checks them: at most one `*`,
/// at the end; no empty part; none overlapping another.
fn check_localities<'a>(locs: impl Iterator<Item = &'a str>, field: &str) -> Result<()> {
    let mut seen: Vec<[&str; 3]> = Vec::new();
    for loc in locs {
        let stars = loc.matches('*').count();
        if stars > 1 || (stars == 1 && !loc.ends_with('*')) {
            return Err(Invalid::field(
                field,
                format!("locality {loc:?}: a '*' may appear once, at the end"),
            ));
        }
        let parts: Vec<&str> = loc.splitn(3, '/').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(Invalid::field(
                field,
                format!("locality {loc:?} has an empty region, zone or subzone"),
            ));
        }
        let part = |i: usize| parts.get(i).copied().unwrap_or("*");
        let key = [part(0), part(1), part(2)];
        let overlaps = |other: &[&str; 3]| {
            key.iter()
                .zip(other)
                .all(|(a, b)| a == b || *a == "*" || *b == "*")
        };
        if seen.iter().any(overlaps) {
            return Err(Invalid::field(
                field,
                format!("locality {loc:?} overlaps an earlier one"),
            ));
        }
        seen.push(key);
    }
    Ok(())
}

/// The four settings a policy and each of its `portLevelSettings` entries have.
fn policy_settings(
    lb: Option<&istio::LoadBalancerSettings>,
    pool: Option<&istio::ConnectionPool>,
    outlier: Option<&istio::OutlierDetection>,
    tls: Option<&istio::ClientTls>,
    field: &str,
    findings: &mut Vec<Finding>,
) -> Result<m::TrafficPolicy> {
    let (tls_given, tls) = client_tls(tls, &format!("{field}.tls"), findings)?;
    let load_balancer = load_balancer(lb, &format!("{field}.loadBalancer"))?;
    let warmup = lb
        .map(|l| warmup(l, &format!("{field}.loadBalancer"), findings))
        .transpose()?
        .flatten();
    let connect_timeout_ms = pool
        .and_then(|c| c.tcp.as_ref())
        .and_then(|t| t.connect_timeout.as_deref())
        .map(|t| parse_duration_ms(t, &format!("{field}.connectionPool.tcp.connectTimeout")))
        .transpose()?;
    let locality_lb = lb
        .and_then(|l| l.locality_lb_setting.as_ref())
        .map(|l| {
            let f = format!("{field}.loadBalancer.localityLbSetting");
            locality_lb_setting(l, &f, outlier.is_some(), findings)
        })
        .transpose()?
        .map(Box::new);
    Ok(m::TrafficPolicy {
        load_balancer,
        warmup,
        locality_lb,
        connect_timeout_ms,
        tls_disabled: tls_given && tls.is_none(),
        tls: tls.map(Box::new),
        connection_pool: pool
            .map(|c| connection_pool(c, &format!("{field}.connectionPool")))
            .transpose()?
            .flatten()
            .map(Box::new),
        outlier_detection: outlier
            .map(|o| outlier_detection(o, &format!("{field}.outlierDetection")))
            .transpose()?
            .map(Box::new),
        port_level: Vec::new(),
    })
}

/// A `trafficPolicy` with its `portLevelSettings`: each entry needs a port and a setting,
/// as Istio's validation requires; a second entry for a port is never used (Istio takes
/// the first), which is said.
fn traffic_policy(
    tp: &istio::TrafficPolicy,
    field: &str,
    findings: &mut Vec<Finding>,
) -> Result<m::TrafficPolicy> {
    let mut policy = policy_settings(
        tp.load_balancer.as_ref(),
        tp.connection_pool.as_ref(),
        tp.outlier_detection.as_ref(),
        tp.tls.as_ref(),
        field,
        findings,
    )?;
    for (i, pl) in tp.port_level_settings.iter().enumerate() {
        let f = format!("{field}.portLevelSettings[{i}]");
        let Some(number) = pl.port.as_ref().and_then(|p| p.number) else {
            return Err(Invalid::field(
                format!("{f}.port"),
                "a port level setting needs port.number",
            ));
        };
        let port = port_u16(number, &format!("{f}.port.number"))?;
        if pl.load_balancer.is_none()
            && pl.connection_pool.is_none()
            && pl.outlier_detection.is_none()
            && pl.tls.is_none()
        {
            return Err(Invalid::field(
                f,
                "a port level setting needs at least one of loadBalancer, connectionPool, \
                 outlierDetection or tls",
            ));
        }
        let entry = policy_settings(
            pl.load_balancer.as_ref(),
            pl.connection_pool.as_ref(),
            pl.outlier_detection.as_ref(),
            pl.tls.as_ref(),
            &f,
            findings,
        )?;
        if policy.port_level.iter().any(|(p, _)| *p == port) {
            findings.push(Finding::warning(
                format!("{f}.port.number"),
                format!(
                    "port {port} has an earlier entry, which applies (as Istio takes the \
                     first); this one is never used"
                ),
            ));
            continue;
        }
        policy.port_level.push((port, entry));
    }
    Ok(policy)
}

fn destination_rule(
    key: &ConfigKey,
    value: &Value,
    mesh: &MeshConfig,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (istio::DestinationRuleSpec, _) = spec(value)?;
    report_ignored(&ignored, findings, |_| None);
    if s.host.is_empty() {
        return Err(Invalid::field("spec.host", "a host is required"));
    }
    let mut subsets: Vec<m::Subset> = Vec::new();
    for (i, sub) in s.subsets.iter().enumerate() {
        if sub.name.is_empty() {
            return Err(Invalid::field(
                format!("spec.subsets[{i}].name"),
                "a subset needs a name",
            ));
        }
        if subsets.iter().any(|x| x.name == sub.name) {
            return Err(Invalid::field(
                format!("spec.subsets[{i}].name"),
                format!("subset {:?} is defined twice", sub.name),
            ));
        }
        subsets.push(m::Subset {
            name: sub.name.clone(),
            labels: sub.labels.clone(),
            traffic_policy: sub
                .traffic_policy
                .as_ref()
                .map(|tp| traffic_policy(tp, &format!("spec.subsets[{i}].trafficPolicy"), findings))
                .transpose()?,
        });
    }
    Ok(vec![Record::DestinationRule(m::DestinationRule {
        key: key.clone(),
        host: fqdn(&s.host, &key.namespace, mesh),
        export_to: export_to(&s.export_to, "spec.exportTo")?,
        traffic_policy: s
            .traffic_policy
            .as_ref()
            .map(|tp| traffic_policy(tp, "spec.trafficPolicy", findings))
            .transpose()?,
        subsets,
        selector: match &s.workload_selector {
            Some(w) => source_labels(&w.match_labels, "spec.workloadSelector.matchLabels")?,
            None => None,
        },
    })])
}

fn server_protocol(p: &str) -> m::Protocol {
    match p.to_ascii_uppercase().as_str() {
        "HTTP" => m::Protocol::Http,
        "HTTP2" => m::Protocol::Http2,
        "GRPC" => m::Protocol::Grpc,
        "HTTPS" | "TLS" => m::Protocol::Tls,
        _ => m::Protocol::Tcp,
    }
}

/// A TCP server on an address and port an HTTP server of the Gateway also has is left out
/// (an error naming it): one listener cannot be both without telling the protocols apart.
/// `fields` names each server's field.
fn without_protocol_clashes(
    servers: Vec<m::GatewayServer>,
    fields: &[String],
    findings: &mut Vec<Finding>,
) -> Vec<m::GatewayServer> {
    let http: Vec<(Option<String>, u16)> = servers
        .iter()
        .filter(|s| s.protocol.is_http())
        .map(|s| (s.bind.clone(), s.port))
        .collect();
    servers
        .into_iter()
        .zip(fields)
        .filter_map(|(s, f)| {
            if s.protocol.is_http() || !http.contains(&(s.bind.clone(), s.port)) {
                return Some(s);
            }
            findings.push(Finding::error(
                f.clone(),
                format!(
                    "port {} is also an HTTP server's: the {} server gets no listener",
                    s.port,
                    if s.protocol == m::Protocol::Tls {
                        "TLS"
                    } else {
                        "TCP"
                    }
                ),
            ));
            None
        })
        .collect()
}

/// Envoy's `TlsProtocol` number of an Istio `minProtocolVersion`/`maxProtocolVersion`.
fn tls_version(v: &str, field: &str) -> Result<i32> {
    Ok(match v {
        "TLS_AUTO" => 0,
        "TLSV1_0" => 1,
        "TLSV1_1" => 2,
        "TLSV1_2" => 3,
        "TLSV1_3" => 4,
        other => {
            return Err(Invalid::field(
                field,
                format!("{other:?} is not TLS_AUTO, TLSV1_0, TLSV1_1, TLSV1_2 or TLSV1_3"),
            ))
        }
    })
}

/// What a server's `tls` makes of it: `Ok(None)` for a mode meshflow does not generate
/// (reported as an error: the server fails closed). Rejected where Istio's validation
/// rejects: an HTTPS or TLS server without `tls`, SIMPLE or MUTUAL without certificates.
fn server_tls(
    tls: &istio::ServerTlsSettings,
    f: &str,
    findings: &mut Vec<Finding>,
) -> Result<Option<m::ServerTls>> {
    let mode = tls
        .mode
        .as_deref()
        .unwrap_or("PASSTHROUGH")
        .to_ascii_uppercase();
    let mode = match mode.as_str() {
        "SIMPLE" => m::ServerTlsMode::Simple,
        "MUTUAL" => m::ServerTlsMode::Mutual,
        "OPTIONAL_MUTUAL" => m::ServerTlsMode::OptionalMutual,
        "PASSTHROUGH" => m::ServerTlsMode::Passthrough,
        // The gateway's workload certificate; Istio's validation refuses files and Secrets.
        "ISTIO_MUTUAL" => {
            for (set, name) in [
                (tls.server_certificate.is_some(), "serverCertificate"),
                (tls.private_key.is_some(), "privateKey"),
                (tls.ca_certificates.is_some(), "caCertificates"),
                (tls.credential_name.is_some(), "credentialName"),
            ] {
                if set {
                    return Err(Invalid::field(
                        format!("{f}.tls.{name}"),
                        "ISTIO_MUTUAL cannot have it: the gateway presents its workload \
                         certificate and verifies clients against the mesh's root",
                    ));
                }
            }
            m::ServerTlsMode::IstioMutual
        }
        "AUTO_PASSTHROUGH" => m::ServerTlsMode::AutoPassthrough,
        other => {
            return Err(Invalid::field(
                format!("{f}.tls.mode"),
                format!(
                    "unknown TLS mode {other:?} (PASSTHROUGH, SIMPLE, MUTUAL, AUTO_PASSTHROUGH, \
                     ISTIO_MUTUAL, OPTIONAL_MUTUAL)"
                ),
            ))
        }
    };
    let credential = if matches!(
        mode,
        m::ServerTlsMode::Passthrough
            | m::ServerTlsMode::IstioMutual
            | m::ServerTlsMode::AutoPassthrough
    ) {
        None
    } else if let Some(name) = tls.credential_name.as_ref().filter(|n| !n.is_empty()) {
        Some(m::Credential::Secret(name.clone()))
    } else {
        let (Some(cert), Some(key)) = (&tls.server_certificate, &tls.private_key) else {
            return Err(Invalid::field(
                format!("{f}.tls"),
                "SIMPLE and MUTUAL need credentialName, or serverCertificate and privateKey",
            ));
        };
        let mutual = matches!(
            mode,
            m::ServerTlsMode::Mutual | m::ServerTlsMode::OptionalMutual
        );
        if mutual && tls.ca_certificates.is_none() {
            return Err(Invalid::field(
                format!("{f}.tls.caCertificates"),
                "MUTUAL and OPTIONAL_MUTUAL with certificate files need caCertificates",
            ));
        }
        Some(m::Credential::Files {
            cert: cert.clone(),
            key: key.clone(),
            ca: tls.ca_certificates.clone(),
        })
    };
    // TLS 1.3 suites are not configurable in Envoy (it would refuse the listener).
    let (tls13, cipher_suites): (Vec<String>, Vec<String>) = tls
        .cipher_suites
        .iter()
        .cloned()
        .partition(|c| c.starts_with("TLS_"));
    if !tls13.is_empty() {
        findings.push(Finding::warning(
            format!("{f}.tls.cipherSuites"),
            format!("TLS 1.3 suites {tls13:?} are not configurable in Envoy; ignored"),
        ));
    }
    Ok(Some(m::ServerTls {
        tcp: false,
        mode,
        credential,
        min_version: tls
            .min_protocol_version
            .as_deref()
            .map(|v| tls_version(v, &format!("{f}.tls.minProtocolVersion")))
            .transpose()?,
        max_version: tls
            .max_protocol_version
            .as_deref()
            .map(|v| tls_version(v, &format!("{f}.tls.maxProtocolVersion")))
            .transpose()?,
        cipher_suites,
        subject_alt_names: tls.subject_alt_names.clone(),
    }))
}

fn gateway(key: &ConfigKey, value: &Value, findings: &mut Vec<Finding>) -> Result<Vec<Record>> {
    let (s, ignored): (istio::GatewaySpec, _) = spec(value)?;
    // An unread field of a server's `tls` changes which certificates are accepted: the
    // server is not generated rather than served without it.
    let mut closed: Vec<usize> = Vec::new();
    report_ignored(&ignored, findings, |p| {
        let i = p.index_under("servers")?;
        (p.key_at(2) == Some("tls")).then(|| {
            closed.push(i);
            Finding::error(
                p.to_string(),
                format!(
                    "not supported by meshflow yet; no filter chain is generated for \
                     spec.servers[{i}]"
                ),
            )
        })
    });
    if s.selector.is_empty() {
        return Err(Invalid::field(
            "spec.selector",
            "a Gateway must select its gateway pods by label",
        ));
    }
    let mut servers = Vec::new();
    let mut fields = Vec::new();
    for (i, srv) in s.servers.iter().enumerate() {
        let f = format!("spec.servers[{i}]");
        let Some(port) = &srv.port else {
            return Err(Invalid::field(format!("{f}.port"), "a server needs a port"));
        };
        if srv.hosts.is_empty() {
            return Err(Invalid::field(
                format!("{f}.hosts"),
                "a server needs at least one host",
            ));
        }
        if let Some(b) = &srv.bind {
            if b.parse::<std::net::IpAddr>().is_err() {
                return Err(Invalid::field(
                    format!("{f}.bind"),
                    format!("{b:?} is not an IP address"),
                ));
            }
        }
        let number = port_u16(port.number, &format!("{f}.port.number"))?;
        let protocol = port.protocol.to_ascii_uppercase();
        let plain = matches!(
            protocol.as_str(),
            "HTTP" | "HTTP2" | "GRPC" | "TCP" | "MONGO" | "MYSQL" | "REDIS"
        );
        let tls_protocol = matches!(protocol.as_str(), "HTTPS" | "TLS");
        if !plain && !tls_protocol {
            findings.push(Finding::error(
                f.clone(),
                format!(
                    "a {protocol} server is not supported by meshflow yet; no listener is \
                     generated for it (port {number})"
                ),
            ));
            continue;
        }
        // Not generated: its tls names what meshflow cannot honour, which may also be what
        // completes it (`tlsCertificates` in place of `serverCertificate`).
        if closed.contains(&i) {
            continue;
        }
        let mut https_redirect = false;
        let mut tls = None;
        // Hosts left out of the server (a condition it cannot honour), by index.
        let mut left_out: Vec<usize> = Vec::new();
        match (&srv.tls, tls_protocol) {
            (None, true) => {
                return Err(Invalid::field(
                    format!("{f}.tls"),
                    "HTTPS and TLS servers need tls settings",
                ))
            }
            (Some(t), true) => {
                let Some(mut st) = server_tls(t, &f, findings)? else {
                    continue;
                };
                // A TLS server that terminates carries TCP: routed by `tcp[]` routes.
                st.tcp = !matches!(
                    st.mode,
                    m::ServerTlsMode::Passthrough | m::ServerTlsMode::AutoPassthrough
                ) && protocol == "TLS";
                if st.mode == m::ServerTlsMode::AutoPassthrough {
                    // The clusters it passes to are matched by host name only: a host
                    // restricted to a namespace cannot be honoured, and is left out.
                    for (hi, h) in srv.hosts.iter().enumerate() {
                        if h.split_once('/').is_some_and(|(ns, _)| ns != "*") {
                            findings.push(Finding::error(
                                format!("{f}.hosts[{hi}]"),
                                format!(
                                    "{h:?}: an AUTO_PASSTHROUGH server matches clusters by \
                                     host name, not by namespace, in meshflow; this host is \
                                     left out"
                                ),
                            ));
                            left_out.push(hi);
                        }
                    }
                    if left_out.len() == srv.hosts.len() {
                        continue;
                    }
                }
                if st.mode == m::ServerTlsMode::AutoPassthrough && protocol != "TLS" {
                    findings.push(Finding::error(
                        format!("{f}.tls.mode"),
                        format!(
                            "AUTO_PASSTHROUGH is generated for servers of protocol TLS only; \
                             no filter chain is generated for this {protocol} server (port \
                             {number})"
                        ),
                    ));
                    continue;
                }
                if t.https_redirect {
                    findings.push(Finding::warning(
                        format!("{f}.tls.httpsRedirect"),
                        "applies to HTTP servers only; ignored on an HTTPS or TLS server",
                    ));
                }
                tls = Some(Box::new(st));
            }
            (Some(t), false) => {
                https_redirect = t.https_redirect;
                if !https_redirect || !srv_is_http(&protocol) {
                    findings.push(Finding::error(
                        format!("{f}.tls"),
                        format!(
                            "a {protocol} server with tls (other than httpsRedirect on HTTP) is \
                             not supported by meshflow yet; no listener is generated for it \
                             (port {number})"
                        ),
                    ));
                    continue;
                }
            }
            (None, false) => {}
        }
        servers.push(m::GatewayServer {
            port: number,
            port_name: port.name.clone(),
            protocol: server_protocol(&port.protocol),
            bind: srv.bind.clone(),
            hosts: srv
                .hosts
                .iter()
                .enumerate()
                .filter(|(hi, _)| !left_out.contains(hi))
                .map(|(_, h)| {
                    if h.contains('/') {
                        h.clone()
                    } else {
                        format!("*/{h}")
                    }
                })
                .collect(),
            https_redirect,
            tls,
            field: f.clone(),
        });
        fields.push(f);
    }
    let servers = without_protocol_clashes(servers, &fields, findings);
    Ok(vec![Record::Gateway(m::Gateway {
        key: key.clone(),
        selector: s.selector,
        servers,
    })])
}

/// HTTP servers take `httpsRedirect`.
fn srv_is_http(protocol: &str) -> bool {
    matches!(protocol, "HTTP" | "HTTP2" | "GRPC")
}

fn sidecar(key: &ConfigKey, value: &Value, findings: &mut Vec<Finding>) -> Result<Vec<Record>> {
    let (s, ignored): (istio::SidecarSpec, _) = spec(value)?;
    // A field of an ingress listener's `tls` that is not read (which certificates to
    // present or accept) cannot be honoured: terminating without it would take what Istio
    // refuses. The listener's inbound cluster has no endpoints instead, so nothing reaches
    // the application through it.
    let mut closed: Vec<usize> = Vec::new();
    report_ignored(&ignored, findings, |p| {
        let i = p.index_under("ingress")?;
        (p.key_at(2) == Some("tls")).then(|| {
            closed.push(i);
            Finding::error(
                p.to_string(),
                format!(
                    "not supported by meshflow yet on a Sidecar ingress listener; the inbound \
                     cluster of spec.ingress[{i}] has no endpoints (fails closed), so no \
                     connection reaches the application"
                ),
            )
        })
    });
    let mode = s
        .outbound_traffic_policy
        .as_ref()
        .and_then(|o| o.mode.as_deref());
    // Unset: the mesh config's mode applies.
    let registry_only = match mode {
        None => None,
        Some("ALLOW_ANY") => Some(false),
        Some("REGISTRY_ONLY") => Some(true),
        Some(other) => {
            return Err(Invalid::field(
                "spec.outboundTrafficPolicy.mode",
                format!("unknown mode {other:?} (ALLOW_ANY, REGISTRY_ONLY)"),
            ))
        }
    };
    let egress_proxy = match s
        .outbound_traffic_policy
        .as_ref()
        .and_then(|o| o.egress_proxy.as_ref())
    {
        None => None,
        Some(d) => Some(egress_proxy(d, registry_only)?),
    };
    let mut egress: Vec<m::EgressListener> = Vec::new();
    for (i, e) in s.egress.iter().enumerate() {
        let f = format!("spec.egress[{i}]");
        if e.hosts.is_empty() {
            return Err(Invalid::field(
                format!("{f}.hosts"),
                "an egress listener needs hosts",
            ));
        }
        for (hi, h) in e.hosts.iter().enumerate() {
            let ok = h
                .split_once('/')
                .is_some_and(|(ns, host)| !ns.is_empty() && !host.is_empty());
            if !ok {
                return Err(Invalid::field(
                    format!("{f}.hosts[{hi}]"),
                    format!("{h:?} is not of the form namespace/host"),
                ));
            }
        }
        let port = match &e.port {
            None => None,
            Some(p) => Some(m::EgressPort {
                number: port_u16(p.number, &format!("{f}.port.number"))?,
                // Naming no protocol, the listener tells HTTP from TCP per connection.
                protocol: match p.protocol.as_str() {
                    "" => m::Protocol::Auto,
                    named => server_protocol(named),
                },
                name: p.name.clone(),
            }),
        };
        if let Some(b) = &e.bind {
            if b.parse::<std::net::IpAddr>().is_err() {
                return Err(Invalid::field(
                    format!("{f}.bind"),
                    format!("{b:?} is not an IP address"),
                ));
            }
        }
        let capture_none = match e.capture_mode.as_deref() {
            None | Some("DEFAULT") | Some("IPTABLES") => false,
            Some("NONE") => true,
            Some(other) => {
                return Err(Invalid::field(
                    format!("{f}.captureMode"),
                    format!("unknown capture mode {other:?}"),
                ))
            }
        };
        let clash = egress
            .iter()
            .any(|x| x.port.as_ref().map(|p| p.number) == port.as_ref().map(|p| p.number));
        if clash {
            let what = port
                .as_ref()
                .map(|p| format!("port {}", p.number))
                .unwrap_or_else(|| "the catch-all".into());
            return Err(Invalid::field(
                format!("{f}.port"),
                format!("{what} has two egress listeners"),
            ));
        }
        egress.push(m::EgressListener {
            port,
            bind: e.bind.clone(),
            capture_none,
            hosts: e.hosts.clone(),
        });
    }
    let selector = s
        .workload_selector
        .map(|w| w.labels)
        .filter(|l| !l.is_empty());
    let ingress = sidecar_ingress(&s.ingress, &closed, findings)?;
    let inbound_connection_pool = s
        .inbound_connection_pool
        .as_ref()
        .map(|c| inbound_pool(c, "spec.inboundConnectionPool"))
        .transpose()?;
    // The egress proxy's cluster exists only where the Sidecar imports its host: a host no
    // egress listener's `hosts` can name (in any namespace) leaves what would pass through
    // with no cluster to go to.
    if let Some(p) = &egress_proxy {
        let imported = egress.is_empty()
            || egress.iter().flat_map(|e| &e.hosts).any(|h| {
                let name = h.split_once('/').map_or(h.as_str(), |(_, n)| n);
                dataflows::rules::host_matches(name, &p.host)
            });
        if !imported {
            findings.push(Finding::warning(
                "spec.outboundTrafficPolicy.egressProxy.host",
                format!(
                    "{} is not among the hosts this Sidecar's egress imports: its cluster is \
                     not generated, so traffic that would pass through fails instead",
                    p.host
                ),
            ));
        }
    }
    Ok(vec![Record::Sidecar(m::Sidecar {
        key: key.clone(),
        selector,
        egress,
        registry_only,
        ingress,
        egress_proxy,
        inbound_connection_pool,
    })])
}

/// A Sidecar's `connectionPool` (of an `ingress` listener, or `inboundConnectionPool`), as
/// Istio validates it: with `tcp` or `http`, each checked as a DestinationRule's.
fn inbound_pool(c: &istio::ConnectionPool, field: &str) -> Result<m::InboundPool> {
    let connect_timeout_ms = c
        .tcp
        .as_ref()
        .and_then(|t| t.connect_timeout.as_deref())
        .map(|t| parse_duration_ms(t, &format!("{field}.tcp.connectTimeout")))
        .transpose()?;
    Ok(m::InboundPool {
        connect_timeout_ms,
        pool: connection_pool(c, field)?,
    })
}

/// A Sidecar's `outboundTrafficPolicy.egressProxy`, checked as Istio's validation checks it:
/// only beside mode `ALLOW_ANY`, a fully qualified host (no wildcard), and a port.
fn egress_proxy(d: &istio::Destination, registry_only: Option<bool>) -> Result<m::EgressProxy> {
    const F: &str = "spec.outboundTrafficPolicy.egressProxy";
    if registry_only != Some(false) {
        return Err(Invalid::field(
            F,
            "an egress proxy is only valid with outboundTrafficPolicy.mode ALLOW_ANY",
        ));
    }
    let host = d.host.trim();
    let labels_ok = host.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    });
    if !host.contains('.') || !labels_ok {
        return Err(Invalid::field(
            format!("{F}.host"),
            format!("{host:?} is not a fully qualified domain name"),
        ));
    }
    let Some(number) = d.port.as_ref().and_then(|p| p.number) else {
        return Err(Invalid::field(
            format!("{F}.port"),
            "an egress proxy needs a port number",
        ));
    };
    Ok(m::EgressProxy {
        host: host.to_ascii_lowercase(),
        subset: d.subset.clone().filter(|s| !s.is_empty()),
        port: port_u16(number, &format!("{F}.port.number"))?,
    })
}

/// A Sidecar's `ingress[]`: ports to a `defaultEndpoint` on the workload, HTTP ones through
/// a connection manager, any other protocol as TCP. A port whose endpoint is a Unix socket
/// is left out and said (its traffic keeps reaching the workload as the proxy's own
/// endpoints have it). `tls`: see [`ingress_tls`].
/// `closed`: the indices of listeners whose inbound cluster fails closed (a field of their
/// `tls` is not read).
fn sidecar_ingress(
    list: &[istio::IstioIngressListener],
    closed: &[usize],
    findings: &mut Vec<Finding>,
) -> Result<Vec<m::IngressListener>> {
    let mut out: Vec<m::IngressListener> = Vec::new();
    for (i, l) in list.iter().enumerate() {
        let f = format!("spec.ingress[{i}]");
        let Some(p) = &l.port else {
            return Err(Invalid::field(
                format!("{f}.port"),
                "an ingress listener needs a port",
            ));
        };
        let port = port_u16(p.number, &format!("{f}.port.number"))?;
        if out.iter().any(|x| x.port == port) {
            return Err(Invalid::field(
                format!("{f}.port"),
                format!("port {port} has two ingress listeners"),
            ));
        }
        if let Some(b) = &l.bind {
            if b.parse::<std::net::IpAddr>().is_err() {
                return Err(Invalid::field(
                    format!("{f}.bind"),
                    format!("{b:?} is not an IP address"),
                ));
            }
        }
        let capture_none = match l.capture_mode.as_deref() {
            None | Some("DEFAULT") | Some("IPTABLES") => false,
            Some("NONE") => true,
            Some(other) => {
                return Err(Invalid::field(
                    format!("{f}.captureMode"),
                    format!("unknown capture mode {other:?}"),
                ))
            }
        };
        // An ingress port naming no protocol is told per connection, as Istio does.
        let mut protocol = match p.protocol.as_str() {
            "" => m::Protocol::Auto,
            named => server_protocol(named),
        };
        let mut fail_closed = closed
            .contains(&i)
            .then(|| format!("Sidecar {f}.tls names a field meshflow does not support yet"));
        let tls = match &l.tls {
            Some(t) => match ingress_tls(t, &f, &p.protocol, findings)? {
                Ok(_) if fail_closed.is_some() => None,
                Ok(tls) => {
                    // What the application receives once the proxy has terminated TLS.
                    protocol = match protocol {
                        m::Protocol::Tls if p.protocol.eq_ignore_ascii_case("HTTPS") => {
                            m::Protocol::Http
                        }
                        m::Protocol::Tls => m::Protocol::Tcp,
                        other => other,
                    };
                    Some(Box::new(tls))
                }
                Err(why) => {
                    fail_closed = fail_closed.or(Some(why));
                    None
                }
            },
            None => None,
        };
        let endpoint = match l.default_endpoint.as_deref() {
            None => ("127.0.0.1".to_string(), port),
            Some(e) if e.starts_with("unix://") => {
                findings.push(Finding::warning(
                    format!("{f}.defaultEndpoint"),
                    "Unix socket endpoints are not supported by meshflow yet; this ingress \
                     listener is not generated",
                ));
                continue;
            }
            Some(e) => match e.parse::<std::net::SocketAddr>() {
                Ok(a) => (a.ip().to_string(), a.port()),
                Err(_) => {
                    return Err(Invalid::field(
                        format!("{f}.defaultEndpoint"),
                        format!("{e:?} is not IP:PORT (or unix://PATH)"),
                    ))
                }
            },
        };
        let connection_pool = l
            .connection_pool
            .as_ref()
            .map(|c| inbound_pool(c, &format!("{f}.connectionPool")))
            .transpose()?;
        if l.connection_pool.as_ref().is_some_and(|c| c.http.is_some()) && !protocol.carries_http()
        {
            findings.push(Finding::warning(
                format!("{f}.connectionPool.http"),
                format!(
                    "port {port} is not HTTP: only the tcp settings of its connection pool \
                     apply"
                ),
            ));
        }
        out.push(m::IngressListener {
            port,
            bind: l.bind.clone(),
            endpoint,
            capture_none,
            protocol,
            connection_pool,
            tls,
            fail_closed,
        });
    }
    Ok(out)
}

/// An `ingress` listener's `tls` at field `f` (its port's `protocol` as written), as Istio
/// reads it: SIMPLE, MUTUAL or OPTIONAL_MUTUAL with `serverCertificate`, `privateKey` and
/// (to verify clients) `caCertificates`, the protocol versions and the cipher suites.
/// Rejected as Istio's validation rejects them: `subjectAltNames`, `httpsRedirect`,
/// `credentialName` (not supported on sidecars), the modes ISTIO_MUTUAL and AUTO_PASSTHROUGH,
/// and whatever a Gateway server's `tls` is rejected for ([`server_tls`]). `Ok(Err(why))`:
/// what meshflow cannot terminate as asked (an error names the field; the listener fails
/// closed): PASSTHROUGH (terminating, Istio would present no certificate) and a port whose
/// protocol is told per connection (Istio builds no chain for it once TLS is terminated).
fn ingress_tls(
    t: &istio::ServerTlsSettings,
    f: &str,
    port_protocol: &str,
    findings: &mut Vec<Finding>,
) -> Result<std::result::Result<m::ServerTls, String>> {
    let refuse = |field: &str, why: &str| Err(Invalid::field(format!("{f}.tls.{field}"), why));
    if !t.subject_alt_names.is_empty() {
        return refuse(
            "subjectAltNames",
            "not supported in a Sidecar ingress listener's tls (Istio refuses it)",
        );
    }
    if t.https_redirect {
        return refuse(
            "httpsRedirect",
            "not supported in a Sidecar ingress listener's tls (Istio refuses it)",
        );
    }
    if t.credential_name.as_ref().is_some_and(|n| !n.is_empty()) {
        return refuse(
            "credentialName",
            "not supported in a Sidecar ingress listener's tls (Istio refuses it): name \
             serverCertificate and privateKey files",
        );
    }
    let mode = t.mode.as_deref().unwrap_or("").to_ascii_uppercase();
    if matches!(mode.as_str(), "ISTIO_MUTUAL" | "AUTO_PASSTHROUGH") {
        return refuse(
            "mode",
            &format!("{mode} cannot be a Sidecar ingress listener's mode (Istio refuses it)"),
        );
    }
    let Some(tls) = server_tls(t, f, findings)? else {
        return Ok(Err(format!("Sidecar {f}.tls cannot be terminated")));
    };
    let mut fail = |field: String, why: String| {
        findings.push(Finding::error(
            field.clone(),
            format!(
                "{why}; the inbound cluster of {f} has no endpoints (fails closed), so no \
                 connection reaches the application"
            ),
        ));
        Ok(Err(format!("Sidecar {field}: {why}")))
    };
    if tls.mode == m::ServerTlsMode::Passthrough {
        return fail(
            format!("{f}.tls.mode"),
            "PASSTHROUGH (the default mode) terminates nothing on a Sidecar ingress listener: \
             set SIMPLE, MUTUAL or OPTIONAL_MUTUAL"
                .into(),
        );
    }
    if port_protocol.is_empty() {
        return fail(
            format!("{f}.tls"),
            "a port without a protocol cannot be told HTTP or TCP once TLS is terminated \
             (Istio builds no chain for it): set the port's protocol"
                .into(),
        );
    }
    Ok(Ok(tls))
}

fn service_entry(
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
    let resolution = match s.resolution.as_deref() {
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
    };
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
    let mut ports = Vec::new();
    // Where each port's endpoints receive traffic when an endpoint names no port of its own.
    let mut target_ports = Vec::new();
    for (i, p) in s.ports.iter().enumerate() {
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
            for (p, target_port) in ports.iter().zip(&target_ports) {
                let target = endpoint_port(ep, ei, p, *target_port)?;
                out.push(Record::Endpoint(
                    host.clone(),
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
    }
    Ok(out)
}

fn workload_entry(
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
    })])
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

/// A name DNS can answer: dot-separated labels of letters, digits and inner hyphens, each
/// at most 63 characters, 253 in all (a trailing dot allowed); no wildcard.
fn is_fqdn(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
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
