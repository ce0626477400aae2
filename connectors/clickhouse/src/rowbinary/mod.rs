//! RowBinary: the column writers every input format shares.
//!
//! JSON, Avro, Protobuf, CSV and raw each walk their own input and call
//! these to write a column value; nothing here knows an input format.
//!
//! - `leb128`: the one varint writer and reader;
//! - `fail`: a value that could not be written (text and reason);
//! - `number`, `time`: exact text → integer/decimal/float/temporal parsing;
//! - `text`: a value given as text, written as a column type;
//! - `zero`: the value of a missing column, and type widths.

mod fail;
pub(crate) mod leb128;
pub(crate) mod number;
pub(crate) mod text;
pub(crate) mod time;
mod zero;

pub(crate) use fail::{fail, Fail};
pub(crate) use text::{put_int, write_text};
pub(crate) use zero::{decimal_width, write_zero};
