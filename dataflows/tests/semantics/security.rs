//! The security stopgap (issue 36): security.istio.io policies meshflow does not translate
//! make the sidecars they select fail closed. A STRICT PeerAuthentication (mesh, namespace
//! or workload level, Istio's precedence) leaves only mTLS chains on the ports it covers;
//! a restricting AuthorizationPolicy puts a deny-all network RBAC filter first on every
//! inbound chain; a RequestAuthentication refuses requests carrying a token. Each
//! restricting policy that applies to a connected proxy is an error (MF0017). Gateways an
//! AuthorizationPolicy or RequestAuthentication selects refuse on every listener; what the
//! stopgap does not reach (uncaptured sidecars, proxyless servers) the error says is not
//! protected.

use crate::support::{
    endpoint, gateway, gateway_errors, labels, mesh_settings, px, router_proxy, service,
    sidecar_proxy, workload, Mesh,
};
use dataflows::model::*;
use envoy_types::pb::envoy::config::listener::v3::{filter, FilterChain, Listener};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_filter, HttpConnectionManager,
};
use prost::Message;
use std::collections::BTreeMap;

fn policy(
    kind: Kind,
    ns: &str,
    name: &str,
    created: &str,
    selector: Option<&[(&str, &str)]>,
    effect: PolicyEffect,
) -> Record {
    Record::Security(SecurityPolicy {
        key: ConfigKey::new(kind, ns, name),
        created: created.into(),
        selector: selector.map(labels),
        effect,
    })
}

fn peer(ns: &str, name: &str, selector: Option<&[(&str, &str)]>, mode: MtlsMode) -> Record {
    let effect = PolicyEffect::Peer {
        mode,
        ports: BTreeMap::new(),
    };
    policy(Kind::PeerAuthentication, ns, name, "", selector, effect)
}

/// A CUSTOM policy of `rules: [{}]` whose provider the mesh config lacks: every request
/// and connection to what it selects is denied, as istiod denies them.
fn deny_all(ns: &str, name: &str, selector: Option<&[(&str, &str)]>) -> Record {
    policy(
        Kind::AuthorizationPolicy,
        ns,
        name,
        "",
        selector,
        PolicyEffect::Custom(CustomAuthz {
            provider: "missing".into(),
            rules: vec![AuthzRule::default()],
        }),
    )
}

/// A RequestAuthentication with one rule of `issuer`, keys at `jwks`.
pub(crate) fn jwt_policy(
    ns: &str,
    name: &str,
    selector: Option<&[(&str, &str)]>,
    issuer: &str,
    jwks: Jwks,
) -> Record {
    let rule = JwtRule::new(issuer, jwks);
    let effect = PolicyEffect::Jwt(vec![rule]);
    policy(Kind::RequestAuthentication, ns, name, "", selector, effect)
}

