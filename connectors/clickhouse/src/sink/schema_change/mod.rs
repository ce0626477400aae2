//! Tables that change while spate runs (docs/rows.md, "Schema changes"):
//! - [`version`]: [`LiveSchema`], every schema version the sink has used
//!   (its columns, encoder factory and insert statement);
//! - [`watch`]: the periodic re-read of every replica's columns;
//! - [`encoder`]: the encoders that follow the versions, one per driver
//!   thread ([`Encoders`], [`LiveRowEncoder`]);
//! - [`recode`]: a chunk's insert bytes for its version, or re-encoded for
//!   the table as it is now;
//! - [`guard`]: the per-insert check of the sent columns' types on servers
//!   that would store a batch of old types misread, as a value with
//!   `before` and `after` hooks.

pub(crate) mod encoder;
pub(crate) mod guard;
pub(crate) mod recode;
pub(crate) mod version;
pub(crate) mod watch;

pub use encoder::{Encoders, LiveRowEncoder};
pub use version::{LiveSchema, SCHEMA_REFRESH};
