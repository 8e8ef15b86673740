//! UTC times for `toolgate audit`: RFC 3339 out, and `--since` in as RFC 3339, a date, or an age
//! (`90s`, `30m`, `2h`, `7d`).

use anyhow::{Result, bail};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use toolgate_core::audit::rfc3339;

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses `--since`: `2026-11-21T07:00:00Z` (an offset like `+02:00` too), `2026-11-21`, or an
/// age before `now` such as `30m`.
pub fn parse_since(text: &str, now: SystemTime) -> Result<SystemTime> {
    let t = text.trim();
    if let Some(age) = parse_age(t) {
        return Ok(now.checked_sub(age).unwrap_or(UNIX_EPOCH));
    }
    let bad = || {
        anyhow::anyhow!(
            "--since {text:?} is not a time: use RFC 3339 (2026-11-21T07:00:00Z), a date (2026-11-21) or an age (30m, 2h, 7d)"
        )
    };
    let (date, rest) = t.split_at(t.find(['T', 't', ' ']).unwrap_or(t.len()));
    let mut parts = date.split('-');
    let (Some(y), Some(m), Some(d), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let (y, m, d): (i64, u32, u32) = (
        y.parse().map_err(|_| bad())?,
        m.parse().map_err(|_| bad())?,
        d.parse().map_err(|_| bad())?,
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || !(1970..=9999).contains(&y) {
        return Err(bad());
    }
    let mut secs = days_from_civil(y, m, d) * 86_400;
    let mut nanos = 0u32;
    if !rest.is_empty() {
        let rest = &rest[1..];
        let (clock, offset) = match rest.find(['Z', 'z', '+', '-']) {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let mut hms = clock.split(':');
        let h: i64 = hms.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let mi: i64 = hms.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let sec_text = hms.next().unwrap_or("0");
        let (s, frac) = sec_text.split_once('.').unwrap_or((sec_text, ""));
        let s: i64 = s.parse().map_err(|_| bad())?;
        if h > 23 || mi > 59 || s > 60 {
            return Err(bad());
        }
        if !frac.is_empty() {
            let digits: String = frac.chars().take(9).collect();
            let scale = 10u32.pow(9 - digits.len() as u32);
            nanos = digits.parse::<u32>().map_err(|_| bad())? * scale;
        }
        secs += h * 3600 + mi * 60 + s;
        match offset.chars().next() {
            None | Some('Z' | 'z') => {}
            Some(sign) => {
                let (oh, om) = offset[1..].split_once(':').ok_or_else(bad)?;
                let off = oh.parse::<i64>().map_err(|_| bad())? * 3600 + om.parse::<i64>().map_err(|_| bad())? * 60;
                secs += if sign == '+' { -off } else { off };
            }
        }
    }
    if secs < 0 {
        bail!("--since {text:?} is before 1970");
    }
    Ok(UNIX_EPOCH + Duration::new(secs as u64, nanos))
}

fn parse_age(t: &str) -> Option<Duration> {
    let unit = t.chars().last()?;
    let n: u64 = t[..t.len() - unit.len_utf8()].parse().ok()?;
    let secs = match unit {
        's' => n,
        'm' => n.checked_mul(60)?,
        'h' => n.checked_mul(3600)?,
        'd' => n.checked_mul(86_400)?,
        'w' => n.checked_mul(604_800)?,
        _ => return None,
    };
    Some(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_spellings() {
        let t = UNIX_EPOCH + Duration::from_millis(1_795_246_361_123);
        let text = rfc3339(t);
        assert_eq!(text, "2026-11-21T07:32:41.123Z");
        assert_eq!(parse_since(&text, t).unwrap(), t);
        assert_eq!(
            parse_since("2026-11-21T09:32:41.123+02:00", t).unwrap(),
            t,
            "an offset is applied"
        );
        assert_eq!(
            rfc3339(parse_since("2026-11-21", t).unwrap()),
            "2026-11-21T00:00:00.000Z"
        );
        assert_eq!(parse_since("30m", t).unwrap(), t - Duration::from_secs(1800));
        assert_eq!(parse_since("7d", t).unwrap(), t - Duration::from_secs(7 * 86_400));
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(parse_since("2000-02-29T12:00:00Z", t).unwrap()),
            "2000-02-29T12:00:00.000Z"
        );
        for bad in [
            "yesterday",
            "2026-13-01",
            "2026-11-21T25:00:00Z",
            "12",
            "",
            "1969-12-31",
        ] {
            let e = parse_since(bad, t).unwrap_err().to_string();
            assert!(e.contains("--since"), "{bad:?}: {e}");
        }
    }
}
