//! `--write-status`: each object's status says whether it is in effect, what is not
//! translated and what the analysis finds, without a write per edit, from one replica at a
//! time (the holder of a Lease, taken over when it stops).

use crate::support::fake_kube::FakeKube;
use crate::support::{free_port, wait_until, Meshflow, TestDir, CONVERGE_TIMEOUT};
use crate::{service, start, virtual_service, with_untranslated, Cluster};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Polls until the status of `kind default/name` satisfies `accept`; returns it.
pub(crate) fn await_status(
    fake: &FakeKube,
    kind: &str,
    name: &str,
    what: &str,
    accept: impl Fn(&Value) -> bool,
) -> Value {
    await_status_in(fake, kind, "default", name, what, accept)
}

/// [`await_status`] of an object of namespace `ns`.
pub(crate) fn await_status_in(
    fake: &FakeKube,
    kind: &str,
    ns: &str,
    name: &str,
    what: &str,
    accept: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    let ok = wait_until(CONVERGE_TIMEOUT, || {
        last = fake.status_of(kind, ns, name);
        accept(&last)
    });
    assert!(ok, "{what}: the status of {kind} {ns}/{name} is {last:#}");
    last
}

pub(crate) fn reconciled(status: &Value) -> &str {
    status["conditions"][0]["status"].as_str().unwrap_or("")
}

pub(crate) fn descriptions(status: &Value) -> Vec<String> {
    status["validationMessages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| m["description"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn destination_rule(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"host": "reviews", "subsets": [{"name": "v1", "labels": labels}]},
    })
}

