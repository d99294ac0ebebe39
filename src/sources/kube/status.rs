//! Status writing (`serve --kube --write-status`): tells each VirtualService,
//! DestinationRule, Gateway, ServiceEntry, Sidecar and security policy's (PeerAuthentication,
//! AuthorizationPolicy, RequestAuthentication) author what became of it, on the
//! object's `status` subresource, in the shape Istio writes:
//!
//! - `conditions: [{type: Reconciled, status: "True"|"False", lastTransitionTime, message}]`:
//!   `True` when its latest version is in effect, `False` with the error naming the field
//!   when it is invalid (its last valid version, if any, stays in effect);
//! - `validationMessages: [{type: {code, name}, level: ERROR|WARNING, description}]`, as
//!   `istioctl analyze` gives them: the analysis of the version in effect (`description`
//!   names the field: `spec.http[0].corsPolicy: …`), and the dataflow's findings across
//!   objects (published by the hub): a destination subset no DestinationRule defines or a
//!   gateway no Gateway defines (`MF0004 ReferencedResourceNotFound`, Istio's IST0101), a
//!   ServiceEntry set aside for another of its namespace (`MF0005 ConflictingHost`).
//! - NACK attribution: while proxies reject a resource that the object's latest change
//!   altered (`runtime::rejections`, published through the hub; only proxies of the
//!   object's own namespace or of the root namespace are reported here), `Reconciled` is
//!   `False` and a validationMessage `RejectedByProxies` (ERROR) names how many proxies
//!   rejected it and up to [`PROXIES_NAMED`] of them, the resources, Envoy's message and
//!   since when; both go when the object changes again. Nothing is set back: every other
//!   proxy is served the object. The same is reported once as a Kubernetes Event on the
//!   object ([`events`](super::events)).
//!
//! Writes are merge patches of the status subresource, from a task of their own: the
//! source hands it the whole desired state through a `watch` channel (so a burst of
//! changes is one state), and the writer patches an object only when its status content
//! changed, at most once per object per [`MIN_INTERVAL`]. A failed write is logged and
//! tried again when the object's status next changes. Among replicas only the holder of
//! the status Lease ([`lease`](super::lease)) writes status. A writer that starts (or
//! takes the Lease over) starts from the status the API server holds: it leaves alone a
//! status that already says what it would write, and keeps the transition time of a
//! `Reconciled` condition whose state does not change.

use super::watched::Seen;
use crate::config::Level;
use crate::input::{ObjectErrors, ProxyRejection, ProxyRejections};
use dataflows::model::{ConfigError, ConfigKey};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::Client;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The kinds whose status is written (WorkloadEntry's is not Istio's to say either).
pub const STATUS_KINDS: [&str; 8] = [
    "VirtualService",
    "DestinationRule",
    "Gateway",
    "ServiceEntry",
    "Sidecar",
    "PeerAuthentication",
    "AuthorizationPolicy",
    "RequestAuthentication",
];

/// Whether meshflow writes the status of objects of this resource: Istio's kinds of
/// [`STATUS_KINDS`] in Istio's groups, and the Gateway API's GatewayClasses, Gateways and
/// routes (of the classes meshflow owns only, [`gateway_status`](super::gateway_status)). Never a kind of
/// another group that shares a name (the Gateway API's `Gateway` is not Istio's).
pub fn writes_status(resource: &ApiResource) -> bool {
    match resource.group.as_str() {
        "networking.istio.io" | "security.istio.io" => {
            STATUS_KINDS.contains(&resource.kind.as_str())
        }
        "gateway.networking.k8s.io" => matches!(
            resource.kind.as_str(),
            "GatewayClass"
                | "Gateway"
                | "HTTPRoute"
                | "GRPCRoute"
                | "TCPRoute"
                | "TLSRoute"
                | "BackendTLSPolicy"
                | "ListenerSet"
        ),
        _ => false,
    }
}

/// The proxies a rejection names (all are counted).
pub const PROXIES_NAMED: usize = 5;

