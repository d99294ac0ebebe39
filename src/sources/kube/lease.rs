//! One status writer among replicas: a Kubernetes Lease (`coordination.k8s.io/v1`), held the
//! way client-go's leader election holds one, since kube 5 has no leader-election helper.
//!
//! Every replica watches and serves; only the Lease's holder writes status
//! (`--write-status`), so replicas never fight over an object's conditions. Each round
//! (every fifth of the lease duration) a replica reads the Lease and:
//! - creates it, holding it, when there is none (409 AlreadyExists: another was faster);
//! - renews it (`renewTime`) when it holds it;
//! - takes it over (`holderIdentity`, `acquireTime`, `leaseTransitions` + 1) when it has no
//!   holder or the holder's record has not changed for the lease duration, as timed by this
//!   replica's own clock from when it saw the record change, not by `renewTime` (clocks of
//!   replicas may disagree, as client-go reasons);
//! - otherwise waits.
//!
//! Updates carry the resourceVersion read, so two replicas taking over at once conflict
//! (409) and only one wins. A holder that cannot renew for two thirds of the duration stops
//! writing before another replica may take over. A holder that stops is replaced within the
//! lease duration plus one round; the Lease is not released on exit. Why the Lease cannot be
//! read or written is published ([`Elected::problem`]) and reported as the source's error.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::Client;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The Lease's default name (in the namespace meshflow runs in).
pub const DEFAULT_NAME: &str = "meshflow-status";

/// The default lease duration (client-go's default).
pub const DEFAULT_DURATION: Duration = Duration::from_secs(15);

/// Which Lease, and for how long a holder holds it without renewing.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseOptions {
    /// None: the namespace of the kube client (the pod's own in a cluster, else the
    /// kubeconfig context's, else `default`).
    pub namespace: Option<String>,
    pub name: String,
    pub duration: Duration,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions {
            namespace: None,
            name: DEFAULT_NAME.into(),
            duration: DEFAULT_DURATION,
        }
    }
}

impl LeaseOptions {
    /// Parses `--lease NAME` or `--lease NAMESPACE/NAME`.
    pub fn parse_name(text: &str) -> Result<(Option<String>, String), String> {
        let (namespace, name) = match text.split_once('/') {
            Some((ns, name)) => (Some(ns.to_string()), name.to_string()),
            None => (None, text.to_string()),
        };
        // A DNS subdomain (Lease names) and a DNS label (namespaces), as Kubernetes checks.
        let valid = |s: &str, dots: bool| {
            !s.is_empty()
                && s.len() <= 253
                && s.chars().all(|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (dots && c == '.')
                })
                && !s.starts_with(['-', '.'])
                && !s.ends_with(['-', '.'])
        };
        if !valid(&name, true) || namespace.as_deref().is_some_and(|ns| !valid(ns, false)) {
            return Err(format!(
                "--lease {text:?}: NAME or NAMESPACE/NAME, lowercase letters, digits and '-' \
                 ('.' too in NAME)"
            ));
        }
        Ok((namespace, name))
    }
}

/// This replica's identity in the Lease: the pod's name (`POD_NAME`, else the host name,
/// which is the pod's name in a cluster) and the process id, so two processes on one host
/// differ.
pub fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(hostname)
        .unwrap_or_else(|| "meshflow".into());
    format!("{host}_{}", std::process::id())
}

fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it or
    // fails.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec())
        .ok()
        .filter(|h| !h.is_empty())
}

/// What the elector tells: whether this replica holds the Lease now, and why it cannot be
/// read or written, while that lasts (until a round succeeds).
pub struct Elected {
    pub holding: watch::Receiver<bool>,
    pub problem: watch::Receiver<Option<String>>,
}

/// Starts holding the Lease as `identity` on the current runtime.
pub fn spawn(client: Client, options: LeaseOptions, identity: String) -> Elected {
    let namespace = options
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let (tx, holding) = watch::channel(false);
    let (problem_tx, problem) = watch::channel(None);
    let elector = Elector {
        api: Api::namespaced(client, &namespace),
        lease: format!("{namespace}/{}", options.name),
        name: options.name,
        identity,
        duration: options.duration,
        observed: None,
    };
    tokio::spawn(elector.run(tx, problem_tx));
    Elected { holding, problem }
}

