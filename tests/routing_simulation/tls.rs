//! TLS on the way: how upstream clusters connect (a DestinationRule's `tls`, auto mTLS),
//! inbound chains telling plaintext and mTLS apart, and gateway HTTPS servers by SNI.

use crate::fixtures::{gateway_setup, pod, reviews_mesh, sidecar_setup, via_sidecar, JASON, PORT};
use crate::support;
use crate::support::reviews::{Binding, FQDN};
use crate::support::{write_config, ProxyNode};
use crate::{assert_routes_to, assert_status, sans, upstream_tls, Mesh};
use dataflows::model::MeshConfig;
use dataflows::simulate::{Call, Discovery, NoMatch, Source, Transport};

/// DestinationRule `tls` modes, as each `reviews` cluster of the client sidecar connects:
/// no `tls` and `DISABLE` in plaintext; `SIMPLE` with the rule's `sni`, `subjectAltNames`
/// (each a DNS and a URI SAN, an address also an IP SAN) and `caCertificates`, TLS 1.2–1.3,
/// no client certificate; `SIMPLE` without them takes the SNI from the request
/// (`auto_sni`, `auto_san_validation`) and trusts the system bundle; `MUTUAL` presents its
/// certificate files; `ISTIO_MUTUAL` the workload certificate (SDS `default`) verified
/// against SDS `ROOTCA`, Istio's SNI per subset and the service account's SPIFFE identity.
#[test]
fn destination_rule_tls_modes_set_how_clusters_connect() {
    let (mut mesh, reviews, proxy) = sidecar_setup("dr-tls-modes", &["v1", "v2"]);
    let all = reviews.cluster("");
    let call = via_sidecar("reviews", "/");
    let o = mesh.send(&proxy, &call);
    // No rule tls: auto mTLS, plaintext to these pods (none is labelled as running a
    // sidecar).
    let up = o
        .upstreams()
        .iter()
        .find(|u| u.cluster == all)
        .expect("the service's cluster");
    let names: Vec<&str> = up.socket_matches.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["tlsMode-istio", "tlsMode-disabled"], "{up:#?}");
    assert!(up
        .transports()
        .iter()
        .all(|(_, t)| **t == Transport::Plaintext));
    let policy = |tls: &str| format!("  trafficPolicy:\n    tls: {tls}\n");
    let both = ["v1", "v2"];

    reviews.write_destination_rule_with_policy(&both, &policy("{mode: DISABLE}"));
    assert_eq!(upstream_tls(&mesh.send(&proxy, &call), &all), None);

    reviews.write_destination_rule_with_policy(
        &both,
        &policy("{mode: SIMPLE, sni: reviews.example.com, subjectAltNames: [reviews.example.com, 10.0.0.5], caCertificates: /etc/certs/ca.pem}"),
    );
    let t = upstream_tls(&mesh.send(&proxy, &call), &all).expect("TLS");
    assert_eq!(t.sni.as_deref(), Some("reviews.example.com"));
    assert!(!t.auto_sni && !t.auto_san_validation, "{t:#?}");
    assert_eq!(t.validation, Some(Source::File("/etc/certs/ca.pem".into())));
    assert_eq!(
        t.sans,
        sans(&[
            ("DNS", "exact:reviews.example.com"),
            ("URI", "exact:reviews.example.com"),
            ("DNS", "exact:10.0.0.5"),
            ("URI", "exact:10.0.0.5"),
            ("IP_ADDRESS", "exact:10.0.0.5"),
        ])
    );
    assert!(t.certificates.is_empty(), "SIMPLE: no client certificate");
    assert!(!t.istio_mutual && t.alpn.is_empty(), "{t:#?}");
    assert_eq!(t.versions, (Some("TLSv1_2".into()), Some("TLSv1_3".into())));

    reviews.write_destination_rule_with_policy(&both, &policy("{mode: SIMPLE}"));
    let t = upstream_tls(&mesh.send(&proxy, &call), &all).expect("TLS");
    assert_eq!(t.sni, None);
    assert!(t.auto_sni && t.auto_san_validation, "{t:#?}");
    assert_eq!(
        t.validation,
        Some(Source::File("/etc/ssl/certs/ca-certificates.crt".into())),
        "the system bundle"
    );
    assert!(
        t.sans.is_empty(),
        "a Kubernetes Service has no SANs of its own"
    );

    reviews.write_destination_rule_with_policy(
        &both,
        &policy("{mode: MUTUAL, clientCertificate: /etc/certs/client.pem, privateKey: /etc/certs/key.pem, caCertificates: /etc/certs/ca.pem, sni: reviews.example.com}"),
    );
    let t = upstream_tls(&mesh.send(&proxy, &call), &all).expect("TLS");
    assert_eq!(
        t.certificates,
        [Source::File("/etc/certs/client.pem".into())]
    );
    assert_eq!(t.validation, Some(Source::File("/etc/certs/ca.pem".into())));
    assert_eq!(t.sni.as_deref(), Some("reviews.example.com"));
    assert!(!t.istio_mutual);

    reviews.write_destination_rule_with_policy(&both, &policy("{mode: ISTIO_MUTUAL}"));
    let jason = via_sidecar("reviews", "/").header(JASON.0, JASON.1);
    reviews.write_subset_routing(&Binding::Mesh, &[("v1", 100)]);
    for (o, subset) in [
        (mesh.send(&proxy, &jason), "v2"),
        (
            mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1")),
            "v1",
        ),
    ] {
        let t = upstream_tls(&o, &reviews.cluster(subset)).expect("mTLS");
        assert!(t.istio_mutual, "{t:#?}");
        assert_eq!(t.certificates, [Source::Sds("default".into())]);
        assert_eq!(t.validation, Some(Source::Sds("ROOTCA".into())));
        assert_eq!(t.alpn, ["istio-peer-exchange", "istio"]);
        assert_eq!(
            t.sni,
            Some(format!("outbound_.{PORT}_.{subset}_.{FQDN}")),
            "Istio's SNI names the subset"
        );
        assert_eq!(
            t.sans,
            sans(&[("URI", "exact:spiffe://cluster.local/ns/default/sa/reviews")]),
            "the pods' service account"
        );
    }
    mesh.assert_no_errors();
}