fn tokens(ns: &str, name: &str, selector: Option<&[(&str, &str)]>) -> Record {
    jwt_policy(
        ns,
        name,
        selector,
        "https://idp.example",
        Jwks::Inline(r#"{"keys":[]}"#.into()),
    )
}

/// ratings (default, 10.1.0.1) and reviews (default, 10.1.0.2), each serving HTTP 9080.
pub(crate) fn two_workloads() -> (Mesh, Proxy, Proxy) {
    let mut m = Mesh::new();
    let ratings = sidecar_proxy("ratings-1", "default", "10.1.0.1", &[("app", "ratings")]);
    let reviews = sidecar_proxy("reviews-1", "default", "10.1.0.2", &[("app", "reviews")]);
    m.insert(vec![
        service("ratings", "default"),
        endpoint("ratings", "default", "10.1.0.1", true),
        service("reviews", "default"),
        endpoint("reviews", "default", "10.1.0.2", true),
        px(&ratings),
        px(&reviews),
    ]);
    (m, ratings, reviews)
}

fn inbound(m: &Mesh, p: &Proxy) -> Listener {
    m.listener_body(p, "virtualInbound")
}

fn chain_names(l: &Listener) -> Vec<String> {
    l.filter_chains.iter().map(|c| c.name.clone()).collect()
}

/// Per chain, its first filter, or for a chain that starts with a connection manager, the
/// manager's first HTTP filter: where a refusal would be.
fn first_filters(l: &Listener) -> Vec<(String, String)> {
    l.filter_chains
        .iter()
        .map(|c| {
            let first = &c.filters[0].name;
            let name = if first == "envoy.filters.network.http_connection_manager" {
                hcm_of(c)
                    .http_filters
                    .first()
                    .map(|f| f.name.clone())
                    .unwrap_or_default()
            } else {
                first.clone()
            };
            (c.name.clone(), name)
        })
        .collect()
}

/// The enforcing rules of a chain's first RBAC filter (network, or HTTP in its manager).
fn first_rbac_rules(c: &FilterChain) -> envoy_types::pb::envoy::config::rbac::v3::Rbac {
    use envoy_types::pb::envoy::extensions::filters::http::rbac::v3::Rbac as HttpRbac;
    use envoy_types::pb::envoy::extensions::filters::network::rbac::v3::Rbac as NetRbac;
    if c.filters[0].name == "envoy.filters.network.rbac" {
        let Some(filter::ConfigType::TypedConfig(any)) = &c.filters[0].config_type else {
            panic!("no config");
        };
        return NetRbac::decode(&any.value[..])
            .expect("RBAC")
            .rules
            .expect("rules");
    }
    let hcm = hcm_of(c);
    let Some(http_filter::ConfigType::TypedConfig(any)) = &hcm.http_filters[0].config_type else {
        panic!("no config");
    };
    HttpRbac::decode(&any.value[..])
        .expect("RBAC")
        .rules
        .expect("rules")
}

fn hcm_of(c: &FilterChain) -> HttpConnectionManager {
    let f = c
        .filters
        .iter()
        .find(|f| f.name == "envoy.filters.network.http_connection_manager")
        .expect("a connection manager");
    let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
        panic!("no config");
    };
    HttpConnectionManager::decode(&any.value[..]).expect("an HCM")
}

const OPEN_CHAINS: [&str; 3] = [
    "inbound|9080||",
    "inbound|9080||-mtls",
    "virtualInbound-catchall-tcp",
];

/// A mesh-wide STRICT PeerAuthentication (root namespace, no selector) leaves every
/// sidecar only its mTLS chains: the plaintext chain of 9080 is gone and the catch-all of
/// undeclared ports takes mTLS only; translated, it is no error. Retracting it brings the
/// plaintext chains back.
#[test]
fn mesh_wide_strict_leaves_only_mtls_chains() {
    let (mut m, ratings, reviews) = two_workloads();
    assert_eq!(chain_names(&inbound(&m, &ratings)), OPEN_CHAINS);
    let strict = peer("istio-system", "default", None, MtlsMode::Strict);
    m.insert(vec![strict.clone()]);
    for p in [&ratings, &reviews] {
        let l = inbound(&m, p);
        assert_eq!(
            chain_names(&l),
            ["inbound|9080||-mtls", "virtualInbound-catchall-mtls"]
        );
        for c in &l.filter_chains {
            assert!(c.transport_socket.is_some(), "{} is plaintext", c.name);
            let matched = c.filter_chain_match.as_ref().expect("a match");
            assert_eq!(matched.transport_protocol, "tls", "{}", c.name);
        }
    }
    // Translated as Istio does: no error (it selects no proxy it cannot reach).
    let errors = gateway_errors(&m, ErrorCode::SecurityPolicyFailsClosed);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        ErrorCode::SecurityPolicyFailsClosed.message_code().0,
        "MF0017"
    );
    m.retract(vec![strict]);
    assert_eq!(chain_names(&inbound(&m, &ratings)), OPEN_CHAINS);
    assert!(gateway_errors(&m, ErrorCode::SecurityPolicyFailsClosed).is_empty());
}

