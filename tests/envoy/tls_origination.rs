//! TLS origination as Istio's egress task does it: the client's plain HTTP request to a
//! ServiceEntry host leaves its sidecar as TLS, because a DestinationRule says `SIMPLE` (or
//! `MUTUAL` with a client certificate). Real Envoy against loopback HTTPS backends (rustls)
//! that say what the handshake carried: the SNI, and whether a client certificate came. The
//! server certificate is verified: a rule naming another SAN gets no answer from the backend.

use crate::support;

use support::pki::{ca, leaf};
use support::reviews::count;
use support::tls_backend::TlsBackend;
use support::{
    converge, free_port, http_request, only, require_envoy, write_config, SidecarScene, XdsMode,
    CONVERGE_TIMEOUT,
};

#[test]
fn destination_rule_tls_originates_simple_and_mutual_tls() {
    let envoy_bin = require_envoy!();
    let server_ca = ca("backend CA");
    let client_ca = ca("client CA");
    let (cert, key) = leaf(&server_ca, &["secure.example.com"], None);
    let (client_cert, client_key) = leaf(&client_ca, &["client.default"], None);
    let tls_port = free_port();
    let simple = TlsBackend::start("127.0.49.10", tls_port, "tls-simple", &cert, &key, None);
    // Not a pod's address (`.11` is reviews-v1's): an entry's endpoint at a pod's address
    // takes the pod's identity, which a ServiceEntry's servers are then held to.
    let mutual = TlsBackend::start(
        "127.0.49.31",
        tls_port,
        "tls-mutual",
        &cert,
        &key,
        Some(&client_ca.pem),
    );

    let scene = SidecarScene::start(&envoy_bin, "envoy-tls-origination", 49, &[], |_| {});
    let pki = scene.dir.subdir("pki");
    let file = |name: &str, pem: &str| {
        let p = pki.join(name);
        std::fs::write(&p, pem).expect("write PEM");
        p.display().to_string()
    };
    let ca_file = file("ca.pem", &server_ca.pem);
    let (cert_file, key_file) = (
        file("client.pem", &client_cert),
        file("client-key.pem", &client_key),
    );
    // Two external hosts on the sidecar's port, each with one endpoint on its backend.
    let entry = |name: &str, ip: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  hosts: [{name}.example.com]\n  ports: [{{number: {port}, name: http, protocol: HTTP}}]\n  resolution: STATIC\n  location: MESH_EXTERNAL\n  endpoints: [{{address: {ip}, ports: {{http: {tls_port}}}}}]\n",
            port = scene.port
        )
    };
    write_config(
        &scene.config,
        "simple-entry.yaml",
        &entry("simple", "127.0.49.10"),
    );
    write_config(
        &scene.config,
        "mutual-entry.yaml",
        &entry("mutual", "127.0.49.31"),
    );
    let rule = |name: &str, tls: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  host: {name}.example.com\n  trafficPolicy:\n    tls: {tls}\n"
        )
    };
    let get = |host: &str| {
        let r = http_request(scene.listener(), "GET", host, "/", &[])
            .unwrap_or_else(|e| panic!("GET {host}: {e}"));
        (
            r.status,
            r.text(),
            r.header("x-echo-sni").map(str::to_string),
            r.header("x-echo-client-cert").map(str::to_string),
        )
    };
    let answers = |host: &'static str| {
        move || {
            let mut counts = std::collections::HashMap::new();
            for _ in 0..5 {
                let (status, body, ..) = get(host);
                let key = if status == 200 {
                    body
                } else {
                    format!("status {status}")
                };
                *counts.entry(key).or_insert(0usize) += 1;
            }
            counts
        }
    };

    // SIMPLE: TLS with SNI, verified against the CA and the SAN.
    write_config(
        &scene.config,
        "simple-rule.yaml",
        &rule(
            "simple",
            &format!("{{mode: SIMPLE, caCertificates: {ca_file}, sni: secure.example.com, subjectAltNames: [secure.example.com]}}"),
        ),
    );
    converge(
        "SIMPLE reaches the HTTPS backend",
        CONVERGE_TIMEOUT,
        answers("simple.example.com"),
        |c| only(c, "tls-simple"),
        || scene.envoy.summary(),
    );
    let (status, body, sni, client) = get("simple.example.com");
    assert_eq!((status, body.as_str()), (200, "tls-simple"));
    assert_eq!(sni.as_deref(), Some("secure.example.com"));
    assert_eq!(client.as_deref(), Some("no"));

    // A SAN the certificate does not carry: the handshake fails in Envoy, nothing is served.
    let served = simple.requests_served();
    write_config(
        &scene.config,
        "simple-rule.yaml",
        &rule(
            "simple",
            &format!("{{mode: SIMPLE, caCertificates: {ca_file}, sni: secure.example.com, subjectAltNames: [other.example.com]}}"),
        ),
    );
    let counts = converge(
        "a wrong SAN is refused",
        CONVERGE_TIMEOUT,
        answers("simple.example.com"),
        |c| count(c, "tls-simple") == 0,
        || scene.envoy.summary(),
    );
    assert_eq!(count(&counts, "tls-simple"), 0, "{counts:?}");
    let after = simple.requests_served();
    let counts = answers("simple.example.com")();
    assert_eq!(count(&counts, "tls-simple"), 0, "{counts:?}");
    assert_eq!(
        simple.requests_served(),
        after,
        "no request after the handshake fails"
    );
    assert!(after >= served);

    // MUTUAL: the backend requires a client certificate; SIMPLE is refused by it, MUTUAL
    // with the files is served.
    write_config(
        &scene.config,
        "mutual-rule.yaml",
        &rule(
            "mutual",
            &format!("{{mode: SIMPLE, caCertificates: {ca_file}, sni: secure.example.com}}"),
        ),
    );
    let counts = converge(
        "no client certificate, no answer",
        CONVERGE_TIMEOUT,
        answers("mutual.example.com"),
        |c| !c.is_empty() && count(c, "tls-mutual") == 0,
        || scene.envoy.summary(),
    );
    assert_eq!(count(&counts, "tls-mutual"), 0, "{counts:?}");
    write_config(
        &scene.config,
        "mutual-rule.yaml",
        &rule(
            "mutual",
            &format!("{{mode: MUTUAL, caCertificates: {ca_file}, clientCertificate: {cert_file}, privateKey: {key_file}, sni: secure.example.com}}"),
        ),
    );
    converge(
        "MUTUAL reaches the mTLS backend",
        CONVERGE_TIMEOUT,
        answers("mutual.example.com"),
        |c| only(c, "tls-mutual"),
        || scene.envoy.summary(),
    );
    let (_, _, _, client) = get("mutual.example.com");
    assert_eq!(client.as_deref(), Some("yes"));
    assert!(mutual.requests_served() > 0);
    assert_eq!(
        scene.envoy.rejected_updates(),
        0,
        "Envoy accepted every update: {:?}",
        scene.envoy.rejected_update_stats()
    );
}

