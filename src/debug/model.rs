//! The answers the debug port gives, as plain Rust types: the proxy list with each proxy's
//! sync state per type and its streams ([`ProxyList`]), a [`Diff`], an [`Explanation`], a
//! [`WatchEvent`], the [`ConfigErrors`]. The computations build them; the HTTP handlers
//! and the CLI serialize them with serde ([`to_json`]), and [`super::pb`] converts them to
//! and from the Debug API's messages.
//!
//! Times are Unix seconds to the millisecond ([`unix_seconds`]); absent values are `None`
//! (JSON `null`). Also here: how a user names a proxy ([`resolve_proxy`]) and one of its
//! resources ([`resolve_resource`]), for the server's answers and the CLI's alike.

use super::error::DebugError;
use dataflows::model::ResourceType;
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in seconds, to the millisecond (so it survives JSON and YAML round trips).
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as f64 / 1000.0)
        .unwrap_or(0.0)
}

/// An answer as the JSON the debug port serves: keys sorted at every level, as the HTTP
/// endpoints and the CLI's `-o json|yaml` have always printed them.
pub fn to_json<T: Serialize + ?Sized>(answer: &T) -> Value {
    serde_json::to_value(answer).unwrap_or_else(|e| Value::String(format!("not JSON: {e}")))
}

/// Finds the proxy a user means: its full node id, or the `pod.namespace` part of an Istio
/// id (`sidecar~10.0.0.1~reviews-v1-abc.default~default.svc.cluster.local`), as `istioctl`
/// accepts it.
pub fn resolve_proxy<'a>(
    ids: impl IntoIterator<Item = &'a str>,
    wanted: &str,
) -> Result<String, DebugError> {
    let ids: Vec<&str> = ids.into_iter().collect();
    if ids.contains(&wanted) {
        return Ok(wanted.to_string());
    }
    let matches: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| id.split('~').nth(2) == Some(wanted))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(DebugError::NotFound(format!(
            "no connected proxy {wanted:?}"
        ))),
        many => Err(DebugError::NotFound(format!(
            "{wanted:?} is ambiguous; it matches {}",
            many.join(", ")
        ))),
    }
}

/// How a user spells a resource type: `route/9080` (the word `resolve_resource` prints in
/// candidates); plurals and the xDS abbreviations are accepted too.
fn type_of_word(word: &str) -> Option<ResourceType> {
    match word.to_ascii_lowercase().as_str() {
        "cluster" | "clusters" | "cds" => Some(ResourceType::Cluster),
        "endpoint" | "endpoints" | "eds" => Some(ResourceType::Endpoint),
        "listener" | "listeners" | "lds" => Some(ResourceType::Listener),
        "route" | "routes" | "rds" => Some(ResourceType::Route),
        "secret" | "secrets" | "sds" => Some(ResourceType::Secret),
        _ => None,
    }
}

/// The word for `t` in `TYPE/NAME`.
pub fn type_word(t: ResourceType) -> &'static str {
    match t {
        ResourceType::Cluster => "cluster",
        ResourceType::Endpoint => "endpoint",
        ResourceType::Listener => "listener",
        ResourceType::Route => "route",
        ResourceType::Secret => "secret",
    }
}

const TYPE_NAME_EXAMPLE: &str =
    "TYPE/NAME, e.g. route/9080 or cluster/outbound|9080||reviews.default.svc.cluster.local";

/// The answer when `proxy` holds no `t` named `name`.
pub fn not_held(proxy: &str, t: ResourceType, name: &str) -> DebugError {
    DebugError::NotFound(format!(
        "proxy {proxy} holds no {} named {name:?}",
        t.short()
    ))
}

