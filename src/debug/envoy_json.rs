//! Envoy resources in Envoy's own JSON form — the form of Envoy's admin `/config_dump`:
//! proto field names (`connect_timeout`, not `connectTimeout`), enums by name, `Any` as an
//! object with `@type`, default values left out.
//!
//! The encoding is protobuf's canonical JSON mapping, done by `prost-reflect` over the
//! descriptors of Envoy's API. `envoy-types` generates those descriptors (its
//! `src/generated/types.bin`, a `FileDescriptorSet` of every file it compiles) but does not
//! export them, so `envoy_descriptors.bin` next to this file is a copy of the one in the
//! `envoy-types` version in `Cargo.lock`, with the comments (`source_code_info`, four fifths
//! of the bytes) removed. After upgrading `envoy-types`, refresh it with:
//!
//! ```sh
//! ENVOY_TYPES_DESCRIPTORS="$(dirname "$(cargo metadata --format-version 1 | jq -r \
//!   '.packages[] | select(.name == "envoy-types") | .manifest_path')")/src/generated/types.bin" \
//!   cargo run --example refresh_envoy_descriptors
//! ```
//!
//! A field the vendored descriptors do not know would be dropped from the JSON; the unit
//! tests below check the fields meshflow sets.

use dataflows::model::{Body, ResourceType};
use envoy_types::pb::envoy::admin::v3::{
    clusters_config_dump::DynamicCluster, endpoints_config_dump::DynamicEndpointConfig,
    listeners_config_dump::DynamicListener, listeners_config_dump::DynamicListenerState,
    routes_config_dump::DynamicRouteConfig, secrets_config_dump::DynamicSecret, ClustersConfigDump,
    ConfigDump, EndpointsConfigDump, ListenersConfigDump, RoutesConfigDump, SecretsConfigDump,
};
use envoy_types::pb::google::protobuf::Any;
use prost::{Message, Name};
use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use serde::{Serialize, Serializer};
use serde_json::{json, Map, Value};
use std::sync::OnceLock;

static DESCRIPTORS: &[u8] = include_bytes!("envoy_descriptors.bin");

/// The descriptor pool, decoded on first use.
pub fn pool() -> Result<&'static DescriptorPool, String> {
    static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(DESCRIPTORS).map_err(|e| format!("Envoy API descriptors: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// `envoy.config.cluster.v3.Cluster` from `type.googleapis.com/envoy.config.cluster.v3.Cluster`.
fn message_name(type_url: &str) -> &str {
    type_url.rsplit('/').next().unwrap_or(type_url)
}

fn options() -> SerializeOptions {
    SerializeOptions::new().use_proto_field_name(true)
}

/// An Envoy message that serializes as Envoy's JSON, fields in proto order (as Envoy prints
/// them). Errors (a type missing from the pool, a malformed nested `Any`) surface when it is
/// serialized.
pub struct EnvoyJson(DynamicMessage);

impl Serialize for EnvoyJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_with_options(serializer, &options())
    }
}

impl EnvoyJson {
    /// `message` (a prost message of Envoy's API) as a dynamic message of the pool.
    pub fn of<M: Message + Name>(message: &M) -> Result<EnvoyJson, String> {
        let name = M::full_name();
        let desc = pool()?
            .get_message_by_name(&name)
            .ok_or_else(|| format!("unknown message type {name}"))?;
        let msg = DynamicMessage::decode(desc, message.encode_to_vec().as_slice())
            .map_err(|e| format!("decoding {name}: {e}"))?;
        Ok(EnvoyJson(msg))
    }

    /// An encoded resource of type `type_url` as an `Any`: `{"@type": …, fields…}`, the
    /// form resources take in Envoy's config dump.
    pub fn any(type_url: &str, bytes: &[u8]) -> Result<EnvoyJson, String> {
        let name = message_name(type_url);
        let desc = pool()?
            .get_message_by_name(name)
            .ok_or_else(|| format!("unknown message type {name}"))?;
        // Key material never reaches a person: a Secret is shown redacted.
        let bytes = super::redact::bytes(type_url, bytes);
        // Decoded here only to report a bad body now rather than when serializing.
        DynamicMessage::decode(desc, &*bytes).map_err(|e| format!("decoding {name}: {e}"))?;
        EnvoyJson::of(&Any {
            type_url: type_url.to_string(),
            value: bytes.into_owned(),
        })
    }
}

