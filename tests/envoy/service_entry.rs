//! ServiceEntry endpoints in real Envoy: a `workloadSelector` makes endpoints of the
//! WorkloadEntries of its namespace that match, at the port each names; their `weight`s split
//! round-robin traffic in proportion, and their `locality` reaches Envoy's hosts. Relabelling a
//! WorkloadEntry out of the selector takes it out of the traffic.

use crate::support;

use support::reviews::count;
use support::{converge, require_envoy, Backend, SidecarScene, CONVERGE_TIMEOUT};

#[test]
fn selected_workload_entries_carry_weight_and_locality_in_envoy() {
    let envoy_bin = require_envoy!();
    let scene = SidecarScene::start(&envoy_bin, "envoy-service-entry", 53, &[], |_| {});
    // Two VMs on their own addresses, one port shared by both backends.
    let port = support::free_port();
    let heavy = Backend::start(&scene.reviews.ip(31), port, "vm-heavy");
    let light = Backend::start(&scene.reviews.ip(32), port, "vm-light");
    let entry = |app: &str, name: &str, ip: &str, weight: u32, locality: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  address: {ip}\n  ports: {{http: {port}}}\n  labels: {{app: {app}}}\n  weight: {weight}\n  locality: {locality}\n"
        )
    };
    let entries = |light_app: &str| {
        [
            entry("vm", "vm-heavy", &heavy.addr().ip().to_string(), 3, "r1/z1"),
            entry(
                light_app,
                "vm-light",
                &light.addr().ip().to_string(),
                1,
                "r1/z2",
            ),
        ]
        .join("---\n")
    };
    scene.reviews.write("vm-entries.yaml", &entries("vm"));
    // The entry's port is the one the client's bound listener serves; the selected
    // workloads receive on the port they name, not on this one.
    scene.reviews.write(
        "vm-service.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: vm, namespace: default}}\nspec:\n  hosts: [vm.example.com]\n  location: MESH_INTERNAL\n  ports: [{{number: {}, name: http, protocol: HTTP}}]\n  resolution: STATIC\n  workloadSelector: {{labels: {{app: vm}}}}\n---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: vm, namespace: default}}\nspec:\n  host: vm.example.com\n  trafficPolicy: {{loadBalancer: {{simple: ROUND_ROBIN}}}}\n",
            scene.port
        ),
    );
    let client = support::reviews::Client::new(&scene.envoy, scene.listener(), "vm.example.com");
    let cluster = format!("outbound|{}||vm.example.com", scene.port);
    converge(
        "Envoy holds both VMs with their placement",
        CONVERGE_TIMEOUT,
        || scene.envoy.admin_get("/clusters"),
        |text| {
            let host = |b: &Backend, what: &str| format!("{cluster}::{}::{what}", b.addr());
            text.contains(&host(&heavy, "weight::3"))
                && text.contains(&host(&light, "weight::1"))
                && text.contains(&host(&heavy, "zone::z1"))
                && text.contains(&host(&light, "zone::z2"))
                && text.contains(&host(&heavy, "region::r1"))
        },
        || scene.envoy.summary(),
    );
    let counts = client.tally(40, "/", &[]);
    let (h, l) = (count(&counts, "vm-heavy"), count(&counts, "vm-light"));
    assert_eq!(h + l, 40, "every request answered by a VM: {counts:?}");
    // Weighted round robin: 3 of every 4 requests, give or take the start of a cycle.
    assert!((27..=33).contains(&h), "3:1 by weight, got {counts:?}");

    // The light VM relabelled: no longer selected, no longer sent anything.
    scene.reviews.write("vm-entries.yaml", &entries("other"));
    let counts = client.converge(
        "the light VM leaves the cluster",
        "/",
        &[],
        |c| count(c, "vm-light") == 0,
        20,
    );
    assert_eq!(count(&counts, "vm-heavy"), 20, "{counts:?}");
    assert_eq!(
        scene.envoy.rejected_updates(),
        0,
        "{:?}",
        scene.envoy.rejected_update_stats()
    );
}

