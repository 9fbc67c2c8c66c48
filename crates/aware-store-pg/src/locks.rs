//! Advisory locks held by strangers (decision D33): any role that may connect can take any
//! advisory lock, whatever its table privileges, so a lock a gateway waits for is checked for a
//! holder of another role and named, instead of waited on in silence.

/// A session that holds an advisory lock and does not run as the role of this connection:
/// not a gateway of this deployment (docs/deployment.md, "Roles and grants").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    pub pid: i32,
    pub role: String,
    pub application: String,
    pub client: String,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "backend pid {} of role {:?} (application {:?}, client {})",
            self.pid, self.role, self.application, self.client
        )
    }
}

/// The SQL of [`stranger_holding`]: the granted advisory lock `$1` in this database, held by a
/// session whose role is not this session's. A bigint key is stored as (classid = high 32
/// bits, objid = low 32 bits, objsubid = 1).
pub const STRANGER_HOLDING_SQL: &str = "SELECT l.pid, COALESCE(a.usename::text, '?'), \
     COALESCE(a.application_name, ''), COALESCE(a.client_addr::text, 'local socket') \
     FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND l.classid = (($1::bigint >> 32) & 4294967295)::oid \
     AND l.objid = ($1::bigint & 4294967295)::oid \
     AND a.usename IS DISTINCT FROM current_user LIMIT 1";

/// Who holds advisory lock `key` if it is not a session of this connection's role: a role that
/// may only connect can take any advisory lock, so a lock that is never granted to a gateway is
/// named instead of waited on in silence.
pub fn stranger_holding(client: &mut postgres::Client, key: i64) -> Option<LockHolder> {
    let row = client.query_opt(STRANGER_HOLDING_SQL, &[&key]).ok()??;
    Some(LockHolder {
        pid: row.try_get(0).ok()?,
        role: row.try_get(1).ok()?,
        application: row.try_get(2).ok()?,
        client: row.try_get(3).ok()?,
    })
}
