//! BackendTLSPolicy through a real Envoy gateway: a Gateway API route to a Service whose
//! endpoint speaks only TLS (a loopback rustls server that says which SNI it was sent).
//! The policy makes the gateway originate TLS with the policy's hostname as SNI, verifying
//! the server against the CA of a ConfigMap and the policy's names; a policy whose names
//! the certificate does not carry, or whose CA is missing, empty or another one, makes
//! requests fail — never plaintext, never unverified (the conformance cases
//! BackendTLSPolicy, BackendTLSPolicySANValidation, BackendTLSPolicyInvalidCACertificateRef,
//! BackendTLSPolicyInvalidKind, BackendTLSPolicyConflictResolution and
//! BackendTLSPolicyTLSRouteTerminate, by traffic).

use crate::gateway_api::{edge_gateway_of, edge_route, start_gateway, tls_secret};
use crate::support;

use std::net::SocketAddr;

use support::kube_yaml::HandService;
use support::pki::{ca, leaf};
use support::tls_backend::TlsBackend;
use support::tls_client::{tls_get_path, Trust};
use support::{free_port, require_envoy, write_config, TestDir};

/// This test's loopback /24.
const NET: u8 = 187;

/// A ConfigMap `name` of `default` whose `ca.crt` is `pem` (indented as a block scalar).
pub(crate) fn ca_config_map(name: &str, pem: &str) -> String {
    let body: String = pem.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: default}}\ndata:\n  ca.crt: |\n{body}"
    )
}

/// BackendTLSPolicy `name` on Service `secure` (`section`: one port's name), verifying
/// with `validation` (YAML flow-mapping fields).
fn policy(name: &str, section: Option<&str>, validation: &str) -> String {
    policy_on("secure", name, section, validation)
}

/// BackendTLSPolicy `name` on Service `service`, as [`policy`].
fn policy_on(service: &str, name: &str, section: Option<&str>, validation: &str) -> String {
    let section = section
        .map(|s| format!(", sectionName: {s}"))
        .unwrap_or_default();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: BackendTLSPolicy\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  targetRefs: [{{group: '', kind: Service, name: {service}{section}}}]\n  validation: {{{validation}}}\n"
    )
}

