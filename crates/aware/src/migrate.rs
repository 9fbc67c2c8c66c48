//! `aware migrate --from A --to B`: copies a whole store between SQLite (a data dir) and
//! PostgreSQL (a `postgres://` URL), either way.
//!
//! Both backends have the same tables and columns (integers and text only), so the copy is row
//! by row and table by table, keeping every key: sequences, FIFO ids, turn indexes, heads with
//! their pruned watermarks. The source is read in one snapshot (gateways may keep running on
//! it); the target is written in one transaction, refused unless empty, and its id counters are
//! raised to the highest id the source ever issued (not only the highest still stored), so a
//! migrated store never reissues a pruned sequence. Counts are compared after the commit.

use anyhow::{anyhow, bail, Context, Result};
use aware_store::Store;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct MigrateArgs {
    /// The store to copy: a SQLite data dir (or its state.db) or a postgres:// URL.
    #[arg(long, value_name = "STORE")]
    pub from: String,
    /// The empty store to fill: a SQLite data dir or a postgres:// URL (password from the URL,
    /// PGPASSWORD or --password-file).
    #[arg(long, value_name = "STORE")]
    pub to: String,
    /// A file holding the PostgreSQL password (first line), for either side.
    #[arg(long, value_name = "PATH")]
    pub password_file: Option<PathBuf>,
}

/// Tables in copy order, with the column that orders a copy (ids ascend in the target as in the
/// source). `session_watch_cursors` is ordered by its creation order (SQLite rowid, PostgreSQL
/// `row_id`), which the restart sweep pages by.
const TABLES: &[(&str, &str)] = &[
    ("sessions", "session_key, agent_id"),
    ("session_state_events", "sequence"),
    ("session_state_heads", "session_key, agent_id"),
    ("session_watch_cursors", "@rowid"),
    ("session_system_events", "id"),
    ("session_upstream_links", "session_key, agent_id"),
    ("turns", "session_key, agent_id, idx"),
    ("runs", "run_id"),
];

/// Id counters: (table, column) whose next value must stay above everything ever issued.
const COUNTERS: &[(&str, &str)] = &[
    ("session_state_events", "sequence"),
    ("session_system_events", "id"),
];

/// One cell; both schemas hold only integers and text.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Int(Option<i64>),
    Text(Option<String>),
}

type Row = Vec<Cell>;

enum Side {
    Sqlite(PathBuf),
    Postgres(String),
}

fn side(s: &str) -> Side {
    if s.starts_with("postgres://") || s.starts_with("postgresql://") {
        Side::Postgres(s.to_string())
    } else {
        let p = Path::new(s);
        if p.extension().is_some_and(|e| e == "db") {
            Side::Sqlite(p.to_path_buf())
        } else {
            Side::Sqlite(p.join("state.db"))
        }
    }
}

fn describe(s: &Side) -> String {
    match s {
        Side::Sqlite(p) => format!("SQLite {}", p.display()),
        Side::Postgres(u) => format!("PostgreSQL {}", aware_store_pg::redact_url(u)),
    }
}

pub fn run(args: MigrateArgs) -> Result<()> {
    let password = match &args.password_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("cannot read --password-file {}", p.display()))?
                .lines()
                .next()
                .unwrap_or("")
                .to_string(),
        ),
        None => None,
    };
    let (from, to) = (side(&args.from), side(&args.to));
    if let (Side::Sqlite(_), Side::Sqlite(_)) = (&from, &to) {
        bail!("one side must be PostgreSQL (copy a SQLite data dir with `cp`)");
    }
    if let (Side::Postgres(_), Side::Postgres(_)) = (&from, &to) {
        bail!("one side must be a SQLite data dir (copy between PostgreSQL servers with pg_dump)");
    }
    if let Side::Sqlite(p) = &from {
        if !p.is_file() {
            bail!(
                "no store at {} (expected a data dir holding state.db)",
                p.display()
            );
        }
    }
    eprintln!("migrate: {} -> {}", describe(&from), describe(&to));
    let mut source = open(&from, password.clone(), false)?;
    let mut target = open(&to, password, true)?;
    let report = copy(&mut *source, &mut *target)?;
    eprintln!(
        "migrate: done, {} rows in {} tables; counts verified",
        report.iter().map(|(_, n)| n).sum::<u64>(),
        report.len()
    );
    for (table, n) in report {
        eprintln!("  {table:<24} {n}");
    }
    Ok(())
}

