//! Tests of outbound clusters' upstream TLS: `ISTIO_MUTUAL`, `SIMPLE`/`MUTUAL` from files
//! or a `credentialName`, auto SNI, and failing closed for proxyless gRPC clients.

use super::tests::{ports, reviews, rule};
use super::*;
use crate::model::{ConfigKey, ConnectionPool, DnsEndpoint, Kind, Protocol, UpstreamTls};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    common_tls_context::ValidationContextType, tls_parameters::TlsProtocol, UpstreamTlsContext,
};
/// The clusters' TLS contexts by name (`None`: no transport socket).
fn contexts(dr: &DestinationRule, grpc: bool) -> Vec<TlsOf> {
    contexts_of(&reviews(), dr, grpc)
}

type TlsOf = (
    String,
    Option<UpstreamTlsContext>,
    Option<ClusterLoadAssignment>,
);

fn contexts_of(
    service: &Service,
    dr: &DestinationRule,
    grpc: bool,
) -> Vec<(
    String,
    Option<UpstreamTlsContext>,
    Option<ClusterLoadAssignment>,
)> {
    let defaults = ClusterDefaults {
        connect_timeout_ms: 1000,
        trust_domain: "corp.example".into(),
        locality_lb: None,
        system_ca_bundle: "/etc/proxy/ca-bundle.pem".into(),
        gateway: false,
        auto_mtls: true,
    };
    outbound_all_for(service, Some(dr), grpc, &defaults)
        .into_iter()
        .map(|(r, _, _)| {
            let c = Cluster::decode(&*r.body.0).unwrap();
            let tls = c.transport_socket.and_then(|t| match t.config_type {
                Some(envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType::TypedConfig(a)) => {
                    Some(UpstreamTlsContext::decode(&*a.value).unwrap())
                }
                None => None,
            });
            (c.name, tls, c.load_assignment)
        })
        .collect()
}

#[test]
fn istio_mutual_uses_the_workload_certificate_and_istio_sni() {
    let dr = rule(UpstreamTls {
        istio_mutual: true,
        ..Default::default()
    });
    let got = contexts(&dr, false);
    assert_eq!(got.len(), 2);
    for (name, tls, _) in &got {
        let tls = tls.as_ref().expect("a TLS context");
        let subset = if name.contains("|v1|") { "v1" } else { "" };
        assert_eq!(
            tls.sni,
            format!("outbound_.9080_.{subset}_.reviews.default.svc.cluster.local")
        );
        let common = tls.common_tls_context.as_ref().unwrap();
        assert_eq!(common.alpn_protocols, vec!["istio-peer-exchange", "istio"]);
        assert_eq!(common.tls_certificate_sds_secret_configs[0].name, "default");
        let Some(ValidationContextType::CombinedValidationContext(v)) =
            &common.validation_context_type
        else {
            panic!("a combined validation context: {common:?}");
        };
        assert_eq!(
            v.validation_context_sds_secret_config
                .as_ref()
                .unwrap()
                .name,
            "ROOTCA"
        );
        // No names of its own: any identity of the trust domain.
        let sans = &v
            .default_validation_context
            .as_ref()
            .unwrap()
            .match_typed_subject_alt_names;
        assert_eq!(sans.len(), 1);
        assert!(
            format!("{sans:?}").contains("spiffe://corp.example/"),
            "{sans:?}"
        );
    }
    // The rule's own names and SNI win.
    let dr = rule(UpstreamTls {
        istio_mutual: true,
        sni: Some("r.example".into()),
        subject_alt_names: vec!["spiffe://corp.example/ns/default/sa/reviews".into()],
        ..Default::default()
    });
    let (_, tls, _) = &contexts(&dr, false)[0];
    let tls = tls.as_ref().unwrap();
    assert_eq!(tls.sni, "r.example");
    assert!(format!("{tls:?}").contains("sa/reviews"));
    assert!(!format!("{tls:?}").contains("Prefix"));
}

