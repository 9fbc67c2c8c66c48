//! `[store]`: the PostgreSQL store's URL and password, from flags, environment and file; and
//! `[cluster] key_file`, which only a PostgreSQL store uses.

use super::error::{bad, read_token_file, ConfigError};
use super::file::FileConfig;

/// The PostgreSQL store, if one is named: `--store` > `AWARE_STORE_URL` > `[store] url` (flags
/// win over the environment, as for every other setting). The
/// password comes from the URL, else `[store] password_file`, else `PGPASSWORD`; `PGHOST`,
/// `PGPORT`, `PGUSER` and `PGDATABASE` fill what the URL leaves out. Messages never show a
/// password.
pub(super) fn store_options(
    store_url: Option<&str>,
    file: &FileConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<aware_store_pg::PgOptions>, ConfigError> {
    let fs = file.store.clone().unwrap_or_default();
    let Some(url) = store_url
        .map(str::to_string)
        .or_else(|| env("AWARE_STORE_URL"))
        .or(fs.url.clone())
        .filter(|u| !u.is_empty())
    else {
        if fs.password_file.is_some() {
            return Err(bad(
                "store.password_file is set but no store.url names a server",
            ));
        }
        return Ok(None);
    };
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(bad(format!(
            "store url must be a postgres:// or postgresql:// URL (got {}); leave it out for the embedded SQLite store",
            aware_store_pg::redact_url(&url)
        )));
    }
    let password = fs
        .password_file
        .as_ref()
        .map(|p| read_token_file("store.password_file", p))
        .transpose()?;
    let options = aware_store_pg::PgOptions::new(url)
        .password(password)
        .with_env(|k| env(k));
    options
        .validate()
        .map_err(|e| bad(format!("store url: {e}")))?;
    Ok(Some(options))
}

/// `[cluster] key_file`: the key every gateway of one PostgreSQL signs its wakes with, read at
/// start (a group- or world-accessible file is refused). Without it the gateways use the key in
/// the database (docs/deployment.md, "The cluster key").
pub(super) fn cluster_key(
    file: &FileConfig,
    on_postgres: bool,
) -> Result<Option<aware_cluster::ClusterKey>, ConfigError> {
    let Some(path) = file.cluster.as_ref().and_then(|c| c.key_file.as_ref()) else {
        return Ok(None);
    };
    if !on_postgres {
        return Err(bad(
            "cluster.key_file is set but no store.url names a PostgreSQL server (on SQLite there \
             is no cluster)",
        ));
    }
    aware_cluster::ClusterKey::from_file(path)
        .map(Some)
        .map_err(|e| bad(format!("cluster.key_file: {e}")))
}
