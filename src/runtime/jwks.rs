//! The keys of RequestAuthentication `jwksUri` rules, filled into their records before the
//! records enter the dataflow: the dataflow then computes from records alone, and a key
//! refresh is an input change like any other (the policies it touches are retracted with
//! the keys they had and inserted with the new ones).
//!
//! What was fetched comes from `sources::jwks` (`Input::Jwks`); which URIs to fetch is
//! [`Resolver::uris`], published by the runtime after each epoch. A URI fetched once keeps
//! its keys while a refresh fails ([`dataflows::model::Jwks::Uri`]'s `problem` says why).

use dataflows::model::{ConfigKey, Jwks, PolicyEffect, Record};
use std::collections::{BTreeMap, HashMap};

/// What meshflow holds for one URI: the last key set fetched, and why the latest fetch
/// failed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Fetched {
    keys: Option<String>,
    problem: Option<String>,
}

/// Rewrites the records of RequestAuthentications with `jwksUri` rules to carry their keys.
#[derive(Default)]
pub struct Resolver {
    fetched: HashMap<String, Fetched>,
    /// Each record as a source gave it, with the form the dataflow holds and its count.
    held: BTreeMap<Record, (Record, isize)>,
    /// Records with URIs changed since [`Resolver::changed_uris`] last looked.
    changed: bool,
}

