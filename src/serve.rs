//! `meshflow serve`: wires the sources, the runtime, the hub, the xDS server and the debug
//! port together. The one place that lists the sources.

use crate::ca::WorkloadCa;
use crate::engine::EngineKind;
use crate::hub::history::HistoryLimits;
use crate::hub::{Hub, HubOptions};
use crate::input::Input;
use crate::runtime;
/// How long a batch waits for quiet before it is applied (a `serve` option).
pub use crate::runtime::Debounce;
use crate::sources::files::FileSource;
use crate::sources::kube::{KubeOptions, KubeSource};
use crate::sources::{self, Source};
use crate::xds::auth::AuthConfig;
use crate::xds::server;
use crate::xds::tls::{self, TlsFiles};
use dataflows::model::MeshConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// What a caller of [`serve`] that runs it in-process (the demo) sets, without importing
/// the layers below.
pub use crate::ca::LEAF_VALIDITY as WORKLOAD_CERT_TTL;
pub use crate::xds::auth::AuthConfig as XdsAuth;

pub struct ServeOptions {
    /// The file source's directory, if any.
    pub config_dir: Option<PathBuf>,
    /// The Kubernetes source, if any.
    pub kube: Option<KubeOptions>,
    pub xds_addr: SocketAddr,
    /// Where the debug API listens; a bind failure is logged and xDS is served regardless.
    pub debug_addr: SocketAddr,
    /// Allow the (unauthenticated) debug port on a non-loopback address.
    pub debug_public: bool,
    /// How long a debug connection may take to deliver a request's headers.
    pub debug_read_timeout: Duration,
    /// How often a fetched `jwksUri` is fetched again.
    pub jwks_refresh: Duration,
    /// Address ranges keys are never fetched from.
    pub jwks_blocked: Vec<crate::sources::jwks::Cidr>,
    /// Host names the debug port answers to besides IP addresses and `localhost`.
    pub debug_hosts: Vec<String>,
    /// Where the last valid versions of objects whose files turned invalid survive a
    /// restart (none: a restart forgets them, and the objects are out until fixed).
    pub state_file: Option<PathBuf>,
    /// Delta streams serve route configurations over VHDS: without their virtual hosts,
    /// which follow as resources of their own ([`crate::hub::vhds`]). SotW streams keep
    /// them inline.
    pub vhds: bool,
    pub workers: usize,
    pub engine: EngineKind,
    pub debounce: crate::runtime::Debounce,
    /// How long one step of a held mTLS change waits for acknowledgments (zero: no holds;
    /// [`crate::runtime::mtls_transition`]).
    pub mtls_transition_timeout: Duration,
    pub mesh: MeshConfig,
    /// The mesh config's source: its files or its ConfigMap, watched (none: Istio's
    /// defaults and the flags).
    pub mesh_source: Option<Box<dyn Source>>,
    pub limits: server::Limits,
    /// TLS (and mTLS with a client CA) for the xDS port.
    pub tls: Option<TlsFiles>,
    pub auth: AuthConfig,
    /// Review each stream's service-account token with the cluster of `kube`, for these
    /// audiences (`--token-review`): per-workload identity without mTLS.
    pub token_review_audiences: Option<Vec<String>>,
    /// Allow plaintext xDS on a non-loopback address.
    pub plaintext: bool,
    /// Bounds of the per-proxy debug history.
    pub history: HistoryLimits,
    /// The workload CA's signing certificate (optionally with its chain up to the root) and
    /// key (`--ca-cert`, `--ca-key`); `None`: a root generated at start.
    pub ca: Option<(PathBuf, PathBuf)>,
    /// How long an issued workload certificate is valid (renewed after half of it).
    pub workload_cert_ttl: Duration,
    /// Told the addresses bound once the initial read of every source is in and the xDS
    /// port accepts connections, so a caller that asked for port 0 (`meshflow demo`) learns
    /// where to connect.
    pub ready: Option<tokio::sync::oneshot::Sender<Listening>>,
}

/// Where a started `serve` listens.
#[derive(Clone, Copy, Debug)]
pub struct Listening {
    pub xds: SocketAddr,
    /// `None` when the debug port could not be bound (serve goes on without it).
    pub debug: Option<SocketAddr>,
}

