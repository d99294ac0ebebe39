//! The Gateway API's redirects, retries and per-backend filters at a gateway, through the
//! generated config, as the conformance suite's traffic cases expect them:
//! HTTPRouteRedirectPortAndScheme (the location's port derived from the scheme and the
//! listener, a scheme's own port left out), HTTPRouteRedirectPath (`ReplacePrefixMatch` and
//! `ReplaceFullPath`), HTTPRouteRetry (codes, attempts, backoff, the backend request's
//! timeout per attempt), HTTPRouteRequestHeaderModifierBackendWeights (each backend's own
//! header edit travels with it) and HTTPRouteRequestMultipleMirrors.

use crate::fixtures::{gateway_api_proxy, header_values, reviews_mesh, RATINGS};
use crate::support;
use crate::support::write_config;
use crate::Mesh;
use dataflows::simulate::{Action, Call, HeaderOp, Outcome};
use std::time::Duration;

/// A redirect rule per case, named by its path: `/scheme-<s|nil>-and-port-<p|nil>`.
fn redirect_rules(cases: &[(Option<&str>, Option<u16>)]) -> String {
    cases
        .iter()
        .map(|(scheme, port)| {
            let path = format!(
                "/scheme-{}-and-port-{}",
                scheme.unwrap_or("nil"),
                port.map_or("nil".to_string(), |p| p.to_string())
            );
            let mut fields = vec!["hostname: example.org".to_string()];
            fields.extend(scheme.map(|s| format!("scheme: {s}")));
            fields.extend(port.map(|p| format!("port: {p}")));
            format!(
                "  - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n    filters: [{{type: RequestRedirect, requestRedirect: {{{}}}}}]\n",
                fields.join(", ")
            )
        })
        .collect()
}

fn route(name: &str, section: &str, rules: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  parentRefs: [{{name: gw, sectionName: {section}}}]\n  rules:\n{rules}"
    )
}

/// The redirect's scheme and port as the location will carry them (`None`: the request's
/// scheme; no port).
fn scheme_and_port(o: &Outcome) -> (Option<String>, Option<u32>) {
    match &o.result {
        Ok(Action::Redirect {
            scheme, host, port, ..
        }) => {
            assert_eq!(host.as_deref(), Some("example.org"), "{o:#?}");
            (scheme.clone(), *port)
        }
        other => panic!("not a redirect: {other:?}"),
    }
}

#[test]
fn gateway_api_redirects_retries_and_backend_filters_as_the_conformance_cases_expect() {
    use base64::Engine;
    let mut mesh = Mesh::new("gateway-api-filters");
    let _reviews = reviews_mesh(&mesh, 9080, &["v1"]);
    let ca = support::pki::ca("gateway-api-ca");
    let (cert, key) = support::pki::leaf(&ca, &["example.org"], None);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let none: Option<&str> = None;
    let (http, https) = (Some("http"), Some("https"));
    let mut config = vec![
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: gw-cert, namespace: default}}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n",
            b64(&cert),
            b64(&key)
        ),
        RATINGS.to_string(),
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: 80, protocol: HTTP}
  - {name: http-8080, port: 8080, protocol: HTTP}
  - name: https
    port: 443
    protocol: HTTPS
    tls: {mode: Terminate, certificateRefs: [{name: gw-cert}]}
"
        .to_string(),
    ];
    let on_80 = redirect_rules(&[
        (none, None),
        (none, Some(80)),
        (none, Some(8080)),
        (https, None),
        (https, Some(443)),
        (https, Some(8443)),
    ]);
    let more_on_80 = "  - matches: [{path: {type: PathPrefix, value: /original-prefix}}]
    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}}}]
  - matches: [{path: {type: PathPrefix, value: /full}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 301, path: {type: ReplaceFullPath, replaceFullPath: /full-path-replacement}}}]
  - matches: [{path: {type: PathPrefix, value: /retry}}]
    retry: {codes: [500, 502], attempts: 3, backoff: 100ms}
    timeouts: {request: 10s, backendRequest: 2s}
    backendRefs: [{name: reviews, port: 9080}]
  - matches: [{path: {type: PathPrefix, value: /backends}}]
    backendRefs:
    - name: reviews
      port: 9080
      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: Backend, value: reviews}]}}]
    - name: ratings
      port: 9080
      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: Backend, value: ratings}]}}]
  - matches: [{path: {type: PathPrefix, value: /mirrors}}]
    filters:
    - {type: RequestMirror, requestMirror: {backendRef: {name: ratings, port: 9080}}}
    - {type: RequestMirror, requestMirror: {backendRef: {name: reviews, port: 9080}, percent: 50}}
    backendRefs: [{name: reviews, port: 9080}]
