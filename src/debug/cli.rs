//! Client side of the debug port, for the command line: `meshflow proxy-status`,
//! `meshflow diff` and `meshflow watch` (Debug API), and `meshflow proxy-config` (CSDS). Tables by default; `-o json` prints the same JSON
//! the HTTP endpoints serve (`/debug/proxies`; Envoy's JSON form of the resources), `-o
//! yaml` the same as YAML.

use super::envoy_json::{print, print_resources, Format};
use super::pb::debug_client::DebugClient;
use super::pb::{ListProxiesRequest, ListProxiesResponse};
use super::status::{proxies_json, resolve_proxy};
use dataflows::model::ResourceType;
use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
use envoy_types::pb::envoy::config::core::v3::{address, socket_address, Address, HealthStatus};
use envoy_types::pb::envoy::config::endpoint::v3::{lb_endpoint, ClusterLoadAssignment};
use envoy_types::pb::envoy::config::listener::v3::{filter, Listener};
use envoy_types::pb::envoy::config::route::v3::{
    route, route_action, route_match, RouteConfiguration,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, HttpConnectionManager,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use envoy_types::pb::envoy::r#type::matcher::v3::NodeMatcher;
use envoy_types::pb::envoy::r#type::matcher::v3::{string_matcher::MatchPattern, StringMatcher};
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
use envoy_types::pb::envoy::service::status::v3::ClientStatusRequest;
use envoy_types::pb::google::protobuf::Duration;
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

/// Aligned columns, two spaces apart; `paint` may wrap a padded cell in colour codes (which
/// do not count towards the width).
pub(crate) fn table(rows: &[Vec<String>], paint: impl Fn(&str, String) -> String) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| paint(c, format!("{c:<w$}")))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
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
    let resp = client
        .diff(super::pb::DiffRequest {
            proxy: proxy.to_string(),
            from_epoch: from,
            to_epoch: to,
            since: since.unwrap_or_default(),
        })
        .await
        .map_err(|e| format!("diff: {}", e.message()))?
        .into_inner();
    match output.format() {
        Some(format) => print(&super::diff::to_json(&resp), format),
        None => Ok(super::diff::to_text(&resp, use_color())),
    }
}

/// `meshflow watch PROXY`: prints every push and ACK/NACK as it happens, until the server
/// goes away (or the user stops it). `-o json` prints the lines of `/debug/watch`.
pub async fn watch(addr: SocketAddr, proxy: &str, output: Output) -> Result<String, String> {
    use std::io::Write;
    let mut client = debug_client(addr).await?;
    let mut stream = client
        .watch(super::pb::WatchRequest {
            proxy: proxy.to_string(),
        })
        .await
        .map_err(|e| format!("watch: {}", e.message()))?
        .into_inner();
    let color = use_color();
    eprintln!("watching {proxy} (Ctrl-C to stop)");
    loop {
        let event = match stream.message().await {
            Ok(Some(e)) => e,
            Ok(None) => return Err("the server ended the watch".into()),
            Err(e) => return Err(format!("watch: {}", e.message())),
        };
        let text = match output.format() {
            None => super::watch::to_text(&event, color),
            Some(Format::Json) => super::watch::to_json(&event).to_string() + "\n",
            Some(Format::Yaml) => format!(
                "---\n{}",
                print(&super::watch::to_json(&event), Format::Yaml)?
            ),
        };
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())
            .and_then(|_| out.flush())
            .map_err(|e| format!("writing: {e}"))?;
    }
}

async fn list_proxies(addr: SocketAddr) -> Result<ListProxiesResponse, String> {
    let mut client = debug_client(addr).await?;
    Ok(client
        .list_proxies(ListProxiesRequest {})
        .await
        .map_err(|e| format!("listing proxies: {}", e.message()))?
        .into_inner())
}

/// `meshflow proxy-status`: one row per connected proxy with its sync state per type (and
/// the resource count), then the NACK messages.
pub async fn proxy_status(addr: SocketAddr, output: Output) -> Result<String, String> {
    let resp = list_proxies(addr).await?;
    if let Some(format) = output.format() {
        return print(&proxies_json(&resp), format);
    }
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
            if t.sync == "STALE" {
                let age = std::time::Duration::from_secs_f64(t.stale_seconds.max(0.0));
                row.push(format!("STALE ({})", super::status::short_age(age)));
            } else {
                row.push(format!("{} ({})", t.sync, t.resources));
            }
            if !t.last_nack.is_empty() {
                nacks.push(format!("{} {}: {}", p.id, t.r#type, t.last_nack));
            }
        }
        rows.push(row);
    }
    let color = use_color();
    let mut out = table(&rows, |cell, padded| {
        let code = match cell.split(" (").next() {
            _ if !color => None,
            Some("SYNCED") => Some("32"),
            Some("STALE") => Some("33"),
            Some("NACKED") => Some("31"),
            _ => None,
        };
        match code {
            Some(c) => format!("\x1b[{c}m{padded}\x1b[0m"),
            None => padded,
        }
    });
    out.push_str(&format!(
        "{} proxies, epoch {}\n",
        resp.proxies.len(),
        resp.epoch
    ));
    for n in nacks {
        out.push_str(&format!("NACK {n}\n"));
    }
    Ok(out)
}