/// Without names of its own, the rule pins the server to the service's identities: its
/// endpoints' accounts, a ServiceEntry's `subjectAltNames`, its DNS endpoints' accounts.
#[test]
fn istio_mutual_pins_servers_to_the_services_identities() {
    let dr = rule(UpstreamTls {
        istio_mutual: true,
        ..Default::default()
    });
    let mut svc = reviews().with_identities(&[
        "spiffe://corp.example/ns/default/sa/reviews".to_string(),
        "spiffe://other.example/ns/x/sa/y".to_string(),
    ]);
    svc.dns_endpoints.push(DnsEndpoint {
        address: "reviews.example".into(),
        ports: Default::default(),
        labels: Default::default(),
        placement: Default::default(),
        service_account: Some("dns".into()),
    });
    for (_, tls, _) in contexts_of(&svc, &dr, false) {
        let sans = format!("{tls:?}");
        for id in [
            "spiffe://corp.example/ns/default/sa/reviews",
            "spiffe://other.example/ns/x/sa/y",
            "spiffe://corp.example/ns/default/sa/dns",
        ] {
            assert!(sans.contains(&format!("Exact(\"{id}\")")), "{id}: {sans}");
        }
        assert!(!sans.contains("Prefix"), "no trust-domain prefix: {sans}");
    }
}

/// A proxyless gRPC client cannot use SDS certificates: no transport socket, no hosts.
#[test]
fn istio_mutual_fails_closed_for_proxyless_clients() {
    let dr = rule(UpstreamTls {
        istio_mutual: true,
        ..Default::default()
    });
    for (name, tls, assignment) in contexts(&dr, true) {
        assert!(tls.is_none(), "{name}");
        let a = assignment.expect("a static assignment");
        assert!(a.endpoints.is_empty(), "{name}");
    }
}

/// The clusters of `svc` under `dr`, decoded, with the system bundle of
/// [`contexts_of`].
fn decoded(svc: &Service, dr: &DestinationRule, grpc: bool) -> Vec<Cluster> {
    let defaults = ClusterDefaults {
        system_ca_bundle: "/etc/proxy/ca-bundle.pem".into(),
        ..Default::default()
    };
    outbound_all_for(svc, Some(dr), grpc, &defaults)
        .into_iter()
        .map(|(r, _, _)| Cluster::decode(&*r.body.0).unwrap())
        .collect()
}

fn tls_of(c: &Cluster) -> UpstreamTlsContext {
    use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
    match c
        .transport_socket
        .as_ref()
        .and_then(|t| t.config_type.as_ref())
    {
        Some(ConfigType::TypedConfig(a)) => UpstreamTlsContext::decode(&*a.value).unwrap(),
        other => panic!("{}: no TLS context: {other:?}", c.name),
    }
}

fn options_of(c: &Cluster) -> Option<HttpProtocolOptions> {
    c.typed_extension_protocol_options
        .get("envoy.extensions.upstreams.http.v3.HttpProtocolOptions")
        .map(|a| HttpProtocolOptions::decode(&*a.value).unwrap())
}

/// `(auto_sni, auto_san_validation)` of the cluster's upstream HTTP options.
fn auto(c: &Cluster) -> Option<(bool, bool)> {
    let o = options_of(c)?.upstream_http_protocol_options?;
    Some((o.auto_sni, o.auto_san_validation))
}

fn validation(
    t: &UpstreamTlsContext,
) -> Option<
    &envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::CertificateValidationContext,
> {
    match &t.common_tls_context.as_ref()?.validation_context_type {
        Some(ValidationContextType::ValidationContext(v)) => Some(v),
        Some(ValidationContextType::CombinedValidationContext(v)) => {
            v.default_validation_context.as_ref()
        }
        _ => None,
    }
}

/// The CA file the cluster verifies its server against: the file of its `file-root:` SDS
/// secret (files come over SDS, so that a missing one holds up this cluster alone).
fn trusted_file(t: &UpstreamTlsContext) -> Option<String> {
    match &t.common_tls_context.as_ref()?.validation_context_type {
        Some(ValidationContextType::CombinedValidationContext(v)) => {
            let name = &v.validation_context_sds_secret_config.as_ref()?.name;
            let rest = name.strip_prefix("file-root:")?;
            Some(rest.split_once('~').map_or(rest, |(ca, _)| ca).to_string())
        }
        _ => None,
    }
}