#[test]
fn backend_tls_policies_originate_verified_tls_through_a_real_gateway() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-backend-tls");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let backend_ca = ca("backend CA");
    let other_ca = ca("another CA");
    let (cert, key) = leaf(
        &backend_ca,
        &["abc.example.com"],
        Some("spiffe://example/backend"),
    );
    let tls_port = free_port();
    let ip = format!("127.0.{NET}.10");
    let backend = TlsBackend::start(&ip, tls_port, "tls-backend", &cert, &key, None);
    let service = HandService {
        port_name: "http",
        ..HandService::web("secure", 443, tls_port)
    };
    write_config(&config_dir, "service.yaml", &service.with_endpoints(&[&ip]));
    // Gateway `edge`: an HTTP listener, and an HTTPS one terminating with its own
    // certificate, which the HTTPRoute attaches to; a TLS listener terminating with it too,
    // whose TLSRoute passes the decrypted stream on to the same Service.
    let https_port = free_port();
    let tls_listener_port = free_port();
    let gateway_ca = ca("gateway CA");
    let (gw_cert, gw_key) = leaf(&gateway_ca, &["secure.example"], None);
    write_config(
        &config_dir,
        "gateway-cert.yaml",
        &tls_secret("default", "gw-cert", &gw_cert, &gw_key),
    );
    write_config(
        &config_dir,
        "gateway.yaml",
        &edge_gateway_of(
            &format!(
                "  - {{name: http, port: {port}, protocol: HTTP}}
  - {{name: https, port: {https_port}, protocol: HTTPS, hostname: secure.example, tls: {{certificateRefs: [{{name: gw-cert}}]}}}}
  - {{name: tls, port: {tls_listener_port}, protocol: TLS, hostname: secure.example, tls: {{mode: Terminate, certificateRefs: [{{name: gw-cert}}]}}}}
"
            ),
            &format!(
                "{}---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: secure-tls, namespace: default}}
spec:
  parentRefs: [{{name: edge, sectionName: tls}}]
  hostnames: [secure.example]
  rules: [{{backendRefs: [{{name: secure, port: 443}}]}}]
",
                edge_route("secure", "  - backendRefs: [{name: secure, port: 443}]\n")
            ),
        ),
    );
    write_config(
        &config_dir,
        "ca.yaml",
        &ca_config_map("backend-ca", &backend_ca.pem),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let get = || support::http_request(addr, "GET", "secure.example", "/", &[]);
    // Until the policy applies, the gateway speaks plaintext to a TLS server: no answer
    // from it (the route is served: not 404).
    let routed = support::wait_until(support::CONVERGE_TIMEOUT, || {
        get().is_ok_and(|r| r.status != 404)
    });
    assert!(routed, "the route is not served\n{}", envoy.summary());
    assert_eq!(backend.requests_served(), 0, "plaintext is no TLS request");

    // The policy: SNI abc.example.com, verified against the ConfigMap's CA and that name.
    let refs = "caCertificateRefs: [{group: '', kind: ConfigMap, name: backend-ca}]";
    let answered = |want: u16| move || get().is_ok_and(|r| r.status == want);
    let expect = |what: &str, ok: bool| {
        let want = if ok { 200 } else { 503 };
        let done = support::wait_until(support::CONVERGE_TIMEOUT, answered(want));
        assert!(done, "{what}: not {want}\n{}", envoy.summary());
    };
    // The one policy `secure-tls` on the whole Service, verifying with `validation`.
    let set_policy = |validation: &str| {
        write_config(
            &config_dir,
            "policy.yaml",
            &policy("secure-tls", None, validation),
        )
    };
    set_policy(&format!("{refs}, hostname: abc.example.com"));
    expect("the policy in effect", true);
    let r = get().expect("a request");
    assert_eq!(r.text(), "tls-backend");
    assert_eq!(r.header("x-echo-sni"), Some("abc.example.com"));
    // Through the HTTPS listener too: TLS terminated at the gateway, originated again; and
    // through the terminating TLS listener and its TLSRoute, whose decrypted stream is
    // encrypted again under the policy (BackendTLSPolicyTLSRouteTerminate).
    for (what, listener) in [("HTTPS", https_port), ("a TLSRoute", tls_listener_port)] {
        let addr = SocketAddr::from(([127, 0, 0, 1], listener));
        let mut last = Err("not tried".to_string());
        let reached = support::wait_until(support::CONVERGE_TIMEOUT, || {
            last = tls_get_path(
                addr,
                "secure.example",
                "/",
                Trust::Roots(&gateway_ca.pem),
                &[],
                None,
            );
            last.as_ref().is_ok_and(|(r, _)| r.contains("tls-backend"))
        });
        assert!(reached, "{what}: {last:?}\n{}", envoy.summary());
        let (response, _) = last.expect("a response");
        assert!(
            response.contains("x-echo-sni: abc.example.com"),
            "{what}: {response}"
        );
    }

    // A hostname the certificate does not name: the handshake is refused, nothing served.
    set_policy(&format!("{refs}, hostname: other.example.com"));
    expect("a hostname the certificate lacks", false);
    let served = backend.requests_served();
    assert!(get().is_ok_and(|r| r.status == 503));
    assert_eq!(
        backend.requests_served(),
        served,
        "no request after a refused handshake"
    );

    // subjectAltNames replace the hostname for verification (the SNI stays the hostname):
    // a URI the certificate carries is enough; a DNS name it lacks is not.
    set_policy(&format!(
                "{refs}, hostname: other.example.com, subjectAltNames: [{{type: URI, uri: 'spiffe://example/backend'}}]"
            ));
    expect("a SAN the certificate carries", true);
    assert_eq!(
        get().expect("a request").header("x-echo-sni"),
        Some("other.example.com")
    );
    set_policy(&format!(
                "{refs}, hostname: abc.example.com, subjectAltNames: [{{type: Hostname, hostname: dce.example.com}}]"
            ));
    expect(
        "a SAN the certificate lacks, though the hostname matches",
        false,
    );
    // Several names: one the certificate carries is enough.
    set_policy(&format!(
                "{refs}, hostname: abc.example.com, subjectAltNames: [{{type: Hostname, hostname: dce.example.com}}, {{type: URI, uri: 'spiffe://example/backend'}}]"
            ));
    expect("one of several SANs the certificate carries", true);

    // The CA: missing, empty, another one — each fails closed; restored, served again
    // (restored between them, so that each failure is one this change made).
    set_policy(&format!("{refs}, hostname: abc.example.com"));
    expect("restored", true);
    let good_ca = ca_config_map("backend-ca", &backend_ca.pem);
    std::fs::remove_file(config_dir.join("ca.yaml")).expect("remove the ConfigMap");
    expect("the ConfigMap deleted", false);
    for (what, bad) in [
        (
            "a ConfigMap without ca.crt",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: backend-ca, namespace: default}\ndata: {}\n".to_string(),
        ),
        ("another CA", ca_config_map("backend-ca", &other_ca.pem)),
    ] {
        write_config(&config_dir, "ca.yaml", &good_ca);
        expect("the CA restored", true);
        write_config(&config_dir, "ca.yaml", &bad);
        expect(what, false);
    }
    write_config(&config_dir, "ca.yaml", &good_ca);
    expect("the CA restored", true);
    // A CA reference of a kind meshflow does not read (the spec's InvalidKind).
    set_policy("caCertificateRefs: [{group: invalid.io, kind: InvalidKind, name: backend-ca}], hostname: abc.example.com");
    expect("a CA reference of an invalid kind", false);

    // Two policies on the whole Service: the older (by name, in files) applies; a policy on
    // the port itself goes before both.
    write_config(
        &config_dir,
        "policy.yaml",
        &[
            policy(
                "a-first",
                None,
                &format!("{refs}, hostname: abc.example.com"),
            ),
            policy(
                "b-second",
                None,
                &format!("{refs}, hostname: other.example.com"),
            ),
        ]
        .join("---\n"),
    );
    expect("the older policy applies", true);
    write_config(
        &config_dir,
        "policy.yaml",
        &[
            policy("a-first", None, &format!("{refs}, hostname: other.example.com")),
            policy(
                "b-section",
                Some("http"),
                &format!(
                    "{refs}, hostname: sectioned.example.com, subjectAltNames: [{{type: Hostname, hostname: abc.example.com}}]"
                ),
            ),
        ]
        .join("---\n"),
    );
    // Served either way: the SNI the backend saw tells which policy applies.
    let sectioned = support::wait_until(support::CONVERGE_TIMEOUT, || {
        get().is_ok_and(|r| {
            r.status == 200 && r.header("x-echo-sni") == Some("sectioned.example.com")
        })
    });
    assert!(sectioned, "the port's policy applies\n{}", envoy.summary());
    assert_eq!(
        envoy.rejected_updates(),
        0,
        "Envoy accepted every update: {:?}",
        envoy.rejected_update_stats()
    );
}