";
    config.push(route("on-80", "http", &format!("{on_80}{more_on_80}")));
    config.push(route(
        "on-8080",
        "http-8080",
        &redirect_rules(&[(none, None), (none, Some(80)), (https, None)]),
    ));
    config.push(route(
        "on-443",
        "https",
        &redirect_rules(&[
            (none, None),
            (none, Some(443)),
            (none, Some(8443)),
            (http, None),
            (http, Some(80)),
            (http, Some(8080)),
        ]),
    ));
    write_config(&mesh.config, "gateway-api.yaml", &config.join("---\n"));
    let gateway = gateway_api_proxy(&mut mesh, "gw");

    // HTTPRouteRedirectPortAndScheme: (listener port, path) → the location's scheme and port.
    let s = |s: &str| Some(s.to_string());
    let cases: [(u16, &str, (Option<String>, Option<u32>)); 15] = [
        (80, "/scheme-nil-and-port-nil", (None, None)),
        (80, "/scheme-nil-and-port-80", (None, None)),
        (80, "/scheme-nil-and-port-8080", (None, Some(8080))),
        (80, "/scheme-https-and-port-nil", (s("https"), None)),
        (80, "/scheme-https-and-port-443", (s("https"), None)),
        (80, "/scheme-https-and-port-8443", (s("https"), Some(8443))),
        (8080, "/scheme-nil-and-port-nil", (None, Some(8080))),
        (8080, "/scheme-nil-and-port-80", (None, None)),
        (8080, "/scheme-https-and-port-nil", (s("https"), None)),
        (443, "/scheme-nil-and-port-nil", (None, None)),
        (443, "/scheme-nil-and-port-443", (None, None)),
        (443, "/scheme-nil-and-port-8443", (None, Some(8443))),
        (443, "/scheme-http-and-port-nil", (s("http"), None)),
        (443, "/scheme-http-and-port-80", (s("http"), None)),
        (443, "/scheme-http-and-port-8080", (s("http"), Some(8080))),
    ];
    for (port, path, want) in cases {
        let call = if port == 443 {
            Call::https("example.org", 443, path, "example.org")
        } else {
            Call::get("example.org", port, path)
        };
        let o = mesh.send(&gateway, &call.to_address("127.0.0.1"));
        assert_eq!(scheme_and_port(&o), want, "{port} {path}: {o:#?}");
    }

    let to = |path: &str| Call::get("example.org", 80, path).to_address("127.0.0.1");
    // HTTPRouteRedirectPath: the matched prefix replaced, or the whole path.
    match mesh.send(&gateway, &to("/original-prefix/lemon")).result {
        Ok(Action::Redirect {
            status,
            path,
            prefix,
            ..
        }) => {
            assert_eq!(status, 302);
            assert_eq!(path, None);
            assert_eq!(prefix.as_deref(), Some("/replacement-prefix"));
        }
        other => panic!("not a redirect: {other:?}"),
    }
    match mesh.send(&gateway, &to("/full/path/original")).result {
        Ok(Action::Redirect {
            status,
            path,
            prefix,
            ..
        }) => {
            assert_eq!(status, 301);
            assert_eq!(path.as_deref(), Some("/full-path-replacement"));
            assert_eq!(prefix, None);
        }
        other => panic!("not a redirect: {other:?}"),
    }

    // HTTPRouteRetry: connection errors and the codes, three attempts 100 ms apart, each
    // bounded by the backend request's timeout; the request's bounds them all.
    match mesh.send(&gateway, &to("/retry")).result {
        Ok(Action::Route { retry, timeout, .. }) => {
            let retry = retry.expect("a retry policy");
            assert_eq!(
                retry.retry_on,
                "connect-failure,refused-stream,unavailable,cancelled,reset,retriable-status-codes"
            );
            assert_eq!(retry.retriable_status_codes, [500, 502]);
            assert_eq!(retry.num_retries, 3);
            assert_eq!(retry.backoff, Some(Duration::from_millis(100)));
            assert_eq!(retry.per_try_timeout, Some(Duration::from_secs(2)));
            assert_eq!(timeout, Some(Duration::from_secs(10)));
        }
        other => panic!("not routed: {other:?}"),
    }

    // HTTPRouteRequestHeaderModifierBackendWeights: the header names the backend picked.
    match mesh.send(&gateway, &to("/backends")).result {
        Ok(Action::Route { upstreams, .. }) => {
            assert_eq!(upstreams.len(), 2, "{upstreams:#?}");
            for up in &upstreams {
                let name = if up.cluster.contains("ratings") {
                    "ratings"
                } else {
                    "reviews"
                };
                let edits: Vec<_> = up
                    .request_headers
                    .iter()
                    .map(|e| (e.op, e.name.as_str(), e.value.as_str()))
                    .collect();
                assert_eq!(edits, [(HeaderOp::Set, "backend", name)], "{up:#?}");
            }
        }
        other => panic!("not routed: {other:?}"),
    }

    // HTTPRouteRequestMultipleMirrors: both mirrors, the second to half the requests.
    let o = mesh.send(&gateway, &to("/mirrors"));
    let mirrors = o.http.clone().expect("a matched route's effects").mirrors;
    assert_eq!(mirrors.len(), 2, "{mirrors:#?}");
    assert!(mirrors.iter().all(|m| m.cluster_found), "{mirrors:#?}");
    assert!(mirrors[0].cluster.contains("ratings"), "{mirrors:#?}");
    assert!(mirrors[1].cluster.contains("reviews"), "{mirrors:#?}");
    assert_eq!(
        (mirrors[0].per_million, mirrors[1].per_million),
        (1_000_000, 500_000)
    );
    mesh.assert_no_errors();
}

