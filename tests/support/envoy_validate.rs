//! Envoy's judgement of an example's generated config: the resources meshflow computes (the
//! naive recompute over `examples/NAME/config`, as the file source reads it) for some
//! proxies, embedded in a bootstrap that `envoy --mode validate` loads without binding any
//! port or connecting anywhere. What a real run sends over ADS is put in place of its
//! reference, so that Envoy parses all of it:
//! - each connection manager's RDS reference becomes the route configuration of that name
//!   (inline `route_config`): every virtual host, route and per-route filter config;
//! - each EDS cluster becomes a STATIC cluster whose `load_assignment` is the
//!   `ClusterLoadAssignment` meshflow sends for it (Envoy parses both alike: addresses,
//!   localities, priorities, weights, endpoint metadata);
//! - each SDS reference loses its `sds_config` and so names a static secret of the
//!   bootstrap, where the node's Secrets are put (unredacted): TLS contexts are built from
//!   them, so a certificate or key Envoy cannot load fails validation. The mesh has a CA, as
//!   `serve` always has: its root is `ROOTCA`, and the `default` stand-in becomes a
//!   certificate that CA issued for the node's identity, as the xDS server sends it.
//!
//! Files a config names (`filename`: DestinationRule certificates, CRLs) are read by Envoy
//! when it builds a TLS context. An example ships them under `examples/NAME/files/`, at the
//! path the proxy would see (`/etc/certs/ca.pem` → `examples/NAME/files/etc/certs/ca.pem`);
//! those names are pointed there. Any other name is left as written.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use dataflows::model::{MeshConfig, Proxy, ProxyKind, Record, Resource, ResourceType};
use dataflows::naive::{self, Snapshot};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
use meshflow::ca::WorkloadCa;
use meshflow::debug::envoy_json::{resource_json, EnvoyJson};
use meshflow::sources::files::FileSource;
use prost::Message;

use super::{envoy_bootstrap, ProxyNode, XdsMode};

/// One node's config as `envoy --mode validate` is given it.
pub struct Embedded {
    pub node: String,
    /// The bootstrap: static listeners (routes inline), clusters (assignments inline) and
    /// secrets.
    pub bootstrap: serde_json::Value,
    /// The listeners as Envoy's JSON, routes inline.
    pub listeners: Vec<serde_json::Value>,
    /// The clusters as generated (EDS clusters still naming their assignment).
    pub clusters: Vec<serde_json::Value>,
}

/// Computes `examples/NAME`'s resources for `nodes`, has `envoy --mode validate` load each
/// node's listeners, routes, clusters, endpoints and secrets (panicking with Envoy's words
/// if it refuses), and returns each node's listeners as Envoy's JSON, with their routes in
/// place of their RDS references, for the caller's own checks.
pub fn envoy_validates_example(
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

/// As [`envoy_validates_example`], returning each node's listeners and its clusters (as
/// generated).
#[allow(dead_code)] // not every test binary looks at clusters
pub fn envoy_validates_example_with_clusters(
    envoy_bin: &Path,
    scratch: &Path,
    example: &str,
    nodes: &[(&ProxyNode, ProxyKind)],
) -> Vec<(Vec<serde_json::Value>, Vec<serde_json::Value>)> {
    embedded_example(example, nodes)
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            if let Err(refusal) = envoy_validate(envoy_bin, scratch, &format!("{i}"), &e.bootstrap)
            {
                panic!("Envoy refused {}'s config:\n{refusal}", e.node);
            }
            (e.listeners, e.clusters)
        })
        .collect()
}

/// Runs `envoy --mode validate` on `bootstrap` (written to `scratch/NAME.json`): `Err` with
/// Envoy's output if it refuses it.
pub fn envoy_validate(
    envoy_bin: &Path,
    scratch: &Path,
    name: &str,
    bootstrap: &serde_json::Value,
) -> Result<(), String> {
    let path = scratch.join(format!("{name}.json"));
    std::fs::write(&path, bootstrap.to_string()).expect("write bootstrap");
    let run = std::process::Command::new(envoy_bin)
        .args(["--mode", "validate", "--disable-hot-restart", "-c"])
        .arg(&path)
        .output()
        .expect("run envoy --mode validate");
    if run.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        ))
    }
}

