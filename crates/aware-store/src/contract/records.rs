//! Contract checks: Sessions, turns, runs, links, the system-event FIFO and the console page.

use super::support::*;
use crate::rows::*;
use crate::store::{Store, StoreExt};
use crate::Result;
use aware_core::EventKind;

pub fn fifo_insert_delete_clear_expire(store: &dyn Store) {
    let (k, a) = ("agent:main:f", "main");
    let ids = write(store, move |tx| {
        let mut ids = Vec::new();
        for i in 0..5 {
            ids.push(tx.fifo_insert(
                k,
                a,
                &format!("line {i}"),
                (i % 2 == 0).then_some("ctx"),
                10 + i,
            )?);
        }
        // The same text again is inserted too: dedupe is the engine's business.
        ids.push(tx.fifo_insert(k, a, "line 0", Some("ctx"), 20)?);
        tx.fifo_insert("agent:main:other", a, "x", None, 1_000)?;
        Ok(ids)
    });
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "FIFO ids not ascending: {ids:?}"
    );
    let all = read(store, |r| r.system_events(k, a));
    assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
    assert_eq!(all[0].text, "line 0");
    assert_eq!(all[0].context_key.as_deref(), Some("ctx"));
    assert_eq!(all[1].context_key, None);
    assert_eq!(all[1].enqueued_at, 11);
    let first2 = read(store, |r| r.system_events_limit(k, a, 2));
    assert_eq!(first2, all[..2]);
    let del = vec![ids[0], ids[2], 999_999];
    assert_eq!(write(store, move |tx| tx.fifo_delete(k, a, &del)), 2);
    assert_eq!(write(store, move |tx| tx.fifo_delete(k, a, &[])), 0);
    assert_eq!(read(store, |r| r.system_events(k, a)).len(), 4);
    // Expiry takes entries enqueued before the cut-off, at most `limit` per batch.
    assert_eq!(write(store, |tx| tx.expire_fifo_batch(14, 1)).deleted, 1);
    assert_eq!(write(store, |tx| tx.expire_fifo_batch(14, 10)).deleted, 1);
    assert_eq!(read(store, |r| r.system_events(k, a)).len(), 2);
    assert_eq!(write(store, move |tx| tx.fifo_clear(k, a)), 2);
    assert_eq!(read(store, |r| r.system_events(k, a)), vec![]);
    assert_eq!(
        read(store, |r| r.system_events("agent:main:other", a)).len(),
        1
    );
}