/// Finds the resource of `proxy` a user means: `TYPE/NAME` (`route/9080`; TYPE is cluster,
/// endpoint, listener or route, plural or CDS/EDS/LDS/RDS too), taken as it is, or a bare
/// NAME that exactly one type of the proxy's resources has (`holds(type, name)`). A NAME
/// held under several types (an EDS name is its cluster's) is refused with every candidate
/// as `TYPE/NAME`.
///
/// A name whose part before `/` is not a type word is a bare name: resource names may
/// contain `/`, type words are never a resource name's first segment.
pub fn resolve_resource(
    proxy: &str,
    wanted: &str,
    holds: impl Fn(ResourceType, &str) -> bool,
) -> Result<(ResourceType, String), DebugError> {
    if let Some((t, name)) = wanted
        .split_once('/')
        .and_then(|(word, name)| Some((type_of_word(word)?, name)))
    {
        if name.is_empty() {
            return Err(DebugError::BadRequest(format!(
                "resource {wanted:?}: the name after TYPE/ is empty"
            )));
        }
        return Ok((t, name.to_string()));
    }
    if wanted.is_empty() {
        return Err(DebugError::BadRequest(format!(
            "resource: required, as NAME or {TYPE_NAME_EXAMPLE}"
        )));
    }
    let found: Vec<ResourceType> = ResourceType::ALL
        .into_iter()
        .filter(|t| holds(*t, wanted))
        .collect();
    match found.as_slice() {
        [t] => Ok((*t, wanted.to_string())),
        [] => Err(DebugError::NotFound(format!(
            "proxy {proxy} holds no resource named {wanted:?} (a NAME, or {TYPE_NAME_EXAMPLE})"
        ))),
        many => Err(DebugError::BadRequest(format!(
            "{wanted:?} names {} resources of proxy {proxy}: {}; give one as TYPE/NAME",
            many.len(),
            many.iter()
                .map(|t| format!("{}/{wanted}", type_word(*t)))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// An item of a list that JSON shows as an object keyed by the item's type.
pub trait Keyed {
    fn key(&self) -> &str;
}

/// A list as a JSON object from each item's key to the item (in the list's order).
fn by_key<S: Serializer, T: Keyed + Serialize>(items: &[T], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(items.iter().map(|i| (i.key(), i)))
}

// ---- proxy list (`/debug/proxies`, `proxy-status`) ----

/// Every connected proxy, sorted by id, at the hub's last epoch.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProxyList {
    pub epoch: u64,
    pub proxies: Vec<ProxyInfo>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProxyInfo {
    pub id: String,
    pub namespace: String,
    /// `sidecar`, `router` or `proxyless`.
    pub kind: String,
    /// Open xDS streams for this node id.
    pub streams: u32,
    /// The proxy's first epoch has been computed.
    pub ready: bool,
    /// One per type, in CDS, EDS, LDS, RDS order; JSON keys them by type.
    #[serde(serialize_with = "by_key")]
    pub types: Vec<TypeSync>,
    pub stream_details: Vec<StreamInfo>,
}

/// A proxy's state for one xDS type.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TypeSync {
    /// `CDS`, `EDS`, `LDS` or `RDS` (the key in JSON).
    #[serde(skip)]
    pub rtype: String,
    /// `SYNCED`, `STALE`, `NACKED` or `NOT SENT`.
    pub sync: String,
    /// For `STALE`: seconds since the unanswered push was sent.
    pub stale_seconds: Option<f64>,
    pub resources: u32,
    pub acked_resources: u32,
    pub acks: u64,
    pub last_nack: Option<String>,
    pub last_sent: Option<f64>,
    pub last_ack: Option<f64>,
}

impl Keyed for TypeSync {
    fn key(&self) -> &str {
        &self.rtype
    }
}

/// One open stream of a proxy.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StreamInfo {
    pub id: u64,
    /// `delta` or `sotw`.
    pub protocol: String,
    pub opened: f64,
    /// One per subscribed type; JSON keys them by type.
    #[serde(serialize_with = "by_key")]
    pub types: Vec<StreamSubscription>,
}

/// What a stream subscribed to for one type, and its response in flight.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StreamSubscription {
    #[serde(skip)]
    pub rtype: String,
    pub wildcard: bool,
    pub names: Vec<String>,
    pub in_flight: Option<InFlight>,
}

impl Keyed for StreamSubscription {
    fn key(&self) -> &str {
        &self.rtype
    }
}

/// A response sent on a stream and not answered yet.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InFlight {
    pub nonce: String,
    pub sent: f64,
}

// ---- config errors (`/debug/config_errors`) ----

/// Dataflow conflicts and the input objects the sources rejected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfigErrors {
    pub errors: Vec<ConfigError>,
    pub rejected_inputs: Vec<String>,
    /// What is not translated or not generated of the accepted objects, and kinds not
    /// served (`…: error: …` / `…: warning: …`).
    pub analysis: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfigError {
    pub object: String,
    /// `MF00NN Name`, as `validate` and the objects' status print it.
    pub code: String,
    /// `error`, or `warning` for what works as Istio's would (`MF0012`).
    pub level: String,
    pub message: String,
}

// ---- explain (`/debug/explain`, `explain`) ----

/// Which input objects a resource a proxy holds was built from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Explanation {
    pub proxy: String,
    #[serde(rename = "type")]
    pub rtype: String,
    pub name: String,
    /// The scope the resource is shared in (`sidecar default/...`), or `proxy` for a
    /// resource of the proxy's own (inbound) side.
    pub scope: String,
    /// The input objects, sorted by kind, namespace and name.
    pub inputs: Vec<Input>,
    /// The connected proxies holding the same version of the resource (this one included),
    /// sorted.
    pub holders: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Input {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

// ---- diff (`/debug/diff`, `diff`) ----

/// What a diff is asked for: the proxy, and the window `from < epoch <= to` given by
/// epochs or by `since` (a duration such as `5m`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiffQuery {
    pub proxy: String,
    pub from: Option<u64>,
    pub to: Option<u64>,
    pub since: Option<String>,
}

/// What changed for one proxy over a window of epochs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diff {
    pub proxy: String,
    pub from_epoch: u64,
    pub to_epoch: u64,
    /// The oldest epoch of this proxy still in the history.
    pub oldest_kept_epoch: u64,
    /// Older changes of the window were evicted.
    pub truncated: bool,
    pub resources: Vec<ResourceDiff>,
    pub epochs: Vec<EpochRecord>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResourceDiff {
    #[serde(rename = "type")]
    pub rtype: String,
    pub name: String,
    /// `added`, `removed` or `modified`.
    pub change: String,
    pub old_version: Option<String>,
    pub new_version: Option<String>,
    pub fields: Vec<FieldChange>,
    /// `+ `, `- `, `  ` and `@@` lines of the pretty-printed JSON.
    pub lines: Vec<String>,
    pub deliveries: Vec<Delivery>,
}

/// One changed field of Envoy's JSON form; `None` where the field is absent.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FieldChange {
    pub path: String,
    pub old: Option<Value>,
    pub new: Option<Value>,
}