/// The endpoints of a DNS ServiceEntry are what Envoy resolves (a host name here:
/// `localhost`), each at its own port; a Kubernetes ExternalName Service is an alias of the
/// host it names (Istio 1.21 and later): requests for its names take that entry's virtual
/// host and cluster; a `unix://` endpoint of a STATIC entry is a Unix domain socket.
/// Requests through the sidecar reach each backend, and Envoy rejects none of the clusters.
#[test]
fn dns_external_name_and_unix_socket_endpoints_reach_their_backends_in_envoy() {
    let envoy_bin = require_envoy!();
    let scene = SidecarScene::start(&envoy_bin, "envoy-service-entry-dns", 57, &[], |_| {});
    let dns_port = support::free_port();
    let by_name = Backend::start("127.0.0.1", dns_port, "dns-localhost");
    let socket = scene.dir.path().join("uds-backend.sock");
    let uds = Backend::start_unix(&socket, "uds");
    scene.reviews.write(
        "entries.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: db, namespace: default}}
spec:
  hosts: [db.example.com]
  location: MESH_EXTERNAL
  ports: [{{number: {port}, name: http, protocol: HTTP}}]
  resolution: DNS
  endpoints: [{{address: localhost, ports: {{http: {dns_port}}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: rr, namespace: default}}
spec:
  hosts: [rr.example.com]
  location: MESH_EXTERNAL
  ports: [{{number: {port}, name: http, protocol: HTTP, targetPort: {dns_port}}}]
  resolution: DNS_ROUND_ROBIN
  endpoints: [{{address: localhost}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: sock, namespace: default}}
spec:
  hosts: [sock.example.com]
  location: MESH_INTERNAL
  ports: [{{number: {port}, name: http, protocol: HTTP}}]
  resolution: STATIC
  endpoints: [{{address: 'unix://{socket}'}}]
---
apiVersion: v1
kind: Service
metadata: {{name: ext, namespace: default}}
spec:
  type: ExternalName
  externalName: db.example.com
",
            port = scene.port,
            socket = socket.display(),
        ),
    );
    for (host, identity) in [
        ("db.example.com", "dns-localhost"),
        ("rr.example.com", "dns-localhost"),
        ("sock.example.com", "uds"),
        ("ext.default.svc.cluster.local", "dns-localhost"),
        ("ext", "dns-localhost"),
    ] {
        let client = support::reviews::Client::new(&scene.envoy, scene.listener(), host);
        let counts = client.converge(
            &format!("{host} reaches {identity}"),
            "/",
            &[],
            |c| count(c, identity) == c.values().sum::<usize>(),
            5,
        );
        assert!(count(&counts, identity) >= 5, "{host}: {counts:?}");
    }
    let clusters = scene.envoy.admin_get("/clusters");
    for (cluster, host) in [
        ("db.example.com", format!("127.0.0.1:{dns_port}")),
        ("sock.example.com", format!("{}", socket.display())),
    ] {
        let line = format!("outbound|{}||{cluster}::{host}::", scene.port);
        assert!(clusters.contains(&line), "{line} in\n{clusters}");
    }
    assert!(by_name.requests_served() >= 20);
    assert!(uds.requests_served() >= 5);
    // The alias has no cluster of its own.
    assert!(!clusters.contains("ext.default.svc"), "{clusters}");
    assert_eq!(
        scene.envoy.rejected_updates(),
        0,
        "{:?}",
        scene.envoy.rejected_update_stats()
    );
}

/// The edge cases of Kubernetes ExternalName aliases on Envoy, as Istio's sidecars route
/// them: a VirtualService naming the alias's own host (the alias declares the port) routes
/// the alias's names — to another entry's backend —, while the host the alias names keeps
/// its own route; a route destination without a port naming an alias that declares no port
/// keeps the alias's host, which has no cluster: Envoy answers 503.
#[test]
fn external_name_alias_virtual_services_and_portless_destinations_route_in_envoy() {
    let envoy_bin = require_envoy!();
    let scene = SidecarScene::start(&envoy_bin, "envoy-external-name-edges", 68, &[], |_| {});
    let (db_port, other_port) = (support::free_port(), support::free_port());
    let db = Backend::start("127.0.0.1", db_port, "db");
    let other = Backend::start("127.0.0.1", other_port, "other");
    let entry = |name: &str, backend: u16| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{name}.example.com]
  location: MESH_EXTERNAL
  ports: [{{number: {port}, name: http, protocol: HTTP}}]
  resolution: DNS
  endpoints: [{{address: localhost, ports: {{http: {backend}}}}}]
---
",
            port = scene.port,
        )
    };
    scene.reviews.write(
        "entries.yaml",
        &format!(
            "{}{}{}apiVersion: v1
kind: Service
metadata: {{name: ext, namespace: default}}
spec:
  type: ExternalName
  externalName: db.example.com
  ports: [{{name: http, port: {port}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: ext, namespace: default}}
spec:
  hosts: [ext]
  http:
  - route:
    - destination: {{host: other.example.com}}
---
apiVersion: v1
kind: Service
metadata: {{name: noport, namespace: default}}
spec:
  type: ExternalName
  externalName: db.example.com
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: ledger, namespace: default}}
spec:
  hosts: [ledger.example.com]
  http:
  - route:
    - destination: {{host: noport}}
",
            entry("db", db_port),
            entry("other", other_port),
            entry("ledger", db_port),
            port = scene.port,
        ),
    );
    for (host, answer) in [
        ("ext", "other"),
        ("ext.default.svc.cluster.local", "other"),
        ("db.example.com", "db"),
        ("ledger.example.com", "status 503"),
    ] {
        let client = support::reviews::Client::new(&scene.envoy, scene.listener(), host);
        let counts = client.converge(
            &format!("{host} answers {answer}"),
            "/",
            &[],
            |c| count(c, answer) == c.values().sum::<usize>(),
            5,
        );
        assert_eq!(count(&counts, answer), 5, "{host}: {counts:?}");
    }
    assert!(db.requests_served() >= 5);
    assert!(other.requests_served() >= 10);
    assert_eq!(
        scene.envoy.rejected_updates(),
        0,
        "{:?}",
        scene.envoy.rejected_update_stats()
    );
}

