//! Human units on the command line and in query parameters: durations (`90s`, `5m`,
//! `1h30m`, `250ms`) and byte sizes (`64MiB`, `512KiB`, `1GiB`, plain bytes). Errors say
//! what was given and what is accepted; the caller names the parameter.

use std::time::Duration;

/// `90s`, `5m`, `1h30m`, `250ms`, `2d`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration; use e.g. 90s, 5m, 1h30m".into());
    }
    if let Ok(n) = s.parse::<u64>() {
        return Ok(Duration::from_secs(n));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("{s:?} is not a duration; use e.g. 90s, 5m, 1h30m"));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{s:?}: number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86_400)),
            _ => {
                return Err(format!(
                    "{s:?}: unknown unit {unit:?}; use ms, s, m, h or d (e.g. 90s, 5m, 1h30m)"
                ))
            }
        };
        total = total.saturating_add(part);
    }
    Ok(total)
}

/// `64MiB`, `64M`, `512KiB`, `1GiB`, `1048576`: binary multiples either way.
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size; use e.g. 64MiB, 512KiB, 1GiB"))?;
    let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => {
            return Err(format!(
                "{s:?}: unknown unit {other:?}; use KiB, MiB or GiB"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?}: too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("12"), Ok(Duration::from_secs(12)));
        for bad in ["", "m", "5x", "abc", "-5m", "5m3"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("512k"), Ok(512 << 10));
        assert_eq!(parse_bytes("100"), Ok(100));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("99999999999999999999GiB").is_err());
    }
}
