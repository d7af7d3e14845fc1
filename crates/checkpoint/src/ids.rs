//! Identifiers and timestamps.
//!
//! Checkpoint ids use LangGraph's layout (UUIDv6: a 60-bit count of 100 ns intervals since
//! 1582-10-15, most significant bits first), so they sort chronologically as strings. The
//! generator is strictly increasing within a process, and [`checkpoint_id_after`] also
//! places a new id after its parent's, so a thread's ids keep sorting correctly across
//! restarts even if the clock stepped back.

use chrono::{DateTime, Utc};
use std::sync::atomic::{AtomicU64, Ordering};

/// 100 ns intervals between 1582-10-15 (the UUID epoch) and 1970-01-01.
const GREGORIAN_OFFSET: u64 = 0x01B2_1DD2_1381_4000;

static LAST_TICKS: AtomicU64 = AtomicU64::new(0);

fn now_ticks() -> u64 {
    let now = Utc::now();
    let nanos = now.timestamp_nanos_opt().unwrap_or(i64::MAX).max(0) as u64;
    nanos / 100 + GREGORIAN_OFFSET
}

/// A tick strictly greater than every tick handed out before in this process and `>= min`.
fn next_ticks(min: u64) -> u64 {
    let mut last = LAST_TICKS.load(Ordering::Relaxed);
    loop {
        let candidate = now_ticks().max(last.saturating_add(1)).max(min);
        match LAST_TICKS.compare_exchange_weak(last, candidate, Ordering::AcqRel, Ordering::Relaxed)
        {
            Ok(_) => return candidate,
            Err(actual) => last = actual,
        }
    }
}

fn format_v6(ticks: u64) -> String {
    let random = *uuid::Uuid::new_v4().as_bytes();
    let time_high = (ticks >> 28) & 0xFFFF_FFFF;
    let time_mid = (ticks >> 12) & 0xFFFF;
    let time_low = 0x6000 | (ticks & 0x0FFF);
    let clock_seq = 0x8000 | (u16::from_be_bytes([random[0], random[1]]) & 0x3FFF);
    let mut node = 0u64;
    for b in &random[2..8] {
        node = (node << 8) | u64::from(*b);
    }
    format!("{time_high:08x}-{time_mid:04x}-{time_low:04x}-{clock_seq:04x}-{node:012x}")
}

/// The timestamp (100 ns ticks) of a UUIDv6-shaped id, `None` for anything else.
pub fn checkpoint_id_ticks(id: &str) -> Option<u64> {
    let bytes = id.as_bytes();
    if bytes.len() != 36 || bytes[8] != b'-' || bytes[13] != b'-' || bytes[14] != b'6' {
        return None;
    }
    let high = u64::from_str_radix(id.get(0..8)?, 16).ok()?;
    let mid = u64::from_str_radix(id.get(9..13)?, 16).ok()?;
    let low = u64::from_str_radix(id.get(15..18)?, 16).ok()?;
    Some((high << 28) | (mid << 12) | low)
}

/// A new checkpoint id.
pub fn new_checkpoint_id() -> String {
    format_v6(next_ticks(0))
}

/// A new checkpoint id that sorts after `previous` (when it is one of ours) as well as
/// after every id this process generated before.
pub fn checkpoint_id_after(previous: Option<&str>) -> String {
    let min = previous
        .and_then(checkpoint_id_ticks)
        .map(|t| t.saturating_add(1))
        .unwrap_or(0);
    format_v6(next_ticks(min))
}

/// A new time-ordered UUIDv7 (threads, runs, crons).
pub fn new_uuid7() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// A new random UUIDv4 (assistants).
pub fn new_uuid4() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Now, truncated to whole microseconds (what both databases store).
pub fn now() -> DateTime<Utc> {
    from_micros(to_micros(Utc::now()))
}

pub(crate) fn to_micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

pub(crate) fn from_micros(us: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(us).unwrap_or_default()
}

/// `now + minutes`, saturating.
pub(crate) fn plus_minutes(t: DateTime<Utc>, minutes: f64) -> DateTime<Utc> {
    plus_seconds(t, minutes * 60.0)
}

pub(crate) fn plus_seconds(t: DateTime<Utc>, seconds: f64) -> DateTime<Utc> {
    let micros = (seconds * 1_000_000.0).clamp(0.0, 1e17) as i64;
    from_micros(to_micros(t).saturating_add(micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_strictly_increasing_as_strings() {
        let mut prev = new_checkpoint_id();
        for _ in 0..10_000 {
            let id = new_checkpoint_id();
            assert!(id > prev, "{id} <= {prev}");
            prev = id;
        }
    }

    #[test]
    fn ids_have_uuid_v6_shape_and_round_trip_their_ticks() {
        let id = new_checkpoint_id();
        let parsed = uuid::Uuid::parse_str(&id).unwrap();
        assert_eq!(parsed.get_version_num(), 6);
        assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122);
        let ticks = checkpoint_id_ticks(&id).unwrap();
        assert!(ticks > GREGORIAN_OFFSET);
    }

    #[test]
    fn id_after_a_future_parent_sorts_after_it() {
        // A parent written by a process whose clock was an hour ahead.
        let future = format_v6(now_ticks() + 36_000_000_000);
        let id = checkpoint_id_after(Some(&future));
        assert!(id > future);
        assert!(new_checkpoint_id() > future);
        assert_eq!(checkpoint_id_after(Some("not-an-id")).len(), 36);
    }

    #[test]
    fn micros_round_trip() {
        let t = now();
        assert_eq!(from_micros(to_micros(t)), t);
        assert!(plus_minutes(t, 1.0) > t);
        assert_eq!(plus_seconds(t, -5.0), t);
    }
}
