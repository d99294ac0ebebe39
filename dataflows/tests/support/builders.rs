//! Record builders: the small inputs the tests give the engine (services, proxies, Istio
//! configs), each with the fewest fields set; tests edit the record they get for the rest.

use dataflows::model::*;

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn host(name: &str, ns: &str) -> String {
    format!("{name}.{ns}.svc.cluster.local")
}

/// `outbound|PORT|SUBSET|HOST`.
pub fn outbound(port: u16, subset: &str, name: &str, ns: &str) -> String {
    format!("outbound|{port}|{subset}|{}", host(name, ns))
}

pub fn service(name: &str, ns: &str) -> Record {
    Record::Service(Service {
        control_plane: false,
        mesh_external: false,
        prefer_close: false,
        headless: false,
        alias_for: None,
        aliases: Vec::new(),
        subject_alt_names: Vec::new(),
        hostname: host(name, ns),
        origin: ConfigKey::new(Kind::Service, ns, name),
        ports: vec![ServicePort {
            name: "http".into(),
            port: 9080,
            protocol: Protocol::Http,
        }],
        export_to: vec![],
        resolution: Resolution::Static,
        dns_endpoints: Vec::new(),
        host_target_ports: Default::default(),
        addresses: vec![],
    })
}

/// HTTP ports `http-PORT` on each of `ports`.
pub fn http_ports(ports: &[u16]) -> Vec<ServicePort> {
    ports
        .iter()
        .map(|p| ServicePort {
            name: format!("http-{p}"),
            port: *p,
            protocol: Protocol::Http,
        })
        .collect()
}

pub fn service_exported(name: &str, ns: &str, export_to: &[&str]) -> Record {
    let Record::Service(mut s) = service(name, ns) else {
        unreachable!()
    };
    s.export_to = export_to.iter().map(|e| e.to_string()).collect();
    Record::Service(s)
}

/// A service like [`service`] on HTTP port `port` instead.
pub fn service_on(name: &str, ns: &str, port: u16) -> Record {
    let Record::Service(mut s) = service(name, ns) else {
        unreachable!()
    };
    s.ports[0].port = port;
    Record::Service(s)
}

pub fn sidecar_proxy(pod: &str, ns: &str, ip: &str, pod_labels: &[(&str, &str)]) -> Proxy {
    Proxy {
        id: format!("sidecar~{ip}~{pod}.{ns}~{ns}.svc.cluster.local"),
        kind: ProxyKind::Sidecar,
        ips: vec![ip.to_string()],
        namespace: ns.to_string(),
        labels: labels(pod_labels),
        interception_none: false,
        service_account: None,
        locality: String::new(),
        idle_timeout_ns: None,
    }
}

pub fn router_proxy(pod: &str, ns: &str, ip: &str, pod_labels: &[(&str, &str)]) -> Proxy {
    Proxy {
        id: format!("router~{ip}~{pod}.{ns}~{ns}.svc.cluster.local"),
        kind: ProxyKind::Router,
        ..sidecar_proxy(pod, ns, ip, pod_labels)
    }
}

pub fn px(p: &Proxy) -> Record {
    Record::Proxy(p.clone())
}

/// A Sidecar with one catch-all egress listener for `hosts`; `selector` None is the
/// namespace default.
pub fn sidecar(ns: &str, name: &str, selector: Option<&[(&str, &str)]>, hosts: &[&str]) -> Record {
    Record::Sidecar(Sidecar {
        registry_only: None,
        egress_proxy: None,
        inbound_connection_pool: None,
        ingress: Vec::new(),
        key: ConfigKey::new(Kind::Sidecar, ns, name),
        selector: selector.map(labels),
        egress: vec![EgressListener {
            port: None,
            bind: None,
            capture_none: false,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
        }],
    })
}

