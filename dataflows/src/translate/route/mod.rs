//! RDS: sidecar route configurations named by port (`9080`) with one virtual host per
//! visible service, and gateway route configurations (`http.8080`) from the
//! VirtualServices bound to the gateway. This file builds the route configurations and
//! their virtual hosts; `http_routes.rs` turns a VirtualService's HTTP routes into Envoy
//! routes, from the matches of `matches.rs` and the actions of `actions.rs`.

mod actions;
mod http_routes;
mod matches;

pub use actions::resolve_port;
pub use http_routes::{vs_routes, CORS_FILTER, FAULT_FILTER, MESH};

use crate::model::{
    Hashing, ResolvedVs, Resource, ResourceType, Retries, ScopeKey, Service, Source, UnknownHosts,
};
use crate::translate::hosts::host_matches;
use crate::translate::{duration_ms, outbound_cluster_name};
use actions::{hashed, retries_policy};
use envoy_types::pb::envoy::config::route::v3::virtual_host;
use envoy_types::pb::envoy::config::route::v3::{
    route::Action, route_action::ClusterSpecifier, DirectResponseAction, Route, RouteAction,
    RouteConfiguration, VirtualHost,
};
use envoy_types::pb::google::protobuf::BoolValue;
use matches::route_match;
use prost::Message;
use std::collections::{BTreeMap, BTreeSet};

/// A gateway route configuration's domains, each with its VirtualServices (in precedence
/// order) and the gateways (`namespace/name`) each came through.
pub type GatewayVhosts = BTreeMap<String, Vec<(ResolvedVs, Vec<String>)>>;

