//! Random Gateways: HTTP (and sometimes TCP) servers, and now and then a TLS server of any
//! mode, terminating or passing through.

use crate::records::pick;
use crate::support::labels;
use dataflows::model::*;
use rand::rngs::StdRng;
use rand::Rng;

pub fn gateway(rng: &mut StdRng, extra: &mut StdRng) -> Record {
    let tls_server = rng.random_bool(0.6).then(|| tls_server(rng, extra));
    Record::Gateway(Gateway {
        key: ConfigKey::new(Kind::Gateway, pick(rng, &["default", "istio-system"]), "gw"),
        selector: labels(&[("istio", "ingressgateway")]),
        servers: std::iter::once(Protocol::Http)
            .chain(rng.random_bool(0.5).then_some(Protocol::Tcp))
            .map(|protocol| GatewayServer {
                port: pick(rng, &[8080u16, 8081, 3306]).to_owned(),
                port_name: "http".into(),
                protocol,
                bind: None,
                hosts: vec![pick(rng, &["*/*", "./*", "default/*"]).to_string()],
                https_redirect: protocol == Protocol::Http && rng.random_bool(0.3),
                tls: None,
                field: String::new(),
            })
            .chain(tls_server)
            .collect(),
        same_namespace: false,
    })
}

/// A TLS server: terminating with a Secret (SIMPLE or MUTUAL) or passthrough.
fn tls_server(rng: &mut StdRng, extra: &mut StdRng) -> GatewayServer {
    let mode = pick(
        rng,
        &[
            ServerTlsMode::Simple,
            ServerTlsMode::Mutual,
            ServerTlsMode::OptionalMutual,
            ServerTlsMode::Passthrough,
        ],
    );
    // Later: the gateway's workload certificate.
    let mode = if extra.random_bool(0.2) {
        ServerTlsMode::IstioMutual
    } else {
        mode
    };
    // Now and then: passing through to the cluster the SNI names.
    let mode = if extra.random_bool(0.15) {
        ServerTlsMode::AutoPassthrough
    } else {
        mode
    };
    GatewayServer {
        port: pick(rng, &[8443u16, 8444]),
        port_name: "https".into(),
        protocol: Protocol::Tls,
        bind: None,
        hosts: vec![pick(rng, &["*/*", "./*", "default/*"]).to_string()],
        https_redirect: false,
        tls: Some(Box::new(ServerTls {
            mode,
            credential: (mode != ServerTlsMode::Passthrough)
                .then(|| Credential::Secret(pick(rng, &["cred", "other"]).into()))
                .filter(|_| {
                    !matches!(
                        mode,
                        ServerTlsMode::IstioMutual | ServerTlsMode::AutoPassthrough
                    )
                }),
            min_version: None,
            max_version: None,
            cipher_suites: vec![],
            subject_alt_names: vec![],
            // A TLS server that terminates: routed by `tcp[]` routes.
            tcp: !matches!(
                mode,
                ServerTlsMode::Passthrough | ServerTlsMode::AutoPassthrough
            ) && extra.random_bool(0.4),
            misdirected: Vec::new(),
            sni_routes: false,
            client_ca: None,
        })),
        field: "spec.servers[2]".into(),
    }
}
