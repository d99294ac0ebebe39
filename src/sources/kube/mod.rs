//! The Kubernetes source (`serve --kube`): watches the cluster's Services, EndpointSlices,
//! Pods and Istio networking objects ([`kinds`]) with `kube::runtime::watcher`, one watch per
//! kind (per namespace with `--namespaces`), and reports them as the file source reports a
//! directory: through the same config parser, so an invalid object gets the same error and
//! its last valid version stays in effect, and an accepted one the same analysis of what is
//! not translated ([`watched`]).
//!
//! The watcher lists with pagination, watches with bookmarks, and on a 410 Gone (history
//! compacted while it was away) or a dropped connection watches again or relists; a relist
//! is swapped in whole, so only true differences reach the dataflow. The first report is
//! sent once every watch has completed its initial list: until then the server is not
//! ready. Events arriving together become one report.
//!
//! Problems reported: invalid objects, kinds the cluster does not serve (looked for again,
//! soon and then every minute, so Istio's CRDs may be installed after meshflow), and watches
//! that cannot list or start (forbidden, unreachable API server) — the last for a minute
//! after their latest failure. A connection dropped mid-watch, or a 410 answered by a
//! relist, is routine for a watch and only logged (`session.rs`).
//!
//! With `--write-status`, each Istio object's status says what became of it ([`status`]),
//! written by one replica at a time, the holder of a Lease ([`lease`]); rejections by
//! proxies are also reported as Events ([`events`]).
//!
//! Runs its own single-threaded tokio runtime on the source's thread.

mod backend_tls_status;
pub mod events;
mod gateway_status;
pub mod kinds;
pub mod lease;
pub mod mesh_configmap;
mod object;
mod session;
pub mod status;
pub mod watched;

use super::{Report, Sink, Source};
use crate::config::Level;
use crate::input::SourceName;
use dataflows::model::MeshConfig;
use kinds::WatchedKind;
use kube::runtime::watcher;
use kube::Client;
use session::Session;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

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
    /// Write each Istio object's status (`serve --kube --write-status`, [`status`]).
    pub write_status: bool,
    /// The Lease whose holder writes status among replicas.
    pub lease: lease::LeaseOptions,
}

/// The Kubernetes source (see the module documentation).
pub struct KubeSource {
    options: KubeOptions,
    mesh: MeshConfig,
    /// The objects proxies rejected and the dataflow's errors, for their status.
    feed: Option<status::Feed>,
}

impl KubeSource {
    pub fn new(options: KubeOptions, mesh: MeshConfig) -> Self {
        KubeSource {
            options,
            mesh,
            feed: None,
        }
    }

    /// Where the runtime publishes the objects proxies rejected (NACK) and the hub the
    /// dataflow's errors by object: written on their status with `--write-status`.
    pub fn with_feed(mut self, feed: status::Feed) -> Self {
        self.feed = Some(feed);
        self
    }
}

impl Source for KubeSource {
    fn name(&self) -> SourceName {
        "kubernetes"
    }

    fn run(self: Box<Self>, mut sink: Sink) -> Result<(), String> {
        runtime()?.block_on(self.follow(|report, _| sink.send(report)))
    }
}

impl KubeSource {
    /// Reads the cluster once (every watch's initial list) and returns that report, with
    /// its analysis by level: `meshflow validate --kube`.
    pub fn read_once(self) -> Result<(Report, Vec<(Level, String)>), String> {
        let mut first = None;
        runtime()?.block_on(self.follow(|report, analysis| {
            first = Some((report, analysis.to_vec()));
            false
        }))?;
        first.ok_or_else(|| "the Kubernetes source stopped before its initial read".into())
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the Kubernetes source's runtime: {e}"))
}

/// The client of the cluster `options` name.
pub async fn client(options: &KubeOptions) -> Result<Client, String> {
    {
        let config = match &options.kubeconfig {
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
}

impl KubeSource {
    /// Discovers which version of each Istio kind to watch; retried while the API server
    /// cannot be reached (the server is not ready meanwhile).
    async fn discover(client: &Client) -> (Vec<WatchedKind>, Vec<String>) {
        let mut backoff = Duration::from_millis(500);
        loop {
            match kinds::discover_istio(client).await {
                Ok(found) => return found,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "Kubernetes API discovery failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    /// Watches the cluster, calling `on_report` with the initial read and then with each
    /// change (and the report's analysis by level), until it returns `false`.
    async fn follow(
        self,
        mut on_report: impl FnMut(Report, &[(Level, String)]) -> bool,
    ) -> Result<(), String> {
        let client = client(&self.options).await?;
        let (istio, not_served) = Self::discover(&client).await;
        let (status, mut lease_problem) = match self.options.write_status {
            true => {
                let identity = lease::identity();
                let elected =
                    lease::spawn(client.clone(), self.options.lease.clone(), identity.clone());
                let events = events::Events::new(client.clone(), identity);
                let feed = self.feed.clone().unwrap_or_default();
                let status = status::spawn(client.clone(), feed, elected.holding, events);
                (Some(status), Some(elected.problem))
            }
            false => (None, None),
        };
        let mut config = watcher::Config::default();
        if let Some(selector) = &self.options.label_selector {
            config = config.labels(selector);
        }
        // Each namespace once: two watches of one namespace would emit every object twice.
        let mut namespaces: Vec<Option<String>> =
            self.options.namespaces.iter().cloned().map(Some).collect();
        namespaces.sort_unstable();
        namespaces.dedup();
        if namespaces.is_empty() {
            namespaces.push(None);
        }
        let scope = session::Scope {
            client,
            config,
            selector: self.options.label_selector.clone(),
            namespaces,
            mesh: self.mesh.clone(),
        };
        let (tx, mut rx) = mpsc::channel::<session::Message>(1024);
        let mut session = Session::new(scope, tx);
        session.watch(kinds::kubernetes_kinds().into_iter().chain(istio).collect());
        session.not_served(not_served);

        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            let rediscover = session.rediscover_at();
            tokio::select! {
                message = rx.recv() => {
                    // The session holds a sender: the channel stays open.
                    let Some(first) = message else {
                        return Err("the Kubernetes watches stopped".into());
                    };
                    let mut batch = vec![first];
                    while let Ok(m) = rx.try_recv() {
                        batch.push(m);
                    }
                    session.receive(batch)?;
                }
                _ = tick.tick() => session.expire_failures(),
                problem = lease_changed(&mut lease_problem) => session.status_problem(problem),
                _ = sleep_until(rediscover), if rediscover.is_some() => session.rediscover().await,
            }
            let report = session.report();
            // Also after events that change no record (a status written, by this replica or
            // another): the writer starts from the stored statuses when it takes over.
            let touched = session.take_status_kinds_touched();
            if let Some(status) = status.as_ref().filter(|_| report.is_some() || touched) {
                // Only the latest state matters: the writer coalesces.
                status.send_replace(session.statuses());
            }
            if let Some(report) = report {
                if !on_report(report, session.analysis()) {
                    return Ok(());
                }
            }
        }
    }
}

/// The Lease's next problem (or its end); forever when there is no Lease or its elector has
/// stopped.
async fn lease_changed(
    problem: &mut Option<tokio::sync::watch::Receiver<Option<String>>>,
) -> Option<String> {
    match problem {
        Some(rx) => match rx.changed().await {
            Ok(()) => rx.borrow_and_update().clone(),
            Err(_) => {
                *problem = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
    }
}

/// Sleeps until `at` (forever for `None`; the caller's `if` guards that).
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