/// Two namespaces define one host with ServiceEntries of their own, and one of them a
/// second entry of that host on another port: as Istio keeps a service per host and
/// namespace, each namespace's sidecar reaches its own namespace's endpoints on the shared
/// port (not one entry for the whole mesh), and the namespace with two entries reaches the
/// second's port too (their ports merge). `meshflow validate` calls the files valid.
#[test]
fn entries_of_one_host_route_per_namespace_in_envoy() {
    let envoy_bin = require_envoy!();
    let dir = support::TestDir::new("envoy-shared-host");
    let config = dir.subdir("config");
    let (port, admin_port, backend_port) = (
        support::free_port(),
        support::free_port(),
        support::free_port(),
    );
    let reviews = support::reviews::Reviews::new(141, port, &config);
    let own_a = Backend::start(&reviews.ip(31), backend_port, "entry-a");
    let own_b = Backend::start(&reviews.ip(32), backend_port, "entry-b");
    let admin = Backend::start(&reviews.ip(33), backend_port, "entry-a-admin");
    let (client_a, client_b) = (reviews.ip(20), reviews.ip(21));
    let entry = |ns: &str, name: &str, number: u16, ip: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: {ns}}}
spec:
  hosts: [api.example.com]
  location: MESH_INTERNAL
  ports: [{{number: {number}, name: http-{number}, protocol: HTTP}}]
  resolution: STATIC
  endpoints: [{{address: {ip}, ports: {{http-{number}: {backend_port}}}}}]
"
        )
    };
    // Each client's egress listeners bound to its own address; every namespace imported.
    let sidecar = |ns: &str, ip: &str, ports: &[u16]| {
        let listeners: String = ports
            .iter()
            .map(|p| {
                format!(
                    "  - port: {{number: {p}, protocol: HTTP, name: http-{p}}}\n    bind: {ip}\n    captureMode: NONE\n    hosts: ['*/*']\n"
                )
            })
            .collect();
        format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: client, namespace: {ns}}}\nspec:\n  workloadSelector: {{labels: {{app: client}}}}\n  egress:\n{listeners}"
        )
    };
    let files = [
        entry("a", "api", port, &own_a.addr().ip().to_string()),
        entry("a", "api-admin", admin_port, &admin.addr().ip().to_string()),
        entry("b", "api", port, &own_b.addr().ip().to_string()),
        sidecar("a", &client_a, &[port, admin_port]),
        sidecar("b", &client_b, &[port]),
    ];
    reviews.write("shared-host.yaml", &files.join("---\n"));
    let checked = support::meshflow_cli(&["validate", &config.display().to_string()]);
    assert!(!checked.contains("MF0005"), "{checked}");
    let meshflow = support::Meshflow::start(&config, dir.path());
    let start = |pod: &str, ns: &str, ip: &str| {
        let node = support::ProxyNode::sidecar(pod, ns, ip, &[("app", "client")]);
        let envoy = support::Envoy::start(
            &envoy_bin,
            dir.path(),
            &node,
            meshflow.xds_addr(),
            support::XdsMode::Delta,
        );
        envoy.wait_live(support::STARTUP_TIMEOUT);
        envoy.await_listener(&format!("{ip}_{port}"));
        envoy
    };
    let envoy_a = start("client-a", "a", &client_a);
    let envoy_b = start("client-b", "b", &client_b);
    let at = |ip: &str, p: u16| -> std::net::SocketAddr {
        format!("{ip}:{p}").parse().expect("an address")
    };
    let from_a = support::reviews::Client::new(&envoy_a, at(&client_a, port), "api.example.com");
    let from_b = support::reviews::Client::new(&envoy_b, at(&client_b, port), "api.example.com");
    // Every request of a batch answered by `backend`.
    let reaches = |client: &support::reviews::Client, what: &str, backend: &str| {
        let counts = client.converge(what, "/", &[], |c| count(c, backend) == 10, 10);
        assert_eq!(count(&counts, backend), 10, "{what}: {counts:?}");
    };
    reaches(&from_a, "a reaches its own entry", "entry-a");
    reaches(&from_b, "b reaches its own entry", "entry-b");
    envoy_a.await_listener(&format!("{client_a}_{admin_port}"));
    let merged =
        support::reviews::Client::new(&envoy_a, at(&client_a, admin_port), "api.example.com");
    reaches(
        &merged,
        "a reaches the second entry's port",
        "entry-a-admin",
    );
    for envoy in [&envoy_a, &envoy_b] {
        assert_eq!(
            envoy.rejected_updates(),
            0,
            "{:?}",
            envoy.rejected_update_stats()
        );
    }
}