/// A Gateway with one HTTP listener and a GRPCRoute on it: a header modifier on one method,
/// weighted backends on another.
const GRPC_ROUTES: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 8080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: echo, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [grpc.example]
  rules:
  - matches: [{method: {service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: Echo}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Header-Set, value: set-overwrites-values}]
        add: [{name: X-Header-Add, value: add-appends-values}]
        remove: [X-Header-Remove]
    backendRefs: [{name: reviews, port: 9080}]
  - matches: [{method: {service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: EchoTwo}}]
    backendRefs:
    - {name: reviews, port: 9080, weight: 70}
    - {name: ratings, port: 9080, weight: 30}
";

/// GRPCRouteRequestHeaderModifier and GRPCRouteWeight through the route table: a GRPCRoute's
/// method match takes the call's `/Service/Method` path, its header modifier edits the
/// metadata the backend receives (set overwrites, add appends, remove deletes), and its
/// weighted backends are weighted clusters.
#[test]
fn grpc_route_header_modifiers_and_weights_through_the_route_table() {
    let mut mesh = Mesh::new("gateway-api-grpc");
    let _reviews = reviews_mesh(&mesh, 9080, &["v1"]);
    write_config(
        &mesh.config,
        "grpc.yaml",
        &format!("{RATINGS}---\n{GRPC_ROUTES}"),
    );
    let gateway = gateway_api_proxy(&mut mesh, "gw");
    let call = |method: &str| {
        Call::get(
            "grpc.example",
            8080,
            &format!("/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho/{method}"),
        )
        .method("POST")
        .header("content-type", "application/grpc")
        .to_address("127.0.0.1")
    };
    let o = mesh.send(
        &gateway,
        &call("Echo")
            .header("x-header-set", "original")
            .header("x-header-add", "first")
            .header("x-header-remove", "gone"),
    );
    let up = o
        .http
        .clone()
        .expect("a matched route's effects")
        .upstream_headers;
    let values = |name: &str| header_values(&up, name);
    assert_eq!(values("x-header-set"), ["set-overwrites-values"], "{up:?}");
    assert_eq!(
        values("x-header-add"),
        ["first", "add-appends-values"],
        "{up:?}"
    );
    assert!(values("x-header-remove").is_empty(), "{up:?}");
    match mesh.send(&gateway, &call("EchoTwo")).result {
        Ok(Action::Route { upstreams, .. }) => {
            let weights: Vec<(bool, Option<u32>)> = upstreams
                .iter()
                .map(|u| (u.cluster.contains("ratings"), u.weight))
                .collect();
            assert_eq!(
                weights,
                [(false, Some(70)), (true, Some(30))],
                "{upstreams:#?}"
            );
        }
        other => panic!("not routed: {other:?}"),
    }
    // A method the route does not take: no route (the gateway answers 404).
    assert!(mesh.send(&gateway, &call("EchoThree")).result.is_err());
    mesh.assert_no_errors();
}

