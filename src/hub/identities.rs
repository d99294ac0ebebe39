//! Which service account each known workload runs as (Pods and WorkloadEntries, from the
//! registry), so a node id is bound to the identity that may use it: a stream that proved
//! `ns/sa` may not speak for a pod, or at an address, of another service account (it could
//! otherwise take a proxy's node id first and lock the real proxy out).

use dataflows::model::{Kind, Proxy, Record};
use std::collections::hash_map::Entry;
use std::collections::HashMap;

/// (namespace, service account)
type Account = (String, String);

/// Counted, as records come and go in any order.
#[derive(Default)]
pub struct WorkloadAccounts {
    /// (namespace, pod name) → accounts.
    by_pod: HashMap<(String, String), HashMap<Account, isize>>,
    /// IP → accounts of the workloads there.
    by_ip: HashMap<String, HashMap<Account, isize>>,
}

fn bump<K: std::hash::Hash + Eq>(
    m: &mut HashMap<K, HashMap<Account, isize>>,
    k: K,
    a: Account,
    d: isize,
) {
    // Emptied entries go at once: sweeping the maps every epoch cost O(workloads) per epoch.
    let mut entry = match m.entry(k) {
        Entry::Occupied(e) => e,
        Entry::Vacant(e) if d > 0 => {
            e.insert([(a, d)].into());
            return;
        }
        Entry::Vacant(_) => return,
    };
    let inner = entry.get_mut();
    *inner.entry(a.clone()).or_default() += d;
    if inner.get(&a).is_some_and(|n| *n <= 0) {
        inner.remove(&a);
    }
    if inner.is_empty() {
        entry.remove();
    }
}

impl WorkloadAccounts {
    /// Notes one epoch's record changes.
    pub fn apply(&mut self, changes: &[(Record, isize)]) {
        for (r, d) in changes {
            let Record::Workload(w) = r else { continue };
            let Some(sa) = &w.service_account else {
                continue;
            };
            let account = (w.origin.namespace.clone(), sa.clone());
            if w.origin.kind == Kind::Pod {
                let pod = (w.origin.namespace.clone(), w.origin.name.clone());
                bump(&mut self.by_pod, pod, account.clone(), *d);
            }
            bump(&mut self.by_ip, w.ip.clone(), account, *d);
        }
    }

    /// Why a stream proved to be `namespace`/`service_account` may not speak for `proxy`:
    /// the pod its node id names, or a workload at one of its addresses, runs as another
    /// account. `None` when nothing known says otherwise.
    pub fn conflict(
        &self,
        proxy: &Proxy,
        namespace: &str,
        service_account: &str,
    ) -> Option<String> {
        let mine = (namespace.to_string(), service_account.to_string());
        let others = |m: &HashMap<Account, isize>| -> Option<String> {
            m.keys()
                .find(|a| **a != mine)
                .map(|(ns, sa)| format!("{ns}/{sa}"))
        };
        let pod = proxy
            .id
            .split('~')
            .nth(2)
            .and_then(|p| p.strip_suffix(&format!(".{}", proxy.namespace)));
        if let Some(pod) = pod {
            let key = (proxy.namespace.clone(), pod.to_string());
            if let Some(other) = self.by_pod.get(&key).and_then(others) {
                return Some(format!(
                    "node {:?} names pod {}/{pod}, which runs as service account {other}, not \
                     {namespace}/{service_account}",
                    proxy.id, proxy.namespace
                ));
            }
        }
        for ip in &proxy.ips {
            if let Some(other) = self.by_ip.get(ip).and_then(others) {
                return Some(format!(
                    "node {:?} claims address {ip}, where a workload of service account {other} \
                     runs, not {namespace}/{service_account}",
                    proxy.id
                ));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataflows::model::{ConfigKey, Placement, ProxyKind, Workload};

    fn pod(name: &str, ip: &str, sa: &str) -> Record {
        Record::Workload(Workload {
            ip: ip.into(),
            labels: Default::default(),
            origin: ConfigKey::new(Kind::Pod, "default", name),
            ports: Default::default(),
            placement: Placement {
                locality: String::new(),
                weight: None,
            },
            service_account: Some(sa.into()),
            peer: None,
        })
    }

    fn proxy(id: &str, ip: &str) -> Proxy {
        Proxy {
            id: id.into(),
            kind: ProxyKind::Sidecar,
            ips: vec![ip.into()],
            namespace: "default".into(),
            labels: Default::default(),
            interception_none: false,
            service_account: None,
            locality: String::new(),
            idle_timeout_ns: None,
        }
    }

    #[test]
    fn a_node_id_of_another_accounts_pod_or_address_conflicts() {
        let mut w = WorkloadAccounts::default();
        w.apply(&[(pod("reviews-v1", "10.0.0.5", "bookinfo-reviews"), 1)]);
        let squat = proxy(
            "sidecar~10.0.0.9~reviews-v1.default~default.svc.cluster.local",
            "10.0.0.9",
        );
        let why = w
            .conflict(&squat, "default", "sleep")
            .expect("the pod runs as another account");
        assert!(why.contains("default/bookinfo-reviews"), "{why}");
        assert!(w.conflict(&squat, "default", "bookinfo-reviews").is_none());
        let by_ip = proxy(
            "sidecar~10.0.0.5~other.default~default.svc.cluster.local",
            "10.0.0.5",
        );
        assert!(w.conflict(&by_ip, "default", "sleep").is_some());
        let unknown = proxy(
            "sidecar~10.0.0.7~sleep-1.default~default.svc.cluster.local",
            "10.0.0.7",
        );
        assert!(w.conflict(&unknown, "default", "sleep").is_none());
        w.apply(&[(pod("reviews-v1", "10.0.0.5", "bookinfo-reviews"), -1)]);
        assert!(
            w.conflict(&squat, "default", "sleep").is_none(),
            "gone with its pod"
        );
    }
}
