//! The Gateway API from the cluster: where its CRDs are installed, Gateways, HTTPRoutes and
//! ReferenceGrants are watched and served as those from files are; where they are not, that
//! is no error.
//!
//! Against the fake API server (`support::fake_kube`: the real `kube` client, the API
//! server's list/watch wire format); the gateway is a Delta xDS client.

use crate::status::{await_status, await_status_in};
use crate::support::xds_client::{node, DeltaClient, LDS, RDS};
use crate::{service, start};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;

const ROUTER: &str = "router~10.1.0.9~shop-gateway-istio-abc.shop~shop.svc.cluster.local";

/// Receives until `accept` holds for the resources held, or the convergence timeout.
async fn await_held(
    c: &mut DeltaClient,
    held: &mut HashMap<String, Vec<u8>>,
    what: &str,
    accept: impl Fn(&HashMap<String, Vec<u8>>) -> bool,
) {
    let deadline = tokio::time::Instant::now() + crate::support::CONVERGE_TIMEOUT;
    while !accept(held) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        assert!(!left.is_zero(), "{what}: held {:?}", held.keys());
        let Some(resp) = c.recv(left.min(Duration::from_secs(1))).await else {
            continue;
        };
        for r in resp.resources {
            held.insert(r.name, r.resource.map(|a| a.value).unwrap_or_default());
        }
        for n in resp.removed_resources {
            held.remove(&n);
        }
    }
}

/// A Delta xDS client as the proxy of Gateway `shop/shop-gateway` (its name label).
async fn shop_gateway(cluster: &crate::Cluster) -> DeltaClient {
    DeltaClient::connect(
        cluster.meshflow.xds_addr(),
        node(
            ROUTER,
            "shop",
            &[("gateway.networking.k8s.io/gateway-name", "shop-gateway")],
        ),
    )
    .await
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_api_objects_from_the_cluster_reach_their_gateway() {
    let cluster = start(
        "kube-gateway-api",
        |fake| {
            fake.serve_gateway_api_versions(&["v1", "v1beta1"]);
            fake.apply(service("cart", "shop", 8080));
            fake.apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "shop-gateway", "namespace": "shop"},
                "spec": {"gatewayClassName": "istio", "listeners": [
                    {"name": "http", "port": 8080, "protocol": "HTTP"}
                ]}
            }));
        },
        &[],
    );
    assert!(cluster.errors().is_empty(), "{:?}", cluster.errors());
    let mut c = shop_gateway(&cluster).await;
    c.subscribe(LDS, &[], HashMap::new()).await;
    let mut held = HashMap::new();
    await_held(&mut c, &mut held, "the Gateway's listener", |h| {
        h.contains_key("0.0.0.0_8080")
    })
    .await;

    // A route created through the API reaches the gateway's route configuration.
    cluster.fake.apply(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "cart", "namespace": "shop"},
        "spec": {"parentRefs": [{"name": "shop-gateway"}], "hostnames": ["shop.example"],
                 "rules": [{"backendRefs": [{"name": "cart", "port": 8080}]}]}
    }));
    c.subscribe(RDS, &["http.8080".to_string()], HashMap::new())
        .await;
    await_held(&mut c, &mut held, "the route to cart", |h| {
        h.get("http.8080").is_some_and(|b| {
            contains(b, "shop.example") && contains(b, "cart.shop.svc.cluster.local")
        })
    })
    .await;

    // Deleted through the API: gone from the route configuration.
    cluster.fake.delete("HTTPRoute", "shop", "cart");
    await_held(&mut c, &mut held, "the route removed", |h| {
        h.get("http.8080")
            .is_some_and(|b| !contains(b, "cart.shop.svc.cluster.local"))
    })
    .await;
    // The Gateway deleted: its listener goes.
    cluster
        .fake
        .delete("KubernetesGateway", "shop", "shop-gateway");
    await_held(&mut c, &mut held, "the listener removed", |h| {
        !h.contains_key("0.0.0.0_8080")
    })
    .await;
}

