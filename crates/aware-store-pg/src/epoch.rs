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
///
/// The batch also reads the database's recorded write-lock mode and refuses to go on when it is
/// not this writer's (`keyed`: a keyed writer's batch that holds the cluster key exclusively),
/// decision D61.
pub(crate) fn begin(conn: &mut Conn, keyed: bool) -> Result<(i64, Vec<cache::LoggedBatch>)> {
    conn.end_transaction();
    conn.defer_simple(
        "BEGIN ISOLATION LEVEL READ COMMITTED; UPDATE aware_write_epoch SET epoch = epoch + 1",
    );
    let since = conn.rows.last_epoch().unwrap_or(i64::MAX);
    let rows = conn.query(
        "SELECT e.epoch, l.epoch, l.everything, l.keys, e.mode FROM aware_write_epoch e \
         LEFT JOIN aware_write_log l ON l.epoch > $1 AND l.epoch < e.epoch \
         WHERE e.id = 1 ORDER BY l.epoch",
        &[&since],
    )?;
    let mut epoch = None;
    let mut log = Vec::new();
    if let Some(row) = rows.first() {
        let recorded: String = col(row, 4)?;
        check_recorded_mode(conn, &recorded, keyed)?;
    }
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
        let (epoch, _) = begin(conn, true)?;
        // This batch's own bulk writes carry no key versions: nothing cached survives it.
        conn.rows.clear();
        conn.keys.begin(Mode::Exclusive);
        return Ok(epoch);
    }
    conn.end_transaction();
    conn.defer_simple("BEGIN ISOLATION LEVEL READ COMMITTED");
    let (epoch, recorded): (i64, String) = match conn.query_opt(
        "SELECT epoch, mode FROM aware_write_epoch WHERE id = 1 FOR SHARE",
        &[],
    )? {
        Some(row) => (col(&row, 0)?, col(&row, 1)?),
        None => return Err(StoreError::Corrupt("aware_write_epoch has no row".into())),
    };
    check_recorded_mode(conn, &recorded, true)?;
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

/// Whether a session of a gateway (a role that may `UPDATE aware_write_epoch`, so one that can
/// take the write lock anyway) other than this one holds advisory lock `$1` (the one-bigint
/// form). Holders without that privilege are ignored: any role that may connect can take an
/// advisory lock, and such a role must not be able to stop writes (decision D61). `pg_locks` is
/// read live; `pg_stat_activity` once per transaction, after the epoch row's lock was granted.
const LIVE_WRITERS_SQL: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks l \
     JOIN pg_stat_activity a ON a.pid = l.pid \
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND l.classid = (($1::bigint >> 32) & 4294967295)::oid \
     AND l.objid = ($1::bigint & 4294967295)::oid \
     AND l.pid <> pg_backend_pid() \
     AND has_table_privilege(a.usesysid, 'aware_write_epoch', 'UPDATE'))";

/// The name of a write-lock mode in `aware_write_epoch.mode` (migration 8).
fn mode_name(keyed: bool) -> &'static str {
    if keyed {
        "keyed"
    } else {
        "default"
    }
}

fn mode_label(keyed: bool) -> &'static str {
    if keyed {
        "keyed (AWARE_PG_KEYED_LOCKS=1)"
    } else {
        "default"
    }
}

/// Refuses a batch whose writer's mode is not the one the database records (read under the
/// batch's lock on the epoch row): a writer of the other mode took the database over since this
/// connection claimed it, which it does only when it saw no live writer of this mode (this
/// one's marker lock was kept from it). The connection claims again before its next batch.
fn check_recorded_mode(conn: &mut Conn, recorded: &str, keyed: bool) -> Result<()> {
    if recorded == mode_name(keyed) {
        return Ok(());
    }
    conn.mode_claimed = false;
    Err(StoreError::Refused(format!(
        "this database's writers now run the {recorded} write-lock mode and this gateway the {} \
         mode; every gateway of one database must run the same mode (docs/configuration.md, \
         AWARE_PG_KEYED_LOCKS)",
        mode_label(keyed)
    )))
}

