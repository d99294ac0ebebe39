//! AuthorizationPolicy translated into Envoy's RBAC, in real Envoy: a server sidecar (its
//! Sidecar `ingress` listener, bound by the proxy itself: no traffic capture on loopback)
//! under an ALLOW and a DENY policy answers each request of a client matrix as Istio's
//! documentation says — the client sidecar's mTLS identity (`principals`, then
//! `namespaces`), plaintext without one, methods, paths, a request header in `when` — and a
//! DENY beats an ALLOW; a DENY path written with a dot segment, a double slash or an escaped
//! slash is still denied (CVE-2021-31920: the path is normalized before RBAC sees it).
//! The same matrix under a STRICT PeerAuthentication (plaintext finds no chain) and a
//! DISABLE one (the client sidecar sends plaintext: no request carries its identity). On a
//! TCP port: a DENY by port, an ALLOW needing HTTP (dropped there: nothing allowed), an
//! ALLOW by address.
//! Loopback only.

use crate::support;

use std::net::SocketAddr;

use support::authz_matrix::{matrix, matrix_under, policies, Case, PeerMode, Via};
use support::reviews::SidecarPair;
use support::{
    converge, http_request, remove_config, require_envoy, write_config, TestDir, CONVERGE_TIMEOUT,
};

const NET: u8 = 121;

/// What a request answers: `ok` (the application's body), `status N`, or `error`.
fn ask(to: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> String {
    match http_request(to, method, "reviews", path, headers) {
        Ok(r) if r.status == 200 && r.text() == "reviews-app" => "ok".to_string(),
        Ok(r) => format!("status {}", r.status),
        Err(_) => "error".to_string(),
    }
}

/// What each case answers through the pair, by its description.
fn answers(pair: &SidecarPair, cases: &[Case]) -> Vec<(String, String)> {
    cases
        .iter()
        .map(|(what, via, m, p, h, _)| {
            let to = match via {
                Via::Client => pair.through_client,
                Via::Direct => pair.direct,
            };
            (what.to_string(), ask(to, m, p, h))
        })
        .collect()
}

/// What each case should answer, by its description.
fn expected(cases: &[Case]) -> Vec<(String, String)> {
    cases
        .iter()
        .map(|(what, _, _, _, _, want)| (what.to_string(), want.to_string()))
        .collect()
}

#[test]
fn a_server_sidecar_allows_and_denies_each_request_as_its_policies_say() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-authorization-sidecar");
    let config = dir.subdir("config");
    let debug = format!("127.0.0.1:{}", support::free_port());
    let pair = SidecarPair::start_with_args(
        NET,
        &envoy_bin,
        dir.path(),
        &config,
        &["--debug-addr", &debug],
    );
    let (through_client, direct) = (pair.through_client, pair.direct);
    let matrix = matrix();
    let answers = |cases: &[Case]| answers(&pair, cases);
    let summary = || pair.summary();
    converge(
        "open before any policy",
        CONVERGE_TIMEOUT,
        || ask(through_client, "POST", "/private", &[]),
        |a| a == "ok",
        summary,
    );

    write_config(
        &config,
        "zz-authz.yaml",
        &policies("principals: [cluster.local/ns/default/sa/sleep]"),
    );
    let got = converge(
        "the policies' answers",
        CONVERGE_TIMEOUT,
        || answers(&matrix),
        |got| *got == expected(&matrix),
        summary,
    );
    assert_eq!(got, expected(&matrix));
    // `meshflow authz check` answers each case as Envoy did, from the server sidecar's
    // config (fetched over CSDS, run through the simulation).
    let pod_ip = direct.ip().to_string();
    let port = direct.port().to_string();
    for (what, via, method, path, headers, want) in &matrix {
        let mut args = vec![
            "authz",
            "check",
            "reviews-v1.default",
            "--port",
            &port,
            "--address",
            &pod_ip,
            "--host",
            "reviews",
            "--method",
            method,
            "--path",
            path,
            "--debug-addr",
            &debug,
            "-o",
            "json",
        ];
        let pairs: Vec<String> = headers.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for h in &pairs {
            args.extend(["--header", h.as_str()]);
        }
        if *via == Via::Client {
            args.extend(["--from", support::authz_matrix::CLIENT_IDENTITY]);
        }
        let v: serde_json::Value =
            serde_json::from_str(&support::meshflow_cli(&args)).expect("JSON");
        let got = match v["status"].as_u64() {
            Some(s) => format!("status {s}"),
            None if v["decision"]
                .as_str()
                .is_some_and(|d| d.starts_with("allowed")) =>
            {
                "ok".to_string()
            }
            None => format!("{v}"),
        };
        assert_eq!(got, *want, "authz check, {what}: {v}");
    }
    // The same on the debug port.
    let debug_addr: SocketAddr = debug.parse().expect("an address");
    let asked = |query: &str| {
        support::debug_json(
            debug_addr,
            &format!(
                "/debug/authz_check?proxy=reviews-v1.default&port={port}&address={pod_ip}&host=reviews&{query}"
            ),
        )
    };
    let allowed = asked(&format!(
        "path=/public/a&from={}",
        support::authz_matrix::CLIENT_IDENTITY
    ));
    assert_eq!(allowed["decision"], "allowed", "{allowed}");
    let denied = asked("path=/public/a&method=POST");
    assert_eq!(denied["status"], 403, "{denied}");
    assert!(
        denied["filters"].to_string().contains("no policy matches"),
        "{denied}"
    );

    // By namespace: the client's (default) is allowed, another is not.
    write_config(&config, "zz-authz.yaml", &policies("namespaces: [other]"));
    converge(
        "another namespace only: the client's identity is refused",
        CONVERGE_TIMEOUT,
        || ask(through_client, "GET", "/public/a", &[]),
        |a| a == "status 403",
        summary,
    );
    write_config(&config, "zz-authz.yaml", &policies("namespaces: [default]"));
    converge(
        "the client's namespace: allowed",
        CONVERGE_TIMEOUT,
        || ask(through_client, "GET", "/public/a", &[]),
        |a| a == "ok",
        summary,
    );

    remove_config(&config, "zz-authz.yaml");
    converge(
        "open again",
        CONVERGE_TIMEOUT,
        || ask(through_client, "POST", "/private", &[]),
        |a| a == "ok",
        summary,
    );
    assert_eq!(pair.client.rejected_updates(), 0, "{}", pair.summary());
    assert_eq!(pair.server.rejected_updates(), 0, "{}", pair.summary());
}

