//! Synthetic meshes of a given shape, for benchmarks and load tests: services with
//! endpoints and labelled pods spread over namespaces, DestinationRules with subsets and
//! VirtualServices for a fraction of services, optional per-namespace Sidecar scoping,
//! connected sidecar proxies, and optionally ingress gateways: `gateways` router proxies
//! (`istio: ingressgateway`, in the root namespace) selected by one Gateway `ingress` (HTTP
//! port 80, every host), with a VirtualService `svc-S-gw` bound to it for every
//! `gateway_vs_every`-th service (host `svc-S.example.com` → that service); with
//! `http_routes`, the same proxies also run a Gateway API Gateway `web` (class `istio`, HTTP
//! on port 8080 for `*.web.example`) and services `0..http_routes` each have an HTTPRoute
//! `svc-S` on it (host `svc-S.web.example` → that service).

use crate::model::gateway_api;
use crate::model::*;

#[derive(Clone, Debug)]
pub struct Shape {
    pub services: usize,
    pub endpoints_per_service: usize,
    pub namespaces: usize,
    pub proxies: usize,
    /// Every `vs_every`-th service gets a DestinationRule (v1/v2) and a 90/10 VirtualService.
    pub vs_every: usize,
    /// Each namespace gets a Sidecar importing `./*` and the first `shared_namespaces`
    /// namespaces.
    pub sidecar_scoping: bool,
    /// Namespaces every Sidecar imports besides its own (`ns-0` … `ns-{n-1}`).
    pub shared_namespaces: usize,
    /// Gateway proxies (routers); with any, the ingress Gateway is part of the mesh.
    pub gateways: usize,
    /// Every `gateway_vs_every`-th service gets a VirtualService bound to the Gateway
    /// (0: none).
    pub gateway_vs_every: usize,
    /// AuthorizationPolicies ([`authz_policy`]): policy `i` selects proxy `i mod proxies`.
    pub authz_policies: usize,
    /// HTTPRoutes on the Gateway API Gateway `web` ([`http_route`]), one for each of the
    /// first `http_routes` services (with gateway proxies; at most `services`).
    pub http_routes: usize,
}

impl Shape {
    pub fn small() -> Shape {
        Shape {
            services: 200,
            endpoints_per_service: 10,
            namespaces: 10,
            proxies: 200,
            vs_every: 4,
            sidecar_scoping: true,
            shared_namespaces: 1,
            gateways: 0,
            gateway_vs_every: 10,
            authz_policies: 0,
            http_routes: 0,
        }
    }

    /// Istio's published load-test shape: 1,000 services × 10 endpoints, 20 namespaces,
    /// 2,000 proxies.
    pub fn medium(sidecar_scoping: bool) -> Shape {
        Shape {
            services: 1_000,
            endpoints_per_service: 10,
            namespaces: 20,
            proxies: 2_000,
            vs_every: 4,
            sidecar_scoping,
            shared_namespaces: 1,
            gateways: 0,
            gateway_vs_every: 10,
            authz_policies: 0,
            http_routes: 0,
        }
    }

    /// 5,000 services × 10 endpoints, 100 namespaces, 10,000 proxies, each scoped by
    /// Sidecar to its namespace plus two shared ones.
    pub fn large() -> Shape {
        Shape {
            services: 5_000,
            endpoints_per_service: 10,
            namespaces: 100,
            proxies: 10_000,
            vs_every: 4,
            sidecar_scoping: true,
            shared_namespaces: 2,
            gateways: 0,
            gateway_vs_every: 10,
            authz_policies: 0,
            http_routes: 0,
        }
    }

    /// 10,000 services × 10 endpoints, 250 namespaces, 25,000 proxies, each scoped by
    /// Sidecar to its namespace plus two shared ones (issue 15's shape XL).
    pub fn xlarge() -> Shape {
        Shape {
            services: 10_000,
            endpoints_per_service: 10,
            namespaces: 250,
            proxies: 25_000,
            vs_every: 4,
            sidecar_scoping: true,
            shared_namespaces: 2,
            gateways: 0,
            gateway_vs_every: 10,
            authz_policies: 0,
            http_routes: 0,
        }
    }
}

