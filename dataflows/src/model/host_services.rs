//! [`HostServices`]: every service of one hostname, one per namespace that defines it. Istio
//! keeps a service per host *and namespace*: a ServiceEntry in one namespace does not take a
//! host away from the sidecars of another that defines it too, and the ServiceEntries of one
//! namespace for one host merge their ports. Which one a proxy gets depends on the namespace
//! it reads config in ([`HostServices::for_namespace`]).

use super::{exported_to, ConfigKey, Hostname, Kind, Service};
use serde::{Deserialize, Serialize};

/// The services of one hostname, one per namespace (Kubernetes Services first, then by
/// namespace: the order [`Service`] sorts in).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HostServices {
    variants: Vec<Service>,
}

/// What became of one definition of a host within its namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Folded {
    /// Its ports (those the kept one lacks) were merged into `into`.
    Merged { into: ConfigKey },
    /// Set aside: `by` defines the host in its namespace and the two cannot merge (`why`).
    SetAside { by: ConfigKey, why: &'static str },
}

impl HostServices {
    /// From every definition of one host, sorted as [`Service`] sorts: per namespace, a
    /// Kubernetes Service if there is one (ServiceEntries of its host in its namespace are
    /// set aside, as Istio's registry sets them aside), else the first ServiceEntry with the
    /// ports of the later ones it can merge with (the same resolution and `exportTo`, as
    /// Istio's `canMergeServices` asks) appended. Also returns what became of each
    /// definition that is not the kept one of its namespace.
    pub fn fold<'a>(
        defs: impl IntoIterator<Item = &'a Service>,
    ) -> (Self, Vec<(ConfigKey, Folded)>) {
        let mut variants: Vec<Service> = Vec::new();
        let mut folded = Vec::new();
        for svc in defs {
            let Some(kept) = variants
                .iter_mut()
                .find(|v| v.namespace() == svc.namespace())
            else {
                variants.push(svc.clone());
                continue;
            };
            let why = if kept.origin.kind != svc.origin.kind {
                Some("a Kubernetes Service of the host in the namespace wins over ServiceEntries")
            } else if kept.origin.kind != Kind::ServiceEntry {
                Some("it is defined twice")
            } else if kept.resolution != svc.resolution {
                Some("their resolutions differ")
            } else if kept.export_to != svc.export_to {
                Some("their exportTo differ")
            } else if kept.alias_for.is_some() || svc.alias_for.is_some() {
                Some("one is an alias")
            } else {
                None
            };
            if let Some(why) = why {
                folded.push((
                    svc.origin.clone(),
                    Folded::SetAside {
                        by: kept.origin.clone(),
                        why,
                    },
                ));
                continue;
            }
            for p in &svc.ports {
                if kept.ports.iter().all(|k| k.port != p.port) {
                    kept.ports.push(p.clone());
                    if let Some(t) = svc.host_target_ports.get(&p.name) {
                        kept.host_target_ports.entry(p.name.clone()).or_insert(*t);
                    }
                }
            }
            for e in &svc.dns_endpoints {
                if !kept.dns_endpoints.contains(e) {
                    kept.dns_endpoints.push(e.clone());
                }
            }
            for a in &svc.addresses {
                if !kept.addresses.contains(a) {
                    kept.addresses.push(a.clone());
                }
            }
            for s in &svc.subject_alt_names {
                if !kept.subject_alt_names.contains(s) {
                    kept.subject_alt_names.push(s.clone());
                }
            }
            folded.push((
                svc.origin.clone(),
                Folded::Merged {
                    into: kept.origin.clone(),
                },
            ));
        }
        (HostServices { variants }, folded)
    }

    /// One service only (tests, and hosts only one namespace defines).
    pub fn one(svc: Service) -> Self {
        HostServices {
            variants: vec![svc],
        }
    }

    pub fn hostname(&self) -> &Hostname {
        &self.first().hostname
    }

    /// The service proxies reading config in namespace `ns` get, as Istio's sidecar scope
    /// picks it among those exported to `ns`: the one of `ns` itself, else a Kubernetes
    /// Service, else one exported to `ns` by name before one exported to every namespace,
    /// else the first. `None` when none is exported to `ns`.
    pub fn for_namespace(&self, ns: &str) -> Option<&Service> {
        pick_for_namespace(&self.variants, ns)
    }

    /// The first: a Kubernetes Service if one defines the host, else the first
    /// ServiceEntry by namespace. What analysis that reads no proxy's view names.
    pub fn first(&self) -> &Service {
        &self.variants[0]
    }

    /// Every namespace's service.
    pub fn all(&self) -> &[Service] {
        &self.variants
    }

    /// The service of namespace `ns`, if it defines the host.
    pub fn of_namespace(&self, ns: &str) -> Option<&Service> {
        self.variants.iter().find(|s| s.namespace() == ns)
    }

    /// Each service changed by `f`.
    pub fn map_each(&self, mut f: impl FnMut(&mut Service)) -> Self {
        let mut variants = self.variants.clone();
        variants.iter_mut().for_each(|s| f(s));
        HostServices { variants }
    }

    /// Each service changed by `f`; those `f` turns to `None` leave. `None` when none is left.
    pub fn filter_map(&self, f: impl FnMut(&Service) -> Option<Service>) -> Option<Self> {
        let variants: Vec<Service> = self.variants.iter().filter_map(f).collect();
        (!variants.is_empty()).then_some(HostServices { variants })
    }
}

/// [`HostServices::for_namespace`] over `variants` (one host's services, one per namespace,
/// in [`HostServices`] order): the naive recompute picks with it too.
pub fn pick_for_namespace<'a, S: std::borrow::Borrow<Service>>(
    variants: &'a [S],
    ns: &str,
) -> Option<&'a Service> {
    variants
        .iter()
        .map(|s| s.borrow())
        .enumerate()
        .filter(|(_, s)| exported_to(&s.export_to, s.namespace(), ns))
        .min_by_key(|(i, s)| {
            (
                s.namespace() != ns,
                s.origin.kind != Kind::Service,
                !s.export_to.iter().any(|e| e == ns),
                *i,
            )
        })
        .map(|(_, s)| s)
}
