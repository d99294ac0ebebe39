//! Envoy's judgement of the examples that show Istio's networking API field by field
//! (`examples/traffic-management`, `examples/service-registry`): the config meshflow
//! generates for their proxies — listeners, clusters, and what a real run sends over RDS,
//! EDS and SDS put in place of its reference (`support::envoy_validate`) — is loaded by
//! `envoy --mode validate`, which refuses anything it would reject over xDS (a bad regex, an
//! unknown filter config, a cluster whose load balancer and hash policy disagree, an
//! endpoint address, a certificate or a file it cannot load). The goldens (`tests/golden.rs`)
//! pin what is generated; this checks that Envoy takes it, and that the embedding really has
//! Envoy parse what it embeds.

use crate::support;

use dataflows::model::ProxyKind;

use support::envoy_validate::{embedded_example, envoy_validate, envoy_validates_example};
use support::{require_envoy, ProxyNode, TestDir};

/// Proves that Envoy accepts every listener, route configuration, cluster, load assignment
/// and secret of `examples/traffic-management` (Istio's traffic management tasks: every HTTP
/// match kind and route action, DestinationRule load balancing incl. PASSTHROUGH, connection
/// pools, outlier detection and consistent hashing, a wildcard rule, TLS origination from
/// files with a CRL, tcp routes by destination subnet) for the four proxies of its goldens
/// (the captured `sleep` sidecar, the ingress gateway, the `productpage` sidecar and the
/// `staging` namespace's `sleep`), and that the route actions reach Envoy as such: fault
/// injection, CORS, mirroring, rewrites (by regex too), redirects (to another port too),
/// direct responses, hash policies (by source IP too), retries on to other localities, and
/// at the gateway the delegated `/reviews` routes and the wildcard host's direct response.
#[test]
fn envoy_accepts_the_traffic_management_example() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-examples-traffic");
    let sleep = ProxyNode::sidecar(
        "sleep-abc",
        "default",
        "127.0.3.60",
        &[("app", "sleep"), ("version", "v1")],
    );
    let gateway = ProxyNode::router(
        "istio-ingressgateway-abc",
        "istio-system",
        "127.0.3.70",
        &[("app", "istio-ingressgateway"), ("istio", "ingressgateway")],
    );
    // The goldens' other two: a client `sourceLabels` leaves out, and one of another
    // namespace (its own VirtualService for reviews).
    let productpage = ProxyNode::sidecar(
        "productpage-v1",
        "default",
        "127.0.3.21",
        &[("app", "productpage"), ("version", "v1")],
    );
    let staging = ProxyNode::sidecar("sleep", "staging", "127.0.3.80", &[("app", "sleep")]);
    let nodes = [
        (&sleep, ProxyKind::Sidecar),
        (&gateway, ProxyKind::Router),
        (&productpage, ProxyKind::Sidecar),
        (&staging, ProxyKind::Sidecar),
    ];
    let listeners = envoy_validates_example(&envoy_bin, dir.path(), "traffic-management", &nodes);
    let sidecar: String = listeners[0].iter().map(|l| l.to_string()).collect();
    for expected in [
        "envoy.filters.http.fault",
        "envoy.filters.http.cors",
        "request_mirror_policies",
        "regex_rewrite",
        "host_rewrite_literal",
        "direct_response",
        "redirect",
        "hash_policy",
        "retry_policy",
        "query_parameters",
        "x-served-by",
        "reviews-default",
        "envoy.retry_priorities.previous_priorities",
        "\"source_ip\":true",
        "\"port_redirect\":8443",
        "198.51.100.128",
    ] {
        assert!(
            sidecar.contains(expected),
            "the sleep sidecar's routes carry {expected}: {sidecar}"
        );
    }
    let router: String = listeners[1].iter().map(|l| l.to_string()).collect();
    for expected in [
        "*.bookinfo.example",
        "no such storefront",
        "jason",
        "/productpage",
    ] {
        assert!(
            router.contains(expected),
            "the gateway's routes carry {expected}: {router}"
        );
    }
}

