//! A DestinationRule's subsets, client TLS, port level settings, connection pools and
//! workload selector: what is read and what is refused naming the field.

use super::*;

#[test]
fn client_tls_is_read_at_the_rule_its_subsets_and_its_ports() {
    // A Secret's certificates (credentialName): served over SDS from the client proxy's
    // namespace, so nothing fails closed at conversion.
    let p = parse(&format!(
        "{DR}  trafficPolicy:\n    tls: {{mode: SIMPLE, credentialName: x, sni: r.example}}\n    proxyProtocol: {{version: V1}}\n"
    ));
    let policy = dr(&p).traffic_policy.clone().expect("a traffic policy");
    let tls = policy.tls.expect("SIMPLE with credentialName is generated");
    assert_eq!(tls.credential.as_deref(), Some("x"));
    assert!(!tls.mutual);
    assert_eq!(tls.field, "spec.trafficPolicy.tls");
    assert!(fields(&p, Level::Error).is_empty(), "{:?}", p.findings);
    assert_eq!(
        fields(&p, Level::Warning),
        vec!["spec.trafficPolicy.proxyProtocol"]
    );

    // ISTIO_MUTUAL is generated: the workload certificate over SDS, the rule's SNI and
    // names kept; the files it does not use are named.
    let p = parse(&format!(
        "{DR}  trafficPolicy:\n    tls: {{mode: ISTIO_MUTUAL, sni: x, subjectAltNames: [spiffe://cluster.local/ns/ns/sa/r], caCertificates: /ca.pem}}\n"
    ));
    let policy = dr(&p).traffic_policy.clone().expect("a traffic policy");
    let tls = policy.tls.expect("ISTIO_MUTUAL is generated");
    assert!(tls.istio_mutual);
    assert_eq!(tls.sni.as_deref(), Some("x"));
    assert_eq!(
        tls.subject_alt_names,
        vec!["spiffe://cluster.local/ns/ns/sa/r"]
    );
    assert_eq!(tls.ca, None);
    assert!(fields(&p, Level::Error).is_empty(), "{:?}", p.findings);
    assert_eq!(
        fields(&p, Level::Warning),
        vec!["spec.trafficPolicy.tls.caCertificates"]
    );

    // DISABLE generates nothing, but is kept as given: it replaces an inherited tls.
    let p = parse(&format!(
        "{DR}  trafficPolicy:\n    tls: {{mode: DISABLE}}\n"
    ));
    let policy = dr(&p).traffic_policy.clone().expect("a traffic policy");
    assert!(policy.tls.is_none() && policy.tls_disabled);
    assert!(p.findings.is_empty(), "{:?}", p.findings);

    // SIMPLE and MUTUAL with files (a subset's own here), and each port's own settings:
    // the entry's four settings, read like the rule's.
    let p = parse(&format!(
        "{DR}  subsets:\n  - name: v1\n    labels: {{version: v1}}\n    trafficPolicy: {{tls: {{mode: MUTUAL, clientCertificate: /c.pem, privateKey: /k.pem, caCertificates: /ca.pem, sni: r.example.com, subjectAltNames: [r.example.com]}}}}\n  trafficPolicy:\n    loadBalancer: {{simple: ROUND_ROBIN}}\n    portLevelSettings:\n    - port: {{number: 9080}}\n      tls: {{mode: SIMPLE, credentialName: reviews-cert}}\n      loadBalancer: {{simple: RANDOM}}\n      connectionPool: {{tcp: {{connectTimeout: 2s, maxConnections: 7}}}}\n      outlierDetection: {{consecutive5xxErrors: 3}}\n    - port: {{number: 9081}}\n      tls: {{mode: DISABLE}}\n"
    ));
    let d = dr(&p);
    let sub = d.subsets[0]
        .traffic_policy
        .as_ref()
        .expect("the subset's policy");
    let tls = sub.tls.as_ref().expect("MUTUAL is generated");
    assert_eq!(
        tls.client_cert,
        Some(("/c.pem".to_string(), "/k.pem".to_string()))
    );
    assert_eq!(
        (tls.ca.as_deref(), tls.sni.as_deref()),
        (Some("/ca.pem"), Some("r.example.com"))
    );
    let top = d.traffic_policy.as_ref().expect("the rule's policy");
    assert_eq!(
        top.load_balancer,
        Some(dataflows::model::LoadBalancer::RoundRobin)
    );
    let ports: Vec<u16> = top.port_level.iter().map(|(p, _)| *p).collect();
    assert_eq!(ports, vec![9080, 9081]);
    let at_9080 = &top.port_level[0].1;
    assert_eq!(
        at_9080.load_balancer,
        Some(dataflows::model::LoadBalancer::Random)
    );
    assert_eq!(at_9080.connect_timeout_ms, Some(2000));
    assert_eq!(
        at_9080
            .connection_pool
            .as_ref()
            .and_then(|c| c.max_connections),
        Some(7)
    );
    assert_eq!(
        at_9080
            .outlier_detection
            .as_ref()
            .and_then(|o| o.consecutive_5xx),
        Some(3)
    );
    let tls = at_9080.tls.as_ref().expect("the port's tls");
    assert_eq!(tls.credential.as_deref(), Some("reviews-cert"));
    assert_eq!(tls.field, "spec.trafficPolicy.portLevelSettings[0].tls");
    assert!(top.port_level[1].1.tls_disabled);
    assert!(p.findings.is_empty(), "{:?}", p.findings);

    let e = parse_document(
        &format!("{DR}  trafficPolicy: {{tls: {{mode: MUTUAL, caCertificates: /ca.pem}}}}\n"),
        &MeshConfig::default(),
    )
    .unwrap_err();
    assert_eq!(e.field, "spec.trafficPolicy.tls");
    // Files beside a credentialName are refused, as Istio's validation does.
    let e = parse_document(
        &format!("{DR}  trafficPolicy: {{tls: {{mode: MUTUAL, credentialName: c, caCertificates: /ca.pem}}}}\n"),
        &MeshConfig::default(),
    )
    .unwrap_err();
    assert_eq!(e.field, "spec.trafficPolicy.tls.caCertificates");

    // A mode Istio does not know is rejected, as Istio's validation does.
    let e = parse_document(
        &format!("{DR}  trafficPolicy: {{tls: {{mode: SOMETIMES}}}}\n"),
        &MeshConfig::default(),
    )
    .unwrap_err();
    assert_eq!(e.field, "spec.trafficPolicy.tls.mode");
}