/// At most one write per object in this long.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// The desired status of every object that has one.
pub type Statuses = BTreeMap<ConfigKey, ObjectStatus>;

/// What one object's status says (without the transition time, which the writer keeps).
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectStatus {
    pub resource: ApiResource,
    pub namespace: String,
    pub name: String,
    /// For the Events that name it.
    pub uid: Option<String>,
    /// `Reconciled`: the latest version is in effect.
    pub reconciled: bool,
    /// The `Reconciled` condition's message.
    pub message: String,
    /// `validationMessages`.
    pub messages: Vec<Value>,
    /// For a Gateway API object, its whole `status` in the Gateway API's shape
    /// ([`gateway_status`](super::gateway_status)), written instead of Istio's.
    pub gateway_api: Option<Value>,
    /// The status the API server held when the source last saw the object.
    pub stored: StoredStatus,
}

/// The status the API server holds of an object: where a writer that has written nothing
/// for it yet (it started, or took the Lease over) starts from, keeping the transition time
/// and leaving a status that already says what it would write alone. Not part of what the
/// status says: equal whatever it holds, so that its change alone (the echo of a write) is
/// no change to write.
#[derive(Clone, Debug, Default)]
pub struct StoredStatus(pub Option<Value>);

impl PartialEq for StoredStatus {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl ObjectStatus {
    /// From the watch's view of the object: the error of its latest version (invalid) and
    /// the findings (`level: Kind ns/name: field: message`) of the version in effect.
    pub fn new(resource: &ApiResource, seen: &Seen) -> Self {
        let key = seen.key;
        let prefix = format!("{} {}/{}: ", key.kind, key.namespace, key.name);
        // An error finding of a valid version is a part meshflow cannot honour as written
        // (a security policy, a match, a TLS server): it fails closed, and the object is not
        // in effect as its author wrote it.
        let not_honoured = seen
            .findings
            .iter()
            .filter(|(level, _)| matches!(level, Level::Error))
            .map(|(level, line)| {
                let line = line.strip_prefix(&format!("{level}: {prefix}"));
                line.unwrap_or_default().to_string()
            })
            .collect::<Vec<_>>();
        let (reconciled, message) = match (seen.error, not_honoured.first()) {
            (Some(e), _) => (
                false,
                format!("{e} (the last valid version, if any, stays in effect)"),
            ),
            (None, Some(first)) => (
                false,
                format!(
                    "the latest version is in effect, but not as written: {first}{}",
                    match not_honoured.len() {
                        1 => String::new(),
                        n => format!(" ({} more errors in validationMessages)", n - 1),
                    }
                ),
            ),
            (None, None) => (true, "the latest version is in effect".to_string()),
        };
        let messages = seen
            .findings
            .iter()
            .map(|(level, line)| {
                let prefix = format!("{level}: {prefix}");
                let description = line.strip_prefix(&prefix).unwrap_or(line);
                let (code, name) = level.message_code();
                let level = match level {
                    Level::Error => "ERROR",
                    Level::Warning | Level::Deprecated | Level::Expiring => "WARNING",
                };
                json!({"type": {"code": code, "name": name}, "level": level, "description": description})
            })
            .collect();
        ObjectStatus {
            resource: resource.clone(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            uid: seen.uid.map(str::to_string),
            stored: StoredStatus(seen.status.cloned()),
            reconciled,
            message,
            messages,
            gateway_api: None,
        }
    }

    /// A Gateway API object's status (`status`: the Gateway API's shape).
    pub fn gateway_api(resource: &ApiResource, seen: &Seen, status: Value) -> Self {
        let reconciled = !status.to_string().contains(r#""status":"False""#);
        ObjectStatus {
            resource: resource.clone(),
            namespace: seen.key.namespace.clone(),
            name: seen.key.name.clone(),
            uid: seen.uid.map(str::to_string),
            stored: StoredStatus(seen.status.cloned()),
            reconciled,
            message: String::new(),
            messages: Vec::new(),
            gateway_api: Some(status),
        }
    }

    /// With the dataflow's errors that name the object.
    fn with_errors(mut self, errors: &[ConfigError]) -> Self {
        if let Some(status) = &mut self.gateway_api {
            if let Some(key) = errors.first().map(|e| e.object.clone()) {
                super::gateway_status::with_route_errors(status, &key, errors);
                self.reconciled = !status.to_string().contains(r#""status":"False""#);
            }
            return self;
        }
        for e in errors {
            let (code, name) = e.code.message_code();
            self.messages.push(json!({
                "type": {"code": code, "name": name},
                "level": if e.code.is_warning() { "WARNING" } else { "ERROR" },
                "description": e.message,
            }));
        }
        self
    }

    /// With what proxies rejected of the object (those proxies keep their last accepted
    /// version: not reconciled everywhere).
    fn rejected(mut self, r: &ProxyRejection) -> Self {
        let description = describe(r);
        self.reconciled = false;
        self.message = format!(
            "{description}; those proxies keep the version they last accepted, every other \
             proxy is served this one"
        );
        self.messages.push(json!({
            "type": {"code": "MF0003", "name": "RejectedByProxies"},
            "level": "ERROR",
            "description": description,
        }));
        self
    }

    /// The merge patch of the status subresource, `since` the Reconciled condition's
    /// last transition.
    fn patch(&self, since: &str) -> Value {
        if let Some(status) = &self.gateway_api {
            return json!({"status": super::gateway_status::stamped(status, since)});
        }
        let messages = if self.messages.is_empty() {
            // Merge patch: null removes the field.
            Value::Null
        } else {
            Value::from(capped(&self.messages))
        };
        json!({"status": {
            "conditions": [{
                "type": "Reconciled",
                "status": if self.reconciled { "True" } else { "False" },
                "lastTransitionTime": since,
                "message": self.message,
            }],
            "validationMessages": messages,
        }})
    }
}

/// Most `validationMessages` written on one object: past them, one more message counts the
/// rest. An object of thousands of findings would otherwise make a status patch of
/// megabytes, and past etcd's limit every write of it would fail.
pub const MAX_MESSAGES: usize = 50;
/// Longest `description` written; a longer one is cut with `…`.
const MAX_DESCRIPTION: usize = 1024;

/// The messages to write: errors first, at most [`MAX_MESSAGES`] of them with their
/// descriptions cut, the last counting what was left out (`MF0016 MoreMessages`).
fn capped(messages: &[Value]) -> Vec<Value> {
    let mut sorted: Vec<&Value> = messages.iter().collect();
    sorted.sort_by_key(|m| m["level"] != "ERROR");
    let keep = if sorted.len() > MAX_MESSAGES {
        MAX_MESSAGES - 1
    } else {
        sorted.len()
    };
    let mut out: Vec<Value> = sorted[..keep]
        .iter()
        .map(|m| {
            let mut m = (*m).clone();
            if let Some(d) = m["description"].as_str() {
                if let Some((i, _)) = d.char_indices().nth(MAX_DESCRIPTION) {
                    m["description"] = Value::from(format!("{}…", &d[..i]));
                }
            }
            m
        })
        .collect();
    if sorted.len() > keep {
        out.push(json!({
            "type": {"code": "MF0016", "name": "MoreMessages"},
            "level": "WARNING",
            "description": format!(
                "{} more validation messages not written here: `meshflow validate` and the \
                 debug port's /debug/config_errors list them all",
                sorted.len() - keep
            ),
        }));
    }
    out
}

/// `rejected by 2 proxies (a, b) since 2026-…Z, RDS 80: <Envoy's message>`.
pub fn describe(r: &ProxyRejection) -> String {
    let mut named: Vec<&str> = r
        .proxies
        .iter()
        .map(String::as_str)
        .take(PROXIES_NAMED)
        .collect();
    if r.proxies.len() > PROXIES_NAMED {
        named.push("…");
    }
    let since = k8s_openapi::jiff::Timestamp::try_from(r.since)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    format!(
        "rejected by {} prox{} ({}) since {since}, {}: {}",
        r.proxies.len(),
        if r.proxies.len() == 1 { "y" } else { "ies" },
        named.join(", "),
        r.resources,
        r.message,
    )
}

/// What the runtime and the hub tell status writing: the objects proxies rejected and the
/// dataflow's errors by object.
#[derive(Clone)]
pub struct Feed {
    pub rejections: watch::Receiver<ProxyRejections>,
    pub errors: watch::Receiver<ObjectErrors>,
}

impl Default for Feed {
    /// Nothing rejected, no dataflow errors (`validate`, tests).
    fn default() -> Self {
        Feed {
            rejections: watch::channel(Default::default()).1,
            errors: watch::channel(Default::default()).1,
        }
    }
}

/// Where the writer reports what proxies rejected, besides the status: Events
/// ([`super::events::Events`]). A trait so that the writer knows nothing of how.
pub trait RejectionReporter: Send + 'static {
    fn report(
        &mut self,
        objects: &Statuses,
        rejected: &ProxyRejections,
    ) -> impl std::future::Future<Output = ()> + Send;
}

/// Starts the writer on the current runtime; returns where to send the desired statuses.
/// `holding`: whether this replica holds the status Lease (only then is status written);
/// `events`: where the rejections are reported as Events.
pub fn spawn(
    client: Client,
    feed: Feed,
    holding: watch::Receiver<bool>,
    events: impl RejectionReporter,
) -> watch::Sender<Statuses> {
    let (tx, rx) = watch::channel(Statuses::new());
    tokio::spawn(run(client, rx, feed, holding, events));
    tx
}

/// What was last written (or tried) for one object.
struct Written {
    status: ObjectStatus,
    /// The Reconciled condition's lastTransitionTime.
    since: String,
    at: Instant,
}

async fn run(
    client: Client,
    mut rx: watch::Receiver<Statuses>,
    mut feed: Feed,
    mut holding: watch::Receiver<bool>,
    mut events: impl RejectionReporter,
) {
    let mut written: HashMap<ConfigKey, Written> = HashMap::new();
    // The runtime or the Lease's task gone (meshflow stopping) leaves the last state standing.
    let (mut rejections_open, mut errors_open, mut holding_open) = (true, true, true);
    loop {
        let holder = *holding.borrow_and_update();
        if !holder {
            // Another replica writes meanwhile: on taking over, everything is written once.
            written.clear();
        }
        let mut desired = rx.borrow_and_update().clone();
        {
            let errors = feed.errors.borrow_and_update();
            for (key, status) in desired.iter_mut() {
                if let Some(e) = errors.get(key) {
                    *status = status.clone().with_errors(e);
                }
            }
        }
        let rejected = feed.rejections.borrow_and_update().clone();
        // Events are this replica's own news (its proxies rejected), whoever writes status.
        events.report(&desired, &rejected).await;
        for (key, status) in desired.iter_mut() {
            if let Some(r) = rejected.get(key) {
                *status = status.clone().rejected(r);
            }
        }
        let mut next: Option<Instant> = None;
        if holder {
            written.retain(|k, _| desired.contains_key(k));
            next = write_changed(&client, desired, &mut written).await;
        }
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            changed = feed.rejections.changed(), if rejections_open => rejections_open = changed.is_ok(),
            changed = feed.errors.changed(), if errors_open => errors_open = changed.is_ok(),
            changed = holding.changed(), if holding_open => holding_open = changed.is_ok(),
            _ = sleep_until(next), if next.is_some() => {}
        }
    }
}

/// Writes each status that changed since it was last written, unless it was written less
/// than [`MIN_INTERVAL`] ago; returns when the earliest of those is due.
async fn write_changed(
    client: &Client,
    desired: Statuses,
    written: &mut HashMap<ConfigKey, Written>,
) -> Option<Instant> {
    let mut next: Option<Instant> = None;
    for (key, status) in desired {
        let now = Instant::now();
        let since = match written.get(&key) {
            Some(w) if w.status == status => continue,
            Some(w) if w.at + MIN_INTERVAL > now => {
                let due = w.at + MIN_INTERVAL;
                next = Some(next.map_or(due, |n| n.min(due)));
                continue;
            }
            Some(w) if w.status.reconciled == status.reconciled => w.since.clone(),
            Some(_) => now_rfc3339(),
            None => {
                let (since, current) = from_stored(&status);
                let since = since.unwrap_or_else(now_rfc3339);
                if current {
                    written.insert(
                        key,
                        Written {
                            status,
                            since,
                            at: now,
                        },
                    );
                    continue;
                }
                since
            }
        };
        write(client, &key, &status, &since).await;
        // A failure is recorded as written: tried again when the status changes.
        written.insert(
            key,
            Written {
                status,
                since,
                at: Instant::now(),
            },
        );
    }
    next
}

/// What the status the API server holds gives a writer that has written nothing for the
/// object yet: the Reconciled condition's transition time, when it is in the state to write
/// (kept: the state did not change), and whether it says all that would be written.
fn from_stored(status: &ObjectStatus) -> (Option<String>, bool) {
    let Some(stored) = &status.stored.0 else {
        return (None, false);
    };
    if status.gateway_api.is_some() {
        let since = super::gateway_status::stored_since(stored);
        let current = since
            .as_deref()
            .is_some_and(|since| &status.patch(since)["status"] == stored);
        return (since, current);
    }
    let condition = &stored["conditions"][0];
    let state = if status.reconciled { "True" } else { "False" };
    let since = (condition["type"] == "Reconciled" && condition["status"] == state)
        .then(|| condition["lastTransitionTime"].as_str().map(str::to_string))
        .flatten();
    let current = since.as_deref().is_some_and(|since| {
        let patch = status.patch(since);
        stored.get("conditions") == Some(&patch["status"]["conditions"])
            && stored.get("validationMessages").unwrap_or(&Value::Null)
                == &patch["status"]["validationMessages"]
    });
    (since, current)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

async fn write(client: &Client, key: &ConfigKey, status: &ObjectStatus, since: &str) {
    // A cluster-scoped object (a GatewayClass) has no namespace.
    let api: Api<DynamicObject> = if status.namespace.is_empty() {
        Api::all_with(client.clone(), &status.resource)
    } else {
        Api::namespaced_with(client.clone(), &status.namespace, &status.resource)
    };
    let patch = status.patch(since);
    match api
        .patch_status(&status.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => tracing::debug!(object = %key_name(key), "status written"),
        Err(e) => {
            tracing::warn!(object = %key_name(key), error = %e, "writing the status failed; tried again on its next change")
        }
    }
}

pub(super) fn key_name(key: &ConfigKey) -> String {
    format!("{} {}/{}", key.kind, key.namespace, key.name)
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataflows::model::{ErrorCode, Kind};

    fn resource() -> ApiResource {
        ApiResource {
            group: "networking.istio.io".into(),
            version: "v1".into(),
            api_version: "networking.istio.io/v1".into(),
            kind: "VirtualService".into(),
            plural: "virtualservices".into(),
        }
    }

    fn seen<'a>(
        key: &'a ConfigKey,
        error: Option<&'a String>,
        findings: &'a [(Level, String)],
    ) -> Seen<'a> {
        Seen {
            key,
            uid: None,
            status: None,
            error,
            findings,
            records: &[],
            generation: None,
        }
    }

