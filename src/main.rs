//! The meshflow command line.

use clap::{Parser, Subcommand};
use dataflows::model::MeshConfig;
use meshflow::serve::{serve, ServeOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `meshflow --version`: the crate version and the git commit it was built from (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("MESHFLOW_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "meshflow",
    version = VERSION,
    about = "A service-mesh control plane built on differential dataflow"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct MeshArgs {
    /// Istio's mesh config (the `mesh` key of the `istio` ConfigMap, as istiod mounts it):
    /// watched; a change reaches the proxies it changes without a restart. An invalid
    /// config is reported naming its field, and the last valid one stays in effect.
    #[arg(long, value_name = "FILE")]
    mesh_config: Option<PathBuf>,
    /// Istio's `meshNetworks` (parsed and reported; multi-network is not generated yet).
    #[arg(long, value_name = "FILE", requires = "mesh_config")]
    mesh_networks: Option<PathBuf>,
    /// Namespace whose Sidecar and DestinationRules apply mesh-wide; overrides the mesh
    /// config's `rootNamespace` [default: istio-system].
    #[arg(long)]
    root_namespace: Option<String>,
    /// The cluster's DNS domain suffix.
    #[arg(long, default_value = "cluster.local")]
    domain_suffix: String,
    /// The largest RE2 program a regex match may compile to, as the proxies' runtime value
    /// `re2.max_program_size.error_level` allows (Envoy's default: 100). A regex over it is
    /// refused naming its field: the proxy would reject the whole route configuration.
    #[arg(long, default_value_t = 100)]
    max_regex_program_size: u32,
    /// The proxies' file of trusted CA certificates (a path on the proxy's file system): a
    /// DestinationRule's SIMPLE or MUTUAL TLS without `caCertificates` (and without
    /// `insecureSkipVerify`) verifies the server against it, as Istio's proxies verify
    /// against their system's bundle. The default is where Debian-based images keep it.
    #[arg(long, value_name = "PATH", default_value = dataflows::model::DEFAULT_SYSTEM_CA_BUNDLE)]
    system_ca_bundle: String,
}

impl MeshArgs {
    /// What the command line sets over a mesh config.
    fn overrides(&self) -> meshflow::config::mesh::MeshOverrides {
        meshflow::config::mesh::MeshOverrides {
            root_namespace: self.root_namespace.clone(),
        }
    }

    /// The mesh config's source: the file given, else the ConfigMap given with `--kube`.
    fn serve_source(
        &self,
        kube: &KubeArgs,
    ) -> Result<Option<Box<dyn meshflow::sources::Source>>, String> {
        if let Some(file) = self.source() {
            return Ok(Some(Box::new(file)));
        }
        let (Some(reference), Some(options)) = (&kube.mesh_configmap, kube.options()) else {
            return Ok(None);
        };
        let source = meshflow::sources::kube::mesh_configmap::MeshConfigMapSource::new(
            options,
            reference,
            self.mesh(),
            self.overrides(),
        )?;
        Ok(Some(Box::new(source)))
    }

    /// The mesh config's source, if a file is given.
    fn source(&self) -> Option<meshflow::sources::mesh::MeshFileSource> {
        let path = self.mesh_config.clone()?;
        Some(meshflow::sources::mesh::MeshFileSource::new(
            path,
            self.mesh_networks.clone(),
            self.mesh(),
            self.overrides(),
        ))
    }

    fn mesh(&self) -> MeshConfig {
        MeshConfig {
            root_namespace: self
                .root_namespace
                .clone()
                .unwrap_or_else(|| "istio-system".into()),
            domain_suffix: self.domain_suffix.clone(),
            max_regex_program_size: self.max_regex_program_size,
            trust_root: None,
            system_ca_bundle: self.system_ca_bundle.clone(),
        }
    }
}

/// The Kubernetes source's flags (`serve`, `validate`).
#[derive(clap::Args)]
struct KubeArgs {
    /// Read a Kubernetes cluster: Services, EndpointSlices, Pods and Istio's networking
    /// objects (whichever of networking.istio.io v1, v1beta1, v1alpha3 the cluster serves).
    /// The cluster is the one of `--kubeconfig`, else KUBECONFIG or ~/.kube/config, else the
    /// pod's service account (in-cluster).
    #[arg(long)]
    kube: bool,
    /// The kubeconfig file for `--kube`.
    #[arg(long, requires = "kube")]
    kubeconfig: Option<PathBuf>,
    /// Read only these namespaces (comma-separated; all by default).
    #[arg(long, requires = "kube", value_delimiter = ',')]
    namespaces: Vec<String>,
    /// Read only objects matching this Kubernetes label selector (`app=x,tier!=db`), of
    /// every kind.
    #[arg(long, requires = "kube")]
    label_selector: Option<String>,
    /// Istio's mesh config from the cluster: the ConfigMap `NAMESPACE/NAME` (istiod's is
    /// `istio-system/istio`), keys `mesh` and `meshNetworks`, watched like `--mesh-config`.
    #[arg(
        long,
        value_name = "NAMESPACE/NAME",
        requires = "kube",
        conflicts_with = "mesh_config"
    )]
    mesh_configmap: Option<String>,
}

impl KubeArgs {
    fn options(&self) -> Option<meshflow::sources::kube::KubeOptions> {
        self.kube.then(|| meshflow::sources::kube::KubeOptions {
            kubeconfig: self.kubeconfig.clone(),
            namespaces: self.namespaces.clone(),
            label_selector: self.label_selector.clone(),
            write_status: false,
            lease: Default::default(),
        })
    }
}

// Parsed once at start and matched once: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Serve xDS to Envoy proxies from a directory of Kubernetes/Istio YAML and/or a
    /// Kubernetes cluster.
    Serve(ServeArgs),
    /// Connected proxies and what they hold, per xDS type (from a running meshflow).
    ProxyStatus {
        #[arg(long, default_value = "127.0.0.1:15014")]
        debug_addr: SocketAddr,
        #[arg(short, long, value_enum, default_value = "table")]
        output: meshflow::debug::client::Output,
    },
    /// What one proxy should hold, from a running meshflow (over CSDS). PROXY is the node id
    /// or its `pod.namespace` part.
    ProxyConfig {
        #[arg(value_enum)]
        kind: meshflow::debug::client::ConfigKind,
        proxy: String,
        /// Only this resource: its name (`http.8080`; with `all`, a name only one type of the
        /// proxy's resources has), or TYPE/NAME (`route/http.8080`).
        name: Option<String>,
        #[arg(long, default_value = "127.0.0.1:15014")]
        debug_addr: SocketAddr,
        /// `json` and `yaml` print the resources in Envoy's JSON form.
        #[arg(short, long, value_enum, default_value = "table")]
        output: meshflow::debug::client::Output,
    },
    /// Security policies as a proxy applies them now.
    #[command(subcommand)]
    Authz(AuthzCommand),
    /// Which input objects (Services, VirtualServices, DestinationRules, Sidecars,
    /// EndpointSlices, Pods, Gateways) one resource of a proxy was built from.
    ///
    /// RESOURCE is TYPE/NAME (`route/9080`,
    /// `cluster/outbound|9080|v1|reviews.default.svc.cluster.local`), or a bare NAME when
    /// only one type of the proxy's resources has it (`9080`; when several do, the error
    /// lists them).
    Explain {
        proxy: String,
        resource: String,
        #[arg(long, default_value = "127.0.0.1:15014")]
        debug_addr: SocketAddr,
        #[arg(short, long, value_enum, default_value = "table")]
        output: meshflow::debug::client::Output,
    },
    /// What changed for one proxy between two epochs (or since a time): per resource, the
    /// changed fields and +/- lines of Envoy's JSON, ACK/NACK of each push, and the input
    /// changes behind each epoch. Without --from/--since: the proxy's last change.
    Diff {
        proxy: String,
        /// Changes after this epoch.
        #[arg(long, conflicts_with = "since")]
        from: Option<u64>,
        /// Changes in this last while: 90s, 5m, 1h.
        #[arg(long)]
        since: Option<String>,
        /// Up to this epoch (default: the newest).
        #[arg(long)]
        to: Option<u64>,
        #[arg(long, default_value = "127.0.0.1:15014")]
        debug_addr: SocketAddr,
        #[arg(short, long, value_enum, default_value = "table")]
        output: meshflow::debug::client::Output,
    },
    /// Print every push to one proxy, and its ACKs/NACKs, as they happen.
    Watch {
        proxy: String,
        #[arg(long, default_value = "127.0.0.1:15014")]
        debug_addr: SocketAddr,
        #[arg(short, long, value_enum, default_value = "table")]
        output: meshflow::debug::client::Output,
    },
    /// Istio's bookinfo on this machine in one command: meshflow, the workloads, an Envoy
    /// ingress gateway and sidecar, traffic drawn as it lands, and one edit walked through
    /// (reviews shifted to v3: the traffic moving, the push, `diff` and `explain`).
    ///
    /// Everything runs on loopback and stops with Ctrl-C; nothing is left behind.
    Demo(meshflow::demo::DemoArgs),
    /// Write a synthetic mesh as a directory of Kubernetes/Istio YAML.
    MeshGen(meshflow::bench::cli::MeshGenArgs),
    /// Simulated proxies: real ADS clients over loopback; prints a JSON summary on exit.
    Loadgen(meshflow::bench::cli::LoadgenArgs),
    /// Start a server on a generated mesh, apply scenarios, measure, verify.
    Bench(meshflow::bench::cli::BenchArgs),
    /// Print a shell completion script (bash, zsh or fish).
    ///
    /// `source <(meshflow completions bash)`, or write it where the shell loads completions
    /// from (zsh: a directory of `fpath`, as `_meshflow`;
    /// fish: `~/.config/fish/completions/meshflow.fish`).
    Completions {
        #[arg(value_enum)]
        shell: CompletionShell,
    },
    /// Check a directory of YAML, a cluster's objects (`--kube`) or a mesh config
    /// (`--mesh-config`), and report every rejected object and every Istio kind the cluster
    /// does not serve; exit 1 if any.
    ///
    /// One line per problem on stdout, then a summary line.
    Validate(ValidateArgs),
}

