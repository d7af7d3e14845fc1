//! Large values stored compressed on SQLite.
//!
//! A conversation's JSON deflates to a quarter to a half: snapshots (a whole state,
//! rewritten every time the deltas since the last one outweigh it), checkpoint writes
//! (deltas), the thread row's values, a run's kwargs (its input) and the journal's
//! contents. On SQLite such a value of at least [`PACK_MIN_BYTES`] is stored as a BLOB:
//! [`MAGIC`] and the raw deflate stream (`Arg::packed_text` / `Arg::packed_json`), in
//! columns no SQL looks into (or, for thread values, whose filters let packed rows through
//! to a check in Rust). Text is never stored as a BLOB otherwise, and no JSON text starts
//! with a NUL byte, so a reader tells the two apart by the prefix (`LiteRow::opt_text`,
//! `LiteRow::opt_json`); rows written before keep their text. Postgres compresses large
//! values itself (TOAST), so its rows stay text and JSONB.

use flate2::Compression;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use std::io::{Read, Write};

/// The first bytes of a packed value.
const MAGIC: &[u8] = b"\0fz1";
/// Smaller values stay text: below this, deflate saves a few dozen bytes at most. A step's
/// writes of one message (300-600 bytes of JSON) still shrink by a third.
pub(crate) const PACK_MIN_BYTES: usize = 256;

/// From this size on, a faster compression level: a whole state (a snapshot, the thread
/// row's values) of a long thread is a few hundred KiB, packed once per run's end.
const LARGE_BYTES: usize = 64 * 1024;

/// `text` deflated behind [`MAGIC`], or `None` when it is small or would not shrink. Rows
/// below [`LARGE_BYTES`] take zlib's default level (6: a quarter smaller than level 1,
/// whose quick strategy compresses JSON poorly; tens of microseconds for a row); larger
/// values level 2.
pub(crate) fn pack(text: &str) -> Option<Vec<u8>> {
    if text.len() < PACK_MIN_BYTES {
        return None;
    }
    let level = if text.len() < LARGE_BYTES {
        Compression::default()
    } else {
        Compression::new(2)
    };
    let mut out = Vec::with_capacity(text.len() / 3 + MAGIC.len());
    out.extend_from_slice(MAGIC);
    let mut enc = DeflateEncoder::new(out, level);
    enc.write_all(text.as_bytes()).ok()?;
    let out = enc.finish().ok()?;
    (out.len() < text.len()).then_some(out)
}

/// The text of a packed value; `None` when `bytes` is not one.
pub(crate) fn unpack(bytes: &[u8]) -> Option<Result<String, String>> {
    let body = bytes.strip_prefix(MAGIC)?;
    let mut text = String::with_capacity(body.len() * 4);
    Some(
        DeflateDecoder::new(body)
            .read_to_string(&mut text)
            .map(|_| text)
            .map_err(|e| format!("a packed value does not inflate: {e}")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_thresholds() {
        let text = format!("{{\"messages\": [{}]}}", "\"hello there\",".repeat(200));
        let packed = pack(&text).unwrap();
        assert!(packed.len() * 4 < text.len());
        assert_eq!(unpack(&packed).unwrap().unwrap(), text);
        assert_eq!(pack("{\"small\": 1}"), None);
        assert!(unpack(b"{\"plain\": 1}").is_none());
        let mut broken = packed.clone();
        broken.truncate(MAGIC.len() + 3);
        assert!(unpack(&broken).unwrap().is_err());
    }
}