/// The resources of one type a proxy holds, fetched over CSDS: (name, encoded body).
async fn fetch_resources(
    addr: SocketAddr,
    proxy: &str,
    t: ResourceType,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    let listed = list_proxies(addr).await?;
    let id = resolve_proxy(listed.proxies.iter().map(|p| p.id.as_str()), proxy)?;
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
    let decode_err = |name: &str, e: prost::DecodeError| format!("decoding {name}: {e}");
    let mut rows: Vec<Vec<String>> = Vec::new();
    match kind {
        ConfigKind::Cluster => {
            rows.push(cols(&["NAME", "TYPE", "LB POLICY", "CONNECT TIMEOUT"]));
            for (name, body) in &resources {
                let c = Cluster::decode(body.as_slice()).map_err(|e| decode_err(name, e))?;
                rows.push(cluster_row(&c));
            }
        }
        ConfigKind::Listener => {
            rows.push(cols(&["NAME", "ADDRESS", "PORT", "CHAINS", "DESTINATION"]));
            for (name, body) in &resources {
                let l = Listener::decode(body.as_slice()).map_err(|e| decode_err(name, e))?;
                rows.push(listener_row(&l));
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
            for (name, body) in &resources {
                let rc =
                    RouteConfiguration::decode(body.as_slice()).map_err(|e| decode_err(name, e))?;
                rows.extend(route_rows(&rc));
            }
        }
        ConfigKind::Endpoint => {
            rows.push(cols(&["ADDRESS", "STATUS", "WEIGHT", "CLUSTER"]));
            for (name, body) in &resources {
                let cla = ClusterLoadAssignment::decode(body.as_slice())
                    .map_err(|e| decode_err(name, e))?;
                rows.extend(endpoint_rows(&cla));
            }
        }
    }
    Ok(table(&rows, |_, padded| padded))
}

fn cols(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn duration(d: &Option<Duration>) -> String {
    match d {
        None => "-".into(),
        Some(d) if d.nanos == 0 => format!("{}s", d.seconds),
        Some(d) => format!("{}ms", d.seconds * 1000 + i64::from(d.nanos) / 1_000_000),
    }
}

fn cluster_row(c: &Cluster) -> Vec<String> {
    let kind = match &c.cluster_discovery_type {
        Some(cluster::ClusterDiscoveryType::Type(t)) => cluster::DiscoveryType::try_from(*t)
            .map(|d| d.as_str_name().to_string())
            .unwrap_or_else(|_| t.to_string()),
        Some(cluster::ClusterDiscoveryType::ClusterType(ct)) => ct.name.clone(),
        // Envoy's default discovery type.
        None => "STATIC".into(),
    };
    let lb = cluster::LbPolicy::try_from(c.lb_policy)
        .map(|p| p.as_str_name().to_string())
        .unwrap_or_else(|_| c.lb_policy.to_string());
    vec![c.name.clone(), kind, lb, duration(&c.connect_timeout)]
}

fn socket(a: &Option<Address>) -> (String, String) {
    match a.as_ref().and_then(|a| a.address.as_ref()) {
        Some(address::Address::SocketAddress(s)) => {
            let port = match &s.port_specifier {
                Some(socket_address::PortSpecifier::PortValue(p)) => p.to_string(),
                Some(socket_address::PortSpecifier::NamedPort(n)) => n.clone(),
                None => "-".into(),
            };
            (s.address.clone(), port)
        }
        Some(address::Address::Pipe(p)) => (p.path.clone(), "-".into()),
        Some(address::Address::EnvoyInternalAddress(_)) => ("internal".into(), "-".into()),
        None => ("-".into(), "-".into()),
    }
}

fn listener_row(l: &Listener) -> Vec<String> {
    let (addr, port) = socket(&l.address);
    let chains = l.filter_chains.len() + usize::from(l.default_filter_chain.is_some());
    let mut dests: Vec<String> = Vec::new();
    for chain in l.filter_chains.iter().chain(l.default_filter_chain.iter()) {
        for f in &chain.filters {
            let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
                continue;
            };
            let d = if any.type_url.ends_with(".HttpConnectionManager") {
                match HttpConnectionManager::decode(any.value.as_slice())
                    .ok()
                    .and_then(|h| h.route_specifier)
                {
                    Some(RouteSpecifier::Rds(r)) => format!("Route: {}", r.route_config_name),
                    Some(RouteSpecifier::RouteConfig(rc)) => format!("Inline route: {}", rc.name),
                    _ => "HTTP".into(),
                }
            } else if any.type_url.ends_with(".TcpProxy") {
                match TcpProxy::decode(any.value.as_slice())
                    .ok()
                    .and_then(|t| t.cluster_specifier)
                {
                    Some(tcp_proxy::ClusterSpecifier::Cluster(c)) => format!("Cluster: {c}"),
                    Some(tcp_proxy::ClusterSpecifier::WeightedClusters(w)) => format!(
                        "Clusters: {}",
                        w.clusters
                            .iter()
                            .map(|c| c.name.as_str())
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                    None => "TCP".into(),
                }
            } else {
                continue;
            };
            if !dests.contains(&d) {
                dests.push(d);
            }
        }
    }
    let dest = if dests.is_empty() {
        "-".to_string()
    } else {
        dests.join("; ")
    };
    vec![l.name.clone(), addr, port, chains.to_string(), dest]
}

fn route_rows(rc: &RouteConfiguration) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for vh in &rc.virtual_hosts {
        let domains = match vh.domains.as_slice() {
            [] => "-".to_string(),
            [one] => one.clone(),
            [first, rest @ ..] => format!("{first} +{}", rest.len()),
        };
        if vh.routes.is_empty() {
            rows.push(vec![
                rc.name.clone(),
                vh.name.clone(),
                domains.clone(),
                "-".into(),
                "-".into(),
            ]);
        }
        for r in &vh.routes {
            rows.push(vec![
                rc.name.clone(),
                vh.name.clone(),
                domains.clone(),
                route_match(r),
                route_destination(r),
            ]);
        }
    }
    rows
}

fn route_match(r: &envoy_types::pb::envoy::config::route::v3::Route) -> String {
    let Some(m) = &r.r#match else {
        return "-".into();
    };
    let mut s = match &m.path_specifier {
        Some(route_match::PathSpecifier::Prefix(p)) => format!("{p}*"),
        Some(route_match::PathSpecifier::Path(p)) => p.clone(),
        Some(route_match::PathSpecifier::SafeRegex(re)) => format!("~{}", re.regex),
        Some(route_match::PathSpecifier::PathSeparatedPrefix(p)) => format!("{p}/*"),
        Some(_) => "(custom)".into(),
        None => "-".into(),
    };
    for h in &m.headers {
        s.push_str(&format!(" [{}]", h.name));
    }
    s
}

