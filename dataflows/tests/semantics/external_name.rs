//! Kubernetes ExternalName Services, aliases of the host they name: their names, routes
//! to them, chains and loops, and what is reported when one resolves to nothing.

use crate::support::{
    gateway, host, outbound, px, router_proxy, service, sidecar_proxy, virtual_service, Mesh,
};
use dataflows::model::*;
use std::collections::BTreeMap;

/// A Kubernetes ExternalName Service `name.ns` naming `target`.
fn external_name(name: &str, ns: &str, target: &str) -> Record {
    let Record::Service(mut s) = service(name, ns) else {
        unreachable!()
    };
    s.alias_for = Some(target.to_string());
    s.resolution = Resolution::Dns;
    s.mesh_external = true;
    Record::Service(s)
}

/// An ExternalName Service is an alias of the host it names (Istio 1.21 and later): it has
/// no cluster of its own, the named service's virtual host answers to the alias's names (in
/// every form the client's namespace may use) and routes where that service routes; a chain
/// of aliases resolves to its end, a loop and a missing target to nothing. A route naming the
/// alias goes to the named host's cluster.
#[test]
fn external_name_services_are_aliases_of_the_host_they_name() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("client", "default", "10.0.9.1", &[("app", "client")]);
    m.insert(vec![
        px(&client),
        service("reviews", "shop"),
        external_name("rv", "default", &host("reviews", "shop")),
    ]);
    let clusters = m.clusters(&client);
    assert!(
        clusters.contains(&outbound(9080, "", "reviews", "shop")),
        "{clusters:?}"
    );
    assert!(
        !clusters.iter().any(|c| c.contains("rv.default")),
        "the alias has no cluster of its own: {clusters:?}"
    );
    let domains = m.vhost_domains(&client, "9080");
    let reviews = &domains[&format!("{}:9080", host("reviews", "shop"))];
    for d in [
        "rv",
        "rv.default",
        "rv.default.svc",
        "rv.default.svc.cluster.local:9080",
    ] {
        assert!(reviews.contains(&d.to_string()), "{d}: {domains:?}");
    }
    assert!(
        !domains.keys().any(|k| k.starts_with("rv.")),
        "no virtual host of its own: {domains:?}"
    );

    // A chain (alias → alias → service) resolves to its end; a loop resolves to nothing.
    let chained = external_name("chained", "default", &host("rv", "default"));
    let looped = [
        external_name("l1", "default", &host("l2", "default")),
        external_name("l2", "default", &host("l1", "default")),
    ];
    m.insert(vec![chained.clone(), looped[0].clone(), looped[1].clone()]);
    let domains = m.vhost_domains(&client, "9080");
    let all: Vec<&String> = domains.values().flatten().collect();
    assert!(all.contains(&&"chained".to_string()), "{domains:?}");
    assert!(
        !all.iter()
            .any(|d| d.starts_with("l1") || d.starts_with("l2")),
        "{domains:?}"
    );

    // A route naming the alias goes to the named host's cluster.
    m.insert(vec![virtual_service(
        "default",
        "to-alias",
        &[&host("reviews", "shop")],
        &[],
        &host("rv", "default"),
    )]);
    let to = m.vhost_clusters(&client, "9080");
    assert_eq!(
        to[&format!("{}:9080", host("reviews", "shop"))],
        outbound(9080, "", "reviews", "shop"),
        "{to:?}"
    );

    // Without the service it names, an alias adds nothing: its names are unknown hosts.
    m.retract(vec![service("reviews", "shop")]);
    assert!(
        !m.clusters(&client).iter().any(|c| c.contains("reviews")),
        "{:?}",
        m.clusters(&client)
    );
    assert!(
        !m.routes(&client).contains("9080"),
        "{:?}",
        m.routes(&client)
    );
}

/// An ExternalName Service `name.ns` naming `target` that declares `ports` (HTTP).
fn external_name_ports(name: &str, ns: &str, target: &str, ports: &[u16]) -> Record {
    let Record::Service(mut s) = external_name(name, ns, target) else {
        unreachable!()
    };
    s.ports = crate::support::http_ports(ports);
    Record::Service(s)
}