/// Proves that Envoy accepts every listener, cluster and route configuration of
/// `examples/service-registry` (ServiceEntries of each resolution, a Unix socket endpoint,
/// WorkloadEntries, Kubernetes Services of each protocol, headless and ExternalName) for its
/// `frontend` sidecar, whose Sidecar binds two ingress ports (one terminating TLS with the
/// example's certificate files) and two egress ports itself and terminates mutual TLS on a
/// captured ingress port, and for a captured `sleep` sidecar under no Sidecar, whose TCP
/// services are proxied by address.
#[test]
fn envoy_accepts_the_service_registry_example() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-examples-registry");
    let frontend = ProxyNode::sidecar(
        "frontend-abc",
        "default",
        "127.0.4.60",
        &[("app", "frontend")],
    );
    let sleep = ProxyNode::sidecar("sleep-abc", "default", "127.0.4.70", &[("app", "sleep")]);
    let nodes = [
        (&frontend, ProxyKind::Sidecar),
        (&sleep, ProxyKind::Sidecar),
    ];
    let listeners = envoy_validates_example(&envoy_bin, dir.path(), "service-registry", &nodes);
    let names = |i: usize| -> Vec<String> {
        listeners[i]
            .iter()
            .filter_map(|l| l["name"].as_str().map(str::to_owned))
            .collect()
    };
    let bound = names(0);
    for name in [
        "127.0.0.1_80",
        "127.0.0.1_27017",
        "inbound_127.0.4.60_9080",
        "inbound_127.0.4.60_8443",
    ] {
        assert!(
            bound.iter().any(|n| n == name),
            "frontend listener {name}: {bound:?}"
        );
    }
    let frontend_text: String = listeners[0].iter().map(|l| l.to_string()).collect();
    assert!(
        frontend_text.contains("block_all"),
        "REGISTRY_ONLY's block_all virtual host: {frontend_text}"
    );
    // The ingress ports with `tls`: their one chain each terminates with the shipped files.
    for expected in [
        "inbound|8443||-ingress-tls",
        "inbound|9443||-ingress-tls",
        "DownstreamTlsContext",
        "etc/certs/frontend/cert.pem",
        "etc/certs/frontend/ca.pem",
    ] {
        assert!(
            frontend_text.contains(expected),
            "the frontend sidecar's listeners carry {expected}: {frontend_text}"
        );
    }
    let sleep_text: String = listeners[1].iter().map(|l| l.to_string()).collect();
    for expected in ["tcp_proxy", "10.96.4.20", "10.96.4.21", "198.51.100.0"] {
        assert!(
            sleep_text.contains(expected),
            "the sleep sidecar's listeners carry {expected}: {sleep_text}"
        );
    }
}

/// Proves that Envoy accepts the config of `examples/locality` for its sleep sidecars in
/// r1/z1 and r2/z1, and that the DNS entry `geo.example.com` reaches each as a STRICT_DNS
/// cluster whose inline hosts are ranked from that client's locality: its own region's
/// host at priority 0, the other region's at 1.
#[test]
fn envoy_accepts_the_locality_example_with_each_clients_dns_cluster() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-examples-locality");
    let r1 = ProxyNode::sidecar(
        "sleep-r1",
        "default",
        "127.0.0.51",
        &[("app", "sleep"), ("istio-locality", "r1.z1")],
    );
    let r2 = ProxyNode::sidecar(
        "sleep-r2",
        "default",
        "127.0.0.52",
        &[("app", "sleep"), ("istio-locality", "r2.z1")],
    );
    let nodes = [(&r1, ProxyKind::Sidecar), (&r2, ProxyKind::Sidecar)];
    let held = support::envoy_validate::envoy_validates_example_with_clusters(
        &envoy_bin,
        dir.path(),
        "locality",
        &nodes,
    );
    for ((node, near, far), (_, clusters)) in [
        (&r1, "east.geo.example.com", "west.geo.example.com"),
        (&r2, "west.geo.example.com", "east.geo.example.com"),
    ]
    .into_iter()
    .zip(&held)
    {
        let cluster = clusters
            .iter()
            .find(|c| c["name"] == "outbound|8080||geo.example.com")
            .expect("the DNS entry's cluster");
        assert_eq!(cluster["type"], "STRICT_DNS", "{cluster}");
        let groups = cluster["load_assignment"]["endpoints"]
            .as_array()
            .expect("inline hosts")
            .iter()
            .map(|g| {
                (
                    g["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]["address"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    g["priority"].as_u64().unwrap_or(0),
                )
            })
            .collect::<std::collections::BTreeMap<String, u64>>();
        assert_eq!(groups.get(near), Some(&0), "{}: {cluster}", node.id);
        assert_eq!(groups.get(far), Some(&1), "{}: {cluster}", node.id);
    }
}

