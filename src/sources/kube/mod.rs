//! The Kubernetes source (`serve --kube`): watches the cluster's Services, EndpointSlices,
//! Pods and Istio networking objects ([`kinds`]) with `kube::runtime::watcher`, one watch per
//! kind (per namespace with `--namespaces`), and reports them as the file source reports a
//! directory: through the same config parser, so an invalid object gets the same error and
//! its last valid version stays in effect ([`watched`]).
//!
//! The watcher lists with pagination, watches with bookmarks, and on a 410 Gone (history
//! compacted while it was away) or a dropped connection watches again or relists; a relist
//! is swapped in whole, so only true differences reach the dataflow. The first report is
//! sent once every watch has completed its initial list: until then the server is not
//! ready. Events arriving together become one report.
//!
//! Problems reported: invalid objects, kinds the cluster does not serve, and watches that
//! cannot list or start (forbidden, unreachable API server) — the last for a minute after
//! their latest failure. A connection dropped mid-watch, or a 410 answered by a relist, is
//! routine for a watch and only logged.
//!
//! Runs its own single-threaded tokio runtime on the source's thread.

pub mod kinds;
pub mod watched;

use super::{Report, Sink, Source};
use crate::input::SourceName;
use dataflows::model::MeshConfig;
use kinds::WatchedKind;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use watched::Watched;

/// What `serve --kube` was told.
#[derive(Clone, Debug, Default)]
pub struct KubeOptions {
    /// A kubeconfig file; without it, `KUBECONFIG`, `~/.kube/config`, then the in-cluster
    /// service account (what `kube::Config::infer` tries, in that order).
    pub kubeconfig: Option<PathBuf>,
    /// Watch only these namespaces (all when empty).
    pub namespaces: Vec<String>,
    /// Watch only objects with these labels (a Kubernetes label selector).
    pub label_selector: Option<String>,
}

/// The Kubernetes source (see the module documentation).
pub struct KubeSource {
    options: KubeOptions,
    mesh: MeshConfig,
}

impl KubeSource {
    pub fn new(options: KubeOptions, mesh: MeshConfig) -> Self {
        KubeSource { options, mesh }
    }
}

impl Source for KubeSource {
    fn name(&self) -> SourceName {
        "kubernetes"
    }

    fn run(self: Box<Self>, sink: Sink) -> Result<(), String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("starting the Kubernetes source's runtime: {e}"))?;
        rt.block_on(self.watch(sink))
    }
}

/// How long a watch's failure to list or start is reported after it last happened: the
/// watcher retries with a backoff of at most about 30 s, so a persisting failure is renewed
/// before it expires, and a recovered watch (which may have no event to say so) stops being
/// reported.
const FAILURE_REPORTED_FOR: Duration = Duration::from_secs(60);

/// How long a watch answered 410 Gone waits before it relists.
const RELIST_PAUSE: Duration = Duration::from_millis(500);

/// One watch's message to the loop that reports.
type Message = (usize, Result<Event<DynamicObject>, watcher::Error>);

