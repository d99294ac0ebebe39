//! A ServiceEntry's ports, endpoints (IP, unix socket, DNS), resolution, location and workload
//! selection, and a WorkloadEntry's fields.

use super::*;

#[test]
fn service_entry_target_port_is_where_endpoints_listen() {
    let doc = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se, namespace: ns}\nspec:\n  hosts: [a.example.com]\n  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]\n  resolution: STATIC\n  endpoints:\n  - address: 127.0.0.1\n  - address: 127.0.0.2\n    ports: {http: 9090}\n";
    let p = parse(doc);
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let ports: Vec<u16> = p
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Endpoint(_, e) => Some(e.port),
            _ => None,
        })
        .collect();
    assert_eq!(
        ports,
        vec![8080, 9090],
        "targetPort, unless the endpoint names its own"
    );
}

#[test]
fn service_entry_unix_endpoints_are_sockets_beside_one_port() {
    let doc = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se, namespace: ns}\nspec:\n  hosts: [a.example.com]\n  addresses: [10.1.0.0/16]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  resolution: STATIC\n  endpoints:\n  - address: unix:///var/run/a.sock\n  - address: 127.0.0.1\n    weight: 3\n    locality: us/a\n";
    let p = parse(doc);
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let endpoints: Vec<_> = p
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Endpoint(_, e) => Some(e),
            _ => None,
        })
        .collect();
    let ips: Vec<&str> = endpoints.iter().map(|e| e.ip.as_str()).collect();
    assert_eq!(ips, vec!["unix:///var/run/a.sock", "127.0.0.1"]);
    // Weight and locality are the endpoint's own.
    assert_eq!(
        endpoints[1].placement,
        dataflows::model::Placement {
            locality: "us/a".into(),
            weight: Some(3)
        }
    );
    // As Istio validates: one port beside a socket, and a socket takes no ports.
    for (from, to, field) in [
        (
            "  ports: [{number: 80, name: http, protocol: HTTP}]\n",
            "  ports: [{number: 80, name: http, protocol: HTTP}, {number: 81, name: tcp, protocol: TCP}]\n",
            "spec.ports",
        ),
        (
            "  - address: unix:///var/run/a.sock\n",
            "  - address: unix:///var/run/a.sock\n    ports: {http: 8080}\n",
            "spec.endpoints[0]",
        ),
    ] {
        let err = parse_document(&doc.replace(from, to), &MeshConfig::default()).unwrap_err();
        assert!(format!("{err:?}").contains(field), "{field}: {err:?}");
    }
}

/// A DNS entry's endpoints are what Envoy resolves: carried on the service (not as EDS
/// endpoints), each with its port per service port; DNS_ROUND_ROBIN takes at most one, an
/// address must be a name or an IP, and without endpoints every host must be a name DNS
/// can answer (no wildcard), as Istio validates.
#[test]
fn service_entry_dns_endpoints_are_resolved_in_place_of_the_hosts() {
    let doc = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se, namespace: ns}\nspec:\n  hosts: [a.example.com]\n  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}, {number: 443, name: tls, protocol: TLS}]\n  resolution: DNS\n  endpoints:\n  - address: us.a.example.com\n    ports: {http: 9090}\n    labels: {region: us}\n    locality: us\n  - address: 10.0.0.7\n";
    let p = parse(doc);
    assert!(fields(&p, Level::Error).is_empty(), "{:?}", p.findings);
    assert!(
        !p.records.iter().any(|r| matches!(r, Record::Endpoint(..))),
        "no EDS endpoints for a DNS entry"
    );
    let Some(Record::Service(svc)) = p.records.first() else {
        panic!("{:?}", p.records)
    };
    assert_eq!(svc.resolution, dataflows::model::Resolution::Dns);
    let got: Vec<(&str, Vec<(&str, u16)>)> = svc
        .dns_endpoints
        .iter()
        .map(|e| {
            (
                e.address.as_str(),
                e.ports.iter().map(|(k, v)| (k.as_str(), *v)).collect(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("us.a.example.com", vec![("http", 9090), ("tls", 443)]),
            ("10.0.0.7", vec![("http", 8080), ("tls", 443)]),
        ]
    );
    assert_eq!(svc.dns_endpoints[0].placement.locality, "us");
    // Its locality is translated (locality load balancing of the DNS cluster's hosts), not
    // reported.
    assert!(fields(&p, Level::Warning).is_empty(), "{:?}", p.findings);
    let rr = doc.replace("resolution: DNS\n", "resolution: DNS_ROUND_ROBIN\n");
    let err = parse_document(&rr, &MeshConfig::default()).unwrap_err();
    assert!(format!("{err:?}").contains("spec.endpoints"), "{err:?}");
    let bad = doc.replace("address: us.a.example.com", "address: 'not a name'");
    let err = parse_document(&bad, &MeshConfig::default()).unwrap_err();
    assert!(
        format!("{err:?}").contains("spec.endpoints[0].address"),
        "{err:?}"
    );
    let wildcard = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se, namespace: ns}\nspec:\n  hosts: ['*.example.com']\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  resolution: DNS\n";
    let err = parse_document(wildcard, &MeshConfig::default()).unwrap_err();
    assert!(format!("{err:?}").contains("spec.hosts[0]"), "{err:?}");
}

