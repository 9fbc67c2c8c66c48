//! The gateway side's pure check of a paired-node thread (04 §10, decision D24 paging), over the
//! items a [`super::NodeClient`] fetched; and the adoption baseline and history from items.

use super::items::item_uuid;
use super::protocol::{CodexItem, CodexItemBody, ItemsPage, NodeError, ITEMS_LIMIT};
use crate::claude::classify::{classify, normalise, RowClass};
use crate::claude::scan::{node_item_to_row, scan_rows, ScanInput, Scanner, QUEUED_MEMORY_MAX};
use crate::codex::classify::classify_codex;
use crate::provider::{Outcome, Probe};
use aware_engine::{ImportTurn, Role};
use serde_json::{json, Value};
use std::collections::VecDeque;

/// Text imported at adoption from a node: the newest turns up to this many bytes (04 §3 step 5).
const HISTORY_BYTES: usize = 512 * 1024;
const HISTORY_MESSAGES: usize = 200;

/// What the check needs of an item, whatever the catalog.
pub(crate) trait NodeItem {
    /// The item's id, the marker it leaves; an item without one stops the walk.
    fn uuid(&self) -> Option<&str>;
    /// Classifies the item into the scan (human, queued, echo).
    fn feed(&self, scanner: &mut Scanner);
    /// The check when the node does not know the marker (`found: false`), over the newest
    /// items (newest first).
    fn unknown_marker(probe: &Probe, newest: &[Self], now_ms: i64) -> Option<Outcome>
    where
        Self: Sized;
    /// Bounded history from items (newest first), oldest first.
    fn history(items: &[Self]) -> Vec<ImportTurn>
    where
        Self: Sized;
}

/// A Claude item (04 §2.2).
impl NodeItem for Value {
    fn uuid(&self) -> Option<&str> {
        item_uuid(self)
    }

    fn feed(&self, scanner: &mut Scanner) {
        if let Some(row) = node_item_to_row(self) {
            scanner.feed(&row);
        }
    }

    /// The v1 check of 04 §10 over the 50 newest items.
    fn unknown_marker(probe: &Probe, newest: &[Self], now_ms: i64) -> Option<Outcome> {
        check_items(probe, newest, now_ms)
    }

    fn history(items: &[Self]) -> Vec<ImportTurn> {
        history_from_items(items)
    }
}

impl NodeItem for CodexItem {
    fn uuid(&self) -> Option<&str> {
        Some(self.uuid.as_str()).filter(|u| !u.is_empty())
    }

    fn feed(&self, scanner: &mut Scanner) {
        if let CodexItemBody::UserMessage { row } = &self.body {
            scanner.feed_codex(row);
        }
    }

    /// The rollout was rewritten under the marker: as the local Codex check does when a rollout
    /// shrinks, the marker moves to the newest item and nothing is counted (a rewritten rollout
    /// is not new typing).
    fn unknown_marker(probe: &Probe, newest: &[Self], _now_ms: i64) -> Option<Outcome> {
        let uuid = match newest.first() {
            None => Value::Null,
            Some(item) => Value::from(item.uuid()?),
        };
        Some(Outcome::rebase(&probe.session_key, json!({ "uuid": uuid })))
    }

    fn history(items: &[Self]) -> Vec<ImportTurn> {
        let turns = items
            .iter()
            .rev()
            .filter_map(|item| match &item.body {
                CodexItemBody::UserMessage { row } => match classify_codex(row) {
                    RowClass::Human { user_text, .. } => Some(ImportTurn {
                        role: Role::User,
                        text: user_text,
                    }),
                    _ => None,
                },
                CodexItemBody::AgentMessage { text } => Some(ImportTurn {
                    role: Role::Assistant,
                    text: text.trim().to_string(),
                })
                .filter(|t| !t.text.is_empty()),
                CodexItemBody::Other => None,
            })
            .collect();
        newest_within_bounds(turns)
    }
}

/// Step 1 of 04 §10: the probe is for this node (`ref.nodeId` a string equal to `node_id`, and
/// `hostId = "node:" + ref.nodeId`) and its marker's `uuid` is a string or null.
pub fn probe_applies(probe: &Probe, node_id: &str) -> bool {
    let Some(ref_node) = probe.upstream_ref.get("nodeId").and_then(Value::as_str) else {
        return false;
    };
    ref_node == node_id
        && probe.host_id == format!("node:{ref_node}")
        && matches!(
            probe.marker.get("uuid"),
            Some(Value::Null | Value::String(_))
        )
}