/// A route destination without a port that names an ExternalName alias goes where Istio's
/// `GetDestinationCluster` sends it. A sidecar's route configuration for port `p` knows each
/// service cut down to `p`: an alias that declares `p` goes to the host it names at `p`
/// (whatever its other ports), one that does not keeps its own host, which has no cluster
/// (Envoy answers 503). A gateway knows the whole alias: its only port, else the port the
/// request arrived on — never the named host's only port.
#[test]
fn alias_destinations_without_a_port_take_the_alias_port_or_the_request_port() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("client", "default", "10.0.9.1", &[("app", "client")]);
    let ingress = router_proxy(
        "ingress",
        "istio-system",
        "10.0.9.2",
        &[("istio", "ingress")],
    );
    let Record::Service(mut front) = service("front", "default") else {
        unreachable!()
    };
    front.ports[0].port = 8080;
    let reviews = host("reviews", "shop");
    m.insert(vec![
        px(&client),
        px(&ingress),
        Record::Service(front),
        service("reviews", "shop"),
        external_name_ports("none", "default", &reviews, &[]),
        external_name_ports("one", "default", &reviews, &[9080]),
        external_name_ports("many", "default", &reviews, &[8080, 9080]),
        gateway(
            "istio-system",
            "gw",
            &[("istio", "ingress")],
            &[(8080, None)],
        ),
    ]);
    let front_vhost = format!("{}:8080", host("front", "default"));
    // (alias, the sidecar's cluster on port 8080, the gateway's on port 8080)
    let cases = [
        (
            "none",
            outbound(8080, "", "none", "default"),
            outbound(8080, "", "reviews", "shop"),
        ),
        (
            "one",
            outbound(8080, "", "one", "default"),
            outbound(9080, "", "reviews", "shop"),
        ),
        (
            "many",
            outbound(8080, "", "reviews", "shop"),
            outbound(8080, "", "reviews", "shop"),
        ),
    ];
    for (alias, sidecar_cluster, gateway_cluster) in cases {
        let vss = [
            virtual_service(
                "default",
                "front",
                &[&host("front", "default")],
                &[],
                &host(alias, "default"),
            ),
            virtual_service(
                "istio-system",
                "edge",
                &["edge.example.com"],
                &["istio-system/gw"],
                &host(alias, "default"),
            ),
        ];
        m.insert(vss.to_vec());
        let to = m.vhost_clusters(&client, "8080");
        assert_eq!(
            to.get(&front_vhost),
            Some(&sidecar_cluster),
            "{alias}: {to:?}"
        );
        let to = m.vhost_clusters(&ingress, "http.8080");
        assert_eq!(
            to.get("edge.example.com:8080"),
            Some(&gateway_cluster),
            "{alias}: {to:?}"
        );
        m.retract(vss.to_vec());
    }
    // The sidecar's route for port 9080 (the VirtualService now governs reviews) sends a
    // destination naming `one` to the named host at 9080: `one` declares it.
    m.insert(vec![virtual_service(
        "default",
        "to-one",
        &[&reviews],
        &[],
        &host("one", "default"),
    )]);
    let to = m.vhost_clusters(&client, "9080");
    assert_eq!(
        to.get(&format!("{reviews}:9080")),
        Some(&outbound(9080, "", "reviews", "shop")),
        "{to:?}"
    );
}

/// A VirtualService naming an ExternalName alias's own host governs the alias's names on
/// the ports the alias declares, as Istio's sidecars give it: the alias is a service of the
/// route configuration of such a port (`servicesByName`), so the VirtualService's virtual
/// host `alias:port` takes the alias's names and routes them, and the named service's
/// virtual host keeps its own; VirtualServices build their virtual hosts in order, so where
/// the named service's own VirtualService comes first (Istio: by creation time; meshflow: by
/// key) it keeps the alias's names. An alias without the port leaves its names with the
/// named service.
#[test]
fn a_virtual_service_of_an_alias_host_governs_the_alias_names_on_its_ports() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("client", "default", "10.0.9.1", &[("app", "client")]);
    let reviews = host("reviews", "shop");
    let rv = host("rv", "default");
    let alias = external_name_ports("rv", "default", &reviews, &[9080]);
    let alias_vs = virtual_service("default", "m-rv", &[&rv], &[], &host("ratings", "shop"));
    m.insert(vec![
        px(&client),
        service("reviews", "shop"),
        service("ratings", "shop"),
        alias.clone(),
        alias_vs.clone(),
    ]);
    let rv_vhost = format!("{rv}:9080");
    let reviews_vhost = format!("{reviews}:9080");
    let to = m.vhost_clusters(&client, "9080");
    assert_eq!(
        to.get(&rv_vhost),
        Some(&outbound(9080, "", "ratings", "shop")),
        "{to:?}"
    );
    let domains = m.vhost_domains(&client, "9080");
    for d in [
        "rv",
        "rv.default",
        "rv.default.svc",
        &rv,
        &format!("{rv}:9080"),
    ] {
        assert!(
            domains[&rv_vhost].contains(&d.to_string()),
            "{d}: {domains:?}"
        );
        assert!(
            !domains[&reviews_vhost].contains(&d.to_string()),
            "{d}: {domains:?}"
        );
    }
    assert!(!m.clusters(&client).iter().any(|c| c.contains("rv.default")));

    // The named service's own VirtualService comes first (by key): it keeps the names.
    let first = virtual_service("default", "a-reviews", &[&reviews], &[], &reviews);
    m.insert(vec![first.clone()]);
    let domains = m.vhost_domains(&client, "9080");
    assert!(!domains.contains_key(&rv_vhost), "{domains:?}");
    assert!(
        domains[&reviews_vhost].contains(&"rv".to_string()),
        "{domains:?}"
    );
    // It comes after: the alias's VirtualService has them again.
    m.replace(
        first,
        virtual_service("default", "z-reviews", &[&reviews], &[], &reviews),
    );
    let domains = m.vhost_domains(&client, "9080");
    assert!(
        domains[&rv_vhost].contains(&"rv".to_string()),
        "{domains:?}"
    );

    // An alias that does not declare the port: its VirtualService does not govern it there.
    m.replace(
        alias,
        external_name_ports("rv", "default", &reviews, &[8080]),
    );
    let domains = m.vhost_domains(&client, "9080");
    assert!(!domains.contains_key(&rv_vhost), "{domains:?}");
    assert!(
        domains[&reviews_vhost].contains(&"rv".to_string()),
        "{domains:?}"
    );
}