/// `credentialName` on a sidecar's rule: the client certificate from SDS
/// `kubernetes://NAME` and the CA from `kubernetes://NAME-cacert`, the Secret of the client's
/// own namespace; without that Secret the cluster fails closed (no endpoints: 503) rather
/// than connect in plaintext.
#[test]
fn destination_rule_credential_name_uses_the_secrets_sds_names() {
    use base64::Engine;
    let (mut mesh, reviews, proxy) = sidecar_setup("dr-tls-credential", &["v1"]);
    reviews.write_destination_rule_with_policy(
        &["v1"],
        "  trafficPolicy:\n    tls: {mode: MUTUAL, credentialName: reviews-client, sni: reviews.example.com}\n",
    );
    let call = via_sidecar("reviews", "/");
    let o = mesh.send(&proxy, &call);
    assert_eq!(upstream_tls(&o, &reviews.cluster("")), None, "{o:#?}");
    assert_eq!(
        o.upstreams()[0].discovery,
        Discovery::Static,
        "fails closed"
    );
    assert_status(&o, 503);

    let ca = support::pki::ca("client-ca");
    let (cert, key) = support::pki::leaf(&ca, &["client.example.com"], None);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    write_config(
        &mesh.config,
        "secret.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: reviews-client, namespace: default}}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n  ca.crt: {}\n",
            b64(&cert),
            b64(&key),
            b64(&ca.pem)
        ),
    );
    let o = mesh.send(&proxy, &call);
    let t = upstream_tls(&o, &reviews.cluster("")).expect("TLS");
    assert_eq!(
        t.certificates,
        [Source::Sds("kubernetes://reviews-client".into())]
    );
    assert_eq!(
        t.validation,
        Some(Source::Sds("kubernetes://reviews-client-cacert".into()))
    );
    assert_eq!(t.sni.as_deref(), Some("reviews.example.com"));
    assert!(!t.istio_mutual);
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);
    mesh.assert_no_errors();
}

