//! AuthorizationPolicy CUSTOM in real Envoy: the mesh config's `extensionProviders` (an
//! `envoyExtAuthzHttp` and an `envoyExtAuthzGrpc` provider, both services of the mesh on
//! loopback), a policy asking one about `/admin*` at the server sidecar (its Sidecar
//! `ingress` listener, bound by the proxy itself), plaintext and through the client sidecar
//! (mTLS):
//!
//! - a request the rules do not match is never asked about (the services count checks) and
//!   passes; one they match passes only when the service allows it (403 otherwise), for
//!   each provider kind;
//! - the policy naming a provider the mesh config lacks denies what its rules match (and
//!   only that), with MF0021 on the debug port;
//! - `/debug/authz_check` says the same as Envoy: the service decides, and with its answer
//!   given, allowed or denied.
//!
//! Loopback only.

use crate::support;

use std::net::SocketAddr;

use support::ext_authz::{ExtAuthz, HEADER};
use support::reviews::SidecarPair;
use support::{
    converge, debug_json, free_port, http_request, require_envoy, write_config, TestDir,
    CONVERGE_TIMEOUT,
};

const NET: u8 = 124;

/// The providers name the Service's ports (8000, 9000); its endpoints are where the
/// services listen.
fn mesh_config() -> String {
    format!(
        "extensionProviders:
- name: http-authz
  envoyExtAuthzHttp:
    service: ext-authz.default.svc.cluster.local
    port: 8000
    includeRequestHeadersInCheck: [{HEADER}]
- name: grpc-authz
  envoyExtAuthzGrpc:
    service: default/ext-authz.default.svc.cluster.local
    port: 9000
    timeout: 2s
"
    )
}

/// The Service of both authorization services and its endpoints (no sidecar: plaintext).
fn ext_authz_service(ip: &str, http_port: u16, grpc_port: u16) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: ext-authz, namespace: default}}
spec:
  selector: {{app: ext-authz}}
  ports:
  - {{name: http, port: 8000, targetPort: {http_port}, protocol: TCP}}
  - {{name: grpc, port: 9000, targetPort: {grpc_port}, protocol: TCP}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ext-authz-abc12
  namespace: default
  labels: {{kubernetes.io/service-name: ext-authz}}
addressType: IPv4
ports:
- {{name: http, port: {http_port}, protocol: TCP}}
- {{name: grpc, port: {grpc_port}, protocol: TCP}}
endpoints:
- addresses: [{ip}]
  conditions: {{ready: true}}
"
    )
}

