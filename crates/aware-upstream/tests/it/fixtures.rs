//! S147 table test: the classifier and the window scanner over every real Claude Code transcript
//! vendored in `tests/fixtures/claude-code/` (sources and licences in `SOURCES.md` there; a
//! copy of the project's shared fixture set, so a clone tests on its own). The expected human
//! rows were derived by reading each file's rows against 04 §9 and ROW-TYPES.md, not from this
//! crate's output.

use std::path::PathBuf;

use aware_upstream::claude::classify::{classify, normalise, parse_rfc3339_ms, RowClass};
use aware_upstream::claude::scan::{scan_window, ScanInput, ScanOutput, WINDOW_BYTES};
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/claude-code/");

/// One fixture file and its human rows: (1-based line number, start of the user text).
struct Expected {
    file: &'static str,
    human: &'static [(usize, &'static str)],
}

const EXPECTED: &[Expected] = &[
    Expected {
        file: "claude-code-log--326189cf-5676-4237-8cde-1ce80aae4a9f.jsonl",
        // 4 summary rows, Caveat (isMeta), <bash-input>, <bash-stdout>, old system rows and
        // tool results (two is_error, neither with `the user said:`) are all rejected.
        human: &[
            (8, "please fix these"), // plain string prompt, no flags
        ],
    },
    Expected {
        file: "claude-code-log--ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl",
        // attachment / permission-mode / last-prompt / system rows, tool results, and the final
        // <local-command-caveat> (isMeta), <command-name>/exit, <local-command-stdout> rows.
        human: &[
            (5, "OK, we're going to make a little experiment here."), // plain string prompt
            (117, "Well, the subagents seem to be either stuck or done"), // plain string prompt
        ],
    },
    Expected {
        file: "claude-code-viewer--5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl",
        // line 1 starts with <command-message> (rule 5), line 2 is the isMeta expansion, the two
        // plain-string prompts (16, 26) are isSidechain subagent prompts, the rest tool results.
        human: &[],
    },
    Expected {
        file: "entire-cli--7e-72a8d8fdb8-0-full.jsonl",
        // the 4 enqueue rows and 4 user rows (34, 42, 50, 58) are <task-notification> text.
        human: &[
            (4, "can you run a view agents reviewing different aspects"), // plain prompt
            (64, "Given the logic is complex now I'd like to generate"),  // plain prompt
        ],
    },
    Expected {
        file: "entire-cli--82-060566ec4b-0-full.jsonl",
        human: &[
            (5, "update from our parent branch"),    // plain string prompt
            (27, "push"),                            // plain string prompt
            (37, "update again please (then push)"), // plain string prompt
            (56, "okay, let's have a look at our PR review feedback"), // plain string prompt
            (58, "we are #169"), // [tool_result, text]: steering text typed during the tool run
            (68, "yeah, address all of them"), // plain string prompt
            (117, "and make sure this is tested"), // [tool_result, text]: steering text
        ],
    },
    Expected {
        file: "entire-cli--8c-fa910f8ef9-4-full.jsonl",
        // lines 2, 4, 71, 74 start with `Implement the following plan:`, 3 and 72 with
        // `Operation stopped by hook:`, 66 is `[Request interrupted by user for tool use]`,
        // 65 is an is_error tool result without `the user said:`.
        human: &[
            (37, "where else is settings.Telemetry used ?"), // plain string prompt
            (55, "yes"),                                     // plain string prompt
            (96, "print the time that request takes to resolve"), // plain string prompt
        ],
    },
    Expected {
        file: "entire-cli--a6-e4c2a0fbd1-0-full.jsonl",
        // Caveat (isMeta), <command-name>/exit, <local-command-stdout>, the isCompactSummary +
        // isVisibleInTranscriptOnly summary at 32, tool results. The last line has no newline.
        human: &[
            (
                8,
                "for the change in cmd/entire/cli/hooks_claudecode_handlers.go",
            ), // plain prompt
            (
                26,
                "the issue is still that this would not surface to the user",
            ), // plain prompt
        ],
    },
    Expected {
        file: "spotter--tool_heavy.jsonl",
        // line 9 enqueues the bare slash command `/mcp` (rule 7), 10 is its remove; 18 and 39 are
        // `[Request interrupted by user]`; 20–22 are the caveat / <command-name> / stdout rows.
        human: &[
            (4, "start phoenix in background"), // plain string prompt
            (26, "scrolling back in xterm.js still does not work"), // plain string prompt
        ],
    },
];

fn read_fixture(file: &str) -> Vec<u8> {
    let path = PathBuf::from(FIXTURES).join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Every non-blank line as (1-based line number, parsed row); lines that do not parse are skipped.
fn rows(bytes: &[u8]) -> Vec<(usize, Value)> {
    bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .filter_map(|(index, line)| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let row = serde_json::from_slice::<Value>(line).ok()?;
            Some((index + 1, row))
        })
        .collect()
}

fn no_context() -> ScanInput<'static> {
    ScanInput {
        own_recent_user_texts: &[],
        queued: &[],
        fallback_time_ms: 0,
    }
}

#[test]
fn fixture_directory_is_fully_covered() {
    let mut on_disk: Vec<String> = std::fs::read_dir(FIXTURES)
        .expect("fixture directory")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".jsonl"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = EXPECTED.iter().map(|e| e.file.to_owned()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "every fixture file has a table entry");
}