/// Istio's precedence: a namespace policy overrides the mesh's, a workload policy the
/// namespace's (UNSET inherits); in one slot the oldest wins (creationTimestamp, then name);
/// `portLevelMtls` of the workload policy sets a port apart; a selector policy in the root
/// namespace applies to nothing; a PERMISSIVE-only mesh is no error.
#[test]
fn peer_authentication_precedence_follows_istio() {
    let (mut m, ratings, reviews) = two_workloads();
    let mesh_strict = peer("istio-system", "default", None, MtlsMode::Strict);
    let ns_permissive = peer("default", "ns", None, MtlsMode::Permissive);
    m.insert(vec![mesh_strict.clone(), ns_permissive.clone()]);
    assert_eq!(chain_names(&inbound(&m, &ratings)), OPEN_CHAINS);
    // Translated: no error.
    assert!(gateway_errors(&m, ErrorCode::SecurityPolicyFailsClosed).is_empty());

    // A workload policy STRICT on ratings, with port 9080 PERMISSIVE: 9080 keeps its
    // plaintext chain, the catch-all (the workload's mode) takes mTLS only.
    let Record::Security(mut wl) = peer(
        "default",
        "ratings",
        Some(&[("app", "ratings")]),
        MtlsMode::Strict,
    ) else {
        unreachable!()
    };
    wl.effect = PolicyEffect::Peer {
        mode: MtlsMode::Strict,
        ports: BTreeMap::from([(9080, MtlsMode::Permissive)]),
    };
    m.insert(vec![Record::Security(wl.clone())]);
    assert_eq!(
        chain_names(&inbound(&m, &ratings)),
        [
            "inbound|9080||",
            "inbound|9080||-mtls",
            "virtualInbound-catchall-mtls"
        ]
    );
    assert_eq!(chain_names(&inbound(&m, &reviews)), OPEN_CHAINS);
    m.retract(vec![Record::Security(wl)]);

    // Two namespace policies: the older (STRICT) wins over a later PERMISSIVE one...
    let older = policy(
        Kind::PeerAuthentication,
        "default",
        "zz-older",
        "2020-01-01T00:00:00Z",
        None,
        PolicyEffect::Peer {
            mode: MtlsMode::Strict,
            ports: BTreeMap::new(),
        },
    );
    let Record::Security(mut newer) = ns_permissive.clone() else {
        unreachable!()
    };
    newer.created = "2021-01-01T00:00:00Z".into();
    m.replace(ns_permissive, Record::Security(newer.clone()));
    m.insert(vec![older.clone()]);
    assert_eq!(
        chain_names(&inbound(&m, &ratings)),
        ["inbound|9080||-mtls", "virtualInbound-catchall-mtls"]
    );
    // ...and, with equal timestamps, the first by name.
    let Record::Security(mut same_time) = older.clone() else {
        unreachable!()
    };
    same_time.created = newer.created.clone();
    m.replace(older, Record::Security(same_time.clone()));
    // "ns" < "zz-older": PERMISSIVE wins.
    assert_eq!(chain_names(&inbound(&m, &ratings)), OPEN_CHAINS);
    m.retract(vec![
        Record::Security(same_time),
        Record::Security(newer),
        mesh_strict,
    ]);

    // A selector PeerAuthentication in the root namespace is ignored, as in Istio.
    let root_selector = peer(
        "istio-system",
        "sel",
        Some(&[("app", "ratings")]),
        MtlsMode::Strict,
    );
    m.insert(vec![root_selector]);
    assert_eq!(chain_names(&inbound(&m, &ratings)), OPEN_CHAINS);
    assert!(gateway_errors(&m, ErrorCode::SecurityPolicyFailsClosed).is_empty());
}