/// `portLevelSettings` replace the rule's `tls` on their port only, and a subset's `tls`
/// its own cluster's only: a two-port ServiceEntry whose rule says `ISTIO_MUTUAL`, SIMPLE on
/// port 7081, and a subset `plain` that DISABLEs TLS.
#[test]
fn port_level_and_subset_tls_override_the_rules_tls_where_they_apply() {
    let mut mesh = Mesh::new("dr-tls-port-level");
    write_config(
        &mesh.config,
        "db.yaml",
        "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: default}
spec:
  hosts: [db.example.internal]
  addresses: [240.0.0.10]
  location: MESH_INTERNAL
  ports:
  - {number: 7080, name: http-a, protocol: HTTP}
  - {number: 7081, name: http-b, protocol: HTTP}
  resolution: STATIC
  endpoints:
  - {address: 10.9.0.1, labels: {version: a}}
  - {address: 10.9.0.2, labels: {version: b}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: default}
spec:
  host: db.example.internal
  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL}
    portLevelSettings:
    - port: {number: 7081}
      tls: {mode: SIMPLE, sni: port.example}
  subsets:
  - name: plain
    labels: {version: b}
    trafficPolicy:
      tls: {mode: DISABLE}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: default}
spec:
  hosts: [db.example.internal]
  http:
  - match: [{headers: {x-plain: {exact: 'yes'}}}]
    route: [{destination: {host: db.example.internal, subset: plain}}]
  - route: [{destination: {host: db.example.internal}}]
",
    );
    let proxy = mesh.connect_captured(&ProxyNode::sidecar(
        "client-abc",
        "default",
        "127.0.62.20",
        &[("app", "client")],
    ));
    let call = |port: u16| Call::get("db.example.internal", port, "/").to_address("240.0.0.10");
    let host = "db.example.internal";

    let o = mesh.send(&proxy, &call(7080));
    let t = upstream_tls(&o, &format!("outbound|7080||{host}")).expect("mTLS");
    assert!(t.istio_mutual, "the rule's tls on 7080: {t:#?}");
    assert_eq!(t.sni, Some(format!("outbound_.7080_._.{host}")));
    assert_eq!(o.endpoints(), ["10.9.0.1:7080", "10.9.0.2:7080"]);

    let o = mesh.send(&proxy, &call(7081));
    let t = upstream_tls(&o, &format!("outbound|7081||{host}")).expect("TLS");
    assert!(!t.istio_mutual, "the port's SIMPLE replaces it: {t:#?}");
    assert_eq!(t.sni.as_deref(), Some("port.example"));
    assert!(t.certificates.is_empty());

    let o = mesh.send(&proxy, &call(7080).header("x-plain", "yes"));
    assert_eq!(
        upstream_tls(&o, &format!("outbound|7080|plain|{host}")),
        None,
        "the subset's DISABLE"
    );
    assert_eq!(o.endpoints(), ["10.9.0.2:7080"]);
    // The route names no port on a two-port host: it takes the request's port (as meant
    // here), which Istio's analysis asks to be written out (IST0112).
    mesh.assert_one_error(&["db.example.internal", "IST0112"]);
}

