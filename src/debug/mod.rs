//! The debug API (`proto/meshflow/debug/v1/debug.proto`) over the hub's state, served on
//! the debug address (loopback by default).

use crate::xds::hub::Hub;
use dataflows::model::{ProxyKind, ResourceType};
use std::sync::Arc;
use tonic::{Request, Response, Status};

#[allow(clippy::all)]
pub mod pb {
    tonic::include_proto!("meshflow.debug.v1");
}

use pb::debug_server::{Debug, DebugServer};
use pb::*;

pub struct DebugService {
    hub: Arc<Hub>,
}

impl DebugService {
    pub fn server(hub: Arc<Hub>) -> DebugServer<DebugService> {
        DebugServer::new(DebugService { hub })
    }
}

#[tonic::async_trait]
impl Debug for DebugService {
    async fn list_proxies(
        &self,
        _: Request<ListProxiesRequest>,
    ) -> Result<Response<ListProxiesResponse>, Status> {
        let resp = self.hub.read(|st| {
            let mut proxies: Vec<ProxyStatus> = st
                .proxies()
                .map(|e| ProxyStatus {
                    id: e.proxy.id.clone(),
                    namespace: e.proxy.namespace.clone(),
                    kind: match e.proxy.kind {
                        ProxyKind::Sidecar => "sidecar".into(),
                        ProxyKind::Router => "router".into(),
                    },
                    streams: e.streams() as u32,
                    types: ResourceType::ALL
                        .iter()
                        .enumerate()
                        .map(|(i, t)| TypeStatus {
                            r#type: t.short().into(),
                            resources: e.versions(*t).len() as u32,
                            acks: e.acks[i],
                            last_nack: e.last_nack[i].clone().unwrap_or_default(),
                        })
                        .collect(),
                })
                .collect();
            proxies.sort_by(|a, b| a.id.cmp(&b.id));
            ListProxiesResponse {
                epoch: st.epoch,
                proxies,
            }
        });
        Ok(Response::new(resp))
    }

    async fn list_config_errors(
        &self,
        _: Request<ListConfigErrorsRequest>,
    ) -> Result<Response<ListConfigErrorsResponse>, Status> {
        let errors = self.hub.read(|st| {
            let mut out = st.source_errors.clone();
            out.extend(
                st.errors
                    .keys()
                    .map(|e| format!("{}: {}", e.object, e.message)),
            );
            out
        });
        Ok(Response::new(ListConfigErrorsResponse { errors }))
    }
}

/// Client side of the debug API, for the command line.
pub mod cli {
    use super::pb::debug_client::DebugClient;
    use super::pb::ListProxiesRequest;
    use std::net::SocketAddr;

    /// `meshflow proxy-status`: one row per proxy, resources (acks) per type, NACK errors.
    pub async fn proxy_status(addr: SocketAddr) -> Result<String, String> {
        let mut client = DebugClient::connect(format!("http://{addr}"))
            .await
            .map_err(|e| format!("connecting to the debug API at {addr}: {e}"))?;
        let resp = client
            .list_proxies(ListProxiesRequest {})
            .await
            .map_err(|e| format!("listing proxies: {}", e.message()))?
            .into_inner();
        let mut rows = vec![vec![
            "NAME".to_string(),
            "KIND".into(),
            "CDS".into(),
            "EDS".into(),
            "LDS".into(),
            "RDS".into(),
        ]];
        let mut nacks = Vec::new();
        for p in &resp.proxies {
            let mut row = vec![p.id.clone(), p.kind.clone()];
            for t in &p.types {
                let state = if t.last_nack.is_empty() {
                    format!("{} ({} acks)", t.resources, t.acks)
                } else {
                    "NACKED".to_string()
                };
                row.push(state);
                if !t.last_nack.is_empty() {
                    nacks.push(format!("{} {}: {}", p.id, t.r#type, t.last_nack));
                }
            }
            rows.push(row);
        }
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for r in rows {
            let cells: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out.push_str(&format!("epoch {}\n", resp.epoch));
        for n in nacks {
            out.push_str(&format!("NACK {n}\n"));
        }
        Ok(out)
    }
}
