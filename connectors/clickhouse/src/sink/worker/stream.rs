//! Streamed inserts: one long `INSERT ... FORMAT Native` request per
//! insert worker, each batch it takes streamed into it as one more Native
//! block (chunked transfer), the request ended after about a second
//! ([`StreamBounds::max_age`]) or at a row or byte bound, whichever comes
//! first, or when the queue has nothing more for it.
//!
//! Why: the server's cost per row follows the size of the parts an
//! insert makes, not of the blocks it is sent in. A request of several
//! blocks is squashed by the server (`min_insert_block_size_rows`) into
//! one part: 55 requests of 90,910 rows cost an 18.16 server 1.72x the
//! CPU per row of 5 requests of 11 such blocks each, and those 0.91x its
//! cost for the same rows sent by `clickhouse-client` (2026-12-06, 5M
//! small events; bench/README.md "Streamed inserts").
//!
//! One part per request, so a request is all or nothing: the request
//! sets `min_insert_block_size_rows` to its own row bound and
//! `min_insert_block_size_bytes` to 0 (the byte criterion off), so the
//! server squashes every block of the request into one block written at
//! its end, whatever a profile says. A request holds at most
//! `max_rows` rows unless one batch alone is larger (then it is that one
//! block). A request without an answer (a timeout, a broken connection,
//! a server that stops reading) may still be written by the server: it is
//! sent again whole, same blocks and token, with a doubled timeout (and to
//! the shard's next replica after a replica failure), so a table that
//! deduplicates drops the copy. A request the server refused with an
//! error wrote nothing: its batches then go one by one through the
//! per-batch path ([`Worker::insert`]: retries with backoff, failover, the
//! schema re-encoding, the isolation of rejected rows). Where the table
//! does not deduplicate, a resent request that had been written is in
//! twice: at-least-once.
//!
//! Acknowledgement, watermark and commit do not change: every batch of a
//! request is acknowledged once the request's final 200 arrived (the
//! server answers at the end of the query, `wait_end_of_query=1`), never
//! before. The batches leave their shard's queue depth once sent (lanes
//! pause on what is queued alone). Up to the request's byte bound, a
//! share of the budget of its own (`Budget::streamed` in the binary's
//! `run::sinks`), they stay in memory until the answer, for the resend
//! above, and the request ends there. With [`StreamBounds::release`]
//! (`--insert-request-release`) the request goes on past it and its
//! batches are released once sent (their buffers reused for the shard's
//! next batches), keeping only what acknowledges them; if such a request
//! fails, in either way, its ranges go back to the controller as
//! [`AckEvent::Rewind`], which
//! reads their partitions again from their acknowledged watermarks, and
//! the next request waits a backoff (after a refusal the shard inserts
//! batch by batch for a while, to isolate the rows the server rejects),
//! and requests are held again until one succeeds. So memory stays
//! within the budget whatever the request's length. The rewind retires
//! the old lanes as it is sent ([`AckSender`]): every worker of the
//! pipeline discards their batches still queued rather than insert them
//! beside the rows read again. The binary turns release on by default.
//!
//! [`AckSender`]: spate_core::sink::AckSender
//!
//! [`AckEvent::Rewind`]: spate_core::sink::AckEvent::Rewind
//!
//! Deduplication: on servers with tokens (22.2+) the request sends one
//! token, of its first batch's offsets marked as a request's and made
//! its own by a random suffix (a resend of the request keeps it; a later
//! request opening with the same batch must not be taken for a repeat,
//! see `open`); older servers insert with
//! `insert_deduplicate=0` as every at-least-once insert does (the block
//! hash would otherwise drop a distinct request of equal bytes).
//! Exactly-once keeps one request per block: its per-block tokens and
//! intents name one block each, and a request of several blocks is one
//! part under one token (see docs/delivery.md).
//!
//! Not streamed: RowBinary bodies (a type change mid-request could be
//! stored misread; the per-batch path checks types around each insert),
//! exactly-once, and, in test builds, a process with a fault point armed
//! (the fault points count batches of the per-batch path).

