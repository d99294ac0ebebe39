//! PeerAuthentication, AuthorizationPolicy and RequestAuthentication read for the
//! fail-closed stopgap: modes and ports, whether an authorization restricts, where tokens
//! are looked for; an error finding on each object that restricts, warnings on what
//! restricts nothing, `targetRef` policies reported as not enforced, invalid objects
//! refused naming the field.

use super::*;
use dataflows::model::{
    AuthzAction, AuthzField, AuthzMatch, AuthzRule, CustomAuthz, Jwks, MtlsMode, PolicyEffect,
    SecurityPolicy, TokenHeader, DEFAULT_JWKS_TIMEOUT_MS,
};
use std::collections::BTreeMap;

fn policy(p: &Parsed) -> &SecurityPolicy {
    match &p.records[..] {
        [Record::Security(s)] => s,
        other => panic!("{other:?}"),
    }
}

fn refused(doc: &str) -> crate::config::Invalid {
    parse_document(doc, &MeshConfig::default()).expect_err("refused")
}

const PA: &str = "apiVersion: security.istio.io/v1beta1\nkind: PeerAuthentication\nmetadata: {name: p, namespace: ns, creationTimestamp: \"2024-05-01T10:00:00Z\"}\n";

/// A workload PeerAuthentication: its selector, creation time, mode and port modes (ports
/// written as numbers or strings); the modes are translated (no finding), an unknown field
/// is a warning by its path.
#[test]
fn peer_authentication_reads_selector_modes_and_ports() {
    let p = parse(&format!(
        "{PA}spec:\n  selector: {{matchLabels: {{app: ratings}}}}\n  mtls: {{mode: STRICT}}\n  portLevelMtls:\n    8080: {{mode: DISABLE}}\n    \"9090\": {{mode: UNSET}}\n  extra: 1\n"
    ));
    let s = policy(&p);
    assert_eq!(s.key, ConfigKey::new(Kind::PeerAuthentication, "ns", "p"));
    assert_eq!(s.created, "2024-05-01T10:00:00Z");
    assert_eq!(
        s.selector
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str),
        Some("ratings")
    );
    assert_eq!(
        s.effect,
        PolicyEffect::Peer {
            mode: MtlsMode::Strict,
            ports: BTreeMap::from([(8080, MtlsMode::Disable), (9090, MtlsMode::Unset)]),
        }
    );
    // Translated: the modes are no finding; the unknown field is.
    assert!(fields(&p, Level::Error).is_empty());
    assert_eq!(fields(&p, Level::Warning), vec!["spec.extra"]);
    // Namespace-wide PERMISSIVE: honoured as it is (meshflow's default), nothing to say.
    let open = parse(&format!("{PA}spec: {{mtls: {{mode: PERMISSIVE}}}}\n"));
    assert!(policy(&open).selector.is_none());
    assert!(open.findings.is_empty(), "{:?}", open.findings);
    // A selector in the root namespace: applies to nothing, as in Istio; said.
    let root = parse("apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p, namespace: istio-system}\nspec: {selector: {matchLabels: {app: a}}, mtls: {mode: STRICT}}\n");
    assert!(fields(&root, Level::Warning).contains(&"spec.selector".to_string()));
}

/// Istio's validation: an unknown mode, portLevelMtls without a selector or empty, port 0.
#[test]
fn peer_authentication_refuses_what_istio_refuses() {
    for (spec, field) in [
        ("{mtls: {mode: STRICTER}}", "spec.mtls.mode"),
        (
            "{portLevelMtls: {8080: {mode: STRICT}}}",
            "spec.portLevelMtls",
        ),
        (
            "{selector: {matchLabels: {a: b}}, portLevelMtls: {}}",
            "spec.portLevelMtls",
        ),
        (
            "{selector: {matchLabels: {a: b}}, portLevelMtls: {0: {mode: STRICT}}}",
            "spec.portLevelMtls[0]",
        ),
    ] {
        let e = refused(&format!("{PA}spec: {spec}\n"));
        assert_eq!(e.field, field, "{spec}: {e}");
        assert!(
            e.to_string().starts_with("PeerAuthentication ns/p: "),
            "{e}"
        );
    }
}