/// What the copy needs of each side.
trait Db {
    fn columns(&mut self, table: &str) -> Result<Vec<String>>;
    fn begin_read(&mut self) -> Result<()>;
    fn begin_write(&mut self) -> Result<()>;
    fn commit(&mut self) -> Result<()>;
    fn count(&mut self, table: &str) -> Result<u64>;
    /// Calls `f` with pages of rows of `columns`, in `order`.
    fn scan(
        &mut self,
        table: &str,
        columns: &[String],
        order: &str,
        f: &mut dyn FnMut(Vec<Row>) -> Result<()>,
    ) -> Result<()>;
    fn insert(&mut self, table: &str, columns: &[String], rows: &[Row]) -> Result<()>;
    /// The highest id the counter ever issued (0 when none).
    fn counter(&mut self, table: &str, column: &str) -> Result<i64>;
    /// Makes the next issued id greater than `at_least`.
    fn raise_counter(&mut self, table: &str, column: &str, at_least: i64) -> Result<()>;
}

fn open(s: &Side, password: Option<String>, create: bool) -> Result<Box<dyn Db>> {
    match s {
        Side::Sqlite(path) => {
            if create {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("cannot create {}", dir.display()))?;
                }
                // The store's own open creates the schema (and refuses a newer one).
                let store = aware_store::SqliteStore::open(aware_store::StoreOptions::new(path))
                    .with_context(|| format!("cannot open {}", path.display()))?;
                store.close();
            }
            let conn = rusqlite::Connection::open(path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            conn.busy_timeout(std::time::Duration::from_secs(10))?;
            Ok(Box::new(Lite(conn)))
        }
        Side::Postgres(url) => {
            let options = aware_store_pg::PgOptions::new(url.clone())
                .password(password)
                .with_env(|k| std::env::var(k).ok());
            options.validate().map_err(|e| anyhow!(e))?;
            // Opening the store migrates the schema (refusing a newer one); the copy itself
            // runs on a plain connection with the store's settings.
            let store = aware_store_pg::PgStore::open(options)
                .map_err(|e| anyhow!("cannot open {}: {e}", aware_store_pg::redact_url(url)))?;
            let client = store
                .connect()
                .map_err(|e| anyhow!("cannot connect to {}: {e}", store.location()))?;
            store.close();
            Ok(Box::new(Pg(client)))
        }
    }
}

fn copy(source: &mut dyn Db, target: &mut dyn Db) -> Result<Vec<(&'static str, u64)>> {
    source.begin_read()?;
    target.begin_write()?;
    let mut not_empty = Vec::new();
    for (table, _) in TABLES {
        let n = target.count(table)?;
        if n > 0 {
            not_empty.push(format!("{table}: {n} rows"));
        }
    }
    if !not_empty.is_empty() {
        bail!(
            "the target store is not empty ({}); migrate copies into an empty store only",
            not_empty.join(", ")
        );
    }
    let mut counts = Vec::new();
    for (table, order) in TABLES {
        let src_cols = source.columns(table)?;
        let dst_cols = target.columns(table)?;
        // `row_id` is PostgreSQL's stand-in for SQLite's rowid: it is not copied, creation
        // order is (rows go in in that order).
        let cols: Vec<String> = src_cols
            .iter()
            .filter(|c| dst_cols.contains(c) && c.as_str() != "row_id")
            .cloned()
            .collect();
        if let Some(missing) = src_cols
            .iter()
            .find(|c| !dst_cols.contains(c) && c.as_str() != "row_id")
        {
            bail!("the target's table {table} has no column {missing}: schemas differ");
        }
        let total = source.count(table)?;
        let mut done = 0u64;
        progress(table, done, total);
        source.scan(table, &cols, order, &mut |rows| {
            target.insert(table, &cols, &rows)?;
            done += rows.len() as u64;
            progress(table, done, total);
            Ok(())
        })?;
        eprintln!();
        counts.push((*table, total));
    }
    for (table, column) in COUNTERS {
        let high = source.counter(table, column)?;
        target.raise_counter(table, column, high)?;
    }
    target.commit()?;
    source.commit()?;
    for (table, n) in &counts {
        let got = target.count(table)?;
        if got != *n {
            bail!("verification failed: {table} has {got} rows in the target, {n} in the source");
        }
    }
    Ok(counts)
}

fn progress(table: &str, done: u64, total: u64) {
    let width = 30usize;
    let filled = if total == 0 {
        width
    } else {
        ((done as f64 / total as f64) * width as f64) as usize
    };
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "\r  {table:<24} [{}{}] {done}/{total}",
        "#".repeat(filled.min(width)),
        " ".repeat(width - filled.min(width))
    );
    let _ = err.flush();
}

const PAGE: usize = 500;

struct Lite(rusqlite::Connection);

