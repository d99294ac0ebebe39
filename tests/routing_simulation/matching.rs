//! Fields that change which route a request or connection takes (issue 13's audit): TCP and
//! TLS match conditions on the source, gateway server hosts by namespace, VirtualService
//! precedence and merging, match conditions on scheme, headers and port, and delegates.

use crate::fixtures::{
    gateway_setup, mongo_cluster, mongo_pod, pod, reviews_mesh, sidecar_setup, via_gateway,
    via_sidecar, GATEWAY_HOST, JASON, PORT,
};
use crate::support;
use crate::support::reviews::FQDN;
use crate::support::{write_config, ProxyNode, TestDir};
use crate::{assert_routes_to, assert_status, routes_to, Mesh};
use dataflows::simulate::Call;

/// `tcp[]` match `sourceLabels`: of two client sidecars the same Sidecar scopes, only the one
/// carrying `role: canary` has its `mongo` connections sent to subset v2 by the route whose
/// match selects that label; the other's go where they go without a route that applies (the
/// service's own cluster, both pods, as Istio adds the default route after the matches). A
/// selector both carry moves both; one neither fully carries moves neither.
#[test]
fn tcp_match_source_labels_route_only_the_labelled_clients_connections() {
    let mut mesh = Mesh::new("tcp-source-labels");
    support::mongo::write_mesh(&mesh.config, 60, PORT, PORT + 1, PORT + 2);
    let client = |name: &str, host: u8, labels: &[(&str, &str)]| {
        ProxyNode::sidecar(name, "default", &support::mongo::ip(60, host), labels)
    };
    let canary = mesh.connect(&client(
        "client-canary",
        20,
        &[("app", "client"), ("role", "canary")],
    ));
    let plain = mesh.connect(&client("client-plain", 21, &[("app", "client")]));
    let vs = |selector: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: mongo, namespace: default}}
spec:
  hosts: [mongo]
  tcp:
  - match: [{{sourceLabels: {selector}}}]
    route: [{{destination: {{host: mongo, subset: v2}}}}]
"
        )
    };
    let conn = Call::connect(PORT).to_address("127.0.0.1");
    let both = [mongo_pod(1), mongo_pod(2)];

    write_config(&mesh.config, "mongo-vs.yaml", &vs("{role: canary}"));
    let o = mesh.send(&canary, &conn);
    assert_routes_to(&o, &mongo_cluster("v2"), &[mongo_pod(2)]);
    let o = mesh.send(&plain, &conn);
    assert_routes_to(&o, &mongo_cluster(""), &both);

    write_config(&mesh.config, "mongo-vs.yaml", &vs("{app: client}"));
    for proxy in [&canary, &plain] {
        let o = mesh.send(proxy, &conn);
        assert_routes_to(&o, &mongo_cluster("v2"), &[mongo_pod(2)]);
    }

    write_config(
        &mesh.config,
        "mongo-vs.yaml",
        &vs("{app: client, role: stable}"),
    );
    for proxy in [&canary, &plain] {
        let o = mesh.send(proxy, &conn);
        assert_routes_to(&o, &mongo_cluster(""), &both);
    }
}

/// `tls[]` match conditions on sidecars, for a TLS ServiceEntry routed by SNI: `sourceLabels`
/// sends only the labelled sidecar's connections to the route's destination,
/// `sourceNamespace` only those of the sidecar in that namespace, and `gateways` naming a
/// gateway never applies on a sidecar (only `mesh` does), though the VirtualService is bound
/// to both; a connection no route applies to goes to the entry's own cluster.
#[test]
fn tls_match_source_labels_namespace_and_gateways_apply_per_sidecar() {
    let mut mesh = Mesh::new("tls-match-conditions");
    write_config(
        &mesh.config,
        "entries.yaml",
        "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: www, namespace: default}
spec:
  hosts: [www.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: egress, namespace: default}
spec:
  hosts: [egress.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: egress-gateway, namespace: default}
spec:
  selector: {istio: egressgateway}
  servers:
  - port: {number: 443, name: tls, protocol: TLS}
    hosts: [www.example.com]
    tls: {mode: PASSTHROUGH}
",
    );
    let sidecar = |name: &str, ns: &str, host: u8, labels: &[(&str, &str)]| {
        ProxyNode::sidecar(name, ns, &format!("127.0.62.{host}"), labels)
    };
    let canary = mesh.connect_captured(&sidecar(
        "client-canary",
        "default",
        20,
        &[("app", "client"), ("role", "canary")],
    ));
    let plain = mesh.connect_captured(&sidecar(
        "client-plain",
        "default",
        21,
        &[("app", "client")],
    ));
    let elsewhere =
        mesh.connect_captured(&sidecar("client-other", "other", 22, &[("app", "client")]));
    let vs = |condition: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: www, namespace: default}}
