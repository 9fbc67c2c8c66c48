//! The disk floor: a thread of the soak that writes 4 KiB to a file next to the data dir and
//! `fdatasync`s it every 100 ms, timed per window as the floor. A commit at `full` waits
//! for such a sync, so when the floor's p99 rises with the writes' p99 in the same windows, the
//! disk (shared with whatever else runs on the machine) is what the commits waited for; when the
//! writes rise alone, the gateway is.

use super::shared::Shared;
use anyhow::{Context, Result};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) fn run(dir: &Path, shared: Shared) -> Result<()> {
    let path = dir.join("fsync-probe");
    let mut f =
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let block = vec![0x5au8; 4096];
    let mut i = 0u64;
    while !shared.stopped() {
        // A small ring of blocks, so the file stays small and each write lands on an
        // allocated block (as a WAL append after a restart does).
        f.seek(SeekFrom::Start((i % 64) * 4096))?;
        let t = Instant::now();
        f.write_all(&block)?;
        f.sync_data().context("fdatasync of the probe file")?;
        shared.stats.record_floor(t.elapsed().as_nanos() as u64);
        i += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    Ok(())
}
