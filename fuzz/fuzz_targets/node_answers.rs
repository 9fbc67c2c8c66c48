//! What the gateway makes of a paired node's HTTP answers (crates/aware-upstream/src/node/):
//! the answer bytes decoded as `NodeClient` decodes them (JSON, then the typed answer; either
//! failing is a malformed answer, `NodeError::Other`), then the pure steps the client runs on
//! them: the catalog page, the adoption baseline and history, the v1 check over the newest items
//! (`check_items`, or the Codex rebase), and the paged check (`check_paged`) over a sequence of
//! pages. No HTTP and no engine: every input is independent.
//!
//! Input: byte 0 picks the catalog (bit 0: Claude or Codex) and the probe's marker (bits 1–2:
//! `uuid` null, `"u1"`, `"u1"` with a `queued` memory, or a number, which no check accepts);
//! the rest is cut at every 0xFF byte (never part of UTF-8 JSON) into answers: the first is a
//! thread-list answer, the second a v1 items answer, each later one a page of the paged check,
//! whose first byte is its status (0–3: 200 with the rest as body, 4: 404 `thread_not_found`,
//! 5: 400, 6: unreachable, 7: another failure).
//!
//! Invariants:
//! - a thread-list page that decodes re-encodes to JSON that decodes to the same page;
//! - the baseline is `{uuid: null}` for no items, the newest item's uuid, or none when it has
//!   none; the history is oldest first, within 200 turns and 512 KiB, with no blank assistant
//!   text;
//! - the v1 check gives an outcome only for a marker `uuid` that is null or a string and a
//!   newest new item with a uuid; its marker moves to that item; it counts at most the new items
//!   (the newest 50), reports a time and a dedupe id (that uuid) exactly when it counts, keeps
//!   at most 20 normalised queued texts and never rebases; the Codex check always rebases to the
//!   newest item;
//! - the paged check maps a failed first page to its outcome (404 → missing, 400 or `found:
//!   false` → fallback, unreachable, anything else → none); asks first for the marker's uuid and
//!   then for the uuid of the newest item it examined; moves the marker to an item it was given;
//!   counts at most the items it was given, with a time and dedupe id exactly when it counts;
//!   gives the same answer twice; and a walk cut after its first page (the next page failing)
//!   and resumed from the marker it left counts the same turns and ends at the same marker as
//!   one walk: where a tick ends changes nothing.
#![no_main]

use aware_upstream::claude::classify::normalise;
use aware_upstream::node::fuzzing::{
    baseline_claude, baseline_codex, check_paged_claude, check_paged_codex, claude_uuid,
    codex_history, codex_unknown_marker, codex_uuid,
};
use aware_upstream::node::{
    check_items, history_from_items, CodexItem, ItemsAnswer, ItemsPage, NodeError, Paged,
    ThreadsPage, ITEMS_LIMIT,
};
use aware_upstream::provider::{Outcome, Probe};
use aware_upstream::claude::scan::QUEUED_MEMORY_MAX;
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// 2026-01-01T00:00:00.000Z
const NOW: i64 = 1_767_225_600_000;
const SESSION: &str = "agent:main:adopted";

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let marker = match (mode >> 1) & 3 {
        0 => json!({"uuid": null}),
        1 => json!({"uuid": "u1"}),
        2 => json!({"uuid": "u1", "queued": ["fix it", "later"]}),
        _ => json!({"uuid": 7}),
    };
    let codex = mode & 1 == 1;
    let probe = Probe {
        session_key: SESSION.into(),
        agent_id: "main".into(),
        host_id: "node:laptop".into(),
        thread_id: "t1".into(),
        upstream_kind: if codex { "codex-cli" } else { "claude-cli" }.into(),
        upstream_ref: json!({"nodeId": "laptop", "threadId": "t1"}),
        marker,
        own_recent_user_texts: vec!["hello".into()],
    };
    let mut answers = rest.split(|&b| b == 0xFF);
    if let Some(list) = answers.next() {
        check_thread_list(list);
    }
    let v1 = answers.next();
    let pages: Vec<&[u8]> = answers.collect();
    if codex {
        if let Some(Ok(items)) = v1.map(decode::<ItemsAnswer<CodexItem>>) {
            check_codex_items(&probe, &items.items);
        }
        check_pages(&probe, &pages, |p, until, fetch| {
            check_paged_codex(p, NOW, until, fetch)
        });
    } else {
        if let Some(Ok(items)) = v1.map(decode::<ItemsAnswer<Value>>) {
            check_claude_items(&probe, &items.items);
        }
        check_pages(&probe, &pages, |p, until, fetch| {
            check_paged_claude(p, NOW, until, fetch)
        });
    }
});

