//! Proxyless gRPC through meshflow, with two gRPC implementations that each carry their own
//! xDS client: Python's `grpcio` (PyPI, installed into `.venv-test/`) and Node's
//! `@grpc/grpc-js-xds` (npm, pinned by `tests/proxyless/node/package-lock.json`, installed
//! into `tests/proxyless/node/node_modules/`), both by `scripts/install-test-deps.sh`. Each
//! dials `xds:///reviews.default.svc.cluster.local:PORT` with a `GRPC_XDS_BOOTSTRAP` made from
//! `examples/bookinfo/grpc-bootstrap.json` (only the server address and node id changed, so the
//! example is what the clients are shown to accept), and its calls land on gRPC servers of the
//! same implementation standing in for the reviews pods. The client is the subject here: it
//! requests the API listener `host:port` by name, follows it to RDS, CDS and EDS, and applies
//! the VirtualService's weights, header match and the DestinationRule's subsets itself.
//!
//! Each test skips loudly when its runtime or packages are missing; fails instead under
//! `CI=true`.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::reviews::{Reviews, FQDN, NAMESPACE};
use support::{converge, log_tail, wait_until, write_config, Meshflow, TestDir};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const SERVICE_PORT: u16 = 9080;
const VIRTUAL_SERVICE_FILE: &str = "reviews-virtualservice.yaml";

/// One gRPC implementation: a program running a script with `grpc_peer`'s command line
/// (`serve IP:PORT=NAME...`, `call TARGET COUNT [KEY=VALUE...]`).
struct Peer {
    program: PathBuf,
    script: PathBuf,
}

impl Peer {
    fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.arg(&self.script);
        c
    }
}

/// Whether `program args` runs and exits 0.
fn runs(program: &Path, args: &[&str], dir: &Path) -> bool {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `.venv-test/bin/python` when it can import grpc.
fn grpcio() -> Result<Peer, String> {
    let python = Path::new(ROOT).join(".venv-test/bin/python");
    if !runs(&python, &["-c", "import grpc"], Path::new(ROOT)) {
        return Err(
            "no .venv-test/bin/python with grpcio: run scripts/install-test-deps.sh first".into(),
        );
    }
    Ok(Peer {
        program: python,
        script: Path::new(ROOT).join("tests/proxyless/grpc_peer.py"),
    })
}

/// `node` on PATH, and `tests/proxyless/node/node_modules` holding both gRPC packages.
fn grpc_js() -> Result<Peer, String> {
    let dir = Path::new(ROOT).join("tests/proxyless/node");
    let node = PathBuf::from("node");
    let load = "require('@grpc/grpc-js'); require('@grpc/grpc-js-xds')";
    if !runs(&node, &["--version"], &dir) {
        return Err("no `node` on PATH (Node.js 18 or later)".into());
    }
    if !runs(&node, &["-e", load], &dir) {
        return Err(format!(
            "@grpc/grpc-js-xds is not installed in {}: run scripts/install-test-deps.sh first",
            dir.display()
        ));
    }
    Ok(Peer {
        program: node,
        script: dir.join("grpc_peer.js"),
    })
}

/// The peer, or `None` after saying loudly why the test skips; under `CI=true` a missing
/// peer fails the test instead.
fn peer_or_skip(found: Result<Peer, String>) -> Option<Peer> {
    let message = match found {
        Ok(peer) => return Some(peer),
        Err(message) => message,
    };
    let on_ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    assert!(
        !on_ci,
        "{message} (CI is set, so this fails instead of skipping)"
    );
    let bar = "!".repeat(78);
    eprintln!("\n{bar}\nSKIPPED: {message}\n{bar}\n");
    None
}

/// The VirtualService of the test: `end-user: jason` → subset v3, everything else split
/// between v1 and v2 by `weights`.
fn write_routing(config_dir: &Path, weights: (u32, u32)) {
    let yaml = format!(
        "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
  namespace: {NAMESPACE}
spec:
  hosts:
  - reviews
  http:
  - name: jason
    match:
    - headers:
        end-user:
          exact: jason
    route:
    - destination:
        host: reviews
        subset: v3
  - name: split
    route:
    - destination:
        host: reviews
        subset: v1
      weight: {v1}
    - destination:
        host: reviews
        subset: v2
      weight: {v2}
",
        v1 = weights.0,
        v2 = weights.1,
    );
    write_config(config_dir, VIRTUAL_SERVICE_FILE, &yaml);
}

/// The gRPC servers of pods reviews-v1..v3, each answering its pod name.
struct Servers(Child);

impl Servers {
    fn start(peer: &Peer, reviews: &Reviews, versions: &[&str]) -> Servers {
        let specs: Vec<String> = versions
            .iter()
            .map(|v| {
                format!(
                    "{}:{}=reviews-{v}",
                    reviews.pod_ip(v),
                    reviews.backend_port()
                )
            })
            .collect();
        let mut child = peer
            .command()
            .arg("serve")
            .args(&specs)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the gRPC servers");
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).expect("read the servers' stdout");
        assert_eq!(line.trim(), "ready", "gRPC servers did not start");
        Servers(child)
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The example bootstrap (`examples/bookinfo/grpc-bootstrap.json`) pointed at this test's
/// meshflow, for a client at `127.0.NET.5` in `default`. Everything else, `node.locality`
/// included, is the example's.
fn write_bootstrap(path: &Path, meshflow: &Meshflow, net: u8) {
    let example = Path::new(ROOT).join("examples/bookinfo/grpc-bootstrap.json");
    let text = std::fs::read_to_string(&example).expect("read the example bootstrap");
    let mut bootstrap: serde_json::Value =
        serde_json::from_str(&text).expect("the example bootstrap is JSON");
    let ip = format!("127.0.{net}.5");
    bootstrap["xds_servers"][0]["server_uri"] = meshflow.xds_addr().to_string().into();
    let node = &mut bootstrap["node"];
    node["id"] =
        format!("sidecar~{ip}~grpc-client.{NAMESPACE}~{NAMESPACE}.svc.cluster.local").into();
    node["metadata"]["INSTANCE_IPS"] = ip.into();
    std::fs::write(path, serde_json::to_vec_pretty(&bootstrap).unwrap()).unwrap();
}

/// Runs `count` calls through a fresh channel (a fresh xDS client) and tallies the answers.
fn call(
    peer: &Peer,
    bootstrap: &Path,
    count: usize,
    metadata: &[&str],
    dir: &Path,
) -> BTreeMap<String, usize> {
    call_target(peer, bootstrap, &format!("xds:///{FQDN}:{SERVICE_PORT}"), count, metadata, dir)
}

/// As [`call`], dialing `target`.
fn call_target(
    peer: &Peer,
    bootstrap: &Path,
    target: &str,
    count: usize,
    metadata: &[&str],
    dir: &Path,
) -> BTreeMap<String, usize> {
    let out_path = dir.join("call.out");
    let err_path = dir.join("call.err");
    let mut child = peer
        .command()
        .arg("call")
        .arg(target)
        .arg(count.to_string())
        .args(metadata)
        .env("GRPC_XDS_BOOTSTRAP", bootstrap)
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("start the gRPC client");
    let finished = wait_until(Duration::from_secs(60), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !finished {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "the gRPC client did not finish within 60 s\n{}",
            log_tail(&err_path, 40)
        );
    }
    let text = std::fs::read_to_string(&out_path).unwrap();
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "client printed {text:?} ({e})\nstderr:\n{}",
            log_tail(&err_path, 40)
        )
    })
}

