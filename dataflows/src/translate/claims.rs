//! Matching the claims of a request's verified token, where Envoy's `jwt_authn` leaves its
//! payload (dynamic metadata under [`PAYLOAD_KEY`]): shared by the RBAC filters
//! (AuthorizationPolicy `request.auth.claims`) and route matches (VirtualService
//! `@request.auth.claims` conditions).

use envoy_types::pb::envoy::r#type::matcher::v3::{
    list_matcher, metadata_matcher, value_matcher, ListMatcher, MetadataMatcher, OrMatcher,
    StringMatcher, ValueMatcher,
};

pub const JWT_AUTHN: &str = "envoy.filters.http.jwt_authn";

/// The key of the verified payload in the filter's dynamic metadata (Istio's).
pub const PAYLOAD_KEY: &str = "payload";

/// A claim of the request's verified token (`path`: nested claims) matching `m`, whether
/// it is a string or a list (one of whose strings matches), as `jwt_authn` left it in its
/// dynamic metadata.
pub fn claim(path: &[String], m: StringMatcher) -> MetadataMatcher {
    use value_matcher::MatchPattern as V;
    let string = ValueMatcher {
        match_pattern: Some(V::StringMatch(m)),
    };
    let list = ValueMatcher {
        match_pattern: Some(V::ListMatch(Box::new(ListMatcher {
            match_pattern: Some(list_matcher::MatchPattern::OneOf(Box::new(string.clone()))),
        }))),
    };
    MetadataMatcher {
        filter: JWT_AUTHN.into(),
        path: std::iter::once(PAYLOAD_KEY.to_string())
            .chain(path.iter().cloned())
            .map(|k| metadata_matcher::PathSegment {
                segment: Some(metadata_matcher::path_segment::Segment::Key(k)),
            })
            .collect(),
        value: Some(ValueMatcher {
            match_pattern: Some(V::OrMatch(OrMatcher {
                value_matchers: vec![list, string],
            })),
        }),
        ..Default::default()
    }
}

/// A string claim of the verified token matching `m` (`iss`, `sub`).
pub fn claim_string(key: &str, m: StringMatcher) -> MetadataMatcher {
    MetadataMatcher {
        filter: JWT_AUTHN.into(),
        path: [PAYLOAD_KEY, key]
            .into_iter()
            .map(|k| metadata_matcher::PathSegment {
                segment: Some(metadata_matcher::path_segment::Segment::Key(k.into())),
            })
            .collect(),
        value: Some(ValueMatcher {
            match_pattern: Some(value_matcher::MatchPattern::StringMatch(m)),
        }),
        ..Default::default()
    }
}