spec:
  hosts: [www.example.com]
  gateways: [mesh, egress-gateway]
  tls:
  - match: [{{sniHosts: [www.example.com], {condition}}}]
    route: [{{destination: {{host: egress.example.com, port: {{number: 443}}}}}}]
"
        )
    };
    let call = Call::tls(443, "www.example.com").to_address("203.0.113.80");
    let (www, egress) = (
        "outbound|443||www.example.com",
        "outbound|443||egress.example.com",
    );
    let expect = |mesh: &mut Mesh, condition: &str, expected: [&str; 3]| {
        write_config(&mesh.config, "route.yaml", &vs(condition));
        for (proxy, cluster) in [&canary, &plain, &elsewhere].into_iter().zip(expected) {
            let o = mesh.send(proxy, &call);
            assert_eq!(
                o.cluster(),
                Some(cluster),
                "{condition} from {proxy}: {o:#?}"
            );
        }
    };
    expect(
        &mut mesh,
        "sourceLabels: {role: canary}",
        [egress, www, www],
    );
    expect(
        &mut mesh,
        "sourceLabels: {app: client}",
        [egress, egress, egress],
    );
    expect(&mut mesh, "sourceNamespace: other", [www, www, egress]);
    expect(&mut mesh, "gateways: [egress-gateway]", [www, www, www]);
    expect(&mut mesh, "gateways: [mesh]", [egress, egress, egress]);
}

/// A Gateway of namespace `default` whose server's hosts are `NS/host` (Istio's
/// `namespace/dnsName`): only VirtualServices of that namespace get a virtual host for the
/// host on the gateway. With `other/…` the VirtualService in `default` gets none (404) and
/// the one in `other` routes; with `./…` (the Gateway's own namespace) the reverse.
#[test]
fn gateway_server_hosts_by_namespace_take_only_that_namespaces_virtual_services() {
    let (mut mesh, reviews, gateway, _) = gateway_setup("gateway-host-namespace", &["v1", "v2"]);
    let gateway_yaml = |host: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: bookinfo-gateway, namespace: default}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {PORT}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ['{host}']
"
        )
    };
    let vs = |ns: &str, subset: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: from-{ns}, namespace: {ns}}}
spec:
  hosts: [{GATEWAY_HOST}]
  gateways: [default/bookinfo-gateway]
  http:
  - route: [{{destination: {{host: {FQDN}, subset: {subset}, port: {{number: 9080}}}}}}]
"
        )
    };
    let call = via_gateway(GATEWAY_HOST, "/reviews/1");
    let (v1, v2) = (reviews.cluster("v1"), reviews.cluster("v2"));
    let (pod1, pod2) = (pod(&reviews, "v1"), pod(&reviews, "v2"));

    write_config(
        &mesh.config,
        "gateway.yaml",
        &gateway_yaml(&format!("other/{GATEWAY_HOST}")),
    );
    write_config(&mesh.config, "vs-default.yaml", &vs("default", "v1"));
    let o = mesh.send(&gateway, &call);
    assert_status(&o, 404);
    assert!(
        o.upstreams().is_empty(),
        "default's VirtualService is not for other/: {o:#?}"
    );
    write_config(&mesh.config, "vs-other.yaml", &vs("other", "v2"));
    routes_to(&mut mesh, &gateway, &call, &v2, &pod2);

    write_config(
        &mesh.config,
        "gateway.yaml",
        &gateway_yaml(&format!("./{GATEWAY_HOST}")),
    );
    routes_to(&mut mesh, &gateway, &call, &v1, &pod1);
    std::fs::remove_file(mesh.config.join("vs-default.yaml")).expect("remove");
    let o = mesh.send(&gateway, &call);
    assert_status(&o, 404);
    assert!(
        o.upstreams().is_empty(),
        "other's VirtualService is not for ./: {o:#?}"
    );
}

/// Two VirtualServices bound to one gateway for the same host are merged into its one
/// virtual host, as Istio merges them: the routes of both apply, the first VirtualService's
/// (by namespace and name, meshflow's stand-in for Istio's creation time, README) ahead of
/// the second's, so a catch-all in the first shadows the second's narrower route.
#[test]
fn virtual_services_for_one_gateway_host_are_merged_in_order() {
    let (mut mesh, reviews, gateway, _) = gateway_setup("gateway-merge", &["v1", "v2"]);
    let vs = |name: &str, prefix: &str, subset: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{GATEWAY_HOST}]
  gateways: [bookinfo-gateway]
  http:
  - match: [{{uri: {{prefix: {prefix}}}}}]
    route: [{{destination: {{host: reviews, subset: {subset}, port: {{number: 9080}}}}}}]
