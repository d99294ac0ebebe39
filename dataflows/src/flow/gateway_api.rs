//! The Gateway API, translated: Gateway API objects → the Gateways and VirtualServices the
//! rest of the dataflow serves ([`crate::rules::gateway_api`] says how), and what is wrong
//! with each route (errors, retracted when fixed). A Gateway meets the ReferenceGrants of
//! the namespaces its certificates are in (a listener they do not allow is refused). A
//! route meets the ReferenceGrants of the namespaces its backends are in, the services its
//! backends name and the Gateways its parents name; the routes of one (listener, hostname)
//! meet in one group, so a route's edit re-sorts only the hostnames it is on.

use super::Coll;
use crate::model::*;
use crate::rules::backend_tls;
use crate::rules::gateway_api::{self as rules, RouteContext, RouteView};
use crate::rules::listener_set;
use serde::{Deserialize, Serialize};

/// What the Gateway API objects become.
pub(super) struct Translated<'s> {
    pub gateways: Coll<'s, (ConfigKey, Gateway)>,
    pub virtual_services: Coll<'s, (ConfigKey, VirtualService)>,
    /// BackendTLSPolicies, as the DestinationRules of the Services they target.
    pub destination_rules: Coll<'s, (ConfigKey, DestinationRule)>,
    pub errors: Coll<'s, ConfigError>,
}

/// A BackendTLSPolicy, or a ConfigMap its CA references name, gathered per policy.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum PolicyPart {
    Policy(BackendTlsPolicy),
    Map(CaConfigMap),
}

/// A policy with its CA, or a Service, gathered per host.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum HostPart {
    Policy(Box<(BackendTlsPolicy, backend_tls::CaVerdict)>),
    Service(Box<Service>),
}

/// What the policies of one host become.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum HostOut {
    Rule(DestinationRule),
    Error(ConfigError),
}

/// BackendTLSPolicies → DestinationRules: each policy meets the ConfigMaps its CA
/// references name (its CA, decided once per policy), then the policies of each Service
/// meet the Service (its ports, by name); a policy's or a ConfigMap's change recomputes
/// the Services it targets only.
fn backend_tls_rules<'s>(
    config: &MeshConfig,
    objects: &Coll<'s, (ConfigKey, GatewayApiObject)>,
    services: &Coll<'s, (Hostname, Service)>,
) -> (
    Coll<'s, (ConfigKey, DestinationRule)>,
    Coll<'s, ConfigError>,
) {
    let policies = objects.clone().flat_map(|(k, o)| match o {
        GatewayApiObject::BackendTlsPolicy(p) => Some((k, p)),
        _ => None,
    });
    let maps = objects.clone().flat_map(|(k, o)| match o {
        GatewayApiObject::ConfigMap(c) => Some(((k.namespace, k.name), c)),
        _ => None,
    });
    let named = policies
        .clone()
        .flat_map(|(k, p)| {
            p.ca_refs
                .iter()
                .map(|r| ((k.namespace.clone(), r.name.clone()), k.clone()))
                .collect::<Vec<_>>()
        })
        .join_map(maps, |_, k, c| (k.clone(), PolicyPart::Map(c.clone())));
    let resolved = policies
        .clone()
        .map(|(k, p)| (k, PolicyPart::Policy(p)))
        .concat(named)
        .reduce(|_, vals: &[(&PolicyPart, isize)], out| {
            let maps: Vec<&CaConfigMap> = vals
                .iter()
                .filter_map(|(v, _)| match v {
                    PolicyPart::Map(c) => Some(c),
                    PolicyPart::Policy(_) => None,
                })
                .collect();
            for (v, _) in vals {
                if let PolicyPart::Policy(p) = v {
                    let ca = backend_tls::resolve_ca(p, |name| {
                        maps.iter().copied().find(|c| c.key.name == name)
                    });
                    out.push(((p.clone(), ca), 1isize));
                }
            }
        });
    let domain = config.domain_suffix.clone();
    let by_host = resolved.flat_map(move |(_, (p, ca))| {
        let hosts: std::collections::BTreeSet<String> = p
            .targets
            .iter()
            .filter_map(|t| backend_tls::target_host(&p, t, &domain))
            .collect();
        hosts
            .into_iter()
            .map(|h| (h, HostPart::Policy(Box::new((p.clone(), ca.clone())))))
            .collect::<Vec<_>>()
    });
    let targeted = by_host.clone().map(|(h, _)| h).distinct();
    let domain = config.domain_suffix.clone();
    let out = services
        .clone()
        .semijoin(targeted)
        .map(|(h, s)| (h, HostPart::Service(Box::new(s))))
        .concat(by_host)
        .reduce(move |host, vals: &[(&HostPart, isize)], out| {
            let mut policies = Vec::new();
            let mut cas = Vec::new();
            let mut services = Vec::new();
            for (v, _) in vals {
                match v {
                    HostPart::Policy(b) => {
                        policies.push(&b.0);
                        cas.push((&b.0.key, &b.1));
                    }
                    HostPart::Service(s) => services.push(s),
                }
            }
            let service = backend_tls::kube_service(services.into_iter().map(|s| &**s));
            let (rule, errors) = backend_tls::rules_for_host(
                host,
                service,
                &policies,
                |p| {
                    cas.iter()
                        .find(|(k, _)| **k == p.key)
                        .map(|(_, c)| (*c).clone())
                        // Every policy comes with its CA; were one not to, it fails closed.
                        .unwrap_or_else(|| backend_tls::CaVerdict::None {
                            accepted_reason: "NoValidCACertificate".into(),
                            resolved_reason: None,
                            why: "its CA is not known".into(),
                        })
                },
                &domain,
            );
            if let Some(r) = rule {
                out.push((HostOut::Rule(r), 1isize));
            }
            for e in errors {
                out.push((HostOut::Error(e), 1isize));
            }
        });
    let rules = out.clone().flat_map(|(_, o)| match o {
        HostOut::Rule(r) => Some((r.key.clone(), r)),
        HostOut::Error(_) => None,
    });
    let errors = out
        .flat_map(|(_, o)| match o {
            HostOut::Error(e) => Some(e),
            HostOut::Rule(_) => None,
        })
        .concat(policies.flat_map(|(_, p)| {
            p.targets
                .iter()
                .enumerate()
                .filter(|(_, t)| !t.is_service())
                .map(|(i, t)| backend_tls::unsupported_target(&p, i, t))
                .collect::<Vec<_>>()
        }));
    (rules, errors)
}

