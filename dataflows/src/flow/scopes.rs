//! Scopes: which [`ScopeKey`] each connected proxy's shared resources come from. In: proxies,
//! Sidecar resources, Gateways, VirtualServices' `sourceLabels`. Out: `(proxy, scope)` and, per scope, the Sidecar spec in
//! effect. Proxies of one scope share every scope-level stage downstream, so this is where a
//! proxy's identity stops mattering to everything but [`super::inbound`].

use super::endpoints::Resolved;
use super::mesh::Mesh;
use super::Coll;
use crate::model::*;
use crate::rules;

/// `(proxy, scope)` for every connected proxy: sidecars and proxyless clients by the Sidecar
/// resource in effect, routers by the Gateways that select them; both by the `sourceLabels`
/// selectors of VirtualServices they match, by their node metadata `IDLE_TIMEOUT` and the
/// mesh's `pathNormalization` (which their listeners carry); routers also by where their servers listen (the target
/// ports of their own Services).
pub(super) fn of_proxies<'s>(
    mesh: &Mesh<'s>,
    proxies: &Coll<'s, (ProxyId, Proxy)>,
    i: ScopeInputs<'_, 's>,
    vss: &Coll<'s, (ConfigKey, VirtualService)>,
    drs: &Coll<'s, (ConfigKey, DestinationRule)>,
    services: &Coll<'s, (Hostname, HostServices)>,
    endpoints: &Resolved<'s>,
) -> Coll<'s, (ProxyId, ScopeKey)> {
    let routers = router_scopes(proxies, i.gateways, endpoints);
    // A gateway's listeners refuse what the security policies selecting it ask (stopgap).
    let secured = routers
        .clone()
        .join_map(i.router_security.clone(), |id, s, sec| {
            (id.clone(), s.clone().with_security(sec.clone()))
        })
        .concat(routers.antijoin(i.router_security.clone().map(|(id, _)| id)));
    let sidecars = bound_ingress_secured(sidecar_scopes(mesh, proxies, i.sidecars), &i);
    let scopes = sidecars.concat(secured);
    let matched = source_selectors(proxies, vss, drs);
    let labelled = scopes.clone().join_map(matched.clone(), |id, s, sels| {
        (id.clone(), s.clone().with_source_labels(sels.clone()))
    });
    let scopes = labelled.concat(scopes.antijoin(matched.map(|(id, _)| id)));
    let placed = localities(mesh, proxies, drs);
    let scopes = scopes
        .clone()
        .join_map(placed.clone(), |id, s, loc| {
            (id.clone(), s.clone().with_locality(loc.clone()))
        })
        .concat(scopes.antijoin(placed.map(|(id, _)| id)));
    let valued = priority_values(mesh, proxies, drs, services);
    let scopes = scopes
        .clone()
        .join_map(valued.clone(), |id, s, values| {
            (id.clone(), s.clone().with_priority_labels(values.clone()))
        })
        .concat(scopes.antijoin(valued.map(|(id, _)| id)));
    let normalized = path_normalizations(mesh, proxies);
    scopes
        .clone()
        .join_map(normalized.clone(), |id, s, n| {
            (id.clone(), s.clone().with_path_normalization(*n))
        })
        .concat(scopes.antijoin(normalized.map(|(id, _)| id)))
}

/// `(proxy, normalization)` for every proxy while the mesh's `pathNormalization` is not
/// `BASE` (what every connection manager is built with): only then are scopes split by it.
fn path_normalizations<'s>(
    mesh: &Mesh<'s>,
    proxies: &Coll<'s, (ProxyId, Proxy)>,
) -> Coll<'s, (ProxyId, PathNormalization)> {
    let set = mesh
        .clone()
        .filter(|(_, m)| !m.path_normalization.is_base())
        .map(|(k, m)| (k, m.path_normalization));
    proxies
        .clone()
        .map(|(id, _)| ((), id))
        .join_map(set, |_, id, n| (id.clone(), *n))
}

