//! Tests of the encode chain: routing, the error policy, and exactly-once
//! replays across a schema switch.

use super::*;
use crate::sink::{BatchLimits, EncodeFailure, Encoded, ShardReceiver};
use std::time::Duration;

/// Writes the payload as the row; routes by its first byte when keyed.
struct ByteEncoder {
    keyed: bool,
}

impl RowEncode for ByteEncoder {
    fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure> {
        match msg.payload {
            // A byte no table takes (routed tests: a decode error).
            Some([0xFD]) => Err(EncodeFailure {
                column: Some("k".into()),
                value: None,
                reason: "no row for 0xFD".into(),
            }),
            Some(p) if !p.is_empty() => {
                out.extend_from_slice(p);
                Ok(Encoded::Row)
            }
            _ => Err(EncodeFailure {
                column: Some("k".into()),
                value: None,
                reason: "empty".into(),
            }),
        }
    }
    fn routes_by_key(&self) -> bool {
        self.keyed
    }
    fn route_hash(&self, row: &[u8]) -> Option<u64> {
        self.keyed.then(|| u64::from(row[0]))
    }
}

fn ctx(shards: usize, rows: u64) -> (ChainCtx, Vec<ShardReceiver>) {
    let (queues, rx) = ShardQueues::new(shards, 1 << 20, 1 << 19);
    let options = SinkOptions {
        limits: BatchLimits {
            rows,
            bytes: 1 << 20,
            interval: Duration::from_secs(3600),
            jitter: 0.0,
            sizing: crate::sink::RowSizing::Fixed,
        },
    };
    let ctx = ChainCtx {
        thread: 0,
        queues,
        options,
        metrics: Arc::new(Metrics::new()),
        clock: crate::clock::system(),
    };
    (ctx, rx)
}

fn push(chain: &mut dyn Chain, slot: usize, offset: i64, payload: &[u8]) -> Result<(), ChainError> {
    let msg = Message {
        topic: "t",
        partition: 0,
        offset,
        timestamp_ms: None,
        key: None,
        payload: Some(payload),
        headers: None,
    };
    chain.push(slot, &msg)
}

fn drain(rx: &mut ShardReceiver) -> Vec<u8> {
    let mut rows = Vec::new();
    while let Some(c) = rx.try_recv() {
        rows.extend_from_slice(&c.data);
    }
    rows
}

#[test]
fn keyed_rows_go_to_the_slot_of_their_hash() {
    let (ctx, mut rx) = ctx(2, 1000);
    // Weights 1 and 3: slot table [0, 1, 1, 1].
    let slots: Arc<[u16]> = Arc::from(vec![0u16, 1, 1, 1]);
    let mut chain = EncodeChain::with_slots(ByteEncoder { keyed: true }, &ctx, slots);
    let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), None);
    for (i, b) in (0u8..40).enumerate() {
        push(&mut chain, slot, i as i64, &[b]).unwrap();
    }
    chain.flush().unwrap();
    let on0 = drain(&mut rx[0]);
    let on1 = drain(&mut rx[1]);
    assert!(on0.iter().all(|b| b % 4 == 0), "{on0:?}");
    assert!(on1.iter().all(|b| b % 4 != 0), "{on1:?}");
    assert_eq!((on0.len(), on1.len()), (10, 30));
}

#[test]
fn a_keyed_decode_error_names_the_message_and_leaves_no_row() {
    let (ctx, mut rx) = ctx(2, 1000);
    let mut chain = EncodeChain::new(ByteEncoder { keyed: true }, &ctx);
    let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), None);
    push(&mut chain, slot, 0, &[1]).unwrap();
    let err = push(&mut chain, slot, 1, &[]).unwrap_err();
    assert!(err.to_string().contains("offset 1"), "{err}");
    chain.flush().unwrap();
    assert_eq!(drain(&mut rx[0]).len() + drain(&mut rx[1]).len(), 1);
}

/// The error policy `on_error`, tripping after 3 rejections in a row.
fn rejections(ctx: &ChainCtx, on_error: crate::policy::OnError) -> Arc<Rejections> {
    let policy = crate::policy::ErrorPolicy {
        on_error,
        tombstones_are_errors: false,
        limit: crate::policy::RejectLimit {
            window: 100,
            max_ratio: 1.0,
            max_consecutive: 3,
        },
    };
    Rejections::new(policy, &ctx.metrics, crate::clock::system())
}

