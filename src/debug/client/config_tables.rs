//! `meshflow proxy-config`'s tables: one row per cluster, listener, route (per virtual
//! host and route) or endpoint, read from the Envoy resources CSDS returns.

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
use envoy_types::pb::google::protobuf::Duration;
use prost::Message;

pub(super) fn cols(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn duration(d: &Option<Duration>) -> String {
    match d {
        None => "-".into(),
        Some(d) if d.nanos == 0 => format!("{}s", d.seconds),
        Some(d) => format!("{}ms", d.seconds * 1000 + i64::from(d.nanos) / 1_000_000),
    }
}

pub(super) fn cluster_row(c: &Cluster) -> Vec<String> {
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

pub(super) fn listener_row(l: &Listener) -> Vec<String> {
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

pub(super) fn route_rows(rc: &RouteConfiguration) -> Vec<Vec<String>> {
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

pub(super) fn endpoint_rows(cla: &ClusterLoadAssignment) -> Vec<Vec<String>> {
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
