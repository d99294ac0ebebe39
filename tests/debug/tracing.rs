//! `RUST_LOG=meshflow=debug` shows each epoch as a span from input to push: the runtime's
//! batching and dataflow step, the hub's apply, and every push of the epoch's changes,
//! all under `epoch{epoch=N}`. (Its own test binary: it sets RUST_LOG for the server it
//! starts, and no other test shares the process.)

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;
use support::xds_client::{node, DeltaClient, EDS};
use support::{wait_until, write_config, Meshflow, TestDir};

const SERVICE: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: default}\nspec:\n  ports: [{name: http, port: 9080}]\n";

fn slice(ip: &str) -> String {
    format!("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: reviews-abc\n  namespace: default\n  labels: {{kubernetes.io/service-name: reviews}}\naddressType: IPv4\nports:\n- {{name: http, port: 9080}}\nendpoints:\n- addresses: [\"{ip}\"]\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_log_shows_an_epoch_span_from_input_to_push() {
    let dir = TestDir::new("debug-tracing");
    let config = dir.subdir("config");
    write_config(&config, "service.yaml", SERVICE);
    write_config(&config, "slice.yaml", &slice("10.0.1.1"));
    // Safe here: this test binary runs this one test.
    std::env::set_var("RUST_LOG", "meshflow=debug");
    let debug = SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let meshflow =
        Meshflow::start_with_args(&config, dir.path(), &["--debug-addr", &debug.to_string()]);
    let mut a = DeltaClient::connect(
        meshflow.xds_addr(),
        node(
            "sidecar~10.9.1.1~a-1.default~default.svc.cluster.local",
            "default",
            &[],
        ),
    )
    .await;
    a.sync().await;
    write_config(&config, "slice.yaml", &slice("10.0.1.2"));
    let push = a.recv(Duration::from_secs(10)).await.expect("an EDS push");
    assert_eq!(push.type_url, EDS);
    // The push's epoch: the last `epoch computed` with one config change.
    let mut log = String::new();
    let found = wait_until(Duration::from_secs(10), || {
        log = meshflow.log();
        let Some(epoch) = log
            .lines()
            .rev()
            .filter(|l| l.contains("epoch computed") && l.contains("config_changes=2"))
            .filter_map(|l| l.split("epoch{epoch=").nth(1)?.split('}').next())
            .next()
            .map(str::to_string)
        else {
            return false;
        };
        let span = format!("epoch{{epoch={epoch}}}: ");
        let has = |what: &[&str]| {
            log.lines()
                .any(|l| l.contains(&span) && what.iter().all(|w| l.contains(w)))
        };
        has(&["meshflow::runtime: epoch batched"])
            && has(&["meshflow::runtime: epoch computed"])
            && has(&["meshflow::hub: hub applied epoch"])
            && has(&["meshflow::hub: push", "rtype=\"EDS\""])
    });
    assert!(found, "no epoch span from input to push in the log:\n{log}");
}
