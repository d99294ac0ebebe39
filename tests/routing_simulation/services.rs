//! Kinds of service routed end to end: DNS ServiceEntries per subset, headless Services,
//! ExternalName aliases and WorkloadEntries a ServiceEntry selects.

use crate::fixtures::{sidecar_setup, via_sidecar, PORT};
use crate::support::{write_config, ProxyNode, TestDir};
use crate::{assert_status, Mesh};
use dataflows::simulate::{Call, Discovery};
use std::collections::BTreeMap;

/// A DNS ServiceEntry's endpoints are the hosts Envoy resolves, each at its own port, and a
/// DestinationRule subset keeps those of its labels (STRICT_DNS); DNS_ROUND_ROBIN resolves
/// its one endpoint (LOGICAL_DNS), and a subset that leaves it nothing answers 503 instead
/// of resolving something else.
#[test]
fn dns_service_entry_endpoints_are_resolved_per_subset() {
    let (mut mesh, _reviews, proxy) = sidecar_setup("dns-endpoints", &["v1"]);
    let entries = "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: default}
spec:
  hosts: [db.example.com]
  ports: [{number: THE_PORT, name: http, protocol: HTTP, targetPort: 8080}]
  resolution: DNS
  endpoints:
  - {address: us.db.example.com, labels: {region: us}, locality: us, weight: 2}
  - {address: eu.db.example.com, labels: {region: eu}, ports: {http: 9090}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: one, namespace: default}
spec:
  hosts: [one.example.com]
  ports: [{number: THE_PORT, name: http, protocol: HTTP}]
  resolution: DNS_ROUND_ROBIN
  endpoints: [{address: one-backend.example.com, labels: {region: us}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: default}
spec:
  host: db.example.com
  subsets: [{name: eu, labels: {region: eu}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: one, namespace: default}
spec:
  host: one.example.com
  subsets: [{name: eu, labels: {region: eu}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: default}
spec:
  hosts: [db.example.com, one.example.com]
  http:
  - match: [{headers: {x-region: {exact: eu}}, authority: {prefix: db.}}]
    route: [{destination: {host: db.example.com, subset: eu}}]
  - match: [{headers: {x-region: {exact: eu}}}]
    route: [{destination: {host: one.example.com, subset: eu}}]
  - match: [{authority: {prefix: db.}}]
    route: [{destination: {host: db.example.com}}]
  - route: [{destination: {host: one.example.com}}]
"
    .replace("THE_PORT", &PORT.to_string());
    write_config(&mesh.config, "dns.yaml", &entries);
    let cluster = |subset: &str, host: &str| format!("outbound|{PORT}|{subset}|{host}");
    let o = mesh.send(&proxy, &via_sidecar("db.example.com", "/"));
    assert_eq!(
        o.cluster(),
        Some(cluster("", "db.example.com").as_str()),
        "{o:#?}"
    );
    assert_eq!(o.upstreams()[0].discovery, Discovery::StrictDns);
    assert_eq!(
        o.endpoints(),
        vec!["eu.db.example.com:9090", "us.db.example.com:8080"]
    );
    let eu = via_sidecar("db.example.com", "/").header("x-region", "eu");
    let o = mesh.send(&proxy, &eu);
    assert_eq!(
        o.cluster(),
        Some(cluster("eu", "db.example.com").as_str()),
        "{o:#?}"
    );
    assert_eq!(o.endpoints(), vec!["eu.db.example.com:9090"]);

    let o = mesh.send(&proxy, &via_sidecar("one.example.com", "/"));
    assert_eq!(o.upstreams()[0].discovery, Discovery::LogicalDns, "{o:#?}");
    assert_eq!(
        o.endpoints(),
        vec![format!("one-backend.example.com:{PORT}")]
    );
    let o = mesh.send(
        &proxy,
        &via_sidecar("one.example.com", "/").header("x-region", "eu"),
    );
    assert_eq!(
        o.cluster(),
        Some(cluster("eu", "one.example.com").as_str()),
        "{o:#?}"
    );
    assert!(o.endpoints().is_empty(), "{o:#?}");
    assert_eq!(o.status(), Some(503), "{o:#?}");
    mesh.assert_no_errors();
}

/// A headless Service (`clusterIP: None`, a StatefulSet's): a sidecar's connection to one of
/// its pods goes to that pod — the address the client dialled — not to any endpoint of the
/// service, as Istio's sidecars send it (an `ORIGINAL_DST` cluster for a headless service,
/// unless `PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES`), on a TCP port as on an HTTP one.
#[test]
fn a_headless_service_is_reached_at_the_pod_the_client_dialled() {
    let mut mesh = Mesh::new("headless");
    write_config(
        &mesh.config,
        "db.yaml",
        "apiVersion: v1
kind: Service
metadata: {name: db, namespace: default}
spec:
  clusterIP: None
  selector: {app: db}
  ports:
  - {name: tcp-db, port: 5432, targetPort: 5432}
  - {name: http-admin, port: 8080, targetPort: 8080}
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, namespace: default, labels: {app: db}}
status: {phase: Running, podIP: 127.0.63.11}
---
apiVersion: v1
kind: Pod
metadata: {name: db-1, namespace: default, labels: {app: db}}
status: {phase: Running, podIP: 127.0.63.12}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-abcde
  namespace: default
  labels: {kubernetes.io/service-name: db}
addressType: IPv4
ports:
- {name: tcp-db, port: 5432, protocol: TCP}
- {name: http-admin, port: 8080, protocol: TCP}
endpoints:
- addresses: [127.0.63.11]
  conditions: {ready: true}
  hostname: db-0
- addresses: [127.0.63.12]
  conditions: {ready: true}
  hostname: db-1
",
    );
    let sidecar = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        "127.0.63.20",
        &[("app", "client")],
    ));
    for pod in ["127.0.63.11", "127.0.63.12"] {
        let o = mesh.send(&sidecar, &Call::connect(5432).to_address(pod));
        assert_eq!(
            o.cluster(),
            Some("outbound|5432||db.default.svc.cluster.local"),
            "{o:#?}"
        );
        assert_eq!(o.upstreams()[0].discovery, Discovery::OriginalDst, "{o:#?}");
        assert_eq!(o.endpoints(), [format!("{pod}:5432")], "{o:#?}");
        let o = mesh.send(
            &sidecar,
            &Call::get("db.default.svc.cluster.local", 8080, "/").to_address(pod),
        );
        assert_eq!(
            o.cluster(),
            Some("outbound|8080||db.default.svc.cluster.local"),
            "{o:#?}"
        );
        assert_eq!(o.upstreams()[0].discovery, Discovery::OriginalDst, "{o:#?}");
        assert_eq!(o.endpoints(), [format!("{pod}:8080")], "{o:#?}");
    }
}

