//! What an insert sends: a chunk's rows as the bytes and statement of
//! every attempt ([`Worker::body`]), re-encoded for the table as it is now
//! when the chunk was encoded for an older schema version, or after an
//! attempt failed with a schema error; and the memory that costs, within
//! the worker's share of the queue budget.

use super::{Worker, IN_FLIGHT_COPIES};
use crate::client::InsertError;
use crate::encode::NativeScratch;
use crate::sink::exactly_once::stage::Intents;
use crate::sink::insert::outcome::{lock, Prepared};
use crate::sink::insert::settings::{dedup_token, takes_dedup_token, DEDUP_TOKEN};
use crate::sink::insert::target::InsertTarget;
use crate::sink::schema_change::recode;
use bytes::Bytes;
use spate_core::error::{FatalError, Fault};
use spate_core::sink::{Chunk, QueueDepths};
use std::ops::Range;
use std::sync::Arc;

/// What an insert of a `len`-byte chunk adds to its shard's depth while it
/// runs: nothing when its copies fit in the worker's room.
/// What an insert of a `len`-byte chunk adds to its shard's depth while it
/// runs: nothing when its copies fit in the worker's room.
pub(super) fn in_flight_charge(depths: &QueueDepths, len: usize) -> Option<usize> {
    let copies = IN_FLIGHT_COPIES * len;
    (copies > depths.worker_room()).then_some(copies)
}

impl<C: InsertTarget, L: Intents> Worker<C, L> {
    /// The bytes every attempt of `rows` (whole encoded rows of `chunk`)
    /// sends and their statement (made once, and again after the table's
    /// columns changed).
    pub(crate) fn body(&self, chunk: &Chunk, rows: &[u8]) -> Result<Prepared, FatalError> {
        let room = self.depths.worker_room();
        let keep = (room > 0).then(|| (self.scratch.clone(), room));
        if let Some(live) = self.shared.live.get() {
            let now = live.current();
            let own = live.get(chunk.schema).unwrap_or_else(|| now.clone());
            let body = self.transposing(room, |s| recode::body_for(&own, &now, rows, s));
            // Not convertible: the pipeline fails without committing the
            // chunk and starts again (the exit report says so), so that
            // its messages are read once more and encoded for the new
            // columns.
            let body = body
                .map_err(|e| FatalError::new(self.pace.context(), e, Fault::User).start_again())?;
            return Ok(Prepared {
                bytes: Bytes::from(body.bytes),
                query: body.query,
                for_version: now.id,
                keep,
            });
        }
        let query = Arc::new(self.shared.query.clone());
        let bytes = match &self.shared.native {
            Some(layout) => self
                .transposing(room, |s| layout.transpose_in(rows, s))
                .map(Bytes::from)
                .map_err(|e| {
                    FatalError::new(self.pace.context(), e.to_string(), Fault::Internal)
                })?,
            None => Bytes::copy_from_slice(rows),
        };
        Ok(Prepared {
            bytes,
            query,
            for_version: 0,
            keep,
        })
    }

    /// Run `f` on the worker's scratch, then free what of it does not fit
    /// in `room` (the worker's share of the budget).
    fn transposing<T>(&self, room: usize, f: impl FnOnce(&mut NativeScratch) -> T) -> T {
        let mut scratch = lock(&self.scratch);
        let out = f(&mut scratch);
        scratch.fit(room);
        out
    }

    /// After a failure that says the columns changed: the chunk's bytes
    /// for the columns as they are now, if they changed since `sent` was
    /// made (re-read at once, once per chunk, if spate has not seen it).
    pub(super) async fn after_schema_error(
        &mut self,
        chunk: &Chunk,
        rows: &[u8],
        sent: &Prepared,
        error: &InsertError,
        refreshed: &mut bool,
    ) -> Option<Result<Prepared, FatalError>> {
        let schema_codes = [8, 10, 16, 33, 47, 53, 70, 368];
        if !error.code.is_some_and(|c| schema_codes.contains(&c)) {
            return None;
        }
        let live = self.shared.live.get()?.clone();
        if live.version() == sent.for_version {
            if *refreshed {
                return None;
            }
            *refreshed = true;
            tokio::select! {
                _ = live.refresh_now() => {}
                () = self.pace.deadline() => return None,
            }
        }
        (live.version() != sent.for_version).then(|| self.body(chunk, rows))
    }

    /// The insert settings of `chunk` (or of rows `part` of it, while
    /// bisecting: each part gets a token of its own, or the server would
    /// drop the second half as a repeat of the first).
    pub(super) fn chunk_settings(
        &self,
        chunk: &Chunk,
        part: Option<&Range<usize>>,
    ) -> Vec<(String, String)> {
        if !takes_dedup_token(&self.shared.query.settings) {
            return Vec::new();
        }
        dedup_token(chunk.shard, &chunk.spans)
            .map(|t| match part {
                Some(r) => format!("{t}-rows{}-{}", r.start, r.end),
                None => t,
            })
            .map(|t| vec![(DEDUP_TOKEN.to_string(), t)])
            .unwrap_or_default()
    }
}
