//! The `reviews` fixture of the real-Envoy scenarios: Kubernetes Service, Pods and
//! EndpointSlice, the Istio DestinationRule and VirtualServices for `reviews` in namespace
//! `default`, written as files into meshflow's config directory; backends standing in for the
//! reviews pods; and a client that sends requests through Envoy and tallies who answered.
//!
//! Addresses: every test owns one loopback /24, `127.0.<net>.0`; pod `reviews-vN` has
//! `127.0.<net>.(10 + N)`, so parallel tests never share an address.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::{
    converge_then, free_port, remove_config, tally, write_config, Backend, Envoy, ProxyNode,
    XdsMode, STARTUP_TIMEOUT,
};

pub const NAMESPACE: &str = "default";
pub const FQDN: &str = "reviews.default.svc.cluster.local";

const SERVICE_FILE: &str = "reviews-service.yaml";
const PODS_FILE: &str = "reviews-pods.yaml";
const ENDPOINTS_FILE: &str = "reviews-endpointslice.yaml";
const DESTINATION_RULE_FILE: &str = "reviews-destinationrule.yaml";
const VIRTUAL_SERVICE_FILE: &str = "reviews-virtualservice.yaml";

/// Where a VirtualService for `reviews` applies.
#[derive(Clone, Debug)]
pub enum Binding {
    /// Sidecars (`gateways` omitted = `mesh`); `hosts: [reviews]`.
    Mesh,
    /// A Gateway in `default`, for one external host.
    Gateway { gateway: String, host: String },
}

/// The `reviews` service of one test: its ports, pod addresses and config files.
pub struct Reviews {
    net: u8,
    service_port: u16,
    backend_port: u16,
    config_dir: PathBuf,
}

impl Reviews {
    /// `net` picks the test's loopback /24; `service_port` is the Service port (the number in
    /// cluster names); the pods' `targetPort` is a fresh free port.
    pub fn new(net: u8, service_port: u16, config_dir: &Path) -> Reviews {
        Reviews {
            net,
            service_port,
            backend_port: free_port(),
            config_dir: config_dir.to_owned(),
        }
    }

    pub fn service_port(&self) -> u16 {
        self.service_port
    }

    pub fn backend_port(&self) -> u16 {
        self.backend_port
    }

    /// `127.0.<net>.<host>`.
    pub fn ip(&self, host: u8) -> String {
        format!("127.0.{}.{host}", self.net)
    }

