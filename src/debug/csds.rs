//! Envoy's Client Status Discovery Service (`envoy.service.status.v3`) over the hub: what
//! each connected proxy should hold and whether it took it, so tools that speak CSDS work.
//!
//! Each `ClientConfig` names the proxy (`node.id`, and the metadata meshflow derived from
//! its node: `NAMESPACE`, `LABELS`, `INSTANCE_IPS`; not the original node message, which
//! the hub does not keep) and lists every resource in `generic_xds_configs`: type URL,
//! name, meshflow's version (the content hash it is sent with), the resource itself as an
//! `Any` (unless `exclude_resource_contents`), and `config_status` from the proxy's sync
//! state for the resource's type ([`super::status`]): SYNCED, STALE, NOT_SENT, or ERROR
//! when the type was NACKed — then `error_state.details` carries Envoy's message.
//!
//! Approximations, from what the hub records: status is per type, not per resource (a NACK
//! marks every resource of its type ERROR, even if Envoy's message names only one); the
//! `version_info` is the version the proxy acknowledged (empty when it acknowledged none
//! of that name yet), while the resource itself is the one it should hold;
//! `last_updated` and `client_status` are left unset.
//!
//! `node_matchers` select proxies by node id (exact, prefix, suffix, contains, safe_regex,
//! with `ignore_case`; OR between matchers). Metadata matchers and custom string matchers
//! are refused with INVALID_ARGUMENT rather than silently ignored.

use super::error::DebugError;
use super::status::{connected, sync_state, SyncState};
use crate::hub::Hub;
use dataflows::model::{Body, Proxy, ResourceType};
use envoy_types::pb::envoy::admin::v3::UpdateFailureState;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::r#type::matcher::v3::{string_matcher::MatchPattern, StringMatcher};
use envoy_types::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_server::{
    ClientStatusDiscoveryService, ClientStatusDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::status::v3::{
    ClientConfig, ClientStatusRequest, ClientStatusResponse, ConfigStatus,
};
use envoy_types::pb::google::protobuf::{value::Kind, Any, ListValue, Struct, Value};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

pub struct Csds {
    hub: Arc<Hub>,
}

impl Csds {
    pub fn server(hub: Arc<Hub>) -> ClientStatusDiscoveryServiceServer<Csds> {
        ClientStatusDiscoveryServiceServer::new(Csds { hub }).max_encoding_message_size(usize::MAX)
    }
}

/// CSDS's per-resource status (`ERROR` is what CSDS calls a NACK).
pub fn config_status(s: SyncState) -> ConfigStatus {
    match s {
        SyncState::Synced => ConfigStatus::Synced,
        SyncState::Stale => ConfigStatus::Stale,
        SyncState::Nacked => ConfigStatus::Error,
        SyncState::NotSent => ConfigStatus::NotSent,
    }
}

/// A node-id matcher compiled once per request.
enum IdMatcher {
    Exact(String),
    Prefix(String),
    Suffix(String),
    Contains(String),
    Regex(regex::Regex),
}

struct CompiledMatcher {
    pattern: IdMatcher,
    ignore_case: bool,
}

impl CompiledMatcher {
    fn new(m: &StringMatcher) -> Result<CompiledMatcher, String> {
        let fold = |s: &str| {
            if m.ignore_case {
                s.to_lowercase()
            } else {
                s.to_string()
            }
        };
        let pattern = match &m.match_pattern {
            Some(MatchPattern::Exact(s)) => IdMatcher::Exact(fold(s)),
            Some(MatchPattern::Prefix(s)) => IdMatcher::Prefix(fold(s)),
            Some(MatchPattern::Suffix(s)) => IdMatcher::Suffix(fold(s)),
            Some(MatchPattern::Contains(s)) => IdMatcher::Contains(fold(s)),
            Some(MatchPattern::SafeRegex(r)) => {
                // Envoy's safe_regex matches the whole string.
                let re = regex::RegexBuilder::new(&format!("^(?:{})$", r.regex))
                    .case_insensitive(m.ignore_case)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| format!("node_id safe_regex {:?}: {e}", r.regex))?;
                IdMatcher::Regex(re)
            }
            Some(MatchPattern::Custom(_)) => {
                return Err("custom node_id matchers are not supported".into())
            }
            None => return Err("node_id matcher without a pattern".into()),
        };
        Ok(CompiledMatcher {
            pattern,
            ignore_case: m.ignore_case,
        })
    }

    fn matches(&self, id: &str) -> bool {
        let folded;
        let id = if self.ignore_case {
            folded = id.to_lowercase();
            folded.as_str()
        } else {
            id
        };
        match &self.pattern {
            IdMatcher::Exact(s) => id == s,
            IdMatcher::Prefix(s) => id.starts_with(s.as_str()),
            IdMatcher::Suffix(s) => id.ends_with(s.as_str()),
            IdMatcher::Contains(s) => id.contains(s.as_str()),
            IdMatcher::Regex(re) => re.is_match(id),
        }
    }
}

