//! [`Messages`]: the message list of a thread, of a model request and of a provider request.
//!
//! A thread's conversation grows by a few messages per step and is handed, unchanged, to
//! every step's model request, to the checkpoint that ends the step and to whatever keeps
//! the latest state. With a `Vec<Message>` each of those hand-overs copies every message,
//! so the cost of a step grows with the thread. `Messages` keeps the messages in immutable,
//! `Arc`-shared chunks of [`CHUNK_LEN`] plus a tail that takes the appends:
//!
//! * `clone()` copies one pointer per chunk, never a message;
//! * `push` is amortised O(1) (the tail is copied only if it is shared at that moment);
//! * replacing a message (same id, `add_messages`) copies only its chunk, and only when
//!   that chunk is shared;
//! * finding a message by id looks at one small hash index per chunk (built once, when it
//!   is first needed) and at the tail, not at every message.
//!
//! It serializes and deserializes exactly like `Vec<Message>` (a JSON array).

use crate::message::Message;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, OnceLock};

/// Messages per frozen chunk (the tail holds fewer). Chunks may hold fewer after an
/// insertion or a removal, never more than [`MAX_CHUNK_LEN`].
pub const CHUNK_LEN: usize = 32;
/// A chunk split by an insertion never exceeds this (the id index uses a 64-bit mask).
const MAX_CHUNK_LEN: usize = 64;

/// One frozen run of messages with lazily computed facts about them.
#[derive(Clone, Default)]
struct Chunk {
    msgs: Vec<Message>,
    /// Hash of each id → bitmask of the positions holding an id with that hash.
    ids: OnceLock<HashMap<u64, u64>>,
    /// Some message is a chunk or has no id (needs `normalize_messages`).
    needs_fixing: OnceLock<bool>,
}

impl Chunk {
    fn new(msgs: Vec<Message>) -> Chunk {
        Chunk {
            msgs,
            ids: OnceLock::new(),
            needs_fixing: OnceLock::new(),
        }
    }

    fn ids(&self) -> &HashMap<u64, u64> {
        self.ids.get_or_init(|| {
            let mut map: HashMap<u64, u64> = HashMap::with_capacity(self.msgs.len());
            for (i, m) in self.msgs.iter().enumerate() {
                *map.entry(id_hash(id_of(m))).or_default() |= 1u64 << i;
            }
            map
        })
    }

    /// Position of the last message with id `id`.
    fn rfind_id(&self, id: &str, hash: u64) -> Option<usize> {
        let mut mask = *self.ids().get(&hash)?;
        while mask != 0 {
            let i = 63 - mask.leading_zeros() as usize;
            if self.msgs.get(i).is_some_and(|m| id_of(m) == id) {
                return Some(i);
            }
            mask &= !(1u64 << i);
        }
        None
    }

    fn needs_fixing(&self) -> bool {
        *self
            .needs_fixing
            .get_or_init(|| self.msgs.iter().any(needs_fixing))
    }

    /// Forgets the cached facts (after a mutation that may change ids).
    fn invalidate(&mut self) {
        self.ids = OnceLock::new();
        self.needs_fixing = OnceLock::new();
    }
}

pub(crate) fn id_of(m: &Message) -> &str {
    m.id.as_deref().unwrap_or_default()
}

/// What `add_messages` fixes first: chunks and messages without an id.
pub(crate) fn needs_fixing(m: &Message) -> bool {
    m.is_chunk() || m.id.as_deref().is_none_or(str::is_empty)
}

/// Copies of the messages whose `mask` entry is true, in order.
fn kept_by_mask(msgs: &[Message], mask: Vec<bool>) -> Vec<Message> {
    msgs.iter()
        .zip(mask)
        .filter(|(_, k)| *k)
        .map(|(m, _)| m.clone())
        .collect()
}