fn with_policy(
    ctx: &ChainCtx,
    on_error: crate::policy::OnError,
    keyed: bool,
) -> EncodeChain<ByteEncoder> {
    EncodeChain::new(ByteEncoder { keyed }, ctx).with_rejections(rejections(ctx, on_error))
}

fn tombstone(chain: &mut dyn Chain, slot: usize, offset: i64) -> Result<(), ChainError> {
    let msg = Message {
        topic: "t",
        partition: 0,
        offset,
        timestamp_ms: None,
        key: None,
        payload: None,
        headers: None,
    };
    chain.push(slot, &msg)
}

/// Under `skip`, bad messages and tombstones leave no row, are counted,
/// and their offsets are covered: acknowledging every chunk moves the
/// watermark past the last of them.
#[test]
fn skipped_messages_and_tombstones_are_counted_and_committed_past() {
    for keyed in [false, true] {
        let (ctx, mut rx) = ctx(1, 1000);
        let mut chain = with_policy(&ctx, crate::policy::OnError::Skip, keyed);
        let mut cp = crate::checkpoint::Checkpointer::new();
        let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
        let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), Some(gate));
        push(&mut chain, slot, 0, &[1]).unwrap();
        push(&mut chain, slot, 1, &[]).unwrap();
        tombstone(&mut chain, slot, 2).unwrap();
        push(&mut chain, slot, 3, &[2]).unwrap();
        push(&mut chain, slot, 4, &[]).unwrap();
        tombstone(&mut chain, slot, 5).unwrap();
        chain.flush().unwrap();
        let mut rows = 0;
        while let Some(c) = rx[0].try_recv() {
            rows += c.rows;
            c.acks.iter().for_each(|a| {
                cp.ack(a);
            });
        }
        assert_eq!(rows, 2, "keyed {keyed}");
        assert_eq!(
            cp.watermark(LaneId(1)),
            Some(crate::record::Watermark(6)),
            "keyed {keyed}"
        );
        let text = ctx.metrics.encode_text();
        for needle in [
            "spate_messages_rejected_total{reason=\"invalid_value\",stage=\"decode\",topic=\"t\"} 2",
            "spate_messages_rejected_total{reason=\"tombstone\",stage=\"decode\",topic=\"t\"} 2",
        ] {
            assert!(text.contains(needle), "keyed {keyed}: {needle} in\n{text}");
        }
    }
}

/// A change stream's encoder: a tombstone and a payload `-` owe no row.
struct Changes {
    keyed: bool,
}

impl RowEncode for Changes {
    fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure> {
        match msg.payload {
            None => Ok(Encoded::Nothing {
                reason: "tombstone",
            }),
            Some(b"-") => Ok(Encoded::Nothing { reason: "truncate" }),
            Some(b"!") => Ok(Encoded::Stop {
                reason: "a truncate, and --on-truncate is fail",
            }),
            // A change into a collapsing table: cancel row, state row.
            Some(p) if p.starts_with(b"2") => {
                out.extend_from_slice(p);
                out.extend_from_slice(p);
                Ok(Encoded::Rows(2))
            }
            Some(p) => {
                out.extend_from_slice(p);
                Ok(Encoded::Row)
            }
        }
    }
    fn takes_tombstones(&self) -> bool {
        true
    }
    fn routes_by_key(&self) -> bool {
        self.keyed
    }
    fn route_hash(&self, row: &[u8]) -> Option<u64> {
        self.keyed.then(|| u64::from(row[0]))
    }
}

