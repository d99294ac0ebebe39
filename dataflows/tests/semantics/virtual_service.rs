//! VirtualService hosts on sidecars: wildcard hosts governing the services they cover,
//! hosts outside the registry, destinations without a port, and rules other rules shadow.

use crate::support::{
    gateway_errors, host, outbound, px, service, service_on, sidecar, sidecar_proxy,
    virtual_service, Mesh,
};
use dataflows::model::*;

/// Proves that a mesh VirtualService with a wildcard host governs every visible service it
/// covers, with Istio's precedence (the most specific cover wins, whatever the namespaces'
/// order): `*.default.svc.cluster.local` routes `a` and `b` of `default`; an exact
/// VirtualService for `b` — in another namespace, which would otherwise rank after the
/// proxy's own — takes `b` back; `*` covers what no longer wildcard does (`c` of `other`) and
/// never displaces the longer one; withdrawing the exact one hands `b` back to the wildcard.
#[test]
fn wildcard_virtual_service_hosts_govern_the_services_they_cover() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("sleep-1", "default", "10.0.0.5", &[("app", "sleep")]);
    let to = |name: &str, ns: &str| outbound(9080, "", name, ns);
    let vh = |name: &str, ns: &str| format!("{}:9080", host(name, ns));
    m.insert(vec![
        px(&client),
        service("a", "default"),
        service("b", "default"),
        service("c", "other"),
        service("d", "other"),
    ]);
    let defaults = m.vhost_clusters(&client, "9080");
    assert_eq!(defaults[&vh("a", "default")], to("a", "default"));
    assert_eq!(defaults[&vh("c", "other")], to("c", "other"));

    let wild = virtual_service(
        "default",
        "wild",
        &["*.default.svc.cluster.local"],
        &[],
        &host("d", "other"),
    );
    m.insert(vec![wild.clone()]);
    let routes = m.vhost_clusters(&client, "9080");
    assert_eq!(routes[&vh("a", "default")], to("d", "other"), "{routes:?}");
    assert_eq!(routes[&vh("b", "default")], to("d", "other"), "{routes:?}");
    assert_eq!(routes[&vh("c", "other")], to("c", "other"), "{routes:?}");

    let exact = virtual_service(
        "other",
        "exact-b",
        &[&host("b", "default")],
        &["mesh"],
        &host("c", "other"),
    );
    let everything = virtual_service("default", "everything", &["*"], &[], &host("a", "default"));
    m.insert(vec![exact.clone(), everything.clone()]);
    let routes = m.vhost_clusters(&client, "9080");
    assert_eq!(routes[&vh("a", "default")], to("d", "other"), "{routes:?}");
    assert_eq!(routes[&vh("b", "default")], to("c", "other"), "{routes:?}");
    assert_eq!(routes[&vh("c", "other")], to("a", "default"), "{routes:?}");
    assert_eq!(routes[&vh("d", "other")], to("a", "default"), "{routes:?}");

    // A gateway-only wildcard VirtualService changes nothing on sidecars.
    let gw_only = virtual_service(
        "default",
        "gw-only",
        &["*.svc.cluster.local"],
        &["default/gw"],
        &host("b", "default"),
    );
    m.insert(vec![gw_only]);
    assert_eq!(m.vhost_clusters(&client, "9080"), routes);

    m.retract(vec![exact, everything]);
    let routes = m.vhost_clusters(&client, "9080");
    assert_eq!(routes[&vh("b", "default")], to("d", "other"), "{routes:?}");
    assert_eq!(routes[&vh("c", "other")], to("c", "other"), "{routes:?}");
    m.retract(vec![wild]);
    assert_eq!(
        m.vhost_clusters(&client, "9080")[&vh("a", "default")],
        to("a", "default")
    );
}

