//! A Sidecar: its egress listeners and outbound traffic policy, its ingress listeners with
//! their TLS and connection pools.

use super::destination_rule::connection_pool;
use super::fields::{parse_duration_ms, port_u16, report_ignored, server_protocol, spec};
use super::gateway::server_tls;
use super::Result;
use crate::config::findings::Finding;
use crate::config::{istio, Invalid};
use dataflows::model::{self as m, ConfigKey, Record};
use serde_yaml_ng::Value;

pub(super) fn sidecar(
    key: &ConfigKey,
    value: &Value,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Record>> {
    let (s, ignored): (istio::SidecarSpec, _) = spec(value)?;
    // A field of an ingress listener's `tls` that is not read (which certificates to
    // present or accept) cannot be honoured: terminating without it would take what Istio
    // refuses. The listener's inbound cluster has no endpoints instead, so nothing reaches
    // the application through it.
    let mut closed: Vec<usize> = Vec::new();
    report_ignored(&ignored, findings, |p| {
        let i = p.index_under("ingress")?;
        (p.key_at(2) == Some("tls")).then(|| {
            closed.push(i);
            Finding::error(
                p.to_string(),
                format!(
                    "not supported by meshflow yet on a Sidecar ingress listener; the inbound \
                     cluster of spec.ingress[{i}] has no endpoints (fails closed), so no \
                     connection reaches the application"
                ),
            )
        })
    });
    let mode = s
        .outbound_traffic_policy
        .as_ref()
        .and_then(|o| o.mode.as_deref());
    // Unset: the mesh config's mode applies.
    let registry_only = match mode {
        None => None,
        Some("ALLOW_ANY") => Some(false),
        Some("REGISTRY_ONLY") => Some(true),
        Some(other) => {
            return Err(Invalid::field(
                "spec.outboundTrafficPolicy.mode",
                format!("unknown mode {other:?} (ALLOW_ANY, REGISTRY_ONLY)"),
            ))
        }
    };
    let egress_proxy = match s
        .outbound_traffic_policy
        .as_ref()
        .and_then(|o| o.egress_proxy.as_ref())
    {
        None => None,
        Some(d) => Some(egress_proxy(d, registry_only)?),
    };
    let egress = egress_listeners(&s.egress)?;
    let selector = s
        .workload_selector
        .map(|w| w.labels)
        .filter(|l| !l.is_empty());
    let ingress = sidecar_ingress(&s.ingress, &closed, findings)?;
    let inbound_connection_pool = s
        .inbound_connection_pool
        .as_ref()
        .map(|c| inbound_pool(c, "spec.inboundConnectionPool"))
        .transpose()?;
    // The egress proxy's cluster exists only where the Sidecar imports its host: a host no
    // egress listener's `hosts` can name (in any namespace) leaves what would pass through
    // with no cluster to go to.
    if let Some(p) = &egress_proxy {
        let imported = egress.is_empty()
            || egress.iter().flat_map(|e| &e.hosts).any(|h| {
                let name = h.split_once('/').map_or(h.as_str(), |(_, n)| n);
                dataflows::rules::host_matches(name, &p.host)
            });
        if !imported {
            findings.push(Finding::warning(
                "spec.outboundTrafficPolicy.egressProxy.host",
                format!(
                    "{} is not among the hosts this Sidecar's egress imports: its cluster is \
                     not generated, so traffic that would pass through fails instead",
                    p.host
                ),
            ));
        }
    }
    Ok(vec![Record::Sidecar(m::Sidecar {
        key: key.clone(),
        selector,
        egress,
        registry_only,
        ingress,
        egress_proxy,
        inbound_connection_pool,
    })])
}

/// A Sidecar's `outboundTrafficPolicy.egressProxy`, checked as Istio's validation checks it:
/// only beside mode `ALLOW_ANY`, a fully qualified host (no wildcard), and a port.
fn egress_proxy(d: &istio::Destination, registry_only: Option<bool>) -> Result<m::EgressProxy> {
    const F: &str = "spec.outboundTrafficPolicy.egressProxy";
    if registry_only != Some(false) {
        return Err(Invalid::field(
            F,
            "an egress proxy is only valid with outboundTrafficPolicy.mode ALLOW_ANY",
        ));
    }
    let host = d.host.trim();
    let labels_ok = host.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    });
    if !host.contains('.') || !labels_ok {
        return Err(Invalid::field(
            format!("{F}.host"),
            format!("{host:?} is not a fully qualified domain name"),
        ));
    }
    let Some(number) = d.port.as_ref().and_then(|p| p.number) else {
        return Err(Invalid::field(
            format!("{F}.port"),
            "an egress proxy needs a port number",
        ));
    };
    Ok(m::EgressProxy {
        host: host.to_ascii_lowercase(),
        subset: d.subset.clone().filter(|s| !s.is_empty()),
        port: port_u16(number, &format!("{F}.port.number"))?,
    })
}

