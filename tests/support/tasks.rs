//! Istio's traffic-management task pages as fixtures (`tests/fixtures/tasks/*.yaml`), served
//! as they are, and the registry a test adds around them: the fixtures hold the Istio objects
//! the pages apply (and a Service where bookinfo has none), never pods or endpoints, so each
//! test places the workloads on addresses of its own loopback /24 where its backends listen.
//!
//! Addresses in `127.0.<net>.0/24`, following bookinfo's layout: pod `details-vN` has `.1N`,
//! `ratings-vN` `.2N`, `reviews-vN` `.3N`, `productpage-vN` `.4N`, `tcp-echo-vN` `.6N`; the
//! client (pod `sleep`) `.50`, where its Sidecar's egress listener binds in place of traffic
//! capture.

use std::path::Path;

use super::{remove_config, write_config, ProxyNode};

/// The task fixtures.
pub const TASKS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tasks");
/// The bookinfo example's DestinationRules (a subset per version), which the HTTP task pages
/// take as already applied.
pub const BOOKINFO_RULES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/bookinfo/config/destination-rules.yaml"
);
/// The port of every bookinfo Service.
pub const BOOKINFO_PORT: u16 = 9080;
/// tcp-echo's Service port, as its fixture writes it.
pub const TCP_ECHO_PORT: u16 = 9000;

