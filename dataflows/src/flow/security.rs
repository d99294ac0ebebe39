//! The security policies' join: which security policies (PeerAuthentication,
//! AuthorizationPolicy, RequestAuthentication) apply to which connected proxy, composed
//! per proxy into what its inbound side must refuse ([`InboundSecurity`]), and the errors
//! that say where a restricting policy is not enforced (what fails closed in its place,
//! or proxies it selects that meshflow does not protect), and which RequestAuthentication
//! keys meshflow could not fetch.
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
    /// `(router, security)` of each gateway whose listeners the policies change
    /// ([`InboundSecurity::for_router`]): it joins the router's scope key.
    pub routers: Coll<'s, (ProxyId, InboundSecurity)>,
    /// `(sidecar, security)` of every sidecar, captured or not, the policies change: for
    /// the Sidecar `ingress` listeners it binds itself, if any (it joins the scope key there).
    pub bound: Coll<'s, (ProxyId, InboundSecurity)>,
    /// One error per restricting policy that applies to some connected proxy.
    pub errors: Coll<'s, ConfigError>,
}

/// Policies in the root namespace, keyed by `()` (they meet every workload), and the others
/// by namespace, each with the root namespace's name.
#[allow(clippy::type_complexity)]
/// `(workload, policy)` for every policy of `policies` that applies to a workload (its
/// namespace's, or the root namespace's, selecting it or not: [`SecurityPolicy::applies`]).
pub(super) fn applying<'s>(
    policies: Coll<'s, (ConfigKey, SecurityPolicy)>,
    workloads: &Coll<'s, (String, Workload)>,
    mesh: &Mesh<'s>,
) -> Coll<'s, (ConfigKey, ConfigKey)> {
    let (in_root, in_namespace) = placed(policies, mesh);
    let by_namespace = workloads
        .clone()
        .map(|(_, w)| (w.origin.namespace.clone(), (w.origin, w.labels)));
    let everywhere = by_namespace.clone().map(|(ns, w)| ((), (ns, w)));
    by_namespace
        .join_map(in_namespace, |ns, (w, labels), (p, root)| {
            p.applies(ns, labels, root)
                .then(|| (w.clone(), p.key.clone()))
        })
        .concat(
            everywhere.join_map(in_root, |_, (ns, (w, labels)), (p, root)| {
                p.applies(ns, labels, root)
                    .then(|| (w.clone(), p.key.clone()))
            }),
        )
        .flat_map(|x| x)
}

fn placed<'s>(
    policies: Coll<'s, (ConfigKey, SecurityPolicy)>,
    mesh: &Mesh<'s>,
) -> (
    Coll<'s, ((), (SecurityPolicy, String))>,
    Coll<'s, (String, (SecurityPolicy, String))>,
) {
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
    (in_root, in_namespace)
}

