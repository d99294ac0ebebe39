//! Security policies in real Envoy, at an ingress gateway and at server sidecars.
//!
//! At an ingress gateway: a RequestAuthentication selecting the gateway makes it refuse
//! (401) a request whose token is invalid where the rules look for one — the
//! `Authorization` header and the `access_token` parameter of a rule that names no
//! location, a rule's `fromParams` and `fromCookies` — or valid for another rule's issuer
//! only, while a valid token, no token at all, and names that only resemble the ones looked
//! for pass, as Istio lets them; an ALLOW on `requestPrincipals` then requires alice's
//! token (403 without); a VirtualService route matching a claim of the verified token
//! (`@request.auth.claims.group`) is taken only with such a token (and its `withoutHeaders`
//! twin only without). AuthorizationPolicies (a DENY on a path, an ALLOW on a header: 403
//! where they say); a CUSTOM one naming a provider the mesh config lacks denies what its
//! rules match (here everything: 403).
//! Deleting the policies opens it again, and Envoy rejects no update.
//!
//! At a server sidecar's Sidecar `ingress` listener (bound by the proxy itself, as every
//! server sidecar here: no traffic capture on loopback): a STRICT PeerAuthentication leaves
//! it only its mTLS chain — a client sidecar's mutual TLS still reaches the application, a
//! plaintext connection finds no chain — and a DENY AuthorizationPolicy answers the client
//! sidecar 403. A DISABLE PeerAuthentication (translated as Istio does) leaves the
//! server only its plaintext chain and makes the client sidecar send it plaintext. Loopback
//! only.

use crate::support;

use std::net::SocketAddr;

use support::jwt::Issuer;
use support::reviews::{http_gateway_yaml, Binding, Client, Reviews, SidecarPair};
use support::{
    converge, free_port, http_request, only, remove_config, require_envoy, write_config, Envoy,
    Meshflow, ProxyNode, TestDir, XdsMode, CONVERGE_TIMEOUT, STARTUP_TIMEOUT,
};

const NET: u8 = 119;
const GATEWAY: &str = "secured-gateway";
const HOST: &str = "reviews.example.com";

/// Issuer `a`'s tokens in the `token` parameter and the `session` cookie (first rule),
/// issuer `b`'s where Envoy looks by default (second rule: no location named); keys inline.
fn request_authentication(a: &Issuer, b: &Issuer) -> String {
    format!(
        "apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata:
  name: gateway-jwt
  namespace: istio-system
spec:
  selector:
    matchLabels:
      istio: ingressgateway
  jwtRules:
  - issuer: {}
    jwks: '{}'
    fromParams: [token]
    fromCookies: [session]
  - issuer: {}
    jwks: '{}'
",
        a.iss,
        a.jwks(),
        b.iss,
        b.jwks()
    )
}

/// Only alice's token of issuer `a` passes.
fn alice_only(a: &Issuer) -> String {
    format!(
        "apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: gateway-alice
  namespace: istio-system
spec:
  selector:
    matchLabels:
      istio: ingressgateway
  rules:
  - from:
    - source:
        requestPrincipals: [{}/alice]
",
        a.iss
    )
}

/// Translated: DENY `/admin*`; ALLOW only the `blue` team (a request header).
const AUTHORIZATION_POLICIES: &str = "\
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: gateway-deny
  namespace: istio-system
spec:
  selector:
    matchLabels:
      istio: ingressgateway
  action: DENY
  rules:
  - to:
    - operation:
        paths: [/admin*]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: gateway-allow
  namespace: istio-system
spec:
  selector:
    matchLabels:
      istio: ingressgateway
  rules:
  - when:
    - key: request.headers[x-team]
      values: [blue]
";

/// A provider the mesh config lacks: what the rules match (everything) is denied.
const CUSTOM_POLICY: &str = "\
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: gateway-ext
  namespace: istio-system