#[test]
fn port_level_settings_are_checked_as_istio_checks_them() {
    let rejected = |entries: &str| {
        parse_document(
            &format!("{DR}  trafficPolicy:\n    portLevelSettings:\n{entries}"),
            &MeshConfig::default(),
        )
        .unwrap_err()
        .field
    };
    // An entry without a port, or with nothing to set, is refused.
    assert_eq!(
        rejected("    - loadBalancer: {simple: RANDOM}\n"),
        "spec.trafficPolicy.portLevelSettings[0].port"
    );
    assert_eq!(
        rejected("    - port: {}\n      tls: {mode: DISABLE}\n"),
        "spec.trafficPolicy.portLevelSettings[0].port"
    );
    assert_eq!(
        rejected("    - port: {number: 9080}\n"),
        "spec.trafficPolicy.portLevelSettings[0]"
    );
    assert_eq!(
        rejected("    - port: {number: 70000}\n      tls: {mode: DISABLE}\n"),
        "spec.trafficPolicy.portLevelSettings[0].port.number"
    );
    assert_eq!(
        rejected("    - port: {number: 9080}\n      loadBalancer: {simple: FASTEST}\n"),
        "spec.trafficPolicy.portLevelSettings[0].loadBalancer.simple"
    );
    // A second entry for a port is never used (Istio takes the first): said, not refused;
    // a field of an entry not read is named.
    let p = parse(&format!(
        "{DR}  subsets:\n  - name: v1\n    labels: {{version: v1}}\n    trafficPolicy:\n      portLevelSettings:\n      - port: {{number: 9080}}\n        loadBalancer: {{simple: RANDOM}}\n      - port: {{number: 9080}}\n        loadBalancer: {{simple: ROUND_ROBIN}}\n        connectionPool: {{http: {{h2UpgradePolicy: UPGRADE}}}}\n        proxyProtocol: {{version: V1}}\n"
    ));
    let sub = dr(&p).subsets[0].traffic_policy.as_ref().expect("a policy");
    assert_eq!(sub.port_level.len(), 1);
    assert_eq!(
        sub.port_level[0].1.load_balancer,
        Some(dataflows::model::LoadBalancer::Random)
    );
    let mut warnings = fields(&p, Level::Warning);
    warnings.sort();
    assert_eq!(
        warnings,
        vec![
            "spec.subsets[0].trafficPolicy.portLevelSettings[1].port.number",
            "spec.subsets[0].trafficPolicy.portLevelSettings[1].proxyProtocol",
        ]
    );
}

