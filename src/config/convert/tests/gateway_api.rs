//! The Gateway API's kinds read into their records: listeners with their TLS and
//! `allowedRoutes`, HTTPRoute rules as the routes they become, ReferenceGrants; what is
//! not translated is said by field, and a filter meshflow cannot apply answers 500.

use super::{fields, parse};
use crate::config::{parse_document, Level};
use dataflows::model::*;

fn object(p: &crate::config::Parsed) -> &GatewayApiObject {
    match &p.records[0] {
        Record::GatewayApi(o) => o,
        other => panic!("{other:?}"),
    }
}

const GATEWAY: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: shop-gateway, namespace: shop}
spec:
  gatewayClassName: istio
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    hostname: \"*.shop.example\"
    allowedRoutes:
      namespaces: {from: All}
  - name: https
    port: 443
    protocol: HTTPS
    tls:
      certificateRefs: [{name: shop-cert}]
  - name: udp
    port: 53
    protocol: UDP
";

#[test]
fn gateway_listeners_are_read_with_tls_and_allowed_routes() {
    let p = parse(GATEWAY);
    assert_eq!(p.key.kind, Kind::KubernetesGateway);
    let GatewayApiObject::Gateway(g) = object(&p) else {
        panic!()
    };
    assert!(g.owned());
    let names: Vec<&str> = g.listeners.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["http", "https"], "the UDP listener is left out");
    assert_eq!(g.listeners[0].allowed_namespaces, AllowedNamespaces::All);
    assert_eq!(g.listeners[0].hostname.as_deref(), Some("*.shop.example"));
    assert_eq!(
        g.listeners[1].tls,
        Some(ListenerTls {
            clients: None,
            passthrough: false,
            certificates: vec![("shop".into(), "shop-cert".into())],
        })
    );
    assert_eq!(g.listeners[1].allowed_namespaces, AllowedNamespaces::Same);
    assert_eq!(fields(&p, Level::Error), ["spec.listeners[2].protocol"]);
}

#[test]
fn invalid_gateways_name_the_field() {
    for (edit, field) in [
        (
            GATEWAY.replace("port: 80\n", "port: 0\n"),
            "spec.listeners[0].port",
        ),
        (
            GATEWAY.replace("name: udp", "name: http"),
            "spec.listeners[2].name",
        ),
        (
            GATEWAY.replace("\"*.shop.example\"", "\"Shop.Example\""),
            "spec.listeners[0].hostname",
        ),
        (
            GATEWAY.replace("    tls:\n      certificateRefs: [{name: shop-cert}]\n", ""),
            "spec.listeners[1].tls",
        ),
        (
            GATEWAY.replace("{from: All}", "{from: Some}"),
            "spec.listeners[0].allowedRoutes.namespaces.from",
        ),
    ] {
        let err = parse_document(&edit, &super::mesh()).unwrap_err();
        assert_eq!(err.field, field, "{edit}");
    }
}

/// `spec.tls.frontend`: the default validation and each port's (a port of its own without
/// a validation verifies no one), references with their namespaces (the Gateway's when not
/// written) and the insecure fallback; `spec.tls.backend`, not translated, is said by field.
/// A mode meshflow does not know, a validation without a CA or a port written twice
/// refuses the Gateway by field.
#[test]
fn frontend_validation_is_read_per_port() {
    let with_tls = |tls: &str| {
        GATEWAY.replace(
            "  gatewayClassName: istio\n",
            &format!("  gatewayClassName: istio\n  tls:\n{tls}"),
        )
    };
    let yaml = with_tls(
        "    frontend:
      default:
        validation: {caCertificateRefs: [{group: '', kind: ConfigMap, name: clients-ca}]}
      perPort:
      - port: 8443
        tls:
          validation:
            mode: AllowInsecureFallback
            caCertificateRefs: [{group: '', kind: ConfigMap, name: port-ca, namespace: cas}]
      - {port: 9443, tls: {}}
    backend:
      clientCertificateRef: {name: gateway-client}
",
    );
    let p = parse(&yaml);
    let GatewayApiObject::Gateway(g) = object(&p) else {
        panic!()
    };
    let config_map = |name: &str| CaRef {
        group: String::new(),
        kind: "ConfigMap".into(),
        name: name.into(),
    };
    let default = FrontendValidation {
        ca_refs: vec![(config_map("clients-ca"), "shop".into())],
        insecure_fallback: false,
        field: "spec.tls.frontend.default.validation".into(),
    };
    let port = FrontendValidation {
        ca_refs: vec![(config_map("port-ca"), "cas".into())],
        insecure_fallback: true,
        field: "spec.tls.frontend.perPort[0].tls.validation".into(),
    };
    assert_eq!(
        g.frontend,
        FrontendTls {
            default: Some(default.clone()),
            per_port: vec![(8443, Some(port.clone())), (9443, None)],
        }
    );
    assert_eq!(g.frontend.for_port(443), Some(&default));
    assert_eq!(g.frontend.for_port(8443), Some(&port));
    assert_eq!(
        g.frontend.for_port(9443),
        None,
        "a port of its own without a validation"
    );
    assert!(g.frontend.insecure());
    let warned = fields(&p, Level::Warning);
    assert!(
        warned.iter().any(|f| f.starts_with("spec.tls.backend")),
        "{warned:?}"
    );
    for (tls, field) in [
        (
            "    frontend: {default: {validation: {mode: AllowAll, caCertificateRefs: [{group: '', kind: ConfigMap, name: ca}]}}}\n",
            "spec.tls.frontend.default.validation.mode",
        ),
        (
            "    frontend: {default: {validation: {caCertificateRefs: []}}}\n",
            "spec.tls.frontend.default.validation.caCertificateRefs",
        ),
        (
            "    frontend: {default: {}, perPort: [{port: 8443, tls: {}}, {port: 8443, tls: {}}]}\n",
            "spec.tls.frontend.perPort[1].port",
        ),
        (
            "    frontend: {default: {}, perPort: [{port: 0, tls: {}}]}\n",
            "spec.tls.frontend.perPort[0].port",
        ),
    ] {
        let err = parse_document(&with_tls(tls), &super::mesh()).unwrap_err();
        assert_eq!(err.field, field, "{tls}");
    }
}

