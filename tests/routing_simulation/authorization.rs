//! Mirrors `envoy/authorization.rs`: the server sidecar's bound `ingress` listener under the
//! same ALLOW and DENY policies, and the same client matrix (`support::authz_matrix`) — the
//! client sidecar's mTLS identity or plaintext, methods, paths, a header condition, the
//! CVE-2021-31920 path forms — each answered by the simulation's RBAC evaluation as real
//! Envoy answers it in that test, also under STRICT and DISABLE. And the RequestAuthentication of
//! `envoy/request_authentication.rs`: tokens that verify, that do not, of the wrong
//! audience, none, `requestPrincipals`, and `presence: REQUIRED`.

use crate::support::authz_matrix::{
    matrix, matrix_under, policies, PeerMode, Via, CLIENT_IDENTITY,
};
use crate::support::reviews::Reviews;
use crate::support::{write_config, ProxyNode};
use crate::Mesh;
use dataflows::model::ProxyId;
use dataflows::simulate::{Call, Outcome, Token};

const NET: u8 = 121;
const PORT: u16 = 9080;

/// The reviews service and the server sidecar with its bound `ingress` listener, connected.
fn server(label: &str) -> (Mesh, Reviews, ProxyId) {
    let mut mesh = Mesh::new(label);
    let reviews = Reviews::new(NET, PORT, &mesh.config);
    reviews.write_service();
    reviews.write_pods_labelled(&[("v1", "security.istio.io/tlsMode: istio")]);
    reviews.write_endpoints(&["v1"]);
    write_config(
        &mesh.config,
        "server-sidecar.yaml",
        &reviews.server_sidecar_yaml(18080, ""),
    );
    let node = ProxyNode::sidecar(
        "reviews-v1",
        "default",
        &reviews.pod_ip("v1"),
        &[("app", "reviews"), ("version", "v1")],
    );
    let id = mesh.connect(&node);
    mesh.sync_clean();
    (mesh, reviews, id)
}

/// As the Envoy tests report an answer: `ok` (forwarded to the application), `status N`.
fn answer(o: &Outcome) -> String {
    match (o.effective_status(), &o.result) {
        (Some(s), _) => format!("status {s}"),
        (None, Ok(_)) => "ok".into(),
        (None, Err(e)) => format!("error {e:?}"),
    }
}

#[test]
fn the_simulation_answers_the_authorization_matrix_as_envoy_does() {
    let (mut mesh, reviews, server) = server("authorization");
    write_config(
        &mesh.config,
        "zz-authz.yaml",
        &policies("principals: [cluster.local/ns/default/sa/sleep]"),
    );
    let pod_ip = reviews.pod_ip("v1");
    for (what, via, method, path, headers, expected) in matrix() {
        let mut call = Call::get("reviews", reviews.backend_port(), path)
            .method(method)
            .to_address(&pod_ip);
        for (k, v) in headers {
            call = call.header(k, v);
        }
        if via == Via::Client {
            call = call
                .istio_mtls("outbound_.9080_._.reviews.default.svc.cluster.local")
                .from_peer(CLIENT_IDENTITY);
        }
        let o = mesh.send(&server, &call);
        assert_eq!(answer(&o), expected, "{what}: {:?} {:?}", o.authz, o.result);
    }
    // `trustDomains`: the client's identity is of `cluster.local`.
    let mtls = Call::get("reviews", reviews.backend_port(), "/")
        .to_address(&pod_ip)
        .istio_mtls("outbound_.9080_._.reviews.default.svc.cluster.local")
        .from_peer(CLIENT_IDENTITY);
    for (domains, expected) in [("[other.example]", "status 403"), ("[\"cluster.*\"]", "ok")] {
        write_config(
            &mesh.config,
            "zz-authz.yaml",
            &format!(
                "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: td, namespace: default}}\nspec:\n  selector: {{matchLabels: {{app: reviews}}}}\n  rules:\n  - from:\n    - source: {{trustDomains: {domains}}}\n"
            ),
        );
        assert_eq!(answer(&mesh.send(&server, &mtls)), expected, "{domains}");
    }
}