fn id_hash(id: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

/// An append-friendly, cheaply clonable list of messages. See the [module docs](self).
#[derive(Clone, Default)]
pub struct Messages {
    chunks: Vec<Arc<Chunk>>,
    /// `ends[k]`: number of messages in `chunks[..=k]`.
    ends: Vec<usize>,
    /// The newest messages (fewer than [`CHUNK_LEN`]); appends go here.
    tail: Arc<Vec<Message>>,
}

impl Messages {
    pub fn new() -> Messages {
        Messages::default()
    }

    fn frozen_len(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    pub fn len(&self) -> usize {
        self.frozen_len() + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Segment `k` (the chunks, then the tail).
    fn segment(&self, k: usize) -> &[Message] {
        match self.chunks.get(k) {
            Some(c) => &c.msgs,
            None => &self.tail,
        }
    }

    /// (segment, offset) of index `i < len`.
    fn locate(&self, i: usize) -> (usize, usize) {
        let frozen = self.frozen_len();
        if i >= frozen {
            return (self.chunks.len(), i - frozen);
        }
        let k = self.ends.partition_point(|&e| e <= i);
        let start = if k == 0 { 0 } else { self.ends[k - 1] };
        (k, i - start)
    }

    pub fn get(&self, i: usize) -> Option<&Message> {
        if i >= self.len() {
            return None;
        }
        let (k, off) = self.locate(i);
        self.segment(k).get(off)
    }

    pub fn first(&self) -> Option<&Message> {
        self.get(0)
    }

    pub fn last(&self) -> Option<&Message> {
        match self.tail.last() {
            Some(m) => Some(m),
            None => self.chunks.last().and_then(|c| c.msgs.last()),
        }
    }

    /// A mutable reference to message `i`; copies its chunk first if it is shared.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut Message> {
        if i >= self.len() {
            return None;
        }
        let (k, off) = self.locate(i);
        if k == self.chunks.len() {
            return Arc::make_mut(&mut self.tail).get_mut(off);
        }
        let chunk = Arc::make_mut(&mut self.chunks[k]);
        chunk.invalidate();
        chunk.msgs.get_mut(off)
    }

    pub fn last_mut(&mut self) -> Option<&mut Message> {
        let n = self.len();
        if n == 0 {
            return None;
        }
        self.get_mut(n - 1)
    }

    /// Replaces message `i` (copying its chunk first if it is shared) and returns the old
    /// one; `None` (and nothing changes) when `i` is out of range.
    pub fn replace(&mut self, i: usize, m: Message) -> Option<Message> {
        if i >= self.len() {
            return None;
        }
        let (k, off) = self.locate(i);
        if k == self.chunks.len() {
            let slot = Arc::make_mut(&mut self.tail).get_mut(off)?;
            return Some(std::mem::replace(slot, m));
        }
        let chunk = Arc::make_mut(&mut self.chunks[k]);
        let same_id = chunk
            .msgs
            .get(off)
            .is_some_and(|old| id_of(old) == id_of(&m));
        let fixing = needs_fixing(&m);
        let old = std::mem::replace(chunk.msgs.get_mut(off)?, m);
        if !same_id {
            chunk.ids = OnceLock::new();
        }
        if fixing || needs_fixing(&old) {
            chunk.needs_fixing = OnceLock::new();
        }
        Some(old)
    }

    /// Appends a message.
    pub fn push(&mut self, m: Message) {
        let tail = Arc::make_mut(&mut self.tail);
        tail.push(m);
        if tail.len() >= CHUNK_LEN {
            self.freeze_tail();
        }
    }

    /// Turns the tail (if not empty) into a frozen chunk.
    fn freeze_tail(&mut self) {
        if self.tail.is_empty() {
            return;
        }
        let tail = std::mem::take(&mut self.tail);
        let msgs = Arc::try_unwrap(tail).unwrap_or_else(|shared| (*shared).clone());
        self.push_chunk(Arc::new(Chunk::new(msgs)));
    }

    /// Appends a frozen chunk after the frozen ones (the tail must be empty).
    fn push_chunk(&mut self, chunk: Arc<Chunk>) {
        if chunk.msgs.is_empty() {
            return;
        }
        let end = self.frozen_len() + chunk.msgs.len();
        self.chunks.push(chunk);
        self.ends.push(end);
    }

    fn rebuild_ends(&mut self) {
        self.chunks.retain(|c| !c.msgs.is_empty());
        let mut total = 0;
        self.ends.clear();
        for c in &self.chunks {
            total += c.msgs.len();
            self.ends.push(total);
        }
    }

    pub fn clear(&mut self) {
        *self = Messages::new();
    }

    /// `m` followed by `rest`; shares `rest`'s chunks (O(chunks), no message copied).
    pub fn prepended(m: Message, rest: &Messages) -> Messages {
        let mut out = Messages::new();
        out.push_chunk(Arc::new(Chunk::new(vec![m])));
        for c in &rest.chunks {
            out.push_chunk(c.clone());
        }
        out.tail = rest.tail.clone();
        out
    }

    /// Inserts `m` at index `i` (`i <= len`), shifting the later messages.
    ///
    /// # Panics
    /// When `i > len`, like `Vec::insert`.
    pub fn insert(&mut self, i: usize, m: Message) {
        let n = self.len();
        assert!(i <= n, "insertion index (is {i}) should be <= len (is {n})");
        if i == n {
            self.push(m);
            return;
        }
        let (k, off) = self.locate(i);
        if k == self.chunks.len() {
            Arc::make_mut(&mut self.tail).insert(off, m);
            if self.tail.len() >= CHUNK_LEN {
                self.freeze_tail();
            }
            return;
        }
        let chunk = Arc::make_mut(&mut self.chunks[k]);
        chunk.msgs.insert(off, m);
        chunk.invalidate();
        if chunk.msgs.len() > MAX_CHUNK_LEN {
            let second = chunk.msgs.split_off(chunk.msgs.len() / 2);
            self.chunks.insert(k + 1, Arc::new(Chunk::new(second)));
        }
        self.rebuild_ends();
    }

    /// Keeps the messages for which `keep` is true (called once per message, in order).
    /// Chunks that lose nothing stay shared; only the chunks that lose a message are
    /// rebuilt (consecutive rebuilt chunks are merged while they fit in one chunk).
    pub fn retain(&mut self, mut keep: impl FnMut(&Message) -> bool) {
        let mut chunks: Vec<Arc<Chunk>> = Vec::with_capacity(self.chunks.len());
        // Whether the last chunk of `chunks` was built here (so it may take more messages).
        let mut last_is_new = false;
        let mut changed = false;
        for c in &self.chunks {
            let mask: Vec<bool> = c.msgs.iter().map(&mut keep).collect();
            if mask.iter().all(|k| *k) {
                chunks.push(c.clone());
                last_is_new = false;
                continue;
            }
            changed = true;
            let kept = kept_by_mask(&c.msgs, mask);
            if kept.is_empty() {
                continue;
            }
            match chunks.last_mut() {
                Some(prev) if last_is_new && prev.msgs.len() + kept.len() <= CHUNK_LEN => {
                    let prev = Arc::make_mut(prev);
                    prev.msgs.extend(kept);
                    prev.invalidate();
                }
                _ => {
                    chunks.push(Arc::new(Chunk::new(kept)));
                    last_is_new = true;
                }
            }
        }
        let tail_mask: Vec<bool> = self.tail.iter().map(&mut keep).collect();
        if tail_mask.iter().any(|k| !*k) {
            self.tail = Arc::new(kept_by_mask(&self.tail, tail_mask));
        }
        if changed {
            self.chunks = chunks;
            self.rebuild_ends();
        }
    }

    /// Index of the last message whose id is `id` (a message without id has id `""`).
    pub fn rfind_id(&self, id: &str) -> Option<usize> {
        if let Some(i) = self.tail.iter().rposition(|m| id_of(m) == id) {
            return Some(self.frozen_len() + i);
        }
        let hash = id_hash(id);
        for (k, c) in self.chunks.iter().enumerate().rev() {
            if let Some(off) = c.rfind_id(id, hash) {
                let start = if k == 0 { 0 } else { self.ends[k - 1] };
                return Some(start + off);
            }
        }
        None
    }

    /// True when some message is a chunk or has no id (cached per frozen chunk).
    pub fn any_needs_fixing(&self) -> bool {
        self.tail.iter().any(needs_fixing) || self.chunks.iter().any(|c| c.needs_fixing())
    }

    /// Applies `f` to every message of the segments that hold a message for which
    /// `needs_fixing` is true (copying those chunks if shared).
    pub(crate) fn fix_with(&mut self, f: impl Fn(&mut [Message])) {
        for c in self.chunks.iter_mut() {
            if c.needs_fixing() {
                let chunk = Arc::make_mut(c);
                f(&mut chunk.msgs);
                chunk.invalidate();
            }
        }
        if self.tail.iter().any(needs_fixing) {
            f(Arc::make_mut(&mut self.tail).as_mut_slice());
        }
    }

    pub fn iter(&self) -> Iter<'_> {
        self.range(..)
    }

    /// The messages in `range` (clamped to the list), in order.
    pub fn range(&self, range: impl RangeBounds<usize>) -> Iter<'_> {
        let n = self.len();
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        }
        .min(n);
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => n,
        }
        .min(n);
        let mut it = Iter {
            list: self,
            front: [].iter(),
            back: [].iter(),
            next_seg: 0,
            back_seg: 0,
            remaining: 0,
        };
        if start >= end {
            return it;
        }
        let (ks, os) = self.locate(start);
        let (ke, oe) = self.locate(end - 1);
        it.remaining = end - start;
        if ks == ke {
            it.front = self.segment(ks)[os..=oe].iter();
            return it;
        }
        it.front = self.segment(ks)[os..].iter();
        it.back = self.segment(ke)[..=oe].iter();
        it.next_seg = ks + 1;
        it.back_seg = ke;
        it
    }

    pub fn to_vec(&self) -> Vec<Message> {
        self.iter().cloned().collect()
    }

    /// The messages as a `Vec`, moving them out of chunks nothing else shares.
    pub fn into_vec(self) -> Vec<Message> {
        let mut out = Vec::with_capacity(self.len());
        for c in self.chunks {
            match Arc::try_unwrap(c) {
                Ok(c) => out.extend(c.msgs),
                Err(shared) => out.extend(shared.msgs.iter().cloned()),
            }
        }
        match Arc::try_unwrap(self.tail) {
            Ok(t) => out.extend(t),
            Err(shared) => out.extend(shared.iter().cloned()),
        }
        out
    }

    /// True when both lists share the same storage (a clone not modified since).
    pub fn ptr_eq(&self, other: &Messages) -> bool {
        Arc::ptr_eq(&self.tail, &other.tail)
            && self.chunks.len() == other.chunks.len()
            && self
                .chunks
                .iter()
                .zip(&other.chunks)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

/// Iterator over a range of [`Messages`]: double-ended and exact-size.
#[derive(Clone)]
pub struct Iter<'a> {
    list: &'a Messages,
    front: std::slice::Iter<'a, Message>,
    back: std::slice::Iter<'a, Message>,
    /// Segments `next_seg..back_seg` are between `front` and `back`, not yet started.
    next_seg: usize,
    back_seg: usize,
    remaining: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Message;

    fn next(&mut self) -> Option<&'a Message> {
        loop {
            if let Some(m) = self.front.next() {
                self.remaining -= 1;
                return Some(m);
            }
            if self.next_seg < self.back_seg {
                self.front = self.list.segment(self.next_seg).iter();
                self.next_seg += 1;
            } else {
                let m = self.back.next()?;
                self.remaining -= 1;
                return Some(m);
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(m) = self.back.next_back() {
                self.remaining -= 1;
                return Some(m);
            }
            if self.next_seg < self.back_seg {
                self.back_seg -= 1;
                self.back = self.list.segment(self.back_seg).iter();
            } else {
                let m = self.front.next_back()?;
                self.remaining -= 1;
                return Some(m);
            }
        }
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl std::iter::FusedIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a Message;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for Messages {
    type Item = Message;
    type IntoIter = std::vec::IntoIter<Message>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

impl From<Vec<Message>> for Messages {
    fn from(v: Vec<Message>) -> Messages {
        v.into_iter().collect()
    }
}

impl From<&[Message]> for Messages {
    fn from(v: &[Message]) -> Messages {
        v.iter().cloned().collect()
    }
}

impl<const N: usize> From<[Message; N]> for Messages {
    fn from(v: [Message; N]) -> Messages {
        v.into_iter().collect()
    }
}

impl From<Messages> for Vec<Message> {
    fn from(m: Messages) -> Vec<Message> {
        m.into_vec()
    }
}

impl FromIterator<Message> for Messages {
    fn from_iter<I: IntoIterator<Item = Message>>(iter: I) -> Messages {
        let mut out = Messages::new();
        out.extend(iter);
        out
    }
}

impl Extend<Message> for Messages {
    fn extend<I: IntoIterator<Item = Message>>(&mut self, iter: I) {
        for m in iter {
            self.push(m);
        }
    }
}

impl<'a> Extend<&'a Message> for Messages {
    fn extend<I: IntoIterator<Item = &'a Message>>(&mut self, iter: I) {
        for m in iter {
            self.push(m.clone());
        }
    }
}

impl std::ops::Index<usize> for Messages {
    type Output = Message;

    /// # Panics
    /// When `i` is out of range, like a slice.
    fn index(&self, i: usize) -> &Message {
        match self.get(i) {
            Some(m) => m,
            None => panic!(
                "index out of bounds: the len is {} but the index is {i}",
                self.len()
            ),
        }
    }
}

impl PartialEq for Messages {
    fn eq(&self, other: &Messages) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .zip(other.iter())
                .all(|(a, b)| std::ptr::eq(a, b) || a == b)
    }
}

impl PartialEq<[Message]> for Messages {
    fn eq(&self, other: &[Message]) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a == b)
    }
}

