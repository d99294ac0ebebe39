//! Random security policies (PeerAuthentication, AuthorizationPolicy, RequestAuthentication
//! records of the fail-closed stopgap): in the proxies' namespaces and the root namespace,
//! namespace-wide or selecting labels some proxies carry, with every mTLS mode, ports,
//! creation times that tie and names that order them.

use crate::records::{pick, NAMESPACES};
use crate::support::labels;
use dataflows::model::*;
use rand::rngs::StdRng;
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};

fn mode(rng: &mut StdRng) -> MtlsMode {
    pick(
        rng,
        &[
            MtlsMode::Unset,
            MtlsMode::Disable,
            MtlsMode::Permissive,
            MtlsMode::Strict,
            MtlsMode::Strict,
        ],
    )
}

/// One random version of one of a few policies (their keys collide, so updates and deletes
/// happen).
pub fn security(rng: &mut StdRng) -> Record {
    let kind = pick(
        rng,
        &[
            Kind::PeerAuthentication,
            Kind::PeerAuthentication,
            Kind::AuthorizationPolicy,
            Kind::RequestAuthentication,
        ],
    );
    let ns = pick(rng, &NAMESPACES);
    let name = pick(rng, &["a", "b", "default"]);
    let selector = match rng.random_range(0..5) {
        0 => Some(labels(&[("app", "client")])),
        1 => Some(labels(&[("app", "svc0")])),
        2 => Some(labels(&[("istio", "ingressgateway")])),
        _ => None,
    };
    let effect = match kind {
        Kind::PeerAuthentication => {
            let mut ports = BTreeMap::new();
            if selector.is_some() && rng.random_bool(0.5) {
                ports.insert(pick(rng, &[9080, 9081, 8888, 8443, 15000]), mode(rng));
            }
            PolicyEffect::Peer {
                mode: mode(rng),
                ports,
            }
        }
        Kind::AuthorizationPolicy => PolicyEffect::DenyAll,
        _ => {
            let set = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<BTreeSet<_>>();
            PolicyEffect::Tokens {
                headers: set(pick(rng, &[&["authorization"][..], &["x-jwt"], &[]])),
                params: set(pick(rng, &[&["access_token"][..], &[]])),
                cookies: set(pick(rng, &[&["session"][..], &[]])),
            }
        }
    };
    Record::Security(SecurityPolicy {
        key: ConfigKey::new(kind, ns, name),
        created: pick(rng, &["", "2020-01-01T00:00:00Z", "2021-06-01T00:00:00Z"]).into(),
        selector,
        effect,
    })
}
