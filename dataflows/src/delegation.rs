//! VirtualService delegation, as Istio defines it: a route of a root VirtualService with
//! `delegate` is replaced by the routes of the delegate (a VirtualService without hosts,
//! exported to the root's namespace), each under the root route's matches merged with its
//! own. A delegate's match must lie within the root's: where the two contradict (another
//! path prefix, another value of one header), that combination matches nothing and is left
//! out, so delegation never routes more traffic than the root allows. What the root route
//! sets beside `delegate` (timeout, retries, rewrite, fault, mirrors, CORS, header edits)
//! holds for the delegate's routes that leave it unset, as in Istio. One level only.
//! Both engines expand through here.

use crate::model::{ConfigKey, HttpMatch, HttpRoute, StringMatch, VirtualService};
use std::collections::BTreeMap;

/// `root` with each delegating route replaced by its delegate's routes; a route whose
/// delegate is missing, has hosts, or is not exported to the root's namespace is dropped
/// (requests fall through to the next route).
pub fn expand(
    root: &VirtualService,
    delegates: &BTreeMap<ConfigKey, VirtualService>,
) -> VirtualService {
    let mut out = root.clone();
    out.http = Vec::new();
    for r in &root.http {
        let Some(key) = &r.delegate else {
            out.http.push(r.clone());
            continue;
        };
        let Some(d) = delegates
            .get(key)
            .filter(|d| usable(d, &root.key.namespace))
        else {
            continue;
        };
        for dr in d.http.iter().filter(|dr| dr.delegate.is_none()) {
            if let Some(merged) = under(r, dr) {
                out.http.push(merged);
            }
        }
    }
    out
}

/// A delegate takes effect for a root in `root_ns` only if it has no hosts and is exported
/// there.
fn usable(d: &VirtualService, root_ns: &str) -> bool {
    d.hosts.is_empty()
        && (d.export_to.is_empty()
            || d.export_to
                .iter()
                .any(|e| e == "*" || e == root_ns || (e == "." && d.key.namespace == root_ns)))
}

/// The delegate's route `dr` under the root route `r`: every pair of their matches merged
/// (no match on one side: the other's alone); `None` if every pair contradicts.
fn under(r: &HttpRoute, dr: &HttpRoute) -> Option<HttpRoute> {
    let roots: Vec<Option<&HttpMatch>> = if r.matches.is_empty() {
        vec![None]
    } else {
        r.matches.iter().map(Some).collect()
    };
    let dels: Vec<Option<&HttpMatch>> = if dr.matches.is_empty() {
        vec![None]
    } else {
        dr.matches.iter().map(Some).collect()
    };
    let mut matches = Vec::new();
    let mut any = false;
    for rm in &roots {
        for dm in &dels {
            match (rm, dm) {
                (None, None) => any = true,
                (Some(m), None) | (None, Some(m)) => {
                    any = true;
                    matches.push((*m).clone());
                }
                (Some(a), Some(b)) => {
                    if let Some(m) = merge(a, b) {
                        any = true;
                        matches.push(m);
                    }
                }
            }
        }
    }
    if !any {
        return None;
    }
    // A pair without conditions matches everything: the route needs no match at all.
    if roots.iter().any(Option::is_none) && dels.iter().any(Option::is_none) {
        matches.clear();
    }
    let mut out = dr.clone();
    out.matches = matches;
    inherit(&mut out, r);
    Some(out)
}

/// What the root route says beside `delegate` holds for each of its delegate's routes that
/// does not say it itself, as Istio's `mergeHTTPRoute` does: the name (joined as
/// `root-delegate` when both have one), rewrite, timeout, retries, fault, mirrors, CORS
/// policy and header edits.
fn inherit(out: &mut HttpRoute, root: &HttpRoute) {
    out.name = match (&root.name, &out.name) {
        (Some(r), Some(d)) => Some(format!("{r}-{d}")),
        (r, d) => d.clone().or_else(|| r.clone()),
    };
    if out.rewrite.is_none() {
        out.rewrite = root.rewrite.clone();
    }
    if out.timeout_ms.is_none() {
        out.timeout_ms = root.timeout_ms;
    }
    if out.retries.is_none() {
        out.retries = root.retries.clone();
    }
    if out.fault.is_none() {
        out.fault = root.fault.clone();
    }
    if out.mirrors.is_empty() {
        out.mirrors = root.mirrors.clone();
    }
    if out.cors.is_none() {
        out.cors = root.cors.clone();
    }
    if out.headers.request.is_empty() && out.headers.response.is_empty() {
        out.headers = root.headers.clone();
    }
}