/// A Sidecar's `egress[]`: each listener's hosts (`namespace/host`), port, bind and capture
/// mode; one listener a port.
fn egress_listeners(list: &[istio::IstioEgressListener]) -> Result<Vec<m::EgressListener>> {
    let mut egress: Vec<m::EgressListener> = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let f = format!("spec.egress[{i}]");
        if e.hosts.is_empty() {
            return Err(Invalid::field(
                format!("{f}.hosts"),
                "an egress listener needs hosts",
            ));
        }
        for (hi, h) in e.hosts.iter().enumerate() {
            let ok = h
                .split_once('/')
                .is_some_and(|(ns, host)| !ns.is_empty() && !host.is_empty());
            if !ok {
                return Err(Invalid::field(
                    format!("{f}.hosts[{hi}]"),
                    format!("{h:?} is not of the form namespace/host"),
                ));
            }
        }
        let port = match &e.port {
            None => None,
            Some(p) => Some(m::EgressPort {
                number: port_u16(p.number, &format!("{f}.port.number"))?,
                // Naming no protocol, the listener tells HTTP from TCP per connection.
                protocol: match p.protocol.as_str() {
                    "" => m::Protocol::Auto,
                    named => server_protocol(named),
                },
                name: p.name.clone(),
            }),
        };
        if let Some(b) = &e.bind {
            if b.parse::<std::net::IpAddr>().is_err() {
                return Err(Invalid::field(
                    format!("{f}.bind"),
                    format!("{b:?} is not an IP address"),
                ));
            }
        }
        let capture_none = match e.capture_mode.as_deref() {
            None | Some("DEFAULT") | Some("IPTABLES") => false,
            Some("NONE") => true,
            Some(other) => {
                return Err(Invalid::field(
                    format!("{f}.captureMode"),
                    format!("unknown capture mode {other:?}"),
                ))
            }
        };
        let clash = egress
            .iter()
            .any(|x| x.port.as_ref().map(|p| p.number) == port.as_ref().map(|p| p.number));
        if clash {
            let what = port
                .as_ref()
                .map(|p| format!("port {}", p.number))
                .unwrap_or_else(|| "the catch-all".into());
            return Err(Invalid::field(
                format!("{f}.port"),
                format!("{what} has two egress listeners"),
            ));
        }
        egress.push(m::EgressListener {
            port,
            bind: e.bind.clone(),
            capture_none,
            hosts: e.hosts.clone(),
        });
    }
    Ok(egress)
}

/// A Sidecar's `connectionPool` (of an `ingress` listener, or `inboundConnectionPool`), as
/// Istio validates it: with `tcp` or `http`, each checked as a DestinationRule's.
fn inbound_pool(c: &istio::ConnectionPool, field: &str) -> Result<m::InboundPool> {
    let connect_timeout_ms = c
        .tcp
        .as_ref()
        .and_then(|t| t.connect_timeout.as_deref())
        .map(|t| parse_duration_ms(t, &format!("{field}.tcp.connectTimeout")))
        .transpose()?;
    Ok(m::InboundPool {
        connect_timeout_ms,
        pool: connection_pool(c, field)?,
    })
}

