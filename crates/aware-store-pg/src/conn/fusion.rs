//! Which queued writes may be fused into one statement, and the placeholder renumbering that
//! fusing needs. A statement's fusible table is worked out once, when it is prepared
//! (`pipeline::fusible_table`), not on every exchange.

use super::{Conn, Deferred, Owned};

impl Conn {
    /// Fuses each run of queued writes on distinct tables into one statement of
    /// data-modifying CTEs (`WITH w0 AS (…), w1 AS (…) SELECT 1`), so a turn's five writes cost
    /// the server one statement instead of five (each statement is its own Bind/Execute/Sync
    /// and its own flush of the answer). Exact because the writes of a run touch distinct
    /// tables, so no row is written twice and none reads what another writes (statements with
    /// a `SELECT` are never fused; there are no foreign keys, and the only triggers, the
    /// count triggers of D54, only append to `aware_count_deltas`, which no queued write
    /// names), and the CTEs of
    /// one statement all run to completion. A run never spans a savepoint statement; its
    /// failure is reported at its first write's position, inside the same savepoints. If the
    /// fused statement cannot be prepared (e.g. the transaction already failed), the writes
    /// go out one by one as queued.
    pub(super) fn fuse(&mut self, deferred: Vec<Deferred>) -> Vec<Deferred> {
        let mut out: Vec<Deferred> = Vec::with_capacity(deferred.len());
        let mut run: Vec<Deferred> = Vec::new();
        for d in deferred {
            let table = match &d {
                Deferred::Prepared(_, _, _, table, _) => table.clone(),
                Deferred::Simple(..) => None,
            };
            let Some(table) = table else {
                self.close_run(&mut run, &mut out);
                out.push(d);
                continue;
            };
            let clash = run.iter().any(|r| match r {
                Deferred::Prepared(_, _, _, t, _) => t.as_deref() == Some(table.as_str()),
                Deferred::Simple(..) => false,
            });
            if clash {
                self.close_run(&mut run, &mut out);
            }
            run.push(d);
        }
        self.close_run(&mut run, &mut out);
        out
    }

    fn close_run(&mut self, run: &mut Vec<Deferred>, out: &mut Vec<Deferred>) {
        if run.len() < 2 {
            out.append(run);
            return;
        }
        let mut sql = String::from("WITH ");
        let mut offset = 0usize;
        for (i, d) in run.iter().enumerate() {
            if let Deferred::Prepared(_, st, _, _, part) = d {
                if i > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(&format!("w{i} AS ("));
                sql.push_str(&renumber(part, offset));
                sql.push(')');
                offset += st.params().len();
            }
        }
        sql.push_str(" SELECT 1");
        let Ok(fused) = self.stmt(&sql) else {
            out.append(run);
            return;
        };
        let mut position = None;
        let mut params: Vec<Owned> = Vec::with_capacity(offset);
        for d in run.drain(..) {
            if let Deferred::Prepared(p, _, ps, _, _) = d {
                position.get_or_insert(p);
                params.extend(ps);
            }
        }
        // The fused statement is never fused again: it is built from the queue as it is sent.
        out.push(Deferred::Prepared(
            position.unwrap_or(0),
            fused,
            params,
            None,
            sql,
        ));
    }
}

/// `sql` with each placeholder `$n` shifted to `$(n + offset)`. Our statements carry no `$`
/// other than placeholders (no literals, no dollar quoting).
fn renumber(sql: &str, offset: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        out.push(c);
        if c != '$' {
            continue;
        }
        let mut digits = String::new();
        while let Some(&(_, d)) = chars.peek() {
            if !d.is_ascii_digit() {
                break;
            }
            digits.push(d);
            chars.next();
        }
        match digits.parse::<usize>() {
            Ok(n) => out.push_str(&(n + offset).to_string()),
            Err(_) => out.push_str(&digits),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::renumber;
    use crate::conn::pipeline::fusible_table;

    #[test]
    fn only_plain_writes_are_fused_and_by_their_table() {
        assert_eq!(
            fusible_table("INSERT INTO turns (a, b) VALUES ($1, $2)"),
            Some("turns")
        );
        assert_eq!(
            fusible_table("INSERT INTO session_watch_cursors(a) VALUES ($1)"),
            Some("session_watch_cursors")
        );
        assert_eq!(
            fusible_table("UPDATE sessions SET a = $3 WHERE k = $1"),
            Some("sessions")
        );
        assert_eq!(
            fusible_table("DELETE FROM runs WHERE id = $1"),
            Some("runs")
        );
        assert_eq!(fusible_table("SELECT setval('s', $1)"), None);
        assert_eq!(
            fusible_table("DELETE FROM e WHERE s IN (SELECT s FROM e LIMIT 5)"),
            None
        );
        assert_eq!(fusible_table("SAVEPOINT \"op\""), None);
    }

    #[test]
    fn placeholders_are_shifted_and_nothing_else_changes() {
        assert_eq!(renumber("VALUES ($1, $2, $10)", 0), "VALUES ($1, $2, $10)");
        assert_eq!(
            renumber(
                "SET a = $3 WHERE k = $1 AND ($2::TEXT IS NULL OR g = $2)",
                12
            ),
            "SET a = $15 WHERE k = $13 AND ($14::TEXT IS NULL OR g = $14)"
        );
        assert_eq!(renumber("x = $", 5), "x = $");
    }
}