/// Proves BackendTLSPolicyGRPCRoute with real gRPC calls through a real Envoy gateway: a
/// GRPCRoute to a Service whose endpoint is a gRPC server speaking only TLS (ALPN `h2`).
/// Without a policy no call succeeds (the gateway's plaintext HTTP/2 is no TLS); with one
/// naming the server's name and CA, calls are encrypted again and answered by it; with a
/// name the certificate does not carry, or another CA, every call fails — never plaintext,
/// never unverified.
#[test]
fn a_backend_tls_policy_re_encrypts_grpc_calls_through_a_real_gateway() {
    use support::grpc_echo::{GrpcEcho, GrpcEchoClient};
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-backend-tls-grpc");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let backend_ca = ca("backend CA");
    let other_ca = ca("another CA");
    let (cert, key) = leaf(&backend_ca, &["grpc.example.com"], None);
    let tls_port = free_port();
    let ip = format!("127.0.{NET}.20");
    let echo = GrpcEcho::start_tls(&ip, tls_port, "grpc-tls", (&cert, &key));
    let service = HandService {
        port_name: "grpc",
        ..HandService::web("secure-grpc", 443, tls_port)
    };
    write_config(&config_dir, "service.yaml", &service.with_endpoints(&[&ip]));
    write_config(
        &config_dir,
        "gateway.yaml",
        &edge_gateway_of(
            &format!("  - {{name: http, port: {port}, protocol: HTTP}}\n"),
            "---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: secure-grpc, namespace: default}
spec:
  parentRefs: [{name: edge}]
  hostnames: [grpc.example]
  rules: [{backendRefs: [{name: secure-grpc, port: 443}]}]
",
        ),
    );
    let (_meshflow, envoy) = start_gateway(&envoy_bin, &dir, &config_dir, "edge", "edge-abc", port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut client = GrpcEchoClient::connect(addr, "grpc.example")
        .unwrap_or_else(|e| panic!("{e}\n{}", envoy.summary()));
    let mut call = || {
        let r = client
            .call(&[])
            .unwrap_or_else(|e| panic!("{e}\n{}", envoy.summary()));
        (r.code, r.backend)
    };
    // Until a policy applies, the route is served (not UNIMPLEMENTED, Envoy's 404) and no
    // call reaches the TLS server.
    let mut last = None;
    let routed = support::wait_until(support::CONVERGE_TIMEOUT, || {
        let r = call();
        let done = r.0 != 0 && r.0 != 12;
        last = Some(r);
        done
    });
    assert!(
        routed,
        "the route is not served: {last:?}\n{}",
        envoy.summary()
    );
    assert_eq!(echo.calls(), 0, "plaintext is no call");

    let refs = "caCertificateRefs: [{group: '', kind: ConfigMap, name: grpc-ca}]";
    let set = |ca_pem: &str, hostname: &str| {
        write_config(&config_dir, "ca.yaml", &ca_config_map("grpc-ca", ca_pem));
        write_config(
            &config_dir,
            "policy.yaml",
            &policy_on(
                "secure-grpc",
                "secure-grpc-tls",
                None,
                &format!("{refs}, hostname: {hostname}"),
            ),
        );
    };
    let answered = (0, Some("grpc-tls".to_owned()));
    set(&backend_ca.pem, "grpc.example.com");
    let mut last = None;
    let ok = support::wait_until(support::CONVERGE_TIMEOUT, || {
        let r = call();
        let done = r == answered;
        last = Some(r);
        done
    });
    assert!(ok, "the policy in effect: {last:?}\n{}", envoy.summary());
    for _ in 0..5 {
        assert_eq!(call(), answered);
    }
    for (what, ca_pem, hostname) in [
        (
            "a name the certificate does not carry",
            &backend_ca.pem,
            "wrong.example.com",
        ),
        ("another CA", &other_ca.pem, "grpc.example.com"),
    ] {
        set(ca_pem, hostname);
        let before = echo.calls();
        let refused = support::wait_until(support::CONVERGE_TIMEOUT, || call().0 == 14);
        assert!(refused, "{what}: calls still answered\n{}", envoy.summary());
        for _ in 0..5 {
            assert_eq!(call().0, 14, "{what}: UNAVAILABLE");
        }
        // Calls made while the change converged may have been answered; none after.
        let settled = echo.calls();
        assert!(settled >= before, "{what}");
        for _ in 0..3 {
            assert_eq!(call().0, 14, "{what}");
        }
        assert_eq!(echo.calls(), settled, "{what}: no call reached the server");
        set(&backend_ca.pem, "grpc.example.com");
        let back = support::wait_until(support::CONVERGE_TIMEOUT, || call() == answered);
        assert!(back, "{what}: the valid policy again\n{}", envoy.summary());
    }
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}
