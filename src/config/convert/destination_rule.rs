//! A DestinationRule: its subsets and its traffic policies (of the rule, a subset, a port)
//! with client TLS, connection pools and outlier detection. Load balancing is
//! [`super::load_balancer`]'s.

use super::fields::{
    duration, duration_at_least_1ms, export_to, fqdn, parse_duration_ms, port_u16, report_ignored,
    source_labels, spec,
};
use super::load_balancer::{load_balancer, locality_lb_setting, warmup};
use super::Result;
use crate::config::findings::Finding;
use crate::config::{istio, Invalid};
use dataflows::model::{self as m, ConfigKey, MeshConfig, Record};
use serde_yaml_ng::Value;

pub(super) fn destination_rule(
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
                    ..Default::default()
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

/// A `connectionPool`, checked as Istio's validation checks it: with `tcp` or `http` settings
/// (an empty pool is refused), each setting in range.
pub(super) fn connection_pool(
    c: &istio::ConnectionPool,
    f: &str,
) -> Result<Option<m::ConnectionPool>> {
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