spec:
  selector:
    matchLabels:
      istio: ingressgateway
  action: CUSTOM
  provider:
    name: ext
  rules:
  - {}
";

#[test]
fn a_gateway_refuses_what_the_policies_selecting_it_ask() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-security-gateway");
    let config = dir.subdir("config");
    let port = free_port();
    let reviews = Reviews::new(NET, 9080, &config);
    let _v1 = reviews.start_backend("v1");
    reviews.write_service();
    reviews.write_pods(&["v1"]);
    reviews.write_endpoints(&["v1"]);
    write_config(&config, "gateway.yaml", &http_gateway_yaml(GATEWAY, port));
    reviews.write_plain_routing(&Binding::Gateway {
        gateway: GATEWAY.to_owned(),
        host: HOST.to_owned(),
    });

    let meshflow = Meshflow::start(&config, dir.path());
    let node = ProxyNode::router(
        "istio-ingressgateway-abc",
        "istio-system",
        "127.0.0.1",
        &[("istio", "ingressgateway")],
    );
    let envoy = Envoy::start(
        &envoy_bin,
        dir.path(),
        &node,
        meshflow.xds_addr(),
        XdsMode::Delta,
    );
    envoy.wait_live(STARTUP_TIMEOUT);
    envoy.await_listener(&format!("127.0.0.1_{port}"));
    let client = Client::new(&envoy, SocketAddr::from(([127, 0, 0, 1], port)), HOST);
    let open = |what: &str, path: &str, headers: &[(&str, &str)]| {
        client.converge(what, path, headers, |c| only(c, "reviews-v1"), 10);
    };
    open(
        "the gateway serves before any policy",
        "/r",
        &[("authorization", "Bearer x")],
    );

    // Tokens: an invalid one is refused wherever the rules look; a valid one, or none,
    // passes.
    let a = Issuer::new("https://issuer.example.com", "a1");
    let b = Issuer::new("https://other.example.com", "b1");
    write_config(
        &config,
        "zz-request-authentication.yaml",
        &request_authentication(&a, &b),
    );
    let answers = |status: &str, what: &str, path: &str, headers: &[(&str, &str)]| {
        let c = client.converge(what, path, headers, |c| only(c, status), 10);
        assert!(only(&c, status), "{what}: {c:?}");
    };
    let unauthorized = |w: &str, p: &str, h: &[(&str, &str)]| answers("status 401", w, p, h);
    let forbidden = |w: &str, p: &str, h: &[(&str, &str)]| answers("status 403", w, p, h);
    unauthorized("a bearer token", "/r", &[("authorization", "Bearer x")]);
    unauthorized("the default parameter", "/r?access_token=x", &[]);
    unauthorized(
        "a fromParams parameter after another",
        "/r?a=1&token=x",
        &[],
    );
    unauthorized(
        "a fromCookies cookie",
        "/r",
        &[("cookie", "theme=dark; session=abc")],
    );
    let alice = a.token("alice", "");
    let bearer_alice = format!("Bearer {alice}");
    unauthorized(
        "issuer a's token where only issuer b's are looked for",
        "/r",
        &[("authorization", bearer_alice.as_str())],
    );
    let passes = |what: &str, path: &str, headers: &[(&str, &str)]| {
        answers("reviews-v1", what, path, headers)
    };
    passes("no token", "/r", &[]);
    passes(
        "issuer a's token in its parameter",
        &format!("/r?token={alice}"),
        &[],
    );
    let bearer_b = format!("Bearer {}", b.token("carol", ""));
    passes(
        "issuer b's token in the Authorization header",
        "/r",
        &[("authorization", bearer_b.as_str())],
    );
    passes(
        "a parameter that only resembles one",
        "/r?tokens=x&my_token=y",
        &[],
    );
    passes(
        "a cookie that only resembles one",
        "/r",
        &[("cookie", "mysession=abc")],
    );
    // Routes on a verified claim: admins (issuer a's `group` claim, a string or a list) get
    // 418; a token of another group, an invalid one's 401 aside, and none, the service. A
    // header spelled like the claim is no claim.
    let binding = Binding::Gateway {
        gateway: GATEWAY.to_owned(),
        host: HOST.to_owned(),
    };
    reviews.write_plain_routing_after(
        &binding,
        "  - match:\n    - headers:\n        \"@request.auth.claims.group\": {exact: admin}\n    directResponse: {status: 418}\n  - match:\n    - withoutHeaders:\n        \"@request.auth.claims[group]\": {}\n      uri: {prefix: /anon}\n    directResponse: {status: 299}\n",
    );
    let admin = a.token("dana", r#""group":"admin""#);
    let admins = a.token("erin", r#""group":["ops","admin"]"#);
    let ops = a.token("fred", r#""group":"ops""#);
    answers(
        "status 418",
        "an admin's token",
        &format!("/r?token={admin}"),
        &[],
    );
    answers(
        "status 418",
        "admin among the groups",
        &format!("/r?token={admins}"),
        &[],
    );
    passes("another group's token", &format!("/r?token={ops}"), &[]);
    passes("no token", "/r", &[]);
    answers("status 299", "no group claim: withoutHeaders", "/anon", &[]);
    passes(
        "a group claim: not without",
        &format!("/anon?token={ops}"),
        &[],
    );
    reviews.write_plain_routing(&binding);
    passes("the plain routing again", &format!("/r?token={admin}"), &[]);

    // requestPrincipals: alice's token required.
    write_config(&config, "zz-alice.yaml", &alice_only(&a));
    forbidden("no token: no request principal", "/r", &[]);
    let bob = a.token("bob", "");
    forbidden("bob's token", &format!("/r?token={bob}"), &[]);
    passes("alice's token", &format!("/r?token={alice}"), &[]);
    remove_config(&config, "zz-alice.yaml");

    // AuthorizationPolicies, translated: the blue team passes, but not to /admin; others
    // get 403.
    remove_config(&config, "zz-request-authentication.yaml");
    write_config(
        &config,
        "zz-authorization-policy.yaml",
        AUTHORIZATION_POLICIES,
    );
    let blue = [("x-team", "blue")];
    forbidden("no team: the ALLOW policy does not match", "/r", &[]);
    forbidden("the red team", "/r", &[("x-team", "red")]);
    forbidden("the blue team to /admin: DENY", "/admin/x", &blue);
    passes("the blue team", "/r", &blue);

    // CUSTOM naming a provider the mesh config lacks: its rules (everything) denied.
    write_config(&config, "zz-custom.yaml", CUSTOM_POLICY);
    forbidden("CUSTOM without its provider", "/r", &blue);

    // Deleted: open again.
    remove_config(&config, "zz-custom.yaml");
    remove_config(&config, "zz-authorization-policy.yaml");
    open(
        "open again",
        "/r?access_token=x",
        &[("authorization", "Bearer x")],
    );
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
    drop(meshflow);
}

const SIDECAR_NET: u8 = 120;

/// A PeerAuthentication selecting the reviews workload, in `mode`.
fn reviews_peer_authentication(mode: &str) -> String {
    let name = mode.to_lowercase();
    format!(
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata:\n  \
         name: reviews-{name}\n  namespace: default\nspec:\n  selector:\n    matchLabels:\n      \
         app: reviews\n  mtls:\n    mode: {mode}\n"
    )
}

const DENY_REVIEWS: &str = "\
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: reviews-deny
  namespace: default
spec:
  selector:
    matchLabels:
      app: reviews
  action: DENY
  rules:
  - {}
";

#[test]
fn a_server_sidecar_refuses_what_the_policies_selecting_it_ask() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-security-sidecar");
    let config = dir.subdir("config");
    let pair = SidecarPair::start(SIDECAR_NET, &envoy_bin, dir.path(), &config);
    let (client, server) = (&pair.client, &pair.server);

    // What a request answers: the body of a 200, `status N`, or `error`.
    let outcome = |addr: SocketAddr| match http_request(addr, "GET", "reviews", "/", &[]) {
        Ok(r) if r.status == 200 => r.text(),
        Ok(r) => format!("status {}", r.status),
        Err(_) => "error".to_string(),
    };
    let (through_client, direct) = (pair.through_client, pair.direct);
    let both = || (outcome(through_client), outcome(direct));
    let summary = || pair.summary();
    let app = "reviews-app".to_string();
    converge(
        "PERMISSIVE: mTLS from the client sidecar and plaintext both reach the application",
        CONVERGE_TIMEOUT,
        both,
        |(via, plain)| *via == app && *plain == app,
        summary,
    );

    write_config(
        &config,
        "zz-strict.yaml",
        &reviews_peer_authentication("STRICT"),
    );
    let (via, plain) = converge(
        "STRICT: plaintext finds no chain",
        CONVERGE_TIMEOUT,
        both,
        |(_, plain)| plain == "error",
        summary,
    );
    assert_eq!(via, app, "mTLS still reaches the application");
    assert_eq!(plain, "error");

    write_config(&config, "zz-deny.yaml", DENY_REVIEWS);
    // While the server's listener is replaced, a pooled connection to the draining chain may
    // answer 503 once; what must settle is the RBAC filter's 403.
    let (via, _) = converge(
        "DENY every request: the client sidecar is refused too",
        CONVERGE_TIMEOUT,
        both,
        |(via, _)| via == "status 403",
        summary,
    );
    assert_eq!(via, "status 403", "the server sidecar's RBAC answers");

    remove_config(&config, "zz-deny.yaml");
    remove_config(&config, "zz-strict.yaml");
    converge(
        "open again",
        CONVERGE_TIMEOUT,
        both,
        |(via, plain)| *via == app && *plain == app,
        summary,
    );

    // DISABLE: the server keeps only its plaintext chain, and the client sidecar, told by
    // the endpoint's metadata (no `tlsMode: istio` any more), sends plaintext: a client
    // that kept sending mTLS would find the server's HTTP chain and fail.
    let tls_mode_endpoints = || {
        let eds = client.admin_get("/config_dump?resource=dynamic_endpoint_configs&include_eds");
        eds.matches("tlsMode").count()
    };
    assert!(tls_mode_endpoints() > 0, "{}", summary());
    write_config(
        &config,
        "zz-disable.yaml",
        &reviews_peer_authentication("DISABLE"),
    );
    converge(
        "DISABLE: the client holds the endpoint without tlsMode",
        CONVERGE_TIMEOUT,
        tls_mode_endpoints,
        |n| *n == 0,
        summary,
    );
    converge(
        "DISABLE: plaintext both ways reaches the application",
        CONVERGE_TIMEOUT,
        both,
        |(via, plain)| *via == app && *plain == app,
        summary,
    );
    // The server drops its mTLS chain once the client acknowledged sending plaintext (the
    // change is held until then: `mtls_transition.rs`).
    converge(
        "DISABLE: no mTLS chain left on the server",
        CONVERGE_TIMEOUT,
        || server.admin_get("/config_dump?resource=dynamic_listeners"),
        |dump| !dump.contains("-mtls"),
        summary,
    );
    remove_config(&config, "zz-disable.yaml");
    converge(
        "PERMISSIVE again: the endpoint takes mTLS",
        CONVERGE_TIMEOUT,
        tls_mode_endpoints,
        |n| *n > 0,
        summary,
    );
    assert_eq!(outcome(through_client), app);
    assert_eq!(client.rejected_updates(), 0, "{}", client.summary());
    assert_eq!(server.rejected_updates(), 0, "{}", server.summary());
}
