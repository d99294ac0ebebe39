//! The status of ListenerSets, of their Gateways and of the routes naming them, judged from
//! files as the Gateway API's ListenerSet conformance cases write them (our own fixtures,
//! written from what each case asserts). Their traffic halves are the real-Envoy tests of
//! `tests/envoy/gateway_api_listener_set.rs`.

use super::tests::{condition_of, read_files, tls_secret_yaml};
use super::{desired, Known};
use dataflows::model::{ConfigKey, GatewayApiObject, Kind};
use serde_json::Value;
use std::collections::BTreeMap;

/// The element of the array `list` named `name` (`Null` when none is).
fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .and_then(|items| items.iter().find(|i| i["name"] == name))
        .unwrap_or(&Value::Null)
}

/// The desired status of every object in `yaml`, each at generation 1.
fn statuses(label: &str, yaml: &str) -> BTreeMap<ConfigKey, Value> {
    let (_, objects, known): (_, Vec<GatewayApiObject>, Known) = read_files(label, yaml);
    let with_generation: Vec<_> = objects.iter().map(|o| (o, Some(1), None)).collect();
    desired(&with_generation, &known)
}

fn set<'a>(status: &'a BTreeMap<ConfigKey, Value>, ns: &str, name: &str) -> &'a Value {
    status
        .get(&ConfigKey::new(Kind::ListenerSet, ns, name))
        .unwrap_or(&Value::Null)
}

fn gateway<'a>(status: &'a BTreeMap<ConfigKey, Value>, name: &str) -> &'a Value {
    status
        .get(&ConfigKey::new(Kind::KubernetesGateway, "infra", name))
        .unwrap_or(&Value::Null)
}

fn pair(status: &str, reason: &str) -> (String, String) {
    (status.to_string(), reason.to_string())
}

/// `(Accepted, Programmed)` of a status.
fn accepted_programmed(s: &Value) -> [(String, String); 2] {
    [condition_of(s, "Accepted"), condition_of(s, "Programmed")]
}

/// A Gateway `name` of namespace `infra` with `listeners` (YAML flow entries), taking the
/// ListenerSets `allowed` says (YAML of `allowedListeners`, or none).
fn gateway_yaml(name: &str, allowed: Option<&str>, listeners: &[&str]) -> String {
    let allowed = allowed
        .map(|a| format!("  allowedListeners: {a}\n"))
        .unwrap_or_default();
    let listeners: String = listeners.iter().map(|l| format!("  - {l}\n")).collect();
    format!(
        "---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: infra}}
spec:
  gatewayClassName: istio
{allowed}  listeners:
{listeners}"
    )
}

/// `allowedListeners` for the sets of the Gateway's namespace.
const SAME: &str = "{namespaces: {from: Same}}";

/// The one HTTP listener of the Gateways that need no more.
const GATEWAY_LISTENER: &str = "{name: gateway-listener, port: 80, protocol: HTTP}";

/// A ListenerSet of `ns` on Gateway `infra/gw` with `listeners` (YAML flow entries).
fn set_yaml(ns: &str, name: &str, gw: &str, created: &str, listeners: &[&str]) -> String {
    let listeners: String = listeners.iter().map(|l| format!("  - {l}\n")).collect();
    format!(
        "---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: '{created}'}}
spec:
  parentRef: {{name: {gw}, namespace: infra, kind: Gateway, group: gateway.networking.k8s.io}}
  listeners:
{listeners}"
    )
}

fn namespace_yaml(name: &str, labels: &str) -> String {
    format!("---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {labels}}}\n")
}