pub fn namespace(i: usize) -> String {
    format!("ns-{i}")
}

pub fn hostname(s: usize, shape: &Shape, mesh: &MeshConfig) -> String {
    format!(
        "svc-{s}.{}.svc.{}",
        namespace(s % shape.namespaces),
        mesh.domain_suffix
    )
}

/// The IP of endpoint `e` of service `s` (10.x.y.z, unique per pair).
pub fn endpoint_ip(s: usize, e: usize) -> String {
    let n = s * 1000 + e;
    format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255)
}

pub fn endpoint(s: usize, e: usize, shape: &Shape, mesh: &MeshConfig) -> Record {
    let ns = namespace(s % shape.namespaces);
    Record::Endpoint(
        hostname(s, shape, mesh),
        RawEndpoint {
            service_account: None,
            ip: endpoint_ip(s, e),
            port_name: "http".into(),
            port: 8080,
            ready: true,
            labels: Labels::new(),
            origin: ConfigKey::new(Kind::EndpointSlice, ns, format!("svc-{s}")),
            placement: Placement::default(),
        },
    )
}

/// The name of the generated ingress Gateway (in the root namespace).
pub const GATEWAY_NAME: &str = "ingress";

/// Whether service `s` has a VirtualService bound to the ingress Gateway.
pub fn has_gateway_vs(s: usize, shape: &Shape) -> bool {
    shape.gateways > 0 && shape.gateway_vs_every > 0 && s.is_multiple_of(shape.gateway_vs_every)
}

/// The external host of service `s` at the ingress gateway.
pub fn gateway_host(s: usize) -> String {
    format!("svc-{s}.example.com")
}

/// The ingress Gateway: HTTP on port 80 for every host, selecting `istio: ingressgateway`.
pub fn gateway(mesh: &MeshConfig) -> Gateway {
    Gateway {
        key: ConfigKey::new(Kind::Gateway, &mesh.root_namespace, GATEWAY_NAME),
        selector: [("istio".to_string(), "ingressgateway".to_string())].into(),
        servers: vec![GatewayServer {
            port: 80,
            port_name: "http".into(),
            protocol: Protocol::Http,
            bind: None,
            hosts: vec!["*/*".into()],
            https_redirect: false,
            tls: None,
            field: "spec.servers[0]".into(),
        }],
        same_namespace: false,
    }
}

/// The VirtualService `svc-S-gw` routing `svc-S.example.com` at the ingress gateway.
pub fn gateway_vs(s: usize, shape: &Shape, mesh: &MeshConfig) -> VirtualService {
    let ns = namespace(s % shape.namespaces);
    VirtualService {
        key: ConfigKey::new(Kind::VirtualService, &ns, format!("svc-{s}-gw")),
        hosts: vec![gateway_host(s)],
        gateways: vec![format!("{}/{GATEWAY_NAME}", mesh.root_namespace)],
        export_to: vec![],
        tcp: vec![],
        tls: vec![],
        http: vec![HttpRoute {
            name: None,
            matches: vec![],
            route: vec![RouteDestination {
                headers: Default::default(),
                via_alias: None,
                host: hostname(s, shape, mesh),
                subset: None,
                port: Some(80),
                weight: 100,
            }],
            timeout_ms: None,
            retries: None,
            ..Default::default()
        }],
    }
}

/// The name of the generated Gateway API Gateway (in the root namespace), which the gateway
/// proxies also run (they carry its `gateway.networking.k8s.io/gateway-name` label).
pub const K8S_GATEWAY_NAME: &str = "web";

/// The port of the Gateway API Gateway's one listener.
pub const K8S_GATEWAY_PORT: u16 = 8080;

/// Whether the mesh has the Gateway API Gateway and its HTTPRoutes.
pub fn has_http_routes(shape: &Shape) -> bool {
    shape.gateways > 0 && shape.http_routes > 0
}

