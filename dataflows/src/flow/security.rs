//! The security stopgap's join: which security policies (PeerAuthentication,
//! AuthorizationPolicy, RequestAuthentication) apply to which connected proxy, composed
//! per proxy into what its inbound side must refuse ([`InboundSecurity`]), and the errors
//! that say each restricting policy that applies is not enforced (and what fails closed
//! in its place, or that gateways it selects are not protected).
//!
//! A policy in a namespace other than the root meets only that namespace's proxies; one in
//! the root namespace meets every proxy (mesh-wide, or by labels in any namespace), which
//! is what it affects. Policies restricting nothing (PERMISSIVE, AUDIT) give no row.

use super::mesh::Mesh;
use super::Coll;
use crate::model::*;

/// What the security policies make of each connected proxy.
pub(super) struct Secured<'s> {
    /// `(sidecar, security)` of each sidecar whose inbound side the policies change.
    pub inbound: Coll<'s, (ProxyId, InboundSecurity)>,
    /// One error per restricting policy that applies to some connected proxy.
    pub errors: Coll<'s, ConfigError>,
}

pub(super) fn per_proxy<'s>(
    policies: Coll<'s, (ConfigKey, SecurityPolicy)>,
    proxies: &Coll<'s, (ProxyId, Proxy)>,
    mesh: &Mesh<'s>,
) -> Secured<'s> {
    let rooted = policies
        .map(|(_, p)| ((), p))
        .join_map(mesh.clone(), |_, p, m| {
            (p.clone(), m.root_namespace.clone())
        });
    let in_root = rooted
        .clone()
        .filter(|(p, root)| p.key.namespace == *root)
        .map(|(p, root)| ((), (p, root)));
    let in_namespace = rooted
        .filter(|(p, root)| p.key.namespace != *root)
        .map(|(p, root)| (p.key.namespace.clone(), (p, root)));
    // Whether the stopgap reaches the proxy: a sidecar with its traffic captured, whose
    // `virtualInbound` it secures. Gateways, proxyless gRPC servers and sidecars without
    // capture are not reached.
    let by_namespace = proxies.clone().map(|(id, p)| {
        let reached = p.kind == ProxyKind::Sidecar && !p.interception_none;
        (p.namespace.clone(), (id, reached, p.labels))
    });
    let everywhere = by_namespace.clone().map(|(ns, rest)| ((), (ns, rest)));
    // `(proxy, (reached, root, policy))` for every policy that applies to a proxy.
    let applied = by_namespace
        .join_map(in_namespace, |ns, (id, reached, labels), (p, root)| {
            p.applies(ns, labels, root)
                .then(|| (id.clone(), (*reached, root.clone(), p.clone())))
        })
        .concat(
            everywhere.join_map(in_root, |_, (ns, (id, reached, labels)), (p, root)| {
                p.applies(ns, labels, root)
                    .then(|| (id.clone(), (*reached, root.clone(), p.clone())))
            }),
        )
        .flat_map(|x| x);
    let inbound = applied
        .clone()
        .filter(|(_, (reached, _, _))| *reached)
        .map(|(id, (_, root, p))| (id, (root, p)))
        .reduce(|_, vals: &[(&(String, SecurityPolicy), isize)], out| {
            let root = &vals[0].0 .0;
            let sec = InboundSecurity::compose(vals.iter().map(|(v, _)| &v.1), root);
            if !sec.is_open() {
                out.push((sec, 1isize));
            }
        });
    // Per restricting policy: whether it meets proxies the stopgap reaches, and others.
    let errors = applied
        .filter(|(_, (_, _, p))| p.restricts())
        .map(|(_, (reached, _, p))| (p, reached))
        .distinct()
        .reduce(|_, vals: &[(&bool, isize)], out| {
            let sidecars = vals.iter().any(|(s, _)| **s);
            let others = vals.iter().any(|(s, _)| !**s);
            out.push(((sidecars, others), 1isize));
        })
        .flat_map(|(p, (sidecars, others))| p.not_enforced(sidecars, others));
    Secured { inbound, errors }
}
