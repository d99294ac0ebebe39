//! Asking a running Envoy through its admin API: readiness, stats (and waiting on them), the
//! config dump and the names in it, and a readable `summary` for failure messages. The parsing
//! of a config dump itself is in `config_dump`, so it also serves dumps fetched elsewhere.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::config_dump::{
    dump_cluster_names, dump_eds_cluster_names, dump_endpoints, dump_listener_names,
    dump_route_config_names, dump_section_items,
};
use super::envoy::Envoy;
use super::http_client::http_get;
use super::polling::{wait_until, CONVERGE_TIMEOUT, STARTUP_TIMEOUT};

impl Envoy {
    /// Waits until `/ready` says `LIVE` (initial CDS/LDS received and applied).
    pub fn wait_live(&self, timeout: Duration) {
        let mut last = String::new();
        let live = wait_until(timeout, || match self.admin_request("/ready") {
            Ok((200, body)) if body.trim() == "LIVE" => true,
            Ok((status, body)) => {
                last = format!("{status} {}", body.trim());
                false
            }
            Err(e) => {
                last = e;
                false
            }
        });
        assert!(
            live,
            "envoy not LIVE within {timeout:?}; /ready said: {last}"
        );
    }

    /// GET an admin path; the status and body, or a transport error.
    pub fn admin_request(&self, path_and_query: &str) -> Result<(u16, String), String> {
        http_get(self.admin_addr(), "127.0.0.1", path_and_query, &[])
    }

    /// GET an admin path that must answer 200; panics otherwise.
    pub fn admin_get(&self, path_and_query: &str) -> String {
        match self.admin_request(path_and_query) {
            Ok((200, body)) => body,
            Ok((status, body)) => panic!("admin GET {path_and_query}: {status}: {body}"),
            Err(e) => panic!("admin GET {path_and_query}: {e}"),
        }
    }

    /// All integer-valued stats (counters and gauges) whose name matches `filter`, an RE2 regex
    /// (`/stats?filter=`); all of them for `None`.
    pub fn stats(&self, filter: Option<&str>) -> BTreeMap<String, u64> {
        let path = match filter {
            Some(filter) => format!("/stats?filter={}", percent_encode(filter)),
            None => "/stats".to_owned(),
        };
        parse_stats(&self.admin_get(&path))
    }

    /// TLS handshakes completed by this Envoy's listeners (the server side of mTLS), over
    /// all of them.
    pub fn listener_tls_handshakes(&self) -> u64 {
        self.stats(Some("ssl.handshake"))
            .iter()
            .filter(|(k, _)| k.starts_with("listener.") && k.ends_with(".ssl.handshake"))
            .map(|(_, v)| *v)
            .sum()
    }

    /// One stat by its exact name.
    pub fn stat(&self, name: &str) -> Option<u64> {
        self.stats(None).get(name).copied()
    }

    /// The first (by name) stat whose name ends with `suffix`, with its full name.
    pub fn stat_with_suffix(&self, suffix: &str) -> Option<(String, u64)> {
        self.stats(Some(&format!("{}$", regex_escape(suffix))))
            .into_iter()
            .find(|(name, _)| name.ends_with(suffix))
    }

    /// An RDS subscription stat of a route configuration, e.g. `update_success`. Envoy names it
    /// `http.<stat_prefix>.rds.<route_config_name>.<counter>` (`:` in the name becomes `_`); the
    /// HCM stat prefix is the control plane's choice, so this matches by suffix.
    pub fn rds_stat(&self, route_config: &str, counter: &str) -> Option<u64> {
        let suffix = format!(".rds.{}.{counter}", route_config.replace(':', "_"));
        self.stat_with_suffix(&suffix).map(|(_, value)| value)
    }

    /// Applies `change`, then waits until Envoy accepts a new version of route configuration
    /// `route_config` (its RDS `update_success` counter moves). Returns the latency from the
    /// change to the acceptance: Envoy's own `update_time` stamp when available, else as polled.
    pub fn await_rds_update(&self, route_config: &str, change: impl FnOnce()) -> Duration {
        let successes = || self.rds_stat(route_config, "update_success").unwrap_or(0);
        let before = successes();
        let (started, started_wall) = (Instant::now(), SystemTime::now());
        change();
        let accepted = wait_until(CONVERGE_TIMEOUT, || successes() > before);
        let polled = started.elapsed();
        assert!(
            accepted,
            "Envoy accepted no new version of route configuration {route_config} within \
             {CONVERGE_TIMEOUT:?}\n{}",
            self.summary()
        );
        self.rds_stat(route_config, "update_time")
            .and_then(|stamp| stamp.checked_sub(unix_millis(started_wall)))
            .map(Duration::from_millis)
            .filter(|latency| *latency <= polled)
            .unwrap_or(polled)
    }

