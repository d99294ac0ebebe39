//! The Gateway API at a gateway, through the generated config: requests sent through the
//! listener's route configuration land where the spec says — a segment-wise prefix, the
//! precedence across routes, a redirect, and 500 for a filter meshflow cannot apply and for
//! a backend that does not exist; and the conformance suite's traffic cases that the route
//! table decides alone.

use crate::fixtures::{
    gateway_api_proxy, header_values, pod, reviews_mesh, via_gateway, PORT, RATINGS,
};
use crate::support::write_config;
use crate::{assert_routes_to, assert_status, Mesh};
use dataflows::model::ProxyId;
use dataflows::simulate::{Action, Call, HeaderOp, Outcome};
use std::time::Duration;

const ROUTES: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: older, namespace: default, creationTimestamp: \"2026-01-01T00:00:00Z\"}
spec:
  parentRefs: [{name: gw}]
  hostnames: [shop.example]
  rules:
  - matches: [{path: {type: PathPrefix, value: /reviews}}]
    backendRefs: [{name: reviews, port: 9080}]
  - matches: [{path: {type: Exact, value: /old}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {scheme: https, statusCode: 301, path: {type: ReplaceFullPath, replaceFullPath: /new}}
  - matches: [{path: {type: PathPrefix, value: /ext}}]
    filters: [{type: ExtensionRef, extensionRef: {group: example.io, kind: Auth, name: a}}]
    backendRefs: [{name: reviews, port: 9080}]
  - matches: [{path: {type: PathPrefix, value: /missing}}]
    backendRefs: [{name: nowhere, port: 9080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: newer, namespace: default, creationTimestamp: \"2026-02-01T00:00:00Z\"}
spec:
  parentRefs: [{name: gw}]
  hostnames: [shop.example]
  rules:
  - matches: [{path: {type: Exact, value: /reviews/pinned}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {hostname: pinned.example, statusCode: 302}
";

/// Gateway API Gateway `gw` (class `istio`) with one HTTP listener on [`PORT`] (`extra`:
/// more of the listener's fields), and its deployment's proxy, connected.
fn gateway_api_router(mesh: &mut Mesh, extra: &str) -> ProxyId {
    write_config(
        &mesh.config,
        "gateway.yaml",
        &format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: default}}\nspec:\n  gatewayClassName: istio\n  listeners:\n  - {{name: http, port: {PORT}, protocol: HTTP{extra}}}\n"
        ),
    );
    gateway_api_proxy(mesh, "gw")
}

#[test]
fn gateway_api_routes_land_where_the_spec_says() {
    let mut mesh = Mesh::new("gateway-api");
    let reviews = reviews_mesh(&mesh, 9080, &["v1"]);
    let gateway = gateway_api_router(&mut mesh, ", hostname: \"*.example\"");
    write_config(&mesh.config, "routes.yaml", ROUTES);
    let to = |path: &str| via_gateway("shop.example", path);
    let o = mesh.send(&gateway, &to("/reviews/1"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);
    let o = mesh.send(&gateway, &to("/reviews"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);
    assert_status(&mesh.send(&gateway, &to("/reviewsX")), 404);
    // The newer route's exact match wins over the older route's prefix.
    assert_status(&mesh.send(&gateway, &to("/reviews/pinned")), 302);
    assert_status(&mesh.send(&gateway, &to("/old")), 301);
    assert_status(&mesh.send(&gateway, &to("/ext/a")), 500);
    assert_status(&mesh.send(&gateway, &to("/missing")), 500);
    // A host outside the routes' hostnames: no virtual host.
    assert_status(
        &mesh.send(&gateway, &via_gateway("other.example", "/reviews/1")),
        404,
    );
}

/// Routes of the conformance suite's traffic cases that the route table decides alone.
const CASES: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cases, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [cases.example]
  rules:
  # HTTPRouteMethodMatching, HTTPRouteHeaderMatching and their precedence: a method match
  # outranks header matches, which outrank none.
  - matches: [{path: {type: PathPrefix, value: /match}, headers: [{name: version, value: two}]}]
    backendRefs: [{name: ratings, port: 9080}]
  - matches: [{path: {type: PathPrefix, value: /match}}]
    backendRefs: [{name: reviews, port: 9080}]
  - matches: [{path: {type: PathPrefix, value: /match}, method: POST}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: posted.example, statusCode: 302}}]
  # HTTPRouteQueryParamMatching
  - matches: [{path: {type: Exact, value: /q}, queryParams: [{name: animal, value: whale}]}]
    backendRefs: [{name: ratings, port: 9080}]
  - matches: [{path: {type: Exact, value: /q}}]
    backendRefs: [{name: reviews, port: 9080}]
  # HTTPRouteNoBackendRefs
  - matches: [{path: {type: Exact, value: /none}}]
  # HTTPRouteRewritePath, HTTPRouteRewriteHost
  - matches: [{path: {type: PathPrefix, value: /prefix/one}}]
    filters: [{type: URLRewrite, urlRewrite: {hostname: rewritten.example, path: {type: ReplacePrefixMatch, replacePrefixMatch: /one}}}]
    backendRefs: [{name: reviews, port: 9080}]
  - matches: [{path: {type: PathPrefix, value: /strip-prefix}}]
    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}}]
    backendRefs: [{name: reviews, port: 9080}]
  - matches: [{path: {type: PathPrefix, value: /full}}]
    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /one}}}]
    backendRefs: [{name: reviews, port: 9080}]
  # HTTPRouteRequestHeaderModifier, HTTPRouteResponseHeaderModifier, HTTPRouteRequestMirror
  - matches: [{path: {type: PathPrefix, value: /headers}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Header-Set, value: set-overwrites-values}]
        add: [{name: X-Header-Add, value: add-appends-values}]
        remove: [X-Header-Remove]
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set: [{name: X-Response-Set, value: set}]
        remove: [X-Response-Remove]
    - type: RequestMirror
      requestMirror: {backendRef: {name: ratings, port: 9080}}
    backendRefs: [{name: reviews, port: 9080}]
  # HTTPRouteRequestTimeout, HTTPRouteDisableRequestTimeout
  - matches: [{path: {type: PathPrefix, value: /slow}}]
    timeouts: {request: 500ms}
    backendRefs: [{name: reviews, port: 9080}]
  - matches: [{path: {type: PathPrefix, value: /forever}}]
    timeouts: {request: 0s}
    backendRefs: [{name: reviews, port: 9080}]
