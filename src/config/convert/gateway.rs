//! A Gateway: its servers with their ports, hosts and TLS. A server's `tls` is read here for
//! a Sidecar ingress listener too.

use super::fields::{port_u16, report_ignored, server_protocol, spec};
use super::Result;
use crate::config::findings::Finding;
use crate::config::{istio, Invalid};
use dataflows::model::{self as m, ConfigKey, Record};
use serde_yaml_ng::Value;

pub(super) fn gateway(
    key: &ConfigKey,
    value: &Value,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (istio::GatewaySpec, _) = spec(value)?;
    // An unread field of a server's `tls` changes which certificates are accepted: the
    // server is not generated rather than served without it.
    let mut closed: Vec<usize> = Vec::new();
    report_ignored(&ignored, findings, |p| {
        let i = p.index_under("servers")?;
        (p.key_at(2) == Some("tls")).then(|| {
            closed.push(i);
            Finding::error(
                p.to_string(),
                format!(
                    "not supported by meshflow yet; no filter chain is generated for \
                     spec.servers[{i}]"
                ),
            )
        })
    });
    if s.selector.is_empty() {
        return Err(Invalid::field(
            "spec.selector",
            "a Gateway must select its gateway pods by label",
        ));
    }
    let mut servers = Vec::new();
    let mut fields = Vec::new();
    for (i, srv) in s.servers.iter().enumerate() {
        let f = format!("spec.servers[{i}]");
        let Some(port) = &srv.port else {
            return Err(Invalid::field(format!("{f}.port"), "a server needs a port"));
        };
        if srv.hosts.is_empty() {
            return Err(Invalid::field(
                format!("{f}.hosts"),
                "a server needs at least one host",
            ));
        }
        if let Some(b) = &srv.bind {
            if b.parse::<std::net::IpAddr>().is_err() {
                return Err(Invalid::field(
                    format!("{f}.bind"),
                    format!("{b:?} is not an IP address"),
                ));
            }
        }
        let number = port_u16(port.number, &format!("{f}.port.number"))?;
        let protocol = port.protocol.to_ascii_uppercase();
        let plain = matches!(
            protocol.as_str(),
            "HTTP" | "HTTP2" | "GRPC" | "TCP" | "MONGO" | "MYSQL" | "REDIS"
        );
        let tls_protocol = matches!(protocol.as_str(), "HTTPS" | "TLS");
        if !plain && !tls_protocol {
            findings.push(Finding::error(
                f.clone(),
                format!(
                    "a {protocol} server is not supported by meshflow yet; no listener is \
                     generated for it (port {number})"
                ),
            ));
            continue;
        }
        // Not generated: its tls names what meshflow cannot honour, which may also be what
        // completes it (`tlsCertificates` in place of `serverCertificate`).
        if closed.contains(&i) {
            continue;
        }
        let mut https_redirect = false;
        let mut tls = None;
        // Hosts left out of the server (a condition it cannot honour), by index.
        let mut left_out: Vec<usize> = Vec::new();
        match (&srv.tls, tls_protocol) {
            (None, true) => {
                return Err(Invalid::field(
                    format!("{f}.tls"),
                    "HTTPS and TLS servers need tls settings",
                ))
            }
            (Some(t), true) => {
                let Some((st, hosts_left_out)) =
                    secure_server_tls(srv, t, &f, &protocol, number, findings)?
                else {
                    continue;
                };
                left_out = hosts_left_out;
                tls = Some(Box::new(st));
            }
            (Some(t), false) => {
                https_redirect = t.https_redirect;
                if !https_redirect || !srv_is_http(&protocol) {
                    findings.push(Finding::error(
                        format!("{f}.tls"),
                        format!(
                            "a {protocol} server with tls (other than httpsRedirect on HTTP) is \
                             not supported by meshflow yet; no listener is generated for it \
                             (port {number})"
                        ),
                    ));
                    continue;
                }
            }
            (None, false) => {}
        }
        servers.push(m::GatewayServer {
            port: number,
            port_name: port.name.clone(),
            protocol: server_protocol(&port.protocol),
            bind: srv.bind.clone(),
            hosts: srv
                .hosts
                .iter()
                .enumerate()
                .filter(|(hi, _)| !left_out.contains(hi))
                .map(|(_, h)| {
                    if h.contains('/') {
                        h.clone()
                    } else {
                        format!("*/{h}")
                    }
                })
                .collect(),
            https_redirect,
            tls,
            field: f.clone(),
        });
        fields.push(f);
    }
    let servers = without_protocol_clashes(servers, &fields, findings);
    Ok(vec![Record::Gateway(m::Gateway {
        key: key.clone(),
        selector: s.selector,
        servers,
        same_namespace: false,
    })])
}

