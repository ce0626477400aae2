//! [`ShardQueues`]: per-shard chunk queues with byte accounting.
//!
//! Senders live in the chains (driver threads, non-blocking `push`);
//! receivers live in the sink's insert workers (tokio, `recv().await`).
//! Dropping every sender clone closes the queues, which is how the
//! shutdown sequence tells workers that no more chunks will come.
//!
//! Spares: an insert worker hands an inserted chunk's buffers back
//! ([`QueueDepths::recycle`]) and the next seal for the shard takes them
//! ([`ShardQueues::spare`]), so a batch is written into pages that are
//! already resident instead of fresh ones (a batch of megabytes is its own
//! mapping, zeroed page by page on first touch: `make bench` measured those
//! faults at a fifth of spate's CPU). Spares are memory the queue holds, so
//! they count against the shard's high-water mark with its depth: one is
//! kept only while the depth and the spares stay below it, and the check
//! that pauses lanes drops the spares before their bytes could pause one.
//! They never add to the budget, and never hold a lane paused.

use super::{Chunk, RowOrigin};
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::mpsc;

/// Most spares a shard keeps: enough for every driver's next seal in the
/// usual one-insert-at-a-time flow.
const MAX_SPARES: usize = 4;

/// Smaller buffers are not kept: glibc reuses them from its heap anyway.
const MIN_SPARE_BYTES: usize = 128 << 10;

#[derive(Debug, Default)]
struct Depth {
    bytes: AtomicUsize,
    chunks: AtomicUsize,
    rows: AtomicU64,
    /// Capacity of the spares, in bytes (read without the lock).
    kept: AtomicUsize,
    spares: Mutex<Vec<Spare>>,
}

/// An inserted chunk's buffers, emptied, for the next chunk of its shard.
#[derive(Debug, Default)]
pub struct Spare {
    /// The rows' buffer ([`Chunk::data`]).
    pub data: Vec<u8>,
    /// The row index's entries ([`RowIndex::rows`](super::RowIndex::rows)).
    pub rows: Vec<RowOrigin>,
    /// The rows' timestamps ([`Chunk::stamps`](super::Chunk::stamps)).
    pub stamps: super::Stamps,
}

impl Spare {
    /// The memory it holds.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.data.capacity()
            + self.rows.capacity() * std::mem::size_of::<RowOrigin>()
            + self.stamps.bytes()
    }
}

impl Depth {
    fn spares(&self) -> MutexGuard<'_, Vec<Spare>> {
        self.spares.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drop every spare (outside the lock).
    fn drop_spares(&self) {
        let spares = std::mem::take(&mut *self.spares());
        let bytes: usize = spares.iter().map(Spare::bytes).sum();
        self.kept.fetch_sub(bytes, Ordering::AcqRel);
        drop(spares);
    }
}

/// Sending side of the per-shard chunk queues, with capacity introspection.
#[derive(Clone)]
pub struct ShardQueues {
    senders: Arc<[mpsc::UnboundedSender<Chunk>]>,
    depth: Arc<[Depth]>,
    high_water: usize,
    low_water: usize,
    worker_room: usize,
}

impl fmt::Debug for ShardQueues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardQueues")
            .field("shards", &self.senders.len())
            .field("bytes", &self.depths())
            .field("high_water", &self.high_water)
            .field("low_water", &self.low_water)
            .finish()
    }
}

/// Read-only depth introspection (metrics), without a sender.
#[derive(Clone)]
pub struct QueueDepths {
    depth: Arc<[Depth]>,
    high_water: usize,
    worker_room: usize,
}

impl QueueDepths {
    /// Count `bytes` more on `shard`'s depth until the ticket drops: the
    /// sink's own copies of a chunk in flight (its wire encoding), so the
    /// backpressure that holds the memory budget sees them too.
    #[must_use]
    pub fn charge(&self, shard: usize, bytes: usize) -> QueueTicket {
        self.depth[shard].bytes.fetch_add(bytes, Ordering::AcqRel);
        QueueTicket {
            depth: self.depth.clone(),
            shard,
            bytes,
            rows: 0,
            chunks: 0,
        }
    }

    /// Bytes queued or in flight, per shard.
    #[must_use]
    pub fn bytes(&self) -> Vec<usize> {
        self.depth
            .iter()
            .map(|d| d.bytes.load(Ordering::Acquire))
            .collect()
    }

