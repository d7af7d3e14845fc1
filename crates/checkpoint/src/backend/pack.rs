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

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use std::sync::Mutex;

/// The first bytes of a packed value.
const MAGIC: &[u8] = b"\0fz1";
/// Smaller values stay text: below this, deflate saves a few dozen bytes at most. A step's
/// writes of one message (300-600 bytes of JSON) still shrink by a third.
pub(crate) const PACK_MIN_BYTES: usize = 256;

/// From this size on, a faster compression level: a whole state (a snapshot, the thread
/// row's values) of a long thread is a few hundred KiB, packed once per run's end.
const LARGE_BYTES: usize = 64 * 1024;

/// Idle (de)compressors kept for reuse, per kind. A deflate state is ~300 KiB of tables
/// that a new one allocates zeroed: for the few-hundred-byte values most rows hold, making
/// one cost several times the compression itself (a soak profile had allocation and page
/// zeroing for it above deflate's own work). A reused one only clears its hash table.
const POOLED: usize = 8;

/// Compressors at zlib's default level (6), at level 2 (large values), and decompressors.
static DEFAULT_LEVEL: Mutex<Vec<Compress>> = Mutex::new(Vec::new());
static FAST_LEVEL: Mutex<Vec<Compress>> = Mutex::new(Vec::new());
static INFLATERS: Mutex<Vec<Decompress>> = Mutex::new(Vec::new());

/// Takes an idle item of `pool`, or makes one.
fn take<T>(pool: &Mutex<Vec<T>>, make: impl FnOnce() -> T) -> T {
    pool.lock()
        .ok()
        .and_then(|mut p| p.pop())
        .unwrap_or_else(make)
}

/// Gives `item` back to `pool` (dropped when the pool is full).
fn give<T>(pool: &Mutex<Vec<T>>, item: T) {
    if let Ok(mut p) = pool.lock()
        && p.len() < POOLED
    {
        p.push(item);
    }
}

/// Appends the raw deflate stream of `input` to `out`; `None` when it fails or `out` would
/// grow past `limit` bytes.
fn deflate(c: &mut Compress, input: &[u8], out: &mut Vec<u8>, limit: usize) -> Option<()> {
    loop {
        let read = usize::try_from(c.total_in()).ok()?;
        let rest = input.get(read..)?;
        if out.len() == out.capacity() {
            if out.len() >= limit {
                return None;
            }
            out.reserve((limit - out.len()).min(out.capacity().max(256)));
        }
        let before = (c.total_in(), c.total_out());
        match c.compress_vec(rest, out, FlushCompress::Finish).ok()? {
            Status::StreamEnd => return (out.len() <= limit).then_some(()),
            // Room was made above; no progress with room left would loop for ever.
            Status::Ok | Status::BufError if (c.total_in(), c.total_out()) == before => {
                return None;
            }
            Status::Ok | Status::BufError => {}
        }
    }
}

/// `text` deflated behind [`MAGIC`], or `None` when it is small or would not shrink. Rows
/// below [`LARGE_BYTES`] take zlib's default level (6: a quarter smaller than level 1,
/// whose quick strategy compresses JSON poorly; tens of microseconds for a row); larger
/// values level 2.
pub(crate) fn pack(text: &str) -> Option<Vec<u8>> {
    if text.len() < PACK_MIN_BYTES {
        return None;
    }
    let (pool, level) = if text.len() < LARGE_BYTES {
        (&DEFAULT_LEVEL, Compression::default())
    } else {
        (&FAST_LEVEL, Compression::new(2))
    };
    let mut c = take(pool, || Compress::new(level, false));
    let mut out = Vec::with_capacity(text.len() / 3 + MAGIC.len());
    out.extend_from_slice(MAGIC);
    // Packed, it must be shorter than the text.
    let done = deflate(&mut c, text.as_bytes(), &mut out, text.len() - 1);
    c.reset();
    give(pool, c);
    done.map(|()| out)
}

/// The text of a packed value; `None` when `bytes` is not one.
pub(crate) fn unpack(bytes: &[u8]) -> Option<Result<String, String>> {
    let body = bytes.strip_prefix(MAGIC)?;
    let mut d = take(&INFLATERS, || Decompress::new(false));
    let out = inflate(&mut d, body);
    d.reset(false);
    give(&INFLATERS, d);
    Some(out.and_then(|raw| {
        String::from_utf8(raw).map_err(|_| "a packed value is not UTF-8 text".to_string())
    }))
}

fn inflate(d: &mut Decompress, body: &[u8]) -> Result<Vec<u8>, String> {
    let broken = |why: &dyn std::fmt::Display| format!("a packed value does not inflate: {why}");
    let mut out: Vec<u8> = Vec::with_capacity(body.len().saturating_mul(4).max(256));
    loop {
        let read = usize::try_from(d.total_in()).map_err(|e| broken(&e))?;
        let rest = body
            .get(read..)
            .ok_or_else(|| broken(&"read past its end"))?;
        if out.len() == out.capacity() {
            out.reserve(out.capacity());
        }
        let before = (d.total_in(), d.total_out());
        match d
            .decompress_vec(rest, &mut out, FlushDecompress::Finish)
            .map_err(|e| broken(&e))?
        {
            Status::StreamEnd => return Ok(out),
            // Room was made above: no progress means the stream ended early.
            Status::Ok | Status::BufError if (d.total_in(), d.total_out()) == before => {
                return Err(broken(&"it ends early"));
            }
            Status::Ok | Status::BufError => {}
        }
    }
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
        // Reused (de)compressors start clean: values of every size, packed and unpacked
        // in turn (a large one takes the faster level), read back exactly.
        for n in [20, 200, 5_000, 20_000, 10, 9_000] {
            let text = format!(
                "[{}]",
                "{\"role\": \"user\", \"n\": 12345},".repeat(n) + "0"
            );
            let packed = pack(&text).unwrap();
            assert!(packed.len() < text.len());
            assert_eq!(unpack(&packed).unwrap().unwrap(), text);
        }
        // Output that would outgrow its limit stops the compression.
        let mut c = Compress::new(Compression::default(), false);
        let mut out = Vec::new();
        assert_eq!(deflate(&mut c, text.as_bytes(), &mut out, 10), None);
        assert!(unpack(b"\0fz1 not deflate").unwrap().is_err());
    }
}
