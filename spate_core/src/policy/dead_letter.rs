//! Dead letters: the original message of a rejected row, plus why and
//! where it was rejected, for a [`DeadLetterSink`] (a Kafka topic, in the
//! Kafka connector). The chain (driver threads) and the insert workers
//! (the sink's I/O runtime, through a blocking task) hand letters to the
//! sink and go on only once it stored them, so a dead letter counts as
//! acknowledged exactly when its destination acknowledged it: the offset
//! is then covered like a skipped one. An unavailable destination blocks
//! the caller (backpressure); nothing is dropped.

use super::Stage;
use crate::record::{owned_headers, Message, OwnedHeaders};

/// One rejected message, owned (it may cross threads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// Where the message was read.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its timestamp (ms since the epoch), if any.
    pub timestamp_ms: Option<i64>,
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its value (`None` for a tombstone).
    pub value: Option<Vec<u8>>,
    /// The stage that rejected it.
    pub stage: Stage,
    /// The error, cut short.
    pub error: String,
    /// The column, when known.
    pub column: Option<String>,
    /// The original message's headers, in order.
    pub original_headers: OwnedHeaders,
}

impl DeadLetter {
    /// The letter of `msg`, rejected at `stage` with `error`.
    #[must_use]
    pub fn of(msg: &Message<'_>, stage: Stage, error: &str, column: Option<&str>) -> Self {
        Self {
            topic: msg.topic.to_owned(),
            partition: msg.partition,
            offset: msg.offset,
            timestamp_ms: msg.timestamp_ms,
            key: msg.key.map(<[u8]>::to_vec),
            value: msg.payload.map(<[u8]>::to_vec),
            stage,
            error: cut(error, 1000).to_owned(),
            column: column.map(str::to_owned),
            original_headers: owned_headers(msg.headers),
        }
    }

    /// The headers a dead-letter record carries after the original's
    /// ([`original_headers`](Self::original_headers)):
    /// `spate.error`, `spate.stage`, `spate.topic`, `spate.partition`,
    /// `spate.offset` and, when known, `spate.column`.
    #[must_use]
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![
            ("spate.error", self.error.clone()),
            ("spate.stage", self.stage.as_str().to_owned()),
            ("spate.topic", self.topic.clone()),
            ("spate.partition", self.partition.to_string()),
            ("spate.offset", self.offset.to_string()),
        ];
        if let Some(c) = &self.column {
            h.push(("spate.column", c.clone()));
        }
        h
    }
}

/// Why a dead letter was not stored. Its message is then not acknowledged:
/// it replays after a restart, or the pipeline stops naming it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// [`DeadLetterSink::abandon`] came first (the shutdown deadline).
    #[error(
        "abandoned at the shutdown deadline before the destination stored it; the message replays"
    )]
    Abandoned,
    /// The destination refused the letter for good (the topic does not
    /// exist or may not be written, the table's columns do not fit).
    #[error("{0}")]
    Refused(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// One of several destinations ([`AllOf`]) did not store it.
    #[error("{destination}: {source}")]
    In {
        destination: String,
        #[source]
        source: Box<StoreError>,
    },
}

impl StoreError {
    /// A refusal for good, from the destination's own error.
    pub fn refused(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        StoreError::Refused(Box::new(e))
    }
}

/// A dead-letter destination.
pub trait DeadLetterSink: Send + Sync {
    /// Store `letter`, returning once the destination acknowledged it,
    /// waiting (and retrying) while it is unavailable. Blocks the calling
    /// thread.
    ///
    /// # Errors
    /// Only when the letter can never be stored (e.g. the topic does not
    /// exist or may not be written); the pipeline then stops.
    fn store(&self, letter: &DeadLetter) -> Result<(), StoreError>;

    /// What the destination is, for logs and errors (`topic dlq`).
    fn describe(&self) -> String;

    /// Stop waiting (the shutdown deadline passed): a [`store`](Self::store)
    /// waiting out an outage returns an error after its current attempt,
    /// and later ones fail at once. The letter is then not stored, so its
    /// message is not acknowledged and replays after the restart. Without
    /// it a store retrying against a destination that never answers would
    /// keep its thread, and the process, alive past every deadline.
    fn abandon(&self) {}
}

/// The flag behind [`DeadLetterSink::abandon`], for destinations that wait
/// between attempts.
#[derive(Debug, Default)]
pub struct Abandoned(std::sync::atomic::AtomicBool);

