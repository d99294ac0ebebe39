//! Istio's ingress and egress task pages through real Envoy: the Istio objects of the task
//! fixtures (`tests/fixtures/tasks/ingress-*.yaml`, `egress-tls-origination.yaml`) are loaded
//! as the files hold them, and only the registry is written at test time, so that every
//! target is a loopback test backend: the Services' endpoints (EndpointSlices and pods at
//! `127.0.<net>.x` on free ports), the gateway's pod at the router's address, and for the
//! egress task the ServiceEntry's endpoint address (the task's entry resolves the public
//! host by DNS; here it resolves a loopback address instead, on the entry's own ports).
//!
//! - Ingress Gateways: `httpbin.example.com/status/*` through the gateway's port 80 reaches the
//!   httpbin backend, `/headers` is answered 404. The gateway pod has the Service Istio installs
//!   for it, whose ports 80 and 443 target other ports of the pod (8080 and 8443 in Istio's
//!   installation, free ports here): the gateway listens there, as Istio's does.
//! - Secure Gateways: port 443 terminates TLS with Secret `httpbin-credential`'s certificate
//!   (the client compares the certificate it is served with the Secret's) and routes the
//!   request inside; in the mutual TLS step only a client presenting a certificate of the
//!   Secret's `ca.crt` is served.
//! - Ingress Gateway without TLS Termination: TLS naming nginx.example.com reaches the my-nginx
//!   backend, which presents its own certificate to the client.
//! - Egress TLS Origination: plain HTTP from the application to edition.cnn.com:80 reaches a
//!   loopback TLS backend on the entry's target port 443 over TLS, its handshake naming
//!   edition.cnn.com, the certificate verified against the proxy's CA bundle; HTTPS from the
//!   application on port 443 passes through.
//!
//! The egress task listens on ports 80 and 443 as it writes them (the sidecar on its pod's
//! address, the backend on the entry's target port), which only root may bind. Without that
//! right that test skips loudly, and fails under `CI=true`, as for a missing Envoy; it holds a
//! file lock while it runs, so no other run shares those ports.

use crate::support;

use std::fs::File;
use std::net::{SocketAddr, TcpListener};

use support::pki::{ca, der_of, leaf};
use support::tasks::write_ingress_gateway_service;
use support::tls_backend::TlsBackend;
use support::tls_client::{tls_get_path, tls_get_trusting, Trust};
use support::{
    converge, free_port, http_request, require_envoy, write_config, Backend, Envoy, Meshflow,
    ProxyNode, TestDir, CONVERGE_TIMEOUT,
};

const TASKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tasks");

/// `127.0.<net>.<host>`.
fn loopback(net: u8, host: u8) -> String {
    format!("127.0.{net}.{host}")
}

