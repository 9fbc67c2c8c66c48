//! The turn pages on PostgreSQL whose SQL is longest: a page under a byte budget, and the
//! transcript page with texts cut in SQL. Kept beside `read.rs`, whose `ReadTx` methods call them.

use super::mapping::*;
use super::PgTx;
use crate::conn::col;
use aware_store::{Result, TurnRow};

impl PgTx<'_> {
    pub(super) fn turns_within_budget(
        &self,
        key: &str,
        agent: &str,
        after: Option<i64>,
        limit: u32,
        max_bytes: usize,
    ) -> Result<(Vec<TurnRow>, bool)> {
        self.stream(key, agent)?;
        // The budget is applied in SQL (a running sum of the text sizes), so rows past it are
        // never sent; the first row always comes.
        // Only rows whose predecessors fit are sent (the page and the one row that overflows),
        // and the second row always, to tell whether an oversized first turn was alone.
        let budget = i64::try_from(max_bytes).unwrap_or(i64::MAX);
        let rows = self.rows(
            &format!(
                "SELECT {TURN_COLS}, used FROM (SELECT {TURN_COLS}, \
                 SUM(size) OVER (ORDER BY idx)::BIGINT AS used, size, \
                 row_number() OVER (ORDER BY idx) AS rn FROM (SELECT {TURN_COLS}, \
                 octet_length(text) + COALESCE(octet_length(upstream_text), 0) AS size \
                 FROM turns WHERE session_key = $1 AND agent_id = $2 AND idx > $3 \
                 ORDER BY idx LIMIT $4) t) w WHERE used - size <= $5 OR rn <= 2 ORDER BY idx"
            ),
            &[
                &key,
                &agent,
                &after.unwrap_or(-1),
                &i64::from(limit),
                &budget,
            ],
        )?;
        let mut out = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            let used: i64 = col(row, 13)?;
            if i > 0 && used.max(0) as u64 > max_bytes as u64 {
                return Ok((out, true));
            }
            out.push(turn_from_row(row)?);
        }
        Ok((out, false))
    }

    pub(super) fn turns_cut(
        &self,
        key: &str,
        agent: &str,
        from: Option<i64>,
        include_tools: bool,
        limit: u32,
        max_chars: u32,
    ) -> Result<Vec<TurnRow>> {
        self.stream(key, agent)?;
        const CUT_COLS: &str = "id, idx, role, substr(text, 1, $4), at, actor_type, actor_id, \
             provenance_json, channel, run_id, origin, substr(upstream_text, 1, $4), \
             idempotency_key";
        // `substr` takes an INTEGER length.
        let cut = i32::try_from(u64::from(max_chars) + 1).unwrap_or(i32::MAX);
        let filter = "session_key = $1 AND agent_id = $2 AND ($3 OR role <> 'tool')";
        let limit = i64::from(limit);
        match from {
            Some(from) => self.map_vec(
                &format!(
                    "SELECT {CUT_COLS} FROM turns WHERE {filter} AND idx >= $5 ORDER BY idx LIMIT $6"
                ),
                &[&key, &agent, &include_tools, &cut, &from, &limit],
                turn_from_row,
            ),
            None => {
                let mut rows = self.map_vec(
                    &format!("SELECT {CUT_COLS} FROM turns WHERE {filter} ORDER BY idx DESC LIMIT $5"),
                    &[&key, &agent, &include_tools, &cut, &limit],
                    turn_from_row,
                )?;
                rows.reverse();
                Ok(rows)
            }
        }
    }
}
