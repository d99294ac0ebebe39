//! The demo's two proxies, the bookinfo ingress gateway and the `sleep` pod's sidecar, as
//! real Envoys or as meshflow's simulated ones (`--no-envoy`), behind one way of sending them
//! a request.

use super::config::{Layout, GATEWAY_BOOTSTRAP, SERVICE_PORT, SIDECAR_BOOTSTRAP};
use super::envoy::EnvoyProcess;
use super::http::{self, Landed};
use super::simulated::Simulated;
use dataflows::simulate::Call;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// Which proxy a request goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Gateway,
    Sidecar,
}

/// How the debug commands name the proxies (`pod.namespace` of the bootstraps' node ids).
pub const GATEWAY_NAME: &str = "istio-ingressgateway-5d9f7c8b6-x2x7k.istio-system";
pub const SIDECAR_NAME: &str = "sleep.default";

/// The running proxies.
pub enum Proxies {
    Envoy {
        gateway: EnvoyProcess,
        sidecar: EnvoyProcess,
        listeners: Listeners,
    },
    Simulated {
        proxies: Simulated,
        listeners: Listeners,
    },
}

/// Where each proxy's listener is (for Envoy, where it binds; for the simulation, the
/// destination a request is simulated to).
#[derive(Clone, Copy, Debug)]
pub struct Listeners {
    pub gateway: SocketAddr,
    pub sidecar: SocketAddr,
}

impl Listeners {
    pub fn new(layout: Layout) -> Listeners {
        Listeners {
            gateway: SocketAddr::from(([127, 0, 0, 1], layout.gateway_port)),
            sidecar: SocketAddr::from((layout.sidecar_ip, SERVICE_PORT)),
        }
    }

    fn of(&self, via: Via) -> SocketAddr {
        match via {
            Via::Gateway => self.gateway,
            Via::Sidecar => self.sidecar,
        }
    }
}

impl Proxies {
    /// Two Envoys with the example's bootstraps, each started and its admin port up.
    pub async fn envoy(
        binary: &Path,
        dir: &Path,
        xds: SocketAddr,
        listeners: Listeners,
    ) -> Result<Proxies, String> {
        let gateway = EnvoyProcess::start(binary, dir, "gateway", GATEWAY_BOOTSTRAP, xds).await?;
        let sidecar = EnvoyProcess::start(binary, dir, "sidecar", SIDECAR_BOOTSTRAP, xds).await?;
        Ok(Proxies::Envoy {
            gateway,
            sidecar,
            listeners,
        })
    }

    /// Two simulated proxies with the example's bootstraps' identities.
    pub async fn simulated(xds: SocketAddr, listeners: Listeners) -> Result<Proxies, String> {
        let proxies = Simulated::start(xds, &[GATEWAY_BOOTSTRAP, SIDECAR_BOOTSTRAP]).await?;
        Ok(Proxies::Simulated { proxies, listeners })
    }

    /// `GET path` with `Host: authority` through a proxy.
    pub async fn send(&self, via: Via, authority: &str, path: &str) -> Landed {
        match self {
            Proxies::Envoy { listeners, .. } => http::get(listeners.of(via), authority, path).await,
            Proxies::Simulated { proxies, listeners } => {
                let to = listeners.of(via);
                let call = Call::get(authority, to.port(), path).to_address(&to.ip().to_string());
                let proxy = match via {
                    Via::Gateway => 0,
                    Via::Sidecar => 1,
                };
                proxies.send(proxy, call).await
            }
        }
    }

    /// An error if a proxy is gone (an Envoy that exited, with the end of its log).
    pub fn check(&mut self) -> Result<(), String> {
        match self {
            Proxies::Envoy {
                gateway, sidecar, ..
            } => {
                gateway.check_running()?;
                sidecar.check_running()
            }
            Proxies::Simulated { .. } => Ok(()),
        }
    }

    /// One line per proxy: what it is and where it listens.
    pub fn describe(&self) -> Vec<String> {
        match self {
            Proxies::Envoy {
                gateway,
                sidecar,
                listeners,
            } => vec![
                format!(
                    "gateway    Envoy (pid {}) {GATEWAY_NAME}: listener {}, admin {}",
                    gateway.pid(),
                    listeners.gateway,
                    gateway.admin
                ),
                format!(
                    "sidecar    Envoy (pid {}) {SIDECAR_NAME}: listener {}, admin {}",
                    sidecar.pid(),
                    listeners.sidecar,
                    sidecar.admin
                ),
            ],
            Proxies::Simulated { listeners, .. } => vec![
                format!(
                    "gateway    simulated {GATEWAY_NAME} (a Delta ADS client; requests to {} \
                     routed by dataflows::simulate)",
                    listeners.gateway
                ),
                format!(
                    "sidecar    simulated {SIDECAR_NAME} (requests to {} likewise)",
                    listeners.sidecar
                ),
            ],
        }
    }

    /// Waits until a request through each proxy reaches a workload of its service (the
    /// proxies have their first config), at most `timeout`.
    pub async fn wait_routing(
        &mut self,
        probes: &[(Via, &str, &str)],
        timeout: Duration,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        for (via, authority, path) in probes {
            loop {
                self.check()?;
                let landed = self.send(*via, authority, path).await;
                if matches!(&landed, Landed::Pod(pod) if pod.starts_with(authority)) {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "{authority}{path} through the {via:?} did not reach a workload within \
                         {timeout:?} (last: {landed:?})"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }
}