/// Messages that owe no row leave none, need no error policy (under the
/// default `fail` they are not errors), are counted by reason, and their
/// offsets are covered: the watermark moves past the last of them once
/// the rows around them are acknowledged, never before.
#[test]
fn messages_that_owe_no_row_are_counted_and_committed_past() {
    for keyed in [false, true] {
        let (ctx, mut rx) = ctx(1, 1000);
        let mut chain = EncodeChain::new(Changes { keyed }, &ctx);
        let mut cp = crate::checkpoint::Checkpointer::new();
        let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
        let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), Some(gate));
        push(&mut chain, slot, 0, &[1]).unwrap();
        tombstone(&mut chain, slot, 1).unwrap();
        push(&mut chain, slot, 2, b"-").unwrap();
        push(&mut chain, slot, 3, &[2]).unwrap();
        tombstone(&mut chain, slot, 4).unwrap();
        assert_eq!(
            cp.watermark(LaneId(1)),
            None,
            "keyed {keyed}: nothing acked yet"
        );
        chain.flush().unwrap();
        let mut rows = 0;
        while let Some(c) = rx[0].try_recv() {
            rows += c.rows;
            c.acks.iter().for_each(|a| {
                cp.ack(a);
            });
        }
        assert_eq!(rows, 2, "keyed {keyed}");
        assert_eq!(
            cp.watermark(LaneId(1)),
            Some(crate::record::Watermark(5)),
            "keyed {keyed}"
        );
        // A stop is the chain's error even with a policy that skips.
        let r = rejections(&ctx, crate::policy::OnError::Skip);
        let mut chain = EncodeChain::new(Changes { keyed }, &ctx).with_rejections(r);
        let slot = chain.add_lane(LaneId(2), &PartitionId::new("t", 0), None);
        let e = push(&mut chain, slot, 7, b"!").unwrap_err();
        assert!(
            e.to_string().contains("offset 7") && e.to_string().contains("--on-truncate"),
            "{e}"
        );
        let text = ctx.metrics.encode_text();
        for needle in [
            "spate_messages_skipped_total{reason=\"tombstone\",topic=\"t\"} 2",
            "spate_messages_skipped_total{reason=\"truncate\",topic=\"t\"} 1",
        ] {
            assert!(text.contains(needle), "keyed {keyed}: {needle} in\n{text}");
        }
    }
}

#[test]
fn fail_stops_at_the_first_bad_message_and_the_limit_names_itself() {
    let (ctx, _rx) = ctx(1, 1000);
    let mut chain = with_policy(&ctx, crate::policy::OnError::Fail, false);
    let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), None);
    tombstone(&mut chain, slot, 0).unwrap();
    let e = push(&mut chain, slot, 1, &[]).unwrap_err().to_string();
    assert!(
        e.contains("topic t partition 0 offset 1, column `k`"),
        "{e}"
    );

    let mut chain = with_policy(&ctx, crate::policy::OnError::Skip, false);
    let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), None);
    push(&mut chain, slot, 0, &[]).unwrap();
    push(&mut chain, slot, 1, &[]).unwrap();
    let e = push(&mut chain, slot, 2, &[]).unwrap_err().to_string();
    assert!(e.contains("3 consecutive messages rejected"), "{e}");
    assert!(e.contains("offset 2"), "{e}");
}

#[derive(Default)]
struct Letters(std::sync::Mutex<Vec<crate::policy::DeadLetter>>);

impl crate::policy::DeadLetterSink for Letters {
    fn store(&self, letter: &crate::policy::DeadLetter) -> Result<(), crate::policy::StoreError> {
        self.0.lock().unwrap().push(letter.clone());
        Ok(())
    }
    fn describe(&self) -> String {
        "memory".into()
    }
}

/// Under dead-letter, the bad message is stored with its error before
/// its offset is covered; the row-less tail is committed past.
#[test]
fn dead_letters_are_stored_before_their_offset_is_covered() {
    let (ctx, mut rx) = ctx(1, 1000);
    let letters = Arc::new(Letters::default());
    let policy = crate::policy::ErrorPolicy {
        on_error: crate::policy::OnError::DeadLetter,
        ..Default::default()
    };
    let r = Rejections::with_dead_letters(
        policy,
        &ctx.metrics,
        crate::clock::system(),
        Some(letters.clone()),
    );
    let mut chain = EncodeChain::new(ByteEncoder { keyed: false }, &ctx).with_rejections(r);
    let mut cp = crate::checkpoint::Checkpointer::new();
    let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
    let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), Some(gate));
    push(&mut chain, slot, 0, &[1]).unwrap();
    push(&mut chain, slot, 1, &[]).unwrap();
    chain.flush().unwrap();
    while let Some(c) = rx[0].try_recv() {
        c.acks.iter().for_each(|a| {
            cp.ack(a);
        });
    }
    assert_eq!(cp.watermark(LaneId(1)), Some(crate::record::Watermark(2)));
    let stored = letters.0.lock().unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(
        (stored[0].offset, stored[0].column.as_deref()),
        (1, Some("k"))
    );
    assert!(
        stored[0].error.contains("topic t partition 0 offset 1"),
        "{:?}",
        stored[0]
    );
}

