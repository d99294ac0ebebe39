//! VHDS (`serve --vhds`): a route configuration served over Delta ADS without its virtual
//! hosts, which follow as resources of their own (type
//! `envoy.config.route.v3.VirtualHost`), so that a change of one virtual host (a
//! VirtualService's weights) sends that virtual host, not the whole route configuration.
//!
//! The dataflow is unchanged: it emits whole route configurations. This splits each
//! (name, version) of one once, for every stream serving it:
//! - the route configuration as RDS sends it: no `virtual_hosts`, and `vhds` pointing at
//!   the ADS stream, with a version of its own (the hash of that encoding), so a change
//!   that only touches virtual hosts does not send it again;
//! - one resource per virtual host, named `ROUTE/HOST` as Envoy's VHDS names them (the
//!   route configuration's name, `/`, the virtual host's name, which is its first domain
//!   `HOST:PORT` or the catch-all's name), with the same string as the virtual host's own
//!   `name`: Envoy keys the virtual hosts VHDS gave it by that field, and removes them by
//!   resource name.
//!
//! Envoy subscribes to the route configuration's name as a namespace (every resource
//! `ROUTE/…`); with the on-demand filter it also asks for `ROUTE/DOMAIN` of a host it has
//! no virtual host for ([`Split::resolve`]).

use dataflows::materialize::Name;
use dataflows::model::{version_of, Body};
use envoy_types::pb::envoy::config::core::v3::{
    config_source::ConfigSourceSpecifier, AggregatedConfigSource, ApiVersion, ConfigSource,
};
use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, Vhds};
use hashbrown::HashMap;
use prost::Message;
use std::sync::{Arc, Mutex};

/// Type URL of a VHDS resource.
pub const VIRTUAL_HOST_TYPE_URL: &str = "type.googleapis.com/envoy.config.route.v3.VirtualHost";

/// Splits kept before the cache starts over: a few per route configuration version in use
/// (shape L has a few hundred distinct route configurations).
const MAX_SPLITS: usize = 16_384;

/// One virtual host as its own resource.
#[derive(Debug, Clone)]
pub struct VirtualHostResource {
    /// `ROUTE/HOST`.
    pub name: Name,
    pub version: Name,
    pub body: Body,
    /// The virtual host's domains, to answer an on-demand `ROUTE/DOMAIN`.
    pub domains: Vec<String>,
}

/// One route configuration version, split.
#[derive(Debug)]
pub struct Split {
    /// The route configuration without virtual hosts, with `vhds` over ADS.
    pub route: Body,
    pub route_version: Name,
    /// Sorted by name.
    pub vhosts: Vec<VirtualHostResource>,
}

impl Split {
    /// The virtual host an on-demand request `ROUTE/DOMAIN` (the route part already
    /// matched) asks for: the one listing `domain` among its domains, exactly (Envoy asks
    /// with the request's Host header as it came, port included if it had one).
    pub fn resolve(&self, domain: &str) -> Option<&VirtualHostResource> {
        self.vhosts
            .iter()
            .find(|v| v.domains.iter().any(|d| d.eq_ignore_ascii_case(domain)))
    }
}

/// The splits of every route configuration version streams served, shared by them.
#[derive(Default)]
pub struct VhdsCache {
    splits: Mutex<HashMap<(Name, Name), Arc<Split>>>,
}

