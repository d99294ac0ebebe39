//! Istio's traffic-management task pages on the bookinfo example (tests/fixtures/tasks):
//! request routing, traffic shifting, timeouts, faults, circuit breaking, mirroring, mTLS.

use crate::fixtures::{bookinfo_cluster, BOOKINFO, JASON, TASKS};
use crate::support;
use crate::support::{write_config, ProxyNode, TestDir};
use crate::{assert_routes_to, sans, upstream_tls, Mesh};
use dataflows::model::ProxyId;
use dataflows::simulate::{Call, Fault, Mirror, ProxyConfig, Source, ALL};

/// `(kind, namespace, name)` of each document of a YAML stream.
fn doc_keys(text: &str) -> Vec<(String, String, String)> {
    meshflow::config::split_documents(text)
        .into_iter()
        .filter_map(|(_, doc)| {
            let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&doc).ok()?;
            let s = |v: &serde_yaml_ng::Value| v.as_str().unwrap_or_default().to_string();
            Some((
                s(&v["kind"]),
                s(&v["metadata"]["namespace"]),
                s(&v["metadata"]["name"]),
            ))
        })
        .collect()
}

/// Bookinfo as shipped with a task page's objects applied over it (as `kubectl apply` of the
/// task's file would replace bookinfo's own objects of the same name), and the `sleep` proxy.
fn bookinfo_with_task(task: &str) -> (Mesh, ProxyId) {
    let dir = TestDir::new(&format!("routing-simulation-task-{task}"));
    let config = dir.subdir("config");
    let fixture = std::fs::read_to_string(format!("{TASKS}/{task}.yaml")).expect("the task");
    let replaced = doc_keys(&fixture);
    for entry in std::fs::read_dir(BOOKINFO).expect("bookinfo") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("a bookinfo file");
        let kept: Vec<String> = meshflow::config::split_documents(&text)
            .into_iter()
            .map(|(_, doc)| doc)
            .filter(|doc| doc_keys(doc).first().is_none_or(|k| !replaced.contains(k)))
            .collect();
        let name = path.file_name().unwrap().to_str().unwrap();
        write_config(&config, name, &kept.join("\n---\n"));
    }
    write_config(&config, "task.yaml", &fixture);
    let mut mesh = Mesh::over(dir, config);
    let sleep = mesh.connect(&ProxyNode::sidecar(
        "sleep",
        "default",
        "127.0.1.50",
        &[("app", "sleep")],
    ));
    mesh.sync_clean();
    assert!(
        mesh.dataflow_errors.is_empty(),
        "{task}: {:?}",
        mesh.dataflow_errors
    );
    // Bookinfo's rules name ratings v2, which the tasks do not deploy: MF0034 says so.
    assert!(
        mesh.idle_subsets
            .keys()
            .all(|e| e.contains("subset \"v2\" selects none of the endpoints of ratings")),
        "{task}: {:?}",
        mesh.idle_subsets
    );
    (mesh, sleep)
}

fn via_sleep(host: &str, path: &str) -> Call {
    Call::get(host, 9080, path).to_address("127.0.0.1")
}

/// The route `host`'s virtual host sends `path` by, in the `sleep` sidecar's route
/// configuration `9080`.
fn sleep_route(
    config: &ProxyConfig,
    host: &str,
    route_index: usize,
) -> envoy_types::pb::envoy::config::route::v3::Route {
    let vhost = format!("{host}.default.svc.cluster.local:9080");
    config.routes["9080"]
        .virtual_hosts
        .iter()
        .find(|v| v.name == vhost)
        .unwrap_or_else(|| panic!("no virtual host {vhost}"))
        .routes[route_index]
        .clone()
}

/// TCP traffic shifting, as `tests/envoy/tasks.rs` serves it (the fixture unchanged, tcp-echo's
/// pods and the client's Sidecar added): the client's bound TCP listener on 9000 splits
/// tcp-echo's connections 80/20 between subsets v1 and v2 (a `tcp_proxy` over weighted
/// clusters, no route configuration), and so does the task's ingress gateway on 31400.
#[test]
fn task_tcp_traffic_shifting() {
    use support::tasks;
    // No socket is opened here: any /24 will do.
    let net = 60;
    let mut mesh = Mesh::new("task-tcp-traffic-shifting");
    tasks::apply_task(&mesh.config, "tcp-traffic-shifting");
    tasks::write_tcp_echo_workloads(&mesh.config, net);
    tasks::write_client_sidecar(&mesh.config, net, tasks::TCP_ECHO_PORT, "TCP");
    let client = mesh.connect(&tasks::client_node(net));
    let cluster =
        |subset: &str| format!("outbound|9000|{subset}|tcp-echo.default.svc.cluster.local");
    let split = vec![(cluster("v1"), Some(80)), (cluster("v2"), Some(20))];
    let pods = vec![
        format!("{}:9000", tasks::pod_ip(net, "tcp-echo", "v1")),
        format!("{}:9000", tasks::pod_ip(net, "tcp-echo", "v2")),
    ];
    let client_ip = tasks::client_ip(net);
    let o = mesh.send(&client, &Call::connect(9000).to_address(&client_ip));
    assert_eq!(o.listener, Some(format!("{client_ip}_9000")), "{o:#?}");
    assert_eq!(o.clusters(), split, "{o:#?}");
    assert_eq!(o.endpoints(), pods);
    assert!(mesh.proxy(&client).routes.is_empty(), "TCP needs no routes");

    let gateway = mesh.connect(&tasks::write_ingress_gateway(&mesh.config, net));
    let o = mesh.send(&gateway, &Call::connect(31400));
    assert_eq!(o.listener.as_deref(), Some("0.0.0.0_31400"), "{o:#?}");
    assert_eq!(o.clusters(), split, "{o:#?}");
    assert_eq!(o.endpoints(), pods);
    mesh.assert_no_errors();
}

