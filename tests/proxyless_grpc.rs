//! Proxyless gRPC through meshflow: Python's `grpcio` (from PyPI, installed into `.venv-test/`
//! by `scripts/install-test-deps.sh`) dials `xds:///reviews.default.svc.cluster.local:PORT`
//! with a `GRPC_XDS_BOOTSTRAP` file naming meshflow, and its calls land on gRPC servers
//! standing in for the reviews pods. gRPC's own xDS client is the subject here: it requests
//! the API listener `host:port` by name, follows it to RDS, CDS and EDS, and applies the
//! VirtualService's weights, header match and the DestinationRule's subsets itself.
//!
//! Skips loudly when the virtualenv's Python with grpcio is missing; fails instead under
//! `CI=true`.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::reviews::{Reviews, FQDN, NAMESPACE};
use support::{converge, log_tail, wait_until, write_config, Meshflow, TestDir};

const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/proxyless/grpc_peer.py");
const NET: u8 = 50;
const SERVICE_PORT: u16 = 9080;
const VIRTUAL_SERVICE_FILE: &str = "reviews-virtualservice.yaml";

/// `.venv-test/bin/python` when it can import grpc.
fn python_with_grpcio() -> Option<PathBuf> {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-test/bin/python");
    let ok = Command::new(&python)
        .args(["-c", "import grpc"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(python)
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
    fn start(python: &Path, reviews: &Reviews, versions: &[&str]) -> Servers {
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
        let mut child = Command::new(python)
            .arg(PEER)
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

/// A gRPC xDS bootstrap naming meshflow as the only server, for a client in `default`.
fn write_bootstrap(path: &Path, meshflow: &Meshflow) {
    let bootstrap = serde_json::json!({
        "xds_servers": [{
            "server_uri": meshflow.xds_addr().to_string(),
            "channel_creds": [{"type": "insecure"}],
            "server_features": ["xds_v3"],
        }],
        "node": {
            "id": format!("sidecar~127.0.{NET}.5~grpc-client.{NAMESPACE}~{NAMESPACE}.svc.cluster.local"),
            "metadata": {
                "GENERATOR": "grpc",
                "NAMESPACE": NAMESPACE,
                "LABELS": {"app": "grpc-client"},
            },
        },
    });
    std::fs::write(path, serde_json::to_vec_pretty(&bootstrap).unwrap()).unwrap();
}

/// Runs `count` calls through a fresh channel (a fresh xDS client) and tallies the answers.
fn call(
    python: &Path,
    bootstrap: &Path,
    count: usize,
    metadata: &[&str],
    dir: &Path,
) -> BTreeMap<String, usize> {
    let out_path = dir.join("call.out");
    let err_path = dir.join("call.err");
    let mut child = Command::new(python)
        .arg(PEER)
        .arg("call")
        .arg(format!("xds:///{FQDN}:{SERVICE_PORT}"))
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

/// gRPC's xDS resolver reaches the reviews backends through meshflow: the 75/25 split
/// between subsets v1 and v2 holds within sampling noise, a header match picks subset v3,
/// and a weight change reaches new channels.
#[test]
fn grpc_xds_client_follows_weights_and_subsets() {
    let Some(python) = python_with_grpcio() else {
        let on_ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
        let message =
            "no .venv-test/bin/python with grpcio: run scripts/install-test-deps.sh first";
        assert!(
            !on_ci,
            "{message} (CI is set, so this fails instead of skipping)"
        );
        let bar = "!".repeat(78);
        eprintln!("\n{bar}\nSKIPPED: {message}\n{bar}\n");
        return;
    };
    let dir = TestDir::new("proxyless-grpc");
    let config_dir = dir.subdir("config");
    let reviews = Reviews::new(NET, SERVICE_PORT, &config_dir);
    reviews.write_service();
    reviews.write_pods(&["v1", "v2", "v3"]);
    reviews.write_endpoints(&["v1", "v2", "v3"]);
    reviews.write_destination_rule(&["v1", "v2", "v3"]);
    write_routing(&config_dir, (75, 25));

    let meshflow = Meshflow::start(&config_dir, dir.path());
    let _servers = Servers::start(&python, &reviews, &["v1", "v2", "v3"]);
    let bootstrap = dir.path().join("grpc-bootstrap.json");
    write_bootstrap(&bootstrap, &meshflow);

    let split = call(&python, &bootstrap, 400, &[], dir.path());
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

    let jason = call(&python, &bootstrap, 20, &["end-user=jason"], dir.path());
    assert_eq!(
        jason,
        BTreeMap::from([("reviews-v3".to_string(), 20)]),
        "the header match routes to subset v3"
    );

    write_routing(&config_dir, (0, 100));
    converge(
        "a new channel sees the weight shift to v2",
        Duration::from_secs(60),
        || call(&python, &bootstrap, 40, &[], dir.path()),
        |counts| counts.len() == 1 && counts.get("reviews-v2") == Some(&40),
        || meshflow.log(),
    );
}