/// SIMPLE without `caCertificates` verifies against the proxy's system bundle (a file
/// Envoy reads: Envoy does not implement `system_root_certs`), with Istio's TLS
/// versions, auto SNI and auto SAN validation; `caCertificates` replaces the bundle.
#[test]
fn simple_tls_without_a_ca_verifies_against_the_system_bundle() {
    let dr = rule(UpstreamTls::default());
    let clusters = decoded(&reviews(), &dr, false);
    assert_eq!(clusters.len(), 2);
    for c in &clusters {
        let t = tls_of(c);
        assert_eq!(
            trusted_file(&t).as_deref(),
            Some("/etc/proxy/ca-bundle.pem"),
            "{}",
            c.name
        );
        let v = validation(&t).unwrap();
        assert!(v.system_root_certs.is_none(), "{v:?}");
        assert!(v.match_typed_subject_alt_names.is_empty());
        let common = t.common_tls_context.as_ref().unwrap();
        let params = common.tls_params.as_ref().expect("TLS parameters");
        assert_eq!(
            params.tls_minimum_protocol_version,
            TlsProtocol::TlSv12 as i32
        );
        assert_eq!(
            params.tls_maximum_protocol_version,
            TlsProtocol::TlSv13 as i32
        );
        // An HTTP/1.1 cluster offers no ALPN; the SNI comes from each request.
        assert!(common.alpn_protocols.is_empty());
        assert_eq!(t.sni, "");
        assert_eq!(auto(c), Some((true, true)), "{}", c.name);
        // Envoy requires a protocol beside the upstream options: HTTP/1.1.
        let o = options_of(c).unwrap();
        assert!(
            matches!(
                o.upstream_protocol_options,
                Some(UpstreamProtocolOptions::ExplicitHttpConfig(
                    ExplicitHttpConfig {
                        protocol_config: Some(ProtocolConfig::HttpProtocolOptions(_))
                    }
                ))
            ),
            "{o:?}"
        );
    }
    let dr = rule(UpstreamTls {
        ca: Some("/etc/certs/ca.pem".into()),
        ..Default::default()
    });
    let c = &decoded(&reviews(), &dr, false)[0];
    assert_eq!(
        trusted_file(&tls_of(c)).as_deref(),
        Some("/etc/certs/ca.pem")
    );
}

/// Istio's auto SNI and SAN validation: an `sni` turns both off; `subjectAltNames` or
/// `insecureSkipVerify` turn SAN validation off (the names given are checked, or none).
#[test]
fn sni_and_names_decide_auto_sni_and_san_validation() {
    let with = |tls: UpstreamTls| {
        let c = decoded(&reviews(), &rule(tls), false).remove(0);
        (tls_of(&c), auto(&c))
    };
    let (t, a) = with(UpstreamTls {
        sni: Some("reviews.example".into()),
        ..Default::default()
    });
    assert_eq!((t.sni.as_str(), a), ("reviews.example", None));
    let (t, a) = with(UpstreamTls {
        subject_alt_names: vec!["reviews.example".into()],
        ..Default::default()
    });
    assert_eq!(a, Some((true, false)));
    assert!(format!("{:?}", validation(&t)).contains("reviews.example"));
    let (t, a) = with(UpstreamTls {
        insecure_skip_verify: true,
        ..Default::default()
    });
    assert_eq!(a, Some((true, false)));
    assert!(validation(&t).is_none(), "nothing verified: {t:?}");
    // MUTUAL from files: the client certificate, the same verification.
    let (t, a) = with(UpstreamTls {
        client_cert: Some(("/c.pem".into(), "/k.pem".into())),
        mutual: true,
        ..Default::default()
    });
    assert_eq!(a, Some((true, true)));
    assert_eq!(
        trusted_file(&t).as_deref(),
        Some("/etc/proxy/ca-bundle.pem")
    );
    let certs = t
        .common_tls_context
        .unwrap()
        .tls_certificate_sds_secret_configs;
    assert_eq!(certs.len(), 1);
    assert_eq!(certs[0].name, "file-cert:/c.pem~/k.pem");
}

/// ALPN `h2` where the cluster speaks HTTP/2 by its explicit options, none where it
/// speaks the request's protocol.
#[test]
fn http2_clusters_offer_h2_by_alpn() {
    let svc = ports(&[(9090, Protocol::Grpc), (80, Protocol::Http)]);
    let dr = DestinationRule {
        subsets: Vec::new(),
        ..rule(UpstreamTls::default())
    };
    let alpn: Vec<(String, Vec<String>)> = decoded(&svc, &dr, false)
        .iter()
        .map(|c| {
            let t = tls_of(c);
            (c.name.clone(), t.common_tls_context.unwrap().alpn_protocols)
        })
        .collect();
    assert_eq!(
        alpn,
        vec![
            (
                "outbound|9090||reviews.default.svc.cluster.local".to_string(),
                vec!["h2".to_string()]
            ),
            (
                "outbound|80||reviews.default.svc.cluster.local".to_string(),
                Vec::new()
            ),
        ]
    );
    let mut dr = dr;
    if let Some(p) = dr.traffic_policy.as_mut() {
        p.connection_pool = Some(Box::new(ConnectionPool {
            use_client_protocol: true,
            ..Default::default()
        }));
    }
    for c in decoded(&svc, &dr, false) {
        let t = tls_of(&c);
        assert!(t.common_tls_context.unwrap().alpn_protocols.is_empty());
        assert_eq!(auto(&c), Some((true, true)), "{}", c.name);
    }
}

