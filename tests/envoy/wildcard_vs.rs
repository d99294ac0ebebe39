//! Real-Envoy behaviour of a mesh VirtualService whose host is a wildcard.
//!
//! ServiceEntries `a.example.com` and `b.example.com` share the port of the client sidecar's
//! bound egress listener (`127.0.0.1:<port>`, captureMode NONE, importing `./*`), so their
//! virtual hosts land in route configuration `<port>` beside `reviews`. A VirtualService for
//! `*.example.com` sends what it covers to `reviews` v1; one for `b.example.com` exactly sends
//! that host to v2. Backends name themselves, so each response tells where Envoy sent it.

use crate::support;

use std::net::SocketAddr;

use support::reviews::{count, Client, Reviews, FQDN};
use support::{client_envoy, free_port, only, require_envoy, write_config, Meshflow, TestDir};

/// A ServiceEntry for `NAME.example.com` on `port` (HTTP), one static endpoint that is never
/// reached: the VirtualServices send its requests elsewhere.
fn entry(name: &str, port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{name}.example.com]
  location: MESH_EXTERNAL
  ports: [{{number: {port}, name: http, protocol: HTTP}}]
  resolution: STATIC
  endpoints: [{{address: 127.0.0.99}}]
"
    )
}

/// A mesh VirtualService `name` for `host` sending every request to `reviews` `subset`.
fn routing(name: &str, host: &str, subset: &str, port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: ['{host}']
  http:
  - route:
    - destination: {{host: {FQDN}, subset: {subset}, port: {{number: {port}}}}}
"
    )
}

/// `reviews` v1 and v2 (backends running, Service, Pods, EndpointSlice, subsets) on `port`,
/// and the client's Sidecar binding its egress listener to `127.0.0.1:<port>`.
fn reviews_v1_v2(
    net: u8,
    port: u16,
    config_dir: &std::path::Path,
) -> (Reviews, [support::Backend; 2]) {
    let reviews = Reviews::new(net, port, config_dir);
    let backends = [reviews.start_backend("v1"), reviews.start_backend("v2")];
    reviews.write_service();
    reviews.write_pods(&["v1", "v2"]);
    reviews.write_endpoints(&["v1", "v2"]);
    reviews.write_destination_rule(&["v1", "v2"]);
    write_config(
        config_dir,
        "sidecar.yaml",
        &support::reviews::client_sidecar_yaml(port),
    );
    (reviews, backends)
}

/// Proves on Envoy that a `*.example.com` VirtualService routes `a.example.com` (to v1),
/// that an exact VirtualService for `b.example.com` beats the wildcard for its host (to v2),
/// and that deleting the exact one hands `b.example.com` to the wildcard.
#[test]
fn wildcard_virtual_service_routes_the_hosts_it_covers_on_envoy() {
    let envoy_binary = require_envoy!();
    let dir = TestDir::new("envoy-wildcard-vs");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let route_config = port.to_string();

    let (reviews, _backends) = reviews_v1_v2(147, port, &config_dir);
    write_config(&config_dir, "a.yaml", &entry("a", port));
    write_config(&config_dir, "b.yaml", &entry("b", port));
    write_config(
        &config_dir,
        "wild.yaml",
        &routing("wild", "*.example.com", "v1", port),
    );
    write_config(
        &config_dir,
        "exact.yaml",
        &routing("exact", "b.example.com", "v2", port),
    );

    let meshflow = Meshflow::start(&config_dir, dir.path());
    let envoy = client_envoy(
        &envoy_binary,
        dir.path(),
        meshflow.xds_addr(),
        &reviews,
        port,
    );

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let (v1, v2) = ("reviews-v1", "reviews-v2");
    let a = Client::new(&envoy, addr, "a.example.com");
    let b = Client::new(&envoy, addr, "b.example.com");
    let counts = a.converge("a.example.com → v1", "/", &[], |c| only(c, v1), 20);
    assert_eq!(count(&counts, v1), 20, "{counts:?}");
    let counts = b.converge("b.example.com → v2", "/", &[], |c| only(c, v2), 20);
    assert_eq!(count(&counts, v2), 20, "{counts:?}");

    // Without the exact VirtualService, the wildcard takes b.example.com as well.
    envoy.await_rds_update(&route_config, || {
        std::fs::remove_file(config_dir.join("exact.yaml")).expect("remove exact.yaml");
    });
    let counts = b.converge("b.example.com → v1", "/", &[], |c| only(c, v1), 20);
    assert_eq!(count(&counts, v1), 20, "{counts:?}");
    let counts = a.tally(10, "/", &[]);
    assert_eq!(count(&counts, v1), 10, "{counts:?}");
}

/// Proves on Envoy that a VirtualService host outside the registry written beside a
/// service's (`reviews.example.com` beside `reviews`) gets a virtual host of its own on the
/// service's port: Envoy accepts the route configuration, and the alias's requests follow
/// the VirtualService (to v2) as `reviews`' own do; once the VirtualService is deleted the
/// alias has no virtual host (404) while `reviews` keeps its default route.
#[test]
fn an_alias_host_beside_a_service_is_routed_on_envoy() {
    let envoy_binary = require_envoy!();
    let dir = TestDir::new("envoy-vs-alias");
    let config_dir = dir.subdir("config");
    let port = free_port();
    let route_config = port.to_string();

    let (reviews, _backends) = reviews_v1_v2(148, port, &config_dir);
    let alias = routing("alias", "reviews.example.com", "v2", port).replace(
        "hosts: ['reviews.example.com']",
        &format!("hosts: ['{FQDN}', 'reviews.example.com']"),
    );
    write_config(&config_dir, "alias.yaml", &alias);

    let meshflow = Meshflow::start(&config_dir, dir.path());
    let envoy = client_envoy(
        &envoy_binary,
        dir.path(),
        meshflow.xds_addr(),
        &reviews,
        port,
    );

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let v2 = "reviews-v2";
    let by_alias = Client::new(&envoy, addr, "reviews.example.com");
    let by_name = Client::new(&envoy, addr, "reviews");
    let counts = by_alias.converge("alias → v2", "/", &[], |c| only(c, v2), 20);
    assert_eq!(count(&counts, v2), 20, "{counts:?}");
    let counts = by_name.tally(10, "/", &[]);
    assert_eq!(count(&counts, v2), 10, "{counts:?}");

    envoy.await_rds_update(&route_config, || {
        std::fs::remove_file(config_dir.join("alias.yaml")).expect("remove alias.yaml");
    });
    let counts = by_alias.tally(10, "/", &[]);
    assert_eq!(count(&counts, "status 404"), 10, "{counts:?}");
    let counts = by_name.tally(20, "/", &[]);
    assert_eq!(
        count(&counts, v2) + count(&counts, "reviews-v1"),
        20,
        "{counts:?}"
    );
}