/// The host service `s`'s HTTPRoute serves at the Gateway API Gateway.
pub fn http_route_host(s: usize) -> String {
    format!("svc-{s}.web.example")
}

/// The Gateway API Gateway `web`: class `istio`, one HTTP listener `http` on
/// [`K8S_GATEWAY_PORT`] for `*.web.example`, routes from every namespace.
pub fn k8s_gateway(mesh: &MeshConfig) -> gateway_api::KubeGateway {
    gateway_api::KubeGateway {
        key: ConfigKey::new(
            Kind::KubernetesGateway,
            &mesh.root_namespace,
            K8S_GATEWAY_NAME,
        ),
        class: "istio".into(),
        listeners: vec![gateway_api::Listener {
            index: 0,
            name: "http".into(),
            hostname: Some("*.web.example".into()),
            port: K8S_GATEWAY_PORT,
            protocol: gateway_api::ListenerProtocol::Http,
            tls: None,
            allowed_namespaces: gateway_api::AllowedNamespaces::All,
            allowed_kinds: vec![],
        }],
        refused: vec![],
        invalid_parameters: None,
        allowed_listeners: gateway_api::AllowedListeners::None,
        sets: vec![],
        frontend: Default::default(),
    }
}

/// Service `s`'s HTTPRoute `svc-S` (in its namespace) on the Gateway `web`: every request
/// for [`http_route_host`] to `svc-S` port 80, or with `canary` (weight, service), that
/// share of them to the canary service (of the same namespace) and the rest to `svc-S`.
pub fn http_route(
    s: usize,
    canary: Option<(u32, usize)>,
    shape: &Shape,
    mesh: &MeshConfig,
) -> gateway_api::KubeHttpRoute {
    let ns = namespace(s % shape.namespaces);
    let backend = |t: usize, weight: u32| gateway_api::BackendRef {
        host: Some(hostname(t, shape, mesh)),
        namespace: ns.clone(),
        kind: "Service".into(),
        name: format!("svc-{t}"),
        port: Some(80),
        weight,
        headers: Default::default(),
    };
    let backends = match canary {
        None => vec![backend(s, 1)],
        Some((w, t)) => vec![backend(s, 100 - w.min(100)), backend(t, w.min(100))],
    };
    gateway_api::KubeHttpRoute {
        key: ConfigKey::new(Kind::HttpRoute, &ns, format!("svc-{s}")),
        created: String::new(),
        parents: vec![gateway_api::ParentRef {
            kind: gateway_api::ParentKind::Gateway,
            namespace: mesh.root_namespace.clone(),
            name: K8S_GATEWAY_NAME.into(),
            section: None,
            port: None,
        }],
        hostnames: vec![http_route_host(s)],
        rules: vec![gateway_api::HttpRouteRule {
            template: HttpRoute::default(),
            matches: vec![],
            backends,
        }],
    }
}

/// Gateway proxy `g`: `router~10.253.x.y~istio-ingressgateway-G.ROOT~ROOT.svc.cluster.local`,
/// labelled `istio: ingressgateway` (the Istio Gateway `ingress` selects it) and
/// `gateway.networking.k8s.io/gateway-name: web` (it runs the Gateway API Gateway `web`).
pub fn router(g: usize, mesh: &MeshConfig) -> Proxy {
    let ns = &mesh.root_namespace;
    let ip = format!("10.253.{}.{}", (g / 256) % 256, g % 256);
    Proxy {
        id: format!("router~{ip}~istio-ingressgateway-{g}.{ns}~{ns}.svc.cluster.local"),
        kind: ProxyKind::Router,
        ips: vec![ip],
        namespace: ns.clone(),
        labels: [
            ("istio".to_string(), "ingressgateway".to_string()),
            (
                gateway_api::GATEWAY_NAME_LABEL.to_string(),
                K8S_GATEWAY_NAME.to_string(),
            ),
        ]
        .into(),
        interception_none: false,
        service_account: None,
        locality: String::new(),
        idle_timeout_ns: None,
    }
}

