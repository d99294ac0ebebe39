//! The running watches of one connection to a cluster: one task per (kind, namespace)
//! feeding its [`Watched`] through a channel, the failures of those that cannot list or
//! start, the Istio kinds the cluster does not serve (looked for again with a growing pause,
//! so CRDs installed after meshflow are picked up), and the report of what changed.

use super::kinds::{self, WatchedKind};
use super::object::KubeObject;
use super::watched::Watched;
use crate::config::Level;
use crate::sources::Report;
use dataflows::model::{Kind, MeshConfig};
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;

/// How long a watch's failure to list or start is reported after it last happened: the
/// watcher retries with a backoff of at most about 30 s, so a persisting failure is renewed
/// before it expires, and a recovered watch (which may have no event to say so) stops being
/// reported.
const FAILURE_REPORTED_FOR: Duration = Duration::from_secs(60);

/// How long a watch answered 410 Gone waits before it relists.
const RELIST_PAUSE: Duration = Duration::from_millis(500);

/// The pauses between looks for Istio kinds the cluster did not serve: the first soon (CRDs
/// applied right after meshflow), then doubling up to the last.
const REDISCOVER_FIRST: Duration = Duration::from_secs(2);
const REDISCOVER_MAX: Duration = Duration::from_secs(60);

/// One watch's message to the session.
pub type Message = (usize, Result<Event<KubeObject>, watcher::Error>);

/// What every watch shares.
pub struct Scope {
    pub client: Client,
    pub config: watcher::Config,
    /// The label selector in `config`, for errors.
    pub selector: Option<String>,
    /// `None`: the whole cluster.
    pub namespaces: Vec<Option<String>>,
    pub mesh: MeshConfig,
}

struct Watch {
    /// `Kind in namespace`, for logs and errors.
    what: String,
    watched: Watched,
    /// The resource it watches (where status is written).
    resource: kube::discovery::ApiResource,
    /// The latest failure to list or start, and when.
    failure: Option<(String, Instant)>,
}

pub struct Session {
    scope: Scope,
    tx: mpsc::Sender<Message>,
    watches: Vec<Watch>,
    /// The kinds being watched.
    kinds: BTreeSet<Kind>,
    /// Errors naming the Istio kinds the cluster does not serve.
    not_served: Vec<String>,
    /// Why the status Lease cannot be held, while that lasts.
    status_problem: Option<String>,
    /// An object of a kind that has status got an event since the last look.
    status_kinds_touched: bool,
    /// When to look for them again, and the pause after that.
    rediscover: Option<(Instant, Duration)>,
    /// The errors and analysis of the last report (`None` before the first).
    reported: Option<(Vec<String>, Vec<String>)>,
    /// The analysis of the last report, with levels.
    analysis: Vec<(Level, String)>,
}

impl Session {
    pub fn new(scope: Scope, tx: mpsc::Sender<Message>) -> Session {
        Session {
            scope,
            tx,
            watches: Vec::new(),
            kinds: BTreeSet::new(),
            not_served: Vec::new(),
            status_problem: None,
            status_kinds_touched: false,
            rediscover: None,
            reported: None,
            analysis: Vec::new(),
        }
    }

    /// Starts one watch per namespace for each kind not watched yet.
    pub fn watch(&mut self, kinds: Vec<WatchedKind>) {
        for k in kinds {
            if !self.kinds.insert(k.kind) {
                continue;
            }
            // Namespaces and GatewayClasses are cluster-scoped, watched whole and unfiltered:
            // listeners' namespace selectors match Namespaces' labels, whatever `--selector`
            // keeps.
            let cluster_scoped = matches!(k.kind, Kind::Namespace | Kind::GatewayClass);
            let scopes = if cluster_scoped {
                vec![None]
            } else {
                self.scope.namespaces.clone()
            };
            for ns in &scopes {
                let client = self.scope.client.clone();
                let api: Api<KubeObject> = match ns {
                    Some(ns) => Api::namespaced_with(client, ns, &k.resource),
                    None => Api::all_with(client, &k.resource),
                };
                let what = match ns {
                    Some(ns) => format!("{} in {ns}", k.resource.kind),
                    None => k.resource.kind.clone(),
                };
                tracing::info!(watch = %what, api_version = %k.resource.api_version, "watching");
                let index = self.watches.len();
                let watched = Watched::new(
                    k.kind,
                    &k.resource.api_version,
                    &k.resource.kind,
                    self.scope.mesh.clone(),
                );
                self.watches.push(Watch {
                    what,
                    watched,
                    resource: k.resource.clone(),
                    failure: None,
                });
                let config = if cluster_scoped {
                    watcher::Config::default()
                } else {
                    self.scope.config.clone()
                };
                tokio::spawn(run_watch(index, api, config, self.tx.clone()));
            }
        }
    }