/// ListenerSetDefaultNotAllowed, ListenerSetAllowedNamespaceNone, …Same and …Selector:
/// a Gateway takes the sets its `allowedListeners` admits — none when unset or `None`,
/// its own namespace's for `Same`, labelled namespaces' for `Selector` — the others are
/// `NotAllowed` (Accepted and Programmed) with no listener listed, and the Gateway counts
/// the sets it takes.
#[test]
fn allowed_listeners_conformance_cases_from_files() {
    let listener = "{name: l, port: 80, protocol: HTTP, hostname: a.example}";
    let t = "2026-01-01T00:00:00Z";
    let yaml = [
        gateway_yaml("default", None, &[GATEWAY_LISTENER]),
        set_yaml("infra", "default-ls", "default", t, &[listener]),
        gateway_yaml(
            "none",
            Some("{namespaces: {from: None}}"),
            &[GATEWAY_LISTENER],
        ),
        set_yaml("infra", "none-ls", "none", t, &[listener]),
        gateway_yaml("same", Some(SAME), &[GATEWAY_LISTENER]),
        set_yaml("infra", "same-ls", "same", t, &[listener]),
        set_yaml("other", "other-ls", "same", t, &[listener]),
        namespace_yaml("picked", "{allowed: ns}"),
        namespace_yaml("unpicked", "{allowed: no}"),
        gateway_yaml(
            "selector",
            Some("{namespaces: {from: Selector, selector: {matchLabels: {allowed: ns}}}}"),
            &[GATEWAY_LISTENER],
        ),
        set_yaml("picked", "picked-ls", "selector", t, &[listener]),
        set_yaml("unpicked", "unpicked-ls", "selector", t, &[listener]),
        // A label that must be missing: of a Namespace read, judged; of one not read (its
        // labels unknown), not taken.
        gateway_yaml(
            "without-label",
            Some("{namespaces: {from: Selector, selector: {matchExpressions: [{key: allowed, operator: DoesNotExist}]}}}"),
            &[GATEWAY_LISTENER],
        ),
        namespace_yaml("plain", "{team: a}"),
        set_yaml("plain", "plain-ls", "without-label", t, &[listener]),
        set_yaml("unread", "unread-ls", "without-label", t, &[listener]),
    ]
    .concat();
    let status = statuses("ls-allowed", &yaml);
    let not_allowed = [pair("False", "NotAllowed"), pair("False", "NotAllowed")];
    let taken = [pair("True", "Accepted"), pair("True", "Programmed")];
    for (ns, name) in [
        ("infra", "default-ls"),
        ("infra", "none-ls"),
        ("other", "other-ls"),
        ("unpicked", "unpicked-ls"),
        ("unread", "unread-ls"),
    ] {
        let s = set(&status, ns, name);
        assert_eq!(accepted_programmed(s), not_allowed, "{ns}/{name}: {s:#}");
        assert_eq!(s["listeners"], serde_json::json!([]), "{name}");
    }
    for (ns, name) in [
        ("infra", "same-ls"),
        ("picked", "picked-ls"),
        ("plain", "plain-ls"),
    ] {
        let s = set(&status, ns, name);
        assert_eq!(accepted_programmed(s), taken, "{ns}/{name}: {s:#}");
        let l = named(&s["listeners"], "l");
        for (kind, want) in [
            ("Accepted", "True"),
            ("Programmed", "True"),
            ("ResolvedRefs", "True"),
            ("Conflicted", "False"),
        ] {
            assert_eq!(condition_of(l, kind).0, want, "{name} {kind}: {l:#}");
        }
        assert_eq!(s["conditions"][0]["observedGeneration"], 1);
    }
    // The Gateways stay accepted, and count the sets they take (0 said, not left out).
    for (name, count) in [
        ("default", 0),
        ("none", 0),
        ("same", 1),
        ("selector", 1),
        ("without-label", 1),
    ] {
        let g = gateway(&status, name);
        assert_eq!(
            condition_of(g, "Accepted"),
            pair("True", "Accepted"),
            "{name}"
        );
        assert_eq!(g["attachedListenerSets"], count, "{name}: {g:#}");
        // The Gateway's listeners are its own: a set's are not listed there.
        assert_eq!(g["listeners"].as_array().map(Vec::len), Some(1), "{name}");
    }
}