const AP: &str =
    "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: a, namespace: ns}\n";

/// ALLOW, DENY and AUDIT are translated: each field of a rule becomes a match by what it
/// looks at (`not*` fields negated, `when` keys by Istio's names), with no finding; CUSTOM
/// stays a deny-all with an error; a dry-run policy is translated as such (its `istio.io/dry-run`
/// read as Istio reads it), but for CUSTOM (a warning and no record).
#[test]
fn authorization_policy_rules_are_read_field_by_field() {
    let p = parse(&format!(
        "{AP}spec:\n  selector: {{matchLabels: {{app: ratings}}}}\n  action: DENY\n  rules:\n  - from:\n    - source: {{principals: [cluster.local/ns/a/sa/b], notNamespaces: [c], ipBlocks: [10.0.0.0/8], serviceAccounts: [d/e]}}\n    to:\n    - operation: {{hosts: [x.example], notPorts: [\"8080\"], methods: [GET], paths: [/p*]}}\n    when:\n    - key: request.headers[x-team]\n      values: [blue]\n    - key: destination.port\n      notValues: [\"9090\"]\n  - {{}}\n"
    ));
    let PolicyEffect::Authz(a) = policy(&p).effect.clone() else {
        panic!("{:?}", p.records);
    };
    assert_eq!(a.action, AuthzAction::Deny);
    assert_eq!(a.rules.len(), 2);
    let got = |ms: &[AuthzMatch]| -> Vec<(AuthzField, bool)> {
        ms.iter().map(|m| (m.field.clone(), m.not)).collect()
    };
    use AuthzField as F;
    assert_eq!(
        got(&a.rules[0].from[0]),
        [
            (F::Principal, false),
            (F::Namespace, true),
            (F::ServiceAccount, false),
            (F::SourceIp, false)
        ]
    );
    assert_eq!(
        got(&a.rules[0].to[0]),
        [
            (F::Host, false),
            (F::Port, true),
            (F::Method, false),
            (F::Path, false)
        ]
    );
    assert_eq!(
        got(&a.rules[0].when),
        [(F::Header("x-team".into()), false), (F::Port, true)]
    );
    assert_eq!(
        a.rules[1],
        AuthzRule::default(),
        "an empty rule matches all"
    );
    assert!(p.findings.is_empty(), "{:?}", p.findings);

    for (spec, action) in [
        ("{}", AuthzAction::Allow),
        ("{action: AUDIT, rules: [{}]}", AuthzAction::Audit),
    ] {
        let p = parse(&format!("{AP}spec: {spec}\n"));
        let PolicyEffect::Authz(a) = &policy(&p).effect else {
            panic!("{spec}");
        };
        assert_eq!(a.action, action, "{spec}");
        assert!(p.findings.is_empty(), "{spec}: {:?}", p.findings);
    }
    let custom = parse(&format!(
        "{AP}spec: {{action: CUSTOM, provider: {{name: ext}}, rules: [{{}}]}}\n"
    ));
    assert_eq!(
        policy(&custom).effect,
        PolicyEffect::Custom(CustomAuthz {
            provider: "ext".into(),
            rules: vec![AuthzRule::default()],
        })
    );
    assert!(custom.findings.is_empty(), "{:?}", custom.findings);
    let dry = |value: &str, action: &str| {
        let provider = if action == "CUSTOM" {
            ", provider: {name: p}"
        } else {
            ""
        };
        parse(&format!(
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: a, namespace: ns, annotations: {{istio.io/dry-run: \"{value}\"}}}}\nspec: {{action: {action}{provider}, rules: [{{}}]}}\n"
        ))
    };
    let shadow = dry("True", "DENY");
    let PolicyEffect::Authz(a) = &policy(&shadow).effect else {
        panic!("translated")
    };
    assert!(
        a.dry_run && shadow.findings.is_empty(),
        "{:?}",
        shadow.findings
    );
    let enforced = dry("maybe", "DENY");
    let PolicyEffect::Authz(a) = &policy(&enforced).effect else {
        panic!("translated")
    };
    assert!(
        !a.dry_run,
        "a value Go's ParseBool cannot read leaves it enforced"
    );
    assert_eq!(
        fields(&enforced, Level::Warning),
        vec!["metadata.annotations[istio.io/dry-run]"]
    );
    let custom = dry("true", "CUSTOM");
    assert!(custom.records.is_empty());
    assert_eq!(
        fields(&custom, Level::Warning),
        vec!["metadata.annotations[istio.io/dry-run]"]
    );
}

/// Token fields (request principals, claims by path), path templates and Envoy filter
/// metadata are read as what they check, without a finding; values Istio refuses are
/// refused, naming the entry.
#[test]
fn authorization_policy_token_and_template_fields_and_bad_values() {
    let p = parse(&format!(
        "{AP}spec:\n  rules:\n  - from:\n    - source: {{requestPrincipals: [\"*\"]}}\n    to:\n    - operation: {{paths: [\"/a/{{*}}/b\"]}}\n    when:\n    - key: request.auth.claims[groups][0]\n      values: [x]\n    - key: experimental.envoy.filters.a[b]\n      values: [x]\n"
    ));
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let PolicyEffect::Authz(a) = &policy(&p).effect else {
        panic!("translated")
    };
    assert_eq!(a.rules[0].from[0][0].field, AuthzField::RequestPrincipal);
    let domains = parse(&format!(
        "{AP}spec:\n  rules:\n  - from:\n    - source: {{trustDomains: [corp.example], notTrustDomains: [\"old*\"]}}\n"
    ));
    let PolicyEffect::Authz(d) = &policy(&domains).effect else {
        panic!("translated")
    };
    assert_eq!(
        d.rules[0].from[0]
            .iter()
            .map(|m| (m.field.clone(), m.not))
            .collect::<Vec<_>>(),
        [
            (AuthzField::TrustDomain, false),
            (AuthzField::TrustDomain, true)
        ]
    );
    assert_eq!(
        a.rules[0].when[0].field,
        AuthzField::Claim(vec!["groups".into(), "0".into()])
    );
    assert_eq!(
        a.rules[0].when[1].field,
        AuthzField::FilterMetadata {
            filter: "envoy.filters.a".into(),
            key: "b".into()
        }
    );
    for (rules, field) in [
        (
            "[{to: [{operation: {paths: [\"/a/{**}/{*}\"]}}]}]",
            "spec.rules[0].to[0].operation.paths[0]",
        ),
        (
            "[{to: [{operation: {notPaths: [\"/a/x{*}\"]}}]}]",
            "spec.rules[0].to[0].operation.notPaths[0]",
        ),
        (
            "[{when: [{key: \"experimental.envoy.filters.a\", values: [x]}]}]",
            "spec.rules[0].when[0].key",
        ),
        (
            "[{from: [{source: {ipBlocks: [10.0.0.0/33]}}]}]",
            "spec.rules[0].from[0].source.ipBlocks[0]",
        ),
        (
            "[{to: [{operation: {ports: [\"0\"]}}]}]",
            "spec.rules[0].to[0].operation.ports[0]",
        ),
        (
            "[{}, {when: [{key: source.colour, values: [x]}]}]",
            "spec.rules[1].when[0].key",
        ),
        ("[{when: [{key: source.ip}]}]", "spec.rules[0].when[0]"),
        (
            "[{from: [{source: {serviceAccounts: [\"a*\"]}}]}]",
            "spec.rules[0].from[0].source.serviceAccounts[0]",
        ),
    ] {
        assert_eq!(
            refused(&format!("{AP}spec: {{action: DENY, rules: {rules}}}\n")).field,
            field,
            "{rules}"
        );
    }
}

/// A `targetRef(s)` policy is for Gateway API gateways and waypoints: an error saying it is
/// enforced nowhere, no record; with a selector too, refused; so are an unknown action, a
/// DENY without rules, a provider without CUSTOM.
#[test]
fn authorization_policy_target_refs_and_invalid_ones() {
    let p = parse(&format!(
        "{AP}spec: {{targetRefs: [{{kind: Gateway, group: gateway.networking.k8s.io, name: gw}}], action: DENY, rules: [{{}}]}}\n"
    ));
    assert!(p.records.is_empty());
    assert_eq!(fields(&p, Level::Error), vec!["spec.targetRefs"]);
    assert!(
        p.findings[0].message.contains("NOT enforced"),
        "{:?}",
        p.findings
    );
    for (spec, field) in [
        (
            "{selector: {matchLabels: {a: b}}, targetRef: {kind: Gateway, name: gw}, rules: [{}]}",
            "spec.targetRef",
        ),
        ("{action: REJECT}", "spec.action"),
        ("{action: DENY}", "spec.rules"),
        ("{action: ALLOW, provider: {name: x}}", "spec.provider"),
    ] {
        assert_eq!(
            refused(&format!("{AP}spec: {spec}\n")).field,
            field,
            "{spec}"
        );
    }
}

const RA: &str =
    "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: r, namespace: ns}\n";

/// A RequestAuthentication's JWT rules, every field read: token locations (a header's
/// prefix kept), audiences, keys written or at a URL (not fetched yet), what goes on to the
/// application, the fetch timeout. No finding: it is translated. Values Istio refuses are
/// refused naming the field; no rules, no record.
#[test]
fn request_authentication_reads_every_jwt_rule_field() {
    let p = parse(&format!(
        "{RA}spec:\n  selector: {{matchLabels: {{app: ratings}}}}\n  jwtRules:\n  - issuer: a\n    audiences: [web]\n    jwksUri: https://a/keys\n    fromHeaders: [{{name: X-Jwt, prefix: \"Bearer \"}}]\n    fromParams: [tok]\n    fromCookies: [session]\n    forwardOriginalToken: true\n    outputPayloadToHeader: x-payload\n    outputClaimToHeaders: [{{header: x-sub, claim: sub}}]\n    timeout: 2s\n    spaceDelimitedClaims: [roles]\n  - issuer: b\n    jwks: '{{\"keys\": [{{\"kty\": \"oct\", \"k\": \"AA\"}}]}}'\n"
    ));
    let PolicyEffect::Jwt(rules) = &policy(&p).effect else {
        panic!("JWT rules")
    };
    let a = &rules[0];
    assert_eq!(a.issuer, "a");
    assert_eq!(a.audiences, ["web"]);
    assert_eq!(
        a.jwks,
        Jwks::Uri {
            uri: "https://a/keys".into(),
            keys: None,
            problem: None
        }
    );
    assert_eq!(
        a.from_headers,
        [TokenHeader {
            name: "X-Jwt".into(),
            prefix: "Bearer ".into()
        }]
    );
    assert_eq!(
        (a.from_params.clone(), a.from_cookies.clone()),
        (vec!["tok".to_string()], vec!["session".to_string()])
    );
    assert!(a.forward_original_token);
    assert_eq!(a.output_payload_to_header, "x-payload");
    assert_eq!(
        a.output_claim_to_headers,
        [("x-sub".to_string(), "sub".to_string())]
    );
    assert_eq!(a.timeout_ms, 2000);
    assert_eq!(a.space_delimited_claims, ["roles"]);
    assert_eq!(
        rules[1].jwks,
        Jwks::Inline(r#"{"keys": [{"kty": "oct", "k": "AA"}]}"#.into())
    );
    assert_eq!(rules[1].timeout_ms, DEFAULT_JWKS_TIMEOUT_MS);
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    // `jwks_uri`, the API's other spelling; `presence: REQUIRED`.
    let snake = parse(&format!(
        "{RA}spec:\n  jwtRules:\n  - issuer: a\n    jwks_uri: https://a/keys\n    presence: REQUIRED\n"
    ));
    let PolicyEffect::Jwt(rules) = &policy(&snake).effect else {
        panic!("JWT rules")
    };
    assert_eq!(rules[0].jwks.uri(), Some("https://a/keys"));
    assert!(rules[0].required);
    assert!(snake.findings.is_empty(), "{:?}", snake.findings);
    // Neither jwks nor jwksUri: the issuer's OpenID configuration, as in Istio.
    let discovered = parse(&format!(
        "{RA}spec:\n  jwtRules:\n  - issuer: https://idp.example.com/\n"
    ));
    let PolicyEffect::Jwt(rules) = &policy(&discovered).effect else {
        panic!("JWT rules")
    };
    assert_eq!(
        rules[0].jwks.uri(),
        Some("https://idp.example.com/.well-known/openid-configuration")
    );
    let none = parse(&format!("{RA}spec: {{}}\n"));
    assert!(none.records.is_empty() && none.findings.is_empty());
    for (spec, field) in [
        ("{jwtRules: [{jwks: x}]}", "spec.jwtRules[0]"),
        ("{jwtRules: [{issuer: a}]}", "spec.jwtRules[0].issuer"),
        ("{jwtRules: [{issuer: a, jwks: '{}'}]}", "spec.jwtRules[0].jwks"),
        (
            "{jwtRules: [{issuer: a, jwks: '{\"keys\": []}'}]}",
            "spec.jwtRules[0].jwks",
        ),
        ("{jwtRules: [{issuer: a, jwksUri: ftp://x/k}]}", "spec.jwtRules[0].jwksUri"),
        (
            "{jwtRules: [{issuer: a, jwksUri: https://x/k, fromHeaders: [{name: \"\"}]}]}",
            "spec.jwtRules[0].fromHeaders[0].name",
        ),
        (
            "{jwtRules: [{issuer: a, jwksUri: https://x/k, outputClaimToHeaders: [{header: \"a b\", claim: c}]}]}",
            "spec.jwtRules[0].outputClaimToHeaders[0].header",
        ),
        (
            "{jwtRules: [{issuer: a, jwksUri: https://x/k, audiences: [\"\"]}]}",
            "spec.jwtRules[0].audiences[0]",
        ),
        (
            "{jwtRules: [{issuer: a, jwksUri: https://x/k, timeout: 0s}]}",
            "spec.jwtRules[0].timeout",
        ),
        (
            "{jwtRules: [{issuer: a, jwksUri: https://x/k, presence: ALWAYS}]}",
            "spec.jwtRules[0].presence",
        ),
    ] {
        assert_eq!(
            refused(&format!("{RA}spec: {spec}\n")).field,
            field,
            "{spec}"
        );
    }
}

/// A CUSTOM policy needs `provider.name`, and its rules may not name what Istio's external
/// authorization runs too early to know (the peer's identity, the request's token): each
/// refused by its field, as Istio's validation refuses it.
#[test]
fn custom_policies_are_checked_as_istio_checks_them() {
    let ap = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: a, namespace: ns}\n";
    let field = |spec: &str| refused(&format!("{ap}spec: {spec}\n")).to_string();
    assert!(field("{action: CUSTOM, rules: [{}]}").contains("spec.provider.name"));
    assert!(
        field("{action: CUSTOM, provider: {name: \"\"}, rules: [{}]}")
            .contains("spec.provider.name")
    );
    for (rule, at) in [
        (
            "{from: [{source: {principals: [x]}}]}",
            "spec.rules[0].from[0].source.principals",
        ),
        (
            "{from: [{source: {ipBlocks: [10.0.0.0/8]}}, {source: {requestPrincipals: [\"*\"]}}]}",
            "spec.rules[0].from[1].source.requestPrincipals",
        ),
        (
            "{from: [{source: {notNamespaces: [x]}}]}",
            "spec.rules[0].from[0].source.notNamespaces",
        ),
        (
            "{when: [{key: \"request.auth.claims[iss]\", values: [x]}]}",
            "spec.rules[0].when[0].key",
        ),
        (
            "{when: [{key: source.principal, values: [x]}]}",
            "spec.rules[0].when[0].key",
        ),
    ] {
        let e = field(&format!(
            "{{action: CUSTOM, provider: {{name: p}}, rules: [{rule}]}}"
        ));
        assert!(e.contains(at) && e.contains("CUSTOM"), "{rule}: {e}");
    }
    // What it may match on: addresses, operations, headers.
    let ok = parse(&format!(
        "{ap}spec: {{action: CUSTOM, provider: {{name: p}}, rules: [{{from: [{{source: {{ipBlocks: [10.0.0.0/8]}}}}], to: [{{operation: {{paths: [\"/admin*\"]}}}}], when: [{{key: \"request.headers[x-a]\", values: [b]}}]}}]}}\n"
    ));
    let PolicyEffect::Custom(c) = &policy(&ok).effect else {
        panic!("custom")
    };
    assert_eq!(c.provider, "p");
    assert_eq!(c.rules.len(), 1);
}