/// `spec.infrastructure`: labels and annotations have nowhere to go (warned); a ConfigMap
/// `parametersRef` is not read (warned); another kind is `InvalidParameters` — an error, and
/// none of the Gateway's listeners served.
#[test]
fn infrastructure_is_said_and_unknown_parameters_refuse_the_gateway() {
    let with = |infra: &str| parse(&format!("{GATEWAY}  infrastructure: {infra}\n"));
    let p = with("{labels: {team: a}, parametersRef: {group: '', kind: ConfigMap, name: opts}}");
    let GatewayApiObject::Gateway(g) = object(&p) else {
        panic!()
    };
    assert_eq!(g.invalid_parameters, None);
    assert_eq!(g.listeners.len(), 2);
    assert_eq!(
        fields(&p, Level::Warning),
        [
            "spec.infrastructure.labels",
            "spec.infrastructure.parametersRef"
        ]
    );
    let p = with("{parametersRef: {group: invalid.io, kind: InvalidParameters, name: x}}");
    let GatewayApiObject::Gateway(g) = object(&p) else {
        panic!()
    };
    assert!(g.invalid_parameters.is_some());
    assert!(g.listeners.is_empty(), "nothing served");
    assert!(g
        .refused
        .iter()
        .any(|r| r.name == "http" && r.reason == "Pending"));
    assert!(fields(&p, Level::Error).contains(&"spec.infrastructure.parametersRef".to_string()));
}

/// A namespace selector is read whole (`matchLabels`, `matchExpressions`); an operator that
/// is not Kubernetes', values where none are taken or none where they are needed, and a
/// `Selector` without a selector are errors naming the field.
#[test]
fn namespace_selectors_are_read_with_their_expressions() {
    let with =
        |selector: &str| GATEWAY.replace("{from: All}", &format!("{{from: Selector{selector}}}"));
    let p = parse(&with(
        ", selector: {matchLabels: {shared: \"true\"}, matchExpressions: [{key: env, operator: NotIn, values: [test]}, {key: team, operator: Exists}]}",
    ));
    let GatewayApiObject::Gateway(g) = object(&p) else {
        panic!()
    };
    assert_eq!(
        g.listeners[0].allowed_namespaces,
        AllowedNamespaces::Selector(NamespaceSelector {
            match_labels: [("shared".to_string(), "true".to_string())].into(),
            expressions: vec![
                LabelExpression::NotIn("env".into(), vec!["test".into()]),
                LabelExpression::Exists("team".into()),
            ],
        })
    );
    assert!(
        !fields(&p, Level::Error)
            .iter()
            .any(|f| f.contains("allowedRoutes")),
        "{:?}",
        p.findings
    );
    let selector = "spec.listeners[0].allowedRoutes.namespaces.selector";
    for (bad, field) in [
        ("", selector.to_string()),
        (
            ", selector: {matchExpressions: [{key: env, operator: Like, values: [a]}]}",
            format!("{selector}.matchExpressions[0].operator"),
        ),
        (
            ", selector: {matchExpressions: [{key: env, operator: In}]}",
            format!("{selector}.matchExpressions[0].values"),
        ),
        (
            ", selector: {matchExpressions: [{key: env, operator: Exists, values: [a]}]}",
            format!("{selector}.matchExpressions[0].values"),
        ),
    ] {
        let err = parse_document(&with(bad), &super::mesh()).unwrap_err();
        assert_eq!(err.field, field, "{bad}");
    }
    // Another controller's Gateway: nothing said about it.
    let other = parse(&GATEWAY.replace("gatewayClassName: istio", "gatewayClassName: nginx"));
    assert!(other.findings.is_empty(), "{:?}", other.findings);
}

/// A Namespace is its labels, with the name label Kubernetes gives every Namespace.
#[test]
fn a_namespace_is_its_labels() {
    let p = parse(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a, labels: {shared: \"yes\"}}\n",
    );
    let GatewayApiObject::Namespace(n) = object(&p) else {
        panic!()
    };
    assert_eq!(n.key, ConfigKey::new(Kind::Namespace, "", "team-a"));
    let want: Labels = [
        (
            "kubernetes.io/metadata.name".to_string(),
            "team-a".to_string(),
        ),
        ("shared".to_string(), "yes".to_string()),
    ]
    .into();
    assert_eq!(n.labels, want);
}

const ROUTE: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop, namespace: shop, creationTimestamp: \"2026-03-01T10:00:00Z\"}
spec:
  parentRefs:
  - name: shop-gateway
    sectionName: http
  hostnames: [www.shop.example]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /cart/}
      headers: [{name: X-Team, value: a}, {name: x-team, value: b}]
      queryParams: [{type: RegularExpression, name: v, value: \"[0-9]+\"}]
      method: POST
    - path: {type: Exact, value: /}
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Via, value: gw}]
        remove: [x-debug]
    - type: URLRewrite
      urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /basket}}
    backendRefs:
    - {name: cart, port: 8080, weight: 90}
    - {name: cart-next, namespace: canary, port: 8080, weight: 10}
    timeouts: {request: 2s}
  - backendRefs:
    - {name: web, port: 80}
