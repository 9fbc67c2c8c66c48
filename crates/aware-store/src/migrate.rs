//! Copies a whole store into an empty one through the [`Store`] trait (`aware migrate`,
//! decision D50): one read snapshot of the source feeds one write op of the target.

use crate::dump::{Chunk, Row, PAGE, TABLES};
use crate::store::{Store, StoreExt};
use crate::tx::{ReadTx, WriteTx};
use crate::{Result, StoreError};
use std::sync::mpsc;

/// Hands `sink` every row of every table and then the counters, from one snapshot of `store`.
/// A sink error stops the export and is returned.
pub fn export(store: &dyn Store, sink: &mut dyn FnMut(Chunk) -> Result<()>) -> Result<()> {
    let mut sink = Some(sink);
    store.read_with(&mut |tx| match sink.take() {
        Some(sink) => export_from(tx, sink),
        None => Ok(()),
    })
}

fn export_from(tx: &dyn ReadTx, sink: &mut dyn FnMut(Chunk) -> Result<()>) -> Result<()> {
    let mut counters = Vec::new();
    for (i, table) in TABLES.iter().enumerate() {
        let mut after: Option<Row> = None;
        loop {
            let rows = tx.export_rows(table, after.as_deref(), PAGE)?;
            for row in &rows {
                table.check(row)?;
            }
            let done = rows.len() < PAGE as usize;
            after = rows
                .last()
                .map(|r| r.iter().take(table.key).cloned().collect());
            if !rows.is_empty() {
                sink(Chunk::Rows { table: i, rows })?;
            }
            if done {
                break;
            }
        }
        if table.counter {
            counters.push((i, tx.counter(table)?));
        }
    }
    sink(Chunk::Counters(counters))
}

/// Writes an exported state into `store` in one write op (one transaction): every chunk that
/// `chunks` yields, until it ends. Refuses, changing nothing, when any table of `store` holds a
/// row, with `refusal` (its `{table}` replaced by the table's name).
fn import(
    store: &dyn Store,
    chunks: mpsc::Receiver<Chunk>,
    refusal: String,
) -> Result<Vec<(usize, u64)>> {
    store.write(move |tx: &mut dyn WriteTx| {
        for table in TABLES {
            if tx.row_count(table)? > 0 {
                return Err(StoreError::Refused(refusal.replace("{table}", table.name)));
            }
        }
        let mut copied: Vec<(usize, u64)> = (0..TABLES.len()).map(|i| (i, 0)).collect();
        // The sender hangs up after the last chunk (or when the export failed: then the
        // caller reports the export's error and this op's partial writes are rolled back).
        while let Ok(chunk) = chunks.recv() {
            match chunk {
                Chunk::Rows { table, rows } => {
                    let t = TABLES
                        .get(table)
                        .ok_or_else(|| StoreError::Corrupt(format!("no table number {table}")))?;
                    // Checked again: a chunk may come from anywhere, not only `export`.
                    for row in &rows {
                        t.check(row)?;
                    }
                    tx.import_rows(t, &rows)?;
                    copied[table].1 += rows.len() as u64;
                }
                Chunk::Counters(counters) => {
                    for (table, value) in counters {
                        if let Some(t) = TABLES.get(table).filter(|t| t.counter) {
                            tx.raise_counter(t, value)?;
                        }
                    }
                    return Ok(copied);
                }
            }
        }
        Err(StoreError::Refused(
            "the export ended before its counters".into(),
        ))
    })
}

/// What a copy moved: rows per table, in copy order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyReport {
    pub tables: Vec<(String, u64)>,
}

/// `progress(table, copied, total)`, called as rows are copied.
pub type Progress<'a> = &'a mut dyn FnMut(&str, u64, u64);

/// Row counts of every table, from one snapshot.
pub fn row_counts(store: &dyn Store) -> Result<Vec<u64>> {
    store.read(|tx| TABLES.iter().map(|t| tx.row_count(t)).collect())
}

/// Copies every row of `source` (one snapshot) into the empty `target` (one transaction),
/// keeping sequences and counters, then checks that both stores hold as many rows per table as
/// were copied. `refusal` is the message for a target that is not empty, with `{table}` where
/// the table's name goes. On any error the target keeps nothing of the copy.
pub fn copy(
    source: &dyn Store,
    target: &dyn Store,
    refusal: &str,
    progress: Progress<'_>,
) -> Result<CopyReport> {
    let totals = row_counts(source)?;
    let (tx, rx) = mpsc::sync_channel::<Chunk>(4);
    let copied = std::thread::scope(|scope| {
        let refusal = refusal.to_string();
        let importer = scope.spawn(move || import(target, rx, refusal));
        let mut seen = vec![0u64; TABLES.len()];
        // Tables are reported in copy order, an empty one as 0/0 when the export passes it.
        let mut next = 0;
        let exported = export(source, &mut |chunk| {
            let upto = match &chunk {
                Chunk::Rows { table, .. } => *table,
                Chunk::Counters(_) => TABLES.len(),
            };
            while next < upto {
                if seen[next] == 0 {
                    progress(TABLES[next].name, 0, totals[next]);
                }
                next += 1;
            }
            if let Chunk::Rows { table, rows } = &chunk {
                seen[*table] += rows.len() as u64;
                progress(TABLES[*table].name, seen[*table], totals[*table]);
            }
            // A closed channel means the import stopped: its own error says why.
            tx.send(chunk).map_err(|_| StoreError::WriterGone)
        });
        drop(tx);
        let imported = importer
            .join()
            .unwrap_or_else(|_| Err(StoreError::Panicked("the import thread".into())));
        match (exported, imported) {
            (Ok(()), imported) => imported,
            (Err(StoreError::WriterGone), Err(e)) => Err(e),
            (Err(e), _) => Err(e),
        }
    })?;
    let (after_source, after_target) = (row_counts(source)?, row_counts(target)?);
    let mut report = CopyReport::default();
    for (i, n) in copied {
        let table = TABLES[i].name;
        let (a, b) = (after_source[i], after_target[i]);
        if a != b || a != n {
            return Err(StoreError::Refused(format!(
                "count mismatch in {table}: source {a}, target {b}, copied {n}"
            )));
        }
        report.tables.push((table.to_string(), n));
    }
    Ok(report)
}
