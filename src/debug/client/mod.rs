//! The command line's client of the debug port: `meshflow proxy-status`, `meshflow diff`,
//! `meshflow watch` and `meshflow explain` (Debug API), and `meshflow proxy-config` and
//! `meshflow authz check` (CSDS). Each command connects, asks, turns the answer into its domain type
//! ([`crate::debug::model`], through [`crate::debug::pb`]) and prints it: tables and text
//! by default ([`render`], [`config_tables`]); `-o json` prints the same JSON the HTTP
//! endpoints serve (`/debug/proxies`, `/debug/diff`, `/debug/watch`, `/debug/explain`;
//! Envoy's JSON form of the resources), `-o yaml` the same as YAML.
//!
//! The server side of the port never imports this module.

pub mod authz_check;
pub mod config_tables;
pub mod render;

use crate::debug::envoy_json::{config_dump, print, print_resources, DumpEntry, Format};
use crate::debug::model::{self, resolve_proxy, DiffQuery, Explanation, ProxyList};
use crate::debug::pb::debug_client::DebugClient;
use crate::debug::pb::{self, ListProxiesRequest};
use config_tables::{cluster_row, cols, endpoint_rows, listener_row, route_rows};
use dataflows::model::{Body, ResourceType};
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
    /// SDS secrets (as `istioctl proxy-config secret`), shown redacted: name, kind and the
    /// certificate's fingerprint.
    Secret,
    /// Every type (as `istioctl proxy-config all`); with NAME, the one resource it names.
    All,
}