";

#[test]
fn http_route_rules_become_routes_with_their_backends() {
    let p = parse(ROUTE);
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let GatewayApiObject::HttpRoute(r) = object(&p) else {
        panic!()
    };
    assert_eq!(r.created, "2026-03-01T10:00:00Z");
    assert_eq!(
        r.parents,
        vec![ParentRef {
            kind: ParentKind::Gateway,
            namespace: "shop".into(),
            name: "shop-gateway".into(),
            section: Some("http".into()),
            port: None,
        }]
    );
    let rule = &r.rules[0];
    let m0 = &rule.matches[0];
    assert_eq!(m0.uri, Some(StringMatch::SegmentPrefix("/cart".into())));
    assert_eq!(
        m0.headers["x-team"],
        StringMatch::Exact("a".into()),
        "the first of a name wins"
    );
    assert_eq!(m0.headers[":method"], StringMatch::Exact("POST".into()));
    assert_eq!(m0.query_params["v"], StringMatch::Regex("[0-9]+".into()));
    assert_eq!(rule.matches[1].uri, Some(StringMatch::Exact("/".into())));
    assert_eq!(rule.template.headers.request.set["x-via"], "gw");
    assert_eq!(rule.template.headers.request.remove, ["x-debug"]);
    assert_eq!(
        rule.template.rewrite.as_ref().unwrap().uri_regex,
        Some(("^.*$".into(), "/basket".into()))
    );
    assert_eq!(rule.template.timeout_ms, Some(2000));
    let hosts: Vec<_> = rule
        .backends
        .iter()
        .map(|b| (b.host.clone().unwrap(), b.namespace.as_str(), b.weight))
        .collect();
    assert_eq!(
        hosts,
        [
            ("cart.shop.svc.cluster.local".to_string(), "shop", 90),
            (
                "cart-next.canary.svc.cluster.local".to_string(),
                "canary",
                10
            ),
        ]
    );
    assert!(
        r.rules[1].matches.is_empty(),
        "no match: the rule's default, added when attached"
    );
}

/// A filter meshflow cannot apply makes its rule answer 500 (reported); a backend of an
/// unknown kind or a Service without a port is not routed to (reported); an unknown field
/// of a rule is an error naming it.
#[test]
fn what_cannot_be_applied_fails_closed_and_is_named() {
    let doc = ROUTE
        .replace(
            "    - type: URLRewrite\n",
            "    - type: ExtensionRef\n      extensionRef: {group: example.io, kind: Auth, name: a}\n    - type: URLRewrite\n",
        )
        .replace("    - {name: web, port: 80}\n", "    - {name: web}\n    - {group: example.io, kind: Bucket, name: b}\n    sessionPersistence: {type: Cookie}\n");
    let p = parse(&doc);
    let GatewayApiObject::HttpRoute(r) = object(&p) else {
        panic!()
    };
    assert_eq!(
        r.rules[0].template.direct_response,
        Some(DirectResponse {
            status: 500,
            body: None
        })
    );
    assert!(r.rules[1].backends.iter().all(|b| b.host.is_none()));
    let errors = fields(&p, Level::Error);
    for f in [
        "spec.rules[0].filters[1]",
        "spec.rules[1].backendRefs[0].port",
        "spec.rules[1].backendRefs[1]",
        "spec.rules[1].sessionPersistence",
    ] {
        assert!(errors.iter().any(|e| e == f), "{f} not in {errors:?}");
    }
    for (edit, field) in [
        (
            ROUTE.replace("value: /cart/}", "value: cart}"),
            "spec.rules[0].matches[0].path.value",
        ),
        (
            ROUTE.replace("value: \"[0-9]+\"", "value: \"[0-9\""),
            "spec.rules[0].matches[0].queryParams[0].value",
        ),
        (
            ROUTE.replace("weight: 90", "weight: -1"),
            "spec.rules[0].backendRefs[0].weight",
        ),
        (
            ROUTE.replace("[www.shop.example]", "[\"10.0.0.1\"]"),
            "spec.hostnames[0]",
        ),
    ] {
        let err = parse_document(&edit, &super::mesh()).unwrap_err();
        assert_eq!(err.field, field, "{edit}");
    }
}