/// Proves Istio's virtual hosts for VirtualService hosts that are no service's: a
/// VirtualService governing `a` also routes its alias `a.example.com` on `a`'s port (and not
/// on port 80); a VirtualService whose only host is outside the registry routes it on port
/// 80's configuration alone, for the scopes that see it (not one it is not exported to, nor
/// one whose Sidecar imports only its own namespace); once a ServiceEntry defines the host,
/// the host is a service like any other; withdrawing the VirtualService removes its hosts.
#[test]
fn virtual_service_hosts_outside_the_registry_get_virtual_hosts_of_their_own() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("sleep-1", "default", "10.0.0.5", &[("app", "sleep")]);
    let fenced = sidecar_proxy("fenced-1", "fenced", "10.0.0.6", &[("app", "fenced")]);
    let to = |name: &str, ns: &str, port: u16| outbound(port, "", name, ns);
    m.insert(vec![
        px(&client),
        px(&fenced),
        service("a", "default"),
        service("b", "default"),
        service_on("web", "default", 80),
        sidecar("fenced", "fenced", None, &["./*", "default/*"]),
    ]);
    let alias = virtual_service(
        "default",
        "alias",
        &[&host("a", "default"), "a.example.com"],
        &[],
        &host("b", "default"),
    );
    m.insert(vec![alias.clone()]);
    let on_9080 = m.vhost_clusters(&client, "9080");
    assert_eq!(on_9080["a.example.com:9080"], to("b", "default", 9080));
    assert_eq!(
        on_9080[&format!("{}:9080", host("a", "default"))],
        to("b", "default", 9080)
    );
    assert!(!m
        .vhost_clusters(&client, "80")
        .contains_key("a.example.com:80"));

    let legacy = virtual_service(
        "other",
        "legacy",
        &["legacy.example.com"],
        &[],
        &host("a", "default"),
    );
    m.insert(vec![legacy.clone()]);
    let on_80 = m.vhost_clusters(&client, "80");
    // Its destination names no port: on port 80's configuration Istio's sidecars know the
    // services at port 80 only, so `a` (9080 alone) is taken at 80, a cluster that does not
    // exist (503), as in Istio; a destination port would fix it.
    assert_eq!(
        on_80["legacy.example.com:80"],
        to("a", "default", 80),
        "{on_80:?}"
    );
    assert!(!m
        .vhost_clusters(&client, "9080")
        .contains_key("legacy.example.com:9080"));
    // The fenced Sidecar imports `fenced` and `default` only: not `other`'s VirtualService.
    assert!(!m
        .vhost_clusters(&fenced, "80")
        .contains_key("legacy.example.com:80"));
    let Record::VirtualService(mut private) = legacy.clone() else {
        unreachable!()
    };
    private.export_to = vec![".".into()];
    m.replace(legacy.clone(), Record::VirtualService(private.clone()));
    assert!(!m
        .vhost_clusters(&client, "80")
        .contains_key("legacy.example.com:80"));
    m.replace(Record::VirtualService(private), legacy.clone());
    assert!(m
        .vhost_clusters(&client, "80")
        .contains_key("legacy.example.com:80"));

    // Defined by a ServiceEntry on port 8080, the host is governed as a service.
    let Record::Service(mut entry) = service_on("legacy", "other", 8080) else {
        unreachable!()
    };
    entry.hostname = "legacy.example.com".into();
    m.insert(vec![Record::Service(entry.clone())]);
    assert!(!m
        .vhost_clusters(&client, "80")
        .contains_key("legacy.example.com:80"));
    assert_eq!(
        m.vhost_clusters(&client, "8080")["legacy.example.com:8080"],
        to("a", "default", 8080),
        "a destination without a port is taken at the route configuration's port"
    );
    m.retract(vec![Record::Service(entry)]);
    assert!(m
        .vhost_clusters(&client, "80")
        .contains_key("legacy.example.com:80"));

    m.retract(vec![legacy, alias]);
    assert!(!m
        .vhost_clusters(&client, "80")
        .contains_key("legacy.example.com:80"));
    assert!(!m
        .vhost_clusters(&client, "9080")
        .contains_key("a.example.com:9080"));
}

