//! Nested JSON for [`super::RowEncoder`]: the walk that records where each
//! column's value is (through objects, by dotted path), and the writer of
//! a Nested column's arrays from an array of objects.
//!
//! Runs on the encoder's lane thread, once per message; no allocation on
//! the success path (the path buffer is the encoder's and is reused).
//!
//! Nested rule (as ClickHouse's `input_format_import_nested_json`): the
//! columns `n.x Array(T)`, `n.y Array(U)` form group `n`. `{"n": [{"x": 1,
//! "y": 2}, {"x": 3}]}` gives `n.x = [1, 3]`, `n.y = [2, 0]` (a missing
//! member is its type's zero). `{"n": {"x": [1, 3], "y": [2]}}` or dotted
//! keys (`"n.x": [...]`) give each array as it is, and then arrays of one
//! group whose lengths differ are a bad message (ClickHouse would refuse
//! the whole insert); an array the message lacks gets as many zeros as its
//! siblings have elements.

use super::json::{for_each_item, for_each_member, unescape_into, Walk};
use super::names::{Hints, NameTable, PathTarget};
use super::value::write_value;
use crate::rowbinary::{fail, leb128, write_zero, Fail};
use crate::types::ChType;

/// A span of the payload: `(start, end)` byte offsets.
pub(crate) type Span = (usize, usize);

/// Why a key could not be placed: the raw text to show and the reason.
pub(crate) type KeyFail<'a> = (&'a [u8], String);

/// One pass over a message: records the span of every known path's value.
pub(crate) struct Scan<'s> {
    pub(crate) names: &'s NameTable,
    /// The key order of the last message (see [`Hints`]).
    pub(crate) hints: &'s mut Hints,
    pub(crate) spans: &'s mut [Option<Span>],
    pub(crate) group_spans: &'s mut [Option<Span>],
    pub(crate) path: &'s mut Vec<u8>,
    pub(crate) strict: bool,
    /// Address of the payload's first byte.
    pub(crate) base: usize,
}

impl Scan<'_> {
    fn span(&self, val: &[u8]) -> Span {
        let s = val.as_ptr() as usize - self.base;
        (s, s + val.len())
    }

    /// Place the value of key `name` (or, for `None`, of the path in the
    /// path buffer).
    pub(crate) fn key<'a>(
        &mut self,
        name: Option<&[u8]>,
        val: &'a [u8],
        depth: usize,
    ) -> Result<(), KeyFail<'a>> {
        let target = match name {
            Some(n) => self.names.get_hinted(n, self.hints),
            None => self.names.get_hinted(self.path, self.hints),
        };
        let first = val.first().copied();
        match target {
            Some(PathTarget::Column(i)) => self.spans[i as usize] = Some(self.span(val)),
            Some(PathTarget::Nested(g)) if first == Some(b'[') => {
                self.group_spans[g as usize] = Some(self.span(val));
            }
            Some(PathTarget::Descend | PathTarget::Nested(_)) if first == Some(b'{') => {
                if let Some(n) = name {
                    self.path.clear();
                    self.path.extend_from_slice(n);
                }
                self.descend(val, depth)?;
            }
            // A prefix holding something else than an object fills nothing;
            // metadata names are spate's to fill.
            Some(PathTarget::Descend | PathTarget::Nested(_) | PathTarget::Ignore) => {}
            None if self.strict => {
                let shown = name.unwrap_or(self.path);
                return Err((
                    val,
                    format!(
                        "unknown key `{}` (strict mode)",
                        String::from_utf8_lossy(shown)
                    ),
                ));
            }
            None => {}
        }
        Ok(())
    }

    /// Walk the members of object `val` whose path is in the path buffer.
    fn descend<'a>(&mut self, val: &'a [u8], depth: usize) -> Result<(), KeyFail<'a>> {
        let prefix = self.path.len();
        let walked = for_each_member(val, 0, depth + 1, |key, s, e| {
            self.path.truncate(prefix);
            self.path.push(b'.');
            if key.escaped {
                unescape_into(key.raw, self.path).map_err(|r| (key.raw, r.to_owned()))?;
            } else {
                self.path.extend_from_slice(key.raw);
            }
            self.key(None, &val[s..e], depth + 1)
        });
        self.path.truncate(prefix);
        match walked {
            Ok(_) => Ok(()),
            Err(Walk::User(f)) => Err(f),
            // The value was validated by the enclosing walk.
            Err(Walk::Json(j)) => Err((val, j.reason.to_owned())),
        }
    }
}

/// One Nested group: the columns `prefix.leaf` of Array type.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) prefix: String,
    /// Plan indices of its arrays.
    pub(crate) members: Vec<usize>,
}

/// Where a Nested array's member comes from in each item.
#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) group: u32,
    /// The member's key in each object (`x` for `n.x`).
    pub(crate) leaf: Box<[u8]>,
    /// The array's element type.
    pub(crate) elem: ChType,
}

/// Number of items of the array at `v`, `None` if `v` is not an array.
pub(crate) fn count_items(v: &[u8]) -> Option<u64> {
    let mut n = 0u64;
    for_each_item(v, 0, 1, |_, _| {
        n += 1;
        Ok::<_, ()>(())
    })
    .ok()?;
    Some(n)
}

/// Write `member`'s array from the array of objects `items`: one element
/// per item, its `leaf` member or the element type's zero.
pub(crate) fn write_from_items(
    member: &Member,
    items: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<(), Fail> {
    let n = count_items(items).ok_or_else(|| fail(items, "not an array"))?;
    leb128::put(out, n);
    let nullable = matches!(member.elem, ChType::Nullable(_));
    let walked = for_each_item(items, 0, 2, |s, e| {
        let item = &items[s..e];
        if item.first() != Some(&b'{') {
            return Err(fail(
                item,
                "each item of an array for a Nested column must be an object",
            ));
        }
        let mut found = None;
        for_each_member(item, 0, 3, |key, ks, ke| {
            let hit = if key.escaped {
                scratch.clear();
                unescape_into(key.raw, scratch).is_ok() && scratch[..] == *member.leaf
            } else {
                *key.raw == *member.leaf
            };
            if hit {
                found = Some((ks, ke));
            }
            Ok::<_, Fail>(())
        })
        .map_err(|e| walk_fail(item, e))?;
        match found {
            Some((ks, ke)) if nullable || item.get(ks) != Some(&b'n') => {
                write_value(&member.elem, &item[ks..ke], out, scratch)
            }
            _ => {
                write_zero(&member.elem, out);
                Ok(())
            }
        }
    });
    walked.map(|_| ()).map_err(|e| walk_fail(items, e))
}

fn walk_fail(v: &[u8], e: Walk<Fail>) -> Fail {
    match e {
        Walk::Json(j) => fail(v, j.reason),
        Walk::User(f) => f,
    }
}

/// `n` zeros of the element type: an array the message lacks, sized like
/// its group's other arrays.
pub(crate) fn write_zeros(elem: &ChType, n: u64, out: &mut Vec<u8>) {
    leb128::put(out, n);
    for _ in 0..n {
        write_zero(elem, out);
    }
}