    /// The address of pod `reviews-<version>`: `v1` → `.11`, `v2` → `.12`, …
    pub fn pod_ip(&self, version: &str) -> String {
        let n: u8 = version
            .strip_prefix('v')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("version must look like v1, got {version:?}"));
        self.ip(10 + n)
    }

    /// A backend on pod `reviews-<version>`'s address answering `reviews-<version>`.
    pub fn start_backend(&self, version: &str) -> Backend {
        Backend::start(
            &self.pod_ip(version),
            self.backend_port,
            &format!("reviews-{version}"),
        )
    }

    /// Envoy's name for the cluster of `subset` (`""` for the whole service):
    /// `outbound|<service port>|<subset>|reviews.default.svc.cluster.local`.
    pub fn cluster(&self, subset: &str) -> String {
        format!("outbound|{}|{subset}|{FQDN}", self.service_port)
    }

    pub fn write(&self, file_name: &str, yaml: &str) {
        write_config(&self.config_dir, file_name, yaml);
    }

    /// A Sidecar for the `reviews` pods whose one `ingress` listener binds pod `reviews-v1`'s
    /// address at the backends' port (no capture) and hands requests to the application on
    /// `127.0.0.1:app_port`; `ingress_lines` (indented under the ingress entry, ending in a
    /// newline) are added to that entry, or, starting `  - port:`, add entries of their own.
    /// The sidecar of pod `reviews-v1` (service account `reviews`) speaking `mode` to `xds`,
    /// live, with the bound `ingress` listener of [`Reviews::server_sidecar_yaml`] in place.
    pub fn server_sidecar(&self, bin: &Path, dir: &Path, xds: SocketAddr, mode: XdsMode) -> Envoy {
        let pod_ip = self.pod_ip("v1");
        let node = ProxyNode::sidecar(
            "reviews-v1",
            "default",
            &pod_ip,
            &[("app", "reviews"), ("version", "v1")],
        );
        let envoy = Envoy::start_customized(bin, dir, &node, xds, mode, as_account("reviews"));
        envoy.wait_live(STARTUP_TIMEOUT);
        envoy.await_listener(&format!("inbound_{pod_ip}_{}", self.backend_port));
        envoy
    }

    /// The client sidecar `client-abc` (address 20, service account `sleep`) speaking `mode`
    /// to `xds`, live, with the egress listener of [`client_sidecar_yaml`] on `port`.
    pub fn client_sidecar(
        &self,
        bin: &Path,
        dir: &Path,
        xds: SocketAddr,
        mode: XdsMode,
        port: u16,
    ) -> Envoy {
        let node = ProxyNode::sidecar("client-abc", "default", &self.ip(20), &[("app", "client")]);
        let envoy = Envoy::start_customized(bin, dir, &node, xds, mode, as_account("sleep"));
        envoy.wait_live(STARTUP_TIMEOUT);
        envoy.await_listener(&format!("127.0.0.1_{port}"));
        envoy
    }

    pub fn server_sidecar_yaml(&self, app_port: u16, ingress_lines: &str) -> String {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: reviews, namespace: default}}\nspec:\n  workloadSelector: {{labels: {{app: reviews}}}}\n  ingress:\n  - port: {{number: {target}, protocol: HTTP, name: http}}\n    bind: {pod_ip}\n    captureMode: NONE\n    defaultEndpoint: 127.0.0.1:{app_port}\n{ingress_lines}  egress:\n  - hosts: ['./*']\n",
            target = self.backend_port,
            pod_ip = self.pod_ip("v1"),
        )
    }

    /// The Service: selector `app: reviews`, port `http` → the backends' port.
    pub fn write_service(&self) {
        self.write_service_with("");
    }

    /// [`Reviews::write_service`] with `spec_lines` (each indented by two spaces, ending in a
    /// newline) added to its spec.
    pub fn write_service_with(&self, spec_lines: &str) {
        let yaml = format!(
            "\
apiVersion: v1
kind: Service
metadata:
  name: reviews
  namespace: {NAMESPACE}
  labels:
    app: reviews
    service: reviews
spec:
  type: ClusterIP
{spec_lines}  selector:
    app: reviews
  ports:
  - name: http
    port: {port}
    targetPort: {target}
    protocol: TCP
",
            port = self.service_port,
            target = self.backend_port,
        );
        self.write(SERVICE_FILE, &yaml);
    }

    /// Running pods `reviews-<version>` for each of `versions`, running as service account
    /// `reviews` (as bookinfo's do).
    pub fn write_pods(&self, versions: &[&str]) {
        self.write_pods_as(versions, "reviews")
    }

    /// [`Reviews::write_pods`], running as `service_account`.
    pub fn write_pods_as(&self, versions: &[&str], service_account: &str) {
        let placed: Vec<(&str, &str)> = versions.iter().map(|v| (*v, "")).collect();
        self.write_pods_placed_as(&placed, service_account);
    }

    /// As [`Reviews::write_pods`], each pod `(version, locality)` in its locality (Istio's
    /// `istio-locality` label, `region.zone.subzone`; "" for none).
    pub fn write_pods_placed(&self, placed: &[(&str, &str)]) {
        self.write_pods_placed_as(placed, "reviews")
    }

    /// [`Reviews::write_pods_placed`], running as `service_account`.
    pub fn write_pods_placed_as(&self, placed: &[(&str, &str)], service_account: &str) {
        let labelled: Vec<(&str, String)> = placed
            .iter()
            .map(|(version, locality)| {
                let line = if locality.is_empty() {
                    String::new()
                } else {
                    format!("istio-locality: {locality}")
                };
                (*version, line)
            })
            .collect();
        self.write_pods_labelled_as(&labelled, service_account);
    }

    /// Running pods `reviews-<version>`, each with one more label (`key: value`, or ""
    /// for none), running as service account `reviews`.
    pub fn write_pods_labelled(&self, pods: &[(&str, &str)]) {
        let labelled: Vec<(&str, String)> =
            pods.iter().map(|(v, l)| (*v, (*l).to_string())).collect();
        self.write_pods_labelled_as(&labelled, "reviews");
    }

    fn write_pods_labelled_as(&self, labelled: &[(&str, String)], service_account: &str) {
        let pods: Vec<String> = labelled
            .iter()
            .map(|(version, label)| {
                let locality = if label.is_empty() {
                    String::new()
                } else {
                    format!("    {label}\n")
                };
                format!(
                    "\
apiVersion: v1
kind: Pod
metadata:
  name: reviews-{version}
  namespace: {NAMESPACE}
  labels:
    app: reviews
    version: {version}
{locality}spec:
  serviceAccountName: {service_account}
  containers:
  - name: reviews
    image: docker.io/istio/examples-bookinfo-reviews-{version}:1.20.2
    ports:
    - containerPort: {port}
status:
  phase: Running
  podIP: {ip}
  podIPs:
  - ip: {ip}
",
                    ip = self.pod_ip(version),
                    port = self.backend_port,
                )
            })
            .collect();
        self.write(PODS_FILE, &pods.join("---\n"));
    }

    /// One EndpointSlice for the Service with a ready endpoint per pod in `versions`.
    pub fn write_endpoints(&self, versions: &[&str]) {
        let endpoints: String = versions
            .iter()
            .map(|version| {
                format!(
                    "\
- addresses:
  - {ip}
  conditions:
    ready: true
    serving: true
    terminating: false
  targetRef:
    kind: Pod
    name: reviews-{version}
    namespace: {NAMESPACE}
",
                    ip = self.pod_ip(version),
                )
            })
            .collect();
        let endpoints = if endpoints.is_empty() {
            " []\n".to_owned()
        } else {
            format!("\n{endpoints}")
        };
        let yaml = format!(
            "\
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-7x2kq
  namespace: {NAMESPACE}
  labels:
    kubernetes.io/service-name: reviews
addressType: IPv4
ports:
- name: http
  port: {port}
  protocol: TCP
endpoints:{endpoints}",
            port = self.backend_port,
        );
        self.write(ENDPOINTS_FILE, &yaml);
    }

    /// DestinationRule `reviews` with one subset per version, selecting `version: <name>`.
    pub fn write_destination_rule(&self, subsets: &[&str]) {
        self.write_destination_rule_with_policy(subsets, "");
    }

    /// As [`Reviews::write_destination_rule`], with `traffic_policy` (YAML lines indented
    /// under `spec:`, e.g. `  trafficPolicy:\n    tls: {mode: SIMPLE}\n`).
    pub fn write_destination_rule_with_policy(&self, subsets: &[&str], traffic_policy: &str) {
        let subsets: String = subsets
            .iter()
            .map(|subset| format!("  - name: {subset}\n    labels:\n      version: {subset}\n"))
            .collect();
        let yaml = format!(
            "\
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: reviews
  namespace: {NAMESPACE}
spec:
  host: reviews
{traffic_policy}  subsets:
{subsets}"
        );
        self.write(DESTINATION_RULE_FILE, &yaml);
    }

    /// VirtualService `reviews`: requests with `end-user: jason` → subset v2; requests under
    /// `/reviews` → the weighted `split` of subsets. No other route, so other requests get 404.
    pub fn write_subset_routing(&self, binding: &Binding, split: &[(&str, u32)]) {
        let destinations: String = split
            .iter()
            .map(|(subset, weight)| {
                format!(
                    "    - destination:\n        host: reviews\n{port}        subset: {subset}\n      weight: {weight}\n",
                    port = self.destination_port(binding),
                )
            })
            .collect();
        let http = format!(
            "  - name: jason
    match:
    - headers:
        end-user:
          exact: jason
    route:
    - destination:
        host: reviews
{port}        subset: v2
  - name: reviews-split
    match:
    - uri:
        prefix: /reviews
    route:
{destinations}",
            port = self.destination_port(binding),
        );
        self.write_virtual_service(binding, &http);
    }

    /// VirtualService `reviews` with one route to the whole service (no subset): what a Gateway
    /// needs to reach `reviews` at all.
    pub fn write_plain_routing(&self, binding: &Binding) {
        self.write_plain_routing_after(binding, "");
    }

    /// [`Reviews::write_plain_routing`] with `routes` first (HTTP routes as YAML list
    /// items, indented by two spaces, ending in a newline).
    pub fn write_plain_routing_after(&self, binding: &Binding, routes: &str) {
        let http = format!(
            "{routes}  - route:\n    - destination:\n        host: reviews\n{port}",
            port = self.destination_port(binding)
        );
        self.write_virtual_service(binding, &http);
    }

    pub fn delete_virtual_service(&self) {
        remove_config(&self.config_dir, VIRTUAL_SERVICE_FILE);
    }

    fn write_virtual_service(&self, binding: &Binding, http_routes: &str) {
        let target = match binding {
            Binding::Mesh => "  hosts:\n  - reviews\n".to_owned(),
            Binding::Gateway { gateway, host } => {
                format!("  hosts:\n  - {host}\n  gateways:\n  - {gateway}\n")
            }
        };
        let yaml = format!(
            "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
  namespace: {NAMESPACE}
spec:
{target}  http:
{http_routes}"
        );
        self.write(VIRTUAL_SERVICE_FILE, &yaml);
    }

    /// Gateway routes name the destination port explicitly (as bookinfo does); mesh routes rely
    /// on the Service having a single port.
    fn destination_port(&self, binding: &Binding) -> String {
        match binding {
            Binding::Mesh => String::new(),
            Binding::Gateway { .. } => {
                format!("        port:\n          number: {}\n", self.service_port)
            }
        }
    }
}