/// The documents of task fixture `task` that are Istio's (`networking.istio.io`) or a Secret,
/// as the file holds them; the registry objects it carries for the routing simulation (Services,
/// pods, EndpointSlices at its own addresses) are left out.
fn task_objects(task: &str) -> String {
    let text = std::fs::read_to_string(format!("{TASKS}/{task}.yaml")).expect("the task");
    meshflow::config::split_documents(&text)
        .into_iter()
        .map(|(_, doc)| doc)
        .filter(|doc| {
            let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(doc).expect("YAML");
            let api = v["apiVersion"].as_str().unwrap_or_default();
            api.starts_with("networking.istio.io/") || v["kind"] == "Secret"
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// Holds the lock of the privileged ports (80, 443) these tests listen on, or `None` (after a
/// loud notice; a failure under `CI=true`) when this process may not bind them.
fn privileged_ports() -> Option<File> {
    let lock = File::create(std::env::temp_dir().join("meshflow-envoy-tasks-edge.lock"))
        .expect("the lock file");
    lock.lock().expect("lock");
    for port in [80, 443] {
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                let message = format!(
                    "binding port {port} needs root (or CAP_NET_BIND_SERVICE): {e}; the task \
                     pages listen on 80 and 443"
                );
                let on_ci =
                    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
                assert!(!on_ci, "{message} (CI is set, so this fails the test)");
                let bar = "!".repeat(78);
                eprintln!("\n{bar}\nSKIPPED: {message}\n{bar}\n");
                return None;
            }
            Err(e) => panic!("port {port} is taken by another process: {e}"),
        }
    }
    Some(lock)
}

/// `GET path` with `Host: sni` over TLS to `addr` (SNI `sni`), accepting any server
/// certificate, presenting `client` (certificate and key PEM) if given: the answer and the
/// certificate the server presented (DER), or why it failed.
fn tls_request(
    addr: SocketAddr,
    sni: &str,
    path: &str,
    client: Option<(&str, &str)>,
) -> Result<(String, Vec<u8>), String> {
    tls_get_path(addr, sni, path, Trust::Any, &[], client)
}

/// The `stringData` entry `key` of Secret `name` in task fixture `task`.
fn secret_entry(task: &str, name: &str, key: &str) -> String {
    let text = std::fs::read_to_string(format!("{TASKS}/{task}.yaml")).expect("the task");
    meshflow::config::split_documents(&text)
        .into_iter()
        .map(|(_, d)| serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&d).expect("YAML"))
        .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == name)
        .and_then(|d| d["stringData"][key].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("{task}: no {key} in Secret {name}"))
}

/// The registry of the ingress tasks at test time: the gateway's pod at the router's address,
/// httpbin (Service port 8000) and my-nginx (Service port 443) with one pod each, whose
/// endpoints are the loopback backends' ports.
fn ingress_registry(net: u8, httpbin_port: u16, nginx_port: u16) -> String {
    let ip = |host| loopback(net, host);
    format!(
        "\
apiVersion: v1
kind: Pod
metadata:
  name: istio-ingressgateway-abc
  namespace: istio-system
  labels: {{app: istio-ingressgateway, istio: ingressgateway}}
status: {{podIP: {gw}}}
---
apiVersion: v1
kind: Service
metadata: {{name: httpbin, namespace: default}}
spec:
  selector: {{app: httpbin}}
  ports: [{{name: http, port: 8000, targetPort: {httpbin_port}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: httpbin-v1, namespace: default, labels: {{app: httpbin, version: v1}}}}
status: {{podIP: {httpbin}}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: httpbin-1, namespace: default, labels: {{kubernetes.io/service-name: httpbin}}}}
addressType: IPv4
ports: [{{name: http, port: {httpbin_port}, protocol: TCP}}]
endpoints:
- addresses: [{httpbin}]
  conditions: {{ready: true}}
  targetRef: {{kind: Pod, name: httpbin-v1, namespace: default}}
---
apiVersion: v1
kind: Service
metadata: {{name: my-nginx, namespace: default}}
spec:
  selector: {{run: my-nginx}}
  ports: [{{port: 443, targetPort: {nginx_port}, protocol: TCP}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: my-nginx-1, namespace: default, labels: {{run: my-nginx}}}}
status: {{podIP: {nginx}}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: my-nginx-1, namespace: default, labels: {{kubernetes.io/service-name: my-nginx}}}}
addressType: IPv4
ports: [{{port: {nginx_port}, protocol: TCP}}]
endpoints:
- addresses: [{nginx}]
  conditions: {{ready: true}}
  targetRef: {{kind: Pod, name: my-nginx-1, namespace: default}}
",
        gw = ip(2),
        httpbin = ip(10),
        nginx = ip(30),
    )
}