const ADVISORY_NET: u8 = 123;

/// DENY policies on reviews written as Istio's advisories exploited them.
const ADVISORY_POLICIES: &str = r#"apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: reviews-advisories
  namespace: default
spec:
  selector:
    matchLabels:
      app: reviews
  action: DENY
  rules:
  - to:
    - operation:
        paths: [/user/profile]
  - to:
    - operation:
        hosts: [secret.example.com]
  - to:
    - operation:
        methods: [DELETE]
  - to:
    - operation:
        paths: ["/files/{*}/private", "/logs/{**}"]
"#;

/// The service-account DENY of CVE-2026-39350: `sle.p` must not stand for `sleep`.
fn deny_account(account: &str) -> String {
    format!(
        "apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: reviews-account
  namespace: default
spec:
  selector:
    matchLabels:
      app: reviews
  action: DENY
  rules:
  - from:
    - source:
        serviceAccounts: [default/{account}]
"
    )
}

/// The published bypasses of AuthorizationPolicy matching, one case each, in real Envoy: a
/// fragment after a denied path (CVE-2021-39156), a denied host in another case
/// (CVE-2021-39155), a denied method in lower case, and a service account written with a
/// regex metacharacter (CVE-2026-39350: `default/sle.p` denies nobody, `default/sleep` the
/// client sidecar). Path templates (`{*}` one segment, `{**}` any) deny what they cover
/// and nothing more.
#[test]
fn published_authorization_bypasses_are_closed() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-authorization-advisories");
    let config = dir.subdir("config");
    let pair = SidecarPair::start(ADVISORY_NET, &envoy_bin, dir.path(), &config);
    let (through_client, direct) = (pair.through_client, pair.direct);
    let ask = |to: SocketAddr, method: &str, host: &str, path: &str| match http_request(
        to,
        method,
        host,
        path,
        &[],
    ) {
        Ok(r) if r.status == 200 && r.text() == "reviews-app" => "ok".to_string(),
        Ok(r) => format!("status {}", r.status),
        Err(_) => "error".to_string(),
    };
    let summary = || pair.summary();
    write_config(&config, "zz-advisories.yaml", ADVISORY_POLICIES);
    converge(
        "the DENY policy in effect",
        CONVERGE_TIMEOUT,
        || ask(direct, "GET", "reviews", "/user/profile"),
        |a| a == "status 403",
        summary,
    );
    // (what, method, host, path, allowed)
    let cases = [
        (
            "a fragment after the denied path",
            "GET",
            "reviews",
            "/user/profile#x",
            false,
        ),
        (
            "the denied host in upper case",
            "GET",
            "Secret.Example.COM",
            "/",
            false,
        ),
        (
            "the denied method in lower case",
            "delete",
            "reviews",
            "/",
            false,
        ),
        (
            "{*}: one segment",
            "GET",
            "reviews",
            "/files/a/private",
            false,
        ),
        ("{*}: not two", "GET", "reviews", "/files/a/b/private", true),
        (
            "{*}: another last segment",
            "GET",
            "reviews",
            "/files/a/public",
            true,
        ),
        ("{**}: any depth", "GET", "reviews", "/logs/a/b/c", false),
        ("another path", "GET", "reviews", "/user/profiles", true),
        ("another host", "GET", "public.example.com", "/", true),
    ];
    for (what, method, host, path, allowed) in cases {
        let got = ask(direct, method, host, path);
        assert_eq!(got == "ok", allowed, "{what}: {got}");
    }

    remove_config(&config, "zz-advisories.yaml");
    write_config(&config, "zz-account.yaml", &deny_account("sleep"));
    converge(
        "`sleep` is denied",
        CONVERGE_TIMEOUT,
        || ask(through_client, "GET", "reviews", "/"),
        |a| a == "status 403",
        summary,
    );
    // Replaced in place: the client passes only once `sle.p` is the policy in effect.
    write_config(&config, "zz-account.yaml", &deny_account("sle.p"));
    let got = converge(
        "`sle.p` is not `sleep`: the client passes",
        CONVERGE_TIMEOUT,
        || ask(through_client, "GET", "reviews", "/"),
        |a| a == "ok",
        summary,
    );
    assert_eq!(got, "ok");
    assert_eq!(pair.server.rejected_updates(), 0, "{}", pair.summary());
}