use super::{Outcome, Worker};
use crate::classify::ErrorClass;
use crate::client::InsertError;
use crate::sink::exactly_once::stage::Intents;
use crate::sink::insert::events::{
    first_line, InsertAttemptFailed, InsertFailedOver, InsertSucceeded,
};
use crate::sink::insert::outcome::Prepared;
use crate::sink::insert::settings::{dedup_token, takes_dedup_token, DEDUP_TOKEN};
use crate::sink::insert::target::{InsertQuery, InsertTarget};
use spate_core::sink::{Chunk, Spare};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// When a streamed request ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamBounds {
    /// After this long open (`--insert-request`).
    pub max_age: Duration,
    /// At this many rows (`--insert-request-rows`): the next batch that
    /// would pass it goes into the next request.
    pub max_rows: u64,
    /// Bytes of batches a request keeps whole, to be sent again if its
    /// answer is lost (`--insert-request-bytes`): it ends there, unless
    /// `release`.
    pub max_bytes: usize,
    /// Past `max_bytes` the request goes on, its batches' buffers reused
    /// as soon as they are sent, and if it fails its partitions are read
    /// again from the source (a rewind; `--insert-request-release`).
    pub release: bool,
}

/// How long a shard inserts batch by batch after the server refused a
/// request whose batches were no longer held: the refused rows come back
/// read again from the source, and one by one is how the rows the server
/// rejects are isolated. Doubled for each such refusal in a row, up to
/// [`PER_BATCH_MAX`].
pub(super) const PER_BATCH_AFTER_REFUSAL: Duration = Duration::from_secs(10);
const PER_BATCH_MAX: Duration = Duration::from_secs(300);

/// What a streaming worker remembers of the requests it read again.
#[derive(Default)]
struct Rewinds {
    /// Requests in a row that failed after their batches were released.
    failed: u32,
    /// Of those, the ones without an answer: the next request's timeout
    /// doubles for each, as a held request's resend does, so a server
    /// slower than `--insert-timeout` is given the time to answer.
    timed_out: u32,
    /// Refused requests in a row (sizes the per-batch window).
    refused: u32,
    /// Insert batch by batch until then (see [`PER_BATCH_AFTER_REFUSAL`]).
    per_batch_until: Option<Instant>,
}

/// How much longer than the insert timeout the worker waits for a
/// request's answer before it gives the request up: the client's own
/// timeouts (per send, and for the answer) fire first.
const ANSWER_GRACE: Duration = Duration::from_secs(5);

/// One request while it is open.
struct Request {
    /// Closed to end the request.
    bodies: Option<mpsc::Sender<Prepared>>,
    /// The request, sending what `bodies` yields.
    sending: JoinHandle<Result<(), InsertError>>,
    /// The batches it carries, in order, kept until its answer: whole
    /// while `held`, else only what acknowledges them (their buffers were
    /// reused once sent).
    chunks: Vec<Chunk>,
    /// Each batch's size as sent.
    sizes: Vec<usize>,
    /// Whether its batches are kept whole, to be sent again (within
    /// [`StreamBounds::max_bytes`]).
    held: bool,
    rows: u64,
    bytes: usize,
    /// When it ends at the latest.
    due: Instant,
    /// Its statement (a schema change starts a new request).
    query: Arc<InsertQuery>,
    /// The replica it goes to.
    replica: usize,
    /// Its settings beyond the statement's (the same on a retry).
    extra: Vec<(String, String)>,
    /// A body could not be handed to the request (it ended early, or the
    /// server stopped reading for longer than the insert timeout).
    broken: Option<InsertError>,
}

/// What the worker waits for while a request is open.
enum Next {
    Chunk(Option<Chunk>),
    Due,
}

impl<C: InsertTarget, L: Intents> Worker<C, L> {
    /// Whether this worker streams its batches (see the module header).
    pub(super) fn streams(&self) -> Option<StreamBounds> {
        let bounds = self.stream?;
        // RowBinary bodies are type-checked around every insert when the
        // sink follows the table (always, outside these tests).
        let checked = self.shared.native.is_none() && self.shared.live.get().is_some();
        (!checked && self.intents.is_none() && !crate::sink::insert::fault::any_armed())
            .then_some(bounds)
    }