/// `--write-status`: an accepted object is Reconciled, with a WARNING validationMessage
/// naming a field meshflow does not translate, cleared when the field goes; an invalid one
/// is Reconciled False with the error naming its field, True again once fixed.
#[test]
fn status_says_what_is_in_effect_and_what_is_not_translated() {
    let cluster = start(
        "kube-status",
        |fake| {
            fake.apply(service("reviews", "default", 9080));
            fake.apply(service("cors", "default", 80));
            fake.apply(with_untranslated("cors"));
            fake.apply(destination_rule("bad-dr", json!(["not", "a", "map"])));
            // WorkloadEntry has no status of Istio's: none is written.
            fake.apply(json!({
                "apiVersion": "networking.istio.io/v1", "kind": "WorkloadEntry",
                "metadata": {"name": "vm", "namespace": "default"},
                "spec": {"address": "10.0.0.9", "labels": {"app": "reviews"}},
            }));
        },
        &["--write-status"],
    );
    let fake = &cluster.fake;
    let status = await_status(
        fake,
        "VirtualService",
        "cors",
        "cors is reconciled with a warning",
        |s| reconciled(s) == "True" && !descriptions(s).is_empty(),
    );
    let message = &status["validationMessages"][0];
    assert_eq!(message["level"], "WARNING", "{status:#}");
    assert!(message["type"]["code"].is_string(), "{status:#}");
    assert!(message["type"]["name"].is_string(), "{status:#}");
    assert_eq!(descriptions(&status).len(), 1, "{status:#}");
    assert!(
        descriptions(&status)[0].starts_with("spec.http[1].fault.abort.http2Error: "),
        "{status:#}"
    );
    assert_eq!(status["conditions"][0]["type"], "Reconciled", "{status:#}");
    assert!(
        status["conditions"][0]["lastTransitionTime"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{status:#}"
    );

    let status = await_status(
        fake,
        "DestinationRule",
        "bad-dr",
        "the invalid rule is not reconciled",
        |s| reconciled(s) == "False",
    );
    let why = status["conditions"][0]["message"].as_str().unwrap_or("");
    assert!(
        why.contains("DestinationRule default/bad-dr: spec.subsets[0].labels"),
        "{status:#}"
    );

    // Fixed: the warning goes, the rule is reconciled.
    fake.apply(virtual_service("cors", "cors", "1s"));
    await_status(
        fake,
        "VirtualService",
        "cors",
        "the fix clears the message",
        |s| reconciled(s) == "True" && s.get("validationMessages").is_none(),
    );
    fake.apply(destination_rule("bad-dr", json!({"version": "v1"})));
    await_status(
        fake,
        "DestinationRule",
        "bad-dr",
        "the fixed rule is reconciled",
        |s| reconciled(s) == "True",
    );
    assert_eq!(fake.status_patches("WorkloadEntry", "default", "vm"), 0);
    assert_eq!(fake.status_of("Service", "default", "reviews"), Value::Null);

    // Across objects (the dataflow's analysis): a route to a subset no DestinationRule of
    // its host defines is an ERROR on the VirtualService, which is itself in effect.
    let mut to_v2 = virtual_service("to-v2", "reviews", "1s");
    to_v2["spec"]["http"][0]["route"][0]["destination"]["subset"] = json!("v2");
    fake.apply(to_v2);
    let status = await_status(
        fake,
        "VirtualService",
        "to-v2",
        "the missing subset is named",
        |s| !descriptions(s).is_empty(),
    );
    assert_eq!(reconciled(&status), "True", "{status:#}");
    let message = &status["validationMessages"][0];
    assert_eq!(message["type"]["code"], "MF0004", "{status:#}");
    assert_eq!(
        message["type"]["name"], "ReferencedResourceNotFound",
        "{status:#}"
    );
    assert_eq!(message["level"], "ERROR", "{status:#}");
    assert!(
        descriptions(&status)[0]
            .starts_with("spec.http[0].route[0].destination.subset: subset \"v2\" of host reviews.default.svc.cluster.local is defined by no DestinationRule"),
        "{status:#}"
    );
    // Once the rule defines it, the message goes.
    let mut both = destination_rule("bad-dr", json!({"version": "v1"}));
    both["spec"]["subsets"] = json!([
        {"name": "v1", "labels": {"version": "v1"}},
        {"name": "v2", "labels": {"version": "v2"}},
    ]);
    fake.apply(both);
    await_status(
        fake,
        "VirtualService",
        "to-v2",
        "the subset defined clears the message",
        |s| reconciled(s) == "True" && s.get("validationMessages").is_none(),
    );
}

/// The holder of the status Lease `default/meshflow-status` (empty when none).
pub(crate) fn lease_holder(fake: &FakeKube) -> String {
    fake.object("Lease", "default", "meshflow-status")["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Two replicas with `--write-status`: one holds the status Lease (coordination.k8s.io,
/// created through the API) and writes; the other writes nothing, not even on a change.
/// When the holder stops, the other takes the Lease over within its duration, leaves alone
/// what the first wrote, and writes what changes.
#[test]
fn one_replica_at_a_time_writes_status_holding_a_lease() {
    let args = ["--write-status", "--lease-duration-s", "2"];
    let cluster = start(
        "kube-lease",
        |fake| {
            fake.apply(service("reviews", "default", 9080));
            fake.apply(virtual_service("reviews", "reviews", "1s"));
        },
        &args,
    );
    let Cluster {
        meshflow: first,
        fake,
        debug: _,
        dir,
    } = cluster;
    await_status(&fake, "VirtualService", "reviews", "written", |s| {
        reconciled(s) == "True"
    });
    let holder = || {
        let lease = fake.object("Lease", "default", "meshflow-status");
        (
            lease_holder(&fake),
            lease["spec"]["leaseTransitions"].clone(),
        )
    };
    let by = |m: &Meshflow| format!("_{}", m.pid());
    assert!(holder().0.ends_with(&by(&first)), "{:?}", holder());

    let debug_b = SocketAddr::from(([127, 0, 0, 1], free_port())).to_string();
    let mut second_args = vec!["--debug-addr", debug_b.as_str()];
    second_args.extend_from_slice(&args);
    let second = Meshflow::start_kube(
        &dir.path().join("kubeconfig"),
        &dir.subdir("replica-b"),
        &second_args,
    );
    // The second replica has listed (its xDS port is open) and tried the Lease meanwhile.
    let before = fake.status_patches("VirtualService", "default", "reviews");
    fake.apply(with_untranslated("reviews"));
    await_status(
        &fake,
        "VirtualService",
        "reviews",
        "the change's status",
        |s| descriptions(s).len() == 1,
    );
    // Both replicas have seen the change; longer than the writer's interval and a lease round.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        fake.status_patches("VirtualService", "default", "reviews") - before,
        1,
        "one status patch for one change: only the holder writes"
    );
    assert!(holder().0.ends_with(&by(&first)), "{:?}", holder());

    // The holder stops: the other takes over, leaves the status the first wrote alone (it
    // says what the second would write), and writes what changes.
    drop(first);
    let stopped = Instant::now();
    let took_over = wait_until(CONVERGE_TIMEOUT, || holder().0.ends_with(&by(&second)));
    let took = stopped.elapsed();
    assert!(took_over, "{:?}", holder());
    // The lease duration (2 s) and a round (0.4 s), with room for a slow machine.
    assert!(took < Duration::from_secs(5), "taken over after {took:?}");
    assert_eq!(holder().1, 1, "one transition");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        fake.status_patches("VirtualService", "default", "reviews") - before,
        1,
        "the new holder rewrites nothing that says the same"
    );
    fake.apply(virtual_service("reviews", "reviews", "not-a-duration"));
    await_status(
        &fake,
        "VirtualService",
        "reviews",
        "the new holder writes",
        |s| reconciled(s) == "False",
    );
    drop(second);
    drop(fake);
    drop(dir);
}

/// Status writes are coalesced: 20 quick edits, each changing the status and each seen by
/// meshflow before the next (so each is a report of its own), are a handful of patches
/// (one per object per second at most; without coalescing there would be 20), and the last
/// one says what the last edit is.
#[test]
fn quick_edits_do_not_storm_the_api_server_with_status_writes() {
    let cluster = start(
        "kube-status-storm",
        |fake| {
            fake.apply(service("cors", "default", 9080));
            fake.apply(virtual_service("cors", "cors", "1s"));
        },
        &["--write-status"],
    );
    let fake = &cluster.fake;
    await_status(fake, "VirtualService", "cors", "the first status", |s| {
        reconciled(s) == "True"
    });
    let before = fake.status_patches("VirtualService", "default", "cors");
    assert_eq!(before, 1);
    for i in 0..20 {
        // Alternately with and without an untranslated field: every edit changes the status.
        let cors = i % 2 == 1;
        if cors {
            fake.apply(with_untranslated("cors"));
        } else {
            fake.apply(virtual_service("cors", "cors", "1s"));
        }
        cluster.await_analysis("the edit is seen", |a| a.is_empty() != cors);
    }
    // The last edit has the field: its warning is written in the end.
    await_status(
        fake,
        "VirtualService",
        "cors",
        "the last edit's status",
        |s| descriptions(s).len() == 1,
    );
    // Let a pending write, if any, happen (one more interval at most), then count.
    std::thread::sleep(Duration::from_millis(1500));
    let patches = fake.status_patches("VirtualService", "default", "cors") - before;
    assert!(
        (1..=8).contains(&patches),
        "20 edits in a burst made {patches} status patches"
    );
    assert_eq!(
        descriptions(&fake.status_of("VirtualService", "default", "cors")).len(),
        1
    );
}

/// A writer that starts over (a restart, as after every rollout) starts from the statuses
/// the API server holds: those that already say what it would write are not written again,
/// and a Reconciled condition that keeps its state keeps its transition time.
#[test]
fn a_restarted_writer_leaves_statuses_that_say_the_same_alone() {
    let args = ["--write-status", "--lease-duration-s", "1"];
    let cluster = start(
        "kube-status-restart",
        |fake| {
            fake.apply(service("reviews", "default", 9080));
            fake.apply(with_untranslated("reviews"));
            fake.apply(destination_rule("bad-dr", json!(["not", "a", "map"])));
        },
        &args,
    );
    let Cluster {
        meshflow,
        fake,
        debug: _,
        dir,
    } = cluster;
    let vs = await_status(&fake, "VirtualService", "reviews", "written", |s| {
        descriptions(s).len() == 1
    });
    let dr = await_status(&fake, "DestinationRule", "bad-dr", "written", |s| {
        reconciled(s) == "False"
    });
    let patches = |kind, name| fake.status_patches(kind, "default", name);
    assert_eq!(
        (
            patches("VirtualService", "reviews"),
            patches("DestinationRule", "bad-dr")
        ),
        (1, 1)
    );
    drop(meshflow);

    let restarted = Meshflow::start_kube(
        &dir.path().join("kubeconfig"),
        &dir.subdir("restarted"),
        &args,
    );
    // It holds the Lease once the old holder's has run out.
    let by = format!("_{}", restarted.pid());
    let holds = wait_until(CONVERGE_TIMEOUT, || lease_holder(&fake).ends_with(&by));
    assert!(holds, "the restarted replica holds the Lease");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        (
            patches("VirtualService", "reviews"),
            patches("DestinationRule", "bad-dr")
        ),
        (1, 1),
        "statuses that say the same are not written again"
    );
    assert_eq!(fake.status_of("VirtualService", "default", "reviews"), vs);
    assert_eq!(fake.status_of("DestinationRule", "default", "bad-dr"), dr);

    // A change: written, and still Reconciled, so since the same time.
    fake.apply(virtual_service("reviews", "reviews", "1s"));
    let changed = await_status(&fake, "VirtualService", "reviews", "the change", |s| {
        descriptions(s).is_empty()
    });
    assert_eq!(patches("VirtualService", "reviews"), 2);
    assert_eq!(
        changed["conditions"][0]["lastTransitionTime"],
        vs["conditions"][0]["lastTransitionTime"]
    );
    drop(restarted);
    drop(fake);
    drop(dir);
}

/// A status Lease meshflow may not hold (RBAC) is a config error naming the Lease and the
/// grant it needs, and no status is written meanwhile; once allowed, the Lease is taken, the
/// error goes and status is written.
#[test]
fn a_lease_it_may_not_hold_is_reported_and_nothing_is_written() {
    let cluster = start(
        "kube-lease-forbidden",
        |fake| {
            fake.forbid("leases");
            fake.apply(service("reviews", "default", 9080));
            fake.apply(virtual_service("reviews", "reviews", "1s"));
        },
        &["--write-status", "--lease-duration-s", "1"],
    );
    let errors = cluster.await_errors("the Lease is reported", |e| !e.is_empty());
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0].starts_with("status Lease default/meshflow-status: ")
            && errors[0].contains("forbidden")
            && errors[0].contains("get, create and update on leases.coordination.k8s.io"),
        "{errors:#?}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        cluster
            .fake
            .status_patches("VirtualService", "default", "reviews"),
        0
    );
    cluster.fake.permit_all();
    await_status(
        &cluster.fake,
        "VirtualService",
        "reviews",
        "written once allowed",
        |s| reconciled(s) == "True",
    );
    cluster.await_errors("the error goes", |e| e.is_empty());
}