pub fn turns_round_trip_and_page(store: &dyn Store) {
    let (k, a) = ("agent:main:tr", "main");
    let mut full = turn(0, "user", "hello");
    full.actor_id = Some("h".into());
    full.channel = Some("cli".into());
    full.run_id = Some("run-9".into());
    full.origin = Some("import".into());
    full.upstream_text = Some("héllo upstream".into());
    full.idempotency_key = Some("idem-1".into());
    let t0 = full.clone();
    write(store, move |tx| {
        tx.insert_turn(k, a, &t0)?;
        tx.insert_turn(k, a, &turn(1, "assistant", "ab"))?;
        tx.insert_turn(k, a, &turn(2, "tool", "tool output"))?;
        tx.insert_turn(k, a, &turn(3, "user", "ünïcödé text"))?;
        let mut reply = turn(4, "assistant", "reply");
        reply.run_id = Some("run-9".into());
        tx.insert_turn(k, a, &reply)
    });
    let all = read(store, |r| r.turns(k, a, None, 100));
    assert_eq!(all.len(), 5);
    assert_eq!(all[0], full, "turn row does not round-trip");
    assert_eq!(
        read(store, |r| r.turns(k, a, Some(1), 2))
            .iter()
            .map(|t| t.index)
            .collect::<Vec<_>>(),
        [2, 3]
    );
    assert_eq!(read(store, |r| r.turn_count(k, a)), 5);
    assert_eq!(read(store, |r| r.turn_count(k, "nobody")), 0);
    assert_eq!(
        read(store, |r| r.turn_by_idempotency(k, a, "idem-1")).map(|t| t.index),
        Some(0)
    );
    assert_eq!(read(store, |r| r.turn_by_idempotency(k, a, "idem-2")), None);
    // Own user turns: not imported, newest first.
    let own: Vec<i64> = read(store, |r| r.recent_own_user_turns(k, a, 10))
        .iter()
        .map(|t| t.index)
        .collect();
    assert_eq!(own, [3]);
    assert_eq!(
        read(store, |r| r.reply_for_run(k, a, "run-9")).map(|t| t.index),
        Some(4)
    );
    // Byte budget: the first turn always comes; the page stops before passing the budget.
    let budget = "hello".len() + "héllo upstream".len() + 2;
    let (page, cut) = read(store, |r| r.turns_within(k, a, None, 10, budget));
    assert_eq!((page.len(), cut), (2, true));
    let (page, cut) = read(store, |r| r.turns_within(k, a, Some(0), 10, 1));
    assert_eq!(
        (page.len(), cut),
        (1, true),
        "the first turn comes even over the budget"
    );
    let (page, cut) = read(store, |r| r.turns_within(k, a, None, 3, 1 << 20));
    assert_eq!((page.len(), cut), (3, false));
    // Transcript pages: newest `limit` ascending, tools only on request, texts cut by chars.
    let newest: Vec<i64> = read(store, |r| r.turns_page(k, a, None, false, 2, 100))
        .iter()
        .map(|t| t.index)
        .collect();
    assert_eq!(newest, [3, 4]);
    let from: Vec<i64> = read(store, |r| r.turns_page(k, a, Some(1), true, 2, 100))
        .iter()
        .map(|t| t.index)
        .collect();
    assert_eq!(from, [1, 2]);
    let from: Vec<i64> = read(store, |r| r.turns_page(k, a, Some(1), false, 2, 100))
        .iter()
        .map(|t| t.index)
        .collect();
    assert_eq!(from, [1, 3]);
    let cut = read(store, |r| r.turns_page(k, a, Some(3), false, 1, 3));
    assert_eq!(
        cut[0].text, "ünïc",
        "texts are cut to max_chars + 1 characters"
    );
    let cut0 = read(store, |r| r.turns_page(k, a, Some(0), false, 1, 2));
    assert_eq!(cut0[0].upstream_text.as_deref(), Some("hél"));
    // A duplicate index is refused; delete_turns removes the session's turns only.
    let dup: Result<()> = store.write(move |tx| tx.insert_turn(k, a, &turn(1, "user", "again")));
    assert!(dup.is_err(), "a duplicate turn index must fail");
    write(store, |tx| {
        tx.insert_turn("agent:main:other", "main", &turn(0, "user", "x"))
    });
    assert_eq!(write(store, move |tx| tx.delete_turns(k, a)), 5);
    assert_eq!(read(store, |r| r.turn_count("agent:main:other", "main")), 1);
}

pub fn runs_round_trip(store: &dyn Store) {
    let run = |id: &str, started: i64, deadline: Option<i64>| RunRow {
        run_id: id.into(),
        session_key: "agent:main:r".into(),
        agent_id: "main".into(),
        session_id: "sid".into(),
        started_at: started,
        ended_at: None,
        outcome: None,
        deadline_at: deadline,
        event_sequence: None,
    };
    let (r1, r2, r3) = (
        run("r1", 10, Some(100)),
        run("r2", 20, Some(50)),
        run("r3", 30, None),
    );
    let rows = [r1.clone(), r2.clone(), r3.clone()];
    write(store, move |tx| {
        rows.iter().try_for_each(|r| tx.insert_run(r))
    });
    assert_eq!(read(store, |r| r.run("r1")), Some(r1.clone()));
    assert_eq!(read(store, |r| r.run("nope")), None);
    let of: Vec<String> = read(store, |r| r.runs_of("agent:main:r", "main", 2))
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(of, ["r3", "r2"], "runs_of is newest start first, limited");
    assert_eq!(read(store, |r| r.next_run_deadline()), Some(50));
    let due: Vec<String> = read(store, |r| r.due_runs(100))
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(due, ["r2", "r1"], "due runs by deadline");
    assert_eq!(read(store, |r| r.due_runs(49)), vec![]);
    let mut ended = r2.clone();
    ended.ended_at = Some(60);
    ended.outcome = Some("completed".into());
    ended.event_sequence = Some(42);
    let e2 = ended.clone();
    write(store, move |tx| tx.update_run(&e2));
    assert_eq!(read(store, |r| r.run("r2")), Some(ended));
    assert_eq!(
        read(store, |r| r.next_run_deadline()),
        Some(100),
        "ended runs have no deadline"
    );
}