/// The URIs of a record's rules, with each rule's fetch timeout (ms).
fn uris_of(r: &Record) -> Vec<(&str, u64)> {
    match r {
        Record::Security(p) => match &p.effect {
            PolicyEffect::Jwt(rules) => rules
                .iter()
                .filter_map(|r| r.jwks.uri().map(|u| (u, r.timeout_ms)))
                .collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

impl Resolver {
    /// `r` with what is held for each of its URIs.
    fn resolve(&self, r: &Record) -> Record {
        let mut r = r.clone();
        if let Record::Security(p) = &mut r {
            if let PolicyEffect::Jwt(rules) = &mut p.effect {
                for rule in rules {
                    if let Jwks::Uri { uri, keys, problem } = &mut rule.jwks {
                        let f = self.fetched.get(uri.as_str()).cloned().unwrap_or_default();
                        *keys = f.keys;
                        *problem = f.problem;
                    }
                }
            }
        }
        r
    }

    /// The changes a source reported, as the dataflow takes them: records with `jwksUri`
    /// rules carry the keys held now (a retraction, the form that was inserted).
    pub fn rewrite(&mut self, changes: Vec<(Record, isize)>) -> Vec<(Record, isize)> {
        changes
            .into_iter()
            .map(|(r, d)| {
                if uris_of(&r).is_empty() {
                    return (r, d);
                }
                self.changed = true;
                let resolved = match self.held.get(&r) {
                    Some((held, _)) => held.clone(),
                    None => self.resolve(&r),
                };
                let entry = self.held.entry(r.clone()).or_insert((resolved.clone(), 0));
                entry.1 += d;
                if entry.1 <= 0 {
                    self.held.remove(&r);
                }
                (resolved, d)
            })
            .collect()
    }

    /// A fetch of `uri` finished: the new keys (`Ok`) or why it failed (`Err`; the keys
    /// fetched before stay). The changes that move every record using the URI to what is
    /// held now, and the objects they belong to.
    pub fn fetched(
        &mut self,
        uri: &str,
        outcome: Result<String, String>,
    ) -> (Vec<(Record, isize)>, Vec<ConfigKey>) {
        let using: Vec<Record> = self
            .held
            .keys()
            .filter(|r| uris_of(r).iter().any(|(u, _)| *u == uri))
            .cloned()
            .collect();
        // A fetch that outlived every use of its URI is dropped.
        if using.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let f = self.fetched.entry(uri.to_string()).or_default();
        match outcome {
            Ok(keys) => {
                f.keys = Some(keys);
                f.problem = None;
            }
            Err(p) => f.problem = Some(p),
        }
        let mut changes = Vec::new();
        let mut objects = Vec::new();
        for r in using {
            let now = self.resolve(&r);
            let Some((held, count)) = self.held.get_mut(&r) else {
                continue;
            };
            if *held != now {
                changes.push((std::mem::replace(held, now.clone()), -*count));
                changes.push((now, *count));
                if let Record::Security(p) = &r {
                    objects.push(p.key.clone());
                }
            }
        }
        (changes, objects)
    }

    /// [`Resolver::uris`], when the records using URIs changed since the last call (an
    /// epoch without such a change costs nothing).
    pub fn changed_uris(&mut self) -> Option<BTreeMap<String, u64>> {
        std::mem::take(&mut self.changed).then(|| self.uris())
    }

    /// Every URI the records in effect use, with the longest timeout a rule gives it.
    pub fn uris(&mut self) -> BTreeMap<String, u64> {
        let mut out: BTreeMap<String, u64> = BTreeMap::new();
        for r in self.held.keys() {
            for (u, t) in uris_of(r) {
                let e = out.entry(u.to_string()).or_insert(t);
                *e = (*e).max(t);
            }
        }
        // URIs no record uses any more are forgotten, so a later use fetches afresh.
        self.fetched.retain(|u, _| out.contains_key(u));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataflows::model::{JwtRule, Kind, SecurityPolicy, DEFAULT_JWKS_TIMEOUT_MS};

    fn policy(name: &str, uri: &str) -> Record {
        Record::Security(SecurityPolicy {
            key: ConfigKey::new(Kind::RequestAuthentication, "ns", name),
            created: String::new(),
            selector: None,
            effect: PolicyEffect::Jwt(vec![JwtRule::new(
                "i",
                Jwks::Uri {
                    uri: uri.into(),
                    keys: None,
                    problem: None,
                },
            )]),
        })
    }

    fn keys_of(r: &Record) -> (Option<String>, Option<String>) {
        let Record::Security(p) = r else { panic!() };
        let PolicyEffect::Jwt(rules) = &p.effect else {
            panic!()
        };
        match &rules[0].jwks {
            Jwks::Uri { keys, problem, .. } => (keys.clone(), problem.clone()),
            Jwks::Inline(_) => panic!(),
        }
    }

    /// Records enter without keys, take them when fetched (retracted and inserted again,
    /// naming the object), keep them when a refresh fails (with the problem), and a
    /// retraction takes back exactly the form the dataflow holds. Other records pass.
    #[test]
    fn keys_follow_fetches_and_retractions_match_what_was_inserted() {
        let mut r = Resolver::default();
        let a = policy("a", "https://idp/keys");
        let other = Record::Security(SecurityPolicy {
            effect: PolicyEffect::Peer {
                mode: dataflows::model::MtlsMode::Strict,
                ports: Default::default(),
            },
            ..match &a {
                Record::Security(p) => p.clone(),
                _ => unreachable!(),
            }
        });
        let out = r.rewrite(vec![(a.clone(), 1), (other.clone(), 1)]);
        assert_eq!(out[0], (a.clone(), 1), "no keys yet");
        assert_eq!(out[1], (other, 1));
        assert_eq!(
            r.changed_uris(),
            Some(BTreeMap::from([(
                "https://idp/keys".to_string(),
                DEFAULT_JWKS_TIMEOUT_MS
            )]))
        );
        assert_eq!(r.changed_uris(), None, "nothing changed since");

        let (changes, objects) = r.fetched("https://idp/keys", Ok("K1".into()));
        assert_eq!(changes.len(), 2);
        assert_eq!(changes[0], (a.clone(), -1));
        assert_eq!(keys_of(&changes[1].0), (Some("K1".into()), None));
        assert_eq!(objects.len(), 1);

        let (changes, _) = r.fetched("https://idp/keys", Err("timed out".into()));
        assert_eq!(
            keys_of(&changes[1].0),
            (Some("K1".into()), Some("timed out".into())),
            "the last keys stay"
        );
        let held = changes[1].0.clone();
        assert_eq!(r.rewrite(vec![(a.clone(), -1)]), vec![(held, -1)]);
        assert!(r.uris().is_empty());
        assert!(r.fetched("https://idp/keys", Ok("K2".into())).0.is_empty());
        // Forgotten once unused: a new use starts without keys, and is fetched afresh.
        let again = r.rewrite(vec![(a.clone(), 1)]);
        assert_eq!(keys_of(&again[0].0), (None, None));
    }
}
