//! What one insert is made of and how it ends: [`Prepared`] (the bytes and
//! statement every attempt of some rows sends) and [`Attempt`] (how the
//! attempts of those rows ended). Made and read by insert workers (tokio
//! tasks) and the stages they compose (the type guard, the exactly-once
//! intent).

use super::target::InsertQuery;
use crate::client::InsertError;
use crate::encode::NativeScratch;
use bytes::Bytes;
use spate_core::error::FatalError;
use std::sync::Arc;

/// How one insert of some rows ended.
pub(crate) enum Attempt {
    Inserted,
    /// The server blamed rows of the batch.
    RowError(InsertError),
    Failed(FatalError),
    /// The drain deadline passed first.
    Abandoned,
    /// Exactly-once: a later owner fenced the partition; never sent.
    Fenced,
}

/// The drain deadline passed while waiting.
pub(crate) struct Abandoned;

impl From<Abandoned> for Attempt {
    fn from(_: Abandoned) -> Self {
        Attempt::Abandoned
    }
}

/// What every attempt of some rows sends, and the schema version it was
/// made for.
pub(crate) struct Prepared {
    pub(crate) bytes: Bytes,
    pub(crate) query: Arc<InsertQuery>,
    pub(crate) for_version: u64,
    /// Where the body goes back once every attempt is done with it.
    pub(crate) keep: Option<(Arc<std::sync::Mutex<NativeScratch>>, usize)>,
}

impl AsRef<Bytes> for Prepared {
    fn as_ref(&self) -> &Bytes {
        &self.bytes
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        // The client's slices of the body are gone once the insert ended:
        // the buffer is the body's alone again, and the next one reuses it.
        let Some((scratch, room)) = self.keep.take() else {
            return;
        };
        if let Ok(body) = std::mem::take(&mut self.bytes).try_into_mut() {
            lock(&scratch).give_body(Vec::from(body), room);
        }
    }
}

/// The scratch, whatever a panicking holder left in it (it only holds
/// buffers to reuse).
pub(crate) fn lock(
    m: &std::sync::Mutex<NativeScratch>,
) -> std::sync::MutexGuard<'_, NativeScratch> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
