//! [`NameTable`]: how a key path of an input record finds its column.
//!
//! Owned by one [`super::RowEncoder`] (so by one lane thread), built once
//! per schema and read per key of every message; no allocation per lookup.
//! The one shared rule for every input format (JSON today; Avro, Protobuf
//! and CSV decoders resolve their field paths through the same table, see
//! [`super::RowEncoder::resolve_path`]):
//!
//! - a path is its keys joined by `.`: `{"user": {"id": 7}}` is `user.id`,
//!   the way `input_format_import_nested_json` names it, at any depth;
//! - an exact column name wins (`user` String takes the object as text even
//!   if `user.id` exists);
//! - a prefix of dotted column names is [`PathTarget::Descend`]: the decoder
//!   walks into the object;
//! - the prefix of a Nested column's arrays (`n` for `n.x`, `n.y`) is
//!   [`PathTarget::Nested`]: an array of objects there fills those arrays;
//! - a rename (`user_id = "/user/id"`) adds the pointer's path for that
//!   column and takes the column's own name away;
//! - metadata names (`_topic`, `_offset`, ...) are [`PathTarget::Ignore`]d.

/// What a key path is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathTarget {
    /// The value of insert column `.0`.
    Column(u32),
    /// A metadata column's name: spate fills it, the key is ignored.
    Ignore,
    /// A prefix of dotted columns: walk into the object.
    Descend,
    /// The prefix of Nested group `.0`: an array of objects fills its
    /// arrays; an object is walked into.
    Nested(u32),
}

const EMPTY: u32 = u32::MAX;

/// Open-addressing hash table from a key path to its [`PathTarget`].
#[derive(Debug, Default)]
pub(crate) struct NameTable {
    /// (hash, entry index), `EMPTY` = free; at most 25% full.
    slots: Vec<(u64, u32)>,
    entries: Vec<(Box<[u8]>, PathTarget)>,
}

/// A key's hash: eight bytes at a time (keys are short; FNV's byte-serial
/// multiply was a tenth of the encoder's time), mixed so that the low bits
/// the table indexes by depend on every byte.
#[inline]
fn hash(b: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = (b.len() as u64).wrapping_mul(K);
    let mut words = b.chunks_exact(8);
    for w in &mut words {
        let mut x = [0u8; 8];
        x.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(x)).wrapping_mul(K).rotate_left(31);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut x = [0u8; 8];
        x[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(x)).wrapping_mul(K);
    }
    h ^ (h >> 29) ^ (h >> 47)
}

/// `a == b` for short keys without a call to `memcmp`: two overlapping
/// word loads cover 4..=16 bytes, three byte loads 1..=3.
#[inline]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let w8 = |s: &[u8], at: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&s[at..at + 8]);
        u64::from_ne_bytes(x)
    };
    let w4 = |s: &[u8], at: usize| {
        let mut x = [0u8; 4];
        x.copy_from_slice(&s[at..at + 4]);
        u32::from_ne_bytes(x)
    };
    match n {
        0 => true,
        // First, middle and last byte cover all of 1 to 3 bytes.
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => w4(a, 0) == w4(b, 0) && w4(a, n - 4) == w4(b, n - 4),
        8..=16 => w8(a, 0) == w8(b, 0) && w8(a, n - 8) == w8(b, n - 8),
        _ => a == b,
    }
}

/// A guess of which entry the next key is: messages of one topic mostly
/// repeat their keys in the same order, so the `n`-th key of a message is
/// likely the entry the `n`-th key of the last message was. A hit costs one
/// comparison instead of a hash and a probe. Owned per encoder, reset per
/// message with [`Hints::restart`].
#[derive(Debug, Default)]
pub(crate) struct Hints {
    by_position: Vec<u32>,
    next: usize,
}

/// Keys per message whose entries are remembered; later ones are looked up.
const MAX_HINTS: usize = 1024;

impl Hints {
    /// Start a new message.
    #[inline]
    pub(crate) fn restart(&mut self) {
        self.next = 0;
    }
}

impl NameTable {
    /// A table of `entries`; the first entry of a name wins.
    pub(crate) fn build(entries: impl IntoIterator<Item = (Vec<u8>, PathTarget)>) -> NameTable {
        let mut kept: Vec<(Box<[u8]>, PathTarget)> = Vec::new();
        for (name, target) in entries {
            if !kept.iter().any(|(n, _)| **n == *name) {
                kept.push((name.into_boxed_slice(), target));
            }
        }
        let size = (kept.len() * 4).next_power_of_two().max(8);
        let mut slots = vec![(0u64, EMPTY); size];
        let mask = size - 1;
        for (i, (name, _)) in kept.iter().enumerate() {
            let h = hash(name);
            let mut s = (h as usize) & mask;
            while slots[s].1 != EMPTY {
                s = (s + 1) & mask;
            }
            // Entries are bounded by the table's columns and their
            // prefixes: far below u32::MAX.
            slots[s] = (h, i as u32);
        }
        NameTable {
            slots,
            entries: kept,
        }
    }

    /// The target of `path` (keys joined by `.`), if any.
    #[inline]
    pub(crate) fn get(&self, path: &[u8]) -> Option<PathTarget> {
        self.find(path).map(|i| self.entries[i as usize].1)
    }

