//! The bundled bookinfo example (`examples/bookinfo/config`) served by `meshflow serve` to real
//! Envoys, as its README tells a user to try it by hand.
//!
//! The config directory is copied into a scratch directory with one edit: the Gateway's port
//! 8080 becomes a free port, so the test never collides with anything else on the machine. Every
//! other byte is the example's own, including the `sleep` Sidecar's egress listener on
//! `127.0.0.1:9080`: that port cannot be rewritten, because an explicit egress listener only
//! carries the services that have its port, and every bookinfo service is on 9080 (moving it
//! would leave the listener with no routes). The workloads are `support::Backend`s on the pod
//! addresses of the example's EndpointSlices (`127.0.1.x:9080`), each answering with its pod
//! name. Those addresses are fixed, so everything runs in one test (one process).
//!
//! Both Envoys have the identities of the example's bootstraps (`envoy-gateway.yaml`,
//! `envoy-sidecar.yaml`) and speak Delta ADS. The same runs again with the example's objects
//! created through a (fake) Kubernetes API server and `serve --kube`, and both Envoys then
//! hold exactly the config they held when it was served from files.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;
use support::fake_kube::FakeKube;
use support::reviews::{count, Client};
use support::{
    assert_contains_all, dump_cluster_names, dump_eds_cluster_names, dump_listener_names,
    dump_route_config_names, dump_served_config, free_port, only, require_envoy,
    served_config_differences, write_config, Backend, Envoy, Meshflow, ProxyNode, TestDir, XdsMode,
    STARTUP_TIMEOUT,
};

/// The example's config directory.
const EXAMPLE_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/bookinfo/config");
/// The Gateway's server port in `gateway.yaml`, replaced by a free port.
const GATEWAY_PORT_LINE: &str = "      number: 8080\n";
/// The `sleep` Sidecar's egress listener, as `config/sidecar-sleep.yaml` declares it.
const SIDECAR_LISTENER: &str = "127.0.0.1_9080";
const SIDECAR_ROUTES: &str = "9080";
const JASON: &[(&str, &str)] = &[("end-user", "jason")];

/// Proves that the bookinfo example works as its README promises, over Delta ADS: through the
/// ingress gateway, `/productpage` (and the other paths of VirtualService `bookinfo`) reach
/// productpage-v1 while other paths get 404; through the `sleep` sidecar, `Host: reviews` reaches
/// reviews-v1, `end-user: jason` reaches reviews-v2, and ratings, details and productpage reach
/// their v1 pods. The example config is valid as shipped, Envoy holds Istio-named resources, and
/// neither Envoy rejects an update.
///
/// The scenario runs twice, one run after the other (the pod addresses are fixed): with the
/// example served from its files, and with the same objects served from a Kubernetes API
/// (`serve --kube --kubeconfig F` against `support::fake_kube`), as an operator runs it; the
/// second run's Envoys hold exactly what the first run's held (clusters, endpoints,
/// listeners, routes).
#[test]
fn bookinfo_example_serves_gateway_and_sidecar_over_delta_ads() {
    let envoy_bin = require_envoy!();
    let pods = example_endpoints();
    let names: Vec<&str> = pods.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "details-v1",
            "productpage-v1",
            "ratings-v1",
            "reviews-v1",
            "reviews-v2",
            "reviews-v3"
        ],
        "the example's EndpointSlices changed; update this test"
    );
    let _backends: Vec<Backend> = pods
        .iter()
        .map(|(name, addr)| Backend::start(&addr.ip().to_string(), addr.port(), name))
        .collect();
    // One gateway port for both runs (one after the other), so their configs compare.
    let gateway_port = free_port();
    let from_files = scenario(&envoy_bin, Delivery::Files, gateway_port);
    let from_cluster = scenario(&envoy_bin, Delivery::Kubernetes, gateway_port);
    for (proxy, files, cluster) in [
        ("gateway", &from_files.0, &from_cluster.0),
        ("sidecar", &from_files.1, &from_cluster.1),
    ] {
        let differ = served_config_differences(files, cluster);
        assert!(
            differ.is_empty(),
            "the {proxy} Envoy's config from the cluster differs from files' in {differ:#?}; \
             the first: {:#?}",
            differ.first().map(|k| (files.get(k), cluster.get(k)))
        );
    }
}

/// What one Envoy holds (`support::dump_served_config`).
type Served = BTreeMap<String, serde_json::Value>;

/// How the example's objects reach meshflow.
#[derive(Clone, Copy, Debug)]
enum Delivery {
    /// `serve --config-dir`.
    Files,
    /// `serve --kube --kubeconfig F`, the objects created through a fake API server.
    Kubernetes,
}