    /// Records the Istio kinds the cluster does not serve, and schedules a look for them.
    pub fn not_served(&mut self, errors: Vec<String>) {
        if errors != self.not_served {
            for e in &errors {
                tracing::error!(target: crate::sources::PROBLEMS_LOG_TARGET, error = %e, "Istio kind not watched");
            }
        }
        self.rediscover = match (errors.is_empty(), self.rediscover) {
            (true, _) => None,
            (false, None) => Some((Instant::now() + REDISCOVER_FIRST, REDISCOVER_FIRST)),
            (false, Some((_, pause))) => {
                let pause = (pause * 2).min(REDISCOVER_MAX);
                Some((Instant::now() + pause, pause))
            }
        };
        self.not_served = errors;
    }

    /// When to look for missing Istio kinds again, if any are missing.
    pub fn rediscover_at(&self) -> Option<Instant> {
        self.rediscover.map(|(at, _)| at)
    }

    /// Looks for the Istio kinds the cluster did not serve, and watches those it now does.
    pub async fn rediscover(&mut self) {
        match kinds::discover_istio(&self.scope.client).await {
            Ok((found, missing)) => {
                self.watch(found);
                self.not_served(missing);
            }
            Err(e) => {
                tracing::warn!(error = %e, "Kubernetes API discovery failed");
                let errors = std::mem::take(&mut self.not_served);
                self.not_served(errors);
            }
        }
    }