    #[test]
    fn a_stored_status_that_says_the_same_is_left_alone_and_its_transition_time_kept() {
        let key = ConfigKey::new(Kind::VirtualService, "ns", "r");
        let mut s = ObjectStatus::new(&resource(), &seen(&key, None, &[]));
        let written = s.patch("2026-01-01T00:00:00Z")["status"].clone();
        s.stored = StoredStatus(Some(written.clone()));
        assert_eq!(
            from_stored(&s),
            (Some("2026-01-01T00:00:00Z".to_string()), true)
        );
        // Another message, the same state: written, keeping the time.
        let mut other = written.clone();
        other["conditions"][0]["message"] = json!("something else");
        s.stored = StoredStatus(Some(other));
        assert_eq!(
            from_stored(&s),
            (Some("2026-01-01T00:00:00Z".to_string()), false)
        );
        // Another state: written, with a new time.
        let mut other = written;
        other["conditions"][0]["status"] = json!("False");
        s.stored = StoredStatus(Some(other));
        assert_eq!(from_stored(&s), (None, false));
        s.stored = StoredStatus(None);
        assert_eq!(from_stored(&s), (None, false));
    }

    /// A Gateway API status the API server already holds as meshflow would write it is left
    /// alone (a restarted writer or a new Lease holder does not rewrite every route), its
    /// transition time kept; one that says otherwise is written. MF0040 errors turn a
    /// route's ResolvedRefs False on meshflow's entries only.
    #[test]
    fn a_gateway_api_status_already_written_is_left_alone() {
        let key = ConfigKey::new(Kind::HttpRoute, "default", "r");
        let desired = json!({"parents": [
            {"parentRef": {"name": "theirs"}, "controllerName": "example.net/x",
             "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                             "lastTransitionTime": "2025-01-01T00:00:00Z"}]},
            {"parentRef": {"name": "gw"}, "controllerName": "istio.io/gateway-controller",
             "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"},
                            {"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs"}]}
        ]});
        let mut s = ObjectStatus::gateway_api(&resource(), &seen(&key, None, &[]), desired);
        assert!(s.reconciled);
        let written = s.patch("2026-01-01T00:00:00Z")["status"].clone();
        assert_eq!(
            written["parents"][0]["conditions"][0]["lastTransitionTime"], "2025-01-01T00:00:00Z",
            "another controller's condition is not restamped"
        );
        s.stored = StoredStatus(Some(written.clone()));
        assert_eq!(
            from_stored(&s),
            (Some("2026-01-01T00:00:00Z".to_string()), true)
        );
        let error = ConfigError {
            object: key.clone(),
            code: ErrorCode::BackendNotResolved,
            message: "spec.rules[0].backendRefs[0]: RefNotPermitted: no grant".into(),
        };
        let s = s.with_errors(&[error]);
        assert!(!s.reconciled);
        let patched = s.patch("2026-01-01T00:00:00Z");
        let ours = &patched["status"]["parents"][1]["conditions"][1];
        assert_eq!(ours["status"], "False");
        assert_eq!(ours["reason"], "RefNotPermitted");
        assert_eq!(patched["status"]["parents"][0], written["parents"][0]);
        assert!(!from_stored(&s).1, "it now says otherwise: written");
    }