fn policy(provider: &str) -> String {
    format!(
        "apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: admin-ext, namespace: default}}
spec:
  selector:
    matchLabels: {{app: reviews}}
  action: CUSTOM
  provider: {{name: {provider}}}
  rules:
  - to:
    - operation:
        paths: [\"/admin*\"]
"
    )
}

#[test]
fn custom_policies_ask_their_external_service_about_what_their_rules_match() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-ext-authz");
    let config = dir.subdir("config");
    let ip = format!("127.0.{NET}.50");
    let services = ExtAuthz::start(&ip);
    write_config(dir.path(), "mesh.yaml", &mesh_config());
    write_config(
        &config,
        "ext-authz.yaml",
        &ext_authz_service(&ip, services.http.port(), services.grpc.port()),
    );
    let mesh_file = dir.path().join("mesh.yaml");
    let debug: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let debug_arg = debug.to_string();
    let pair = SidecarPair::start_with_args(
        NET,
        &envoy_bin,
        dir.path(),
        &config,
        &[
            "--mesh-config",
            mesh_file.to_str().expect("a UTF-8 path"),
            "--debug-addr",
            &debug_arg,
        ],
    );
    let ask = |to: SocketAddr, path: &str, allow: bool| {
        let headers: Vec<(&str, &str)> = if allow {
            vec![(HEADER, "allow")]
        } else {
            Vec::new()
        };
        match http_request(to, "GET", "reviews", path, &headers) {
            Ok(r) if r.status == 200 && r.text() == "reviews-app" => "ok".to_string(),
            Ok(r) => format!("status {}", r.status),
            Err(_) => "error".to_string(),
        }
    };
    let summary = || pair.summary();
    let expect = |what: &str, to: SocketAddr, path: &str, allow: bool, want: &str| {
        let got = converge(
            what,
            CONVERGE_TIMEOUT,
            || ask(to, path, allow),
            |a| a == want,
            summary,
        );
        assert_eq!(got, want, "{what}");
    };
    let (direct, through) = (pair.direct, pair.through_client);

    // The HTTP provider.
    write_config(&config, "zz-policy.yaml", &policy("http-authz"));
    expect("http: the service allows", direct, "/admin", true, "ok");
    expect(
        "http: the service refuses",
        direct,
        "/admin/x",
        false,
        "status 403",
    );
    let before = services.asked();
    assert_eq!(ask(direct, "/r", false), "ok", "not matched: passes");
    assert_eq!(ask(through, "/r", false), "ok", "not matched, over mTLS");
    assert_eq!(services.asked(), before, "not matched: never asked");
    assert_eq!(ask(through, "/admin", true), "ok", "over mTLS, allowed");
    assert_eq!(
        ask(through, "/admin", false),
        "status 403",
        "over mTLS, refused"
    );
    let after = services.asked();
    assert_eq!(after.0, before.0 + 2, "the HTTP service asked twice");
    assert_eq!(after.1, 0, "the gRPC service never");

    // What the debug port says of the same requests.
    let check = |query: &str| {
        let port = pair.direct.port();
        let pod_ip = pair.direct.ip();
        debug_json(
            debug,
            &format!(
                "/debug/authz_check?proxy=reviews-v1.default&port={port}&address={pod_ip}&host=reviews&{query}"
            ),
        )["decision"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(check("path=/admin"), "decided by external authorization");
    assert_eq!(check("path=/admin&ext_authz=allow"), "allowed");
    assert_eq!(check("path=/admin&ext_authz=deny"), "denied");
    assert_eq!(check("path=/r&ext_authz=deny"), "allowed");

    // The gRPC provider.
    // Both refuse and allow alike: the switch shows in who is asked.
    write_config(&config, "zz-policy.yaml", &policy("grpc-authz"));
    converge(
        "the gRPC service is asked",
        CONVERGE_TIMEOUT,
        || {
            let answer = ask(direct, "/admin", true);
            (answer, services.asked().1)
        },
        |(answer, grpc)| answer == "ok" && *grpc > 0,
        summary,
    );
    // Direct requests open a connection each (the client sidecar's pooled one may still
    // run the chain it was accepted on, which asked the HTTP service).
    let before = services.asked();
    assert_eq!(ask(direct, "/admin", false), "status 403", "grpc: refused");
    assert_eq!(ask(direct, "/r", false), "ok", "not matched: passes");
    let after = services.asked();
    assert_eq!(after.1, before.1 + 1, "the gRPC service asked once");
    assert_eq!(after.0, before.0, "the HTTP service no more");
    assert_eq!(ask(through, "/admin", true), "ok", "over mTLS, allowed");

    // A provider the mesh config lacks: what the rules match is denied, nothing else.
    write_config(&config, "zz-policy.yaml", &policy("nowhere"));
    expect("no provider: denied", direct, "/admin", true, "status 403");
    assert_eq!(ask(direct, "/r", false), "ok", "not matched: passes");
    let errors = debug_json(debug, "/debug/config_errors").to_string();
    assert!(
        errors.contains("MF0021") && errors.contains("admin-ext") && errors.contains("nowhere"),
        "{errors}"
    );
    assert_eq!(pair.server.rejected_updates(), 0, "{}", pair.summary());
}
