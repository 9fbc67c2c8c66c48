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

/// Whether any session of this database holds advisory lock `$1` (the one-bigint form).
const HELD_SQL: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' \
     AND l.granted AND l.objsubid = 1 \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND l.classid = (($1::bigint >> 32) & 4294967295)::oid \
     AND l.objid = ($1::bigint & 4294967295)::oid)";

/// Claims the writer's write-lock mode on a new connection (once per connection): its mode's
/// lock in shared mode, held for the connection's life, and a check that no connection holds
/// the other mode's. A default-mode writer trusts its row cache by the epoch and the write log,
/// which keyed batches do not move, so one writer of each mode on a database would read stale
/// rows (decision D56). Of two writers of different modes starting together at least one is
/// refused, whatever the order: each takes its own lock before it looks for the other's.
pub(crate) fn claim_mode(conn: &mut Conn, keyed: bool) -> Result<()> {
    if conn.mode_claimed {
        return Ok(());
    }
    let (own, other) = if keyed {
        (crate::MODE_KEYED_LOCK, crate::MODE_DEFAULT_LOCK)
    } else {
        (crate::MODE_DEFAULT_LOCK, crate::MODE_KEYED_LOCK)
    };
    let name = |k: bool| {
        if k {
            "keyed (AWARE_PG_KEYED_LOCKS=1)"
        } else {
            "default"
        }
    };
    let refused = |conn: &mut Conn, key: i64, what: String| -> Result<()> {
        // A role that may only connect can take any advisory lock: name a stranger as such.
        let holder = conn
            .query_opt(crate::STRANGER_HOLDING_SQL, &[&key])?
            .map(|row| -> Result<crate::LockHolder> {
                Ok(crate::LockHolder {
                    pid: col(&row, 0)?,
                    role: col(&row, 1)?,
                    application: col(&row, 2)?,
                    client: col(&row, 3)?,
                })
            })
            .transpose()?;
        Err(StoreError::Refused(match holder {
            Some(h) => format!(
                "the write-mode lock (advisory lock {key:#x}) is held by {h}, which is not the \
                 gateways' role: end that session (SELECT pg_terminate_backend({})) and revoke \
                 CONNECT from roles that need none (docs/deployment.md, \"Roles and grants\")",
                h.pid
            ),
            None => what,
        }))
    };
    let granted: bool = col(
        &conn
            .query_opt("SELECT pg_try_advisory_lock_shared($1)", &[&own])?
            .ok_or_else(|| StoreError::Corrupt("no answer to an advisory lock".into()))?,
        0,
    )?;
    if !granted {
        return refused(
            conn,
            own,
            format!("cannot take the {} write mode's lock", name(keyed)),
        );
    }
    // Read from `pg_locks`, not tried: a try of the other mode's lock would refuse a writer
    // of the same mode whose start raced with this one's try.
    let held: bool = col(
        &conn
            .query_opt(HELD_SQL, &[&other])?
            .ok_or_else(|| StoreError::Corrupt("no answer from pg_locks".into()))?,
        0,
    )?;
    if !held {
        conn.mode_claimed = true;
        return Ok(());
    }
    conn.execute("SELECT pg_advisory_unlock_shared($1)", &[&own])?;
    refused(
        conn,
        other,
        format!(
            "another gateway writes to this database in the {} write-lock mode and this one \
             runs in the {} mode; every gateway of one database must run the same mode \
             (docs/configuration.md, AWARE_PG_KEYED_LOCKS)",
            name(!keyed),
            name(keyed)
        ),
    )
}