";

/// The conformance suite's traffic cases the route table decides, through the generated
/// config: method, header and query-parameter matches in the spec's precedence, a rule
/// without backends answering 500, path and host rewrites, request and response header
/// modifiers, a mirror, and request timeouts (`0s` disables Envoy's default).
#[test]
fn gateway_api_conformance_traffic_cases_through_the_route_table() {
    let mut mesh = Mesh::new("gateway-api-cases");
    let reviews = reviews_mesh(&mesh, 9080, &["v1"]);
    let gateway = gateway_api_router(&mut mesh, "");
    write_config(
        &mesh.config,
        "cases.yaml",
        &format!("{RATINGS}---\n{CASES}"),
    );
    let ratings = "outbound|9080||ratings.default.svc.cluster.local";
    let to = |path: &str| via_gateway("cases.example", path);
    let v1 = [pod(&reviews, "v1")];

    let o = mesh.send(&gateway, &to("/match/a").header("version", "two"));
    assert_eq!(o.cluster(), Some(ratings), "{o:#?}");
    assert_routes_to(
        &mesh.send(&gateway, &to("/match/a")),
        &reviews.cluster(""),
        &v1,
    );
    let o = mesh.send(
        &gateway,
        &to("/match").method("POST").header("version", "two"),
    );
    assert_status(&o, 302);
    let o = mesh.send(&gateway, &to("/q?animal=whale"));
    assert_eq!(o.cluster(), Some(ratings), "{o:#?}");
    let o = mesh.send(&gateway, &to("/q?animal=dolphin"));
    assert_routes_to(&o, &reviews.cluster(""), &v1);
    assert_status(&mesh.send(&gateway, &to("/none")), 500);

    let effects = |o: &Outcome| o.http.clone().expect("a matched route's effects");
    let o = mesh.send(&gateway, &to("/prefix/one/two"));
    assert_routes_to(&o, &reviews.cluster(""), &v1);
    assert_eq!(effects(&o).upstream_path, "/one/two");
    assert_eq!(effects(&o).upstream_authority, "rewritten.example");
    // Stripping the whole prefix leaves `/` (not an empty path), and a slash between.
    let o = mesh.send(&gateway, &to("/strip-prefix/three"));
    assert_eq!(effects(&o).upstream_path, "/three");
    let o = mesh.send(&gateway, &to("/strip-prefix"));
    assert_eq!(effects(&o).upstream_path, "/");
    let o = mesh.send(&gateway, &to("/full/one/two"));
    assert_eq!(effects(&o).upstream_path, "/one");
    assert_eq!(effects(&o).upstream_authority, "cases.example");

    let o = mesh.send(
        &gateway,
        &to("/headers")
            .header("x-header-set", "original")
            .header("x-header-remove", "gone"),
    );
    assert_routes_to(&o, &reviews.cluster(""), &v1);
    let up = effects(&o).upstream_headers;
    let values = |name: &str| header_values(&up, name);
    assert_eq!(values("x-header-set"), ["set-overwrites-values"], "{up:?}");
    assert_eq!(values("x-header-add"), ["add-appends-values"], "{up:?}");
    assert!(values("x-header-remove").is_empty(), "{up:?}");
    let response = effects(&o).response_headers;
    assert!(
        response
            .iter()
            .any(|e| e.name == "x-response-set" && e.op == HeaderOp::Set && e.value == "set"),
        "{response:?}"
    );
    assert!(
        response
            .iter()
            .any(|e| e.name == "x-response-remove" && e.op == HeaderOp::Remove),
        "{response:?}"
    );
    let mirrors = effects(&o).mirrors;
    assert_eq!(mirrors.len(), 1, "{mirrors:?}");
    assert_eq!(mirrors[0].cluster, ratings);
    assert!(mirrors[0].cluster_found, "{mirrors:?}");

    let timeout = |o: &Outcome| match &o.result {
        Ok(Action::Route { timeout, .. }) => *timeout,
        other => panic!("not routed: {other:?}"),
    };
    let slow = mesh.send(&gateway, &to("/slow"));
    assert_eq!(timeout(&slow), Some(Duration::from_millis(500)));
    let forever = mesh.send(&gateway, &to("/forever"));
    assert_eq!(timeout(&forever), Some(Duration::ZERO));
    mesh.assert_no_errors();
}