/// An ExternalName Service is an alias of the host it names (Istio since 1.21: wherever the
/// concrete service is matched, the ExternalName's names match too; the alias gets no
/// cluster of its own): a request for `billing` goes where one for
/// `billing.partner.example` goes, that host's ServiceEntry cluster and its VirtualService
/// routes.
#[test]
fn an_external_name_service_routes_as_the_host_it_names() {
    let mut mesh = Mesh::new("external-name");
    write_config(
        &mesh.config,
        "billing.yaml",
        "apiVersion: v1
kind: Service
metadata: {name: billing, namespace: default}
spec:
  type: ExternalName
  externalName: billing.partner.example
  ports:
  - {name: http, port: 80, protocol: TCP}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: billing-partner, namespace: default}
spec:
  hosts: [billing.partner.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
",
    );
    let sidecar = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        "127.0.64.20",
        &[("app", "client")],
    ));
    let target = "outbound|80||billing.partner.example";
    for host in [
        "billing.partner.example",
        "billing",
        "billing.default.svc.cluster.local",
    ] {
        let o = mesh.send(
            &sidecar,
            &Call::get(host, 80, "/invoices").to_address("203.0.113.9"),
        );
        assert_eq!(o.cluster(), Some(target), "{host}: {o:#?}");
        assert_eq!(o.endpoints(), ["billing.partner.example:80"], "{o:#?}");
    }
}

