//! What the HTTP layer sees of a call, and Envoy's matchers over it: strings, headers,
//! query parameters, and the path normalization that comes before them. Route matching and
//! the HTTP filters (RBAC and JWT included) share them.

use super::Call;
use envoy_types::pb::envoy::config::route::v3::{
    header_matcher::HeaderMatchSpecifier, query_parameter_matcher::QueryParameterMatchSpecifier,
    HeaderMatcher, QueryParameterMatcher,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{string_matcher::MatchPattern, StringMatcher};
use std::collections::BTreeMap;
use std::time::Duration;

/// What the HTTP layer sees of a call.
pub(super) struct Request<'a> {
    pub(super) call: &'a Call,
    /// The path used for matching (normalized when the connection manager says so).
    pub(super) path: String,
    /// Lower-cased names; repeated headers joined with `,` as Envoy does for matching.
    pub(super) headers: BTreeMap<String, String>,
}

impl Request<'_> {
    pub(super) fn path_only(&self) -> &str {
        self.path
            .split(['?', '#'])
            .next()
            .unwrap_or(self.path.as_str())
    }

    pub(super) fn query(&self) -> Vec<(&str, &str)> {
        let Some((_, q)) = self.path.split_once('?') else {
            return Vec::new();
        };
        let q = q.split('#').next().unwrap_or(q);
        q.split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
            .collect()
    }
}

/// Envoy's full-match regex (RE2 there; Rust's `regex` here, which agrees on the syntax Istio
/// emits).
pub(super) fn full_match(re: &str, value: &str, warnings: &mut Vec<String>) -> bool {
    match regex::Regex::new(&format!("^(?:{re})$")) {
        Ok(r) => r.is_match(value),
        Err(e) => {
            warnings.push(format!("regex {re:?} does not compile: {e}"));
            false
        }
    }
}

pub(super) fn string_matches(m: &StringMatcher, value: &str, warnings: &mut Vec<String>) -> bool {
    let fold = |s: &str| {
        if m.ignore_case {
            s.to_ascii_lowercase()
        } else {
            s.to_string()
        }
    };
    let v = fold(value);
    match &m.match_pattern {
        Some(MatchPattern::Exact(s)) => v == fold(s),
        Some(MatchPattern::Prefix(s)) => v.starts_with(&fold(s)),
        Some(MatchPattern::Suffix(s)) => v.ends_with(&fold(s)),
        Some(MatchPattern::Contains(s)) => v.contains(&fold(s)),
        Some(MatchPattern::SafeRegex(r)) => full_match(&r.regex, value, warnings),
        Some(MatchPattern::Custom(c)) => {
            warnings.push(format!("custom string matcher {} is not modelled", c.name));
            false
        }
        None => false,
    }
}

/// Envoy's `HeaderUtility::matchHeaders`.
#[allow(deprecated)] // the deprecated specifiers are still valid config
pub(super) fn header_matches(h: &HeaderMatcher, req: &Request, warnings: &mut Vec<String>) -> bool {
    let value = req.headers.get(&h.name.to_ascii_lowercase());
    let present_spec = match &h.header_match_specifier {
        Some(HeaderMatchSpecifier::PresentMatch(p)) => Some(*p),
        None => Some(true),
        Some(_) => None,
    };
    let value = match value {
        Some(v) => v.as_str(),
        None if h.treat_missing_header_as_empty => "",
        // A missing header matches only `present_match: false` (inverted: `true`).
        None => return present_spec.is_some_and(|p| p == h.invert_match),
    };
    let matched = match &h.header_match_specifier {
        Some(HeaderMatchSpecifier::ExactMatch(s)) => s.is_empty() || value == s,
        Some(HeaderMatchSpecifier::SafeRegexMatch(r)) => full_match(&r.regex, value, warnings),
        Some(HeaderMatchSpecifier::RangeMatch(r)) => value
            .parse::<i64>()
            .is_ok_and(|v| r.start <= v && v < r.end),
        Some(HeaderMatchSpecifier::PresentMatch(p)) => *p,
        Some(HeaderMatchSpecifier::PrefixMatch(s)) => value.starts_with(s.as_str()),
        Some(HeaderMatchSpecifier::SuffixMatch(s)) => value.ends_with(s.as_str()),
        Some(HeaderMatchSpecifier::ContainsMatch(s)) => value.contains(s.as_str()),
        Some(HeaderMatchSpecifier::StringMatch(sm)) => string_matches(sm, value, warnings),
        None => true,
    };
    matched != h.invert_match
}

pub(super) fn query_matches(
    q: &QueryParameterMatcher,
    query: &[(&str, &str)],
    warnings: &mut Vec<String>,
) -> bool {
    let value = query.iter().find(|(k, _)| *k == q.name).map(|(_, v)| *v);
    match (&q.query_parameter_match_specifier, value) {
        (_, None) => false,
        (Some(QueryParameterMatchSpecifier::StringMatch(sm)), Some(v)) => {
            string_matches(sm, v, warnings)
        }
        (Some(QueryParameterMatchSpecifier::PresentMatch(p)), Some(_)) => *p,
        (None, Some(_)) => true,
    }
}

/// RFC 3986 dot-segment removal, as Envoy's `normalize_path` does, on the path (the query is
/// kept as is).
pub(super) fn normalize_path(path: &str) -> String {
    let (p, rest) = match path.find(['?', '#']) {
        Some(i) => path.split_at(i),
        None => (path, ""),
    };
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = p.split('/').skip(1).collect();
    let trailing = matches!(segments.last(), Some(&"." | &".."));
    for s in &segments {
        match *s {
            "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    let mut norm = format!("/{}", out.join("/"));
    if trailing && !norm.ends_with('/') {
        norm.push('/');
    }
    norm + rest
}

/// Envoy's `merge_slashes`: runs of `/` in the path (not the query) become one.
pub(super) fn merge_slashes(path: &str) -> String {
    let (p, rest) = match path.find(['?', '#']) {
        Some(i) => path.split_at(i),
        None => (path, ""),
    };
    let mut out = String::with_capacity(p.len());
    for c in p.chars() {
        if !(c == '/' && out.ends_with('/')) {
            out.push(c);
        }
    }
    out + rest
}

pub(super) fn to_duration(d: &envoy_types::pb::google::protobuf::Duration) -> Duration {
    Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32)
}
