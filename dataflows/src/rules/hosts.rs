//! Matching every kind shares: host patterns (a wildcard's cover, its specificity, two
//! patterns' overlap), `exportTo`, label selectors, and a cluster-local host's namespace.
//! [`host_matches`] itself is `translate::hosts`', which the builders use too.

pub use crate::translate::hosts::host_matches;

use crate::model::*;

/// `exportTo`: empty or `*` is everyone, `.` the owner's namespace, `~` no one.
pub use crate::model::exported_to;

/// How closely a VirtualService host covers a service host, lower first; `None` when it does
/// not cover it. As Istio picks the VirtualService of a sidecar's service: the host itself
/// (a wildcard service's own pattern included), then the longest wildcard that covers it
/// (`*.b.example.com` before `*.example.com` before `*`).
pub fn vs_host_specificity(vs_host: &str, host: &str) -> Option<(u8, usize)> {
    if vs_host == host {
        Some((0, 0))
    } else if host_matches(vs_host, host) {
        Some((1, usize::MAX - vs_host.len()))
    } else {
        None
    }
}

/// Every VirtualService host that may cover `host` ([`vs_host_specificity`]): the host
/// itself, `*.` before each suffix after a dot, and `*`. Joining on these finds the
/// wildcard VirtualServices of a host without comparing it to every VirtualService.
pub fn covering_patterns(host: &str) -> Vec<String> {
    let mut out = vec![host.to_string()];
    for (i, c) in host.char_indices() {
        if c == '.' {
            let pattern = format!("*.{}", &host[i + 1..]);
            if vs_host_specificity(&pattern, host).is_some() && !out.contains(&pattern) {
                out.push(pattern);
            }
        }
    }
    if host != "*" {
        out.push("*".to_string());
    }
    out
}

/// Whether two host patterns have a name in common, as Istio compares an egress listener's
/// imported hosts with a VirtualService's: equal names, a wildcard covering the other
/// name, or two wildcards one of which covers the other.
pub fn hosts_overlap(a: &str, b: &str) -> bool {
    match (a.strip_prefix('*'), b.strip_prefix('*')) {
        (Some(sa), Some(sb)) => sa.ends_with(sb) || sb.ends_with(sa),
        (Some(sa), None) => b.ends_with(sa),
        (None, Some(sb)) => a.ends_with(sb),
        (None, None) => a == b,
    }
}

/// Every label of `selector` is present in `labels` with the same value.
pub fn labels_match(selector: &Labels, labels: &Labels) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The namespace a cluster-local hostname belongs to (`name.ns.svc.<suffix>`).
pub fn host_namespace<'a>(host: &'a str, suffix: &str) -> Option<&'a str> {
    let prefix = host.strip_suffix(suffix)?.strip_suffix(".svc.")?;
    prefix.split_once('.').map(|(_, ns)| ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The patterns a host is joined on are exactly the VirtualService hosts that cover it,
    /// ranked as Istio ranks them: the host itself, then longer wildcards before shorter.
    #[test]
    fn covering_patterns_are_the_hosts_that_cover_and_rank_by_specificity() {
        let hosts = [
            "a.b.example.com",
            "*.cdn.example",
            "example.com",
            "*",
            "localhost",
        ];
        let candidates = [
            "a.b.example.com",
            "*.b.example.com",
            "*.example.com",
            "*.com",
            "*",
            "*.cdn.example",
            "*.example",
            "*.x.cdn.example",
            "b.example.com",
            "example.com",
            "*.localhost",
            "localhost",
        ];
        for h in hosts {
            let patterns = covering_patterns(h);
            for c in candidates {
                assert_eq!(
                    patterns.iter().any(|p| p == c),
                    vs_host_specificity(c, h).is_some(),
                    "{c} covering {h}: {patterns:?}"
                );
            }
        }
        let rank = |p: &str| vs_host_specificity(p, "a.b.example.com");
        assert!(rank("a.b.example.com") < rank("*.b.example.com"));
        assert!(rank("*.b.example.com") < rank("*.example.com"));
        assert!(rank("*.example.com") < rank("*"));
        assert_eq!(rank("b.example.com"), None);
        assert_eq!(
            vs_host_specificity("*.cdn.example", "*.cdn.example"),
            Some((0, 0))
        );
        assert!(vs_host_specificity("*.example", "*.cdn.example").is_some());
        assert_eq!(
            vs_host_specificity("*.x.cdn.example", "*.cdn.example"),
            None
        );
    }
}
