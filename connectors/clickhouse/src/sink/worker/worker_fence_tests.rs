//! The worker's exactly-once fence checks against a scripted intent log
//! (issue 29 point 4): before the first attempt and before every retry,
//! never after a success.

use super::*;
use crate::sink::exactly_once::fencing;
use spate_core::record::PartitionId;
use std::sync::atomic::AtomicUsize;

/// A scripted intent log: every record succeeds; each fence read answers
/// the next of `fences` (the partition's highest fence), the last one
/// again once the script is used up.
struct FakeIntents {
    fences: StdMutex<VecDeque<u64>>,
    last: StdMutex<u64>,
    records: AtomicUsize,
    reads: AtomicUsize,
}

impl FakeIntents {
    fn new(fences: &[u64]) -> Arc<Self> {
        Arc::new(FakeIntents {
            fences: StdMutex::new(fences.iter().copied().collect()),
            last: StdMutex::new(0),
            records: AtomicUsize::new(0),
            reads: AtomicUsize::new(0),
        })
    }
}

impl Intents for FakeIntents {
    fn record(
        &self,
        _shard: usize,
        _spans: &[ChunkSpan],
    ) -> impl std::future::Future<Output = Result<(), InsertError>> + Send {
        self.records.fetch_add(1, Ordering::AcqRel);
        async { Ok(()) }
    }

    fn may_send(
        &self,
        _partition: &PartitionId,
        epoch: u64,
    ) -> impl std::future::Future<Output = Result<Result<(), u64>, ClientError>> + Send {
        self.reads.fetch_add(1, Ordering::AcqRel);
        let mut last = self.last.lock().unwrap();
        if let Some(f) = self.fences.lock().unwrap().pop_front() {
            *last = f;
        }
        let fence = *last;
        async move { Ok(fencing::may_send(fence, epoch).then_some(()).ok_or(fence)) }
    }
}

/// One exactly-once block of partition `t`/3 recorded under `epoch`.
fn block(epoch: u64) -> Vec<ChunkSpan> {
    vec![ChunkSpan {
        partition: PartitionId::new("t", 3),
        first: Offset(0),
        last: Offset(4),
        rows: 5,
        epoch: Some(epoch),
    }]
}

fn start(script: Vec<Answer>, log: &Arc<FakeIntents>) -> Harness {
    let retry = no_jitter(100, 400);
    Harness::start_logged(
        vec![script],
        retry,
        Extras::default(),
        Some(log.clone()),
        |w| tokio::spawn(w.run()),
    )
}

/// A block checked before its first send, whose send fails, is not
/// retried once a later owner (epoch 9) fenced its partition: the retry
/// could land after the new owner's replay and after the deduplication
/// window moved past it. Its offsets are abandoned (they replay there).
#[tokio::test(start_paused = true)]
async fn a_retry_is_dropped_once_a_later_owner_fenced_the_partition() {
    let log = FakeIntents::new(&[5, 9]);
    let mut h = start(vec![network()], &log);
    h.push_spans(0, 5, block(5));
    h.finish().await;
    assert_eq!(h.attempts().len(), 1, "the retry is never sent");
    let events = h.events();
    assert!(acked_seqs(&events).is_empty(), "nothing acknowledged");
    assert!(
        matches!(&events[..], [AckEvent::Abandoned(r)] if r[0].seq == 0),
        "{events:?}"
    );
    assert_eq!(log.records.load(Ordering::Acquire), 1);
    assert_eq!(log.reads.load(Ordering::Acquire), 2, "first send, retry");
}

/// While no later owner fenced the partition, retries go on (each after
/// a fence read), and a block whose first attempt lands reads the fence
/// once only: the check costs nothing off the retry path.
#[tokio::test(start_paused = true)]
async fn retries_go_on_while_unfenced_and_a_success_reads_no_fence_again() {
    let log = FakeIntents::new(&[5]);
    let mut h = start(vec![network(), network()], &log);
    h.push_spans(0, 5, block(5));
    h.push_spans(1, 5, block(5));
    h.finish().await;
    assert_eq!(
        h.attempts().len(),
        4,
        "3 attempts of the first, 1 of the second"
    );
    assert_eq!(acked_seqs(&h.events()), [0, 1]);
    assert_eq!(
        log.reads.load(Ordering::Acquire),
        4,
        "per block one before the first send, plus one per retry"
    );
}
