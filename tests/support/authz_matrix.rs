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

/// The PeerAuthentication mode the server sidecar runs under (the matrix of [`matrix`] is
/// PERMISSIVE's: no policy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerMode {
    Strict,
    Disable,
}

impl PeerMode {
    pub fn name(self) -> &'static str {
        match self {
            PeerMode::Strict => "STRICT",
            PeerMode::Disable => "DISABLE",
        }
    }

    /// A PeerAuthentication selecting the server (`app: reviews`) with this mode.
    pub fn policy(self) -> String {
        format!(
            "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata:\n  \
             name: reviews\n  namespace: default\nspec:\n  selector:\n    matchLabels:\n      \
             app: reviews\n  mtls:\n    mode: {}\n",
            self.name()
        )
    }
}

/// [`matrix`] under `mode`, as Istio's documentation states it. STRICT: a plaintext
/// connection finds no chain (`error`), whatever the request; the client sidecar's mTLS is
/// answered as before. DISABLE: the client sidecar sends plaintext too (auto mTLS follows
/// the server's mode), so no request carries its identity: the one request the ALLOW lets
/// through by identity alone (GET `/public/a`, no header) is refused; the others answer as
/// before (the DENY, methods, paths and the header do not read the identity).
pub fn matrix_under(mode: PeerMode) -> Vec<Case> {
    matrix()
        .into_iter()
        .map(|(what, via, method, path, headers, expected)| {
            let expected = match (mode, via) {
                (PeerMode::Strict, Via::Direct) => "error",
                (PeerMode::Disable, Via::Client)
                    if (method, path) == ("GET", "/public/a") && headers.is_empty() =>
                {
                    "status 403"
                }
                _ => expected,
            };
            (what, via, method, path, headers, expected)
        })
        .collect()
}
