//! The Gateway API's kinds (gateway.networking.k8s.io), validated into the records of
//! `dataflows::model::gateway_api`, one file per kind. Which Gateway a route attaches to,
//! and what a ReferenceGrant allows, is the dataflow's to decide: these read one object.

mod gateway;
mod http_route;
mod reference_grant;

pub(super) use gateway::kubernetes_gateway;
pub(super) use http_route::http_route;
pub(super) use reference_grant::reference_grant;

use super::Result;
use crate::config::Invalid;

/// The Gateway API's group.
pub(super) const GROUP: &str = "gateway.networking.k8s.io";

/// A port of the Gateway API (1–65535).
fn port(n: i64, field: &str) -> Result<u16> {
    u16::try_from(n)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| Invalid::field(field, format!("{n} is not a port (1-65535)")))
}

/// A hostname as the Gateway API takes it: a DNS name, or `*.` before one; no IP address,
/// no port, lowercase.
fn hostname(h: &str, field: &str) -> Result<()> {
    let name = h.strip_prefix("*.").unwrap_or(h);
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if h.len() > 253 || !name.split('.').all(label_ok) || name.parse::<std::net::IpAddr>().is_ok() {
        return Err(Invalid::field(
            field,
            format!("{h:?} is not a hostname (lowercase DNS labels, `*.` first for a wildcard)"),
        ));
    }
    Ok(())
}