/// Steps 3–6 of 04 §10 over the fetched items (newest first): `None` is "no outcome".
///
/// Only the first [`ITEMS_LIMIT`] items are looked at. The items before the marker's are new
/// (all of them when the marker is null or not among them); the newest new item must have a
/// uuid. New `userMessage` and `queueOperation` items are classified oldest first with the
/// marker's `queued` memory and the probe's own recent texts; `now_ms` dates a counted item
/// without a timestamp.
pub fn check_items(probe: &Probe, items: &[Value], now_ms: i64) -> Option<Outcome> {
    let marker = match probe.marker.get("uuid")? {
        Value::Null => None,
        Value::String(s) => Some(s.as_str()),
        _ => return None,
    };
    let queued: Vec<String> = probe
        .marker
        .get("queued")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let items = items
        .get(..items.len().min(ITEMS_LIMIT))
        .unwrap_or_default();
    let marker_index = marker.and_then(|m| items.iter().position(|i| item_uuid(i) == Some(m)));
    let new_items = match marker_index {
        Some(ix) => items.get(..ix).unwrap_or_default(),
        None => items,
    };
    let newest = item_uuid(new_items.first()?)?.to_string();
    let out = scan_rows(
        new_items.iter().rev().filter_map(node_item_to_row),
        &ScanInput {
            own_recent_user_texts: &probe.own_recent_user_texts,
            queued: &queued,
            fallback_time_ms: now_ms,
        },
    );
    let mut next_marker = json!({ "uuid": newest });
    if !out.queued.is_empty() {
        next_marker["queued"] = json!(out.queued);
    }
    let counted = out.human_turns > 0;
    Some(Outcome::Activity {
        session_key: probe.session_key.clone(),
        human_turns: out.human_turns,
        next_marker,
        occurred_at: out.occurred_at.filter(|_| counted),
        dedupe_id: counted.then_some(newest),
        rebased: false,
    })
}

/// What the paged check of one probe came to.
#[derive(Debug, PartialEq)]
pub enum Paged {
    /// An outcome (activity), or none: nothing new, or the first page failed inconclusively.
    Outcome(Option<Outcome>),
    /// The node said, definitively, that the thread does not exist.
    Missing,
    /// The node does not know the marker (the transcript was rewritten) or does not page (an
    /// older node): the v1 check over the 50 newest items decides.
    Fallback,
    /// The node could not be reached at all; the rest of the batch would fail the same way.
    Unreachable,
}

/// The paged-node check (decision D24, superseding 04 §10 steps 2–4): pages of the items after the
/// marker, oldest first, are classified in order until the node says there are no more or
/// `until` passes; the marker moves to the newest item examined, so a walk cut short carries
/// over to the next tick. `fetch(after)` fetches one page (`None`: from the start).
pub(crate) fn check_paged<I: NodeItem>(
    probe: &Probe,
    now_ms: i64,
    until: std::time::Instant,
    mut fetch: impl FnMut(Option<&str>) -> Result<ItemsPage<I>, NodeError>,
) -> Paged {
    let marker = match probe.marker.get("uuid") {
        Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        _ => return Paged::Outcome(None),
    };
    let queued: Vec<String> = probe
        .marker
        .get("queued")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let input = ScanInput {
        own_recent_user_texts: &probe.own_recent_user_texts,
        queued: &queued,
        fallback_time_ms: now_ms,
    };
    let mut scanner = Scanner::new(&input);
    let mut after = marker;
    let mut newest: Option<String> = None;
    let mut first = true;
    'pages: loop {
        let page = match fetch(after.as_deref()) {
            Ok(page) => page,
            Err(e) if first => {
                return match e {
                    NodeError::ThreadNotFound => Paged::Missing,
                    NodeError::Refused(_) => Paged::Fallback,
                    NodeError::Unreachable(_) => Paged::Unreachable,
                    NodeError::Other(_) => Paged::Outcome(None),
                }
            }
            // A later page failed: keep what the earlier pages gave.
            Err(_) => break,
        };
        if !page.found {
            if first {
                return Paged::Fallback;
            }
            break;
        }
        first = false;
        if page.items.is_empty() {
            break;
        }
        for item in &page.items {
            // The marker can never move past an item without a uuid: stop before it.
            let Some(uuid) = item.uuid() else {
                break 'pages;
            };
            item.feed(&mut scanner);
            newest = Some(uuid.to_string());
        }
        after.clone_from(&newest);
        if !page.more || std::time::Instant::now() >= until {
            break;
        }
    }
    let Some(newest) = newest else {
        return Paged::Outcome(None);
    };
    let out = scanner.finish();
    let mut next_marker = json!({ "uuid": newest });
    if !out.queued.is_empty() {
        next_marker["queued"] = json!(out.queued);
    }
    let counted = out.human_turns > 0;
    Paged::Outcome(Some(Outcome::Activity {
        session_key: probe.session_key.clone(),
        human_turns: out.human_turns,
        next_marker,
        occurred_at: out.occurred_at.filter(|_| counted),
        dedupe_id: counted.then_some(newest),
        rebased: false,
    }))
}