pub fn links_round_trip(store: &dyn Store) {
    let link = |key: &str, catalog: &str| LinkRow {
        session_key: key.into(),
        agent_id: "main".into(),
        catalog_id: catalog.into(),
        host_id: "gateway:local".into(),
        thread_id: format!("thread-{key}"),
        upstream_kind: "claude-code".into(),
        upstream_ref_json: r#"{"path":"/x"}"#.into(),
        last_marker_json: None,
        last_scanned_at: None,
        created_at: 1,
        updated_at: 1,
    };
    let (l1, l2, l3) = (
        link("agent:main:l1", "claude"),
        link("agent:main:l2", "codex"),
        link("agent:main:l3", "claude"),
    );
    let rows = [l1.clone(), l2.clone(), l3.clone()];
    write(store, move |tx| {
        rows.iter().try_for_each(|l| tx.put_link(l))?;
        tx.put_cursor(&cursor(
            "agent:main:w",
            "agent:main:l2",
            "main",
            (0, 0, 0),
            1,
        ))?;
        tx.put_cursor(&cursor(
            "agent:main:w",
            "agent:main:l1",
            "main",
            (0, 0, 0),
            1,
        ))?;
        tx.put_cursor(&muted(cursor(
            "agent:main:w",
            "agent:main:l3",
            "main",
            (0, 0, 0),
            1,
        )))
    });
    assert_eq!(
        read(store, |r| r.link("agent:main:l1", "main")),
        Some(l1.clone())
    );
    let watched: Vec<String> = read(store, |r| r.watched_links())
        .into_iter()
        .map(|l| l.session_key)
        .collect();
    assert_eq!(
        watched,
        ["agent:main:l1", "agent:main:l2"],
        "watched links by catalog, then key"
    );
    let mut moved = l1.clone();
    moved.last_marker_json = Some(r#"{"offset":10}"#.into());
    moved.last_scanned_at = Some(77);
    moved.updated_at = 78;
    let m = moved.clone();
    write(store, move |tx| tx.put_link(&m));
    assert_eq!(
        read(store, |r| r.link("agent:main:l1", "main")),
        Some(moved)
    );
    assert!(write(store, |tx| tx.delete_link("agent:main:l1", "main")));
    assert!(!write(store, |tx| tx.delete_link("agent:main:l1", "main")));
    assert_eq!(read(store, |r| r.link("agent:main:l1", "main")), None);
}

pub fn sessions_round_trip_filter_and_delete(store: &dyn Store) {
    let mut full = session("agent:main:s1", "main", 30);
    full.label = Some("Label One".into());
    full.active_run_id = Some("run-1".into());
    full.goal = Some(GoalRow {
        text: "ship it".into(),
        status: "active".into(),
        updated_at: 7,
    });
    full.upstream = Some(UpstreamSource {
        catalog_id: "claude".into(),
        host_id: "gateway:local".into(),
        thread_id: "t1".into(),
    });
    let mut child = session("agent:main:s1:sub:1", "main", 20);
    child.kind = "subagent".into();
    child.parent_key = Some("agent:main:s1".into());
    let mut other_child = session("agent:ops:c", "ops", 20);
    other_child.parent_key = Some("agent:main:s1".into());
    let rows = [
        full.clone(),
        child.clone(),
        other_child.clone(),
        session("agent:main:s0", "main", 30),
        session("agent:ops:x", "ops", 10),
    ];
    write(store, move |tx| {
        rows.iter().try_for_each(|s| tx.insert_session(s))
    });
    assert_eq!(
        read(store, |r| r.session("agent:main:s1", "main")),
        Some(full.clone())
    );
    assert!(read(store, |r| r.session_exists("agent:main:s1", "main")));
    assert!(!read(store, |r| r.session_exists("agent:main:s1", "ops")));
    assert_eq!(
        read(store, |r| r.session_by_label("main", "Label One")).map(|s| s.key),
        Some(full.key.clone())
    );
    // The label is unique per agent.
    let mut clash = session("agent:main:s9", "main", 1);
    clash.label = Some("Label One".into());
    let refused: Result<()> = store.write(move |tx| tx.insert_session(&clash));
    assert!(
        refused.is_err(),
        "a second session with the same label must fail"
    );
    // Lists: updated_at descending, then key, then agent; filters ANDed; limit and offset.
    let keys = |f: SessionFilter| -> Vec<String> {
        read(store, |r| r.list_sessions(&f))
            .into_iter()
            .map(|s| s.key)
            .collect()
    };
    let all = SessionFilter {
        limit: 100,
        ..Default::default()
    };
    assert_eq!(
        keys(all.clone()),
        [
            "agent:main:s0",
            "agent:main:s1",
            "agent:main:s1:sub:1",
            "agent:ops:c",
            "agent:ops:x"
        ]
    );
    assert_eq!(
        keys(SessionFilter {
            limit: 2,
            offset: 1,
            ..all.clone()
        }),
        ["agent:main:s1", "agent:main:s1:sub:1"]
    );
    assert_eq!(
        keys(SessionFilter {
            agents: vec!["ops".into()],
            ..all.clone()
        }),
        ["agent:ops:c", "agent:ops:x"]
    );
    assert_eq!(
        keys(SessionFilter {
            kinds: vec!["subagent".into()],
            ..all.clone()
        }),
        ["agent:main:s1:sub:1"]
    );
    assert_eq!(
        keys(SessionFilter {
            kind_not: Some("subagent".into()),
            updated_since: Some(20),
            ..all.clone()
        }),
        ["agent:main:s0", "agent:main:s1", "agent:ops:c"]
    );
    assert_eq!(
        keys(SessionFilter {
            parent_key: Some("agent:main:s1".into()),
            agents: vec!["main".into()],
            ..all.clone()
        }),
        ["agent:main:s1:sub:1"]
    );
    assert_eq!(
        keys(SessionFilter {
            label: Some("Label One".into()),
            ..all.clone()
        }),
        ["agent:main:s1"]
    );
    // Update replaces every column.
    let mut changed = full.clone();
    changed.goal = None;
    changed.label = None;
    changed.upstream = None;
    changed.orphaned = true;
    changed.updated_at = 99;
    let c = changed.clone();
    write(store, move |tx| tx.update_session(&c));
    assert_eq!(
        read(store, |r| r.session("agent:main:s1", "main")),
        Some(changed)
    );
    // Orphaning: one agent's children, or every agent's.
    assert_eq!(
        write(store, |tx| tx
            .mark_children_orphaned("agent:main:s1", Some("main"))),
        1
    );
    assert!(
        !read(store, |r| r.session("agent:ops:c", "ops"))
            .expect("row")
            .orphaned
    );
    assert_eq!(
        write(store, |tx| tx.mark_children_orphaned("agent:main:s1", None)),
        2
    );
    assert!(
        read(store, |r| r.session("agent:ops:c", "ops"))
            .expect("row")
            .orphaned
    );
    // Delete removes the session's rows of every table, not other sessions' or cursors.
    write(store, |tx| {
        let k = "agent:main:s1";
        append(tx, k, "main", 1)?;
        append(tx, "agent:main:s0", "main", 1)?;
        tx.insert_turn(k, "main", &turn(0, "user", "x"))?;
        tx.fifo_insert(k, "main", "line", None, 1)?;
        tx.put_cursor(&cursor("agent:main:s0", k, "main", (0, 0, 0), 1))?;
        tx.insert_run(&RunRow {
            run_id: "run-del".into(),
            session_key: k.into(),
            agent_id: "main".into(),
            session_id: "sid".into(),
            started_at: 1,
            ended_at: None,
            outcome: None,
            deadline_at: None,
            event_sequence: None,
        })
    });
    assert!(write(store, |tx| tx.delete_session("agent:main:s1", "main")));
    assert!(!write(store, |tx| tx.delete_session("agent:main:s1", "main")));
    let k = "agent:main:s1";
    read(store, |r| {
        assert_eq!(r.session(k, "main")?, None);
        assert_eq!(r.head(k, "main")?, None);
        assert_eq!(r.events_after(k, "main", 0, 10)?, vec![]);
        assert_eq!(r.turn_count(k, "main")?, 0);
        assert_eq!(r.system_events(k, "main")?, vec![]);
        assert_eq!(r.run("run-del")?, None);
        assert_eq!(r.events_after("agent:main:s0", "main", 0, 10)?.len(), 1);
        assert!(
            r.cursor("agent:main:s0", k, "main")?.is_some(),
            "cursors are the engine's business"
        );
        assert!(
            r.session("agent:main:s1:sub:1", "main")?.is_some(),
            "children are not deleted"
        );
        Ok(())
    });
}

pub fn console_page_sorts_and_counts(store: &dyn Store) {
    write(store, |tx| {
        for (i, key) in ["agent:main:b", "agent:main:A", "agent:main:c"]
            .iter()
            .enumerate()
        {
            let mut s = session(key, "main", 10 * i as i64);
            if i == 2 {
                s.label = Some("Needle".into());
            }
            tx.insert_session(&s)?;
        }
        append(tx, "agent:main:b", "main", 5)?;
        append(tx, "agent:main:b", "main", 6)?;
        tx.put_cursor(&cursor(
            "agent:main:c",
            "agent:main:b",
            "main",
            (0, 2, 2),
            1,
        ))?;
        tx.put_cursor(&cursor(
            "agent:main:A",
            "agent:main:b",
            "main",
            (0, 1, 1),
            1,
        ))
    });
    let page = |f: ConsoleFilter| -> (Vec<String>, u64) {
        let (rows, total) = read(store, |r| r.console_sessions(&f));
        (rows.into_iter().map(|r| r.session.key).collect(), total)
    };
    let base = ConsoleFilter {
        limit: 10,
        ..Default::default()
    };
    // Byte order, as SQLite: upper case before lower case.
    let (keys, total) = page(ConsoleFilter {
        sort: ConsoleSort::Key,
        ..base.clone()
    });
    assert_eq!(
        (keys, total),
        (
            vec![
                "agent:main:A".to_string(),
                "agent:main:b".into(),
                "agent:main:c".into()
            ],
            3
        )
    );
    let (keys, total) = page(ConsoleFilter {
        sort: ConsoleSort::Updated,
        descending: true,
        limit: 2,
        ..base.clone()
    });
    assert_eq!(
        (keys, total),
        (vec!["agent:main:c".to_string(), "agent:main:A".into()], 3)
    );
    let (keys, _) = page(ConsoleFilter {
        sort: ConsoleSort::StateVersion,
        descending: true,
        ..base.clone()
    });
    assert_eq!(
        keys[0], "agent:main:b",
        "a session with events sorts above those without"
    );
    let (keys, _) = page(ConsoleFilter {
        sort: ConsoleSort::StateVersion,
        ..base.clone()
    });
    assert_eq!(
        keys[2], "agent:main:b",
        "sessions without events sort first ascending"
    );
    let (keys, total) = page(ConsoleFilter {
        text: Some("needle".into()),
        ..base.clone()
    });
    assert_eq!((keys, total), (vec!["agent:main:c".to_string()], 1));
    let (keys, total) = page(ConsoleFilter {
        keys: vec![
            ("agent:main:b".into(), "main".into()),
            ("agent:main:zz".into(), "main".into()),
        ],
        ..base.clone()
    });
    assert_eq!((keys, total), (vec!["agent:main:b".to_string()], 1));
    let (rows, _) = read(store, |r| {
        r.console_sessions(&ConsoleFilter {
            sort: ConsoleSort::Key,
            ..base.clone()
        })
    });
    let b = &rows[1];
    assert_eq!(b.session.key, "agent:main:b");
    assert!(b.state_version > 0);
    assert_eq!(b.last_event_at, Some(6));
    assert_eq!(
        b.last_event_kind.as_deref(),
        Some(EventKind::HumanDirectMessage.as_str())
    );
    assert_eq!(b.last_human_at, Some(6));
    assert_eq!(b.pending_as_target, 2);
    assert_eq!(rows[2].pending_as_watcher, 1);
    assert_eq!(rows[0].state_version, 0);
}