/// The edge cases of ExternalName aliases, as Istio's sidecars route them: a VirtualService
/// naming the alias's own host governs the alias's names on a port the alias declares (a
/// request for `billing` goes where that VirtualService sends it, while one for the named
/// host keeps its own route); a destination without a port naming an alias that does not
/// declare the port the request arrived on keeps the alias's host, which has no cluster —
/// Envoy answers 503 (Istio's `GetDestinationCluster` finds no service for it there) —, and
/// is reported (`MF0015` when the alias names no service).
#[test]
fn external_name_aliases_route_their_own_virtual_service_and_portless_destinations_as_istio() {
    let mut mesh = Mesh::new("external-name-edges");
    write_config(
        &mesh.config,
        "billing.yaml",
        "apiVersion: v1
kind: Service
metadata: {name: billing, namespace: default}
spec:
  type: ExternalName
  externalName: billing.partner.example
  ports:
  - {name: http, port: 80, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata: {name: ledger, namespace: default}
spec:
  type: ExternalName
  externalName: billing.partner.example
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: billing-partner, namespace: default}
spec:
  hosts: [billing.partner.example, billing-v2.partner.example, ledger.partner.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: billing, namespace: default}
spec:
  hosts: [billing]
  http:
  - route:
    - destination: {host: billing-v2.partner.example}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ledger, namespace: default}
spec:
  hosts: [ledger.partner.example]
  http:
  - route:
    - destination: {host: ledger}
",
    );
    let sidecar = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        "127.0.64.21",
        &[("app", "client")],
    ));
    let get = |host: &str| Call::get(host, 80, "/invoices").to_address("203.0.113.9");
    for host in [
        "billing",
        "billing.default",
        "billing.default.svc.cluster.local",
    ] {
        let o = mesh.send(&sidecar, &get(host));
        assert_eq!(
            o.cluster(),
            Some("outbound|80||billing-v2.partner.example"),
            "{host}: {o:#?}"
        );
    }
    let o = mesh.send(&sidecar, &get("billing.partner.example"));
    assert_eq!(
        o.cluster(),
        Some("outbound|80||billing.partner.example"),
        "{o:#?}"
    );
    // `ledger` declares no port: on port 80 the destination keeps its host, a cluster no
    // proxy has.
    let o = mesh.send(&sidecar, &get("ledger.partner.example"));
    assert_eq!(
        o.cluster(),
        Some("outbound|80||ledger.default.svc.cluster.local"),
        "{o:#?}"
    );
    assert_status(&o, 503);
}

/// A ServiceEntry whose endpoints are the workloads its `workloadSelector` selects: two
/// WorkloadEntries (one at the port its `ports` names for the entry's port, with its
/// weight; one at the entry's `targetPort`) and a Pod of the namespace carrying the labels.
/// A request for the entry's host, captured at the entry's address, can reach those three
/// addresses and no other, as shipped in `examples/service-registry`; a WorkloadEntry whose
/// labels stop matching leaves.
#[test]
fn workload_entries_selected_by_a_service_entry_are_its_endpoints() {
    let dir = TestDir::new("routing-simulation-workload-entries");
    let config = dir.subdir("config");
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/service-registry/config"
    );
    for entry in std::fs::read_dir(source).expect("examples/service-registry/config") {
        let path = entry.expect("a directory entry").path();
        std::fs::copy(&path, config.join(path.file_name().expect("a file name")))
            .expect("copy the example");
    }
    let mut mesh = Mesh::over(dir, config);
    let sleep = mesh.connect_captured(&ProxyNode::sidecar(
        "sleep-9b8c7",
        "default",
        "127.0.4.70",
        &[("app", "sleep")],
    ));
    let call = Call::get("inventory.shop.example", 8080, "/items").to_address("192.0.2.20");
    let o = mesh.send(&sleep, &call);
    assert_eq!(
        o.cluster(),
        Some("outbound|8080||inventory.shop.example"),
        "{o:#?}"
    );
    assert_eq!(
        o.endpoints(),
        ["127.0.4.51:18080", "127.0.4.52:8080", "127.0.4.53:8080"],
        "{o:#?}"
    );
    let weights: BTreeMap<String, Option<u32>> = o.upstreams()[0]
        .endpoints
        .iter()
        .map(|e| (e.address.clone(), e.weight))
        .collect();
    assert_eq!(weights["127.0.4.51:18080"], Some(2), "{weights:?}");

    let entries = mesh.config.join("service-entries.yaml");
    let text = std::fs::read_to_string(&entries).expect("read");
    let relabelled = text.replacen(
        "  address: 127.0.4.52\n  labels:\n    app: inventory",
        "  address: 127.0.4.52\n  labels:\n    app: retired",
        1,
    );
    assert_ne!(text, relabelled, "the fixture names vm-2's labels");
    write_config(&mesh.config, "service-entries.yaml", &relabelled);
    let o = mesh.send(&sleep, &call);
    assert_eq!(
        o.endpoints(),
        ["127.0.4.51:18080", "127.0.4.53:8080"],
        "{o:#?}"
    );
}
