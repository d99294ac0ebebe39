//! Counting who answered: many requests reduced to a map of outcomes (`tally`), and the
//! predicates tests converge on (`only`, `exactly`).

use std::collections::HashMap;

/// A map key for one request's outcome: the body for a 200, `status <code>` otherwise, and
/// `error: <message>` for a transport failure.
pub fn outcome_key(result: &Result<(u16, String), String>) -> String {
    match result {
        Ok((200, body)) => body.clone(),
        Ok((status, _)) => format!("status {status}"),
        Err(e) => format!("error: {e}"),
    }
}

/// Runs `request` `n` times and counts the outcomes by `outcome_key`.
pub fn tally(
    n: usize,
    mut request: impl FnMut() -> Result<(u16, String), String>,
) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for _ in 0..n {
        *counts.entry(outcome_key(&request())).or_default() += 1;
    }
    counts
}

/// Whether `n` draws of `total` are within 12 percentage points of `percent` (the share in
/// whole percent, rounded down): the proportion tests' tolerance, 3.4 to 3.9 standard
/// deviations of a fair draw over 200 to 300 draws.
pub fn share_near(n: usize, total: usize, percent: usize) -> bool {
    (n * 100 / total).abs_diff(percent) <= 12
}

/// True if every outcome in `counts` is `key`.
pub fn only(counts: &HashMap<String, usize>, key: &str) -> bool {
    counts.len() == 1 && counts.contains_key(key)
}

/// True if the outcomes are exactly `keys`, each seen at least once.
pub fn exactly(counts: &HashMap<String, usize>, keys: &[&str]) -> bool {
    counts.len() == keys.len()
        && keys
            .iter()
            .all(|key| counts.get(*key).is_some_and(|&n| n > 0))
}
