//! Envoy's route matches of a VirtualService's `match` conditions: the URI, headers
//! (`headers`, `withoutHeaders`; those on a verified token's claims as dynamic metadata
//! matches), query parameters, and `ignoreUriCase`.

use crate::model::{jwt_claim_path, HttpMatch, StringMatch};
use envoy_types::pb::envoy::config::route::v3::{
    header_matcher::HeaderMatchSpecifier, query_parameter_matcher::QueryParameterMatchSpecifier,
    route_match::PathSpecifier, HeaderMatcher, QueryParameterMatcher, RouteMatch,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{
    string_matcher::MatchPattern, RegexMatcher, StringMatcher,
};
use envoy_types::pb::google::protobuf::BoolValue;

/// Envoy's matcher for a string match; `None` for [`StringMatch::Present`], which Envoy
/// expresses as `present_match` on the header or query parameter instead.
pub(super) fn string_matcher(m: &StringMatch, ignore_case: bool) -> Option<StringMatcher> {
    let pattern = match m {
        StringMatch::Exact(s) => MatchPattern::Exact(s.clone()),
        StringMatch::Prefix(s) => MatchPattern::Prefix(s.clone()),
        StringMatch::Regex(s) => MatchPattern::SafeRegex(RegexMatcher {
            regex: s.clone(),
            ..Default::default()
        }),
        // Only paths take one, and a path gets `path_separated_prefix`; anywhere else the
        // same segment-wise match as a regular expression.
        StringMatch::SegmentPrefix(s) => MatchPattern::SafeRegex(RegexMatcher {
            regex: format!("{}(/.*)?", regex::escape(s)),
            ..Default::default()
        }),
        StringMatch::Present => return None,
    };
    Some(StringMatcher {
        match_pattern: Some(pattern),
        ignore_case,
    })
}

/// A `headers` (`invert: false`) or `withoutHeaders` (`invert: true`) condition. As Istio
/// translates `withoutHeaders`, a value match treats a missing header as empty: a request
/// without the header is one whose header does not have the value, so it matches (Envoy
/// would otherwise fail an inverted value match on a missing header).
fn header_matcher(name: &str, m: &StringMatch, invert: bool) -> HeaderMatcher {
    let (spec, value) = match string_matcher(m, false) {
        Some(sm) => (HeaderMatchSpecifier::StringMatch(sm), true),
        None => (HeaderMatchSpecifier::PresentMatch(true), false),
    };
    HeaderMatcher {
        name: name.to_string(),
        header_match_specifier: Some(spec),
        invert_match: invert,
        treat_missing_header_as_empty: invert && value,
    }
}

pub(super) fn route_match(m: Option<&HttpMatch>) -> RouteMatch {
    let path = match m.and_then(|m| m.uri.as_ref()) {
        None | Some(StringMatch::Present) => PathSpecifier::Prefix("/".into()),
        Some(StringMatch::Exact(s)) => PathSpecifier::Path(s.clone()),
        Some(StringMatch::Prefix(s)) => PathSpecifier::Prefix(s.clone()),
        Some(StringMatch::SegmentPrefix(s)) => PathSpecifier::PathSeparatedPrefix(s.clone()),
        Some(StringMatch::Regex(s)) => PathSpecifier::SafeRegex(RegexMatcher {
            regex: s.clone(),
            ..Default::default()
        }),
    };
    let Some(m) = m else {
        return RouteMatch {
            path_specifier: Some(path),
            ..Default::default()
        };
    };
    // Conditions on a verified token's claims match `jwt_authn`'s dynamic metadata, as
    // Istio translates them (the conversion admits only well-formed claim names).
    let conditions = m
        .headers
        .iter()
        .map(|(n, sm)| (n, sm, false))
        .chain(m.without_headers.iter().map(|(n, sm)| (n, sm, true)));
    let mut headers = Vec::new();
    let mut dynamic_metadata = Vec::new();
    for (name, sm, invert) in conditions {
        match jwt_claim_path(name) {
            Some(path) => {
                let value = string_matcher(sm, false).unwrap_or_else(|| StringMatcher {
                    match_pattern: Some(MatchPattern::SafeRegex(RegexMatcher {
                        regex: ".+".into(),
                        ..Default::default()
                    })),
                    ignore_case: false,
                });
                let mut matcher = crate::translate::claims::claim(&path, value);
                matcher.invert = invert;
                dynamic_metadata.push(matcher);
            }
            None => headers.push(header_matcher(name, sm, invert)),
        }
    }
    let query_parameters = m
        .query_params
        .iter()
        .map(|(name, sm)| QueryParameterMatcher {
            name: name.clone(),
            query_parameter_match_specifier: Some(match string_matcher(sm, false) {
                Some(sm) => QueryParameterMatchSpecifier::StringMatch(sm),
                None => QueryParameterMatchSpecifier::PresentMatch(true),
            }),
        })
        .collect();
    RouteMatch {
        path_specifier: Some(path),
        // Envoy's default is case-sensitive; only `ignoreUriCase` turns it off.
        case_sensitive: m.ignore_uri_case.then_some(BoolValue { value: false }),
        headers,
        query_parameters,
        dynamic_metadata,
        ..Default::default()
    }
}
