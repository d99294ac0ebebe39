//! The fake API server's state: the resource types it serves, the objects, a cluster-wide
//! resourceVersion counter, the event log watches resume from (and its compaction), the
//! open watches, list snapshots for `continue`, and the requests it was sent.

use bytes::Bytes;
use http_body::Frame;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use tokio::sync::mpsc::UnboundedSender;

/// A resource type the fake serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// `""` for the core group.
    pub group: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
}

impl ResourceType {
    /// The kind as objects are keyed by (what tests name it): its kind, but
    /// `KubernetesGateway` for the Gateway API's Gateway, which Istio's has the name of.
    pub fn key_kind(&self) -> &'static str {
        match (self.group, self.kind) {
            (GATEWAY_API_GROUP, "Gateway") => "KubernetesGateway",
            (_, kind) => kind,
        }
    }

    /// Built-in kinds: list items come without `apiVersion` and `kind`, as the real API
    /// server sends them; custom resources keep theirs.
    pub fn builtin(&self) -> bool {
        self.group != ISTIO_GROUP && self.group != SECURITY_GROUP && self.group != GATEWAY_API_GROUP
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }
}

pub const ISTIO_GROUP: &str = "networking.istio.io";
pub const SECURITY_GROUP: &str = "security.istio.io";
pub const GATEWAY_API_GROUP: &str = "gateway.networking.k8s.io";

pub const TYPES: &[ResourceType] = &[
    rt("", "namespaces", "Namespace", false, &["ns"]),
    rt("", "services", "Service", true, &["svc"]),
    rt("", "pods", "Pod", true, &["po"]),
    rt("", "configmaps", "ConfigMap", true, &["cm"]),
    rt("", "secrets", "Secret", true, &[]),
    rt(
        "discovery.k8s.io",
        "endpointslices",
        "EndpointSlice",
        true,
        &[],
    ),
    rt(
        ISTIO_GROUP,
        "virtualservices",
        "VirtualService",
        true,
        &["vs"],
    ),
    rt(
        ISTIO_GROUP,
        "destinationrules",
        "DestinationRule",
        true,
        &["dr"],
    ),
    rt(ISTIO_GROUP, "gateways", "Gateway", true, &["gw"]),
    rt(ISTIO_GROUP, "serviceentries", "ServiceEntry", true, &["se"]),
    rt(ISTIO_GROUP, "sidecars", "Sidecar", true, &[]),
    rt(
        ISTIO_GROUP,
        "workloadentries",
        "WorkloadEntry",
        true,
        &["we"],
    ),
    rt(
        SECURITY_GROUP,
        "peerauthentications",
        "PeerAuthentication",
        true,
        &["pa"],
    ),
    rt(
        SECURITY_GROUP,
        "authorizationpolicies",
        "AuthorizationPolicy",
        true,
        &["ap"],
    ),
    rt(
        SECURITY_GROUP,
        "requestauthentications",
        "RequestAuthentication",
        true,
        &["ra"],
    ),
    rt(
        GATEWAY_API_GROUP,
        "gatewayclasses",
        "GatewayClass",
        false,
        &[],
    ),
    rt(GATEWAY_API_GROUP, "gateways", "Gateway", true, &[]),
    rt(GATEWAY_API_GROUP, "httproutes", "HTTPRoute", true, &[]),
    rt(GATEWAY_API_GROUP, "grpcroutes", "GRPCRoute", true, &[]),
    rt(GATEWAY_API_GROUP, "tcproutes", "TCPRoute", true, &[]),
    rt(GATEWAY_API_GROUP, "tlsroutes", "TLSRoute", true, &[]),
    rt(
        GATEWAY_API_GROUP,
        "referencegrants",
        "ReferenceGrant",
        true,
        &[],
    ),
    rt(
        GATEWAY_API_GROUP,
        "backendtlspolicies",
        "BackendTLSPolicy",
        true,
        &["btlspolicy"],
    ),
    rt(
        GATEWAY_API_GROUP,
        "listenersets",
        "ListenerSet",
        true,
        &["lset"],
    ),
    // What clients write: the status writer's Lease and the Events it reports with.
    rt(COORDINATION_GROUP, "leases", "Lease", true, &[]),
    rt(EVENTS_GROUP, "events", "Event", true, &["ev"]),
];

