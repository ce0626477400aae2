//! The row document a change becomes: the members of its row image (an
//! object's text, copied as it is), then the members spate fills (the
//! version, the deleted flag, `_op`, `_source_*`), in one reused buffer
//! the JSON [`RowEncoder`](crate::RowEncoder) then reads like any
//! message. Later members win, so a filled column beats an image member
//! of the same name. No allocation once warm.

use crate::encode::json::{scan_document, Walk};

/// One JSON object being written.
#[derive(Debug, Default)]
pub(crate) struct Doc {
    buf: Vec<u8>,
    members: usize,
}

/// A key as JSON text, with its quotes and colon: `"name":`.
pub(crate) fn json_key(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 3);
    out.push(b'"');
    for c in name.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
            }
            c => {
                let mut b = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            }
        }
    }
    out.extend_from_slice(b"\":");
    out
}

impl Doc {
    /// Start a new object.
    pub(crate) fn start(&mut self) {
        self.buf.clear();
        self.buf.push(b'{');
        self.members = 0;
    }

    fn comma(&mut self) {
        if self.members > 0 {
            self.buf.push(b',');
        }
        self.members += 1;
    }

    /// Every member of `object` (its text: a valid JSON object).
    pub(crate) fn members_of(&mut self, object: &[u8]) {
        let inner = object
            .iter()
            .position(|&c| c == b'{')
            .zip(object.iter().rposition(|&c| c == b'}'))
            .map_or(&object[..0], |(s, e)| &object[s + 1..e]);
        if inner.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        self.comma();
        self.buf.extend_from_slice(inner);
    }

    /// The members of `object` whose key does not start with `__` (what
    /// Debezium's `ExtractNewRecordState` adds).
    pub(crate) fn members_without_added(&mut self, object: &[u8]) -> Result<(), Walk<()>> {
        let Doc { buf, members } = self;
        scan_document(object, |key, value| {
            if !key.raw.starts_with(b"__") {
                if *members > 0 {
                    buf.push(b',');
                }
                *members += 1;
                buf.push(b'"');
                buf.extend_from_slice(key.raw);
                buf.extend_from_slice(b"\":");
                buf.extend_from_slice(value);
            }
            Ok(())
        })
    }

    /// One member: `key` as [`json_key`] made it, `value` as JSON text.
    pub(crate) fn member(&mut self, key: &[u8], value: &[u8]) {
        self.comma();
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(value);
    }

    /// One member whose value is an integer.
    pub(crate) fn int_member(&mut self, key: &[u8], value: i64) {
        use std::io::Write;
        self.comma();
        self.buf.extend_from_slice(key);
        // Writing into a Vec cannot fail.
        let _ = write!(self.buf, "{value}");
    }

    /// The finished object's text.
    pub(crate) fn finish(&mut self) -> &[u8] {
        self.buf.push(b'}');
        &self.buf
    }

    /// The text written so far (after [`finish`](Self::finish): the
    /// object).
    pub(crate) fn text(&self) -> &[u8] {
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_splice_and_later_ones_follow() {
        let mut d = Doc::default();
        d.start();
        d.members_of(br#" {"a": 1, "b": {"c": [1, 2]}} "#);
        d.int_member(&json_key("ver"), 42);
        d.member(&json_key("_op"), br#""c""#);
        assert_eq!(
            d.finish(),
            br#"{"a": 1, "b": {"c": [1, 2]},"ver":42,"_op":"c"}"#
        );
        d.start();
        d.members_of(b"{ }");
        d.int_member(&json_key("q\"x"), -1);
        assert_eq!(d.finish(), br#"{"q\"x":-1}"#);
        d.start();
        d.members_without_added(br#"{"id": 1, "__deleted": "true", "__op": "d", "n": null}"#)
            .unwrap();
        assert_eq!(d.finish(), br#"{"id":1,"n":null}"#);
    }
}