/// Auto mTLS (Istio's default): a mesh service without a rule's `tls` carries Istio's
/// transport socket matches; the endpoint whose pod runs a sidecar (labelled
/// `security.istio.io/tlsMode: istio`) is reached over the mesh's mTLS — the workload
/// certificate, `ROOTCA`, SNI `outbound_.PORT_._.HOST`, the server pinned to the service's
/// account — and the one without a sidecar in plaintext; with `enableAutoMtls: false` both
/// are plaintext and no socket matches are sent.
#[test]
fn without_a_rules_tls_auto_mtls_reaches_sidecars_over_mtls_and_the_rest_in_plaintext() {
    let (mut mesh, reviews, proxy) = sidecar_setup("auto-mtls", &["v1", "v2"]);
    reviews.write_pods_labelled(&[("v1", "security.istio.io/tlsMode: istio"), ("v2", "")]);
    mesh.sync_clean();
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/"));
    let up = &o.upstreams()[0];
    let names: Vec<&str> = up.socket_matches.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["tlsMode-istio", "tlsMode-disabled"], "{up:#?}");
    let transports = up.transports();
    assert_eq!(transports.len(), 2, "{up:#?}");
    let (v1, v2) = (pod(&reviews, "v1"), pod(&reviews, "v2"));
    let of = |addr: &str| {
        transports
            .iter()
            .find(|(a, _)| a == addr)
            .map(|(_, t)| *t)
            .expect("an endpoint")
    };
    let t = of(&v1).tls().expect("mTLS to the pod with a sidecar");
    assert!(t.istio_mutual, "{t:#?}");
    assert_eq!(t.certificates, [Source::Sds("default".into())]);
    assert_eq!(t.validation, Some(Source::Sds("ROOTCA".into())));
    assert_eq!(
        t.sni.as_deref(),
        Some(format!("outbound_.{PORT}_._.{FQDN}").as_str())
    );
    assert!(
        t.sans.iter().any(|s| s
            .matcher
            .contains("spiffe://cluster.local/ns/default/sa/reviews")),
        "{t:#?}"
    );
    assert_eq!(of(&v2), &Transport::Plaintext);

    use meshflow::config::mesh::{mesh_config_key, MeshOverrides};
    use meshflow::sources::mesh::MeshState;
    let mut state = MeshState::new(
        MeshConfig::default(),
        MeshOverrides::default(),
        mesh_config_key("", "mesh"),
        "mesh.yaml".into(),
        "files",
    );
    let report = state
        .update("enableAutoMtls: false\n", None)
        .expect("a new config");
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    mesh.step(report.changes);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/"));
    let up = &o.upstreams()[0];
    assert!(up.socket_matches.is_empty(), "{up:#?}");
    assert!(up
        .transports()
        .iter()
        .all(|(_, t)| **t == Transport::Plaintext));
}

/// Inbound, Istio's PERMISSIVE mode: a captured `reviews-v1` sidecar's `virtualInbound`
/// takes a plaintext request to its port on the plaintext chain and one over Istio's mTLS
/// (TLS, ALPN `istio-peer-exchange`) on the mTLS chain, which presents the workload
/// certificate, requires a client certificate the mesh's root signed; both to
/// `inbound|PORT||`. A plaintext call to another port passes through.
#[test]
fn inbound_permissive_chains_take_plaintext_and_mtls_calls_apart() {
    let mut mesh = Mesh::new("inbound-permissive");
    let reviews = reviews_mesh(&mesh, 9080, &["v1"]);
    let ip = reviews.pod_ip("v1");
    let proxy = mesh.connect_captured(&ProxyNode::sidecar(
        "reviews-v1",
        "default",
        &ip,
        &[("app", "reviews"), ("version", "v1")],
    ));
    let port = reviews.backend_port();
    let inbound = format!("inbound|{port}||");
    let call = || {
        Call::get("reviews:9080", port, "/reviews/1")
            .to_address(&ip)
            .inbound()
    };

    let o = mesh.send(&proxy, &call());
    assert_eq!(o.listener.as_deref(), Some("virtualInbound"), "{o:#?}");
    assert_eq!(o.filter_chain.as_deref(), Some(inbound.as_str()));
    assert_eq!(o.downstream_tls, None);
    assert_eq!(o.cluster(), Some(inbound.as_str()));

    let sni = format!("outbound_.9080_._.{FQDN}");
    let o = mesh.send(&proxy, &call().istio_mtls(&sni));
    assert_eq!(o.filter_chain, Some(format!("{inbound}-mtls")), "{o:#?}");
    let t = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("terminated");
    assert!(t.istio_mutual && t.require_client_certificate, "{t:#?}");
    assert_eq!(t.certificates, [Source::Sds("default".into())]);
    assert_eq!(t.validation, Some(Source::Sds("ROOTCA".into())));
    assert_eq!(o.cluster(), Some(inbound.as_str()));
    assert_eq!(o.status(), None);
    // Every ALPN of Istio's clients reaches the mTLS chain.
    for alpn in ["istio", "istio-http/1.1", "istio-h2"] {
        let o = mesh.send(&proxy, &call().over_tls(Some(&sni), &[alpn]));
        assert_eq!(o.filter_chain, Some(format!("{inbound}-mtls")), "{alpn}");
    }

    let o = mesh.send(&proxy, &Call::connect(5000).to_address(&ip).inbound());
    assert_eq!(
        o.filter_chain.as_deref(),
        Some("virtualInbound-catchall-tcp")
    );
    assert_eq!(o.cluster(), Some("PassthroughCluster"));
    mesh.assert_no_errors();
}

