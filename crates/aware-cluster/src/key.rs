//! The key that signs every `NOTIFY` payload (decision D62): read from a key file every gateway
//! shares (`[cluster] key_file`), or, when none is configured, from the table
//! `aware_cluster_key`, which every role that may read that table can read too (its owner,
//! superusers, members of `pg_read_all_data`, and whoever reads a dump of the database).

use postgres::Client;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes a key file must hold at least (after its trailing white space): `openssl rand -hex 32`
/// writes 64.
pub const MIN_KEY_BYTES: usize = 32;

/// The cluster's signing key from a key file. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct ClusterKey(Arc<[u8]>);

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(…)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("cannot read {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("{0} is not a regular file")]
    NotAFile(PathBuf),
    #[error(
        "{0} may be read or written by its group or by others (mode {1:03o}); it signs every \
         wake between gateways: chmod 600 it"
    )]
    Open(PathBuf, u32),
    #[error(
        "{0} holds {1} bytes; a cluster key needs at least {MIN_KEY_BYTES} (for example \
         `openssl rand -hex 32`)"
    )]
    Short(PathBuf, usize),
}

impl ClusterKey {
    /// Reads a key file: a regular file that neither its group nor others may access (the mode
    /// is read from the opened file, so a file swapped after the check is not read), whose
    /// content less trailing white space is the key, at least [`MIN_KEY_BYTES`] long.
    pub fn from_file(path: &Path) -> Result<ClusterKey, KeyFileError> {
        use std::os::unix::fs::PermissionsExt;
        let read = |e| KeyFileError::Read(path.to_path_buf(), e);
        let mut file = std::fs::File::open(path).map_err(read)?;
        let meta = file.metadata().map_err(read)?;
        if !meta.is_file() {
            return Err(KeyFileError::NotAFile(path.to_path_buf()));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(KeyFileError::Open(path.to_path_buf(), mode));
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(read)?;
        let len = bytes
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(0, |i| i + 1);
        bytes.truncate(len);
        if bytes.len() < MIN_KEY_BYTES {
            return Err(KeyFileError::Short(path.to_path_buf(), bytes.len()));
        }
        Ok(ClusterKey(bytes.into()))
    }

    pub(crate) fn bytes(&self) -> Vec<u8> {
        self.0.to_vec()
    }
}

/// Reads the cluster key from `aware_cluster_key` (created by the store's schema migration 4).
fn read_db_key(client: &mut Client) -> Option<Vec<u8>> {
    let row = client
        .query_opt("SELECT key FROM aware_cluster_key WHERE id = 1", &[])
        .ok()??;
    let key: String = row.try_get(0).ok()?;
    Some(key.into_bytes())
}

/// The key a cluster thread signs and checks with, on its new connection `client`: the key
/// file's when one is configured, else the database's.
pub(crate) fn signing_key(
    client: &mut Client,
    file: Option<&ClusterKey>,
) -> Result<Vec<u8>, String> {
    match file {
        Some(k) => Ok(k.bytes()),
        None => read_db_key(client).ok_or_else(|| {
            "cannot read the cluster key from aware_cluster_key (empty when the gateways use \
             [cluster] key_file: give this gateway the same key file)"
                .to_string()
        }),
    }
}

/// With a key file, the database's key signs nothing this gateway accepts, but a role that may
/// read the table could still sign for gateways without the file: it is deleted (once per
/// listener connection; a no-op once gone). A failure (the gateways' role may not delete) is
/// logged, since the key stays readable then.
pub(crate) fn forget_db_key(client: &mut Client) {
    if let Err(e) = client.execute("DELETE FROM aware_cluster_key", &[]) {
        tracing::warn!(event = "cluster_db_key_not_deleted", error = %e,
            "a key file is configured, but the database's cluster key could not be deleted; \
             roles that may read aware_cluster_key can still sign wakes for gateways without \
             the key file: delete its row as the table's owner");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn file(dir: &Path, name: &str, mode: u32, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("write {name}: {e}"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("chmod {name}: {e}"));
        p
    }

    #[test]
    fn a_key_file_must_be_private_and_long_enough() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let hex = "ab".repeat(32);
        let ok = |p: &Path| ClusterKey::from_file(p).map(|k| k.bytes());
        let private = file(dir.path(), "private", 0o600, &format!("{hex}\n"));
        assert_eq!(
            ok(&private).ok(),
            Some(hex.clone().into_bytes()),
            "newline dropped"
        );
        let read_only = file(dir.path(), "read-only", 0o400, &hex);
        assert!(ok(&read_only).is_ok());
        for (name, mode) in [("group", 0o640), ("world", 0o604), ("group-write", 0o620)] {
            let p = file(dir.path(), name, mode, &hex);
            match ClusterKey::from_file(&p) {
                Err(e @ KeyFileError::Open(..)) => assert!(e.to_string().contains("chmod 600")),
                other => panic!("{name}: want Open, got {other:?}"),
            }
        }
        let short = file(dir.path(), "short", 0o600, "0123456789\n");
        assert!(matches!(
            ClusterKey::from_file(&short),
            Err(KeyFileError::Short(_, 10))
        ));
        assert!(matches!(
            ClusterKey::from_file(dir.path()),
            Err(KeyFileError::NotAFile(_))
        ));
        assert!(matches!(
            ClusterKey::from_file(&dir.path().join("missing")),
            Err(KeyFileError::Read(..))
        ));
        assert_eq!(format!("{:?}", ok(&private).map(|_| ())), "Ok(())");
        let key = ClusterKey::from_file(&private).unwrap_or_else(|e| panic!("{e}"));
        assert!(!format!("{key:?}").contains(&hex), "Debug shows the key");
    }
}
