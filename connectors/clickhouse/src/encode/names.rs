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

#[inline]
fn hash(b: &[u8]) -> u64 {
    // FNV-1a: short keys, no allocation, good enough spread for a table
    // that is at most 25% full.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &c in b {
        h ^= u64::from(c);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
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
        let mask = self.slots.len().checked_sub(1)?;
        let h = hash(path);
        let mut s = (h as usize) & mask;
        loop {
            let (eh, idx) = self.slots[s];
            if idx == EMPTY {
                return None;
            }
            if eh == h {
                let (name, target) = &self.entries[idx as usize];
                if **name == *path {
                    return Some(*target);
                }
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
    fn pointers() {
        assert_eq!(pointer_path("/user/id").unwrap(), b"user.id");
        assert_eq!(pointer_path("/a~1b/c~0d").unwrap(), b"a/b.c~d");
        assert_eq!(pointer_path("/x").unwrap(), b"x");
        for bad in ["", "user/id", "/", "/a//b", "/a/"] {
            assert!(pointer_path(bad).is_none(), "{bad:?}");
        }
    }
}