    /// Applies what the watches sent.
    /// `Err` when a list is refused as a bad request: what meshflow asks for (the label
    /// selector) is wrong, and asking again will not help.
    pub fn receive(&mut self, batch: Vec<Message>) -> Result<(), String> {
        for (index, result) in batch {
            let Some(w) = self.watches.get_mut(index) else {
                continue;
            };
            match result {
                Ok(event) => {
                    w.failure = None;
                    w.watched.apply(event);
                    self.status_kinds_touched |= super::status::writes_status(&w.resource);
                }
                Err(watcher::Error::InitialListFailed(kube::Error::Api(status)))
                    if status.code == 400 =>
                {
                    let selector = match &self.scope.selector {
                        Some(s) => format!(" (--label-selector {s:?})"),
                        None => String::new(),
                    };
                    return Err(format!(
                        "the API server refuses to list {}{selector}: {}",
                        w.what, status.message
                    ));
                }
                Err(e) => {
                    if let Some(failure) = reportable(&w.what, &e) {
                        w.failure = Some((failure, Instant::now()));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether an object of a kind that has status got an event since the last call (its
    /// stored status may have changed without any record changing).
    pub fn take_status_kinds_touched(&mut self) -> bool {
        std::mem::take(&mut self.status_kinds_touched)
    }

    /// Why status cannot be written (the Lease cannot be held), or `None` once it can: an
    /// error of the source's reports.
    pub fn status_problem(&mut self, problem: Option<String>) {
        self.status_problem = problem;
    }

    /// Forgets failures not renewed for [`FAILURE_REPORTED_FOR`].
    pub fn expire_failures(&mut self) {
        for w in &mut self.watches {
            if w.failure
                .as_ref()
                .is_some_and(|(_, at)| at.elapsed() > FAILURE_REPORTED_FOR)
            {
                w.failure = None;
            }
        }
    }

    /// The report to send now, if any: none before every watch started so far has completed
    /// its initial list (the first report is the whole cluster), then one whenever a record
    /// or the list of problems changed.
    pub fn report(&mut self) -> Option<Report> {
        let first = self.reported.is_none();
        if first && !self.watches.iter().all(|w| w.watched.listed()) {
            return None;
        }
        let mut report = Report::default();
        for w in &mut self.watches {
            let diff = w.watched.take_diff();
            report.changes.extend(diff.changes);
            report.described.extend(diff.described);
        }
        // Watches hold disjoint objects: sorting is all a merged report needs.
        report.changes.sort_by(|a, b| a.0.cmp(&b.0));
        report.described.sort();
        report.errors = self.not_served.clone();
        report.errors.extend(self.status_problem.clone());
        for w in &self.watches {
            report
                .errors
                .extend(w.failure.iter().map(|(f, _)| f.clone()));
        }
        for w in &self.watches {
            report.errors.extend(w.watched.errors().cloned());
        }
        let mut analysis: Vec<(Level, String)> = self
            .watches
            .iter()
            .flat_map(|w| w.watched.analysis().cloned())
            .collect();
        analysis.sort();
        report.analysis = analysis.iter().map(|(_, line)| line.clone()).collect();
        let said = (report.errors.clone(), report.analysis.clone());
        if !first && report.changes.is_empty() && self.reported.as_ref() == Some(&said) {
            return None;
        }
        self.reported = Some(said);
        self.analysis = analysis;
        Some(report)
    }

    /// What the status of each object of a kind that has status holds now
    /// ([`status::STATUS_KINDS`](super::status::STATUS_KINDS)).
    pub fn statuses(&self) -> super::status::Statuses {
        use super::gateway_status;
        let mut out = super::status::Statuses::new();
        let mut api = Vec::new();
        for w in &self.watches {
            // ReferenceGrants have no status, but the Gateways' and sets' does depend on
            // them (a certificate of another namespace): judged with the others.
            if w.resource.group == "gateway.networking.k8s.io"
                && w.resource.kind == "ReferenceGrant"
            {
                api.extend(w.watched.statuses().map(|seen| (&w.resource, seen)));
                continue;
            }
            if !super::status::writes_status(&w.resource) {
                continue;
            }
            for seen in w.watched.statuses() {
                if gateway_status::is_gateway_api(seen.key.kind) {
                    api.push((&w.resource, seen));
                    continue;
                }
                out.insert(
                    seen.key.clone(),
                    super::status::ObjectStatus::new(&w.resource, &seen),
                );
            }
        }
        // The Gateway API's status is of the objects together (routes attach to Gateways).
        let objects: Vec<_> = api
            .iter()
            .flat_map(|(_, seen)| {
                seen.records.iter().filter_map(move |r| match r {
                    dataflows::model::Record::GatewayApi(o) => {
                        Some((o, seen.generation, seen.status))
                    }
                    _ => None,
                })
            })
            .collect();
        // The Services that exist (a route whose parent is a Service is accepted there) and
        // the Secrets (a listener's certificate).
        let mut known = gateway_status::Known::default();
        for w in self.watches.iter().filter(|w| w.resource.group.is_empty()) {
            match w.resource.kind.as_str() {
                "Service" => {
                    for seen in w.watched.statuses() {
                        let key = (seen.key.namespace.clone(), seen.key.name.clone());
                        for r in seen.records {
                            if let dataflows::model::Record::Service(s) = r {
                                known.service_ports.insert(key.clone(), s.ports.clone());
                            }
                        }
                        known.services.insert(key);
                    }
                }
                "ConfigMap" => {
                    for seen in w.watched.statuses() {
                        for r in seen.records {
                            if let dataflows::model::Record::GatewayApi(
                                dataflows::model::GatewayApiObject::ConfigMap(c),
                            ) = r
                            {
                                known.config_maps.insert(
                                    (c.key.namespace.clone(), c.key.name.clone()),
                                    c.clone(),
                                );
                            }
                        }
                    }
                }
                "Namespace" => {
                    for seen in w.watched.statuses() {
                        for r in seen.records {
                            if let dataflows::model::Record::GatewayApi(
                                dataflows::model::GatewayApiObject::Namespace(n),
                            ) = r
                            {
                                known
                                    .namespaces
                                    .insert(n.key.name.clone(), n.labels.clone());
                            }
                        }
                    }
                }
                "Secret" => {
                    for seen in w.watched.statuses() {
                        for r in seen.records {
                            if let dataflows::model::Record::Secret(secret) = r {
                                known.add_secret(secret);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        let mut desired = gateway_status::desired(&objects, &known);
        super::backend_tls_status::policy_statuses(&objects, &known, &mut desired);
        for (resource, seen) in &api {
            if let Some(status) = desired.remove(seen.key) {
                out.insert(
                    seen.key.clone(),
                    super::status::ObjectStatus::gateway_api(resource, seen, status),
                );
            }
        }
        out
    }

    /// The analysis of the last report, with levels (errors first).
    pub fn analysis(&self) -> &[(Level, String)] {
        &self.analysis
    }
}

/// Runs one watch until the session is gone, restarting the watcher (a full relist) when
/// the API server answers a watch request itself with 410 Gone: the watcher would retry the
/// same expired resourceVersion.
async fn run_watch(
    index: usize,
    api: Api<KubeObject>,
    config: watcher::Config,
    tx: mpsc::Sender<Message>,
) {
    loop {
        let mut stream = Box::pin(watcher::watcher(api.clone(), config.clone()).default_backoff());
        while let Some(item) = stream.next().await {
            let gone = matches!(
                &item,
                Err(watcher::Error::WatchStartFailed(kube::Error::Api(status))) if status.code == 410
            );
            if tx.send((index, item)).await.is_err() {
                return;
            }
            if gone {
                // A pause, so an API server that keeps answering 410 is not relisted in a
                // tight loop.
                tokio::time::sleep(RELIST_PAUSE).await;
                break;
            }
        }
    }
}

/// The problem to report for a watcher error, or `None` for what a watch recovers from on
/// its own (logged).
fn reportable(what: &str, error: &watcher::Error) -> Option<String> {
    match error {
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) if status.code == 410 => {
            tracing::info!(watch = what, %error, "Kubernetes watch expired; relisting");
            None
        }
        watcher::Error::InitialListFailed(_)
        | watcher::Error::WatchStartFailed(_)
        | watcher::Error::NoResourceVersion => {
            // Reported as a config problem too: under the problems target, so `validate`
            // shows it once.
            tracing::warn!(target: crate::sources::PROBLEMS_LOG_TARGET, watch = what, %error, "Kubernetes watch failing");
            Some(format!("watching {what}: {error}"))
        }
        watcher::Error::WatchError(_) | watcher::Error::WatchFailed(_) => {
            tracing::info!(watch = what, %error, "Kubernetes watch interrupted; resuming");
            None
        }
    }
}