/// The workloads (Pods, WorkloadEntries) with what their clients must know of their
/// PeerAuthentications ([`Workload::peer`]): the modes, where one disables mTLS on some
/// port. Only PeerAuthentications join; a workload no DISABLE reaches passes unchanged, so
/// a STRICT or PERMISSIVE edit changes no endpoint.
/// A workload whose change is held part-way ([`MtlsHold`]) shows its clients the hold's
/// view instead.
pub(super) fn with_peer_modes<'s>(
    workloads: Coll<'s, (String, Workload)>,
    policies: &Coll<'s, (ConfigKey, SecurityPolicy)>,
    holds: &Coll<'s, MtlsHold>,
    mesh: &Mesh<'s>,
) -> Coll<'s, (String, Workload)> {
    let peers = policies
        .clone()
        .filter(|(_, p)| matches!(p.effect, PolicyEffect::Peer { .. }));
    let (in_root, in_namespace) = placed(peers, mesh);
    type Id = (String, ConfigKey);
    let by_namespace = workloads
        .clone()
        .map(|(ip, w)| (w.origin.namespace.clone(), ((ip, w.origin), w.labels)));
    let everywhere = by_namespace.clone().map(|(ns, rest)| ((), (ns, rest)));
    let applied: Coll<'s, (Id, (String, SecurityPolicy))> = by_namespace
        .join_map(in_namespace, |ns, (id, labels), (p, root)| {
            p.applies(ns, labels, root)
                .then(|| (id.clone(), (root.clone(), p.clone())))
        })
        .concat(
            everywhere.join_map(in_root, |_, (ns, (id, labels)), (p, root)| {
                p.applies(ns, labels, root)
                    .then(|| (id.clone(), (root.clone(), p.clone())))
            }),
        )
        .flat_map(|x| x);
    let modes = applied.reduce(|_, vals: &[(&(String, SecurityPolicy), isize)], out| {
        let root = &vals[0].0 .0;
        if let Some(m) = PeerModes::for_clients(vals.iter().map(|(v, _)| &v.1), root) {
            out.push((m, 1isize));
        }
    });
    let held = holds
        .clone()
        .map(|h| ((h.ip.clone(), h.workload.clone()), h.client_view().cloned()));
    let modes = modes
        .antijoin(held.clone().map(|(id, _)| id).distinct())
        .concat(held.flat_map(|(id, view)| view.map(|v| (id, v))));
    let keyed = workloads.map(|(ip, w)| ((ip, w.origin.clone()), w));
    let changed = keyed.clone().join_map(modes.clone(), |(ip, _), w, m| {
        let mut w = w.clone();
        w.peer = Some(m.clone());
        (ip.clone(), w)
    });
    keyed
        .antijoin(modes.map(|(id, _)| id).distinct())
        .map(|((ip, _), w)| (ip, w))
        .concat(changed)
}

/// A warning for each policy whose selector matches no workload (Pod or WorkloadEntry) it
/// may select: its namespace's, or every namespace's from the root namespace (Istio's
/// IST0127 NoMatchingWorkloadsFound). It retracts once a workload matches.
pub(super) fn selecting_nothing<'s>(
    policies: &Coll<'s, (ConfigKey, SecurityPolicy)>,
    workloads: &Coll<'s, (String, Workload)>,
    mesh: &Mesh<'s>,
) -> Coll<'s, ConfigError> {
    let selecting = policies.clone().filter(|(_, p)| p.selector.is_some());
    let matched = applying(selecting.clone(), workloads, mesh)
        .map(|(_, k)| k)
        .distinct();
    // A namespace-wide AuthorizationPolicy (not the root namespace's) in a namespace with
    // no workload, as Istio's analyzer says too.
    let occupied = workloads
        .clone()
        .map(|(_, w)| w.origin.namespace)
        .distinct();
    let empty = policies
        .clone()
        .filter(|(k, p)| p.selector.is_none() && k.kind == Kind::AuthorizationPolicy)
        .map(|(k, _)| (k.namespace.clone(), k))
        .antijoin(occupied)
        .map(|(_, k)| ((), k))
        .join_map(mesh.clone(), |_, k, m| {
            (k.namespace != m.root_namespace).then(|| ConfigError {
                message: "its namespace has no workload (Pod or WorkloadEntry): it applies to \
                          nothing yet"
                    .to_string(),
                object: k.clone(),
                code: ErrorCode::SecurityPolicySelectsNothing,
            })
        })
        .flat_map(|e| e);
    selecting
        .map(|(k, _)| (k, ()))
        .antijoin(matched)
        .map(|(key, ())| ConfigError {
            message: format!(
                "spec.selector matches no workload (Pod or WorkloadEntry){}: it applies to \
                 nothing yet",
                if key.kind == Kind::PeerAuthentication {
                    ""
                } else {
                    " of its namespace, or of any namespace from the root namespace"
                }
            ),
            object: key,
            code: ErrorCode::SecurityPolicySelectsNothing,
        })
        .concat(empty)
}