/// The scenario both implementations go through, on loopback net `127.0.NET.0/24`: the
/// 75/25 split between subsets v1 and v2 holds within sampling noise, a header match picks
/// subset v3, and a weight change reaches new channels.
fn follows_weights_and_subsets(peer: &Peer, name: &str, net: u8) {
    let dir = TestDir::new(name);
    let config_dir = dir.subdir("config");
    let reviews = Reviews::new(net, SERVICE_PORT, &config_dir);
    reviews.write_service();
    reviews.write_pods(&["v1", "v2", "v3"]);
    reviews.write_endpoints(&["v1", "v2", "v3"]);
    reviews.write_destination_rule(&["v1", "v2", "v3"]);
    write_routing(&config_dir, (75, 25));

    let meshflow = Meshflow::start(&config_dir, dir.path());
    let _servers = Servers::start(peer, &reviews, &["v1", "v2", "v3"]);
    let bootstrap = dir.path().join("grpc-bootstrap.json");
    write_bootstrap(&bootstrap, &meshflow, net);

    let split = call(peer, &bootstrap, 400, &[], dir.path());
    let keys: Vec<&str> = split.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["reviews-v1", "reviews-v2"],
        "only the split's subsets answer: {split:?}\nmeshflow log:\n{}",
        meshflow.log()
    );
    // 75% of 400 is 300 with a standard deviation near 9: ±45 is five of them.
    let v1 = split["reviews-v1"];
    assert!(
        (255..=345).contains(&v1),
        "v1 got {v1} of 400 calls, expected about 300: {split:?}"
    );

    // The names Istio's clients use besides the FQDN: `name.ns`, and `name` from the
    // client's own namespace.
    for short in ["reviews.default.svc", "reviews.default", "reviews"] {
        let target = format!("xds:///{short}:{SERVICE_PORT}");
        let counts = call_target(peer, &bootstrap, &target, 20, &[], dir.path());
        assert_eq!(
            counts.values().sum::<usize>(),
            20,
            "{target}: every call answered by the split: {counts:?}"
        );
        assert!(
            counts.keys().all(|k| k == "reviews-v1" || k == "reviews-v2"),
            "{target}: {counts:?}"
        );
    }

    let jason = call(peer, &bootstrap, 20, &["end-user=jason"], dir.path());
    assert_eq!(
        jason,
        BTreeMap::from([("reviews-v3".to_string(), 20)]),
        "the header match routes to subset v3"
    );

    write_routing(&config_dir, (0, 100));
    converge(
        "a new channel sees the weight shift to v2",
        Duration::from_secs(60),
        || call(peer, &bootstrap, 40, &[], dir.path()),
        |counts| counts.len() == 1 && counts.get("reviews-v2") == Some(&40),
        || meshflow.log(),
    );
}

/// Python's grpcio xDS client (C-core).
#[test]
fn grpc_xds_client_follows_weights_and_subsets() {
    if let Some(peer) = peer_or_skip(grpcio()) {
        follows_weights_and_subsets(&peer, "proxyless-grpc", 50);
    }
}

/// Node's @grpc/grpc-js-xds, which (unlike grpcio) refuses a bootstrap without
/// `node.locality`.
#[test]
fn node_grpc_js_xds_client_follows_weights_and_subsets() {
    if let Some(peer) = peer_or_skip(grpc_js()) {
        follows_weights_and_subsets(&peer, "proxyless-grpc-node", 51);
    }
}