    /// [`get`](Self::get) for the next key of a message, trying the entry
    /// `hints` expects first.
    #[inline]
    pub(crate) fn get_hinted(&self, path: &[u8], hints: &mut Hints) -> Option<PathTarget> {
        let at = hints.next;
        hints.next += 1;
        if let Some(&i) = hints.by_position.get(at) {
            if let Some((name, target)) = self.entries.get(i as usize) {
                if same_key(name, path) {
                    return Some(*target);
                }
            }
        }
        let found = self.find(path);
        if at < MAX_HINTS {
            if hints.by_position.len() <= at {
                // Grows once per position, on the first messages only.
                hints.by_position.resize(at + 1, EMPTY);
            }
            hints.by_position[at] = found.unwrap_or(EMPTY);
        }
        found.map(|i| self.entries[i as usize].1)
    }

    /// The entry index of `path`.
    #[inline]
    fn find(&self, path: &[u8]) -> Option<u32> {
        let mask = self.slots.len().checked_sub(1)?;
        let h = hash(path);
        let mut s = (h as usize) & mask;
        loop {
            let (eh, idx) = self.slots[s];
            if idx == EMPTY {
                return None;
            }
            if eh == h && same_key(&self.entries[idx as usize].0, path) {
                return Some(idx);
            }
            s = (s + 1) & mask;
        }
    }
}

/// The path of a JSON pointer (RFC 6901: `/user/id`, `~1` = `/`, `~0` =
/// `~`) as keys joined by `.`; `None` if it is not a pointer to a member.
pub(crate) fn pointer_path(pointer: &str) -> Option<Vec<u8>> {
    let rest = pointer.strip_prefix('/')?;
    let mut path = Vec::new();
    for (i, token) in rest.split('/').enumerate() {
        if token.is_empty() {
            return None;
        }
        if i > 0 {
            path.push(b'.');
        }
        path.extend_from_slice(token.replace("~1", "/").replace("~0", "~").as_bytes());
    }
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_first_entry_wins_and_misses() {
        let t = NameTable::build([
            (b"a".to_vec(), PathTarget::Column(0)),
            (b"user".to_vec(), PathTarget::Descend),
            (b"user.id".to_vec(), PathTarget::Column(1)),
            (b"a".to_vec(), PathTarget::Descend),
            (b"n".to_vec(), PathTarget::Nested(0)),
        ]);
        assert_eq!(t.get(b"a"), Some(PathTarget::Column(0)));
        assert_eq!(t.get(b"user"), Some(PathTarget::Descend));
        assert_eq!(t.get(b"user.id"), Some(PathTarget::Column(1)));
        assert_eq!(t.get(b"n"), Some(PathTarget::Nested(0)));
        assert_eq!(t.get(b"user.i"), None);
        assert_eq!(t.get(b""), None);
        assert_eq!(NameTable::default().get(b"a"), None);
        let many = NameTable::build(
            (0..500).map(|i| (format!("c{i}").into_bytes(), PathTarget::Column(i))),
        );
        assert!(
            (0..500).all(|i| many.get(format!("c{i}").as_bytes()) == Some(PathTarget::Column(i)))
        );
    }

    #[test]
    fn hinted_lookups_agree_with_plain_ones() {
        let names: Vec<Vec<u8>> = [
            "a",
            "ab",
            "abc",
            "abcd",
            "abcde",
            "user_id",
            "duration_ms",
            "exactly8",
            "sixteen_bytes_ok",
            "seventeen_bytes_x",
            "a.b",
            "c99",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let t = NameTable::build(
            names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.clone(), PathTarget::Column(i as u32))),
        );
        let mut hints = Hints::default();
        // The same order twice (hits), then shuffled (misses), then keys
        // that differ from a hinted one only in their last byte or length.
        let probes: Vec<&[u8]> = vec![b"user_id", b"abcd", b"sixteen_bytes_ok", b"zz", b"a.b"];
        let near: Vec<&[u8]> = vec![b"user_ie", b"abc", b"sixteen_bytes_oK", b"zz", b"a.b."];
        for round in [&probes, &probes, &near, &probes] {
            hints.restart();
            for p in round.iter() {
                assert_eq!(
                    t.get_hinted(p, &mut hints),
                    t.get(p),
                    "{:?}",
                    String::from_utf8_lossy(p)
                );
            }
        }
        for a in &names {
            for b in &names {
                assert_eq!(same_key(a, b), a == b);
            }
            let mut c = a.clone();
            *c.last_mut().unwrap() ^= 1;
            assert!(!same_key(a, &c));
            c = a.clone();
            c[0] ^= 1;
            assert!(!same_key(a, &c));
        }
    }

    #[test]
    fn pointers() {
        assert_eq!(pointer_path("/user/id").unwrap(), b"user.id");
        assert_eq!(pointer_path("/a~1b/c~0d").unwrap(), b"a/b.c~d");
        assert_eq!(pointer_path("/x").unwrap(), b"x");
        for bad in ["", "user/id", "/", "/a//b", "/a/"] {
            assert!(pointer_path(bad).is_none(), "{bad:?}");
        }
    }
}