/// Sends requests through one Envoy listener with a fixed `Host` and tallies who answered.
pub struct Client<'a> {
    envoy: &'a Envoy,
    addr: SocketAddr,
    host: String,
}

impl<'a> Client<'a> {
    pub fn new(envoy: &'a Envoy, addr: SocketAddr, host: &str) -> Client<'a> {
        Client {
            envoy,
            addr,
            host: host.to_owned(),
        }
    }

    /// Outcomes (body of a 200, `status <code>`, or `error: …`) of `n` GETs of `path`.
    pub fn tally(&self, n: usize, path: &str, headers: &[(&str, &str)]) -> HashMap<String, usize> {
        tally(n, || super::http_get(self.addr, &self.host, path, headers))
    }

    /// Sends batches of 10 GETs until a batch satisfies `accept`, then returns a fresh tally of
    /// `n` GETs (which the caller asserts on). Panics with Envoy's state after the timeout.
    pub fn converge(
        &self,
        what: &str,
        path: &str,
        headers: &[(&str, &str)],
        accept: impl Fn(&HashMap<String, usize>) -> bool,
        n: usize,
    ) -> HashMap<String, usize> {
        converge_then(
            what,
            |k| self.tally(k, path, headers),
            accept,
            n,
            || self.envoy.summary(),
        )
    }
}

/// A bootstrap edit naming the node's service account (node metadata `SERVICE_ACCOUNT`).
fn as_account(sa: &'static str) -> impl FnOnce(&mut serde_json::Value) {
    move |b: &mut serde_json::Value| {
        b["node"]["metadata"]["SERVICE_ACCOUNT"] = serde_json::json!(sa);
    }
}

/// An HTTP Gateway `name` in `default` for the `istio: ingressgateway` proxies: any host on
/// `127.0.0.1:<port>`.
pub fn http_gateway_yaml(name: &str, port: u16) -> String {
    format!(
        "\
apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: {name}
  namespace: default
spec:
  selector:
    istio: ingressgateway
  servers:
  - port:
      number: {port}
      name: http
      protocol: HTTP
    bind: 127.0.0.1
    hosts:
    - \"*\"
"
    )
}

/// How often `key` was seen.
pub fn count(counts: &HashMap<String, usize>, key: &str) -> usize {
    counts.get(key).copied().unwrap_or(0)
}

/// Sidecar `client` in `default` (selects `app: client`): one egress listener bound to
/// `127.0.0.1:<port>` without capture, importing `./*` — how the tests run a sidecar
/// without iptables.
pub fn client_sidecar_yaml(port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: Sidecar
metadata:
  name: client
  namespace: default
spec:
  workloadSelector:
    labels:
      app: client
  egress:
  - port:
      number: {port}
      protocol: HTTP
      name: http
    bind: 127.0.0.1
    captureMode: NONE
    hosts:
    - \"./*\"
"
    )
}

