//! A process's own accounting, from `/proc` (Linux): CPU time and resident memory of the
//! server under test.

use std::path::PathBuf;

/// CPU and memory figures of one process at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcStats {
    /// utime + stime of all its threads, from `/proc/PID/stat` (clock-tick resolution).
    pub cpu_s: f64,
    /// Sum of the on-CPU time of its live threads from `/proc/PID/task/*/schedstat`
    /// (nanosecond resolution; threads that exited are not counted).
    pub cpu_task_s: f64,
    /// VmRSS, KiB.
    pub rss_kib: u64,
    /// VmHWM (peak RSS since start or since the last [`reset_peak`]), KiB.
    pub hwm_kib: u64,
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Reads the figures of process `pid`.
pub fn read(pid: u32) -> Result<ProcStats, String> {
    let base = PathBuf::from(format!("/proc/{pid}"));
    let stat = std::fs::read_to_string(base.join("stat"))
        .map_err(|e| format!("reading /proc/{pid}/stat: {e}"))?;
    // Fields after the command name (which may hold spaces) start with field 3 (state).
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| format!("/proc/{pid}/stat: unexpected format"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Result<f64, String> {
        fields
            .get(n - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| format!("/proc/{pid}/stat: no field {n}"))
    };
    let cpu_s = (field(14)? + field(15)?) / clock_ticks_per_second();

    let mut cpu_task_ns: u64 = 0;
    if let Ok(tasks) = std::fs::read_dir(base.join("task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                cpu_task_ns += s
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }

    let status = std::fs::read_to_string(base.join("status"))
        .map_err(|e| format!("reading /proc/{pid}/status: {e}"))?;
    let kib = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok(ProcStats {
        cpu_s,
        cpu_task_s: cpu_task_ns as f64 / 1e9,
        rss_kib: kib("VmRSS:"),
        hwm_kib: kib("VmHWM:"),
    })
}

/// Resets the process's peak RSS to its current RSS (`echo 5 > /proc/PID/clear_refs`), so the
/// next VmHWM is the peak of what follows. False if the kernel refused.
pub fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// The machine the benchmark ran on.
pub fn machine() -> serde_json::Value {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string())
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    serde_json::json!({
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "memory_gib": (mem_kib as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        "cpu": cpu,
        "kernel": kernel,
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
    })
}