    /// The worker's loop when it streams: batches go into the open
    /// request, and are settled when it ends.
    pub(super) async fn run_streaming(&mut self, bounds: StreamBounds) {
        let mut open: Option<Request> = None;
        let mut rewinds = Rewinds::default();
        loop {
            let next = match &open {
                None => Next::Chunk(self.next().await),
                Some(r) => self.next_until(r.due).await,
            };
            let chunk = match next {
                Next::Due => {
                    self.finish(open.take(), &mut rewinds).await;
                    continue;
                }
                Next::Chunk(None) => {
                    self.finish(open.take(), &mut rewinds).await;
                    return;
                }
                Next::Chunk(Some(chunk)) => chunk,
            };
            if self.giving_up() {
                self.finish(open.take(), &mut rewinds).await;
            }
            let Some(chunk) = self.to_insert(chunk) else {
                continue;
            };
            if rewinds.per_batch_until.is_some_and(|t| Instant::now() < t) {
                // After a refused request read again: one by one, so the
                // rows the server rejects are isolated.
                self.finish(open.take(), &mut rewinds).await;
                self.insert_and_settle(chunk).await;
                continue;
            }
            let body = match self.body(&chunk, &chunk.data) {
                Ok(body) => body,
                Err(e) => {
                    self.finish(open.take(), &mut rewinds).await;
                    self.settle(chunk, Outcome::Failed(e));
                    continue;
                }
            };
            // Requests keep their batches and end at the byte bound unless
            // they may release them; after a released request failed, and
            // until one succeeds, they keep them too: an outage then costs
            // one read again, and the requests after it are sent again
            // from memory, not read again from Kafka over and over (each
            // time adding the partitions' rows to the other shards once
            // more).
            let hold = !bounds.release || rewinds.failed > 0;
            if let Some(r) = &open {
                let fits = r.rows + chunk.rows <= bounds.max_rows
                    && (!hold || r.bytes + chunk.data.len() <= bounds.max_bytes);
                let same = Arc::ptr_eq(&r.query, &body.query) || r.query == body.query;
                if !fits || !same {
                    self.finish(open.take(), &mut rewinds).await;
                }
            }
            let timed_out = rewinds.timed_out;
            let r = open.get_or_insert_with(|| self.open(&chunk, &body, bounds, timed_out));
            self.hand(r, body).await;
            // Out of the queue's depth once sent, so lanes pause on the
            // batches queued alone: held by the request within its byte
            // bound, past it released (a failure then reads the request's
            // rows again from the source).
            let mut chunk = chunk;
            drop(chunk.ticket.take());
            r.rows += chunk.rows;
            r.bytes += chunk.data.len();
            r.sizes.push(chunk.data.len());
            if r.held && !hold && r.bytes > bounds.max_bytes {
                r.held = false;
                for held in &mut r.chunks {
                    self.release(held);
                }
            }
            if !r.held {
                self.release(&mut chunk);
            }
            r.chunks.push(chunk);
            let full = r.rows >= bounds.max_rows || (hold && r.bytes >= bounds.max_bytes);
            if full || r.broken.is_some() {
                self.finish(open.take(), &mut rewinds).await;
            }
        }
    }

    /// Give `chunk`'s buffers back for the shard's next batches, keeping
    /// what acknowledges it (its ranges, rows and timestamps).
    fn release(&self, chunk: &mut Chunk) {
        let data = std::mem::take(&mut chunk.data);
        let rows = std::mem::take(&mut chunk.index.rows);
        chunk.index.originals = Default::default();
        self.depths.recycle(
            chunk.shard,
            Spare {
                data,
                rows,
                stamps: Default::default(),
            },
        );
    }

    /// The next batch, or `Due` when `due` passed first. The wait for the
    /// queue's lock is bounded too: the shard's other worker may hold it
    /// while it waits for a batch, and none may come before this
    /// request's batches are acknowledged (their bytes can hold the
    /// shard's lanes paused).
    async fn next_until(&mut self, due: Instant) -> Next {
        let rx = self.rx.clone();
        let mut rx = tokio::select! {
            rx = rx.lock() => rx,
            () = tokio::time::sleep_until(due) => return Next::Due,
            () = self.pace.deadline() => return Next::Due,
        };
        if self.pace.is_abandoned() {
            return Next::Chunk(rx.try_recv());
        }
        tokio::select! {
            chunk = rx.recv() => Next::Chunk(chunk),
            () = tokio::time::sleep_until(due) => Next::Due,
            () = self.pace.deadline() => Next::Chunk(rx.try_recv()),
        }
    }

