//! A VirtualService's hosts, HTTP matches, TCP and TLS routes and delegation: what is read,
//! what is refused naming the field, and the routes left out where a match condition is not
//! read.

use super::*;

#[test]
fn virtual_service_short_hosts_expand_and_weights_validate() {
    let ok = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, namespace: ns1}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: reviews, subset: v1}\n      weight: 70\n    - destination: {host: reviews, subset: v2}\n      weight: 30\n";
    let parsed = parse_document(ok, &mesh()).unwrap().unwrap();
    let Record::VirtualService(vs) = &parsed.records[0] else {
        panic!()
    };
    assert_eq!(vs.hosts, vec!["reviews.ns1.svc.cluster.local"]);
    assert_eq!(vs.http[0].route[1].weight, 30);

    let bad = ok.replace("weight: 30", "weight: 40");
    let err = parse_document(&bad, &mesh()).unwrap_err();
    assert_eq!(err.field, "spec.http[0].route");
    assert!(err.message.contains("110"), "{}", err.message);
    assert_eq!(
        err.object,
        Some(ConfigKey::new(Kind::VirtualService, "ns1", "r"))
    );
}

#[test]
fn a_match_condition_not_read_keeps_its_route_out() {
    for cond in [
        "sourceLabel: {app: productpage}",
        "headers: {end-user: {exact: jason}, x: {present: true}}",
    ] {
        let doc = format!(
            "{VS}  http:\n  - match:\n    - {{uri: {{prefix: /a}}, {cond}}}\n    route:\n    - destination: {{host: reviews, subset: v2}}\n  - route:\n    - destination: {{host: reviews, subset: v1}}\n"
        );
        let p = parse(&doc);
        let v = vs(&p);
        assert_eq!(
            v.http.len(),
            1,
            "{cond}: only the second route is generated"
        );
        assert_eq!(v.http[0].route[0].subset.as_deref(), Some("v1"), "{cond}");
        let errors = fields(&p, Level::Error);
        assert_eq!(errors.len(), 1, "{cond}: {errors:?}");
        assert!(
            errors[0].starts_with("spec.http[0].match[0]."),
            "{errors:?}"
        );
        assert!(p.findings[0]
            .message
            .contains("spec.http[0] is not generated"));
    }
    // A match's name restricts nothing.
    let doc = format!(
        "{VS}  http:\n  - match:\n    - {{name: a, uri: {{prefix: /a}}}}\n    route:\n    - destination: {{host: reviews}}\n"
    );
    let p = parse(&doc);
    assert_eq!(vs(&p).http.len(), 1);
    assert_eq!(
        fields(&p, Level::Warning),
        vec!["spec.http[0].match[0].name"]
    );
}

#[test]
fn tcp_and_mesh_tls_routes_are_translated_without_findings() {
    let doc = format!(
        "{VS}  tcp:\n  - match: [{{port: 27017, destinationSubnets: [10.1.2.3/16], gateways: [mesh], sourceNamespace: ns}}]\n    route:\n    - destination: {{host: mongo, subset: v1}}\n      weight: 30\n    - destination: {{host: mongo, subset: v2}}\n      weight: 70\n  tls:\n  - match: [{{sniHosts: [reviews]}}]\n    route: [{{destination: {{host: reviews}}}}]\n"
    );
    let p = parse(&doc);
    // Sidecars route `tls[]` by SNI: nothing to warn of.
    assert_eq!(fields(&p, Level::Warning), Vec::<String>::new());
    assert!(fields(&p, Level::Error).is_empty());
    let Record::VirtualService(vs) = &p.records[0] else {
        panic!()
    };
    let [tls] = vs.tls.as_slice() else {
        panic!("{:?}", vs.tls)
    };
    assert_eq!(
        tls.matches[0].sni_hosts,
        vec!["reviews.ns.svc.cluster.local"]
    );
    let [route] = vs.tcp.as_slice() else {
        panic!("{:?}", vs.tcp)
    };
    let m = &route.matches[0];
    assert_eq!(m.port, Some(27017));
    assert_eq!(m.destination_subnets, vec!["10.1.0.0/16"], "canonical CIDR");
    assert_eq!(m.gateways, vec!["mesh"]);
    assert_eq!(m.source_namespace.as_deref(), Some("ns"));
    let weights: Vec<(Option<&str>, u32)> = route
        .route
        .iter()
        .map(|d| (d.subset.as_deref(), d.weight))
        .collect();
    assert_eq!(weights, vec![(Some("v1"), 30), (Some("v2"), 70)]);
    assert_eq!(route.route[0].host, "mongo.ns.svc.cluster.local");
}

