//! A group commit that fails fails every op in it, and each caller hears it: N turns queued
//! behind a held writer commit as one batch; that batch's commit is made to fail
//! (`failCommits`), so every one of the N requests is answered 503 `store_unavailable` and
//! nothing of any of them is stored: no turn, no event, no head, no notice. Then the store
//! takes writes again. Run on SQLite and on PostgreSQL, where the ops of a batch also travel as
//! queued (pipelined) writes whose failure is the batch's.

use crate::common::*;
use serde_json::{json, Value};
use std::sync::mpsc;
use std::time::Duration;

const OPS: usize = 12;

fn target(i: usize) -> String {
    format!("agent:main:batch-t{i}")
}

fn every_op_of_a_failed_batch_is_answered_503_and_nothing_is_stored(s: Server) {
    s.create(W);
    for i in 0..OPS {
        s.create(&target(i));
        let r = s.watch(W, &target(i));
        assert!(r.status == 200 || r.status == 201, "{}", r.body);
    }
    let heads_before: Vec<i64> = (0..OPS).map(|i| head(&s, &target(i))).collect();
    let commits_before = s.metric("aware_commits_total ").unwrap_or(0.0);

    let r = s.post("/v1/admin/faults", json!({"stallWriter": true}));
    assert_eq!(r.status, 200, "{}", r.body);
    let (sent_tx, sent_rx) = mpsc::channel();
    let threads: Vec<_> = (0..OPS)
        .map(|i| {
            let (port, sent) = (s.port, sent_tx.clone());
            std::thread::spawn(move || {
                let path = format!("/v1/sessions/{}/turns", seg(&target(i)));
                let body =
                    json!({"role": "user", "text": format!("batch {i}"), "channel": "slack"});
                post_raw(port, &path, &body, || {
                    let _ = sent.send(());
                })
            })
        })
        .collect();
    for _ in 0..OPS {
        sent_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("a writer thread never sent its turn");
    }
    // Let the writer go with its next two commits made to fail: `faults` replaces the whole
    // plan, so this one request releases the stall and arms the failures together. Two, because
    // the writer may have taken the first turn into a batch of its own before the stall held it
    // (SQLite's writer does): that batch fails, and so does the batch of the queued rest. The
    // plan is cleared before anything else is written.
    let r = s.post("/v1/admin/faults", json!({"failCommits": 2}));
    assert_eq!(r.status, 200, "{}", r.body);
    let answers: Vec<(u16, Value)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let failed = answers.iter().filter(|(st, _)| *st == 503).count();
    // A turn still on its way into the gateway when the writer went may commit in a third,
    // healthy batch: so each answer is 201 or 503, never anything else, and what was answered
    // 503 left nothing behind (what was answered 201 is all there).
    assert!(failed >= 1, "no op saw the failed commit: {answers:?}");
    for (status, body) in &answers {
        match status {
            503 => assert_eq!(body["error"]["code"], "store_unavailable", "{body}"),
            201 => {}
            _ => panic!("an op of a failed batch answered {status}: {body}"),
        }
    }
    let r = s.post("/v1/admin/faults", json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    for (i, (status, _)) in answers.iter().enumerate() {
        let t = target(i);
        let turns = s.get(&format!("/v1/sessions/{}/turns", seg(&t)));
        let n = turns.body["turns"].as_array().map_or(0, Vec::len);
        let head = head(&s, &t);
        if *status == 503 {
            assert_eq!(n, 0, "{t}: a turn answered 503 is stored: {}", turns.body);
            assert_eq!(
                head, heads_before[i],
                "{t}: a turn answered 503 moved the head"
            );
        } else {
            assert_eq!(n, 1, "{t}: a turn answered 201 is missing: {}", turns.body);
            assert!(
                head > heads_before[i],
                "{t}: a turn answered 201 left the head"
            );
        }
    }
    // Notices: W has one for each target whose turn was stored, and none for the others.
    let pending: Vec<String> = s.pending(W)["notices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["targetSessionKey"].as_str().unwrap().to_string())
        .collect();
    for (i, (status, _)) in answers.iter().enumerate() {
        assert_eq!(
            pending.contains(&target(i)),
            *status == 201,
            "notice of {} after a {status}: {pending:?}",
            target(i)
        );
    }
    // The store takes writes again.
    let r = s.post(
        &format!("/v1/sessions/{}/turns", seg(&target(0))),
        json!({"role": "user", "text": "after", "channel": "slack"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    eprintln!(
        "batch_failure: {failed} of {OPS} ops answered 503 by the failed commits; {} commits since",
        s.metric("aware_commits_total ").unwrap_or(0.0) - commits_before
    );
}

#[test]
fn failed_batch_on_sqlite() {
    every_op_of_a_failed_batch_is_answered_503_and_nothing_is_stored(Server::with_options(
        ServerOptions {
            gateways: 1,
            store: StoreChoice::Sqlite,
            pick: Pick::First,
            ..ServerOptions::default()
        },
    ));
}

#[test]
fn failed_batch_on_postgresql() {
    every_op_of_a_failed_batch_is_answered_503_and_nothing_is_stored(Server::with_options(
        ServerOptions {
            gateways: 1,
            store: StoreChoice::Postgres,
            pick: Pick::First,
            ..ServerOptions::default()
        },
    ));
}

/// The session's head (`stateVersion`).
fn head(s: &Server, key: &str) -> i64 {
    let r = s.get(&format!("/v1/sessions/{}", seg(key)));
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["stateVersion"]
        .as_i64()
        .or_else(|| r.body["session"]["stateVersion"].as_i64())
        .unwrap_or_else(|| panic!("no stateVersion: {}", r.body))
}
