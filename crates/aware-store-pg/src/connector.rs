//! Making connections, and failing fast while the server is down.

use crate::conn::Conn;
use crate::stats::Role;
use aware_store::{Result, StoreError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// After a failed connect, connections fail at once for this long instead of each waiting for
/// its own connect timeout: a down server answers every caller quickly.
const CONNECT_BACKOFF: Duration = Duration::from_millis(500);

/// Makes connections; remembers a recent failure so callers fail fast during an outage.
pub(crate) struct Connector {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) tls: crate::tls::PgTls,
    /// The client's own deadlines on connecting and on each exchange.
    pub(crate) deadlines: crate::conn::Deadlines,
    /// The connection generation and the fail-fast window, shared with the connections (a
    /// missed deadline on one of them sets both).
    pub(crate) shared: Arc<crate::conn::Shared>,
}

impl Connector {
    pub(crate) fn connect(&self, role: Role) -> Result<Conn> {
        if let Ok(down) = self.shared.down.lock() {
            if let Some((until, msg)) = down.as_ref() {
                if Instant::now() < *until {
                    return Err(StoreError::Unreachable(msg.clone()));
                }
            }
        }
        match Conn::connect(
            &self.config,
            &self.tls,
            role,
            self.deadlines,
            self.shared.clone(),
        ) {
            Ok(conn) => {
                if let Ok(mut down) = self.shared.down.lock() {
                    *down = None;
                }
                Ok(conn)
            }
            Err(err) => {
                self.shared
                    .mark_down(Instant::now() + CONNECT_BACKOFF, err.to_string());
                Err(match err {
                    // No retry fixes a wrong URL or password: the operator must, so say how.
                    StoreError::Postgres { sqlstate, message } if sqlstate == "3D000" => {
                        StoreError::Refused(format!(
                            "cannot connect: {message} (SQLSTATE 3D000); create it (`createdb \
                             NAME` as a PostgreSQL user allowed to) or correct the database in \
                             the URL (--store, [store] url)"
                        ))
                    }
                    StoreError::Postgres { sqlstate, message }
                        if sqlstate == "28P01" || sqlstate == "28000" =>
                    {
                        StoreError::Refused(format!(
                            "cannot connect: {message} (SQLSTATE {sqlstate}); correct the user \
                             or password (the URL, --password-file or PGPASSWORD) or the \
                             server's pg_hba.conf"
                        ))
                    }
                    StoreError::Postgres { sqlstate, message } => StoreError::Unreachable(format!(
                        "cannot connect: {message} (SQLSTATE {sqlstate})"
                    )),
                    other => other,
                })
            }
        }
    }

    /// The connection in `slot`, made (again) when missing or broken.
    pub(crate) fn ensure<'a>(
        &self,
        slot: &'a mut Option<Conn>,
        role: Role,
    ) -> Result<&'a mut Conn> {
        if let Some(conn) = slot.as_mut() {
            conn.catch_up_idle();
        }
        if slot.as_ref().is_some_and(Conn::is_closed) {
            *slot = None;
        }
        if slot.is_none() {
            *slot = Some(self.connect(role)?);
        }
        slot.as_mut()
            .ok_or_else(|| StoreError::Unreachable("no connection".into()))
    }
}