#[test]
fn reference_grants_are_read() {
    let p = parse(
        "apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: from-shop, namespace: canary}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: shop}]
  to: [{group: \"\", kind: Service, name: cart-next}]
",
    );
    let GatewayApiObject::ReferenceGrant(g) = object(&p) else {
        panic!()
    };
    assert!(g.allows("HTTPRoute", "shop", "Service", "cart-next"));
    assert!(!g.allows("HTTPRoute", "shop", "Service", "other"));
    assert!(!g.allows("HTTPRoute", "elsewhere", "Service", "cart-next"));
    assert!(!g.allows("GRPCRoute", "shop", "Service", "cart-next"));
}

/// A grant's kinds are named with their groups: `from` a kind of another API than the
/// Gateway API's, or `to` a `Service` of another group than the core one, grants nothing (a
/// grant matched by kind alone would permit what its writer did not).
#[test]
fn reference_grants_of_other_groups_grant_nothing() {
    let grant = |from_group: &str, to_group: &str| {
        let p = parse(&format!(
            "apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: from-shop, namespace: canary}}
spec:
  from: [{{group: \"{from_group}\", kind: HTTPRoute, namespace: shop}}]
  to: [{{group: \"{to_group}\", kind: Service}}, {{group: networking.istio.io, kind: Hostname}}]
"
        ));
        let GatewayApiObject::ReferenceGrant(g) = object(&p).clone() else {
            panic!()
        };
        g
    };
    let right = grant("gateway.networking.k8s.io", "");
    assert!(right.allows("HTTPRoute", "shop", "Service", "cart"));
    assert!(right.allows("HTTPRoute", "shop", "Hostname", "db.internal"));
    let wrong_from = grant("example.com", "");
    assert!(!wrong_from.allows("HTTPRoute", "shop", "Service", "cart"));
    assert!(!wrong_from.allows("HTTPRoute", "shop", "Hostname", "db.internal"));
    let wrong_to = grant("gateway.networking.k8s.io", "example.com");
    assert!(!wrong_to.allows("HTTPRoute", "shop", "Service", "cart"));
    assert!(wrong_to.allows("HTTPRoute", "shop", "Hostname", "db.internal"));
}

/// A GRPCRoute's method matches become path matches as Istio writes them, and its rules'
/// names name their routes; TCPRoutes and TLSRoutes keep each rule's backends (a TLSRoute
/// its SNI hostnames).
#[test]
fn grpc_tcp_and_tls_routes_are_read() {
    let p = parse(
        "apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: greeter, namespace: shop}
spec:
  parentRefs: [{name: shop-gateway}]
  rules:
  - name: greeter-rule
    matches:
    - method: {service: helloworld.Greeter, method: SayHello}
    - method: {service: helloworld.Greeter}
    - method: {method: SayHello}
    - method: {type: RegularExpression, service: \"helloworld\\\\..*\"}
      headers: [{name: X-Env, value: canary}]
    backendRefs: [{name: greeter, port: 50051}]
  - name: echo-two
    matches: [{method: {service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: EchoTwo}}]
    backendRefs: [{name: greeter-v2, port: 50051}]
",
    );
    assert_eq!(p.key.kind, Kind::GrpcRoute);
    let GatewayApiObject::HttpRoute(r) = object(&p) else {
        panic!()
    };
    let uris: Vec<_> = r.rules[0]
        .matches
        .iter()
        .map(|m| m.uri.clone().unwrap())
        .collect();
    assert_eq!(
        uris,
        [
            StringMatch::Exact("/helloworld.Greeter/SayHello".into()),
            StringMatch::Prefix("/helloworld.Greeter/".into()),
            StringMatch::Regex("/[^/]+/SayHello".into()),
            StringMatch::Regex("/helloworld\\..*/[^/]+".into()),
        ]
    );
    assert_eq!(
        r.rules[0].matches[3].headers["x-env"],
        StringMatch::Exact("canary".into())
    );
    // GRPCRouteNamedRule: each rule's name names its routes.
    let names: Vec<_> = r.rules.iter().map(|x| x.template.name.as_deref()).collect();
    assert_eq!(names, [Some("greeter-rule"), Some("echo-two")]);
    let err = parse_document(
        "apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: g, namespace: shop}
spec:
  rules: [{matches: [{method: {type: Exact}}]}]
",
        &super::mesh(),
    )
    .unwrap_err();
    assert_eq!(err.field, "spec.rules[0].matches[0].method");

    for (kind, hostnames) in [("TCPRoute", 0), ("TLSRoute", 1)] {
        let p = parse(&format!(
            "apiVersion: gateway.networking.k8s.io/v1alpha2
kind: {kind}
metadata: {{name: db, namespace: shop}}
spec:
  parentRefs: [{{name: shop-gateway, sectionName: l4}}]
  hostnames: [db.shop.example]
  rules:
  - backendRefs: [{{name: db, port: 5432, weight: 3}}, {{name: db-next, port: 5432}}]
"
        ));
        let GatewayApiObject::L4Route(r) = object(&p) else {
            panic!()
        };
        assert_eq!(r.hostnames.len(), hostnames, "{kind}");
        let weights: Vec<u32> = r.rules[0].iter().map(|b| b.weight).collect();
        assert_eq!(weights, [3, 1], "{kind}");
        assert_eq!(
            fields(&p, Level::Warning),
            if kind == "TCPRoute" {
                vec!["spec.hostnames".to_string()]
            } else {
                vec![]
            }
        );
    }
}

/// Redirects take the spec's status codes (301, 302 core; 303, 307, 308 extended) with the
/// scheme, hostname, port and a full path; a rule's name names its routes.
#[test]
fn redirects_and_named_rules_are_read() {
    for code in [301, 302, 303, 307, 308] {
        let p = parse(&format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: shop}}
spec:
  rules:
  - name: moved
    filters:
    - type: RequestRedirect
      requestRedirect: {{scheme: https, hostname: new.example, port: 8443, statusCode: {code}, path: {{type: ReplaceFullPath, replaceFullPath: /new}}}}
"
        ));
        let GatewayApiObject::HttpRoute(r) = object(&p) else {
            panic!()
        };
        let t = &r.rules[0].template;
        assert_eq!(t.name.as_deref(), Some("moved"));
        assert_eq!(
            t.redirect,
            Some(Redirect {
                uri: Some("/new".into()),
                prefix: None,
                authority: Some("new.example".into()),
                port: Some(8443),
                from_request_port: false,
                scheme: Some("https".into()),
                code,
            })
        );
    }
    let err = parse_document(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: shop}
spec:
  rules:
  - filters: [{type: RequestRedirect, requestRedirect: {statusCode: 304}}]
",
        &super::mesh(),
    )
    .unwrap_err();
    assert_eq!(
        err.field,
        "spec.rules[0].filters[0].requestRedirect.statusCode"
    );
}

/// What the API's validation refuses in a redirect or a retry is refused by field: a prefix
/// replacement without exactly one `PathPrefix` match (it would take the whole path), a
/// scheme other than http/https, negative attempts, a code outside 400-599. Zero attempts is
/// valid: no retries.
#[test]
fn invalid_redirects_and_retries_are_refused_by_field() {
    let rule = |body: &str| {
        parse_document(
            &format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: r, namespace: shop}}\nspec:\n  rules:\n  - {body}\n"
            ),
            &super::mesh(),
        )
    };
    let prefix = "filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /b}}}]";
    let rewrite = "filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /b}}}]";
    for body in [
        format!("matches: [{{path: {{type: Exact, value: /a}}}}]\n    {prefix}"),
        format!("matches: [{{path: {{value: /a}}}}, {{path: {{value: /c}}}}]\n    {rewrite}"),
    ] {
        let err = rule(&body).unwrap_err();
        assert_eq!(err.field, "spec.rules[0].filters[0]", "{body}: {err:?}");
    }
    assert!(rule(&format!("matches: [{{path: {{value: /a}}}}]\n    {prefix}")).is_ok());
    assert!(rule(prefix).is_ok(), "no match: the default PathPrefix /");
    let err =
        rule("filters: [{type: RequestRedirect, requestRedirect: {scheme: ftp}}]").unwrap_err();
    assert_eq!(err.field, "spec.rules[0].filters[0].requestRedirect.scheme");
    let err = rule("retry: {attempts: -1}").unwrap_err();
    assert_eq!(err.field, "spec.rules[0].retry.attempts");
    assert!(rule("retry: {attempts: 0}").is_ok());
    let err = rule("retry: {codes: [503, 600]}").unwrap_err();
    assert_eq!(err.field, "spec.rules[0].retry.codes[1]");
    let err = rule("retry: {backoff: soon}").unwrap_err();
    assert_eq!(err.field, "spec.rules[0].retry.backoff");
}

/// The CORS filter becomes the route's CORS policy (`*` any origin, a wildcard host a
/// pattern); `timeouts.backendRequest` alone is the route's timeout.
#[test]
fn cors_and_backend_timeouts_are_read() {
    let p = parse(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: shop}
spec:
  rules:
  - filters:
    - type: CORS
      cors:
        allowOrigins: [\"https://shop.example\", \"https://*.shop.example\"]
        allowMethods: [GET, POST]
        allowHeaders: [x-shop]
        exposeHeaders: [x-trace]
        allowCredentials: true
        maxAge: 600
    timeouts: {backendRequest: 2s}
    backendRefs: [{name: web, port: 80}]
",
    );
    assert!(fields(&p, Level::Error).is_empty(), "{:?}", p.findings);
    let GatewayApiObject::HttpRoute(r) = object(&p) else {
        panic!()
    };
    let t = &r.rules[0].template;
    let cors = t.cors.as_deref().expect("a CORS policy");
    assert_eq!(
        cors.allow_origins,
        [
            StringMatch::Exact("https://shop.example".into()),
            StringMatch::Regex("https://[A-Za-z0-9.-]+\\.shop\\.example".into()),
        ]
    );
    // The wildcard takes any number of labels to its left (Envoy matches the whole origin),
    // and nothing else.
    let StringMatch::Regex(pattern) = &cors.allow_origins[1] else {
        panic!()
    };
    let whole = regex::Regex::new(&format!("^(?:{pattern})$")).expect("a regex");
    assert!(whole.is_match("https://www.shop.example"));
    assert!(whole.is_match("https://a.b.shop.example"));
    assert!(!whole.is_match("https://shop.example"));
    assert!(!whole.is_match("http://www.shop.example"));
    assert!(!whole.is_match("https://evil.example:8443/x.shop.example"));
    assert_eq!(cors.max_age_s, Some(600));
    assert_eq!(cors.allow_credentials, Some(true));
    assert_eq!(t.timeout_ms, Some(2000));
    assert!(t.direct_response.is_none());
}

/// Both timeouts without a retry: the route's timeout is the smaller (each attempt within
/// `backendRequest`, the whole within `request`), `0s` meaning none; with a retry,
/// `backendRequest` is each attempt's and `request` the whole's.
#[test]
fn request_and_backend_timeouts_both_hold() {
    let timeouts = |lines: &str| {
        let p = parse(&format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: shop}}
spec:
  rules:
  - {lines}
    backendRefs: [{{name: web, port: 80}}]
"
        ));
        assert!(fields(&p, Level::Warning).is_empty(), "{:?}", p.findings);
        let GatewayApiObject::HttpRoute(r) = object(&p) else {
            panic!()
        };
        let t = &r.rules[0].template;
        (
            t.timeout_ms,
            t.retries.as_ref().and_then(|r| r.per_try_timeout_ms),
        )
    };
    let both = "timeouts: {request: 10s, backendRequest: 2s}";
    assert_eq!(timeouts(both), (Some(2000), None));
    assert_eq!(
        timeouts("timeouts: {request: 1s, backendRequest: 2s}"),
        (Some(1000), None)
    );
    assert_eq!(
        timeouts("timeouts: {request: 0s, backendRequest: 2s}"),
        (Some(2000), None)
    );
    assert_eq!(
        timeouts("timeouts: {request: 3s, backendRequest: 0s}"),
        (Some(3000), None)
    );
    assert_eq!(
        timeouts(&format!("{both}\n    retry: {{attempts: 2}}")),
        (Some(10000), Some(2000))
    );
}

