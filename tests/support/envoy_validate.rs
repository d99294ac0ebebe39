//! Envoy's judgement of an example's generated config: the resources meshflow computes (the
//! naive recompute over `examples/NAME/config`, as the file source reads it) for some
//! proxies, embedded as static listeners and clusters in a bootstrap that `envoy --mode
//! validate` loads without binding any port. Resources that come over ADS in a real run
//! (EDS, SDS, and RDS unless asked) stay referenced by name, as Envoy checks them when they
//! arrive; [`envoy_validates_example_with_routes`] puts each route configuration in place of
//! its RDS reference, so Envoy judges the routes too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use dataflows::model::{MeshConfig, Proxy, ProxyKind, Record, Resource, ResourceType};
use dataflows::naive::{self, Snapshot};
use meshflow::debug::envoy_json::resource_json;
use meshflow::sources::files::FileSource;

use super::{envoy_bootstrap, ProxyNode, XdsMode};

/// Computes `examples/NAME`'s resources for `nodes`, has `envoy --mode validate` load each
/// node's listeners and clusters (panicking with Envoy's words if it refuses), and returns
/// each node's listeners as Envoy's JSON, for the caller's own checks.
pub fn envoy_validates_example(
    envoy_bin: &Path,
    scratch: &Path,
    example: &str,
    nodes: &[(&ProxyNode, ProxyKind)],
) -> Vec<Vec<serde_json::Value>> {
    validate(envoy_bin, scratch, example, nodes, false)
        .into_iter()
        .map(|(listeners, _)| listeners)
        .collect()
}

/// As [`envoy_validates_example`], with every connection manager's RDS reference replaced by
/// the route configuration of that name (inline `route_config`), so Envoy also loads every
/// virtual host, route and per-route filter config (panicking if a listener names a route
/// configuration the node was not given). The listeners returned carry those routes.
pub fn envoy_validates_example_with_routes(
    envoy_bin: &Path,
    scratch: &Path,
    example: &str,
    nodes: &[(&ProxyNode, ProxyKind)],
) -> Vec<Vec<serde_json::Value>> {
    envoy_validates_example_with_clusters(envoy_bin, scratch, example, nodes)
        .into_iter()
        .map(|(listeners, _)| listeners)
        .collect()
}

/// As [`envoy_validates_example_with_routes`], returning each node's listeners and its
/// clusters.
#[allow(dead_code)] // not every test binary looks at clusters
pub fn envoy_validates_example_with_clusters(
    envoy_bin: &Path,
    scratch: &Path,
    example: &str,
    nodes: &[(&ProxyNode, ProxyKind)],
) -> Vec<(Vec<serde_json::Value>, Vec<serde_json::Value>)> {
    validate(envoy_bin, scratch, example, nodes, true)
}

fn validate(
    envoy_bin: &Path,
    scratch: &Path,
    example: &str,
    nodes: &[(&ProxyNode, ProxyKind)],
    inline_routes: bool,
) -> Vec<(Vec<serde_json::Value>, Vec<serde_json::Value>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(example);
    let mesh = MeshConfig::default();
    let scan = FileSource::new(dir.join("config"), mesh.clone()).rescan();
    assert!(scan.errors.is_empty(), "{:#?}", scan.errors);
    let mut records: BTreeSet<Record> = scan.changes.into_iter().map(|(r, _)| r).collect();
    for (node, kind) in nodes {
        records.insert(Record::Proxy(Proxy {
            id: node.id.clone(),
            kind: *kind,
            ips: node.instance_ips.clone(),
            namespace: node.namespace.clone(),
            labels: node.labels.clone(),
            interception_none: false,
            service_account: None,
            // Where the node's workload says it runs (`istio-locality: REGION.ZONE`).
            locality: node
                .labels
                .get("istio-locality")
                .map(|l| l.replace('.', "/"))
                .unwrap_or_default(),
            // As the xDS server reads it.
            idle_timeout_ns: node
                .extra_metadata
                .get("IDLE_TIMEOUT")
                .and_then(|v| meshflow::xds::node::idle_timeout(v).ok().flatten()),
        }));
    }
    let configs = naive::compute(&mesh, &Snapshot { records });
    let mut out = Vec::new();
    for (node, _) in nodes {
        let resources: Vec<&Resource> = configs[&node.id].values().collect();
        let of = |t: ResourceType| -> Vec<serde_json::Value> {
            resources
                .iter()
                .filter(|r| r.rtype == t)
                .map(|r| {
                    let mut json = resource_json(t, &r.name, &r.body.0);
                    if let Some(m) = json.as_object_mut() {
                        m.remove("@type");
                    }
                    json
                })
                .collect()
        };
        let mut listeners = of(ResourceType::Listener);
        if inline_routes {
            let routes: BTreeMap<String, serde_json::Value> = of(ResourceType::Route)
                .into_iter()
                .map(|r| (r["name"].as_str().unwrap_or_default().to_owned(), r))
                .collect();
            let inlined: usize = listeners
                .iter_mut()
                .map(|l| inline_rds(l, &routes, &node.id))
                .sum();
            assert!(
                routes.is_empty() || inlined > 0,
                "{}: no RDS reference found to put its {} route configurations in place of",
                node.id,
                routes.len()
            );
        }
        let mut bootstrap = envoy_bootstrap(node, ([127, 0, 0, 1], 1).into(), XdsMode::Delta);
        bootstrap["static_resources"]["listeners"] = listeners.clone().into();
        let clusters = of(ResourceType::Cluster);
        if let Some(held) = bootstrap["static_resources"]["clusters"].as_array_mut() {
            held.extend(clusters.clone());
        }
        let path = scratch.join(format!("{}.json", node.pod_name));
        std::fs::write(&path, bootstrap.to_string()).expect("write bootstrap");
        let run = std::process::Command::new(envoy_bin)
            .args(["--mode", "validate", "--disable-hot-restart", "-c"])
            .arg(&path)
            .output()
            .expect("run envoy --mode validate");
        assert!(
            run.status.success(),
            "Envoy refused {}'s config:\n{}{}",
            node.id,
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
        out.push((listeners, clusters));
    }
    out
}

/// Replaces, anywhere in `json`, an `rds` reference (`{"rds": {"route_config_name": NAME, ..}}`)
/// by `"route_config": <the route configuration NAME>`; returns how many it replaced.
fn inline_rds(
    json: &mut serde_json::Value,
    routes: &BTreeMap<String, serde_json::Value>,
    node: &str,
) -> usize {
    match json {
        serde_json::Value::Object(map) => {
            let name = map
                .get("rds")
                .and_then(|rds| rds.get("route_config_name"))
                .and_then(|n| n.as_str())
                .map(str::to_owned);
            let mut inlined = 0;
            if let Some(name) = name {
                let route = routes.get(&name).unwrap_or_else(|| {
                    panic!("{node}: a listener names route configuration {name:?}, not generated")
                });
                map.remove("rds");
                map.insert("route_config".into(), route.clone());
                inlined += 1;
            }
            inlined
                + map
                    .values_mut()
                    .map(|v| inline_rds(v, routes, node))
                    .sum::<usize>()
        }
        serde_json::Value::Array(items) => {
            items.iter_mut().map(|i| inline_rds(i, routes, node)).sum()
        }
        _ => 0,
    }
}