#[test]
fn s147_fixture_table_classifier() {
    for expected in EXPECTED {
        let bytes = read_fixture(expected.file);
        let found: Vec<(usize, String)> = rows(&bytes)
            .into_iter()
            .filter_map(|(line, row)| match classify(&row) {
                RowClass::Human { user_text, .. } | RowClass::QueuedPrompt { user_text } => {
                    Some((line, user_text))
                }
                RowClass::QueueRemove | RowClass::NotHuman => None,
            })
            .collect();
        let lines: Vec<usize> = found.iter().map(|(line, _)| *line).collect();
        let want: Vec<usize> = expected.human.iter().map(|(line, _)| *line).collect();
        assert_eq!(lines, want, "{}: human rows", expected.file);
        for ((line, text), (_, start)) in found.iter().zip(expected.human) {
            assert!(
                text.starts_with(start),
                "{} line {line}: user text {text:?} should start with {start:?}",
                expected.file
            );
        }
    }
}

#[test]
fn s147_fixture_table_window_scan() {
    for expected in EXPECTED {
        let bytes = read_fixture(expected.file);
        assert!(bytes.len() <= WINDOW_BYTES, "each fixture fits one window");
        let (consumed, out) = scan_window(&bytes, &no_context()).expect("complete rows");
        let last_newline = bytes.iter().rposition(|&b| b == b'\n').unwrap_or(0);
        assert_eq!(consumed, last_newline + 1, "{}", expected.file);
        assert_eq!(
            out.human_turns as usize,
            expected.human.len(),
            "{}",
            expected.file
        );
        let all_rows = rows(&bytes);
        let latest = expected
            .human
            .iter()
            .filter_map(|(line, _)| {
                let (_, row) = all_rows.iter().find(|(l, _)| l == line)?;
                parse_rfc3339_ms(row.get("timestamp")?.as_str()?)
            })
            .max();
        assert_eq!(out.occurred_at, latest, "{}", expected.file);
        assert!(out.queued.is_empty(), "{}", expected.file);
    }
}

#[test]
fn fixture_without_trailing_newline_leaves_its_last_line() {
    let bytes = read_fixture("entire-cli--a6-e4c2a0fbd1-0-full.jsonl");
    assert_ne!(bytes.last(), Some(&b'\n'));
    let (consumed, _) = scan_window(&bytes, &no_context()).expect("complete rows");
    assert!(consumed < bytes.len());
    assert_eq!(
        bytes.iter().filter(|&&b| b == b'\n').count(),
        53,
        "54 lines, the last one unterminated"
    );
}

#[test]
fn fixture_prompts_sent_through_aware_are_echoes() {
    for expected in EXPECTED {
        let bytes = read_fixture(expected.file);
        let own: Vec<String> = rows(&bytes)
            .into_iter()
            .filter_map(|(_, row)| match classify(&row) {
                RowClass::Human { user_text, .. } => Some(normalise(&user_text)),
                _ => None,
            })
            .collect();
        let input = ScanInput {
            own_recent_user_texts: &own,
            queued: &[],
            fallback_time_ms: 0,
        };
        let (_, out) = scan_window(&bytes, &input).expect("complete rows");
        assert_eq!(out, ScanOutput::default(), "{}", expected.file);
    }
}

/// The file grows in uneven appends and a tick scans from the marker each time: the total is the
/// same as one scan, and the marker ends at the last newline.
#[test]
fn fixture_scanned_over_many_ticks_counts_the_same() {
    for expected in EXPECTED {
        let bytes = read_fixture(expected.file);
        let mut queued: Vec<String> = Vec::new();
        let mut marker = 0usize;
        let mut turns = 0usize;
        let mut size = 0usize;
        let mut step = 7_919usize;
        while size < bytes.len() {
            size = (size + step).min(bytes.len());
            step = step * 3 % 65_537 + 1;
            let window = bytes
                .get(marker..size.min(marker + WINDOW_BYTES))
                .unwrap_or_default();
            let input = ScanInput {
                own_recent_user_texts: &[],
                queued: &queued,
                fallback_time_ms: 0,
            };
            if let Some((consumed, out)) = scan_window(window, &input) {
                marker += consumed;
                turns += out.human_turns as usize;
                queued = out.queued;
            }
        }
        let last_newline = bytes.iter().rposition(|&b| b == b'\n').unwrap_or(0);
        assert_eq!(marker, last_newline + 1, "{}", expected.file);
        assert_eq!(turns, expected.human.len(), "{}", expected.file);
    }
}

/// Rows of any size (decision D23): the streaming slim row of every fixture line gets the same
/// verdict (class, normalised text, time) as the parsed line, so an oversized row is judged as
/// it would be if it fitted the window.
#[test]
fn fixture_rows_slimmed_classify_the_same() {
    let verdict = |row: &Value| match classify(row) {
        RowClass::Human {
            user_text,
            occurred_at,
        } => (1, normalise(&user_text), occurred_at),
        RowClass::QueuedPrompt { user_text } => (2, normalise(&user_text), None),
        RowClass::QueueRemove => (3, String::new(), None),
        RowClass::NotHuman => (0, String::new(), None),
    };
    let mut lines = 0;
    for entry in std::fs::read_dir(FIXTURES).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let full = std::str::from_utf8(line)
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(t).ok());
            let slim = aware_upstream::bigrow::slim_row(line).unwrap().row;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            assert_eq!(
                full.is_some(),
                slim.is_some(),
                "{} line {}",
                path.display(),
                i + 1
            );
            if let (Some(full), Some(slim)) = (full, slim) {
                assert_eq!(
                    verdict(&full),
                    verdict(&slim),
                    "{} line {}",
                    path.display(),
                    i + 1
                );
            }
            lines += 1;
        }
    }
    assert!(lines > 500, "{lines} lines checked");
}
