//! Rows of any size (decision D23): a 40 MiB row is classified by the local check with bounded
//! memory. A counting allocator (this test binary only) measures the heap peak of the check
//! alone; the figure is printed (`cargo test -p aware-upstream --test oversized_memory --
//! --nocapture`) and must stay under 8 MiB, whatever the row's size.
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// `unsafe` only in the counting allocator below (a GlobalAlloc must be an `unsafe impl`; each method only forwards to `System`).
#![allow(unsafe_code)]

use aware_upstream::claude::local::LocalClaude;
use aware_upstream::provider::{Outcome, Probe, Provider};
use serde_json::json;
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to the system allocator with the caller's arguments unchanged,
// so the allocator contract is the system's; the counters are plain atomics and never touch the
// memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let grow = new_size - layout.size();
                let now = CURRENT.fetch_add(grow, Ordering::Relaxed) + grow;
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                CURRENT.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const MIB: usize = 1 << 20;
const THREAD: &str = "0b9f0c2e-1d3a-4c5b-8e7f-112233445566";

/// Writes `head`, `filler` repeated until the row is about `size` bytes, then `tail` and a
/// newline, without holding the row in memory.
fn write_big_row(f: &mut std::fs::File, head: &str, filler: &str, size: usize, tail: &str) {
    f.write_all(head.as_bytes()).unwrap();
    let chunk = filler.repeat(64 * 1024 / filler.len());
    let mut written = head.len();
    while written < size {
        f.write_all(chunk.as_bytes()).unwrap();
        written += chunk.len();
    }
    f.write_all(tail.as_bytes()).unwrap();
    f.write_all(b"\n").unwrap();
}

fn probe(path: &std::path::Path) -> Probe {
    Probe {
        session_key: "agent:main:claude:x".into(),
        agent_id: "main".into(),
        host_id: "gateway:local".into(),
        thread_id: THREAD.into(),
        upstream_kind: "claude-cli".into(),
        upstream_ref: json!({"filePath": path.to_string_lossy()}),
        marker: json!({"offset": 0}),
        own_recent_user_texts: Vec::new(),
    }
}

/// Runs the check and returns (human turns, next offset, heap peak during the check).
fn check(root: &std::path::Path, path: &std::path::Path) -> (u32, u64, usize) {
    let provider = LocalClaude::new(root);
    let p = probe(&std::fs::canonicalize(path).unwrap());
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = provider.check(&[p]).unwrap();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    match out.as_slice() {
        [Outcome::Activity {
            human_turns,
            next_marker,
            ..
        }] => (*human_turns, next_marker["offset"].as_u64().unwrap(), peak),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn forty_mib_rows_are_classified_in_bounded_memory() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("p1");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{THREAD}.jsonl"));

    // A 40 MiB tool result, then a typed prompt.
    let mut f = std::fs::File::create(&path).unwrap();
    write_big_row(
        &mut f,
        r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":""#,
        "log line\\n",
        40 * MIB,
        r#""}]},"timestamp":"2026-01-01T00:00:09.000Z"}"#,
    );
    let prompt = json!({"type":"user","message":{"role":"user","content":"typed after"}});
    writeln!(f, "{prompt}").unwrap();
    drop(f);
    let size = std::fs::metadata(&path).unwrap().len();
    let (turns, next, peak) = check(root.path(), &path);
    println!("40 MiB tool-result row + prompt: heap peak of the check {peak} bytes");
    assert_eq!((turns, next), (1, size));
    assert!(peak < 8 * MIB, "peak {peak}");

    // A 40 MiB pasted prompt.
    let mut f = std::fs::File::create(&path).unwrap();
    write_big_row(
        &mut f,
        r#"{"type":"user","message":{"role":"user","content":"pasted:"#,
        " some pasted text",
        40 * MIB,
        r#""},"timestamp":"2026-01-01T00:00:09.000Z"}"#,
    );
    drop(f);
    let size = std::fs::metadata(&path).unwrap().len();
    let (turns, next, peak) = check(root.path(), &path);
    println!("40 MiB pasted prompt: heap peak of the check {peak} bytes");
    assert_eq!((turns, next), (1, size));
    assert!(peak < 8 * MIB, "peak {peak}");

    // Codex (decision D23): a 40 MiB pasted screenshot (an inline data URL in a response item),
    // then a typed prompt event; and a 40 MiB typed prompt event. Run here, after the Claude
    // rows, so the one heap counter measures one check at a time.
    let home = root.path().join("codex");
    let day = home.join("sessions/2026/01/01");
    std::fs::create_dir_all(&day).unwrap();
    let path = day.join(format!("rollout-2026-01-01T00-00-00-{THREAD}.jsonl"));
    let codex_check = |path: &std::path::Path| {
        let provider = aware_upstream::codex::provider::LocalCodex::new(&home);
        let mut p = probe(&std::fs::canonicalize(path).unwrap());
        p.upstream_kind = "codex-cli".into();
        let base = CURRENT.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let out = provider.check(&[p]).unwrap();
        let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
        match out.as_slice() {
            [Outcome::Activity {
                human_turns,
                next_marker,
                ..
            }] => (*human_turns, next_marker["offset"].as_u64().unwrap(), peak),
            other => panic!("unexpected {other:?}"),
        }
    };
    let mut f = std::fs::File::create(&path).unwrap();
    write_big_row(
        &mut f,
        r#"{"timestamp":"2026-01-01T00:00:01.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,"#,
        "iVBORw0KGgoAAAANSUhEUgAA",
        40 * MIB,
        r#""}]}}"#,
    );
    let typed = json!({"timestamp":"2026-01-01T00:00:02.000Z","type":"event_msg","payload":{"type":"user_message","message":"typed after","images":[]}});
    writeln!(f, "{typed}").unwrap();
    drop(f);
    let size = std::fs::metadata(&path).unwrap().len();
    let (turns, next, peak) = codex_check(&path);
    println!("Codex 40 MiB image response item + prompt: heap peak of the check {peak} bytes");
    assert_eq!((turns, next), (1, size));
    assert!(peak < 8 * MIB, "peak {peak}");

    let mut f = std::fs::File::create(&path).unwrap();
    write_big_row(
        &mut f,
        r#"{"timestamp":"2026-01-01T00:00:01.000Z","type":"event_msg","payload":{"type":"user_message","message":"pasted:"#,
        " some pasted text",
        40 * MIB,
        r#"","images":[]}}"#,
    );
    drop(f);
    let size = std::fs::metadata(&path).unwrap().len();
    let (turns, next, peak) = codex_check(&path);
    println!("Codex 40 MiB typed prompt: heap peak of the check {peak} bytes");
    assert_eq!((turns, next), (1, size));
    assert!(peak < 8 * MIB, "peak {peak}");
}