/// A ServiceEntry's names (and its endpoints' identities) hold the server where the
/// rule names none, as Istio takes an external service's accounts; auto SAN validation
/// is still decided on the rule's own names. A Kubernetes Service lends none.
#[test]
fn a_service_entrys_names_verify_the_server_where_the_rule_gives_none() {
    let mut entry = reviews();
    entry.origin = ConfigKey::new(Kind::ServiceEntry, "default", "reviews");
    entry.subject_alt_names = vec!["api.example.com".into()];
    let sans = |svc: &Service, tls: UpstreamTls| {
        let c = decoded(svc, &rule(tls), false).remove(0);
        (format!("{:?}", validation(&tls_of(&c))), auto(&c))
    };
    let (v, a) = sans(&entry, UpstreamTls::default());
    assert!(v.contains("api.example.com"), "{v}");
    assert_eq!(a, Some((true, true)));
    let (v, _) = sans(
        &reviews().with_identities(&["api.example.com".into()]),
        UpstreamTls::default(),
    );
    assert!(!v.contains("api.example.com"), "{v}");
    let (v, a) = sans(
        &entry,
        UpstreamTls {
            subject_alt_names: vec!["other.example.com".into()],
            ..Default::default()
        },
    );
    assert!(v.contains("other.example.com") && !v.contains("api.example.com"));
    assert_eq!(a, Some((true, false)));
}

/// `credentialName` origination takes Istio's TLS versions, ALPN and auto SNI too.
#[test]
fn credential_tls_takes_istios_parameters() {
    let svc = ports(&[(9090, Protocol::Http2)]);
    let dr = DestinationRule {
        subsets: Vec::new(),
        ..rule(UpstreamTls {
            credential: Some("client".into()),
            mutual: true,
            ..Default::default()
        })
    };
    let secret = crate::model::TlsSecret {
        key: ConfigKey::new(Kind::Secret, "default", "client"),
        identity: Some(crate::model::TlsIdentity {
            cert_chain: "CERT".into(),
            private_key: "KEY".into(),
            fingerprint: "fp".into(),
        }),
        ca: Some("CA".into()),
        problem: None,
    };
    let list = [&secret];
    let secrets = ClientSecrets {
        namespace: "default",
        secrets: &list,
    };
    let (r, _, _) =
        outbound_all_with(&svc, Some(&dr), false, &ClusterDefaults::default(), secrets).remove(0);
    let c = Cluster::decode(&*r.body.0).unwrap();
    let t = tls_of(&c);
    let common = t.common_tls_context.as_ref().unwrap();
    assert_eq!(common.alpn_protocols, vec!["h2"]);
    assert_eq!(
        common
            .tls_params
            .as_ref()
            .unwrap()
            .tls_minimum_protocol_version,
        TlsProtocol::TlSv12 as i32
    );
    assert_eq!(
        common.tls_certificate_sds_secret_configs[0].name,
        "kubernetes://client"
    );
    assert_eq!(auto(&c), Some((true, true)));
}

/// A proxyless gRPC client cannot verify with files (nor take SDS): SIMPLE and MUTUAL
/// clusters fail closed there (the rule's error, which names the field, is
/// `client_tls`'s `simple_and_mutual_are_errors_for_proxyless_clients`).
#[test]
fn simple_and_mutual_fail_closed_for_proxyless_clients() {
    for tls in [
        UpstreamTls {
            field: "spec.trafficPolicy.tls".into(),
            ..Default::default()
        },
        UpstreamTls {
            client_cert: Some(("/c.pem".into(), "/k.pem".into())),
            mutual: true,
            field: "spec.trafficPolicy.tls".into(),
            ..Default::default()
        },
    ] {
        let dr = rule(tls);
        for (name, tls, assignment) in contexts(&dr, true) {
            assert!(tls.is_none(), "{name}");
            assert!(assignment
                .expect("a static assignment")
                .endpoints
                .is_empty());
        }
    }
}

