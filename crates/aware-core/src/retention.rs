//! Retention policy (spec 01 §9): the numbers, validated once, and the cut-offs they imply.

pub const DAY_MS: i64 = 86_400_000;
/// The largest batch a prune transaction may delete.
pub const MAX_BATCH_ROWS: u32 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    pub max_age_days: u32,
    pub max_rows: u64,
    pub cursor_expiry_days: u32,
    pub prune_interval_secs: u64,
    pub batch_rows: u32,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy {
            max_age_days: 30,
            max_rows: 50_000,
            cursor_expiry_days: 30,
            prune_interval_secs: 3600,
            batch_rows: 1000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("retention.{field} {rule}")]
pub struct RetentionError {
    pub field: &'static str,
    pub rule: &'static str,
}

impl RetentionPolicy {
    pub fn validate(&self) -> Result<(), RetentionError> {
        let fail = |field, rule| Err(RetentionError { field, rule });
        if self.batch_rows == 0 || self.batch_rows > MAX_BATCH_ROWS {
            return fail("batch_rows", "must be between 1 and 1000");
        }
        if self.max_age_days == 0 {
            return fail("max_age_days", "must be at least 1");
        }
        if self.cursor_expiry_days == 0 {
            return fail("cursor_expiry_days", "must be at least 1");
        }
        if self.prune_interval_secs == 0 {
            return fail("prune_interval_secs", "must be at least 1");
        }
        Ok(())
    }

    /// Events with `occurred_at` strictly below this are deleted by age.
    pub fn age_cutoff(&self, now: i64) -> i64 {
        now - i64::from(self.max_age_days) * DAY_MS
    }

    /// Non-muted cursors with `updated_at` strictly below this expire.
    pub fn cursor_cutoff(&self, now: i64) -> i64 {
        now - i64::from(self.cursor_expiry_days) * DAY_MS
    }

    /// How many of `count` events the row cap removes in the next batch.
    pub fn cap_batch(&self, count: u64) -> u64 {
        count
            .saturating_sub(self.max_rows)
            .min(u64::from(self.batch_rows))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_cutoffs() {
        let p = RetentionPolicy::default();
        assert!(p.validate().is_ok());
        assert_eq!(p.age_cutoff(30 * DAY_MS + 1), 1);
        assert_eq!(p.cap_batch(60_000), 1000);
        assert_eq!(p.cap_batch(50_010), 10);
        assert_eq!(p.cap_batch(10), 0);
        let bad = RetentionPolicy {
            batch_rows: 1001,
            ..p
        };
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "retention.batch_rows must be between 1 and 1000"
        );
    }
}