/// Listeners that conflict with an earlier one are left out with the spec's reason: a port
/// another protocol holds, the same port and hostname twice, two TCP listeners on a port;
/// HTTPS and TLS share a port by hostname.
#[test]
fn conflicting_listeners_are_left_out_with_the_reason() {
    let p = parse(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec:
  gatewayClassName: istio
  listeners:
  - {name: a, port: 80, protocol: HTTP, hostname: a.example}
  - {name: b, port: 80, protocol: HTTP, hostname: b.example}
  - {name: a-again, port: 80, protocol: HTTP, hostname: a.example}
  - {name: raw, port: 80, protocol: TCP}
  - {name: db, port: 5432, protocol: TCP}
  - {name: db-too, port: 5432, protocol: TCP}
  - {name: s, port: 443, protocol: HTTPS, hostname: s.example, tls: {certificateRefs: [{name: c}]}}
  - {name: t, port: 443, protocol: TLS, hostname: t.example, tls: {mode: Passthrough}}
",
    );
    let GatewayApiObject::Gateway(g) = object(&p) else {
        panic!()
    };
    let kept: Vec<&str> = g.listeners.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(kept, ["a", "b", "db", "s", "t"]);
    let refused: Vec<(&str, &str)> = g
        .refused
        .iter()
        .map(|r| (r.name.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        refused,
        [
            ("a-again", "HostnameConflict"),
            ("raw", "ProtocolConflict"),
            ("db-too", "HostnameConflict"),
        ]
    );
    assert_eq!(
        fields(&p, Level::Error),
        [
            "spec.listeners[2]",
            "spec.listeners[3]",
            "spec.listeners[5]"
        ]
    );
}

/// What would be served more widely than written is not: a Service parent naming a port by
/// `sectionName` is left out (an error naming it); a listener's certificates past the first
/// are said not to be served.
#[test]
fn restrictions_not_read_are_named_and_fail_closed() {
    let p = parse(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: shop}
spec:
  parentRefs: [{group: \"\", kind: Service, name: cart, sectionName: http}]
  rules: [{backendRefs: [{name: cart, port: 80}]}]
",
    );
    let GatewayApiObject::HttpRoute(r) = object(&p) else {
        panic!()
    };
    assert!(r.parents.is_empty(), "{:?}", r.parents);
    assert_eq!(fields(&p, Level::Error), ["spec.parentRefs[0].sectionName"]);
    let two = parse(&GATEWAY.replace(
        "certificateRefs: [{name: shop-cert}]",
        "certificateRefs: [{name: shop-cert}, {name: shop-ecdsa}]",
    ));
    assert_eq!(
        fields(&two, Level::Warning),
        ["spec.listeners[1].tls.certificateRefs"]
    );
}

/// A rule's filters become its route's edits as the VirtualService has them: request and
/// response header modifiers (names lower-cased), a backend's own response header modifier
/// on that destination only, a hostname and full-path rewrite, a mirror to a Service of the
/// route's namespace at its percentage.
#[test]
fn header_modifiers_rewrites_and_mirrors_are_read() {
    let p = parse(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cart, namespace: shop}
spec:
  parentRefs: [{name: shop-gateway}]
  rules:
  - filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Set, value: '1'}]
        add: [{name: X-Add, value: '2'}]
        remove: [X-Gone]
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set: [{name: X-Served-By, value: cart}]
    - type: URLRewrite
      urlRewrite:
        hostname: cart.internal
        path: {type: ReplaceFullPath, replaceFullPath: /v2/cart}
    - type: RequestMirror
      requestMirror:
        backendRef: {name: cart-shadow, port: 8080}
        percent: 25
    backendRefs:
    - name: cart
      port: 8080
      filters:
      - type: ResponseHeaderModifier
        responseHeaderModifier:
          add: [{name: X-Backend, value: cart}]
",
    );
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let GatewayApiObject::HttpRoute(r) = object(&p) else {
        panic!()
    };
    let rule = &r.rules[0];
    let t = &rule.template;
    let req = &t.headers.request;
    assert_eq!(req.set.get("x-set").map(String::as_str), Some("1"));
    assert_eq!(req.add.get("x-add").map(String::as_str), Some("2"));
    assert_eq!(req.remove, ["x-gone"]);
    assert_eq!(
        t.headers
            .response
            .set
            .get("x-served-by")
            .map(String::as_str),
        Some("cart")
    );
    let rw = t.rewrite.as_ref().expect("a rewrite");
    assert_eq!(rw.authority.as_deref(), Some("cart.internal"));
    assert_eq!(rw.uri_regex, Some(("^.*$".into(), "/v2/cart".into())));
    assert_eq!(rw.uri, None);
    assert_eq!(t.mirrors.len(), 1);
    let mirror = &t.mirrors[0];
    assert_eq!(
        mirror.destination.host,
        "cart-shadow.shop.svc.cluster.local"
    );
    assert_eq!(mirror.destination.port, Some(8080));
    assert_eq!(mirror.fraction, Some(250_000));
    // The backend's own modifier: on its destination, not the route's.
    let b = &rule.backends[0];
    assert_eq!(
        b.headers.response.add.get("x-backend").map(String::as_str),
        Some("cart")
    );
    assert!(!t.headers.response.add.contains_key("x-backend"));
}