/// `(proxy, values)`: each proxy's values (sorted by key) of the labels some
/// `failoverPriority` reads (of a DestinationRule, or the mesh config's), or a service's
/// `trafficDistribution: PreferClose` does. While no list reads a label, no proxy is split
/// by one.
fn priority_values<'s>(
    mesh: &Mesh<'s>,
    proxies: &Coll<'s, (ProxyId, Proxy)>,
    drs: &Coll<'s, (ConfigKey, DestinationRule)>,
    services: &Coll<'s, (Hostname, HostServices)>,
) -> Coll<'s, (ProxyId, Vec<(String, String)>)> {
    let prefer_close = services
        .clone()
        .filter(|(_, s)| s.all().iter().any(|s| s.prefer_close))
        .map(|_| ())
        .distinct()
        .flat_map(|()| PREFER_CLOSE_LABELS.map(String::from));
    let keys = drs
        .clone()
        .flat_map(|(_, dr)| dr.failover_priority_keys())
        .concat(mesh.clone().flat_map(|(_, m)| m.failover_priority_keys()))
        .concat(prefer_close)
        .distinct()
        .map(|k| ((), k));
    proxies
        .clone()
        .map(|(id, p)| ((), (id, p)))
        .join_map(keys, |_, (id, p), key| {
            let value = priority_label_value(key, &p.labels, &p.locality);
            (id.clone(), (key.clone(), value.to_string()))
        })
        .reduce(|_, vals, out| {
            let values: Vec<(String, String)> = vals.iter().map(|(kv, _)| (*kv).clone()).collect();
            out.push((values, 1isize))
        })
}

/// `(proxy, locality)` for the proxies with a locality, while some DestinationRule may
/// balance by locality or the mesh config distributes by it: only then can the load
/// assignments of proxies in different localities differ. (Per mesh, not per scope: which
/// clusters a scope holds depends on its scope.)
fn localities<'s>(
    mesh: &Mesh<'s>,
    proxies: &Coll<'s, (ProxyId, Proxy)>,
    drs: &Coll<'s, (ConfigKey, DestinationRule)>,
) -> Coll<'s, (ProxyId, String)> {
    let wanted = drs
        .clone()
        .filter(|(_, dr)| dr.may_balance_by_locality())
        .map(|_| ())
        .concat(
            mesh.clone()
                .filter(|(_, m)| m.distributes_by_locality())
                .map(|_| ()),
        )
        .distinct();
    proxies
        .clone()
        .filter(|(_, p)| !p.locality.is_empty())
        .map(|(id, p)| ((), (id, p.locality)))
        .semijoin(wanted)
        .map(|(_, row)| row)
}

/// The selectors each proxy matches (VirtualServices' `sourceLabels`, DestinationRules'
/// `workloadSelector`), sorted, for the proxies matching any. Only proxies whose labels
/// some selector reads are split from their scope, and only by the selectors they match,
/// so a mesh without either keeps its scopes whole.
fn source_selectors<'s>(
    proxies: &Coll<'s, (ProxyId, Proxy)>,
    vss: &Coll<'s, (ConfigKey, VirtualService)>,
    drs: &Coll<'s, (ConfigKey, DestinationRule)>,
) -> Coll<'s, (ProxyId, Vec<Labels>)> {
    let by_first_label = vss
        .clone()
        .flat_map(|(_, vs)| vs.source_selectors())
        .concat(drs.clone().flat_map(|(_, dr)| dr.selector))
        .distinct()
        .flat_map(|sel| {
            let first = sel.iter().next().map(|(k, v)| (k.clone(), v.clone()));
            first.map(|(k, v)| ((String::new(), k, v), sel))
        });
    candidates(proxies, false, by_first_label)
        .filter(|(_, (sel, p))| rules::labels_match(sel, &p.labels))
        .map(|(id, (sel, _))| (id, sel))
        .reduce(|_, vals, out| {
            let sels: Vec<Labels> = vals.iter().map(|(s, _)| (*s).clone()).collect();
            out.push((sels, 1isize))
        })
}

/// (namespace or "", label key, label value).
type LabelKey = (String, String, String);

/// `(label key, proxy id)` per label: selectors are matched by joining on their first
/// label, then checked whole against the proxy (joined by id). A label record names its proxy
/// by id only: a copy of the whole proxy per label would cost labels × proxy size.
fn by_label<'s>(
    proxies: Coll<'s, (ProxyId, Proxy)>,
    with_ns: bool,
) -> Coll<'s, (LabelKey, ProxyId)> {
    proxies.flat_map(move |(id, p)| {
        let ns = if with_ns { p.namespace } else { String::new() };
        p.labels
            .into_iter()
            .map(|(k, v)| ((ns.clone(), k, v), id.clone()))
            .collect::<Vec<_>>()
    })
}

/// The `(proxy, selecting object)` pairs whose first selector label the proxy carries, with
/// the proxy, to check the whole selector.
fn candidates<'s, T: differential_dataflow::ExchangeData>(
    proxies: &Coll<'s, (ProxyId, Proxy)>,
    with_ns: bool,
    by_first_label: Coll<'s, (LabelKey, T)>,
) -> Coll<'s, (ProxyId, (T, Proxy))> {
    by_label(proxies.clone(), with_ns)
        .join_map(by_first_label, |_, id, t| (id.clone(), t.clone()))
        .join_map(proxies.clone(), |id, t, p| {
            (id.clone(), (t.clone(), p.clone()))
        })
}

