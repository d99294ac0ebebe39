//! Rules of a VirtualService no request reaches, and matches no request takes, as
//! `istioctl analyze` reports them: IST0130 VirtualServiceUnreachableRule (a rule after one
//! that takes everything, or whose every match an earlier rule takes) and IST0131
//! VirtualServiceIneffectiveMatch (a match an earlier one takes whole).
//!
//! Istio compares matches for equality, and prefix matches with a few conditions by string
//! prefix (with quirks: a match without `method` is read as `GET`). meshflow asks one
//! question of each pair instead — does every request the later match takes also satisfy
//! the earlier one? — condition by condition ([`covers`]): an earlier match with fewer
//! conditions, a shorter URI prefix, a header that only has to be present, or fewer
//! gateways covers a later one. Where the answer is not certain (regexes that differ,
//! `withoutHeaders` that differ, subnets) it says nothing: a message is never wrong, though
//! it may miss an overlap.

use crate::model::*;

/// The messages of one VirtualService's `http`, `tcp` and `tls` rules.
pub fn shadowed_rules(vs: &VirtualService) -> Vec<ConfigError> {
    let mut out = Vec::new();
    let http: Vec<(usize, &[HttpMatch])> = vs
        .http
        .iter()
        .map(|r| (r.index, r.matches.as_slice()))
        .collect();
    scan(&vs.key, "http", &http, http_covers, &mut out);
    for (field, routes) in [("tcp", &vs.tcp), ("tls", &vs.tls)] {
        let rules: Vec<(usize, &[L4Match])> = routes
            .iter()
            .map(|r| (r.index, r.matches.as_slice()))
            .collect();
        scan(&vs.key, field, &rules, l4_covers, &mut out);
    }
    out
}

/// Walks `rules` (spec index, matches) in order, reporting what earlier rules shadow.
fn scan<M>(
    key: &ConfigKey,
    field: &str,
    rules: &[(usize, &[M])],
    covers: fn(&M, &M) -> bool,
    out: &mut Vec<ConfigError>,
) {
    let error = |code, message: String| ConfigError {
        object: key.clone(),
        code,
        message,
    };
    let mut catch_all: Option<usize> = None;
    let mut earlier: Vec<(usize, usize, &M)> = Vec::new();
    for (index, matches) in rules {
        let rule = format!("spec.{field}[{index}]");
        if let Some(c) = catch_all {
            out.push(error(
                ErrorCode::UnreachableRule,
                format!(
                    "{rule}: never reached: spec.{field}[{c}] before it has no match and \
                     takes everything"
                ),
            ));
            continue;
        }
        if matches.is_empty() {
            catch_all = Some(*index);
            continue;
        }
        let mut shadowed = 0;
        for (mi, m) in matches.iter().enumerate() {
            if let Some((er, em, _)) = earlier.iter().find(|(_, _, e)| covers(e, m)) {
                shadowed += 1;
                out.push(error(
                    ErrorCode::IneffectiveMatch,
                    format!(
                        "{rule}.match[{mi}]: never taken: spec.{field}[{er}].match[{em}] \
                         before it takes everything it matches"
                    ),
                ));
            }
            earlier.push((*index, mi, m));
        }
        if shadowed == matches.len() {
            out.push(error(
                ErrorCode::UnreachableRule,
                format!("{rule}: never reached: earlier rules take everything its matches do"),
            ));
        }
    }
}

/// Whether every value `b` matches is matched by `a` (same case handling).
fn value_covers(a: &StringMatch, b: &StringMatch) -> bool {
    match (a, b) {
        _ if a == b => true,
        (StringMatch::Present, _) => true,
        (StringMatch::Prefix(p), StringMatch::Exact(e) | StringMatch::Prefix(e)) => {
            e.starts_with(p.as_str())
        }
        _ => false,
    }
}

/// Whether `a` (as a set of labels to carry) is implied by `b`.
fn labels_covered(a: &Option<Labels>, b: &Option<Labels>) -> bool {
    match (a, b) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(a), Some(b)) => a.iter().all(|(k, v)| b.get(k) == Some(v)),
    }
}

/// Whether a match restricted to `a` gateways (empty: any) takes every request of `b`'s.
fn gateways_covered(a: &[String], b: &[String]) -> bool {
    a.is_empty() || (!b.is_empty() && b.iter().all(|g| a.contains(g)))
}