#[derive(Subcommand)]
enum AuthzCommand {
    /// Which filter and policy decide a request to PROXY, allowed or refused (401, 403, or
    /// the connection closed), from what the proxy holds now: its config fetched over CSDS
    /// and run through the routing simulation, `jwt_authn` and RBAC included.
    ///
    /// `meshflow authz check reviews-v1.default --port 9080 --from
    /// cluster.local/ns/default/sa/sleep --method POST --path /admin`
    Check {
        proxy: String,
        /// The destination port.
        #[arg(long)]
        port: u16,
        #[arg(long, default_value = "GET")]
        method: String,
        #[arg(long, default_value = "/")]
        path: String,
        /// `Host` / `:authority`.
        #[arg(long, default_value = "localhost")]
        host: String,
        /// The client's mTLS identity (`TD/ns/NS/sa/SA` or `spiffe://…`); none: plaintext.
        #[arg(long)]
        from: Option<String>,
        /// The destination address (the workload's), where listeners match on it.
        #[arg(long)]
        address: Option<String>,
        /// The client's address.
        #[arg(long)]
        source_ip: Option<String>,
        /// A request header, `NAME=VALUE`; repeatable.
        #[arg(long = "header", value_name = "NAME=VALUE")]
        headers: Vec<String>,
        /// The request carries a token that verifies, with these claims (a JSON object:
        /// `{"iss": "…", "sub": "…", "aud": "…"}`).
        #[arg(long, conflicts_with = "jwt_invalid")]
        jwt_claims: Option<String>,
        /// The request carries a token that does not verify.
        #[arg(long)]
        jwt_invalid: bool,
        /// What the external authorization service of a CUSTOM policy answers, when one is
        /// asked (without it, the verdict says the service decides).
        #[arg(long, value_parser = ["allow", "deny"])]
        ext_authz: Option<String>,
        #[arg(long, default_value = "127.0.0.1:15014")]
        debug_addr: SocketAddr,
        #[arg(short, long, value_enum, default_value = "table")]
        output: meshflow::debug::client::Output,
    },
}

