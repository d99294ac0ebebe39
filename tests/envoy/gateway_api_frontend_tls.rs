//! A Gateway's frontend client-certificate validation (`spec.tls.frontend`) through a real
//! Envoy gateway, with real TLS clients presenting certificates of two CAs, or none: the
//! default validation on one HTTPS port, a port's own on another, the insecure fallback,
//! and a default whose CA does not resolve (its HTTPS listener not served, the HTTP
//! listener beside it untouched).

use crate::gateway_api::{reviews_v1, start_gateway, tls_secret};
use crate::gateway_api_backend_tls::ca_config_map;
use crate::support;

use std::net::SocketAddr;

use support::pki::{ca, leaf, Ca};
use support::tls_client::{tls_get_path, Trust};
use support::{free_port, require_envoy, write_config, TestDir};

/// This test's loopback /24.
const NET: u8 = 194;

/// Gateway `shop`: HTTPS `https` on `ports.0` (host `a.example`), HTTPS `https-port` on
/// `ports.1` (host `b.example`), HTTP `http` on `ports.2`, all routed to reviews-v1, with
/// `frontend` as its `spec.tls.frontend` (YAML lines indented for it).
fn gateway(ports: (u16, u16, u16), frontend: &str) -> String {
    let (a, b, plain) = ports;
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: shop, namespace: default}}
spec:
  gatewayClassName: istio
  tls:
    frontend:
{frontend}  listeners:
  - {{name: https, port: {a}, protocol: HTTPS, hostname: a.example, tls: {{certificateRefs: [{{name: shop-cert}}]}}}}
  - {{name: https-port, port: {b}, protocol: HTTPS, hostname: b.example, tls: {{certificateRefs: [{{name: shop-cert}}]}}}}
  - {{name: http, port: {plain}, protocol: HTTP}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: shop, namespace: default}}
spec:
  parentRefs: [{{name: shop}}]
  rules: [{{backendRefs: [{{name: reviews-v1, port: 9080}}]}}]
"
    )
}

/// A client's certificate and key, signed by `ca`.
fn client_of(ca: &Ca) -> (String, String) {
    leaf(ca, &["client.example"], None)
}

