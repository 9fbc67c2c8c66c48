//! The whole-state export and import of `aware_store::dump` in PostgreSQL: statements built
//! from the dump's table list, so this file holds no column list of its own.

use super::PgTx;
use crate::conn::{col, Owned, Param};
use aware_store::dump::{Kind, Row, Table, Value};
use aware_store::Result;

fn owned(v: &Value, kind: Kind) -> Owned {
    match (v, kind) {
        (Value::Int(i), _) => Box::new(Some(*i)),
        (Value::Text(s), _) => Box::new(Some(s.clone())),
        (Value::Null, Kind::Int) => Box::new(None::<i64>),
        (Value::Null, Kind::Text) => Box::new(None::<String>),
    }
}

fn list(names: impl Iterator<Item = &'static str>) -> String {
    names.collect::<Vec<_>>().join(", ")
}

/// The first column of a counter table: the numbered one.
fn numbered(table: &Table) -> &'static str {
    table.columns.first().map_or("id", |(name, _)| *name)
}

impl PgTx<'_> {
    pub(crate) fn dump_rows(
        &self,
        table: &Table,
        after: Option<&[Value]>,
        limit: u32,
    ) -> Result<Vec<Row>> {
        let key = list(table.column_names().take(table.key));
        let filter = match after {
            Some(_) => {
                let marks: Vec<String> = (1..=table.key).map(|i| format!("${i}")).collect();
                format!("WHERE ({key}) > ({})", marks.join(", "))
            }
            None => String::new(),
        };
        let sql = format!(
            "SELECT {} FROM {} {filter} ORDER BY {key} LIMIT {limit}",
            list(table.column_names()),
            table.name
        );
        let params: Vec<Owned> = after
            .unwrap_or_default()
            .iter()
            .zip(table.columns)
            .map(|(v, (_, kind))| owned(v, *kind))
            .collect();
        let refs: Vec<Param<'_>> = params.iter().map(|p| &**p as Param<'_>).collect();
        self.map_vec(&sql, &refs, |r| {
            table
                .columns
                .iter()
                .enumerate()
                .map(|(i, (_, kind))| match kind {
                    Kind::Int => {
                        col::<Option<i64>>(r, i).map(|v| v.map_or(Value::Null, Value::Int))
                    }
                    Kind::Text => {
                        col::<Option<String>>(r, i).map(|v| v.map_or(Value::Null, Value::Text))
                    }
                })
                .collect()
        })
    }

    pub(crate) fn dump_count(&self, table: &Table) -> Result<u64> {
        self.count(&format!("SELECT COUNT(*) FROM {}", table.name), &[])
    }

    /// The identity sequence remembers numbers of deleted rows; the table's maximum covers a
    /// sequence never called.
    pub(crate) fn dump_counter(&self, table: &Table) -> Result<i64> {
        let (name, col_name) = (table.name, numbered(table));
        let top = self.map_opt(
            &format!(
                "SELECT GREATEST(COALESCE(pg_sequence_last_value(pg_get_serial_sequence('{name}', \
                 '{col_name}')::regclass), 0), COALESCE((SELECT MAX({col_name}) FROM {name}), 0))::BIGINT"
            ),
            &[],
            |r| col::<i64>(r, 0),
        )?;
        Ok(top.unwrap_or(0))
    }

    pub(crate) fn load_rows(&mut self, table: &Table, rows: &[Row]) -> Result<()> {
        // Rows written behind the cache's back: this batch logs "everything", so every
        // gateway's cache (this one's too) starts over.
        self.with_cache(|c| c.imported());
        let marks: Vec<String> = (1..=table.columns.len()).map(|i| format!("${i}")).collect();
        // Identity columns are given explicitly: the numbers are kept.
        let sql = format!(
            "INSERT INTO {} ({}) OVERRIDING SYSTEM VALUE VALUES ({})",
            table.name,
            list(table.column_names()),
            marks.join(", ")
        );
        for row in rows {
            let params: Vec<Owned> = row
                .iter()
                .zip(table.columns)
                .map(|(v, (_, kind))| owned(v, *kind))
                .collect();
            self.defer(&sql, params)?;
        }
        // Sends the page's queued inserts (and learns of a failed one) before the next page.
        self.exec("SELECT 1", &[])?;
        Ok(())
    }

    pub(crate) fn load_counter(&mut self, table: &Table, to: i64) -> Result<()> {
        if to > 0 {
            let (name, col_name) = (table.name, numbered(table));
            self.map_opt(
                &format!("SELECT setval(pg_get_serial_sequence('{name}', '{col_name}'), $1)"),
                &[&to],
                |_| Ok(()),
            )?;
        }
        Ok(())
    }
}