#[test]
fn unkeyed_batches_take_turns_by_weight() {
    let (ctx, mut rx) = ctx(2, 2);
    let slots: Arc<[u16]> = Arc::from(vec![0u16, 1, 1, 1]);
    let mut chain = EncodeChain::with_slots(ByteEncoder { keyed: false }, &ctx, slots);
    let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), None);
    // 16 rows in batches of 2: 8 batches, 2 on shard 0, 6 on shard 1.
    for i in 0..16u8 {
        push(&mut chain, slot, i64::from(i), &[i]).unwrap();
    }
    chain.flush().unwrap();
    assert_eq!((drain(&mut rx[0]).len(), drain(&mut rx[1]).len()), (4, 12));
}

/// Writes the payload and the schema version it encodes for; switches to
/// the version `live` holds, as the ClickHouse sink's live encoder does.
struct Versioned {
    live: Arc<std::sync::atomic::AtomicU64>,
    version: u64,
}

impl RowEncode for Versioned {
    fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure> {
        out.extend_from_slice(msg.payload.unwrap_or_default());
        out.push(b'0' + self.version as u8);
        Ok(Encoded::Row)
    }
    fn schema_pending(&self) -> bool {
        self.live.load(std::sync::atomic::Ordering::Acquire) != self.version
    }
    fn schema_switch(&mut self) -> Option<u64> {
        let v = self.live.load(std::sync::atomic::Ordering::Acquire);
        (v != self.version).then(|| {
            self.version = v;
            v
        })
    }
}

/// Issue 29 point 7: a table change that arrives while an exactly-once
/// replay is half cut waits for the replayed block, which is encoded with
/// the schema it started with (one version per block, as the first time)
/// and is cut at its recorded offsets; the rows after it switch.
#[test]
fn a_schema_switch_waits_for_a_half_cut_replay() {
    let (ctx, mut rx) = ctx(1, 1000);
    let live = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let encoder = Versioned {
        live: live.clone(),
        version: 0,
    };
    let mut chain = EncodeChain::new(encoder, &ctx).exactly_once(Arc::new(Recorded(vec![(0, 3)])));
    let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), None);
    chain.set_epoch(slot, 1);
    push(&mut chain, slot, 0, b"a").unwrap();
    push(&mut chain, slot, 1, b"b").unwrap();
    live.store(1, std::sync::atomic::Ordering::Release);
    push(&mut chain, slot, 2, b"c").unwrap();
    push(&mut chain, slot, 3, b"d").unwrap();
    push(&mut chain, slot, 4, b"e").unwrap();
    chain.flush().unwrap();
    let mut chunks = Vec::new();
    while let Some(c) = rx[0].try_recv() {
        chunks.push((
            c.schema,
            c.spans[0].first.0,
            c.spans[0].last.0,
            c.data.clone(),
        ));
    }
    assert_eq!(
        chunks,
        vec![(0, 0, 3, b"a0b0c0d0".to_vec()), (1, 4, 4, b"e1".to_vec())],
        "the replayed block mixes two schemas or was cut short"
    );
}

/// `encoder`'s chain, exactly-once over `recorded` blocks if given, with
/// one lane of `t/0` counted by a checkpointer: `(chain, checkpointer, slot)`.
fn gated_chain<E: RowEncode>(
    encoder: E,
    ctx: &ChainCtx,
    recorded: Option<Vec<(i64, i64)>>,
) -> (EncodeChain<E>, crate::checkpoint::Checkpointer, usize) {
    let mut chain = EncodeChain::new(encoder, ctx);
    if let Some(recorded) = recorded {
        chain = chain.exactly_once(Arc::new(Recorded(recorded)));
    }
    let mut cp = crate::checkpoint::Checkpointer::new();
    let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
    let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), Some(gate));
    chain.set_epoch(slot, 1);
    (chain, cp, slot)
}

/// Exactly-once plans: partition 0 recorded these blocks `(first, last)`.
#[derive(Debug)]
struct Recorded(Vec<(i64, i64)>);

impl crate::sink::BlockPlans for Recorded {
    fn replayed(
        &self,
        _: &PartitionId,
        from: crate::record::Offset,
        generation: Option<u64>,
    ) -> Result<crate::sink::Replay, String> {
        use crate::record::Offset;
        Ok(crate::sink::Replay {
            blocks: (self.0.iter())
                .map(|&(a, b)| (Offset(a), Offset(b)))
                .filter(|b| b.1 >= from)
                .collect(),
            epoch: generation,
        })
    }
}

/// One step of a lane's input in [`exactly_once_rowless_messages_reach_the_end`].
#[derive(Clone, Copy, Debug)]
enum Step {
    Row(i64),
    Tombstone(i64),
    /// A tick one second on: every deadline due.
    Tick,
}

