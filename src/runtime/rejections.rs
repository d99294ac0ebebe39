//! Rejections, attributed: when a proxy rejects (NACKs) a resource, the objects whose change
//! altered that resource since the proxy last accepted a push of its type are named, with the
//! proxy and Envoy's message, on the debug port (errors of the source [`SOURCE`]) and, where
//! the proxy may speak about the object, on its status.
//!
//! Nothing a proxy says changes what any proxy is served: no object is set back or taken
//! out because a proxy rejected it. Envoy keeps serving the rejecting proxy its last
//! accepted version on its own, and the stream does not resend the rejected version. What
//! an earlier design did here (setting objects back for the whole mesh) let one hostile or
//! misconfigured proxy take routing away from every other; bad objects are instead caught
//! by validation before they reach any proxy (regex program sizes, durations, names).
//!
//! Attribution is narrow on purpose: an object is named only when its latest change falls
//! between the proxy's last accepted push of the type and the rejected one, and objects that
//! only select the proxy's scope (Sidecar, mesh config) are not blamed for a cluster's or an
//! endpoint's content. A report ends when the object changes again.
//!
//! Who may write on an object's status: a proxy of the object's own namespace or of the root
//! namespace (gateways), as its stream authenticated it (or claimed, where the server
//! authenticates no one). Others' rejections reach the debug port and metrics only, so a
//! workload of one namespace cannot write into another's objects.

use crate::input::{record_key, ProxyRejection, ProxyRejections, Rejection};
use dataflows::model::{ConfigKey, Kind, Record, ResourceType};
use std::collections::HashMap;

/// The source name the rejections are reported under.
pub const SOURCE: &str = "rejected-by-proxies";

/// Envoy's message is cut to this many characters in the error (NACK messages can be long).
const MESSAGE_CHARS: usize = 300;

/// Objects whose changes are tracked for attribution: what operators write.
fn tracked(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::VirtualService
            | Kind::DestinationRule
            | Kind::Gateway
            | Kind::Sidecar
            | Kind::ServiceEntry
            | Kind::WorkloadEntry
            | Kind::PeerAuthentication
            | Kind::AuthorizationPolicy
            | Kind::RequestAuthentication
    )
}

/// Whether an object of `kind` can be at fault for `resources` of type `t`: a Sidecar (or
/// the mesh config) selects which listeners and routes a proxy has and shapes its inbound
/// clusters (`inboundConnectionPool`); it does not write what an outbound cluster, its
/// endpoints or a secret hold.
fn may_blame(kind: Kind, t: ResourceType, resources: &[String]) -> bool {
    match kind {
        // Security policies change only inbound listeners (and a proxy's own secrets).
        Kind::PeerAuthentication | Kind::AuthorizationPolicy | Kind::RequestAuthentication => {
            t == ResourceType::Listener
        }
        Kind::Sidecar | Kind::MeshConfig => match t {
            ResourceType::Listener | ResourceType::Route => true,
            ResourceType::Cluster => resources.iter().any(|r| r.starts_with("inbound|")),
            _ => false,
        },
        _ => true,
    }
}

#[derive(Default)]
struct Object {
    /// Records the source holds for the object now (it is forgotten at zero).
    records: isize,
    /// The epoch of the object's latest change.
    changed: u64,
    /// The rejection reported on it, until it changes again.
    rejected: Option<Report>,
}

struct Report {
    why: String,
    /// For the status: only proxies that may speak about the object.
    status: Option<ProxyRejection>,
    /// Every proxy that rejected it.
    proxies: std::collections::BTreeSet<String>,
}

/// The tracked objects and the rejections attributed to them.
#[derive(Default)]
pub struct Rejections {
    objects: HashMap<ConfigKey, Object>,
}

impl Rejections {
    /// Notes one epoch's record changes (they pass to the dataflow unchanged). Returns whether
    /// the list of errors changed (an object reported on changed again).
    pub fn admit(&mut self, epoch: u64, changes: &[(Record, isize)]) -> bool {
        let mut changed = false;
        for (r, d) in changes {
            let Some(key) = record_key(r).filter(|k| tracked(k.kind)) else {
                continue;
            };
            let obj = self.objects.entry(key.clone()).or_default();
            obj.records += d;
            obj.changed = epoch;
            changed |= obj.rejected.take().is_some();
            if obj.records <= 0 {
                self.objects.remove(key);
            }
        }
        changed
    }

