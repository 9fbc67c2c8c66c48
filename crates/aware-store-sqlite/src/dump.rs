//! The whole-state export and import of `aware_store::dump` in SQLite: statements built from
//! the dump's table list, so this file holds no column list of its own.

use crate::sqltx::SqlTx;
use crate::Sq;
use aware_store::dump::{Kind, Row, Table, Value};
use aware_store::{Result, StoreError};
use rusqlite::types::Value as SqlValue;

fn to_sql(v: &Value) -> SqlValue {
    match v {
        Value::Null => SqlValue::Null,
        Value::Int(i) => SqlValue::Integer(*i),
        Value::Text(s) => SqlValue::Text(s.clone()),
    }
}

fn from_sql(table: &Table, kind: Kind, v: SqlValue) -> Result<Value> {
    match (kind, v) {
        (_, SqlValue::Null) => Ok(Value::Null),
        (Kind::Int, SqlValue::Integer(i)) => Ok(Value::Int(i)),
        (Kind::Text, SqlValue::Text(s)) => Ok(Value::Text(s)),
        (_, other) => Err(StoreError::Corrupt(format!(
            "{}: a stored {:?} where a {kind:?} belongs",
            table.name,
            other.data_type()
        ))),
    }
}

fn list(names: impl Iterator<Item = &'static str>) -> String {
    names.collect::<Vec<_>>().join(", ")
}

impl SqlTx<'_> {
    pub(crate) fn dump_rows(
        &self,
        table: &Table,
        after: Option<&[Value]>,
        limit: u32,
    ) -> Result<Vec<Row>> {
        self.live()?;
        let key = list(table.column_names().take(table.key));
        let filter = match after {
            Some(_) => {
                let marks: Vec<String> = (1..=table.key).map(|i| format!("?{i}")).collect();
                format!("WHERE ({key}) > ({})", marks.join(", "))
            }
            None => String::new(),
        };
        let sql = format!(
            "SELECT {} FROM {} {filter} ORDER BY {key} LIMIT {limit}",
            list(table.column_names()),
            table.name
        );
        let params: Vec<SqlValue> = after.unwrap_or_default().iter().map(to_sql).collect();
        let mut stmt = self.conn.prepare_cached(&sql).sq()?;
        let mut rows = stmt.query(rusqlite::params_from_iter(params)).sq()?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().sq()? {
            let mut values = Vec::with_capacity(table.columns.len());
            for (i, (_, kind)) in table.columns.iter().enumerate() {
                values.push(from_sql(table, *kind, row.get(i).sq()?)?);
            }
            out.push(values);
        }
        Ok(out)
    }

    pub(crate) fn dump_count(&self, table: &Table) -> Result<u64> {
        let sql = format!("SELECT COUNT(*) FROM {}", table.name);
        let n: Option<i64> = self.query_opt(&sql, &[], |r| r.get(0))?;
        Ok(n.unwrap_or(0).max(0) as u64)
    }

    /// `AUTOINCREMENT` keeps the highest number issued in `sqlite_sequence`; the table's own
    /// maximum covers a table that never had its row there.
    pub(crate) fn dump_counter(&self, table: &Table) -> Result<i64> {
        let col = table.columns.first().map_or("rowid", |(name, _)| *name);
        let seq: Option<i64> = self.query_opt(
            "SELECT seq FROM sqlite_sequence WHERE name = ?1",
            &[&table.name],
            |r| r.get(0),
        )?;
        let max: Option<Option<i64>> = self.query_opt(
            &format!("SELECT MAX({col}) FROM {}", table.name),
            &[],
            |r| r.get(0),
        )?;
        Ok(seq.unwrap_or(0).max(max.flatten().unwrap_or(0)))
    }

    pub(crate) fn load_rows(&self, table: &Table, rows: &[Row]) -> Result<()> {
        self.live()?;
        let marks: Vec<String> = (1..=table.columns.len()).map(|i| format!("?{i}")).collect();
        let sql = format!(
            "INSERT INTO {} ({}) VALUES ({})",
            table.name,
            list(table.column_names()),
            marks.join(", ")
        );
        let mut stmt = self.conn.prepare_cached(&sql).sq()?;
        for row in rows {
            stmt.execute(rusqlite::params_from_iter(row.iter().map(to_sql)))
                .sq()?;
        }
        Ok(())
    }

    pub(crate) fn load_counter(&self, table: &Table, to: i64) -> Result<()> {
        self.exec(
            "DELETE FROM sqlite_sequence WHERE name = ?1",
            &[&table.name],
        )?;
        self.exec(
            "INSERT INTO sqlite_sequence (name, seq) VALUES (?1, ?2)",
            &[&table.name, &to],
        )?;
        Ok(())
    }
}
