//! `meshflow mesh-gen`: a synthetic mesh written as a directory of real Kubernetes and
//! Istio YAML that `meshflow serve --config-dir` reads.
//!
//! The mesh is the one [`dataflows::synth`] describes as records: service `svc-S` lives in
//! namespace `ns-{S mod K}` with one HTTP port (`http`, 80 → 8080), an EndpointSlice of `E`
//! ready endpoints and one Pod per endpoint (labels `app: svc-S`, `version: v1|v2`
//! alternating); every `V`-th service has a DestinationRule with subsets v1/v2 and a 90/10
//! VirtualService; with Sidecar scoping every namespace has a default Sidecar importing
//! `./*` and the shared namespaces; with gateway proxies, an ingress Gateway in the root
//! namespace and a VirtualService bound to it for every `G`-th service. Reading the
//! directory with the file source yields exactly `dataflows::synth::records` of the same
//! shape without its proxies (tests/bench_mesh_gen.rs checks this record for record); proxies
//! are not config, they connect (see [`super::loadgen`]).
//!
//! Layout: `ns-K/namespace.yaml` (the Namespace), `ns-K/sidecar.yaml`, and one file per
//! service, `ns-K/svc-S.yaml`, holding its Service, EndpointSlice, Pods, DestinationRule and
//! VirtualService(s) and HTTPRoute, `ROOT/gateway.yaml` the Gateway and
//! `ROOT/k8s-gateway.yaml` the Gateway API Gateway — so a scenario edits one small file and
//! the file source re-parses only it.
//! `.meshflow-mesh.json` (a dot file, which the file source ignores) records the shape.
//!
//! [`MeshState`] is the generator's model of the mesh: the bench harness mutates it (an
//! endpoint moves, a service scales up, …) and rewrites only the file that changed.

use dataflows::model::MeshConfig;
use dataflows::synth::{self, Shape};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The shape file written next to the configs (ignored by the file source: a dot file).
pub const SHAPE_FILE: &str = ".meshflow-mesh.json";

/// Endpoints per service must stay below this so generated IPs are unique.
const MAX_ENDPOINTS_PER_SERVICE: usize = 1000;
/// Services whose generated IPs stay clear of the ranges used for moved endpoints
/// (10.254/16) and simulated proxies (10.255/16).
pub const MAX_SERVICES: usize = 16_000;
/// Simulated proxies get 10.255.x.y.
pub const MAX_PROXIES: usize = 65_536;

/// One endpoint of a service: its pod, IP and `version` label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointState {
    pub pod: String,
    pub ip: String,
    pub version: String,
}

/// One service and the Istio configs attached to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceState {
    pub index: usize,
    pub endpoints: Vec<EndpointState>,
    /// Subsets of its DestinationRule (each selects `version: NAME`); empty: no rule.
    pub subsets: Vec<String>,
    /// Weight of v1 in its VirtualService (the rest goes to v2); `None`: no VirtualService.
    pub v1_weight: Option<u32>,
    /// Pods created so far (names are never reused).
    pods_created: usize,
    /// A `rev` label on every pod, which no subset selects (`None`: no such label).
    pub pod_revision: Option<usize>,
    /// Its HTTPRoute's canary: (weight, service of the same namespace) taking that share
    /// of its requests (`None`: every request to the service itself).
    pub route_canary: Option<(u32, usize)>,
}

/// A file to write (`Some` content) or delete (`None`), relative to the config directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    pub path: PathBuf,
    pub content: Option<String>,
}

/// The generator's model of a mesh, from which every file is rendered.
#[derive(Clone, Debug)]
pub struct MeshState {
    pub shape: Shape,
    pub mesh: MeshConfig,
    pub services: Vec<ServiceState>,
    /// Per namespace, the egress hosts of its default Sidecar; `None`: no Sidecar.
    pub sidecars: Vec<Option<Vec<String>>>,
    /// Counter for IPs of moved endpoints (10.254.x.y), wrapping around the /16.
    next_fresh_ip: u32,
    /// The 10.254/16 addresses endpoints hold now: after 65,536 moves (11 minutes of the
    /// default churn) the counter wraps, and skips these.
    fresh_in_use: std::collections::HashSet<String>,
    /// AuthorizationPolicies edited so far, by index: their revision (the others: 0).
    authz_revisions: std::collections::BTreeMap<usize, usize>,
    /// HTTPRoute edits so far (the next one edits route `route_edits mod http_routes`).
    pub route_edits: usize,
}