/// A DestinationRule's `workloadSelector.matchLabels` is read (labels checked as Kubernetes
/// spells them); an empty one selects every workload, as none does.
#[test]
fn destination_rule_workload_selector_is_read() {
    let doc = |sel: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: d, namespace: ns}}\nspec:\n  host: reviews\n  workloadSelector: {sel}\n  subsets: [{{name: v1, labels: {{version: v1}}}}]\n")
    };
    let p = parse(&doc("{matchLabels: {app: productpage}}"));
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let expected: dataflows::model::Labels =
        [("app".to_string(), "productpage".to_string())].into();
    assert_eq!(dr(&p).selector, Some(expected));
    assert_eq!(dr(&parse(&doc("{matchLabels: {}}"))).selector, None);
    let e = parse_document(&doc("{matchLabels: {app: -x}}"), &MeshConfig::default())
        .expect_err("bad label");
    assert_eq!(e.field, "spec.workloadSelector.matchLabels.app");
}

/// Durations past protobuf's range (10,000 years) are refused naming the field, wherever
/// they are: Envoy would reject every update carrying them.
#[test]
fn durations_past_protobufs_range_are_refused() {
    let dr = format!("{DR}  trafficPolicy:\n    connectionPool:\n      tcp: {{connectTimeout: 9999999999999999h}}\n");
    let e = parse_document(&dr, &MeshConfig::default()).unwrap_err();
    assert_eq!(
        e.field, "spec.trafficPolicy.connectionPool.tcp.connectTimeout",
        "{e}"
    );
    assert!(e.to_string().contains("protobuf Duration"), "{e}");
    let ok = format!(
        "{DR}  trafficPolicy:\n    connectionPool:\n      tcp: {{connectTimeout: 87600000h}}\n"
    );
    parse(&ok);
}

/// `connectionPool.tcp.maxConnectionDuration` is held to at least 1ms, as Istio's validation
/// holds it (`0s` too: unlike `idleTimeout`, it has no "off"); 1ms and more are read.
#[test]
fn max_connection_duration_below_1ms_is_refused() {
    let dr = |d: &str| {
        format!("{DR}  trafficPolicy:\n    connectionPool:\n      tcp: {{maxConnectionDuration: {d}}}\n")
    };
    for d in ["0s", "0.5ms", "0.0009s"] {
        let e = parse_document(&dr(d), &MeshConfig::default()).unwrap_err();
        assert_eq!(
            e.field, "spec.trafficPolicy.connectionPool.tcp.maxConnectionDuration",
            "{d}: {e}"
        );
    }
    for (d, ms) in [("1ms", 1), ("1.5s", 1_500), ("2m", 120_000)] {
        let p = parse(&dr(d));
        let Record::DestinationRule(r) = &p.records[0] else {
            panic!()
        };
        let pool = r
            .traffic_policy
            .as_ref()
            .and_then(|t| t.connection_pool.as_ref());
        assert_eq!(
            pool.and_then(|p| p.max_connection_duration_ms),
            Some(ms),
            "{d}"
        );
    }
}