/// One encoded message of type `type_url` as Envoy's JSON, with `@type` (the form an `Any`
/// takes in Envoy's config dump), as a `serde_json::Value` (whose keys are sorted).
pub fn any_json(type_url: &str, bytes: &[u8]) -> Result<Value, String> {
    let msg = EnvoyJson::any(type_url, bytes)?;
    serde_json::to_value(&msg).map_err(|e| format!("{} as JSON: {e}", message_name(type_url)))
}

/// A resource as JSON; a resource that cannot be rendered becomes an object naming it and
/// the error, so one bad body never hides the rest of a dump.
pub fn resource_json(t: ResourceType, name: &str, bytes: &[u8]) -> Value {
    any_json(t.type_url(), bytes).unwrap_or_else(|e| {
        let mut m = Map::new();
        m.insert("@type".into(), Value::String(t.type_url().into()));
        m.insert("name".into(), Value::String(name.into()));
        m.insert("meshflow_error".into(), Value::String(e));
        Value::Object(m)
    })
}

/// How structured output is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
}

/// `value` pretty-printed as JSON (with a final newline) or YAML.
pub fn print<T: Serialize + ?Sized>(value: &T, format: Format) -> Result<String, String> {
    match format {
        Format::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
        Format::Yaml => serde_yaml_ng::to_string(value).map_err(|e| e.to_string()),
    }
}

/// A list of resources of type `t` in Envoy's JSON form, fields in Envoy's order. If one
/// cannot be rendered, the list is printed from [`resource_json`] instead (sorted keys, the
/// bad resource replaced by its error).
pub fn print_resources(
    t: ResourceType,
    resources: &[(String, Vec<u8>)],
    format: Format,
) -> Result<String, String> {
    let ordered: Result<Vec<EnvoyJson>, String> = resources
        .iter()
        .map(|(_, body)| EnvoyJson::any(t.type_url(), body))
        .collect();
    if let Some(out) = ordered.ok().and_then(|o| print(&o, format).ok()) {
        return Ok(out);
    }
    let values: Vec<Value> = resources
        .iter()
        .map(|(name, body)| resource_json(t, name, body))
        .collect();
    print(&values, format)
}

/// One resource a proxy holds, for [`config_dump`].
pub struct DumpEntry {
    pub name: String,
    pub version: String,
    /// The encoded body; `None` if the hub no longer holds it (a race with an epoch).
    pub body: Option<Body>,
}

const ADMIN: &str = "type.googleapis.com/envoy.admin.v3.";

fn any_of<M: Message + Name>(m: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: m.encode_to_vec(),
    }
}

/// A proxy's resources in the shape of Envoy's `/config_dump?include_eds` (an
/// `envoy.admin.v3.ConfigDump`), pretty-printed as Envoy prints it: one section per type,
/// each resource with its version, as `dynamic_active_clusters`,
/// `dynamic_listeners[].active_state`, `dynamic_route_configs` and
/// `dynamic_endpoint_configs`. Sections come in Envoy's order (clusters, listeners, routes,
/// endpoints); there is no bootstrap section (meshflow does not know it), and no
/// `last_updated` (the hub does not record when a proxy took a resource).
pub fn config_dump(per_type: &[(ResourceType, Vec<DumpEntry>)]) -> String {
    ordered_dump(per_type).unwrap_or_else(|_| {
        serde_json::to_string_pretty(&config_dump_value(per_type)).unwrap_or_default() + "\n"
    })
}

fn entries(
    per_type: &[(ResourceType, Vec<DumpEntry>)],
    t: ResourceType,
) -> impl Iterator<Item = &DumpEntry> {
    per_type
        .iter()
        .filter(move |(x, _)| *x == t)
        .flat_map(|(_, e)| e.iter())
}

