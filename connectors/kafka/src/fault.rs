//! Test-only fault point of the Kafka source, read from
//! `SPATE_FAULT=refetch` and `SPATE_FAULT_AT=<n>` (default 1000): once this
//! process's lanes have delivered `n` messages, the lane that delivered the
//! n-th seeks its partition back to the first offset it delivered, without
//! starting a new lane, so librdkafka delivers what the lane already
//! delivered again, as it has done by itself around a cooperative rebalance
//! (`KafkaLane::poll` reports such repeats). Compiled only with
//! `debug_assertions` or the `fault-injection` feature (which `make test`
//! turns on for its release build), so the release binary users build
//! cannot trigger it.

#[cfg(any(debug_assertions, feature = "fault-injection"))]
mod imp {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::OnceLock;

    static DELIVERED: AtomicU64 = AtomicU64::new(0);
    static FIRED: AtomicBool = AtomicBool::new(false);

    fn armed_at() -> Option<u64> {
        static AT: OnceLock<Option<u64>> = OnceLock::new();
        *AT.get_or_init(|| {
            if std::env::var("SPATE_FAULT").ok()? != "refetch" {
                return None;
            }
            Some(
                std::env::var("SPATE_FAULT_AT")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1000),
            )
        })
    }

    /// Count `n` delivered messages; true once, for the call that crosses
    /// the armed count.
    pub(crate) fn refetch_now(n: u64) -> bool {
        let Some(at) = armed_at() else {
            return false;
        };
        let total = DELIVERED.fetch_add(n, Ordering::Relaxed) + n;
        total >= at && !FIRED.swap(true, Ordering::Relaxed)
    }
}

#[cfg(not(any(debug_assertions, feature = "fault-injection")))]
mod imp {
    #[inline(always)]
    pub(crate) fn refetch_now(_n: u64) -> bool {
        false
    }
}

pub(crate) use imp::refetch_now;