/// Mesh mTLS end to end: with `ISTIO_MUTUAL`, the TLS the client sidecar's cluster opens
/// (its SNI and ALPN) is what the server sidecar's `virtualInbound` takes on its mTLS chain,
/// which terminates it with the workload certificate the client pins (SDS `default` against
/// `ROOTCA` both ways) and forwards to the application; the same request in plaintext takes
/// the plaintext chain.
#[test]
fn istio_mutual_clients_reach_the_servers_mtls_chain() {
    let (mut mesh, reviews, client) = sidecar_setup("mtls-end-to-end", &["v1"]);
    reviews.write_destination_rule_with_policy(
        &["v1"],
        "  trafficPolicy:\n    tls: {mode: ISTIO_MUTUAL}\n",
    );
    let ip = reviews.pod_ip("v1");
    let server = mesh.connect_captured(&ProxyNode::sidecar(
        "reviews-v1",
        "default",
        &ip,
        &[("app", "reviews"), ("version", "v1")],
    ));
    let o = mesh.send(&client, &via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&o, &reviews.cluster(""), &[pod(&reviews, "v1")]);
    let t = upstream_tls(&o, &reviews.cluster("")).expect("mTLS");
    assert!(t.istio_mutual, "{t:#?}");
    let alpn: Vec<&str> = t.alpn.iter().map(String::as_str).collect();
    let port = reviews.backend_port();
    let arriving = Call::get("reviews", port, "/reviews/1")
        .to_address(&ip)
        .inbound();
    let o = mesh.send(&server, &arriving.clone().over_tls(t.sni.as_deref(), &alpn));
    let inbound = format!("inbound|{port}||");
    assert_eq!(o.filter_chain, Some(format!("{inbound}-mtls")), "{o:#?}");
    let server_tls = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("terminated");
    assert!(server_tls.istio_mutual && server_tls.require_client_certificate);
    assert_eq!(o.cluster(), Some(inbound.as_str()));
    let o = mesh.send(&server, &arriving);
    assert_eq!(o.filter_chain.as_deref(), Some(inbound.as_str()));
    assert_eq!(o.downstream_tls, None);
    mesh.assert_no_errors();
}