    /// Attributes a rejection to the objects of `r` that changed after the proxy last
    /// accepted a push of the type and no later than the rejected push. `root_namespace`
    /// is the mesh's. Returns whether the errors changed.
    pub fn reject(&mut self, r: &Rejection, root_namespace: &str) -> bool {
        let what = format!("{} {}", r.rtype.short(), r.resources.join(", "));
        let message = cut(&r.message);
        let why = format!(
            "rejected by proxy {} ({what}): {message}; the proxy keeps the version it last \
             accepted, every other proxy is served as before",
            r.proxy,
        );
        let mut changed = false;
        for key in &r.inputs {
            if !may_blame(key.kind, r.rtype, &r.resources) {
                continue;
            }
            let Some(obj) = self.objects.get_mut(key) else {
                continue;
            };
            if obj.changed <= r.accepted_epoch || obj.changed > r.rejected_epoch {
                continue;
            }
            let may_write = r.namespace == key.namespace || r.namespace == root_namespace;
            let report = obj.rejected.get_or_insert_with(|| {
                changed = true;
                tracing::warn!(
                    object = %format!("{} {}/{}", key.kind, key.namespace, key.name),
                    proxy = %r.proxy,
                    "rejected: {why}"
                );
                Report {
                    why: why.clone(),
                    status: None,
                    proxies: Default::default(),
                }
            });
            report.proxies.insert(r.proxy.to_string());
            if may_write {
                report
                    .status
                    .get_or_insert_with(|| ProxyRejection {
                        proxies: Default::default(),
                        resources: what.clone(),
                        message: message.clone(),
                        since: std::time::SystemTime::now(),
                    })
                    .proxies
                    .insert(r.proxy.to_string());
            }
        }
        changed
    }

    /// The rejections to write on objects' statuses, with the proxies that may.
    pub fn rejections(&self) -> ProxyRejections {
        self.objects
            .iter()
            .filter_map(|(k, o)| Some((k.clone(), o.rejected.as_ref()?.status.clone()?)))
            .collect()
    }

    /// One error per object a rejection is attributed to, sorted.
    pub fn errors(&self) -> Vec<String> {
        let mut errors: Vec<String> = self
            .objects
            .iter()
            .filter_map(|(k, o)| {
                let r = o.rejected.as_ref()?;
                let more = match r.proxies.len() {
                    0 | 1 => String::new(),
                    n => format!(" ({n} proxies rejected it)"),
                };
                Some(format!(
                    "{} {}/{}: {}{more}",
                    k.kind, k.namespace, k.name, r.why
                ))
            })
            .collect();
        errors.sort();
        errors
    }
}