    #[test]
    fn validation_messages_are_capped_errors_first() {
        let many: Vec<Value> = (0..2000)
            .map(|i| {
                json!({"type": {"code": "MF0002", "name": "x"}, "level": if i == 1999 { "ERROR" } else { "WARNING" }, "description": "d".repeat(5000)})
            })
            .collect();
        let out = capped(&many);
        assert_eq!(out.len(), MAX_MESSAGES);
        assert_eq!(out[0]["level"], "ERROR", "errors first");
        assert!(out[1]["description"].as_str().unwrap().chars().count() <= MAX_DESCRIPTION + 1);
        let last = &out[MAX_MESSAGES - 1];
        assert_eq!(last["type"]["name"], "MoreMessages");
        assert!(
            last["description"]
                .as_str()
                .unwrap()
                .starts_with("1951 more"),
            "{last}"
        );
        assert!(serde_json::to_vec(&out).unwrap().len() < 100_000);
        let few = &many[..3];
        assert_eq!(capped(few).len(), 3);
    }

    #[test]
    fn dataflow_errors_become_validation_messages_with_their_codes() {
        let key = ConfigKey::new(Kind::VirtualService, "ns", "r");
        let error = ConfigError {
            object: key.clone(),
            code: dataflows::model::ErrorCode::SubsetNotDefined,
            message: "subset \"v3\" of host reviews.ns.svc.cluster.local is defined by no DestinationRule".into(),
        };
        let s = ObjectStatus::new(&resource(), &seen(&key, None, &[])).with_errors(&[error]);
        let p = s.patch("2026-01-01T00:00:00Z");
        let m = &p["status"]["validationMessages"][0];
        assert_eq!(m["type"]["code"], "MF0004");
        assert_eq!(m["type"]["name"], "ReferencedResourceNotFound");
        assert_eq!(m["level"], "ERROR");
        assert!(
            m["description"].as_str().unwrap_or("").contains("\"v3\""),
            "{m}"
        );
        // The object itself is in effect: its analysis does not unreconcile it.
        assert_eq!(p["status"]["conditions"][0]["status"], "True");
    }