/// Exactly-once with messages that owe no row between rows, first cut and
/// replayed, with or without a tick between them: every chunk acknowledged
/// moves the watermark to the end. The second script failed before the
/// writer closed a pending skip ahead of a block's seal: the block took
/// the sequence number first and the watermark stopped at the tombstone.
#[test]
fn exactly_once_rowless_messages_reach_the_end() {
    use Step::{Row, Tick, Tombstone};
    let scripts: [&[Step]; 2] = [
        &[Row(0), Row(1), Tombstone(2), Row(3), Row(4), Tombstone(5)],
        &[Row(0), Row(1), Tombstone(2), Row(3), Tick, Row(4)],
    ];
    for script in scripts {
        for recorded in [vec![], vec![(0, 1)], vec![(0, 1), (3, 4)]] {
            let (ctx, mut rx) = ctx(1, 1000);
            let (mut chain, mut cp, slot) =
                gated_chain(Changes { keyed: false }, &ctx, Some(recorded.clone()));
            let mut end = 0;
            for step in script {
                match *step {
                    Row(o) => push(&mut chain, slot, o, b"r").unwrap(),
                    Tombstone(o) => tombstone(&mut chain, slot, o).unwrap(),
                    Tick => chain.tick(Instant::now() + Duration::from_secs(1)).unwrap(),
                }
                if let Row(o) | Tombstone(o) = *step {
                    end = o + 1;
                }
            }
            chain.flush().unwrap();
            let mut acks = Vec::new();
            while let Some(c) = rx[0].try_recv() {
                c.acks.iter().for_each(|a| {
                    cp.ack(a);
                });
                acks.push(c.acks);
            }
            assert_eq!(
                cp.watermark(LaneId(1)),
                Some(crate::record::Watermark(end)),
                "{script:?}, recorded {recorded:?}: acks {acks:?}"
            );
        }
    }
}

/// A message of several rows (a collapsing table's cancel and state rows):
/// an exactly-once block takes them together and counts each; an
/// at-least-once chain, which isolates rejected rows one message at a
/// time, stops at it with nothing of it written.
#[test]
fn several_rows_of_a_message_go_exactly_once_only() {
    for keyed in [false, true] {
        let (blocks, mut rx) = ctx(1, 1000);
        let mut chain =
            EncodeChain::new(Changes { keyed }, &blocks).exactly_once(Arc::new(Recorded(vec![])));
        let mut cp = crate::checkpoint::Checkpointer::new();
        let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
        let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), Some(gate.clone()));
        chain.set_epoch(slot, 1);
        push(&mut chain, slot, 0, b"a").unwrap();
        push(&mut chain, slot, 1, b"2b").unwrap();
        assert_eq!(gate.pending(), 3, "keyed {keyed}: each row counts");
        chain.flush().unwrap();
        let c = rx[0].try_recv().expect("a chunk");
        assert_eq!(
            (c.data.as_slice(), c.rows),
            (&b"a2b2b"[..], 3),
            "keyed {keyed}"
        );
        c.acks.iter().for_each(|a| {
            cp.ack(a);
        });
        assert_eq!(gate.pending(), 0, "keyed {keyed}: all acknowledged");

        let (once, mut rx) = ctx(1, 1000);
        let mut chain = EncodeChain::new(Changes { keyed }, &once);
        let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), None);
        push(&mut chain, slot, 0, b"a").unwrap();
        let e = push(&mut chain, slot, 1, b"2b").unwrap_err();
        assert!(
            e.to_string().contains("only --delivery exactly-once"),
            "keyed {keyed}: {e}"
        );
        chain.flush().unwrap();
        let c = rx[0].try_recv().expect("a chunk");
        assert_eq!((c.data.as_slice(), c.rows), (&b"a"[..], 1), "keyed {keyed}");
    }
}

/// Writes the payload as the row; `T` acts at a barrier, logged.
struct Acts {
    log: Arc<std::sync::Mutex<Vec<String>>>,
}

impl RowEncode for Acts {
    fn encode(&mut self, msg: &Message<'_>, out: &mut Vec<u8>) -> Result<Encoded, EncodeFailure> {
        match msg.payload {
            Some(b"T") => Ok(Encoded::Barrier { reason: "truncate" }),
            Some(p) => {
                out.extend_from_slice(p);
                Ok(Encoded::Row)
            }
            None => Ok(Encoded::Nothing {
                reason: "tombstone",
            }),
        }
    }
    fn barrier(&mut self, msg: &Message<'_>) -> Result<(), String> {
        self.log
            .lock()
            .unwrap()
            .push(format!("act at {}", msg.offset));
        Ok(())
    }
}