/// The ingress tasks one after the other on one gateway Envoy (Delta ADS), each
/// fixture's Istio objects replacing the previous one's (two of them name their Gateway
/// `mygateway`), with no update rejected.
#[test]
fn ingress_task_pages_route_terminate_and_pass_through() {
    let envoy_bin = require_envoy!();
    let net = 201;
    let ip = |host| loopback(net, host);
    let dir = TestDir::new("envoy-tasks-ingress");
    let config = dir.subdir("config");
    let (httpbin_port, nginx_port) = (free_port(), free_port());
    let _httpbin = Backend::start(&ip(10), httpbin_port, "httpbin");
    let nginx_ca = ca("nginx CA");
    let (nginx_cert, nginx_key) = leaf(&nginx_ca, &["nginx.example.com"], None);
    let nginx = TlsBackend::start(
        &ip(30),
        nginx_port,
        "my-nginx",
        &nginx_cert,
        &nginx_key,
        None,
    );
    write_config(
        &config,
        "registry.yaml",
        &ingress_registry(net, httpbin_port, nginx_port),
    );
    // Istio's gateway Service: ports 80 and 443 of the load balancer reach the pod on their
    // target ports, where the gateway's servers of 80 and 443 listen (free ports here, 8080
    // and 8443 in Istio's installation).
    let (http_port, https_port) = (free_port(), free_port());
    write_ingress_gateway_service(
        &config,
        "istio-system",
        &ip(2),
        &[("http2", 80, http_port), ("https", 443, https_port)],
    );
    write_config(&config, "task.yaml", &task_objects("ingress-http"));
    let meshflow = Meshflow::start(&config, dir.path());
    let node = ProxyNode::router(
        "istio-ingressgateway-abc",
        "istio-system",
        &ip(2),
        &[("app", "istio-ingressgateway"), ("istio", "ingressgateway")],
    );
    let router = Envoy::start_live(&envoy_bin, dir.path(), &node, meshflow.xds_addr());
    let ingress = |port: u16| SocketAddr::new(ip(2).parse().expect("IP"), port);

    // Ingress Gateways: /status and /delay of httpbin.example.com reach httpbin; /headers
    // does not.
    let get = |path: &str| {
        http_request(ingress(http_port), "GET", "httpbin.example.com", path, &[])
            .map(|r| (r.status, r.text()))
    };
    let routed = converge(
        "httpbin.example.com/status/200 through the gateway Service's port 80",
        CONVERGE_TIMEOUT,
        || get("/status/200"),
        |r| r.as_ref().is_ok_and(|(s, b)| *s == 200 && b == "httpbin"),
        || router.summary(),
    );
    assert_eq!(routed, Ok((200, "httpbin".to_string())));
    assert_eq!(
        get("/delay/1").map(|(s, b)| (s, b == "httpbin")),
        Ok((200, true))
    );
    assert_eq!(get("/headers").map(|(s, _)| s), Ok(404));
    let other = http_request(
        ingress(http_port),
        "GET",
        "other.example.com",
        "/status/200",
        &[],
    );
    assert_eq!(other.map(|r| r.status), Ok(404));

    // Secure Gateways: the Secret's certificate, checked by the client, then the same routes.
    write_config(&config, "task.yaml", &task_objects("ingress-https"));
    let secret_cert = der_of(&secret_entry(
        "ingress-https",
        "httpbin-credential",
        "tls.crt",
    ));
    let https =
        |path: &str, client| tls_request(ingress(https_port), "httpbin.example.com", path, client);
    let (answer, peer) = converge(
        "HTTPS for httpbin.example.com on the gateway Service's port 443",
        CONVERGE_TIMEOUT,
        || https("/status/200", None),
        |r| r.as_ref().is_ok_and(|(a, _)| a.starts_with("HTTP/1.1 200")),
        || router.summary(),
    )
    .expect("an answer");
    assert_eq!(peer, secret_cert, "the Secret's certificate is presented");
    assert!(answer.ends_with("httpbin"), "{answer}");
    let (answer, _) = https("/headers", None).expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    let unknown = tls_request(
        ingress(https_port),
        "other.example.com",
        "/status/200",
        None,
    );
    assert!(
        unknown.is_err(),
        "another name finds no filter chain: {unknown:?}"
    );
    let plain = http_request(
        ingress(https_port),
        "GET",
        "httpbin.example.com",
        "/status/200",
        &[],
    );
    assert!(
        plain.as_ref().map_or(true, |r| r.status != 200),
        "{:?}",
        plain.map(|r| r.status)
    );

    // Its mutual TLS step: only a client presenting a certificate of the Secret's CA is served.
    write_config(&config, "task.yaml", &task_objects("ingress-https-mutual"));
    let client_cert = secret_entry("ingress-https-mutual", "client-credential", "tls.crt");
    let client_key = secret_entry("ingress-https-mutual", "client-credential", "tls.key");
    let client = Some((client_cert.as_str(), client_key.as_str()));
    // `converge` holds the condition: no 200 for a client without a certificate.
    let _ = converge(
        "without a client certificate, no answer",
        CONVERGE_TIMEOUT,
        || https("/status/200", None),
        |r| {
            r.as_ref()
                .map_or(true, |(a, _)| !a.starts_with("HTTP/1.1 200"))
        },
        || router.summary(),
    );
    let (answer, peer) = converge(
        "with the client's certificate, httpbin",
        CONVERGE_TIMEOUT,
        || https("/status/200", client),
        |r| r.as_ref().is_ok_and(|(a, _)| a.starts_with("HTTP/1.1 200")),
        || router.summary(),
    )
    .expect("an answer");
    assert!(answer.ends_with("httpbin"), "{answer}");
    assert_eq!(peer, secret_cert);
    let stranger_ca = ca("stranger CA");
    let (stranger_cert, stranger_key) = leaf(&stranger_ca, &["client.example.com"], None);
    let stranger = https("/status/200", Some((&stranger_cert, &stranger_key)));
    assert!(
        stranger
            .as_ref()
            .map_or(true, |(a, _)| !a.starts_with("HTTP/1.1 200")),
        "a certificate of another CA is refused: {stranger:?}"
    );

    // Without TLS termination: nginx.example.com's TLS reaches my-nginx, whose own certificate
    // the client verifies.
    write_config(
        &config,
        "task.yaml",
        &task_objects("ingress-tls-passthrough"),
    );
    let nginx_get = || {
        tls_get_trusting(
            ingress(https_port),
            "nginx.example.com",
            Trust::Roots(&nginx_ca.pem),
            &[],
            None,
        )
    };
    let (answer, peer) = converge(
        "TLS for nginx.example.com passed through",
        CONVERGE_TIMEOUT,
        nginx_get,
        |r| r.as_ref().is_ok_and(|(a, _)| a.ends_with("my-nginx")),
        || router.summary(),
    )
    .expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(peer, der_of(&nginx_cert), "the backend's own certificate");
    assert!(nginx.requests_served() > 0);
    let httpbin = https("/status/200", client);
    assert!(
        httpbin.is_err(),
        "httpbin.example.com is no longer served: {httpbin:?}"
    );

    assert_eq!(
        router.rejected_updates(),
        0,
        "Envoy accepted every update: {:?}",
        router.rejected_update_stats()
    );
    drop(meshflow);
}