    #[test]
    fn a_rejection_counts_every_proxy_names_five_and_unreconciles() {
        let key = ConfigKey::new(Kind::VirtualService, "ns", "r");
        let r = ProxyRejection {
            proxies: (0..7).map(|i| format!("p{i}")).collect(),
            resources: "RDS 80".into(),
            message: "Invalid regex".into(),
            since: std::time::UNIX_EPOCH + Duration::from_secs(86_400),
        };
        let s = ObjectStatus::new(&resource(), &seen(&key, None, &[])).rejected(&r);
        let p = s.patch("2026-01-01T00:00:00Z");
        assert_eq!(p["status"]["conditions"][0]["status"], "False");
        let m = &p["status"]["validationMessages"][0];
        assert_eq!(m["type"]["name"], "RejectedByProxies");
        assert_eq!(
            m["description"],
            "rejected by 7 proxies (p0, p1, p2, p3, p4, …) since 1970-01-02T00:00:00Z, RDS 80: Invalid regex"
        );
    }

    #[test]
    fn findings_become_validation_messages_naming_the_field() {
        let resource = resource();
        let key = ConfigKey::new(Kind::VirtualService, "ns", "r");
        let findings = vec![(
            Level::Warning,
            "warning: VirtualService ns/r: spec.http[0].corsPolicy: ignored".to_string(),
        )];
        let s = ObjectStatus::new(&resource, &seen(&key, None, &findings));
        let p = s.patch("2026-01-01T00:00:00Z");
        assert_eq!(p["status"]["conditions"][0]["status"], "True");
        assert_eq!(
            p["status"]["validationMessages"][0]["description"],
            "spec.http[0].corsPolicy: ignored"
        );
        assert_eq!(p["status"]["validationMessages"][0]["level"], "WARNING");
        let bad = "VirtualService ns/r: spec.http[0].timeout: bad".to_string();
        let s = ObjectStatus::new(&resource, &seen(&key, Some(&bad), &[]));
        let p = s.patch("2026-01-01T00:00:00Z");
        assert_eq!(p["status"]["conditions"][0]["status"], "False");
        assert!(p["status"]["validationMessages"].is_null());
    }

    #[test]
    fn an_error_finding_means_not_reconciled_as_written() {
        let key = ConfigKey::new(Kind::AuthorizationPolicy, "ns", "deny");
        let findings = vec![
            (
                Level::Error,
                "error: AuthorizationPolicy ns/deny: spec.action: DENY is not translated"
                    .to_string(),
            ),
            (
                Level::Error,
                "error: AuthorizationPolicy ns/deny: spec.rules[0]: not read".to_string(),
            ),
        ];
        let s = ObjectStatus::new(&resource(), &seen(&key, None, &findings));
        let p = s.patch("2026-01-01T00:00:00Z");
        let condition = &p["status"]["conditions"][0];
        assert_eq!(condition["status"], "False", "{p:#}");
        assert_eq!(
            condition["message"],
            "the latest version is in effect, but not as written: spec.action: DENY is not \
             translated (1 more errors in validationMessages)"
        );
        assert_eq!(p["status"]["validationMessages"][1]["level"], "ERROR");
    }
}
