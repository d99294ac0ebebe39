//! A Gateway's servers: those not generated (errors, left out), their TLS as Istio reads and
//! refuses it, AUTO_PASSTHROUGH.

use super::*;

#[test]
fn gateway_servers_not_generated_are_errors_and_left_out() {
    let doc = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g, namespace: ns}\nspec:\n  selector: {istio: ingressgateway}\n  servers:\n  - port: {number: 80, name: http, protocol: HTTP}\n    hosts: ['*']\n  - port: {number: 443, name: https, protocol: HTTPS}\n    hosts: ['*']\n    tls: {mode: SIMPLE, credentialName: cert, minProtocolVersion: TLSV1_2, cipherSuites: [TLS_AES_128_GCM_SHA256, ECDHE-RSA-AES128-GCM-SHA256]}\n  - port: {number: 8080, name: http2, protocol: HTTP}\n    hosts: ['*']\n    tls: {httpsRedirect: true}\n  - port: {number: 15443, name: tls, protocol: TLS}\n    hosts: ['*']\n    tls: {mode: ISTIO_MUTUAL}\n  - port: {number: 31400, name: tcp, protocol: TCP}\n    hosts: ['*']\n  - port: {number: 31401, name: tcp-tls, protocol: TCP}\n    hosts: ['*']\n    tls: {mode: SIMPLE, credentialName: cert}\n  - port: {number: 80, name: tcp-clash, protocol: TCP}\n    hosts: ['*']\n  - port: {number: 15444, name: tls-term, protocol: TLS}\n    hosts: ['*']\n    tls: {mode: SIMPLE, credentialName: cert}\n  - port: {number: 15445, name: tls-pass, protocol: TLS}\n    hosts: ['*']\n    tls: {mode: PASSTHROUGH, caCrl: /crl.pem}\n";
    let p = parse(doc);
    let Record::Gateway(g) = &p.records[0] else {
        panic!()
    };
    assert_eq!(
        g.servers.iter().map(|s| s.port).collect::<Vec<_>>(),
        vec![80, 443, 8080, 15443, 31400, 15444],
        "HTTP, HTTPS (SIMPLE), HTTP with httpsRedirect, TLS terminating (ISTIO_MUTUAL, \
         SIMPLE) and TCP servers"
    );
    // TLS servers that terminate carry TCP (routed by `tcp[]`); HTTPS ones carry HTTP.
    let tcp: Vec<bool> = g
        .servers
        .iter()
        .filter_map(|s| s.tls.as_deref().map(|t| t.tcp))
        .collect();
    assert_eq!(tcp, vec![false, true, true]);
    let https = g.servers[1].tls.as_deref().unwrap();
    assert_eq!(https.mode, dataflows::model::ServerTlsMode::Simple);
    assert_eq!(
        https.credential,
        Some(dataflows::model::Credential::Secret("cert".into()))
    );
    assert_eq!(https.min_version, Some(3));
    assert_eq!(https.cipher_suites, vec!["ECDHE-RSA-AES128-GCM-SHA256"]);
    assert!(g.servers[2].https_redirect);
    assert_eq!(g.servers[1].field, "spec.servers[1]");
    let mut errors = fields(&p, Level::Error);
    errors.sort();
    assert_eq!(
        errors,
        vec![
            "spec.servers[5].tls",
            "spec.servers[6]",
            "spec.servers[8].tls.caCrl",
        ]
    );
    assert_eq!(
        fields(&p, Level::Warning),
        vec!["spec.servers[1].tls.cipherSuites"]
    );
}

