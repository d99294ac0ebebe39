//! A Sidecar's ingress listeners (TLS, protocols, connection pools), egress and outbound
//! traffic policy with its egress proxy.

use super::*;

/// A Sidecar with a plain HTTP ingress listener and a second one, on `protocol`, with `tls`
/// (a flow mapping's inside).
fn sidecar_with_ingress_tls(protocol: &str, tls: &str) -> String {
    format!("apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: s, namespace: ns}}\nspec:\n  ingress:\n  - port: {{number: 9080, protocol: HTTP, name: http}}\n  - port: {{number: 8443, protocol: {protocol}, name: p}}\n    defaultEndpoint: 127.0.0.1:8080\n    tls: {{{tls}}}\n")
}

fn ingress(p: &Parsed) -> &[dataflows::model::IngressListener] {
    match &p.records[0] {
        Record::Sidecar(sc) => &sc.ingress,
        other => panic!("{other:?}"),
    }
}

/// A Sidecar ingress listener's `tls` is read as Istio reads it: the mode, the certificate
/// files, the protocol versions and cipher suites (TLS 1.3 names said and dropped, as for a
/// Gateway); the port's protocol is what the application receives once the proxy has
/// terminated TLS (HTTPS is HTTP, TLS is TCP); the other listener is untouched.
#[test]
fn sidecar_ingress_tls_is_read_with_the_protocol_after_termination() {
    use dataflows::model::{Credential, Protocol, ServerTlsMode};
    let p = parse(&sidecar_with_ingress_tls(
        "HTTPS",
        "mode: SIMPLE, serverCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem, minProtocolVersion: TLSV1_2, maxProtocolVersion: TLSV1_3, cipherSuites: [ECDHE-RSA-AES256-GCM-SHA384, TLS_AES_128_GCM_SHA256], httpsRedirect: false",
    ));
    assert_eq!(
        fields(&p, Level::Warning),
        vec!["spec.ingress[1].tls.cipherSuites"]
    );
    assert!(fields(&p, Level::Error).is_empty(), "{:?}", p.findings);
    let l = ingress(&p);
    assert_eq!((l[0].tls.as_ref(), l[0].fail_closed.as_ref()), (None, None));
    assert_eq!(l[1].fail_closed, None);
    assert_eq!(l[1].protocol, Protocol::Http);
    let tls = l[1].tls.as_deref().expect("the listener's tls");
    assert_eq!(tls.mode, ServerTlsMode::Simple);
    assert_eq!(
        tls.credential,
        Some(Credential::Files {
            cert: "/etc/certs/cert.pem".into(),
            key: "/etc/certs/key.pem".into(),
            ca: None
        })
    );
    assert_eq!((tls.min_version, tls.max_version), (Some(3), Some(4)));
    assert_eq!(tls.cipher_suites, vec!["ECDHE-RSA-AES256-GCM-SHA384"]);

    let p = parse(&sidecar_with_ingress_tls(
        "TLS",
        "mode: MUTUAL, serverCertificate: /c, privateKey: /k, caCertificates: /ca",
    ));
    let l = &ingress(&p)[1];
    assert_eq!(l.protocol, Protocol::Tcp);
    let tls = l.tls.as_deref().expect("the listener's tls");
    assert_eq!(tls.mode, ServerTlsMode::Mutual);
    assert!(
        matches!(&tls.credential, Some(Credential::Files { ca: Some(ca), .. }) if ca == "/ca"),
        "{tls:?}"
    );
    // An HTTP port stays HTTP; OPTIONAL_MUTUAL is read too.
    let p = parse(&sidecar_with_ingress_tls(
        "HTTP",
        "mode: OPTIONAL_MUTUAL, serverCertificate: /c, privateKey: /k, caCertificates: /ca",
    ));
    let l = &ingress(&p)[1];
    assert_eq!(l.protocol, Protocol::Http);
    assert_eq!(
        l.tls.as_deref().map(|t| t.mode),
        Some(ServerTlsMode::OptionalMutual)
    );
}

/// What Istio's validation refuses in a Sidecar ingress listener's `tls` rejects the object,
/// naming the field: `subjectAltNames`, `httpsRedirect`, `credentialName`, the modes
/// ISTIO_MUTUAL and AUTO_PASSTHROUGH, SIMPLE without its files, MUTUAL without a CA, an
/// unknown mode or version.
#[test]
fn sidecar_ingress_tls_rejected_where_istio_rejects_it() {
    for (tls, field) in [
        (
            "mode: SIMPLE, serverCertificate: /c, privateKey: /k, subjectAltNames: [a.example.com]",
            "spec.ingress[1].tls.subjectAltNames",
        ),
        (
            "mode: SIMPLE, serverCertificate: /c, privateKey: /k, httpsRedirect: true",
            "spec.ingress[1].tls.httpsRedirect",
        ),
        (
            "mode: SIMPLE, credentialName: cert",
            "spec.ingress[1].tls.credentialName",
        ),
        ("mode: ISTIO_MUTUAL", "spec.ingress[1].tls.mode"),
        ("mode: AUTO_PASSTHROUGH", "spec.ingress[1].tls.mode"),
        ("mode: SIMPLE, serverCertificate: /c", "spec.ingress[1].tls"),
        (
            "mode: MUTUAL, serverCertificate: /c, privateKey: /k",
            "spec.ingress[1].tls.caCertificates",
        ),
        ("mode: STRICT", "spec.ingress[1].tls.mode"),
        (
            "mode: SIMPLE, serverCertificate: /c, privateKey: /k, maxProtocolVersion: TLSV9",
            "spec.ingress[1].tls.maxProtocolVersion",
        ),
    ] {
        let doc = sidecar_with_ingress_tls("HTTPS", tls);
        let e = parse_document(&doc, &MeshConfig::default()).unwrap_err();
        assert_eq!(e.field, field, "{tls}: {e}");
    }
}