impl ConfigKind {
    /// The types shown, in Envoy's config-dump order (clusters, listeners, routes,
    /// endpoints, secrets).
    fn types(self) -> &'static [ResourceType] {
        match self {
            ConfigKind::Cluster => &[ResourceType::Cluster],
            ConfigKind::Listener => &[ResourceType::Listener],
            ConfigKind::Route => &[ResourceType::Route],
            ConfigKind::Endpoint => &[ResourceType::Endpoint],
            ConfigKind::Secret => &[ResourceType::Secret],
            ConfigKind::All => &[
                ResourceType::Cluster,
                ResourceType::Listener,
                ResourceType::Route,
                ResourceType::Endpoint,
                ResourceType::Secret,
            ],
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
pub fn use_color() -> bool {
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

/// A proxy's pushes and ACKs/NACKs as they happen (the stream `meshflow watch` prints),
/// from the moment it is opened.
pub struct Watch {
    stream: tonic::Streaming<pb::WatchEvent>,
}

impl Watch {
    /// Subscribes: every event after this returns is delivered.
    pub async fn open(addr: SocketAddr, proxy: &str) -> Result<Watch, String> {
        let mut client = debug_client(addr).await?;
        let stream = client
            .watch(pb::WatchRequest {
                proxy: proxy.to_string(),
            })
            .await
            .map_err(|e| format!("watch: {}", e.message()))?
            .into_inner();
        Ok(Watch { stream })
    }

    /// The next event; an error when the server ends the watch.
    pub async fn next(&mut self) -> Result<model::WatchEvent, String> {
        match self.stream.message().await {
            Ok(Some(e)) => model::WatchEvent::try_from(e),
            Ok(None) => Err("the server ended the watch".into()),
            Err(e) => Err(format!("watch: {}", e.message())),
        }
    }
}

/// `meshflow watch PROXY`: prints every push and ACK/NACK as it happens, until the server
/// goes away (or the user stops it). `-o json` prints the lines of `/debug/watch`.
pub async fn watch(addr: SocketAddr, proxy: &str, output: Output) -> Result<String, String> {
    use std::io::Write;
    let mut watch = Watch::open(addr, proxy).await?;
    let color = use_color();
    eprintln!("watching {proxy} (Ctrl-C to stop)");
    loop {
        let event = watch.next().await?;
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

/// Every connected proxy's sync state, as `proxy-status` fetches it (`names`: with each
/// stream's subscribed names, which only the JSON and YAML outputs show).
pub async fn list_proxies(addr: SocketAddr, names: bool) -> Result<ProxyList, String> {
    let mut client = debug_client(addr).await?;
    Ok(client
        .list_proxies(ListProxiesRequest {
            without_names: !names,
        })
        .await
        .map_err(|e| format!("listing proxies: {}", e.message()))?
        .into_inner()
        .into())
}

/// `meshflow proxy-status`: one row per connected proxy with its sync state per type (and
/// the resource count), then the NACK messages.
pub async fn proxy_status(addr: SocketAddr, output: Output) -> Result<String, String> {
    // The table shows no subscribed names: not asking for them keeps the hub's lock short.
    let list = list_proxies(addr, output.format().is_some()).await?;
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

/// One resource a proxy holds, as CSDS lists it.
struct Fetched {
    rtype: ResourceType,
    name: String,
    version: String,
    body: Vec<u8>,
}

/// The node id `proxy` names, and the resources of `types` it holds, fetched over CSDS.
async fn fetch_resources(
    addr: SocketAddr,
    proxy: &str,
    types: &[ResourceType],
) -> Result<(String, Vec<Fetched>), String> {
    let listed = list_proxies(addr, false).await?;
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
    let resources = config
        .generic_xds_configs
        .into_iter()
        .filter_map(|g| {
            let rtype = ResourceType::from_type_url(&g.type_url)?;
            types.contains(&rtype).then_some(Fetched {
                rtype,
                name: g.name,
                version: g.version_info,
                body: g.xds_config?.value,
            })
        })
        .collect();
    Ok((id, resources))
}

/// `meshflow proxy-config {cluster|listener|route|endpoint|all} PROXY [NAME]`: a table per
/// type (tables of several types apart by a blank line), or Envoy's JSON: the resources of
/// one type as a list, of `all` as a config dump (`/debug/config_dump`'s form). NAME keeps
/// the one resource it names ([`model::resolve_resource`], among the kind's types).
pub async fn proxy_config(
    addr: SocketAddr,
    kind: ConfigKind,
    proxy: &str,
    name: Option<&str>,
    output: Output,
) -> Result<String, String> {
    let (id, mut resources) = fetch_resources(addr, proxy, kind.types()).await?;
    // By name, as the config dump lists them (CSDS lists a proxy's own resources first).
    resources.sort_by(|a, b| a.name.cmp(&b.name));
    let mut types = kind.types().to_vec();
    if let Some(wanted) = name {
        let holds = |t, n: &str| resources.iter().any(|r| r.rtype == t && r.name == n);
        let (t, n) = model::resolve_resource(&id, wanted, holds).map_err(|e| e.to_string())?;
        if !types.contains(&t) {
            let kind = clap::ValueEnum::to_possible_value(&kind)
                .map(|v| v.get_name().to_string())
                .unwrap_or_default();
            return Err(format!(
                "{wanted:?} names a {}, not a {kind}",
                model::type_word(t)
            ));
        }
        resources.retain(|r| r.rtype == t && r.name == n);
        if resources.is_empty() {
            return Err(model::not_held(&id, t, &n).to_string());
        }
        types = vec![t];
    }
    let of_type = |t: ResourceType| -> Vec<(String, Vec<u8>)> {
        resources
            .iter()
            .filter(|r| r.rtype == t)
            .map(|r| (r.name.clone(), r.body.clone()))
            .collect()
    };
    match (output.format(), types.as_slice()) {
        (Some(format), [t]) => print_resources(*t, &of_type(*t), format),
        (Some(format), _) => {
            let per_type: Vec<(ResourceType, Vec<DumpEntry>)> = types
                .iter()
                .map(|t| {
                    let entries = resources
                        .iter()
                        .filter(|r| r.rtype == *t)
                        .map(|r| DumpEntry {
                            name: r.name.clone(),
                            version: r.version.clone(),
                            body: Some(Body(r.body.as_slice().into())),
                        })
                        .collect();
                    (*t, entries)
                })
                .collect();
            let dump = config_dump(&per_type);
            match format {
                Format::Json => Ok(dump),
                Format::Yaml => {
                    let value: serde_json::Value = serde_json::from_str(&dump)
                        .map_err(|e| format!("the config dump is not JSON: {e}"))?;
                    print(&value, Format::Yaml)
                }
            }
        }
        (None, _) => {
            let tables: Result<Vec<String>, String> = types
                .iter()
                .map(|t| {
                    let rows = config_rows(*t, &of_type(*t))?;
                    Ok(render::table(&rows, |_, padded| padded))
                })
                .collect();
            Ok(tables?.join("\n"))
        }
    }
}

/// The table of `proxy-config` for type `t`: a header, then rows of the decoded resources.
fn config_rows(
    t: ResourceType,
    resources: &[(String, Vec<u8>)],
) -> Result<Vec<Vec<String>>, String> {
    fn decode<M: Message + Default>(name: &str, body: &[u8]) -> Result<M, String> {
        M::decode(body).map_err(|e| format!("decoding {name}: {e}"))
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    match t {
        ResourceType::Cluster => {
            rows.push(cols(&["NAME", "TYPE", "LB POLICY", "CONNECT TIMEOUT"]));
            for (name, body) in resources {
                rows.push(cluster_row(&decode::<Cluster>(name, body)?));
            }
        }
        ResourceType::Listener => {
            rows.push(cols(&["NAME", "ADDRESS", "PORT", "CHAINS", "DESTINATION"]));
            for (name, body) in resources {
                rows.push(listener_row(&decode::<Listener>(name, body)?));
            }
        }
        ResourceType::Route => {
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
        ResourceType::Endpoint => {
            rows.push(cols(&["ADDRESS", "STATUS", "WEIGHT", "CLUSTER"]));
            for (name, body) in resources {
                rows.extend(endpoint_rows(&decode::<ClusterLoadAssignment>(name, body)?));
            }
        }
        ResourceType::Secret => {
            rows.push(cols(&["NAME", "KIND", "CERTIFICATE"]));
            for (name, body) in resources {
                rows.push(secret_row(&decode(name, body)?));
            }
        }
    }
    Ok(rows)
}

/// A Secret as the debug port serves it (already redacted): its name, what it holds, and
/// its certificate's fingerprint.
fn secret_row(
    s: &envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret,
) -> Vec<String> {
    use envoy_types::pb::envoy::config::core::v3::data_source::Specifier;
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::secret::Type;
    let (kind, cert) = match &s.r#type {
        Some(Type::TlsCertificate(c)) => {
            let shown = match c
                .certificate_chain
                .as_ref()
                .and_then(|d| d.specifier.as_ref())
            {
                Some(Specifier::InlineString(t)) => t.clone(),
                Some(Specifier::Filename(f)) => f.clone(),
                _ => "-".into(),
            };
            ("certificate", shown)
        }
        Some(Type::ValidationContext(_)) => ("CA bundle", "-".into()),
        _ => ("other", "-".into()),
    };
    vec![s.name.clone(), kind.into(), cert]
}