/// `headers` and `withoutHeaders` conditions on a JWT claim (`@request.auth.claims.…`, both
/// of Istio's spellings) are kept as written (claim names are case-sensitive), with no
/// finding; a malformed claim name is refused naming the condition.
#[test]
fn a_match_on_a_jwt_claim_is_kept_as_written() {
    for (field, cond, name) in [
        (
            "headers",
            "headers: {'@request.auth.claims.Group': {exact: admin}}",
            "@request.auth.claims.Group",
        ),
        (
            "withoutHeaders",
            "withoutHeaders: {'@request.auth.claims[realm][role]': {prefix: adm}}",
            "@request.auth.claims[realm][role]",
        ),
    ] {
        let doc = format!(
            "{VS}  http:\n  - match:\n    - {{{cond}}}\n    directResponse: {{status: 403}}\n  - route:\n    - destination: {{host: reviews, subset: v1}}\n"
        );
        let p = parse(&doc);
        let v = vs(&p);
        assert_eq!(v.http.len(), 2, "{cond}: both routes");
        let m = &v.http[0].matches[0];
        let conditions = if field == "headers" {
            &m.headers
        } else {
            &m.without_headers
        };
        assert!(conditions.contains_key(name), "{cond}: {m:?}");
        assert!(p.findings.is_empty(), "{cond}: {:?}", p.findings);
    }
    for bad in [
        "@request.auth.claims",
        "@request.auth.claims[]",
        "@request.auth.claims.a..b",
    ] {
        let doc = format!(
            "{VS}  http:\n  - match:\n    - {{headers: {{'{bad}': {{exact: x}}}}}}\n    route:\n    - destination: {{host: reviews}}\n"
        );
        let e = parse_document(&doc, &MeshConfig::default())
            .expect_err("refused")
            .to_string();
        assert!(e.contains("@request.auth.claims"), "{bad}: {e}");
    }
}

/// `sourceSubnet` restricts which clients a TCP route is for; meshflow cannot honour it, so
/// the route is left out (an error naming the field), never widened.
#[test]
fn tcp_source_conditions_fail_closed() {
    {
        let field = "sourceSubnet: 10.0.0.0/8";
        let doc = format!(
            "{VS}  tcp:\n  - match: [{{port: 27017, {field}}}]\n    route: [{{destination: {{host: mongo}}}}]\n  - route: [{{destination: {{host: other}}}}]\n"
        );
        let p = parse(&doc);
        let name = field.split(':').next().unwrap_or_default();
        assert_eq!(
            fields(&p, Level::Error),
            vec![format!("spec.tcp[0].match[0].{name}")],
            "{field}"
        );
        assert!(p.findings[0]
            .message
            .contains("spec.tcp[0] is not generated"));
        let Record::VirtualService(vs) = &p.records[0] else {
            panic!()
        };
        assert_eq!(vs.tcp.len(), 1, "only the second route: {:?}", vs.tcp);
        assert_eq!(vs.tcp[0].route[0].host, "other.ns.svc.cluster.local");
    }
}

#[test]
fn tcp_route_problems_name_their_field() {
    for (bad, field) in [
        (
            "  - route: []\n",
            "spec.tcp[0].route",
        ),
        (
            "  - match: [{destinationSubnets: [10.0.0.0/33]}]\n    route: [{destination: {host: a}}]\n",
            "spec.tcp[0].match[0].destinationSubnets[0]",
        ),
        (
            "  - match: [{port: 70000}]\n    route: [{destination: {host: a}}]\n",
            "spec.tcp[0].match[0].port",
        ),
        (
            "  - route: [{destination: {host: a}, weight: 30}, {destination: {host: b}, weight: 30}]\n",
            "spec.tcp[0].route",
        ),
    ] {
        let e = parse_document(&format!("{VS}  tcp:\n{bad}"), &MeshConfig::default())
            .expect_err(bad);
        assert_eq!(e.field, field, "{bad}: {e:?}");
    }
}