/// Whether every condition of `a` holds for each request `b` takes.
fn http_covers(a: &HttpMatch, b: &HttpMatch) -> bool {
    let uri = match (&a.uri, &b.uri) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(x), Some(y)) => {
            if a.ignore_uri_case {
                value_covers(&lower(x), &lower(y))
            } else {
                !b.ignore_uri_case && value_covers(x, y)
            }
        }
    };
    let conditions = |ac: &std::collections::BTreeMap<String, StringMatch>,
                      bc: &std::collections::BTreeMap<String, StringMatch>| {
        ac.iter()
            .all(|(k, am)| bc.get(k).is_some_and(|bm| value_covers(am, bm)))
    };
    uri && conditions(&a.headers, &b.headers)
        && conditions(&a.query_params, &b.query_params)
        && a.without_headers
            .iter()
            .all(|(k, am)| b.without_headers.get(k) == Some(am))
        && a.port.is_none_or(|p| b.port == Some(p))
        && gateways_covered(&a.gateways, &b.gateways)
        && (a.source_namespace.is_none() || a.source_namespace == b.source_namespace)
        && labels_covered(&a.source_labels, &b.source_labels)
}

/// `m` with its value lower-cased (for a URI match that ignores case).
fn lower(m: &StringMatch) -> StringMatch {
    match m {
        StringMatch::Exact(s) => StringMatch::Exact(s.to_lowercase()),
        StringMatch::Prefix(s) => StringMatch::Prefix(s.to_lowercase()),
        other => other.clone(),
    }
}

