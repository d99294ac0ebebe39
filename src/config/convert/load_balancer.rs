//! A traffic policy's `loadBalancer`: the algorithm or consistent hash, the warmup, and the
//! locality settings (which the mesh config's `localityLbSetting` shares).

use super::fields::parse_duration_ms;
use super::Result;
use crate::config::findings::Finding;
use crate::config::{istio, Invalid};
use dataflows::model as m;

/// `loadBalancer`: `simple` or `consistentHash`, which Istio's schema makes exclusive.
pub(super) fn load_balancer(
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
pub(super) fn warmup(
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
pub(in crate::config) fn locality_lb_setting(
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