impl Db for Lite {
    fn columns(&mut self, table: &str) -> Result<Vec<String>> {
        let mut st = self.0.prepare(&format!("PRAGMA table_info({table})"))?;
        let cols = st
            .query_map([], |r| r.get::<_, String>(1))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        if cols.is_empty() {
            bail!("the SQLite store has no table {table}");
        }
        Ok(cols)
    }
    fn begin_read(&mut self) -> Result<()> {
        // A read transaction is one snapshot of the WAL: a running gateway may keep writing.
        self.0.execute_batch("BEGIN")?;
        Ok(())
    }
    fn begin_write(&mut self) -> Result<()> {
        self.0.execute_batch("BEGIN IMMEDIATE")?;
        Ok(())
    }
    fn commit(&mut self) -> Result<()> {
        self.0.execute_batch("COMMIT")?;
        Ok(())
    }
    fn count(&mut self, table: &str) -> Result<u64> {
        let n: i64 = self
            .0
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))?;
        Ok(n as u64)
    }
    fn scan(
        &mut self,
        table: &str,
        columns: &[String],
        order: &str,
        f: &mut dyn FnMut(Vec<Row>) -> Result<()>,
    ) -> Result<()> {
        let order = if order == "@rowid" { "rowid" } else { order };
        let sql = format!(
            "SELECT {} FROM {table} ORDER BY {order}",
            columns.join(", ")
        );
        let mut st = self.0.prepare(&sql)?;
        let mut rows = st.query([])?;
        let mut page = Vec::with_capacity(PAGE);
        while let Some(r) = rows.next()? {
            let mut row = Vec::with_capacity(columns.len());
            for (i, column) in columns.iter().enumerate() {
                row.push(match r.get_ref(i)? {
                    rusqlite::types::ValueRef::Null => Cell::Int(None),
                    rusqlite::types::ValueRef::Integer(v) => Cell::Int(Some(v)),
                    rusqlite::types::ValueRef::Text(t) => {
                        Cell::Text(Some(String::from_utf8_lossy(t).into_owned()))
                    }
                    other => bail!(
                        "{table}.{column}: unexpected value type {:?}",
                        other.data_type()
                    ),
                });
            }
            page.push(row);
            if page.len() == PAGE {
                f(std::mem::take(&mut page))?;
            }
        }
        if !page.is_empty() {
            f(page)?;
        }
        Ok(())
    }
    fn insert(&mut self, table: &str, columns: &[String], rows: &[Row]) -> Result<()> {
        let marks: Vec<String> = (1..=columns.len()).map(|i| format!("?{i}")).collect();
        let sql = format!(
            "INSERT INTO {table} ({}) VALUES ({})",
            columns.join(", "),
            marks.join(", ")
        );
        let mut st = self.0.prepare_cached(&sql)?;
        for row in rows {
            let values: Vec<rusqlite::types::Value> = row
                .iter()
                .map(|c| match c {
                    Cell::Int(Some(v)) => rusqlite::types::Value::Integer(*v),
                    Cell::Text(Some(s)) => rusqlite::types::Value::Text(s.clone()),
                    _ => rusqlite::types::Value::Null,
                })
                .collect();
            st.execute(rusqlite::params_from_iter(values))
                .with_context(|| format!("insert into {table}"))?;
        }
        Ok(())
    }
    fn counter(&mut self, table: &str, column: &str) -> Result<i64> {
        let seq: Option<i64> = self
            .0
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name = ?1",
                [table],
                |r| r.get(0),
            )
            .ok();
        let max: Option<i64> =
            self.0
                .query_row(&format!("SELECT MAX({column}) FROM {table}"), [], |r| {
                    r.get(0)
                })?;
        Ok(seq.unwrap_or(0).max(max.unwrap_or(0)))
    }
    fn raise_counter(&mut self, table: &str, _column: &str, at_least: i64) -> Result<()> {
        let n = self.0.execute(
            "UPDATE sqlite_sequence SET seq = MAX(seq, ?2) WHERE name = ?1",
            rusqlite::params![table, at_least],
        )?;
        if n == 0 && at_least > 0 {
            self.0.execute(
                "INSERT INTO sqlite_sequence (name, seq) VALUES (?1, ?2)",
                rusqlite::params![table, at_least],
            )?;
        }
        Ok(())
    }
}

struct Pg(aware_store_pg::postgres::Client);