/// Checks that a shape can be generated (unique IPs, valid node ids).
pub fn check_shape(shape: &Shape) -> Result<(), String> {
    if shape.namespaces == 0 {
        return Err("--namespaces must be at least 1".into());
    }
    if shape.services > MAX_SERVICES {
        return Err(format!("--services must be at most {MAX_SERVICES}"));
    }
    if shape.endpoints_per_service >= MAX_ENDPOINTS_PER_SERVICE {
        return Err(format!(
            "--endpoints-per-service must be below {MAX_ENDPOINTS_PER_SERVICE}"
        ));
    }
    if shape.proxies > MAX_PROXIES {
        return Err(format!("--proxies must be at most {MAX_PROXIES}"));
    }
    if shape.gateways > MAX_PROXIES {
        return Err(format!("--gateways must be at most {MAX_PROXIES}"));
    }
    if shape.shared_namespaces > shape.namespaces {
        return Err("--shared-namespaces must not exceed --namespaces".into());
    }
    if shape.http_routes > shape.services {
        return Err("--http-routes must not exceed --services (one route per service)".into());
    }
    Ok(())
}

fn quote(s: &str) -> String {
    // JSON strings are valid YAML double-quoted scalars.
    serde_json::Value::String(s.to_string()).to_string()
}

impl MeshState {
    pub fn new(shape: Shape, mesh: MeshConfig) -> Result<MeshState, String> {
        check_shape(&shape)?;
        let services = (0..shape.services)
            .map(|s| ServiceState::generated(s, &shape))
            .collect();
        let sidecars = (0..shape.namespaces)
            .map(|_| shape.sidecar_scoping.then(|| synth::sidecar_hosts(&shape)))
            .collect();
        Ok(MeshState {
            shape,
            mesh,
            services,
            sidecars,
            next_fresh_ip: 0,
            fresh_in_use: Default::default(),
            authz_revisions: Default::default(),
            route_edits: 0,
        })
    }

    pub fn namespace_of(&self, s: usize) -> String {
        synth::namespace(s % self.shape.namespaces)
    }

    pub fn hostname(&self, s: usize) -> String {
        synth::hostname(s, &self.shape, &self.mesh)
    }

    pub fn service_path(&self, s: usize) -> PathBuf {
        PathBuf::from(self.namespace_of(s)).join(format!("svc-{s}.yaml"))
    }

    pub fn sidecar_path(&self, n: usize) -> PathBuf {
        PathBuf::from(synth::namespace(n)).join("sidecar.yaml")
    }

    pub fn namespace_path(&self, n: usize) -> PathBuf {
        PathBuf::from(synth::namespace(n)).join("namespace.yaml")
    }

    /// AuthorizationPolicy `i`, in the namespace of the proxy it selects.
    pub fn authz_path(&self, i: usize) -> PathBuf {
        let p = synth::authz_target(i, &self.shape);
        PathBuf::from(synth::namespace(p % self.shape.namespaces)).join(format!("authz-{i}.yaml"))
    }

