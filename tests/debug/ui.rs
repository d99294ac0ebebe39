//! The debug UI (`/ui`) in a real headless browser (Chromium, `support::chromium`), against a
//! running meshflow with a real Envoy connected: each view is loaded, its script runs against
//! the debug port's endpoints, and the rendered page is checked — the proxy and its sync
//! state, its resources in Envoy's JSON, its history and a diff between two epochs, `explain`
//! as a graph from input objects to the proxies holding the resource, config errors and
//! analysis, an authorization check (the form and its verdict naming the deciding policy),
//! the mTLS changes in progress, and the convergence histogram. Screenshots of every view are kept as test
//! artefacts in `target/ui-screenshots/` (the README's come from there).

use crate::support;

use std::net::SocketAddr;
use std::path::PathBuf;

use support::chromium::require_chromium;
use support::reviews::Binding;
use support::{free_port, http_get, require_envoy, wait_until, write_config, SidecarScene};
use support::{TestDir, CONVERGE_TIMEOUT};

/// Where the screenshots go: `target/ui-screenshots/NAME.png`.
fn screenshot_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/ui-screenshots")
        .join(format!("{name}.png"))
}

fn proxies_json(debug: SocketAddr) -> serde_json::Value {
    support::debug_json(debug, "/debug/proxies")
}