/// The `tls` of an HTTPS or TLS server (at `f`; `protocol` as upper case), and the indices of
/// the hosts it leaves out (a condition it cannot honour); `None` where no filter chain is
/// generated for the server (an error says why).
fn secure_server_tls(
    srv: &istio::Server,
    t: &istio::ServerTlsSettings,
    f: &str,
    protocol: &str,
    number: u16,
    findings: &mut Vec<Finding>,
) -> Result<Option<(m::ServerTls, Vec<usize>)>> {
    let Some(mut st) = server_tls(t, f, findings)? else {
        return Ok(None);
    };
    let mut left_out: Vec<usize> = Vec::new();
    // A TLS server that terminates carries TCP: routed by `tcp[]` routes.
    st.tcp = !matches!(
        st.mode,
        m::ServerTlsMode::Passthrough | m::ServerTlsMode::AutoPassthrough
    ) && protocol == "TLS";
    if st.mode == m::ServerTlsMode::AutoPassthrough {
        // The clusters it passes to are matched by host name only: a host
        // restricted to a namespace cannot be honoured, and is left out.
        for (hi, h) in srv.hosts.iter().enumerate() {
            if h.split_once('/').is_some_and(|(ns, _)| ns != "*") {
                findings.push(Finding::error(
                    format!("{f}.hosts[{hi}]"),
                    format!(
                        "{h:?}: an AUTO_PASSTHROUGH server matches clusters by \
                         host name, not by namespace, in meshflow; this host is \
                         left out"
                    ),
                ));
                left_out.push(hi);
            }
        }
        if left_out.len() == srv.hosts.len() {
            return Ok(None);
        }
    }
    if st.mode == m::ServerTlsMode::AutoPassthrough && protocol != "TLS" {
        findings.push(Finding::error(
            format!("{f}.tls.mode"),
            format!(
                "AUTO_PASSTHROUGH is generated for servers of protocol TLS only; \
                 no filter chain is generated for this {protocol} server (port \
                 {number})"
            ),
        ));
        return Ok(None);
    }
    if t.https_redirect {
        findings.push(Finding::warning(
            format!("{f}.tls.httpsRedirect"),
            "applies to HTTP servers only; ignored on an HTTPS or TLS server",
        ));
    }
    Ok(Some((st, left_out)))
}

/// HTTP servers take `httpsRedirect`.
fn srv_is_http(protocol: &str) -> bool {
    matches!(protocol, "HTTP" | "HTTP2" | "GRPC")
}

/// A TCP server on an address and port an HTTP server of the Gateway also has is left out
/// (an error naming it): one listener cannot be both without telling the protocols apart.
/// `fields` names each server's field.
fn without_protocol_clashes(
    servers: Vec<m::GatewayServer>,
    fields: &[String],
    findings: &mut Vec<Finding>,
) -> Vec<m::GatewayServer> {
    let http: Vec<(Option<String>, u16)> = servers
        .iter()
        .filter(|s| s.protocol.is_http())
        .map(|s| (s.bind.clone(), s.port))
        .collect();
    servers
        .into_iter()
        .zip(fields)
        .filter_map(|(s, f)| {
            if s.protocol.is_http() || !http.contains(&(s.bind.clone(), s.port)) {
                return Some(s);
            }
            findings.push(Finding::error(
                f.clone(),
                format!(
                    "port {} is also an HTTP server's: the {} server gets no listener",
                    s.port,
                    if s.protocol == m::Protocol::Tls {
                        "TLS"
                    } else {
                        "TCP"
                    }
                ),
            ));
            None
        })
        .collect()
}