/// Proves GatewayFrontendClientCertificateValidation,
/// GatewayFrontendClientCertificateValidationInsecureFallback and the traffic of
/// GatewayFrontendInvalidDefaultClientCertificateValidation through a real Envoy gateway:
/// - the default validation admits on the first HTTPS port only clients whose certificate
///   its CA signed (the other CA's client and a client without a certificate complete no
///   request), and the second port's own validation admits its CA's clients only;
/// - with `AllowInsecureFallback` on both, every client gets through, with either
///   certificate or none;
/// - a default validation whose ConfigMap does not exist leaves its HTTPS listener
///   unserved (no request completes on it, with any certificate) while the HTTP listener
///   answers as before.
#[test]
fn frontend_validation_admits_only_the_clients_its_cas_signed() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-api-frontend-tls");
    let config_dir = dir.subdir("config");
    let ports = (free_port(), free_port(), free_port());
    let _v1 = reviews_v1(NET, &config_dir);
    let server_ca = ca("shop CA");
    let (cert, key) = leaf(&server_ca, &["a.example", "b.example"], None);
    write_config(
        &config_dir,
        "secret.yaml",
        &tls_secret("default", "shop-cert", &cert, &key),
    );
    let (default_ca, port_ca) = (ca("clients CA"), ca("port clients CA"));
    let (default_client, port_client) = (client_of(&default_ca), client_of(&port_ca));
    write_config(
        &config_dir,
        "cas.yaml",
        &[
            ca_config_map("default-ca", &default_ca.pem),
            ca_config_map("port-ca", &port_ca.pem),
        ]
        .join("---\n"),
    );
    let validation = |name: &str, mode: &str| {
        format!("{{caCertificateRefs: [{{group: '', kind: ConfigMap, name: {name}}}]{mode}}}")
    };
    // `spec.tls.frontend`: `default` validating against one ConfigMap, and one port's own.
    let frontend = |default: &str, port: u16, own: &str| {
        format!("      default: {{validation: {default}}}\n      perPort: [{{port: {port}, tls: {{validation: {own}}}}}]\n")
    };
    let strict = frontend(
        &validation("default-ca", ""),
        ports.1,
        &validation("port-ca", ""),
    );
    write_config(&config_dir, "gateway.yaml", &gateway(ports, &strict));
    let (_meshflow, envoy) =
        start_gateway(&envoy_bin, &dir, &config_dir, "shop", "shop-abc", ports.0);
    let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    // Whether a request over TLS to `port` for `host`, presenting `client`, is answered by
    // the backend.
    let served = |port: u16, host: &str, client: Option<&(String, String)>| {
        let client = client.map(|(c, k)| (c.as_str(), k.as_str()));
        tls_get_path(
            at(port),
            host,
            "/reviews/1",
            Trust::Roots(&server_ca.pem),
            &[],
            client,
        )
        .is_ok_and(|(r, _)| r.starts_with("HTTP/1.1 200") && r.contains("reviews-v1"))
    };
    let converged = |what: &str, check: &dyn Fn() -> bool| {
        let ok = support::wait_until(support::CONVERGE_TIMEOUT, check);
        assert!(ok, "{what}\n{}", envoy.summary());
    };
    converged("the default CA's client on the first port", &|| {
        served(ports.0, "a.example", Some(&default_client))
    });
    converged("the port CA's client on the second port", &|| {
        served(ports.1, "b.example", Some(&port_client))
    });
    for _ in 0..3 {
        assert!(served(ports.0, "a.example", Some(&default_client)));
        assert!(
            !served(ports.0, "a.example", Some(&port_client)),
            "another CA's client"
        );
        assert!(!served(ports.0, "a.example", None), "no certificate");
        assert!(served(ports.1, "b.example", Some(&port_client)));
        assert!(
            !served(ports.1, "b.example", Some(&default_client)),
            "the default CA's client on the port of its own"
        );
        assert!(!served(ports.1, "b.example", None), "no certificate");
    }
    let plain = || {
        support::http_get(at(ports.2), "a.example", "/reviews/1", &[])
            .is_ok_and(|(status, body)| status == 200 && body.contains("reviews-v1"))
    };
    assert!(plain(), "the HTTP listener verifies no one");

    // AllowInsecureFallback on both: every client is let in.
    let fallback = ", mode: AllowInsecureFallback";
    let insecure = frontend(
        &validation("default-ca", fallback),
        ports.1,
        &validation("port-ca", fallback),
    );
    write_config(&config_dir, "gateway.yaml", &gateway(ports, &insecure));
    converged("no certificate, under the fallback", &|| {
        served(ports.0, "a.example", None) && served(ports.1, "b.example", None)
    });
    for (port, host) in [(ports.0, "a.example"), (ports.1, "b.example")] {
        for client in [Some(&default_client), Some(&port_client), None] {
            assert!(served(port, host, client), "port {port}, {client:?}");
        }
    }

    // A default whose ConfigMap does not exist: its HTTPS listener is not served; the port
    // of its own (here the HTTP listener's port: it verifies no one) changes nothing.
    let broken = frontend(
        &validation("does-not-exist", ""),
        ports.2,
        &validation("default-ca", ""),
    );
    write_config(&config_dir, "gateway.yaml", &gateway(ports, &broken));
    converged("the listener without a CA is not served", &|| {
        !served(ports.0, "a.example", Some(&default_client))
    });
    for client in [Some(&default_client), Some(&port_client), None] {
        assert!(!served(ports.0, "a.example", client), "{client:?}");
        assert!(
            !served(ports.1, "b.example", client),
            "{client:?}: the default governs this port too"
        );
    }
    assert!(plain(), "the HTTP listener is served as before");
    assert_eq!(envoy.rejected_updates(), 0, "{}", envoy.summary());
}