pub fn proxy(p: usize, shape: &Shape) -> Record {
    let ns = namespace(p % shape.namespaces);
    let mut labels = Labels::new();
    labels.insert("app".into(), format!("client-{p}"));
    Record::Proxy(Proxy {
        id: format!(
            "sidecar~10.255.{}.{}~client-{p}.{ns}~{ns}.svc.cluster.local",
            p / 256,
            p % 256
        ),
        kind: ProxyKind::Sidecar,
        ips: vec![format!("10.255.{}.{}", p / 256, p % 256)],
        namespace: ns,
        labels,
        interception_none: false,
        service_account: None,
        locality: String::new(),
        idle_timeout_ns: None,
    })
}

/// Every record of the mesh, proxies included.
pub fn records(shape: &Shape, mesh: &MeshConfig) -> Vec<Record> {
    let mut out = Vec::new();
    for s in 0..shape.services {
        let ns = namespace(s % shape.namespaces);
        let host = hostname(s, shape, mesh);
        out.push(Record::Service(Service {
            control_plane: false,
            mesh_external: false,
            prefer_close: false,
            headless: false,
            alias_for: None,
            aliases: Vec::new(),
            subject_alt_names: Vec::new(),
            hostname: host.clone(),
            origin: ConfigKey::new(Kind::Service, &ns, format!("svc-{s}")),
            ports: vec![ServicePort {
                name: "http".into(),
                port: 80,
                protocol: Protocol::Http,
            }],
            export_to: vec![],
            resolution: Resolution::Static,
            dns_endpoints: Vec::new(),
            host_target_ports: Default::default(),
            addresses: vec![],
        }));
        for e in 0..shape.endpoints_per_service {
            out.push(endpoint(s, e, shape, mesh));
            let mut labels = Labels::new();
            labels.insert("app".into(), format!("svc-{s}"));
            labels.insert(
                "version".into(),
                if e % 2 == 0 { "v1".into() } else { "v2".into() },
            );
            out.push(Record::Workload(Workload {
                service_account: Some("default".into()),
                peer: None,
                ip: endpoint_ip(s, e),
                labels,
                origin: ConfigKey::new(Kind::Pod, &ns, format!("svc-{s}-{e}")),
                ports: Default::default(),
                placement: Placement::default(),
            }));
        }
        if shape.vs_every > 0 && s % shape.vs_every == 0 {
            let subset = |v: &str| Subset {
                name: v.into(),
                labels: [("version".to_string(), v.to_string())].into(),
                traffic_policy: None,
            };
            out.push(Record::DestinationRule(DestinationRule {
                key: ConfigKey::new(Kind::DestinationRule, &ns, format!("svc-{s}")),
                host: host.clone(),
                export_to: vec![],
                traffic_policy: None,
                subsets: vec![subset("v1"), subset("v2")],
                selector: None,
            }));
            out.push(Record::VirtualService(vs(s, 90, shape, mesh)));
        }
        if has_gateway_vs(s, shape) {
            out.push(Record::VirtualService(gateway_vs(s, shape, mesh)));
        }
        if has_http_routes(shape) && s < shape.http_routes {
            out.push(Record::GatewayApi(
                gateway_api::GatewayApiObject::HttpRoute(http_route(s, None, shape, mesh)),
            ));
        }
    }
    if shape.gateways > 0 {
        out.push(Record::Gateway(gateway(mesh)));
    }
    if has_http_routes(shape) {
        out.push(Record::GatewayApi(gateway_api::GatewayApiObject::Gateway(
            k8s_gateway(mesh),
        )));
    }
    // The Namespaces, as the generator writes them (labelled for injection) and as Kubernetes
    // names them.
    for n in 0..shape.namespaces {
        let ns = namespace(n);
        let labels: Labels = [
            ("istio-injection".to_string(), "enabled".to_string()),
            (gateway_api::NAMESPACE_NAME_LABEL.to_string(), ns.clone()),
        ]
        .into();
        out.push(Record::GatewayApi(
            gateway_api::GatewayApiObject::Namespace(gateway_api::NamespaceLabels {
                key: ConfigKey::new(Kind::Namespace, "", ns),
                labels,
            }),
        ));
    }
    if shape.sidecar_scoping {
        for n in 0..shape.namespaces {
            let ns = namespace(n);
            out.push(Record::Sidecar(Sidecar {
                registry_only: None,
                egress_proxy: None,
                inbound_connection_pool: None,
                ingress: Vec::new(),
                key: ConfigKey::new(Kind::Sidecar, &ns, "default"),
                selector: None,
                egress: vec![EgressListener {
                    port: None,
                    bind: None,
                    capture_none: false,
                    hosts: sidecar_hosts(shape),
                }],
            }));
        }
    }
    out.extend((0..shape.authz_policies).map(|i| authz_policy(i, 0, shape, mesh)));
    out.extend((0..shape.proxies).map(|p| proxy(p, shape)));
    out.extend((0..shape.gateways).map(|g| Record::Proxy(router(g, mesh))));
    out
}