#[test]
fn the_simulation_verifies_tokens_as_envoy_does() {
    let (mut mesh, reviews, server) = server("request-authentication");
    let iss = "https://idp.example.com";
    write_config(
        &mesh.config,
        "zz-jwt.yaml",
        &format!(
            "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {{name: reviews-jwt, namespace: default}}\nspec:\n  selector: {{matchLabels: {{app: reviews}}}}\n  jwtRules:\n  - issuer: {iss}\n    audiences: [reviews]\n    jwks: '{}'\n",
            crate::support::jwt::Issuer::new(iss, "k1").jwks()
        ),
    );
    let pod_ip = reviews.pod_ip("v1");
    let call = || Call::get("reviews", reviews.backend_port(), "/r").to_address(&pod_ip);
    let signed = |sub: &str, aud: &str| {
        Token::Signed(serde_json::json!({"iss": iss, "sub": sub, "aud": aud}))
    };
    let mut ask = |c: Call| answer(&mesh.send(&server, &c));
    assert_eq!(ask(call()), "ok", "no token");
    assert_eq!(ask(call().with_token(signed("alice", "reviews"))), "ok");
    assert_eq!(ask(call().with_token(Token::Invalid)), "status 401");
    assert_eq!(
        ask(call().with_token(Token::Signed(
            serde_json::json!({"iss": "https://elsewhere", "sub": "a"})
        ))),
        "status 401",
        "another issuer"
    );
    assert_eq!(
        ask(call().with_token(signed("alice", "ratings"))),
        "status 403",
        "another audience"
    );
    write_config(
        &mesh.config,
        "zz-authz.yaml",
        &format!(
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: alice, namespace: default}}\nspec:\n  selector: {{matchLabels: {{app: reviews}}}}\n  rules:\n  - from:\n    - source: {{requestPrincipals: [{iss}/alice]}}\n"
        ),
    );
    let mut ask = |c: Call| answer(&mesh.send(&server, &c));
    assert_eq!(ask(call()), "status 403", "no token: no request principal");
    assert_eq!(ask(call().with_token(signed("alice", "reviews"))), "ok");
    assert_eq!(
        ask(call().with_token(signed("bob", "reviews"))),
        "status 403"
    );
    assert_eq!(ask(call().with_token(signed("alice", "reviews"))), "ok");
    // `presence: REQUIRED` without the policy: a token must come.
    std::fs::remove_file(mesh.config.join("zz-authz.yaml")).expect("remove");
    let jwt = std::fs::read_to_string(mesh.config.join("zz-jwt.yaml")).expect("read");
    write_config(
        &mesh.config,
        "zz-jwt.yaml",
        &format!("{jwt}    presence: REQUIRED\n"),
    );
    let mut ask = |c: Call| answer(&mesh.send(&server, &c));
    assert_eq!(ask(call()), "status 401", "required");
    assert_eq!(ask(call().with_token(signed("bob", "reviews"))), "ok");
}

/// The matrix under a STRICT and a DISABLE PeerAuthentication (`authz_matrix::matrix_under`),
/// answered as real Envoy answers it in `envoy/authorization.rs`: under STRICT a plaintext
/// request finds no chain; under DISABLE the client sidecar sends plaintext (what its
/// endpoint for the server says: no `tlsMode`), so its requests carry no identity.
#[test]
fn the_simulation_answers_the_matrix_under_each_mode_as_envoy_does() {
    let (mut mesh, reviews, server) = server("authorization-modes");
    write_config(
        &mesh.config,
        "zz-authz.yaml",
        &policies("principals: [cluster.local/ns/default/sa/sleep]"),
    );
    let pod_ip = reviews.pod_ip("v1");
    for mode in [PeerMode::Strict, PeerMode::Disable] {
        write_config(&mesh.config, "zz-peer.yaml", &mode.policy());
        for (what, via, method, path, headers, expected) in matrix_under(mode) {
            let mut call = Call::get("reviews", reviews.backend_port(), path)
                .method(method)
                .to_address(&pod_ip);
            for (k, v) in headers {
                call = call.header(k, v);
            }
            if via == Via::Client && mode != PeerMode::Disable {
                call = call
                    .istio_mtls("outbound_.9080_._.reviews.default.svc.cluster.local")
                    .from_peer(CLIENT_IDENTITY);
            }
            let o = mesh.send(&server, &call);
            let got = answer(&o);
            let agrees = match expected {
                // No chain takes the connection: Envoy closes it.
                "error" => got.starts_with("error"),
                _ => got == expected,
            };
            assert!(
                agrees,
                "{} {what}: expected {expected}, got {got}: {:?} {:?}",
                mode.name(),
                o.authz,
                o.result
            );
        }
    }
}