#[test]
fn tls_routes_are_read_with_their_sni_hosts_within_the_virtual_service_hosts() {
    let vs = |sni: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: v, namespace: ns}}\nspec:\n  hosts: [a.example.com]\n  gateways: [gw]\n  tls:\n  - match: [{{sniHosts: [{sni}], port: 443}}]\n    route:\n    - destination: {{host: a.internal, port: {{number: 443}}}}\n")
    };
    let p = parse(&vs("a.example.com"));
    let Record::VirtualService(v) = &p.records[0] else {
        panic!()
    };
    assert_eq!(v.tls.len(), 1);
    assert_eq!(v.tls[0].matches[0].sni_hosts, vec!["a.example.com"]);
    assert_eq!(v.tls[0].matches[0].port, Some(443));
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let e = parse_document(&vs("b.example.com"), &MeshConfig::default()).unwrap_err();
    assert_eq!(e.field, "spec.tls[0].match[0].sniHosts[0]");
}

#[test]
fn delegation_is_read_and_its_rules_enforced() {
    use dataflows::model::ConfigKey;
    let root = format!(
        "{VS}  http:\n  - match: [{{uri: {{prefix: /r}}}}]\n    delegate: {{name: child}}\n"
    );
    let p = parse(&root);
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    assert_eq!(
        vs(&p).http[0].delegate,
        Some(ConfigKey::new(Kind::VirtualService, "ns", "child")),
        "the root's namespace unless named"
    );
    let child = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: child, namespace: ns}\nspec:\n  http:\n  - route:\n    - destination: {host: reviews}\n";
    assert!(
        vs(&parse(child)).hosts.is_empty(),
        "a delegate has no hosts"
    );
    for (doc, field) in [
        (
            child.replace("spec:\n", "spec:\n  gateways: [gw]\n"),
            "spec.gateways",
        ),
        (
            format!("{VS}  http:\n  - delegate: {{name: c}}\n    route:\n    - destination: {{host: reviews}}\n"),
            "cannot have both route and delegate",
        ),
        (
            format!("{VS}  http:\n  - delegate: {{name: \"\"}}\n"),
            "spec.http[0].delegate.name",
        ),
        (
            child.replace("  - route:", "  - delegate: {name: other}\n  - route:"),
            "spec.http[0].delegate",
        ),
    ] {
        let err = parse_document(&doc, &MeshConfig::default()).expect_err(&doc);
        assert!(format!("{err:?}").contains(field), "{field}: {err:?}");
    }
}

/// `sourceLabels` is read on HTTP, TCP and TLS matches (an empty selector selects every
/// proxy), and its labels are checked as Kubernetes spells them.
#[test]
fn source_labels_are_read_and_checked() {
    let doc = format!(
        "{VS}  http:\n  - match:\n    - {{uri: {{prefix: /a}}, sourceLabels: {{app: productpage, version: v1}}}}\n    - {{uri: {{prefix: /b}}, sourceLabels: {{}}}}\n    route:\n    - destination: {{host: reviews}}\n  tcp:\n  - match: [{{port: 27017, sourceLabels: {{app: a}}}}]\n    route: [{{destination: {{host: mongo}}}}]\n"
    );
    let p = parse(&doc);
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let v = vs(&p);
    let sel = |pairs: &[(&str, &str)]| -> dataflows::model::Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        v.http[0].matches[0].source_labels,
        Some(sel(&[("app", "productpage"), ("version", "v1")]))
    );
    assert_eq!(v.http[0].matches[1].source_labels, None);
    assert_eq!(
        v.tcp[0].matches[0].source_labels,
        Some(sel(&[("app", "a")]))
    );
    assert_eq!(
        v.source_selectors(),
        vec![
            sel(&[("app", "a")]),
            sel(&[("app", "productpage"), ("version", "v1")])
        ]
    );
    for (bad, field) in [
        ("{app: -x}", "spec.http[0].match[0].sourceLabels.app"),
        ("{a b: x}", "spec.http[0].match[0].sourceLabels.a b"),
        ("{/app: x}", "spec.http[0].match[0].sourceLabels./app"),
    ] {
        let doc = format!(
            "{VS}  http:\n  - match:\n    - {{sourceLabels: {bad}}}\n    route:\n    - destination: {{host: reviews}}\n"
        );
        let e = parse_document(&doc, &MeshConfig::default()).expect_err(bad);
        assert_eq!(e.field, field, "{bad}: {e:?}");
    }
}