    /// AuthorizationPolicy `i` ([`synth::authz_policy`]) at its revision.
    pub fn render_authz(&self, i: usize) -> String {
        let p = synth::authz_target(i, &self.shape);
        let ns = synth::namespace(p % self.shape.namespaces);
        let revision = self.authz_revisions.get(&i).copied().unwrap_or(0);
        let mut principals = format!("        - cluster.local/ns/{ns}/sa/default\n");
        if revision > 0 {
            principals.push_str(&format!(
                "        - cluster.local/ns/{ns}/sa/rev-{revision}\n"
            ));
        }
        format!(
            "apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: authz-{i}
  namespace: {ns}
spec:
  selector:
    matchLabels:
      app: client-{p}
  action: ALLOW
  rules:
  - from:
    - source:
        principals:
{principals}    to:
    - operation:
        ports: [\"8080\"]
"
        )
    }

    /// AuthorizationPolicy `i` takes its next revision (one more principal allowed): a
    /// change to the listeners of the one proxy it selects.
    pub fn edit_authz(&mut self, i: usize) -> Edit {
        *self.authz_revisions.entry(i).or_insert(0) += 1;
        Edit {
            path: self.authz_path(i),
            content: Some(self.render_authz(i)),
        }
    }

    /// A namespace-wide PeerAuthentication of namespace `n` with `mode` (`None`: removed).
    pub fn peer_authentication(&self, n: usize, mode: Option<&str>) -> Edit {
        let ns = synth::namespace(n);
        Edit {
            path: PathBuf::from(&ns).join("peer-authentication.yaml"),
            content: mode.map(|mode| {
                format!(
                    "apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: default
  namespace: {ns}
spec:
  mtls:
    mode: {mode}
"
                )
            }),
        }
    }

    pub fn gateway_path(&self) -> PathBuf {
        PathBuf::from(&self.mesh.root_namespace).join("gateway.yaml")
    }

    /// The ingress Gateway (`None` without gateway proxies).
    pub fn render_gateway(&self) -> Option<String> {
        if self.shape.gateways == 0 {
            return None;
        }
        Some(format!(
            "apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: {name}
  namespace: {ns}
spec:
  selector:
    istio: ingressgateway
  servers:
  - port:
      number: 80
      name: http
      protocol: HTTP
    hosts:
    - \"*\"
",
            name = synth::GATEWAY_NAME,
            ns = self.mesh.root_namespace
        ))
    }

    pub fn k8s_gateway_path(&self) -> PathBuf {
        PathBuf::from(&self.mesh.root_namespace).join("k8s-gateway.yaml")
    }

    /// The Gateway API Gateway ([`synth::k8s_gateway`]; `None` without HTTPRoutes).
    pub fn render_k8s_gateway(&self) -> Option<String> {
        if !synth::has_http_routes(&self.shape) {
            return None;
        }
        Some(format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: {name}
  namespace: {ns}
spec:
  gatewayClassName: istio
  listeners:
  - name: http
    hostname: \"*.web.example\"
    port: {port}
    protocol: HTTP
    allowedRoutes:
      namespaces:
        from: All
",
            name = synth::K8S_GATEWAY_NAME,
            ns = self.mesh.root_namespace,
            port = synth::K8S_GATEWAY_PORT,
        ))
    }

    /// Every file of the mesh.
    pub fn files(&self) -> Vec<Edit> {
        let mut out = Vec::new();
        if let Some(content) = self.render_gateway() {
            out.push(Edit {
                path: self.gateway_path(),
                content: Some(content),
            });
        }
        if let Some(content) = self.render_k8s_gateway() {
            out.push(Edit {
                path: self.k8s_gateway_path(),
                content: Some(content),
            });
        }
        for n in 0..self.shape.namespaces {
            out.push(Edit {
                path: self.namespace_path(n),
                content: Some(render_namespace(n)),
            });
            if let Some(content) = self.render_sidecar(n) {
                out.push(Edit {
                    path: self.sidecar_path(n),
                    content: Some(content),
                });
            }
        }
        for s in 0..self.services.len() {
            out.push(self.service_edit(s));
        }
        for i in 0..self.shape.authz_policies {
            out.push(Edit {
                path: self.authz_path(i),
                content: Some(self.render_authz(i)),
            });
        }
        out
    }

    fn service_edit(&self, s: usize) -> Edit {
        Edit {
            path: self.service_path(s),
            content: Some(self.render_service(s)),
        }
    }

    fn sidecar_edit(&self, n: usize) -> Edit {
        Edit {
            path: self.sidecar_path(n),
            content: self.render_sidecar(n),
        }
    }

    fn service_mut(&mut self, s: usize) -> Result<&mut ServiceState, String> {
        self.services
            .get_mut(s)
            .ok_or_else(|| format!("the mesh has no service svc-{s}"))
    }

    /// An IP (10.254.x.y) for a moved endpoint that no endpoint holds now, and none held
    /// for at least the last 65,536 moves less those still held.
    fn fresh_ip(&mut self) -> Result<String, String> {
        for _ in 0..=0xffff {
            let n = self.next_fresh_ip & 0xffff;
            self.next_fresh_ip = self.next_fresh_ip.wrapping_add(1);
            let ip = format!("10.254.{}.{}", n >> 8, n & 255);
            if self.fresh_in_use.insert(ip.clone()) {
                return Ok(ip);
            }
        }
        Err("every IP of 10.254/16 is held by a moved endpoint".into())
    }