impl KubeSource {
    async fn client(&self) -> Result<Client, String> {
        let config = match &self.options.kubeconfig {
            Some(path) => {
                let kubeconfig = kube::config::Kubeconfig::read_from(path)
                    .map_err(|e| format!("--kubeconfig {}: {e}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                    .await
                    .map_err(|e| format!("--kubeconfig {}: {e}", path.display()))?
            }
            None => kube::Config::infer().await.map_err(|e| {
                format!(
                    "no Kubernetes configuration (in-cluster, KUBECONFIG or ~/.kube/config): {e}"
                )
            })?,
        };
        Client::try_from(config).map_err(|e| format!("the Kubernetes client: {e}"))
    }

    /// Discovers which version of each Istio kind to watch; retried while the API server
    /// cannot be reached (the server is not ready meanwhile).
    async fn discover(client: &Client) -> (Vec<WatchedKind>, Vec<String>) {
        let mut backoff = Duration::from_millis(500);
        loop {
            match kube::discovery::group(client, kinds::ISTIO_GROUP).await {
                Ok(group) => {
                    let served: Vec<_> = group
                        .versions()
                        .map(|v| (v.to_string(), group.versioned_resources(v)))
                        .collect();
                    return kinds::istio_kinds(&served);
                }
                Err(kube::Error::Discovery(kube::error::DiscoveryError::MissingApiGroup(_))) => {
                    return kinds::istio_kinds(&[]);
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "Kubernetes API discovery failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    async fn watch(self: Box<Self>, mut sink: Sink) -> Result<(), String> {
        let client = self.client().await?;
        let (istio, not_served) = Self::discover(&client).await;
        for e in &not_served {
            tracing::error!(error = %e, "Istio kind not watched");
        }
        let kinds: Vec<WatchedKind> = kinds::kubernetes_kinds().into_iter().chain(istio).collect();
        let mut config = watcher::Config::default();
        if let Some(selector) = &self.options.label_selector {
            config = config.labels(selector);
        }
        // Each namespace once: two watches of one namespace would emit every object twice.
        let mut listed: Vec<&str> = self.options.namespaces.iter().map(String::as_str).collect();
        listed.sort_unstable();
        listed.dedup();
        let namespaces: Vec<Option<&str>> = if listed.is_empty() {
            vec![None]
        } else {
            listed.into_iter().map(Some).collect()
        };
        let (tx, mut rx) = mpsc::channel::<Message>(1024);
        let mut watches: Vec<(String, Watched)> = Vec::new();
        for k in &kinds {
            for ns in &namespaces {
                let api: Api<DynamicObject> = match ns {
                    Some(ns) => Api::namespaced_with(client.clone(), ns, &k.resource),
                    None => Api::all_with(client.clone(), &k.resource),
                };
                let what = match ns {
                    Some(ns) => format!("{} in {ns}", k.resource.kind),
                    None => k.resource.kind.clone(),
                };
                tracing::info!(watch = %what, api_version = %k.resource.api_version, "watching");
                let index = watches.len();
                watches.push((
                    what,
                    Watched::new(
                        k.kind,
                        &k.resource.api_version,
                        &k.resource.kind,
                        self.mesh.clone(),
                    ),
                ));
                tokio::spawn(run_watch(index, api, config.clone(), tx.clone()));
            }
        }
        drop(tx);

        let mut failures: Vec<Option<(String, Instant)>> = vec![None; watches.len()];
        let mut reported: Option<Vec<String>> = None;
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                message = rx.recv() => {
                    let Some(first) = message else {
                        return Err("every Kubernetes watch stopped".into());
                    };
                    let mut batch = vec![first];
                    while let Ok(m) = rx.try_recv() {
                        batch.push(m);
                    }
                    for (index, result) in batch {
                        let (what, watched) = &mut watches[index];
                        match result {
                            Ok(event) => {
                                failures[index] = None;
                                watched.apply(event);
                            }
                            Err(e) => {
                                if let Some(failure) = reportable(what, &e) {
                                    failures[index] = Some((failure, Instant::now()));
                                }
                            }
                        }
                    }
                }
                _ = tick.tick() => {
                    for f in failures.iter_mut() {
                        if f.as_ref().is_some_and(|(_, at)| at.elapsed() > FAILURE_REPORTED_FOR) {
                            *f = None;
                        }
                    }
                }
            }
            // The first report is the whole cluster: it waits for every initial list.
            if !watches.iter().all(|(_, w)| w.listed()) {
                continue;
            }
            let mut report = Report::default();
            for (_, w) in watches.iter_mut() {
                let diff = w.take_diff();
                report.changes.extend(diff.changes);
                report.described.extend(diff.described);
            }
            // Watches hold disjoint objects: sorting is all a merged report needs.
            report.changes.sort_by(|a, b| a.0.cmp(&b.0));
            report.described.sort();
            report.errors = not_served.clone();
            report
                .errors
                .extend(failures.iter().flatten().map(|(f, _)| f.clone()));
            for (_, w) in &watches {
                report.errors.extend(w.errors().cloned());
            }
            let first = reported.is_none();
            if first || !report.changes.is_empty() || reported.as_ref() != Some(&report.errors) {
                reported = Some(report.errors.clone());
                if !sink.send(report) {
                    return Ok(());
                }
            }
        }
    }
}

/// Runs one watch until the reporting loop is gone, restarting the watcher (a full relist)
/// when the API server answers a watch request itself with 410 Gone: the watcher would
/// retry the same expired resourceVersion.
async fn run_watch(
    index: usize,
    api: Api<DynamicObject>,
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
            tracing::warn!(watch = what, %error, "Kubernetes watch failing");
            Some(format!("watching {what}: {error}"))
        }
        watcher::Error::WatchError(_) | watcher::Error::WatchFailed(_) => {
            tracing::info!(watch = what, %error, "Kubernetes watch interrupted; resuming");
            None
        }
    }
}