/// The Sidecar resource in effect, lowest rank first: one selecting the proxy (0),
/// else its namespace's default (1), else the root namespace's default (2).
/// Proxyless gRPC clients are scoped by Sidecar resources like sidecars are.
fn sidecar_scopes<'s>(
    mesh: &Mesh<'s>,
    proxies: &Coll<'s, (ProxyId, Proxy)>,
    sidecars: &Coll<'s, (ConfigKey, Sidecar)>,
) -> Coll<'s, (ProxyId, ScopeKey)> {
    let sidecar_proxies = proxies
        .clone()
        .filter(|(_, p)| matches!(p.kind, ProxyKind::Sidecar | ProxyKind::Proxyless));
    let sc_by_first_label = sidecars.clone().flat_map(|(_, sc)| {
        let first = sc
            .selector
            .as_ref()
            .and_then(|s| s.iter().next().map(|(k, v)| (k.clone(), v.clone())));
        first.map(|(k, v)| ((sc.key.namespace.clone(), k, v), sc))
    });
    // A Sidecar with a selector ranks 0 in its own namespace and not at all elsewhere:
    // the root namespace's rank is for namespace-wide ones only, so none is passed here.
    let cand_sel = candidates(&sidecar_proxies, true, sc_by_first_label)
        .flat_map(move |(id, (sc, p))| rules::sidecar_rank(&sc, &p, "").map(|r| (id, (r, sc.key))));
    let defaults = sidecars.clone().filter(|(_, sc)| sc.selector.is_none());
    let cand_ns = sidecar_proxies
        .clone()
        .map(|(id, p)| (p.namespace.clone(), id))
        .join_map(
            defaults.clone().map(|(k, _)| (k.namespace.clone(), k)),
            |_, id, k| (id.clone(), (1u8, k.clone())),
        );
    // The root namespace's default, for every proxy: the root namespace is the mesh
    // config's, so it joins through the settings in effect.
    let root_defaults = mesh.clone().map(|(_, m)| (m.root_namespace, ())).join_map(
        defaults.map(|(k, _)| (k.namespace.clone(), k)),
        |_, _, k| ((), k.clone()),
    );
    let cand_root = sidecar_proxies
        .clone()
        .map(|(id, _)| ((), id))
        .join_map(root_defaults, |_, id, k| (id.clone(), (2u8, k.clone())));
    let chosen_sc = cand_sel
        .concat(cand_ns)
        .concat(cand_root)
        .reduce(|_, vals, out| out.push((vals[0].0 .1.clone(), 1isize)));
    let with_sc = sidecar_proxies
        .clone()
        .join_map(chosen_sc.clone(), |id, p, k| {
            (id.clone(), rules::sidecar_scope(p, Some(k.clone())))
        });
    let without_sc = sidecar_proxies
        .antijoin(chosen_sc.map(|(id, _)| id))
        .map(|(id, p)| (id, rules::sidecar_scope(&p, None)));
    with_sc.concat(without_sc)
}

/// What the kinds that choose a proxy's scope give it: the Sidecar in effect and the
/// security stopgap's refusals for the `ingress` listeners sidecars bind themselves, the
/// Gateways and the refusals of their listeners for routers.
pub(super) struct ScopeInputs<'a, 's> {
    pub sidecars: &'a Coll<'s, (ConfigKey, Sidecar)>,
    pub gateways: &'a Coll<'s, (ConfigKey, Gateway)>,
    pub router_security: &'a Coll<'s, (ProxyId, InboundSecurity)>,
    pub sidecar_security: &'a Coll<'s, (ProxyId, InboundSecurity)>,
}

/// The sidecar scopes whose Sidecar in effect binds `ingress` listeners for its proxy
/// ([`rules::binds_ingress`]) carry what the proxy's security policies make them refuse;
/// only those: other sidecars' scopes are not split by policy.
fn bound_ingress_secured<'s>(
    scopes: Coll<'s, (ProxyId, ScopeKey)>,
    i: &ScopeInputs<'_, 's>,
) -> Coll<'s, (ProxyId, ScopeKey)> {
    let binding = i.sidecars.clone().flat_map(|(k, sc)| {
        let (captured, uncaptured) = (
            rules::binds_ingress(&sc, false),
            rules::binds_ingress(&sc, true),
        );
        (captured || uncaptured).then_some((k, (captured, uncaptured)))
    });
    let bound = scopes
        .clone()
        .flat_map(|(id, s)| match &s {
            ScopeKey::Sidecar {
                sidecar: Some(k),
                proxyless: false,
                interception_none,
                ..
            } => Some((k.clone(), (id, *interception_none, s.clone()))),
            _ => None,
        })
        .join_map(binding, |_, (id, none, s), (captured, uncaptured)| {
            let binds = if *none { *uncaptured } else { *captured };
            binds.then(|| (id.clone(), s.clone()))
        })
        .flat_map(|x| x);
    let secured = bound.join_map(i.sidecar_security.clone(), |id, s, sec| {
        (id.clone(), s.clone().with_security(sec.clone()))
    });
    scopes
        .antijoin(secured.clone().map(|(id, _)| id))
        .concat(secured)
}

