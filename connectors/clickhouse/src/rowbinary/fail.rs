//! A value that could not be written: its text and why. Every format's
//! writers return it; the row encoder turns it into a `RowError` naming the
//! column.

/// A failed value: the offending text and why. Allocated only on failure.
#[derive(Debug)]
pub(crate) struct Fail {
    pub(crate) value: String,
    pub(crate) reason: String,
}

pub(crate) fn fail(v: &[u8], reason: impl Into<String>) -> Fail {
    Fail {
        value: String::from_utf8_lossy(v).into_owned(),
        reason: reason.into(),
    }
}
