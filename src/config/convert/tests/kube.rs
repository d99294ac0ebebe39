//! Kubernetes Services: addresses, ExternalName aliases, port protocols, traffic distribution
//! and the fields not read.

use super::*;

#[test]
fn service_addresses_are_read_as_cidrs() {
    let svc = "apiVersion: v1\nkind: Service\nmetadata: {name: db, namespace: ns}\nspec:\n  clusterIP: 10.96.0.7\n  clusterIPs: [10.96.0.7, 'fd00::7']\n  ports: [{name: tcp, port: 5432}]\n";
    let headless = "apiVersion: v1\nkind: Service\nmetadata: {name: db, namespace: ns}\nspec:\n  clusterIP: None\n  ports: [{name: tcp, port: 5432}]\n";
    let se = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se, namespace: ns}\nspec:\n  hosts: [db.example.com]\n  addresses: [192.168.3.4/24, 10.0.0.1]\n  ports: [{number: 5432, name: tcp, protocol: TCP}]\n";
    for (doc, want) in [
        (svc, vec!["10.96.0.7/32", "fd00::7/128"]),
        (headless, vec![]),
        (se, vec!["192.168.3.0/24", "10.0.0.1/32"]),
    ] {
        let p = parse(doc);
        assert!(
            p.findings.is_empty(),
            "a TCP port is translated: {:?}",
            p.findings
        );
        let Record::Service(s) = &p.records[0] else {
            panic!()
        };
        assert_eq!(s.addresses, want);
        assert_eq!(s.ports[0].protocol, dataflows::model::Protocol::Tcp);
    }
    let e = parse_document(&se.replace("10.0.0.1]", "nowhere]"), &MeshConfig::default())
        .expect_err("not an address");
    assert_eq!(e.field, "spec.addresses[1]");
}

/// An ExternalName Service is an alias of the host it names (Istio 1.21 and later): no
/// addresses, no endpoints of its own, the name it points at kept for the dataflow.
#[test]
fn external_name_services_alias_their_name() {
    let doc = "apiVersion: v1\nkind: Service\nmetadata: {name: db, namespace: ns}\nspec:\n  type: ExternalName\n  externalName: db.example.com\n  ports: [{name: tcp-db, port: 5432}]\n";
    let p = parse(doc);
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let Some(Record::Service(svc)) = p.records.first() else {
        panic!("{:?}", p.records)
    };
    assert_eq!(svc.hostname, "db.ns.svc.cluster.local");
    assert_eq!(svc.alias_for.as_deref(), Some("db.example.com"));
    assert!(svc.addresses.is_empty());
    assert!(svc.dns_endpoints.is_empty());
    let err = parse_document(
        &doc.replace("db.example.com", "'bad name'"),
        &MeshConfig::default(),
    )
    .unwrap_err();
    assert!(format!("{err:?}").contains("spec.externalName"), "{err:?}");
}

/// A Service port whose name and `appProtocol` name no protocol is told per connection
/// (Istio's protocol sniffing), without a word: it is translated; `kubernetes.io/h2c` is
/// HTTP/2, `kubernetes.io/ws` HTTP (a WebSocket's upgrade), `kubernetes.io/wss` TLS.
/// Service fields that steer traffic and are not read are named.
#[test]
fn service_ports_without_a_protocol_are_detected_and_fields_not_read_are_said() {
    let doc = "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: ns}\nspec:\n  clusterIP: 10.0.0.9\n  internalTrafficPolicy: Local\n  sessionAffinity: ClientIP\n  ports:\n  - {name: http-web, port: 80}\n  - {port: 81}\n  - {name: metrics, port: 82}\n  - {name: web, port: 83, appProtocol: kubernetes.io/h2c}\n  - {name: db, port: 84, appProtocol: mysql}\n  - {name: web2, port: 85, appProtocol: custom}\n  - {name: socket, port: 86, appProtocol: kubernetes.io/ws}\n  - {name: secure-socket, port: 87, appProtocol: kubernetes.io/wss}\n";
    let p = parse(doc);
    assert_eq!(
        fields(&p, Level::Warning),
        vec!["spec.internalTrafficPolicy", "spec.sessionAffinity"]
    );
    let Record::Service(s) = &p.records[0] else {
        panic!("{:?}", p.records)
    };
    let protocols: Vec<_> = s.ports.iter().map(|p| (p.port, p.protocol)).collect();
    use dataflows::model::Protocol::*;
    assert_eq!(
        protocols,
        vec![
            (80, Http),
            (81, Auto),
            (82, Auto),
            (83, Http2),
            (84, Tcp),
            (85, Auto),
            (86, Http),
            (87, Tls)
        ]
    );
}

/// `trafficDistribution` as Istio reads it: `PreferClose` and `PreferSameZone` prefer close
/// endpoints without a word; without the field, Istio's annotation does (any case); another
/// value is named as not read and prefers nothing; the field wins over the annotation.
#[test]
fn traffic_distribution_prefer_close_is_read_and_other_values_are_said() {
    let doc = |spec: &str, annotation: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: s, namespace: ns{annotation}}}\nspec:\n  clusterIP: 10.0.0.9\n{spec}  ports:\n  - {{name: http-web, port: 80}}\n"
        )
    };
    let annotated = ", annotations: {networking.istio.io/traffic-distribution: preferclose}";
    for (spec, annotation, close, warned) in [
        ("  trafficDistribution: PreferClose\n", "", true, false),
        ("  trafficDistribution: PreferSameZone\n", "", true, false),
        ("", annotated, true, false),
        ("", "", false, false),
        ("  trafficDistribution: PreferSameNode\n", "", false, true),
        (
            "  trafficDistribution: PreferSameNode\n",
            annotated,
            false,
            true,
        ),
    ] {
        let p = parse(&doc(spec, annotation));
        let Record::Service(s) = &p.records[0] else {
            panic!("{:?}", p.records)
        };
        assert_eq!(s.prefer_close, close, "{spec}{annotation}");
        let expected: Vec<&str> = if warned {
            vec!["spec.trafficDistribution"]
        } else {
            vec![]
        };
        assert_eq!(fields(&p, Level::Warning), expected, "{spec}{annotation}");
    }
}

/// Istio annotations on a Service that meshflow does not read are reported by name (a
/// Pod's `sidecar.istio.io/inject` misplaced there, one of no Istio meaning); those it
/// reads, and other domains' annotations, say nothing.
#[test]
fn istio_annotations_a_service_carries_and_meshflow_does_not_read_are_reported() {
    let doc = "apiVersion: v1\nkind: Service\nmetadata:\n  name: db\n  namespace: ns\n  annotations:\n    networking.istio.io/exportTo: '.'\n    networking.istio.io/traffic-distribution: PreferClose\n    sidecar.istio.io/inject: 'false'\n    networking.istio.io/made-up: x\n    example.com/note: y\nspec:\n  ports: [{name: http, port: 80}]\n";
    let p = parse(doc);
    assert_eq!(
        fields(&p, Level::Warning),
        vec![
            "metadata.annotations[networking.istio.io/made-up]",
            "metadata.annotations[sidecar.istio.io/inject]",
        ]
    );
    let Record::Service(s) = &p.records[0] else {
        panic!()
    };
    assert_eq!(
        s.export_to,
        vec![".".to_string()],
        "the read ones still apply"
    );
    assert!(s.prefer_close);
}
