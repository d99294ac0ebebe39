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

/// A definition of a host set aside: `by` defines the host in its namespace and the two
/// cannot merge (`why`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetAside {
    pub origin: ConfigKey,
    pub by: ConfigKey,
    pub why: &'static str,
}

impl HostServices {
    /// From every definition of one host, sorted as [`Service`] sorts: per namespace, a
    /// Kubernetes Service if there is one (ServiceEntries of its host in its namespace are
    /// set aside, as Istio's registry sets them aside), else the first ServiceEntry with the
    /// ports of the later ones it can merge with (the same resolution and `exportTo`, as
    /// Istio's `canMergeServices` asks) appended. Also returns the definitions set aside.
    pub fn fold<'a>(defs: impl IntoIterator<Item = &'a Service>) -> (Self, Vec<SetAside>) {
        let mut variants: Vec<Service> = Vec::new();
        let mut set_aside = Vec::new();
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
                set_aside.push(SetAside {
                    origin: svc.origin.clone(),
                    by: kept.origin.clone(),
                    why,
                });
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
        }
        (HostServices { variants }, set_aside)
    }

    pub fn hostname(&self) -> &Hostname {
        &self.first().hostname
    }

    /// The service proxies reading config in namespace `ns` get, as Istio's sidecar scope
    /// picks it among those exported to `ns`: the one of `ns` itself, else a Kubernetes
    /// Service, else one exported to `ns` by name before one exported to every namespace,
    /// else the first. `None` when none is exported to `ns`.
    pub fn for_namespace(&self, ns: &str) -> Option<&Service> {
        pick_for_namespace(&self.variants, ns).map(|i| &self.variants[i])
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
    pub fn map_each(&self, f: impl FnMut(&mut Service)) -> Self {
        let mut variants = self.variants.clone();
        variants.iter_mut().for_each(f);
        HostServices { variants }
    }
}

/// [`HostServices::for_namespace`] over `variants` (one host's services, one per namespace,
/// in [`HostServices`] order), as the index of the one picked: the naive recompute picks
/// with it too.
pub fn pick_for_namespace<S: std::borrow::Borrow<Service>>(
    variants: &[S],
    ns: &str,
) -> Option<usize> {
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
        .map(|(i, _)| i)
}
