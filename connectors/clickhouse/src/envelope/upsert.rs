//! A keyed topic of plain values (a compacted topic, a Kafka Streams
//! table): the value is the row, a tombstone deletes its key, and the
//! key's fields fill the key columns. Key and value are JSON objects,
//! each plain or inside a `{"schema": .., "payload": ..}` wrapper
//! (Kafka Connect's `schemas.enable=true`).

use crate::encode::json::{scan_document, utf8};
use crate::encode::RowError;

fn bad(text: &[u8], reason: impl Into<String>) -> RowError {
    RowError::new(None, &String::from_utf8_lossy(text), reason)
}

/// The object `b` holds: itself, or a wrapper's `payload` (`None`: the
/// wrapper's payload is null).
pub(crate) fn object<'a>(b: &'a [u8], what: &str) -> Result<Option<&'a [u8]>, RowError> {
    utf8(b).map_err(|e| bad(b, format!("the {what} is not valid UTF-8: {e}")))?;
    let (mut schema, mut payload) = (false, None);
    scan_document(b, |key, value| {
        match key.raw {
            b"schema" => schema = true,
            b"payload" => payload = Some(value),
            _ => {}
        }
        Ok::<_, ()>(())
    })
    .map_err(|e| match e {
        crate::encode::json::Walk::Json(j) => bad(
            b,
            format!(
                "the {what} is not a JSON object (at byte {}: {})",
                j.at, j.reason
            ),
        ),
        crate::encode::json::Walk::User(()) => bad(b, format!("the {what} is not a JSON object")),
    })?;
    Ok(match (schema, payload) {
        (true, Some(p)) if p.first() == Some(&b'{') => Some(p),
        (true, Some(_)) => None,
        _ => Some(b),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_wrapped_objects() {
        assert_eq!(
            object(br#"{"id":1}"#, "key").unwrap(),
            Some(&br#"{"id":1}"#[..])
        );
        assert_eq!(
            object(br#"{"schema":{"type":"struct"},"payload":{"id":1}}"#, "key").unwrap(),
            Some(&br#"{"id":1}"#[..])
        );
        assert_eq!(
            object(br#"{"schema":{},"payload":null}"#, "value").unwrap(),
            None
        );
        let e = object(b"42", "key").unwrap_err();
        assert!(e.reason.contains("the key is not a JSON object"), "{e}");
    }
}