/// Mutual TLS by DestinationRule, over bookinfo: the `sleep` sidecar's calls to reviews and
/// ratings leave with Istio's mutual TLS — the workload certificate (SDS `default`) verified
/// against SDS `ROOTCA`, Istio's ALPN, the SNI `outbound_.9080_.SUBSET_.HOST` of the subset
/// the route picked, the pods' service account pinned — while details' `DISABLE` connects in
/// plaintext, with no auto-mTLS socket match left to pick TLS per endpoint.
#[test]
fn task_mtls_destination_rule() {
    let (mesh, sleep) = bookinfo_with_task("mtls-destination-rule");
    let config = mesh.proxy(&sleep);
    for (call, service, subset) in [
        (via_sleep("reviews", "/reviews/0"), "reviews", "v1"),
        (
            via_sleep("reviews", "/reviews/0").header(JASON.0, JASON.1),
            "reviews",
            "v2",
        ),
        (via_sleep("ratings", "/ratings/0"), "ratings", "v1"),
        (
            via_sleep("productpage", "/productpage"),
            "productpage",
            "v1",
        ),
    ] {
        let o = config.simulate(&call);
        let cluster = bookinfo_cluster(subset, service);
        assert_eq!(o.cluster(), Some(cluster.as_str()), "{o:#?}");
        let t = upstream_tls(&o, &cluster).expect("mTLS");
        assert!(t.istio_mutual, "{t:#?}");
        assert_eq!(t.certificates, [Source::Sds("default".into())]);
        assert_eq!(t.validation, Some(Source::Sds("ROOTCA".into())));
        assert_eq!(t.alpn, dataflows::simulate::ISTIO_MTLS_ALPN);
        assert_eq!(
            t.sni,
            Some(format!(
                "outbound_.9080_.{subset}_.{service}.default.svc.cluster.local"
            ))
        );
        assert_eq!(
            t.sans,
            sans(&[(
                "URI",
                &format!("exact:spiffe://cluster.local/ns/default/sa/bookinfo-{service}")
            )])
        );
    }
    let details = config.simulate(&via_sleep("details", "/details/0"));
    let cluster = bookinfo_cluster("v1", "details");
    assert_routes_to(&details, &cluster, &["127.0.1.11:9080".into()]);
    assert_eq!(upstream_tls(&details, &cluster), None, "DISABLE: plaintext");
    mesh.assert_no_errors();
}

/// Request routing: every service on v1, jason's reviews on v2.
#[test]
fn task_request_routing() {
    let (mesh, sleep) = bookinfo_with_task("request-routing");
    let config = mesh.proxy(&sleep);
    for (host, service, pod) in [
        ("productpage", "productpage", "127.0.1.41:9080"),
        ("reviews", "reviews", "127.0.1.31:9080"),
        ("ratings", "ratings", "127.0.1.21:9080"),
        ("details", "details", "127.0.1.11:9080"),
    ] {
        let o = config.simulate(&via_sleep(host, "/"));
        assert_routes_to(&o, &bookinfo_cluster("v1", service), &[pod.into()]);
    }
    let jason = config.simulate(&via_sleep("reviews", "/").header(JASON.0, JASON.1));
    assert_routes_to(
        &jason,
        &bookinfo_cluster("v2", "reviews"),
        &["127.0.1.32:9080".into()],
    );
}

/// Traffic shifting: reviews split 50/50 between v1 and v3.
#[test]
fn task_traffic_shifting() {
    let (mesh, sleep) = bookinfo_with_task("traffic-shifting");
    let o = mesh
        .proxy(&sleep)
        .simulate(&via_sleep("reviews", "/reviews/0"));
    assert_eq!(
        o.clusters(),
        [
            (bookinfo_cluster("v1", "reviews"), Some(50)),
            (bookinfo_cluster("v3", "reviews"), Some(50))
        ]
    );
}