/// MeshFrontend and the ClusterIP half of MeshClusterIPMatching, through a captured sidecar
/// (every port's listener, Istio's passthrough for hosts outside the registry): a mesh
/// route on Service `reviews` that sets a response header applies to a request for the
/// Service by name and by its ClusterIP as the host, and not to one sent straight to a pod's
/// address, which passes through to it untouched.
#[test]
fn a_mesh_route_applies_to_its_service_and_not_to_a_pods_address() {
    let mut mesh = Mesh::new("mesh-frontend");
    let reviews = reviews_mesh(&mesh, PORT, &["v1"]);
    let cluster_ip = "10.96.60.1";
    reviews.write_service_with(&format!("  clusterIP: {cluster_ip}\n"));
    write_config(
        &mesh.config,
        "route.yaml",
        &format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: reviews, namespace: default}}
spec:
  parentRefs: [{{group: \"\", kind: Service, name: reviews, port: {PORT}}}]
  rules:
  - filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier: {{set: [{{name: x-header-set, value: set}}]}}
    backendRefs: [{{name: reviews, port: {PORT}}}]
"
        ),
    );
    let proxy = mesh.connect_captured(&client_node(&reviews));
    let header_set = |o: &Outcome| {
        o.http.as_ref().is_some_and(|fx| {
            fx.response_headers
                .iter()
                .any(|e| e.name == "x-header-set" && e.op == HeaderOp::Set)
        })
    };
    let v1 = [pod(&reviews, "v1")];
    for host in ["reviews".to_string(), format!("{cluster_ip}:{PORT}")] {
        let o = mesh.send(&proxy, &Call::get(&host, PORT, "/").to_address(cluster_ip));
        assert_routes_to(&o, &reviews.cluster(""), &v1);
        assert!(header_set(&o), "{host}: {o:#?}");
    }
    let pod_ip = reviews.pod_ip("v1");
    let o = mesh.send(
        &proxy,
        &Call::get(&format!("{pod_ip}:{PORT}"), PORT, "/").to_address(&pod_ip),
    );
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");
    assert!(!header_set(&o), "{o:#?}");
    mesh.assert_no_errors();
}

/// The client pod of the mesh scenarios, as a sidecar node.
fn client_node(reviews: &crate::support::reviews::Reviews) -> crate::support::ProxyNode {
    crate::support::ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    )
}