#[test]
fn gateway_istio_mutual_terminates_with_the_workload_certificate() {
    let doc = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g, namespace: ns}\nspec:\n  selector: {istio: ingressgateway}\n  servers:\n  - port: {number: 443, name: https, protocol: HTTPS}\n    hosts: ['*']\n    tls: {mode: ISTIO_MUTUAL, subjectAltNames: [spiffe://cluster.local/ns/ns/sa/client]}\n";
    let p = parse(doc);
    let Record::Gateway(g) = &p.records[0] else {
        panic!()
    };
    let tls = g.servers[0]
        .tls
        .as_deref()
        .expect("the server is generated");
    assert_eq!(tls.mode, dataflows::model::ServerTlsMode::IstioMutual);
    assert_eq!(tls.credential, None);
    assert_eq!(
        tls.subject_alt_names,
        vec!["spiffe://cluster.local/ns/ns/sa/client"]
    );
    assert!(g.uses_istio_mutual());
    assert!(p.findings.is_empty(), "{:?}", p.findings);
}

#[test]
fn gateway_tls_rejected_where_istio_rejects_it() {
    let gw = |server: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: g, namespace: ns}}\nspec:\n  selector: {{istio: ingressgateway}}\n  servers:\n  - {server}\n")
    };
    for (server, field) in [
        ("{port: {number: 443, name: https, protocol: HTTPS}, hosts: ['*']}", "spec.servers[0].tls"),
        (
            "{port: {number: 443, name: https, protocol: HTTPS}, hosts: ['*'], tls: {mode: SIMPLE}}",
            "spec.servers[0].tls",
        ),
        (
            "{port: {number: 443, name: https, protocol: HTTPS}, hosts: ['*'], tls: {mode: MUTUAL, serverCertificate: /c, privateKey: /k}}",
            "spec.servers[0].tls.caCertificates",
        ),
        (
            "{port: {number: 443, name: https, protocol: HTTPS}, hosts: ['*'], tls: {mode: SIMPLE, credentialName: c, minProtocolVersion: TLSV9}}",
            "spec.servers[0].tls.minProtocolVersion",
        ),
        (
            "{port: {number: 443, name: https, protocol: HTTPS}, hosts: ['*'], tls: {mode: ISTIO_MUTUAL, credentialName: c}}",
            "spec.servers[0].tls.credentialName",
        ),
        (
            "{port: {number: 443, name: https, protocol: HTTPS}, hosts: ['*'], tls: {mode: ISTIO_MUTUAL, serverCertificate: /c}}",
            "spec.servers[0].tls.serverCertificate",
        ),
    ] {
        let e = parse_document(&gw(server), &MeshConfig::default()).unwrap_err();
        assert_eq!(e.field, field, "{server}: {e}");
    }
}

#[test]
fn gateway_auto_passthrough_is_read_and_namespaced_hosts_fail_closed() {
    let gw = |server: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: g, namespace: ns}}\nspec:\n  selector: {{istio: eastwestgateway}}\n  servers:\n  - {server}\n")
    };
    // Istio's cross-network gateway: read, no finding.
    let p = parse(&gw(
        "{port: {number: 15443, name: tls, protocol: TLS}, hosts: ['*.local'], tls: {mode: AUTO_PASSTHROUGH}}",
    ));
    let Record::Gateway(g) = &p.records[0] else {
        panic!()
    };
    let tls = g.servers[0].tls.as_deref().expect("generated");
    assert_eq!(tls.mode, dataflows::model::ServerTlsMode::AutoPassthrough);
    assert_eq!((tls.credential.as_ref(), tls.tcp), (None, false));
    assert!(g.uses_auto_passthrough());
    assert!(p.findings.is_empty(), "{:?}", p.findings);

    // A host restricted to a namespace is left out (an error), the others kept.
    let p = parse(&gw(
        "{port: {number: 15443, name: tls, protocol: TLS}, hosts: ['*.local', 'other/*.example'], tls: {mode: AUTO_PASSTHROUGH}}",
    ));
    let Record::Gateway(g) = &p.records[0] else {
        panic!()
    };
    assert_eq!(g.servers[0].hosts, vec!["*/*.local"]);
    assert_eq!(fields(&p, Level::Error), vec!["spec.servers[0].hosts[1]"]);

    // Only namespaced hosts, or an HTTPS server: the server is not generated.
    for (server, field) in [
        (
            "{port: {number: 15443, name: tls, protocol: TLS}, hosts: ['./*'], tls: {mode: AUTO_PASSTHROUGH}}",
            "spec.servers[0].hosts[0]",
        ),
        (
            "{port: {number: 15443, name: https, protocol: HTTPS}, hosts: ['*'], tls: {mode: AUTO_PASSTHROUGH}}",
            "spec.servers[0].tls.mode",
        ),
    ] {
        let p = parse(&gw(server));
        let Record::Gateway(g) = &p.records[0] else {
            panic!()
        };
        assert!(g.servers.is_empty(), "{server}");
        assert_eq!(fields(&p, Level::Error), vec![field], "{server}");
    }
}