/// The shells `meshflow completions` writes for.
/// `meshflow serve`: what to serve, from where, and how.
#[derive(clap::Args)]
struct ServeArgs {
    /// Directory of YAML files (watched; subdirectories included). Optional with
    /// `--kube`; both together serve the objects of both (each keeps its own errors).
    #[arg(long, required_unless_present = "kube")]
    config_dir: Option<PathBuf>,
    #[command(flatten)]
    kube: KubeArgs,
    /// A file (outside the config directory) where the last valid version of each object
    /// whose file is now invalid is kept, so that a restart keeps it in effect. Without
    /// it, a restart forgets such versions: the objects are out, with their errors, until
    /// their files are fixed.
    #[arg(long)]
    state_file: Option<PathBuf>,
    /// With `--kube`: write on each VirtualService, DestinationRule, Gateway,
    /// ServiceEntry and Sidecar's status whether it is in effect (condition
    /// `Reconciled`) and what meshflow's analysis says of it (`validationMessages`), as
    /// Istio does, and report what proxies reject as Events on the objects. Needs
    /// `patch` on those kinds' `status` subresources, `create` on events.k8s.io Events,
    /// and get/create/update on the Lease of `--lease`.
    #[arg(long, requires = "kube")]
    write_status: bool,
    /// With `--write-status`: the Lease (coordination.k8s.io) whose holder writes status
    /// among replicas, `NAME` (in the namespace meshflow runs in: the pod's, else the
    /// kubeconfig context's, else `default`) or `NAMESPACE/NAME`.
    #[arg(long, requires = "write_status", default_value = meshflow::sources::kube::lease::DEFAULT_NAME, value_parser = meshflow::sources::kube::lease::LeaseOptions::parse_name)]
    lease: (Option<String>, String),
    /// With `--write-status`: how long the Lease's holder holds it without renewing
    /// (renewed every fifth of it); another replica takes over within about this long
    /// after the holder stops.
    #[arg(long, requires = "write_status", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    lease_duration_s: u64,
    /// Serve route configurations over VHDS on Delta streams: each route configuration
    /// goes without its virtual hosts and points at the ADS stream for them; the
    /// virtual hosts follow as `envoy.config.route.v3.VirtualHost` resources named
    /// `ROUTE/HOST`, so a change of one virtual host sends only it. SotW streams keep
    /// the virtual hosts inline (VHDS needs Delta).
    #[arg(long)]
    vhds: bool,
    /// Address of the ADS gRPC server. Loopback by default: any other address needs
    /// TLS (`--tls-cert`/`--tls-key`) or `--plaintext`.
    #[arg(long, default_value = "127.0.0.1:15010")]
    xds_addr: SocketAddr,
    /// Address of the debug port (gRPC, CSDS, HTTP JSON, /metrics). It shows every
    /// proxy's config and history: an address off loopback needs `--debug-public`.
    #[arg(long, default_value = "127.0.0.1:15014")]
    debug_addr: SocketAddr,
    /// Serve the debug port on a non-loopback `--debug-addr` (unauthenticated: put it
    /// behind something that is not).
    #[arg(long)]
    debug_public: bool,
    /// A host name the debug port answers to besides IP addresses and `localhost`
    /// (a Service's DNS name, say); repeatable. Requests naming any other `Host` are
    /// refused, so a web page cannot read the port through DNS rebinding.
    #[arg(long, value_delimiter = ',')]
    debug_host: Vec<String>,
    /// Milliseconds a debug-port connection may take to deliver a request's headers (its
    /// first request, and each HTTP/1 request after); slower ones are closed.
    #[arg(long, default_value_t = 10_000)]
    debug_read_timeout_ms: u64,
    /// Seconds between fetches of a RequestAuthentication `jwksUri`'s keys once fetched
    /// (Istio's default: 20 minutes); a failed fetch is retried sooner, the last keys kept.
    #[arg(long, default_value_t = 1200)]
    jwks_refresh_s: u64,
    /// Address ranges (CIDRs, comma-separated) keys are never fetched from, whatever a
    /// RequestAuthentication's `jwksUri` names (Istio's `BLOCKED_CIDRS_IN_JWKS_URIS`): e.g.
    /// `169.254.0.0/16,10.0.0.0/8`. A URI resolving into one is a failed fetch (MF0018).
    #[arg(long, value_delimiter = ',')]
    jwks_blocked_cidrs: Vec<String>,
    /// Timely worker threads.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// `meshflow` (incremental); `istio-style`: the baseline that pushes as Istio 1.22+
    /// decides (scoped pushes, incremental EDS, whole listener and route sets resent);
    /// or `full-push`: the baseline that recomputes and pushes every proxy's whole config
    /// on every change (State-of-the-World only).
    #[arg(long, value_enum, default_value = "meshflow")]
    engine: meshflow::engine::EngineKind,
    /// Changes arriving within this window share one epoch.
    #[arg(long, default_value_t = 50)]
    debounce_ms: u64,
    /// Istio-style debounce instead: an epoch closes after this many ms without a new
    /// change (`PILOT_DEBOUNCE_AFTER`, 100 in Istio)...
    #[arg(long)]
    debounce_after_ms: Option<u64>,
    /// ...and at most this many ms after its first change (`PILOT_DEBOUNCE_MAX`, 10,000
    /// in Istio; the default when only `--debounce-after-ms` is given).
    #[arg(long)]
    debounce_max_ms: Option<u64>,
    /// How long (ms) one step of a PeerAuthentication change that flips what clients send a
    /// workload (plaintext or mTLS) waits for the proxies' acknowledgments: the workload's
    /// sidecar first accepts both, then its clients move, then it takes the new mode. Past
    /// this, the mode takes effect at once. 0: flip at once, as Istio does.
    #[arg(long, default_value_t = 10_000)]
    mtls_transition_timeout_ms: u64,
    /// Concurrent xDS streams served; more are refused with RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = 50_000)]
    max_streams: usize,
    /// Seconds between HTTP/2 keepalive pings on xDS connections.
    #[arg(long, default_value_t = 30)]
    keepalive_interval_s: u64,
    /// Seconds a client may take to answer a keepalive ping before its connection (and
    /// every stream on it) is closed.
    #[arg(long, default_value_t = 20)]
    keepalive_timeout_s: u64,
    /// Streams that may be building and sending their first full config at once; the
    /// others wait (bounds memory when thousands of proxies connect together).
    #[arg(long, default_value_t = 100)]
    initial_pushes: usize,
    /// Milliseconds a new stream may take to send its first request; a stream that
    /// sends none is closed (DEADLINE_EXCEEDED) and stops counting against
    /// `--max-streams`.
    #[arg(long, default_value_t = 10_000)]
    first_request_timeout_ms: u64,
    /// Milliseconds a stream may hold an initial-push slot at most, answered or not.
    #[arg(long, default_value_t = 10_000)]
    initial_push_hold_ms: u64,
    /// PEM certificate chain for TLS on the xDS port (reloaded when it changes).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// PEM CA bundle: require client certificates it signed (mTLS), and check their
    /// SPIFFE identity against the namespace each proxy claims.
    #[arg(long, requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// SPIFFE trust domain of client identities.
    #[arg(long, default_value = "cluster.local")]
    trust_domain: String,
    /// The workload CA's certificate (PEM; Istio's plug-in `cacerts`: the signing
    /// certificate, optionally followed by its chain up to the root, whose last
    /// certificate is the root proxies trust). It issues each workload's SPIFFE
    /// certificate (SDS `default`) for `ISTIO_MUTUAL` and inbound mTLS. Without it, a
    /// root is generated at start (logged as such).
    #[arg(long, requires = "ca_key", value_name = "FILE")]
    ca_cert: Option<PathBuf>,
    /// The private key (PKCS#8 PEM) of `--ca-cert`'s first certificate.
    #[arg(long, requires = "ca_cert", value_name = "FILE")]
    ca_key: Option<PathBuf>,
    /// How long an issued workload certificate is valid (24h as Istio's, 90m, 30s...);
    /// it is renewed and pushed to its proxies after half of that.
    #[arg(long, default_value = "24h", value_parser = meshflow::debug::units::parse_duration)]
    workload_cert_ttl: Duration,
    /// Require `authorization: Bearer TOKEN` matching this file's content. It admits a
    /// client; it proves no workload identity (no key material is served on it).
    #[arg(long, conflicts_with = "token_review")]
    token_file: Option<PathBuf>,
    /// Authenticate each xDS stream by the Kubernetes service-account token it sends
    /// (`authorization: Bearer TOKEN`, as Istio's agent sends it), checked with the
    /// TokenReview API of the `--kube` cluster: the stream is then that namespace and
    /// service account, and a node claiming otherwise is refused.
    #[arg(long, requires = "kube")]
    token_review: bool,
    /// The audiences a reviewed token must be issued for.
    #[arg(
        long,
        requires = "token_review",
        value_delimiter = ',',
        default_value = "istio-ca"
    )]
    token_audience: Vec<String>,
    /// Send certificates, private keys and `kubernetes://` Secrets to streams that
    /// proved no workload identity (neither --tls-client-ca nor --token-review): any
    /// client may then claim any identity and be given its key. For the demo and
    /// single-user test setups only.
    #[arg(long)]
    insecure_serve_keys: bool,
    /// Serve plaintext xDS on a non-loopback address.
    #[arg(long)]
    plaintext: bool,
    /// Bytes of per-proxy history kept for `diff` (64MiB, 512KiB, ...; 0 keeps none).
    #[arg(long, default_value = "64MiB", value_parser = meshflow::debug::units::parse_bytes)]
    history_bytes: usize,
    /// Age of the oldest per-proxy history kept (90s, 30m, 1h, ...).
    #[arg(long, default_value = "1h", value_parser = meshflow::debug::units::parse_duration)]
    history_age: Duration,
    #[command(flatten)]
    mesh: MeshArgs,
}