fn route_destination(r: &envoy_types::pb::envoy::config::route::v3::Route) -> String {
    match &r.action {
        Some(route::Action::Route(a)) => match &a.cluster_specifier {
            Some(route_action::ClusterSpecifier::Cluster(c)) => c.clone(),
            Some(route_action::ClusterSpecifier::WeightedClusters(w)) => w
                .clusters
                .iter()
                .map(|c| format!("{} {}", c.name, c.weight.map_or(0, |w| w.value)))
                .collect::<Vec<_>>()
                .join(", "),
            Some(route_action::ClusterSpecifier::ClusterHeader(h)) => format!("header {h}"),
            Some(_) => "(plugin)".into(),
            None => "-".into(),
        },
        Some(route::Action::Redirect(_)) => "redirect".into(),
        Some(route::Action::DirectResponse(d)) => format!("direct response {}", d.status),
        Some(_) => "(other)".into(),
        None => "-".into(),
    }
}

fn endpoint_rows(cla: &ClusterLoadAssignment) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for locality in &cla.endpoints {
        for lb in &locality.lb_endpoints {
            let (addr, port) = match &lb.host_identifier {
                Some(lb_endpoint::HostIdentifier::Endpoint(e)) => socket(&e.address),
                Some(lb_endpoint::HostIdentifier::EndpointName(n)) => (n.clone(), "-".into()),
                None => ("-".into(), "-".into()),
            };
            let status = HealthStatus::try_from(lb.health_status)
                .map(|h| h.as_str_name().to_string())
                .unwrap_or_else(|_| lb.health_status.to_string());
            let weight = lb
                .load_balancing_weight
                .map_or("-".to_string(), |w| w.value.to_string());
            rows.push(vec![
                format!("{addr}:{port}"),
                status,
                weight,
                cla.cluster_name.clone(),
            ]);
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let rows = vec![cols(&["A", "LONGER"]), cols(&["value", "x"])];
        assert_eq!(table(&rows, |_, p| p), "A      LONGER\nvalue  x\n");
    }

    #[test]
    fn durations() {
        assert_eq!(
            duration(&Some(Duration {
                seconds: 10,
                nanos: 0
            })),
            "10s"
        );
        assert_eq!(
            duration(&Some(Duration {
                seconds: 0,
                nanos: 250_000_000
            })),
            "250ms"
        );
    }
}