fn default_route(
    service: &Service,
    port: u16,
    retries: Option<&Retries>,
    hashing: &Hashing,
) -> Route {
    let (hash_policy, retry_policy) = hashed(
        hashing
            .get(&service.hostname)
            .and_then(|h| crate::model::host_hash(h, &None, port)),
        retries_policy(retries),
    );
    Route {
        name: "default".into(),
        r#match: Some(route_match(None)),
        action: Some(Action::Route(RouteAction {
            cluster_specifier: Some(ClusterSpecifier::Cluster(outbound_cluster_name(
                port,
                None,
                &service.hostname,
            ))),
            timeout: Some(duration_ms(0)),
            retry_policy,
            hash_policy,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// The names a client in `proxy_ns` may use for `host`: the FQDN, and for cluster-local
/// services `name.ns`, `name.ns.svc` and, from the same namespace, the bare `name`;
/// each with and without `:port`.
pub fn domains(host: &str, port: u16, proxy_ns: &str, domain_suffix: &str) -> Vec<String> {
    let mut names = vec![host.to_string()];
    let local_suffix = format!(".svc.{domain_suffix}");
    if let Some(prefix) = host.strip_suffix(&local_suffix) {
        if let Some((name, ns)) = prefix.split_once('.') {
            names.push(format!("{name}.{ns}.svc"));
            names.push(format!("{name}.{ns}"));
            if ns == proxy_ns {
                names.push(name.to_string());
            }
        }
    }
    let mut out = Vec::with_capacity(names.len() * 2);
    for n in names {
        out.push(format!("{n}:{port}"));
        out.push(n);
    }
    out
}

/// The hosts a virtual host's routes may send to: the service's own (its default route),
/// and the destinations of its VirtualService's HTTP routes.
pub fn routed_hosts(service: &Service, vs: Option<&ResolvedVs>) -> Vec<String> {
    match vs {
        None => vec![service.hostname.clone()],
        // The service's own host too: on a port none of the VirtualService's routes applies
        // to, the service keeps its default route ([`sidecar_route_config`]).
        Some(vs) => {
            let mut hosts = routed_hosts_of(vs);
            if !hosts.contains(&service.hostname) {
                hosts.push(service.hostname.clone());
                hosts.sort();
            }
            hosts
        }
    }
}

/// The hosts the HTTP routes of a VirtualService send to.
pub fn routed_hosts_of(vs: &ResolvedVs) -> Vec<String> {
    let mut hosts: Vec<String> = vs
        .vs
        .http
        .iter()
        .flat_map(|r| r.route.iter())
        .map(|d| d.host.clone())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// One entry of a sidecar route configuration: a visible service and the VirtualService in
/// effect for it, if any.
pub type SidecarVhost = (Service, Option<ResolvedVs>);

/// What a sidecar route configuration's virtual hosts come from.
#[derive(Clone, Debug, Default)]
pub struct SidecarVhosts {
    /// The visible services on the port, each with the VirtualService in effect for it.
    pub services: Vec<SidecarVhost>,
    /// Mesh VirtualServices that name or cover no service of the registry at all, seen by
    /// the scope on this port (port 80 only: [`crate::rules::sidecar_sees_hostless_vs`]).
    pub hostless: Vec<ResolvedVs>,
    /// The visible Kubernetes `ExternalName` aliases that declare the port (HTTP), each with
    /// the mesh VirtualService in effect for its own host — only those that have one.
    pub aliases: Vec<(Service, ResolvedVs)>,
}

/// The sidecar route configuration for `port`, with a virtual host per service (sorted by
/// host so the encoding is canonical), one per VirtualService host that is not a service
/// on the port ([`vs_host_vhosts`]) and, on captured listeners, Istio's catch-all for
/// hosts outside the registry: `allow_any` (passthrough, or the Sidecar's `egressProxy`) or
/// `block_all` (502).
pub fn sidecar_route_config(
    port: u16,
    scope: &ScopeKey,
    domain_suffix: &str,
    vhosts: &SidecarVhosts,
    unknown: UnknownHosts,
    default_retries: Option<&Retries>,
    hashing: &Hashing,
) -> Resource {
    let (source, proxy_ns) = (scope.source(), scope.namespace());
    let mut sorted: Vec<&SidecarVhost> = vhosts.services.iter().collect();
    sorted.sort_by(|a, b| a.0.hostname.cmp(&b.0.hostname));
    let mut virtual_hosts: Vec<VirtualHost> = sorted
        .iter()
        .map(|(svc, vs)| VirtualHost {
            name: format!("{}:{}", svc.hostname, port),
            domains: domains(&svc.hostname, port, proxy_ns, domain_suffix),
            // A VirtualService none of whose routes applies on this port (each matches
            // another port, or other source labels) leaves the service its default route
            // here, as Istio does, rather than an empty virtual host (404 for every request).
            routes: match vs
                .as_ref()
                .map(|vs| vs_routes(vs, port, false, &[MESH.to_string()], source, hashing))
            {
                Some(routes) if !routes.is_empty() => routes,
                _ => vec![default_route(svc, port, default_retries, hashing)],
            },
            ..Default::default()
        })
        .collect();
    let own = alias_vhosts(
        port,
        &sorted,
        &virtual_hosts,
        vhosts,
        scope,
        domain_suffix,
        hashing,
    );
    add_alias_domains(
        &mut virtual_hosts,
        &sorted,
        &own,
        port,
        proxy_ns,
        domain_suffix,
    );
    virtual_hosts.extend(own);
    let extra = vs_host_vhosts(port, vhosts, &virtual_hosts, source, hashing);
    virtual_hosts.extend(extra);
    add_address_domains(&mut virtual_hosts, &sorted, port);
    let catch_all = |name: &str, action: Action| VirtualHost {
        name: name.into(),
        domains: vec!["*".into()],
        routes: vec![Route {
            name: name.into(),
            r#match: Some(route_match(None)),
            action: Some(action),
            ..Default::default()
        }],
        ..Default::default()
    };
    match unknown {
        UnknownHosts::None => {}
        UnknownHosts::AllowAny(cluster) => virtual_hosts.push(catch_all(
            "allow_any",
            Action::Route(RouteAction {
                cluster_specifier: Some(ClusterSpecifier::Cluster(cluster)),
                timeout: Some(duration_ms(0)),
                ..Default::default()
            }),
        )),
        // Istio answers a host outside the registry itself under REGISTRY_ONLY.
        UnknownHosts::BlockAll => virtual_hosts.push(catch_all(
            "block_all",
            Action::DirectResponse(DirectResponseAction {
                status: 502,
                ..Default::default()
            }),
        )),
    }
    let rc = RouteConfiguration {
        name: port.to_string(),
        virtual_hosts,
        validate_clusters: Some(BoolValue { value: false }),
        ..Default::default()
    };
    Resource::new(ResourceType::Route, rc.name.clone(), rc.encode_to_vec())
}

/// The virtual hosts of `ExternalName` aliases a VirtualService of their own governs
/// ([`SidecarVhosts::aliases`]), as Istio's sidecars build them: an alias that declares the
/// port is a service of the route configuration for it (`servicesByName`), so a VirtualService
/// naming (or covering) its host gives it a virtual host `alias:port` with the alias's names,
/// in every form a client of `scope`'s namespace may use, and the VirtualService's routes. Istio
/// builds VirtualServices' virtual hosts before the default ones of services without one, in
/// VirtualService order (creation time; here by key): the service the alias names keeps the
/// alias's names only where its own VirtualService comes first. A name a service's own
/// virtual host has stays with it; a VirtualService none of whose routes applies to these
/// proxies adds nothing. `services[i]` is `service_vhosts[i]`'s.
fn alias_vhosts(
    port: u16,
    services: &[&SidecarVhost],
    service_vhosts: &[VirtualHost],
    vhosts: &SidecarVhosts,
    scope: &ScopeKey,
    domain_suffix: &str,
    hashing: &Hashing,
) -> Vec<VirtualHost> {
    if vhosts.aliases.is_empty() {
        return Vec::new();
    }
    let (source, proxy_ns) = (scope.source(), scope.namespace());
    let mut taken: BTreeSet<String> = service_vhosts
        .iter()
        .flat_map(|v| v.domains.iter().map(|d| d.to_ascii_lowercase()))
        .collect();
    let mut aliases: Vec<&(Service, ResolvedVs)> = vhosts.aliases.iter().collect();
    aliases.sort_by(|a, b| a.0.hostname.cmp(&b.0.hostname));
    let mut out = Vec::new();
    for (alias, vs) in aliases {
        // The service the alias resolves to, where its VirtualService comes first.
        let named_first = services.iter().any(|(svc, svc_vs)| {
            svc.aliases.contains(&alias.hostname)
                && svc_vs.as_ref().is_some_and(|v| v.vs.key < vs.vs.key)
        });
        if named_first {
            continue;
        }
        let routes = vs_routes(vs, port, false, &[MESH.to_string()], source, hashing);
        if routes.is_empty() {
            continue;
        }
        let domains: Vec<String> = domains(&alias.hostname, port, proxy_ns, domain_suffix)
            .into_iter()
            .filter(|d| taken.insert(d.to_ascii_lowercase()))
            .collect();
        if domains.is_empty() {
            continue;
        }
        out.push(VirtualHost {
            name: format!("{}:{}", alias.hostname, port),
            domains,
            routes,
            ..Default::default()
        });
    }
    out
}

/// Each service's virtual host also answers to the names of its `ExternalName` aliases
/// ([`Service::aliases`]), in every form a client in `proxy_ns` may use, as Istio's
/// `generateVirtualHostDomains` adds them; a name some virtual host already has — an
/// alias's own (`own`, [`alias_vhosts`]) included — stays with it (Envoy refuses a domain
/// twice in one configuration). `services[i]` is `virtual_hosts[i]`'s.
fn add_alias_domains(
    virtual_hosts: &mut [VirtualHost],
    services: &[&SidecarVhost],
    own: &[VirtualHost],
    port: u16,
    proxy_ns: &str,
    domain_suffix: &str,
) {
    if services.iter().all(|(svc, _)| svc.aliases.is_empty()) {
        return;
    }
    let mut taken: BTreeSet<String> = virtual_hosts
        .iter()
        .chain(own)
        .flat_map(|v| v.domains.iter().map(|d| d.to_ascii_lowercase()))
        .collect();
    for (vhost, (svc, _)) in virtual_hosts.iter_mut().zip(services) {
        for alias in &svc.aliases {
            for d in domains(alias, port, proxy_ns, domain_suffix) {
                if taken.insert(d.to_ascii_lowercase()) {
                    vhost.domains.push(d);
                }
            }
        }
    }
}

/// A client may address a service by its ClusterIP (the Gateway API's MeshClusterIPMatching;
/// Istio's `generateVirtualHostDomains` adds it too), so each service's virtual host also
/// answers to its own addresses: `10.96.0.5` and `10.96.0.5:port` (IPv6 in brackets). Only
/// single addresses (a ServiceEntry's CIDR range names no host), only one service's (an
/// address two services claim goes to neither, whatever their order), and only names no
/// virtual host of the configuration already has (Envoy refuses a domain twice).
/// `services[i]` is `virtual_hosts[i]`'s; runs after every other virtual host is placed.
fn add_address_domains(virtual_hosts: &mut [VirtualHost], services: &[&SidecarVhost], port: u16) {
    let mut claims: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for (i, (svc, _)) in services.iter().enumerate() {
        for address in svc.addresses.iter().filter_map(|a| single_address(a)) {
            claims.entry(address).or_default().insert(i);
        }
    }
    if claims.is_empty() {
        return;
    }
    // Only a domain shaped like an address can be one (the others are host names): the
    // configuration's other domains are not copied.
    let taken: BTreeSet<String> = virtual_hosts
        .iter()
        .flat_map(|v| v.domains.iter())
        .filter(|d| d.starts_with(|c: char| c.is_ascii_digit() || c == '['))
        .map(|d| d.to_ascii_lowercase())
        .collect();
    for (address, owners) in claims {
        let mut owners = owners.into_iter();
        let (Some(i), None) = (owners.next(), owners.next()) else {
            continue;
        };
        for d in [format!("{address}:{port}"), address] {
            if !taken.contains(&d) {
                virtual_hosts[i].domains.push(d);
            }
        }
    }
}

/// The host form of a service address that is one IP (`10.96.0.5/32`, a bare IP, or an
/// IPv6 `/128`, bracketed); none for a wider range or anything unreadable.
fn single_address(address: &str) -> Option<String> {
    let (ip, prefix) = match address.split_once('/') {
        Some((ip, prefix)) => (ip, Some(prefix.parse::<u8>().ok()?)),
        None => (address, None),
    };
    match ip.parse::<std::net::IpAddr>().ok()? {
        std::net::IpAddr::V4(v4) if prefix.is_none_or(|p| p == 32) && !v4.is_unspecified() => {
            Some(v4.to_string())
        }
        std::net::IpAddr::V6(v6) if prefix.is_none_or(|p| p == 128) && !v6.is_unspecified() => {
            Some(format!("[{v6}]"))
        }
        _ => None,
    }
}

/// Istio's virtual hosts for the hosts of a sidecar's VirtualServices that are not services
/// on this port: a VirtualService governing services here also gets one per other host it
/// names (an alias such as `reviews.example.com`, a wildcard no service falls under), with
/// its own routes; so does each hostless VirtualService ([`SidecarVhosts::hostless`]).
/// Named `host:port`, with domains `host` and `host:port`; a name or domain an earlier
/// virtual host took stays with it (VirtualServices by key), and a VirtualService none of
/// whose routes apply to these proxies adds nothing, as in Istio.
fn vs_host_vhosts(
    port: u16,
    vhosts: &SidecarVhosts,
    services: &[VirtualHost],
    source: Source,
    hashing: &Hashing,
) -> Vec<VirtualHost> {
    let mut vss: Vec<&ResolvedVs> = vhosts
        .services
        .iter()
        .filter_map(|(_, vs)| vs.as_ref())
        .chain(vhosts.hostless.iter())
        .collect();
    vss.sort_by(|a, b| a.vs.key.cmp(&b.vs.key));
    vss.dedup_by(|a, b| a.vs.key == b.vs.key);
    let is_service = |host: &str| {
        vhosts.services.iter().any(|(svc, _)| {
            svc.hostname == host || (host.starts_with('*') && host_matches(host, &svc.hostname))
        })
    };
    let mut names: BTreeSet<String> = services.iter().map(|v| v.name.clone()).collect();
    let mut taken: BTreeSet<String> = services
        .iter()
        .flat_map(|v| v.domains.iter().map(|d| d.to_ascii_lowercase()))
        .collect();
    let mut out = Vec::new();
    for vs in vss {
        let hosts: Vec<&String> = vs.vs.hosts.iter().filter(|h| !is_service(h)).collect();
        if hosts.is_empty() {
            continue;
        }
        let routes = vs_routes(vs, port, false, &[MESH.to_string()], source, hashing);
        if routes.is_empty() {
            continue;
        }
        for host in hosts {
            let host = host.to_ascii_lowercase();
            let name = format!("{host}:{port}");
            if !names.insert(name.clone()) {
                continue;
            }
            let domains: Vec<String> = [host, name.clone()]
                .into_iter()
                .filter(|d| taken.insert(d.clone()))
                .collect();
            if domains.is_empty() {
                continue;
            }
            out.push(VirtualHost {
                name,
                domains,
                routes: routes.clone(),
                ..Default::default()
            });
        }
    }
    out
}

/// A gateway route configuration `name` (`http.PORT`, or an HTTPS server's own): `vhosts`
/// maps each domain to the VirtualServices serving it, in precedence order; their routes are
/// concatenated. Domains in `require_tls` (an HTTP server's `httpsRedirect`) answer plaintext
/// requests with a 301 to https (`require_tls: ALL`). `hashing`: the consistent-hash keys of
/// the hosts the routes go to; `tls`: the server terminates TLS (an HTTPS server's own).
#[allow(clippy::too_many_arguments)] // the route configuration's parts
pub fn gateway_route_config(
    name: &str,
    port: u16,
    tls: bool,
    source: Source,
    vhosts: &GatewayVhosts,
    require_tls: &BTreeSet<String>,
    misdirected: &BTreeSet<String>,
    hashing: &Hashing,
) -> Resource {
    let encoded: Vec<Vec<u8>> = vhosts
        .iter()
        .map(|(domain, vss)| {
            let redirect = require_tls.contains(domain);
            gateway_vhost(domain, port, tls, source, vss, redirect, hashing).encode_to_vec()
        })
        .chain(
            misdirected
                .iter()
                .map(|d| misdirected_vhost(d, port).encode_to_vec()),
        )
        .collect();
    gateway_route_config_of(name, encoded.iter().map(Vec::as_slice))
}

/// How a gateway virtual host's domain is written: exact hosts match on any port (behind a
/// load balancer the port differs); wildcard hosts as themselves and with the server's
/// port, as Istio writes them.
fn gateway_domains(domain: &str, port: u16) -> Vec<String> {
    if domain == "*" {
        vec!["*".into()]
    } else if domain.starts_with('*') {
        vec![domain.to_string(), format!("{domain}:{port}")]
    } else {
        vec![domain.to_string(), format!("{domain}:*")]
    }
}

/// The virtual host of `domain`, which another HTTPS listener on the port serves: every
/// request for it on this listener's connection (a client reusing a connection across
/// hosts) is answered 421 Misdirected Request, so that the client opens a connection whose
/// SNI selects that listener.
pub fn misdirected_vhost(domain: &str, port: u16) -> VirtualHost {
    let name = format!("misdirected:{domain}:{port}");
    VirtualHost {
        domains: gateway_domains(domain, port),
        routes: vec![Route {
            name: name.clone(),
            r#match: Some(route_match(None)),
            action: Some(Action::DirectResponse(DirectResponseAction {
                status: 421,
                ..Default::default()
            })),
            ..Default::default()
        }],
        name,
        ..Default::default()
    }
}

/// The virtual host of `domain` in a gateway route configuration of server port `port`
/// (`tls`: of a server that terminates TLS): the routes of `vss` (in precedence order, each
/// with the gateways it came through) concatenated; with `require_tls`, plaintext requests
/// answer a 301 to https.
pub fn gateway_vhost(
    domain: &str,
    port: u16,
    tls: bool,
    source: Source,
    vss: &[(ResolvedVs, Vec<String>)],
    require_tls: bool,
    hashing: &Hashing,
) -> VirtualHost {
    VirtualHost {
        name: format!("{domain}:{port}"),
        // The port of a `Host` is ignored anyway (below).
        domains: gateway_domains(domain, port),
        routes: vss
            .iter()
            .flat_map(|(vs, via)| vs_routes(vs, port, tls, via, source, hashing))
            .collect(),
        require_tls: if require_tls {
            virtual_host::TlsRequirementType::All as i32
        } else {
            0
        },
        ..Default::default()
    }
}

/// A gateway route configuration `name` from its virtual hosts already encoded (in domain
/// order): the dataflow builds each virtual host on its own, so one VirtualService's edit
/// encodes one virtual host and copies the others' bytes. The same bytes as encoding the
/// whole message: a repeated message field is its elements' encodings one after another,
/// each with its tag and length, and prost writes fields in field-number order
/// (`name` = 1, `virtual_hosts` = 2, the rest after).
pub fn gateway_route_config_of<'a>(name: &str, vhosts: impl Iterator<Item = &'a [u8]>) -> Resource {
    let head = RouteConfiguration {
        name: name.to_string(),
        ..Default::default()
    };
    let tail = RouteConfiguration {
        validate_clusters: Some(BoolValue { value: false }),
        // As Istio's gateway route configurations: a `Host` naming the port the gateway
        // listens on (a port-forward to the pod, not the load balancer's port) still
        // matches its host, wildcards included.
        ignore_port_in_host_matching: true,
        ..Default::default()
    };
    let vhosts: Vec<&[u8]> = vhosts.collect();
    // Sized once: a gateway's route configuration can be megabytes.
    let framed = |v: &[u8]| {
        prost::encoding::key_len(2) + prost::encoding::encoded_len_varint(v.len() as u64) + v.len()
    };
    let size =
        head.encoded_len() + vhosts.iter().map(|v| framed(v)).sum::<usize>() + tail.encoded_len();
    let mut bytes = Vec::with_capacity(size);
    head.encode(&mut bytes)
        .expect("the buffer was sized for the whole message");
    for vhost in vhosts {
        prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, &mut bytes);
        prost::encoding::encode_varint(vhost.len() as u64, &mut bytes);
        bytes.extend_from_slice(vhost);
    }
    tail.encode(&mut bytes)
        .expect("the buffer was sized for the whole message");
    Resource::new(ResourceType::Route, name.to_string(), bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service's virtual host answers to its single addresses, with and without the port
    /// (IPv6 bracketed); not to a range, nor to an address another service also claims
    /// (neither gets it), nor to a name another virtual host already has.
    #[test]
    fn services_answer_to_their_own_addresses_only() {
        let svc = |name: &str, addresses: &[&str]| {
            let mut s = crate::translate::cluster::tests::reviews();
            s.hostname = format!("{name}.default.svc.cluster.local").into();
            s.addresses = addresses.iter().map(|a| a.to_string()).collect();
            (s, None)
        };
        let services = [
            svc("a", &["10.96.0.1/32", "fd00::1/128", "10.0.0.0/16"]),
            svc("b", &["10.96.0.2/32"]),
            svc("c", &["10.96.0.2/32", "10.96.0.3"]),
        ];
        let mut vhosts: Vec<VirtualHost> = services
            .iter()
            .map(|(s, _)| VirtualHost {
                domains: vec![s.hostname.to_string()],
                ..Default::default()
            })
            .collect();
        // Another virtual host already answers to 10.96.0.3:80.
        vhosts.push(VirtualHost {
            domains: vec!["10.96.0.3:80".into()],
            ..Default::default()
        });
        let sorted: Vec<&SidecarVhost> = services.iter().collect();
        add_address_domains(&mut vhosts, &sorted, 80);
        let added = |i: usize| vhosts[i].domains[1..].to_vec();
        assert_eq!(
            added(0),
            ["10.96.0.1:80", "10.96.0.1", "[fd00::1]:80", "[fd00::1]"]
        );
        assert!(added(1).is_empty(), "10.96.0.2 is claimed twice");
        assert_eq!(added(2), ["10.96.0.3"]);
    }

    /// A route configuration assembled from encoded virtual hosts is byte for byte prost's
    /// encoding of the whole message (the field order the assembly relies on), with none,
    /// one or several virtual hosts.
    #[test]
    fn route_config_from_encoded_vhosts_is_the_whole_message_encoded() {
        let vhost = |domain: &str| VirtualHost {
            name: format!("{domain}:80"),
            domains: vec![domain.to_string(), format!("{domain}:*")],
            routes: vec![Route {
                name: "r".into(),
                r#match: Some(route_match(None)),
                ..Default::default()
            }],
            require_tls: virtual_host::TlsRequirementType::All as i32,
            ..Default::default()
        };
        for n in [0, 1, 3] {
            let vhosts: Vec<VirtualHost> =
                (0..n).map(|i| vhost(&format!("h{i}.example"))).collect();
            let whole = RouteConfiguration {
                name: "http.80".into(),
                virtual_hosts: vhosts.clone(),
                validate_clusters: Some(BoolValue { value: false }),
                ignore_port_in_host_matching: true,
                ..Default::default()
            };
            let encoded: Vec<Vec<u8>> = vhosts.iter().map(|v| v.encode_to_vec()).collect();
            let assembled = gateway_route_config_of("http.80", encoded.iter().map(Vec::as_slice));
            assert_eq!(
                &*assembled.body.0,
                whole.encode_to_vec().as_slice(),
                "{n} virtual hosts"
            );
            assert_eq!(assembled.name, "http.80");
        }
    }
}