/// The status Lease among electors racing for it, in process through the real `kube`
/// client: the fake answers the API server's way (a second create is 409 AlreadyExists, an
/// update from a stale resourceVersion 409 Conflict), so of three electors starting at once
/// exactly one holds the Lease, the others stand by; when the holder goes, exactly one of
/// the others takes over within the lease duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_electors_race_and_exactly_one_holds() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Api, PostParams};
    use meshflow::sources::kube::lease::{self, LeaseOptions};

    let dir = TestDir::new("kube-lease-race");
    let fake = FakeKube::start();
    let kubeconfig = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig);
    let config = kube::config::Kubeconfig::read_from(&kubeconfig).expect("the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .expect("a client config");
    let client = kube::Client::try_from(config).expect("a client");

    // The wire semantics the electors rely on, as the kube client sees them.
    let api: Api<Lease> = Api::namespaced(client.clone(), "default");
    let mut probe = Lease::default();
    probe.metadata.name = Some("probe".into());
    let created = api
        .create(&PostParams::default(), &probe)
        .await
        .expect("created");
    let again = api.create(&PostParams::default(), &probe).await;
    assert!(
        matches!(&again, Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists"),
        "{again:?}"
    );
    let updated = api
        .replace("probe", &PostParams::default(), &created)
        .await
        .expect("an update from the current resourceVersion");
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );
    let stale = api.replace("probe", &PostParams::default(), &created).await;
    assert!(
        matches!(&stale, Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "Conflict"),
        "{stale:?}"
    );

    let options = LeaseOptions {
        namespace: Some("default".into()),
        name: "race".into(),
        duration: Duration::from_secs(2),
    };
    let mut electors: Vec<(String, tokio::sync::watch::Receiver<bool>)> = (0..3)
        .map(|i| {
            let identity = format!("elector-{i}");
            let elected = lease::spawn(client.clone(), options.clone(), identity.clone());
            (identity, elected.holding)
        })
        .collect();
    let holders = |electors: &[(String, tokio::sync::watch::Receiver<bool>)]| -> Vec<String> {
        electors
            .iter()
            .filter(|(_, h)| *h.borrow())
            .map(|(i, _)| i.clone())
            .collect()
    };
    let holder_in_lease = || {
        fake.object("Lease", "default", "race")["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while holders(&electors).len() != 1 {
        assert!(Instant::now() < deadline, "no single holder");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Several rounds later, still one holder, the one the Lease names.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let first = holders(&electors);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0], holder_in_lease());

    // The holder goes (its elector ends with its last listener): one other takes over.
    electors.retain(|(i, _)| *i != first[0]);
    let gone = Instant::now();
    let deadline = gone + CONVERGE_TIMEOUT;
    while holders(&electors).len() != 1 {
        assert!(Instant::now() < deadline, "nobody took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = gone.elapsed();
    // The lease duration (2 s) and a round (0.4 s), with room for a slow machine.
    assert!(took < Duration::from_secs(5), "taken over after {took:?}");
    let second = holders(&electors);
    assert_ne!(second, first);
    assert_eq!(second[0], holder_in_lease());
    let lease = fake.object("Lease", "default", "race");
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease:#}");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 2, "{lease:#}");
}