const POLICY: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: tls, namespace: shop, creationTimestamp: '2026-01-01T00:00:00Z'}
spec:
  targetRefs:
  - {group: '', kind: Service, name: cart, sectionName: https}
  validation:
    caCertificateRefs: [{group: '', kind: ConfigMap, name: cart-ca}]
    hostname: cart.shop.example
    subjectAltNames:
    - {type: Hostname, hostname: cart.example}
    - {type: URI, uri: 'spiffe://shop/cart'}
  options: {example.com/cipher: x}
";

/// A BackendTLSPolicy is read with its targets, CA references, hostname and names; its
/// options are said by key; what the spec's validation refuses names the field.
#[test]
fn backend_tls_policies_are_read_and_invalid_ones_name_the_field() {
    let p = parse(POLICY);
    assert_eq!(p.key.kind, Kind::BackendTlsPolicy);
    let GatewayApiObject::BackendTlsPolicy(b) = object(&p) else {
        panic!()
    };
    assert_eq!(b.created, "2026-01-01T00:00:00Z");
    assert_eq!(b.targets[0].section.as_deref(), Some("https"));
    assert!(b.targets[0].is_service());
    assert_eq!(b.ca_refs[0].name, "cart-ca");
    assert_eq!(b.hostname, "cart.shop.example");
    assert_eq!(b.subject_alt_names, ["cart.example", "spiffe://shop/cart"]);
    assert!(!b.system_ca && b.invalid.is_none());
    assert_eq!(
        fields(&p, Level::Warning),
        ["spec.options.example.com/cipher"]
    );
    let system = POLICY.replace(
        "caCertificateRefs: [{group: '', kind: ConfigMap, name: cart-ca}]",
        "wellKnownCACertificates: System",
    );
    let GatewayApiObject::BackendTlsPolicy(b) = object(&parse(&system)).clone() else {
        panic!()
    };
    assert!(b.system_ca && b.ca_refs.is_empty());
    let vendor = system.replace("System", "vendor.example/roots");
    let GatewayApiObject::BackendTlsPolicy(b) = object(&parse(&vendor)).clone() else {
        panic!()
    };
    assert!(b
        .invalid
        .as_deref()
        .is_some_and(|w| w.contains("vendor.example/roots")));
    for (edit, field) in [
        (
            POLICY.replace("  - {group: '', kind: Service, name: cart, sectionName: https}\n", ""),
            "spec.targetRefs",
        ),
        (
            POLICY.replace(
                "  - {group: '', kind: Service, name: cart, sectionName: https}\n",
                "  - {group: '', kind: Service, name: cart}\n  - {group: '', kind: Service, name: cart, sectionName: https}\n",
            ),
            "spec.targetRefs[0].sectionName",
        ),
        (
            POLICY.replace("hostname: cart.shop.example", "hostname: '*.shop.example'"),
            "spec.validation.hostname",
        ),
        (
            POLICY.replace(
                "    hostname: cart.shop.example\n",
                "    hostname: cart.shop.example\n    wellKnownCACertificates: System\n",
            ),
            "spec.validation",
        ),
        (
            POLICY.replace("{type: URI, uri: 'spiffe://shop/cart'}", "{type: URI, hostname: x.example}"),
            "spec.validation.subjectAltNames[1]",
        ),
        (
            POLICY.replace("{type: Hostname, hostname: cart.example}", "{type: IP, hostname: cart.example}"),
            "spec.validation.subjectAltNames[0].type",
        ),
    ] {
        let err = parse_document(&edit, &super::mesh()).unwrap_err();
        assert_eq!(err.field, field, "{edit}");
    }
}

