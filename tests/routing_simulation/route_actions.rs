//! What the matched route does to a request: faults, rewrites, header edits and mirrors.

use crate::assert_routes_to;
use crate::fixtures::{pod, sidecar_setup, via_sidecar, JASON};
use dataflows::simulate::{
    Cors, Fault, FaultAbort, HeaderEdit, HeaderLevel, HeaderOp, HostRewrite, Mirror, ALL,
};

/// Faults as Istio's fault-injection task writes them, on the client sidecar: jason's
/// requests delayed 7 s (every one), everyone else's aborted with 500 — which Envoy answers
/// itself, so those requests reach no cluster; at 50 % the abort is reported with its share
/// and the request may still go through.
#[test]
fn faults_delay_or_abort_the_requests_of_their_route() {
    let (mut mesh, reviews, proxy) = sidecar_setup("faults", &["v1", "v2"]);
    let vs = |abort_percent: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: reviews, namespace: default}}
spec:
  hosts: [reviews]
  http:
  - match: [{{headers: {{end-user: {{exact: jason}}}}}}]
    fault:
      delay: {{percentage: {{value: 100.0}}, fixedDelay: 7s}}
    route: [{{destination: {{host: reviews, subset: v2}}}}]
  - fault:
      abort: {{percentage: {{value: {abort_percent}}}, httpStatus: 500}}
    route: [{{destination: {{host: reviews, subset: v1}}}}]
"
        )
    };
    reviews.write("reviews-virtualservice.yaml", &vs("100.0"));
    let jason = via_sidecar("reviews", "/").header(JASON.0, JASON.1);
    let o = mesh.send(&proxy, &jason);
    assert_eq!(o.fault_delay(), Some(std::time::Duration::from_secs(7)));
    assert_eq!(
        o.fault(),
        Some(&Fault {
            delay: Some((std::time::Duration::from_secs(7), ALL)),
            abort: None
        })
    );
    assert_eq!(o.effective_status(), None, "delayed, then forwarded");
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);

    let o = mesh.send(&proxy, &via_sidecar("reviews", "/"));
    assert_eq!(o.fault_status(), Some(500), "{o:#?}");
    assert_eq!(o.effective_status(), Some(500));
    assert_eq!(o.fault_delay(), None);
    assert_eq!(
        o.cluster(),
        Some(reviews.cluster("v1").as_str()),
        "routed, never sent"
    );

    reviews.write("reviews-virtualservice.yaml", &vs("50.0"));
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/"));
    assert_eq!(
        o.fault().and_then(|f| f.abort.clone()),
        Some((FaultAbort::Http(500), ALL / 2))
    );
    assert_eq!(o.fault_status(), None, "only half of them");
    assert_eq!(o.effective_status(), None);
    mesh.assert_no_errors();
}

/// `rewrite` (a matched prefix and the authority; a path by regex), `headers` (request
/// `set`/`add`/`remove`, response `set`/`remove`, and a destination's own), a mirror of a
/// share of the requests and a `corsPolicy`, as the client sidecar forwards a request.
#[test]
fn rewrites_header_edits_and_mirrors_shape_the_forwarded_request() {
    let (mut mesh, reviews, proxy) = sidecar_setup("rewrites", &["v1", "v2"]);
    reviews.write(
        "reviews-virtualservice.yaml",
        r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: default}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /old}}]
    rewrite: {uri: /new, authority: reviews-v2.internal}
    headers:
      request:
        set: {x-set: one}
        add: {x-add: two}
        remove: [x-remove]
      response:
        set: {x-served-by: reviews}
        remove: [server]
    mirror: {host: reviews, subset: v1}
    mirrorPercentage: {value: 25.0}
    route: [{destination: {host: reviews, subset: v2}}]
  - match: [{uri: {regex: "/v[0-9]+/.*"}}]
    rewrite:
      uriRegexRewrite: {match: "^/v([0-9]+)/", rewrite: "/version-\\1/"}
    corsPolicy:
      allowOrigins: [{exact: "https://example.com"}, {prefix: "https://app."}]
      allowMethods: [GET, POST]
      allowHeaders: [x-custom]
      maxAge: 24h
      allowCredentials: true
    route: [{destination: {host: reviews, subset: v1}}]
  - route:
    - destination: {host: reviews, subset: v1}
      headers: {request: {set: {x-destination: v1}}}
"#,
    );
    let o = mesh.send(
        &proxy,
        &via_sidecar("reviews", "/old/page?q=1")
            .header("x-remove", "gone")
            .header("x-add", "first")
            .header("x-set", "replaced"),
    );
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let fx = o.http.as_ref().expect("a route matched");
    assert_eq!(fx.prefix_rewrite.as_deref(), Some("/new"));
    assert_eq!(
        fx.host_rewrite,
        Some(HostRewrite::Literal("reviews-v2.internal".into()))
    );
    assert_eq!(fx.upstream_path, "/new/page?q=1");
    assert_eq!(fx.upstream_authority, "reviews-v2.internal");
    let mut forwarded = fx.upstream_headers.clone();
    forwarded.sort();
    assert_eq!(
        forwarded,
        [
            ("x-add".to_string(), "first".to_string()),
            ("x-add".into(), "two".into()),
            ("x-set".into(), "one".into()),
        ]
    );
    let ops = |edits: &[HeaderEdit]| -> Vec<(HeaderOp, String, String)> {
        edits
            .iter()
            .map(|e| (e.op, e.name.clone(), e.value.clone()))
            .collect()
    };
    assert_eq!(
        ops(&fx.response_headers),
        [
            (HeaderOp::Remove, "server".into(), String::new()),
            (HeaderOp::Set, "x-served-by".into(), "reviews".into()),
        ]
    );
    assert!(fx
        .request_headers
        .iter()
        .chain(&fx.response_headers)
        .all(|e| e.level == HeaderLevel::Route));
    assert_eq!(
        fx.mirrors,
        [Mirror {
            cluster: reviews.cluster("v1"),
            per_million: ALL / 4,
            cluster_found: true,
        }]
    );
    assert_eq!(fx.fault, None);

    let o = mesh.send(&proxy, &via_sidecar("reviews", "/v2/reviews/1"));
    let fx = o.http.as_ref().expect("a route matched");
    assert_eq!(
        fx.regex_rewrite,
        Some(("^/v([0-9]+)/".into(), "/version-\\1/".into()))
    );
    assert_eq!(fx.upstream_path, "/version-2/reviews/1");
    assert_eq!(fx.upstream_authority, "reviews", "no authority rewrite");
    assert!(fx.mirrors.is_empty());
    assert_eq!(
        fx.cors,
        Some(Cors {
            allow_origins: vec![
                "exact:https://example.com".into(),
                "prefix:https://app.".into()
            ],
            allow_methods: "GET,POST".into(),
            allow_headers: "x-custom".into(),
            expose_headers: String::new(),
            max_age: "86400".into(),
            allow_credentials: Some(true),
            enabled_per_million: ALL,
        })
    );

    let o = mesh.send(&proxy, &via_sidecar("reviews", "/other"));
    let fx = o.http.as_ref().expect("a route matched");
    assert_eq!(
        fx.upstream_headers,
        [("x-destination".to_string(), "v1".to_string())],
        "a lone destination's headers go on the route"
    );
    assert_eq!(fx.upstream_path, "/other");
    assert_eq!(fx.cors, None, "CORS is per route");
    mesh.assert_no_errors();
}