/// The link baseline of a node thread (04 §3 step 6): `{uuid: null}` for an empty thread, the
/// newest item's uuid, or `None` (decline) when the newest item has none.
pub(crate) fn baseline<I: NodeItem>(items: &[I]) -> Option<Value> {
    match items.first() {
        None => Some(json!({ "uuid": null })),
        Some(item) => item.uuid().map(|u| json!({ "uuid": u })),
    }
}

/// Bounded history from node items (newest first), oldest first: human prompts found by the
/// classifier (queued prompts and their de-duplication included) and assistant text.
pub fn history_from_items(items: &[Value]) -> Vec<ImportTurn> {
    let mut turns = Vec::new();
    let mut queued: VecDeque<String> = VecDeque::new();
    for item in items.iter().rev() {
        if item.get("type").and_then(Value::as_str) == Some("agentMessage") {
            let text = item
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or("")
                .trim();
            if !text.is_empty() {
                turns.push(ImportTurn {
                    role: Role::Assistant,
                    text: text.to_string(),
                });
            }
            continue;
        }
        let Some(row) = node_item_to_row(item) else {
            continue;
        };
        match classify(&row) {
            RowClass::QueuedPrompt { user_text } => {
                queued.push_back(normalise(&user_text));
                if queued.len() > QUEUED_MEMORY_MAX {
                    queued.pop_front();
                }
                turns.push(ImportTurn {
                    role: Role::User,
                    text: user_text,
                });
            }
            RowClass::QueueRemove => {
                queued.pop_front();
            }
            RowClass::Human { user_text, .. } => {
                let n = normalise(&user_text);
                if let Some(i) = queued.iter().position(|q| *q == n) {
                    queued.remove(i);
                } else {
                    turns.push(ImportTurn {
                        role: Role::User,
                        text: user_text,
                    });
                }
            }
            RowClass::NotHuman => {}
        }
    }
    newest_within_bounds(turns)
}