/// Which proxies a request selects: `None` means all.
fn compile_matchers(req: &ClientStatusRequest) -> Result<Option<Vec<CompiledMatcher>>, String> {
    if req.node_matchers.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for m in &req.node_matchers {
        if !m.node_metadatas.is_empty() {
            return Err(
                "node_matchers on node metadata are not supported; match the node id".into(),
            );
        }
        match &m.node_id {
            Some(s) => out.push(CompiledMatcher::new(s)?),
            // A matcher with no criteria matches every node.
            None => return Ok(None),
        }
    }
    Ok(Some(out))
}

/// What is copied out of the hub under its lock: names, versions and shared bodies (cheap
/// reference-counted clones); the protobufs are built after the lock is released.
struct Snapshot {
    proxy: Proxy,
    types: Vec<TypeSnapshot>,
}

struct TypeSnapshot {
    rtype: ResourceType,
    state: SyncState,
    nack: Option<String>,
    /// Name, acknowledged version, body of the version it should hold.
    resources: Vec<(String, String, Option<Body>)>,
}

fn snapshot(hub: &Hub, matchers: &Option<Vec<CompiledMatcher>>, bodies: bool) -> Vec<Snapshot> {
    hub.read(|st| {
        let mut out: Vec<Snapshot> = connected(st)
            .filter(|e| match matchers {
                None => true,
                Some(ms) => ms.iter().any(|m| m.matches(&e.proxy.id)),
            })
            .map(|e| Snapshot {
                proxy: e.proxy.clone(),
                types: ResourceType::ALL
                    .iter()
                    .map(|t| TypeSnapshot {
                        rtype: *t,
                        state: sync_state(st, e, *t),
                        nack: e.sync[*t].last_nack.clone(),
                        resources: st
                            .held(&e.proxy.id)
                            .iter(*t)
                            .map(|(name, version)| {
                                let body = if bodies {
                                    let b = st.body(*t, name, version).cloned();
                                    b.map(|b| super::redact::body(*t, b))
                                } else {
                                    None
                                };
                                let acked = e.sync[*t]
                                    .acked
                                    .get(name)
                                    .map(|v| v.to_string())
                                    .unwrap_or_default();
                                (name.to_string(), acked, body)
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect();
        out.sort_by(|a, b| a.proxy.id.cmp(&b.proxy.id));
        out
    })
}

fn string_value(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_string())),
    }
}

/// The node as far as meshflow knows it.
fn node_of(proxy: &Proxy) -> Node {
    let mut meta = Struct::default();
    meta.fields
        .insert("NAMESPACE".into(), string_value(&proxy.namespace));
    let labels = Struct {
        fields: proxy
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), string_value(v)))
            .collect(),
    };
    meta.fields.insert(
        "LABELS".into(),
        Value {
            kind: Some(Kind::StructValue(labels)),
        },
    );
    meta.fields.insert(
        "INSTANCE_IPS".into(),
        Value {
            kind: Some(Kind::ListValue(ListValue {
                values: proxy.ips.iter().map(|ip| string_value(ip)).collect(),
            })),
        },
    );
    Node {
        id: proxy.id.clone(),
        metadata: Some(meta),
        ..Default::default()
    }
}

