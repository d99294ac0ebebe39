//! The client matrix of the AuthorizationPolicy tests, shared by the real-Envoy test
//! (`tests/envoy/authorization.rs`) and the routing simulation's
//! (`tests/routing_simulation/authorization.rs`): the same policies, the same requests, the
//! same expected answers, so the simulation is held to what Envoy does.

/// How a request reaches the server sidecar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// Through the client sidecar: Istio's mTLS, the client's identity
    /// `cluster.local/ns/default/sa/sleep` ([`CLIENT_IDENTITY`]).
    Client,
    /// Plaintext, straight to the server sidecar's listener: no identity.
    Direct,
}

/// The request header of the blue team.
const BLUE: &[(&str, &str)] = &[("x-team", "blue")];

/// The client sidecar's identity (its certificate's URI SAN).
pub const CLIENT_IDENTITY: &str = "spiffe://cluster.local/ns/default/sa/sleep";

/// `(what, via, method, path, headers, expected)`: `ok` (the application answers),
/// `status N`.
pub type Case = (
    &'static str,
    Via,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
);

/// ALLOW: the client sidecar's identity may GET `/public*`; anyone of the blue team
/// (request header) may GET anything. DENY: nobody reaches `/public/admin*`.
pub fn policies(allowed_source: &str) -> String {
    format!(
        "apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: reviews-allow
  namespace: default
spec:
  selector:
    matchLabels:
      app: reviews
  action: ALLOW
  rules:
  - from:
    - source:
        {allowed_source}
    to:
    - operation:
        methods: [GET]
        paths: [/public*]
  - to:
    - operation:
        methods: [GET]
    when:
    - key: request.headers[x-team]
      values: [blue]
---
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
  - to:
    - operation:
        paths: [/public/admin*]
"
    )
}

/// The requests and what [`policies`] (with `principals: [cluster.local/ns/default/sa/sleep]`)
/// answers each, as Istio's documentation states it.
pub fn matrix() -> Vec<Case> {
    vec![
        (
            "the client's identity, GET /public",
            Via::Client,
            "GET",
            "/public/a",
            &[],
            "ok",
        ),
        (
            "the client's identity, POST /public",
            Via::Client,
            "POST",
            "/public/a",
            &[],
            "status 403",
        ),
        (
            "the client's identity, GET /private",
            Via::Client,
            "GET",
            "/private",
            &[],
            "status 403",
        ),
        (
            "the client's identity, DENY path",
            Via::Client,
            "GET",
            "/public/admin/x",
            &[],
            "status 403",
        ),
        (
            "plaintext, no identity, GET /public",
            Via::Direct,
            "GET",
            "/public/a",
            &[],
            "status 403",
        ),
        (
            "plaintext, blue team, GET /private",
            Via::Direct,
            "GET",
            "/private",
            BLUE,
            "ok",
        ),
        (
            "plaintext, red team",
            Via::Direct,
            "GET",
            "/private",
            &[("x-team", "red")],
            "status 403",
        ),
        (
            "plaintext, blue team, POST",
            Via::Direct,
            "POST",
            "/private",
            BLUE,
            "status 403",
        ),
        (
            "plaintext, blue team, DENY path",
            Via::Direct,
            "GET",
            "/public/admin",
            BLUE,
            "status 403",
        ),
        // CVE-2021-31920: the DENY path written otherwise.
        (
            "a dot segment",
            Via::Client,
            "GET",
            "/public/./admin",
            &[],
            "status 403",
        ),
        (
            "a double slash",
            Via::Client,
            "GET",
            "/public//admin",
            &[],
            "status 403",
        ),
        (
            "an escaped slash",
            Via::Client,
            "GET",
            "/public%2Fadmin",
            &[],
            "status 307",
        ),
        (
            "a dot segment, plaintext",
            Via::Direct,
            "GET",
            "/public/x/../admin",
            BLUE,
            "status 403",
        ),
    ]
}