/// A cluster without the Gateway API's CRDs: nothing of it is watched, and that is no
/// error (Istio's kinds missing still are).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_the_gateway_api_is_not_an_error() {
    let cluster = start(
        "kube-no-gateway-api",
        |fake| {
            fake.apply(service("cart", "shop", 8080));
        },
        &[],
    );
    cluster.await_input_changes("Service", "insert", 1.0);
    assert!(cluster.errors().is_empty(), "{:?}", cluster.errors());
    let requests = cluster.fake.requests();
    assert!(
        !requests
            .iter()
            .any(|r| r.contains("/apis/gateway.networking.k8s.io/v1/")),
        "{requests:#?}"
    );
}

/// With `--write-status`, the Gateway API's own status: the Gateway Accepted and Programmed,
/// its listener counting the routes attached; each route's parent entry Accepted, or not
/// with the spec's reason; ResolvedRefs False (BackendNotFound) for a backend no service
/// has; another controller's entry on a route kept; a Gateway of another class never
/// written; a route whose parents are Services accepted where the Service exists; a route
/// of a namespace a listener's selector matches (by the labels the Namespace watch reads)
/// accepted there; the GatewayClass of meshflow's controller Accepted (cluster-scoped: its
/// status patched without a namespace), another controller's class never written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_api_status_is_written_in_the_specs_shape() {
    let cluster = start(
        "kube-gateway-api-status",
        |fake| {
            fake.serve_gateway_api_versions(&["v1"]);
            fake.apply(service("cart", "default", 8080));
            fake.apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "gw", "namespace": "default", "generation": 3},
                "spec": {"gatewayClassName": "istio", "listeners": [
                    {"name": "http", "port": 8080, "protocol": "HTTP", "hostname": "*.example"},
                    {"name": "dns", "port": 53, "protocol": "UDP"}
                ]}
            }));
            fake.apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "theirs", "namespace": "default"},
                "spec": {"gatewayClassName": "nginx", "listeners": [
                    {"name": "http", "port": 80, "protocol": "HTTP"}
                ]}
            }));
            fake.apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "cart", "namespace": "default"},
                "spec": {"parentRefs": [{"name": "gw"}, {"name": "theirs"}],
                         "hostnames": ["shop.example"],
                         "rules": [{"backendRefs": [{"name": "cart", "port": 8080}]}]},
                "status": {"parents": [{"parentRef": {"name": "theirs"},
                    "controllerName": "example.net/nginx",
                    "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}
            }));
            fake.apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "mesh", "namespace": "default"},
                "spec": {"parentRefs": [{"group": "", "kind": "Service", "name": "cart", "port": 8080},
                                        {"group": "", "kind": "Service", "name": "ghost"}],
                         "rules": [{"backendRefs": [{"name": "cart", "port": 8080}]}]}
            }));
            // The class meshflow answers for, and another controller's.
            fake.apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                "metadata": {"name": "istio", "generation": 2},
                "spec": {"controllerName": "istio.io/gateway-controller"}
            }));
            fake.apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                "metadata": {"name": "nginx"},
                "spec": {"controllerName": "example.net/nginx"}
            }));
            // A listener taking routes of the namespaces labelled shared=yes.
            fake.apply(json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "team", "labels": {"shared": "yes"}}
            }));
            fake.apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "shared", "namespace": "default"},
                "spec": {"gatewayClassName": "istio", "listeners": [
                    {"name": "http", "port": 8081, "protocol": "HTTP",
                     "allowedRoutes": {"namespaces": {"from": "Selector",
                        "selector": {"matchLabels": {"shared": "yes"}}}}}
                ]}
            }));
            fake.apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "team-route", "namespace": "team"},
                "spec": {"parentRefs": [{"name": "shared", "namespace": "default"}],
                         "rules": [{"backendRefs": [{"name": "cart", "namespace": "default", "port": 8080}]}]}
            }));
            fake.apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "lost", "namespace": "default"},
                "spec": {"parentRefs": [{"name": "gw", "sectionName": "https"}],
                         "rules": [{"backendRefs": [{"name": "gone", "port": 80}]}]}
            }));
        },
        &["--write-status"],
    );
    let gw = await_status(
        &cluster.fake,
        "KubernetesGateway",
        "gw",
        "the Gateway's status",
        |s| s["listeners"][0]["attachedRoutes"] == 1,
    );
    assert_eq!(gw["conditions"][0]["type"], "Accepted");
    assert_eq!(gw["conditions"][0]["status"], "True");
    // Accepted, with the UDP listener not: the spec's reason says so.
    assert_eq!(gw["conditions"][0]["reason"], "ListenersNotValid");
    assert_eq!(gw["conditions"][0]["observedGeneration"], 3);
    assert_eq!(gw["conditions"][1]["type"], "Programmed");
    assert_eq!(gw["conditions"][1]["status"], "True");
    assert!(
        gw["conditions"][0]["lastTransitionTime"].is_string(),
        "{gw:#}"
    );
    let http = &gw["listeners"][0];
    assert_eq!(http["name"], "http");
    assert_eq!(http["supportedKinds"][0]["kind"], "HTTPRoute");
    let dns = &gw["listeners"][1];
    assert_eq!(dns["name"], "dns");
    assert_eq!(dns["conditions"][0]["status"], "False");
    assert_eq!(dns["conditions"][0]["reason"], "UnsupportedProtocol");

    let cart = await_status(
        &cluster.fake,
        "HTTPRoute",
        "cart",
        "the route's parents",
        |s| s["parents"].as_array().is_some_and(|p| p.len() == 2),
    );
    let parents = cart["parents"].as_array().unwrap();
    assert_eq!(
        parents[0]["controllerName"], "example.net/nginx",
        "kept: {cart:#}"
    );
    assert_eq!(parents[1]["controllerName"], "istio.io/gateway-controller");
    assert_eq!(parents[1]["parentRef"]["name"], "gw");
    assert_eq!(parents[1]["conditions"][0]["type"], "Accepted");
    assert_eq!(parents[1]["conditions"][0]["status"], "True");
    assert_eq!(parents[1]["conditions"][1]["type"], "ResolvedRefs");
    assert_eq!(parents[1]["conditions"][1]["status"], "True");

    let lost = await_status(&cluster.fake, "HTTPRoute", "lost", "a refused route", |s| {
        s["parents"][0]["conditions"][1]["reason"] == "BackendNotFound"
    });
    let entry = &lost["parents"][0];
    assert_eq!(entry["conditions"][0]["status"], "False");
    assert_eq!(entry["conditions"][0]["reason"], "NoMatchingParent");
    assert_eq!(entry["conditions"][1]["status"], "False");
    assert_eq!(
        cluster
            .fake
            .status_patches("KubernetesGateway", "default", "theirs"),
        0
    );

    // The GatewayClass of meshflow's controller: accepted, at the version read.
    let class = await_status_in(
        &cluster.fake,
        "GatewayClass",
        "",
        "istio",
        "the class's status",
        |s| s["conditions"].is_array(),
    );
    assert_eq!(class["conditions"][0]["type"], "Accepted");
    assert_eq!(class["conditions"][0]["status"], "True");
    assert_eq!(class["conditions"][0]["observedGeneration"], 2);
    assert_eq!(class["conditions"][1]["type"], "SupportedVersion");
    assert_eq!(class["conditions"][1]["status"], "True");
    assert_eq!(cluster.fake.status_patches("GatewayClass", "", "nginx"), 0);

    // The route of a namespace the selector matches (its labels from the Namespace watch).
    let team = await_status_in(
        &cluster.fake,
        "HTTPRoute",
        "team",
        "team-route",
        "the selected namespace's route",
        |s| s["parents"][0]["conditions"][0]["status"] == "True",
    );
    assert_eq!(team["parents"][0]["conditions"][0]["reason"], "Accepted");

    // A route of the mesh: accepted on the Service that exists, not on the one that does not.
    let mesh = await_status(
        &cluster.fake,
        "HTTPRoute",
        "mesh",
        "the mesh route's parents",
        |s| s["parents"].as_array().is_some_and(|p| p.len() == 2),
    );
    let parents = mesh["parents"].as_array().unwrap();
    assert_eq!(parents[0]["parentRef"]["kind"], "Service");
    assert_eq!(parents[0]["parentRef"]["port"], 8080);
    assert_eq!(parents[0]["controllerName"], "meshflow.dev/mesh-controller");
    assert_eq!(parents[0]["conditions"][0]["status"], "True");
    assert_eq!(parents[1]["conditions"][0]["status"], "False");
    assert_eq!(parents[1]["conditions"][0]["reason"], "NoMatchingParent");
}

