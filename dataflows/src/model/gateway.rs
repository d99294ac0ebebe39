//! Gateway: the servers the gateway proxies it selects listen with.

use super::{ConfigKey, Labels, Protocol, ServerTls, ServerTlsMode};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Gateway {
    pub key: ConfigKey,
    pub selector: Labels,
    pub servers: Vec<GatewayServer>,
    /// Selects routers of its own namespace only (a Gateway API Gateway's deployment; an
    /// Istio Gateway selects in every namespace).
    #[serde(default)]
    pub same_namespace: bool,
}

impl Gateway {
    /// Some server is not plain HTTP (it has `tls`, or is TCP or TLS): the VirtualServices
    /// bound to the Gateway matter beyond the HTTP route configurations.
    pub fn serves_beyond_http(&self) -> bool {
        self.servers
            .iter()
            .any(|s| s.tls.is_some() || !s.protocol.is_http())
    }

    /// Some server is AUTO_PASSTHROUGH: the gateway proxies it selects route by their
    /// outbound clusters' names.
    pub fn uses_auto_passthrough(&self) -> bool {
        self.servers.iter().any(|s| {
            s.tls
                .as_deref()
                .is_some_and(|t| t.mode == ServerTlsMode::AutoPassthrough)
        })
    }

    /// Some server terminates with the workload certificate (`ISTIO_MUTUAL`): the gateway
    /// proxies it selects need their workload identity.
    pub fn uses_istio_mutual(&self) -> bool {
        self.servers.iter().any(|s| {
            s.tls
                .as_deref()
                .is_some_and(|t| t.mode == ServerTlsMode::IstioMutual)
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GatewayServer {
    pub port: u16,
    pub port_name: String,
    pub protocol: Protocol,
    pub bind: Option<String>,
    /// Hosts as `namespace/host` (`*/host` when the namespace was not given).
    pub hosts: Vec<String>,
    /// `tls.httpsRedirect` on an HTTP server: every request is answered with a 301 to https.
    #[serde(default)]
    pub https_redirect: bool,
    /// `tls` of an HTTPS or TLS server (boxed: most servers have none).
    #[serde(default)]
    pub tls: Option<Box<ServerTls>>,
    /// The server's field (`spec.servers[1]`), for errors that name it.
    #[serde(default)]
    pub field: String,
}
