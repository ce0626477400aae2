//! Exactly-once fencing: the decisions that keep an old owner of a
//! partition (a zombie still inserting after losing it) from breaking the
//! new owner's blocks. Pure functions over the rows of one partition in
//! `<db>.spate_intents`; the I/O is [`IntentLog`](super::intent::IntentLog)'s.
//!
//! Rows (columns `first`, `last`, `shard`, `epoch`):
//! - an *intent* (`first >= 0`): a block `first..=last` (one row per
//!   shard part) recorded by the owner of assignment `epoch` before its
//!   first send;
//! - a *fence* (`first = -1`, `last = epoch`): written by a new owner
//!   before it reads the intents;
//! - a *seal* (`first = -2`, `last = epoch`): written by that owner after
//!   the read, in one insert with the blocks it will replay re-recorded
//!   under its own epoch (it *adopts* them).
//!
//! Epochs ([`owner_epoch`]): the consumer group generation of the
//! assignment in the high 32 bits, an incarnation number in the low 32.
//! The generation alone is not unique to an owner: a static member
//! (`group.instance.id`) restarted within `session.timeout.ms` rejoins
//! with no rebalance and the *same* generation (KIP-345), so its new
//! process would skip the old one's seal (`k < e`) and never fence it.
//! A new owner therefore reads the partition's highest fence first and,
//! when that fence is of its own generation (an earlier incarnation of
//! the same static member), takes the next incarnation number above it;
//! the low 16 bits are a random number of the process, so two processes
//! that read the same fence at once still differ (the lower of the two
//! is fenced off, never both sent). Every later owner of another
//! generation is above every epoch of an earlier generation, whatever the
//! incarnation. Epochs of a spate before this (the generation alone, in
//! the low bits) are below every new one.
//!
//! The protocol, with epochs ordered so that a later owner has a higher
//! epoch:
//! 1. A new owner `e` writes its fence, reads the partition's rows, and
//!    replays the intents of the highest sealed epoch `k < e` (or of epoch
//!    0, rows of unfenced owners, if none is sealed): [`plan`]. It then
//!    writes the adoption and its seal ([`adoption`]) and only then cuts
//!    blocks. A fence higher than its own means this owner is already
//!    stale: [`plan`] refuses (a recent one: the lane replays nothing and
//!    its blocks are fenced off; an old one: [`generations_restarted`]).
//! 2. Every owner, after recording a block's intent and before its first
//!    send, reads the partition's highest fence: if it is above its own
//!    epoch the block is abandoned, never sent ([`may_send`]).
//!
//! Why it holds: a block of owner `a` that was sent passed its check, so
//! its intent was in before any later owner `b`'s fence, hence before
//! `b`'s read: `b` replays it at the same offsets (and so does everyone
//! after `b`, who reads `b`'s adoption). An intent recorded after `b`'s
//! fence is never sent, and readers after `b` ignore it (its epoch is
//! below the sealed one). An owner that dies between its fence and its
//! seal sent nothing; readers fall back to the last sealed epoch.
//!
//! Pruning ([`prunable`]): once `e` sealed, rows of its partition with a
//! lower epoch are never read again (no reader replays below the highest
//! seal, and the fence check only needs the highest fence), nor are
//! intents below the committed offset (replays start at or past it).
//!
//! No thread state: called from driver threads (plan, adoption) and
//! insert workers (may_send).

/// `first` of a fence row.
pub(crate) const FENCE: i64 = -1;
/// `first` of a seal row.
pub(crate) const SEAL: i64 = -2;

/// One row of the state table for one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Row {
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) shard: u32,
    pub(crate) epoch: u64,
}

impl Row {
    pub(crate) fn intent(first: i64, last: i64, shard: u32, epoch: u64) -> Self {
        Row {
            first,
            last,
            shard,
            epoch,
        }
    }

    pub(crate) fn fence(epoch: u64) -> Self {
        Row::intent(FENCE, epoch as i64, 0, epoch)
    }

    pub(crate) fn seal(epoch: u64) -> Self {
        Row::intent(SEAL, epoch as i64, 0, epoch)
    }

    fn is_intent(&self) -> bool {
        self.first >= 0
    }
}

/// What a new owner replays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The intent rows to replay (every shard part), sorted.
    pub(crate) rows: Vec<Row>,
    /// The epoch they were recorded (or adopted) under.
    pub(crate) sealed: u64,
}

