//! The `Mesh` harness: an engine (`dataflows::driver::Engine`) stepped epoch by epoch, with
//! what each proxy holds resolved as the hub does (`Materialized`), the resource bodies and
//! the config errors in effect; and the assertions on them several test files share.

use dataflows::driver::{Batch, Engine};
use dataflows::materialize::Materialized;
use dataflows::model::*;
use dataflows::simulate::ProxyConfig;
use envoy_types::pb::envoy::config::core::v3::{address, socket_address::PortSpecifier};
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint::HostIdentifier, ClusterLoadAssignment,
};
use prost::Message;
use std::collections::{BTreeMap, BTreeSet};

pub type Diffs = Vec<((ProxyId, ResourceKey), isize)>;

/// An engine plus the accumulated per-proxy state and resource bodies.
pub struct Mesh {
    pub engine: Engine,
    pub epoch: u64,
    pub materialized: Materialized,
    pub held: BTreeMap<(ProxyId, ResourceKey), isize>,
    pub bodies: BTreeMap<(ResourceType, String, String), (Resource, isize)>,
    /// The config errors in effect.
    pub errors: BTreeMap<ConfigError, isize>,
}

impl Mesh {
    pub fn new() -> Mesh {
        Mesh {
            engine: Engine::start(1, MeshConfig::default()),
            epoch: 0,
            materialized: Materialized::default(),
            held: BTreeMap::new(),
            bodies: BTreeMap::new(),
            errors: BTreeMap::new(),
        }
    }

    /// Applies one epoch of changes; returns that epoch's per-proxy diffs (sorted).
    pub fn step(&mut self, changes: Vec<(Record, isize)>) -> Diffs {
        self.epoch += 1;
        let out = self
            .engine
            .step(Batch {
                epoch: self.epoch,
                changes,
            })
            .expect("the engine stopped");
        // Each proxy's set is its scope's plus its own, resolved as the hub does.
        self.materialized.apply(&out, false);
        let held: BTreeMap<(ProxyId, ResourceKey), isize> = self
            .materialized
            .snapshot()
            .into_iter()
            .flat_map(|(p, keys)| keys.into_keys().map(move |k| ((p.clone(), k), 1)))
            .collect();
        let mut diffs: Diffs = Vec::new();
        for k in self.held.keys().filter(|k| !held.contains_key(*k)) {
            diffs.push((k.clone(), -1));
        }
        for k in held.keys().filter(|k| !self.held.contains_key(*k)) {
            diffs.push((k.clone(), 1));
        }
        self.held = held;
        for (r, d) in out.bodies {
            let e = self
                .bodies
                .entry((r.rtype, r.name.clone(), r.version.clone()))
                .or_insert((r, 0));
            e.1 += d;
        }
        self.bodies.retain(|_, (_, c)| *c != 0);
        for (e, d) in out.errors {
            *self.errors.entry(e).or_insert(0) += d;
        }
        self.errors.retain(|_, c| *c != 0);
        diffs.sort();
        diffs
    }

    pub fn insert(&mut self, records: Vec<Record>) -> Diffs {
        self.step(records.into_iter().map(|r| (r, 1)).collect())
    }

    pub fn retract(&mut self, records: Vec<Record>) -> Diffs {
        self.step(records.into_iter().map(|r| (r, -1)).collect())
    }

    pub fn replace(&mut self, old: Record, new: Record) -> Diffs {
        self.step(vec![(old, -1), (new, 1)])
    }

    /// Names of the resources of type `t` that `proxy` holds.
    pub fn names(&self, proxy: &Proxy, t: ResourceType) -> BTreeSet<String> {
        self.held
            .keys()
            .filter(|(p, k)| *p == proxy.id && k.rtype == t)
            .map(|(_, k)| k.name.clone())
            .collect()
    }

    pub fn clusters(&self, proxy: &Proxy) -> BTreeSet<String> {
        self.names(proxy, ResourceType::Cluster)
    }

    pub fn listeners(&self, proxy: &Proxy) -> BTreeSet<String> {
        self.names(proxy, ResourceType::Listener)
    }

    pub fn routes(&self, proxy: &Proxy) -> BTreeSet<String> {
        self.names(proxy, ResourceType::Route)
    }