    /// A new request on the shard's preferred replica, for batches
    /// encoded as `first` was; `timed_out` requests before it went
    /// unanswered (its timeout doubles for each).
    fn open(
        &self,
        chunk: &Chunk,
        first: &Prepared,
        bounds: StreamBounds,
        timed_out: u32,
    ) -> Request {
        let replica = self.shard.preferred.load(Ordering::Relaxed);
        let mut extra = vec![
            (
                "min_insert_block_size_rows".to_string(),
                bounds.max_rows.to_string(),
            ),
            ("min_insert_block_size_bytes".to_string(), "0".to_string()),
        ];
        if takes_dedup_token(&first.query.settings) {
            if let Some(t) = dedup_token(chunk.shard, &chunk.spans) {
                // The first batch's token names only that batch, and the
                // server drops a block whose token it has seen whatever
                // its rows: a later request opening with the same batch
                // (rows read again after a rewind or a restart, cut the
                // same way) but carrying more would be dropped whole,
                // those rows lost. So each request's token is its own; a
                // resend of the same request keeps it (`extra`).
                let nonce: u64 = rand::random();
                extra.push((DEDUP_TOKEN.to_string(), format!("{t}-request-{nonce:016x}")));
            }
        }
        let query = first.query.clone();
        let (bodies, sending) = self.send_to(
            replica,
            &query,
            &extra,
            self.pace.retry.attempt_timeout(timed_out),
        );
        Request {
            bodies: Some(bodies),
            sending,
            chunks: Vec::new(),
            sizes: Vec::new(),
            held: true,
            rows: 0,
            bytes: 0,
            due: Instant::now() + bounds.max_age,
            query,
            replica,
            extra,
            broken: None,
        }
    }

    /// A request of `query` with `extra` to `replica`, sending what the
    /// returned channel yields. One body waits in it: the next batch is
    /// encoded while one is written, no more.
    fn send_to(
        &self,
        replica: usize,
        query: &Arc<InsertQuery>,
        extra: &[(String, String)],
        timeout: Duration,
    ) -> (mpsc::Sender<Prepared>, JoinHandle<Result<(), InsertError>>) {
        let (tx, rx) = mpsc::channel(1);
        let (shard, query, extra) = (self.shard.clone(), query.clone(), extra.to_vec());
        let sending = tokio::spawn(async move {
            shard.replicas[replica]
                .client
                .insert_stream(&query, rx, &extra, timeout)
                .await
        });
        (tx, sending)
    }

    /// Hand `body` to the request, waiting at most the insert timeout for
    /// it to be taken (a server that stopped reading).
    async fn hand(&self, r: &mut Request, body: Prepared) {
        if r.broken.is_some() {
            return;
        }
        let Some(tx) = &r.bodies else { return };
        let timeout = self.pace.retry.attempt_timeout(0);
        let taken = tokio::time::timeout(timeout, tx.send(body)).await;
        r.broken = match taken {
            Ok(Ok(())) => None,
            // The request ended early: its error comes with its end.
            Ok(Err(_)) => Some(stream_error("the request ended early".into())),
            Err(_) => Some(stream_error(format!(
                "the server took no data for {timeout:?}"
            ))),
        };
    }