impl Plan {
    /// The distinct blocks `(first, last)`.
    pub(crate) fn blocks(&self) -> Vec<(i64, i64)> {
        let mut b: Vec<(i64, i64)> = self.rows.iter().map(|r| (r.first, r.last)).collect();
        b.dedup();
        b
    }
}

/// A later owner fenced the partition: this one is stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stale {
    pub(crate) fence: u64,
}

/// The generation of an epoch (see the module header).
#[must_use]
pub(crate) fn generation_of(epoch: u64) -> u64 {
    epoch >> 32
}

/// The epoch of a new owner of assignment `generation` in a process whose
/// random number is `nonce`, given the partition's highest fence read
/// before its own is written: above every fence of its own generation (an
/// earlier incarnation of a static member), else the generation's first.
/// A fence of a later generation is left above it: [`plan`] then finds
/// this owner stale. `None`: 65,535 incarnations of one generation.
#[must_use]
pub(crate) fn owner_epoch(generation: u64, highest_fence: u64, nonce: u16) -> Option<u64> {
    let incarnation = if generation_of(highest_fence) == generation {
        ((highest_fence >> 16) & 0xFFFF) + 1
    } else {
        0
    };
    (incarnation <= 0xFFFF).then_some((generation << 32) | (incarnation << 16) | u64::from(nonce))
}

/// The highest fence among `rows` (0 if none).
pub(crate) fn highest_fence(rows: &[Row]) -> u64 {
    (rows.iter())
        .filter(|r| r.first == FENCE)
        .map(|r| r.epoch)
        .max()
        .unwrap_or(0)
}

/// The blocks a reader of epoch `mine` replays from the partition's rows
/// (intents at or past its first offset, and every fence and seal);
/// `None`: the source gives no epoch (nothing is fenced, the intents of
/// the highest seal are still the ones that count).
pub(crate) fn plan(rows: &[Row], mine: Option<u64>) -> Result<Plan, Stale> {
    if let Some(e) = mine {
        let fence = highest_fence(rows);
        if fence > e {
            return Err(Stale { fence });
        }
    }
    let sealed = (rows.iter())
        .filter(|r| r.first == SEAL && mine.is_none_or(|e| r.epoch < e))
        .map(|r| r.epoch)
        .max()
        .unwrap_or(0);
    let mut rows: Vec<Row> = (rows.iter())
        .filter(|r| r.is_intent() && r.epoch == sealed)
        .copied()
        .collect();
    rows.sort_unstable();
    rows.dedup();
    Ok(Plan { rows, sealed })
}

/// The rows owner `mine` writes in one insert after its read: the plan's
/// intents re-recorded under `mine`, and its seal.
pub(crate) fn adoption(plan: &Plan, mine: u64) -> Vec<Row> {
    (plan.rows.iter())
        .map(|r| Row { epoch: mine, ..*r })
        .chain(std::iter::once(Row::seal(mine)))
        .collect()
}

/// How old a fence above a new owner's own generation must be to mean the
/// group's generations restarted (the group was deleted and re-created)
/// rather than that this owner already lost the partition to a later one
/// while it read: a member that lost its partition learns so within its
/// session timeout, so a later owner's fence is seconds old when it reads.
pub(crate) const RESTARTED_AFTER_S: i64 = 600;

/// Whether a fence `age_s` seconds old above this owner's own epoch means
/// restarted generations.
pub(crate) fn generations_restarted(age_s: i64) -> bool {
    age_s >= RESTARTED_AFTER_S
}

/// Whether a block recorded under `mine` may be sent, given the
/// partition's highest fence read after the intent was in.
pub(crate) fn may_send(highest_fence: u64, mine: u64) -> bool {
    highest_fence <= mine
}

/// Whether a row of the partition is dead once owner `mine` sealed, its
/// first offset being `from`: what [`prune_condition`] deletes.
#[cfg(test)]
pub(crate) fn prunable(row: &Row, mine: u64, from: i64) -> bool {
    row.epoch < mine || (row.is_intent() && row.last < from)
}

/// [`prunable`] as a SQL condition on the state table's columns.
pub(crate) fn prune_condition(mine: u64, from: i64) -> String {
    format!("(epoch < {mine} OR (first >= 0 AND last < {from}))")
}

#[cfg(test)]
#[path = "fencing_tests.rs"]
mod tests;
