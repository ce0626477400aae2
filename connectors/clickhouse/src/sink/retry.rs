//! Capped exponential backoff with jitter.

use std::time::Duration;

/// How retriable insert failures are retried: forever (they are never
/// dropped and never acknowledged early), with a delay growing from
/// `initial` by `factor` up to `max`, each delay scaled by a random factor
/// in `[1 - jitter, 1]` so workers do not retry in lockstep.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// First delay.
    pub initial: Duration,
    /// Longest delay.
    pub max: Duration,
    /// Growth per attempt.
    pub factor: f64,
    /// Random reduction, 0.0–1.0.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(10),
            factor: 2.0,
            jitter: 0.5,
        }
    }
}

impl RetryPolicy {
    /// Delay before retry number `attempt` (1-based), with `unit` a random
    /// number in [0, 1).
    #[must_use]
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let exp = self.factor.powi(attempt.saturating_sub(1).min(63) as i32);
        let base = self.initial.as_secs_f64() * exp;
        let capped = base.min(self.max.as_secs_f64());
        let scale = 1.0 - self.jitter.clamp(0.0, 1.0) * unit.clamp(0.0, 1.0);
        Duration::from_secs_f64(capped * scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_then_caps_and_jitters_downwards() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay(1, 0.0), Duration::from_millis(100));
        assert_eq!(p.delay(2, 0.0), Duration::from_millis(200));
        assert_eq!(p.delay(4, 0.0), Duration::from_millis(800));
        assert_eq!(p.delay(30, 0.0), Duration::from_secs(10));
        assert_eq!(p.delay(1000, 0.0), Duration::from_secs(10));
        let j = p.delay(30, 0.999_999);
        assert!(
            j >= Duration::from_secs(5) && j < Duration::from_secs(10),
            "{j:?}"
        );
    }
}