/// Proves the port of a destination without one, as Istio's `GetDestinationCluster`
/// resolves it, and the analysis of it (Istio's IST0112 and IST0101): `front` (port 8000)
/// routes to `reviews` (ports 9080 and 9090) without a port, so the route goes to the port
/// the request arrived on (8000, a cluster `reviews` does not have: Envoy answers 503), not
/// to one of `reviews`' ports picked for it, and the VirtualService is told to name one; a
/// port `reviews` does not have is reported as such; a port it has is routed and clears both.
#[test]
fn a_destination_without_a_port_takes_the_request_port_and_is_reported() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("sleep-1", "default", "10.0.0.5", &[("app", "sleep")]);
    let Record::Service(mut reviews) = service("reviews", "default") else {
        unreachable!()
    };
    reviews.ports.push(ServicePort {
        name: "http-admin".into(),
        port: 9090,
        protocol: Protocol::Http,
    });
    let front_host = host("front", "default");
    let reviews_host = host("reviews", "default");
    let vs = |port: Option<u16>| {
        let Record::VirtualService(mut vs) =
            virtual_service("default", "front", &[&front_host], &[], &reviews_host)
        else {
            unreachable!()
        };
        vs.http[0].route[0].port = port;
        Record::VirtualService(vs)
    };
    m.insert(vec![
        px(&client),
        service_on("front", "default", 8000),
        Record::Service(reviews),
        vs(None),
    ]);
    let vhost = format!("{front_host}:8000");
    let routed = |m: &Mesh| m.vhost_clusters(&client, "8000").get(&vhost).cloned();
    assert_eq!(
        routed(&m).as_deref(),
        Some(format!("outbound|8000||{reviews_host}").as_str())
    );
    let found: Vec<(ErrorCode, String)> = m
        .errors
        .keys()
        .map(|e| (e.code, e.message.clone()))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, ErrorCode::PortSelectorRequired);
    assert!(found[0].1.contains("(9080, 9090)"), "{found:?}");
    assert_eq!(
        ErrorCode::PortSelectorRequired.message_code().1,
        "VirtualServiceDestinationPortSelectorRequired"
    );

    m.retract(vec![vs(None)]);
    m.insert(vec![vs(Some(9191))]);
    let codes: Vec<ErrorCode> = m.errors.keys().map(|e| e.code).collect();
    assert_eq!(codes, vec![ErrorCode::PortNotFound], "{:?}", m.errors);

    m.retract(vec![vs(Some(9191))]);
    m.insert(vec![vs(Some(9090))]);
    assert_eq!(
        routed(&m).as_deref(),
        Some(format!("outbound|9090||{reviews_host}").as_str())
    );
    assert!(m.errors.is_empty(), "{:?}", m.errors);
}

/// VirtualService rules no request reaches (`MF0023`) and matches an earlier one takes
/// (`MF0024`) are reported through the dataflow on the VirtualService, by field, and
/// retracted when the rules are reordered.
#[test]
fn shadowed_rules_are_reported_and_retracted_when_reordered() {
    let mut m = Mesh::new();
    let Record::VirtualService(base) = virtual_service(
        "default",
        "reviews",
        &["reviews"],
        &[],
        &host("reviews", "default"),
    ) else {
        unreachable!()
    };
    let catch_all = base.http[0].clone();
    let prefix = |p: &str, index| HttpRoute {
        index,
        matches: vec![HttpMatch {
            uri: Some(StringMatch::Prefix(p.into())),
            ..Default::default()
        }],
        ..catch_all.clone()
    };
    let shadowed = VirtualService {
        http: vec![
            prefix("/api", 0),
            prefix("/api/v1", 1),
            HttpRoute {
                index: 2,
                ..catch_all.clone()
            },
            prefix("/other", 3),
        ],
        ..base.clone()
    };
    m.insert(vec![
        service("reviews", "default"),
        Record::VirtualService(shadowed.clone()),
    ]);
    assert_eq!(
        gateway_errors(&m, ErrorCode::IneffectiveMatch),
        vec![
            "VirtualService/default/reviews: spec.http[1].match[0]: never taken: \
             spec.http[0].match[0] before it takes everything it matches"
                .to_string()
        ]
    );
    let unreachable = gateway_errors(&m, ErrorCode::UnreachableRule);
    assert_eq!(unreachable.len(), 2, "{unreachable:?}");
    assert!(
        unreachable[0].contains("spec.http[1]: never reached"),
        "{unreachable:?}"
    );
    assert!(
        unreachable[1].contains("spec.http[3]: never reached: spec.http[2] before it has no match"),
        "{unreachable:?}"
    );
    // Reordered: the longer prefix first, the catch-all last. Nothing to say.
    let fixed = VirtualService {
        http: vec![
            prefix("/api/v1", 0),
            prefix("/api", 1),
            prefix("/other", 2),
            HttpRoute {
                index: 3,
                ..catch_all
            },
        ],
        ..base
    };
    m.replace(
        Record::VirtualService(shadowed),
        Record::VirtualService(fixed),
    );
    assert!(gateway_errors(&m, ErrorCode::IneffectiveMatch).is_empty());
    assert!(gateway_errors(&m, ErrorCode::UnreachableRule).is_empty());
}