/// `SIMPLE` without `caCertificates`: Envoy verifies the server against the proxy's system
/// CA bundle (`--system-ca-bundle`), takes the SNI from the request's host and holds the
/// certificate to that host (Istio's auto SNI and SAN validation). A bundle holding the
/// backend's CA reaches it; a bundle of an unrelated CA is refused in the handshake (Envoy's
/// `ssl.fail_verify_error`), and so is a certificate that does not name the host
/// (`ssl.fail_verify_san`): never plaintext, never unverified.
#[test]
fn simple_tls_without_a_ca_verifies_against_the_system_bundle() {
    let envoy_bin = require_envoy!();
    let server_ca = ca("public CA");
    let unrelated = ca("unrelated CA");
    let (cert, key) = leaf(&server_ca, &["secure.example.com"], None);
    let tls_port = free_port();
    // Two hosts on one backend whose certificate names only `secure.example.com`.
    let _backend = TlsBackend::start("127.0.58.10", tls_port, "tls-system", &cert, &key, None);
    let _backend_b = TlsBackend::start("127.0.59.10", tls_port, "tls-system", &cert, &key, None);
    for (bundle_ca, trusted, net) in [(&unrelated, false, 59u8), (&server_ca, true, 58u8)] {
        let pki = support::TestDir::new("envoy-tls-system-bundle");
        let bundle = pki.path().join("ca-certificates.crt");
        // A bundle of several CAs, as a system's is; the backend's is in it or not.
        std::fs::write(
            &bundle,
            format!("{}{}", ca("another CA").pem, bundle_ca.pem),
        )
        .expect("write bundle");
        let bundle = bundle.display().to_string();
        let backend_ip = format!("127.0.{net}.10");
        let scene = SidecarScene::start(
            &envoy_bin,
            "envoy-tls-system-bundle",
            net,
            &["--system-ca-bundle", &bundle],
            |_| {},
        );
        for (host, file) in [
            ("secure.example.com", "secure"),
            ("misnamed.example.com", "misnamed"),
        ] {
            write_config(
                &scene.config,
                &format!("{file}-entry.yaml"),
                &format!(
                    "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: {file}, namespace: default}}\nspec:\n  hosts: [{host}]\n  ports: [{{number: {port}, name: http, protocol: HTTP}}]\n  resolution: STATIC\n  location: MESH_EXTERNAL\n  endpoints: [{{address: {backend_ip}, ports: {{http: {tls_port}}}}}]\n---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: {file}, namespace: default}}\nspec:\n  host: {host}\n  trafficPolicy:\n    tls: {{mode: SIMPLE}}\n",
                    port = scene.port
                ),
            );
        }
        let get = |host: &str| {
            let r = http_request(scene.listener(), "GET", host, "/", &[])
                .unwrap_or_else(|e| panic!("GET {host}: {e}"));
            (
                r.status,
                r.text(),
                r.header("x-echo-sni").map(str::to_string),
            )
        };
        let answers = |host: &'static str| {
            move || {
                let mut counts = std::collections::HashMap::new();
                for _ in 0..5 {
                    let (status, body, _) = get(host);
                    let key = if status == 200 {
                        body
                    } else {
                        format!("status {status}")
                    };
                    *counts.entry(key).or_insert(0usize) += 1;
                }
                counts
            }
        };
        let stat = |what: &str, host: &str| {
            scene
                .envoy
                .stats(Some(&format!("ssl.{what}")))
                .into_iter()
                .filter(|(name, _)| name.contains(host) && name.ends_with(&format!("ssl.{what}")))
                .map(|(_, v)| v)
                .sum::<u64>()
        };
        if trusted {
            converge(
                "the system bundle verifies the backend",
                CONVERGE_TIMEOUT,
                answers("secure.example.com"),
                |c| only(c, "tls-system"),
                || scene.envoy.summary(),
            );
            let (status, _, sni) = get("secure.example.com");
            assert_eq!(status, 200);
            // No `sni` in the rule: the request's host.
            assert_eq!(sni.as_deref(), Some("secure.example.com"));
            // The same certificate for a host it does not name: refused by SAN validation.
            let counts = converge(
                "a certificate not naming the host is refused",
                CONVERGE_TIMEOUT,
                answers("misnamed.example.com"),
                |c| !c.is_empty() && count(c, "tls-system") == 0,
                || scene.envoy.summary(),
            );
            assert_eq!(count(&counts, "tls-system"), 0, "{counts:?}");
            assert!(
                stat("fail_verify_san", "misnamed.example.com") > 0,
                "the handshake failed on the name: {:?}",
                scene.envoy.stats(Some("ssl.fail"))
            );
        } else {
            let counts = converge(
                "an unrelated bundle refuses the backend",
                CONVERGE_TIMEOUT,
                answers("secure.example.com"),
                // Every answer a refusal: until the entry's route arrives, a request may
                // still get 404 (no virtual host yet).
                |c| {
                    !c.is_empty()
                        && c.keys().all(|k| k.starts_with("status 5"))
                        && stat("fail_verify_error", "secure.example.com") > 0
                },
                || scene.envoy.summary(),
            );
            assert_eq!(count(&counts, "tls-system"), 0, "{counts:?}");
            assert!(
                counts.keys().all(|k| k.starts_with("status 5")),
                "refused, not answered: {counts:?}"
            );
        }
        assert_eq!(
            scene.envoy.rejected_updates(),
            0,
            "Envoy accepted every update: {:?}",
            scene.envoy.rejected_update_stats()
        );
    }
}

