//! Istio's ingress and egress task pages, each fixture served alone with the registry objects
//! it carries (tests/fixtures/tasks/ingress-*.yaml, egress-*.yaml).

use crate::fixtures::TASKS;
use crate::support;
use crate::support::{write_config, ProxyNode};
use crate::{assert_routes_to, assert_status, upstream_tls, Mesh};
use dataflows::model::{MeshConfig, ProxyId, ResourceType};
use dataflows::simulate::{Call, Discovery, NoMatch, Source, Transport};

/// The ingress gateway pod's address in the ingress fixtures.
const INGRESS_GATEWAY_IP: &str = "127.0.2.2";
const HTTPBIN_CLUSTER: &str = "outbound|8000||httpbin.default.svc.cluster.local";

/// A task fixture served alone, with two proxies connected: the ingress gateway of the
/// fixtures' pod (`istio: ingressgateway` in istio-system), with the Service Istio installs
/// for it (ports 80 and 443 to 8080 and 8443, where its servers listen), and a `sleep`
/// sidecar in `default` whose outbound traffic is captured, as an injected pod's is. Nothing
/// is reported.
fn task_mesh(task: &str) -> (Mesh, ProxyId, ProxyId) {
    let mut mesh = Mesh::new(&format!("task-{task}"));
    let fixture = std::fs::read_to_string(format!("{TASKS}/{task}.yaml")).expect("the task");
    write_config(&mesh.config, "task.yaml", &fixture);
    support::tasks::write_ingress_gateway_service(
        &mesh.config,
        "istio-system",
        INGRESS_GATEWAY_IP,
        &support::tasks::ISTIO_INGRESS_PORTS,
    );
    let gateway = mesh.connect(&ProxyNode::router(
        "istio-ingressgateway-6c8f9d7b5-q4x2m",
        "istio-system",
        INGRESS_GATEWAY_IP,
        &[("app", "istio-ingressgateway"), ("istio", "ingressgateway")],
    ));
    let sleep = mesh.connect_captured(&ProxyNode::sidecar(
        "sleep-5d8c7f6b9-z2x4v",
        "default",
        "127.0.2.50",
        &[("app", "sleep")],
    ));
    mesh.sync_clean();
    // The TLS passthrough task's my-nginx Service names no port protocol, as the task's
    // does: MF0026 says so (Istio's analyzer says IST0118). Nothing else is reported.
    let unexpected: Vec<&String> = mesh
        .dataflow_errors
        .keys()
        .filter(|e| {
            !e.starts_with("Service/default/my-nginx: spec.ports: port \"\" (443): neither")
        })
        .collect();
    assert!(unexpected.is_empty(), "{unexpected:?}");
    (mesh, gateway, sleep)
}

/// A call to the ingress gateway's address.
fn to_ingress(call: Call) -> Call {
    call.to_address(INGRESS_GATEWAY_IP)
}

/// The SDS secret `name` as `proxy` holds it.
fn held_secret(
    mesh: &Mesh,
    proxy: &str,
    name: &str,
) -> envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret {
    use prost::Message;
    let snapshot = mesh.held.snapshot();
    let key = snapshot[proxy]
        .keys()
        .find(|k| k.rtype == ResourceType::Secret && k.name == name)
        .unwrap_or_else(|| panic!("{proxy} holds no secret {name}"));
    let body = &mesh.bodies[key].0.body.0;
    envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret::decode(&body[..])
        .expect("a Secret")
}