/// Everything but the backends, which both runs share; returns what the gateway and the
/// sidecar Envoy held in the end.
fn scenario(envoy_bin: &Path, delivery: Delivery, gateway_port: u16) -> (Served, Served) {
    let dir = TestDir::new(&format!("bookinfo-{delivery:?}").to_lowercase());
    let config_dir = dir.subdir("config");
    copy_example_config(&config_dir, gateway_port);
    let (_fake, meshflow) = match delivery {
        Delivery::Files => (None, Meshflow::start(&config_dir, dir.path())),
        Delivery::Kubernetes => {
            let fake = FakeKube::start();
            for entry in fs::read_dir(&config_dir).expect("the copied config") {
                let path = entry.expect("a config file").path();
                fake.apply_yaml(&fs::read_to_string(&path).expect("a config file"));
            }
            let kubeconfig = dir.path().join("kubeconfig");
            fake.write_kubeconfig(&kubeconfig);
            let meshflow = Meshflow::start_kube(&kubeconfig, dir.path(), &[]);
            (Some(fake), meshflow)
        }
    };
    let gateway_node = ProxyNode::router(
        "istio-ingressgateway-5d9f7c8b6-x2x7k",
        "istio-system",
        "127.0.0.1",
        &[("app", "istio-ingressgateway"), ("istio", "ingressgateway")],
    );
    let sleep_node = ProxyNode::sidecar("sleep", "default", "127.0.1.50", &[("app", "sleep")]);
    let gateway = Envoy::start(
        envoy_bin,
        dir.path(),
        &gateway_node,
        meshflow.xds_addr(),
        XdsMode::Delta,
    );
    let sidecar = Envoy::start(
        envoy_bin,
        dir.path(),
        &sleep_node,
        meshflow.xds_addr(),
        XdsMode::Delta,
    );

    // 1. The ingress gateway: VirtualService `bookinfo` sends its five paths to productpage.
    let gateway_listener = format!("127.0.0.1_{gateway_port}");
    let gateway_routes = format!("http.{gateway_port}.127.0.0.1");
    gateway.wait_live(STARTUP_TIMEOUT);
    gateway.await_listener(&gateway_listener);
    let gateway_addr = SocketAddr::from(([127, 0, 0, 1], gateway_port));
    let client = Client::new(&gateway, gateway_addr, "bookinfo.example.com");
    let counts = client.converge(
        "GET /productpage through the gateway reaches productpage-v1",
        "/productpage",
        &[],
        |c| only(c, "productpage-v1"),
        10,
    );
    assert_eq!(count(&counts, "productpage-v1"), 10, "{counts:?}");
    for path in [
        "/static/tailwind/tailwind.css",
        "/login",
        "/logout",
        "/api/v1/products/0",
    ] {
        let counts = client.tally(3, path, &[]);
        assert_eq!(
            count(&counts, "productpage-v1"),
            3,
            "GET {path}: {counts:?}"
        );
    }
    for path in ["/", "/reviews/0", "/productpage/extra", "/loginx"] {
        let counts = client.tally(3, path, &[]);
        assert_eq!(
            count(&counts, "status 404"),
            3,
            "GET {path} matches no route: {counts:?}"
        );
    }
    let counts =
        Client::new(&gateway, gateway_addr, "other.example.org").tally(3, "/productpage", &[]);
    assert_eq!(
        count(&counts, "productpage-v1"),
        3,
        "the Gateway serves any host: {counts:?}"
    );

    // 2. The `sleep` sidecar: its egress listener routes every bookinfo service by Host.
    sidecar.wait_live(STARTUP_TIMEOUT);
    sidecar.await_listener(SIDECAR_LISTENER);
    let sidecar_addr = SocketAddr::from(([127, 0, 0, 1], 9080));
    let reviews = Client::new(&sidecar, sidecar_addr, "reviews");
    let counts = reviews.converge(
        "Host reviews reaches reviews-v1",
        "/reviews/0",
        &[],
        |c| only(c, "reviews-v1"),
        20,
    );
    assert_eq!(count(&counts, "reviews-v1"), 20, "{counts:?}");
    let counts = reviews.tally(20, "/reviews/0", JASON);
    assert_eq!(
        count(&counts, "reviews-v2"),
        20,
        "end-user jason reaches reviews-v2: {counts:?}"
    );
    for (host, pod) in [
        ("ratings", "ratings-v1"),
        ("details", "details-v1"),
        ("productpage", "productpage-v1"),
        ("reviews.default.svc.cluster.local:9080", "reviews-v1"),
        ("ratings.default", "ratings-v1"),
    ] {
        let counts = Client::new(&sidecar, sidecar_addr, host).tally(5, "/", &[]);
        assert_eq!(
            count(&counts, pod),
            5,
            "Host {host} reaches {pod}: {counts:?}"
        );
    }

    // 3. Nothing was rejected, by meshflow's validation or by either Envoy.
    for (name, envoy) in [("gateway", &gateway), ("sidecar", &sidecar)] {
        assert_eq!(
            envoy.rejected_updates(),
            0,
            "the {name} Envoy rejected updates: {:?}",
            envoy.rejected_update_stats()
        );
    }
    let log = meshflow.log();
    assert!(
        !log.contains("rejected config"),
        "meshflow rejected part of the example config:\n{log}"
    );

    // 4. Both Envoys hold Istio-named resources.
    let fqdn = |svc: &str| format!("{svc}.default.svc.cluster.local");
    let dump = gateway.config_dump();
    let productpage = format!("outbound|9080||{}", fqdn("productpage"));
    assert_contains_all(
        "gateway clusters",
        &dump_cluster_names(&dump),
        std::slice::from_ref(&productpage),
    );
    assert_contains_all(
        "gateway EDS",
        &dump_eds_cluster_names(&dump),
        &[productpage],
    );
    assert_contains_all(
        "gateway listeners",
        &dump_listener_names(&dump),
        &[gateway_listener],
    );
    assert_contains_all(
        "gateway route configurations",
        &dump_route_config_names(&dump),
        &[gateway_routes],
    );
    let dump = sidecar.config_dump();
    let reviews_v1 = format!("outbound|9080|v1|{}", fqdn("reviews"));
    let subsets = [
        reviews_v1.clone(),
        format!("outbound|9080|v2|{}", fqdn("reviews")),
        format!("outbound|9080|v3|{}", fqdn("reviews")),
        format!("outbound|9080|v1|{}", fqdn("ratings")),
    ];
    assert_contains_all("sidecar clusters", &dump_cluster_names(&dump), &subsets);
    assert_contains_all("sidecar EDS", &dump_eds_cluster_names(&dump), &subsets);
    assert_contains_all(
        "sidecar listeners",
        &dump_listener_names(&dump),
        &[SIDECAR_LISTENER.to_owned()],
    );
    assert_contains_all(
        "sidecar route configurations",
        &dump_route_config_names(&dump),
        &[SIDECAR_ROUTES.to_owned()],
    );
    assert_eq!(
        sidecar.endpoints(&reviews_v1),
        ["127.0.1.31:9080"],
        "EDS of {reviews_v1}"
    );
    (
        dump_served_config(&gateway.config_dump()),
        dump_served_config(&sidecar.config_dump()),
    )
}

