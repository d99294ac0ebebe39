//! The sidecar scene most real-Envoy tests start from: the `reviews` Service on a free port
//! with pods, endpoints and subsets v1 and v2 (their backends running), Sidecar `client`
//! binding `127.0.0.1:<port>`, meshflow serving the directory, and the Envoy of pod
//! `client-abc` connected over Delta ADS with that listener in place.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::reviews::{client_sidecar_yaml, Reviews};
use super::{
    free_port, write_config, Backend, Envoy, Meshflow, ProxyNode, TestDir, XdsMode, STARTUP_TIMEOUT,
};

/// Fields drop in order: Envoy before meshflow, the directory last.
pub struct SidecarScene {
    pub envoy: Envoy,
    pub meshflow: Meshflow,
    pub v1: Backend,
    pub v2: Backend,
    pub reviews: Reviews,
    pub port: u16,
    pub config: PathBuf,
    pub dir: TestDir,
}

impl SidecarScene {
    /// Starts the scene in `127.0.<net>.0/24`; `prepare` writes more config before meshflow
    /// starts, and meshflow gets `meshflow_args`.
    pub fn start(
        envoy_bin: &Path,
        label: &str,
        net: u8,
        meshflow_args: &[&str],
        prepare: impl FnOnce(&Path),
    ) -> SidecarScene {
        Self::start_over(
            envoy_bin,
            label,
            net,
            meshflow_args,
            XdsMode::Delta,
            prepare,
        )
    }

    /// [`SidecarScene::start`] with the client speaking `mode`.
    pub fn start_over(
        envoy_bin: &Path,
        label: &str,
        net: u8,
        meshflow_args: &[&str],
        mode: XdsMode,
        prepare: impl FnOnce(&Path),
    ) -> SidecarScene {
        let dir = TestDir::new(label);
        let config = dir.subdir("config");
        let port = free_port();
        let reviews = Reviews::new(net, port, &config);
        let v1 = reviews.start_backend("v1");
        let v2 = reviews.start_backend("v2");
        reviews.write_service();
        reviews.write_pods(&["v1", "v2"]);
        reviews.write_endpoints(&["v1", "v2"]);
        reviews.write_destination_rule(&["v1", "v2"]);
        write_config(&config, "sidecar.yaml", &client_sidecar_yaml(port));
        prepare(&config);
        let meshflow = Meshflow::start_with_args(&config, dir.path(), meshflow_args);
        let envoy = client_envoy_over(
            envoy_bin,
            dir.path(),
            meshflow.xds_addr(),
            &reviews,
            port,
            mode,
        );
        SidecarScene {
            envoy,
            meshflow,
            v1,
            v2,
            reviews,
            port,
            config,
            dir,
        }
    }

    /// The sidecar's bound listener for `reviews`.
    pub fn listener(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

/// The `client-abc` sidecar's Envoy of the reviews fixture (at the fixture's address 20,
/// Delta ADS to `xds`), live, with its bound egress listener `127.0.0.1_PORT` in place.
pub fn client_envoy(
    envoy_bin: &Path,
    dir: &Path,
    xds: SocketAddr,
    reviews: &Reviews,
    port: u16,
) -> Envoy {
    client_envoy_over(envoy_bin, dir, xds, reviews, port, XdsMode::Delta)
}

/// [`client_envoy`] speaking `mode`.
pub fn client_envoy_over(
    envoy_bin: &Path,
    dir: &Path,
    xds: SocketAddr,
    reviews: &Reviews,
    port: u16,
    mode: XdsMode,
) -> Envoy {
    let node = ProxyNode::sidecar(
        "client-abc",
        "default",
        &reviews.ip(20),
        &[("app", "client")],
    );
    let envoy = Envoy::start(envoy_bin, dir, &node, xds, mode);
    envoy.wait_live(STARTUP_TIMEOUT);
    envoy.await_listener(&format!("127.0.0.1_{port}"));
    envoy
}
