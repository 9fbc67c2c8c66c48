//! The whole stored state in a backend-neutral form (decision D50).
//!
//! [`TABLES`] is the one list of the tables a store keeps and their columns, on the Rust side:
//! a backend reads and writes them with its own SQL ([`ReadTx::export_rows`](crate::ReadTx::export_rows),
//! [`WriteTx::import_rows`](crate::WriteTx::import_rows)), and [`crate::migrate::copy`] moves every row of one store into
//! another through the [`Store`](crate::Store) trait, so a migration knows no backend's schema. A column added to a backend's
//! schema must be added here too (nothing checks it yet); one listed here that a backend lacks
//! fails the contract check `export_import_round_trips`.

use crate::{Result, StoreError};

/// What a column holds. Every stored column is an integer or a text, either maybe null.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    Text,
}

/// One value of a column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Int(i64),
    Text(String),
}

/// One row: a value per column of its [`Table`], in the table's column order.
pub type Row = Vec<Value>;

/// A stored table.
#[derive(Debug, PartialEq, Eq)]
pub struct Table {
    pub name: &'static str,
    /// Every column a copy keeps, in order. (A backend's own extra columns, such as the
    /// PostgreSQL cursor table's `row_id`, are left to their defaults.)
    pub columns: &'static [(&'static str, Kind)],
    /// How many leading columns form the primary key: rows are exported in key order, in pages
    /// that resume after the last key.
    pub key: usize,
    /// Whether the first column is numbered by a counter that must stay above every number ever
    /// issued (an `AUTOINCREMENT` or identity column), deleted rows included.
    pub counter: bool,
}

impl Table {
    pub fn column_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.columns.iter().map(|(name, _)| *name)
    }

    /// Checks that `row` has this table's shape, so a backend never binds a text to an integer
    /// column or a short row.
    pub fn check(&self, row: &Row) -> Result<()> {
        let fits = row.len() == self.columns.len()
            && row.iter().zip(self.columns).all(|(v, (_, kind))| {
                matches!(
                    (v, kind),
                    (Value::Null, _) | (Value::Int(_), Kind::Int) | (Value::Text(_), Kind::Text)
                )
            });
        if fits {
            Ok(())
        } else {
            Err(StoreError::Corrupt(format!(
                "a row of {} does not match its columns: {row:?}",
                self.name
            )))
        }
    }
}

use Kind::{Int, Text};

/// Every table, in copy order.
pub const TABLES: &[Table] = &[
    Table {
        name: "sessions",
        columns: &[
            ("session_key", Text),
            ("agent_id", Text),
            ("session_id", Text),
            ("kind", Text),
            ("label", Text),
            ("parent_session_key", Text),
            ("created_via", Text),
            ("active_run_id", Text),
            ("goal_text", Text),
            ("goal_status", Text),
            ("goal_updated_at", Int),
            ("orphaned", Int),
            ("upstream_catalog", Text),
            ("upstream_host", Text),
            ("upstream_thread", Text),
            ("created_at", Int),
            ("updated_at", Int),
        ],
        key: 2,
        counter: false,
    },
    Table {
        name: "session_state_events",
        columns: &[
            ("sequence", Int),
            ("dedupe_key", Text),
            ("session_key", Text),
            ("session_id", Text),
            ("agent_id", Text),
            ("kind", Text),
            ("actor_type", Text),
            ("actor_id", Text),
            ("run_id", Text),
            ("occurred_at", Int),
            ("summary", Text),
            ("payload_json", Text),
        ],
        key: 1,
        counter: true,
    },
    Table {
        name: "session_state_heads",
        columns: &[
            ("session_key", Text),
            ("agent_id", Text),
            ("last_sequence", Int),
            ("pruned_max_sequence", Int),
            ("updated_at", Int),
        ],
        key: 2,
        counter: false,
    },
    Table {
        name: "session_watch_cursors",
        columns: &[
            ("watcher_session_key", Text),
            ("target_session_key", Text),
            ("target_agent_id", Text),
            ("last_seen_sequence", Int),
            ("notified_sequence", Int),
            ("material_sequence", Int),
            ("muted", Int),
            ("origin", Text),
            ("notice_opened_at", Int),
            ("created_at", Int),
            ("updated_at", Int),
        ],
        key: 3,
        counter: false,
    },
    Table {
        name: "session_system_events",
        columns: &[
            ("id", Int),
            ("session_key", Text),
            ("agent_id", Text),
            ("text", Text),
            ("context_key", Text),
            ("enqueued_at", Int),
        ],
        key: 1,
        counter: true,
    },
    Table {
        name: "session_upstream_links",
        columns: &[
            ("session_key", Text),
            ("agent_id", Text),
            ("catalog_id", Text),
            ("host_id", Text),
            ("thread_id", Text),
            ("upstream_kind", Text),
            ("upstream_ref_json", Text),
            ("last_marker_json", Text),
            ("last_scanned_at", Int),
            ("created_at", Int),
            ("updated_at", Int),
        ],
        key: 2,
        counter: false,
    },
    Table {
        name: "turns",
        columns: &[
            ("session_key", Text),
            ("agent_id", Text),
            ("idx", Int),
            ("id", Text),
            ("role", Text),
            ("text", Text),
            ("at", Int),
            ("actor_type", Text),
            ("actor_id", Text),
            ("provenance_json", Text),
            ("channel", Text),
            ("run_id", Text),
            ("origin", Text),
            ("upstream_text", Text),
            ("idempotency_key", Text),
        ],
        key: 3,
        counter: false,
    },
    Table {
        name: "runs",
        columns: &[
            ("run_id", Text),
            ("session_key", Text),
            ("agent_id", Text),
            ("session_id", Text),
            ("started_at", Int),
            ("ended_at", Int),
            ("outcome", Text),
            ("deadline_at", Int),
            ("event_sequence", Int),
        ],
        key: 1,
        counter: false,
    },
];

/// Rows per exported page (and per progress report).
pub const PAGE: u32 = 1000;

/// One part of an exported state, in the order [`crate::migrate::export`] hands them out: each table's pages
/// in [`TABLES`] order, then the counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// Up to [`PAGE`] rows of `table` (an index into [`TABLES`]), in key order.
    Rows { table: usize, rows: Vec<Row> },
    /// The highest number each counter table ever issued: `(index into TABLES, value)`.
    Counters(Vec<(usize, i64)>),
}
