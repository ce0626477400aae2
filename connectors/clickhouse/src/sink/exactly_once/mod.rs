//! Exactly-once delivery: the state a partition's owners share in
//! `<db>.spate_intents`, and what an insert does with it.
//! - [`intent`]: the intent log ([`IntentLog`]): record, fence, the block
//!   plans a new owner replays;
//! - [`fencing`]: the pure decisions that keep an old owner of a partition
//!   from breaking the new owner's blocks;
//! - [`state_home`]: where the state table lives (every replica of the
//!   first shard, replicated beside a replicated target), and how it is
//!   read and written there;
//! - [`sql`]: the state table's name, quoting, and the table facts;
//! - [`preflight`]: at start, refuse exactly-once unless the target table
//!   drops a replayed block, then open the log;
//! - [`stage`]: the insert stage, before a block is first sent and before
//!   each retry;
//! - [`window`]: the deduplication window a takeover needs.

pub(crate) mod fencing;
pub(crate) mod intent;
pub(crate) mod preflight;
pub(crate) mod sql;
pub(crate) mod stage;
pub(crate) mod state_home;
pub mod window;

pub use intent::IntentLog;
pub use sql::STATE_TABLE;