/// The holder's record as last read, and when this replica saw it change.
struct Observed {
    record: (Option<String>, Option<MicroTime>),
    since: Instant,
}

struct Elector {
    api: Api<Lease>,
    /// `namespace/name`, for logs.
    lease: String,
    name: String,
    identity: String,
    duration: Duration,
    observed: Option<Observed>,
}

impl Elector {
    async fn run(mut self, holding: watch::Sender<bool>, problem: watch::Sender<Option<String>>) {
        let round = (self.duration / 5).max(Duration::from_millis(100));
        let renew_deadline = self.duration * 2 / 3;
        let mut renewed: Option<Instant> = None;
        loop {
            let outcome = self.try_hold().await;
            let error = outcome.as_ref().err().map(|e| {
                format!(
                    "status Lease {}: {e}; status is not written while no replica can hold \
                     it (RBAC: get, create and update on leases.coordination.k8s.io)",
                    self.lease
                )
            });
            match outcome {
                Ok(true) => renewed = Some(Instant::now()),
                Ok(false) => renewed = None,
                Err(_) => {}
            }
            // Logged (and reported) when it first happens or changes, not every round.
            problem.send_if_modified(|p| {
                let changed = *p != error;
                if changed {
                    if let Some(e) = &error {
                        tracing::warn!(error = %e, "the status Lease could not be read or written");
                    }
                    *p = error;
                }
                changed
            });
            let now_holding = renewed.is_some_and(|t| t.elapsed() < renew_deadline);
            let was = *holding.borrow();
            if now_holding != was {
                if now_holding {
                    tracing::info!(lease = %self.lease, identity = %self.identity, "holding the status Lease: this replica writes status");
                } else {
                    tracing::info!(lease = %self.lease, identity = %self.identity, "not holding the status Lease: another replica writes status");
                }
                // Nobody listening (the writer gone) ends the elector.
                if holding.send(now_holding).is_err() {
                    return;
                }
            }
            if holding.is_closed() {
                return;
            }
            tokio::time::sleep(round).await;
        }
    }

    /// One round: `Ok(true)` when this replica holds the Lease afterwards.
    async fn try_hold(&mut self) -> Result<bool, String> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let seconds = i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let Some(mut lease) = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| e.to_string())?
        else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e.to_string()),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let record = (holder.clone(), spec.renew_time.clone());
        if self.observed.as_ref().is_none_or(|o| o.record != record) {
            self.observed = Some(Observed {
                record,
                since: Instant::now(),
            });
        }
        let mine = holder.as_deref() == Some(self.identity.as_str());
        if !mine && holder.is_some() {
            let their_duration =
                Duration::from_secs(spec.lease_duration_seconds.unwrap_or(seconds).max(1) as u64);
            let unchanged_for = self
                .observed
                .as_ref()
                .map_or(Duration::ZERO, |o| o.since.elapsed());
            if unchanged_for < their_duration {
                return Ok(false);
            }
            tracing::info!(lease = %self.lease, previous = ?holder, "the status Lease expired; taking it over");
        }
        if !mine {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
            spec.holder_identity = Some(self.identity.clone());
        }
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(seconds);
        // `lease` carries the resourceVersion read: a concurrent writer makes this a 409.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_are_checked() {
        assert_eq!(
            LeaseOptions::parse_name("istio-system/meshflow-status"),
            Ok((Some("istio-system".into()), "meshflow-status".into()))
        );
        assert_eq!(
            LeaseOptions::parse_name("meshflow.status"),
            Ok((None, "meshflow.status".into()))
        );
        for bad in ["", "a/", "/b", "Upper", "a/b/c", "ns.x/b", "-a"] {
            assert!(LeaseOptions::parse_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_identity_names_the_process() {
        assert!(identity().ends_with(&format!("_{}", std::process::id())));
    }
}
