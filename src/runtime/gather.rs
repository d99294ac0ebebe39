//! What one epoch's inputs amount to, taken in as they arrive: the record changes for the
//! engine (split into those already stepped and those not), the proxies that came and
//! went, each source's problems, and the rejections to weigh once the epoch's own changes
//! are in.

use super::{jwks, rejections};
use crate::input::{Input, InputChange, Rejection};
use dataflows::driver::EpochOutput;
use dataflows::model::{ProxyId, Record};

/// One epoch's inputs so far.
#[derive(Default)]
pub(super) struct Gathered {
    /// Record changes already handed to the engine ahead of the epoch's close.
    pub stepped: Vec<(Record, isize)>,
    /// Record changes not handed to the engine yet.
    pub changes: Vec<(Record, isize)>,
    pub described: Vec<InputChange>,
    pub up: Vec<ProxyId>,
    pub down: Vec<ProxyId>,
    pub source_errors: Vec<(crate::input::SourceName, Vec<String>)>,
    pub source_analysis: Vec<(crate::input::SourceName, Vec<String>)>,
    pub n_config: usize,
    /// Weighed after the epoch's own changes: an object that changed again in this epoch is
    /// not blamed for a push made before.
    pub rejections: Vec<Rejection>,
    /// Whether anything arrived (a held mTLS step alone makes an epoch without input).
    pub any: bool,
}

impl Gathered {
    /// Takes in one input of epoch `epoch`, in arrival order.
    pub fn take(
        &mut self,
        input: Input,
        epoch: u64,
        rejected: &mut rejections::Rejections,
        keys: &mut jwks::Resolver,
    ) {
        self.any = true;
        match input {
            Input::Changes {
                source,
                changes: c,
                described: d,
                errors,
                analysis,
                ..
            } => {
                self.n_config += c.len();
                if rejected.admit(epoch, &c) {
                    self.report(rejections::SOURCE, rejected.errors());
                }
                self.changes.extend(keys.rewrite(c));
                self.described.extend(d);
                self.report(source, errors);
                // A later report of the same source in this epoch replaces its earlier one.
                self.source_analysis.retain(|(s, _)| *s != source);
                self.source_analysis.push((source, analysis));
            }
            Input::ProxyUp(p) => {
                self.up.push(p.id.clone());
                self.described.push(InputChange::proxy(&p, true));
                self.changes.push((Record::Proxy(p), 1));
            }
            Input::ProxyDown(p) => {
                self.down.push(p.id.clone());
                self.described.push(InputChange::proxy(&p, false));
                self.changes.push((Record::Proxy(p), -1));
            }
            Input::Rejected(r) => self.rejections.push(r),
            Input::Jwks { uri, outcome } => {
                let (c, objects) = keys.fetched(&uri, outcome);
                self.n_config += c.len();
                self.changes.extend(c);
                self.described.extend(objects.iter().map(|k| {
                    InputChange::object(k, crate::input::ChangeOp::Update, format!("jwks {uri}"))
                }));
            }
        }
    }

    /// `source`'s complete list of problems, replacing what it said earlier in the epoch.
    pub fn report(&mut self, source: crate::input::SourceName, errors: Vec<String>) {
        self.source_errors.retain(|(s, _)| *s != source);
        self.source_errors.push((source, errors));
    }
}

/// `first` followed by `later`, as the output of one epoch: what one step of both batches
/// together would have produced (a change `later` undoes is gone).
pub(super) fn joined(first: EpochOutput, later: EpochOutput) -> EpochOutput {
    EpochOutput {
        epoch: later.epoch,
        proxy_resources: netted(first.proxy_resources, later.proxy_resources),
        scope_resources: netted(first.scope_resources, later.scope_resources),
        bodies: netted(first.bodies, later.bodies),
        errors: netted(first.errors, later.errors),
        proxy_scopes: netted(first.proxy_scopes, later.proxy_scopes),
        provenance: netted(first.provenance, later.provenance),
    }
}

/// Two lists of changes as one, each record once with its net count, zeros dropped,
/// sorted as the engine's own output is.
fn netted<D: Ord>(mut a: Vec<(D, isize)>, b: Vec<(D, isize)>) -> Vec<(D, isize)> {
    a.extend(b);
    a.sort_by(|x, y| x.0.cmp(&y.0));
    let mut out: Vec<(D, isize)> = Vec::with_capacity(a.len());
    for (d, n) in a {
        match out.last_mut() {
            Some((last, m)) if *last == d => *m += n,
            _ => out.push((d, n)),
        }
    }
    out.retain(|(_, n)| *n != 0);
    out
}

#[cfg(test)]
mod tests {
    use super::netted;

    /// A change undone later is gone; one made twice counts twice; the rest keep their
    /// counts, in order.
    #[test]
    fn outputs_net_out_across_steps() {
        let first = vec![("b", 1), ("a", -1), ("c", 1)];
        let later = vec![("b", -1), ("a", 1), ("c", 1), ("d", -1)];
        assert_eq!(netted(first, later), vec![("c", 2), ("d", -1)]);
        assert_eq!(netted(vec![("x", 1)], vec![]), vec![("x", 1)]);
    }
}
