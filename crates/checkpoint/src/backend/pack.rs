//! Snapshots stored compressed on SQLite.
//!
//! A snapshot is a whole state as JSON, rewritten every time the deltas since the last one
//! outweigh it, so snapshots are about half of a long thread's checkpoint bytes; JSON of a
//! conversation deflates to about a quarter. On SQLite a snapshot of at least
//! [`PACK_MIN_BYTES`] is stored as a BLOB: [`MAGIC`] and the raw deflate stream. Text is
//! never stored as a BLOB otherwise, and no JSON text starts with a NUL byte, so a reader
//! tells the two apart by the prefix; rows written before keep their text. Postgres
//! compresses large values itself (TOAST), so its rows stay text.

use flate2::Compression;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use std::io::{Read, Write};

/// The first bytes of a packed value.
const MAGIC: &[u8] = b"\0fz1";
/// Smaller snapshots stay text (little to gain, a few more bytes of header).
pub(crate) const PACK_MIN_BYTES: usize = 1024;

/// `text` deflated behind [`MAGIC`], or `None` when it is small or would not shrink.
pub(crate) fn pack(text: &str) -> Option<Vec<u8>> {
    if text.len() < PACK_MIN_BYTES {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 3 + MAGIC.len());
    out.extend_from_slice(MAGIC);
    let mut enc = DeflateEncoder::new(out, Compression::fast());
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