const MODES_NET: u8 = 118;

#[test]
fn the_matrix_under_strict_and_disable_is_istios() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-authorization-modes");
    let config = dir.subdir("config");
    write_config(
        &config,
        "zz-authz.yaml",
        &policies("principals: [cluster.local/ns/default/sa/sleep]"),
    );
    let pair = SidecarPair::start(MODES_NET, &envoy_bin, dir.path(), &config);
    for mode in [PeerMode::Strict, PeerMode::Disable] {
        write_config(&config, "zz-peer.yaml", &mode.policy());
        let cases = matrix_under(mode);
        let got = converge(
            &format!("the matrix under {}", mode.name()),
            CONVERGE_TIMEOUT,
            || answers(&pair, &cases),
            |got| *got == expected(&cases),
            || pair.summary(),
        );
        assert_eq!(got, expected(&cases), "{}", mode.name());
    }
    assert_eq!(pair.client.rejected_updates(), 0, "{}", pair.summary());
    assert_eq!(pair.server.rejected_updates(), 0, "{}", pair.summary());
}

const TCP_NET: u8 = 116;

/// An AuthorizationPolicy on a TCP port of a server sidecar (a Sidecar `ingress` listener of
/// protocol TCP in front of an echo server), in real Envoy: a DENY on the port closes the
/// connection before the application sees a byte; an ALLOW whose only rule needs HTTP
/// (`methods`) cannot be checked on a TCP chain, so the rule is dropped there and the port
/// refuses every connection, while the HTTP port still takes the GETs it allows (Istio's
/// fail-closed rule); an ALLOW by the peer's address (`ipBlocks`) is checked on TCP too.
#[test]
fn a_tcp_port_enforces_what_it_can_check_and_refuses_the_rest() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-authorization-tcp");
    let config = dir.subdir("config");
    let pair = SidecarPair::start(TCP_NET, &envoy_bin, dir.path(), &config);
    let pod_ip = pair.direct.ip().to_string();
    let (tcp_port, echo_port) = (support::free_port(), support::free_port());
    let _echo = support::tcp_echo::TcpEcho::start("127.0.0.1", echo_port, "echo");
    // A second `ingress` entry: the TCP port, in front of the echo server.
    write_config(
        &config,
        "server-sidecar.yaml",
        &pair.reviews.server_sidecar_yaml(
            pair.app_port,
            &format!(
                "  - port: {{number: {tcp_port}, protocol: TCP, name: tcp}}\n    bind: {pod_ip}\n    captureMode: NONE\n    defaultEndpoint: 127.0.0.1:{echo_port}\n"
            ),
        ),
    );
    let tcp: SocketAddr = format!("{pod_ip}:{tcp_port}").parse().expect("an address");
    let exchange = || support::tcp_echo::tcp_exchange(tcp);
    let http_get = || ask(pair.direct, "GET", "/", &[]);
    let summary = || pair.summary();
    converge(
        "the TCP port, open",
        CONVERGE_TIMEOUT,
        exchange,
        |a| a == "echo",
        summary,
    );

    let policy = |action: &str, rule: &str| {
        format!(
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: reviews-tcp, namespace: default}}\nspec:\n  selector: {{matchLabels: {{app: reviews}}}}\n  action: {action}\n  rules:\n{rule}"
        )
    };
    write_config(
        &config,
        "zz-authz.yaml",
        &policy(
            "DENY",
            &format!("  - to: [{{operation: {{ports: [\"{tcp_port}\"]}}}}]\n"),
        ),
    );
    converge(
        "DENY on the TCP port",
        CONVERGE_TIMEOUT,
        exchange,
        |a| a.starts_with("error"),
        summary,
    );
    assert_eq!(http_get(), "ok", "the HTTP port is not denied");

    write_config(
        &config,
        "zz-authz.yaml",
        &policy("ALLOW", "  - to: [{operation: {methods: [GET]}}]\n"),
    );
    converge(
        "ALLOW GET: the HTTP port takes GET",
        CONVERGE_TIMEOUT,
        || (http_get(), ask(pair.direct, "POST", "/", &[])),
        |(get, post)| get == "ok" && post == "status 403",
        summary,
    );
    let refused = exchange();
    assert!(
        refused.starts_with("error"),
        "a TCP chain cannot check a method: the rule is dropped and nothing is allowed: {refused}"
    );

    write_config(
        &config,
        "zz-authz.yaml",
        &policy("ALLOW", "  - from: [{source: {ipBlocks: [127.0.0.0/8]}}]\n"),
    );
    converge(
        "ALLOW by address on TCP",
        CONVERGE_TIMEOUT,
        exchange,
        |a| a == "echo",
        summary,
    );
    write_config(
        &config,
        "zz-authz.yaml",
        &policy("ALLOW", "  - from: [{source: {ipBlocks: [10.0.0.0/8]}}]\n"),
    );
    converge(
        "ALLOW another address range",
        CONVERGE_TIMEOUT,
        exchange,
        |a| a.starts_with("error"),
        summary,
    );
    assert_eq!(pair.server.rejected_updates(), 0, "{}", pair.summary());
}
