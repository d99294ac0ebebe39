//! What an HTTP route does besides choosing destinations (redirects, direct responses,
//! rewrites, header edits, mirrors, faults, retries, CORS): what is read and what is refused.

use super::*;

#[test]
fn untranslated_route_fields_are_warnings_naming_each_field() {
    let doc = format!(
        "{VS}  http:\n  - fault: {{abort: {{httpStatus: 500, percentage: {{value: 100}}}}}}\n    mirror: {{host: shadow}}\n    headers: {{request: {{set: {{x-a: b}}}}}}\n    corsPolicy: {{allowOrigins: [{{exact: a}}]}}\n    rewrite: {{uri: /}}\n    retries: {{attempts: 2, retryRemoteLocalities: true}}\n    route:\n    - destination: {{host: reviews}}\n      headers: {{response: {{remove: [x]}}}}\n  - redirect: {{uri: /moved, derivePort: FROM_REQUEST_PORT}}\n    fault: {{abort: {{http2Error: CANCEL}}}}\n"
    );
    let p = parse(&doc);
    let route = &vs(&p).http[0];
    assert_eq!(vs(&p).http.len(), 2, "the routes are generated");
    assert_eq!(
        fields(&p, Level::Warning),
        vec!["spec.http[1].fault.abort.http2Error"]
    );
    assert!(vs(&p).http[1]
        .redirect
        .as_ref()
        .is_some_and(|r| r.from_request_port));
    assert!(route.retries.as_ref().is_some_and(|r| r.remote_localities));
    assert_eq!(
        route.route[0].headers.response.remove,
        vec!["x".to_string()]
    );
    assert!(route.cors.is_some());
    assert!(fields(&p, Level::Error).is_empty());
    assert!(p.findings[0]
        .message
        .contains("not supported by meshflow yet"));
    // What is translated is in the record.
    assert_eq!(
        route.fault.as_ref().and_then(|f| f.abort),
        Some((dataflows::model::AbortStatus::Http(500), 1_000_000))
    );
    assert_eq!(route.mirrors.len(), 1);
    assert_eq!(route.mirrors[0].fraction, None, "all requests");
    assert_eq!(
        route.headers.request.set.get("x-a").map(String::as_str),
        Some("b")
    );
    assert_eq!(
        route.rewrite.as_ref().and_then(|r| r.uri.as_deref()),
        Some("/")
    );
}

#[test]
fn redirects_and_direct_responses_are_routes_of_their_own() {
    let doc = format!(
        "{VS}  http:\n  - match: [{{uri: {{exact: /old}}}}]\n    redirect: {{uri: /new, redirectCode: 302}}\n  - match: [{{uri: {{exact: /health}}}}]\n    directResponse: {{status: 503, body: {{string: down}}}}\n  - route:\n    - destination: {{host: reviews}}\n"
    );
    let p = parse(&doc);
    let http = &vs(&p).http;
    assert_eq!(http.len(), 3);
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let r = http[0].redirect.as_ref().expect("a redirect");
    assert_eq!((r.uri.as_deref(), r.code), (Some("/new"), 302));
    let d = http[1].direct_response.as_ref().expect("a direct response");
    assert_eq!((d.status, d.body.as_deref()), (503, Some("down")));

    // Istio's validation: one action per route, a known redirect code, a delay's duration,
    // percentages in 0..100.
    for (bad, field) in [
        (
            "  - redirect: {uri: /a}\n    route: [{destination: {host: reviews}}]\n",
            "spec.http[0].redirect",
        ),
        (
            "  - redirect: {uri: /a, redirectCode: 200}\n",
            "spec.http[0].redirect.redirectCode",
        ),
        ("  - match: [{uri: {exact: /a}}]\n", "spec.http[0].route"),
        (
            "  - fault: {delay: {percentage: {value: 5}}}\n    route: [{destination: {host: reviews}}]\n",
            "spec.http[0].fault.delay.fixedDelay",
        ),
        (
            "  - mirrorPercentage: {value: 101}\n    mirror: {host: a}\n    route: [{destination: {host: reviews}}]\n",
            "spec.http[0].mirrorPercentage.value",
        ),
    ] {
        let e = parse_document(&format!("{VS}  http:\n{bad}"), &MeshConfig::default())
            .expect_err(bad);
        assert_eq!(e.field, field, "{bad}: {e:?}");
    }
}