/// Proves that the validation of the examples (`support::envoy_validate`) has Envoy parse
/// what a real run sends over EDS and SDS and the files a rule names, so that a bad one
/// would fail it: no EDS or SDS reference is left in the bootstraps; each is accepted as
/// embedded; and each of these breakages is refused — a workload certificate (`default`,
/// issued by the test's CA) with a bad key, a `credentialName` Secret with a bad
/// certificate, a secret left out (`ROOTCA`), an endpoint of an EDS cluster's assignment
/// with a bad address, and the example's revocation list file replaced by a PEM block that is no CRL.
#[test]
fn envoy_validation_parses_the_assignments_secrets_and_files_it_embeds() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-examples-embedded");
    let router = ProxyNode::router(
        "istio-ingressgateway-abc",
        "istio-system",
        "127.0.0.1",
        &[("istio", "ingressgateway")],
    );
    let sleep = ProxyNode::sidecar(
        "sleep-abc",
        "default",
        "127.0.3.60",
        &[("app", "sleep"), ("version", "v1")],
    );
    let one = |example: &str, node: &ProxyNode, kind: ProxyKind| -> serde_json::Value {
        let mut all = embedded_example(example, &[(node, kind)]);
        let bootstrap = all.remove(0).bootstrap;
        let text = bootstrap.to_string();
        for left in ["sds_config", "eds_cluster_config", "\"EDS\"", "\"rds\""] {
            assert!(!text.contains(left), "{example}: {left} left in {text}");
        }
        bootstrap
    };
    let gateway_tls = one("gateway-tls", &router, ProxyKind::Router);
    let istio_mutual = one("tls-ports", &router, ProxyKind::Router);
    let traffic = one("traffic-management", &sleep, ProxyKind::Sidecar);
    let judge = |name: &str, bootstrap: &serde_json::Value| {
        envoy_validate(&envoy_bin, dir.path(), name, bootstrap)
    };
    for (name, bootstrap) in [
        ("gateway-tls", &gateway_tls),
        ("istio-mutual", &istio_mutual),
        ("traffic", &traffic),
    ] {
        if let Err(e) = judge(name, bootstrap) {
            panic!("{name} as embedded: {e}");
        }
    }

    // The workload certificate the test's CA issued, its key broken.
    let mut broken = istio_mutual.clone();
    let default = secret(&mut broken, "default");
    assert!(
        default["tls_certificate"]["certificate_chain"]["inline_string"]
            .as_str()
            .is_some_and(|c| c.contains("BEGIN CERTIFICATE")),
        "an issued certificate: {default}"
    );
    default["tls_certificate"]["private_key"]["inline_string"] = "no key".into();
    refused(judge("broken-default", &broken), "default's key");

    // The Secret's certificate broken.
    let mut broken = gateway_tls.clone();
    secret(&mut broken, "kubernetes://bookinfo-credential")["tls_certificate"]
        ["certificate_chain"]["inline_string"] = "no certificate".into();
    refused(
        judge("broken-credential", &broken),
        "the Secret's certificate",
    );

    // A secret the listeners name, left out.
    let mut broken = istio_mutual.clone();
    let secrets = broken["static_resources"]["secrets"]
        .as_array_mut()
        .expect("secrets");
    let before = secrets.len();
    secrets.retain(|s| s["name"] != "ROOTCA");
    assert_eq!(secrets.len(), before - 1, "ROOTCA was there");
    refused(judge("no-rootca", &broken), "ROOTCA left out");

    // An EDS cluster's assignment, with an address that is no IP.
    let mut broken = traffic.clone();
    let reviews = cluster(
        &mut broken,
        "outbound|9080|v1|reviews.default.svc.cluster.local",
    );
    assert_eq!(reviews["type"], "STATIC", "{reviews}");
    let address = &mut reviews["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
        ["address"]["socket_address"]["address"];
    assert_eq!(address, "127.0.3.31", "reviews-v1's endpoint");
    *address = "not-an-address".into();
    refused(
        judge("broken-assignment", &broken),
        "the endpoint's address",
    );

    // The example's CRL file, replaced by one that is no CRL. It comes with the CA over SDS
    // (`file-root:CA~CRL`, the secret of the files the proxy reads itself).
    let mut broken = traffic.clone();
    let root = cluster(&mut broken, "outbound|80||payments.example")["transport_socket"]
        ["typed_config"]["common_tls_context"]["combined_validation_context"]
        ["validation_context_sds_secret_config"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        root.starts_with("file-root:") && root.contains('~'),
        "{root}"
    );
    let crl = &mut secret(&mut broken, &root)["validation_context"]["crl"]["filename"];
    let shipped = crl.as_str().unwrap_or_default().to_owned();
    assert!(
        shipped.ends_with("examples/traffic-management/files/etc/certs/payments/ca.crl")
            && std::path::Path::new(&shipped).is_file(),
        "the example's own file: {shipped}"
    );
    let bad = dir.path().join("bad.crl");
    // A PEM block (text without one is an empty list to Envoy, which it takes).
    std::fs::write(
        &bad,
        "-----BEGIN X509 CRL-----\nbm90IGEgQ1JM\n-----END X509 CRL-----\n",
    )
    .expect("write bad.crl");
    *crl = bad.display().to_string().into();
    refused(judge("broken-crl", &broken), "the CRL file");
}

/// The bootstrap's static secret `name`.
fn secret<'a>(bootstrap: &'a mut serde_json::Value, name: &str) -> &'a mut serde_json::Value {
    bootstrap["static_resources"]["secrets"]
        .as_array_mut()
        .and_then(|s| s.iter_mut().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no static secret {name}"))
}

/// The bootstrap's static cluster `name`.
fn cluster<'a>(bootstrap: &'a mut serde_json::Value, name: &str) -> &'a mut serde_json::Value {
    bootstrap["static_resources"]["clusters"]
        .as_array_mut()
        .and_then(|s| s.iter_mut().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no static cluster {name}"))
}

/// Envoy refused the bootstrap where `what` was broken.
fn refused(judged: Result<(), String>, what: &str) {
    match judged {
        Ok(()) => panic!("Envoy accepted a config with {what} broken"),
        Err(e) => assert!(
            e.contains("error initializing configuration"),
            "{what}: Envoy's refusal says why: {e}"
        ),
    }
}
