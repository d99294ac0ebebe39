//! The walk through one edit: traffic as configured (reviews split over v1, v2 and v3), the
//! edit that shifts reviews to v3 (its VirtualService rewritten in the scratch copy), the push
//! that carries it to the sidecar as `meshflow watch` shows it, the traffic after, and what
//! `meshflow diff` and `meshflow explain` say of it. Every step checks what it shows: a walk
//! whose traffic did not move ends in an error, so `demo --once` fails instead of printing a
//! wrong picture.

use super::config::{self, REVIEWS_FILE, REVIEWS_V3};
use super::display::{Screen, Tally};
use super::proxies::{Proxies, Via, SIDECAR_NAME};
use crate::debug::client::{self, render, Output, Watch};
use crate::debug::model::Happened;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// One kind of request the demo keeps sending.
pub struct Target {
    pub service: &'static str,
    pub via: Via,
    pub path: &'static str,
    /// What the bar says of it.
    pub note: &'static str,
}

/// productpage through the ingress gateway (as a browser reaches bookinfo), the other
/// services through the sleep pod's sidecar (as one workload calls another).
pub const TARGETS: [Target; 4] = [
    Target {
        service: "productpage",
        via: Via::Gateway,
        path: "/productpage",
        note: "through the gateway",
    },
    Target {
        service: "reviews",
        via: Via::Sidecar,
        path: "/reviews/0",
        note: "through the sidecar",
    },
    Target {
        service: "ratings",
        via: Via::Sidecar,
        path: "/ratings/0",
        note: "through the sidecar",
    },
    Target {
        service: "details",
        via: Via::Sidecar,
        path: "/details/0",
        note: "through the sidecar",
    },
];

/// How long each phase of traffic lasts.
const PHASE: Duration = Duration::from_secs(3);
/// How many of each service's last requests a bar shows; a phase lasts until it is full.
const WINDOW: usize = 100;
/// How long a phase may last at most while its window fills (a loaded machine).
const PHASE_MAX: Duration = Duration::from_secs(20);
/// How long the push of the edit may take to reach the sidecar and be acknowledged.
const PUSH_TIMEOUT: Duration = Duration::from_secs(15);
/// The resource the edit changes on the sidecar: its route configuration for port 9080.
const SIDECAR_ROUTE: &str = "route/9080";

/// What the walk needs of the running demo.
pub struct Walk<'a> {
    pub proxies: &'a mut Proxies,
    pub screen: &'a mut Screen,
    pub debug: SocketAddr,
    pub config_dir: &'a Path,
}