"
        )
    };
    let (v1, v2) = (reviews.cluster("v1"), reviews.cluster("v2"));
    let (pod1, pod2) = (pod(&reviews, "v1"), pod(&reviews, "v2"));
    write_config(&mesh.config, "a.yaml", &vs("alpha", "/reviews/1", "v2"));
    write_config(&mesh.config, "b.yaml", &vs("beta", "/reviews", "v1"));
    routes_to(
        &mut mesh,
        &gateway,
        &via_gateway(GATEWAY_HOST, "/reviews/1"),
        &v2,
        &pod2,
    );
    routes_to(
        &mut mesh,
        &gateway,
        &via_gateway(GATEWAY_HOST, "/reviews/2"),
        &v1,
        &pod1,
    );
    let o = mesh.send(&gateway, &via_gateway(GATEWAY_HOST, "/ratings/1"));
    assert_status(&o, 404);

    // The catch-all first: `alpha` now holds `/reviews`, and `beta`'s `/reviews/1` is never
    // reached.
    write_config(&mesh.config, "a.yaml", &vs("alpha", "/reviews", "v1"));
    write_config(&mesh.config, "b.yaml", &vs("beta", "/reviews/1", "v2"));
    routes_to(
        &mut mesh,
        &gateway,
        &via_gateway(GATEWAY_HOST, "/reviews/1"),
        &v1,
        &pod1,
    );
}

/// Two mesh VirtualServices for `reviews`, in `default` (v1) and in `other` (v2), both
/// exported everywhere: a sidecar takes the one of its own namespace (Istio's sidecar scope
/// lists its namespace's VirtualServices first, and the first for a host wins), and a
/// sidecar of a third namespace the first of the others (by namespace: `default`).
#[test]
fn a_sidecar_takes_its_own_namespaces_virtual_service_for_a_host() {
    let mut mesh = Mesh::new("mesh-vs-precedence");
    let reviews = reviews_mesh(&mesh, 9080, &["v1", "v2"]);
    let sidecar = |ns: &str, host: u8| {
        ProxyNode::sidecar("client-abc", ns, &reviews.ip(host), &[("app", "client")])
    };
    let in_default = mesh.connect_captured(&sidecar("default", 20));
    let in_other = mesh.connect_captured(&sidecar("other", 21));
    let in_third = mesh.connect_captured(&sidecar("third", 22));
    let vs = |ns: &str, subset: &str| {
        format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: reviews, namespace: {ns}}}
spec:
  hosts: [{FQDN}]
  http:
  - route: [{{destination: {{host: {FQDN}, subset: {subset}}}}}]
"
        )
    };
    write_config(&mesh.config, "vs-default.yaml", &vs("default", "v1"));
    write_config(&mesh.config, "vs-other.yaml", &vs("other", "v2"));
    let call = Call::get(FQDN, 9080, "/").to_address("203.0.113.9");
    let (v1, v2) = (reviews.cluster("v1"), reviews.cluster("v2"));
    let (pod1, pod2) = (pod(&reviews, "v1"), pod(&reviews, "v2"));
    routes_to(&mut mesh, &in_default, &call, &v1, &pod1);
    routes_to(&mut mesh, &in_other, &call, &v2, &pod2);
    routes_to(&mut mesh, &in_third, &call, &v1, &pod1);
    // Without its own, `other`'s sidecar takes `default`'s.
    std::fs::remove_file(mesh.config.join("vs-other.yaml")).expect("remove");
    routes_to(&mut mesh, &in_other, &call, &v1, &pod1);
}

/// `scheme` match: a plaintext request's `:scheme` is `http`, so the route matching `https`
/// does not take it and the one matching `http` does; with only the `https` route, 404.
#[test]
fn match_scheme_takes_only_requests_of_that_scheme() {
    let (mut mesh, reviews, proxy) = sidecar_setup("match-scheme", &["v1", "v2"]);
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: scheme, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - match: [{scheme: {exact: https}}]\n    route: [{destination: {host: reviews, subset: v1}}]\n  - match: [{scheme: {exact: http}}]\n    route: [{destination: {host: reviews, subset: v2}}]\n";
    write_config(&mesh.config, "scheme.yaml", vs);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let https_only = vs
        .split("  - match: [{scheme: {exact: http}}]")
        .next()
        .expect("head");
    write_config(&mesh.config, "scheme.yaml", https_only);
    assert_status(
        &mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1")),
        404,
    );
}