/// A warning for each namespace an AuthorizationPolicy's rules name (`namespaces`,
/// `notNamespaces`, and the `ns/NS` of `principals`) that matches no namespace of the mesh
/// (Istio's IST0101 ReferencedResourceNotFound for namespaces): a namespace is known when
/// some workload, service or connected proxy lives in it (Namespace objects are not records).
/// Values are matched as Istio matches them (`*`, `x*`, `*x`, else exactly, ignoring case).
/// A warning, not Istio's error: a namespace that holds only its Namespace object is not
/// seen. It retracts once something lives in the namespace.
pub(super) fn unknown_namespaces<'s>(
    policies: &Coll<'s, (ConfigKey, SecurityPolicy)>,
    workloads: &Coll<'s, (String, Workload)>,
    services: &Coll<'s, (Hostname, Service)>,
    proxies: &Coll<'s, (ProxyId, Proxy)>,
    mesh: &Mesh<'s>,
) -> Coll<'s, ConfigError> {
    let referenced = policies.clone().flat_map(|(key, p)| {
        p.namespace_refs()
            .into_iter()
            .map(move |(at, ns)| ((), (key.clone(), at, ns)))
    });
    let known = workloads
        .clone()
        .map(|(_, w)| w.origin.namespace)
        .concat(services.clone().map(|(_, s)| s.origin.namespace))
        .concat(proxies.clone().map(|(_, p)| p.namespace))
        .distinct()
        .map(|ns| ((), Some(ns)));
    // The mesh settings' one record stands in, so the set exists when nothing lives
    // anywhere, and a policy edit leaves the set's group alone.
    let set = mesh.clone().map(|_| ((), None)).concat(known).reduce(
        |_, vals: &[(&Option<String>, isize)], out| {
            let set: std::collections::BTreeSet<String> =
                vals.iter().filter_map(|(v, _)| (*v).clone()).collect();
            out.push((set, 1isize));
        },
    );
    referenced
        .join_map(set, |_, (key, at, ns), known| {
            (!known.iter().any(|k| namespace_matches(k, ns))).then(|| ConfigError {
                object: key.clone(),
                code: ErrorCode::NamespaceNotFound,
                message: format!(
                    "{at}: namespace {ns:?} matches no namespace that holds a workload, a \
                     service or a proxy: the rule never matches a peer of it"
                ),
            })
        })
        .flat_map(|e| e)
}

/// Istio's namespace patterns: `*` any, `*x` a suffix, `x*` a prefix, else exactly (case
/// ignored).
fn namespace_matches(ns: &str, pattern: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    if let Some(rest) = pattern.strip_prefix('*') {
        return ns.ends_with(rest);
    }
    if let Some(rest) = pattern.strip_suffix('*') {
        return ns.starts_with(rest);
    }
    ns.eq_ignore_ascii_case(pattern)
}

/// The mesh config's external authorization providers, resolved against the services in
/// effect ([`resolve_providers`]), under the unit key. Only the hosts providers name are
/// looked up, so a service change elsewhere costs nothing here.
pub(super) fn ext_authz_providers<'s>(
    mesh: &Mesh<'s>,
    services: &Coll<'s, (Hostname, HostServices)>,
) -> Coll<'s, ((), ProviderTable)> {
    let named = mesh
        .clone()
        .flat_map(|(_, m)| {
            m.ext_authz
                .iter()
                .map(|p| p.service_ref().1.to_string())
                .collect::<Vec<_>>()
        })
        .distinct();
    let found = services
        .clone()
        .flat_map(|(h, s)| {
            s.all()
                .iter()
                .map(|s| (h.clone(), s.origin.namespace.clone()))
                .collect::<Vec<_>>()
        })
        .semijoin(named)
        .map(|(h, ns)| ((), Some((h, ns))));
    // One placeholder per mesh settings record, so the table exists with no host found.
    let defined = mesh.clone().map(|_| ((), None)).concat(found).reduce(
        |_, vals: &[(&Option<(Hostname, String)>, isize)], out| {
            let mut by_host: std::collections::BTreeMap<Hostname, Vec<String>> = Default::default();
            for ((h, ns), _) in vals.iter().filter_map(|(v, d)| v.as_ref().map(|v| (v, d))) {
                by_host.entry(h.clone()).or_default().push(ns.clone());
            }
            out.push((by_host, 1isize));
        },
    );
    mesh.clone().join_map(defined, |_, m, by_host| {
        ((), resolve_providers(&m.ext_authz, by_host))
    })
}