/// Egress TLS Origination on the `sleep` sidecar. Without traffic capture, the sidecar binds
/// the task's ports on its pod's address itself (a Sidecar `egress` listener per port, written
/// at test time: the part of a captured pod's setup that iptables does in a cluster).
#[test]
fn egress_tls_origination_task_speaks_tls_to_the_backend() {
    let envoy_bin = require_envoy!();
    let Some(_ports) = privileged_ports() else {
        return;
    };
    let net = 202;
    let ip = |host| loopback(net, host);
    let dir = TestDir::new("envoy-tasks-tls-origination");
    let config = dir.subdir("config");
    let public_ca = ca("public CA");
    let (cert, key) = leaf(&public_ca, &["edition.cnn.com"], None);
    // The entry's port 80 targets port 443: the backend listens there.
    let backend = TlsBackend::start(&ip(10), 443, "edition-cnn", &cert, &key, None);
    let bundle = dir.path().join("ca-certificates.crt");
    std::fs::write(
        &bundle,
        format!("{}{}", ca("another CA").pem, public_ca.pem),
    )
    .expect("write bundle");

    // The task's objects; the entry gets an endpoint address (DNS resolves it to itself).
    let objects = task_objects("egress-tls-origination");
    let with_endpoint: Vec<String> = objects
        .split("\n---\n")
        .map(|doc| {
            let mut v: serde_yaml_ng::Value = serde_yaml_ng::from_str(doc).expect("YAML");
            if v["kind"] == "ServiceEntry" {
                let endpoints: serde_yaml_ng::Value =
                    serde_yaml_ng::from_str(&format!("[{{address: {}}}]", ip(10)))
                        .expect("endpoints");
                v["spec"]
                    .as_mapping_mut()
                    .expect("spec")
                    .insert("endpoints".into(), endpoints);
            }
            serde_yaml_ng::to_string(&v).expect("YAML")
        })
        .collect();
    write_config(&config, "task.yaml", &with_endpoint.join("---\n"));
    write_config(
        &config,
        "sidecar.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: sleep, namespace: default}}
spec:
  workloadSelector: {{labels: {{app: sleep}}}}
  egress:
  - port: {{number: 80, protocol: HTTP, name: http}}
    bind: {sleep}
    captureMode: NONE
    hosts: ['./*']
  - port: {{number: 443, protocol: TLS, name: tls}}
    bind: {sleep}
    captureMode: NONE
    hosts: ['./*']
",
            sleep = ip(50)
        ),
    );
    let meshflow = Meshflow::start_with_args(
        &config,
        dir.path(),
        &["--system-ca-bundle", &bundle.display().to_string()],
    );
    let node = ProxyNode::sidecar("sleep-abc", "default", &ip(50), &[("app", "sleep")]);
    let envoy = Envoy::start_live(&envoy_bin, dir.path(), &node, meshflow.xds_addr());
    let at = |port: u16| SocketAddr::new(ip(50).parse().expect("IP"), port);

    // The application's plain HTTP leaves as TLS naming edition.cnn.com.
    let get = || {
        http_request(at(80), "GET", "edition.cnn.com", "/politics", &[]).map(|r| {
            (
                r.status,
                r.text(),
                r.header("x-echo-sni").map(str::to_string),
                r.header("x-echo-client-cert").map(str::to_string),
            )
        })
    };
    let (status, body, sni, client) = converge(
        "http://edition.cnn.com/politics originated as TLS",
        CONVERGE_TIMEOUT,
        get,
        |r| r.as_ref().is_ok_and(|(s, ..)| *s == 200),
        || envoy.summary(),
    )
    .expect("an answer");
    assert_eq!((status, body.as_str()), (200, "edition-cnn"));
    assert_eq!(
        sni.as_deref(),
        Some("edition.cnn.com"),
        "the request's host"
    );
    assert_eq!(
        client.as_deref(),
        Some("no"),
        "SIMPLE: no client certificate"
    );
    let served = backend.requests_served();
    assert!(served > 0, "the backend completed TLS handshakes");

    // HTTPS from the application passes through: the backend's certificate reaches it.
    let (answer, peer) = converge(
        "https://edition.cnn.com passed through",
        CONVERGE_TIMEOUT,
        || {
            tls_get_trusting(
                at(443),
                "edition.cnn.com",
                Trust::Roots(&public_ca.pem),
                &[],
                None,
            )
        },
        |r| r.is_ok(),
        || envoy.summary(),
    )
    .expect("an answer");
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("edition-cnn"),
        "{answer}"
    );
    assert!(answer.contains("x-echo-sni: edition.cnn.com"), "{answer}");
    assert_eq!(peer, der_of(&cert));
    assert!(backend.requests_served() > served);
    assert_eq!(
        envoy.rejected_updates(),
        0,
        "Envoy accepted every update: {:?}",
        envoy.rejected_update_stats()
    );
    drop(meshflow);
}