/// A barrier acts only once every row of its lane read before it is
/// acknowledged, and the rows after it are appended only then; the
/// barrier's offset is covered, so the watermark passes it. Both
/// deliveries.
#[test]
fn a_barrier_acts_after_the_rows_before_it_are_acknowledged() {
    for exactly_once in [false, true] {
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (ctx, mut rx) = ctx(1, 1000);
        let (mut chain, mut cp, slot) =
            gated_chain(Acts { log: log.clone() }, &ctx, exactly_once.then(Vec::new));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // The sink and the checkpointer: acknowledge every chunk, a while
        // after it arrives, and log which offsets.
        let acker = {
            let (log, stop) = (log.clone(), stop.clone());
            let mut rx = rx.remove(0);
            std::thread::spawn(move || {
                let mut acked = 0;
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    match rx.try_recv() {
                        Some(c) => {
                            std::thread::sleep(Duration::from_millis(50));
                            let offsets: Vec<i64> = (c.spans.iter())
                                .flat_map(|s| s.first.0..=s.last.0)
                                .collect();
                            log.lock().unwrap().push(format!("acked {offsets:?}"));
                            c.acks.iter().for_each(|a| {
                                cp.ack(a);
                            });
                            acked += 1;
                        }
                        None => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
                (cp, acked)
            })
        };
        push(&mut chain, slot, 0, b"a").unwrap();
        push(&mut chain, slot, 1, b"b").unwrap();
        push(&mut chain, slot, 2, b"T").unwrap();
        push(&mut chain, slot, 3, b"c").unwrap();
        chain.flush().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, std::sync::atomic::Ordering::Release);
        let (cp, _) = acker.join().unwrap();
        let log = log.lock().unwrap().clone();
        let act = log.iter().position(|l| l == "act at 2").expect("acted");
        let before = log
            .iter()
            .position(|l| l.contains("0, 1"))
            .expect("0, 1 acked");
        let after = log.iter().position(|l| l.contains('3')).expect("3 acked");
        assert!(
            before < act && act < after,
            "exactly-once {exactly_once}: {log:?}"
        );
        assert_eq!(
            cp.watermark(LaneId(1)),
            Some(crate::record::Watermark(4)),
            "exactly-once {exactly_once}: {log:?}"
        );
    }
}

/// A barrier waiting for acknowledgements that will not come gives up as
/// soon as the controller says the lane is stopping (a revocation, a
/// shutdown): the poll ends, nothing was done, and the message is not
/// covered, so its lane's next owner reads it again.
#[test]
fn a_barrier_gives_up_when_its_lane_is_stopping() {
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (ctx, _rx) = ctx(1, 1000);
    let mut chain = EncodeChain::new(Acts { log: log.clone() }, &ctx);
    let mut cp = crate::checkpoint::Checkpointer::new();
    let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
    let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), Some(gate.clone()));
    push(&mut chain, slot, 0, b"a").unwrap();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        cp.stopping(&[LaneId(1)]);
        cp
    });
    let started = Instant::now();
    push(&mut chain, slot, 1, b"T").unwrap();
    let waited = started.elapsed();
    let cp = stopper.join().unwrap();
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_secs(5),
        "waited {waited:?}"
    );
    assert!(
        log.lock().unwrap().is_empty(),
        "acted: {:?}",
        log.lock().unwrap()
    );
    assert_eq!(cp.watermark(LaneId(1)), None, "nothing acknowledged");
}

/// Routes by the payload's first byte: even to table 0, odd to table 1;
/// 0xFF has no table, 0xFE waits for one being made, 0xFD owes none.
struct ByParity;

impl Router for ByParity {
    fn route(&mut self, msg: &Message<'_>) -> Routed {
        match msg.payload.and_then(|p| p.first()) {
            Some(0xFF) => Routed::Refused("table db.x is not allowed by --allow-tables".into()),
            Some(0xFE) => Routed::Wait("db.new".into()),
            Some(0xFD) => Routed::Nothing("tombstone"),
            Some(b) => Routed::Table(usize::from(b % 2)),
            None => Routed::Refused("no table name".into()),
        }
    }
}

fn acks(rx: &mut ShardReceiver) -> (Vec<u8>, Vec<crate::checkpoint::AckRange>) {
    let (mut rows, mut acks) = (Vec::new(), Vec::new());
    while let Some(c) = rx.try_recv() {
        rows.extend_from_slice(&c.data);
        acks.extend(c.acks.iter().cloned());
    }
    (rows, acks)
}