/// A CUSTOM AuthorizationPolicy selecting `app: ratings` whose provider the mesh config
/// lacks puts an RBAC DENY of its rules first on every chain of ratings' `virtualInbound`
/// (the catch-all too: network RBAC; HTTP chains: first in the connection manager), named
/// as Istio names it, and the policy's error says why; reviews is untouched. One in the
/// root namespace with a selector applies in every namespace.
#[test]
fn authorization_policy_denies_every_chain_of_the_workloads_it_selects() {
    let (mut m, ratings, reviews) = two_workloads();
    let deny = deny_all("default", "ratings-deny", Some(&[("app", "ratings")]));
    m.insert(vec![deny.clone()]);
    let rbac = |f: &String| f.ends_with(".rbac");
    let firsts = first_filters(&inbound(&m, &ratings));
    assert_eq!(firsts.len(), 3, "{firsts:?}");
    assert!(firsts.iter().all(|(_, f)| rbac(f)), "{firsts:?}");
    assert!(first_filters(&inbound(&m, &reviews))
        .iter()
        .all(|(_, f)| !rbac(f)));
    for c in &inbound(&m, &ratings).filter_chains {
        let rules = first_rbac_rules(c);
        assert_eq!(rules.action, 1, "DENY");
        let names: Vec<&String> = rules.policies.keys().collect();
        assert_eq!(
            names,
            ["istio-ext-authz-missing-ns[default]-policy[ratings-deny]-rule[0]-deny-due-to-bad-CUSTOM-action"],
            "{}",
            c.name
        );
    }
    let errors = gateway_errors(&m, ErrorCode::ExtAuthzProviderUnusable);
    assert!(
        errors.len() == 1 && errors[0].contains("ratings-deny") && errors[0].contains("missing"),
        "{errors:?}"
    );
    m.retract(vec![deny]);
    assert_eq!(chain_names(&inbound(&m, &ratings)), OPEN_CHAINS);
    assert!(first_filters(&inbound(&m, &ratings))
        .iter()
        .all(|(_, f)| !rbac(f)));

    // Root namespace, selector: every `app: reviews` workload of any namespace.
    let root = deny_all("istio-system", "reviews", Some(&[("app", "reviews")]));
    m.insert(vec![root]);
    assert!(first_filters(&inbound(&m, &reviews))
        .iter()
        .all(|(_, f)| rbac(f)));
    assert!(first_filters(&inbound(&m, &ratings))
        .iter()
        .all(|(_, f)| !rbac(f)));
}

/// A RequestAuthentication selecting ratings puts `jwt_authn` first in each HTTP chain's
/// connection manager, and drops the catch-all (it proxies bytes: it cannot verify a token
/// where Istio's HTTP catch-all would); reviews keeps its chains as they were. Translated:
/// no error says it fails closed.
#[test]
fn request_authentication_verifies_tokens_first() {
    let (mut m, ratings, reviews) = two_workloads();
    let before_reviews = inbound(&m, &reviews);
    m.insert(vec![tokens("default", "jwt", Some(&[("app", "ratings")]))]);
    let l = inbound(&m, &ratings);
    assert_eq!(
        chain_names(&l),
        ["inbound|9080||", "inbound|9080||-mtls"],
        "no catch-all"
    );
    for c in &l.filter_chains {
        let hcm = hcm_of(c);
        assert_eq!(hcm.http_filters[0].name, "envoy.filters.http.jwt_authn");
    }
    assert_eq!(inbound(&m, &reviews), before_reviews);
    assert!(gateway_errors(&m, ErrorCode::SecurityPolicyFailsClosed).is_empty());
}

/// A restricting AuthorizationPolicy (CUSTOM, its provider missing) selecting a gateway:
/// every chain of every listener of its scope starts with its RBAC DENY, and the error
/// names the provider field; a
/// RequestAuthentication puts `jwt_authn` first in its HTTP connection managers; a
/// STRICT PeerAuthentication changes nothing of a gateway (Istio applies none to them). A
/// gateway no policy selects keeps its listeners; retracting the policy opens them again.
#[test]
fn a_policy_selecting_a_gateway_fails_its_listeners_closed() {
    let mut m = Mesh::new();
    let ingress = &[("istio", "ingressgateway")];
    let gw = router_proxy("ingress-1", "istio-system", "10.1.0.9", ingress);
    let other = router_proxy(
        "egress-1",
        "istio-system",
        "10.1.0.10",
        &[("istio", "egress")],
    );
    m.insert(vec![
        px(&gw),
        px(&other),
        gateway(
            "istio-system",
            "web",
            &[("istio", "ingressgateway")],
            &[(8080, None)],
        ),
        gateway(
            "istio-system",
            "out",
            &[("istio", "egress")],
            &[(8080, None)],
        ),
    ]);
    let open = m.listener_body(&gw, "0.0.0.0_8080");
    let open_other = m.listener_body(&other, "0.0.0.0_8080");
    assert!(
        open.filter_chains
            .iter()
            .all(|c| c.filters[0].name == "envoy.filters.network.http_connection_manager"),
        "{open:?}"
    );
    let nothing = deny_all("default", "nobody", Some(&[("app", "none")]));
    m.insert(vec![
        nothing,
        peer("istio-system", "mesh", None, MtlsMode::Strict),
    ]);
    assert_eq!(
        m.listener_body(&gw, "0.0.0.0_8080"),
        open,
        "PeerAuthentication: not for gateways"
    );

    let policy = deny_all("istio-system", "gw", Some(ingress));
    m.insert(vec![policy.clone()]);
    let denied = m.listener_body(&gw, "0.0.0.0_8080");
    assert!(!denied.filter_chains.is_empty());
    for (chain, first) in first_filters(&denied) {
        assert_eq!(first, "envoy.filters.http.rbac", "{chain}");
    }
    for c in &denied.filter_chains {
        assert_eq!(first_rbac_rules(c).action, 1, "DENY");
    }
    assert_eq!(m.listener_body(&other, "0.0.0.0_8080"), open_other);
    let errors = gateway_errors(&m, ErrorCode::ExtAuthzProviderUnusable);
    let about_gw: Vec<&String> = errors.iter().filter(|e| e.contains("/gw")).collect();
    assert!(
        about_gw.len() == 1
            && about_gw[0].contains("spec.provider.name")
            && !about_gw[0].contains("NOT protect"),
        "{errors:?}"
    );
    m.retract(vec![policy]);
    assert_eq!(m.listener_body(&gw, "0.0.0.0_8080"), open);

    m.insert(vec![tokens("istio-system", "jwt", Some(ingress))]);
    let checked = m.listener_body(&gw, "0.0.0.0_8080");
    for c in &checked.filter_chains {
        assert_eq!(
            c.filters[0].name,
            "envoy.filters.network.http_connection_manager"
        );
        assert_eq!(
            hcm_of(c).http_filters[0].name,
            "envoy.filters.http.jwt_authn"
        );
    }
}