#[test]
fn a_grpc_abort_is_read_by_status_name_and_a_bad_name_is_refused() {
    let p = parse(&format!(
        "{VS}  http:\n  - fault: {{abort: {{grpcStatus: UNAVAILABLE, percentage: {{value: 50}}}}}}\n    route: [{{destination: {{host: reviews}}}}]\n"
    ));
    assert_eq!(
        vs(&p).http[0].fault.as_ref().and_then(|f| f.abort),
        Some((dataflows::model::AbortStatus::Grpc(14), 500_000))
    );
    let doc = format!(
        "{VS}  http:\n  - fault: {{abort: {{grpcStatus: SOMETIMES}}}}\n    route: [{{destination: {{host: reviews}}}}]\n"
    );
    let err = parse_document(&doc, &MeshConfig::default()).expect_err("refused");
    assert_eq!(err.field, "spec.http[0].fault.abort.grpcStatus", "{err:?}");
}

/// `redirect.derivePort` is read: `FROM_REQUEST_PORT` marks the redirect,
/// `FROM_PROTOCOL_DEFAULT` does not; an unknown value, or one beside `port` (Istio's
/// oneof), is refused naming the field.
#[test]
fn redirect_derive_port_is_read_and_checked() {
    let redirect = |rd: &str| {
        let p = parse(&format!("{VS}  http:\n  - redirect: {rd}\n"));
        assert!(p.findings.is_empty(), "{:?}", p.findings);
        vs(&p).http[0].redirect.clone().expect("a redirect")
    };
    assert!(redirect("{uri: /a, derivePort: FROM_REQUEST_PORT}").from_request_port);
    let default = redirect("{uri: /a, derivePort: FROM_PROTOCOL_DEFAULT}");
    assert!(!default.from_request_port && default.port.is_none());
    for (rd, message) in [
        ("{uri: /a, derivePort: SOMETIMES}", "unknown derivePort"),
        (
            "{uri: /a, port: 8080, derivePort: FROM_REQUEST_PORT}",
            "alternatives",
        ),
    ] {
        let e = parse_document(
            &format!("{VS}  http:\n  - redirect: {rd}\n"),
            &MeshConfig::default(),
        )
        .unwrap_err();
        assert_eq!(e.field, "spec.http[0].redirect.derivePort", "{rd}");
        assert!(e.message.contains(message), "{rd}: {}", e.message);
    }
}

/// A request's `host` / `:authority` set or added is the route's (or the destination's)
/// authority rewrite, as in Istio: Envoy edits neither as a header. Elsewhere (removed, on a
/// response, or a second authority beside `rewrite.authority`) it is refused, as Istio's
/// validation refuses it, naming the field.
#[test]
fn host_header_edits_become_the_authority_rewrite() {
    let route = |edit: &str| {
        format!("{VS}  http:\n  - {edit}\n    route:\n    - destination: {{host: reviews}}\n")
    };
    let p = parse(&route(
        "headers: {request: {set: {Host: a.example, x-a: b}}}",
    ));
    let edits = &vs(&p).http[0].headers.request;
    assert_eq!(edits.authority.as_deref(), Some("a.example"));
    assert_eq!(edits.set.keys().collect::<Vec<_>>(), vec!["x-a"]);
    let p = parse(&format!(
        "{VS}  http:\n  - route:\n    - destination: {{host: reviews}}\n      headers: {{request: {{add: {{':authority': b.example}}}}}}\n"
    ));
    let dest = &vs(&p).http[0].route[0].headers.request;
    assert_eq!(dest.authority.as_deref(), Some("b.example"));
    assert!(dest.add.is_empty());
    for (edit, field) in [
        (
            "headers: {request: {remove: [host]}}",
            "spec.http[0].headers.request.remove",
        ),
        (
            "headers: {response: {set: {host: a}}}",
            "spec.http[0].headers.response.set",
        ),
        (
            "headers: {request: {set: {':path': /a}}}",
            "spec.http[0].headers.request.set",
        ),
        (
            "headers: {request: {set: {host: a}, add: {':authority': b}}}",
            "spec.http[0].headers.request.add.:authority",
        ),
        (
            "rewrite: {authority: a}\n    headers: {request: {set: {host: b}}}",
            "spec.http[0].headers.request",
        ),
    ] {
        let e = parse_document(&route(edit), &MeshConfig::default()).unwrap_err();
        assert_eq!(e.field, field, "{edit}: {e}");
    }
}