fn cut(message: &str) -> String {
    let one_line: String = message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match one_line.char_indices().nth(MESSAGE_CHARS) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataflows::model::VirtualService;

    fn key(kind: Kind, name: &str) -> ConfigKey {
        ConfigKey::new(kind, "default", name)
    }

    /// A VirtualService record of `name` whose content is told apart by `gateways`.
    fn vs(name: &str, version: &str) -> Record {
        Record::VirtualService(VirtualService {
            key: key(Kind::VirtualService, name),
            hosts: vec![format!("{name}.default.svc.cluster.local")],
            gateways: vec![version.to_string()],
            export_to: vec![],
            tcp: vec![],
            tls: vec![],
            http: vec![],
        })
    }

    fn rejection(
        proxy: &str,
        ns: &str,
        inputs: &[ConfigKey],
        accepted: u64,
        rejected: u64,
    ) -> Rejection {
        Rejection {
            proxy: proxy.into(),
            namespace: ns.into(),
            rtype: ResourceType::Route,
            resources: vec!["9080".into()],
            message: "Invalid regex: program size 153 > 100\nmore".into(),
            inputs: inputs.iter().cloned().collect(),
            accepted_epoch: accepted,
            rejected_epoch: rejected,
        }
    }

    /// Only the object changed between the accepted and the rejected push is named; nothing
    /// is set back (admit returns no records at all); the report ends when the object changes.
    #[test]
    fn a_rejection_names_the_object_changed_since_the_accepted_push() {
        let mut rj = Rejections::default();
        rj.admit(1, &[(vs("reviews", "a"), 1), (vs("ratings", "a"), 1)]);
        rj.admit(2, &[(vs("ratings", "a"), -1), (vs("ratings", "bad"), 1)]);
        let inputs = [
            key(Kind::VirtualService, "reviews"),
            key(Kind::VirtualService, "ratings"),
        ];
        assert!(rj.reject(
            &rejection("sleep.default", "default", &inputs, 1, 2),
            "istio-system"
        ));
        let errors = rj.errors();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("VirtualService default/ratings: rejected by proxy sleep.default (RDS 9080): Invalid regex: program size 153 > 100 more;"),
            "{errors:?}"
        );
        // A second proxy is counted on the same report.
        assert!(!rj.reject(
            &rejection("other.default", "default", &inputs, 1, 2),
            "istio-system"
        ));
        let status = rj.rejections();
        assert_eq!(
            status.keys().collect::<Vec<_>>(),
            [&key(Kind::VirtualService, "ratings")]
        );
        assert_eq!(
            status[&key(Kind::VirtualService, "ratings")].proxies.len(),
            2
        );
        assert!(
            rj.errors()[0].ends_with("(2 proxies rejected it)"),
            "{:?}",
            rj.errors()
        );
        // The object changes: the report ends.
        assert!(rj.admit(
            3,
            &[(vs("ratings", "bad"), -1), (vs("ratings", "fixed"), 1)]
        ));
        assert!(rj.errors().is_empty());
        assert!(rj.rejections().is_empty());
    }

    /// A Sidecar that only scopes the proxy is not blamed for a cluster, though it is new.
    #[test]
    fn a_sidecar_is_not_blamed_for_a_cluster() {
        let mut rj = Rejections::default();
        let sidecar_key = key(Kind::Sidecar, "default");
        let sidecar = Record::Sidecar(dataflows::model::Sidecar {
            key: sidecar_key.clone(),
            selector: None,
            egress: vec![],
            registry_only: None,
            ingress: vec![],
            egress_proxy: None,
            inbound_connection_pool: None,
        });
        rj.admit(1, &[(sidecar, 1), (vs("reviews", "a"), 1)]);
        let mut r = rejection(
            "sleep.default",
            "default",
            std::slice::from_ref(&sidecar_key),
            0,
            1,
        );
        r.rtype = ResourceType::Cluster;
        r.resources = vec!["outbound|80||a.default.svc.cluster.local".into()];
        assert!(!rj.reject(&r, "istio-system"));
        assert!(rj.errors().is_empty());
        r.rtype = ResourceType::Listener;
        assert!(
            rj.reject(&r, "istio-system"),
            "a listener is the Sidecar's to shape"
        );
    }

    /// A proxy of another namespace is reported on the debug port, never on the status.
    #[test]
    fn a_proxy_of_another_namespace_does_not_write_the_status() {
        let mut rj = Rejections::default();
        rj.admit(1, &[(vs("reviews", "a"), 1)]);
        let inputs = [key(Kind::VirtualService, "reviews")];
        assert!(rj.reject(&rejection("x.evil", "evil", &inputs, 0, 1), "istio-system"));
        assert_eq!(rj.errors().len(), 1);
        assert!(
            rj.rejections().is_empty(),
            "evil writes nothing on default's objects"
        );
        rj.reject(
            &rejection("gw.istio-system", "istio-system", &inputs, 0, 1),
            "istio-system",
        );
        let status = rj.rejections();
        let proxies: Vec<_> = status[&inputs[0]].proxies.iter().cloned().collect();
        assert_eq!(proxies, ["gw.istio-system"]);
    }

    /// An object changed before the proxy's accepted push, or after the rejected one, is
    /// not named; a deleted object is forgotten.
    #[test]
    fn only_the_window_is_blamed() {
        let mut rj = Rejections::default();
        rj.admit(1, &[(vs("reviews", "a"), 1)]);
        rj.admit(5, &[(vs("ratings", "a"), 1)]);
        let inputs = [
            key(Kind::VirtualService, "reviews"),
            key(Kind::VirtualService, "ratings"),
        ];
        assert!(!rj.reject(
            &rejection("p.default", "default", &inputs, 2, 4),
            "istio-system"
        ));
        assert!(rj.errors().is_empty());
        rj.admit(6, &[(vs("ratings", "a"), -1)]);
        assert!(!rj.reject(
            &rejection("p.default", "default", &inputs, 2, 6),
            "istio-system"
        ));
        assert!(!rj.objects.contains_key(&inputs[1]));
    }

    mod fuzz {
        //! Random change logs and random NACKs from several proxies of several namespaces:
        //! attribution never panics, names only objects the rejected push was built from and
        //! that changed in the rejecting proxy's window, and writes a proxy on an object's
        //! status only when it is of the object's namespace or the root's. (What is served is
        //! out of its reach: it returns no record to apply — `tests/xds/nack_isolation.rs`
        //! checks what the clients get.)
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Step {
            Change {
                object: u8,
                version: u8,
                delete: bool,
            },
            Nack {
                proxy: u8,
                ns: u8,
                inputs: Vec<u8>,
                accepted: u8,
                rejected: u8,
            },
        }

        fn step() -> impl Strategy<Value = Step> {
            prop_oneof![
                (0u8..6, 0u8..4, any::<bool>()).prop_map(|(object, version, delete)| {
                    Step::Change {
                        object,
                        version,
                        delete,
                    }
                }),
                (
                    0u8..4,
                    0u8..3,
                    proptest::collection::vec(0u8..6, 0..6),
                    0u8..20,
                    0u8..20
                )
                    .prop_map(|(proxy, ns, inputs, accepted, rejected)| {
                        Step::Nack {
                            proxy,
                            ns,
                            inputs,
                            accepted,
                            rejected,
                        }
                    }),
            ]
        }

        const NAMESPACES: [&str; 3] = ["default", "evil", "istio-system"];

        fn object_key(i: u8) -> ConfigKey {
            ConfigKey::new(
                Kind::VirtualService,
                NAMESPACES[(i % 2) as usize],
                format!("o{i}"),
            )
        }

        fn record(i: u8, version: u8) -> Record {
            let mut r = vs(&format!("o{i}"), &format!("v{version}"));
            if let Record::VirtualService(v) = &mut r {
                v.key = object_key(i);
            }
            r
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

            #[test]
            fn attribution_stays_within_its_bounds(steps in proptest::collection::vec(step(), 0..40)) {
                let mut rj = Rejections::default();
                let mut current: std::collections::HashMap<u8, Record> = Default::default();
                let mut changed_at: std::collections::HashMap<ConfigKey, u64> = Default::default();
                let mut epoch = 0u64;
                for s in steps {
                    match s {
                        Step::Change { object, version, delete } => {
                            epoch += 1;
                            let mut diff = Vec::new();
                            if let Some(old) = current.remove(&object) {
                                diff.push((old, -1));
                            }
                            if !delete {
                                let r = record(object, version);
                                current.insert(object, r.clone());
                                diff.push((r, 1));
                            }
                            rj.admit(epoch, &diff);
                            changed_at.insert(object_key(object), epoch);
                        }
                        Step::Nack { proxy, ns, inputs, accepted, rejected } => {
                            let namespace = NAMESPACES[ns as usize];
                            let r = Rejection {
                                proxy: format!("p{proxy}.{namespace}"),
                                namespace: namespace.into(),
                                rtype: ResourceType::Route,
                                resources: vec!["9080".into()],
                                message: "bad".into(),
                                inputs: inputs.iter().map(|i| object_key(*i)).collect(),
                                accepted_epoch: accepted as u64,
                                rejected_epoch: rejected as u64,
                            };
                            rj.reject(&r, "istio-system");
                            // Every object named on a status was an input of a NACK of a
                            // proxy allowed to speak of it.
                            for (key, report) in rj.rejections() {
                                for p in &report.proxies {
                                    let pns = p.split('.').nth(1).unwrap_or("");
                                    prop_assert!(pns == key.namespace || pns == "istio-system", "{p} on {key:?}");
                                }
                            }
                            for (key, obj) in &rj.objects {
                                if obj.rejected.is_some() {
                                    prop_assert!(current.keys().any(|i| object_key(*i) == *key), "{key:?} is gone");
                                    prop_assert!(changed_at.contains_key(key));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