    /// Waits until listener `name` is active in Envoy.
    pub fn await_listener(&self, name: &str) {
        let active = wait_until(STARTUP_TIMEOUT, || {
            self.listener_names()
                .iter()
                .any(|listener| listener == name)
        });
        assert!(
            active,
            "listener {name} did not become active within {STARTUP_TIMEOUT:?}\n{}",
            self.summary()
        );
    }

    /// Waits until EDS in Envoy holds exactly `expected` (`ip:port`, any order) for `cluster`.
    pub fn await_endpoints(&self, cluster: &str, expected: &[String]) {
        let mut expected = expected.to_vec();
        expected.sort();
        let converged = wait_until(CONVERGE_TIMEOUT, || self.endpoints(cluster) == expected);
        assert!(
            converged,
            "EDS for {cluster} did not become {expected:?} within {CONVERGE_TIMEOUT:?}\n{}",
            self.summary()
        );
    }

    /// Every non-zero `*update_rejected` stat: NACKs of CDS, LDS, RDS (per route config) and
    /// EDS (per cluster).
    pub fn rejected_update_stats(&self) -> Vec<(String, u64)> {
        self.stats(Some("update_rejected"))
            .into_iter()
            .filter(|(name, value)| name.ends_with("update_rejected") && *value > 0)
            .collect()
    }

    /// Sum of all `*update_rejected` stats: how many xDS updates Envoy NACKed.
    pub fn rejected_updates(&self) -> u64 {
        self.rejected_update_stats()
            .iter()
            .map(|(_, value)| value)
            .sum()
    }

    /// `/config_dump?include_eds` as JSON.
    pub fn config_dump(&self) -> Value {
        self.try_config_dump().unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_config_dump(&self) -> Result<Value, String> {
        match self.admin_request("/config_dump?include_eds")? {
            (200, body) => serde_json::from_str(&body).map_err(|e| format!("config dump: {e}")),
            (status, body) => Err(format!("config dump: {status}: {body}")),
        }
    }

    /// Names of the dynamic active clusters.
    pub fn cluster_names(&self) -> Vec<String> {
        dump_cluster_names(&self.config_dump())
    }

    /// Names of the dynamic listeners that have an active state.
    pub fn listener_names(&self) -> Vec<String> {
        dump_listener_names(&self.config_dump())
    }

    /// Names of the dynamic route configurations.
    pub fn route_config_names(&self) -> Vec<String> {
        dump_route_config_names(&self.config_dump())
    }

    /// Cluster names of the EDS ClusterLoadAssignments.
    pub fn eds_cluster_names(&self) -> Vec<String> {
        dump_eds_cluster_names(&self.config_dump())
    }

    /// Sorted `ip:port` of the endpoints EDS gave Envoy for `cluster`.
    pub fn endpoints(&self, cluster: &str) -> Vec<String> {
        dump_endpoints(&self.config_dump(), cluster)
    }

    /// A readable account of what this Envoy holds (listeners, route configurations, clusters,
    /// endpoints, NACKs), for failure messages.
    pub fn summary(&self) -> String {
        let dump = match self.try_config_dump() {
            Ok(dump) => dump,
            Err(e) => return format!("envoy state unavailable: {e}"),
        };
        let mut out = String::from("envoy state:\n");
        out += &format!("  listeners: {:?}\n", dump_listener_names(&dump));
        out += &format!("  clusters: {:?}\n", dump_cluster_names(&dump));
        out += "  endpoints:\n";
        for cluster in dump_eds_cluster_names(&dump) {
            out += &format!("    {cluster}: {:?}\n", dump_endpoints(&dump, &cluster));
        }
        out += "  route configurations:\n";
        for item in dump_section_items(&dump, "RoutesConfigDump", "dynamic_route_configs") {
            out += &format!("    {}\n", item["route_config"]);
        }
        match self.admin_request("/stats?filter=update_rejected") {
            Ok((_, text)) => {
                let rejected: Vec<_> = parse_stats(&text)
                    .into_iter()
                    .filter(|(_, v)| *v > 0)
                    .collect();
                out += &format!("  rejected updates: {rejected:?}\n");
            }
            Err(e) => out += &format!("  rejected updates: unavailable: {e}\n"),
        }
        let log = self.log();
        let rejections: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("rejected") || line.contains("[warning]"))
            .collect();
        out += &format!(
            "  last log warnings/rejections:\n    {}\n",
            rejections[rejections.len().saturating_sub(10)..].join("\n    ")
        );
        out
    }
}

/// Parses Envoy's plain-text `/stats` (`name: value` lines), keeping integer values only
/// (histograms and text readouts are skipped).
pub fn parse_stats(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(": ")?;
            Some((name.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Escapes RE2 metacharacters: `stat_with_suffix` matches a literal suffix through Envoy's
/// regex `filter`, and stat names carry `.` (and cluster names `|`).
fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escape = "\\.+*?()|[]{}^$".contains(c);
            escape.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

/// Percent-encodes everything but unreserved characters, as the `filter` regex travels in the
/// query string of `/stats`.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Milliseconds since the Unix epoch (Envoy's `update_time` gauges use the same clock).
pub fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