    /// Endpoint `e` of service `s` moves to a new IP (its pod was rescheduled).
    pub fn move_endpoint(&mut self, s: usize, e: usize) -> Result<Edit, String> {
        let ip = self.fresh_ip()?;
        let svc = self.service_mut(s)?;
        let ep = svc
            .endpoints
            .get_mut(e)
            .ok_or_else(|| format!("svc-{s} has no endpoint {e}"))?;
        let old = std::mem::replace(&mut ep.ip, ip);
        self.fresh_in_use.remove(&old);
        Ok(self.service_edit(s))
    }

    /// Every pod of service `s` gets label `rev: "REVISION"`, which no subset selects.
    pub fn relabel(&mut self, s: usize, revision: usize) -> Result<Edit, String> {
        self.service_mut(s)?.pod_revision = Some(revision);
        Ok(self.service_edit(s))
    }

    /// Service `s` gains `n` endpoints (alternating v1/v2 like the first ones).
    pub fn scale_up(&mut self, s: usize, n: usize) -> Result<Edit, String> {
        let svc = self.service_mut(s)?;
        for _ in 0..n {
            let e = svc.pods_created;
            if e >= MAX_ENDPOINTS_PER_SERVICE {
                return Err(format!("svc-{s} cannot have more endpoints"));
            }
            svc.endpoints.push(EndpointState {
                pod: format!("svc-{s}-{e}"),
                ip: synth::endpoint_ip(s, e),
                version: version_label(e),
            });
            svc.pods_created += 1;
        }
        Ok(self.service_edit(s))
    }

    /// The VirtualService of `s` sends `v1_weight`% to v1 and the rest to v2.
    pub fn shift_weight(&mut self, s: usize, v1_weight: u32) -> Result<Edit, String> {
        let svc = self.service_mut(s)?;
        if svc.v1_weight.is_none() {
            return Err(format!("svc-{s} has no VirtualService"));
        }
        svc.v1_weight = Some(v1_weight.min(100));
        Ok(self.service_edit(s))
    }

    /// The DestinationRule of `s` gains subset `name` (selecting `version: name`).
    pub fn add_subset(&mut self, s: usize, name: &str) -> Result<Edit, String> {
        let svc = self.service_mut(s)?;
        if svc.subsets.is_empty() {
            return Err(format!("svc-{s} has no DestinationRule"));
        }
        if !svc.subsets.iter().any(|x| x == name) {
            svc.subsets.push(name.to_string());
        }
        Ok(self.service_edit(s))
    }

    /// The HTTPRoute of `s` sends `weight`% of its requests to a second service of its
    /// namespace (`None`: all to `s` again).
    pub fn set_route_canary(&mut self, s: usize, weight: Option<u32>) -> Result<Edit, String> {
        if !synth::has_http_routes(&self.shape) || s >= self.shape.http_routes {
            return Err(format!("svc-{s} has no HTTPRoute"));
        }
        let k = self.shape.namespaces;
        let n = self.services.len();
        // Another service of the same namespace: no ReferenceGrant needed.
        let canary = if s + k < n {
            s + k
        } else if s >= k {
            s - k
        } else {
            s
        };
        self.service_mut(s)?.route_canary = weight.map(|w| (w.min(100), canary));
        Ok(self.service_edit(s))
    }

    /// A new service (the next index, in namespace `index mod K`) with the shape's number of
    /// endpoints and no Istio configs. Returns its index and file.
    pub fn add_service(&mut self) -> Result<(usize, Edit), String> {
        let s = self.services.len();
        if s >= MAX_SERVICES {
            return Err("the mesh cannot have more services".into());
        }
        let mut svc = ServiceState::generated(s, &self.shape);
        svc.subsets.clear();
        svc.v1_weight = None;
        self.services.push(svc);
        Ok((s, self.service_edit(s)))
    }

    /// Namespace `n`'s default Sidecar now imports these hosts (`None` removes it).
    pub fn set_sidecar(&mut self, n: usize, hosts: Option<Vec<String>>) -> Result<Edit, String> {
        let slot = self
            .sidecars
            .get_mut(n)
            .ok_or_else(|| format!("the mesh has no namespace ns-{n}"))?;
        *slot = hosts;
        Ok(self.sidecar_edit(n))
    }

    pub fn render_sidecar(&self, n: usize) -> Option<String> {
        let hosts = self.sidecars.get(n)?.as_ref()?;
        let mut y = String::new();
        let _ = writeln!(y, "apiVersion: networking.istio.io/v1");
        let _ = writeln!(y, "kind: Sidecar");
        let _ = writeln!(y, "metadata:");
        let _ = writeln!(y, "  name: default");
        let _ = writeln!(y, "  namespace: {}", synth::namespace(n));
        let _ = writeln!(y, "spec:");
        let _ = writeln!(y, "  egress:");
        let _ = writeln!(y, "  - hosts:");
        for h in hosts {
            let _ = writeln!(y, "    - {}", quote(h));
        }
        Some(y)
    }

