//! Records: what a lane hands to a chain, and the typed offsets the
//! checkpointer speaks.
//!
//! Offset convention, used everywhere in spate: a *committed* offset (a
//! [`Watermark`]) is the **next offset to read**, i.e. the last acknowledged
//! offset plus one. This is Kafka's own convention for committed offsets.

use std::fmt;
use std::sync::Arc;

/// A source partition: topic name plus partition number.
///
/// Cheap to clone (the topic is shared).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId {
    /// Topic name.
    pub topic: Arc<str>,
    /// Partition number within the topic.
    pub partition: i32,
}

impl PartitionId {
    /// Build a partition id.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Debug for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// Offset of one message within its partition: the position the
/// checkpointer's [`AckRange`](crate::checkpoint::AckRange)s speak and a
/// source's high watermark is given in.
///
/// Not a committable position: the committed offset after a message is
/// [`Watermark::after`] its offset (committed offset = next offset to read
/// = last acknowledged offset + 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Offset(pub i64);

/// A committable position: the **next offset to read** (last acknowledged
/// offset + 1). Committing `Watermark(n)` means every message below `n` is
/// acknowledged by the sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Watermark(pub i64);

impl Watermark {
    /// The watermark just past `offset`.
    #[must_use]
    pub fn after(offset: Offset) -> Self {
        Watermark(offset.0 + 1)
    }
}

/// A message's headers (Kafka record headers), read on demand: a source
/// whose messages have them implements this over its own buffer, so a sink
/// that does not ask pays nothing. Borrowed like the rest of [`Message`].
pub trait Headers: fmt::Debug {
    /// Number of headers.
    fn count(&self) -> usize;
    /// Header `index` (0-based, in the order the producer sent them): its
    /// name and its value (`None` for a null value). `None` past the end.
    fn get(&self, index: usize) -> Option<(&[u8], Option<&[u8]>)>;
}

/// Headers copied out of a message (a dead letter keeps its original's).
pub type OwnedHeaders = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// An owned copy of `headers` (empty for none).
#[must_use]
pub fn owned_headers(headers: Option<&dyn Headers>) -> OwnedHeaders {
    let Some(h) = headers else {
        return Vec::new();
    };
    (0..h.count())
        .filter_map(|i| h.get(i))
        .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
        .collect()
}

/// Headers held as a slice of `(name, value)`, for tests and sources that
/// own them.
#[derive(Clone, Copy, Debug)]
pub struct SliceHeaders<'a>(pub &'a [(&'a [u8], Option<&'a [u8]>)]);

impl Headers for SliceHeaders<'_> {
    fn count(&self) -> usize {
        self.0.len()
    }

    fn get(&self, index: usize) -> Option<(&[u8], Option<&[u8]>)> {
        self.0.get(index).copied()
    }
}

/// One message as a lane hands it to the chain. Borrowed from the source's
/// buffer: the chain must copy what it keeps.
#[derive(Clone, Copy, Debug)]
pub struct Message<'a> {
    /// Topic name.
    pub topic: &'a str,
    /// Partition number.
    pub partition: i32,
    /// Offset within the partition.
    pub offset: i64,
    /// Message timestamp in milliseconds since the Unix epoch, if any.
    pub timestamp_ms: Option<i64>,
    /// Message key, if any.
    pub key: Option<&'a [u8]>,
    /// Message payload (`None` for a tombstone).
    pub payload: Option<&'a [u8]>,
    /// Message headers (`None`: the source has none for this message).
    pub headers: Option<&'a dyn Headers>,
}