/// Request timeouts: reviews v2 answers within half a second or not at all; ratings is
/// delayed 2 s for everyone.
#[test]
fn task_request_timeouts() {
    let (mesh, sleep) = bookinfo_with_task("request-timeouts");
    let config = mesh.proxy(&sleep);
    let o = config.simulate(&via_sleep("reviews", "/"));
    match &o.result {
        Ok(dataflows::simulate::Action::Route { timeout, .. }) => {
            assert_eq!(*timeout, Some(std::time::Duration::from_millis(500)))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        o.cluster(),
        Some(bookinfo_cluster("v2", "reviews").as_str())
    );
    let fault = &sleep_route(&config, "ratings", 0).typed_per_filter_config;
    assert!(fault.contains_key("envoy.filters.http.fault"), "{fault:?}");
    let ratings = config.simulate(&via_sleep("ratings", "/ratings/0"));
    assert_eq!(
        ratings.fault_delay(),
        Some(std::time::Duration::from_secs(2)),
        "{ratings:#?}"
    );
    assert_eq!(ratings.effective_status(), None, "delayed, then forwarded");
    assert_eq!(o.fault(), None, "reviews is not delayed");
}

/// Fault injection: jason's ratings route carries an abort of every request with 500, the
/// others' route none.
#[test]
fn task_fault_injection() {
    use envoy_types::pb::envoy::extensions::filters::http::fault::v3::{
        fault_abort::ErrorType, HttpFault,
    };
    use prost::Message;
    let (mesh, sleep) = bookinfo_with_task("fault-injection");
    let config = mesh.proxy(&sleep);
    let jason = sleep_route(&config, "ratings", 0);
    let any = &jason.typed_per_filter_config["envoy.filters.http.fault"];
    let fault = HttpFault::decode(&any.value[..]).expect("an HTTPFault");
    let abort = fault.abort.expect("an abort");
    assert_eq!(abort.error_type, Some(ErrorType::HttpStatus(500)));
    assert_eq!(abort.percentage.map(|p| p.numerator), Some(1_000_000));
    assert!(sleep_route(&config, "ratings", 1)
        .typed_per_filter_config
        .is_empty());
    let o = config.simulate(&via_sleep("ratings", "/").header(JASON.0, JASON.1));
    assert_eq!(
        o.route.as_ref().map(|r| r.index),
        Some(0),
        "jason's route matches"
    );
    assert_eq!(o.fault_status(), Some(500), "{o:#?}");
    assert_eq!(o.effective_status(), Some(500));
    let others = config.simulate(&via_sleep("ratings", "/"));
    assert_eq!(others.fault(), None);
    assert_routes_to(
        &others,
        &bookinfo_cluster("v1", "ratings"),
        &["127.0.1.21:9080".into()],
    );
}

/// Fault injection, the delay step: jason's ratings requests wait 7 s, then go on to v1;
/// the others' go straight there.
#[test]
fn task_fault_injection_delay() {
    let (mesh, sleep) = bookinfo_with_task("fault-injection-delay");
    let config = mesh.proxy(&sleep);
    let jason = config.simulate(&via_sleep("ratings", "/").header(JASON.0, JASON.1));
    assert_eq!(
        jason.fault(),
        Some(&Fault {
            delay: Some((std::time::Duration::from_secs(7), ALL)),
            abort: None
        }),
        "{jason:#?}"
    );
    assert_routes_to(
        &jason,
        &bookinfo_cluster("v1", "ratings"),
        &["127.0.1.21:9080".into()],
    );
    let others = config.simulate(&via_sleep("ratings", "/"));
    assert_eq!(others.fault(), None);
    assert_eq!(others.effective_status(), None);
}

/// Circuit breaking: reviews' clusters carry one connection, one pending request, and eject
/// on the first 5xx.
#[test]
fn task_circuit_breaking() {
    let (mesh, sleep) = bookinfo_with_task("circuit-breaking");
    let config = mesh.proxy(&sleep);
    for subset in ["", "v1", "v2", "v3"] {
        let c = &config.clusters[&bookinfo_cluster(subset, "reviews")];
        let t = &c.circuit_breakers.as_ref().expect("breakers").thresholds[0];
        assert_eq!(t.max_connections.map(|v| v.value), Some(1), "{subset}");
        assert_eq!(t.max_pending_requests.map(|v| v.value), Some(1), "{subset}");
        let od = c.outlier_detection.as_ref().expect("outlier detection");
        assert_eq!(od.consecutive_5xx.map(|v| v.value), Some(1), "{subset}");
    }
}

/// Mirroring: reviews go to v1, a copy of each to v2.
#[test]
fn task_mirroring() {
    let (mesh, sleep) = bookinfo_with_task("mirroring");
    let config = mesh.proxy(&sleep);
    let o = config.simulate(&via_sleep("reviews", "/"));
    assert_eq!(
        o.cluster(),
        Some(bookinfo_cluster("v1", "reviews").as_str())
    );
    let route = sleep_route(&config, "reviews", 0);
    let Some(envoy_types::pb::envoy::config::route::v3::route::Action::Route(action)) =
        route.action
    else {
        panic!("{route:?}")
    };
    let mirrors: Vec<&str> = action
        .request_mirror_policies
        .iter()
        .map(|m| m.cluster.as_str())
        .collect();
    assert_eq!(mirrors, [bookinfo_cluster("v2", "reviews")]);
    assert_eq!(
        o.http.as_ref().map(|h| h.mirrors.clone()),
        Some(vec![Mirror {
            cluster: bookinfo_cluster("v2", "reviews"),
            per_million: ALL,
            cluster_found: true,
        }])
    );
}