/// As `NodeClient::get` and `get_typed` read a 200 answer.
fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, NodeError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| NodeError::Other(format!("malformed answer: {e}")))?;
    serde_json::from_value(v).map_err(|e| NodeError::Other(format!("malformed page: {e}")))
}

fn check_thread_list(body: &[u8]) {
    let Ok(page) = decode::<ThreadsPage>(body) else {
        return;
    };
    let again: ThreadsPage = serde_json::from_value(serde_json::to_value(&page).expect("encode"))
        .expect("a page re-encodes to a page");
    assert_eq!(again, page);
}

fn check_history(turns: &[aware_engine::ImportTurn]) {
    assert!(turns.len() <= 200, "{} turns", turns.len());
    assert!(turns.iter().map(|t| t.text.len()).sum::<usize>() <= 512 * 1024);
    for t in turns {
        match t.role {
            aware_engine::Role::User => {}
            aware_engine::Role::Assistant => assert!(!t.text.trim().is_empty()),
            other => panic!("history turn with role {other:?}"),
        }
    }
}

fn check_claude_items(probe: &Probe, items: &[Value]) {
    assert_eq!(
        baseline_claude(items),
        match items.first() {
            None => Some(json!({"uuid": null})),
            Some(i) => claude_uuid(i).map(|u| json!({"uuid": u})),
        }
    );
    check_history(&history_from_items(items));
    let outcome = check_items(probe, items, NOW);
    let marker = match probe.marker.get("uuid") {
        Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        _ => {
            assert_eq!(outcome, None, "a marker no check accepts gave an outcome");
            return;
        }
    };
    let newest = &items[..items.len().min(ITEMS_LIMIT)];
    let new = match marker.and_then(|m| newest.iter().position(|i| claude_uuid(i) == Some(m))) {
        Some(ix) => &newest[..ix],
        None => newest,
    };
    let Some(o) = outcome else {
        assert!(
            new.first().and_then(claude_uuid).is_none(),
            "no outcome, yet the newest new item has a uuid"
        );
        return;
    };
    let next = new
        .first()
        .and_then(claude_uuid)
        .expect("an outcome needs a newest uuid");
    check_activity(&o, next, new.len());
}

fn check_codex_items(probe: &Probe, items: &[CodexItem]) {
    assert_eq!(
        baseline_codex(items),
        match items.first() {
            None => Some(json!({"uuid": null})),
            Some(i) => codex_uuid(i).map(|u| json!({"uuid": u})),
        }
    );
    check_history(&codex_history(items));
    match (codex_unknown_marker(probe, items, NOW), items.first()) {
        (
            Some(Outcome::Activity {
                next_marker,
                rebased: true,
                human_turns: 0,
                ..
            }),
            first,
        ) => {
            assert_eq!(next_marker["uuid"], json!(first.and_then(codex_uuid)));
        }
        (None, Some(first)) => assert_eq!(codex_uuid(first), None),
        (other, _) => panic!("the Codex unknown-marker check gave {other:?}"),
    }
}

/// An activity outcome of this probe whose marker moved to `next`, counting at most `given`.
fn check_activity(o: &Outcome, next: &str, given: usize) {
    let Outcome::Activity {
        session_key,
        human_turns,
        next_marker,
        occurred_at,
        dedupe_id,
        rebased,
    } = o
    else {
        panic!("not an activity: {o:?}")
    };
    assert_eq!(session_key, SESSION);
    assert!(!rebased);
    assert_eq!(next_marker["uuid"], json!(next));
    assert!((*human_turns as usize) <= given, "{human_turns} of {given}");
    let counted = *human_turns > 0;
    assert_eq!(occurred_at.is_some(), counted);
    assert_eq!(dedupe_id.as_deref(), counted.then_some(next));
    match next_marker.get("queued") {
        None => {}
        Some(Value::Array(q)) => {
            assert!(!q.is_empty() && q.len() <= QUEUED_MEMORY_MAX);
            for t in q {
                let t = t.as_str().expect("a queued text");
                assert_eq!(normalise(t), t);
            }
        }
        Some(other) => panic!("queued memory {other}"),
    }
}

/// One page answer: its first byte is the status.
fn page<I: DeserializeOwned>(answer: &[u8]) -> Result<ItemsPage<I>, NodeError> {
    match answer.split_first() {
        None => Err(NodeError::Other("empty answer".into())),
        Some((status, body)) => match status % 8 {
            0..=3 => decode(body),
            4 => Err(NodeError::ThreadNotFound),
            5 => Err(NodeError::Refused("400".into())),
            6 => Err(NodeError::Unreachable("connection refused".into())),
            _ => Err(NodeError::Other("500".into())),
        },
    }
}

/// What a walk asked for and was given.
struct Walk {
    afters: Vec<Option<String>>,
    /// The uuids of the items of every page that decoded with `found: true`.
    given: Vec<String>,
    items: usize,
}