/// What meshflow cannot terminate as asked fails closed, an error naming the field: the
/// listener gets no `tls` and its inbound cluster no endpoints, so nothing reaches the
/// application in place of the TLS Istio requires there. A field of `tls` meshflow does not
/// read (`caCrl`, `tlsCertificates`, …); PASSTHROUGH, the default mode (Istio would
/// terminate with no certificate); a port without a protocol (Istio builds no chain for it).
#[test]
fn sidecar_ingress_tls_fails_closed_where_it_cannot_be_honoured() {
    for (protocol, tls, field) in [
        (
            "HTTPS",
            "mode: MUTUAL, serverCertificate: /c, privateKey: /k, caCertificates: /ca, caCrl: /crl",
            "spec.ingress[1].tls.caCrl",
        ),
        (
            "HTTPS",
            "mode: SIMPLE, serverCertificate: /c, privateKey: /k, tlsCertificates: [{serverCertificate: /c2, privateKey: /k2}]",
            "spec.ingress[1].tls.tlsCertificates",
        ),
        (
            "HTTPS",
            "mode: MUTUAL, serverCertificate: /c, privateKey: /k, caCertificates: /ca, verifyCertificateSpki: [abc]",
            "spec.ingress[1].tls.verifyCertificateSpki",
        ),
        (
            "HTTPS",
            "serverCertificate: /c, privateKey: /k",
            "spec.ingress[1].tls.mode",
        ),
        (
            "\"\"",
            "mode: SIMPLE, serverCertificate: /c, privateKey: /k",
            "spec.ingress[1].tls",
        ),
    ] {
        let p = parse(&sidecar_with_ingress_tls(protocol, tls));
        assert_eq!(fields(&p, Level::Error), vec![field], "{tls}");
        let l = ingress(&p);
        assert_eq!(l[0].fail_closed, None);
        assert_eq!(l[1].tls, None, "{tls}");
        let why = l[1].fail_closed.as_deref().expect("fails closed");
        assert!(why.contains("spec.ingress[1].tls"), "{why}");
    }
}

#[test]
fn sidecar_registry_only_and_ingress_are_read() {
    let doc = "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s, namespace: ns}\nspec:\n  outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n  ingress:\n  - port: {number: 9080, protocol: HTTP, name: http}\n    defaultEndpoint: 127.0.0.1:8080\n  - port: {number: 27017, protocol: MONGO, name: mongo}\n    defaultEndpoint: 127.0.0.1:27018\n    captureMode: NONE\n  egress:\n  - hosts: ['./*']\n";
    let p = parse(doc);
    let Record::Sidecar(sc) = &p.records[0] else {
        panic!()
    };
    assert_eq!(sc.registry_only, Some(true));
    assert_eq!(
        sc.ingress,
        vec![
            dataflows::model::IngressListener {
                port: 9080,
                bind: None,
                endpoint: ("127.0.0.1".into(), 8080),
                capture_none: false,
                protocol: dataflows::model::Protocol::Http,
                connection_pool: None,
                tls: None,
                fail_closed: None,
            },
            dataflows::model::IngressListener {
                port: 27017,
                bind: None,
                endpoint: ("127.0.0.1".into(), 27018),
                capture_none: true,
                protocol: dataflows::model::Protocol::Tcp,
                connection_pool: None,
                tls: None,
                fail_closed: None,
            }
        ]
    );
    assert!(p.findings.is_empty(), "{:?}", p.findings);
}