/// Whether every condition of `a` holds for each connection `b` takes: SNI names (`a`'s
/// include every one of `b`'s, or `a` names none), port, subnets (the same list, or none),
/// gateways, source namespace and labels.
fn l4_covers(a: &L4Match, b: &L4Match) -> bool {
    (a.sni_hosts.is_empty()
        || (!b.sni_hosts.is_empty() && b.sni_hosts.iter().all(|h| a.sni_hosts.contains(h))))
        && a.port.is_none_or(|p| b.port == Some(p))
        && (a.destination_subnets.is_empty() || a.destination_subnets == b.destination_subnets)
        && gateways_covered(&a.gateways, &b.gateways)
        && (a.source_namespace.is_none() || a.source_namespace == b.source_namespace)
        && labels_covered(&a.source_labels, &b.source_labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(m: StringMatch) -> HttpMatch {
        HttpMatch {
            uri: Some(m),
            ..Default::default()
        }
    }

    fn vs(rules: Vec<Vec<HttpMatch>>) -> VirtualService {
        VirtualService {
            key: ConfigKey::new(Kind::VirtualService, "default", "reviews"),
            hosts: vec!["reviews.default.svc.cluster.local".into()],
            gateways: Vec::new(),
            export_to: Vec::new(),
            http: rules
                .into_iter()
                .enumerate()
                .map(|(index, matches)| HttpRoute {
                    index,
                    matches,
                    ..Default::default()
                })
                .collect(),
            tcp: Vec::new(),
            tls: Vec::new(),
        }
    }

    fn messages(vs: &VirtualService) -> Vec<(ErrorCode, String)> {
        shadowed_rules(vs)
            .into_iter()
            .map(|e| {
                (
                    e.code,
                    e.message.split(':').next().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn a_rule_after_a_catch_all_is_unreachable() {
        let v = vs(vec![
            vec![uri(StringMatch::Prefix("/a".into()))],
            vec![],
            vec![uri(StringMatch::Exact("/b".into()))],
            vec![],
        ]);
        assert_eq!(
            messages(&v),
            vec![
                (ErrorCode::UnreachableRule, "spec.http[2]".to_string()),
                (ErrorCode::UnreachableRule, "spec.http[3]".to_string()),
            ]
        );
    }

    #[test]
    fn duplicate_and_covered_matches_are_ineffective() {
        let header = |k: &str, m: StringMatch| HttpMatch {
            uri: Some(StringMatch::Prefix("/api".into())),
            headers: [(k.to_string(), m)].into_iter().collect(),
            ..Default::default()
        };
        let v = vs(vec![
            vec![uri(StringMatch::Prefix("/api".into()))],
            // Taken by rule 0: a longer prefix, an exact path under it.
            vec![
                uri(StringMatch::Prefix("/api/v1".into())),
                uri(StringMatch::Exact("/api/x".into())),
            ],
            // Not all taken: `/other` is not under `/api`.
            vec![
                uri(StringMatch::Prefix("/api".into())),
                uri(StringMatch::Prefix("/other".into())),
            ],
            // A header condition added: still under rule 0.
            vec![header("x-team", StringMatch::Exact("blue".into()))],
        ]);
        assert_eq!(
            messages(&v),
            vec![
                (
                    ErrorCode::IneffectiveMatch,
                    "spec.http[1].match[0]".to_string()
                ),
                (
                    ErrorCode::IneffectiveMatch,
                    "spec.http[1].match[1]".to_string()
                ),
                (ErrorCode::UnreachableRule, "spec.http[1]".to_string()),
                (
                    ErrorCode::IneffectiveMatch,
                    "spec.http[2].match[0]".to_string()
                ),
                (
                    ErrorCode::IneffectiveMatch,
                    "spec.http[3].match[0]".to_string()
                ),
                (ErrorCode::UnreachableRule, "spec.http[3]".to_string()),
            ]
        );
    }

    /// What an earlier match does not take is never reported: a narrower earlier match, a
    /// header the later one lacks, another port, a regex, case that differs.
    #[test]
    fn overlaps_that_are_not_covers_say_nothing() {
        let with = |edit: fn(&mut HttpMatch)| {
            let mut m = uri(StringMatch::Prefix("/a".into()));
            edit(&mut m);
            m
        };
        let v = vs(vec![
            vec![uri(StringMatch::Prefix("/a/b".into()))],
            vec![uri(StringMatch::Prefix("/a".into()))],
            vec![with(|m| {
                m.headers.insert("x".into(), StringMatch::Exact("1".into()));
            })],
        ]);
        // Rule 2 adds a header to rule 1's match: rule 1 takes it.
        assert_eq!(
            messages(&v),
            vec![
                (
                    ErrorCode::IneffectiveMatch,
                    "spec.http[2].match[0]".to_string()
                ),
                (ErrorCode::UnreachableRule, "spec.http[2]".to_string()),
            ]
        );
        let v = vs(vec![
            vec![with(|m| m.port = Some(8080))],
            vec![uri(StringMatch::Prefix("/a".into()))],
            vec![uri(StringMatch::Regex("/a.*".into()))],
            vec![with(|m| m.ignore_uri_case = true)],
            vec![with(|m| {
                m.headers
                    .insert("x".into(), StringMatch::Regex("1+".into()));
            })],
        ]);
        // Only rule 4 (rule 1 takes it: a header added) is taken; rule 3 ignores case,
        // which rule 1 does not.
        assert_eq!(
            messages(&v),
            vec![
                (
                    ErrorCode::IneffectiveMatch,
                    "spec.http[4].match[0]".to_string()
                ),
                (ErrorCode::UnreachableRule, "spec.http[4]".to_string()),
            ]
        );
        assert!(messages(&vs(vec![
            vec![with(|m| {
                m.headers.insert("x".into(), StringMatch::Exact("1".into()));
            })],
            vec![uri(StringMatch::Prefix("/a".into()))],
        ]))
        .is_empty());
    }

    #[test]
    fn tcp_and_tls_rules_too() {
        let mut v = vs(vec![]);
        let sni = |hosts: &[&str]| L4Match {
            sni_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ..Default::default()
        };
        v.tls = vec![
            L4Route {
                index: 0,
                matches: vec![sni(&["a.example", "b.example"])],
                route: Vec::new(),
            },
            L4Route {
                index: 1,
                matches: vec![sni(&["b.example"]), sni(&["c.example"])],
                route: Vec::new(),
            },
        ];
        v.tcp = vec![
            L4Route {
                index: 0,
                matches: Vec::new(),
                route: Vec::new(),
            },
            L4Route {
                index: 1,
                matches: vec![L4Match {
                    port: Some(27017),
                    ..Default::default()
                }],
                route: Vec::new(),
            },
        ];
        assert_eq!(
            messages(&v),
            vec![
                (ErrorCode::UnreachableRule, "spec.tcp[1]".to_string()),
                (
                    ErrorCode::IneffectiveMatch,
                    "spec.tls[1].match[0]".to_string()
                ),
            ]
        );
    }
}