/// Copies the example's config files into `to`, changing only the Gateway's port 8080 to
/// `gateway_port`.
fn copy_example_config(to: &Path, gateway_port: u16) {
    let mut copied = 0;
    for entry in fs::read_dir(EXAMPLE_CONFIG).expect("read examples/bookinfo/config") {
        let path = entry.expect("list examples/bookinfo/config").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut text =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        if name == "gateway.yaml" {
            assert_eq!(
                text.matches(GATEWAY_PORT_LINE).count(),
                1,
                "{} must declare the Gateway port as {GATEWAY_PORT_LINE:?} exactly once",
                path.display()
            );
            text = text.replace(
                GATEWAY_PORT_LINE,
                &format!("      number: {gateway_port}\n"),
            );
        }
        write_config(to, &name, &text);
        copied += 1;
    }
    assert!(
        copied >= 7,
        "expected the example's config files, copied {copied}"
    );
}

/// The example's EndpointSlice endpoints, by pod name (`targetRef`): `ip:port`, checked
/// against the pod's `status.podIP` in `pods.yaml`.
fn example_endpoints() -> BTreeMap<String, SocketAddr> {
    let pod_ips: BTreeMap<String, String> = yaml_documents("pods.yaml")
        .into_iter()
        .map(|pod| {
            let name = pod["metadata"]["name"]
                .as_str()
                .expect("pod name")
                .to_owned();
            let ip = pod["status"]["podIP"].as_str().expect("pod IP").to_owned();
            (name, ip)
        })
        .collect();
    let mut endpoints = BTreeMap::new();
    for slice in yaml_documents("endpointslices.yaml") {
        let ports = slice["ports"].as_array().expect("EndpointSlice ports");
        assert_eq!(ports.len(), 1, "one port per EndpointSlice: {slice}");
        let port = ports[0]["port"].as_u64().expect("port number") as u16;
        for endpoint in slice["endpoints"]
            .as_array()
            .expect("EndpointSlice endpoints")
        {
            let ip = endpoint["addresses"][0].as_str().expect("endpoint address");
            let pod = endpoint["targetRef"]["name"]
                .as_str()
                .expect("endpoint targetRef");
            assert_eq!(
                pod_ips.get(pod).map(String::as_str),
                Some(ip),
                "endpoint {ip} names pod {pod}, whose podIP differs"
            );
            let addr = format!("{ip}:{port}").parse().expect("endpoint address");
            endpoints.insert(pod.to_owned(), addr);
        }
    }
    endpoints
}

/// Every YAML document of `examples/bookinfo/config/<file>`, as JSON.
fn yaml_documents(file: &str) -> Vec<serde_json::Value> {
    let path = Path::new(EXAMPLE_CONFIG).join(file);
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| {
            serde_json::Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
        })
        .filter(|doc| !doc.is_null())
        .collect()
}
