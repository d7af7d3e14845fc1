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

use flate2::{Decompress, FlushDecompress, Status};
use std::sync::Mutex;
use zlib_rs::{Deflate, DeflateConfig, DeflateFlush};

/// The first bytes of a packed value.
const MAGIC: &[u8] = b"\0fz1";
/// Smaller values stay text: below this, deflate saves a few dozen bytes at most. A step's
/// writes of one message (300-600 bytes of JSON) still shrink by a third.
pub(crate) const PACK_MIN_BYTES: usize = 256;

/// Idle compressors kept for reuse, per class. A deflate state is up to ~300 KiB of tables
/// that a new one allocates zeroed: for the few-hundred-byte values most rows hold, making
/// one cost several times the compression itself (a soak profile had allocation and page
/// zeroing for it above deflate's own work). A reused one clears its hash table and its
/// symbol buffer.
const POOLED: usize = 8;

/// A kind of compressor, for values shorter than `below` bytes.
///
/// The memory level sizes the symbol buffer (3 × 2^(level + 6) bytes), which a reused
/// compressor clears twice per value: 48 KiB at zlib's default level 8, next to the 128 KiB
/// hash table (fixed in zlib-rs) that it clears once. A value of fewer bytes than the buffer
/// holds symbols fits in one block at any memory level, so the small classes write exactly
/// the bytes the default level would (a test checks it); they only clear less.
struct Class {
    below: usize,
    level: i32,
    mem_level: i32,
    idle: Mutex<Vec<Deflate>>,
}

impl Class {
    const fn new(below: usize, level: i32, mem_level: i32) -> Class {
        Class {
            below,
            level,
            mem_level,
            idle: Mutex::new(Vec::new()),
        }
    }

    fn make(&self) -> Deflate {
        Deflate::new_with_config(DeflateConfig {
            level: self.level,
            // Negative: a raw deflate stream, no zlib header or checksum.
            window_bits: -15,
            mem_level: self.mem_level,
            ..DeflateConfig::default()
        })
    }
}

/// Symbols one block of memory level `m` holds before it is flushed: 2^(m + 6) − 1.
const fn block_symbols(mem_level: u32) -> usize {
    (1 << (mem_level + 6)) - 1
}

/// The classes, smallest first. Below 64 KiB compression level 6 (zlib's default: a quarter
/// smaller than level 1, whose quick strategy compresses JSON poorly; tens of microseconds
/// for a row); a whole state (a snapshot, the thread row's values) of a long thread is a
/// few hundred KiB, packed once per run's end, at compression level 2.
static CLASSES: [Class; 4] = [
    Class::new(block_symbols(4), 6, 4),
    Class::new(block_symbols(6), 6, 6),
    Class::new(64 * 1024, 6, 8),
    Class::new(usize::MAX, 2, 8),
];

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
fn deflate(c: &mut Deflate, input: &[u8], out: &mut Vec<u8>, limit: usize) -> Option<()> {
    // `out[..filled]` is written; the rest is room, zeroed (the safe API writes to slices).
    let mut filled = out.len();
    loop {
        let read = usize::try_from(c.total_in()).ok()?;
        let rest = input.get(read..)?;
        if filled == out.len() {
            if out.len() >= limit {
                return None;
            }
            let grow = (limit - out.len()).min(out.len().max(256));
            out.resize(out.len() + grow, 0);
        }
        let before = (c.total_in(), c.total_out());
        let status = c
            .compress(rest, out.get_mut(filled..)?, DeflateFlush::Finish)
            .ok()?;
        filled += usize::try_from(c.total_out() - before.1).ok()?;
        match status {
            zlib_rs::Status::StreamEnd => {
                out.truncate(filled);
                return (filled <= limit).then_some(());
            }
            // Room was made above; no progress with room left would loop for ever.
            _ if (c.total_in(), c.total_out()) == before => return None,
            _ => {}
        }
    }
}

/// `text` deflated behind [`MAGIC`], or `None` when it is small or would not shrink.
pub(crate) fn pack(text: &str) -> Option<Vec<u8>> {
    if text.len() < PACK_MIN_BYTES {
        return None;
    }
    let class = CLASSES.iter().find(|c| text.len() < c.below)?;
    let mut c = take(&class.idle, || class.make());
    let mut out = Vec::with_capacity(text.len() / 3 + MAGIC.len());
    out.extend_from_slice(MAGIC);
    // Packed, it must be shorter than the text.
    let done = deflate(&mut c, text.as_bytes(), &mut out, text.len() - 1);
    c.reset();
    give(&class.idle, c);
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
        let mut c = CLASSES[2].make();
        let mut out = Vec::new();
        assert_eq!(deflate(&mut c, text.as_bytes(), &mut out, 10), None);
        assert!(unpack(b"\0fz1 not deflate").unwrap().is_err());
    }

    /// Varied JSON-like ASCII text of `len` bytes (a fixed pseudo-random sequence).
    fn sample(len: usize, seed: u64) -> String {
        let words = [
            "role",
            "content",
            "assistant",
            "tool_calls",
            "id",
            "name",
            "args",
        ];
        let mut x = seed;
        let mut text = String::from("[");
        while text.len() < len {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let word = words[(x >> 33) as usize % words.len()];
            text.push_str(&format!(
                "{{\"{word}\": \"{:x}\", \"n\": {}}},",
                x >> 20,
                x % 977
            ));
        }
        text.truncate(len);
        text
    }

    #[test]
    fn small_classes_write_the_bytes_of_the_default_memory_level() {
        // Packing is deterministic per setting; a smaller memory level must not change what
        // is stored (the storage figures were measured with zlib's default, level 8).
        let mut reference = flate2::Compress::new(flate2::Compression::default(), false);
        for (i, len) in [
            256, 300, 700, 1000, 1022, 1023, 1500, 3000, 4094, 4095, 9000,
        ]
        .into_iter()
        .enumerate()
        {
            let text = sample(len, i as u64);
            let packed = pack(&text).unwrap();
            let mut want = Vec::with_capacity(len + 64);
            let status = reference
                .compress_vec(text.as_bytes(), &mut want, flate2::FlushCompress::Finish)
                .unwrap();
            assert_eq!(status, Status::StreamEnd);
            reference.reset();
            assert_eq!(&packed[MAGIC.len()..], &want[..], "length {len}");
            assert_eq!(unpack(&packed).unwrap().unwrap(), text);
        }
        // The classes below the default one take the smaller memory levels.
        let levels: Vec<i32> = CLASSES.iter().map(|c| c.mem_level).collect();
        assert_eq!(levels, [4, 6, 8, 8]);
    }
}