/// ListenerSetHostnameConflict and ListenerSetProtocolConflict: the Gateway's listeners
/// first, then the sets by creation time and name; a listener that conflicts with one
/// before it is `Conflicted` (and not Accepted nor Programmed) with the reason, the one
/// before keeps its place; a set with no listener left is `ListenersNotValid`, one with
/// some is accepted and programmed; the Gateway counts the sets it serves.
#[test]
fn listener_conflicts_conformance_cases_from_files() {
    for (reason, clash) in [
        (
            "HostnameConflict",
            "{name: clash, port: 80, protocol: HTTP, hostname: clash.example}",
        ),
        ("ProtocolConflict", "{name: clash, port: 80, protocol: TCP}"),
    ] {
        let gw = gateway_yaml(
            "gw",
            Some(SAME),
            &[
                "{name: gateway-listener, port: 80, protocol: HTTP, hostname: gw.example}",
                "{name: clash, port: 80, protocol: HTTP, hostname: clash.example}",
            ],
        );
        let (clash_with_set, second) = if reason == "HostnameConflict" {
            (
                "{name: set-clash, port: 80, protocol: HTTP, hostname: set.example}",
                "{name: set-clash, port: 80, protocol: HTTP, hostname: set.example}",
            )
        } else {
            (
                "{name: set-clash, port: 81, protocol: HTTP, hostname: set.example}",
                "{name: set-clash, port: 81, protocol: TCP}",
            )
        };
        let yaml = [
            gw,
            // The same creation time: the name orders them (…-1 before …-2).
            set_yaml(
                "infra",
                "with-gateway-1",
                "gw",
                "2026-01-01T00:00:00Z",
                &[
                    "{name: own-1, port: 80, protocol: HTTP, hostname: own-1.example}",
                    clash,
                    clash_with_set,
                ],
            ),
            set_yaml(
                "infra",
                "with-gateway-2",
                "gw",
                "2026-01-01T00:00:00Z",
                &[clash],
            ),
            set_yaml(
                "infra",
                "with-set-1",
                "gw",
                "2026-01-02T00:00:00Z",
                &[
                    "{name: own-2, port: 80, protocol: HTTP, hostname: own-2.example}",
                    second,
                ],
            ),
            // Older than none but later by name: last.
            set_yaml(
                "infra",
                "with-set-2",
                "gw",
                "2026-01-02T00:00:00Z",
                &[second],
            ),
        ]
        .concat();
        let status = statuses("ls-conflicts", &yaml);
        let conflicted = |s: &Value, name: &str| {
            let l = named(&s["listeners"], name);
            [
                condition_of(l, "Accepted"),
                condition_of(l, "Programmed"),
                condition_of(l, "Conflicted"),
            ]
        };
        let want = [
            pair("False", reason),
            pair("False", reason),
            pair("True", reason),
        ];
        let ok = |s: &Value, name: &str| {
            let l = named(&s["listeners"], name);
            [
                condition_of(l, "Accepted").0,
                condition_of(l, "Programmed").0,
                condition_of(l, "ResolvedRefs").0,
                condition_of(l, "Conflicted").0,
            ]
        };
        let fine = ["True", "True", "True", "False"].map(String::from);
        let g1 = set(&status, "infra", "with-gateway-1");
        let s1 = set(&status, "infra", "with-set-1");
        assert_eq!(conflicted(g1, "clash"), want, "{reason}: {g1:#}");
        assert_eq!(ok(g1, "own-1"), fine, "{reason}: {g1:#}");
        assert_eq!(ok(g1, "set-clash"), fine, "{reason}: the first keeps it");
        assert_eq!(conflicted(s1, "set-clash"), want, "{reason}: {s1:#}");
        assert_eq!(ok(s1, "own-2"), fine, "{reason}");
        for s in [g1, s1] {
            assert_eq!(condition_of(s, "Accepted").0, "True", "{reason}: {s:#}");
            assert_eq!(condition_of(s, "Programmed"), pair("True", "Programmed"));
        }
        for name in ["with-gateway-2", "with-set-2"] {
            let s = set(&status, "infra", name);
            assert_eq!(
                accepted_programmed(s),
                [
                    pair("False", "ListenersNotValid"),
                    pair("False", "ListenersNotValid")
                ],
                "{reason} {name}: {s:#}"
            );
            let only = if name == "with-gateway-2" {
                "clash"
            } else {
                "set-clash"
            };
            assert_eq!(conflicted(s, only), want, "{reason} {name}");
        }
        let g = gateway(&status, "gw");
        assert_eq!(g["attachedListenerSets"], 2, "{reason}: {g:#}");
        for l in ["gateway-listener", "clash"] {
            assert_eq!(
                condition_of(named(&g["listeners"], l), "Accepted").0,
                "True",
                "{reason}: the Gateway's own {l} goes first"
            );
        }
    }
}