#[test]
fn a_routed_chain_splits_a_partition_across_its_tables_in_one_segment() {
    // Table 0 on shard 0; table 1 on shards 1 and 2 (unkeyed: batches
    // take turns).
    let (ctx, mut rx) = ctx(3, 4);
    let unroutable = rejections(&ctx, crate::policy::OnError::Skip);
    let tables = vec![
        (ByteEncoder { keyed: false }, Arc::from(vec![0u16])),
        (ByteEncoder { keyed: false }, Arc::from(vec![1u16, 2])),
    ];
    let mut chain = EncodeChain::routed(tables, &ctx, Box::new(ByParity), unroutable)
        .with_rejections(rejections(&ctx, crate::policy::OnError::Fail));
    let mut cp = crate::checkpoint::Checkpointer::new();
    let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
    let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), Some(gate));
    for (offset, b) in [2u8, 3, 4, 0xFF, 0xFD, 5, 6].into_iter().enumerate() {
        push(&mut chain, slot, offset as i64, &[b]).unwrap();
    }
    assert_eq!(
        chain.take_shards_fed(slot),
        crate::sink::shard_bit(0) | crate::sink::shard_bit(1),
        "the lane fed both tables' shards (pausing it when either is full)"
    );
    chain.flush().unwrap();
    let (rows0, acks0) = acks(&mut rx[0]);
    let (rows1, acks1) = acks(&mut rx[1]);
    assert_eq!(rows0, vec![2, 4, 6], "table 0's rows");
    assert_eq!(rows1, vec![3, 5], "table 1's rows");
    assert!(acks(&mut rx[2]).1.is_empty());
    // One segment in two parts, one per table: acknowledged (and its
    // offsets committed) only once both tables took their rows. The
    // refused message at offset 3 and the one owing nothing at 4 are
    // inside it, covered.
    let rows_acks: Vec<_> = acks0.iter().chain(&acks1).filter(|a| a.rows > 0).collect();
    assert_eq!(rows_acks.len(), 2, "{rows_acks:?}");
    assert!(
        rows_acks
            .iter()
            .all(|a| a.seq == rows_acks[0].seq && a.parts == 2),
        "{rows_acks:?}"
    );
    for a in &acks1 {
        cp.ack(a);
    }
    assert_eq!(
        cp.watermark(LaneId(1)),
        None,
        "table 1 took its rows, table 0 not yet: nothing to commit"
    );
    for a in &acks0 {
        cp.ack(a);
    }
    assert_eq!(
        cp.watermark(LaneId(1)),
        Some(crate::record::Watermark(7)),
        "both tables took their rows: past every offset, the refused one too"
    );
    let text = ctx.metrics.encode_text();
    for needle in [
        "spate_messages_rejected_total{reason=\"table_not_allowed\",stage=\"decode\",topic=\"t\"} 1",
        "spate_messages_skipped_total{reason=\"tombstone\",topic=\"t\"} 1",
    ] {
        assert!(text.contains(needle), "{needle} in\n{text}");
    }
}

#[test]
fn a_message_waiting_for_its_table_holds_its_lane_uncovered() {
    let (ctx, mut rx) = ctx(2, 1000);
    let unroutable = rejections(&ctx, crate::policy::OnError::Skip);
    let tables = vec![
        (ByteEncoder { keyed: false }, Arc::from(vec![0u16])),
        (ByteEncoder { keyed: false }, Arc::from(vec![1u16])),
    ];
    let mut chain = EncodeChain::routed(tables, &ctx, Box::new(ByParity), unroutable);
    let mut cp = crate::checkpoint::Checkpointer::new();
    let gate = cp.add_lane(LaneId(1), PartitionId::new("t", 0), 1000);
    let held = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), Some(gate));
    let other = chain.add_lane(LaneId(2), &PartitionId::new("t", 1), None);
    push(&mut chain, held, 0, &[2]).unwrap();
    push(&mut chain, held, 1, &[0xFE]).unwrap();
    // Nothing of the held lane from here on, whatever its table.
    push(&mut chain, held, 2, &[4]).unwrap();
    push(&mut chain, held, 3, &[0xFF]).unwrap();
    push(&mut chain, other, 0, &[3]).unwrap();
    chain.flush().unwrap();
    let (rows0, acks0) = acks(&mut rx[0]);
    let (rows1, acks1) = acks(&mut rx[1]);
    assert_eq!((rows0, rows1), (vec![2], vec![3]));
    for a in acks0.iter().chain(&acks1) {
        cp.ack(a);
    }
    assert_eq!(
        cp.watermark(LaneId(1)),
        Some(crate::record::Watermark(1)),
        "the watermark stops before the waiting message"
    );
    assert!(
        !ctx.metrics
            .encode_text()
            .contains("spate_messages_rejected_total{"),
        "nothing rejected"
    );
    // A new owner of the slot is not held.
    chain.remove_lane(held);
    let again = chain.add_lane(LaneId(3), &PartitionId::new("t", 0), None);
    push(&mut chain, again, 1, &[4]).unwrap();
    chain.flush().unwrap();
    assert_eq!(acks(&mut rx[0]).0, vec![4]);
}