/// Three Services the listener and gateway cases route to, by version.
const BACKENDS: &str = "apiVersion: v1
kind: Service
metadata: {name: infra-backend-v1, namespace: default}
spec: {ports: [{name: http, port: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: infra-backend-v2, namespace: default}
spec: {ports: [{name: http, port: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: infra-backend-v3, namespace: default}
spec: {ports: [{name: http, port: 8080}]}
";

/// An HTTPRoute `name` with parents `parents` (flow YAML) and one rule to `backend`.
fn backend_route(name: &str, parents: &str, path: &str, backend: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  parentRefs: {parents}\n  rules:\n  - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n    backendRefs: [{{name: {backend}, port: 8080}}]\n"
    )
}

/// Which of the three backends a call reached (`None`: not routed).
fn version_of(o: &Outcome) -> Option<&'static str> {
    let cluster = o.cluster()?;
    ["v1", "v2", "v3"]
        .into_iter()
        .find(|v| cluster.contains(&format!("infra-backend-{v}.")))
}

/// HTTPRouteListenerHostnameMatching: listeners on one port for `bar.com`, `foo.bar.com`,
/// `*.bar.com` and `*.foo.com`, each with its route by sectionName: a host is served by the
/// most specific listener that matches it, and a host no listener matches is not routed —
/// for HTTPRoutes, and for GRPCRoutes (GRPCRouteListenerHostnameMatching).
/// HTTPRouteMultipleGateways: a route parented to two Gateways answers through both, each
/// Gateway's own route through it alone. HTTPRouteListenerPortMatching: routes naming a
/// listener by port, on listeners of 80 and 8090 for `foo.com` and 8080 for any host.
#[test]
fn listener_hostnames_and_multiple_gateways_as_the_conformance_cases_expect() {
    let mut mesh = Mesh::new("gateway-api-listeners");
    let gateway = |name: &str, listeners: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  gatewayClassName: istio\n  listeners:\n{listeners}"
        )
    };
    // The four listeners of the hostname cases, on `port`.
    let four = |port: u16| {
        format!(
            "  - {{name: bar, port: {port}, protocol: HTTP, hostname: bar.com}}
  - {{name: foo-bar, port: {port}, protocol: HTTP, hostname: foo.bar.com}}
  - {{name: wildcard-bar, port: {port}, protocol: HTTP, hostname: \"*.bar.com\"}}
  - {{name: wildcard-foo, port: {port}, protocol: HTTP, hostname: \"*.foo.com\"}}
"
        )
    };
    // A GRPCRoute taking every method, to `backend`.
    let grpc_route = |name: &str, parents: &str, backend: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  parentRefs: {parents}\n  rules: [{{backendRefs: [{{name: {backend}, port: 8080}}]}}]\n"
        )
    };
    let docs = [
        BACKENDS.to_string(),
        gateway("hostnames", &four(8080)),
        gateway("grpc-hostnames", &four(8080)),
        grpc_route("grpc-v1", "[{name: grpc-hostnames, sectionName: bar}]", "infra-backend-v1"),
        grpc_route("grpc-v2", "[{name: grpc-hostnames, sectionName: foo-bar}]", "infra-backend-v2"),
        grpc_route(
            "grpc-v3",
            "[{name: grpc-hostnames, sectionName: wildcard-bar}, {name: grpc-hostnames, sectionName: wildcard-foo}]",
            "infra-backend-v3",
        ),
        backend_route("v1", "[{name: hostnames, sectionName: bar}]", "/", "infra-backend-v1"),
        backend_route("v2", "[{name: hostnames, sectionName: foo-bar}]", "/", "infra-backend-v2"),
        backend_route(
            "v3",
            "[{name: hostnames, sectionName: wildcard-bar}, {name: hostnames, sectionName: wildcard-foo}]",
            "/",
            "infra-backend-v3",
        ),
        gateway("gw-a", "  - {name: http, port: 8080, protocol: HTTP}\n"),
        gateway("gw-b", "  - {name: http, port: 8080, protocol: HTTP}\n"),
        backend_route("shared", "[{name: gw-a}, {name: gw-b}]", "/shared", "infra-backend-v1"),
        backend_route("only-a", "[{name: gw-a}]", "/", "infra-backend-v2"),
        backend_route("only-b", "[{name: gw-b}]", "/", "infra-backend-v3"),
        gateway(
            "ports",
            "  - {name: http-80, port: 80, protocol: HTTP, hostname: foo.com}
  - {name: http-8080, port: 8080, protocol: HTTP}
  - {name: http-8090, port: 8090, protocol: HTTP, hostname: foo.com}
",
        ),
        backend_route("port-80", "[{name: ports, port: 80}]", "/", "infra-backend-v1"),
        backend_route("port-8080", "[{name: ports, port: 8080}]", "/", "infra-backend-v2"),
        backend_route("port-8090", "[{name: ports, port: 8090}]", "/", "infra-backend-v3"),
    ];
    write_config(&mesh.config, "listeners.yaml", &docs.join("---\n"));
    let hostnames = gateway_api_proxy(&mut mesh, "hostnames");
    let grpc_hostnames = gateway_api_proxy(&mut mesh, "grpc-hostnames");
    let (a, b) = (
        gateway_api_proxy(&mut mesh, "gw-a"),
        gateway_api_proxy(&mut mesh, "gw-b"),
    );
    let ports = gateway_api_proxy(&mut mesh, "ports");
    let get = |host: &str, path: &str| Call::get(host, 8080, path).to_address("127.0.0.1");

    for (host, want) in [
        ("bar.com", Some("v1")),
        ("foo.bar.com", Some("v2")),
        ("baz.bar.com", Some("v3")),
        ("boo.bar.com", Some("v3")),
        ("multiple.prefixes.bar.com", Some("v3")),
        ("multiple.prefixes.foo.com", Some("v3")),
        ("foo.com", None),
        ("no.matching.host", None),
    ] {
        let o = mesh.send(&hostnames, &get(host, "/"));
        assert_eq!(version_of(&o), want, "{host}: {o:#?}");
        // GRPCRouteListenerHostnameMatching: the same, for a gRPC call by :authority.
        let call = Call::get(
            host,
            8080,
            "/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho/Echo",
        )
        .method("POST")
        .header("content-type", "application/grpc")
        .to_address("127.0.0.1");
        let o = mesh.send(&grpc_hostnames, &call);
        assert_eq!(version_of(&o), want, "gRPC {host}: {o:#?}");
    }

    for (gw, want) in [(&a, "v2"), (&b, "v3")] {
        let o = mesh.send(gw, &get("example.com", "/shared"));
        assert_eq!(version_of(&o), Some("v1"), "{gw}: {o:#?}");
        let o = mesh.send(gw, &get("example.com", "/"));
        assert_eq!(version_of(&o), Some(want), "{gw}: {o:#?}");
    }

    // HTTPRouteListenerPortMatching: a parentRef's port picks the listener.
    for (host, port, want) in [
        ("foo.com", 80, Some("v1")),
        ("foo.com", 8080, Some("v2")),
        ("bar.com", 8080, Some("v2")),
        ("foo.com", 8090, Some("v3")),
        ("bar.com", 8090, None),
    ] {
        let call = Call::get(host, port, "/").to_address("127.0.0.1");
        let o = mesh.send(&ports, &call);
        assert_eq!(version_of(&o), want, "{host}:{port}: {o:#?}");
    }
    mesh.assert_no_errors();
}