    /// Hand an inserted chunk's buffers back for the next chunk of
    /// `shard`, once the chunk's own bytes left the depth (its ticket was
    /// dropped). Kept, emptied, only while the shard's depth and spares
    /// stay below its high-water mark, at most a few; otherwise freed.
    pub fn recycle(&self, shard: usize, mut spare: Spare) {
        let size = spare.bytes();
        let Some(d) = self.depth.get(shard) else {
            return;
        };
        if size < MIN_SPARE_BYTES {
            return;
        }
        let mut spares = d.spares();
        let kept = d.kept.load(Ordering::Acquire);
        let depth = d.bytes.load(Ordering::Acquire);
        if spares.len() >= MAX_SPARES || depth + kept + size >= self.high_water {
            return; // `spare` is freed after the lock is released
        }
        spare.data.clear();
        spare.rows.clear();
        spare.stamps.clear();
        d.kept.fetch_add(size, Ordering::AcqRel);
        spares.push(spare);
    }

    /// Bytes of `shard`'s spares.
    #[must_use]
    pub fn spare_bytes(&self, shard: usize) -> usize {
        self.depth[shard].kept.load(Ordering::Acquire)
    }

    /// Bytes an insert worker may keep between inserts for its own copies
    /// of a chunk (the transposition's columns, the body): the room the
    /// budget sets aside for them whether an insert runs or not (0 when the
    /// queues were made without it: nothing is kept).
    #[must_use]
    pub fn worker_room(&self) -> usize {
        self.worker_room
    }
}

/// Releases a chunk's bytes from its queue's depth when dropped.
pub struct QueueTicket {
    depth: Arc<[Depth]>,
    shard: usize,
    bytes: usize,
    rows: u64,
    /// 1 for a queued chunk, 0 for a [`QueueDepths::charge`].
    chunks: usize,
}

impl fmt::Debug for QueueTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QueueTicket(shard {}, {} bytes)", self.shard, self.bytes)
    }
}

impl Drop for QueueTicket {
    fn drop(&mut self) {
        let d = &self.depth[self.shard];
        d.bytes.fetch_sub(self.bytes, Ordering::AcqRel);
        d.chunks.fetch_sub(self.chunks, Ordering::AcqRel);
        d.rows.fetch_sub(self.rows, Ordering::AcqRel);
    }
}

/// Receiving side of one shard's queue.
pub struct ShardReceiver {
    shard: usize,
    rx: mpsc::UnboundedReceiver<Chunk>,
}

impl ShardReceiver {
    /// The shard this receiver serves.
    #[must_use]
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// The next chunk, or `None` once every sender is gone and the queue is
    /// empty.
    pub async fn recv(&mut self) -> Option<Chunk> {
        self.rx.recv().await
    }

    /// A chunk if one is queued right now.
    pub fn try_recv(&mut self) -> Option<Chunk> {
        self.rx.try_recv().ok()
    }

    /// Stop accepting chunks; queued ones can still be received.
    pub fn close(&mut self) {
        self.rx.close();
    }
}

impl ShardQueues {
    /// `shards` queues. A queue is *over* once its depth (queued plus
    /// in-flight bytes) reaches `high_water`, and *clear* again only at or
    /// below `low_water` (hysteresis).
    #[must_use]
    pub fn new(shards: usize, high_water: usize, low_water: usize) -> (Self, Vec<ShardReceiver>) {
        let shards = shards.max(1);
        let mut senders = Vec::with_capacity(shards);
        let mut receivers = Vec::with_capacity(shards);
        for shard in 0..shards {
            let (tx, rx) = mpsc::unbounded_channel();
            senders.push(tx);
            receivers.push(ShardReceiver { shard, rx });
        }
        let depth: Vec<Depth> = (0..shards).map(|_| Depth::default()).collect();
        (
            Self {
                senders: senders.into(),
                depth: depth.into(),
                high_water: high_water.max(1),
                low_water: low_water.min(high_water),
                worker_room: 0,
            },
            receivers,
        )
    }

    /// The same queues telling insert workers they may keep `bytes` of
    /// their own buffers between inserts ([`QueueDepths::worker_room`]).
    #[must_use]
    pub fn with_worker_room(mut self, bytes: usize) -> Self {
        self.worker_room = bytes;
        self
    }