fn client_config(s: Snapshot) -> ClientConfig {
    let mut generic = Vec::new();
    for t in s.types {
        let type_url = t.rtype.type_url();
        for (name, version, body) in t.resources {
            let error_state = match (&t.state, &t.nack) {
                (SyncState::Nacked, Some(msg)) => Some(UpdateFailureState {
                    details: msg.clone(),
                    ..Default::default()
                }),
                _ => None,
            };
            generic.push(GenericXdsConfig {
                type_url: type_url.to_string(),
                name,
                version_info: version,
                xds_config: body.map(|b| Any {
                    type_url: type_url.to_string(),
                    value: b.0.to_vec(),
                }),
                config_status: config_status(t.state) as i32,
                error_state,
                ..Default::default()
            });
        }
    }
    #[allow(deprecated)]
    ClientConfig {
        node: Some(node_of(&s.proxy)),
        generic_xds_configs: generic,
        ..Default::default()
    }
}

/// Answers one CSDS request from the hub's current state.
pub fn client_status(
    hub: &Hub,
    req: &ClientStatusRequest,
) -> Result<ClientStatusResponse, DebugError> {
    let matchers = compile_matchers(req).map_err(DebugError::BadRequest)?;
    let snaps = snapshot(hub, &matchers, !req.exclude_resource_contents);
    Ok(ClientStatusResponse {
        config: snaps.into_iter().map(client_config).collect(),
    })
}

#[tonic::async_trait]
impl ClientStatusDiscoveryService for Csds {
    type StreamClientStatusStream = ReceiverStream<Result<ClientStatusResponse, Status>>;

    async fn stream_client_status(
        &self,
        request: Request<Streaming<ClientStatusRequest>>,
    ) -> Result<Response<Self::StreamClientStatusStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(4);
        let hub = self.hub.clone();
        tokio::spawn(async move {
            // One response per request, in order, until the client closes its side.
            while let Ok(Some(req)) = inbound.message().await {
                let resp = client_status(&hub, &req).map_err(Status::from);
                let failed = resp.is_err();
                if tx.send(resp).await.is_err() || failed {
                    break;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn fetch_client_status(
        &self,
        request: Request<ClientStatusRequest>,
    ) -> Result<Response<ClientStatusResponse>, Status> {
        client_status(&self.hub, request.get_ref())
            .map(Response::new)
            .map_err(Status::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::r#type::matcher::v3::RegexMatcher;

    fn m(p: MatchPattern, ignore_case: bool) -> CompiledMatcher {
        CompiledMatcher::new(&StringMatcher {
            match_pattern: Some(p),
            ignore_case,
        })
        .expect("compiles")
    }

    #[test]
    fn node_id_matchers() {
        let id = "sidecar~10.0.0.1~Reviews-v1.default~default.svc.cluster.local";
        assert!(m(MatchPattern::Exact(id.into()), false).matches(id));
        assert!(!m(MatchPattern::Exact(id.to_lowercase()), false).matches(id));
        assert!(m(MatchPattern::Exact(id.to_lowercase()), true).matches(id));
        assert!(m(MatchPattern::Prefix("sidecar~".into()), false).matches(id));
        assert!(m(MatchPattern::Suffix(".cluster.local".into()), false).matches(id));
        assert!(m(MatchPattern::Contains("reviews-v1".into()), true).matches(id));
        let re = |r: &str| {
            MatchPattern::SafeRegex(RegexMatcher {
                regex: r.into(),
                ..Default::default()
            })
        };
        assert!(m(re("sidecar~.*"), false).matches(id));
        // The whole id must match, as in Envoy.
        assert!(!m(re("sidecar"), false).matches(id));
        assert!(CompiledMatcher::new(&StringMatcher {
            match_pattern: Some(re("(")),
            ignore_case: false
        })
        .is_err());
    }
}