/// A restricting policy selecting a proxy the stopgap does not reach (a sidecar without
/// traffic capture) says it is not protected; one that selects no connected proxy is no
/// error.
#[test]
fn a_policy_selecting_an_uncaptured_sidecar_says_it_is_not_protected() {
    let mut m = Mesh::new();
    let mut bare = sidecar_proxy("bare-1", "default", "10.1.0.11", &[("app", "bare")]);
    bare.interception_none = true;
    m.insert(vec![px(&bare)]);
    m.insert(vec![deny_all(
        "default",
        "nobody",
        Some(&[("app", "none")]),
    )]);
    assert!(gateway_errors(&m, ErrorCode::SecurityPolicyFailsClosed).is_empty());
    m.insert(vec![deny_all("default", "bare", Some(&[("app", "bare")]))]);
    let errors = gateway_errors(&m, ErrorCode::SecurityPolicyFailsClosed);
    assert!(
        errors.len() == 1 && errors[0].contains("NOT protect"),
        "{errors:?}"
    );
}

/// A Sidecar `ingress` listener the proxy binds itself (`captureMode: NONE` on a captured
/// sidecar; every `ingress` of a sidecar without capture) refuses what the policies
/// selecting the proxy ask, as `virtualInbound` does: the deny-all first in every chain, and
/// under STRICT only the mTLS chain. Proxies under the same Sidecar that no policy selects
/// keep the open listener (their scope is not split), and retracting the policy opens it.
#[test]
fn bound_ingress_listeners_fail_closed_too() {
    let mut m = Mesh::new();
    let paid = &[("app", "ratings"), ("tier", "paid")];
    let captured = sidecar_proxy("ratings-1", "default", "10.1.0.1", paid);
    let bare = Proxy {
        interception_none: true,
        ..sidecar_proxy("ratings-2", "default", "10.1.0.2", paid)
    };
    let free = &[("app", "ratings"), ("tier", "free")];
    let other = sidecar_proxy("ratings-3", "default", "10.1.0.3", free);
    let ingress = IngressListener {
        port: 7070,
        bind: None,
        endpoint: ("127.0.0.1".into(), 17070),
        capture_none: true,
        protocol: Protocol::Http,
        tls: None,
        connection_pool: None,
        fail_closed: None,
    };
    m.insert(vec![
        px(&captured),
        px(&bare),
        px(&other),
        Record::Sidecar(Sidecar {
            key: ConfigKey::new(Kind::Sidecar, "default", "ratings"),
            selector: Some(labels(&[("app", "ratings")])),
            egress: Vec::new(),
            registry_only: None,
            ingress: vec![ingress],
            egress_proxy: None,
            inbound_connection_pool: None,
        }),
    ]);
    const BOUND: &str = "inbound_0.0.0.0_7070";
    let open = m.listener_body(&captured, BOUND);
    assert_eq!(chain_names(&open).len(), 2, "{open:?}");
    assert_eq!(m.listener_body(&bare, BOUND), open);

    // The paid tier only: `other` keeps the open listener.
    let not_free = policy(
        Kind::AuthorizationPolicy,
        "default",
        "deny",
        "",
        Some(&[("tier", "paid")]),
        PolicyEffect::Authz(AuthzPolicy {
            action: AuthzAction::Deny,
            rules: vec![AuthzRule::default()],
            dry_run: false,
        }),
    );
    m.insert(vec![not_free.clone()]);
    assert_eq!(m.listener_body(&other, BOUND), open);
    for p in [&captured, &bare] {
        let l = m.listener_body(p, BOUND);
        assert!(
            first_filters(&l).iter().all(|(_, f)| f.ends_with(".rbac")),
            "{}: {l:?}",
            p.id
        );
    }
    m.retract(vec![not_free]);
    assert_eq!(m.listener_body(&captured, BOUND), open);

    m.insert(vec![peer(
        "default",
        "strict",
        Some(&[("tier", "free")]),
        MtlsMode::Strict,
    )]);
    let strict = m.listener_body(&other, BOUND);
    assert_eq!(
        chain_names(&strict),
        chain_names(&open)
            .into_iter()
            .filter(|n| n.ends_with("-mtls"))
            .collect::<Vec<_>>(),
        "only the mTLS chain under STRICT"
    );
    assert_eq!(m.listener_body(&captured, BOUND), open);
    // Translated, and every proxy it selects reached: no error.
    let errors = gateway_errors(&m, ErrorCode::SecurityPolicyFailsClosed);
    assert!(errors.is_empty(), "{errors:?}");
}

