//! Virtual host, route, header and query matching as Envoy does it, and the authority and
//! path handling around it.

use crate::simulate::listener::in_cidr;
use crate::simulate::request::{header_matches, normalize_path, query_matches, Request};
use crate::simulate::route::{port_of, strip_port};
use crate::simulate::{select_virtual_host, Call};
use envoy_types::pb::envoy::config::route::v3::{
    header_matcher::HeaderMatchSpecifier, query_parameter_matcher::QueryParameterMatchSpecifier,
    HeaderMatcher, QueryParameterMatcher, Route, RouteConfiguration, VirtualHost,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{string_matcher::MatchPattern, StringMatcher};
use std::collections::BTreeMap;

fn rc(hosts: &[(&str, &[&str])]) -> RouteConfiguration {
    RouteConfiguration {
        virtual_hosts: hosts
            .iter()
            .map(|(name, domains)| VirtualHost {
                name: name.to_string(),
                domains: domains.iter().map(|d| d.to_string()).collect(),
                routes: vec![Route::default()],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn vh(rc: &RouteConfiguration, host: &str) -> Option<String> {
    select_virtual_host(rc, host).map(|v| v.name.clone())
}

/// Envoy's domain search order: exact, longest suffix wildcard, longest prefix wildcard,
/// `*`; wildcards match at least one character; the port is part of the host.
#[test]
fn virtual_host_domains_follow_envoys_search_order() {
    let rc = rc(&[
        ("any", &["*"]),
        ("prefix-short", &["foo.*"]),
        ("prefix-long", &["foo.bar.*"]),
        ("suffix-short", &["*.com"]),
        ("suffix-long", &["*.example.com"]),
        ("exact", &["www.example.com", "reviews:9080"]),
        ("ported", &["api.example.com:*"]),
    ]);
    assert_eq!(vh(&rc, "www.example.com").as_deref(), Some("exact"));
    assert_eq!(vh(&rc, "WWW.Example.COM").as_deref(), Some("exact"));
    assert_eq!(vh(&rc, "a.example.com").as_deref(), Some("suffix-long"));
    assert_eq!(vh(&rc, "a.other.com").as_deref(), Some("suffix-short"));
    // A suffix wildcard beats a prefix wildcard, even a longer one.
    assert_eq!(vh(&rc, "foo.bar.com").as_deref(), Some("suffix-short"));
    assert_eq!(vh(&rc, "foo.bar.org").as_deref(), Some("prefix-long"));
    assert_eq!(vh(&rc, "foo.x").as_deref(), Some("prefix-short"));
    // The wildcard never matches the empty string.
    assert_eq!(vh(&rc, ".example.com").as_deref(), Some("suffix-short"));
    assert_eq!(vh(&rc, "foo.").as_deref(), Some("any"));
    // The port is compared as part of the host.
    assert_eq!(vh(&rc, "reviews:9080").as_deref(), Some("exact"));
    assert_eq!(vh(&rc, "reviews").as_deref(), Some("any"));
    assert_eq!(vh(&rc, "api.example.com:8443").as_deref(), Some("ported"));
    assert_eq!(vh(&rc, "api.example.com").as_deref(), Some("suffix-long"));
    let no_default = self::rc(&[("exact", &["a"])]);
    assert_eq!(vh(&no_default, "b"), None);
}

fn request(headers: &[(&str, &str)]) -> (Call, BTreeMap<String, String>) {
    let call = Call::get("h", 80, "/p?a=1&flag&b=two");
    let map = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (call, map)
}

fn hm(name: &str, spec: Option<HeaderMatchSpecifier>, invert: bool) -> HeaderMatcher {
    HeaderMatcher {
        name: name.into(),
        header_match_specifier: spec,
        invert_match: invert,
        ..Default::default()
    }
}

fn exact(s: &str) -> Option<HeaderMatchSpecifier> {
    Some(HeaderMatchSpecifier::StringMatch(StringMatcher {
        match_pattern: Some(MatchPattern::Exact(s.into())),
        ..Default::default()
    }))
}

/// `HeaderUtility::matchHeaders`: a missing header fails every matcher but
/// `present_match: false`; `invert_match` flips the result, missing headers included.
#[test]
fn header_matchers_follow_envoys_semantics() {
    let (call, headers) = request(&[("end-user", "jason"), ("n", "42")]);
    let req = Request {
        call: &call,
        path: call.path.clone(),
        headers,
    };
    let w = &mut Vec::new();
    let check = |m: HeaderMatcher, w: &mut Vec<String>| header_matches(&m, &req, w);
    assert!(check(hm("End-User", exact("jason"), false), w));
    assert!(!check(hm("end-user", exact("Jason"), false), w));
    assert!(check(hm("end-user", exact("bob"), true), w));
    assert!(!check(hm("missing", exact("x"), false), w));
    // Inverted, a missing header still fails a value matcher.
    assert!(!check(hm("missing", exact("x"), true), w));
    assert!(check(
        hm(
            "missing",
            Some(HeaderMatchSpecifier::PresentMatch(false)),
            false
        ),
        w
    ));
    assert!(check(
        hm(
            "missing",
            Some(HeaderMatchSpecifier::PresentMatch(true)),
            true
        ),
        w
    ));
    assert!(!check(hm("missing", None, false), w));
    assert!(check(hm("end-user", None, false), w));
    let range = envoy_types::pb::envoy::r#type::v3::Int64Range { start: 40, end: 43 };
    assert!(check(
        hm("n", Some(HeaderMatchSpecifier::RangeMatch(range)), false),
        w
    ));
    let re = |r: &str| {
        Some(HeaderMatchSpecifier::StringMatch(StringMatcher {
            match_pattern: Some(MatchPattern::SafeRegex(
                envoy_types::pb::envoy::r#type::matcher::v3::RegexMatcher {
                    regex: r.into(),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }))
    };
    assert!(check(hm("end-user", re("ja.*"), false), w));
    assert!(
        !check(hm("end-user", re("ja"), false), w),
        "full match only"
    );
    assert!(w.is_empty());
    assert!(!check(hm("end-user", re("(unclosed"), false), w));
    assert_eq!(w.len(), 1, "an invalid regex is reported: {w:?}");

    let q = |name: &str, spec| QueryParameterMatcher {
        name: name.into(),
        query_parameter_match_specifier: spec,
    };
    let query = req.query();
    let string = |s: &str| {
        Some(QueryParameterMatchSpecifier::StringMatch(StringMatcher {
            match_pattern: Some(MatchPattern::Exact(s.into())),
            ..Default::default()
        }))
    };
    assert!(query_matches(&q("b", string("two")), &query, w));
    assert!(!query_matches(&q("a", string("2")), &query, w));
    assert!(query_matches(
        &q(
            "flag",
            Some(QueryParameterMatchSpecifier::PresentMatch(true))
        ),
        &query,
        w
    ));
    assert!(!query_matches(
        &q("c", Some(QueryParameterMatchSpecifier::PresentMatch(true))),
        &query,
        w
    ));
}

#[test]
fn paths_are_normalized_like_envoy() {
    assert_eq!(normalize_path("/a/./b/../c?x=/../"), "/a/c?x=/../");
    assert_eq!(normalize_path("/../../a"), "/a");
    assert_eq!(normalize_path("/a/b/.."), "/a/");
    assert_eq!(normalize_path("/"), "/");
}

#[test]
fn authority_ports_are_recognized() {
    assert_eq!(port_of("a:80"), Some("80"));
    assert_eq!(port_of("a"), None);
    assert_eq!(port_of("[::1]:80"), Some("80"));
    assert_eq!(port_of("::1"), None);
    assert_eq!(strip_port("a.b:9080"), "a.b");
    assert_eq!(in_cidr("10.1.2.3", "10.1.0.0", 16), Some(16));
    assert_eq!(in_cidr("10.2.2.3", "10.1.0.0", 16), None);
    assert_eq!(in_cidr("10.2.2.3", "0.0.0.0", 0), Some(0));
}