/// Each node's bootstrap for `examples/NAME` (see the module's doc), in `nodes`' order.
pub fn embedded_example(example: &str, nodes: &[(&ProxyNode, ProxyKind)]) -> Vec<Embedded> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(example);
    let ca = WorkloadCa::generate("meshflow validate").expect("a CA");
    let mesh = MeshConfig {
        trust_root: Some(ca.root_pem().to_owned()),
        ..MeshConfig::default()
    };
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
    let files = dir.join("files");
    nodes
        .iter()
        .map(|(node, _)| {
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
            let by_name = |t: ResourceType| -> BTreeMap<String, serde_json::Value> {
                of(t)
                    .into_iter()
                    .map(|r| {
                        let name = r["name"]
                            .as_str()
                            .or(r["cluster_name"].as_str())
                            .unwrap_or_default()
                            .to_owned();
                        (name, r)
                    })
                    .collect()
            };
            let mut listeners = of(ResourceType::Listener);
            let routes = by_name(ResourceType::Route);
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
            let clusters = of(ResourceType::Cluster);
            let assignments = by_name(ResourceType::Endpoint);
            let mut held = clusters.clone();
            for cluster in &mut held {
                inline_eds(cluster, &assignments, &node.id);
            }
            // Secrets as the xDS server sends them: the `default` stand-in issued.
            let mut secrets: Vec<serde_json::Value> = resources
                .iter()
                .filter(|r| r.rtype == ResourceType::Secret)
                .map(|r| {
                    let body = ca.substitute(&r.body).expect("a workload certificate");
                    let secret = Secret::decode(&*body.0).expect("a Secret");
                    serde_json::to_value(EnvoyJson::of(&secret).expect("Secret as JSON"))
                        .expect("Secret as JSON")
                })
                .collect();
            let mut embedded = (listeners.clone(), held);
            static_sds(&mut embedded.0);
            static_sds(&mut embedded.1);
            ship_files(&mut embedded.0, &files);
            ship_files(&mut embedded.1, &files);
            // The certificate files of `file-cert:`/`file-root:` secrets too.
            ship_files(&mut secrets, &files);
            let mut bootstrap = envoy_bootstrap(node, ([127, 0, 0, 1], 1).into(), XdsMode::Delta);
            bootstrap["static_resources"]["listeners"] = embedded.0.into();
            if let Some(held) = bootstrap["static_resources"]["clusters"].as_array_mut() {
                held.extend(embedded.1);
            }
            bootstrap["static_resources"]["secrets"] = secrets.into();
            Embedded {
                node: node.id.clone(),
                bootstrap,
                listeners,
                clusters,
            }
        })
        .collect()
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

/// Makes an EDS `cluster` STATIC with the assignment of its EDS name (panicking if none
/// was generated: meshflow sends one for every EDS cluster, possibly empty).
fn inline_eds(
    cluster: &mut serde_json::Value,
    assignments: &BTreeMap<String, serde_json::Value>,
    node: &str,
) {
    if cluster["type"] != "EDS" {
        return;
    }
    let name = cluster["name"].as_str().unwrap_or_default().to_owned();
    let Some(map) = cluster.as_object_mut() else {
        return;
    };
    let service = map
        .remove("eds_cluster_config")
        .and_then(|c| c["service_name"].as_str().map(str::to_owned))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| name.clone());
    let assignment = assignments.get(&service).unwrap_or_else(|| {
        panic!("{node}: EDS cluster {name} names assignment {service:?}, not generated")
    });
    map.insert("type".into(), "STATIC".into());
    map.insert("load_assignment".into(), assignment.clone());
}

/// Drops, anywhere in `json`, the `sds_config` of an SDS reference, so that it names a
/// static secret of the bootstrap.
fn static_sds(json: &mut [serde_json::Value]) {
    fn walk(json: &mut serde_json::Value) {
        match json {
            serde_json::Value::Object(map) => {
                if map.contains_key("name") {
                    map.remove("sds_config");
                }
                map.values_mut().for_each(walk);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    json.iter_mut().for_each(walk);
}

/// Points every `filename` the example ships under `files` (`/a/b` at `files/a/b`) there.
fn ship_files(json: &mut [serde_json::Value], files: &Path) {
    fn walk(json: &mut serde_json::Value, files: &Path) {
        match json {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(name)) = map.get_mut("filename") {
                    let shipped: PathBuf = files.join(name.trim_start_matches('/'));
                    if name.starts_with('/') && shipped.is_file() {
                        *name = shipped.display().to_string();
                    }
                }
                map.values_mut().for_each(|v| walk(v, files));
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| walk(v, files)),
            _ => {}
        }
    }
    json.iter_mut().for_each(|v| walk(v, files));
}