/// The text of a `DataSource` held inline.
fn inline_text(source: Option<&envoy_types::pb::envoy::config::core::v3::DataSource>) -> String {
    use envoy_types::pb::envoy::config::core::v3::data_source::Specifier;
    match source.and_then(|s| s.specifier.as_ref()) {
        Some(Specifier::InlineBytes(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Specifier::InlineString(s)) => s.clone(),
        other => panic!("not inline: {other:?}"),
    }
}

/// Ingress Gateways: through the gateway's port 80 (the gateway Service's, which the pod
/// listens for on 8080), httpbin.example.com's `/status` and `/delay` reach the httpbin pod
/// (Service port 8000, container port 8080); any other path of that host, and any other
/// host, is answered 404 by the gateway; the pod listens on neither 80 nor 443. The VirtualService is bound
/// to the gateway only: the mesh's own calls to httpbin take the service's default route.
#[test]
fn task_ingress_http() {
    let (mesh, gateway, sleep) = task_mesh("ingress-http");
    let config = mesh.proxy(&gateway);
    let pod = ["127.0.2.10:8080".to_string()];
    for path in ["/status/200", "/delay/1"] {
        let o = config.simulate(&to_ingress(Call::get("httpbin.example.com", 8080, path)));
        assert_eq!(o.listener.as_deref(), Some("0.0.0.0_8080"), "{o:#?}");
        assert_eq!(o.route_config.as_deref(), Some("http.8080"));
        assert_routes_to(&o, HTTPBIN_CLUSTER, &pod);
    }
    let o = config.simulate(&to_ingress(Call::get(
        "httpbin.example.com",
        8080,
        "/headers",
    )));
    assert_eq!(o.result, Err(NoMatch::NoRoute), "{o:#?}");
    assert_status(&o, 404);
    let o = config.simulate(&to_ingress(Call::get(
        "other.example.com",
        8080,
        "/status/200",
    )));
    assert_status(&o, 404);
    for port in [80, 443, 8443] {
        let o = config.simulate(&to_ingress(Call::get(
            "httpbin.example.com",
            port,
            "/status/200",
        )));
        assert_eq!(o.result, Err(NoMatch::NoListener { port }), "{o:#?}");
    }

    let o = mesh
        .proxy(&sleep)
        .simulate(&Call::get("httpbin:8000", 8000, "/headers").to_address("10.96.0.80"));
    assert_routes_to(&o, HTTPBIN_CLUSTER, &pod);
}

/// Secure Gateways (simple TLS): port 443 (8443 on the pod) takes TLS for httpbin.example.com by its SNI and
/// terminates it with `kubernetes://httpbin-credential`, which the gateway holds as the
/// Secret's own certificate and key (the Secret of the gateway's namespace); no client
/// certificate is asked for; the request inside is routed as over HTTP. A plaintext
/// connection or another name finds no filter chain; nothing listens on port 80.
#[test]
fn task_ingress_https() {
    let (mesh, gateway, _) = task_mesh("ingress-https");
    let config = mesh.proxy(&gateway);
    let https = |path: &str| {
        to_ingress(Call::https(
            "httpbin.example.com",
            8443,
            path,
            "httpbin.example.com",
        ))
    };
    let o = config.simulate(&https("/status/418"));
    assert_eq!(o.listener.as_deref(), Some("0.0.0.0_8443"), "{o:#?}");
    let t = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("terminated");
    assert_eq!(
        t.certificates,
        [Source::Sds("kubernetes://httpbin-credential".into())]
    );
    assert!(
        !t.require_client_certificate && t.validation.is_none(),
        "{t:#?}"
    );
    assert_eq!(
        o.route_config.as_deref(),
        Some("https.443.https.mygateway.default")
    );
    assert_routes_to(&o, HTTPBIN_CLUSTER, &["127.0.2.10:8080".into()]);
    let o = config.simulate(&https("/headers"));
    assert_status(&o, 404);

    let fixture = std::fs::read_to_string(format!("{TASKS}/ingress-https.yaml")).expect("read");
    let doc: serde_yaml_ng::Value = meshflow::config::split_documents(&fixture)
        .into_iter()
        .map(|(_, d)| serde_yaml_ng::from_str(&d).expect("YAML"))
        .find(|d: &serde_yaml_ng::Value| d["kind"] == "Secret")
        .expect("the Secret");
    let secret = held_secret(&mesh, &gateway, "kubernetes://httpbin-credential");
    let Some(
        envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::secret::Type::TlsCertificate(
            cert,
        ),
    ) = secret.r#type
    else {
        panic!("not a certificate: {secret:?}")
    };
    let pem = |s: &str| s.trim().to_string();
    assert_eq!(
        pem(&inline_text(cert.certificate_chain.as_ref())),
        pem(doc["stringData"]["tls.crt"].as_str().expect("tls.crt"))
    );
    assert_eq!(
        pem(&inline_text(cert.private_key.as_ref())),
        pem(doc["stringData"]["tls.key"].as_str().expect("tls.key"))
    );

    for call in [
        to_ingress(Call::get("httpbin.example.com", 8443, "/status/200")),
        to_ingress(Call::https(
            "other.example.com",
            8443,
            "/",
            "other.example.com",
        )),
    ] {
        let o = config.simulate(&call);
        assert!(
            matches!(o.result, Err(NoMatch::NoFilterChain { .. })),
            "{call:?}: {o:#?}"
        );
    }
    for port in [80, 8080] {
        let o = config.simulate(&to_ingress(Call::get("httpbin.example.com", port, "/")));
        assert_eq!(o.result, Err(NoMatch::NoListener { port }), "{o:#?}");
    }
}

/// Secure Gateways (mutual TLS): the same server now requires a client certificate, verified
/// against `kubernetes://httpbin-credential-cacert`, which the gateway holds as the Secret's
/// `ca.crt`; the request inside is routed as before.
#[test]
fn task_ingress_https_mutual() {
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::secret::Type;
    let (mesh, gateway, _) = task_mesh("ingress-https-mutual");
    let config = mesh.proxy(&gateway);
    let o = config.simulate(&to_ingress(Call::https(
        "httpbin.example.com",
        8443,
        "/status/200",
        "httpbin.example.com",
    )));
    let t = o
        .downstream_tls
        .as_ref()
        .and_then(Transport::tls)
        .expect("terminated");
    assert_eq!(
        t.certificates,
        [Source::Sds("kubernetes://httpbin-credential".into())]
    );
    assert!(t.require_client_certificate, "{t:#?}");
    assert_eq!(
        t.validation,
        Some(Source::Sds("kubernetes://httpbin-credential-cacert".into()))
    );
    assert_routes_to(&o, HTTPBIN_CLUSTER, &["127.0.2.10:8080".into()]);

    let fixture =
        std::fs::read_to_string(format!("{TASKS}/ingress-https-mutual.yaml")).expect("read");
    let doc: serde_yaml_ng::Value = meshflow::config::split_documents(&fixture)
        .into_iter()
        .map(|(_, d)| serde_yaml_ng::from_str(&d).expect("YAML"))
        .find(|d: &serde_yaml_ng::Value| d["metadata"]["name"] == "httpbin-credential")
        .expect("the Secret");
    let secret = held_secret(&mesh, &gateway, "kubernetes://httpbin-credential-cacert");
    let Some(Type::ValidationContext(ca)) = secret.r#type else {
        panic!("not a validation context: {secret:?}")
    };
    assert_eq!(
        inline_text(ca.trusted_ca.as_ref()).trim(),
        doc["stringData"]["ca.crt"].as_str().expect("ca.crt").trim()
    );
}