/// A ConfigMap is read for its `ca.crt` alone: PEM certificates that parse, or why not.
#[test]
fn config_maps_are_read_as_ca_bundles() {
    let kp = rcgen::KeyPair::generate().expect("a key");
    let pem = rcgen::CertificateParams::new(vec!["ca.example".into()])
        .expect("params")
        .self_signed(&kp)
        .expect("a certificate")
        .pem();
    let indented: String = pem.lines().map(|l| format!("    {l}\n")).collect();
    let cm = |data: &str| {
        let p = parse(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ca, namespace: shop}}\n{data}"
        ));
        match object(&p) {
            GatewayApiObject::ConfigMap(c) => (c.ca.clone(), c.problem.clone()),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        cm(&format!("data:\n  ca.crt: |\n{indented}")),
        (Some(pem), None)
    );
    assert_eq!(
        cm("data: {other: x}\n"),
        (None, Some("has no ca.crt".into()))
    );
    assert_eq!(
        cm("data: {ca.crt: ''}\n"),
        (None, Some("has an empty ca.crt".into()))
    );
    let (ca, problem) = cm("data: {ca.crt: not a certificate}\n");
    assert!(ca.is_none() && problem.is_some_and(|p| p.contains("ca.crt")));
}

const LISTENER_SET: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: team, namespace: apps, creationTimestamp: '2026-01-01T00:00:00Z'}
spec:
  parentRef: {name: shop-gateway, namespace: shop}
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    hostname: team.example
  - name: https
    port: 443
    protocol: HTTPS
    hostname: team.example
    tls:
      certificateRefs: [{name: team-cert}]
  - name: udp
    port: 53
    protocol: UDP
";

