//! Services: one per hostname and namespace, as Istio keeps them. In: every `(hostname,
//! Service)` from all sources. Out: per hostname, the services of every namespace that
//! defines it ([`HostServices`]: each proxy gets the one its namespace picks), and a
//! [`ConfigError`] for each definition set aside, and for ServiceEntries that give one port
//! of a host different protocols where their `exportTo` overlap. [`with_aliases`]: those
//! services with Kubernetes `ExternalName` aliases resolved, as every later stage but the
//! analysis of references sees them.

use super::Coll;
use crate::model::*;

pub(super) struct Services<'s> {
    /// Per hostname, the service of each namespace that defines it.
    pub chosen: Coll<'s, (Hostname, HostServices)>,
    /// Definitions set aside, and protocol conflicts; retracted when the conflict goes.
    pub conflicts: Coll<'s, ConfigError>,
}

/// Per hostname and namespace, Kubernetes Services win over ServiceEntries, then by name
/// (the order `Service` sorts in); the ServiceEntries of one namespace merge their ports
/// ([`HostServices::fold`]).
pub(super) fn per_namespace<'s>(all: Coll<'s, (Hostname, Service)>) -> Services<'s> {
    // One fold per host change gives both the services and the conflicts.
    let folded = all.reduce(|h, vals, out| {
        let defs: Vec<&Service> = vals.iter().map(|(s, _)| *s).collect();
        let (set, set_aside) = HostServices::fold(defs.iter().copied());
        for SetAside { origin, by, why } in set_aside {
            out.push((
                Err(ConfigError {
                    object: origin,
                    code: ErrorCode::HostConflict,
                    message: format!(
                        "host {h} is already defined by {by} in its namespace ({why}): it is set aside"
                    ),
                }),
                1isize,
            ))
        }
        for e in protocol_conflicts(h, &defs) {
            out.push((Err(e), 1isize))
        }
        out.push((Ok(set), 1isize))
    });
    Services {
        chosen: folded
            .clone()
            .flat_map(|(h, r): (Hostname, Result<HostServices, ConfigError>)| {
                r.ok().map(|s| (h, s))
            }),
        conflicts: folded.flat_map(|(_, r)| r.err()),
    }
}

/// ServiceEntries of one host that give one port number different protocols where their
/// `exportTo` overlap (Istio's IST0177 ConflictingServiceEntryProtocol): one error on each,
/// naming the others.
fn protocol_conflicts(h: &Hostname, defs: &[&Service]) -> Vec<ConfigError> {
    let entries: Vec<&Service> = defs
        .iter()
        .copied()
        .filter(|s| s.origin.kind == Kind::ServiceEntry)
        .collect();
    let mut out = Vec::new();
    for s in &entries {
        for p in &s.ports {
            let others: Vec<String> = entries
                .iter()
                .filter(|o| o.origin != s.origin && exports_overlap(s, o))
                .filter_map(|o| {
                    let q = o.ports.iter().find(|q| q.port == p.port)?;
                    (q.protocol != p.protocol).then(|| format!("{} ({:?})", o.origin, q.protocol))
                })
                .collect();
            if !others.is_empty() {
                out.push(ConfigError {
                    object: s.origin.clone(),
                    code: ErrorCode::ServiceEntryProtocolConflict,
                    message: format!(
                        "spec.ports: port {} of host {h} is {:?} here and otherwise in {}, exported to namespaces in common: their sidecars serve only one of them",
                        p.port,
                        p.protocol,
                        others.join(", ")
                    ),
                });
                break;
            }
        }
    }
    out
}

/// Whether two services are exported to a namespace in common (`*`, a name both list, or
/// one's own namespace the other exports to).
fn exports_overlap(a: &Service, b: &Service) -> bool {
    let scopes = |s: &Service| -> Vec<String> {
        if s.export_to.is_empty() || s.export_to.iter().any(|e| e == "*") {
            return vec!["*".to_string()];
        }
        s.export_to
            .iter()
            .filter(|e| e.as_str() != "~")
            .map(|e| {
                if e == "." {
                    s.namespace().to_string()
                } else {
                    e.clone()
                }
            })
            .collect()
    };
    let (sa, sb) = (scopes(a), scopes(b));
    let star = |v: &[String]| v.iter().any(|e| e == "*");
    (star(&sa) && !sb.is_empty())
        || (star(&sb) && !sa.is_empty())
        || sa.iter().any(|n| sb.contains(n))
}

/// The services in effect with `ExternalName` aliases resolved
/// ([`crate::rules::with_aliases`]): an alias service leaves, and the service its chain ends
/// at lists it among its [`Service::aliases`]. Chains of any length resolve, as in Istio: an iteration gathers
/// every host on each alias's chain (a monotone set, so it converges even where a chain
/// loops), and the one host on it that is no alias is where the chain ends; a chain that
/// loops has none and resolves to nothing. A change touches only the aliases on its chains
/// and the services they end at.
pub(super) fn with_aliases<'s>(
    chosen: &Coll<'s, (Hostname, HostServices)>,
) -> Coll<'s, (Hostname, HostServices)> {
    use differential_dataflow::operators::Iterate;
    // An alias is a Kubernetes `ExternalName` Service: it sorts first among its host's.
    let raw = chosen
        .clone()
        .flat_map(|(h, s)| s.first().alias_for.clone().map(|t| (h, t)));
    let alias_hosts = raw.clone().map(|(a, _)| a);
    // `(alias, host)`: every host on the alias's chain, after the first hop.
    let on_chain = raw.clone().iterate(|scope, reached| {
        let raw = raw.enter(scope);
        reached
            .map(|(a, h)| (h, a))
            .join_map(raw.clone(), |_, a, next| (a.clone(), next.clone()))
            .concat(raw)
            .distinct()
    });
    let aliases = on_chain.map(|(a, h)| (h, a)).antijoin(alias_hosts).reduce(
        |_, vals: &[(&Hostname, isize)], out| {
            out.push((
                vals.iter().map(|(a, _)| (*a).clone()).collect::<Vec<_>>(),
                1isize,
            ))
        },
    );
    let concrete = chosen
        .clone()
        .filter(|(_, s)| s.first().alias_for.is_none());
    let with = concrete.clone().join_map(aliases.clone(), |h, s, aliases| {
        let s = s.map_each(|s| s.aliases = aliases.clone());
        (h.clone(), s)
    });
    let without = concrete.antijoin(aliases.map(|(h, _)| h));
    with.concat(without)
}