/// The dump built as Envoy's own message and printed in one pass; fails if any resource
/// cannot be rendered (then [`config_dump_value`] is used).
fn ordered_dump(per_type: &[(ResourceType, Vec<DumpEntry>)]) -> Result<String, String> {
    let body = |t: ResourceType, e: &DumpEntry| -> Result<Any, String> {
        let b = e.body.as_ref().ok_or("body no longer held")?;
        // Validates the body against the pool.
        EnvoyJson::any(t.type_url(), &b.0)?;
        Ok(Any {
            type_url: t.type_url().to_string(),
            value: super::redact::bytes(t.type_url(), &b.0).into_owned(),
        })
    };
    let clusters = ClustersConfigDump {
        dynamic_active_clusters: entries(per_type, ResourceType::Cluster)
            .map(|e| {
                Ok(DynamicCluster {
                    version_info: e.version.clone(),
                    cluster: Some(body(ResourceType::Cluster, e)?),
                    ..Default::default()
                })
            })
            .collect::<Result<_, String>>()?,
        ..Default::default()
    };
    let listeners = ListenersConfigDump {
        dynamic_listeners: entries(per_type, ResourceType::Listener)
            .map(|e| {
                Ok(DynamicListener {
                    name: e.name.clone(),
                    active_state: Some(DynamicListenerState {
                        version_info: e.version.clone(),
                        listener: Some(body(ResourceType::Listener, e)?),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
            })
            .collect::<Result<_, String>>()?,
        ..Default::default()
    };
    let routes = RoutesConfigDump {
        dynamic_route_configs: entries(per_type, ResourceType::Route)
            .map(|e| {
                Ok(DynamicRouteConfig {
                    version_info: e.version.clone(),
                    route_config: Some(body(ResourceType::Route, e)?),
                    ..Default::default()
                })
            })
            .collect::<Result<_, String>>()?,
        ..Default::default()
    };
    let endpoints = EndpointsConfigDump {
        dynamic_endpoint_configs: entries(per_type, ResourceType::Endpoint)
            .map(|e| {
                Ok(DynamicEndpointConfig {
                    version_info: e.version.clone(),
                    endpoint_config: Some(body(ResourceType::Endpoint, e)?),
                    ..Default::default()
                })
            })
            .collect::<Result<_, String>>()?,
        ..Default::default()
    };
    // As Envoy's own dump: the key is redacted (`body` passes Secrets through `redact`).
    let secrets = SecretsConfigDump {
        dynamic_active_secrets: entries(per_type, ResourceType::Secret)
            .map(|e| {
                Ok(DynamicSecret {
                    name: e.name.clone(),
                    version_info: e.version.clone(),
                    secret: Some(body(ResourceType::Secret, e)?),
                    ..Default::default()
                })
            })
            .collect::<Result<_, String>>()?,
        ..Default::default()
    };
    let dump = ConfigDump {
        configs: vec![
            any_of(&clusters),
            any_of(&listeners),
            any_of(&routes),
            any_of(&endpoints),
            any_of(&secrets),
        ],
    };
    print(&EnvoyJson::of(&dump)?, Format::Json)
}

/// The same dump as [`ordered_dump`], resource by resource, a resource that cannot be
/// rendered replaced by an error object. Keys are sorted.
pub fn config_dump_value(per_type: &[(ResourceType, Vec<DumpEntry>)]) -> Value {
    let order = [
        ResourceType::Cluster,
        ResourceType::Listener,
        ResourceType::Route,
        ResourceType::Endpoint,
        ResourceType::Secret,
    ];
    let mut configs = Vec::new();
    for t in order {
        let items: Vec<Value> = entries(per_type, t)
            .map(|e| {
                let body = match &e.body {
                    Some(b) => resource_json(t, &e.name, &b.0),
                    None => json!({
                        "@type": t.type_url(),
                        "name": e.name,
                        "meshflow_error": "body no longer held (changed while dumping)",
                    }),
                };
                match t {
                    ResourceType::Cluster => json!({ "version_info": e.version, "cluster": body }),
                    ResourceType::Listener => json!({
                        "name": e.name,
                        "active_state": { "version_info": e.version, "listener": body },
                    }),
                    ResourceType::Route => {
                        json!({ "version_info": e.version, "route_config": body })
                    }
                    ResourceType::Endpoint => {
                        json!({ "version_info": e.version, "endpoint_config": body })
                    }
                    ResourceType::Secret => json!({
                        "name": e.name,
                        "version_info": e.version,
                        "secret": body,
                    }),
                }
            })
            .collect();
        let (section, field) = match t {
            ResourceType::Cluster => ("ClustersConfigDump", "dynamic_active_clusters"),
            ResourceType::Listener => ("ListenersConfigDump", "dynamic_listeners"),
            ResourceType::Route => ("RoutesConfigDump", "dynamic_route_configs"),
            ResourceType::Endpoint => ("EndpointsConfigDump", "dynamic_endpoint_configs"),
            ResourceType::Secret => ("SecretsConfigDump", "dynamic_active_secrets"),
        };
        let mut m = Map::new();
        m.insert("@type".into(), Value::String(format!("{ADMIN}{section}")));
        // Like Envoy (proto3 JSON), an empty list is left out.
        if !items.is_empty() {
            m.insert(field.into(), Value::Array(items));
        }
        configs.push(Value::Object(m));
    }
    json!({ "configs": configs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
    use envoy_types::pb::envoy::config::core::v3::{
        config_source::ConfigSourceSpecifier, AggregatedConfigSource, ApiVersion, ConfigSource,
    };
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
    use envoy_types::pb::google::protobuf::Duration;

    fn reviews() -> Cluster {
        Cluster {
            name: "outbound|9080||reviews.default.svc.cluster.local".into(),
            cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
                cluster::DiscoveryType::Eds as i32,
            )),
            eds_cluster_config: Some(cluster::EdsClusterConfig {
                eds_config: Some(ConfigSource {
                    config_source_specifier: Some(ConfigSourceSpecifier::Ads(
                        AggregatedConfigSource {},
                    )),
                    resource_api_version: ApiVersion::V3 as i32,
                    ..Default::default()
                }),
                service_name: String::new(),
            }),
            connect_timeout: Some(Duration {
                seconds: 10,
                nanos: 0,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn cluster_renders_as_envoy_json() {
        let c = reviews();
        let v = resource_json(ResourceType::Cluster, &c.name, &c.encode_to_vec());
        assert_eq!(
            v,
            json!({
                "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
                "name": "outbound|9080||reviews.default.svc.cluster.local",
                "type": "EDS",
                "eds_cluster_config": {
                    "eds_config": { "ads": {}, "resource_api_version": "V3" }
                },
                "connect_timeout": "10s",
            })
        );
        // Printed, fields come in Envoy's (proto) order, `@type` first.
        let text = print_resources(
            ResourceType::Cluster,
            &[(c.name.clone(), c.encode_to_vec())],
            Format::Json,
        )
        .expect("prints");
        let at = |k: &str| text.find(k).unwrap_or(usize::MAX);
        assert!(
            at("@type") < at("\"name\"") && at("\"name\"") < at("\"type\""),
            "{text}"
        );
        assert!(
            at("\"eds_cluster_config\"") < at("\"connect_timeout\""),
            "{text}"
        );
        let parsed: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(parsed, json!([v]));
        let yaml = print_resources(
            ResourceType::Cluster,
            &[(c.name.clone(), c.encode_to_vec())],
            Format::Yaml,
        )
        .expect("prints");
        assert!(yaml.contains("type: EDS"), "{yaml}");
    }

    #[test]
    fn nested_any_and_unknown_types() {
        // The extension types Envoy configs carry in `typed_config` are in the pool.
        let hcm = HttpConnectionManager {
            stat_prefix: "outbound_0.0.0.0_9080".into(),
            ..Default::default()
        };
        let v = any_json(
            "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            &hcm.encode_to_vec(),
        )
        .expect("HCM renders");
        assert_eq!(v["stat_prefix"], "outbound_0.0.0.0_9080");
        assert!(any_json("type.googleapis.com/no.such.Type", &[]).is_err());
        let bad = resource_json(ResourceType::Cluster, "x", &[0xff, 0xff]);
        assert_eq!(bad["name"], "x");
        assert!(bad["meshflow_error"].is_string());
        // A list with a bad resource still prints, the bad one as its error.
        let c = reviews();
        let text = print_resources(
            ResourceType::Cluster,
            &[
                (c.name.clone(), c.encode_to_vec()),
                ("x".into(), vec![0xff, 0xff]),
            ],
            Format::Json,
        )
        .expect("prints");
        let parsed: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(parsed[0]["name"], c.name.as_str());
        assert_eq!(parsed[1]["name"], "x");
    }

    fn entry(name: &str, body: Option<Vec<u8>>) -> DumpEntry {
        DumpEntry {
            name: name.into(),
            version: "1".into(),
            body: body.map(|b| Body(b.into())),
        }
    }

    #[test]
    fn dump_has_envoy_sections() {
        let c = reviews();
        let per_type = vec![(
            ResourceType::Cluster,
            vec![entry(&c.name, Some(c.encode_to_vec()))],
        )];
        let text = config_dump(&per_type);
        let dump: Value = serde_json::from_str(&text).expect("JSON");
        // Printed in one pass in Envoy's order, and equal to the resource-by-resource form.
        assert_eq!(dump, config_dump_value(&per_type));
        assert!(
            text.find("\"version_info\"") < text.find("\"cluster\""),
            "{text}"
        );
        let configs = dump["configs"].as_array().expect("configs");
        assert_eq!(
            configs.len(),
            5,
            "clusters, listeners, routes, endpoints, secrets"
        );
        assert_eq!(
            configs[0]["dynamic_active_clusters"][0]["cluster"]["name"],
            c.name.as_str()
        );

        // A body that is gone: the rest of the dump is still there.
        let per_type = vec![
            (
                ResourceType::Cluster,
                vec![entry(&c.name, Some(c.encode_to_vec()))],
            ),
            (ResourceType::Listener, vec![entry("l", None)]),
        ];
        let dump: Value = serde_json::from_str(&config_dump(&per_type)).expect("JSON");
        let configs = dump["configs"].as_array().expect("configs");
        assert_eq!(
            configs[1]["@type"],
            "type.googleapis.com/envoy.admin.v3.ListenersConfigDump"
        );
        assert_eq!(configs[1]["dynamic_listeners"][0]["name"], "l");
        assert_eq!(
            configs[1]["dynamic_listeners"][0]["active_state"]["version_info"],
            "1"
        );
        assert!(
            configs[1]["dynamic_listeners"][0]["active_state"]["listener"]["meshflow_error"]
                .is_string()
        );
        assert_eq!(
            configs[0]["dynamic_active_clusters"][0]["cluster"]["type"],
            "EDS"
        );
    }

    #[test]
    fn a_secret_shows_its_fingerprint_and_never_its_key() {
        let kp = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.example".into()])
            .unwrap()
            .self_signed(&kp)
            .unwrap();
        let id = dataflows::model::TlsIdentity {
            cert_chain: cert.pem(),
            private_key: kp.serialize_pem(),
            fingerprint: ring::digest::digest(&ring::digest::SHA256, cert.der())
                .as_ref()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        };
        let r = dataflows::translate::secret::certificate("kubernetes://a", &id);
        let shown = crate::debug::redact::bytes(
            dataflows::model::ResourceType::Secret.type_url(),
            &r.body.0,
        );
        let text = String::from_utf8_lossy(&shown);
        assert!(!text.contains("PRIVATE KEY"), "{text}");
        assert!(!text.contains("BEGIN CERTIFICATE"), "{text}");
        assert!(
            text.contains(&format!("sha256:{}", id.fingerprint)),
            "{text}"
        );
        assert!(text.contains(crate::debug::redact::REDACTED));
        let twice =
            crate::debug::redact::bytes(dataflows::model::ResourceType::Secret.type_url(), &shown);
        assert_eq!(twice, shown, "redacting is idempotent");
        let json = any_json(dataflows::model::ResourceType::Secret.type_url(), &r.body.0)
            .unwrap()
            .to_string();
        assert!(
            !json.contains("PRIVATE KEY") && json.contains(crate::debug::redact::REDACTED),
            "{json}"
        );
    }
}
