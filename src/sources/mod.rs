//! Sources of input objects. Each turns what it reads into precise record changes
//! (inserts/retractions) for the runtime; an unchanged object produces no change.

pub mod files;

use dataflows::model::Record;

/// What sources send to the runtime.
#[derive(Debug)]
pub enum SourceEvent {
    /// Record changes from one read of a source, applied in the same epoch.
    Changes {
        source: &'static str,
        changes: Vec<(Record, isize)>,
    },
}