    /// An emptied buffer pair for the next chunk of `shard`, if an insert
    /// handed one back ([`QueueDepths::recycle`]).
    #[must_use]
    pub fn spare(&self, shard: usize) -> Option<Spare> {
        let d = self.depth.get(shard)?;
        if d.kept.load(Ordering::Acquire) == 0 {
            return None;
        }
        let spare = d.spares().pop()?;
        d.kept.fetch_sub(spare.bytes(), Ordering::AcqRel);
        Some(spare)
    }

    /// Number of shards.
    #[must_use]
    pub fn shards(&self) -> usize {
        self.senders.len()
    }

    /// Queue a chunk. Never blocks; backpressure is the caller's job (see
    /// [`is_over`](Self::is_over)). A closed queue hands the chunk back.
    pub fn push(&self, mut chunk: Chunk) -> Result<(), Box<Chunk>> {
        let shard = chunk.shard;
        // The row index (and the originals kept for dead letters) count too.
        let bytes = chunk.data.len() + chunk.index.heap_bytes();
        let d = &self.depth[shard];
        d.bytes.fetch_add(bytes, Ordering::AcqRel);
        d.chunks.fetch_add(1, Ordering::AcqRel);
        d.rows.fetch_add(chunk.rows, Ordering::AcqRel);
        chunk.ticket = Some(QueueTicket {
            depth: self.depth.clone(),
            shard,
            bytes,
            rows: chunk.rows,
            chunks: 1,
        });
        self.senders[shard].send(chunk).map_err(|e| {
            let mut c = e.0;
            c.ticket = None; // releases the accounting
            Box::new(c)
        })
    }

    /// A read-only view of the depths that does not keep the queues open.
    #[must_use]
    pub fn depth_view(&self) -> QueueDepths {
        QueueDepths {
            depth: self.depth.clone(),
            high_water: self.high_water,
            worker_room: self.worker_room,
        }
    }

    /// Bytes queued or in flight for `shard`.
    #[must_use]
    pub fn depth_bytes(&self, shard: usize) -> usize {
        self.depth[shard].bytes.load(Ordering::Acquire)
    }

    /// Chunks queued or in flight for `shard`.
    #[must_use]
    pub fn depth_chunks(&self, shard: usize) -> usize {
        self.depth[shard].chunks.load(Ordering::Acquire)
    }

    /// Bytes queued or in flight, per shard.
    #[must_use]
    pub fn depths(&self) -> Vec<usize> {
        (0..self.shards()).map(|s| self.depth_bytes(s)).collect()
    }

    /// Total bytes queued or in flight.
    #[must_use]
    pub fn total_bytes(&self) -> usize {
        self.depths().iter().sum()
    }

    /// Whether `shard` is at or above its high-water mark. Its spares are
    /// dropped first if they and the depth reach it: they give way to
    /// chunks, never pause a lane.
    #[must_use]
    pub fn is_over(&self, shard: usize) -> bool {
        let d = &self.depth[shard];
        let depth = d.bytes.load(Ordering::Acquire);
        let kept = d.kept.load(Ordering::Acquire);
        if kept > 0 && depth + kept >= self.high_water {
            d.drop_spares();
        }
        depth >= self.high_water
    }

    /// Shards at or above their high-water mark, as a [`shard_bit`] mask.
    #[must_use]
    pub fn over_mask(&self) -> u64 {
        (0..self.shards())
            .filter(|&s| self.is_over(s))
            .fold(0, |m, s| m | shard_bit(s))
    }

    /// Shards at or below their low-water mark, as a [`shard_bit`] mask
    /// (bit 63, shared by shards 63 and up, only when all of them are).
    #[must_use]
    pub fn clear_mask(&self) -> u64 {
        (0..self.shards()).fold(u64::MAX, |m, s| {
            if self.depth_bytes(s) <= self.low_water {
                m
            } else {
                m & !shard_bit(s)
            }
        })
    }
}