    /// Everything `proxy` holds.
    pub fn all(&self, proxy: &Proxy) -> Vec<ResourceKey> {
        self.held
            .keys()
            .filter(|(p, _)| *p == proxy.id)
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// The version of `(t, name)` that `proxy` holds.
    pub fn version(&self, proxy: &Proxy, t: ResourceType, name: &str) -> String {
        let found: Vec<&ResourceKey> = self
            .held
            .keys()
            .filter(|(p, k)| *p == proxy.id && k.rtype == t && k.name == name)
            .map(|(_, k)| k)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{} should hold exactly one {t:?} {name}: {found:?}",
            proxy.id
        );
        found[0].version.clone()
    }

    /// The endpoint addresses (`ip:port`) in the ClusterLoadAssignment `name` that `proxy` holds.
    pub fn eds_addresses(&self, proxy: &Proxy, name: &str) -> BTreeSet<String> {
        let version = self.version(proxy, ResourceType::Endpoint, name);
        let (body, _) = self
            .bodies
            .get(&(ResourceType::Endpoint, name.to_string(), version.clone()))
            .unwrap_or_else(|| panic!("no body for EDS {name} version {version}"));
        let cla = ClusterLoadAssignment::decode(&body.body.0[..]).expect("a ClusterLoadAssignment");
        assert_eq!(cla.cluster_name, name);
        let mut out = BTreeSet::new();
        for loc in &cla.endpoints {
            for lb in &loc.lb_endpoints {
                let Some(HostIdentifier::Endpoint(ep)) = &lb.host_identifier else {
                    continue;
                };
                let Some(address::Address::SocketAddress(sa)) =
                    ep.address.as_ref().and_then(|a| a.address.as_ref())
                else {
                    continue;
                };
                let Some(PortSpecifier::PortValue(port)) = sa.port_specifier else {
                    continue;
                };
                out.insert(format!("{}:{}", sa.address, port));
            }
        }
        out
    }

    /// The ClusterLoadAssignment `name` that `proxy` holds.
    pub fn cla(&self, proxy: &Proxy, name: &str) -> ClusterLoadAssignment {
        let version = self.version(proxy, ResourceType::Endpoint, name);
        let (body, _) = &self.bodies[&(ResourceType::Endpoint, name.to_string(), version)];
        ClusterLoadAssignment::decode(&body.body.0[..]).expect("a ClusterLoadAssignment")
    }

    /// The Cluster `name` that `proxy` holds.
    pub fn cluster_body(
        &self,
        proxy: &Proxy,
        name: &str,
    ) -> envoy_types::pb::envoy::config::cluster::v3::Cluster {
        let version = self.version(proxy, ResourceType::Cluster, name);
        let (body, _) = &self.bodies[&(ResourceType::Cluster, name.to_string(), version)];
        envoy_types::pb::envoy::config::cluster::v3::Cluster::decode(&body.body.0[..])
            .expect("a Cluster")
    }

    /// The Listener `name` that `proxy` holds.
    pub fn listener_body(
        &self,
        proxy: &Proxy,
        name: &str,
    ) -> envoy_types::pb::envoy::config::listener::v3::Listener {
        let version = self.version(proxy, ResourceType::Listener, name);
        let (body, _) = &self.bodies[&(ResourceType::Listener, name.to_string(), version)];
        envoy_types::pb::envoy::config::listener::v3::Listener::decode(&body.body.0[..])
            .expect("a Listener")
    }

    /// The RouteConfiguration `name` that `proxy` holds.
    pub fn route_body(
        &self,
        proxy: &Proxy,
        name: &str,
    ) -> envoy_types::pb::envoy::config::route::v3::RouteConfiguration {
        let version = self.version(proxy, ResourceType::Route, name);
        let (body, _) = &self.bodies[&(ResourceType::Route, name.to_string(), version)];
        envoy_types::pb::envoy::config::route::v3::RouteConfiguration::decode(&body.body.0[..])
            .expect("a RouteConfiguration")
    }