/// ListenerSetAllowedRoutesSupportedKinds and ListenerSetReferenceGrant: a set's listener
/// listing a route kind it cannot take is `ResolvedRefs` False with `InvalidRouteKinds`;
/// a certificate of another namespace needs a ReferenceGrant there *from ListenerSets*
/// of the set's namespace (the Gateway's grant is not the set's): without one the
/// listener is `RefNotPermitted` and a set with no other listener `ListenersNotValid`.
#[test]
fn supported_kinds_and_reference_grants_conformance_cases_from_files() {
    let secret = tls_secret_yaml("certs", "cert", "*.example");
    let https = |name: &str| {
        format!(
            "{{name: {name}, port: 443, protocol: HTTPS, hostname: {name}.example, \
             tls: {{certificateRefs: [{{name: cert, namespace: certs}}]}}}}"
        )
    };
    let grant = |name: &str, from_kind: &str, from_ns: &str| {
        format!(
            "---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {{name: {name}, namespace: certs}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: {from_kind}, namespace: {from_ns}}}]
  to: [{{group: '', kind: Secret}}]
"
        )
    };
    let gw = gateway_yaml(
        "gw",
        Some("{namespaces: {from: All}}"),
        &[&https("gateway")],
    );
    let t = "2026-01-01T00:00:00Z";
    let yaml = [
        secret,
        gw,
        // The Gateway's grant; one for Gateways of elsewhere (not its sets'); one for the
        // sets of infra.
        grant("gateways", "Gateway", "infra"),
        grant("elsewhere-gateways", "Gateway", "elsewhere"),
        grant("infra-sets", "ListenerSet", "infra"),
        set_yaml("infra", "granted", "gw", t, &[&https("granted")]),
        set_yaml("elsewhere", "ungranted", "gw", t, &[&https("ungranted")]),
        set_yaml(
            "infra",
            "kinds",
            "gw",
            t,
            &[
                "{name: tls-only, port: 8443, protocol: TLS, tls: {mode: Passthrough}, \
               allowedRoutes: {kinds: [{kind: HTTPRoute}]}}",
            ],
        ),
    ]
    .concat();
    let status = statuses("ls-grants", &yaml);
    let granted = set(&status, "infra", "granted");
    assert_eq!(
        accepted_programmed(granted),
        [pair("True", "Accepted"), pair("True", "Programmed")],
        "{granted:#}"
    );
    assert_eq!(
        condition_of(named(&granted["listeners"], "granted"), "ResolvedRefs").0,
        "True"
    );
    let ungranted = set(&status, "elsewhere", "ungranted");
    assert_eq!(
        accepted_programmed(ungranted),
        [
            pair("False", "ListenersNotValid"),
            pair("False", "ListenersNotValid")
        ],
        "{ungranted:#}"
    );
    assert_eq!(
        condition_of(named(&ungranted["listeners"], "ungranted"), "ResolvedRefs"),
        pair("False", "RefNotPermitted")
    );
    let kinds = set(&status, "infra", "kinds");
    let l = named(&kinds["listeners"], "tls-only");
    assert_eq!(
        condition_of(l, "ResolvedRefs"),
        pair("False", "InvalidRouteKinds"),
        "{kinds:#}"
    );
    assert_eq!(l["supportedKinds"], serde_json::json!([]));
    assert_eq!(condition_of(gateway(&status, "gw"), "Accepted").0, "True");
}