/// A DNS entry without endpoints: Envoy resolves each host itself, at the port's
/// `targetPort` where it has one (Istio's TLS origination task: port 80 to the host's 443);
/// with endpoints, the target ports are theirs, not the hosts'.
#[test]
fn service_entry_dns_hosts_are_reached_at_the_target_port() {
    let doc = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: cnn, namespace: ns}\nspec:\n  hosts: [edition.cnn.com]\n  ports: [{number: 80, name: http-port, protocol: HTTP, targetPort: 443}, {number: 443, name: https-port, protocol: HTTPS}]\n  resolution: DNS\n";
    let p = parse(doc);
    assert!(fields(&p, Level::Error).is_empty(), "{:?}", p.findings);
    let Some(Record::Service(svc)) = p.records.first() else {
        panic!("{:?}", p.records)
    };
    assert!(svc.dns_endpoints.is_empty());
    let got: Vec<(&str, u16)> = svc
        .host_target_ports
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(got, [("http-port", 443)]);
    let with_endpoint = doc.replace(
        "resolution: DNS\n",
        "resolution: DNS\n  endpoints: [{address: cnn.example.net}]\n",
    );
    let p = parse(&with_endpoint);
    let Some(Record::Service(svc)) = p.records.first() else {
        panic!("{:?}", p.records)
    };
    assert!(svc.host_target_ports.is_empty());
    assert_eq!(svc.dns_endpoints[0].ports.get("http-port"), Some(&443));
}

/// `resolution: DYNAMIC_DNS` (Istio 1.29's dynamic forward proxy) is refused by name, not
/// taken for another resolution or called unknown.
#[test]
fn service_entry_dynamic_dns_is_refused_by_name() {
    let doc = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: any, namespace: ns}\nspec:\n  hosts: [\"*.example.com\"]\n  ports: [{number: 443, name: tls, protocol: TLS}]\n  resolution: DYNAMIC_DNS\n";
    let err = parse_document(doc, &MeshConfig::default()).expect_err("refused");
    let text = format!("{err:?}");
    assert!(
        text.contains("spec.resolution")
            && text.contains("DYNAMIC_DNS")
            && text.contains("not supported"),
        "{text}"
    );
}

#[test]
fn service_entry_workload_selector_selects_and_excludes_endpoints() {
    let doc = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: vm, namespace: ns}\nspec:\n  hosts: [vm.example.com]\n  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]\n  resolution: STATIC\n  workloadSelector: {labels: {app: vm}}\n";
    let p = parse(doc);
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let sel = p
        .records
        .iter()
        .find_map(|r| match r {
            Record::Selection(h, s) => Some((h, s)),
            _ => None,
        })
        .expect("a selection");
    assert_eq!(sel.0, "vm.example.com");
    assert_eq!(sel.1.ports[0].target, 8080, "the target port");
    // Both at once is what Istio refuses.
    let both = doc.replace(
        "  resolution: STATIC\n",
        "  resolution: STATIC\n  endpoints: [{address: 10.0.0.1}]\n",
    );
    let err = parse_document(&both, &MeshConfig::default()).unwrap_err();
    assert!(
        format!("{err:?}").contains("spec.workloadSelector"),
        "{err:?}"
    );
}