/// `meshflow validate`: what to check.
#[derive(clap::Args)]
struct ValidateArgs {
    /// Directory of YAML files to check (subdirectories included).
    #[arg(
        value_name = "DIR",
        required_unless_present_any = ["config_dir", "kube", "mesh_config"],
        conflicts_with = "config_dir"
    )]
    dir: Option<PathBuf>,
    /// The same as DIR, spelled as `serve` takes it.
    #[arg(long, value_name = "DIR")]
    config_dir: Option<PathBuf>,
    #[command(flatten)]
    kube: KubeArgs,
    #[command(flatten)]
    mesh: MeshArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

/// See Cargo.toml for why (and for the `system-allocator` feature that leaves it out).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_process(&cli.command);
    match cli.command {
        Command::Serve(args) => serve_command(args),
        Command::ProxyStatus { debug_addr, output } => {
            print_client(meshflow::debug::client::proxy_status(debug_addr, output))
        }
        Command::ProxyConfig {
            kind,
            proxy,
            name,
            debug_addr,
            output,
        } => print_client(meshflow::debug::client::proxy_config(
            debug_addr,
            kind,
            &proxy,
            name.as_deref(),
            output,
        )),
        Command::Explain {
            proxy,
            resource,
            debug_addr,
            output,
        } => print_client(meshflow::debug::client::explain(
            debug_addr, &proxy, &resource, output,
        )),
        Command::Authz(AuthzCommand::Check {
            proxy,
            port,
            method,
            path,
            host,
            from,
            address,
            source_ip,
            headers,
            jwt_claims,
            jwt_invalid,
            ext_authz,
            debug_addr,
            output,
        }) => {
            let mut parsed = Vec::new();
            for h in headers {
                let Some((k, v)) = h.split_once('=') else {
                    eprintln!("meshflow: --header {h:?}: written NAME=VALUE");
                    return ExitCode::FAILURE;
                };
                parsed.push((k.to_string(), v.to_string()));
            }
            let token = match (jwt_claims, jwt_invalid) {
                (Some(c), _) => match serde_json::from_str::<serde_json::Value>(&c) {
                    Ok(v) => Some(Some(v)),
                    Err(e) => {
                        eprintln!("meshflow: --jwt-claims: not JSON: {e}");
                        return ExitCode::FAILURE;
                    }
                },
                (None, true) => Some(None),
                (None, false) => None,
            };
            let request = meshflow::debug::authz::Request {
                port,
                method,
                path,
                host,
                from,
                address,
                source_ip,
                headers: parsed,
                token,
                external_authz: ext_authz.map(|a| a == "allow"),
            };
            print_client(meshflow::debug::client::authz_check::authz_check(
                debug_addr, &proxy, &request, output,
            ))
        }
        Command::Diff {
            proxy,
            from,
            since,
            to,
            debug_addr,
            output,
        } => print_client(meshflow::debug::client::diff(
            debug_addr, &proxy, from, since, to, output,
        )),
        Command::Watch {
            proxy,
            debug_addr,
            output,
        } => print_client(meshflow::debug::client::watch(debug_addr, &proxy, output)),
        Command::Completions { shell } => completions(shell),
        Command::Demo(args) => meshflow::demo::main(args),
        Command::MeshGen(args) => meshflow::bench::cli::mesh_gen(args),
        Command::Loadgen(args) => meshflow::bench::cli::loadgen(args),
        Command::Bench(args) => meshflow::bench::cli::bench(args),
        Command::Validate(args) => validate_command(args),
    }
}