/// The number of epochs in which the proxy's RDS was acknowledged.
fn rds_acks(debug: SocketAddr) -> u64 {
    proxies_json(debug)["proxies"][0]["types"]["RDS"]["acks"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn every_view_renders_in_a_real_browser() {
    let envoy_bin = require_envoy!();
    let browser = require_chromium!();
    let debug = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let debug_arg = debug.to_string();
    let scene = SidecarScene::start(
        &envoy_bin,
        "debug-ui",
        63,
        &["--debug-addr", &debug_arg],
        |_| {},
    );
    let scratch = TestDir::new("debug-ui-browser");
    let id = format!(
        "sidecar~{}~client-abc.default~default.svc.cluster.local",
        scene.reviews.ip(20)
    );
    let route = scene.port.to_string();
    let cluster = format!("outbound|{}||reviews.default.svc.cluster.local", scene.port);

    // Two routing changes, each acknowledged: the history has epochs to diff.
    for split in [[("v1", 100), ("v2", 0)], [("v1", 0), ("v2", 100)]] {
        let before = rds_acks(debug);
        scene.reviews.write_subset_routing(&Binding::Mesh, &split);
        assert!(
            wait_until(CONVERGE_TIMEOUT, || rds_acks(debug) > before),
            "the routing change was not acknowledged"
        );
    }
    // A rejected file, for the errors view.
    write_config(&scene.config, "broken.yaml", "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: broken, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: reviews}\n      weight: -5\n");
    assert!(wait_until(CONVERGE_TIMEOUT, || {
        http_get(debug, "127.0.0.1", "/debug/config_errors", &[])
            .is_ok_and(|(_, b)| b.contains("broken.yaml"))
    }));

    let url = |fragment: &str| format!("http://{debug}/ui#{fragment}");
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let shoot = |name: &str, fragment: &str| {
        browser.screenshot(&url(fragment), &screenshot_path(name), scratch.path());
    };

    // Proxies: the connected Envoy, synced on every type.
    let dom = browser.dom(&url("/proxies"), scratch.path());
    assert!(dom.contains(&format!("data-proxy=\"{id}\"")), "{dom}");
    // SDS too: auto mTLS clusters name the workload certificate and root.
    assert_eq!(
        dom.matches(">SYNCED<").count(),
        5,
        "CDS, EDS, LDS, RDS and SDS synced: {dom}"
    );
    shoot("proxies", "/proxies");

    // One proxy's resources, in Envoy's JSON.
    let dom = browser.dom(&url(&format!("/proxy/{}", enc(&id))), scratch.path());
    assert!(
        dom.contains(&format!("data-resource=\"cluster/{cluster}\"")),
        "{dom}"
    );
    assert!(
        dom.contains(&format!("data-resource=\"route/{route}\"")),
        "{dom}"
    );
    assert!(
        dom.contains("\"connect_timeout\""),
        "Envoy's JSON of the cluster: {dom}"
    );
    shoot("resources", &format!("/proxy/{}", enc(&id)));

    // History and a diff between the last two epochs: the route moved from v1 to v2.
    let history = format!("/history/{}", enc(&id));
    let dom = browser.dom(&url(&history), scratch.path());
    assert!(
        dom.contains("VirtualService default/reviews"),
        "the input change: {dom}"
    );
    assert!(
        dom.contains(&format!("modified RDS {route}")),
        "the diff: {dom}"
    );
    assert!(
        dom.contains("class=\"add\"") && dom.contains("class=\"del\""),
        "added and removed lines: {dom}"
    );
    shoot("history", &history);
    // A chosen window: from before the VirtualService to after it, the route was modified
    // and the change names the subset.
    let dom = browser.dom(&url(&format!("{history}?from=2&to=4")), scratch.path());
    assert!(dom.contains(&format!("modified RDS {route}")), "{dom}");
    assert!(
        dom.contains("outbound|") && dom.contains("|v2|reviews"),
        "{dom}"
    );

    // Explain: VirtualService → route → the proxy holding it.
    let explain = format!("/explain/{}/route/{route}", enc(&id));
    let dom = browser.dom(&url(&explain), scratch.path());
    assert!(dom.contains("id=\"explain-graph\""), "{dom}");
    for input in [
        "VirtualService default/reviews",
        "Service default/reviews",
        "Sidecar default/client",
    ] {
        assert!(
            dom.contains(&format!("<li>{input}</li>")),
            "input {input}: {dom}"
        );
    }
    assert!(dom.contains(&format!(">{id}<")), "the holder: {dom}");
    shoot("explain", &explain);

    // Config errors: the rejected file, by name and field.
    let dom = browser.dom(&url("/errors"), scratch.path());
    assert!(
        dom.contains("broken.yaml") && dom.contains("weight"),
        "{dom}"
    );
    shoot("errors", "/errors");

    // Convergence: acknowledged pushes counted in the histogram.
    let dom = browser.dom(&url("/convergence"), scratch.path());
    let counted = dom
        .split("data-count=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next()?.parse::<u64>().ok())
        .sum::<u64>();
    assert!(counted > 0, "no acknowledged push in the histogram: {dom}");
    assert!(dom.contains("pushes acknowledged"), "{dom}");
    shoot("convergence", "/convergence");

    // The authorization check: a DENY selecting the client's workload decides a request
    // to an inbound listener it binds (a Sidecar `ingress`), named with its policy, as
    // `meshflow authz check` would say.
    let ingress_port = free_port();
    let client_ip = scene.reviews.ip(20);
    write_config(
        &scene.config,
        "sidecar.yaml",
        &format!(
            "{}  ingress:\n  - port: {{number: {ingress_port}, protocol: HTTP, name: http}}\n    bind: {client_ip}\n    captureMode: NONE\n    defaultEndpoint: 127.0.0.1:{ingress_port}\n",
            support::reviews::client_sidecar_yaml(scene.port)
        ),
    );
    write_config(&scene.config, "zz-deny.yaml", "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: client-deny, namespace: default}\nspec:\n  selector: {matchLabels: {app: client}}\n  action: DENY\n  rules:\n  - to:\n    - operation: {paths: [/admin*]}\n");
    let check = |path: &str| {
        support::debug_json(
            debug,
            &format!(
                "/debug/authz_check?proxy={}&port={ingress_port}&address={client_ip}&path={path}",
                enc(&id)
            ),
        )
    };
    assert!(
        wait_until(CONVERGE_TIMEOUT, || check("/admin")["status"] == 403),
        "the DENY in effect: {}",
        check("/admin")
    );
    let authz = format!(
        "/authz/{}?port={ingress_port}&address={client_ip}&method=GET&path=%2Fadmin",
        enc(&id)
    );
    let dom = browser.dom(&url(&authz), scratch.path());
    assert!(dom.contains("id=\"verdict\""), "{dom}");
    assert!(dom.contains("(403)"), "the DENY's status: {dom}");
    assert!(
        dom.contains("client-deny"),
        "the deciding policy named: {dom}"
    );
    assert!(dom.contains("id=\"authz-form\""), "{dom}");
    shoot("authz", &authz);
    let dom = browser.dom(
        &url(&format!(
            "/authz/{}?port={ingress_port}&address={client_ip}&path=%2Fpublic",
            enc(&id)
        )),
        scratch.path(),
    );
    assert!(
        dom.contains("data-decision=\"allowed"),
        "another path passes: {dom}"
    );
    // No PeerAuthentication change in progress.
    let dom = browser.dom(&url("/mtls"), scratch.path());
    assert!(
        dom.contains("every PeerAuthentication change is complete"),
        "{dom}"
    );

    // A view that cannot load says why instead of staying blank.
    let dom = browser.dom(&url("/proxy/nobody"), scratch.path());
    assert!(dom.contains("id=\"load-error\""), "{dom}");
}
