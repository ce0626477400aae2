//! What one insert is made of, below the worker that runs it: the HTTP
//! attempt behind a trait ([`target`]), the backoff policy and the pure
//! retry/failover decision ([`retry`]), the settings spate relies on per
//! server version ([`settings`]), what an insert logs and counts
//! ([`events`]), the test-only fault points ([`fault`]), the bisection
//! plan of a rejected batch ([`isolate`]), the shard's replicas
//! ([`shard`]), the insert's bytes and outcome ([`outcome`]), and how a
//! worker waits ([`pace`]). Nothing here imports the rest of the sink.

pub(crate) mod events;
pub(crate) mod fault;
pub(crate) mod isolate;
pub(crate) mod outcome;
pub(crate) mod pace;
pub(crate) mod retry;
pub(crate) mod settings;
pub(crate) mod shard;
pub(crate) mod target;
