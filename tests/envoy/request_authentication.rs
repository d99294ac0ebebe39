//! RequestAuthentication translated into Envoy's `jwt_authn`, in real Envoy, at a server
//! sidecar (its Sidecar `ingress` listener, bound by the proxy itself: no traffic capture on
//! loopback), with keys meshflow fetches from a `jwksUri` on loopback:
//!
//! - while the key server fails, a valid token is refused (401: no keys, fail closed) and a
//!   request without one passes; the object's error (MF0018) says why on the debug port;
//! - once the keys are served, meshflow fetches them (retrying) and a valid token passes; a
//!   token that is expired, of another issuer, or signed by another key is refused (401),
//!   one for another audience too (Envoy's 403); the error is gone;
//! - the issuer's keys rotate: after the refresh, tokens of the new key pass and the old
//!   key's are refused;
//! - an AuthorizationPolicy ALLOW on `requestPrincipals` makes a token required (403
//!   without), and only alice's passes; a DENY on a claim (`request.auth.claims[groups]`,
//!   a list) refuses a token in the `banned` group; through the client sidecar (mTLS) the
//!   same holds.
//!
//! Loopback only.

use crate::support;

use std::net::SocketAddr;

use support::jwt::{Issuer, KeyServer};
use support::reviews::SidecarPair;
use support::{
    converge, debug_json, free_port, http_request, remove_config, require_envoy, write_config,
    TestDir, CONVERGE_TIMEOUT,
};

const NET: u8 = 122;
const ISS: &str = "https://idp.example.com";

fn request_authentication(uri: &str) -> String {
    format!(
        "apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata:
  name: reviews-jwt
  namespace: default
spec:
  selector:
    matchLabels:
      app: reviews
  jwtRules:
  - issuer: {ISS}
    jwksUri: {uri}
    audiences: [reviews]
"
    )
}

fn policies() -> String {
    format!(
        "apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: reviews-alice
  namespace: default
spec:
  selector:
    matchLabels:
      app: reviews
  rules:
  - from:
    - source:
        requestPrincipals: [{ISS}/alice]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: reviews-banned
  namespace: default
spec:
  selector:
    matchLabels:
      app: reviews
  action: DENY
  rules:
  - when:
    - key: request.auth.claims[groups]
      values: [banned]
"
    )
}

#[test]
fn a_server_sidecar_verifies_tokens_with_keys_meshflow_fetches() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-request-authentication");
    let config = dir.subdir("config");
    let debug: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let debug_arg = debug.to_string();
    let pair = SidecarPair::start_with_args(
        NET,
        &envoy_bin,
        dir.path(),
        &config,
        &["--jwks-refresh-s", "1", "--debug-addr", &debug_arg],
    );
    let (through_client, direct) = (pair.through_client, pair.direct);
    let ask = |to: SocketAddr, token: Option<&str>| {
        let auth = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> =
            auth.iter().map(|a| ("authorization", a.as_str())).collect();
        match http_request(to, "GET", "reviews", "/r", &headers) {
            Ok(r) if r.status == 200 && r.text() == "reviews-app" => "ok".to_string(),
            Ok(r) => format!("status {}", r.status),
            Err(_) => "error".to_string(),
        }
    };
    let summary = || pair.summary();
    let expect = |what: &str, to: SocketAddr, token: Option<&str>, want: &str| {
        let got = converge(
            what,
            CONVERGE_TIMEOUT,
            || ask(to, token),
            |a| a == want,
            summary,
        );
        assert_eq!(got, want, "{what}");
    };
    let errors = || debug_json(debug, "/debug/config_errors").to_string();

    let idp = Issuer::new(ISS, "k1");
    let aud = r#""aud":"reviews""#;
    let valid = idp.token("alice", aud);
    let keys = KeyServer::start(None);
    write_config(&config, "zz-jwt.yaml", &request_authentication(&keys.uri()));
    expect(
        "no keys yet: a valid token is refused",
        direct,
        Some(&valid),
        "status 401",
    );
    expect("no token passes", direct, None, "ok");
    converge(
        "MF0018 on the object",
        CONVERGE_TIMEOUT,
        errors,
        |e| e.contains("MF0018") && e.contains("reviews-jwt") && e.contains("503"),
        summary,
    );

    keys.set(Some(idp.jwks()));
    expect("fetched: a valid token passes", direct, Some(&valid), "ok");
    converge(
        "the error is gone",
        CONVERGE_TIMEOUT,
        errors,
        |e| !e.contains("MF0018"),
        summary,
    );
    let other = Issuer::new("https://elsewhere.example.com", "k1");
    let intruder = Issuer::new(ISS, "k1");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // Envoy answers 401, but 403 for a token whose audience is not allowed.
    let refused = [
        (
            "expired",
            "status 401",
            idp.sign(&format!(
                r#"{{"iss":"{ISS}","sub":"alice",{aud},"exp":{}}}"#,
                now - 600
            )),
        ),
        ("another issuer", "status 401", other.token("alice", aud)),
        (
            "another audience",
            "status 403",
            idp.token("alice", r#""aud":"ratings""#),
        ),
        ("another key", "status 401", intruder.token("alice", aud)),
        ("not a token", "status 401", "x.y.z".to_string()),
    ];
    for (what, status, token) in &refused {
        assert_eq!(ask(direct, Some(token)), *status, "{what}");
    }

    // Rotation: the refresh brings the new key; the old key's tokens are refused.
    let rotated = Issuer::new(ISS, "k2");
    keys.set(Some(rotated.jwks()));
    let new_token = rotated.token("alice", aud);
    expect("the new key's token", direct, Some(&new_token), "ok");
    expect("the old key's token", direct, Some(&valid), "status 401");

    // requestPrincipals and claims.
    write_config(&config, "zz-authz.yaml", &policies());
    expect("no token: no request principal", direct, None, "status 403");
    let bob = rotated.token("bob", aud);
    assert_eq!(ask(direct, Some(&bob)), "status 403", "bob is not alice");
    assert_eq!(ask(direct, Some(&new_token)), "ok", "alice");
    let banned = rotated.token("alice", &format!(r#"{aud},"groups":["dev","banned"]"#));
    assert_eq!(ask(direct, Some(&banned)), "status 403", "a banned group");
    let dev = rotated.token("alice", &format!(r#"{aud},"groups":["dev"]"#));
    assert_eq!(ask(direct, Some(&dev)), "ok", "another group");
    // Through the client sidecar: the same answers over mTLS.
    expect(
        "alice via the client sidecar",
        through_client,
        Some(&new_token),
        "ok",
    );
    assert_eq!(ask(through_client, None), "status 403");
    assert_eq!(ask(through_client, Some(&valid)), "status 401");

    // `presence: REQUIRED`: no token, 401 (the authorization policies gone).
    remove_config(&config, "zz-authz.yaml");
    write_config(
        &config,
        "zz-jwt.yaml",
        &format!(
            "{}    presence: REQUIRED\n",
            request_authentication(&keys.uri())
        ),
    );
    expect("a token required", direct, None, "status 401");
    assert_eq!(ask(direct, Some(&bob)), "ok", "any valid token");
    remove_config(&config, "zz-jwt.yaml");
    expect("open again: any token passes", direct, Some("x.y.z"), "ok");
    assert_eq!(
        pair.server.rejected_updates(),
        0,
        "{}",
        pair.server.summary()
    );
    assert!(*keys.requests.lock().unwrap() >= 3, "fetched, refreshed");
}
