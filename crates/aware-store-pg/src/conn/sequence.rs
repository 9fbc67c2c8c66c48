//! Event numbering inside the writer's transaction: one `nextval` per transaction, the next
//! numbers given here, and the `setval` that moves the sequence past them before `COMMIT`.
//! Right only because the holder of the cluster-wide write lock is the one writer inserting
//! events (postgres.md; decision D47's design note says what keyed locks would change).

/// The numbers given in the current transaction: (next, last given, the one `nextval` gave).
#[derive(Default)]
pub(super) struct LocalNumbers(Option<(i64, i64, i64)>);

impl LocalNumbers {
    /// The next number, when this transaction already drew one from the sequence.
    pub(super) fn next(&mut self) -> Option<i64> {
        let (next, last, _) = self.0.as_mut()?;
        *last = *next;
        *next += 1;
        Some(*last)
    }

    /// The transaction's first number, as `nextval` gave it.
    pub(super) fn drew(&mut self, n: i64) {
        self.0 = Some((n + 1, n, n));
    }

    /// The value to move the sequence to before `COMMIT`, when numbers were given here.
    pub(super) fn catch_up(&self) -> Option<i64> {
        self.0
            .and_then(|(_, last, first)| (last > first).then_some(last))
    }

    pub(super) fn clear(&mut self) {
        self.0 = None;
    }
}
