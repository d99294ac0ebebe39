//! Whether this meshflow is alive and ready, as `/healthz` and `/readyz` report it.
//!
//! Live: the runtime and its dataflow are running (a dataflow that stopped is a failure the
//! process exits on, after saying why here and in the log). Ready: live, and every source
//! the server started has had its initial read applied by the dataflow, so a proxy that
//! connects now is served a config computed from the whole of it.

use crate::input::SourceName;
use std::collections::BTreeSet;
use std::sync::Mutex;

#[derive(Default)]
struct State {
    expected: BTreeSet<SourceName>,
    applied: BTreeSet<SourceName>,
    running: bool,
    failed: Option<String>,
}

/// The health of one server (see the module documentation).
#[derive(Default)]
pub struct Health(Mutex<State>);

impl Health {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Readiness waits for `source`'s initial read.
    pub fn expect_source(&self, source: SourceName) {
        self.state().expected.insert(source);
    }

    /// An epoch with `source`'s report was applied.
    pub(super) fn source_applied(&self, source: SourceName) {
        self.state().applied.insert(source);
    }

    /// The dataflow is running.
    pub fn running(&self) {
        self.state().running = true;
    }

    /// The runtime or the dataflow stopped for good: the server is not live any more.
    pub fn fail(&self, why: impl Into<String>) {
        let mut st = self.state();
        if st.failed.is_none() {
            st.failed = Some(why.into());
        }
    }

    /// `Err` with the reason once something failed.
    pub fn live(&self) -> Result<(), String> {
        match &self.state().failed {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    /// `Err` with what it waits for, or why it failed.
    pub fn ready(&self) -> Result<(), String> {
        self.live()?;
        let st = self.state();
        if !st.running {
            return Err("the dataflow has not started".into());
        }
        let waiting: Vec<&str> = st.expected.difference(&st.applied).copied().collect();
        if !waiting.is_empty() {
            return Err(format!(
                "waiting for the initial read of: {}",
                waiting.join(", ")
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Health;

    #[test]
    fn ready_after_every_source_is_applied_and_never_after_a_failure() {
        let h = Health::default();
        h.expect_source("files");
        h.expect_source("kubernetes");
        assert!(h.live().is_ok());
        assert_eq!(h.ready().unwrap_err(), "the dataflow has not started");
        h.running();
        h.source_applied("files");
        assert!(h.ready().unwrap_err().contains("kubernetes"));
        h.source_applied("kubernetes");
        assert_eq!(h.ready(), Ok(()));
        h.fail("the dataflow stopped");
        assert_eq!(h.live().unwrap_err(), "the dataflow stopped");
        assert_eq!(h.ready().unwrap_err(), "the dataflow stopped");
    }
}