#[test]
fn match_header_names_are_checked_as_istio_and_envoy_check_them() {
    let route = "    route: [{destination: {host: reviews}}]\n";
    // Refused: empty (Istio's validation), NUL, CR or LF (Envoy would refuse every route of
    // the port), in `headers` and `withoutHeaders` alike.
    for (bad, field) in [
        (
            "  - match: [{headers: {\"\": {exact: a}}}]\n",
            "spec.http[0].match[0].headers",
        ),
        (
            "  - match: [{withoutHeaders: {\"\": {exact: a}}}]\n",
            "spec.http[0].match[0].withoutHeaders",
        ),
        (
            "  - match: [{headers: {\"x-a\\ny\": {exact: a}}}]\n",
            "spec.http[0].match[0].headers.x-a\\ny",
        ),
        (
            "  - match: [{uri: {prefix: /}}, {withoutHeaders: {\"x\\r\": {}}}]\n",
            "spec.http[0].match[1].withoutHeaders.x\\r",
        ),
    ] {
        let e = parse_document(
            &format!("{VS}  http:\n{bad}{route}"),
            &MeshConfig::default(),
        )
        .expect_err(bad);
        assert_eq!(e.field, field, "{bad}: {e:?}");
    }
    // Accepted, as Istio accepts them: pseudo-headers, any token; a name no request carries
    // is said, and the route is generated as written.
    let p = parse(&format!(
        "{VS}  http:\n  - match: [{{headers: {{\":authority\": {{exact: a}}, X-Upper_1: {{prefix: b}}, \"x y\": {{exact: c}}}}, withoutHeaders: {{\"x(y)\": {{}}}}}}]\n{route}"
    ));
    assert_eq!(
        fields(&p, Level::Warning),
        vec![
            "spec.http[0].match[0].headers.x y",
            "spec.http[0].match[0].withoutHeaders.x(y)"
        ]
    );
    assert!(p.findings[0].message.contains("never holds"));
    assert!(p.findings[1].message.contains("always holds"));
    let m = &vs(&p).http[0].matches[0];
    assert!(m.headers.contains_key(":authority") && m.headers.contains_key("x-upper_1"));
    assert!(m.without_headers.contains_key("x(y)"));
    // A JWT claim is not a header name: no finding about its name.
    let p = parse(&format!(
        "{VS}  http:\n  - match: [{{headers: {{\"@request.auth.claims.group\": {{exact: a}}}}}}]\n{route}"
    ));
    assert!(p.findings.is_empty(), "{:?}", p.findings);
}

#[test]
fn a_query_parameter_prefix_keeps_its_route_out() {
    let p = parse(&format!(
        "{VS}  http:\n  - match: [{{queryParams: {{q: {{prefix: a}}}}}}]\n    route: [{{destination: {{host: reviews, subset: v1}}}}]\n  - route: [{{destination: {{host: reviews}}}}]\n"
    ));
    assert_eq!(
        fields(&p, Level::Error),
        vec!["spec.http[0].match[0].queryParams.q.prefix"]
    );
    // Only the catch-all is generated: nothing goes to v1 by a condition not honoured.
    assert_eq!(vs(&p).http.len(), 1);
    assert!(vs(&p).http[0].matches.is_empty());
}

/// The README's word on regexes: checked with Rust's `regex`, not RE2, so the syntaxes differ
/// at the edges. Pinned here so that a change of either side is seen.
#[test]
fn regex_syntax_is_rusts_not_re2s_at_the_edges() {
    let uri = |re: &str| {
        parse_document(
            &format!(
                "{VS}  http:\n  - match: [{{uri: {{regex: '{re}'}}}}]\n    route: [{{destination: {{host: reviews}}}}]\n"
            ),
            &MeshConfig::default(),
        )
    };
    // Accepted here, refused by RE2 (Envoy NACKs; the rollback catches it).
    for re in [r"\<a\>", r"a\>"] {
        assert!(uri(re).is_ok(), "{re}");
    }
    // With a raised program-size limit, also what RE2 lacks or limits.
    let raised = MeshConfig {
        max_regex_program_size: 1_000_000,
        ..MeshConfig::default()
    };
    for re in [r"\p{Emoji}", "a{1001}"] {
        let doc = format!(
            "{VS}  http:\n  - match: [{{uri: {{regex: '{re}'}}}}]\n    route: [{{destination: {{host: reviews}}}}]\n"
        );
        assert!(parse_document(&doc, &raised).is_ok(), "{re}");
        assert!(uri(re).is_err(), "{re}: over the default limit");
    }
    // Refused here, accepted by RE2.
    for re in [r"\Qa.b\E", r"a\C"] {
        let e = uri(re).expect_err(re);
        assert_eq!(e.field, "spec.http[0].match[0].uri.regex", "{re}");
    }
}