    /// End the request, if one is open, and settle its batches: all
    /// acknowledged once the server confirmed the request; the request
    /// sent again while its fate is unknown; its batches inserted one by
    /// one when the server refused it; abandoned when the drain deadline
    /// passed.
    async fn finish(&mut self, open: Option<Request>, rewinds: &mut Rewinds) {
        let Some(mut r) = open else { return };
        drop(r.bodies.take());
        let started = Instant::now();
        let mut timed_out = 0;
        let mut answer = self.answer(&mut r, 0).await;
        let mut attempt = 1;
        let refused = loop {
            let error = match answer {
                None => return self.abandon_request(r),
                Some(Ok(())) => {
                    (rewinds.failed, rewinds.timed_out, rewinds.refused) = (0, 0, 0);
                    return self.inserted(r, started, attempt);
                }
                Some(Err(e)) => e,
            };
            self.request_failed(&r, &error);
            if !r.held {
                return self.read_again(r, &error, rewinds).await;
            }
            // No answer, or the connection failed: the server may have
            // written the request (it runs on after the client gave up).
            // Sent again, the same blocks under the same token are dropped
            // as a repeat where the table deduplicates (22.2+), as a
            // batch's retry is. An answer with an error wrote nothing: its
            // batches go one by one (isolating rejected rows, re-encoding
            // for a changed table).
            if error.code.is_some() || error.class != ErrorClass::Retriable {
                break error;
            }
            timed_out += 1;
            attempt += 1;
            let replicas = self.shard.replicas.len();
            if error.is_replica_failure() && replicas > 1 {
                let next = (r.replica + 1) % replicas;
                InsertFailedOver {
                    site: self.shared.site(&self.shard.label),
                    attempt: attempt - 1,
                    error: &error,
                    replica: &self.shard.replicas[r.replica].url,
                    next: &self.shard.replicas[next].url,
                    rows: r.rows,
                }
                .emit();
                r.replica = next;
            }
            let backoff = self.pace.retry.delay(attempt - 1, rand::random::<f64>());
            tracing::warn!(
                batches = r.chunks.len(),
                rows = r.rows,
                error = %first_line(&error.message),
                backoff_ms = backoff.as_millis() as u64,
                "a streamed insert request failed with no answer; sending it again"
            );
            if self.pace.pause(backoff).await.is_err() {
                return self.abandon_request(r);
            }
            answer = self.resend(&mut r, timed_out).await;
        };
        tracing::warn!(
            batches = r.chunks.len(),
            rows = r.rows,
            error = %first_line(&refused.message),
            "a streamed insert request failed and wrote nothing; inserting its batches one by one"
        );
        for chunk in r.chunks {
            if let Some(chunk) = self.to_insert(chunk) {
                self.insert_and_settle(chunk).await;
            }
        }
    }

    /// Send the request's batches again, in a new request with the same
    /// settings, `timed_out` earlier attempts having timed out; its answer.
    async fn resend(&mut self, r: &mut Request, timed_out: u32) -> Option<Result<(), InsertError>> {
        let timeout = self.pace.retry.attempt_timeout(timed_out);
        let (bodies, sending) = self.send_to(r.replica, &r.query, &r.extra, timeout);
        (r.bodies, r.sending, r.broken) = (Some(bodies), sending, None);
        for i in 0..r.chunks.len() {
            match self.body(&r.chunks[i], &r.chunks[i].data) {
                Ok(body) => self.hand(r, body).await,
                Err(e) => r.broken = Some(stream_error(e.reason)),
            }
            if r.broken.is_some() {
                break;
            }
        }
        drop(r.bodies.take());
        self.answer(r, timed_out).await
    }

    /// The request's answer, once its body ended; `None` when the drain
    /// deadline passed first.
    async fn answer(&mut self, r: &mut Request, timed_out: u32) -> Option<Result<(), InsertError>> {
        let timeout = self.pace.retry.attempt_timeout(timed_out) + ANSWER_GRACE;
        Some(match r.broken.take() {
            // The request's own error, when it ended with one.
            Some(e) if r.sending.is_finished() => match (&mut r.sending).await {
                Ok(Err(own)) => Err(own),
                _ => Err(e),
            },
            Some(e) => {
                r.sending.abort();
                Err(e)
            }
            None => tokio::select! {
                a = tokio::time::timeout(timeout, &mut r.sending) => match a {
                    Ok(Ok(result)) => result,
                    Ok(Err(join)) => Err(stream_error(format!("the request's task ended: {join}"))),
                    Err(_) => {
                        r.sending.abort();
                        Err(stream_error(format!("no answer within {timeout:?}")))
                    }
                },
                () = self.pace.deadline() => {
                    r.sending.abort();
                    return None;
                }
            },
        })
    }

