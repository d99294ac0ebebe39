//! The dataflow graph. Each step keys its records so that joins happen on keys and a change
//! touches only the groups it belongs to: scopes share all scope-level work, clusters are
//! built once per (host, DestinationRule in effect), endpoints once per cluster name.

use crate::assemble;
use crate::model::*;
use crate::rules::{self, NsKey};
use crate::translate::{cluster, endpoint, listener, route};
use differential_dataflow::VecCollection;
use serde::{Deserialize, Serialize};

/// A collection at epoch timestamps.
pub type Coll<'s, D> = VecCollection<'s, u64, D>;

/// The input collections, keyed for the joins that consume them.
pub struct Inputs<'s> {
    pub services: Coll<'s, (Hostname, Service)>,
    pub endpoints: Coll<'s, (Hostname, RawEndpoint)>,
    pub workloads: Coll<'s, (String, Workload)>,
    pub virtual_services: Coll<'s, (ConfigKey, VirtualService)>,
    pub destination_rules: Coll<'s, (ConfigKey, DestinationRule)>,
    pub gateways: Coll<'s, (ConfigKey, Gateway)>,
    pub sidecars: Coll<'s, (ConfigKey, Sidecar)>,
    pub proxies: Coll<'s, (ProxyId, Proxy)>,
}

pub struct Outputs<'s> {
    /// `(proxy, resource key)`: what a connected proxy holds alone (inbound clusters,
    /// `virtualInbound`). The rest of its set is its scope's, from the two below.
    pub proxy_resources: Coll<'s, (ProxyId, ResourceKey)>,
    /// `(scope, resource key)`: what every proxy of a scope holds.
    pub scope_resources: Coll<'s, (ScopeKey, ResourceKey)>,
    /// Every distinct resource body referenced above, once.
    pub bodies: Coll<'s, Resource>,
    /// Problems found in the inputs; retracted when fixed.
    pub errors: Coll<'s, ConfigError>,
    /// The scope each connected proxy's shared resources come from.
    pub proxy_scopes: Coll<'s, (ProxyId, ScopeKey)>,
    /// Which input objects each resource was built from (`explain`), kept with the resources
    /// so it is exactly as current as they are.
    pub provenance: Coll<'s, ProvenanceRow>,
}

/// Parts of a VirtualService gathered to resolve destination ports.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum VsPart {
    Spec(VirtualService),
    Dest(Hostname, Vec<u16>),
}

/// Rows of a sidecar route configuration: a marker that it must exist, or a virtual host.
#[allow(clippy::large_enum_variant)] // rows live in arrangements, not on hot stacks
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum RouteRow {
    Exists {
        allow_any: bool,
    },
    Vhost {
        allow_any: bool,
        catch_all: bool,
        service: Service,
        vs: Option<ResolvedVs>,
    },
}

/// What a gateway proxy's resources are computed from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum GwItem {
    Gateway(Gateway),
    Vs(ConfigKey, ResolvedVs),
}