/// A ListenerSet is read with the Gateway it names (of its own namespace unless it says)
/// and its listeners as a Gateway's are (certificates of its namespace unless they say,
/// a protocol meshflow does not serve left out by field); a parent of another kind, or no
/// listener, names the field. A Gateway's `allowedListeners` is read, `None` when unset.
#[test]
fn listener_sets_and_allowed_listeners_are_read() {
    let p = parse(LISTENER_SET);
    assert_eq!(p.key.kind, Kind::ListenerSet);
    let GatewayApiObject::ListenerSet(s) = object(&p) else {
        panic!()
    };
    assert_eq!(s.parent, ("shop".to_string(), "shop-gateway".to_string()));
    assert_eq!(s.created, "2026-01-01T00:00:00Z");
    let names: Vec<&str> = s.listeners.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["http", "https"]);
    assert_eq!(
        s.listeners[1].tls.as_ref().map(|t| t.certificates.clone()),
        Some(vec![("apps".to_string(), "team-cert".to_string())])
    );
    assert_eq!(s.refused[0].reason, "UnsupportedProtocol");
    assert_eq!(fields(&p, Level::Error), ["spec.listeners[2].protocol"]);
    let local = LISTENER_SET.replace("{name: shop-gateway, namespace: shop}", "{name: gw}");
    let GatewayApiObject::ListenerSet(s) = object(&parse(&local)).clone() else {
        panic!()
    };
    assert_eq!(s.parent, ("apps".to_string(), "gw".to_string()));
    for (edit, field) in [
        (
            LISTENER_SET.replace(
                "{name: shop-gateway, namespace: shop}",
                "{name: x, kind: Service, group: ''}",
            ),
            "spec.parentRef",
        ),
        (
            LISTENER_SET[..LISTENER_SET.find("  listeners:").unwrap_or(0)].to_string(),
            "spec.listeners",
        ),
        (
            LISTENER_SET.replace("port: 80\n", "port: 0\n"),
            "spec.listeners[0].port",
        ),
    ] {
        let err = parse_document(&edit, &super::mesh()).unwrap_err();
        assert_eq!(err.field, field, "{edit}");
    }

    let GatewayApiObject::Gateway(g) = object(&parse(GATEWAY)).clone() else {
        panic!()
    };
    assert_eq!(g.allowed_listeners, AllowedListeners::None);
    let gateway = |allowed: &str| {
        GATEWAY.replace(
            "  gatewayClassName: istio\n",
            &format!("  gatewayClassName: istio\n  allowedListeners: {allowed}\n"),
        )
    };
    for (allowed, want) in [
        ("{namespaces: {from: All}}", AllowedListeners::All),
        ("{namespaces: {from: Same}}", AllowedListeners::Same),
        ("{namespaces: {from: None}}", AllowedListeners::None),
        (
            "{namespaces: {from: Selector, selector: {matchLabels: {team: a}}}}",
            AllowedListeners::Selector(NamespaceSelector {
                match_labels: [("team".to_string(), "a".to_string())].into(),
                expressions: Vec::new(),
            }),
        ),
    ] {
        let GatewayApiObject::Gateway(g) = object(&parse(&gateway(allowed))).clone() else {
            panic!()
        };
        assert_eq!(g.allowed_listeners, want, "{allowed}");
        assert!(
            g.sets.is_empty(),
            "filled where the Gateway meets its sets only"
        );
    }
    for (allowed, field) in [
        (
            "{namespaces: {from: Some}}",
            "spec.allowedListeners.namespaces.from",
        ),
        (
            "{namespaces: {from: Selector}}",
            "spec.allowedListeners.namespaces.selector",
        ),
    ] {
        let err = parse_document(&gateway(allowed), &super::mesh()).unwrap_err();
        assert_eq!(err.field, field, "{allowed}");
    }
}

/// A `URLRewrite` or `RequestRedirect` on a rule's one backend is the rule's (no finding);
/// on one of two backends, or beside a rule filter of its type, it cannot be applied to
/// that backend alone: an error names it and that backend is left out; a
/// `ReplacePrefixMatch` on the one backend still needs the rule's one `PathPrefix` match.
#[test]
fn a_rules_one_backend_redirects_and_rewrites_for_it() {
    let route = |rule: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: shop}}
spec:
  rules:
  - {rule}
"
        )
    };
    let rewrite = "{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /new}}}";
    let redirect =
        "{type: RequestRedirect, requestRedirect: {statusCode: 301, hostname: example.org}}";
    let one = parse(&route(&format!(
        "matches: [{{path: {{type: PathPrefix, value: /old}}}}]
    backendRefs: [{{name: web, port: 80, filters: [{rewrite}]}}]"
    )));
    assert!(one.findings.is_empty(), "{:?}", one.findings);
    let GatewayApiObject::HttpRoute(r) = object(&one) else {
        panic!()
    };
    assert_eq!(
        r.rules[0]
            .template
            .rewrite
            .as_ref()
            .and_then(|w| w.uri.as_deref()),
        Some("/new")
    );
    assert!(
        r.rules[0].backends[0].host.is_some(),
        "the backend is routed to"
    );
    let redirected = parse(&route(&format!(
        "backendRefs: [{{name: web, port: 80, filters: [{redirect}]}}]"
    )));
    assert!(redirected.findings.is_empty(), "{:?}", redirected.findings);
    let GatewayApiObject::HttpRoute(r) = object(&redirected) else {
        panic!()
    };
    let to = r.rules[0]
        .template
        .redirect
        .as_ref()
        .expect("the rule redirects");
    assert_eq!(to.authority.as_deref(), Some("example.org"));

    for (rule, field) in [
        (
            format!(
                "backendRefs: [{{name: web, port: 80}}, {{name: api, port: 80, filters: [{redirect}]}}]"
            ),
            "spec.rules[0].backendRefs[1].filters[0]",
        ),
        (
            format!(
                "filters: [{redirect}]\n    backendRefs: [{{name: web, port: 80, filters: [{redirect}]}}]"
            ),
            "spec.rules[0].backendRefs[0].filters[0]",
        ),
    ] {
        let p = parse(&route(&rule));
        assert_eq!(fields(&p, Level::Error), [field], "{rule}");
        let GatewayApiObject::HttpRoute(r) = object(&p) else {
            panic!()
        };
        let left_out = r.rules[0].backends.last().expect("a backend");
        assert!(left_out.host.is_none(), "{rule}: not routed to");
    }
    let err = parse_document(
        &route(&format!(
            "matches: [{{path: {{type: Exact, value: /old}}}}]
    backendRefs: [{{name: web, port: 80, filters: [{rewrite}]}}]"
        )),
        &super::mesh(),
    )
    .unwrap_err();
    assert_eq!(err.field, "spec.rules[0].backendRefs[0].filters[0]");
}