/// Both matches at once, or `None` where they contradict. The gateways a route applies
/// through are the root's: a delegate cannot widen them.
fn merge(root: &HttpMatch, del: &HttpMatch) -> Option<HttpMatch> {
    let (uri, ignore_uri_case) = match (&root.uri, &del.uri) {
        (None, None) => (None, root.ignore_uri_case),
        (Some(u), None) => (Some(u.clone()), root.ignore_uri_case),
        (None, Some(u)) => (Some(u.clone()), del.ignore_uri_case),
        (Some(a), Some(b)) => (Some(uri_within(a, b)?), del.ignore_uri_case),
    };
    Some(HttpMatch {
        uri,
        ignore_uri_case,
        headers: union(&root.headers, &del.headers)?,
        without_headers: union(&root.without_headers, &del.without_headers)?,
        query_params: union(&root.query_params, &del.query_params)?,
        port: same(root.port, del.port)?,
        gateways: root.gateways.clone(),
        source_namespace: same(root.source_namespace.clone(), del.source_namespace.clone())?,
        // Two different selectors are taken as contradicting (the route is left out) rather
        // than merged: a scope knows only the selectors written, and this never widens.
        source_labels: same(root.source_labels.clone(), del.source_labels.clone())?,
    })
}

/// The delegate's URI match if it only matches paths the root's matches.
fn uri_within(root: &StringMatch, del: &StringMatch) -> Option<StringMatch> {
    let inside = match (root, del) {
        (StringMatch::Prefix(p), StringMatch::Prefix(q) | StringMatch::Exact(q)) => {
            q.starts_with(p.as_str())
        }
        (StringMatch::Exact(e), StringMatch::Exact(f)) => e == f,
        (a, b) => a == b,
    };
    inside.then(|| del.clone())
}

