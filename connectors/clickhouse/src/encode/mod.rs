//! JSON → RowBinary encoding.
//!
//! Owns [`RowEncoder`]: one per chain/lane thread (it keeps reusable scratch
//! buffers, so it is `&mut` and not shared). The lane calls
//! [`RowEncoder::encode`] once per Kafka message, appending one RowBinary row
//! to the batch buffer that is later handed to an insert worker as `Bytes`.
//!
//! Layout:
//! - `json`: zero-copy scanner (validates, reports value spans);
//! - `value`: one JSON value as a column type (the text, number, zero
//!   writers it calls live in `crate::rowbinary`, shared by every format);
//! - `dynamic`: the `JSON`, `Variant` and `Dynamic` types (allocates per
//!   object; the other types do not);
//! - `names`: key path → column (dotted names, renames, Nested prefixes):
//!   the one rule every input format shares;
//! - `nested`: the walk through objects and Nested arrays from arrays of
//!   objects;
//! - `encoder`: the column plan, metadata columns, errors;
//! - `native`: a batch of RowBinary rows as one `Native` block, for the
//!   insert (cheaper for the server to read).
//!
//! Steady state makes no heap allocation per row: spans and scratch buffers
//! live in the encoder and are reused (proved by `tests/alloc_free.rs`).

mod dynamic;
pub(crate) mod encoder;
pub(crate) mod json;
mod metadata;
mod names;
mod native;
mod nested;
pub(crate) mod value;

pub use encoder::{EncoderOptions, RowEncoder, RowError, SchemaError};
pub use names::PathTarget;
pub use native::{NativeLayout, NativeScratch, TransposeError};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_modern;
#[cfg(test)]
mod tests_nested;

/// The JSON scanner as the `json_scan` bench calls it, beside the SIMD
/// parsers it is weighed against. Not an API.
#[doc(hidden)]
pub mod bench_scan {
    /// Walk the members of the object `b`: `f(raw key, raw value)` per
    /// member, as the encoder's scan does before it writes any value.
    pub fn members<'a>(
        b: &'a [u8],
        mut f: impl FnMut(&'a [u8], &'a [u8]),
    ) -> Result<(), &'static str> {
        super::json::scan_document(b, |k, v| {
            f(k.raw, v);
            Ok::<_, ()>(())
        })
        .map_err(|e| match e {
            super::json::Walk::Json(e) => e.reason,
            super::json::Walk::User(()) => "callback",
        })
    }
}