/// A Sidecar's `ingress[]`: ports to a `defaultEndpoint` on the workload, HTTP ones through
/// a connection manager, any other protocol as TCP. A port whose endpoint is a Unix socket
/// is left out and said (its traffic keeps reaching the workload as the proxy's own
/// endpoints have it). `tls`: see [`ingress_tls`].
/// `closed`: the indices of listeners whose inbound cluster fails closed (a field of their
/// `tls` is not read).
fn sidecar_ingress(
    list: &[istio::IstioIngressListener],
    closed: &[usize],
    findings: &mut Vec<Finding>,
) -> Result<Vec<m::IngressListener>> {
    let mut out: Vec<m::IngressListener> = Vec::new();
    for (i, l) in list.iter().enumerate() {
        let f = format!("spec.ingress[{i}]");
        let Some(p) = &l.port else {
            return Err(Invalid::field(
                format!("{f}.port"),
                "an ingress listener needs a port",
            ));
        };
        let port = port_u16(p.number, &format!("{f}.port.number"))?;
        if out.iter().any(|x| x.port == port) {
            return Err(Invalid::field(
                format!("{f}.port"),
                format!("port {port} has two ingress listeners"),
            ));
        }
        if let Some(b) = &l.bind {
            if b.parse::<std::net::IpAddr>().is_err() {
                return Err(Invalid::field(
                    format!("{f}.bind"),
                    format!("{b:?} is not an IP address"),
                ));
            }
        }
        let capture_none = match l.capture_mode.as_deref() {
            None | Some("DEFAULT") | Some("IPTABLES") => false,
            Some("NONE") => true,
            Some(other) => {
                return Err(Invalid::field(
                    format!("{f}.captureMode"),
                    format!("unknown capture mode {other:?}"),
                ))
            }
        };
        // An ingress port naming no protocol is told per connection, as Istio does.
        let mut protocol = match p.protocol.as_str() {
            "" => m::Protocol::Auto,
            named => server_protocol(named),
        };
        let mut fail_closed = closed
            .contains(&i)
            .then(|| format!("Sidecar {f}.tls names a field meshflow does not support yet"));
        let tls = match &l.tls {
            Some(t) => match ingress_tls(t, &f, &p.protocol, findings)? {
                Ok(_) if fail_closed.is_some() => None,
                Ok(tls) => {
                    // What the application receives once the proxy has terminated TLS.
                    protocol = match protocol {
                        m::Protocol::Tls if p.protocol.eq_ignore_ascii_case("HTTPS") => {
                            m::Protocol::Http
                        }
                        m::Protocol::Tls => m::Protocol::Tcp,
                        other => other,
                    };
                    Some(Box::new(tls))
                }
                Err(why) => {
                    fail_closed = fail_closed.or(Some(why));
                    None
                }
            },
            None => None,
        };
        let endpoint = match l.default_endpoint.as_deref() {
            None => ("127.0.0.1".to_string(), port),
            Some(e) if e.starts_with("unix://") => {
                findings.push(Finding::warning(
                    format!("{f}.defaultEndpoint"),
                    "Unix socket endpoints are not supported by meshflow yet; this ingress \
                     listener is not generated",
                ));
                continue;
            }
            Some(e) => match e.parse::<std::net::SocketAddr>() {
                Ok(a) => (a.ip().to_string(), a.port()),
                Err(_) => {
                    return Err(Invalid::field(
                        format!("{f}.defaultEndpoint"),
                        format!("{e:?} is not IP:PORT (or unix://PATH)"),
                    ))
                }
            },
        };
        let connection_pool = l
            .connection_pool
            .as_ref()
            .map(|c| inbound_pool(c, &format!("{f}.connectionPool")))
            .transpose()?;
        if l.connection_pool.as_ref().is_some_and(|c| c.http.is_some()) && !protocol.carries_http()
        {
            findings.push(Finding::warning(
                format!("{f}.connectionPool.http"),
                format!(
                    "port {port} is not HTTP: only the tcp settings of its connection pool \
                     apply"
                ),
            ));
        }
        out.push(m::IngressListener {
            port,
            bind: l.bind.clone(),
            endpoint,
            capture_none,
            protocol,
            connection_pool,
            tls,
            fail_closed,
        });
    }
    Ok(out)
}