/// What a server's `tls` makes of it: `Ok(None)` for a mode meshflow does not generate
/// (reported as an error: the server fails closed). Rejected where Istio's validation
/// rejects: an HTTPS or TLS server without `tls`, SIMPLE or MUTUAL without certificates.
pub(super) fn server_tls(
    tls: &istio::ServerTlsSettings,
    f: &str,
    findings: &mut Vec<Finding>,
) -> Result<Option<m::ServerTls>> {
    let mode = tls
        .mode
        .as_deref()
        .unwrap_or("PASSTHROUGH")
        .to_ascii_uppercase();
    let mode = match mode.as_str() {
        "SIMPLE" => m::ServerTlsMode::Simple,
        "MUTUAL" => m::ServerTlsMode::Mutual,
        "OPTIONAL_MUTUAL" => m::ServerTlsMode::OptionalMutual,
        "PASSTHROUGH" => m::ServerTlsMode::Passthrough,
        // The gateway's workload certificate; Istio's validation refuses files and Secrets.
        "ISTIO_MUTUAL" => {
            for (set, name) in [
                (tls.server_certificate.is_some(), "serverCertificate"),
                (tls.private_key.is_some(), "privateKey"),
                (tls.ca_certificates.is_some(), "caCertificates"),
                (tls.credential_name.is_some(), "credentialName"),
            ] {
                if set {
                    return Err(Invalid::field(
                        format!("{f}.tls.{name}"),
                        "ISTIO_MUTUAL cannot have it: the gateway presents its workload \
                         certificate and verifies clients against the mesh's root",
                    ));
                }
            }
            m::ServerTlsMode::IstioMutual
        }
        "AUTO_PASSTHROUGH" => m::ServerTlsMode::AutoPassthrough,
        other => {
            return Err(Invalid::field(
                format!("{f}.tls.mode"),
                format!(
                    "unknown TLS mode {other:?} (PASSTHROUGH, SIMPLE, MUTUAL, AUTO_PASSTHROUGH, \
                     ISTIO_MUTUAL, OPTIONAL_MUTUAL)"
                ),
            ))
        }
    };
    let credential = if matches!(
        mode,
        m::ServerTlsMode::Passthrough
            | m::ServerTlsMode::IstioMutual
            | m::ServerTlsMode::AutoPassthrough
    ) {
        None
    } else if let Some(name) = tls.credential_name.as_ref().filter(|n| !n.is_empty()) {
        Some(m::Credential::Secret(name.clone()))
    } else {
        let (Some(cert), Some(key)) = (&tls.server_certificate, &tls.private_key) else {
            return Err(Invalid::field(
                format!("{f}.tls"),
                "SIMPLE and MUTUAL need credentialName, or serverCertificate and privateKey",
            ));
        };
        let mutual = matches!(
            mode,
            m::ServerTlsMode::Mutual | m::ServerTlsMode::OptionalMutual
        );
        if mutual && tls.ca_certificates.is_none() {
            return Err(Invalid::field(
                format!("{f}.tls.caCertificates"),
                "MUTUAL and OPTIONAL_MUTUAL with certificate files need caCertificates",
            ));
        }
        Some(m::Credential::Files {
            cert: cert.clone(),
            key: key.clone(),
            ca: tls.ca_certificates.clone(),
        })
    };
    // TLS 1.3 suites are not configurable in Envoy (it would refuse the listener).
    let (tls13, cipher_suites): (Vec<String>, Vec<String>) = tls
        .cipher_suites
        .iter()
        .cloned()
        .partition(|c| c.starts_with("TLS_"));
    if !tls13.is_empty() {
        findings.push(Finding::warning(
            format!("{f}.tls.cipherSuites"),
            format!("TLS 1.3 suites {tls13:?} are not configurable in Envoy; ignored"),
        ));
    }
    Ok(Some(m::ServerTls {
        tcp: false,
        misdirected: Vec::new(),
        sni_routes: false,
        client_ca: None,
        mode,
        credential,
        min_version: tls
            .min_protocol_version
            .as_deref()
            .map(|v| tls_version(v, &format!("{f}.tls.minProtocolVersion")))
            .transpose()?,
        max_version: tls
            .max_protocol_version
            .as_deref()
            .map(|v| tls_version(v, &format!("{f}.tls.maxProtocolVersion")))
            .transpose()?,
        cipher_suites,
        subject_alt_names: tls.subject_alt_names.clone(),
    }))
}

/// Envoy's `TlsProtocol` number of an Istio `minProtocolVersion`/`maxProtocolVersion`.
fn tls_version(v: &str, field: &str) -> Result<i32> {
    Ok(match v {
        "TLS_AUTO" => 0,
        "TLSV1_0" => 1,
        "TLSV1_1" => 2,
        "TLSV1_2" => 3,
        "TLSV1_3" => 4,
        other => {
            return Err(Invalid::field(
                field,
                format!("{other:?} is not TLS_AUTO, TLSV1_0, TLSV1_1, TLSV1_2 or TLSV1_3"),
            ))
        }
    })
}