pub const COORDINATION_GROUP: &str = "coordination.k8s.io";
pub const EVENTS_GROUP: &str = "events.k8s.io";

impl ResourceType {
    /// Clients may create (POST) and update (PUT) these; other kinds are the test's to write.
    pub fn writable(&self) -> bool {
        matches!(self.group, COORDINATION_GROUP | EVENTS_GROUP)
    }

    /// `leases.coordination.k8s.io`, as the API server names a resource in its messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

const fn rt(
    group: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
) -> ResourceType {
    ResourceType {
        group,
        plural,
        kind,
        namespaced,
        short_names,
    }
}

pub fn type_of_kind(kind: &str) -> Option<ResourceType> {
    TYPES.iter().copied().find(|t| t.kind == kind)
}

/// The type of an object of `apiVersion` and `kind` (its group tells Istio's Gateway from
/// the Gateway API's).
pub fn type_of_object(api_version: &str, kind: &str) -> Option<ResourceType> {
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    TYPES
        .iter()
        .copied()
        .find(|t| t.group == group && t.kind == kind)
        .or_else(|| type_of_kind(kind))
}

/// A frame of a watch response body; an `Err` aborts the connection mid-stream.
pub type WatchFrame = Result<Frame<Bytes>, std::io::Error>;

/// What a list or watch asked for.
#[derive(Clone, Debug)]
pub struct Scope {
    pub rtype: ResourceType,
    /// The apiVersion objects are served as (a custom resource is served at every version).
    pub api_version: String,
    pub namespace: Option<String>,
    pub selector: Selector,
    /// `fieldSelector=metadata.name=NAME`, the one field selector the fake implements.
    pub name: Option<String>,
}

impl Scope {
    pub fn matches(&self, key: &Key, object: &Value) -> bool {
        key.0 == self.rtype.key_kind()
            && self.namespace.as_ref().is_none_or(|ns| *ns == key.1)
            && self.name.as_ref().is_none_or(|n| *n == key.2)
            && self.selector.matches(object)
    }

    /// The object as this scope serves it (at the requested apiVersion).
    pub fn served(&self, object: &Value) -> Value {
        let mut o = object.clone();
        o["apiVersion"] = Value::from(self.api_version.clone());
        o["kind"] = Value::from(self.rtype.kind);
        o
    }
}

/// A label selector: equality (`k=v`, `k==v`), inequality (`k!=v`), existence (`k`, `!k`).
#[derive(Clone, Debug, Default)]
pub struct Selector(Vec<(String, Op)>);

#[derive(Clone, Debug)]
pub enum Op {
    Eq(String),
    Ne(String),
    Exists,
    Absent,
}

impl Selector {
    /// `Err` for what the fake does not implement (set-based `in`, `notin`).
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if term.contains(" in ") || term.contains(" notin ") || term.contains('(') {
                return Err(format!(
                    "the fake does not implement set-based selectors: {term}"
                ));
            }
            let parsed = if let Some((k, v)) = term.split_once("!=") {
                (k, Op::Ne(v.into()))
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (k, Op::Eq(v.into()))
            } else if let Some(k) = term.strip_prefix('!') {
                (k, Op::Absent)
            } else {
                (term, Op::Exists)
            };
            let key = parsed.0.trim();
            let value = match &parsed.1 {
                Op::Eq(v) | Op::Ne(v) => v.trim(),
                Op::Exists | Op::Absent => "",
            };
            // Kubernetes' label syntax: names of letters, digits, `-`, `_`, `.` (and one `/`
            // after a prefix in keys).
            let name = |n: &str| {
                n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            };
            let key_ok = !key.is_empty()
                && key.split('/').count() <= 2
                && key.split('/').all(|p| !p.is_empty() && name(p));
            if !key_ok || !name(value) {
                return Err(format!("unable to parse requirement: {term:?}"));
            }
            terms.push((key.to_string(), parsed.1));
        }
        Ok(Selector(terms))
    }

    fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.0.iter().all(|(k, op)| {
            let v = labels.get(k).and_then(Value::as_str);
            match op {
                Op::Eq(want) => v == Some(want.as_str()),
                Op::Ne(want) => v != Some(want.as_str()),
                Op::Exists => v.is_some(),
                Op::Absent => v.is_none(),
            }
        })
    }
}

/// kind, namespace (`""` for cluster-scoped), name.
pub type Key = (String, String, String);

