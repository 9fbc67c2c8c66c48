//! W7: the transcript scanners (Claude, Codex, rows of any size) next to a newline count.

use super::setup::*;
use crate::prelude::*;
use crate::report::*;

/// W7: the Claude transcript scanner over ~100 MB built from the real fixtures vendored in
/// `crates/aware-upstream/tests/fixtures/claude-code` (synthetic rows if absent), in 1 MiB windows exactly
/// as the monitor reads them, next to a plain newline count over the same bytes.
pub(crate) fn w7(plan: &Plan) -> Result<Outcome> {
    use aware_upstream::claude::scan::scan_window;
    let run = scan_run(
        plan,
        "claude-code",
        "the real fixtures",
        |i| {
            format!("{{\"type\":\"user\",\"uuid\":\"u{i}\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"prompt {i}\"}}}}\n{{\"type\":\"assistant\",\"message\":{{\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\"text\":\"answer {i}\"}}]}}}}\n")
        },
        |w, input| scan_window(w, input).map(|(n, out)| (n, out.human_turns)),
    )?;
    let (rate, floor_rate, ratio) = (run.rate(), run.floor_rate(), run.ratio());
    let line = format!("W7 Claude {}", run.describe());
    Ok(Outcome::new("W7", line)
        .figure("scan_mb_per_s", rate, "MB/s", Better::Higher)
        .figure("floor_mb_per_s", floor_rate, "MB/s", Better::Higher)
        .figure("ratio", ratio, "x", Better::Lower)
        .target("scan_mb_per_s", 1000.0))
}

/// One W7 scan: ~100 MB (scaled) built from the vendored fixtures of one tool, scanned in 1 MiB
/// windows exactly as the monitor reads them, next to a plain newline count over the same bytes.
pub(crate) struct ScanRun {
    mb: f64,
    source: &'static str,
    windows: u64,
    turns: u64,
    newlines: usize,
    secs: f64,
    floor_secs: f64,
}

impl ScanRun {
    fn rate(&self) -> f64 {
        self.mb / self.secs.max(1e-9)
    }
    fn floor_rate(&self) -> f64 {
        self.mb / self.floor_secs.max(1e-9)
    }
    fn ratio(&self) -> f64 {
        self.secs / self.floor_secs.max(1e-9)
    }
    fn describe(&self) -> String {
        format!(
            "window scan over {:.0} MB of {} ({} windows of <= 1 MiB, {} human turns, {} rows): {:.0} MB/s | floor newline count {:.0} MB/s | ratio {:.1}x",
            self.mb,
            self.source,
            self.windows,
            self.turns,
            self.newlines,
            self.rate(),
            self.floor_rate(),
            self.ratio()
        )
    }
}

/// Builds the corpus from `crates/aware-upstream/tests/fixtures/<fixtures>` (synthetic rows from
/// `synthetic` when the folder is absent) and runs `scan` over it window by window.
pub(crate) fn scan_run(
    plan: &Plan,
    fixtures: &str,
    real: &'static str,
    synthetic: impl Fn(usize) -> String,
    scan: impl Fn(&[u8], &aware_upstream::claude::scan::ScanInput) -> Option<(usize, u32)>,
) -> Result<ScanRun> {
    use aware_upstream::claude::scan::{ScanInput, WINDOW_BYTES};
    let target = (100u64 << 20) / plan.scale;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../aware-upstream/tests/fixtures")
        .join(fixtures);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|x| x == "jsonl"));
    files.sort();
    let mut corpus: Vec<u8> = Vec::new();
    for f in files {
        let mut bytes = std::fs::read(&f)?;
        if !bytes.ends_with(b"\n") {
            bytes.push(b'\n');
        }
        corpus.extend_from_slice(&bytes);
    }
    let source = if corpus.is_empty() {
        for i in 0..2000 {
            corpus.extend_from_slice(synthetic(i).as_bytes());
        }
        "synthetic rows"
    } else {
        real
    };
    let mut buf = Vec::with_capacity(target as usize + corpus.len());
    while (buf.len() as u64) < target {
        buf.extend_from_slice(&corpus);
    }
    let mb = buf.len() as f64 / (1u64 << 20) as f64;
    let t = Instant::now();
    let newlines = buf.iter().filter(|b| **b == b'\n').count();
    let floor_secs = t.elapsed().as_secs_f64();
    let input = ScanInput {
        own_recent_user_texts: &[],
        queued: &[],
        fallback_time_ms: 0,
    };
    let t = Instant::now();
    let (mut offset, mut turns, mut windows) = (0usize, 0u64, 0u64);
    while offset < buf.len() {
        let end = (offset + WINDOW_BYTES).min(buf.len());
        let Some((consumed, human)) = buf.get(offset..end).and_then(|w| scan(w, &input)) else {
            break;
        };
        offset += consumed;
        turns += u64::from(human);
        windows += 1;
    }
    let secs = t.elapsed().as_secs_f64();
    // The rate is the whole buffer's MB over the time: honest only if the scan read it all (it
    // stops early when a window holds no complete row, say a row over 1 MiB).
    if offset != buf.len() {
        bail!(
            "W7 {fixtures}: the scan stopped at byte {offset} of {} after {windows} windows; the \
             rate would count bytes it never read",
            buf.len()
        );
    }
    Ok(ScanRun {
        mb,
        source,
        windows,
        turns,
        newlines,
        secs,
        floor_secs,
    })
}