    /// The YAML of one service's file: Service, EndpointSlice, Pods, DestinationRule and
    /// VirtualService.
    pub fn render_service(&self, s: usize) -> String {
        let Some(svc) = self.services.get(s) else {
            return String::new();
        };
        let ns = self.namespace_of(s);
        let mut y = String::new();
        let _ = write!(
            y,
            "apiVersion: v1
kind: Service
metadata:
  name: svc-{s}
  namespace: {ns}
  labels:
    app: svc-{s}
spec:
  selector:
    app: svc-{s}
  ports:
  - name: http
    port: 80
    targetPort: 8080
    protocol: TCP
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: svc-{s}
  namespace: {ns}
  labels:
    kubernetes.io/service-name: svc-{s}
addressType: IPv4
ports:
- name: http
  port: 8080
  protocol: TCP
"
        );
        if svc.endpoints.is_empty() {
            let _ = writeln!(y, "endpoints: []");
        } else {
            let _ = writeln!(y, "endpoints:");
        }
        for ep in &svc.endpoints {
            let _ = write!(
                y,
                "- addresses:
  - {ip}
  conditions:
    ready: true
  targetRef:
    kind: Pod
    name: {pod}
    namespace: {ns}
",
                ip = quote(&ep.ip),
                pod = ep.pod
            );
        }
        for ep in &svc.endpoints {
            let _ = write!(
                y,
                "---
apiVersion: v1
kind: Pod
metadata:
  name: {pod}
  namespace: {ns}
  labels:
    app: svc-{s}
    version: {version}{rev}
spec:
  containers:
  - name: app
    image: example.invalid/svc:1
    ports:
    - containerPort: 8080
status:
  phase: Running
  podIP: {ip}
  podIPs:
  - ip: {ip}
",
                pod = ep.pod,
                version = ep.version,
                rev = svc
                    .pod_revision
                    .map(|r| format!("\n    rev: \"{r}\""))
                    .unwrap_or_default(),
                ip = quote(&ep.ip)
            );
        }
        self.render_routing(s, &mut y);
        y
    }

    /// The routing part of service `s`'s file, appended to `y`: its DestinationRule,
    /// VirtualService, the VirtualService bound to the ingress Gateway and its HTTPRoute,
    /// those it has.
    fn render_routing(&self, s: usize, y: &mut String) {
        let Some(svc) = self.services.get(s) else {
            return;
        };
        let ns = self.namespace_of(s);
        let host = self.hostname(s);
        if !svc.subsets.is_empty() {
            let _ = write!(
                y,
                "---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: svc-{s}
  namespace: {ns}
spec:
  host: {host}
  subsets:
"
            );
            for sub in &svc.subsets {
                let _ = write!(
                    y,
                    "  - name: {sub}
    labels:
      version: {sub}
"
                );
            }
        }
        if let Some(w) = svc.v1_weight {
            let _ = write!(
                y,
                "---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: svc-{s}
  namespace: {ns}
spec:
  hosts:
  - {host}
  http:
  - route:
    - destination:
        host: {host}
        subset: v1
      weight: {w}
    - destination:
        host: {host}
        subset: v2
      weight: {rest}
",
                rest = 100 - w.min(100)
            );
        }
        if synth::has_gateway_vs(s, &self.shape) {
            let _ = write!(
                y,
                "---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: svc-{s}-gw
  namespace: {ns}
spec:
  hosts:
  - {gw_host}
  gateways:
  - {root}/{gw}
  http:
  - route:
    - destination:
        host: {host}
        port:
          number: 80
",
                gw_host = synth::gateway_host(s),
                root = self.mesh.root_namespace,
                gw = synth::GATEWAY_NAME,
            );
        }
        if synth::has_http_routes(&self.shape) && s < self.shape.http_routes {
            let backends = match svc.route_canary {
                None => format!(
                    "    - name: svc-{s}
      port: 80
"
                ),
                Some((w, t)) => format!(
                    "    - name: svc-{s}
      port: 80
      weight: {rest}
    - name: svc-{t}
      port: 80
      weight: {w}
",
                    rest = 100 - w
                ),
            };
            let _ = write!(
                y,
                "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: svc-{s}
  namespace: {ns}
spec:
  parentRefs:
  - name: {gw}
    namespace: {root}
  hostnames:
  - {host}
  rules:
  - backendRefs:
{backends}",
                gw = synth::K8S_GATEWAY_NAME,
                root = self.mesh.root_namespace,
                host = synth::http_route_host(s),
            );
        }
    }

