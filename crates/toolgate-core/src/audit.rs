//! The journal row as every audit face prints it — `toolgate audit --json`, REST `/v1/audit`,
//! the console — so one row has one schema (documented in the README's "Audit" section):
//! times in RFC 3339 UTC, durations in milliseconds, the arguments hash as 16 hex digits (a
//! string: JavaScript rounds 64-bit numbers).

use crate::store::JournalRow;
use serde_json::{Value, json};
use std::time::{SystemTime, UNIX_EPOCH};

/// One row in the audit schema.
pub fn row_json(r: &JournalRow) -> Value {
    json!({
        "started_at": r.started_at.map(rfc3339),
        "finished_at": r.finished_at.map(rfc3339),
        "session_id": r.session_id,
        "call_id": r.call_id,
        "turn_id": r.turn_id,
        "tool": r.tool,
        "outcome": r.state,
        "error_type": r.error_type,
        "decision": r.decision,
        "source": r.source,
        "hooks": r.hooks,
        "arguments_hash": format!("{:016x}", r.arguments_hash),
        "arguments": r.arguments,
        "repaired": r.repaired,
        "raw": r.raw,
        "cache_hit": r.cache_hit,
        "attempts": r.attempts,
        "waiting_ms": r.waiting_ms,
        "running_ms": r.running_ms,
        "may_have_run": r.may_have_run,
        "owner": r.owner,
        "job": r.job,
    })
}

/// The civil date (proleptic Gregorian) of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `2026-11-21T07:32:41.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (y, mo, day) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}