/// A BackendTLSPolicy and the ConfigMap of its CA from the cluster: the gateway's cluster
/// of the Service originates TLS with the policy's SNI and the ConfigMap's CA; the policy's
/// status says so at the Service and at the Gateway whose route sends there, and follows
/// the ConfigMap's deletion (NoValidCACertificate) and a generation bump
/// (BackendTLSPolicyObservedGenerationBump).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policies_and_their_config_maps_from_the_cluster() {
    use crate::support::xds_client::CDS;
    let authority = crate::support::pki::ca("backend CA");
    let policy = |generation: i64, hostname: &str| {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy",
            "metadata": {"name": "cart-tls", "namespace": "shop", "generation": generation},
            "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": "cart"}],
                     "validation": {"caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "cart-ca"}],
                                    "hostname": hostname}}
        })
    };
    let config_map = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cart-ca", "namespace": "shop"},
        "data": {"ca.crt": authority.pem}
    });
    let cluster = start(
        "kube-backend-tls",
        |fake| {
            fake.serve_gateway_api_versions(&["v1"]);
            fake.apply(service("cart", "shop", 8080));
            fake.apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "shop-gateway", "namespace": "shop"},
                "spec": {"gatewayClassName": "istio", "listeners": [
                    {"name": "http", "port": 8080, "protocol": "HTTP"}
                ]}
            }));
            fake.apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "cart", "namespace": "shop"},
                "spec": {"parentRefs": [{"name": "shop-gateway"}],
                         "rules": [{"backendRefs": [{"name": "cart", "port": 8080}]}]}
            }));
            fake.apply(config_map.clone());
            fake.apply(policy(1, "cart.example.com"));
        },
        &["--write-status"],
    );
    assert!(cluster.errors().is_empty(), "{:?}", cluster.errors());
    let mut c = shop_gateway(&cluster).await;
    c.subscribe(CDS, &[], HashMap::new()).await;
    let mut held = HashMap::new();
    let name = "outbound|8080||cart.shop.svc.cluster.local";
    let ca_line = authority
        .pem
        .lines()
        .nth(1)
        .expect("a PEM line")
        .to_string();
    await_held(
        &mut c,
        &mut held,
        "the cluster with the policy's TLS",
        |h| {
            h.get(name)
                .is_some_and(|b| contains(b, "cart.example.com") && contains(b, &ca_line))
        },
    )
    .await;
    let accepted = |s: &Value, kind: &str| -> (String, String) {
        let entry = s["ancestors"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["ancestorRef"]["kind"] == kind))
            .cloned()
            .unwrap_or_default();
        let c = &entry["conditions"][0];
        (
            c["status"].as_str().unwrap_or_default().into(),
            c["reason"].as_str().unwrap_or_default().into(),
        )
    };
    let status = await_status_in(
        &cluster.fake,
        "BackendTLSPolicy",
        "shop",
        "cart-tls",
        "the policy's status",
        |s| s["ancestors"].as_array().is_some_and(|a| a.len() == 2),
    );
    for kind in ["Service", "Gateway"] {
        assert_eq!(
            accepted(&status, kind),
            ("True".into(), "Accepted".into()),
            "{status:#}"
        );
    }
    assert_eq!(
        status["ancestors"][0]["conditions"][0]["observedGeneration"],
        1
    );

    // The ConfigMap deleted: the cluster fails closed (no endpoints) and the status says why.
    cluster.fake.delete("ConfigMap", "shop", "cart-ca");
    let status = await_status_in(
        &cluster.fake,
        "BackendTLSPolicy",
        "shop",
        "cart-tls",
        "the policy without its CA",
        |s| s["ancestors"][0]["conditions"][0]["status"] == "False",
    );
    assert_eq!(
        accepted(&status, "Gateway"),
        ("False".into(), "NoValidCACertificate".into())
    );
    assert_eq!(
        status["ancestors"][0]["conditions"][1]["reason"],
        "InvalidCACertificateRef"
    );
    await_held(&mut c, &mut held, "the cluster without the CA", |h| {
        h.get(name).is_some_and(|b| !contains(b, &ca_line))
    })
    .await;

    // Restored, and the policy edited: Accepted again, at the new generation.
    cluster.fake.apply(config_map);
    cluster.fake.apply(policy(2, "cart2.example.com"));
    let status = await_status_in(
        &cluster.fake,
        "BackendTLSPolicy",
        "shop",
        "cart-tls",
        "the edited policy",
        |s| s["ancestors"][0]["conditions"][0]["observedGeneration"] == 2,
    );
    assert_eq!(
        accepted(&status, "Service"),
        ("True".into(), "Accepted".into())
    );
    await_held(&mut c, &mut held, "the edited policy's SNI", |h| {
        h.get(name)
            .is_some_and(|b| contains(b, "cart2.example.com"))
    })
    .await;
}