/// A policy whose selector matches no workload of its namespace (or of any, from the root
/// namespace) is a warning (MF0020, Istio's IST0127) that retracts once a Pod matches; one
/// without a selector, or matching, is none.
#[test]
fn a_policy_selecting_no_workload_is_a_warning_until_one_matches() {
    let mut m = Mesh::new();
    m.insert(vec![
        deny_all("default", "ratings-only", Some(&[("app", "ratings")])),
        deny_all("istio-system", "mesh-ratings", Some(&[("app", "ratings")])),
        tokens("default", "everyone", None),
    ]);
    let warned = |m: &Mesh| gateway_errors(m, ErrorCode::SecurityPolicySelectsNothing);
    let w = warned(&m);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w.iter().all(|e| e.contains("matches no workload")), "{w:?}");
    m.insert(vec![workload(
        "ratings-1",
        "other",
        "10.1.0.7",
        &[("app", "ratings")],
    )]);
    let w = warned(&m);
    assert!(
        w.len() == 1 && w[0].contains("ratings-only"),
        "a workload of another namespace matches only the root namespace's policy: {w:?}"
    );
    m.insert(vec![workload(
        "ratings-2",
        "default",
        "10.1.0.8",
        &[("app", "ratings")],
    )]);
    assert!(warned(&m).is_empty());
}

