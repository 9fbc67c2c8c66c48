//! What the hook must report while the gateway is down (human prompts, subagent starts and
//! ends, compactions), kept until it answers again.
//!
//! A prompt typed while `aware serve` is down used to be lost to the log. Now the hook writes
//! the request it could not make (a human prompt's turn, with the time it was typed and an
//! idempotency key) to a small spool, one file per request, and the next hook run that reaches
//! the gateway replays the spool in order before its own work. Replays are idempotent: a turn
//! carries its `idempotencyKey` (a second post is a `duplicate`), so a crash between a post and
//! the removal of its file costs nothing.
//!
//! - Where: `$XDG_STATE_HOME/aware/spool/<16 bytes of SHA-256 of url and session>/`, created
//!   `0700`, files `0600`, written to a temporary name and renamed, so a crash leaves either the
//!   whole entry or none.
//! - Bounded: at most [`MAX_ENTRIES`]; past it the newest request is dropped with a warning
//!   rather than the oldest, so what is kept stays a prefix of what happened.
//! - One replayer at a time (an `flock` on the directory's lock file); a hook that finds it held
//!   skips the replay, the holder is doing it.
//! - The human hears of an outage once: the first hook that finds the gateway down (no `outage`
//!   marker yet) says so where the CLI shows it; the marker goes when a replay succeeds.

use super::common::{said, warn, Http, Target};
use serde_json::{json, Value};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

/// Requests kept at most while the gateway is down.
pub const MAX_ENTRIES: usize = 1000;

pub struct Spool {
    dir: PathBuf,
}

impl Spool {
    /// The spool of `key` on the gateway at `url` (nothing is created yet).
    pub fn of(url: &str, key: &str) -> Result<Spool, String> {
        use sha2::{Digest, Sha256};
        let state = super::common::state_dir()?;
        let digest = Sha256::digest(format!("{url}\0{key}").as_bytes());
        Ok(Spool {
            dir: state
                .join("spool")
                .join(aware_core::hex::lower(&digest[..16])),
        })
    }

    fn entries(&self) -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut v: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        v.sort();
        v
    }

    /// Keeps `POST path` with `body` for a later replay.
    pub fn put(&self, path: &str, body: &Value) -> Result<(), String> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        if self.entries().len() >= MAX_ENTRIES {
            return Err(format!(
                "{MAX_ENTRIES} requests are already kept for the gateway in {}; this one is dropped",
                self.dir.display()
            ));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        // Sorts in the order written: nanoseconds, then the pid for two hooks in one tick.
        let name = format!("{:020}-{:010}", now.as_nanos(), std::process::id());
        let tmp = self.dir.join(format!("{name}.tmp"));
        let entry = json!({"path": path, "body": body});
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(entry.to_string().as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, self.dir.join(format!("{name}.json")))
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot keep the request in {}: {e}", self.dir.display())
        })
    }

    /// True the first time an outage is noticed (the marker did not exist), so the human is
    /// told once per outage.
    pub fn first_notice_of_outage(&self) -> bool {
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(self.dir.join("outage"))
            .is_ok()
    }

    /// Replays what is kept, oldest first, while the gateway takes it; stops at the first
    /// request it cannot make now. A request the gateway refuses for good is dropped with a
    /// warning (it would block every later one). Returns how many were replayed.
    pub fn replay(&self, http: &Http, target: &Target) -> usize {
        let entries = self.entries();
        if entries.is_empty() {
            return 0;
        }
        let Ok(lock) = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(self.dir.join("lock"))
        else {
            return 0;
        };
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return 0;
        }
        let mut done = 0;
        // Listed again under the lock: another replayer may have taken some.
        for path in self.entries() {
            let Some(entry) = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            else {
                let _ = std::fs::remove_file(&path);
                continue;
            };
            let (Some(route), Some(body)) = (entry["path"].as_str(), entry.get("body")) else {
                let _ = std::fs::remove_file(&path);
                continue;
            };
            match post_creating(http, target, route, body) {
                Ok(()) => {}
                Err(e) if retryable(&e) => return done,
                // A run started or ended meanwhile (the subagent's own hooks after the outage):
                // the request's effect is there already.
                Err(e) if matches!(e.code(), "run_active" | "run_conflict" | "run_not_found") => {}
                Err(e) => warn(&format!(
                    "a request kept while the gateway was down was refused and is dropped: {}",
                    said(&e)
                )),
            }
            let _ = std::fs::remove_file(&path);
            done += 1;
        }
        let _ = std::fs::remove_file(self.dir.join("outage"));
        done
    }
}

/// `POST route body`, creating the session first when it does not exist yet.
fn post_creating(
    http: &Http,
    target: &Target,
    route: &str,
    body: &Value,
) -> Result<(), aware_client::ClientError> {
    match http.post(route, body) {
        Ok(_) => Ok(()),
        Err(e) if e.code() == "session_not_found" => {
            let mut create = json!({"key": target.key, "createdVia": "hook"});
            if let Some(a) = &target.agent {
                create["agentId"] = a.clone().into();
            }
            match http.post("/v1/sessions", &create) {
                Ok(_) => {}
                Err(e) if e.code() == "session_exists" => {}
                Err(e) => return Err(e),
            }
            http.post(route, body).map(|_| ())
        }
        Err(e) => Err(e),
    }
}

/// A failure that passes when the gateway is back: unreachable, timed out, or 503 (starting, or
/// its store down).
pub fn retryable(e: &aware_client::ClientError) -> bool {
    e.is_unavailable() || e.status() == Some(503)
}