/// One error per CUSTOM AuthorizationPolicy whose provider cannot be used: its requests
/// are denied instead, whether it selects a workload yet or not.
fn unusable_providers<'s>(
    policies: &Coll<'s, (ConfigKey, SecurityPolicy)>,
    providers: &Coll<'s, ((), ProviderTable)>,
) -> Coll<'s, ConfigError> {
    policies
        .clone()
        .flat_map(|(k, p)| match p.effect {
            PolicyEffect::Custom(c) => Some(((), (k, c.provider))),
            _ => None,
        })
        .join_map(providers.clone(), |_, (key, name), table| {
            let why = match table.get(name) {
                Some(Ok(_)) => return None,
                Some(Err(why)) => why.clone(),
                None => {
                    format!("the mesh config has no external authorization provider named {name:?}")
                }
            };
            Some(ConfigError {
                object: key.clone(),
                code: ErrorCode::ExtAuthzProviderUnusable,
                message: format!(
                    "spec.provider.name: provider {name:?} cannot be used ({why}): the requests \
                     this policy's rules match are denied"
                ),
            })
        })
        .flat_map(|e| e)
}

pub(super) fn per_proxy<'s>(
    policies: Coll<'s, (ConfigKey, SecurityPolicy)>,
    proxies: &Coll<'s, (ProxyId, Proxy)>,
    mesh: &Mesh<'s>,
    providers: &Coll<'s, ((), ProviderTable)>,
    holds: &Coll<'s, MtlsHold>,
) -> Secured<'s> {
    // Keys a RequestAuthentication's `jwksUri` did not yield, whether it selects anyone
    // yet or not (Istio's analysis reports an unreachable JWKS alike).
    let jwks_errors = policies.clone().flat_map(|(_, p)| p.jwks_problems());
    let provider_errors = unusable_providers(&policies, providers);
    let (in_root, in_namespace) = placed(policies, mesh);
    // What the stopgap makes of a policy on the proxy ([`SecurityPolicy::reach`]): a
    // captured sidecar's `virtualInbound` and a gateway's listeners fail closed; an
    // uncaptured sidecar's bound `ingress` listeners do, but not the application's own
    // ports; proxyless gRPC servers are not reached.
    let by_namespace = proxies.clone().map(|(id, p)| {
        let class = (p.kind, !p.interception_none);
        (p.namespace, (id, p.labels, class))
    });
    let everywhere = by_namespace.clone().map(|(ns, rest)| ((), (ns, rest)));
    type Class = (ProxyKind, bool);
    type Applied = (Class, Reach, String, SecurityPolicy);
    let applied_to = |id: &ProxyId, class: &Class, p: &SecurityPolicy, root| {
        let reach = p.reach(class.0, class.1);
        (id.clone(), (*class, reach, root, p.clone()))
    };
    // `(proxy, ((kind, captured), reach, root, policy))` for every policy that applies to a
    // proxy.
    let applied: Coll<'s, (ProxyId, Applied)> = by_namespace
        .join_map(in_namespace, move |ns, (id, labels, class), (p, root)| {
            p.applies(ns, labels, root)
                .then(|| applied_to(id, class, p, root.clone()))
        })
        .concat(
            everywhere.join_map(in_root, move |_, (ns, (id, labels, class)), (p, root)| {
                p.applies(ns, labels, root)
                    .then(|| applied_to(id, class, p, root.clone()))
            }),
        )
        .flat_map(|x| x);
    // Composed per proxy: every policy of a sidecar (an uncaptured one's bound `ingress`
    // listeners fail closed too), those a gateway fails closed for.
    let secured = applied
        .clone()
        .filter(|(_, ((kind, captured), _, _, p))| p.composes(*kind, *captured))
        .map(|(id, (class, _, root, p))| (id, (class, root, p)))
        .reduce(
            |_, vals: &[(&(Class, String, SecurityPolicy), isize)], out| {
                let (class, root) = (vals[0].0 .0, &vals[0].0 .1);
                let sec = InboundSecurity::compose(vals.iter().map(|(v, _)| &v.2), root);
                let sec = match class.0 {
                    ProxyKind::Router => sec.for_router(),
                    _ => (!sec.is_open()).then_some(sec),
                };
                if let Some(sec) = sec {
                    out.push(((class, sec), 1isize));
                }
            },
        );
    // A principal of the mesh's trust domain stands for each alias too.
    let secured =
        secured
            .map(|(id, v)| ((), (id, v)))
            .join_map(mesh.clone(), |_, (id, (class, sec)), m| {
                let sec = sec
                    .clone()
                    .with_trust_domains(&m.inbound_mtls.trust_domains);
                (id.clone(), (*class, sec))
            });
    // The providers CUSTOM policies name, resolved: only proxies with such policies join
    // the table, so a provider's edit reaches no one else.
    let custom = secured
        .clone()
        .filter(|(_, (_, sec))| !sec.custom.is_empty())
        .map(|(id, v)| ((), (id, v)))
        .join_map(providers.clone(), |_, (id, (class, sec)), table| {
            (id.clone(), (*class, sec.clone().with_providers(table)))
        });
    let secured = secured
        .filter(|(_, (_, sec))| sec.custom.is_empty())
        .concat(custom);
    let secured = bridged(secured, proxies, holds);
    let inbound = secured.clone().flat_map(|(id, ((kind, captured), sec))| {
        (kind == ProxyKind::Sidecar && captured).then_some((id, sec))
    });
    let bound = secured
        .clone()
        .flat_map(|(id, ((kind, _), sec))| (kind == ProxyKind::Sidecar).then_some((id, sec)));
    let routers =
        secured.flat_map(|(id, ((kind, _), sec))| (kind == ProxyKind::Router).then_some((id, sec)));
    // Per restricting policy that meets proxies it does not protect: the error saying so.
    let errors = applied
        .filter(|(_, (_, reach, _, p))| *reach == Reach::Unprotected && p.restricts())
        .map(|(_, (_, _, _, p))| p)
        .distinct()
        .flat_map(|p| p.not_enforced(true))
        .concat(jwks_errors)
        .concat(provider_errors);
    Secured {
        inbound,
        routers,
        bound,
        errors,
    }
}

