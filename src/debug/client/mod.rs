//! The command line's client of the debug port: `meshflow proxy-status`, `meshflow diff`,
//! `meshflow watch` and `meshflow explain` (Debug API), and `meshflow proxy-config`
//! (CSDS). Each command connects, asks, turns the answer into its domain type
//! ([`crate::debug::model`], through [`crate::debug::pb`]) and prints it: tables and text
//! by default ([`render`], [`config_tables`]); `-o json` prints the same JSON the HTTP
//! endpoints serve (`/debug/proxies`, `/debug/diff`, `/debug/watch`, `/debug/explain`;
//! Envoy's JSON form of the resources), `-o yaml` the same as YAML.
//!
//! The server side of the port never imports this module.

pub mod config_tables;
pub mod render;

use crate::debug::envoy_json::{print, print_resources, Format};
use crate::debug::model::{self, resolve_proxy, DiffQuery, Explanation, ProxyList};
use crate::debug::pb::debug_client::DebugClient;
use crate::debug::pb::{self, ListProxiesRequest};
use config_tables::{cluster_row, cols, endpoint_rows, listener_row, route_rows};
use dataflows::model::ResourceType;
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::r#type::matcher::v3::NodeMatcher;
use envoy_types::pb::envoy::r#type::matcher::v3::{string_matcher::MatchPattern, StringMatcher};
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
use envoy_types::pb::envoy::service::status::v3::ClientStatusRequest;
use prost::Message;
use std::io::IsTerminal;
use std::net::SocketAddr;

/// How a command prints its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// JSON (resources in Envoy's own JSON form, as in its admin config_dump).
    Json,
    /// The same as YAML.
    Yaml,
}

/// The resource kinds of `proxy-config`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ConfigKind {
    Cluster,
    Listener,
    Route,
    Endpoint,
}

impl ConfigKind {
    fn rtype(self) -> ResourceType {
        match self {
            ConfigKind::Cluster => ResourceType::Cluster,
            ConfigKind::Listener => ResourceType::Listener,
            ConfigKind::Route => ResourceType::Route,
            ConfigKind::Endpoint => ResourceType::Endpoint,
        }
    }
}

impl Output {
    /// The structured format, `None` for a table.
    fn format(self) -> Option<Format> {
        match self {
            Output::Table => None,
            Output::Json => Some(Format::Json),
            Output::Yaml => Some(Format::Yaml),
        }
    }
}

/// Colour for terminals that want it (`NO_COLOR` unset, stdout a terminal).
fn use_color() -> bool {
    std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}

async fn debug_client(addr: SocketAddr) -> Result<DebugClient<tonic::transport::Channel>, String> {
    Ok(DebugClient::connect(format!("http://{addr}"))
        .await
        .map_err(|e| format!("connecting to the debug API at {addr}: {e}"))?
        .max_decoding_message_size(usize::MAX))
}

/// `meshflow diff PROXY [--from E | --since 5m] [--to E]`: `+`/`-` lines per resource,
/// coloured on a terminal; `-o json|yaml` the JSON of `/debug/diff`.
pub async fn diff(
    addr: SocketAddr,
    proxy: &str,
    from: Option<u64>,
    since: Option<String>,
    to: Option<u64>,
    output: Output,
) -> Result<String, String> {
    let mut client = debug_client(addr).await?;
    let query = DiffQuery {
        proxy: proxy.to_string(),
        from,
        to,
        since,
    };
    let answer = client
        .diff(pb::DiffRequest::from(query))
        .await
        .map_err(|e| format!("diff: {}", e.message()))?
        .into_inner();
    let d = model::Diff::from(answer);
    match output.format() {
        Some(format) => print(&model::to_json(&d), format),
        None => Ok(render::diff(&d, use_color())),
    }
}

/// `meshflow watch PROXY`: prints every push and ACK/NACK as it happens, until the server
/// goes away (or the user stops it). `-o json` prints the lines of `/debug/watch`.
pub async fn watch(addr: SocketAddr, proxy: &str, output: Output) -> Result<String, String> {
    use std::io::Write;
    let mut client = debug_client(addr).await?;
    let mut stream = client
        .watch(pb::WatchRequest {
            proxy: proxy.to_string(),
        })
        .await
        .map_err(|e| format!("watch: {}", e.message()))?
        .into_inner();
    let color = use_color();
    eprintln!("watching {proxy} (Ctrl-C to stop)");
    loop {
        let event = match stream.message().await {
            Ok(Some(e)) => model::WatchEvent::try_from(e)?,
            Ok(None) => return Err("the server ended the watch".into()),
            Err(e) => return Err(format!("watch: {}", e.message())),
        };
        let text = match output.format() {
            None => render::watch_event(&event, color),
            Some(Format::Json) => model::to_json(&event).to_string() + "\n",
            Some(Format::Yaml) => format!("---\n{}", print(&model::to_json(&event), Format::Yaml)?),
        };
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())
            .and_then(|_| out.flush())
            .map_err(|e| format!("writing: {e}"))?;
    }
}