/// One piece of a route's [`RouteContext`], gathered per route.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum Part {
    Route,
    Grant(ReferenceGrant),
    Known(Hostname),
    NamespaceLabels(Labels),
}

/// A route with its context, or a Gateway one of its parents names, gathered per route.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum Found {
    Route(GatewayApiObject, RouteContext),
    Parent(KubeGateway),
}

/// A Gateway, a ReferenceGrant of a namespace its (or its ListenerSets') certificates or
/// its frontend validation's CAs are in, a ConfigMap its frontend validation names, a
/// ListenerSet naming it, or the labels of such a set's Namespace, gathered per Gateway.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum GwPart {
    Gateway(KubeGateway),
    Grant(ReferenceGrant),
    CaMap(CaConfigMap),
    Set(KubeListenerSet),
    SetNamespace(String, Labels),
}

pub(super) fn translate<'s>(
    config: &MeshConfig,
    objects: &Coll<'s, (ConfigKey, GatewayApiObject)>,
    services: &Coll<'s, (Hostname, Service)>,
) -> Translated<'s> {
    let grants = objects.clone().flat_map(|(k, o)| match o {
        GatewayApiObject::ReferenceGrant(g) => Some((k.namespace, g)),
        _ => None,
    });
    let written_gateways = objects.clone().flat_map(|(k, o)| match o {
        GatewayApiObject::Gateway(g) => Some(((k.namespace, k.name), g)),
        _ => None,
    });
    let namespaces = objects.clone().flat_map(|(k, o)| match o {
        GatewayApiObject::Namespace(n) => Some((k.name, n.labels)),
        _ => None,
    });
    // The ListenerSets, by the Gateway they name.
    let sets = objects.clone().flat_map(|(_, o)| match o {
        GatewayApiObject::ListenerSet(s) => Some((s.parent.clone(), s)),
        _ => None,
    });
    // Each Gateway meets the grants of the namespaces its certificates, and its
    // ListenerSets', are in (most have none: they meet nothing), its sets and their
    // Namespaces' labels, and is served as they allow. A Gateway of a class meshflow does
    // not own meets its sets too: a route naming one of them is that class's, not an error.
    let gateway_grants = written_gateways
        .clone()
        .filter(|(_, g)| g.owned())
        .flat_map(|(k, g)| {
            let mut namespaces = rules::certificate_namespaces(&g);
            namespaces.extend(crate::rules::ca_namespaces(&g));
            namespaces.into_iter().map(move |ns| (ns, k.clone()))
        });
    // The ConfigMaps its frontend validation names (most Gateways name none).
    let config_maps = objects.clone().flat_map(|(k, o)| match o {
        GatewayApiObject::ConfigMap(c) => Some(((k.namespace, k.name), c)),
        _ => None,
    });
    let gateway_maps = written_gateways
        .clone()
        .filter(|(_, g)| g.owned())
        .flat_map(|(k, g)| {
            crate::rules::ca_config_maps(&g)
                .into_iter()
                .map(move |m| (m, k.clone()))
        })
        .join_map(config_maps, |_, k, c| (k.clone(), GwPart::CaMap(c.clone())));
    let set_grants = sets.clone().flat_map(|(gw, s)| {
        listener_set::set_certificate_namespaces(&s)
            .into_iter()
            .map(move |ns| (ns, gw.clone()))
    });
    let set_namespaces = sets
        .clone()
        .map(|(gw, s)| (s.key.namespace, gw))
        .join_map(namespaces.clone(), |ns, gw, labels| {
            (gw.clone(), GwPart::SetNamespace(ns.clone(), labels.clone()))
        });
    // A set naming no Gateway that exists: said, nothing of it served.
    let orphans = sets
        .clone()
        .antijoin(written_gateways.clone().map(|(k, _)| k).distinct())
        .map(|((ns, name), s)| ConfigError {
            object: s.key.clone(),
            code: ErrorCode::ListenerSetNotAccepted,
            message: format!(
                "spec.parentRef: Gateway {ns}/{name} does not exist; none of its listeners is served"
            ),
        });
    let granted = gateway_grants
        .concat(set_grants)
        .distinct()
        .join_map(grants.clone(), |_, k, g| {
            (k.clone(), GwPart::Grant(g.clone()))
        })
        .concat(gateway_maps)
        .concat(written_gateways.map(|(k, g)| (k, GwPart::Gateway(g))))
        .concat(sets.map(|(k, s)| (k, GwPart::Set(s))))
        .concat(set_namespaces)
        .reduce(|_, vals: &[(&GwPart, isize)], out| {
            let mut grants = Vec::new();
            let mut maps = Vec::new();
            let mut sets = Vec::new();
            let mut labels = std::collections::BTreeMap::new();
            for (p, _) in vals {
                match p {
                    GwPart::Grant(g) => grants.push(g),
                    GwPart::CaMap(c) => maps.push(c),
                    GwPart::Set(s) => sets.push(s),
                    GwPart::SetNamespace(ns, l) => {
                        labels.insert(ns.as_str(), l);
                    }
                    GwPart::Gateway(_) => {}
                }
            }
            for (p, _) in vals {
                if let GwPart::Gateway(g) = p {
                    let find = |ns: &str, name: &str| {
                        maps.iter()
                            .copied()
                            .find(|c| c.key.namespace == ns && c.key.name == name)
                    };
                    let (g, errors) = rules::served_gateway(g, &grants, find, &sets, |ns| {
                        labels.get(ns).copied()
                    });
                    out.push(((g, errors), 1isize));
                }
            }
        });
    let gateway_errors = granted
        .clone()
        .flat_map(|(_, (_, errors))| errors)
        .concat(orphans);
    // Every Gateway its routes may name (those meshflow serves, with their sets, and the
    // others), by each object a route names it through: itself and its ListenerSets.
    let all_gateways = granted.flat_map(|(_, (g, _))| {
        rules::parent_objects(&g)
            .into_iter()
            .map(move |o| (o, g.clone()))
    });
    let kube_gateways = all_gateways.clone().filter(|(_, g)| g.owned());
    // Routes of every kind, by key.
    let routes = objects.clone().filter(|(_, o)| RouteView::of(o).is_some());
    let gateways = kube_gateways
        .clone()
        .filter(|((kind, _, _), _)| *kind == ParentKind::Gateway)
        .flat_map(|(_, g)| {
            rules::listener_gateways(&g)
                .into_iter()
                .map(|gw| (gw.key.clone(), gw))
        });

    // Each route's context: the grants of the other namespaces its backends are in, which
    // of its backends' hosts are services, and its Namespace's labels (every route has one,
    // maybe empty).
    let foreign = routes.clone().flat_map(|(key, r)| {
        let namespaces = RouteView::of(&r).map(|v| v.foreign_namespaces());
        namespaces
            .into_iter()
            .flatten()
            .map(move |ns| (ns, key.clone()))
    });
    let service_hosts = services.clone().map(|(h, _)| (h, ())).distinct();
    let known = routes
        .clone()
        .flat_map(|(key, r)| {
            let hosts = RouteView::of(&r).map(|v| v.backend_hosts());
            hosts.into_iter().flatten().map(move |h| (h, key.clone()))
        })
        .join_map(service_hosts, |h, route, _| {
            (route.clone(), Part::Known(h.clone()))
        });
    let contexts = foreign
        .join_map(grants, |_, route, g| {
            (route.clone(), Part::Grant(g.clone()))
        })
        .concat(known)
        .concat(
            routes
                .clone()
                .map(|(key, _)| (key.namespace.clone(), key))
                .join_map(namespaces, |_, route, labels| {
                    (route.clone(), Part::NamespaceLabels(labels.clone()))
                }),
        )
        .concat(routes.clone().map(|(key, _)| (key, Part::Route)))
        .reduce(|_, vals: &[(&Part, isize)], out| {
            let mut ctx = RouteContext::default();
            for (p, _) in vals {
                match p {
                    Part::Grant(g) => ctx.grants.push(g.clone()),
                    Part::Known(h) => {
                        ctx.known_hosts.insert(h.clone());
                    }
                    Part::NamespaceLabels(l) => ctx.namespace_labels = Some(l.clone()),
                    Part::Route => {}
                }
            }
            out.push((ctx, 1isize));
        });
    let with_context = routes.join_map(contexts, |_, r, ctx| (r.clone(), ctx.clone()));

    // Each route at the Gateways its parents name.
    let by_parent = with_context.clone().flat_map(|(r, ctx)| {
        let parents = RouteView::of(&r).map(|v| v.parent_gateways());
        parents
            .into_iter()
            .flatten()
            .map(move |p| (p, (r.clone(), ctx.clone())))
    });
    let domain = config.domain_suffix.clone();
    let attached = by_parent
        .clone()
        .join_map(kube_gateways, |via, (r, ctx), gw| {
            rules::attach(r, gw, via, ctx)
        })
        // Routes whose parents are Services: the sidecars' routes (GAMMA).
        .concat(
            with_context
                .clone()
                .map(move |(r, ctx)| rules::attach_mesh(&r, &ctx, &domain)),
        );
    let virtual_services = attached
        .flat_map(|rows| rows)
        .reduce(
            |key, vals: &[(&(rules::RouteOrder, rules::Contribution), isize)], out| {
                let entries = vals.iter().map(|(e, _)| (*e).clone()).collect();
                out.push((rules::merge(key, entries), 1isize));
            },
        )
        .map(|(_, vs)| (vs.key.clone(), vs));

    // What is wrong with each route: it meets the Gateways its parents name that exist.
    let errors = by_parent
        .join_map(all_gateways, |_, (r, _), gw| {
            (r.key().clone(), Found::Parent(gw.clone()))
        })
        .concat(with_context.map(|(r, ctx)| (r.key().clone(), Found::Route(r, ctx))))
        .reduce(|_, vals: &[(&Found, isize)], out| {
            let mut route = None;
            let mut found = Vec::new();
            for (v, _) in vals {
                match v {
                    Found::Route(r, ctx) => route = Some((r, ctx)),
                    Found::Parent(g) => found.push(g),
                }
            }
            if let Some((r, ctx)) = route {
                for e in rules::route_problems(r, ctx, &found) {
                    out.push((e, 1isize));
                }
            }
        })
        .map(|(_, e)| e)
        .concat(gateway_errors);
    let (destination_rules, policy_errors) = backend_tls_rules(config, objects, services);
    Translated {
        gateways,
        virtual_services,
        destination_rules,
        errors: errors.concat(policy_errors),
    }
}