#[test]
fn messages_without_a_table_do_not_count_toward_the_decode_limits() {
    // Both policies skip; the decode one trips at 3 rejections in a row,
    // the one of messages without a table has no limit (as `run` sets it).
    let (ctx, _rx) = ctx(2, 1000);
    let tables = vec![
        (ByteEncoder { keyed: false }, Arc::from(vec![0u16])),
        (ByteEncoder { keyed: false }, Arc::from(vec![1u16])),
    ];
    let unlimited = crate::policy::ErrorPolicy {
        on_error: crate::policy::OnError::Skip,
        tombstones_are_errors: false,
        limit: crate::policy::RejectLimit {
            window: 100,
            max_ratio: 1.0,
            max_consecutive: 0,
        },
    };
    let unroutable = Rejections::new(unlimited, &ctx.metrics, crate::clock::system());
    let mut chain = EncodeChain::routed(tables, &ctx, Box::new(ByParity), unroutable)
        .with_rejections(rejections(&ctx, crate::policy::OnError::Skip));
    let slot = chain.add_lane(LaneId(1), &PartitionId::new("t", 0), None);
    // A decode error, a good row, a message without a table, ...: the good
    // rows end the decode errors' run, whatever comes between.
    let mut offset = 0;
    for _ in 0..4 {
        for b in [0xFD, 2, 0xFF] {
            push(&mut chain, slot, offset, &[b]).unwrap_or_else(|e| panic!("offset {offset}: {e}"));
            offset += 1;
        }
    }
}

/// The consumer delivers offsets a lane already read (a librdkafka
/// re-fetch; the eager rebalance storm found such duplicates under
/// exactly-once): an exactly-once chain writes each offset once, its
/// blocks cover the partition without overlap and the watermark reaches
/// the end; an at-least-once chain writes the repeated offsets again.
#[test]
fn offsets_delivered_again_are_written_once_exactly_once() {
    // 0..6, then the consumer goes back to 2 and reads on to 10, with a
    // tombstone (a skipped offset) among the repeated ones.
    let offsets: Vec<i64> = (0..6).chain(2..10).collect();
    for exactly_once in [true, false] {
        let (ctx, mut rx) = ctx(1, 4);
        let (mut chain, mut cp, slot) =
            gated_chain(Changes { keyed: false }, &ctx, exactly_once.then(Vec::new));
        for &o in &offsets {
            if o == 3 {
                tombstone(&mut chain, slot, o).unwrap();
            } else {
                push(&mut chain, slot, o, b"r").unwrap();
            }
        }
        chain.flush().unwrap();
        let (mut rows, mut ranges) = (0, Vec::new());
        while let Some(c) = rx[0].try_recv() {
            rows += c.rows;
            for a in &c.acks {
                cp.ack(a);
                ranges.push((a.start.0, a.end.0));
            }
        }
        if exactly_once {
            assert_eq!(rows, 9, "each offset but the tombstone once: {ranges:?}");
            ranges.sort_unstable();
            for pair in ranges.windows(2) {
                assert!(pair[0].1 < pair[1].0, "ranges overlap: {ranges:?}");
            }
            assert_eq!(
                cp.watermark(LaneId(1)),
                Some(crate::record::Watermark(10)),
                "{ranges:?}"
            );
            let text = ctx.metrics.encode_text();
            let needle = "spate_messages_skipped_total{reason=\"redelivered\",topic=\"t\"} 4";
            assert!(text.contains(needle), "{needle} in\n{text}");
        } else {
            assert_eq!(rows, 9 + 3, "at-least-once writes 2, 4 and 5 again");
        }
    }
}
