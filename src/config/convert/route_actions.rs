//! What an HTTP route of a VirtualService does besides choosing destinations: redirects,
//! direct responses, rewrites, header edits, mirrors, faults, retries and CORS.

use super::fields::{destination, is_header_token, parse_duration_ms, port_u16, string_match};
use super::Result;
use crate::config::findings::Finding;
use crate::config::{istio, Invalid};
use dataflows::model::{self as m, MeshConfig};

/// An `HTTPRetry` (a route's `retries`, the mesh's `defaultHttpRetryPolicy`) at `field`,
/// checked as Istio's validation checks it: zero attempts (retries off) with anything else
/// set is refused, and each `retryOn` part is a status code or a condition Envoy knows.
pub(in crate::config) fn retries(rt: &istio::HttpRetry, field: &str) -> Result<m::Retries> {
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
pub(super) fn cors(c: &istio::CorsPolicy, field: &str, mesh: &MeshConfig) -> Result<m::Cors> {
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

pub(super) fn redirect(rd: &istio::HttpRedirect, f: &str) -> Result<m::Redirect> {
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
        prefix: None,
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

pub(super) fn direct_response(d: &istio::HttpDirectResponse, f: &str) -> Result<m::DirectResponse> {
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

pub(super) fn rewrite(rw: &istio::HttpRewrite, f: &str, mesh: &MeshConfig) -> Result<m::Rewrite> {
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
pub(super) fn header_edits(
    ops: &istio::HeaderOperations,
    f: &str,
    request: bool,
) -> Result<m::HeaderEdits> {
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

pub(super) fn header_ops(h: &istio::Headers, f: &str) -> Result<m::HeaderOps> {
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
pub(super) fn mirrors(
    r: &istio::HttpRoute,
    f: &str,
    ns: &str,
    mesh: &MeshConfig,
) -> Result<Vec<m::Mirror>> {
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
pub(super) fn fault(
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
            // `percentage` wins over the deprecated whole `percent`, as in Istio.
            let share = match (&d.percentage, d.percent) {
                (None, Some(p)) if (0..=100).contains(&p) => {
                    findings.push(Finding::deprecated(
                        format!("{f}.delay.percent"),
                        format!(
                            "deprecated: use percentage; read as percentage {{value: {p}}}, as \
                             Istio reads it (IST0156)"
                        ),
                    ));
                    p as m::PerMillion * 10_000
                }
                (None, Some(p)) => {
                    return Err(Invalid::field(
                        format!("{f}.delay.percent"),
                        format!("{p} is not a percentage in 0..100"),
                    ))
                }
                (Some(_), Some(_)) => {
                    findings.push(Finding::deprecated(
                        format!("{f}.delay.percent"),
                        "deprecated: use percentage, which is set and wins (IST0156)",
                    ));
                    fraction(&d.percentage, format!("{f}.delay.percentage"))?
                }
                _ => fraction(&d.percentage, format!("{f}.delay.percentage"))?,
            };
            Some((ms, share))
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