impl Abandoned {
    /// Abandon every wait, now and later.
    pub fn set(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether [`set`](Self::set) was called.
    #[must_use]
    pub fn is_set(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Sleep `pause` in short slices; `false` (at once) when abandoned.
    #[must_use]
    pub fn pause(&self, pause: std::time::Duration) -> bool {
        let until = std::time::Instant::now() + pause;
        loop {
            if self.is_set() {
                return false;
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(left.min(std::time::Duration::from_millis(50)));
        }
    }
}

/// Several destinations (`--dead-letter-topic` and `--dead-letter-table`):
/// a letter is stored in each, in order, before it counts as stored.
pub struct AllOf(pub Vec<std::sync::Arc<dyn DeadLetterSink>>);

impl DeadLetterSink for AllOf {
    fn store(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        self.0.iter().try_for_each(|d| {
            d.store(letter).map_err(|e| StoreError::In {
                destination: d.describe(),
                source: Box::new(e),
            })
        })
    }

    fn describe(&self) -> String {
        let all: Vec<String> = self.0.iter().map(|d| d.describe()).collect();
        all.join(" and ")
    }

    fn abandon(&self) {
        self.0.iter().for_each(|d| d.abandon());
    }
}

/// `s` cut to at most `max` bytes, on a character boundary.
#[must_use]
pub fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_letter_keeps_the_message_and_names_where_it_failed() {
        let msg = Message {
            topic: "events",
            partition: 3,
            offset: 77,
            timestamp_ms: Some(1_700_000_000_000),
            key: Some(b"k"),
            payload: Some(b"{\"a\": 300}"),
            headers: None,
        };
        let l = DeadLetter::of(&msg, Stage::Decode, &"é".repeat(600), Some("a"));
        assert_eq!(l.value.as_deref(), Some(&b"{\"a\": 300}"[..]));
        assert_eq!(l.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(l.error.len(), 1000, "cut on a character boundary");
        let h = l.headers();
        let names: Vec<&str> = h.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "spate.error",
                "spate.stage",
                "spate.topic",
                "spate.partition",
                "spate.offset",
                "spate.column"
            ]
        );
        assert_eq!(h[1].1, "decode");
        assert_eq!((h[3].1.as_str(), h[4].1.as_str()), ("3", "77"));
        assert!(l.original_headers.is_empty());
    }

    /// Message `x` at offset 1 of `events` partition 0.
    fn offset_1<'a>(headers: Option<&'a dyn crate::record::Headers>) -> Message<'a> {
        Message {
            topic: "events",
            partition: 0,
            offset: 1,
            timestamp_ms: None,
            key: None,
            payload: Some(b"x"),
            headers,
        }
    }

    /// The original's headers travel with the letter (and with the row
    /// kept for an insert-stage letter), in order, a null value kept null.
    #[test]
    fn a_letter_keeps_the_original_headers() {
        let pairs: [(&[u8], Option<&[u8]>); 2] = [(b"trace", Some(b"t-1")), (b"none", None)];
        let headers = crate::record::SliceHeaders(&pairs);
        let msg = offset_1(Some(&headers));
        let want = vec![
            (b"trace".to_vec(), Some(b"t-1".to_vec())),
            (b"none".to_vec(), None),
        ];
        let l = DeadLetter::of(&msg, Stage::Decode, "e", None);
        assert_eq!(l.original_headers, want);
        assert_eq!(crate::sink::Original::of(&msg).headers, want);
    }

    /// A destination of `AllOf` that refuses names itself, keeps the
    /// refusal as the error's source, and the ones after it are not asked.
    #[test]
    fn all_of_names_the_destination_that_refused_and_keeps_the_cause() {
        struct Dest(
            &'static str,
            Option<std::io::ErrorKind>,
            std::sync::atomic::AtomicU32,
        );
        impl DeadLetterSink for Dest {
            fn store(&self, _: &DeadLetter) -> Result<(), StoreError> {
                self.2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                match self.1 {
                    None => Ok(()),
                    Some(k) => Err(StoreError::refused(std::io::Error::new(k, "no such topic"))),
                }
            }
            fn describe(&self) -> String {
                self.0.into()
            }
        }
        let dests = [
            std::sync::Arc::new(Dest("topic dlq", None, Default::default())),
            std::sync::Arc::new(Dest(
                "table db.dlq",
                Some(std::io::ErrorKind::NotFound),
                Default::default(),
            )),
            std::sync::Arc::new(Dest("topic later", None, Default::default())),
        ];
        let all = AllOf(
            dests
                .iter()
                .map(|d| d.clone() as std::sync::Arc<dyn DeadLetterSink>)
                .collect(),
        );
        let msg = offset_1(None);
        let err = all
            .store(&DeadLetter::of(&msg, Stage::Decode, "e", None))
            .unwrap_err();
        assert_eq!(err.to_string(), "table db.dlq: no such topic");
        let StoreError::In {
            destination,
            source,
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(destination, "table db.dlq");
        assert!(matches!(**source, StoreError::Refused(_)), "{source:?}");
        let io =
            std::error::Error::source(&**source).and_then(|e| e.downcast_ref::<std::io::Error>());
        assert_eq!(
            io.map(std::io::Error::kind),
            Some(std::io::ErrorKind::NotFound)
        );
        let asked: Vec<u32> = dests
            .iter()
            .map(|d| d.2.load(std::sync::atomic::Ordering::Relaxed))
            .collect();
        assert_eq!(asked, [1, 1, 0]);
        assert!(StoreError::Abandoned
            .to_string()
            .contains("the message replays"));
    }
}
