//! Random security policies (PeerAuthentication, AuthorizationPolicy, RequestAuthentication
//! records of the fail-closed stopgap): in the proxies' namespaces and the root namespace,
//! namespace-wide or selecting labels some proxies carry, with every mTLS mode, ports,
//! creation times that tie and names that order them.

use crate::records::{pick, NAMESPACES};
use crate::support::labels;
use dataflows::model::*;
use rand::rngs::StdRng;
use rand::Rng;
use std::collections::BTreeMap;

fn mode(rng: &mut StdRng) -> MtlsMode {
    pick(
        rng,
        &[
            MtlsMode::Unset,
            MtlsMode::Disable,
            MtlsMode::Permissive,
            MtlsMode::Strict,
            MtlsMode::Strict,
        ],
    )
}

/// One random version of one of a few policies (their keys collide, so updates and deletes
/// happen).
pub fn security(rng: &mut StdRng) -> Record {
    let kind = pick(
        rng,
        &[
            Kind::PeerAuthentication,
            Kind::PeerAuthentication,
            Kind::AuthorizationPolicy,
            Kind::RequestAuthentication,
        ],
    );
    let ns = pick(rng, &NAMESPACES);
    let name = pick(rng, &["a", "b", "default"]);
    let selector = match rng.random_range(0..5) {
        0 => Some(labels(&[("app", "client")])),
        1 => Some(labels(&[("app", "svc0")])),
        2 => Some(labels(&[("istio", "ingressgateway")])),
        _ => None,
    };
    let effect = match kind {
        Kind::PeerAuthentication => {
            let mut ports = BTreeMap::new();
            if selector.is_some() && rng.random_bool(0.5) {
                ports.insert(pick(rng, &[9080, 9081, 8888, 8443, 15000]), mode(rng));
            }
            PolicyEffect::Peer {
                mode: mode(rng),
                ports,
            }
        }
        Kind::AuthorizationPolicy if rng.random_bool(0.2) => PolicyEffect::Custom(CustomAuthz {
            provider: pick(rng, &["grpc-authz", "http-authz", "broken", "missing"]).into(),
            rules: authz(rng).rules,
        }),
        Kind::AuthorizationPolicy => PolicyEffect::Authz(authz(rng)),
        _ => PolicyEffect::Jwt((0..rng.random_range(1..3)).map(|_| jwt_rule(rng)).collect()),
    };
    Record::Security(SecurityPolicy {
        key: ConfigKey::new(kind, ns, name),
        created: pick(rng, &["", "2020-01-01T00:00:00Z", "2021-06-01T00:00:00Z"]).into(),
        selector,
        effect,
    })
}

/// A random JWT rule: one of two issuers, keys written, fetched, stale or not fetched,
/// tokens where Envoy looks by default or in a header of their own.
fn jwt_rule(rng: &mut StdRng) -> JwtRule {
    let keys = r#"{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}]}"#;
    let uri = "https://idp.example/keys".to_string();
    let jwks = match rng.random_range(0..4) {
        0 => Jwks::Inline(keys.into()),
        1 => Jwks::Uri {
            uri,
            keys: Some(keys.into()),
            problem: None,
        },
        2 => Jwks::Uri {
            uri,
            keys: Some(keys.into()),
            problem: Some("timed out".into()),
        },
        _ => Jwks::Uri {
            uri,
            keys: None,
            problem: None,
        },
    };
    JwtRule {
        issuer: pick(rng, &["https://idp.example", "issuer-b"]).into(),
        audiences: pick(rng, &[&[][..], &["web"]])
            .iter()
            .map(|a| a.to_string())
            .collect(),
        jwks,
        from_headers: if rng.random_bool(0.5) {
            vec![TokenHeader {
                name: "x-jwt".into(),
                prefix: String::new(),
            }]
        } else {
            vec![]
        },
        from_params: vec![],
        from_cookies: vec![],
        forward_original_token: rng.random_bool(0.5),
        output_payload_to_header: String::new(),
        output_claim_to_headers: vec![],
        timeout_ms: DEFAULT_JWKS_TIMEOUT_MS,
        space_delimited_claims: vec![],
        required: rng.random_bool(0.2),
    }
}

/// A random translated AuthorizationPolicy: any action, up to two rules whose matches mix
/// what every chain checks, what only HTTP chains check, and what none checks yet.
fn authz(rng: &mut StdRng) -> AuthzPolicy {
    let action = pick(
        rng,
        &[
            AuthzAction::Allow,
            AuthzAction::Allow,
            AuthzAction::Deny,
            AuthzAction::Audit,
        ],
    );
    let one = |rng: &mut StdRng| {
        let (field, values): (AuthzField, &[&str]) = match rng.random_range(0..12) {
            0 => (
                AuthzField::Principal,
                &["cluster.local/ns/default/sa/a", "*"],
            ),
            1 => (AuthzField::Namespace, &["default", "ns*"]),
            2 => (AuthzField::SourceIp, &["10.0.0.0/8"]),
            3 => (AuthzField::Port, &["9080", "15000"]),
            4 => (AuthzField::Method, &["GET"]),
            5 => (AuthzField::Path, &["/admin*", "*.png"]),
            6 => (AuthzField::Header("x-team".into()), &["blue"]),
            7 => (
                AuthzField::RequestPrincipal,
                &["https://idp.example/alice", "*", "*/bob"],
            ),
            8 => (AuthzField::Claim(vec!["groups".into()]), &["admin", "ops*"]),
            9 => (
                AuthzField::FilterMetadata {
                    filter: "envoy.filters.http.a".into(),
                    key: "b".into(),
                },
                &["x", "[y]"],
            ),
            10 => (AuthzField::TrustDomain, &["cluster.local", "*", "corp*"]),
            _ => (AuthzField::Path, &["/a/{*}/b", "/c/{**}"]),
        };
        AuthzMatch {
            field,
            values: values.iter().map(|v| v.to_string()).collect(),
            not: rng.random_bool(0.3),
        }
    };
    let entries = |rng: &mut StdRng| -> Vec<Vec<AuthzMatch>> {
        (0..rng.random_range(0..3))
            .map(|_| (0..rng.random_range(0..3)).map(|_| one(rng)).collect())
            .collect()
    };
    let rules = (0..rng.random_range(0..3))
        .map(|_| AuthzRule {
            from: entries(rng),
            to: entries(rng),
            when: (0..rng.random_range(0..2)).map(|_| one(rng)).collect(),
        })
        .collect();
    AuthzPolicy {
        action,
        rules,
        dry_run: rng.random_bool(0.2),
    }
}

/// A random held mTLS change of workload `w`: from and to any client view (mTLS
/// everywhere, or plaintext on the workload or on one port), clients moved or not.
pub fn hold(rng: &mut StdRng, w: &Workload) -> Record {
    let view = |rng: &mut StdRng| match rng.random_range(0..3) {
        0 => None,
        1 => Some(PeerModes {
            mode: MtlsMode::Disable,
            ports: BTreeMap::new(),
        }),
        _ => Some(PeerModes {
            mode: pick(rng, &[MtlsMode::Strict, MtlsMode::Permissive]),
            ports: [(pick(rng, &[9080, 8888]), MtlsMode::Disable)]
                .into_iter()
                .collect(),
        }),
    };
    Record::MtlsHold(MtlsHold {
        ip: w.ip.clone(),
        workload: w.origin.clone(),
        from: view(rng),
        to: view(rng),
        clients_moved: rng.random_bool(0.5),
    })
}
