//! The epoch / write-log protocol (postgres.md): how a writer orders its batch among every
//! gateway's and learns which cached rows another gateway's batches made stale. Kept apart from
//! the writer loop so the protocol reads in one place: `begin` opens a batch under the lock,
//! `log_batch` records what the batch wrote for the next holder.

use crate::cache;
use crate::conn::{col, Conn};
use crate::keys::{Mode, Need, KEY_SPACE};
use aware_store::{Result, StoreError};

/// Batches kept in `aware_write_log`: a writer whose last commit is older finds a gap and
/// empties its whole cache, which is always right.
const WRITE_LOG_KEPT: i64 = 1_024;

/// Opens the batch's transaction under the cluster-wide write lock and answers the new epoch
/// and the batches other writers committed since this writer's last one.
///
/// One round trip: the transaction; the lock that orders it among all gateways (the row lock of
/// the epoch's UPDATE, held to the commit: an advisory lock any connecting role could hold,
/// decision D33); the write epoch, which says whether another writer committed since this one's
/// last batch; and the log of those batches (the keys they wrote, so only those rows leave the
/// row cache), read once the lock is held so it sees the last holder's batch.
pub(crate) fn begin(conn: &mut Conn) -> Result<(i64, Vec<cache::LoggedBatch>)> {
    conn.end_transaction();
    conn.defer_simple(
        "BEGIN ISOLATION LEVEL READ COMMITTED; UPDATE aware_write_epoch SET epoch = epoch + 1",
    );
    let since = conn.rows.last_epoch().unwrap_or(i64::MAX);
    let rows = conn.query(
        "SELECT e.epoch, l.epoch, l.everything, l.keys FROM aware_write_epoch e \
         LEFT JOIN aware_write_log l ON l.epoch > $1 AND l.epoch < e.epoch \
         WHERE e.id = 1 ORDER BY l.epoch",
        &[&since],
    )?;
    let mut epoch = None;
    let mut log = Vec::new();
    for row in &rows {
        epoch = Some(col::<i64>(row, 0)?);
        if let Some(e) = col::<Option<i64>>(row, 1)? {
            log.push(cache::LoggedBatch {
                epoch: e,
                everything: col::<Option<bool>>(row, 2)?.unwrap_or(true),
                keys: col::<Option<Vec<String>>>(row, 3)?.unwrap_or_default(),
            });
        }
    }
    match epoch {
        Some(epoch) => Ok((epoch, log)),
        None => Err(StoreError::Corrupt("aware_write_epoch has no row".into())),
    }
}

/// Queues this batch's `aware_write_log` row (it commits or rolls back with the batch), and
/// now and then the pruning of rows no writer still needs.
pub(crate) fn log_batch(conn: &mut Conn, epoch: i64) -> Result<()> {
    let (everything, keys) = conn.rows.touched();
    conn.defer(
        "INSERT INTO aware_write_log (epoch, everything, keys) VALUES ($1, $2, $3)",
        vec![Box::new(epoch), Box::new(everything), Box::new(keys)],
    )?;
    if epoch % 128 == 0 {
        conn.defer(
            "DELETE FROM aware_write_log WHERE epoch < $1",
            vec![Box::new(epoch - WRITE_LOG_KEPT)],
        )?;
    }
    Ok(())
}

/// Opens a batch of keyed mode (`PgOptions::keyed_locks`): the cluster key in share mode (the
/// epoch row `FOR SHARE`, which the `UPDATE` of [`begin`] excludes), and first, while the batch
/// holds no other key, the key its first op could not get in the last batch. A batch whose
/// first op needs the cluster key exclusively opens as [`begin`] does, and empties the row
/// cache. A share-mode batch reads the epoch: moved since this writer's last batch (a bulk
/// write, `aware migrate`), every cached row may be stale; otherwise each key's version says
/// so when the key is taken ([`take_key`]).
pub(crate) fn begin_keyed(conn: &mut Conn, need: Option<Need>) -> Result<i64> {
    if let Some(Need::Exclusive) = need {
        let (epoch, _) = begin(conn)?;
        // This batch's own bulk writes carry no key versions: nothing cached survives it.
        conn.rows.clear();
        conn.keys.begin(Mode::Exclusive);
        return Ok(epoch);
    }
    conn.end_transaction();
    conn.defer_simple("BEGIN ISOLATION LEVEL READ COMMITTED");
    let epoch: i64 = match conn.query_opt(
        "SELECT epoch FROM aware_write_epoch WHERE id = 1 FOR SHARE",
        &[],
    )? {
        Some(row) => col(&row, 0)?,
        None => return Err(StoreError::Corrupt("aware_write_epoch has no row".into())),
    };
    if conn.keys.epoch_moved(epoch) {
        conn.rows.clear();
    }
    conn.keys.begin(Mode::Shared);
    if let Some(Need::Key(k)) = need {
        take_key(conn, k, true)?;
    }
    Ok(epoch)
}

/// Takes key `k` for the writer's batch, waiting for it or only trying, and answers whether it
/// was granted. Granted, the key's version row says whether another writer held it since this
/// writer's last commit holding it: then the row cache may hold stale rows of it and is
/// emptied (a first cut: the cache does not know which rows belong to which key).
pub(crate) fn take_key(conn: &mut Conn, k: i32, wait: bool) -> Result<bool> {
    let row = conn.query_opt(
        "SELECT o_got, o_writer, o_version FROM aware_take_key($1, $2, $3)",
        &[&KEY_SPACE, &k, &wait],
    )?;
    let Some(row) = row else {
        return Err(StoreError::Corrupt("aware_take_key gave no row".into()));
    };
    if !col::<Option<bool>>(&row, 0)?.unwrap_or(false) {
        return Ok(false);
    }
    let writer: Option<String> = col(&row, 1)?;
    let version: Option<i64> = col(&row, 2)?;
    if !conn.keys.still_mine(k, writer.as_deref(), version) {
        conn.rows.clear();
    }
    conn.keys.granted(k);
    Ok(true)
}

/// Queues the version rows of the keys the batch holds, to travel with its `COMMIT`.
pub(crate) fn log_key_versions(conn: &mut Conn) -> Result<()> {
    let (keys, writer, version) = conn.keys.to_log();
    if keys.is_empty() {
        return Ok(());
    }
    conn.defer(
        "INSERT INTO aware_key_versions (k, writer, version) SELECT k, $2, $3 \
         FROM unnest($1::INTEGER[]) AS k ON CONFLICT (k) DO UPDATE \
         SET writer = EXCLUDED.writer, version = EXCLUDED.version",
        vec![Box::new(keys), Box::new(writer), Box::new(version)],
    )
}