async fn list_proxies(addr: SocketAddr) -> Result<ProxyList, String> {
    let mut client = debug_client(addr).await?;
    Ok(client
        .list_proxies(ListProxiesRequest {})
        .await
        .map_err(|e| format!("listing proxies: {}", e.message()))?
        .into_inner()
        .into())
}

/// `meshflow proxy-status`: one row per connected proxy with its sync state per type (and
/// the resource count), then the NACK messages.
pub async fn proxy_status(addr: SocketAddr, output: Output) -> Result<String, String> {
    let list = list_proxies(addr).await?;
    match output.format() {
        Some(format) => print(&model::to_json(&list), format),
        None => Ok(render::proxy_status(&list, use_color())),
    }
}

/// `meshflow explain PROXY TYPE/NAME`: a table of the input objects, or the same as
/// JSON/YAML (the fields of `/debug/explain`, in the order of [`Explanation`]).
pub async fn explain(
    addr: SocketAddr,
    proxy: &str,
    resource: &str,
    output: Output,
) -> Result<String, String> {
    let mut client = debug_client(addr).await?;
    let answer = client
        .explain(pb::ExplainRequest {
            proxy: proxy.to_string(),
            resource: resource.to_string(),
        })
        .await
        .map_err(|e| e.message().to_string())?
        .into_inner();
    let e = Explanation::from(answer);
    match output.format() {
        Some(format) => print(&e, format),
        None => Ok(render::explanation(&e)),
    }
}

/// The resources of one type a proxy holds, fetched over CSDS: (name, encoded body).
async fn fetch_resources(
    addr: SocketAddr,
    proxy: &str,
    t: ResourceType,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    let listed = list_proxies(addr).await?;
    let id = resolve_proxy(listed.proxies.iter().map(|p| p.id.as_str()), proxy)
        .map_err(|e| e.to_string())?;
    let mut client = ClientStatusDiscoveryServiceClient::connect(format!("http://{addr}"))
        .await
        .map_err(|e| format!("connecting to CSDS at {addr}: {e}"))?
        .max_decoding_message_size(usize::MAX);
    let resp = client
        .fetch_client_status(ClientStatusRequest {
            node_matchers: vec![NodeMatcher {
                node_id: Some(StringMatcher {
                    match_pattern: Some(MatchPattern::Exact(id.clone())),
                    ignore_case: false,
                }),
                node_metadatas: vec![],
            }],
            ..Default::default()
        })
        .await
        .map_err(|e| format!("CSDS: {}", e.message()))?
        .into_inner();
    let config = resp
        .config
        .into_iter()
        .find(|c| c.node.as_ref().is_some_and(|n| n.id == id))
        .ok_or_else(|| format!("proxy {id} disconnected"))?;
    Ok(config
        .generic_xds_configs
        .into_iter()
        .filter(|g| g.type_url == t.type_url())
        .filter_map(|g| Some((g.name, g.xds_config?.value)))
        .collect())
}

/// `meshflow proxy-config {cluster|listener|route|endpoint} PROXY`.
pub async fn proxy_config(
    addr: SocketAddr,
    kind: ConfigKind,
    proxy: &str,
    output: Output,
) -> Result<String, String> {
    let t = kind.rtype();
    let resources = fetch_resources(addr, proxy, t).await?;
    if let Some(format) = output.format() {
        return print_resources(t, &resources, format);
    }
    let rows = config_rows(kind, &resources)?;
    Ok(render::table(&rows, |_, padded| padded))
}

/// The table of `proxy-config`: a header, then rows of the decoded resources.
fn config_rows(
    kind: ConfigKind,
    resources: &[(String, Vec<u8>)],
) -> Result<Vec<Vec<String>>, String> {
    fn decode<M: Message + Default>(name: &str, body: &[u8]) -> Result<M, String> {
        M::decode(body).map_err(|e| format!("decoding {name}: {e}"))
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    match kind {
        ConfigKind::Cluster => {
            rows.push(cols(&["NAME", "TYPE", "LB POLICY", "CONNECT TIMEOUT"]));
            for (name, body) in resources {
                rows.push(cluster_row(&decode::<Cluster>(name, body)?));
            }
        }
        ConfigKind::Listener => {
            rows.push(cols(&["NAME", "ADDRESS", "PORT", "CHAINS", "DESTINATION"]));
            for (name, body) in resources {
                rows.push(listener_row(&decode::<Listener>(name, body)?));
            }
        }
        ConfigKind::Route => {
            rows.push(cols(&[
                "NAME",
                "VIRTUAL HOST",
                "DOMAINS",
                "MATCH",
                "DESTINATION",
            ]));
            for (name, body) in resources {
                rows.extend(route_rows(&decode::<RouteConfiguration>(name, body)?));
            }
        }
        ConfigKind::Endpoint => {
            rows.push(cols(&["ADDRESS", "STATUS", "WEIGHT", "CLUSTER"]));
            for (name, body) in resources {
                rows.extend(endpoint_rows(&decode::<ClusterLoadAssignment>(name, body)?));
            }
        }
    }
    Ok(rows)
}