/// Ingress Gateway without TLS Termination: a TLS connection to port 443 (8443 on the pod) naming
/// nginx.example.com is passed through, not terminated, to the my-nginx pod's port 443; a
/// connection naming another host, or without TLS, finds no filter chain.
#[test]
fn task_ingress_tls_passthrough() {
    let (mesh, gateway, _) = task_mesh("ingress-tls-passthrough");
    let config = mesh.proxy(&gateway);
    let o = config.simulate(&to_ingress(Call::tls(8443, "nginx.example.com")));
    assert_eq!(o.listener.as_deref(), Some("0.0.0.0_8443"), "{o:#?}");
    assert_eq!(o.downstream_tls, None, "passed through, not terminated");
    assert!(
        matches!(o.result, Ok(dataflows::simulate::Action::Tcp { .. })),
        "{o:#?}"
    );
    assert_routes_to(
        &o,
        "outbound|443||my-nginx.default.svc.cluster.local",
        &["127.0.2.30:443".into()],
    );
    // The pod runs no sidecar: auto mTLS leaves the client's own TLS as it is.
    let up = &o.upstreams()[0];
    assert!(
        up.transports()
            .iter()
            .all(|(_, t)| **t == Transport::Plaintext),
        "{up:#?}"
    );
    for call in [
        to_ingress(Call::tls(8443, "other.example.com")),
        to_ingress(Call::connect(8443)),
    ] {
        let o = config.simulate(&call);
        assert!(
            matches!(o.result, Err(NoMatch::NoFilterChain { .. })),
            "{call:?}: {o:#?}"
        );
    }
}