/// Istio resolves a chain of ExternalName aliases of any length (`resolveServiceAliases`
/// walks it until it ends or comes back to a host already seen): the first alias of a chain
/// of 40 answers at the service the chain ends at; closing the chain into a loop takes every
/// name of it away.
#[test]
fn a_long_chain_of_aliases_resolves_to_its_end() {
    let mut m = Mesh::new();
    let client = sidecar_proxy("client", "default", "10.0.9.1", &[("app", "client")]);
    let chain: Vec<Record> = (0..40)
        .map(|i| {
            let next = if i == 39 {
                host("reviews", "shop")
            } else {
                host(&format!("a{}", i + 1), "default")
            };
            external_name(&format!("a{i}"), "default", &next)
        })
        .collect();
    m.insert(vec![px(&client), service("reviews", "shop")]);
    m.insert(chain.clone());
    let domains = m.vhost_domains(&client, "9080");
    let reviews = &domains[&format!("{}:9080", host("reviews", "shop"))];
    for d in ["a0", "a0.default", "a39.default.svc.cluster.local"] {
        assert!(reviews.contains(&d.to_string()), "{d}: {domains:?}");
    }
    // The last alias names the first: a loop of 40, which resolves to nothing.
    m.replace(
        chain[39].clone(),
        external_name("a39", "default", &host("a0", "default")),
    );
    let domains = m.vhost_domains(&client, "9080");
    let reviews = &domains[&format!("{}:9080", host("reviews", "shop"))];
    assert!(
        !reviews
            .iter()
            .any(|d| d.starts_with("a0") || d.starts_with("a39")),
        "{domains:?}"
    );
}

/// An ExternalName alias that resolves to no service is reported on the Service at
/// `spec.externalName` (`MF0015`, a warning: its names are unknown hosts, as in Istio), and
/// so is each VirtualService destination naming an alias whose named host has no cluster
/// (no service, or another alias: destinations follow one hop) — requests there are
/// answered 503. The findings go when the named host appears.
#[test]
fn aliases_resolving_to_no_service_are_reported() {
    let mut m = Mesh::new();
    let reviews = host("reviews", "shop");
    m.insert(vec![
        service("front", "default"),
        external_name("rv", "default", &reviews),
        external_name("chained", "default", &host("rv", "default")),
        virtual_service(
            "default",
            "to-rv",
            &[&host("front", "default")],
            &[],
            &host("rv", "default"),
        ),
        virtual_service(
            "default",
            "to-chained",
            &["chained.example.com"],
            &[],
            &host("chained", "default"),
        ),
    ]);
    let found: BTreeMap<(String, String), String> = m
        .errors
        .keys()
        .filter(|e| e.code == ErrorCode::AliasUnresolved)
        .map(|e| {
            (
                (format!("{:?}", e.object.kind), e.object.name.clone()),
                e.message.clone(),
            )
        })
        .collect();
    let keys: Vec<&(String, String)> = found.keys().collect();
    assert_eq!(found.len(), 4, "{found:#?}");
    let msg = |kind: &str, name: &str| {
        found
            .iter()
            .find(|((k, n), _)| k == kind && n == name)
            .map(|(_, m)| m.clone())
            .unwrap_or_else(|| panic!("{kind} {name}: {keys:?}"))
    };
    assert!(msg("Service", "rv").starts_with("spec.externalName: host reviews.shop"));
    assert!(msg("Service", "chained").starts_with("spec.externalName: the chain"));
    assert!(msg("VirtualService", "to-rv").starts_with("spec.http[0].route[0].destination.host"));
    assert!(msg("VirtualService", "to-chained").contains("another alias"));
    assert!(ErrorCode::AliasUnresolved.is_warning());
    assert_eq!(ErrorCode::AliasUnresolved.message_code().0, "MF0015");

    // The named host appears: the aliases resolve; a destination naming an alias of an
    // alias still has no cluster (one hop), as in Istio.
    m.insert(vec![service("reviews", "shop")]);
    let left: Vec<&ConfigError> = m
        .errors
        .keys()
        .filter(|e| e.code == ErrorCode::AliasUnresolved)
        .collect();
    assert_eq!(left.len(), 1, "{left:#?}");
    assert_eq!(left[0].object.name, "to-chained");
}