/// Certificate files come over SDS as Istio names them, and the secrets a cluster names are
/// derived from it: `file-cert:CERT~KEY` (the client certificate), `file-root:CA~CRL` (the
/// CA and CRL), each pointing at the proxy's own files; a cluster naming none has none.
#[test]
fn certificate_files_are_sds_secrets_of_their_own() {
    use crate::model::{Resource, ResourceType};
    use crate::translate::secret::file_secrets;
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{secret, Secret};
    use prost::Message;
    let tls = UpstreamTls {
        client_cert: Some(("/c.pem".into(), "/k.pem".into())),
        ca: Some("/ca.pem".into()),
        crl: Some("/crl.pem".into()),
        mutual: true,
        ..Default::default()
    };
    let cluster = Cluster {
        name: "outbound|443||db.example".into(),
        transport_socket: Some(super::upstream_tls(&tls, &[], false, "/sys.pem")),
        ..Default::default()
    };
    let r = Resource::new(
        ResourceType::Cluster,
        cluster.name.clone(),
        cluster.encode_to_vec(),
    );
    let secrets: Vec<(String, String)> = file_secrets(&r)
        .into_iter()
        .map(|s| {
            assert_eq!(s.rtype, ResourceType::Secret);
            let body = Secret::decode(&s.body.0[..]).expect("a secret");
            let files = match body.r#type.expect("a type") {
                secret::Type::TlsCertificate(c) => {
                    format!("{:?}{:?}", c.certificate_chain, c.private_key)
                }
                secret::Type::ValidationContext(v) => format!("{:?}{:?}", v.trusted_ca, v.crl),
                other => panic!("{other:?}"),
            };
            (s.name, files)
        })
        .collect();
    assert_eq!(secrets.len(), 2, "{secrets:?}");
    assert_eq!(secrets[0].0, "file-cert:/c.pem~/k.pem");
    assert!(secrets[0].1.contains("/c.pem") && secrets[0].1.contains("/k.pem"));
    assert_eq!(secrets[1].0, "file-root:/ca.pem~/crl.pem");
    assert!(secrets[1].1.contains("/ca.pem") && secrets[1].1.contains("/crl.pem"));
    let plain = Cluster {
        name: "outbound|80||db.example".into(),
        ..Default::default()
    };
    let r = Resource::new(
        ResourceType::Cluster,
        plain.name.clone(),
        plain.encode_to_vec(),
    );
    assert!(file_secrets(&r).is_empty());
}

/// A BackendTLSPolicy's TLS: its CA inline (the proxy has no file of it), its hostname as
/// SNI and the names it verifies; one without a usable CA fails closed (no endpoints, no
/// assignment), never plaintext.
#[test]
fn backend_tls_policy_tls_is_inline_or_fails_closed() {
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let dr = rule(UpstreamTls {
        sni: Some("abc.example.com".into()),
        subject_alt_names: vec!["abc.example.com".into()],
        ca_pem: Some(pem.into()),
        field: "spec.validation".into(),
        ..Default::default()
    });
    let got = contexts(&dr, false);
    let (_, tls, _) = got
        .iter()
        .find(|(n, _, _)| n == "outbound|9080||reviews.default.svc.cluster.local")
        .expect("the service's cluster");
    let tls = tls.as_ref().expect("TLS");
    assert_eq!(tls.sni, "abc.example.com");
    let common = tls.common_tls_context.as_ref().expect("a common context");
    let Some(ValidationContextType::ValidationContext(v)) = &common.validation_context_type else {
        panic!("an inline validation context: {common:?}");
    };
    assert!(format!("{:?}", v.trusted_ca).contains("MIIB"), "{v:?}");
    assert!(format!("{:?}", v.match_typed_subject_alt_names).contains("abc.example.com"));

    let dr = rule(UpstreamTls {
        sni: Some("abc.example.com".into()),
        unusable: Some("BackendTLSPolicy default/p: no CA".into()),
        ..Default::default()
    });
    for (name, _, assignment) in contexts(&dr, false) {
        let endpoints = assignment.map(|a| a.endpoints.len()).unwrap_or(0);
        assert_eq!(endpoints, 0, "{name} fails closed");
    }
}