pub struct Logged {
    pub rv: u64,
    pub key: Key,
    pub kind: &'static str,
    pub object: Value,
}

pub struct Watch {
    pub scope: Scope,
    pub bookmarks: bool,
    pub tx: UnboundedSender<WatchFrame>,
}

/// A list's consistent snapshot, paged through with `continue`.
pub struct Snapshot {
    pub rv: u64,
    pub items: Vec<Value>,
}

pub struct Store {
    pub rv: u64,
    pub objects: BTreeMap<Key, Value>,
    pub log: Vec<Logged>,
    /// Watches from a resourceVersion below this get 410 Gone.
    pub compacted_below: u64,
    pub watches: Vec<Watch>,
    pub snapshots: HashMap<u64, Snapshot>,
    pub next_snapshot: u64,
    /// Every request, as `METHOD path?query`.
    pub requests: Vec<String>,
    /// The served versions of networking.istio.io, preferred first.
    pub istio_versions: Vec<&'static str>,
    /// The versions of security.istio.io served (none: the group's CRDs are not installed).
    pub security_versions: Vec<&'static str>,
    /// The versions of gateway.networking.k8s.io served (none, the default: its CRDs are not
    /// installed).
    pub gateway_api_versions: Vec<&'static str>,
    /// The most items a list page holds, whatever `limit` asks.
    pub max_page: usize,
    /// Events are logged but not sent to open watches (a watch that silently misses them).
    pub quiet: bool,
    /// Answer a watch from a compacted resourceVersion with HTTP 410 instead of a 200
    /// carrying an ERROR event.
    pub gone_as_http: bool,
    /// Resource types (plural) whose lists are answered 500, as an overloaded API server.
    pub failing_lists: Vec<String>,
    /// Resource types (plural) every request for which is answered 403, as RBAC would.
    pub forbidden: Vec<String>,
    /// The bearer token every request must carry.
    pub token: String,
    /// Status patches per object.
    pub status_patches: HashMap<Key, usize>,
    /// Service-account tokens TokenReview knows: token → (namespace, service account, the
    /// audiences it was issued for).
    pub sa_tokens: HashMap<String, (String, String, Vec<String>)>,
}

impl Store {
    pub fn new(token: String) -> Store {
        Store {
            rv: 1000,
            objects: BTreeMap::new(),
            log: Vec::new(),
            compacted_below: 0,
            watches: Vec::new(),
            snapshots: HashMap::new(),
            next_snapshot: 1,
            requests: Vec::new(),
            istio_versions: vec!["v1", "v1beta1", "v1alpha3"],
            security_versions: vec!["v1", "v1beta1"],
            gateway_api_versions: Vec::new(),
            max_page: 500,
            quiet: false,
            gone_as_http: false,
            status_patches: HashMap::new(),
            sa_tokens: HashMap::new(),
            failing_lists: Vec::new(),
            forbidden: Vec::new(),
            token,
        }
    }

    /// Records a change: stamps a new resourceVersion, logs the event and sends it to the
    /// matching open watches.
    pub fn record(&mut self, kind: &'static str, key: Key, object: Value) {
        self.rv += 1;
        let rv = self.rv;
        let mut object = object;
        object["metadata"]["resourceVersion"] = Value::from(rv.to_string());
        match kind {
            "DELETED" => {
                self.objects.remove(&key);
            }
            _ => {
                self.objects.insert(key.clone(), object.clone());
            }
        }
        if !self.quiet {
            self.watches.retain(|w| {
                !w.scope.matches(&key, &object)
                    || w.tx.send(Ok(event(kind, &w.scope.served(&object)))).is_ok()
            });
        }
        self.log.push(Logged {
            rv,
            key,
            kind,
            object,
        });
    }
}

/// One line of a watch stream, `type` first as the API server writes it (a client may
/// depend on it to decode `object` without buffering it).
pub fn event(kind: &str, object: &Value) -> Frame<Bytes> {
    let object =
        serde_json::to_string(object).unwrap_or_else(|e| panic!("encode a watch event: {e}"));
    let mut line = format!("{{\"type\":{},\"object\":{object}}}", Value::from(kind)).into_bytes();
    line.push(b'\n');
    Frame::data(Bytes::from(line))
}

/// A `Status` object, as the API server sends errors.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}