/// A ListenerSet from the cluster: its listener's route reaches the Gateway's proxies (in
/// the shared route configuration of the port), its status and the Gateway's say it is
/// taken, and when the Gateway stops admitting sets (a generation bump through the API)
/// the set is `NotAllowed` and its hostname leaves the route configuration while the
/// Gateway's own stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_sets_from_the_cluster() {
    // At generation 2 the Gateway also gains a listener.
    let gateway = |generation: i64, from: &str| {
        let mut listeners = vec![json!({"name": "http", "port": 8080, "protocol": "HTTP",
                                        "hostname": "shop.example"})];
        if generation > 1 {
            listeners.push(json!({"name": "extra", "port": 8080, "protocol": "HTTP",
                                  "hostname": "extra.example"}));
        }
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "shop-gateway", "namespace": "shop", "generation": generation},
            "spec": {"gatewayClassName": "istio",
                     "allowedListeners": {"namespaces": {"from": from}},
                     "listeners": listeners}
        })
    };
    // The class, its description bumped at generation 2.
    let class = |generation: i64| {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "istio", "generation": generation},
            "spec": {"controllerName": "istio.io/gateway-controller",
                     "description": format!("edition {generation}")}
        })
    };
    let cluster = start(
        "kube-listener-sets",
        |fake| {
            fake.serve_gateway_api_versions(&["v1"]);
            fake.apply(service("cart", "shop", 8080));
            fake.apply(class(1));
            fake.apply(gateway(1, "Same"));
            fake.apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
                "metadata": {"name": "team", "namespace": "shop", "generation": 1},
                "spec": {"parentRef": {"name": "shop-gateway"},
                         "listeners": [{"name": "http", "port": 8080, "protocol": "HTTP",
                                        "hostname": "team.example"},
                                       {"name": "https", "port": 8443, "protocol": "HTTPS",
                                        "hostname": "secure.example",
                                        "tls": {"certificateRefs": [{"name": "cert", "namespace": "certs"}]}}]}
            }));
            // Its certificate, of another namespace, granted to the sets of shop.
            let key = rcgen::KeyPair::generate().expect("a key");
            let cert = rcgen::CertificateParams::new(vec!["secure.example".into()])
                .expect("params")
                .self_signed(&key)
                .expect("a certificate");
            use base64::Engine;
            let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
            fake.apply(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "cert", "namespace": "certs"},
                "type": "kubernetes.io/tls",
                "data": {"tls.crt": b64(&cert.pem()), "tls.key": b64(&key.serialize_pem())},
            }));
            fake.apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
                "metadata": {"name": "shop-sets", "namespace": "certs"},
                "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "ListenerSet", "namespace": "shop"}],
                         "to": [{"group": "", "kind": "Secret"}]}
            }));
            for (name, parent) in [
                ("own", json!({"name": "shop-gateway"})),
                (
                    "team",
                    json!({"group": "gateway.networking.k8s.io", "kind": "ListenerSet", "name": "team"}),
                ),
            ] {
                fake.apply(json!({
                    "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                    "metadata": {"name": name, "namespace": "shop"},
                    "spec": {"parentRefs": [parent],
                             "rules": [{"backendRefs": [{"name": "cart", "port": 8080}]}]}
                }));
            }
        },
        &["--write-status"],
    );
    assert!(cluster.errors().is_empty(), "{:?}", cluster.errors());
    let mut c = shop_gateway(&cluster).await;
    c.subscribe(RDS, &["http.8080".to_string()], HashMap::new())
        .await;
    let mut held = HashMap::new();
    await_held(
        &mut c,
        &mut held,
        "the set's and the Gateway's hosts",
        |h| {
            h.get("http.8080")
                .is_some_and(|b| contains(b, "team.example") && contains(b, "shop.example"))
        },
    )
    .await;
    let set = await_status_in(
        &cluster.fake,
        "ListenerSet",
        "shop",
        "team",
        "the set's status",
        |s| s["listeners"][0]["attachedRoutes"] == 1,
    );
    assert_eq!(set["conditions"][0]["type"], "Accepted");
    assert_eq!(set["conditions"][0]["status"], "True", "{set:#}");
    assert_eq!(set["conditions"][1]["reason"], "Programmed");
    assert_eq!(set["conditions"][0]["observedGeneration"], 1);
    // The HTTPS listener's certificate is granted (the status judges with the grants).
    let https = &set["listeners"][1];
    assert_eq!(https["name"], "https", "{set:#}");
    for (i, kind) in ["Accepted", "Programmed", "ResolvedRefs"]
        .iter()
        .enumerate()
    {
        assert_eq!(https["conditions"][i]["type"], *kind);
        assert_eq!(https["conditions"][i]["status"], "True", "{set:#}");
    }
    let gw = await_status_in(
        &cluster.fake,
        "KubernetesGateway",
        "shop",
        "shop-gateway",
        "the Gateway's status",
        |s| s["attachedListenerSets"] == 1,
    );
    // The Gateway's own listener counts its own route only.
    assert_eq!(gw["listeners"][0]["attachedRoutes"], 1, "{gw:#}");
    let team = await_status_in(
        &cluster.fake,
        "HTTPRoute",
        "shop",
        "team",
        "the set's route",
        |s| s["parents"][0]["conditions"][0]["status"] == "True",
    );
    assert_eq!(team["parents"][0]["parentRef"]["kind"], "ListenerSet");

    let accepted_class = await_status_in(
        &cluster.fake,
        "GatewayClass",
        "",
        "istio",
        "the class's status",
        |s| s["conditions"][0]["observedGeneration"] == 1,
    );
    assert_eq!(accepted_class["conditions"][0]["status"], "True");

    // The Gateway admits no set any more, and has a listener more; the class's
    // description is edited (GatewayObservedGenerationBump,
    // GatewayClassObservedGenerationBump).
    cluster.fake.apply(gateway(2, "None"));
    cluster.fake.apply(class(2));
    let set = await_status_in(
        &cluster.fake,
        "ListenerSet",
        "shop",
        "team",
        "the set refused",
        |s| s["conditions"][0]["reason"] == "NotAllowed",
    );
    assert_eq!(set["conditions"][1]["reason"], "NotAllowed");
    assert_eq!(set["listeners"], json!([]));
    await_held(&mut c, &mut held, "the set's host gone", |h| {
        h.get("http.8080")
            .is_some_and(|b| !contains(b, "team.example") && contains(b, "shop.example"))
    })
    .await;
    let gw = await_status_in(
        &cluster.fake,
        "KubernetesGateway",
        "shop",
        "shop-gateway",
        "the Gateway at generation 2",
        |s| s["conditions"][0]["observedGeneration"] == 2,
    );
    // Said as 0, not left out: the status the API server holds would keep the 1.
    assert_eq!(gw["attachedListenerSets"], 0, "{gw:#}");
    // Every condition, the Gateway's and each listener's (the new one too), is of
    // generation 2.
    let mut conditions: Vec<&Value> = gw["conditions"].as_array().into_iter().flatten().collect();
    let listeners = gw["listeners"].as_array().cloned().unwrap_or_default();
    assert_eq!(listeners.len(), 2, "{gw:#}");
    for l in &listeners {
        conditions.extend(l["conditions"].as_array().into_iter().flatten());
    }
    assert!(conditions.len() >= 8, "{gw:#}");
    for c in conditions {
        assert_eq!(c["observedGeneration"], 2, "{c}");
    }
    let bumped = await_status_in(
        &cluster.fake,
        "GatewayClass",
        "",
        "istio",
        "the class at generation 2",
        |s| s["conditions"][0]["observedGeneration"] == 2,
    );
    assert_eq!(bumped["conditions"][0]["status"], "True");
    assert_eq!(bumped["conditions"][1]["observedGeneration"], 2);
}
