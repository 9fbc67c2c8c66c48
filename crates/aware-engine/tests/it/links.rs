//! Link store scenarios (04 §4): S120, S121, S122, and adoption's engine part.

use crate::common::*;
use aware_engine::*;
use aware_store::UpstreamSource;
use serde_json::json;

const A1: &str = "agent:main:claude:a1";
const A2: &str = "agent:main:claude:a2";
const A3: &str = "agent:main:claude:a3";

fn input(path: &str, offset: i64) -> LinkInput {
    LinkInput {
        catalog_id: "claude".into(),
        host_id: "gateway:local".into(),
        thread_id: "t1".into(),
        upstream_kind: "claude-cli".into(),
        upstream_ref: json!({"filePath": path}),
        marker: json!({"offset": offset}),
    }
}

#[test]
fn s120_link_upsert_keeps_progress_for_the_same_source() {
    let w = World::new();
    w.create(A1);
    let first = w
        .engine
        .link_upsert(&sref(A1), input("/r/p1/t1.jsonl", 4))
        .unwrap();
    w.clock.set(T0 + 100).unwrap();
    assert!(w
        .engine
        .link_settle(&first, Settlement::Activity(json!({"offset": 4})))
        .unwrap());
    let settled = w.engine.link(&sref(A1)).unwrap().unwrap();
    assert_eq!(settled.last_scanned_at, Some(T0 + 100));
    let same = w
        .engine
        .link_upsert(&sref(A1), input("/r/p1/t1.jsonl", 99))
        .unwrap();
    assert_eq!(
        (same.last_marker_json.as_deref(), same.last_scanned_at),
        (Some(r#"{"offset":4}"#), Some(T0 + 100))
    );
    let moved = w
        .engine
        .link_upsert(&sref(A1), input("/r/p2/t1.jsonl", 99))
        .unwrap();
    assert_eq!(
        (moved.last_marker_json.as_deref(), moved.last_scanned_at),
        (Some(r#"{"offset":99}"#), None)
    );
}

#[test]
fn s121_link_cas_and_delete() {
    let w = World::new();
    w.create(A1);
    let l = w.engine.link_upsert(&sref(A1), input("/f", 0)).unwrap();
    w.clock.set(T0 + 200).unwrap();
    let (e1, e2, l1, l2) = (w.engine.clone(), w.engine.clone(), l.clone(), l.clone());
    let a = std::thread::spawn(move || {
        e1.link_settle(&l1, Settlement::Activity(json!({"offset": 9})))
            .unwrap()
    });
    let b = std::thread::spawn(move || {
        e2.link_settle(&l2, Settlement::Activity(json!({"offset": 9})))
            .unwrap()
    });
    let (ra, rb) = (a.join().unwrap(), b.join().unwrap());
    assert!(ra ^ rb, "exactly one settle wins");
    let stored = w.engine.link(&sref(A1)).unwrap().unwrap();
    assert_eq!(
        (stored.last_marker_json.as_deref(), stored.last_scanned_at),
        (Some(r#"{"offset":9}"#), Some(T0 + 200))
    );
    assert!(stored.updated_at > l.updated_at);
    // The token rises even within one millisecond.
    let again = w.engine.link_upsert(&sref(A1), input("/f", 0)).unwrap();
    assert!(again.updated_at > stored.updated_at);
    assert_eq!(
        w.engine.link_delete(&sref(A1), Some(&stored)).unwrap(),
        LinkDelete::Changed
    );
    assert_eq!(
        w.engine.link_delete(&sref(A1), Some(&again)).unwrap(),
        LinkDelete::Deleted
    );
    assert_eq!(
        w.engine.link_delete(&sref(A1), None).unwrap(),
        LinkDelete::Absent
    );
}

#[test]
fn s122_watched_links_only_and_the_ambiguity_guard() {
    let w = World::new();
    w.create(X);
    for k in [A1, A2, A3] {
        w.create(k);
        w.engine
            .link_upsert(&sref(k), input(&format!("/{k}"), 0))
            .unwrap();
    }
    w.watch(X, A1);
    w.watch(X, A3);
    w.engine.unwatch(&sref(X), &sref(A3)).unwrap();
    let listed = w.engine.links_watched();
    let keys: Vec<&str> = listed["claude"]
        .iter()
        .map(|l| l.session_key.as_str())
        .collect();
    assert_eq!((listed.len(), keys), (1, vec![A1]));
    // One bare key linked under two agents (only damaged data can do this): both skipped.
    let ops = aware_core::AgentId::parse("ops").unwrap();
    for agent in ["main", "ops"] {
        let a = aware_core::AgentId::parse(agent).unwrap();
        w.engine
            .create_session(CreateSession::new(key("shared")).agent(a))
            .unwrap();
        w.engine
            .link_upsert(&sref_of("shared", agent), input("/shared", 0))
            .unwrap();
        w.engine
            .register_watch(&sref(X), &sref_of("shared", agent))
            .unwrap();
    }
    let _ = ops;
    let listed = w.engine.links_watched();
    assert!(listed["claude"].iter().all(|l| l.session_key != "shared"));
}

#[test]
fn adoption_creates_imports_and_records_adopted_once() {
    let w = World::new();
    let agent = aware_core::AgentId::parse("main").unwrap();
    let k = adopted_key(
        &agent,
        "gateway:local",
        "0b7c2a4e-5d6f-4a8b-9c0d-1e2f3a4b5c6d",
    )
    .unwrap();
    assert_eq!(
        k.as_str(),
        "agent:main:claude:5eeb30d272634929ba01f98fd47fd4f114387b26516060195702b36c5ef42975"
    );
    let req = AdoptRequest {
        session: sref(k.as_str()),
        source: UpstreamSource {
            catalog_id: "claude".into(),
            host_id: "gateway:local".into(),
            thread_id: "t".into(),
        },
        caller: Caller::Operator,
        history: vec![
            ImportTurn {
                role: Role::User,
                text: "hi".into(),
            },
            ImportTurn {
                role: Role::Assistant,
                text: "hello".into(),
            },
        ],
        link: Some(input("/f", 42)),
    };
    let first = w.engine.adopt(req.clone()).unwrap();
    assert_eq!((first.created, first.linked), (true, true));
    let again = w.engine.adopt(req).unwrap();
    assert_eq!((again.created, again.linked), (false, true));
    let evs = w.changes(k.as_str(), 0).events;
    assert_eq!(evs.len(), 1);
    assert_eq!(
        (evs[0].kind, evs[0].summary.as_str()),
        (aware_core::EventKind::Adopted, "adopted from claude")
    );
    let s = w.engine.get_session(&sref(k.as_str())).unwrap();
    assert_eq!(
        (s.row.kind.as_str(), s.row.created_via.as_str()),
        ("adopted", "adoption")
    );
    let (turns, _) = w.engine.list_turns(&sref(k.as_str()), None, 10).unwrap();
    assert_eq!(
        turns
            .iter()
            .map(|t| (t.text.as_str(), t.origin.as_deref()))
            .collect::<Vec<_>>(),
        vec![("hi", Some("import")), ("hello", Some("import"))]
    );
    assert!(w
        .engine
        .own_recent_user_texts(&sref(k.as_str()))
        .unwrap()
        .is_empty());
}