impl VhdsCache {
    /// The split of route configuration `name` at `version`, made from `body` (called only
    /// on a miss) the first time; `None` if the body does not decode (it always does: the
    /// dataflow encoded it).
    pub fn split(
        &self,
        name: &Name,
        version: &Name,
        body: impl FnOnce() -> Option<Body>,
    ) -> Option<Arc<Split>> {
        let key = (name.clone(), version.clone());
        if let Some(s) = self.lock().get(&key) {
            return Some(s.clone());
        }
        // Decoded and encoded outside the lock; two streams racing on one miss both split
        // it, the same way.
        let split = Arc::new(split_route(&body()?)?);
        let mut map = self.lock();
        if map.len() >= MAX_SPLITS {
            // Versions no proxy holds any more pile up otherwise; what is still in use is
            // split again on its next look.
            map.clear();
        }
        Some(map.entry(key).or_insert(split).clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Name, Name), Arc<Split>>> {
        self.splits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The resource name of virtual host `vhost` of route configuration `route`.
pub fn vhost_resource_name(route: &str, vhost: &str) -> String {
    format!("{route}/{vhost}")
}

/// `body`, a route configuration, split (see the module's comment); `None` if it does not decode.
pub fn split_route(body: &Body) -> Option<Split> {
    let mut rc = RouteConfiguration::decode(&body.0[..]).ok()?;
    let mut vhosts: Vec<VirtualHostResource> = std::mem::take(&mut rc.virtual_hosts)
        .into_iter()
        .map(|mut vh| {
            vh.name = vhost_resource_name(&rc.name, &vh.name);
            let bytes = vh.encode_to_vec();
            VirtualHostResource {
                name: Name::from(vh.name.as_str()),
                version: Name::from(version_of(&bytes).as_str()),
                body: Body(Arc::from(bytes)),
                domains: vh.domains,
            }
        })
        .collect();
    vhosts.sort_by(|a, b| a.name.cmp(&b.name));
    rc.vhds = Some(Vhds {
        config_source: Some(ConfigSource {
            config_source_specifier: Some(ConfigSourceSpecifier::Ads(AggregatedConfigSource {})),
            resource_api_version: ApiVersion::V3 as i32,
            ..Default::default()
        }),
    });
    let bytes = rc.encode_to_vec();
    Some(Split {
        route_version: Name::from(version_of(&bytes).as_str()),
        route: Body(Arc::from(bytes)),
        vhosts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::route::v3::VirtualHost;

    fn route(weight: u32) -> Body {
        let rc = RouteConfiguration {
            name: "80".into(),
            virtual_hosts: vec![
                VirtualHost {
                    name: "b.ns.svc.cluster.local:80".into(),
                    domains: vec!["b.ns.svc.cluster.local:80".into(), "b".into()],
                    ..Default::default()
                },
                VirtualHost {
                    name: "a.ns.svc.cluster.local:80".into(),
                    domains: vec!["a.ns.svc.cluster.local:80".into(), "a".into()],
                    request_headers_to_remove: vec![format!("w{weight}")],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        Body(Arc::from(rc.encode_to_vec()))
    }

    /// The route keeps no virtual host and points at ADS; each virtual host becomes
    /// `ROUTE/NAME` with that as its own name; a change of one virtual host changes its
    /// version only, not the route's or the other's.
    #[test]
    fn splits_route_into_virtual_hosts() {
        let cache = VhdsCache::default();
        let name = Name::from("80");
        let a = cache
            .split(&name, &Name::from("v1"), || Some(route(90)))
            .expect("split");
        let rc = RouteConfiguration::decode(&a.route.0[..]).expect("decode");
        assert!(rc.virtual_hosts.is_empty());
        assert!(matches!(
            rc.vhds
                .and_then(|v| v.config_source)
                .and_then(|c| c.config_source_specifier),
            Some(ConfigSourceSpecifier::Ads(_))
        ));
        let names: Vec<&str> = a.vhosts.iter().map(|v| &*v.name).collect();
        assert_eq!(
            names,
            [
                "80/a.ns.svc.cluster.local:80",
                "80/b.ns.svc.cluster.local:80"
            ]
        );
        let vh = VirtualHost::decode(&a.vhosts[0].body.0[..]).expect("decode");
        assert_eq!(vh.name, "80/a.ns.svc.cluster.local:80");
        assert_eq!(
            a.resolve("a").map(|v| &*v.name),
            Some("80/a.ns.svc.cluster.local:80")
        );
        assert!(a.resolve("c").is_none());

        let b = cache
            .split(&name, &Name::from("v2"), || Some(route(50)))
            .expect("split");
        assert_eq!(a.route_version, b.route_version);
        assert_ne!(a.vhosts[0].version, b.vhosts[0].version);
        assert_eq!(a.vhosts[1].version, b.vhosts[1].version);
        // A hit does not read the body again.
        assert!(cache.split(&name, &Name::from("v2"), || None).is_some());
    }
}