/// Accessing External Services (controlled access): under the mesh config's REGISTRY_ONLY,
/// the captured `sleep` sidecar sends http://httpbin.org to the entry's DNS cluster (Envoy
/// resolves httpbin.org, port 80) with the VirtualService's 3 s timeout, and TLS naming
/// www.google.com to that entry's cluster; a host without an entry is refused (502 for HTTP,
/// the black hole for TLS), where ALLOW_ANY lets it pass through.
#[test]
fn task_egress_service_entry() {
    use meshflow::config::mesh::{mesh_config_key, MeshOverrides};
    use meshflow::sources::mesh::MeshState;
    let (mut mesh, _, sleep) = task_mesh("egress-service-entry");
    let external = "203.0.113.10";
    let httpbin = Call::get("httpbin.org", 80, "/delay/5").to_address(external);
    let google = Call::tls(443, "www.google.com").to_address(external);
    let cnn_http = Call::get("edition.cnn.com", 80, "/").to_address(external);
    let cnn_tls = Call::tls(443, "edition.cnn.com").to_address(external);

    // Istio's default, ALLOW_ANY: what no entry names passes through.
    let o = mesh.send(&sleep, &cnn_http);
    assert_eq!(o.cluster(), Some("PassthroughCluster"), "{o:#?}");

    let mut state = MeshState::new(
        MeshConfig::default(),
        MeshOverrides::default(),
        mesh_config_key("", "mesh"),
        "mesh.yaml".into(),
        "files",
    );
    let report = state
        .update("outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n", None)
        .expect("a new config");
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    mesh.step(report.changes);

    let o = mesh.send(&sleep, &httpbin);
    assert_eq!(o.cluster(), Some("outbound|80||httpbin.org"), "{o:#?}");
    assert_eq!(o.upstreams()[0].discovery, Discovery::StrictDns);
    assert_eq!(o.endpoints(), ["httpbin.org:80"]);
    match &o.result {
        Ok(dataflows::simulate::Action::Route { timeout, .. }) => {
            assert_eq!(*timeout, Some(std::time::Duration::from_secs(3)))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(upstream_tls(&o, "outbound|80||httpbin.org"), None);

    let o = mesh.send(&sleep, &google);
    assert_eq!(o.cluster(), Some("outbound|443||www.google.com"), "{o:#?}");
    assert_eq!(o.endpoints(), ["www.google.com:443"]);
    assert_eq!(
        upstream_tls(&o, "outbound|443||www.google.com"),
        None,
        "the application's own TLS passes through"
    );

    assert_status(&mesh.send(&sleep, &cnn_http), 502);
    let o = mesh.send(&sleep, &cnn_tls);
    assert_eq!(o.cluster(), Some("BlackHoleCluster"), "{o:#?}");
    mesh.assert_no_errors();
}

/// Egress TLS Origination: the application's plain HTTP to edition.cnn.com:80 leaves its
/// sidecar as TLS to the host's port 443 (the entry's `targetPort`), with the request's host
/// as SNI and as the name the certificate must carry, verified against the system CA bundle;
/// HTTPS from the application to port 443 passes through as it is.
#[test]
fn task_egress_tls_origination() {
    let (mut mesh, _, sleep) = task_mesh("egress-tls-origination");
    let external = "203.0.113.20";
    let o = mesh.send(
        &sleep,
        &Call::get("edition.cnn.com", 80, "/politics").to_address(external),
    );
    let cluster = "outbound|80||edition.cnn.com";
    assert_eq!(o.cluster(), Some(cluster), "{o:#?}");
    assert_eq!(o.endpoints(), ["edition.cnn.com:443"], "the targetPort");
    let t = upstream_tls(&o, cluster).expect("TLS originated");
    assert!(t.auto_sni && t.auto_san_validation, "{t:#?}");
    assert_eq!(t.sni, None, "the SNI is the request's host");
    assert_eq!(
        t.validation,
        Some(Source::File("/etc/ssl/certs/ca-certificates.crt".into()))
    );
    assert!(t.certificates.is_empty(), "SIMPLE: no client certificate");
    assert_eq!(
        o.http.as_ref().map(|h| h.upstream_authority.as_str()),
        Some("edition.cnn.com"),
        "the host auto SNI takes"
    );

    let o = mesh.send(
        &sleep,
        &Call::tls(443, "edition.cnn.com").to_address(external),
    );
    let cluster = "outbound|443||edition.cnn.com";
    assert_eq!(o.cluster(), Some(cluster), "{o:#?}");
    assert!(
        matches!(o.result, Ok(dataflows::simulate::Action::Tcp { .. })),
        "{o:#?}"
    );
    assert_eq!(upstream_tls(&o, cluster), None, "not originated twice");
    assert_eq!(o.endpoints(), ["edition.cnn.com:443"]);
    mesh.assert_no_errors();
}