fn check_pages<I, F>(probe: &Probe, answers: &[&[u8]], run: F)
where
    I: DeserializeOwned + Serialize + Uuid,
    F: Fn(
        &Probe,
        Instant,
        &mut dyn FnMut(Option<&str>) -> Result<ItemsPage<I>, NodeError>,
    ) -> Paged,
{
    // Far enough that no walk here is cut by time.
    let until = Instant::now() + Duration::from_secs(3600);
    let walk = |probe: &Probe, answers: &[&[u8]]| {
        let mut w = Walk {
            afters: Vec::new(),
            given: Vec::new(),
            items: 0,
        };
        let mut next = answers.iter();
        let out = run(probe, until, &mut |after| {
            w.afters.push(after.map(str::to_string));
            let p = match next.next() {
                Some(a) => page::<I>(a),
                None => Err(NodeError::Other("no more answers".into())),
            };
            if let Ok(p) = &p {
                if p.found {
                    w.items += p.items.len();
                    w.given
                        .extend(p.items.iter().filter_map(|i| i.uuid().map(str::to_string)));
                }
            }
            p
        });
        (out, w)
    };
    let (out, w) = walk(probe, answers);
    assert_eq!(
        walk(probe, answers).0,
        out,
        "the same pages, another answer"
    );
    let marker = match probe.marker.get("uuid") {
        Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        _ => {
            assert_eq!(out, Paged::Outcome(None));
            assert!(w.afters.is_empty(), "a marker no check accepts was walked");
            return;
        }
    };
    assert_eq!(
        w.afters.first(),
        Some(&marker),
        "the walk starts at the marker"
    );
    let first = page::<I>(answers.first().copied().unwrap_or_default());
    match (&first, &out) {
        (Err(NodeError::ThreadNotFound), Paged::Missing)
        | (Err(NodeError::Refused(_)), Paged::Fallback)
        | (Err(NodeError::Unreachable(_)), Paged::Unreachable)
        | (Err(NodeError::Other(_)), Paged::Outcome(None)) => return,
        (Err(e), o) => panic!("first page {e:?} gave {o:?}"),
        (Ok(p), o) if !p.found => {
            assert_eq!(o, &Paged::Fallback);
            return;
        }
        (Ok(_), Paged::Outcome(_)) => {}
        (Ok(_), o) => panic!("a first page gave {o:?}"),
    }
    // Every later request is for the newest item examined so far.
    for a in &w.afters[1..] {
        let a = a.as_deref().expect("a later page is asked after an item");
        assert!(
            w.given.iter().any(|g| g == a),
            "asked after {a:?}, never given"
        );
    }
    let Paged::Outcome(Some(o)) = &out else {
        return;
    };
    let Outcome::Activity {
        next_marker,
        human_turns,
        ..
    } = o
    else {
        panic!("the paged check gave {o:?}")
    };
    let next = next_marker["uuid"]
        .as_str()
        .expect("a uuid marker")
        .to_string();
    assert!(
        w.given.contains(&next),
        "the marker moved to {next:?}, never given"
    );
    check_activity(o, &next, w.items);

    // Cut after the first page: the second request fails, the next tick resumes from the
    // marker left and is given the rest.
    if w.afters.len() < 2 || answers.len() < 2 {
        return;
    }
    let cut = [answers[0]];
    let (first_tick, _) = walk(probe, &cut);
    let Paged::Outcome(Some(Outcome::Activity {
        human_turns: n1,
        next_marker: m1,
        ..
    })) = first_tick
    else {
        panic!("the first page alone gave {first_tick:?}")
    };
    let resumed = Probe {
        marker: m1.clone(),
        ..probe.clone()
    };
    let (second_tick, _) = walk(&resumed, &answers[1..]);
    let (n2, m2) = match second_tick {
        Paged::Outcome(Some(Outcome::Activity {
            human_turns,
            next_marker,
            ..
        })) => (human_turns, next_marker),
        Paged::Outcome(None) => (0, m1),
        // The second page, first of its tick, is read as a first page: a failure or
        // `found: false` there is not the same as in the middle of a walk.
        _ => return,
    };
    assert_eq!(n1 + n2, *human_turns, "a tick boundary changed the count");
    assert_eq!(&m2, next_marker, "a tick boundary changed the marker");
}

/// The uuid of an item, as the check reads it.
trait Uuid {
    fn uuid(&self) -> Option<&str>;
}

impl Uuid for Value {
    fn uuid(&self) -> Option<&str> {
        claude_uuid(self)
    }
}

impl Uuid for CodexItem {
    fn uuid(&self) -> Option<&str> {
        codex_uuid(self)
    }
}
