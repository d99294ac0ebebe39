//! The Gateway API at a gateway, through the generated config: requests sent through the
//! listener's route configuration land where the spec says — a segment-wise prefix, the
//! precedence across routes, a redirect, and 500 for a filter meshflow cannot apply and for
//! a backend that does not exist.

use crate::fixtures::{pod, reviews_mesh, via_gateway, PORT};
use crate::support::{write_config, ProxyNode};
use crate::{assert_routes_to, assert_status, Mesh};

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

#[test]
fn gateway_api_routes_land_where_the_spec_says() {
    let mut mesh = Mesh::new("gateway-api");
    let reviews = reviews_mesh(&mesh, 9080, &["v1"]);
    write_config(
        &mesh.config,
        "gateway.yaml",
        &format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: default}}\nspec:\n  gatewayClassName: istio\n  listeners:\n  - {{name: http, port: {PORT}, protocol: HTTP, hostname: \"*.example\"}}\n"
        ),
    );
    write_config(&mesh.config, "routes.yaml", ROUTES);
    let gateway = mesh.connect(&ProxyNode::router(
        "gw-abc",
        "default",
        "127.0.0.1",
        &[("gateway.networking.k8s.io/gateway-name", "gw")],
    ));
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