/// ListenerSetRouteStatusScopedToParentRef, ListenerSetGatewayParentSectionNameNotFound and
/// ListenerSetDualParentRefIndependence (their status halves): a route's parents are the
/// references it writes, each judged on its own — one to the Gateway names the Gateway's
/// own listeners only (a set listener's name there is `NoMatchingParent`), one to a set its
/// listeners (by `sectionName` too); the status echoes the kind; a set listener counts
/// the routes attached through the set only; a route naming a set the Gateway does not
/// take is not accepted there.
#[test]
fn route_parents_conformance_cases_from_files() {
    let route = |name: &str, parents: &str, hostnames: &str| {
        format!(
            "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: infra}}
spec:
  parentRefs: {parents}
  hostnames: {hostnames}
  rules: [{{backendRefs: [{{name: web, port: 8080}}]}}]
"
        )
    };
    let gw = gateway_yaml(
        "gw",
        Some(SAME),
        &["{name: gw-listener, port: 80, protocol: HTTP, hostname: gw.example}"],
    );
    let ls = "{kind: ListenerSet, group: gateway.networking.k8s.io, name: ls}";
    let t = "2026-01-01T00:00:00Z";
    let yaml = [
        gw,
        set_yaml(
            "infra",
            "ls",
            "gw",
            t,
            &["{name: ls-listener, port: 80, protocol: HTTP, hostname: ls.example}"],
        ),
        set_yaml(
            "outside",
            "refused",
            "gw",
            t,
            &["{name: r, port: 80, protocol: HTTP, hostname: r.example}"],
        ),
        route("gw-only", "[{name: gw}]", "[]"),
        route("ls-only", &format!("[{ls}]"), "[]"),
        route("both", &format!("[{{name: gw}}, {ls}]"), "[]"),
        route(
            "by-section",
            &format!(
                "[{{name: gw, sectionName: ls-listener}}, \
                 {{kind: ListenerSet, group: gateway.networking.k8s.io, name: ls, sectionName: ls-listener}}]"
            ),
            "[]",
        ),
        route(
            "to-refused",
            "[{kind: ListenerSet, group: gateway.networking.k8s.io, name: refused, namespace: outside}]",
            "[]",
        ),
    ]
    .concat();
    let status = statuses("ls-routes", &yaml);
    let parents = |name: &str| {
        status[&ConfigKey::new(Kind::HttpRoute, "infra", name)]["parents"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let summary = |name: &str| -> Vec<(String, String, (String, String))> {
        parents(name)
            .iter()
            .map(|p| {
                (
                    p["parentRef"]["kind"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    p["parentRef"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    condition_of(p, "Accepted"),
                )
            })
            .collect()
    };
    let accepted = || pair("True", "Accepted");
    let entry =
        |kind: &str, name: &str, c: (String, String)| (kind.to_string(), name.to_string(), c);
    assert_eq!(summary("gw-only"), [entry("Gateway", "gw", accepted())]);
    assert_eq!(summary("ls-only"), [entry("ListenerSet", "ls", accepted())]);
    assert_eq!(
        summary("both"),
        [
            entry("Gateway", "gw", accepted()),
            entry("ListenerSet", "ls", accepted())
        ]
    );
    assert_eq!(
        summary("by-section"),
        [
            entry("Gateway", "gw", pair("False", "NoMatchingParent")),
            entry("ListenerSet", "ls", accepted())
        ]
    );
    assert_eq!(
        summary("to-refused"),
        [entry(
            "ListenerSet",
            "refused",
            pair("False", "NoMatchingParent")
        )]
    );
    assert_eq!(
        parents("ls-only")[0]["parentRef"]["group"],
        "gateway.networking.k8s.io"
    );
    // ls-only, both, by-section through the set; gw-only and both through the Gateway.
    let s = set(&status, "infra", "ls");
    assert_eq!(
        named(&s["listeners"], "ls-listener")["attachedRoutes"],
        3,
        "{s:#}"
    );
    let g = gateway(&status, "gw");
    assert_eq!(
        named(&g["listeners"], "gw-listener")["attachedRoutes"],
        2,
        "{g:#}"
    );
    assert_eq!(g["attachedListenerSets"], 1);
}

/// A listener of the Gateway refused for its certificate (no grant for its Secret, or no
/// certificate at all) is accepted all the same and keeps its port and hostname: a set's
/// listener on them is `Conflicted`, never served in its place; so is a set's listener
/// after another set's listener refused for its certificate. A Gateway none of whose own
/// listeners is accepted serves none of its sets (`ParentNotAccepted`).
#[test]
fn listeners_refused_for_their_certificates_keep_their_place_from_files() {
    let https = |name: &str, host: &str, port: u16, cert: &str| {
        format!(
            "{{name: {name}, port: {port}, protocol: HTTPS, hostname: {host}, \
             tls: {{certificateRefs: [{cert}]}}}}"
        )
    };
    let t1 = "2026-01-01T00:00:00Z";
    let t2 = "2026-01-02T00:00:00Z";
    let yaml = [
        tls_secret_yaml("certs", "cert", "*.example"),
        tls_secret_yaml("infra", "own", "*.example"),
        gateway_yaml(
            "gw",
            Some("{namespaces: {from: All}}"),
            &[
                GATEWAY_LISTENER,
                // No grant in certs for it: RefNotPermitted, accepted.
                &https(
                    "held",
                    "held.example",
                    443,
                    "{name: cert, namespace: certs}",
                ),
            ],
        ),
        set_yaml(
            "infra",
            "thief",
            "gw",
            t1,
            &[
                &https("held", "held.example", 443, "{name: own}"),
                // Ungranted too: it keeps its place from the later set.
                &https(
                    "first",
                    "first.example",
                    443,
                    "{name: cert, namespace: certs}",
                ),
            ],
        ),
        set_yaml(
            "infra",
            "later",
            "gw",
            t2,
            &[&https("first", "first.example", 443, "{name: own}")],
        ),
        gateway_yaml(
            "udp-only",
            Some("{namespaces: {from: All}}"),
            &["{name: dns, port: 53, protocol: UDP}"],
        ),
        set_yaml(
            "infra",
            "orphaned",
            "udp-only",
            t1,
            &["{name: l, port: 80, protocol: HTTP, hostname: a.example}"],
        ),
    ]
    .concat();
    let status = statuses("ls-held", &yaml);
    let g = gateway(&status, "gw");
    assert_eq!(
        condition_of(named(&g["listeners"], "held"), "ResolvedRefs"),
        pair("False", "RefNotPermitted"),
        "{g:#}"
    );
    let thief = set(&status, "infra", "thief");
    assert_eq!(
        condition_of(named(&thief["listeners"], "held"), "Conflicted"),
        pair("True", "HostnameConflict"),
        "{thief:#}"
    );
    assert_eq!(
        condition_of(named(&thief["listeners"], "first"), "ResolvedRefs"),
        pair("False", "RefNotPermitted")
    );
    // Nothing of it can be served: the set is not accepted.
    assert_eq!(
        accepted_programmed(thief),
        [
            pair("False", "ListenersNotValid"),
            pair("False", "ListenersNotValid")
        ]
    );
    let later = set(&status, "infra", "later");
    assert_eq!(
        condition_of(named(&later["listeners"], "first"), "Conflicted"),
        pair("True", "HostnameConflict"),
        "{later:#}"
    );
    let orphaned = set(&status, "infra", "orphaned");
    assert_eq!(
        accepted_programmed(orphaned),
        [
            pair("False", "ParentNotAccepted"),
            pair("False", "ParentNotProgrammed")
        ],
        "{orphaned:#}"
    );
    assert_eq!(gateway(&status, "udp-only")["attachedListenerSets"], 0);
}