/// Mirrors `tests/envoy/istio_mutual.rs`: the server sidecar (pod `reviews-v1`, no capture)
/// binds its Sidecar `ingress` port on the pod's address (`inbound_IP_PORT`); the client
/// sidecar's `ISTIO_MUTUAL` connection to it (the cluster's SNI and ALPN) takes the mTLS chain,
/// a plaintext one the plaintext chain, both to `inbound|PORT||`; TLS without Istio's ALPN
/// (an HTTPS client's `h2`) finds no chain on an HTTP port, as in Istio.
#[test]
fn istio_mutual_reaches_a_bound_ingress_listeners_mtls_chain() {
    let (mut mesh, reviews, client) = sidecar_setup("mtls-ingress", &["v1"]);
    reviews.write_destination_rule_with_policy(
        &["v1"],
        "  trafficPolicy:\n    tls: {mode: ISTIO_MUTUAL}\n",
    );
    let ip = reviews.pod_ip("v1");
    let target = reviews.backend_port();
    write_config(
        &mesh.config,
        "server-sidecar.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: reviews, namespace: default}}\nspec:\n  workloadSelector: {{labels: {{app: reviews}}}}\n  ingress:\n  - port: {{number: {target}, protocol: HTTP, name: http}}\n    bind: {ip}\n    captureMode: NONE\n    defaultEndpoint: 127.0.0.1:9999\n  egress:\n  - hosts: ['./*']\n"
        ),
    );
    let server = mesh.connect(&ProxyNode::sidecar(
        "reviews-v1",
        "default",
        &ip,
        &[("app", "reviews"), ("version", "v1")],
    ));
    let o = mesh.send(&client, &via_sidecar("reviews", "/"));
    let t = upstream_tls(&o, &reviews.cluster("")).expect("mTLS");
    let alpn: Vec<&str> = t.alpn.iter().map(String::as_str).collect();
    let direct = Call::get("reviews", target, "/").to_address(&ip);
    let listener = format!("inbound_{ip}_{target}");
    let inbound = format!("inbound|{target}||");

    let o = mesh.send(&server, &direct.clone().over_tls(t.sni.as_deref(), &alpn));
    assert_eq!(o.listener.as_deref(), Some(listener.as_str()), "{o:#?}");
    assert_eq!(o.captured_by, None);
    assert_eq!(o.filter_chain, Some(format!("{inbound}-mtls")));
    let server_tls = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("terminated");
    assert!(server_tls.istio_mutual && server_tls.require_client_certificate);
    assert_eq!(o.cluster(), Some(inbound.as_str()));
    assert_eq!(o.endpoints(), ["127.0.0.1:9999"]);

    let o = mesh.send(&server, &direct);
    assert_eq!(o.filter_chain.as_deref(), Some(inbound.as_str()));
    assert_eq!(o.downstream_tls, None);
    assert_eq!(o.cluster(), Some(inbound.as_str()));

    let o = mesh.send(&server, &direct.clone().over_tls(t.sni.as_deref(), &["h2"]));
    assert!(
        matches!(o.result, Err(NoMatch::NoFilterChain { .. })),
        "{o:#?}"
    );
    mesh.assert_no_errors();
}