/// A router's scope is its namespace, the Gateways selecting it (none: no listeners) and
/// where its servers listen: the target ports of the services whose endpoints are at its
/// IPs ([`rules::gateway_ports`]), so only a change to the router's own Services moves its
/// listeners.
fn router_scopes<'s>(
    proxies: &Coll<'s, (ProxyId, Proxy)>,
    gateways: &Coll<'s, (ConfigKey, Gateway)>,
    endpoints: &Resolved<'s>,
) -> Coll<'s, (ProxyId, ScopeKey)> {
    let router_proxies = proxies.clone().filter(|(_, p)| p.kind == ProxyKind::Router);
    let gw_by_first_label = gateways.clone().flat_map(|(_, gw)| {
        let first = gw
            .selector
            .iter()
            .next()
            .map(|(k, v)| (k.clone(), v.clone()));
        first.map(|(k, v)| ((String::new(), k, v), gw))
    });
    let router_gws = candidates(&router_proxies, false, gw_by_first_label)
        .flat_map(|(id, (gw, p))| rules::gateway_selects(&gw, &p).then_some((id, gw.key)))
        .reduce(|_, vals, out| {
            out.push((
                vals.iter()
                    .map(|(k, _)| (*k).clone())
                    .collect::<Vec<ConfigKey>>(),
                1isize,
            ))
        });
    let routers_scoped = router_proxies
        .clone()
        .join_map(router_gws.clone(), |id, p, gws| {
            (id.clone(), rules::router_scope(p, gws.clone()))
        });
    let routers_unscoped = router_proxies
        .clone()
        .antijoin(router_gws.map(|(id, _)| id))
        .map(|(id, p)| (id, rules::router_scope(&p, Vec::new())));
    let scopes = routers_scoped.concat(routers_unscoped);
    let router_ips = router_proxies.flat_map(|(id, p)| {
        p.ips
            .into_iter()
            .map(|ip| (ip, id.clone()))
            .collect::<Vec<_>>()
    });
    let ports = endpoints
        .clone()
        .map(|((host, port), ep)| (ep.ip, (port, host, ep.port)))
        .join_map(router_ips, |_, row, id| (id.clone(), row.clone()))
        .reduce(|_, vals, out| {
            let map = rules::gateway_ports(vals.iter().map(|((p, h, t), _)| (*p, h.as_str(), *t)));
            if !map.is_empty() {
                out.push((map, 1isize));
            }
        });
    scopes
        .clone()
        .join_map(ports.clone(), |id, s, map| {
            (id.clone(), s.clone().with_gateway_ports(map.clone()))
        })
        .concat(scopes.antijoin(ports.map(|(id, _)| id)))
}

/// Scope → its spec: the Sidecar in effect (None: defaults; routers see everything
/// exported) with the mesh defaults it applies.
pub(super) fn sidecar_specs<'s>(
    scopes: &Coll<'s, ScopeKey>,
    sidecars: &Coll<'s, (ConfigKey, Sidecar)>,
    mesh: &Mesh<'s>,
) -> Coll<'s, (ScopeKey, ScopeSpec)> {
    scopes
        .clone()
        .flat_map(|s| match &s {
            ScopeKey::Sidecar {
                sidecar: Some(k), ..
            } => Some((k.clone(), s.clone())),
            _ => None,
        })
        .join_map(sidecars.clone(), |_, s, sc| (s.clone(), Some(sc.clone())))
        .concat(
            scopes
                .clone()
                .filter(|s| {
                    !matches!(
                        s,
                        ScopeKey::Sidecar {
                            sidecar: Some(_),
                            ..
                        }
                    )
                })
                .map(|s| (s, None)),
        )
        .map(|row| ((), row))
        .join_map(mesh.clone(), |_, (s, sc), m| {
            (s.clone(), ScopeSpec::new(sc.clone(), m))
        })
}