pub async fn serve(opts: ServeOptions) -> Result<(), String> {
    if let Some(dir) = opts.config_dir.as_ref().filter(|d| !d.is_dir()) {
        return Err(format!("--config-dir {}: not a directory", dir.display()));
    }
    if opts.config_dir.is_none() && opts.kube.is_none() {
        return Err("nothing to serve: give --config-dir, --kube, or both".into());
    }
    if opts.state_file.is_some() && opts.config_dir.is_none() {
        return Err("--state-file keeps objects of invalid files: it needs --config-dir".into());
    }
    if opts.tls.is_none() && !opts.xds_addr.ip().is_loopback() && !opts.plaintext {
        return Err(format!(
            "refusing plaintext xDS on {}: give --tls-cert and --tls-key (and --tls-client-ca for mTLS), \
             or --plaintext if the network is trusted",
            opts.xds_addr
        ));
    }
    if !opts.debug_addr.ip().is_loopback() {
        if !opts.debug_public {
            return Err(format!(
                "refusing the debug port on {}: it serves every proxy's config and history to \
                 anyone who connects; keep it on loopback, or pass --debug-public",
                opts.debug_addr
            ));
        }
        tracing::warn!(
            addr = %opts.debug_addr,
            "the debug port is served off loopback (--debug-public): every proxy's config and \
             history, unauthenticated"
        );
        eprintln!(
            "meshflow: WARNING: the debug port {} is reachable off this machine, unauthenticated",
            opts.debug_addr
        );
    }
    let acceptor = opts.tls.as_ref().map(tls::acceptor).transpose()?;
    let mut opts = opts;
    if let Some(audiences) = opts.token_review_audiences.take() {
        let Some(kube) = &opts.kube else {
            return Err(
                "--token-review checks tokens with the cluster of --kube: give --kube".into(),
            );
        };
        let client = crate::sources::kube::client(kube).await?;
        opts.auth.token_review = Some(crate::xds::token_review::TokenReviewer::new(
            client, audiences,
        ));
    }
    match (
        opts.auth.require_spiffe || opts.auth.token_review.is_some(),
        opts.auth.insecure_serve_keys,
    ) {
        (true, _) => tracing::info!(
            "xDS streams prove their workload identity ({}); each is issued only its own",
            if opts.auth.require_spiffe {
                "client certificates"
            } else {
                "service-account tokens, TokenReview"
            }
        ),
        (false, true) => tracing::warn!(
            "--insecure-serve-keys: streams prove no workload identity, yet are sent \
             certificates, keys and kubernetes:// Secrets for whatever identity they claim"
        ),
        (false, false) => tracing::info!(
            "xDS streams prove no workload identity (no --tls-client-ca, no --token-review): \
             they are served their config without certificates, keys or kubernetes:// Secrets"
        ),
    }
    let ca = match &opts.ca {
        Some((cert, key)) => {
            let ca = WorkloadCa::load(cert, key)?;
            tracing::info!(cert = %cert.display(), "workload CA: plugged-in certificate and key");
            ca
        }
        None => {
            let ca = WorkloadCa::generate("meshflow")?;
            let what = "workload CA: no --ca-cert/--ca-key, so a self-signed root was generated \
                        for this run; proxies connected across a restart are sent the new one";
            // A caller that runs serve in-process (the demo) expects exactly that: information.
            if opts.ready.is_some() {
                tracing::info!("{what}");
            } else {
                tracing::warn!("{what}");
            }
            ca
        }
    };
    // The root is public: it enters the dataflow as SDS `ROOTCA`.
    opts.mesh.trust_root = Some(ca.root_pem().to_string());
    let (inputs_tx, inputs_rx) = std::sync::mpsc::channel::<Input>();
    let hub = Hub::new(
        inputs_tx.clone(),
        HubOptions {
            history: opts.history,
            engine: opts.engine,
        },
    );
    let ca = std::sync::Arc::new(ca.with_validity(opts.workload_cert_ttl));
    let _ = hub.workload_ca.set(ca.clone());
    {
        // Renewal rounds: often enough that a certificate is renewed well before it
        // expires (an eighth of its lifetime, at most a minute apart).
        let (hub, every) = (
            hub.clone(),
            (ca.validity() / 8).min(Duration::from_secs(60)),
        );
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every.max(Duration::from_millis(100)));
            loop {
                tick.tick().await;
                let due = ca.rotate_due();
                if !due.is_empty() {
                    tracing::info!(identities = due.len(), "workload certificates renewed");
                    hub.certificates_rotated(&due);
                }
            }
        });
    }
    if opts.vhds {
        let _ = hub.vhds.set(Default::default());
    }
    // The runtime ending while serving is fatal: proxies could no longer be computed.
    let (runtime_end_tx, runtime_end) = tokio::sync::oneshot::channel::<Result<(), String>>();
    {
        let hub = hub.clone();
        let (engine, workers, mesh) = (opts.engine, opts.workers, opts.mesh.clone());
        let pacing = runtime::Pacing {
            debounce: opts.debounce,
            mtls_transition_timeout: opts.mtls_transition_timeout,
        };
        std::thread::Builder::new()
            .name("meshflow-runtime".into())
            .spawn(move || {
                let result = runtime::run(engine, workers, mesh, pacing, inputs_rx, hub);
                let _ = runtime_end_tx.send(result);
            })
            .map_err(|e| format!("starting the runtime: {e}"))?;
    }

    // Readiness waits for every source's initial read, expected before the debug port
    // answers: it answers /healthz while the sources read (a cluster's initial lists can
    // take a while), and /readyz once their initial reads are computed.
    let mut sources: Vec<Box<dyn Source>> = Vec::new();
    if let Some(dir) = &opts.config_dir {
        let mut files = FileSource::new(dir.clone(), opts.mesh.clone());
        if let Some(state) = &opts.state_file {
            files = files.with_state_file(state)?;
        }
        sources.push(Box::new(files));
    }
    if let Some(kube) = &opts.kube {
        let source = KubeSource::new(kube.clone(), opts.mesh.clone()).with_feed(
            crate::sources::kube::status::Feed {
                rejections: hub.rejections.subscribe(),
                errors: hub.object_errors.subscribe(),
            },
        );
        sources.push(Box::new(source));
    }
    if let Some(mesh) = opts.mesh_source {
        sources.push(mesh);
    }
    for s in &sources {
        hub.health.expect_source(s.name());
    }

    let mut debug_addr = None;
    match tokio::net::TcpListener::bind(opts.debug_addr).await {
        Ok(l) => {
            let addr = l.local_addr().map_err(|e| e.to_string())?;
            debug_addr = Some(addr);
            tracing::info!(%addr, "debug API listening (gRPC, CSDS, HTTP JSON, /metrics)");
            let (hub, read_timeout) = (hub.clone(), opts.debug_read_timeout);
            let hosts = std::sync::Arc::new(opts.debug_hosts.clone());
            tokio::spawn(async move {
                if let Err(e) = crate::debug::serve(hub, l, read_timeout, hosts).await {
                    tracing::error!(error = %e, "debug API stopped");
                }
            });
        }
        Err(e) => {
            tracing::warn!(addr = %opts.debug_addr, error = %e, "debug API not started: cannot bind")
        }
    }

    // The initial read of every source enters the input channel before any proxy can
    // connect, so no proxy is ever served a config without it.
    sources::start(sources, &inputs_tx).await?;
    // RequestAuthentication keys: fetched beside the runtime, which fills them in. Until a
    // URI's first fetch completes its tokens are refused (fail closed), as in Istio.
    tokio::spawn(sources::jwks::run(
        hub.jwks_uris.subscribe(),
        inputs_tx.clone(),
        opts.jwks_refresh,
        opts.jwks_blocked.clone(),
    ));

    let listener = tokio::net::TcpListener::bind(opts.xds_addr)
        .await
        .map_err(|e| format!("binding the xDS address {}: {e}", opts.xds_addr))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(addr = %local, "xDS server listening");
    match opts.ready {
        // The caller may have stopped waiting; serving goes on regardless.
        Some(ready) => {
            let _ = ready.send(Listening {
                xds: local,
                debug: debug_addr,
            });
        }
        // The lines scripts and tests wait for; a caller told by `ready` prints its own.
        None => {
            if let Some(addr) = debug_addr {
                eprintln!("meshflow: debug API listening on {addr}");
            }
            eprintln!("meshflow: xDS server listening on {local}")
        }
    }
    tokio::select! {
        served = server::serve(hub, opts.limits, opts.auth, acceptor, listener) => {
            served.map_err(|e| format!("xDS server: {e}"))
        }
        ended = runtime_end => Err(match ended {
            Ok(Err(why)) => why,
            _ => "the runtime stopped".to_string(),
        }),
    }
}
