//! `meshflow authz check PROXY --port N …`: the proxy's resources fetched over CSDS (as
//! `proxy-config` fetches them), checked by [`crate::debug::authz`] as `/debug/authz_check`
//! checks what the hub holds.

use super::{fetch_resources, Output};
use crate::debug::authz::{check, render, Request};
use crate::debug::envoy_json::print;
use dataflows::simulate::ProxyConfig;
use std::net::SocketAddr;

/// `meshflow authz check`.
pub async fn authz_check(
    addr: SocketAddr,
    proxy: &str,
    request: &Request,
    output: Output,
) -> Result<String, String> {
    let (id, resources) = fetch_resources(addr, proxy, &crate::debug::authz::TYPES).await?;
    let config = ProxyConfig::from_bodies(
        resources
            .iter()
            .map(|r| (r.rtype, r.name.as_str(), &r.body[..])),
    );
    let verdict = check(&config, id, request)?;
    match output.format() {
        Some(format) => print(&verdict, format),
        None => Ok(render(&verdict)),
    }
}