/// `connectionPool.http.h2UpgradePolicy`, `useClientProtocol`, `maxConcurrentStreams` and
/// `tcp.idleTimeout` are read (no warning), at the rule and per port, and bad values are
/// refused naming the field, as Istio's validation refuses them.
#[test]
fn connection_pool_protocol_fields_are_read_and_checked() {
    let p = parse(&format!(
        "{DR}  trafficPolicy:\n    connectionPool:\n      tcp: {{idleTimeout: 0s}}\n      http: {{h2UpgradePolicy: UPGRADE, maxConcurrentStreams: 9}}\n    portLevelSettings:\n    - port: {{number: 9080}}\n      connectionPool:\n        tcp: {{idleTimeout: 90s}}\n        http: {{h2UpgradePolicy: DO_NOT_UPGRADE, useClientProtocol: true}}\n"
    ));
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let tp = dr(&p).traffic_policy.as_ref().expect("a policy");
    let pool = tp.connection_pool.as_deref().expect("a pool");
    assert_eq!(pool.h2_upgrade, Some(dataflows::model::H2Upgrade::Upgrade));
    assert_eq!(pool.max_concurrent_streams, Some(9));
    assert_eq!(pool.tcp_idle_timeout_ms, Some(0));
    assert!(!pool.use_client_protocol);
    let port = tp.port_level[0]
        .1
        .connection_pool
        .as_deref()
        .expect("a pool");
    assert_eq!(
        port.h2_upgrade,
        Some(dataflows::model::H2Upgrade::DoNotUpgrade)
    );
    assert!(port.use_client_protocol);
    assert_eq!(port.tcp_idle_timeout_ms, Some(90_000));
    // `DEFAULT` is the mesh's policy: a given pool that sets it still replaces the rule's
    // (a subset's connectionPool is taken whole).
    let p = parse(&format!(
        "{DR}  subsets:\n  - name: v1\n    labels: {{version: v1}}\n    trafficPolicy:\n      connectionPool: {{http: {{h2UpgradePolicy: DEFAULT}}}}\n"
    ));
    let sub = dr(&p).subsets[0].traffic_policy.as_ref().expect("a policy");
    assert_eq!(
        sub.connection_pool.as_deref().map(|c| c.h2_upgrade),
        Some(None)
    );

    let rejected = |pool: &str| {
        let e = parse_document(
            &format!("{DR}  trafficPolicy:\n    connectionPool: {pool}\n"),
            &MeshConfig::default(),
        )
        .unwrap_err();
        (e.field, e.message)
    };
    let cases = [
        (
            "{http: {h2UpgradePolicy: SOMETIMES}}",
            "spec.trafficPolicy.connectionPool.http.h2UpgradePolicy",
            "unknown h2UpgradePolicy",
        ),
        (
            "{http: {h2UpgradePolicy: UPGRADE, useClientProtocol: true}}",
            "spec.trafficPolicy.connectionPool.http.h2UpgradePolicy",
            "useClientProtocol must not be true",
        ),
        (
            "{http: {maxConcurrentStreams: -1}}",
            "spec.trafficPolicy.connectionPool.http.maxConcurrentStreams",
            "not a count",
        ),
        (
            "{tcp: {idleTimeout: soon}}",
            "spec.trafficPolicy.connectionPool.tcp.idleTimeout",
            "not a duration",
        ),
        (
            "{tcp: {idleTimeout: 0.4ms}}",
            "spec.trafficPolicy.connectionPool.tcp.idleTimeout",
            "below 1ms",
        ),
    ];
    for (pool, field, message) in cases {
        let (f, m) = rejected(pool);
        assert_eq!(f, field, "{pool}");
        assert!(m.contains(message), "{pool}: {m}");
    }
}

/// A DestinationRule `connectionPool` without `tcp` or `http` is refused, as Istio's
/// validation refuses it, naming the field (at the rule, a subset, a port).
#[test]
fn an_empty_connection_pool_is_refused() {
    for (policy, field) in [
        (
            "  trafficPolicy: {connectionPool: {}}\n",
            "spec.trafficPolicy.connectionPool",
        ),
        (
            "  subsets:\n  - name: v1\n    labels: {version: v1}\n    trafficPolicy: {portLevelSettings: [{port: {number: 80}, connectionPool: {}}]}\n",
            "spec.subsets[0].trafficPolicy.portLevelSettings[0].connectionPool",
        ),
    ] {
        let e = parse_document(&format!("{DR}{policy}"), &MeshConfig::default()).unwrap_err();
        assert_eq!(e.field, field, "{policy}: {e}");
    }
}