/// Inbound PERMISSIVE on a TCP port: as Istio, three chains — Istio's mTLS (TLS with its
/// ALPN, terminated), TLS of the application's own (TLS with other or no ALPN, passed on as
/// bytes) and plaintext — so a client outside the mesh speaking TLS to, say, a database
/// reaches it (without the second chain, such a connection would match the mTLS chain's
/// transport and then no ALPN: no chain, Envoy would close it).
#[test]
fn inbound_permissive_tcp_ports_pass_the_applications_own_tls_through() {
    let mut mesh = Mesh::new("inbound-permissive-tcp");
    let reviews = reviews_mesh(&mesh, 9080, &["v1"]);
    let ip = reviews.pod_ip("v1");
    write_config(
        &mesh.config,
        "db.yaml",
        &format!(
            "apiVersion: v1
kind: Service
metadata: {{name: reviews-db, namespace: default}}
spec:
  selector: {{app: reviews}}
  ports: [{{name: tcp-db, port: 27017, targetPort: 27017, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-db-1
  namespace: default
  labels: {{kubernetes.io/service-name: reviews-db}}
addressType: IPv4
ports: [{{name: tcp-db, port: 27017, protocol: TCP}}]
endpoints:
- addresses: [{ip}]
  conditions: {{ready: true}}
  targetRef: {{kind: Pod, name: reviews-v1, namespace: default}}
"
        ),
    );
    let proxy = mesh.connect_captured(&ProxyNode::sidecar(
        "reviews-v1",
        "default",
        &ip,
        &[("app", "reviews"), ("version", "v1")],
    ));
    let inbound = "inbound|27017||";
    let o = mesh.send(&proxy, &Call::connect(27017).to_address(&ip).inbound());
    assert_eq!(o.cluster(), Some(inbound), "plaintext: {o:#?}");
    let mtls = Call::connect(27017)
        .to_address(&ip)
        .inbound()
        .istio_mtls("outbound_.27017_._.reviews-db.default.svc.cluster.local");
    let o = mesh.send(&proxy, &mtls);
    assert_eq!(o.filter_chain, Some(format!("{inbound}-mtls")), "{o:#?}");
    let own_tls = Call::tls(27017, "db.example.com").to_address(&ip).inbound();
    let o = mesh.send(&proxy, &own_tls);
    assert_eq!(o.downstream_tls, None, "passed through: {o:#?}");
    assert_eq!(o.cluster(), Some(inbound), "{o:#?}");
}

/// A Gateway's HTTPS servers on one port: a TLS call is taken by the chain of the server
/// whose host its SNI names, which terminates it with the server's `credentialName`
/// (`kubernetes://NAME`), SIMPLE without asking for a client certificate, MUTUAL requiring one
/// verified against `kubernetes://NAME-cacert`; the request inside is routed by the
/// server's route configuration. A plaintext call (no SNI) or an unknown name finds no
/// chain.
#[test]
fn gateway_https_servers_terminate_by_sni_with_their_credentials() {
    use base64::Engine;
    let (mut mesh, reviews, gateway, _) = gateway_setup("gateway-https", &["v1", "v2"]);
    let ca = support::pki::ca("gateway-ca");
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let secret = |name: &str, host: &str| {
        let (cert, key) = support::pki::leaf(&ca, &[host], None);
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: istio-system}}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n  ca.crt: {}\n",
            b64(&cert),
            b64(&key),
            b64(&ca.pem)
        )
    };
    write_config(
        &mesh.config,
        "secrets.yaml",
        &[
            secret("reviews-cert", "reviews.example.com"),
            secret("mtls-cert", "mtls.example.com"),
        ]
        .join("---\n"),
    );
    write_config(
        &mesh.config,
        "https.yaml",
        "apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: https-gateway, namespace: default}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8443, name: https, protocol: HTTPS}
    hosts: [reviews.example.com]
    tls: {mode: SIMPLE, credentialName: reviews-cert}
  - port: {number: 8443, name: https-mtls, protocol: HTTPS}
    hosts: [mtls.example.com]
    tls: {mode: MUTUAL, credentialName: mtls-cert}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: https-reviews, namespace: default}
spec:
  hosts: [reviews.example.com, mtls.example.com]
  gateways: [https-gateway]
  http:
  - match: [{authority: {exact: mtls.example.com}}]
    route: [{destination: {host: reviews, subset: v2, port: {number: 9080}}}]
  - route: [{destination: {host: reviews, subset: v1, port: {number: 9080}}}]
",
    );
    let https = |host: &str| Call::https(host, 8443, "/reviews/1", host).to_address("127.0.0.1");

    let o = mesh.send(&gateway, &https("reviews.example.com"));
    assert_eq!(o.listener.as_deref(), Some("0.0.0.0_8443"), "{o:#?}");
    let t = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("terminated");
    assert_eq!(
        t.certificates,
        [Source::Sds("kubernetes://reviews-cert".into())]
    );
    assert!(
        !t.require_client_certificate && t.validation.is_none(),
        "{t:#?}"
    );
    assert_eq!(t.alpn, ["h2", "http/1.1"]);
    assert_eq!(
        o.route_config.as_deref(),
        Some("https.8443.https.https-gateway.default")
    );
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);

    let o = mesh.send(&gateway, &https("mtls.example.com"));
    let t = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("terminated");
    assert_eq!(
        t.certificates,
        [Source::Sds("kubernetes://mtls-cert".into())]
    );
    assert!(t.require_client_certificate, "{t:#?}");
    assert_eq!(
        t.validation,
        Some(Source::Sds("kubernetes://mtls-cert-cacert".into()))
    );
    assert_ne!(o.filter_chain, None);
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);

    let plaintext = Call::get("reviews.example.com", 8443, "/").to_address("127.0.0.1");
    let o = mesh.send(&gateway, &plaintext);
    assert!(
        matches!(o.result, Err(NoMatch::NoFilterChain { .. })),
        "no SNI, no chain: {o:#?}"
    );
    let o = mesh.send(&gateway, &https("other.example.com"));
    assert!(
        matches!(o.result, Err(NoMatch::NoFilterChain { .. })),
        "{o:#?}"
    );
    mesh.assert_no_errors();
}
