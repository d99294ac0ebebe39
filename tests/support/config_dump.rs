//! Reading Envoy's `/config_dump` JSON: the names of what it holds (clusters, listeners, route
//! configurations, EDS assignments) and the endpoints and route configurations themselves.
//! Plain functions on a `Value`, so a test can also parse a dump it fetched itself.

use serde_json::Value;
use std::collections::BTreeMap;

/// The items of list `field` in the config-dump section whose `@type` ends with `type_suffix`.
pub(super) fn dump_section_items<'a>(
    dump: &'a Value,
    type_suffix: &str,
    field: &str,
) -> Vec<&'a Value> {
    dump["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|section| {
            section["@type"]
                .as_str()
                .is_some_and(|t| t.ends_with(type_suffix))
        })
        .flat_map(|section| section[field].as_array().into_iter().flatten())
        .collect()
}

fn strings_at(items: Vec<&Value>, pointer: &str) -> Vec<String> {
    let mut names: Vec<String> = items
        .into_iter()
        .filter_map(|item| item.pointer(pointer)?.as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// Sorted names of `dynamic_active_clusters` in a config dump.
pub fn dump_cluster_names(dump: &Value) -> Vec<String> {
    let items = dump_section_items(dump, "ClustersConfigDump", "dynamic_active_clusters");
    strings_at(items, "/cluster/name")
}

/// Sorted names of the dynamic listeners with an active state in a config dump.
pub fn dump_listener_names(dump: &Value) -> Vec<String> {
    let items = dump_section_items(dump, "ListenersConfigDump", "dynamic_listeners");
    let active = items
        .into_iter()
        .filter(|listener| !listener["active_state"].is_null())
        .collect();
    strings_at(active, "/name")
}

/// Sorted names of the dynamic route configurations in a config dump.
pub fn dump_route_config_names(dump: &Value) -> Vec<String> {
    let items = dump_section_items(dump, "RoutesConfigDump", "dynamic_route_configs");
    strings_at(items, "/route_config/name")
}

/// Sorted cluster names of the dynamic EDS assignments in a config dump (`?include_eds`).
pub fn dump_eds_cluster_names(dump: &Value) -> Vec<String> {
    let items = dump_section_items(dump, "EndpointsConfigDump", "dynamic_endpoint_configs");
    strings_at(items, "/endpoint_config/cluster_name")
}

/// Sorted `ip:port` of the endpoints in the EDS assignment of `cluster` in a config dump.
pub fn dump_endpoints(dump: &Value, cluster: &str) -> Vec<String> {
    let mut addresses: Vec<String> =
        dump_section_items(dump, "EndpointsConfigDump", "dynamic_endpoint_configs")
            .into_iter()
            .map(|item| &item["endpoint_config"])
            .filter(|assignment| assignment["cluster_name"] == cluster)
            .flat_map(|assignment| assignment["endpoints"].as_array().into_iter().flatten())
            .flat_map(|locality| locality["lb_endpoints"].as_array().into_iter().flatten())
            .map(|lb_endpoint| {
                let socket = &lb_endpoint["endpoint"]["address"]["socket_address"];
                format!(
                    "{}:{}",
                    socket["address"].as_str().unwrap_or("?"),
                    socket["port_value"]
                )
            })
            .collect();
    addresses.sort();
    addresses
}

/// Panics unless every name in `expected` is in `actual`.
pub fn assert_contains_all(what: &str, actual: &[String], expected: &[String]) {
    let missing: Vec<&String> = expected
        .iter()
        .filter(|name| !actual.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: missing {missing:?}; Envoy holds {actual:?}"
    );
}

/// The dynamic route configuration called `name`, if Envoy holds it.
pub fn dump_route_config<'a>(dump: &'a Value, name: &str) -> Option<&'a Value> {
    dump_section_items(dump, "RoutesConfigDump", "dynamic_route_configs")
        .into_iter()
        .map(|item| &item["route_config"])
        .find(|config| config["name"] == name)
}

/// What an Envoy holds from xDS, by `cluster/NAME`, `listener/NAME`, `route/NAME` and
/// `endpoints/CLUSTER` (with `?include_eds`), without the version and time of each (which
/// say when, not what): two dumps are equal when the proxies hold the same config.
pub fn dump_served_config(dump: &Value) -> BTreeMap<String, Value> {
    let sections = [
        (
            "ClustersConfigDump",
            "dynamic_active_clusters",
            "/cluster",
            "name",
            "cluster",
        ),
        (
            "ListenersConfigDump",
            "dynamic_listeners",
            "/active_state/listener",
            "name",
            "listener",
        ),
        (
            "RoutesConfigDump",
            "dynamic_route_configs",
            "/route_config",
            "name",
            "route",
        ),
        (
            "EndpointsConfigDump",
            "dynamic_endpoint_configs",
            "/endpoint_config",
            "cluster_name",
            "endpoints",
        ),
    ];
    let mut out = BTreeMap::new();
    for (type_suffix, field, body, name, kind) in sections {
        for item in dump_section_items(dump, type_suffix, field) {
            if let Some(body) = item.pointer(body) {
                let name = body[name].as_str().unwrap_or("?");
                out.insert(format!("{kind}/{name}"), body.clone());
            }
        }
    }
    out
}

/// The keys whose values differ between two served configs (present in one only, or
/// different), for failure messages.
pub fn served_config_differences(
    a: &BTreeMap<String, Value>,
    b: &BTreeMap<String, Value>,
) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .collect();
    keys.into_iter().cloned().collect()
}