/// Header `prefix` and `regex` matches of a translated VirtualService: a prefix takes any
/// value starting with it (not one containing it elsewhere); a regex must match the whole
/// value (RE2, as Envoy's `safe_regex`), not part of it.
#[test]
fn match_header_prefix_and_regex_select_routes() {
    let (mut mesh, reviews, proxy) = sidecar_setup("match-header-forms", &["v1", "v2"]);
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: headers, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - match: [{headers: {x-user: {prefix: test}}}]\n    route: [{destination: {host: reviews, subset: v2}}]\n  - match: [{headers: {x-version: {regex: 'v[0-9]+'}}}]\n    route: [{destination: {host: reviews, subset: v1}}]\n";
    write_config(&mesh.config, "headers.yaml", vs);
    let get = || via_sidecar("reviews", "/reviews/1");
    let (v1, v2) = (reviews.cluster("v1"), reviews.cluster("v2"));
    let (pod1, pod2) = (pod(&reviews, "v1"), pod(&reviews, "v2"));
    routes_to(
        &mut mesh,
        &proxy,
        &get().header("x-user", "tester"),
        &v2,
        &pod2,
    );
    routes_to(
        &mut mesh,
        &proxy,
        &get().header("x-user", "test"),
        &v2,
        &pod2,
    );
    assert_status(&mesh.send(&proxy, &get().header("x-user", "a-tester")), 404);
    routes_to(
        &mut mesh,
        &proxy,
        &get().header("x-version", "v12"),
        &v1,
        &pod1,
    );
    assert_status(
        &mesh.send(&proxy, &get().header("x-version", "v12-beta")),
        404,
    );
    assert_status(
        &mesh.send(&proxy, &get().header("x-version", "beta-v1")),
        404,
    );
    assert_status(&mesh.send(&proxy, &get()), 404);
    mesh.assert_no_errors();
}

/// A positive `port` match: a route whose match names the port the request arrives on
/// applies there (with its other conditions), ahead of the routes after it.
#[test]
fn match_port_applies_on_its_own_port() {
    let (mut mesh, reviews, proxy) = sidecar_setup("match-port-positive", &["v1", "v2"]);
    let vs = format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: by-port, namespace: default}}\nspec:\n  hosts: [reviews]\n  http:\n  - match: [{{port: 1}}]\n    route: [{{destination: {{host: reviews, subset: v1}}}}]\n  - match: [{{port: {PORT}, uri: {{prefix: /reviews}}}}]\n    route: [{{destination: {{host: reviews, subset: v2}}}}]\n  - route: [{{destination: {{host: reviews, subset: v1}}}}]\n");
    write_config(&mesh.config, "by-port.yaml", &vs);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/reviews/1"));
    assert_eq!(o.route_config, Some(PORT.to_string()));
    assert_routes_to(&o, &reviews.cluster("v2"), &[pod(&reviews, "v2")]);
    let o = mesh.send(&proxy, &via_sidecar("reviews", "/ratings/1"));
    assert_routes_to(&o, &reviews.cluster("v1"), &[pod(&reviews, "v1")]);
}

const TRAFFIC: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/traffic-management/config"
);

/// `delegate`, over `examples/traffic-management` as shipped: the root VirtualService of
/// `bookinfo.example` at the gateway delegates `/reviews` to the hostless
/// `reviews-routes`, whose routes apply under the root's match: jason reaches v2, anyone else
/// v1 with the delegate's 2 s timeout, on both hosts of the root; a path outside the root's
/// `/reviews` never reaches the delegate's catch-all (404), and the root's own routes keep
/// their order around it (`/` redirects first).
#[test]
fn delegate_routes_apply_under_the_root_routes_match() {
    let mut mesh = Mesh::over(TestDir::new("routing-simulation-delegate"), TRAFFIC.into());
    let gateway = mesh.connect(&ProxyNode::router(
        "istio-ingressgateway-6b8d7f9c4-k3m9p",
        "istio-system",
        "127.0.3.70",
        &[("app", "istio-ingressgateway"), ("istio", "ingressgateway")],
    ));
    mesh.sync_clean();
    let reviews =
        |subset: &str| format!("outbound|9080|{subset}|reviews.default.svc.cluster.local");
    for host in ["bookinfo.example", "shop.bookinfo.example"] {
        let call = Call::get(host, 8080, "/reviews/1");
        let o = mesh.send(&gateway, &call.clone().header(JASON.0, JASON.1));
        assert_eq!(o.cluster(), Some(&*reviews("v2")), "{host}: {o:#?}");
        assert_eq!(o.status(), None, "{o:#?}");
        let o = mesh.send(&gateway, &call);
        assert_eq!(o.cluster(), Some(&*reviews("v1")), "{host}: {o:#?}");
        match &o.result {
            Ok(dataflows::simulate::Action::Route { timeout, .. }) => {
                assert_eq!(*timeout, Some(std::time::Duration::from_secs(2)), "{o:#?}")
            }
            other => panic!("a route: {other:?}"),
        }
        let o = mesh.send(&gateway, &Call::get(host, 8080, "/ratings/1"));
        assert_status(&o, 404);
        let o = mesh.send(&gateway, &Call::get(host, 8080, "/"));
        assert_status(&o, 301);
    }
}
