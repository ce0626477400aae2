//! [`KafkaLane`]: one assigned partition, polled on a driver thread.
//!
//! The lane owns the partition's split librdkafka queue. `poll` takes only
//! what is already fetched (zero timeout) and hands each message to the
//! chain; a message the chain refuses stops the lane right there. With
//! `--until-end`, the first partition EOF ends the lane and tells the
//! source, which reports `CommitReady`.

use crate::context::SpateContext;
use crossbeam_channel::Sender;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use spate_core::error::SourceError;
use spate_core::record::{Message, PartitionId};
use spate_core::source::{Deliver, Lane, LaneError, LaneId, LanePoll};
use std::time::Duration;

/// A lane reached the end of its partition.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaneEnd {
    pub(crate) lane: LaneId,
    /// Next offset after the last message the lane delivered; `None` if it
    /// delivered nothing.
    pub(crate) next_offset: Option<i64>,
}

/// One assigned partition's stream.
pub struct KafkaLane {
    id: LaneId,
    partition: PartitionId,
    queue: PartitionQueue<SpateContext>,
    until_end: bool,
    ended_tx: Sender<LaneEnd>,
    next_offset: Option<i64>,
    ended: bool,
}

impl KafkaLane {
    pub(crate) fn new(
        id: LaneId,
        partition: PartitionId,
        queue: PartitionQueue<SpateContext>,
        until_end: bool,
        ended_tx: Sender<LaneEnd>,
    ) -> Self {
        Self {
            id,
            partition,
            queue,
            until_end,
            ended_tx,
            next_offset: None,
            ended: false,
        }
    }
}

impl Lane for KafkaLane {
    fn id(&self) -> LaneId {
        self.id
    }

    fn partition(&self) -> &PartitionId {
        &self.partition
    }

    fn poll(&mut self, max: usize, deliver: &mut Deliver<'_>) -> Result<LanePoll, LaneError> {
        if self.ended {
            return Ok(LanePoll::Ended);
        }
        let mut n = 0;
        while n < max {
            match self.queue.poll(Duration::ZERO) {
                None => break,
                Some(Ok(m)) => {
                    let msg = Message {
                        topic: &self.partition.topic,
                        partition: m.partition(),
                        offset: m.offset(),
                        timestamp_ms: m.timestamp().to_millis(),
                        key: m.key(),
                        payload: m.payload(),
                    };
                    deliver(&msg)?;
                    self.next_offset = Some(m.offset() + 1);
                    n += 1;
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {
                    if self.until_end {
                        self.ended = true;
                        tracing::info!(partition = %self.partition, next_offset = ?self.next_offset, "lane reached the end of its partition");
                        let _ = self.ended_tx.send(LaneEnd {
                            lane: self.id,
                            next_offset: self.next_offset,
                        });
                        return Ok(if n > 0 {
                            LanePoll::Delivered(n)
                        } else {
                            LanePoll::Ended
                        });
                    }
                }
                Some(Err(e)) if is_fatal(&e) => {
                    return Err(LaneError::Source(SourceError::Fatal(format!(
                        "{}: {e}",
                        self.partition
                    ))));
                }
                Some(Err(e)) => {
                    tracing::warn!(partition = %self.partition, error = %e, "fetch error; librdkafka retries");
                }
            }
        }
        Ok(LanePoll::Delivered(n))
    }
}

fn is_fatal(e: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(C::TopicAuthorizationFailed | C::GroupAuthorizationFailed | C::Fatal)
    )
}