/// A server sidecar in front of the reviews application (pod v1, labelled to take the mesh's
/// mTLS; its Sidecar `ingress` bound to the pod's address) and a client sidecar listening
/// on 127.0.0.1 at `port`, both over Delta from one meshflow. The policy tests of
/// `tests/envoy/security.rs` and `authorization.rs` start from it.
pub struct SidecarPair {
    pub meshflow: super::Meshflow,
    pub server: Envoy,
    pub client: Envoy,
    /// Through the client sidecar (mTLS to the server sidecar).
    pub through_client: SocketAddr,
    /// Plaintext, straight to the server sidecar's bound listener.
    pub direct: SocketAddr,
    /// Between the server sidecar and meshflow, when started with one
    /// ([`Self::start_with_server_link`]).
    pub server_link: Option<super::pausable_link::PausableLink>,
    /// Where the application behind the server sidecar listens (127.0.0.1).
    pub app_port: u16,
    /// The fixture the pair was started from (addresses, ports, its Sidecar's YAML).
    pub reviews: Reviews,
    _app: Backend,
}

impl SidecarPair {
    /// `net`: the test's loopback /24 (see [`Reviews::new`]); `bin`: Envoy; the config and
    /// the proxies' files go under `dir` (`config`: its config directory).
    pub fn start(net: u8, bin: &Path, dir: &Path, config: &Path) -> SidecarPair {
        Self::start_with_args(net, bin, dir, config, &[])
    }