#[test]
fn sidecar_egress_proxy_is_read_and_checked_as_istio_checks_it() {
    let sc = |policy: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: s, namespace: ns}}\nspec:\n  outboundTrafficPolicy: {policy}\n")
    };
    let p = parse(&sc(
        "{mode: ALLOW_ANY, egressProxy: {host: Egress.Example.com, subset: v1, port: {number: 443}}}",
    ));
    let Record::Sidecar(s) = &p.records[0] else {
        panic!()
    };
    let proxy = s.egress_proxy.as_ref().expect("the egress proxy");
    assert_eq!(proxy.cluster(), "outbound|443|v1|egress.example.com");
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    for (policy, field) in [
        (
            "{mode: REGISTRY_ONLY, egressProxy: {host: egress.example.com, port: {number: 443}}}",
            "spec.outboundTrafficPolicy.egressProxy",
        ),
        (
            "{egressProxy: {host: egress.example.com, port: {number: 443}}}",
            "spec.outboundTrafficPolicy.egressProxy",
        ),
        (
            "{mode: ALLOW_ANY, egressProxy: {host: egress, port: {number: 443}}}",
            "spec.outboundTrafficPolicy.egressProxy.host",
        ),
        (
            "{mode: ALLOW_ANY, egressProxy: {host: '*.example.com', port: {number: 443}}}",
            "spec.outboundTrafficPolicy.egressProxy.host",
        ),
        (
            "{mode: ALLOW_ANY, egressProxy: {host: egress.example.com}}",
            "spec.outboundTrafficPolicy.egressProxy.port",
        ),
        (
            "{mode: ALLOW_ANY, egressProxy: {host: egress.example.com, port: {number: 70000}}}",
            "spec.outboundTrafficPolicy.egressProxy.port.number",
        ),
    ] {
        let e = parse_document(&sc(policy), &MeshConfig::default()).unwrap_err();
        assert_eq!(e.field, field, "{policy}: {e}");
    }
    // A host the Sidecar's egress imports: nothing said; one it cannot: said (its cluster
    // is never generated, so that traffic fails).
    let with_egress = |hosts: &str| {
        format!(
            "{}  egress:\n  - hosts: {hosts}\n",
            sc("{mode: ALLOW_ANY, egressProxy: {host: egress.example.com, port: {number: 443}}}")
        )
    };
    for hosts in [
        "['./*']",
        "['istio-system/egress.example.com']",
        "['*/*.example.com']",
    ] {
        let p = parse(&with_egress(hosts));
        assert!(p.findings.is_empty(), "{hosts}: {:?}", p.findings);
    }
    let p = parse(&with_egress(
        "['./*.internal', 'istio-system/other.example.com']",
    ));
    assert_eq!(
        fields(&p, Level::Warning),
        vec!["spec.outboundTrafficPolicy.egressProxy.host"]
    );
}

/// A Sidecar `ingress` port naming no protocol is told per connection; a named one keeps it.
#[test]
fn sidecar_ingress_ports_without_a_protocol_are_detected() {
    let p = parse("apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s, namespace: ns}\nspec:\n  ingress:\n  - port: {number: 9080, name: web}\n  - port: {number: 9081, protocol: TCP, name: tcp}\n");
    let Record::Sidecar(sc) = &p.records[0] else {
        panic!("{:?}", p.records)
    };
    let protocols: Vec<_> = sc.ingress.iter().map(|l| (l.port, l.protocol)).collect();
    use dataflows::model::Protocol::*;
    assert_eq!(protocols, vec![(9080, Auto), (9081, Tcp)]);
}

/// A Sidecar's `ingress[].connectionPool` and `inboundConnectionPool` are read (with
/// `tcp.connectTimeout`) and checked as Istio checks them: a pool needs tcp or http
/// settings; HTTP settings on a port that is not HTTP are said not to apply.
#[test]
fn sidecar_inbound_connection_pools_are_read() {
    let doc = |pool: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: s, namespace: ns}}\nspec:\n  ingress:\n  - port: {{number: 9080, protocol: HTTP, name: http}}\n    defaultEndpoint: 127.0.0.1:8080\n    connectionPool: {{tcp: {{connectTimeout: 2s}}, http: {{http1MaxPendingRequests: 3}}}}\n  - port: {{number: 27017, protocol: TCP, name: tcp}}\n    connectionPool: {{tcp: {{maxConnections: 4}}, http: {{maxRetries: 1}}}}\n  inboundConnectionPool: {pool}\n")
    };
    let p = parse(&doc("{http: {http2MaxRequests: 5}}"));
    let Record::Sidecar(sc) = &p.records[0] else {
        panic!()
    };
    let pool = sc.ingress[0].connection_pool.as_ref().expect("a pool");
    assert_eq!(pool.connect_timeout_ms, Some(2_000));
    assert_eq!(
        pool.pool.as_ref().and_then(|p| p.max_pending_requests),
        Some(3)
    );
    let tcp = sc.ingress[1].connection_pool.as_ref().expect("a pool");
    assert_eq!(tcp.pool.as_ref().and_then(|p| p.max_connections), Some(4));
    let all = sc.inbound_connection_pool.as_ref().expect("a pool");
    assert_eq!(all.pool.as_ref().and_then(|p| p.max_requests), Some(5));
    let fields: Vec<&str> = p.findings.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(
        fields,
        vec!["spec.ingress[1].connectionPool.http"],
        "{:?}",
        p.findings
    );
    let e = parse_document(&doc("{}"), &MeshConfig::default()).unwrap_err();
    assert_eq!(e.field, "spec.inboundConnectionPool");
}
