//! An estimate of the size of the program RE2 compiles a regular expression to, for Envoy's
//! program-size limit: Envoy refuses a route configuration holding a regex whose RE2 program
//! is larger than the runtime value `re2.max_program_size.error_level` (100 unless the
//! proxy's bootstrap raises it), and every route of that configuration with it.
//!
//! RE2 counts instructions: one per literal byte, one per byte range of a character class,
//! one `Alt` per alternative and per repetition loop, two per capture group, one per
//! assertion, plus its fixed `Fail` and `Match`. A bounded repetition is expanded first
//! (`a{3,5}` is `aaa(a(a)?)?`), which is why `/a{150}` is a 150-odd instruction program. The
//! estimate follows that from `regex-syntax`'s parse; where it cannot be exact (RE2 shares
//! the suffixes of UTF-8 sequences in a class) it counts low, so a regex refused here is one
//! Envoy refuses too.

use regex_syntax::hir::{Class, Hir, HirKind};
use regex_syntax::utf8::Utf8Sequences;

/// The estimated RE2 program size of `pattern`, or `None` if it does not parse.
pub fn program_size(pattern: &str) -> Option<u64> {
    // RE2's `\d`, `\w`, `\s` and `\b` are ASCII: parse without Unicode first, so they count
    // as RE2 compiles them; only what needs Unicode (`\pL`) is parsed with it.
    let parse = |unicode: bool| {
        regex_syntax::ParserBuilder::new()
            .nest_limit(250)
            .unicode(unicode)
            .utf8(unicode)
            .build()
            .parse(pattern)
            .ok()
    };
    let hir = parse(false).or_else(|| parse(true))?;
    // RE2's `Fail` at instruction 0 and the final `Match`.
    Some(2 + size(&hir))
}

fn size(hir: &Hir) -> u64 {
    match hir.kind() {
        HirKind::Empty => 0,
        HirKind::Literal(lit) => lit.0.len() as u64,
        HirKind::Class(Class::Bytes(c)) => alternatives(c.ranges().len() as u64),
        HirKind::Class(Class::Unicode(c)) => {
            // One instruction per UTF-8 sequence's leading byte range, at least; the
            // continuation bytes are shared between sequences by RE2, so not counted.
            let seqs: u64 = c
                .ranges()
                .iter()
                .map(|r| Utf8Sequences::new(r.start(), r.end()).count() as u64)
                .sum();
            alternatives(seqs)
        }
        HirKind::Look(_) => 1,
        HirKind::Repetition(rep) => {
            let one = size(&rep.sub);
            let min = u64::from(rep.min);
            match rep.max {
                // x{min,max}: min copies, then max-min optional ones, each behind an `Alt`.
                Some(max) => {
                    let max = u64::from(max);
                    max.saturating_mul(one)
                        .saturating_add(max.saturating_sub(min))
                }
                // x* and x+ loop through one `Alt`; x{n,} is n-1 copies and x+.
                None => min.max(1).saturating_mul(one).saturating_add(1),
            }
        }
        HirKind::Capture(cap) => size(&cap.sub).saturating_add(2),
        HirKind::Concat(parts) => parts.iter().fold(0u64, |n, h| n.saturating_add(size(h))),
        HirKind::Alternation(parts) => parts
            .iter()
            .fold(0u64, |n, h| n.saturating_add(size(h)))
            .saturating_add(parts.len().saturating_sub(1) as u64),
    }
}

/// `n` instructions joined by `n - 1` `Alt`s.
fn alternatives(n: u64) -> u64 {
    n.saturating_mul(2).saturating_sub(1).max(1)
}

#[cfg(test)]
mod tests {
    use super::program_size;

    #[test]
    fn counts_as_re2_compiles() {
        // "/" and 150 a's, plus Fail and Match.
        assert_eq!(program_size("/a{150}"), Some(153));
        assert_eq!(program_size("abc"), Some(5));
        // Two alternatives: their bytes and one Alt.
        assert_eq!(program_size("ab|cd"), Some(7));
        // A loop: the byte and one Alt.
        assert_eq!(program_size("a*"), Some(4));
        // a{2,4}: four copies, two of them optional.
        assert_eq!(program_size("a{2,4}"), Some(8));
        // A capture group costs two.
        assert_eq!(program_size("(a)"), Some(5));
        assert_eq!(program_size("("), None);
    }

    #[test]
    fn everyday_route_regexes_are_small() {
        for r in [
            "/api/v[0-9]+/users/.*",
            "^/reviews/[0-9]+$",
            "/(productpage|login|logout)",
            ".*\\.(css|js|png)",
        ] {
            let n = program_size(r).unwrap();
            assert!(n < 100, "{r}: {n}");
        }
        // Large bounded repetitions are not.
        assert!(program_size("/a{1000}").unwrap() > 1000);
        assert!(program_size("[a-z]{60}[0-9]{60}").unwrap() > 100);
    }
}