    /// [`Self::start`] with more arguments to `meshflow serve`.
    pub fn start_with_args(
        net: u8,
        bin: &Path,
        dir: &Path,
        config: &Path,
        meshflow_args: &[&str],
    ) -> SidecarPair {
        Self::start_inner(net, bin, dir, config, meshflow_args, false)
    }

    /// [`Self::start_with_args`], the server sidecar's xDS stream going through a
    /// [`super::pausable_link::PausableLink`] the test can pause.
    pub fn start_with_server_link(
        net: u8,
        bin: &Path,
        dir: &Path,
        config: &Path,
        meshflow_args: &[&str],
    ) -> SidecarPair {
        Self::start_inner(net, bin, dir, config, meshflow_args, true)
    }

    fn start_inner(
        net: u8,
        bin: &Path,
        dir: &Path,
        config: &Path,
        meshflow_args: &[&str],
        linked: bool,
    ) -> SidecarPair {
        let port = free_port();
        let reviews = Reviews::new(net, port, config);
        let app_port = free_port();
        let app = Backend::start("127.0.0.1", app_port, "reviews-app");
        reviews.write_service();
        reviews.write_pods_labelled(&[("v1", "security.istio.io/tlsMode: istio")]);
        reviews.write_endpoints(&["v1"]);
        write_config(config, "sidecar.yaml", &client_sidecar_yaml(port));
        write_config(
            config,
            "server-sidecar.yaml",
            &reviews.server_sidecar_yaml(app_port, ""),
        );
        let meshflow = super::Meshflow::start_with_args(config, dir, meshflow_args);
        let xds = meshflow.xds_addr();
        let server_link = linked.then(|| super::pausable_link::PausableLink::start(xds));
        let server_xds = server_link.as_ref().map_or(xds, |l| l.addr());
        let server = reviews.server_sidecar(bin, dir, server_xds, XdsMode::Delta);
        let client = reviews.client_sidecar(bin, dir, xds, XdsMode::Delta, port);
        let direct = format!("{}:{}", reviews.pod_ip("v1"), reviews.backend_port())
            .parse()
            .expect("the pod's address");
        SidecarPair {
            meshflow,
            server,
            client,
            through_client: SocketAddr::from(([127, 0, 0, 1], port)),
            direct,
            server_link,
            app_port,
            reviews,
            _app: app,
        }
    }

    /// Both proxies' accounts, for failure messages.
    pub fn summary(&self) -> String {
        format!("{}\n{}", self.client.summary(), self.server.summary())
    }
}