/// Claims the writer's write-lock mode on a new connection (once per connection), decision D61
/// over D56. A default-mode writer trusts its row cache by the epoch and the write log, which
/// keyed batches do not move, so writers of both modes on one database would read stale rows.
///
/// The database records its writers' mode in `aware_write_epoch.mode`, which only a role that
/// may update that table can change, and every batch checks it under its lock on that row
/// ([`begin`], [`begin_keyed`]): no batch of one mode commits after a batch of the other mode
/// took the database over. The claim takes the row exclusively and switches the recorded mode
/// (raising the epoch, so every cache of the other mode is dropped) only when no gateway holds
/// the other mode's marker lock, which each writer connection holds in shared mode for its life;
/// a holder that may not update the table is not a gateway and is ignored. Of two writers of
/// different modes starting together at least one is refused: each takes its marker before it
/// looks for the other's, and the claims run one at a time under the row lock.
pub(crate) fn claim_mode(conn: &mut Conn, keyed: bool) -> Result<()> {
    if conn.mode_claimed {
        return Ok(());
    }
    let (own, other) = if keyed {
        (crate::MODE_KEYED_LOCK, crate::MODE_DEFAULT_LOCK)
    } else {
        (crate::MODE_DEFAULT_LOCK, crate::MODE_KEYED_LOCK)
    };
    let marked: bool = col(
        &conn
            .query_opt("SELECT pg_try_advisory_lock_shared($1)", &[&own])?
            .ok_or_else(|| StoreError::Corrupt("no answer to an advisory lock".into()))?,
        0,
    )?;
    if !marked {
        // Gateways take this lock only in shared mode: its exclusive holder is not one. The
        // claim goes on without the marker (the recorded mode keeps writers of the two modes
        // apart); a gateway of the other mode started now would not see this one and would
        // take the database over, which this one's next batch then refuses.
        let holder = conn
            .query_opt(crate::STRANGER_HOLDING_SQL, &[&own])?
            .map(|row| -> Result<String> {
                let h = crate::LockHolder {
                    pid: col(&row, 0)?,
                    role: col(&row, 1)?,
                    application: col(&row, 2)?,
                    client: col(&row, 3)?,
                };
                Ok(h.to_string())
            })
            .transpose()?
            .unwrap_or_else(|| "another session".into());
        tracing::warn!(event = "write_mode_lock_held_by_stranger", holder = %holder,
            "the write-mode lock (advisory lock {own:#x}) is held by {holder}, not by a gateway; \
             writes go on; end that session and revoke CONNECT from roles that need none \
             (docs/deployment.md, \"Roles and grants\")");
    }
    let claimed = claim_locked(conn, keyed, other);
    if claimed.is_err() {
        let _ = conn.batch("ROLLBACK");
        if marked {
            let _ = conn.execute("SELECT pg_advisory_unlock_shared($1)", &[&own]);
        }
    }
    claimed
}

/// The claim's transaction: the epoch row exclusively, the other mode's live writers, the
/// recorded mode switched to this writer's when it differs.
fn claim_locked(conn: &mut Conn, keyed: bool, other: i64) -> Result<()> {
    conn.end_transaction();
    conn.batch("BEGIN ISOLATION LEVEL READ COMMITTED")?;
    let recorded: String = match conn.query_opt(
        "SELECT mode FROM aware_write_epoch WHERE id = 1 FOR UPDATE",
        &[],
    )? {
        Some(row) => col(&row, 0)?,
        None => return Err(StoreError::Corrupt("aware_write_epoch has no row".into())),
    };
    let live: bool = col(
        &conn
            .query_opt(LIVE_WRITERS_SQL, &[&other])?
            .ok_or_else(|| StoreError::Corrupt("no answer from pg_locks".into()))?,
        0,
    )?;
    if live {
        return Err(StoreError::Refused(format!(
            "another gateway writes to this database in the {} write-lock mode and this one \
             runs in the {} mode; every gateway of one database must run the same mode \
             (docs/configuration.md, AWARE_PG_KEYED_LOCKS)",
            mode_label(!keyed),
            mode_label(keyed)
        )));
    }
    if recorded != mode_name(keyed) {
        // The raise without a write-log row makes every writer drop its whole row cache.
        conn.execute(
            "UPDATE aware_write_epoch SET mode = $1, epoch = epoch + 1 WHERE id = 1",
            &[&mode_name(keyed)],
        )?;
        tracing::info!(event = "write_mode_switched", from = %recorded, to = mode_name(keyed),
            "no gateway of the {recorded} write-lock mode is live: this database's writers now run the {} mode",
            mode_label(keyed));
    }
    conn.batch("COMMIT")?;
    conn.mode_claimed = true;
    Ok(())
}