/// A CUSTOM policy whose provider the mesh config defines and whose service exists: on
/// ratings' HTTP chains an RBAC filter whose shadow rules are the policy's (Istio's names),
/// then ext_authz enabled by them, asking the provider's cluster; on the TCP catch-all
/// (a gRPC provider) the network pair. The provider's service going away turns both into
/// the enforcing deny, with the error; reviews never changes. An HTTP provider cannot
/// check a TCP connection: its rules deny there instead.
#[test]
fn a_custom_policy_asks_its_provider_and_fails_closed_without_it() {
    let (mut m, ratings, reviews) = two_workloads();
    let before_reviews = inbound(&m, &reviews);
    let provider = |api: ExtAuthzApi| ExtAuthzProvider {
        name: "authz".into(),
        api,
        service: "default/ext.default.svc.cluster.local".into(),
        port: 9000,
        timeout_ms: Some(250),
        fail_open: false,
        status_on_error: None,
        body: None,
        problem: None,
    };
    let grpc_mesh = mesh_settings(|s| s.ext_authz = vec![provider(ExtAuthzApi::Grpc)]);
    let ext = service("ext", "default");
    let custom = policy(
        Kind::AuthorizationPolicy,
        "default",
        "ask",
        "",
        Some(&[("app", "ratings")]),
        PolicyEffect::Custom(CustomAuthz {
            provider: "authz".into(),
            rules: vec![AuthzRule::default()],
        }),
    );
    m.insert(vec![grpc_mesh.clone(), ext.clone(), custom]);
    let rule = "istio-ext-authz-authz-ns[default]-policy[ask]-rule[0]";
    let cluster = "outbound|9000||ext.default.svc.cluster.local";
    let l = inbound(&m, &ratings);
    for c in &l.filter_chains {
        let names: Vec<String> =
            if c.filters[0].name == "envoy.filters.network.http_connection_manager" {
                hcm_of(c)
                    .http_filters
                    .iter()
                    .map(|f| f.name.clone())
                    .take(2)
                    .collect()
            } else {
                c.filters.iter().map(|f| f.name.clone()).take(2).collect()
            };
        assert!(
            names[0].ends_with(".rbac") && names[1].ends_with(".ext_authz"),
            "{}: {names:?}",
            c.name
        );
        let bytes = String::from_utf8_lossy(&c.encode_to_vec()).into_owned();
        assert!(
            bytes.contains(rule) && bytes.contains(cluster),
            "{}",
            c.name
        );
        assert!(bytes.contains("istio_ext_authz_"), "{}", c.name);
    }
    assert!(gateway_errors(&m, ErrorCode::ExtAuthzProviderUnusable).is_empty());
    assert_eq!(inbound(&m, &reviews), before_reviews);

    // Its service gone: the rules deny, and the error names the policy.
    m.retract(vec![ext.clone()]);
    for c in &inbound(&m, &ratings).filter_chains {
        let rules = first_rbac_rules(c);
        assert_eq!(rules.action, 1, "DENY");
        assert!(
            rules
                .policies
                .contains_key(&format!("{rule}-deny-due-to-bad-CUSTOM-action")),
            "{}",
            c.name
        );
    }
    let errors = gateway_errors(&m, ErrorCode::ExtAuthzProviderUnusable);
    assert!(
        errors.len() == 1 && errors[0].contains("/ask"),
        "{errors:?}"
    );
    assert_eq!(inbound(&m, &reviews), before_reviews);

    // Back, as an HTTP provider: HTTP chains ask it, the TCP catch-all denies.
    m.insert(vec![ext]);
    let http_mesh =
        mesh_settings(|s| s.ext_authz = vec![provider(ExtAuthzApi::Http(HttpExtAuthz::default()))]);
    m.replace(grpc_mesh, http_mesh);
    let l = inbound(&m, &ratings);
    let mut tcp = 0;
    for c in &l.filter_chains {
        if c.filters[0].name == "envoy.filters.network.http_connection_manager" {
            assert_eq!(
                hcm_of(c).http_filters[1].name,
                "envoy.filters.http.ext_authz"
            );
        } else {
            tcp += 1;
            let rules = first_rbac_rules(c);
            assert_eq!(rules.action, 1, "DENY");
            assert!(rules
                .policies
                .contains_key(&format!("{rule}-deny-due-to-http-provider-on-tcp")));
        }
    }
    assert!(tcp > 0, "the catch-all proxies bytes");
    assert!(gateway_errors(&m, ErrorCode::ExtAuthzProviderUnusable).is_empty());
    assert_eq!(inbound(&m, &reviews), before_reviews);
}