/// Issue 34's R2: a DestinationRule naming a CA file that is not on the proxy. The files
/// come over SDS (`file-root:PATH`, as Istio names them), so Envoy refuses that one secret
/// and nothing else: the CDS update carrying the rule's cluster is accepted (no CDS or LDS
/// update rejected), the other host keeps being served, the rule's host gets no answer
/// (failing closed: never plaintext), the refusal is reported on the DestinationRule with
/// the missing path, and the file's arrival on the proxy is enough to serve the host: the
/// refused secret is offered again with backoff, as no config change would tell.
#[test]
fn a_missing_certificate_file_holds_up_its_cluster_alone() {
    let envoy_bin = require_envoy!();
    missing_file(&envoy_bin, XdsMode::Delta, 122);
}

/// The same over State-of-the-World ADS, where an SDS response carries the secrets that
/// changed: the file's secret goes in a response of its own there too.
#[test]
fn a_missing_certificate_file_holds_up_its_cluster_alone_over_sotw() {
    let envoy_bin = require_envoy!();
    missing_file(&envoy_bin, XdsMode::Sotw, 123);
}

fn missing_file(envoy_bin: &std::path::Path, mode: XdsMode, net: u8) {
    let server_ca = ca("backend CA");
    let (cert, key) = leaf(&server_ca, &["secure.example.com"], None);
    let tls_port = free_port();
    let backend_ip = format!("127.0.{net}.10");
    let _simple = TlsBackend::start(&backend_ip, tls_port, "tls-simple", &cert, &key, None);
    let debug = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let debug_arg = debug.to_string();
    let scene = SidecarScene::start_over(
        envoy_bin,
        &format!("envoy-tls-missing-file-{}", mode.label()),
        net,
        &["--debug-addr", &debug_arg],
        mode,
        |_| {},
    );
    let pki = scene.dir.subdir("pki");
    let ca_path = pki.join("late-ca.pem");
    let ca_file = ca_path.display().to_string();
    write_config(
        &scene.config,
        "simple.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: simple, namespace: default}}\nspec:\n  hosts: [simple.example.com]\n  ports: [{{number: {port}, name: http, protocol: HTTP}}]\n  resolution: STATIC\n  location: MESH_EXTERNAL\n  endpoints: [{{address: {backend_ip}, ports: {{http: {tls_port}}}}}]\n---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: simple, namespace: default}}\nspec:\n  host: simple.example.com\n  trafficPolicy:\n    tls: {{mode: SIMPLE, caCertificates: {ca_file}, sni: secure.example.com}}\n",
            port = scene.port
        ),
    );
    let outcome = |host: &str| match http_request(scene.listener(), "GET", host, "/", &[]) {
        Ok(r) if r.status == 200 => r.text(),
        Ok(r) => format!("status {}", r.status),
        Err(e) => format!("error {e}"),
    };
    // The rejection reaches meshflow's report on the rule, naming the file.
    let reported = || match support::http_get(debug, "127.0.0.1", "/debug/config_errors", &[]) {
        Ok((200, body)) => body,
        other => format!("{other:?}"),
    };
    let report = converge(
        "the missing file is reported on the DestinationRule",
        CONVERGE_TIMEOUT,
        reported,
        |r| r.contains("DestinationRule default/simple") && r.contains(&ca_file),
        || format!("{}\n{}", reported(), scene.envoy.summary()),
    );
    assert!(report.contains("file-root:"), "{report}");
    let simple = outcome("simple.example.com");
    assert!(
        simple != "tls-simple" && !simple.starts_with("status 2"),
        "{simple}"
    );
    let reviews = outcome("reviews");
    assert!(
        reviews.starts_with("reviews-v"),
        "the other host is served: {reviews}"
    );
    let whole_updates: Vec<(String, u64)> = scene
        .envoy
        .rejected_update_stats()
        .into_iter()
        .filter(|(name, _)| name.contains("cds") || name.contains("lds"))
        .collect();
    assert!(whole_updates.is_empty(), "{whole_updates:?}");

    // The file arrives on the proxy, and nothing else changes: the refused secret is
    // offered again (after 2 s, then less often), and the host is served.
    std::fs::write(&ca_path, &server_ca.pem).expect("write the CA");
    converge(
        "once the file is there, the host is served",
        CONVERGE_TIMEOUT,
        || outcome("simple.example.com"),
        |o| o == "tls-simple",
        || scene.envoy.summary(),
    );
}