impl Walk<'_> {
    pub fn tally() -> Tally {
        let services: Vec<(&str, &str)> = TARGETS.iter().map(|t| (t.service, t.note)).collect();
        Tally::new(&services, WINDOW)
    }

    /// The four steps.
    pub async fn run(&mut self) -> Result<(), String> {
        let mut tally = Self::tally();
        self.screen.say(&format!(
            "\n1/4  traffic as configured: reviews split v1 50% / v2 25% / v3 25% \
             (VirtualService reviews, {REVIEWS_FILE})"
        ))?;
        self.traffic(&mut tally, PHASE, true).await?;
        expect(&tally, "productpage", &["v1"], true)?;
        expect(&tally, "ratings", &["v1"], true)?;
        expect(&tally, "details", &["v1"], true)?;
        expect(&tally, "reviews", &["v1", "v2", "v3"], true)?;

        self.screen.say(&format!(
            "\n2/4  the edit: {REVIEWS_FILE} now sends every reviews request to v3; the push, \
             as `meshflow watch {SIDECAR_NAME}` shows it:"
        ))?;
        let mut watch = Watch::open(self.debug, SIDECAR_NAME).await?;
        let written = Instant::now();
        config::replace_file(&self.config_dir.join(REVIEWS_FILE), REVIEWS_V3)?;
        self.follow_push(&mut watch).await?;
        self.screen.say(&format!(
            "     pushed and acknowledged {} ms after the file was written",
            written.elapsed().as_millis()
        ))?;

        self.screen.say(&format!(
            "\n3/4  traffic after the edit, until each bar's last {WINDOW} requests were all \
             sent after the push"
        ))?;
        tally.mark();
        self.traffic(&mut tally, PHASE, true).await?;
        expect(&tally, "reviews", &["v3"], false)?;
        expect(&tally, "productpage", &["v1"], true)?;

        self.screen.say(&format!(
            "\n4/4  what changed for {SIDECAR_NAME}, and why\n\n$ meshflow diff {SIDECAR_NAME} \
             --debug-addr {}",
            self.debug
        ))?;
        let diff = client::diff(self.debug, SIDECAR_NAME, None, None, None, Output::Table).await?;
        self.screen.say(&diff)?;
        self.screen.say(&format!(
            "\n$ meshflow explain {SIDECAR_NAME} {SIDECAR_ROUTE} --debug-addr {}",
            self.debug
        ))?;
        let explained =
            client::explain(self.debug, SIDECAR_NAME, SIDECAR_ROUTE, Output::Table).await?;
        self.screen.say(&explained)
    }

    /// Traffic with live bars until Ctrl-C (after the walk, without `--once`).
    pub async fn keep_running(&mut self) -> Result<(), String> {
        let mut tally = Self::tally();
        loop {
            // On a terminal one block, redrawn for ever; elsewhere a block per phase.
            let settle = !self.screen.is_live();
            self.traffic(&mut tally, PHASE, settle).await?;
        }
    }

    /// Sends every target's request over and over for `phase` and until the bars' window is
    /// full (at most `PHASE_MAX`), drawing the bars as it goes; `settle` keeps the last
    /// drawing (prints it, when not on a terminal).
    async fn traffic(
        &mut self,
        tally: &mut Tally,
        phase: Duration,
        settle: bool,
    ) -> Result<(), String> {
        let started = Instant::now();
        let mut drawn = Instant::now();
        while started.elapsed() < phase || (!tally.full() && started.elapsed() < PHASE_MAX) {
            self.proxies.check()?;
            let p = &*self.proxies;
            let send = |t: &'static Target| async move {
                let authority = t.service;
                (t.service, p.send(t.via, authority, t.path).await)
            };
            let landed = tokio::join!(
                send(&TARGETS[0]),
                send(&TARGETS[1]),
                send(&TARGETS[2]),
                send(&TARGETS[3])
            );
            for (service, l) in [landed.0, landed.1, landed.2, landed.3] {
                tally.record(service, l);
            }
            if drawn.elapsed() >= Duration::from_millis(100) {
                drawn = Instant::now();
                self.screen.live(&tally.lines(self.screen.color))?;
            }
            // Leave the two cores to Envoy and meshflow between rounds.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if settle {
            self.screen.settle(&tally.lines(self.screen.color))?;
        }
        Ok(())
    }

    /// Prints the sidecar's watch events until every push seen is acknowledged.
    async fn follow_push(&mut self, watch: &mut Watch) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + PUSH_TIMEOUT;
        let mut pending: BTreeSet<(u64, String, String)> = BTreeSet::new();
        let mut pushed = false;
        loop {
            let event = tokio::time::timeout_at(deadline, watch.next())
                .await
                .map_err(|_| {
                    format!(
                        "the edit did not reach {SIDECAR_NAME} (pushed and acknowledged) within \
                         {PUSH_TIMEOUT:?}"
                    )
                })??;
            self.screen
                .say(&render::watch_event(&event, self.screen.color))?;
            match event.what {
                Happened::Push {
                    epoch,
                    rtype,
                    nonce,
                    ..
                } => {
                    pushed = true;
                    pending.insert((epoch, rtype, nonce));
                }
                Happened::Ack {
                    epoch,
                    rtype,
                    nonce,
                } => {
                    pending.remove(&(epoch, rtype, nonce));
                }
                Happened::Nack { rtype, message, .. } => {
                    return Err(format!(
                        "{SIDECAR_NAME} rejected the {rtype} push: {message}"
                    ))
                }
                Happened::Lagged { .. } => {}
            }
            if pushed && pending.is_empty() {
                return Ok(());
            }
        }
    }
}

/// An error unless every request of `service` landed on one of `versions` (and, with
/// `each`, on each of them).
fn expect(tally: &Tally, service: &str, versions: &[&str], each: bool) -> Result<(), String> {
    let split = tally.split(service);
    let stray: Vec<&String> = split
        .keys()
        .filter(|l| !versions.contains(&l.as_str()))
        .collect();
    let missing: Vec<&&str> = versions
        .iter()
        .filter(|v| each && !split.contains_key(**v))
        .collect();
    if split.is_empty() || !stray.is_empty() || !missing.is_empty() {
        let why = tally
            .first_failure()
            .map(|f| format!("; a failed request: {f}"))
            .unwrap_or_default();
        return Err(format!(
            "{service}: expected requests on {versions:?}, got {split:?}{why}"
        ));
    }
    Ok(())
}