/// A DestinationRule in `ns` for `host` with subsets `(name, version label)`.
pub fn destination_rule(ns: &str, name: &str, host: &str, subsets: &[(&str, &str)]) -> Record {
    Record::DestinationRule(DestinationRule {
        key: ConfigKey::new(Kind::DestinationRule, ns, name),
        host: host.to_string(),
        export_to: vec![],
        traffic_policy: None,
        subsets: subsets
            .iter()
            .map(|(n, v)| Subset {
                name: n.to_string(),
                labels: labels(&[("version", v)]),
                traffic_policy: None,
            })
            .collect(),
        selector: None,
    })
}

pub fn gateway(
    ns: &str,
    name: &str,
    selector: &[(&str, &str)],
    servers: &[(u16, Option<&str>)],
) -> Record {
    Record::Gateway(Gateway {
        key: ConfigKey::new(Kind::Gateway, ns, name),
        selector: labels(selector),
        servers: servers
            .iter()
            .map(|(port, bind)| GatewayServer {
                port: *port,
                port_name: format!("http-{port}"),
                protocol: Protocol::Http,
                bind: bind.map(String::from),
                hosts: vec!["*/*".into()],
                https_redirect: false,
                tls: None,
                field: String::new(),
            })
            .collect(),
        same_namespace: false,
    })
}

/// A VirtualService bound to `gateways` routing every request for `hosts` to `dest`.
pub fn virtual_service(
    ns: &str,
    name: &str,
    hosts: &[&str],
    gateways: &[&str],
    dest: &str,
) -> Record {
    Record::VirtualService(VirtualService {
        key: ConfigKey::new(Kind::VirtualService, ns, name),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        gateways: gateways.iter().map(|g| g.to_string()).collect(),
        export_to: vec![],
        tcp: vec![],
        tls: vec![],
        http: vec![HttpRoute {
            name: None,
            matches: vec![],
            route: vec![RouteDestination {
                headers: Default::default(),
                via_alias: None,
                host: dest.to_string(),
                subset: None,
                port: None,
                weight: 100,
            }],
            timeout_ms: None,
            retries: None,
            ..Default::default()
        }],
    })
}

pub fn endpoint(svc: &str, ns: &str, ip: &str, ready: bool) -> Record {
    Record::Endpoint(
        host(svc, ns),
        RawEndpoint {
            service_account: None,
            ip: ip.to_string(),
            port_name: "http".into(),
            port: 9080,
            ready,
            labels: Labels::new(),
            origin: ConfigKey::new(Kind::EndpointSlice, ns, format!("{svc}-slice")),
            placement: Placement::default(),
        },
    )
}

pub fn workload(pod: &str, ns: &str, ip: &str, pod_labels: &[(&str, &str)]) -> Record {
    Record::Workload(Workload {
        service_account: None,
        peer: None,
        ip: ip.to_string(),
        labels: labels(pod_labels),
        origin: ConfigKey::new(Kind::Pod, ns, pod),
        ports: Default::default(),
        placement: Placement::default(),
    })
}

/// A mesh config in effect over the engine's built-in settings.
pub fn mesh_settings(edit: impl FnOnce(&mut MeshSettings)) -> Record {
    let mut m = MeshSettings::builtin(&MeshConfig::default());
    m.layer = MeshLayer::Configured;
    m.origin = Some(ConfigKey::new(Kind::MeshConfig, "", "mesh"));
    edit(&mut m);
    Record::Mesh(m)
}

/// A Secret with certificate `fp` (none when `fp` is empty or with a `problem`).
pub fn tls_secret(
    ns: &str,
    name: &str,
    fp: &str,
    ca: Option<&str>,
    problem: Option<&str>,
) -> Record {
    Record::Secret(TlsSecret {
        key: ConfigKey::new(Kind::Secret, ns, name),
        identity: (problem.is_none() && !fp.is_empty()).then(|| TlsIdentity {
            cert_chain: format!("CERT {fp}"),
            private_key: format!("KEY {fp}"),
            fingerprint: fp.into(),
        }),
        ca: ca.map(String::from),
        problem: problem.map(String::from),
    })
}