    /// The shape as JSON (written to [`SHAPE_FILE`]).
    pub fn shape_json(&self) -> serde_json::Value {
        shape_json(&self.shape, &self.mesh)
    }
}

pub fn shape_json(shape: &Shape, mesh: &MeshConfig) -> serde_json::Value {
    serde_json::json!({
        "services": shape.services,
        "endpoints_per_service": shape.endpoints_per_service,
        "namespaces": shape.namespaces,
        "proxies": shape.proxies,
        "vs_every": shape.vs_every,
        "sidecar_scoping": shape.sidecar_scoping,
        "shared_namespaces": shape.shared_namespaces,
        "gateways": shape.gateways,
        "gateway_vs_every": shape.gateway_vs_every,
        "authz_policies": shape.authz_policies,
        "http_routes": shape.http_routes,
        "root_namespace": mesh.root_namespace,
        "domain_suffix": mesh.domain_suffix,
    })
}

fn version_label(e: usize) -> String {
    if e.is_multiple_of(2) {
        "v1".into()
    } else {
        "v2".into()
    }
}

impl ServiceState {
    fn generated(s: usize, shape: &Shape) -> ServiceState {
        let with_rules = shape.vs_every > 0 && s.is_multiple_of(shape.vs_every);
        ServiceState {
            index: s,
            endpoints: (0..shape.endpoints_per_service)
                .map(|e| EndpointState {
                    pod: format!("svc-{s}-{e}"),
                    ip: synth::endpoint_ip(s, e),
                    version: version_label(e),
                })
                .collect(),
            subsets: if with_rules {
                vec!["v1".into(), "v2".into()]
            } else {
                Vec::new()
            },
            v1_weight: with_rules.then_some(90),
            pods_created: shape.endpoints_per_service,
            pod_revision: None,
            route_canary: None,
        }
    }
}

/// The Namespace object of namespace `n` (labelled for sidecar injection, as in Istio).
pub fn render_namespace(n: usize) -> String {
    format!(
        "apiVersion: v1
kind: Namespace
metadata:
  name: {}
  labels:
    istio-injection: enabled
",
        synth::namespace(n)
    )
}

/// Writes one edit under `dir` atomically: the content goes to a dot file (which the file
/// source ignores) and is renamed over the target, so a watcher never reads half a file.
pub fn apply_edit(dir: &Path, edit: &Edit) -> Result<(), String> {
    let path = dir.join(&edit.path);
    match &edit.content {
        Some(content) => {
            let parent = path
                .parent()
                .ok_or_else(|| format!("{}: no parent directory", path.display()))?;
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let tmp = parent.join(format!(".{name}.tmp"));
            std::fs::write(&tmp, content).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
            std::fs::rename(&tmp, &path)
                .map_err(|e| format!("renaming {} to {}: {e}", tmp.display(), path.display()))
        }
        None => match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("removing {}: {e}", path.display())),
        },
    }
}

/// Writes the whole mesh into `dir` (created if missing; it must be empty unless `force`).
/// `progress` is called with (files written, files in total).
pub fn write_mesh(
    dir: &Path,
    state: &MeshState,
    force: bool,
    mut progress: impl FnMut(usize, usize),
) -> Result<usize, String> {
    if dir.exists() {
        let mut entries =
            std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
        if !force && entries.next().is_some() {
            return Err(format!(
                "{} is not empty (pass --force to write into it anyway)",
                dir.display()
            ));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let files = state.files();
    let total = files.len();
    for (i, edit) in files.iter().enumerate() {
        let path = dir.join(&edit.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        if let Some(content) = &edit.content {
            std::fs::write(&path, content)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
        }
        progress(i + 1, total);
    }
    let shape = serde_json::to_string_pretty(&state.shape_json()).unwrap_or_default();
    std::fs::write(dir.join(SHAPE_FILE), shape + "\n")
        .map_err(|e| format!("writing {}: {e}", dir.join(SHAPE_FILE).display()))?;
    Ok(total)
}