/// The newest turns within the history bounds, oldest first.
fn newest_within_bounds(mut turns: Vec<ImportTurn>) -> Vec<ImportTurn> {
    let mut bytes = 0usize;
    let mut keep = 0usize;
    for t in turns.iter().rev() {
        if keep >= HISTORY_MESSAGES || bytes + t.text.len() > HISTORY_BYTES {
            break;
        }
        bytes += t.text.len();
        keep += 1;
    }
    let skip = turns.len() - keep;
    turns.split_off(skip)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::time::Duration;

    /// 2026-01-01T00:00:00.000Z
    const T0: i64 = 1_767_225_600_000;
    const NOW: i64 = T0 + 999_000;
    pub(crate) const THREAD: &str = "0b9f0c2e-1d3a-4c5b-8e7f-112233445566";

    pub(crate) fn probe(marker: Value) -> Probe {
        Probe {
            session_key: "agent:main:claude:abc".into(),
            agent_id: "main".into(),
            host_id: "node:laptop".into(),
            thread_id: THREAD.into(),
            upstream_kind: "claude-cli".into(),
            upstream_ref: json!({"nodeId": "laptop", "threadId": THREAD}),
            marker,
            own_recent_user_texts: Vec::new(),
        }
    }

    fn um(uuid: &str, text: &str, ts: Option<&str>) -> Value {
        let mut v = json!({"uuid": uuid, "type": "userMessage", "content": text});
        if let Some(t) = ts {
            v["timestamp"] = json!(t);
        }
        v
    }

    fn activity(o: Option<Outcome>) -> (u32, Value, Option<i64>, Option<String>) {
        match o {
            Some(Outcome::Activity {
                human_turns,
                next_marker,
                occurred_at,
                dedupe_id,
                ..
            }) => (human_turns, next_marker, occurred_at, dedupe_id),
            other => panic!("expected activity, got {other:?}"),
        }
    }

    #[test]
    fn s145_window_after_the_marker() {
        let items = vec![
            json!({"uuid": "item-3", "type": "agentMessage", "text": "ok"}),
            um("item-2", "native prompt", Some("2026-01-01T00:00:05.000Z")),
            um("item-1", "old prompt", Some("2026-01-01T00:00:01.000Z")),
        ];
        let (turns, marker, at, id) =
            activity(check_items(&probe(json!({"uuid": "item-1"})), &items, NOW));
        assert_eq!(turns, 1);
        assert_eq!(marker, json!({"uuid": "item-3"}));
        assert_eq!(at, Some(T0 + 5_000));
        assert_eq!(id.as_deref(), Some("item-3"));

        // Nothing new after the marker: no outcome.
        assert_eq!(
            check_items(&probe(json!({"uuid": "item-3"})), &items, NOW),
            None
        );
        // A null marker (empty at adoption): everything is new.
        let (turns, marker, _, _) =
            activity(check_items(&probe(json!({"uuid": null})), &items, NOW));
        assert_eq!((turns, marker), (2, json!({"uuid": "item-3"})));
        // A marker not among the items: everything is new.
        let (turns, _, _, _) = activity(check_items(&probe(json!({"uuid": "gone"})), &items, NOW));
        assert_eq!(turns, 2);
        // Assistant output only: the marker moves with no turns.
        let (turns, marker, at, id) =
            activity(check_items(&probe(json!({"uuid": "item-2"})), &items, NOW));
        assert_eq!(
            (turns, marker, at, id),
            (0, json!({"uuid": "item-3"}), None, None)
        );
    }

    #[test]
    fn s145_flagged_user_rows_are_not_counted() {
        let items = vec![
            json!({"uuid": "n4", "type": "userMessage", "content": "notified",
                   "originKind": "task-notification"}),
            json!({"uuid": "n3", "type": "userMessage", "content": "meta", "flags": {"meta": true}}),
            json!({"uuid": "n2", "type": "userMessage", "content": "side", "flags": {"sidechain": true}}),
            json!({"uuid": "n1", "type": "userMessage", "content": [{"type": "tool_result", "content": "x"}]}),
            um("item-1", "old", None),
        ];
        let (turns, marker, _, _) =
            activity(check_items(&probe(json!({"uuid": "item-1"})), &items, NOW));
        assert_eq!((turns, marker), (0, json!({"uuid": "n4"})));
    }

    #[test]
    fn s145_only_the_50_newest_are_classified() {
        // 60 new rows after the marker; the caller asked for 50, but even a longer list is cut.
        let mut items: Vec<Value> = (1..=60)
            .rev()
            .map(|i| um(&format!("new-{i}"), &format!("prompt {i}"), None))
            .collect();
        items.push(um("item-1", "old", None));
        let (turns, marker, at, id) =
            activity(check_items(&probe(json!({"uuid": "item-1"})), &items, NOW));
        assert_eq!(turns, 50);
        assert_eq!(marker, json!({"uuid": "new-60"}));
        assert_eq!(at, Some(NOW), "untimed items are dated now");
        assert_eq!(id.as_deref(), Some("new-60"));
    }

    #[test]
    fn newest_without_uuid_gives_no_outcome() {
        let items = vec![
            json!({"type": "userMessage", "content": "no id"}),
            um("item-1", "old", None),
        ];
        assert_eq!(
            check_items(&probe(json!({"uuid": "item-1"})), &items, NOW),
            None
        );
        assert_eq!(check_items(&probe(json!({"uuid": null})), &[], NOW), None);
    }

    #[test]
    fn echoes_and_queued_memory() {
        let mut p = probe(json!({"uuid": "item-1"}));
        p.own_recent_user_texts = vec!["sent by aware".into()];
        let items = vec![
            um(
                "u-3",
                "typed  while\nbusy",
                Some("2026-01-01T00:00:09.000Z"),
            ),
            json!({"uuid": "row:q", "type": "queueOperation", "operation": "enqueue",
                   "content": "typed while busy"}),
            um("u-2", "sent by aware", Some("2026-01-01T00:00:07.000Z")),
            um("item-1", "old", None),
        ];
        // The queued prompt counts (dated now), its later user row does not, the echo does not.
        let (turns, marker, at, _) = activity(check_items(&p, &items, NOW));
        assert_eq!((turns, at), (1, Some(NOW)));
        assert_eq!(marker, json!({"uuid": "u-3"}));

        // Queued memory carried in the marker across ticks.
        let first = &items[1..];
        let (turns, marker, _, _) = activity(check_items(&p, first, NOW));
        assert_eq!(turns, 1);
        assert_eq!(
            marker,
            json!({"uuid": "row:q", "queued": ["typed while busy"]})
        );
        let p2 = probe(marker);
        let (turns, marker, _, _) = activity(check_items(&p2, &items, NOW));
        assert_eq!((turns, marker), (0, json!({"uuid": "u-3"})));
    }

    #[test]
    fn probe_applicability() {
        assert!(probe_applies(&probe(json!({"uuid": null})), "laptop"));
        assert!(probe_applies(&probe(json!({"uuid": "x"})), "laptop"));
        assert!(!probe_applies(&probe(json!({"uuid": "x"})), "other"));
        assert!(!probe_applies(&probe(json!({"offset": 5})), "laptop"));
        assert!(!probe_applies(&probe(json!({"uuid": 5})), "laptop"));
        let mut p = probe(json!({"uuid": null}));
        p.host_id = "gateway:local".into();
        assert!(!probe_applies(&p, "laptop"));
        let mut p = probe(json!({"uuid": null}));
        p.upstream_ref = json!({"filePath": "/x"});
        assert!(!probe_applies(&p, "laptop"));
    }

    #[test]
    fn baseline_and_history() {
        assert_eq!(baseline::<Value>(&[]), Some(json!({"uuid": null})));
        assert_eq!(baseline(&[um("u", "x", None)]), Some(json!({"uuid": "u"})));
        assert_eq!(
            baseline(&[json!({"type": "userMessage", "content": "x"})]),
            None
        );
        let items = vec![
            json!({"uuid": "a2", "type": "agentMessage", "text": " done "}),
            json!({"uuid": "t", "type": "toolCall"}),
            um("u2", "typed while busy", None),
            json!({"uuid": "row:q", "type": "queueOperation", "operation": "enqueue",
                   "content": "typed while busy"}),
            json!({"uuid": "m", "type": "userMessage", "content": "meta", "flags": {"meta": true}}),
            um("u1", "hello", None),
        ];
        let h = history_from_items(&items);
        let got: Vec<(Role, &str)> = h.iter().map(|t| (t.role, t.text.as_str())).collect();
        assert_eq!(
            got,
            [
                (Role::User, "hello"),
                (Role::User, "typed while busy"),
                (Role::Assistant, "done")
            ]
        );
    }

    fn page(items: &[Value], more: bool) -> ItemsPage {
        ItemsPage {
            items: items.to_vec(),
            more,
            found: true,
        }
    }

    #[test]
    fn paged_check_walks_pages_and_carries_over_at_the_deadline() {
        let p = probe(json!({"uuid": "item-1"}));
        let pages = [
            vec![um("a", "one", None), um("b", "two", None)],
            vec![um("c", "three", None)],
        ];
        let later = std::time::Instant::now() + Duration::from_secs(60);
        let fetch = |after: Option<&str>| -> Result<ItemsPage, NodeError> {
            Ok(match after {
                Some("item-1") => page(&pages[0], true),
                Some("b") => page(&pages[1], false),
                _ => page(&[], false),
            })
        };
        let Paged::Outcome(o) = check_paged(&p, NOW, later, fetch) else {
            panic!("outcome expected")
        };
        let (turns, marker, _, id) = activity(o);
        assert_eq!(
            (turns, marker, id.as_deref()),
            (3, json!({"uuid": "c"}), Some("c"))
        );

        // Past the deadline after the first page: its items count, the rest waits.
        let Paged::Outcome(o) = check_paged(&p, NOW, std::time::Instant::now(), fetch) else {
            panic!("outcome expected")
        };
        let (turns, marker, _, _) = activity(o);
        assert_eq!((turns, marker), (2, json!({"uuid": "b"})));
        let Paged::Outcome(o) = check_paged(&probe(json!({"uuid": "b"})), NOW, later, fetch) else {
            panic!("outcome expected")
        };
        assert_eq!(activity(o).0, 1);

        // Nothing new: no outcome. Errors on the first page.
        assert_eq!(
            check_paged(&probe(json!({"uuid": "c"})), NOW, later, fetch),
            Paged::Outcome(None)
        );
        let fail = |e: fn() -> NodeError| {
            check_paged(&p, NOW, later, move |_| -> Result<ItemsPage, NodeError> {
                Err(e())
            })
        };
        assert_eq!(fail(|| NodeError::ThreadNotFound), Paged::Missing);
        assert_eq!(fail(|| NodeError::Refused("old".into())), Paged::Fallback);
        assert_eq!(
            fail(|| NodeError::Unreachable("x".into())),
            Paged::Unreachable
        );
        assert_eq!(
            fail(|| NodeError::Other("timeout".into())),
            Paged::Outcome(None)
        );
        let unknown = |_: Option<&str>| -> Result<ItemsPage, NodeError> {
            Ok(ItemsPage {
                items: vec![],
                more: false,
                found: false,
            })
        };
        assert_eq!(check_paged(&p, NOW, later, unknown), Paged::Fallback);
    }

    fn codex(uuid: &str, body: CodexItemBody) -> CodexItem {
        CodexItem {
            uuid: uuid.into(),
            body,
        }
    }

    fn codex_prompt(uuid: &str, text: &str) -> CodexItem {
        codex(
            uuid,
            CodexItemBody::UserMessage {
                row: json!({"timestamp": "2026-01-01T00:00:05.000Z", "type": "event_msg",
                            "payload": {"type": "user_message", "message": text}}),
            },
        )
    }

    #[test]
    fn codex_items_are_classified_by_the_codex_rules_with_echoes() {
        let mut p = probe(json!({"uuid": "row:old"}));
        p.upstream_kind = "codex-cli".into();
        p.own_recent_user_texts = vec!["sent by aware".into()];
        let items = vec![
            codex_prompt("row:1", "typed"),
            codex_prompt("row:2", "<environment_context>x</environment_context>"),
            codex_prompt("row:3", "sent by aware"),
            codex(
                "row:4",
                CodexItemBody::AgentMessage {
                    text: "done".into(),
                },
            ),
            codex("row:5", CodexItemBody::Other),
        ];
        let later = std::time::Instant::now() + Duration::from_secs(60);
        let fetch = |after: Option<&str>| -> Result<ItemsPage<CodexItem>, NodeError> {
            Ok(match after {
                Some("row:old") => ItemsPage {
                    items: items.clone(),
                    more: false,
                    found: true,
                },
                _ => ItemsPage {
                    items: vec![],
                    more: false,
                    found: true,
                },
            })
        };
        let Paged::Outcome(o) = check_paged(&p, NOW, later, fetch) else {
            panic!("outcome expected")
        };
        let (turns, marker, at, id) = activity(o);
        assert_eq!(
            (turns, marker, at, id.as_deref()),
            (1, json!({"uuid": "row:5"}), Some(T0 + 5_000), Some("row:5"))
        );

        // History: the typed prompts and the answer, oldest first (items come newest first).
        let newest_first: Vec<CodexItem> = items.iter().rev().cloned().collect();
        let h = CodexItem::history(&newest_first);
        let got: Vec<(Role, &str)> = h.iter().map(|t| (t.role, t.text.as_str())).collect();
        assert_eq!(
            got,
            [
                (Role::User, "typed"),
                (Role::User, "sent by aware"),
                (Role::Assistant, "done")
            ]
        );
        assert_eq!(baseline(&newest_first), Some(json!({"uuid": "row:5"})));

        // A rewritten rollout (the marker is gone): rebased to the newest item, nothing counted.
        match CodexItem::unknown_marker(&p, &newest_first, NOW) {
            Some(Outcome::Activity {
                human_turns: 0,
                next_marker,
                rebased: true,
                dedupe_id: None,
                ..
            }) => assert_eq!(next_marker, json!({"uuid": "row:5"})),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            CodexItem::unknown_marker(&p, &[], NOW),
            Some(Outcome::Activity { next_marker, .. }) if next_marker == json!({"uuid": null})
        ));
    }
}