/// The proxy AuthorizationPolicy `i` selects (`i mod proxies`; 0 without proxies).
pub fn authz_target(i: usize, shape: &Shape) -> usize {
    i % shape.proxies.max(1)
}

/// AuthorizationPolicy `authz-I` in the namespace of the proxy it selects
/// ([`authz_target`], `app: client-P`): ALLOW to port 8080 from the namespace's `default`
/// service account and, from revision 1 on, from `rev-R` too (an edit changes only it).
pub fn authz_policy(i: usize, revision: usize, shape: &Shape, mesh: &MeshConfig) -> Record {
    let p = authz_target(i, shape);
    let ns = namespace(p % shape.namespaces.max(1));
    let _ = mesh;
    let mut principals = vec![format!("cluster.local/ns/{ns}/sa/default")];
    if revision > 0 {
        principals.push(format!("cluster.local/ns/{ns}/sa/rev-{revision}"));
    }
    let one = |field, values: Vec<String>| AuthzMatch {
        field,
        values,
        not: false,
    };
    Record::Security(SecurityPolicy {
        key: ConfigKey::new(Kind::AuthorizationPolicy, &ns, format!("authz-{i}")),
        created: String::new(),
        selector: Some([("app".to_string(), format!("client-{p}"))].into()),
        effect: PolicyEffect::Authz(AuthzPolicy {
            action: AuthzAction::Allow,
            rules: vec![AuthzRule {
                from: vec![vec![one(AuthzField::Principal, principals)]],
                to: vec![vec![one(AuthzField::Port, vec!["8080".into()])]],
                when: vec![],
            }],
            dry_run: false,
        }),
    })
}

/// The egress hosts of every namespace's Sidecar: `./*` and the shared namespaces.
pub fn sidecar_hosts(shape: &Shape) -> Vec<String> {
    let mut hosts = vec!["./*".to_string()];
    hosts.extend((0..shape.shared_namespaces).map(|n| format!("{}/*", namespace(n))));
    hosts
}

/// The VirtualService of service `s` sending `v1_weight`% to v1 and the rest to v2.
pub fn vs(s: usize, v1_weight: u32, shape: &Shape, mesh: &MeshConfig) -> VirtualService {
    let ns = namespace(s % shape.namespaces);
    let host = hostname(s, shape, mesh);
    let dest = |subset: &str, weight| RouteDestination {
        headers: Default::default(),
        via_alias: None,
        host: host.clone(),
        subset: Some(subset.into()),
        port: None,
        weight,
    };
    VirtualService {
        key: ConfigKey::new(Kind::VirtualService, &ns, format!("svc-{s}")),
        hosts: vec![host.clone()],
        gateways: vec![],
        export_to: vec![],
        tcp: vec![],
        tls: vec![],
        http: vec![HttpRoute {
            name: None,
            matches: vec![],
            route: vec![dest("v1", v1_weight), dest("v2", 100 - v1_weight)],
            timeout_ms: None,
            retries: None,
            ..Default::default()
        }],
    }
}