/// Logging (to stderr, quieter under the demo's drawing) and, for the commands that hold
/// many connections, the process's limits.
fn init_process(command: &Command) {
    // The demo draws on the terminal: only warnings and errors interleave with it.
    let default_level = match command {
        Command::Demo(_) => "warn",
        _ => "info",
    };
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_level.into());
    if matches!(command, Command::Validate { .. }) {
        // validate prints every problem as its report: the sources' log line of the same
        // problem would show it twice.
        if let Ok(off) = format!("{}=off", meshflow::sources::PROBLEMS_LOG_TARGET).parse() {
            filter = filter.add_directive(off);
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if matches!(
        command,
        Command::Serve { .. } | Command::Loadgen(_) | Command::Bench(_)
    ) {
        // Tens of thousands of xDS connections on either side.
        meshflow::async_runtime::raise_open_files_limit_logged();
        // No transparent huge pages (see the function), unless asked to keep them.
        if std::env::var_os("MESHFLOW_ALLOW_THP").is_none() {
            if let Err(e) = meshflow::async_runtime::disable_transparent_huge_pages() {
                tracing::warn!("{e}");
            }
        }
    }
}

/// `meshflow serve`.
fn serve_command(args: ServeArgs) -> ExitCode {
    let ServeArgs {
        config_dir,
        kube,
        state_file,
        write_status,
        lease,
        lease_duration_s,
        vhds,
        xds_addr,
        debug_addr,
        debug_public,
        debug_read_timeout_ms,
        jwks_refresh_s,
        jwks_blocked_cidrs,
        debug_host,
        workers,
        engine,
        debounce_ms,
        debounce_after_ms,
        debounce_max_ms,
        mtls_transition_timeout_ms,
        max_streams,
        keepalive_interval_s,
        keepalive_timeout_s,
        initial_pushes,
        first_request_timeout_ms,
        initial_push_hold_ms,
        tls_cert,
        tls_key,
        tls_client_ca,
        trust_domain,
        ca_cert,
        ca_key,
        token_file,
        token_review,
        token_audience,
        workload_cert_ttl,
        insecure_serve_keys,
        plaintext,
        history_bytes,
        history_age,
        mesh,
    } = args;
    let rt = match meshflow::async_runtime::multi_thread(None).build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("meshflow: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mesh_source = match mesh.serve_source(&kube) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("meshflow: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut jwks_blocked = Vec::new();
    for c in &jwks_blocked_cidrs {
        match meshflow::sources::jwks::Cidr::parse(c) {
            Ok(c) => jwks_blocked.push(c),
            Err(e) => {
                eprintln!("meshflow: --jwks-blocked-cidrs: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let opts = ServeOptions {
        config_dir,
        kube: kube.options().map(|mut o| {
            o.write_status = write_status;
            o.lease = meshflow::sources::kube::lease::LeaseOptions {
                namespace: lease.0,
                name: lease.1,
                duration: std::time::Duration::from_secs(lease_duration_s),
            };
            o
        }),
        state_file,
        vhds,
        xds_addr,
        debug_addr,
        debug_public,
        debug_read_timeout: Duration::from_millis(debug_read_timeout_ms),
        jwks_refresh: Duration::from_secs(jwks_refresh_s.max(1)),
        jwks_blocked,
        debug_hosts: debug_host,
        workers,
        engine,
        debounce: match (debounce_after_ms, debounce_max_ms) {
            (None, None) => meshflow::runtime::Debounce::fixed(Duration::from_millis(debounce_ms)),
            (after, max) => meshflow::runtime::Debounce {
                after: Duration::from_millis(after.unwrap_or(debounce_ms)),
                max: Duration::from_millis(max.unwrap_or(10_000)),
            },
        },
        mtls_transition_timeout: Duration::from_millis(mtls_transition_timeout_ms),
        mesh: mesh.mesh(),
        mesh_source,
        limits: meshflow::xds::server::Limits {
            max_streams,
            keepalive_interval: std::time::Duration::from_secs(keepalive_interval_s),
            keepalive_timeout: std::time::Duration::from_secs(keepalive_timeout_s),
            initial_pushes,
            first_request_timeout: Duration::from_millis(first_request_timeout_ms),
            initial_push_hold: Duration::from_millis(initial_push_hold_ms),
        },
        auth: meshflow::xds::auth::AuthConfig {
            require_spiffe: tls_client_ca.is_some(),
            trust_domain,
            token_file,
            token_review: None,
            insecure_serve_keys,
        },
        token_review_audiences: token_review.then_some(token_audience),
        tls: match (tls_cert, tls_key) {
            (Some(cert), Some(key)) => Some(meshflow::xds::tls::TlsFiles {
                cert,
                key,
                client_ca: tls_client_ca,
            }),
            _ => None,
        },
        plaintext,
        history: meshflow::hub::history::HistoryLimits {
            max_bytes: history_bytes,
            max_age: history_age,
        },
        ca: ca_cert.zip(ca_key),
        workload_cert_ttl,
        ready: None,
    };
    match rt.block_on(serve(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("meshflow: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `meshflow completions SHELL`.
fn completions(shell: CompletionShell) -> ExitCode {
    let shell = match shell {
        CompletionShell::Bash => clap_complete::Shell::Bash,
        CompletionShell::Zsh => clap_complete::Shell::Zsh,
        CompletionShell::Fish => clap_complete::Shell::Fish,
    };
    let mut command = <Cli as clap::CommandFactory>::command();
    // Into memory first: clap_complete panics when its writer fails (a closed pipe,
    // `| head`), while writing a buffer cannot.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "meshflow", &mut script);
    let mut out = std::io::stdout().lock();
    match out.write_all(&script).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`| head`): nothing left to say.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("meshflow: writing the completion script: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `meshflow validate`.
fn validate_command(args: ValidateArgs) -> ExitCode {
    let ValidateArgs {
        dir,
        config_dir,
        kube,
        mesh,
    } = args;
    let (mut errors, mut analysis, mut records) = (Vec::new(), Vec::new(), Vec::new());
    if let Some(mut source) = mesh.source() {
        match source.read() {
            Ok(report) => {
                let report = report.unwrap_or_default();
                errors.extend(report.errors);
                analysis.extend(source.analysis());
                records.extend(report.changes);
            }
            Err(e) => {
                eprintln!("meshflow: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut files = None;
    if let Some(dir) = dir.or(config_dir) {
        let mut source = meshflow::sources::files::FileSource::new(dir, mesh.mesh());
        let scan = source.rescan();
        errors.extend(scan.errors);
        analysis.extend(source.analysis());
        records.extend(scan.changes);
        files = Some(source);
    }
    if let Some(options) = kube.options() {
        let source = meshflow::sources::kube::KubeSource::new(options, mesh.mesh());
        match source.read_once() {
            Ok((report, found)) => {
                errors.extend(report.errors);
                analysis.extend(found);
                records.extend(report.changes);
            }
            Err(e) => {
                eprintln!("meshflow: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    for e in &errors {
        println!("{e}");
    }
    // Each object's own findings, with their code (cross-object ones carry theirs).
    let mut analysis: Vec<(meshflow::config::Level, String)> = analysis
        .into_iter()
        .map(|(level, line)| (level, level.coded(&line)))
        .collect();
    // Across objects, as `serve` would find it: errors, and a few warnings (rules
    // merged as Istio merges them).
    let count_records = records.len();
    let records = with_jwks(records);
    for e in meshflow::config::cross::analyze(records, mesh.mesh()) {
        let location = files.as_ref().and_then(|f| f.location(&e.object));
        let level = if e.code.is_warning() {
            meshflow::config::Level::Warning
        } else {
            meshflow::config::Level::Error
        };
        analysis.push((level, meshflow::config::cross::error_line(&e, location)));
    }
    // Analysis: errors (parts not generated) fail the check, warnings do not.
    for (_, line) in &analysis {
        println!("{line}");
    }
    let count = |l| analysis.iter().filter(|(level, _)| *level == l).count();
    let (errors, warnings) = (
        errors.len() + count(meshflow::config::Level::Error),
        count(meshflow::config::Level::Warning),
    );
    if errors == 0 {
        println!("ok: {count_records} records, no errors, {warnings} warning(s)");
        ExitCode::SUCCESS
    } else {
        println!("{errors} error(s), {warnings} warning(s)");
        ExitCode::FAILURE
    }
}

/// `records` with the keys of their RequestAuthentications' `jwksUri`s, each fetched once
/// as `serve` fetches it: one that cannot be fetched is reported (MF0018) as `serve` would.
fn with_jwks(
    records: Vec<(dataflows::model::Record, isize)>,
) -> Vec<(dataflows::model::Record, isize)> {
    let mut keys = meshflow::runtime::jwks::Resolver::default();
    let mut out = keys.rewrite(records);
    let uris = keys.uris();
    if uris.is_empty() {
        return out;
    }
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return out;
    };
    for (uri, timeout_ms) in uris {
        let timeout = Duration::from_millis(timeout_ms);
        let outcome = rt.block_on(meshflow::sources::jwks::fetch(&uri, timeout, &[]));
        out.extend(keys.fetched(&uri, outcome).0);
    }
    out
}

/// Runs a debug-API client command and prints its output (or its error, failing).
fn print_client(command: impl std::future::Future<Output = Result<String, String>>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("meshflow: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(command) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("meshflow: {e}");
            ExitCode::FAILURE
        }
    }
}