/// Builds the whole dataflow from its inputs.
pub fn build<'s>(mesh: &MeshConfig, i: Inputs<'s>) -> Outputs<'s> {
    let root = mesh.root_namespace.clone();
    let mesh_c = mesh.clone();

    // One service per hostname: Kubernetes Services win over ServiceEntries, then by name.
    let services = i
        .services
        .clone()
        .reduce(|_h, vals, out| out.push((vals[0].0.clone(), 1isize)));
    let service_conflicts = i.services.reduce(|h, vals, out| {
        for (svc, _) in vals.iter().skip(1) {
            out.push((
                ConfigError {
                    object: svc.origin.clone(),
                    message: format!("host {h} is already defined by {}", vals[0].0.origin),
                },
                1isize,
            ))
        }
    });

    // Endpoints with the labels of their workload (joined by IP), resolved to service ports.
    let ep_by_ip = i.endpoints.map(|(h, e)| (e.ip.clone(), (h, e)));
    let wl_labels = i.workloads.map(|(ip, w)| (ip, (w.labels, Some(w.origin))));
    let labeled = ep_by_ip
        .clone()
        .join_map(wl_labels.clone(), |_, (h, e), l| {
            (h.clone(), (e.clone(), l.clone()))
        });
    let unlabeled = ep_by_ip
        .antijoin(wl_labels.map(|(ip, _)| ip).distinct())
        .map(|(_, (h, e))| (h, (e, (Labels::new(), None))));
    let resolved_eps = labeled
        .concat(unlabeled)
        .join_map(services.clone(), |h, (e, (wl, wl_origin)), svc| {
            let port = match svc.ports.as_slice() {
                [only] if e.port_name.is_empty() => Some(only),
                ports => ports.iter().find(|p| p.name == e.port_name),
            }?;
            let mut labels = wl.clone();
            labels.extend(e.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            Some((
                (h.clone(), port.port),
                Endpoint {
                    ip: e.ip.clone(),
                    port: e.port,
                    ready: e.ready,
                    labels,
                    origins: std::iter::once(&e.origin)
                        .chain(wl_origin.as_ref())
                        .cloned()
                        .collect(),
                },
            ))
        })
        .flat_map(|x| x);

    // Proxy → scope.
    // Proxyless gRPC clients are scoped by Sidecar resources like sidecars are.
    let sidecar_proxies = i
        .proxies
        .clone()
        .filter(|(_, p)| matches!(p.kind, ProxyKind::Sidecar | ProxyKind::Proxyless));
    let router_proxies = i
        .proxies
        .clone()
        .filter(|(_, p)| p.kind == ProxyKind::Router);
    let px_label_pairs = |c: Coll<'s, (ProxyId, Proxy)>, with_ns: bool| {
        c.flat_map(move |(id, p)| {
            let ns = if with_ns {
                p.namespace.clone()
            } else {
                String::new()
            };
            p.labels
                .iter()
                .map(|(k, v)| ((ns.clone(), k.clone(), v.clone()), (id.clone(), p.clone())))
                .collect::<Vec<_>>()
        })
    };
    let sc_by_first_label = i.sidecars.clone().flat_map(|(_, sc)| {
        let first = sc
            .selector
            .as_ref()
            .and_then(|s| s.iter().next().map(|(k, v)| (k.clone(), v.clone())));
        first.map(|(k, v)| ((sc.key.namespace.clone(), k, v), sc))
    });
    let root_s = root.clone();
    let cand_sel = px_label_pairs(sidecar_proxies.clone(), true)
        .join_map(sc_by_first_label, move |_, (id, p), sc| {
            rules::sidecar_rank(sc, p, &root_s).map(|r| (id.clone(), (r, sc.key.clone())))
        })
        .flat_map(|x| x);
    let defaults = i.sidecars.clone().filter(|(_, sc)| sc.selector.is_none());
    let cand_ns = sidecar_proxies
        .clone()
        .map(|(id, p)| (p.namespace.clone(), id))
        .join_map(
            defaults.clone().map(|(k, _)| (k.namespace.clone(), k)),
            |_, id, k| (id.clone(), (1u8, k.clone())),
        );
    let root_c = root.clone();
    let root_c2 = root.clone();
    let cand_root = sidecar_proxies
        .clone()
        .map(move |(id, _)| (root_c.clone(), id))
        .join_map(
            defaults
                .filter(move |(k, _)| k.namespace == root_c2)
                .map(|(k, _)| (k.namespace.clone(), k)),
            |_, id, k| (id.clone(), (2u8, k.clone())),
        );
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
        .clone()
        .antijoin(chosen_sc.map(|(id, _)| id))
        .map(|(id, p)| (id, rules::sidecar_scope(&p, None)));
    let gw_by_first_label = i.gateways.clone().flat_map(|(_, gw)| {
        let first = gw
            .selector
            .iter()
            .next()
            .map(|(k, v)| (k.clone(), v.clone()));
        first.map(|(k, v)| ((String::new(), k, v), gw))
    });
    let router_gws = px_label_pairs(router_proxies.clone(), false)
        .join_map(gw_by_first_label, |_, (id, p), gw| {
            rules::gateway_selects(gw, p).then(|| (id.clone(), gw.key.clone()))
        })
        .flat_map(|x| x)
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
            (
                id.clone(),
                ScopeKey::Router {
                    namespace: p.namespace.clone(),
                    gateways: gws.clone(),
                },
            )
        });
    let routers_unscoped = router_proxies
        .antijoin(router_gws.map(|(id, _)| id))
        .map(|(id, p)| {
            (
                id,
                ScopeKey::Router {
                    namespace: p.namespace,
                    gateways: Vec::new(),
                },
            )
        });
    let proxy_scope = with_sc
        .concat(without_sc)
        .concat(routers_scoped)
        .concat(routers_unscoped);
    let scopes = proxy_scope.clone().map(|(_, s)| s).distinct();

    // Scope → the Sidecar spec in effect (None: defaults; routers see everything exported).
    let scope_specs = scopes
        .clone()
        .flat_map(|s| match &s {
            ScopeKey::Sidecar {
                sidecar: Some(k), ..
            } => Some((k.clone(), s.clone())),
            _ => None,
        })
        .join_map(i.sidecars.clone(), |_, s, sc| (s.clone(), Some(sc.clone())))
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
        );

    // Visibility: (scope, egress listener index) → hosts, joined on the namespace a
    // pattern names so a scoped Sidecar never meets services outside its namespaces.
    let view_rules = scope_specs.clone().flat_map(|(s, sc)| {
        let mut rows = Vec::new();
        for (idx, l) in rules::egress_listeners(sc.as_ref()).iter().enumerate() {
            for pattern in &l.hosts {
                if let Some((ns, host)) = rules::egress_pattern(pattern, s.namespace()) {
                    rows.push((ns, ((s.clone(), idx), host)));
                }
            }
        }
        rows
    });
    let svc_by_ns = services.clone().flat_map(|(_, svc)| {
        [
            (NsKey::Any, svc.clone()),
            (NsKey::Ns(svc.namespace().to_string()), svc),
        ]
    });
    let view_hosts = view_rules
        .join_map(svc_by_ns, |_, (view, host_pat), svc| {
            (rules::host_matches(host_pat, &svc.hostname)
                && rules::exported_to(&svc.export_to, svc.namespace(), view.0.namespace()))
            .then(|| (view.clone(), svc.hostname.clone()))
        })
        .flat_map(|x| x)
        .distinct();
    let scope_hosts = view_hosts.clone().map(|((s, _), h)| (s, h)).distinct();
    let host_scope = scope_hosts.clone().map(|(s, h)| (h, s));

    // DestinationRule in effect per (scope, host).
    let mesh_dr = mesh_c.clone();
    let dr_chosen = host_scope
        .clone()
        .join_map(
            i.destination_rules
                .clone()
                .map(|(_, dr)| (dr.host.clone(), dr))
                .join_map(services.clone(), |h, dr, svc| {
                    (h.clone(), (dr.clone(), svc.namespace().to_string()))
                }),
            move |h, s, (dr, svc_ns)| {
                rules::dr_rank(dr, s.namespace(), svc_ns, &mesh_dr)
                    .map(|r| ((s.clone(), h.clone()), (r, dr.key.clone())))
            },
        )
        .flat_map(|x| x)
        .reduce(|_, vals, out| out.push((vals[0].0 .1.clone(), 1isize)));
    let scope_host_keyed = scope_hosts.clone().map(|(s, h)| ((s, h), ()));
    let scope_host_dr = scope_host_keyed
        .clone()
        .join_map(dr_chosen.clone(), |(s, h), _, k| {
            ((h.clone(), (Some(k.clone()), s.is_proxyless())), s.clone())
        })
        .concat(
            scope_host_keyed
                .antijoin(dr_chosen.map(|(k, _)| k))
                .map(|((s, h), _)| ((h, (None, s.is_proxyless())), s)),
        );

    // Clusters, built once per (host, DestinationRule in effect, for gRPC or Envoy).
    let groups = scope_host_dr.clone().map(|(g, _)| g).distinct();
    let groups_svc = groups.join_map(services.clone(), |h, d, svc| {
        (d.clone(), (h.clone(), svc.clone()))
    });
    let group_clusters = groups_svc
        .clone()
        .flat_map(|((d, grpc), (h, svc))| d.map(|k| (k, (h, svc, grpc))))
        .join_map(i.destination_rules.clone(), |k, (h, svc, grpc), dr| {
            (
                (h.clone(), (Some(k.clone()), *grpc)),
                cluster::outbound_all_for(svc, Some(dr), *grpc),
            )
        })
        .concat(
            groups_svc
                .filter(|((d, _), _)| d.is_none())
                .map(|((_, grpc), (h, svc))| {
                    (
                        (h, (None, grpc)),
                        cluster::outbound_all_for(&svc, None, grpc),
                    )
                }),
        )
        .flat_map(|(g, list)| list.into_iter().map(move |c| (g.clone(), c)));
    // One join gives each scope its clusters and, for provenance, the group they came from.
    let scope_cluster_groups = scope_host_dr.join_map(group_clusters.clone(), |g, s, c| {
        (s.clone(), c.clone(), g.clone())
    });
    let scope_cluster_rows = scope_cluster_groups.clone().map(|(s, c, _)| (s, c));
    // A cluster (and its assignment) comes from the service and the DestinationRule in effect.
    let svc_origin = services.clone().map(|(h, svc)| (h, svc.origin));
    let cluster_keys = scope_cluster_groups
        .map(|(s, (res, _, labels), (h, (d, _)))| (h, (s, res.name, labels.is_some(), d)));
    let cluster_prov = cluster_keys
        .clone()
        .join_map(svc_origin, |_, row, o| (row.clone(), o.clone()))
        .concat(cluster_keys.flat_map(|(_, row)| {
            let dr = row.3.clone();
            dr.map(|d| (row, d))
        }))
        .flat_map(|((s, name, eds, _), input)| {
            let mut rows = vec![(
                (
                    Holder::Scope(s.clone()),
                    ResourceType::Cluster,
                    name.clone(),
                ),
                input.clone(),
            )];
            if eds {
                rows.push(((Holder::Scope(s), ResourceType::Endpoint, name), input));
            }
            rows
        });

    // Endpoints: one ClusterLoadAssignment per EDS cluster name, shared by all scopes.
    let eds_defs = group_clusters
        .flat_map(|((h, _), (res, port, labels))| labels.map(|l| ((h, port), (res.name, l))))
        .distinct();
    // Keyed by (name, subset labels): two scopes may see the same subset name defined by
    // different DestinationRules, and each must get its own rule's endpoints.
    let cla_members = eds_defs
        .clone()
        .join_map(resolved_eps.clone(), |_, (name, sel), ep| {
            rules::labels_match(sel, &ep.labels)
                .then(|| ((name.clone(), sel.clone()), Some(ep.clone())))
        })
        .flat_map(|x| x);
    let cla_origins = cla_members
        .clone()
        .flat_map(|(def, ep)| {
            ep.map(|ep| ep.origins.into_iter().map(move |o| (def.clone(), o)))
                .into_iter()
                .flatten()
        })
        .distinct();
    let clas = cla_members
        .concat(eds_defs.map(|(_, def)| (def, None)))
        .reduce(
            |(name, _): &(String, Labels), vals: &[(&Option<Endpoint>, isize)], out| {
                out.push((
                    endpoint::load_assignment(name, vals.iter().filter_map(|(v, _)| v.as_ref())),
                    1isize,
                ))
            },
        );
    let scope_eds_keys = scope_cluster_rows
        .clone()
        .flat_map(|(s, (res, _, labels))| labels.map(|l| ((res.name, l), s)));
    let scope_eds = scope_eds_keys
        .clone()
        .join_map(clas, |_, s, cla| (s.clone(), cla.clone()));
    // An assignment also comes from the EndpointSlices and Pods of its members.
    let eds_prov = scope_eds_keys.join_map(cla_origins, |(name, _), s, o| {
        (
            (
                Holder::Scope(s.clone()),
                ResourceType::Endpoint,
                name.clone(),
            ),
            o.clone(),
        )
    });
    let scope_clusters = scope_cluster_rows.map(|(s, (res, _, _))| (s, res));
    let scope_fixed_clusters = scopes.clone().flat_map(|s| {
        assemble::fixed_clusters(&s)
            .into_iter()
            .map(move |r| (s.clone(), r))
    });

    // VirtualServices with destination ports resolved.
    let vs_dest_ports = i
        .virtual_services
        .clone()
        .flat_map(|(k, vs)| {
            let mut hosts: Vec<Hostname> = vs
                .http
                .iter()
                .flat_map(|r| r.route.iter().map(|d| d.host.clone()))
                .collect();
            hosts.sort();
            hosts.dedup();
            hosts.into_iter().map(move |h| (h, k.clone()))
        })
        .join_map(services.clone(), |h, k, svc| {
            (
                k.clone(),
                VsPart::Dest(h.clone(), svc.ports.iter().map(|p| p.port).collect()),
            )
        });
    let resolved_vs = i
        .virtual_services
        .clone()
        .map(|(k, vs)| (k, VsPart::Spec(vs)))
        .concat(vs_dest_ports)
        .reduce(|_, vals: &[(&VsPart, isize)], out| {
            let mut spec = None;
            let mut dest_ports = std::collections::BTreeMap::new();
            for (v, _) in vals {
                match v {
                    VsPart::Spec(vs) => spec = Some(vs.clone()),
                    VsPart::Dest(h, p) => {
                        dest_ports.insert(h.clone(), p.clone());
                    }
                }
            }
            if let Some(vs) = spec {
                out.push((ResolvedVs { vs, dest_ports }, 1isize));
            }
        });

    // Mesh VirtualService in effect per (scope, host).
    let vs_by_host = i
        .virtual_services
        .clone()
        .filter(|(_, vs)| vs.binds_mesh())
        .flat_map(|(_, vs)| vs.hosts.clone().into_iter().map(move |h| (h, vs.clone())));
    let vs_chosen = host_scope
        .join_map(vs_by_host, |h, s, vs| {
            rules::vs_rank(vs, s.namespace()).map(|r| ((s.clone(), h.clone()), (r, vs.key.clone())))
        })
        .flat_map(|x| x)
        .reduce(|_, vals, out| out.push((vals[0].0 .1.clone(), 1isize)));

    // Sidecar route configurations per (scope, port).
    let view_specs = view_hosts
        .map(|((s, idx), h)| (h, (s, idx)))
        .join_map(services.clone(), |_, (s, idx), svc| {
            (s.clone(), (*idx, svc.clone()))
        })
        .join_map(scope_specs.clone(), |s, (idx, svc), sc| {
            let ScopeKey::Sidecar {
                interception_none,
                proxyless,
                ..
            } = *s
            else {
                return Vec::new();
            };
            let listeners = rules::egress_listeners(sc.as_ref());
            rules::sidecar_route_ports(&listeners, *idx, svc, interception_none, proxyless)
                .into_iter()
                .map(|(port, allow_any, catch_all)| {
                    (
                        (s.clone(), svc.hostname.clone()),
                        (port, allow_any, catch_all, svc.clone()),
                    )
                })
                .collect()
        })
        .flat_map(|rows| rows)
        .distinct();
    // Proxyless clients look up one API listener per `host:port` they may dial.
    let scope_api_listeners = view_specs
        .clone()
        .filter(|((s, _), _)| {
            matches!(
                s,
                ScopeKey::Sidecar {
                    proxyless: true,
                    ..
                }
            )
        })
        .map(|((s, h), (port, .., svc))| (s, h, port, svc.origin));
    let api_prov = scope_api_listeners.clone().map(|(s, h, port, o)| {
        (
            (
                Holder::Scope(s),
                ResourceType::Listener,
                listener::api_listener_name(&h, port),
            ),
            o,
        )
    });
    let scope_api_listeners =
        scope_api_listeners.map(|(s, h, port, _)| (s, listener::api_listener(&h, port)));
    let rows_with_vs = view_specs
        .clone()
        .join_map(
            vs_chosen.clone(),
            |(s, _), (port, allow_any, catch_all, svc), vk| {
                (
                    vk.clone(),
                    (s.clone(), *port, *allow_any, *catch_all, svc.clone()),
                )
            },
        )
        .join_map(
            resolved_vs.clone(),
            |_, (s, port, allow_any, catch_all, svc), rvs| {
                let row = RouteRow::Vhost {
                    allow_any: *allow_any,
                    catch_all: *catch_all,
                    service: svc.clone(),
                    vs: Some(rvs.clone()),
                };
                ((s.clone(), *port), row)
            },
        );
    let rows_without_vs = view_specs.antijoin(vs_chosen.map(|(k, _)| k)).map(
        |((s, _), (port, allow_any, catch_all, svc))| {
            (
                (s, port),
                RouteRow::Vhost {
                    allow_any,
                    catch_all,
                    service: svc,
                    vs: None,
                },
            )
        },
    );
    let route_exists = scope_specs.clone().flat_map(|(s, sc)| match &s {
        ScopeKey::Sidecar {
            interception_none,
            proxyless,
            ..
        } => assemble::sidecar_fixed_routes(sc.as_ref(), *interception_none, *proxyless)
            .into_iter()
            .map(|(port, allow_any)| ((s.clone(), port), RouteRow::Exists { allow_any }))
            .collect(),
        ScopeKey::Router { .. } => Vec::new(),
    });
    let suffix = mesh.domain_suffix.clone();
    let route_rows = rows_with_vs.concat(rows_without_vs).concat(route_exists);
    // A sidecar route configuration comes from its services and their VirtualServices; the
    // catch-all listener of a port from the services that needed it.
    let route_prov = route_rows.clone().flat_map(|((s, port), row)| {
        let RouteRow::Vhost {
            service,
            vs,
            catch_all,
            ..
        } = row
        else {
            return Vec::new();
        };
        let route_key = (
            Holder::Scope(s.clone()),
            ResourceType::Route,
            port.to_string(),
        );
        let mut rows = vec![(route_key.clone(), service.origin.clone())];
        if let Some(vs) = vs {
            rows.push((route_key, vs.vs.key));
        }
        let captured = matches!(
            s,
            ScopeKey::Sidecar {
                interception_none: false,
                ..
            }
        );
        if catch_all && captured {
            let name = listener::listener_name("0.0.0.0", port);
            rows.push((
                (Holder::Scope(s), ResourceType::Listener, name),
                service.origin,
            ));
        }
        rows
    });
    let catchall_listeners = route_rows
        .clone()
        .filter(|(_, row)| {
            matches!(
                row,
                RouteRow::Vhost {
                    catch_all: true,
                    ..
                }
            )
        })
        .map(|((s, port), _)| (s, port))
        .distinct()
        .filter(|(s, _)| {
            matches!(
                s,
                ScopeKey::Sidecar {
                    interception_none: false,
                    ..
                }
            )
        });
    let route_configs = route_rows.reduce(
        move |(s, port): &(ScopeKey, u16), vals: &[(&RouteRow, isize)], out| {
            let mut allow_any = true;
            let mut vhosts = Vec::new();
            for (row, _) in vals {
                match row {
                    RouteRow::Exists { allow_any: a } => allow_any = *a,
                    RouteRow::Vhost {
                        allow_any: a,
                        service,
                        vs,
                        ..
                    } => {
                        allow_any = *a;
                        vhosts.push((service.clone(), vs.clone()));
                    }
                }
            }
            out.push((
                route::sidecar_route_config(*port, s.namespace(), &suffix, &vhosts, allow_any),
                1isize,
            ));
        },
    );
    let scope_routes = route_configs.map(|((s, _), r)| (s, r));
    let scope_catchall = catchall_listeners.map(|(s, port)| (s, assemble::catchall_listener(port)));
    let scope_fixed_listeners = scope_specs.clone().flat_map(|(s, sc)| match &s {
        ScopeKey::Sidecar {
            interception_none,
            proxyless,
            ..
        } => assemble::sidecar_fixed_listeners(sc.as_ref(), *interception_none, *proxyless)
            .into_iter()
            .map(|r| (s.clone(), r))
            .collect(),
        ScopeKey::Router { .. } => Vec::new(),
    });

    // Gateway proxies: listeners and routes from the selected Gateways and bound VSs.
    let router_gw = scopes.flat_map(|s| match &s {
        ScopeKey::Router { gateways, .. } => {
            gateways.iter().map(|g| (g.clone(), s.clone())).collect()
        }
        _ => Vec::new(),
    });
    let router_gw_items = router_gw.clone().join_map(i.gateways.clone(), |_, s, gw| {
        (s.clone(), GwItem::Gateway(gw.clone()))
    });
    let vs_by_gw = i.virtual_services.clone().flat_map(|(k, vs)| {
        vs.gateways
            .iter()
            .filter_map(rules::gateway_ref_str)
            .map(|g| (g, k.clone()))
            .collect::<Vec<_>>()
    });
    let router_vs_items = router_gw
        .join_map(vs_by_gw, |g, s, vk| (vk.clone(), (s.clone(), g.clone())))
        .join_map(resolved_vs, |_, (s, g), rvs| {
            (s.clone(), GwItem::Vs(g.clone(), rvs.clone()))
        });
    let router_out =
        router_gw_items
            .concat(router_vs_items)
            .reduce(|_, vals: &[(&GwItem, isize)], out| {
                let gws: Vec<&Gateway> = vals
                    .iter()
                    .filter_map(|(v, _)| {
                        if let GwItem::Gateway(g) = v {
                            Some(g)
                        } else {
                            None
                        }
                    })
                    .collect();
                let vss: Vec<(&ConfigKey, &ResolvedVs)> = vals
                    .iter()
                    .filter_map(|(v, _)| {
                        if let GwItem::Vs(g, r) = v {
                            Some((g, r))
                        } else {
                            None
                        }
                    })
                    .collect();
                let mut res = assemble::router_resources(&gws, &vss);
                res.sort();
                res.dedup();
                out.extend(res.into_iter().map(|r| (r, 1isize)));
            });
    let router_res = router_out.clone().map(|(s, (r, _))| (s, r));
    let router_prov = router_out.flat_map(|(s, (r, inputs))| {
        let key = (Holder::Scope(s), r.rtype, r.name);
        inputs
            .into_iter()
            .map(move |k| (key.clone(), k))
            .collect::<Vec<_>>()
    });

    // Per-proxy inbound part: the proxy's own service ports (not for proxyless clients).
    let sidecar_proxies = sidecar_proxies.filter(|(_, p)| p.kind == ProxyKind::Sidecar);
    let proxy_ips = sidecar_proxies.clone().flat_map(|(id, p)| {
        p.ips
            .iter()
            .map(|ip| (ip.clone(), id.clone()))
            .collect::<Vec<_>>()
    });
    let inbound_rows = proxy_ips.join_map(
        resolved_eps.map(|(_, ep)| (ep.ip, (ep.port, ep.origins))),
        |_, id, (port, origins)| ((id.clone(), *port), origins.clone()),
    );
    let inbound_ports = inbound_rows.clone().map(|(k, _)| k).distinct();
    let inbound_prov = inbound_rows
        .flat_map(|((id, port), origins)| {
            let key = (
                Holder::Proxy(id),
                ResourceType::Cluster,
                crate::translate::inbound_cluster_name(port),
            );
            origins
                .into_iter()
                .map(move |o| (key.clone(), o))
                .collect::<Vec<_>>()
        })
        .distinct();
    let inbound_clusters = inbound_ports
        .clone()
        .map(|(id, port)| (id, cluster::inbound(port)));
    let captured = sidecar_proxies
        .filter(|(_, p)| !p.interception_none)
        .map(|(id, _)| (id, None));
    let virtual_inbound = inbound_ports
        .map(|(id, port)| (id, Some(port)))
        .concat(captured.clone())
        .semijoin(captured.map(|(id, _)| id).distinct())
        .reduce(|_, vals: &[(&Option<u16>, isize)], out| {
            let ports: Vec<u16> = vals.iter().filter_map(|(p, _)| **p).collect();
            out.push((listener::virtual_inbound(&ports), 1isize));
        });
    let proxy_res = inbound_clusters.concat(virtual_inbound);

    let scope_res = scope_fixed_clusters
        .concat(scope_clusters)
        .concat(scope_eds)
        .concat(scope_routes)
        .concat(scope_catchall)
        .concat(scope_fixed_listeners)
        .concat(scope_api_listeners)
        .concat(router_res);
    // Every resource of a scope governed by a Sidecar resource comes from it too.
    let sidecar_prov = scope_res.clone().flat_map(|(s, r)| match &s {
        ScopeKey::Sidecar {
            sidecar: Some(k), ..
        } => {
            let k = k.clone();
            Some(((Holder::Scope(s), r.rtype, r.name), k))
        }
        _ => None,
    });
    let provenance = cluster_prov
        .concat(eds_prov)
        .concat(route_prov)
        .concat(api_prov)
        .concat(router_prov)
        .concat(inbound_prov)
        .concat(sidecar_prov)
        .distinct();
    let proxy_scopes = proxy_scope.clone();
    // Never joined with `proxy_scope`: that would write one record per (proxy, resource)
    // pair. Consumers resolve a proxy's set from its scope (`materialize`).
    let scope_resources = scope_res.clone().map(|(s, r)| (s, r.key()));
    let proxy_resources = proxy_res.clone().map(|(id, r)| (id, r.key()));
    let bodies = scope_res
        .map(|(_, r)| r)
        .concat(proxy_res.map(|(_, r)| r))
        .distinct();
    let errors = service_conflicts.map(|(_, e)| e);
    Outputs {
        proxy_resources,
        scope_resources,
        bodies,
        errors,
        proxy_scopes,
        provenance,
    }
}
