//! Real-Envoy SNI routing on a sidecar: the `api.example.com` ServiceEntry has a TLS port
//! and two endpoints, each a loopback TLS backend answering with its name (the backends
//! terminate TLS; the sidecar passes the stream through). The client's sidecar reaches the
//! port through a bound egress listener (captureMode NONE), whose chains are matched by the
//! SNI names of the VirtualService's `tls[]` routes; a name no route claims goes to the
//! service's own cluster. An edit of the VirtualService moves one name to the other subset.

use crate::support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;

use dataflows::model::ProxyKind;

use support::envoy_validate::envoy_validates_example;
use support::pki::{ca, leaf};
use support::tls_backend::TlsBackend;
use support::tls_client::tls_get;
use support::{
    converge_then, exactly, free_port, only, require_envoy, write_config, Envoy, Meshflow,
    ProxyNode, TestDir,
};

/// This test's loopback /24.
const NET: u8 = 93;

fn ip(host: u8) -> String {
    format!("127.0.{NET}.{host}")
}

/// The ServiceEntry, its subsets and the client's Sidecar with a bound TLS egress listener.
fn write_mesh(config: &Path, port: u16, backend_port: u16) {
    let (v1, v2) = (ip(11), ip(12));
    write_config(
        config,
        "api.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: api, namespace: default}}
spec:
  hosts: [api.example.com]
  ports: [{{number: {port}, name: tls, protocol: TLS, targetPort: {backend_port}}}]
  resolution: STATIC
  endpoints:
  - {{address: {v1}, labels: {{version: v1}}}}
  - {{address: {v2}, labels: {{version: v2}}}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: api, namespace: default}}
spec:
  host: api.example.com
  subsets:
  - {{name: v1, labels: {{version: v1}}}}
  - {{name: v2, labels: {{version: v2}}}}
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: client, namespace: default}}
spec:
  workloadSelector: {{labels: {{app: client}}}}
  egress:
  - port: {{number: {port}, protocol: TLS, name: tls}}
    bind: 127.0.0.1
    captureMode: NONE
    hosts: [./*]
"
        ),
    );
}

/// The VirtualService: SNI `a.api.example.com` to subset `a`, `b.api.example.com` to `b`.
fn write_routes(config: &Path, a: &str, b: &str) {
    write_config(
        config,
        "routes.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: api, namespace: default}}
spec:
  hosts: [api.example.com, '*.api.example.com']
  tls:
  - match: [{{sniHosts: [a.api.example.com]}}]
    route: [{{destination: {{host: api.example.com, subset: {a}}}}}]
  - match: [{{sniHosts: [b.api.example.com]}}]
    route: [{{destination: {{host: api.example.com, subset: {b}}}}}]
"
        ),
    );
}

/// A client sidecar `pod` at `ip(host)` labelled `app: client`, live and holding `listener`.
fn client_sidecar(
    envoy_bin: &Path,
    dir: &TestDir,
    meshflow: &Meshflow,
    pod: &str,
    host: u8,
    listener: &str,
) -> Envoy {
    let node = ProxyNode::sidecar(pod, "default", &ip(host), &[("app", "client")]);
    let sidecar = Envoy::start_live(envoy_bin, dir.path(), &node, meshflow.xds_addr());
    sidecar.await_listener(listener);
    sidecar
}

/// `n` TLS connections to `addr` with SNI `sni`, tallied by the backend that answered (its
/// body), or by the failure.
fn sni_tally(addr: SocketAddr, sni: &str, n: usize) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for _ in 0..n {
        let key = match tls_get(addr, sni, &[], None) {
            Ok((response, _)) => response
                .split_once("\r\n\r\n")
                .map_or_else(|| format!("no body: {response}"), |(_, b)| b.to_string()),
            Err(e) => format!("error: {e}"),
        };
        *out.entry(key).or_default() += 1;
    }
    out
}

/// Proves that a sidecar routes TLS it does not terminate by SNI as the VirtualService's
/// `tls[]` routes say: each name reaches only its subset's backend (which sees the name
/// itself, the handshake being passed through), a name no route claims reaches both
/// endpoints of the service's own cluster, and moving a name to the other subset takes
/// effect with no update rejected.
#[test]
fn sidecar_routes_tls_connections_by_sni() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-tls-sni");
    let config = dir.subdir("config");
    let (port, backend_port) = (free_port(), free_port());
    let authority = ca("tls-sni test CA");
    let (cert, key) = leaf(&authority, &["api.example.com", "*.api.example.com"], None);
    let _v1 = TlsBackend::start(&ip(11), backend_port, "api-v1", &cert, &key, None);
    let _v2 = TlsBackend::start(&ip(12), backend_port, "api-v2", &cert, &key, None);
    write_mesh(&config, port, backend_port);
    write_routes(&config, "v1", "v2");
    let meshflow = Meshflow::start(&config, dir.path());

    let sidecar = client_sidecar(
        &envoy_bin,
        &dir,
        &meshflow,
        "client-abc",
        20,
        &format!("127.0.0.1_{port}"),
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let (v1, v2) = ("api-v1", "api-v2");
    let converge = |what: &str, sni: &str, accept: &dyn Fn(&HashMap<String, usize>) -> bool| {
        converge_then(
            what,
            |k| sni_tally(addr, sni, k),
            accept,
            20,
            || sidecar.summary(),
        )
    };

    // 1. Each name to its subset; another name to the service's own cluster (both).
    let a = converge("a to v1", "a.api.example.com", &|c| only(c, v1));
    assert!(only(&a, v1), "{a:?}");
    let b = converge("b to v2", "b.api.example.com", &|c| only(c, v2));
    assert!(only(&b, v2), "{b:?}");
    let other = converge("other name to both", "api.example.com", &|c| {
        exactly(c, &[v1, v2])
    });
    assert!(exactly(&other, &[v1, v2]), "{other:?}");

    // 2. The edit moves b.api.example.com to v1; a's route is untouched.
    write_routes(&config, "v1", "v1");
    let b = converge("b to v1", "b.api.example.com", &|c| only(c, v1));
    assert!(only(&b, v1), "{b:?}");
    let a = converge("a still to v1", "a.api.example.com", &|c| only(c, v1));
    assert!(only(&a, v1), "{a:?}");

    assert_eq!(sidecar.rejected_updates(), 0, "{}", sidecar.summary());
}

/// Proves that real Envoy accepts the listener a captured sidecar gets for a TLS port
/// routed by SNI (`examples/tls-sni`: chains by address and name, chains by the names of
/// entries without addresses, the TLS inspector),
/// which the scenario above cannot bind: checked by `envoy --mode validate`.
#[test]
fn envoy_accepts_the_tls_sni_example_listeners() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-tls-sni-validate");
    let captured = ProxyNode::sidecar("sleep-abc", "default", "127.0.2.50", &[("app", "sleep")]);
    let nodes = [(&captured, ProxyKind::Sidecar)];
    let listeners = envoy_validates_example(&envoy_bin, dir.path(), "tls-sni", &nodes);
    let text: String = listeners[0].iter().map(|l| l.to_string()).collect();
    assert!(
        text.contains("serverNames") || text.contains("server_names"),
        "SNI chains: {text}"
    );
    assert!(text.contains("tls_inspector"), "the TLS inspector: {text}");
    for name in ["www.example.com", "*.wikipedia.org", "edition.example.com"] {
        assert!(text.contains(name), "the SNI chain of {name}: {text}");
    }
}

/// Two ServiceEntries without addresses on one TLS port (`a.example.com`, `b.example.com`,
/// each with one loopback endpoint), and the client's Sidecar with a TLS egress listener
/// bound to any address (`0.0.0.0`, captureMode NONE): nothing but the name tells them
/// apart.
fn write_nameless_entries(config: &Path, port: u16, backend_port: u16) {
    let (a, b) = (ip(31), ip(32));
    write_config(
        config,
        "entries.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: a, namespace: default}}
spec:
  hosts: [a.example.com]
  ports: [{{number: {port}, name: tls, protocol: TLS, targetPort: {backend_port}}}]
  resolution: STATIC
  endpoints: [{{address: {a}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: b, namespace: default}}
spec:
  hosts: [b.example.com]
  ports: [{{number: {port}, name: https, protocol: HTTPS, targetPort: {backend_port}}}]
  resolution: STATIC
  endpoints: [{{address: {b}}}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: client, namespace: default}}
spec:
  workloadSelector: {{labels: {{app: client}}}}
  egress:
  - port: {{number: {port}, protocol: TLS, name: tls}}
    bind: 0.0.0.0
    captureMode: NONE
    hosts: [./*]
"
        ),
    );
}

/// Proves that TLS services without an address of their own are told apart by the name
/// the client sends, as Istio does on a listener for any address: each entry's host name
/// reaches only its own backend (which sees the name itself: the handshake is passed
/// through), a name neither entry has reaches neither, and a `tls[]` route for
/// `a.example.com` moves that name to `b.example.com`'s backend, with no update rejected.
#[test]
fn sidecar_tells_tls_services_without_addresses_apart_by_sni() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-tls-sni-names");
    let config = dir.subdir("config");
    let (port, backend_port) = (free_port(), free_port());
    let authority = ca("tls-sni names test CA");
    let (cert, key) = leaf(&authority, &["a.example.com", "b.example.com"], None);
    let _a = TlsBackend::start(&ip(31), backend_port, "entry-a", &cert, &key, None);
    let _b = TlsBackend::start(&ip(32), backend_port, "entry-b", &cert, &key, None);
    write_nameless_entries(&config, port, backend_port);
    let meshflow = Meshflow::start(&config, dir.path());

    let sidecar = client_sidecar(
        &envoy_bin,
        &dir,
        &meshflow,
        "client-def",
        40,
        &format!("0.0.0.0_{port}"),
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let (a, b) = ("entry-a", "entry-b");
    let converge = |what: &str, sni: &str, accept: &dyn Fn(&HashMap<String, usize>) -> bool| {
        converge_then(
            what,
            |k| sni_tally(addr, sni, k),
            accept,
            10,
            || sidecar.summary(),
        )
    };
    let refused = |c: &HashMap<String, usize>| c.keys().all(|k| k.starts_with("error:"));

    // 1. Each entry's name to its own backend; another name to neither.
    let to_a = converge("a.example.com to a", "a.example.com", &|c| only(c, a));
    assert!(only(&to_a, a), "{to_a:?}");
    let to_b = converge("b.example.com to b", "b.example.com", &|c| only(c, b));
    assert!(only(&to_b, b), "{to_b:?}");
    let other = converge("c.example.com refused", "c.example.com", &refused);
    assert!(refused(&other), "{other:?}");

    // 2. A tls[] route moves a.example.com's connections to b.example.com.
    write_config(
        &config,
        "routes.yaml",
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: default}
spec:
  hosts: [a.example.com]
  tls:
  - match: [{sniHosts: [a.example.com]}]
    route: [{destination: {host: b.example.com}}]
",
    );
    let moved = converge("a.example.com to b", "a.example.com", &|c| only(c, b));
    assert!(only(&moved, b), "{moved:?}");
    let to_b = converge("b.example.com still to b", "b.example.com", &|c| only(c, b));
    assert!(only(&to_b, b), "{to_b:?}");

    assert_eq!(sidecar.rejected_updates(), 0, "{}", sidecar.summary());
}