/// What became of one push.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Delivery {
    pub epoch: u64,
    #[serde(rename = "type")]
    pub rtype: String,
    /// `ACKED`, `NACKED`, `IN FLIGHT` or `NOT SENT`.
    pub state: String,
    pub nonce: Option<String>,
    pub sent: Option<f64>,
    pub answered: Option<f64>,
    pub nack: Option<String>,
}

/// One epoch of the window: its input changes and its pushes to the proxy.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EpochRecord {
    pub epoch: u64,
    pub applied: f64,
    pub inputs: Vec<InputChange>,
    pub deliveries: Vec<Delivery>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InputChange {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `insert`, `update` or `delete`.
    pub op: String,
    /// The file the object came from, or `xds` for proxies.
    pub source: String,
}

// ---- watch (`/debug/watch`, `watch`) ----

/// One thing that happened to a watched proxy.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WatchEvent {
    pub proxy: String,
    pub at: f64,
    #[serde(flatten)]
    pub what: Happened,
}

/// What happened, with `kind` naming it in JSON.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Happened {
    Push {
        epoch: u64,
        #[serde(rename = "type")]
        rtype: String,
        nonce: String,
        bytes: u64,
        changes: Vec<NameChange>,
        /// Resources the push carried beyond those listed.
        #[serde(skip_serializing_if = "is_zero")]
        more_changes: u64,
    },
    Ack {
        epoch: u64,
        #[serde(rename = "type")]
        rtype: String,
        nonce: String,
    },
    Nack {
        epoch: u64,
        #[serde(rename = "type")]
        rtype: String,
        nonce: String,
        /// Envoy's error text.
        #[serde(skip_serializing_if = "String::is_empty")]
        message: String,
    },
    /// The watcher fell behind; the message says how many events it missed.
    Lagged { message: String },
}

impl Happened {
    /// `push`, `ack`, `nack` or `lagged`.
    pub fn kind(&self) -> &'static str {
        match self {
            Happened::Push { .. } => "push",
            Happened::Ack { .. } => "ack",
            Happened::Nack { .. } => "nack",
            Happened::Lagged { .. } => "lagged",
        }
    }
}