#[test]
fn mirror_percent_is_read_as_istio_reads_it() {
    let one = |extra: &str| {
        parse(&format!(
            "{VS}  http:\n  - route: [{{destination: {{host: reviews}}}}]\n    mirror: {{host: shadow}}\n{extra}"
        ))
    };
    let fraction = |p: &Parsed| vs(p).http[0].mirrors[0].fraction;
    assert_eq!(fraction(&one("    mirrorPercent: 5\n")), Some(50_000));
    // The snake-case spelling Istio's schema also has; 0 mirrors nothing.
    assert_eq!(fraction(&one("    mirror_percent: 0\n")), Some(0));
    assert_eq!(fraction(&one("")), None, "every request");
    // mirrorPercentage wins.
    assert_eq!(
        fraction(&one(
            "    mirrorPercent: 5\n    mirrorPercentage: {value: 0.5}\n"
        )),
        Some(5_000)
    );
    let p = one("    mirrorPercent: 5\n");
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let e = parse_document(
        &format!(
            "{VS}  http:\n  - route: [{{destination: {{host: reviews}}}}]\n    mirror: {{host: shadow}}\n    mirrorPercent: 101\n"
        ),
        &MeshConfig::default(),
    )
    .expect_err("over 100");
    assert_eq!(e.field, "spec.http[0].mirrorPercent");
}

#[test]
fn an_exponential_delay_is_said_and_not_generated() {
    let route = "    route: [{destination: {host: reviews}}]\n";
    let p = parse(&format!(
        "{VS}  http:\n  - fault: {{delay: {{exponentialDelay: 1s, percentage: {{value: 100}}}}, abort: {{httpStatus: 503, percentage: {{value: 1}}}}}}\n{route}"
    ));
    assert_eq!(
        fields(&p, Level::Warning),
        vec!["spec.http[0].fault.delay.exponentialDelay"]
    );
    let fault = vs(&p).http[0].fault.as_ref().expect("the abort");
    assert!(fault.delay.is_none());
    assert!(fault.abort.is_some());
    let e = parse_document(
        &format!(
            "{VS}  http:\n  - fault: {{delay: {{fixedDelay: 1s, exponentialDelay: 1s}}}}\n{route}"
        ),
        &MeshConfig::default(),
    )
    .expect_err("both");
    assert_eq!(e.field, "spec.http[0].fault.delay");
}

/// `fault.delay.percent` (deprecated, a whole percent) is read where `percentage` is unset,
/// as Istio reads it, with a deprecation warning (MF0037, Istio's IST0156) naming the field
/// and its replacement; `percentage` wins where both are set; out of range is refused.
#[test]
fn a_delay_percent_is_read_as_deprecated() {
    let route = "    route: [{destination: {host: reviews}}]\n";
    let p = parse(&format!(
        "{VS}  http:\n  - fault: {{delay: {{fixedDelay: 2s, percent: 30}}}}\n{route}"
    ));
    let fault = vs(&p).http[0].fault.clone().expect("a fault");
    assert_eq!(fault.delay, Some((2000, 300_000)), "30% in millionths");
    assert_eq!(
        fields(&p, Level::Deprecated),
        vec!["spec.http[0].fault.delay.percent"]
    );
    assert!(p.findings[0].message.contains("use percentage"));
    assert_eq!(Level::Deprecated.message_code(), ("MF0037", "Deprecated"));
    let both = parse(&format!(
        "{VS}  http:\n  - fault: {{delay: {{fixedDelay: 2s, percent: 30, percentage: {{value: 5}}}}}}\n{route}"
    ));
    assert_eq!(
        vs(&both).http[0].fault.as_ref().and_then(|f| f.delay),
        Some((2000, 50_000))
    );
    assert_eq!(
        fields(&both, Level::Deprecated),
        vec!["spec.http[0].fault.delay.percent"]
    );
    let e = parse_document(
        &format!("{VS}  http:\n  - fault: {{delay: {{fixedDelay: 2s, percent: 130}}}}\n{route}"),
        &MeshConfig::default(),
    )
    .expect_err("refused");
    assert!(
        e.to_string().contains("spec.http[0].fault.delay.percent"),
        "{e}"
    );
}
