//! Host names as Istio writes them: host patterns (`*`, `*.suffix`, an exact name) and the
//! SNI names of a server's or a route's hosts. Pure functions of names, for the builders
//! here and for `crate::rules`, which re-exports [`host_matches`].

use std::collections::BTreeSet;

/// A host pattern: `*`, `*.suffix`, or an exact name.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}")),
        None => pattern == host,
    }
}

/// The SNI names of a server's or route's hosts (`ns/host` or `host`); empty when one of
/// them is `*` (the chain takes any name, and connections without SNI).
pub fn server_names(hosts: &[String]) -> Vec<String> {
    let names: Vec<String> = hosts
        .iter()
        .map(|h| h.split_once('/').map_or(h.as_str(), |(_, n)| n).to_string())
        .collect();
    if names.iter().any(|n| n == "*") {
        return Vec::new();
    }
    let set: BTreeSet<String> = names.into_iter().collect();
    set.into_iter().collect()
}