/// A shard's bit in a shard mask: bit `shard`, with shards 63 and up
/// sharing bit 63 (masks err towards "feeds it", never away).
#[must_use]
pub fn shard_bit(shard: usize) -> u64 {
    1 << shard.min(63)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::Stamps;

    fn chunk(shard: usize, bytes: usize) -> Chunk {
        Chunk {
            shard,
            rows: 1,
            data: vec![0; bytes],
            acks: Vec::new(),
            spans: Box::default(),
            ticket: None,
            index: Box::default(),
            schema: 0,
            stamps: Stamps::default(),
        }
    }

    #[test]
    fn depth_counts_until_the_worker_drops_the_chunk_with_hysteresis() {
        let (q, mut rx) = ShardQueues::new(2, 100, 40);
        q.push(chunk(1, 60)).unwrap();
        assert_eq!(q.over_mask(), 0);
        q.push(chunk(1, 60)).unwrap();
        assert!(q.is_over(1) && !q.is_over(0));
        let first = rx[1].try_recv().unwrap();
        assert_eq!(q.depth_bytes(1), 120, "in flight still counts");
        drop(first);
        assert_eq!(q.depth_bytes(1), 60);
        assert!(
            q.over_mask() == 0 && q.clear_mask() == !shard_bit(1),
            "between the marks"
        );
        drop(rx[1].try_recv().unwrap());
        assert_eq!(q.clear_mask(), u64::MAX);
        assert_eq!(q.depth_chunks(1), 0);
    }

    fn spare(bytes: usize) -> Spare {
        Spare {
            data: vec![7; bytes],
            ..Spare::default()
        }
    }

    #[test]
    fn a_spare_is_kept_emptied_while_depth_and_spares_stay_below_the_high_water() {
        let (q, _rx) = ShardQueues::new(2, 1 << 20, 1 << 19);
        let view = q.depth_view();
        let given = spare(300 << 10);
        let ptr = given.data.as_ptr();
        view.recycle(1, given);
        assert_eq!(view.spare_bytes(1), 300 << 10);
        assert!(q.spare(0).is_none(), "spares are per shard");
        let back = q.spare(1).expect("kept");
        assert_eq!(
            (back.data.as_ptr(), back.data.len()),
            (ptr, 0),
            "the same pages, emptied"
        );
        assert_eq!(view.spare_bytes(1), 0);
        // Too small to be worth keeping.
        view.recycle(1, spare(4 << 10));
        assert!(q.spare(1).is_none());
        // Not past the high water with the depth: 800 KiB queued + 300 KiB.
        q.push(chunk(1, 800 << 10)).unwrap();
        view.recycle(1, spare(300 << 10));
        assert_eq!(view.spare_bytes(1), 0, "would reach the high water");
        view.recycle(1, spare(150 << 10));
        assert_eq!(view.spare_bytes(1), 150 << 10);
    }

    #[test]
    fn at_most_a_few_spares_are_kept() {
        let (q, _rx) = ShardQueues::new(1, 1 << 30, 1 << 29);
        let view = q.depth_view();
        for _ in 0..10 {
            view.recycle(0, spare(200 << 10));
        }
        assert_eq!(view.spare_bytes(0), MAX_SPARES * (200 << 10));
    }

    #[test]
    fn spares_give_way_to_chunks_and_never_pause_a_lane() {
        let (q, mut rx) = ShardQueues::new(1, 1 << 20, 1 << 19);
        let view = q.depth_view();
        view.recycle(0, spare(600 << 10));
        q.push(chunk(0, 500 << 10)).unwrap();
        assert_eq!(view.spare_bytes(0), 600 << 10);
        // Depth 500 KiB and spares 600 KiB pass the high water together:
        // the check drops the spares and the shard is not over.
        assert!(!q.is_over(0));
        assert_eq!(view.spare_bytes(0), 0);
        assert!(q.spare(0).is_none());
        q.push(chunk(0, 600 << 10)).unwrap();
        assert!(q.is_over(0), "the depth alone still pauses");
        drop(rx[0].try_recv());
        drop(rx[0].try_recv());
        assert_eq!(q.clear_mask(), u64::MAX);
    }

    #[test]
    fn dropping_every_sender_closes_the_queue() {
        let (q, mut rx) = ShardQueues::new(1, 10, 5);
        q.push(chunk(0, 1)).unwrap();
        drop(q);
        assert!(rx[0].try_recv().is_some());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(rt.block_on(rx[0].recv()).is_none());
    }

    #[test]
    fn push_to_closed_queue_returns_chunk_and_releases_accounting() {
        let (q, mut rx) = ShardQueues::new(1, 10, 5);
        rx[0].close();
        assert!(q.push(chunk(0, 7)).is_err());
        assert_eq!(q.depth_bytes(0), 0);
    }
}