fn union(
    a: &BTreeMap<String, StringMatch>,
    b: &BTreeMap<String, StringMatch>,
) -> Option<BTreeMap<String, StringMatch>> {
    let mut out = a.clone();
    for (k, v) in b {
        match out.get(k) {
            Some(w) if w != v => return None,
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Some(out)
}

/// One value where both set one: the same, or a contradiction (`None`).
fn same<T: PartialEq>(a: Option<T>, b: Option<T>) -> Option<Option<T>> {
    match (a, b) {
        (Some(a), Some(b)) if a != b => None,
        (Some(a), _) => Some(Some(a)),
        (None, b) => Some(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;

    fn prefix(p: &str) -> HttpMatch {
        HttpMatch {
            uri: Some(StringMatch::Prefix(p.into())),
            ..Default::default()
        }
    }

    fn vs(ns: &str, name: &str, hosts: &[&str], http: Vec<HttpRoute>) -> VirtualService {
        VirtualService {
            key: ConfigKey::new(Kind::VirtualService, ns, name),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            gateways: vec![],
            export_to: vec![],
            http,
            tcp: vec![],
            tls: vec![],
        }
    }

    #[test]
    fn delegate_routes_take_the_roots_place_within_its_matches() {
        let d_key = ConfigKey::new(Kind::VirtualService, "team", "reviews-routes");
        let root = vs(
            "default",
            "root",
            &["reviews.default.svc.cluster.local"],
            vec![
                HttpRoute {
                    matches: vec![prefix("/reviews")],
                    delegate: Some(d_key.clone()),
                    ..Default::default()
                },
                HttpRoute {
                    name: Some("rest".into()),
                    ..Default::default()
                },
            ],
        );
        let mut with_header = prefix("/reviews/v2");
        with_header
            .headers
            .insert("end-user".into(), StringMatch::Exact("jason".into()));
        let delegate = vs(
            "team",
            "reviews-routes",
            &[],
            vec![
                HttpRoute {
                    name: Some("v2".into()),
                    matches: vec![with_header.clone()],
                    ..Default::default()
                },
                // Outside the root's prefix: matches nothing under it.
                HttpRoute {
                    name: Some("elsewhere".into()),
                    matches: vec![prefix("/ratings")],
                    ..Default::default()
                },
                HttpRoute {
                    name: Some("all".into()),
                    ..Default::default()
                },
            ],
        );
        let delegates = BTreeMap::from([(d_key.clone(), delegate.clone())]);
        let out = expand(&root, &delegates);
        let names: Vec<_> = out.http.iter().map(|r| r.name.clone().unwrap()).collect();
        assert_eq!(names, ["v2", "all", "rest"]);
        assert_eq!(out.http[0].matches, vec![with_header]);
        assert_eq!(
            out.http[1].matches,
            vec![prefix("/reviews")],
            "the root's match"
        );
        assert!(out.http.iter().all(|r| r.delegate.is_none()));

        // Not exported to the root's namespace, or missing: the route is dropped.
        let mut private = delegate;
        private.export_to = vec![".".into()];
        let out = expand(&root, &BTreeMap::from([(d_key, private)]));
        assert_eq!(out.http.len(), 1);
        assert_eq!(expand(&root, &BTreeMap::new()).http.len(), 1);
    }

    /// The root route's settings beside `delegate` hold for each delegate route that leaves
    /// them unset (Istio's `mergeHTTPRoute`); a delegate route's own settings win.
    #[test]
    fn the_roots_settings_fill_what_the_delegate_leaves_unset() {
        let d_key = ConfigKey::new(Kind::VirtualService, "team", "reviews-routes");
        let mut root_headers = crate::model::HeaderOps::default();
        root_headers
            .request
            .set
            .insert("x-root".into(), "yes".into());
        let root = vs(
            "default",
            "root",
            &["reviews.default.svc.cluster.local"],
            vec![HttpRoute {
                name: Some("reviews".into()),
                matches: vec![prefix("/reviews")],
                delegate: Some(d_key.clone()),
                timeout_ms: Some(2_000),
                retries: Some(crate::model::Retries {
                    attempts: 5,
                    per_try_timeout_ms: None,
                    retry_on: None,
                    remote_localities: false,
                    ignore_previous_hosts: None,
                    backoff_ms: None,
                }),
                headers: root_headers.clone(),
                ..Default::default()
            }],
        );
        let delegate = vs(
            "team",
            "reviews-routes",
            &[],
            vec![
                HttpRoute {
                    name: Some("v2".into()),
                    matches: vec![prefix("/reviews/v2")],
                    timeout_ms: Some(100),
                    ..Default::default()
                },
                HttpRoute::default(),
            ],
        );
        let out = expand(&root, &BTreeMap::from([(d_key, delegate)]));
        let [v2, rest] = out.http.as_slice() else {
            panic!("{:?}", out.http)
        };
        assert_eq!(v2.name.as_deref(), Some("reviews-v2"));
        assert_eq!(rest.name.as_deref(), Some("reviews"));
        assert_eq!(v2.timeout_ms, Some(100), "the delegate's own timeout");
        assert_eq!(rest.timeout_ms, Some(2_000), "the root's");
        for r in [v2, rest] {
            assert_eq!(r.retries.as_ref().map(|r| r.attempts), Some(5));
            assert_eq!(r.headers, root_headers);
        }
    }

    #[test]
    fn contradicting_matches_merge_to_nothing() {
        let mut a = prefix("/a");
        a.headers.insert("x".into(), StringMatch::Exact("1".into()));
        let mut b = prefix("/a/b");
        b.headers.insert("x".into(), StringMatch::Exact("2".into()));
        assert_eq!(merge(&a, &b), None, "two values of one header");
        assert_eq!(merge(&prefix("/a"), &prefix("/b")), None);
        let mut p = prefix("/a/b");
        p.port = Some(80);
        let mut q = prefix("/a");
        q.port = Some(81);
        assert_eq!(merge(&q, &p), None, "two ports");
        q.port = None;
        assert_eq!(merge(&q, &p), Some(p));
    }
}