impl Db for Pg {
    fn columns(&mut self, table: &str) -> Result<Vec<String>> {
        let rows = self.0.query(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
            &[&table],
        )?;
        let cols: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        if cols.is_empty() {
            bail!("the PostgreSQL store has no table {table}");
        }
        Ok(cols)
    }
    fn begin_read(&mut self) -> Result<()> {
        self.0
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
        Ok(())
    }
    fn begin_write(&mut self) -> Result<()> {
        // The writers' cluster-wide lock: no gateway writes while the copy runs.
        self.0.batch_execute("BEGIN")?;
        self.0.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&aware_store_pg::WRITE_LOCK],
        )?;
        Ok(())
    }
    fn commit(&mut self) -> Result<()> {
        self.0.batch_execute("COMMIT")?;
        Ok(())
    }
    fn count(&mut self, table: &str) -> Result<u64> {
        let n: i64 = self
            .0
            .query_one(&format!("SELECT COUNT(*) FROM {table}"), &[])?
            .get(0);
        Ok(n as u64)
    }
    fn scan(
        &mut self,
        table: &str,
        columns: &[String],
        order: &str,
        f: &mut dyn FnMut(Vec<Row>) -> Result<()>,
    ) -> Result<()> {
        let order = if order == "@rowid" { "row_id" } else { order };
        let types: Vec<bool> = self.int_columns(table, columns)?;
        let sql = format!(
            "SELECT {} FROM {table} ORDER BY {order}",
            columns.join(", ")
        );
        let mut it = self.0.query_raw(&sql, std::iter::empty::<i64>())?;
        let mut page = Vec::with_capacity(PAGE);
        use aware_store_pg::postgres::fallible_iterator::FallibleIterator;
        while let Some(r) = it.next()? {
            let mut row = Vec::with_capacity(columns.len());
            for (i, is_int) in types.iter().enumerate() {
                row.push(if *is_int {
                    Cell::Int(r.try_get(i)?)
                } else {
                    Cell::Text(r.try_get(i)?)
                });
            }
            page.push(row);
            if page.len() == PAGE {
                f(std::mem::take(&mut page))?;
            }
        }
        if !page.is_empty() {
            f(page)?;
        }
        Ok(())
    }
    fn insert(&mut self, table: &str, columns: &[String], rows: &[Row]) -> Result<()> {
        let marks: Vec<String> = (1..=columns.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "INSERT INTO {table} ({}) VALUES ({})",
            columns.join(", "),
            marks.join(", ")
        );
        let st = self.0.prepare(&sql)?;
        let ints = self.int_columns(table, columns)?;
        // SQLite's NULL has no type: it takes the target column's.
        const NO_TEXT: Option<String> = None;
        const NO_INT: Option<i64> = None;
        for row in rows {
            let mut params: Vec<&(dyn aware_store_pg::postgres::types::ToSql + Sync)> =
                Vec::with_capacity(row.len());
            for ((c, int), name) in row.iter().zip(&ints).zip(columns) {
                params.push(match (c, int) {
                    (Cell::Int(None) | Cell::Text(None), true) => &NO_INT,
                    (Cell::Int(None) | Cell::Text(None), false) => &NO_TEXT,
                    (Cell::Int(v), true) => v,
                    (Cell::Text(v), false) => v,
                    _ => bail!("{table}.{name}: the value's type does not match the column's"),
                });
            }
            self.0
                .execute(&st, &params)
                .with_context(|| format!("insert into {table}"))?;
        }
        Ok(())
    }
    fn counter(&mut self, table: &str, column: &str) -> Result<i64> {
        let row = self.0.query_one(
            &format!(
                "SELECT COALESCE(pg_sequence_last_value(pg_get_serial_sequence($1, $2)::regclass), 0), \
                 COALESCE((SELECT MAX({column}) FROM {table}), 0)"
            ),
            &[&table, &column],
        )?;
        let (seq, max): (i64, i64) = (row.get(0), row.get(1));
        Ok(seq.max(max))
    }
    fn raise_counter(&mut self, table: &str, column: &str, at_least: i64) -> Result<()> {
        // The identity's next value follows the highest id ever issued by the source.
        let row = self.0.query_one(
            &format!("SELECT COALESCE((SELECT MAX({column}) FROM {table}), 0)"),
            &[],
        )?;
        let high = at_least.max(row.get::<_, i64>(0));
        if high > 0 {
            self.0.execute(
                "SELECT setval(pg_get_serial_sequence($1, $2), $3, true)",
                &[&table, &column, &high],
            )?;
        }
        Ok(())
    }
}

impl Pg {
    /// For each column: whether it holds integers (else text).
    fn int_columns(&mut self, table: &str, columns: &[String]) -> Result<Vec<bool>> {
        let rows = self.0.query(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1",
            &[&table],
        )?;
        columns
            .iter()
            .map(|c| {
                rows.iter()
                    .find(|r| r.get::<_, String>(0) == *c)
                    .map(|r| r.get::<_, String>(1) == "bigint")
                    .ok_or_else(|| anyhow!("{table}.{c}: no such column"))
            })
            .collect()
    }
}
