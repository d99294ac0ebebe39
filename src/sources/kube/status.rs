//! Status writing (`serve --kube --write-status`): tells each VirtualService,
//! DestinationRule, Gateway, ServiceEntry and Sidecar's author what became of it, on the
//! object's `status` subresource, in the shape Istio writes:
//!
//! - `conditions: [{type: Reconciled, status: "True"|"False", lastTransitionTime, message}]`:
//!   `True` when its latest version is in effect, `False` with the error naming the field
//!   when it is invalid (its last valid version, if any, stays in effect);
//! - `validationMessages: [{type: {code, name}, level: ERROR|WARNING, description}]`, as
//!   `istioctl analyze` gives them: the analysis of the version in effect (`description`
//!   names the field: `spec.http[0].corsPolicy: …`).
//! - NACK attribution: while an object is set back because proxies rejected a resource
//!   built from it (`runtime::rollback`, published through the hub), `Reconciled` is
//!   `False` and a validationMessage `RejectedByProxies` (ERROR) names how many proxies
//!   rejected it and up to [`PROXIES_NAMED`] of them, the resources, Envoy's message and
//!   since when; both go when the object's next version ends the rollback.
//!
//! Writes are merge patches of the status subresource, from a task of their own: the
//! source hands it the whole desired state through a `watch` channel (so a burst of
//! changes is one state), and the writer patches an object only when its status content
//! changed, at most once per object per [`MIN_INTERVAL`]. A failed write is logged and
//! tried again when the object's status next changes.

use crate::config::Level;
use crate::input::{ProxyRejection, ProxyRejections};
use dataflows::model::ConfigKey;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::Client;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The kinds whose status is written (WorkloadEntry's is not Istio's to say either).
pub const STATUS_KINDS: [&str; 5] = [
    "VirtualService",
    "DestinationRule",
    "Gateway",
    "ServiceEntry",
    "Sidecar",
];

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
    /// `Reconciled`: the latest version is in effect.
    pub reconciled: bool,
    /// The `Reconciled` condition's message.
    pub message: String,
    /// `validationMessages`.
    pub messages: Vec<Value>,
}

impl ObjectStatus {
    /// From the watch's view of the object: the error of its latest version (invalid) and
    /// the findings (`level: Kind ns/name: field: message`) of the version in effect.
    pub fn new(
        resource: &ApiResource,
        key: &ConfigKey,
        error: Option<&String>,
        findings: &[(Level, String)],
    ) -> Self {
        let (reconciled, message) = match error {
            None => (true, "the latest version is in effect".to_string()),
            Some(e) => (
                false,
                format!("{e} (the last valid version, if any, stays in effect)"),
            ),
        };
        let messages = findings
            .iter()
            .map(|(level, line)| {
                let prefix = format!("{level}: {:?} {}/{}: ", key.kind, key.namespace, key.name);
                let description = line.strip_prefix(&prefix).unwrap_or(line);
                let (code, name, level) = match level {
                    Level::Error => ("MF0002", "ConfigNotFullyGenerated", "ERROR"),
                    Level::Warning => ("MF0001", "FieldNotSupported", "WARNING"),
                };
                json!({"type": {"code": code, "name": name}, "level": level, "description": description})
            })
            .collect();
        ObjectStatus {
            resource: resource.clone(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            reconciled,
            message,
            messages,
        }
    }

    /// With what proxies rejected of the object (it is set back: not reconciled).
    fn rejected(mut self, r: &ProxyRejection) -> Self {
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
        let description = format!(
            "rejected by {} prox{} ({}) since {since}, {}: {}",
            r.proxies.len(),
            if r.proxies.len() == 1 { "y" } else { "ies" },
            named.join(", "),
            r.resources,
            r.message,
        );
        self.reconciled = false;
        self.message = format!(
            "{description}; the previous version stays in effect until the object changes again"
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
        let messages = if self.messages.is_empty() {
            // Merge patch: null removes the field.
            Value::Null
        } else {
            Value::from(self.messages.clone())
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

/// Starts the writer on the current runtime; returns where to send the desired statuses.
/// `rejections`: the objects proxies rejected, from the runtime.
pub fn spawn(
    client: Client,
    rejections: Option<watch::Receiver<ProxyRejections>>,
) -> watch::Sender<Statuses> {
    let (tx, rx) = watch::channel(Statuses::new());
    let rejections = rejections.unwrap_or_else(|| watch::channel(Default::default()).1);
    tokio::spawn(run(client, rx, rejections));
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
    mut rejections: watch::Receiver<ProxyRejections>,
) {
    let mut written: HashMap<ConfigKey, Written> = HashMap::new();
    // The runtime gone (meshflow stopping) leaves the last rejections standing.
    let mut rejections_open = true;
    loop {
        let mut desired = rx.borrow_and_update().clone();
        {
            let rejected = rejections.borrow_and_update();
            for (key, status) in desired.iter_mut() {
                if let Some(r) = rejected.get(key) {
                    *status = status.clone().rejected(r);
                }
            }
        }
        written.retain(|k, _| desired.contains_key(k));
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
                _ => now_rfc3339(),
            };
            write(&client, &key, &status, &since).await;
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
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            changed = rejections.changed(), if rejections_open => rejections_open = changed.is_ok(),
            _ = sleep_until(next), if next.is_some() => {}
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

async fn write(client: &Client, key: &ConfigKey, status: &ObjectStatus, since: &str) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &status.namespace, &status.resource);
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

fn key_name(key: &ConfigKey) -> String {
    format!("{:?} {}/{}", key.kind, key.namespace, key.name)
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataflows::model::Kind;

    fn resource() -> ApiResource {
        ApiResource {
            group: "networking.istio.io".into(),
            version: "v1".into(),
            api_version: "networking.istio.io/v1".into(),
            kind: "VirtualService".into(),
            plural: "virtualservices".into(),
        }
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
        let s = ObjectStatus::new(&resource(), &key, None, &[]).rejected(&r);
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
        let s = ObjectStatus::new(&resource, &key, None, &findings);
        let p = s.patch("2026-01-01T00:00:00Z");
        assert_eq!(p["status"]["conditions"][0]["status"], "True");
        assert_eq!(
            p["status"]["validationMessages"][0]["description"],
            "spec.http[0].corsPolicy: ignored"
        );
        assert_eq!(p["status"]["validationMessages"][0]["level"], "WARNING");
        let bad = "VirtualService ns/r: spec.http[0].timeout: bad".to_string();
        let s = ObjectStatus::new(&resource, &key, Some(&bad), &[]);
        let p = s.patch("2026-01-01T00:00:00Z");
        assert_eq!(p["status"]["conditions"][0]["status"], "False");
        assert!(p["status"]["validationMessages"].is_null());
    }
}