impl PartialEq<Vec<Message>> for Messages {
    fn eq(&self, other: &Vec<Message>) -> bool {
        self == other.as_slice()
    }
}

impl PartialEq<Messages> for Vec<Message> {
    fn eq(&self, other: &Messages) -> bool {
        other == self.as_slice()
    }
}

impl std::fmt::Debug for Messages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Messages {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<Message>::deserialize(d).map(Messages::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageKind;
    use proptest::prelude::*;
    use serde_json::json;

    fn msg(i: usize) -> Message {
        Message::human(format!("m{i}")).with_id(format!("id{i}"))
    }

    fn list(n: usize) -> Messages {
        (0..n).map(msg).collect()
    }

    #[test]
    fn serde_matches_vec() {
        for n in [0, 1, 31, 32, 33, 70] {
            let v: Vec<Message> = (0..n).map(msg).collect();
            let m = Messages::from(v.clone());
            assert_eq!(
                serde_json::to_string(&m).unwrap(),
                serde_json::to_string(&v).unwrap()
            );
            let back: Messages = serde_json::from_value(serde_json::to_value(&v).unwrap()).unwrap();
            assert_eq!(back, v);
            assert_eq!(back.len(), n);
        }
        let empty: Messages = serde_json::from_value(json!([])).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn push_across_chunk_boundaries() {
        let mut m = Messages::new();
        for i in 0..(3 * CHUNK_LEN + 5) {
            m.push(msg(i));
            assert_eq!(m.len(), i + 1);
            assert_eq!(m.last(), Some(&msg(i)));
            assert_eq!(m[i], msg(i));
        }
        assert_eq!(m.chunks.len(), 3);
        assert_eq!(m.tail.len(), 5);
        assert_eq!(
            m.to_vec(),
            (0..(3 * CHUNK_LEN + 5)).map(msg).collect::<Vec<_>>()
        );
        assert_eq!(m.iter().next_back(), Some(&msg(3 * CHUNK_LEN + 4)));
        assert_eq!(m.iter().len(), 3 * CHUNK_LEN + 5);
        let mid: Vec<_> = m.range(30..40).cloned().collect();
        assert_eq!(mid, (30..40).map(msg).collect::<Vec<_>>());
        let (from, to) = (40, 30);
        assert_eq!(m.range(from..to).len(), 0);
        assert_eq!(m.range(100..).len(), 1);
    }

    #[test]
    fn replace_in_old_chunk_does_not_touch_a_clone() {
        let mut a = list(100);
        let b = a.clone();
        assert!(a.ptr_eq(&b));
        let i = a.rfind_id("id3").unwrap();
        assert_eq!(i, 3);
        let old = a.replace(i, Message::ai("new").with_id("id3")).unwrap();
        assert_eq!(old, msg(3));
        assert_eq!(a[3].text(), "new");
        assert_eq!(b[3], msg(3));
        // Only the first chunk was copied.
        assert!(!Arc::ptr_eq(&a.chunks[0], &b.chunks[0]));
        assert!(Arc::ptr_eq(&a.chunks[1], &b.chunks[1]));
        // The id index still finds everything, and a changed id is found under its new name.
        assert_eq!(a.rfind_id("id3"), Some(3));
        a.replace(5, Message::ai("renamed").with_id("other"));
        assert_eq!(a.rfind_id("id5"), None);
        assert_eq!(a.rfind_id("other"), Some(5));
        assert_eq!(a.rfind_id("id99"), Some(99));
        assert_eq!(a.rfind_id("nope"), None);
    }

    #[test]
    fn rfind_id_finds_the_last_duplicate() {
        let mut m = list(40);
        m.push(msg(2));
        assert_eq!(m.rfind_id("id2"), Some(40));
        for _ in 0..40 {
            m.push(Message::human("x").with_id("dup"));
        }
        assert_eq!(m.rfind_id("dup"), Some(80));
        assert_eq!(m.rfind_id("id2"), Some(40));
    }

    #[test]
    fn remove_by_id_and_remove_all() {
        let mut a = list(70);
        let b = a.clone();
        a.retain(|m| m.id.as_deref() != Some("id40"));
        assert_eq!(a.len(), 69);
        assert_eq!(a.rfind_id("id40"), None);
        assert_eq!(a[40], msg(41));
        assert_eq!(b.len(), 70);
        // Only the chunk that lost a message was rebuilt.
        assert!(Arc::ptr_eq(&a.chunks[0], &b.chunks[0]));
        assert!(!Arc::ptr_eq(&a.chunks[1], &b.chunks[1]));
        assert!(Arc::ptr_eq(&a.tail, &b.tail));
        // Removing the first message (a leading system message, say) copies one chunk.
        let mut c = b.clone();
        c.retain(|m| m.id.as_deref() != Some("id0"));
        assert_eq!(c.len(), 69);
        assert_eq!(c[0], msg(1));
        assert!(Arc::ptr_eq(&c.chunks[1], &b.chunks[1]));
        a.clear();
        assert!(a.is_empty());
        assert_eq!(a.last(), None);
        assert_eq!(b[40], msg(40));
    }

    #[test]
    fn insert_and_prepend() {
        let mut m = list(70);
        m.insert(0, Message::system("s"));
        m.insert(35, Message::system("t"));
        m.insert(m.len(), Message::system("u"));
        assert_eq!(m.len(), 73);
        assert_eq!(m[0].kind, MessageKind::System);
        assert_eq!(m[35].text(), "t");
        assert_eq!(m[36], msg(34));
        let p = Messages::prepended(Message::system("p"), &m);
        assert_eq!(p.len(), 74);
        assert_eq!(p[0].text(), "p");
        assert_eq!(p.range(1..).cloned().collect::<Vec<_>>(), m.to_vec());
    }

    #[test]
    fn needs_fixing_is_tracked() {
        let mut m = list(40);
        assert!(!m.any_needs_fixing());
        m.push(Message::human("no id"));
        assert!(m.any_needs_fixing());
        let mut n = list(40);
        if let Some(x) = n.get_mut(3) {
            x.id = None;
        }
        assert!(n.any_needs_fixing());
        n.fix_with(crate::state::normalize_messages);
        assert!(!n.any_needs_fixing());
        assert!(n[3].id.is_some());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Push(u8),
        Replace(u8, u8),
        Remove(u8),
        Insert(u16, u8),
        Clone,
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => any::<u8>().prop_map(Op::Push),
            3 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::Replace(a, b)),
            2 => any::<u8>().prop_map(Op::Remove),
            1 => (any::<u16>(), any::<u8>()).prop_map(|(a, b)| Op::Insert(a, b)),
            2 => Just(Op::Clone),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Every operation agrees with a plain `Vec`, and clones never see later changes.
        #[test]
        fn behaves_like_a_vec(ops in prop::collection::vec(op(), 0..300)) {
            let mut m = Messages::new();
            let mut v: Vec<Message> = Vec::new();
            let mut snapshots: Vec<(Messages, Vec<Message>)> = Vec::new();
            for (step, o) in ops.into_iter().enumerate() {
                match o {
                    Op::Push(id) => {
                        let x = Message::human(format!("p{step}")).with_id(format!("id{id}"));
                        m.push(x.clone());
                        v.push(x);
                    }
                    Op::Replace(id, text) => {
                        let id = format!("id{id}");
                        let want = v.iter().rposition(|x| x.id.as_deref() == Some(id.as_str()));
                        prop_assert_eq!(m.rfind_id(&id), want);
                        if let Some(i) = want {
                            let x = Message::ai(format!("r{text}")).with_id(id);
                            m.replace(i, x.clone());
                            v[i] = x;
                        }
                    }
                    Op::Remove(id) => {
                        let id = format!("id{id}");
                        m.retain(|x| x.id.as_deref() != Some(id.as_str()));
                        v.retain(|x| x.id.as_deref() != Some(id.as_str()));
                    }
                    Op::Insert(at, id) => {
                        let at = usize::from(at) % (v.len() + 1);
                        let x = Message::system(format!("i{step}")).with_id(format!("id{id}"));
                        m.insert(at, x.clone());
                        v.insert(at, x);
                    }
                    Op::Clone => snapshots.push((m.clone(), v.clone())),
                    Op::Clear => {
                        m.clear();
                        v.clear();
                    }
                }
                prop_assert_eq!(m.len(), v.len());
                prop_assert_eq!(m.last(), v.last());
            }
            prop_assert_eq!(&m, &v);
            prop_assert_eq!(m.iter().rev().cloned().collect::<Vec<_>>(),
                v.iter().rev().cloned().collect::<Vec<_>>());
            for i in 0..v.len() {
                prop_assert_eq!(&m[i], &v[i]);
                prop_assert_eq!(m.range(i..).len(), v.len() - i);
                prop_assert_eq!(m.range(..i).next_back(), i.checked_sub(1).map(|j| &v[j]));
            }
            prop_assert_eq!(serde_json::to_value(&m).unwrap(), serde_json::to_value(&v).unwrap());
            for (sm, sv) in snapshots {
                prop_assert_eq!(&sm, &sv);
            }
        }
    }
}