#[test]
fn workload_entry_ports_weight_locality_and_network_are_read() {
    let doc = "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: vm1, namespace: ns}\nspec:\n  address: 10.0.0.9\n  ports: {http: 9090}\n  labels: {app: vm}\n  weight: 5\n  locality: r1/z1/s1\n  network: n1\n  serviceAccount: sa\n";
    let p = parse(doc);
    assert!(fields(&p, Level::Warning).is_empty(), "{:?}", p.findings);
    let Record::Workload(w) = &p.records[0] else {
        panic!("{:?}", p.records)
    };
    assert_eq!(
        w.labels
            .get(dataflows::model::NETWORK_LABEL)
            .map(String::as_str),
        Some("n1"),
        "the network is a label"
    );
    assert_eq!(w.ports.get("http"), Some(&9090));
    assert_eq!(w.placement.weight, Some(5));
    assert_eq!(w.placement.locality, "r1/z1/s1");
    assert_eq!(w.service_account.as_deref(), Some("sa"));
    let bad = doc.replace("weight: 5", "weight: -1");
    let err = parse_document(&bad, &MeshConfig::default()).unwrap_err();
    assert!(format!("{err:?}").contains("spec.weight"), "{err:?}");
}

#[test]
fn service_entry_location_marks_services_outside_the_mesh() {
    let entry = |location: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: se, namespace: ns}}\nspec:\n  hosts: [a.example.com]\n{location}  ports: [{{number: 443, name: tls, protocol: TLS}}]\n  resolution: DNS\n")
    };
    let external = |doc: &str| {
        let p = parse(doc);
        assert!(p.findings.is_empty(), "{:?}", p.findings);
        match &p.records[0] {
            Record::Service(s) => s.mesh_external,
            other => panic!("{other:?}"),
        }
    };
    // Istio's default location is MESH_EXTERNAL.
    assert!(external(&entry("")));
    assert!(external(&entry("  location: MESH_EXTERNAL\n")));
    assert!(!external(&entry("  location: MESH_INTERNAL\n")));
    let err =
        crate::config::parse_document(&entry("  location: OUTSIDE\n"), &MeshConfig::default())
            .unwrap_err();
    assert_eq!(err.field, "spec.location");
    assert!(err.message.contains("OUTSIDE"), "{}", err.message);
    // A Kubernetes ExternalName Service is outside the mesh too; a ClusterIP one is not.
    let svc = |spec: &str| {
        let doc = format!("apiVersion: v1\nkind: Service\nmetadata: {{name: s, namespace: ns}}\nspec:\n{spec}  ports: [{{name: http, port: 80}}]\n");
        external(&doc)
    };
    assert!(svc(
        "  type: ExternalName\n  externalName: api.example.com\n"
    ));
    assert!(!svc("  clusterIP: 10.96.0.9\n"));
}

#[test]
fn endpoint_network_is_the_network_label_unless_the_workload_has_one() {
    let doc = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se, namespace: ns}\nspec:\n  hosts: [a.example.com]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  resolution: STATIC\n  endpoints:\n  - address: 127.0.0.1\n    network: n1\n  - address: 127.0.0.2\n    network: n1\n    labels: {topology.istio.io/network: own}\n  - address: 127.0.0.3\n---\napiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: vm, namespace: ns}\nspec:\n  address: 10.0.0.7\n  network: vm-net\n  labels: {app: a}\n";
    let out =
        crate::config::parse_file(std::path::Path::new("f.yaml"), doc, &MeshConfig::default());
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let findings: Vec<_> = out.objects.iter().flat_map(|(_, o)| &o.findings).collect();
    assert!(
        findings.is_empty(),
        "network is translated, not reported: {findings:?}"
    );
    let records: Vec<&Record> = out.objects.iter().flat_map(|(_, o)| &o.records).collect();
    let networks: Vec<Option<&str>> = records
        .iter()
        .filter_map(|r| match r {
            Record::Endpoint(_, e) => Some(
                e.labels
                    .get(dataflows::model::NETWORK_LABEL)
                    .map(String::as_str),
            ),
            Record::Workload(w) => Some(
                w.labels
                    .get(dataflows::model::NETWORK_LABEL)
                    .map(String::as_str),
            ),
            _ => None,
        })
        .collect();
    assert_eq!(
        networks,
        vec![Some("n1"), Some("own"), None, Some("vm-net")]
    );
}