/// W7, Codex: the Codex rollout scan (`scan_codex_window`) over ~100 MB built from the real
/// rollouts vendored in `crates/aware-upstream/tests/fixtures/codex` (synthetic rows when
/// absent), in 1 MiB windows as the monitor reads them, next to a plain newline count over the
/// same bytes.
pub(crate) fn w7_codex(plan: &Plan) -> Result<(String, f64)> {
    use aware_upstream::codex::scan::scan_codex_window;
    let run = scan_run(
        plan,
        "codex",
        "the real rollouts",
        |i| {
            format!("{{\"type\":\"response_item\",\"payload\":{{\"type\":\"message\",\"role\":\"user\",\"content\":[{{\"type\":\"input_text\",\"text\":\"prompt {i}\"}}]}}}}\n{{\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"user_message\",\"message\":\"prompt {i}\"}}}}\n")
        },
        |w, input| scan_codex_window(w, input).map(|(n, out)| (n, out.human_turns)),
    )?;
    Ok((format!("W7 Codex {}", run.describe()), run.rate()))
}

/// W7, rows of any size (decision D23): the local check over one 40 MiB tool-result row and a typed
/// prompt (4 MiB with `--quick`), streamed through the slim-row tokenizer, next to a plain
/// newline count over the same file read in 64 KiB pieces. The check's peak memory is the rise
/// of the process's VmHWM (reset through `/proc/self/clear_refs` first) over its VmRSS.
pub(crate) fn w7_oversized(plan: &Plan) -> Result<(String, f64)> {
    use aware_upstream::claude::local::LocalClaude;
    use aware_upstream::provider::{Outcome, Probe, Provider};
    use std::io::{Read, Write};
    let thread = "0b9f0c2e-1d3a-4c5b-8e7f-0000000000b7";
    let root = plan.file("w7-claude");
    let project = root.join("p1");
    std::fs::create_dir_all(&project)?;
    let path = project.join(format!("{thread}.jsonl"));
    let size = (40u64 << 20) / plan.scale;
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
        f.write_all(br#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":""#)?;
        let chunk = "build log line\\n".repeat(4096);
        let mut written = 0u64;
        while written < size {
            f.write_all(chunk.as_bytes())?;
            written += chunk.len() as u64;
        }
        f.write_all(b"\"}]}}\n{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"typed after\"}}\n")?;
    }
    let path = std::fs::canonicalize(&path)?;
    let bytes = std::fs::metadata(&path)?.len();
    let mb = bytes as f64 / (1u64 << 20) as f64;
    let t = Instant::now();
    let mut file = std::fs::File::open(&path)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut newlines = 0usize;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        newlines += buf
            .get(..n)
            .unwrap_or_default()
            .iter()
            .filter(|b| **b == b'\n')
            .count();
    }
    let floor_secs = t.elapsed().as_secs_f64();
    let status = |field: &str| -> Option<u64> {
        std::fs::read_to_string("/proc/self/status")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
    };
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let rss_before = status("VmRSS:");
    let provider = LocalClaude::new(&root);
    let probe = Probe {
        session_key: "agent:main:claude:w7".into(),
        agent_id: "main".into(),
        host_id: "gateway:local".into(),
        thread_id: thread.into(),
        upstream_kind: "claude-cli".into(),
        upstream_ref: serde_json::json!({"filePath": path.to_string_lossy()}),
        marker: serde_json::json!({"offset": 0}),
        own_recent_user_texts: Vec::new(),
    };
    let t = Instant::now();
    let out = provider.check(&[probe]).map_err(|e| anyhow!("{e}"))?;
    let check_secs = t.elapsed().as_secs_f64();
    let peak = match (reset, rss_before, status("VmHWM:")) {
        (true, Some(before), Some(hwm)) => {
            format!("{:.1} MiB", hwm.saturating_sub(before) as f64 / 1024.0)
        }
        _ => "n/a (no /proc/self/clear_refs)".into(),
    };
    let turns = match out.as_slice() {
        [Outcome::Activity { human_turns, .. }] => *human_turns,
        other => bail!("the oversized check answered {other:?}"),
    };
    let _ = std::fs::remove_dir_all(&root);
    let mb_s = mb / check_secs.max(1e-9);
    Ok((
        format!(
            "W7 oversized row: local check over one {mb:.0} MB tool-result row + a prompt ({turns} human turn, {newlines} rows): {mb_s:.0} MB/s, peak RSS rise {peak} | floor newline count {:.0} MB/s | ratio {:.1}x",
            mb / floor_secs.max(1e-9),
            check_secs / floor_secs.max(1e-9)
        ),
        mb_s,
    ))
}