/// An `ingress` listener's `tls` at field `f` (its port's `protocol` as written), as Istio
/// reads it: SIMPLE, MUTUAL or OPTIONAL_MUTUAL with `serverCertificate`, `privateKey` and
/// (to verify clients) `caCertificates`, the protocol versions and the cipher suites.
/// Rejected as Istio's validation rejects them: `subjectAltNames`, `httpsRedirect`,
/// `credentialName` (not supported on sidecars), the modes ISTIO_MUTUAL and AUTO_PASSTHROUGH,
/// and whatever a Gateway server's `tls` is rejected for ([`server_tls`]). `Ok(Err(why))`:
/// what meshflow cannot terminate as asked (an error names the field; the listener fails
/// closed): PASSTHROUGH (terminating, Istio would present no certificate) and a port whose
/// protocol is told per connection (Istio builds no chain for it once TLS is terminated).
fn ingress_tls(
    t: &istio::ServerTlsSettings,
    f: &str,
    port_protocol: &str,
    findings: &mut Vec<Finding>,
) -> Result<std::result::Result<m::ServerTls, String>> {
    let refuse = |field: &str, why: &str| Err(Invalid::field(format!("{f}.tls.{field}"), why));
    if !t.subject_alt_names.is_empty() {
        return refuse(
            "subjectAltNames",
            "not supported in a Sidecar ingress listener's tls (Istio refuses it)",
        );
    }
    if t.https_redirect {
        return refuse(
            "httpsRedirect",
            "not supported in a Sidecar ingress listener's tls (Istio refuses it)",
        );
    }
    if t.credential_name.as_ref().is_some_and(|n| !n.is_empty()) {
        return refuse(
            "credentialName",
            "not supported in a Sidecar ingress listener's tls (Istio refuses it): name \
             serverCertificate and privateKey files",
        );
    }
    let mode = t.mode.as_deref().unwrap_or("").to_ascii_uppercase();
    if matches!(mode.as_str(), "ISTIO_MUTUAL" | "AUTO_PASSTHROUGH") {
        return refuse(
            "mode",
            &format!("{mode} cannot be a Sidecar ingress listener's mode (Istio refuses it)"),
        );
    }
    let Some(tls) = server_tls(t, f, findings)? else {
        return Ok(Err(format!("Sidecar {f}.tls cannot be terminated")));
    };
    let mut fail = |field: String, why: String| {
        findings.push(Finding::error(
            field.clone(),
            format!(
                "{why}; the inbound cluster of {f} has no endpoints (fails closed), so no \
                 connection reaches the application"
            ),
        ));
        Ok(Err(format!("Sidecar {field}: {why}")))
    };
    if tls.mode == m::ServerTlsMode::Passthrough {
        return fail(
            format!("{f}.tls.mode"),
            "PASSTHROUGH (the default mode) terminates nothing on a Sidecar ingress listener: \
             set SIMPLE, MUTUAL or OPTIONAL_MUTUAL"
                .into(),
        );
    }
    if port_protocol.is_empty() {
        return fail(
            format!("{f}.tls"),
            "a port without a protocol cannot be told HTTP or TCP once TLS is terminated \
             (Istio builds no chain for it): set the port's protocol"
                .into(),
        );
    }
    Ok(Ok(tls))
}