/// The sidecars of workloads whose PeerAuthentication change is held part-way accept both
/// mTLS and plaintext on the ports that flip ([`MtlsHold::bridge`]); one left restricting
/// nothing drops out, as an open one never enters. Only the held sidecars join.
#[allow(clippy::type_complexity)]
fn bridged<'s>(
    secured: Coll<'s, (ProxyId, ((ProxyKind, bool), InboundSecurity))>,
    proxies: &Coll<'s, (ProxyId, Proxy)>,
    holds: &Coll<'s, MtlsHold>,
) -> Coll<'s, (ProxyId, ((ProxyKind, bool), InboundSecurity))> {
    let at = holds
        .clone()
        .map(|h| ((h.workload.namespace.clone(), h.ip.clone()), h));
    let held = proxies
        .clone()
        .filter(|(_, p)| p.kind == ProxyKind::Sidecar)
        .flat_map(|(id, p)| {
            p.ips
                .into_iter()
                .map(move |ip| ((p.namespace.clone(), ip), id.clone()))
        })
        .join_map(at, |_, id, h| (id.clone(), h.clone()))
        .reduce(|_, vals: &[(&MtlsHold, isize)], out| {
            out.push((
                vals.iter().map(|(h, _)| (*h).clone()).collect::<Vec<_>>(),
                1isize,
            ));
        });
    let changed = secured
        .clone()
        .join_map(held.clone(), |id, (class, sec), holds| {
            let sec = holds.iter().fold(sec.clone(), |s, h| h.bridge(s));
            (id.clone(), (*class, sec))
        })
        .filter(|(_, (_, sec))| !sec.is_open());
    secured.antijoin(held.map(|(id, _)| id)).concat(changed)
}