/// One resource of a push: `+` added, `-` removed, `~` changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NameChange {
    pub op: String,
    pub name: String,
    pub old_version: Option<String>,
    pub new_version: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolves_typed_and_bare_resource_names() {
        const P: &str = "sidecar~10.0.0.1~a-1.default~default.svc.cluster.local";
        const CLUSTER: &str = "outbound|9080||reviews.default.svc.cluster.local";
        // A gateway-like proxy: EDS names are their clusters', and one name both a route
        // configuration and a listener.
        let held = [
            (ResourceType::Cluster, CLUSTER),
            (ResourceType::Endpoint, CLUSTER),
            (ResourceType::Route, "http.28080"),
            (ResourceType::Listener, "http.28080"),
            (ResourceType::Route, "9080"),
            (ResourceType::Listener, "a/b"),
        ];
        let holds = |t: ResourceType, n: &str| held.contains(&(t, n));
        let resolve = |w: &str| resolve_resource(P, w, holds);

        // TYPE/NAME is taken as given, held or not (the caller says what is missing).
        assert_eq!(
            resolve(&format!("cluster/{CLUSTER}")),
            Ok((ResourceType::Cluster, CLUSTER.to_string()))
        );
        assert_eq!(
            resolve("RDS/1234"),
            Ok((ResourceType::Route, "1234".to_string()))
        );
        // A bare name held once.
        assert_eq!(
            resolve("9080"),
            Ok((ResourceType::Route, "9080".to_string()))
        );
        // A slash after a word that is no type: a bare name.
        assert_eq!(
            resolve("a/b"),
            Ok((ResourceType::Listener, "a/b".to_string()))
        );
        // Held twice: refused, every candidate listed in TYPE/NAME form.
        let e = resolve("http.28080").unwrap_err();
        assert!(matches!(e, DebugError::BadRequest(_)), "{e:?}");
        assert_eq!(
            e.message(),
            format!(
                "\"http.28080\" names 2 resources of proxy {P}: \
                 listener/http.28080, route/http.28080; give one as TYPE/NAME"
            )
        );
        let e = resolve(CLUSTER).unwrap_err();
        assert!(
            e.message()
                .contains(&format!("cluster/{CLUSTER}, endpoint/{CLUSTER}")),
            "{e}"
        );
        // Held nowhere: not found, naming the proxy and the name.
        let e = resolve("extension/x").unwrap_err();
        assert!(matches!(e, DebugError::NotFound(_)), "{e:?}");
        assert!(
            e.message().contains(P) && e.message().contains("\"extension/x\""),
            "{e}"
        );
        assert!(matches!(resolve("route/"), Err(DebugError::BadRequest(_))));
        assert!(matches!(resolve(""), Err(DebugError::BadRequest(_))));
    }

    #[test]
    fn resolves_full_ids_and_pod_namespace() {
        let ids = [
            "sidecar~10.0.0.1~a-1.default~default.svc.cluster.local",
            "sidecar~10.0.0.2~b-1.default~default.svc.cluster.local",
            "router~10.0.0.3~gw-1.istio-system~istio-system.svc.cluster.local",
        ];
        assert_eq!(
            resolve_proxy(ids, "b-1.default").as_deref(),
            Ok("sidecar~10.0.0.2~b-1.default~default.svc.cluster.local")
        );
        assert_eq!(resolve_proxy(ids, ids[2]).as_deref(), Ok(ids[2]));
        assert!(resolve_proxy(ids, "c-1.default").is_err());
        let twice = [
            ids[0],
            "router~10.0.0.9~a-1.default~default.svc.cluster.local",
        ];
        assert!(resolve_proxy(twice, "a-1.default")
            .unwrap_err()
            .message()
            .contains("ambiguous"));
    }

    #[test]
    fn watch_events_as_json() {
        let lagged = WatchEvent {
            proxy: "p".into(),
            at: 1.5,
            what: Happened::Lagged {
                message: "3 events missed".into(),
            },
        };
        assert_eq!(
            to_json(&lagged),
            json!({"proxy": "p", "at": 1.5, "kind": "lagged", "message": "3 events missed"})
        );
        let ack = WatchEvent {
            proxy: "p".into(),
            at: 1.5,
            what: Happened::Nack {
                epoch: 2,
                rtype: "CDS".into(),
                nonce: "1".into(),
                message: String::new(),
            },
        };
        assert_eq!(
            to_json(&ack),
            json!({"proxy": "p", "at": 1.5, "kind": "nack", "epoch": 2, "type": "CDS", "nonce": "1"})
        );
    }
}
