//! Real-Envoy gateway `AUTO_PASSTHROUGH` (Istio's cross-network gateway): the client names
//! the cluster it wants in its SNI, `outbound_.PORT_.SUBSET_.HOST`, and the gateway passes the
//! TLS stream through, untouched, to that cluster. The `api.internal` ServiceEntry has two
//! endpoints (subsets v1, v2), each a loopback TLS backend answering with its name.

use crate::support;

use std::collections::HashMap;
use std::net::SocketAddr;

use support::pki::{ca, leaf};
use support::tls_backend::TlsBackend;
use support::tls_client::tls_get;
use support::{
    converge_then, exactly, free_port, only, require_envoy, write_config, Envoy, Meshflow,
    ProxyNode, TestDir,
};

/// This test's loopback /24.
const NET: u8 = 95;

fn ip(host: u8) -> String {
    format!("127.0.{NET}.{host}")
}

fn mesh_yaml(gateway_port: u16, backend_port: u16) -> String {
    format!(
        "\
apiVersion: v1
kind: Pod
metadata: {{name: eastwestgateway-abc, namespace: istio-system, labels: {{istio: eastwestgateway}}}}
status: {{podIP: {gw}}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: cross-network-gateway, namespace: istio-system}}
spec:
  selector: {{istio: eastwestgateway}}
  servers:
  - port: {{number: {gateway_port}, name: tls, protocol: TLS}}
    bind: 127.0.0.1
    hosts: ['*.internal']
    tls: {{mode: AUTO_PASSTHROUGH}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: api, namespace: default}}
spec:
  hosts: [api.internal]
  location: MESH_INTERNAL
  ports: [{{number: 443, name: tls, protocol: TLS, targetPort: {backend_port}}}]
  resolution: STATIC
  endpoints:
  - {{address: {v1}, labels: {{version: v1}}}}
  - {{address: {v2}, labels: {{version: v2}}}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: partner, namespace: default}}
spec:
  hosts: [partner.internal]
  ports: [{{number: 443, name: tls, protocol: TLS, targetPort: {backend_port}}}]
  resolution: STATIC
  endpoints:
  - {{address: {v1}}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: api, namespace: default}}
spec:
  host: api.internal
  subsets:
  - {{name: v1, labels: {{version: v1}}}}
  - {{name: v2, labels: {{version: v2}}}}
",
        gw = ip(30),
        v1 = ip(11),
        v2 = ip(12),
    )
}

/// `n` TLS connections to `addr` with SNI `sni`, tallied by the backend that answered, or
/// by the failure (`error`).
fn sni_tally(addr: SocketAddr, sni: &str, n: usize) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for _ in 0..n {
        let key = match tls_get(addr, sni, &[], None) {
            Ok((response, _)) => response
                .split_once("\r\n\r\n")
                .map_or_else(|| "no body".to_string(), |(_, b)| b.to_string()),
            Err(_) => "error".to_string(),
        };
        *out.entry(key).or_default() += 1;
    }
    out
}

/// Proves that an `AUTO_PASSTHROUGH` server routes by the cluster named in the SNI: a
/// subset's name reaches only that subset's backend, the service's own (`_` subset) both,
/// and a name that is no cluster of the gateway is refused — nor is a service outside the
/// mesh (`partner.internal`, a ServiceEntry of Istio's default location MESH_EXTERNAL, whose
/// backend answers: the gateway has its cluster but no chain for it, as Istio's has none);
/// with no update rejected.
#[test]
fn auto_passthrough_routes_by_the_cluster_in_the_sni() {
    let envoy_bin = require_envoy!();
    let dir = TestDir::new("envoy-gateway-auto-passthrough");
    let config = dir.subdir("config");
    let (gateway_port, backend_port) = (free_port(), free_port());
    let authority = ca("auto passthrough test CA");
    let (cert, key) = leaf(&authority, &["api.internal"], None);
    let _v1 = TlsBackend::start(&ip(11), backend_port, "api-v1", &cert, &key, None);
    let _v2 = TlsBackend::start(&ip(12), backend_port, "api-v2", &cert, &key, None);
    write_config(&config, "mesh.yaml", &mesh_yaml(gateway_port, backend_port));
    let meshflow = Meshflow::start(&config, dir.path());
    let node = ProxyNode::router(
        "eastwestgateway-abc",
        "istio-system",
        &ip(30),
        &[("istio", "eastwestgateway")],
    );
    let router = Envoy::start_live(&envoy_bin, dir.path(), &node, meshflow.xds_addr());
    router.await_listener(&format!("127.0.0.1_{gateway_port}"));
    let addr = SocketAddr::from(([127, 0, 0, 1], gateway_port));
    let converge = |what: &str, sni: &str, accept: &dyn Fn(&HashMap<String, usize>) -> bool| {
        converge_then(
            what,
            |k| sni_tally(addr, sni, k),
            accept,
            20,
            || router.summary(),
        )
    };
    let (v1, v2) = ("api-v1", "api-v2");

    let got = converge("v1 by SNI", "outbound_.443_.v1_.api.internal", &|c| {
        only(c, v1)
    });
    assert!(only(&got, v1), "{got:?}");
    let got = converge("v2 by SNI", "outbound_.443_.v2_.api.internal", &|c| {
        only(c, v2)
    });
    assert!(only(&got, v2), "{got:?}");
    let got = converge("the service's own", "outbound_.443_._.api.internal", &|c| {
        exactly(c, &[v1, v2])
    });
    assert!(exactly(&got, &[v1, v2]), "{got:?}");
    // A name that is no cluster of the gateway: no chain takes it.
    let got = sni_tally(addr, "outbound_.443_.v3_.api.internal", 5);
    assert!(only(&got, "error"), "{got:?}");
    let got = sni_tally(addr, "api.internal", 5);
    assert!(only(&got, "error"), "{got:?}");
    let got = sni_tally(addr, "outbound_.443_._.partner.internal", 5);
    assert!(only(&got, "error"), "{got:?}");
    assert!(
        router
            .cluster_names()
            .iter()
            .any(|c| c == "outbound|443||partner.internal"),
        "the gateway holds the external service's cluster: {}",
        router.summary()
    );

    assert_eq!(router.rejected_updates(), 0, "{}", router.summary());
}