    /// The cluster each virtual host of route configuration `name` sends its first route to,
    /// by virtual host name.
    pub fn vhost_clusters(&self, proxy: &Proxy, name: &str) -> BTreeMap<String, String> {
        use envoy_types::pb::envoy::config::route::v3::{
            route::Action, route_action::ClusterSpecifier, RouteConfiguration,
        };
        let version = self.version(proxy, ResourceType::Route, name);
        let (body, _) = &self.bodies[&(ResourceType::Route, name.to_string(), version)];
        let rc = RouteConfiguration::decode(&body.body.0[..]).expect("a RouteConfiguration");
        rc.virtual_hosts
            .iter()
            .filter_map(|vh| {
                let action = vh.routes.first()?.action.as_ref()?;
                let Action::Route(ra) = action else {
                    return None;
                };
                let cluster = match ra.cluster_specifier.as_ref()? {
                    ClusterSpecifier::Cluster(c) => c.clone(),
                    ClusterSpecifier::WeightedClusters(w) => w.clusters.first()?.name.clone(),
                    _ => return None,
                };
                Some((vh.name.clone(), cluster))
            })
            .collect()
    }

    /// The domains of each virtual host of route configuration `name`, by virtual host name.
    pub fn vhost_domains(&self, proxy: &Proxy, name: &str) -> BTreeMap<String, Vec<String>> {
        use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
        let version = self.version(proxy, ResourceType::Route, name);
        let (body, _) = &self.bodies[&(ResourceType::Route, name.to_string(), version)];
        let rc = RouteConfiguration::decode(&body.body.0[..]).expect("a RouteConfiguration");
        rc.virtual_hosts
            .into_iter()
            .map(|vh| (vh.name, vh.domains))
            .collect()
    }

    /// Each proxy's resources, decoded for the routing simulation (`dataflows::simulate`).
    pub fn configs(&self) -> BTreeMap<ProxyId, ProxyConfig> {
        self.materialized
            .snapshot()
            .into_iter()
            .map(|(proxy, keys)| {
                let resources = keys
                    .into_keys()
                    .map(|k| &self.bodies[&(k.rtype, k.name, k.version)].0);
                (proxy, ProxyConfig::from_resources(resources))
            })
            .collect()
    }
}

/// The set of `names`, to compare with what a proxy holds.
pub fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// What every proxy holds, as `Mesh::held` keeps it.
pub type Held = BTreeMap<(ProxyId, ResourceKey), isize>;

/// The diff an EDS change should produce: for each proxy, `-old +new` of each named
/// ClusterLoadAssignment, where `old` is the version the proxy held `before` the change and
/// `new` is a version different from it.
pub fn expected_eds_diffs(
    before: &Held,
    proxies: &[&Proxy],
    names: &[String],
    diffs: &Diffs,
) -> Diffs {
    let mut expected = Diffs::new();
    for p in proxies {
        for name in names {
            let old: Vec<&ResourceKey> = before
                .keys()
                .filter(|(q, k)| *q == p.id && k.rtype == ResourceType::Endpoint && k.name == *name)
                .map(|(_, k)| k)
                .collect();
            assert_eq!(
                old.len(),
                1,
                "{} held {name} {} times before",
                p.id,
                old.len()
            );
            expected.push(((p.id.clone(), old[0].clone()), -1));
            let new = diffs
                .iter()
                .find(|((q, k), d)| {
                    *q == p.id && k.rtype == ResourceType::Endpoint && k.name == *name && *d == 1
                })
                .unwrap_or_else(|| panic!("no new version of {name} for {}: {diffs:#?}", p.id));
            assert_ne!(new.0 .1.version, old[0].version);
            expected.push(new.clone());
        }
    }
    expected.sort();
    expected
}

/// The config errors in effect with `code`, each as `object: message` (of any kind, not
/// only Gateways', despite the name).
pub fn gateway_errors(m: &Mesh, code: ErrorCode) -> Vec<String> {
    m.errors
        .keys()
        .filter(|e| e.code == code)
        .map(|e| format!("{}: {}", e.object, e.message))
        .collect()
}

/// The cluster a chain's `tcp_proxy` sends to (one cluster), if it has one.
pub fn tcp_proxy_cluster(
    chain: &envoy_types::pb::envoy::config::listener::v3::FilterChain,
) -> Option<String> {
    use envoy_types::pb::envoy::config::listener::v3::filter::ConfigType;
    use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
        tcp_proxy::ClusterSpecifier, TcpProxy,
    };
    let f = chain.filters.first()?;
    let Some(ConfigType::TypedConfig(any)) = &f.config_type else {
        return None;
    };
    match TcpProxy::decode(&any.value[..]).ok()?.cluster_specifier? {
        ClusterSpecifier::Cluster(c) => Some(c),
        _ => None,
    }
}