/// A namespace an AuthorizationPolicy's rules name (`namespaces`, a principal's `ns/NS`)
/// where nothing lives is a warning naming the field (MF0022, Istio's IST0101 for
/// namespaces), patterns matched as Istio matches them; it retracts once a workload lives
/// there. A namespace-wide AuthorizationPolicy in a namespace with no workload is MF0020.
#[test]
fn a_policy_naming_an_empty_namespace_is_a_warning() {
    let (mut m, _, _) = two_workloads();
    let m_of = |field, values: &[&str]| AuthzMatch {
        field,
        values: values.iter().map(|v| v.to_string()).collect(),
        not: false,
    };
    let allow = policy(
        Kind::AuthorizationPolicy,
        "default",
        "refs",
        "",
        Some(&[("app", "ratings")]),
        PolicyEffect::Authz(AuthzPolicy {
            action: AuthzAction::Allow,
            rules: vec![AuthzRule {
                from: vec![
                    vec![m_of(
                        AuthzField::Namespace,
                        &["default", "nowhere", "def*", "*-x"],
                    )],
                    vec![m_of(
                        AuthzField::Principal,
                        &[
                            "cluster.local/ns/ghost/sa/a",
                            "cluster.local/ns/default/sa/b",
                            "*",
                        ],
                    )],
                ],
                to: vec![],
                when: vec![],
            }],
            dry_run: false,
        }),
    );
    m.insert(vec![allow]);
    let warned = gateway_errors(&m, ErrorCode::NamespaceNotFound);
    assert_eq!(warned.len(), 3, "{warned:?}");
    let says = |ns: &str, field: &str| {
        warned
            .iter()
            .any(|w| w.contains(&format!("{field}: namespace \"{ns}\"")))
    };
    assert!(says("*-x", "from.source.namespaces"), "{warned:?}");
    assert!(says("nowhere", "from.source.namespaces"), "{warned:?}");
    assert!(says("ghost", "from.source.principals"), "{warned:?}");
    m.insert(vec![workload("g-1", "ghost", "10.1.0.9", &[("app", "g")])]);
    assert_eq!(gateway_errors(&m, ErrorCode::NamespaceNotFound).len(), 2);

    let empty = policy(
        Kind::AuthorizationPolicy,
        "empty",
        "all",
        "",
        None,
        PolicyEffect::Authz(AuthzPolicy {
            action: AuthzAction::Allow,
            rules: vec![],
            dry_run: false,
        }),
    );
    m.insert(vec![empty]);
    let nothing = gateway_errors(&m, ErrorCode::SecurityPolicySelectsNothing);
    assert!(
        nothing
            .iter()
            .any(|e| e.contains("empty/all") && e.contains("no workload")),
        "{nothing:?}"
    );
    m.insert(vec![workload("e-1", "empty", "10.1.0.10", &[("app", "e")])]);
    let nothing = gateway_errors(&m, ErrorCode::SecurityPolicySelectsNothing);
    assert!(
        !nothing.iter().any(|e| e.contains("empty/all")),
        "{nothing:?}"
    );
}

/// A VirtualService bound to a Gateway that routes on a JWT claim, where no
/// RequestAuthentication applies to the gateway's workload, is an error (Istio's IST0149):
/// the gateway never verifies a token, so the route never matches. One selecting the
/// workload (or a namespace-wide one of its namespace) ends it.
#[test]
fn claim_routes_through_a_gateway_without_request_authentication_are_reported() {
    let mut m = Mesh::new();
    let Record::VirtualService(mut vs) = crate::support::virtual_service(
        "default",
        "claims",
        &["bookinfo.example.com"],
        &["istio-system/gw"],
        &crate::support::host("reviews", "default"),
    ) else {
        unreachable!()
    };
    vs.http[0].matches = vec![HttpMatch {
        headers: [(
            "@request.auth.claims.groups".to_string(),
            StringMatch::Exact("admin".into()),
        )]
        .into(),
        ..Default::default()
    }];
    m.insert(vec![
        service("reviews", "default"),
        gateway(
            "istio-system",
            "gw",
            &[("istio", "ingressgateway")],
            &[(80, None)],
        ),
        workload(
            "ingress-0",
            "istio-system",
            "10.0.6.1",
            &[("istio", "ingressgateway")],
        ),
        Record::VirtualService(vs),
    ]);
    assert_eq!(
        gateway_errors(&m, ErrorCode::ClaimRouteUnverified),
        vec![
            "VirtualService/default/claims: spec.http: routes on the JWT claim \
             \"@request.auth.claims.groups\" through Gateway istio-system/gw, and no \
             RequestAuthentication applies to its workload Pod istio-system/ingress-0: that \
             gateway never verifies a token, so the condition never holds there (IST0149 \
             JwtClaimBasedRoutingWithoutRequestAuthN)"
                .to_string()
        ]
    );
    assert!(!ErrorCode::ClaimRouteUnverified.is_warning());
    m.insert(vec![tokens(
        "istio-system",
        "jwt",
        Some(&[("istio", "ingressgateway")]),
    )]);
    assert!(gateway_errors(&m, ErrorCode::ClaimRouteUnverified).is_empty());
}