    /// The server confirmed the request: every batch of it is in.
    fn inserted(&mut self, r: Request, started: Instant, attempt: u32) {
        self.pace.cleared();
        let (site, shard) = (&self.shared.table, &self.shard.label);
        let metrics = &self.shared.ch_metrics;
        // The insert's duration: from the end of the request's body to its
        // answer (the server writing its part), retries included.
        InsertSucceeded {
            site: self.shared.site(shard),
            replica: &self.shard.replicas[r.replica].url,
            rows: r.rows,
            elapsed: started.elapsed(),
            attempt,
        }
        .emit();
        self.shard.preferred.store(r.replica, Ordering::Relaxed);
        metrics
            .insert_requests
            .with_label_values(&[site, shard, "inserted"])
            .inc();
        metrics
            .insert_request_batches
            .with_label_values(&[site, shard])
            .inc_by(r.chunks.len() as u64);
        tracing::debug!(
            batches = r.chunks.len(),
            rows = r.rows,
            bytes = r.bytes,
            answered_in = ?started.elapsed(),
            "streamed insert request confirmed"
        );
        for (chunk, bytes) in r.chunks.into_iter().zip(r.sizes) {
            self.acknowledge_sized(chunk, 0, bytes);
        }
    }

    /// One failed attempt of the request, counted and reported.
    fn request_failed(&self, r: &Request, error: &InsertError) {
        let (site, shard) = (&self.shared.table, &self.shard.label);
        self.shared
            .ch_metrics
            .insert_requests
            .with_label_values(&[site, shard, "failed"])
            .inc();
        InsertAttemptFailed {
            site: self.shared.site(shard),
            replica: &self.shard.replicas[r.replica].url,
            error,
        }
        .emit();
        self.pace.failing(first_line(&error.message));
    }

    /// A request whose batches were released failed: nothing of it is
    /// acknowledged, and its partitions are read again from their
    /// acknowledged watermarks ([`AckEvent::Rewind`]). The next request
    /// opens after a backoff that grows with such failures in a row (an
    /// outage must not turn into a loop of re-reads); after a refusal
    /// the shard inserts batch by batch for a while, so that the rows
    /// the server rejects come back one batch at a time.
    async fn read_again(&mut self, r: Request, error: &InsertError, rewinds: &mut Rewinds) {
        let refused = error.code.is_some() || error.class != ErrorClass::Retriable;
        rewinds.failed += 1;
        if !refused {
            rewinds.timed_out += 1;
        }
        let backoff = self
            .pace
            .retry
            .delay(rewinds.failed - 1, rand::random::<f64>());
        let (site, shard) = (&self.shared.table, &self.shard.label);
        self.shared
            .ch_metrics
            .insert_requests
            .with_label_values(&[site, shard, "read_again"])
            .inc();
        tracing::warn!(
            batches = r.chunks.len(),
            rows = r.rows,
            bytes = r.bytes,
            error = %first_line(&error.message),
            refused,
            backoff_ms = backoff.as_millis() as u64,
            "a streamed insert request failed after its batches were released; reading its partitions again from their acknowledged offsets"
        );
        let ranges: Vec<_> = r.chunks.into_iter().flat_map(|c| c.acks).collect();
        let _ = self.acks.send(spate_core::sink::AckEvent::Rewind(ranges));
        // Within the drain deadline only: once it passed, the next
        // request's batches are abandoned anyway.
        let _ = self.pace.pause(backoff).await;
        if refused {
            // From now, after the backoff: the rows read again come later.
            let window = PER_BATCH_AFTER_REFUSAL
                .saturating_mul(1 << rewinds.refused.min(8))
                .min(PER_BATCH_MAX);
            rewinds.refused += 1;
            rewinds.per_batch_until = Some(Instant::now() + window);
        }
    }

    /// The drain deadline passed: nothing of the request is acknowledged.
    fn abandon_request(&mut self, r: Request) {
        for chunk in r.chunks {
            self.abandon_chunk(chunk);
        }
    }
}

/// A streamed request's failure without the server's answer.
fn stream_error(message: String) -> InsertError {
    InsertError {
        class: ErrorClass::Retriable,
        code: None,
        message: format!("streamed insert: {message}"),
    }
}