/// The text of fixture `<task>.yaml`.
pub fn task_yaml(task: &str) -> String {
    let path = format!("{TASKS}/{task}.yaml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Serves fixture `<task>.yaml` unchanged, as `task.yaml` in `config`: applying another task
/// replaces it, as `kubectl apply` of the next page's file replaces objects of the same name.
pub fn apply_task(config: &Path, task: &str) {
    write_config(config, "task.yaml", &task_yaml(task));
}

/// Withdraws the task applied last.
pub fn delete_task(config: &Path) {
    remove_config(config, "task.yaml");
}

/// Serves bookinfo's DestinationRules as the example ships them.
pub fn write_bookinfo_rules(config: &Path) {
    let text = std::fs::read_to_string(BOOKINFO_RULES).expect("bookinfo's destination rules");
    write_config(config, "bookinfo-destination-rules.yaml", &text);
}

/// `127.0.<net>.<host>`.
pub fn ip(net: u8, host: u8) -> String {
    format!("127.0.{net}.{host}")
}

/// The address of pod `<service>-<version>` (`v1` → `.N1`, …).
pub fn pod_ip(net: u8, service: &str, version: &str) -> String {
    let tens = match service {
        "details" => 10,
        "ratings" => 20,
        "reviews" => 30,
        "productpage" => 40,
        "tcp-echo" => 60,
        other => panic!("no address for {other}"),
    };
    let n: u8 = version
        .strip_prefix('v')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("version must look like v1, got {version:?}"));
    ip(net, tens + n)
}

/// The client's address: pod `sleep`, where its egress listener binds.
pub fn client_ip(net: u8) -> String {
    ip(net, 50)
}

/// The client's proxy: pod `sleep` (`app: sleep`) running as service account `sleep`.
pub fn client_node(net: u8) -> ProxyNode {
    ProxyNode::sidecar("sleep", "default", &client_ip(net), &[("app", "sleep")])
        .with_metadata("SERVICE_ACCOUNT", "sleep")
}

/// Sidecar `sleep` for the client: one egress listener on `port` of `protocol`, bound to the
/// client's address without capture, importing the namespace's services.
pub fn write_client_sidecar(config: &Path, net: u8, port: u16, protocol: &str) {
    let yaml = format!(
        "apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: sleep, namespace: default}}
spec:
  workloadSelector: {{labels: {{app: sleep}}}}
  egress:
  - port: {{number: {port}, protocol: {protocol}, name: egress}}
    bind: {ip}
    captureMode: NONE
    hosts: [./*]
",
        ip = client_ip(net)
    );
    write_config(config, "sidecar-sleep.yaml", &yaml);
}

/// Pods `<service>-<version>` (labels `app`, `version`; service account `sa`) and one
/// EndpointSlice for `service` with a ready endpoint per pod at `target_port`, port `port_name`.
fn write_workloads(
    config: &Path,
    net: u8,
    service: &str,
    versions: &[&str],
    sa: &str,
    port_name: &str,
    target_port: u16,
) {
    let mut docs: Vec<String> = versions
        .iter()
        .map(|version| {
            let ip = pod_ip(net, service, version);
            format!(
                "apiVersion: v1
kind: Pod
metadata:
  name: {service}-{version}
  namespace: default
  labels: {{app: {service}, version: {version}}}
spec:
  serviceAccountName: {sa}
status:
  phase: Running
  podIP: {ip}
  podIPs: [{{ip: {ip}}}]
"
            )
        })
        .collect();
    let endpoints: String = versions
        .iter()
        .map(|version| {
            format!(
                "- addresses: [{ip}]\n  conditions: {{ready: true}}\n  targetRef: {{kind: Pod, name: {service}-{version}, namespace: default}}\n",
                ip = pod_ip(net, service, version)
            )
        })
        .collect();
    let endpoints = if endpoints.is_empty() {
        " []\n".to_owned()
    } else {
        format!("\n{endpoints}")
    };
    docs.push(format!(
        "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {service}-slice
  namespace: default
  labels: {{kubernetes.io/service-name: {service}}}
addressType: IPv4
ports: [{{name: {port_name}, port: {target_port}, protocol: TCP}}]
endpoints:{endpoints}"
    ));
    write_config(
        config,
        &format!("{service}-workloads.yaml"),
        &docs.join("---\n"),
    );
}

/// Bookinfo's Service `service` (port 9080, named `http`, to `target_port`) with pods of
/// `versions` running as `bookinfo-<service>`, as the example's are.
pub fn write_bookinfo_service(
    config: &Path,
    net: u8,
    service: &str,
    versions: &[&str],
    target_port: u16,
) {
    let yaml = format!(
        "apiVersion: v1
kind: Service
metadata:
  name: {service}
  namespace: default
  labels: {{app: {service}, service: {service}}}
spec:
  selector: {{app: {service}}}
  ports:
  - {{name: http, port: {BOOKINFO_PORT}, targetPort: {target_port}, protocol: TCP}}
"
    );
    write_config(config, &format!("{service}-service.yaml"), &yaml);
    write_workloads(
        config,
        net,
        service,
        versions,
        &format!("bookinfo-{service}"),
        "http",
        target_port,
    );
}

/// All of bookinfo's Services, each with the pods of its versions in the example (details v1,
/// ratings v1, reviews v1–v3, productpage v1), listening on `target_port`.
pub fn write_bookinfo(config: &Path, net: u8, target_port: u16) {
    for (service, versions) in [
        ("details", &["v1"][..]),
        ("ratings", &["v1"]),
        ("reviews", &["v1", "v2", "v3"]),
        ("productpage", &["v1"]),
    ] {
        write_bookinfo_service(config, net, service, versions, target_port);
    }
}

/// The pods of tcp-echo v1 and v2 (the Service is the fixture's) and their EndpointSlice, at
/// the Service's port 9000.
pub fn write_tcp_echo_workloads(config: &Path, net: u8) {
    write_workloads(
        config,
        net,
        "tcp-echo",
        &["v1", "v2"],
        "default",
        "tcp",
        TCP_ECHO_PORT,
    );
}

/// The ingress gateway's address: pod `istio-ingressgateway-abc`.
pub fn gateway_ip(net: u8) -> String {
    ip(net, 70)
}

/// Pod `istio-ingressgateway-abc` (`istio: ingressgateway`, what the task's Gateways select)
/// and its proxy.
pub fn write_ingress_gateway(config: &Path, net: u8) -> ProxyNode {
    let yaml = format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: istio-ingressgateway-abc
  namespace: default
  labels: {{istio: ingressgateway}}
status:
  phase: Running
  podIP: {ip}
",
        ip = gateway_ip(net)
    );
    write_config(config, "ingressgateway-pod.yaml", &yaml);
    ProxyNode::router(
        "istio-ingressgateway-abc",
        "default",
        &gateway_ip(net),
        &[("istio", "ingressgateway")],
    )
}

/// The ports of Istio's ingress gateway Service as its installation creates them: `(name,
/// port, targetPort)`. The gateway's servers of port 80 and 443 listen on 8080 and 8443.
pub const ISTIO_INGRESS_PORTS: [(&str, u16, u16); 4] = [
    ("status-port", 15021, 15021),
    ("http2", 80, 8080),
    ("https", 443, 8443),
    ("tcp", 31400, 31400),
];

/// Service `istio-ingressgateway` in `namespace` (selecting `istio: ingressgateway`) with
/// `ports` (`(name, port, targetPort)`), and its EndpointSlice placing the gateway pod at `ip`:
/// what makes the gateway's servers listen where Istio's do, on each port's target port.
pub fn write_ingress_gateway_service(
    config: &Path,
    namespace: &str,
    ip: &str,
    ports: &[(&str, u16, u16)],
) {
    let service_ports: String = ports
        .iter()
        .map(|(name, port, target)| {
            format!("  - {{name: {name}, port: {port}, targetPort: {target}, protocol: TCP}}\n")
        })
        .collect();
    let slice_ports: Vec<String> = ports
        .iter()
        .map(|(name, _, target)| format!("{{name: {name}, port: {target}, protocol: TCP}}"))
        .collect();
    let yaml = format!(
        "apiVersion: v1
kind: Service
metadata:
  name: istio-ingressgateway
  namespace: {namespace}
  labels: {{app: istio-ingressgateway, istio: ingressgateway}}
spec:
  type: LoadBalancer
  selector: {{istio: ingressgateway}}
  ports:
{service_ports}---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: istio-ingressgateway-slice
  namespace: {namespace}
  labels: {{kubernetes.io/service-name: istio-ingressgateway}}
addressType: IPv4
ports: [{slice_ports}]
endpoints:
- addresses: [{ip}]
  conditions: {{ready: true}}
",
        slice_ports = slice_ports.join(", ")
    );
    write_config(config, "ingressgateway-service.yaml", &yaml);
}
