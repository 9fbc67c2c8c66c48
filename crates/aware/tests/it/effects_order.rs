//! 01 §11: "After-commit effects come out in op order." Every marker fence of the suite
//! (`Wakes::settle`, the webhook and log markers of docs/testing.md) relies on it, so it is
//! checked here directly: concurrent writers whose ops share group commits, and the wakes their
//! commits cause, which must leave the one SSE stream in the order of the ops' sequences.

use crate::common::*;
use aware_testkit::wakes::Wakes;
use serde_json::json;
use std::collections::HashMap;
use std::sync::mpsc;
use std::time::Duration;

/// Writers per round. Each round's turns are sent while the writer is held (`stallWriter`), so
/// they queue up and commit together once it is let go.
const WRITERS: usize = 24;
const ROUNDS: usize = 4;

fn watcher(round: usize, i: usize) -> String {
    format!("agent:main:order-w{round}-{i}")
}

fn target(round: usize, i: usize) -> String {
    format!("agent:main:order-t{round}-{i}")
}

#[test]
fn wakes_leave_in_the_order_of_the_ops_that_caused_them() {
    let s = Server::start();
    for round in 0..ROUNDS {
        for i in 0..WRITERS {
            s.create(&watcher(round, i));
            s.create(&target(round, i));
            let r = s.watch(&watcher(round, i), &target(round, i));
            assert!(r.status == 200 || r.status == 201, "{}", r.body);
        }
    }
    let wakes = Wakes::subscribe(&s, "?agent=main", None);
    let commits_before = s.metric("aware_commits_total ").unwrap();
    // The sequence of the event that opened each watcher's notice (a watcher's first notice is
    // woken at once, so each watcher gets exactly one wake).
    let mut sequence_of: HashMap<String, i64> = HashMap::new();
    for round in 0..ROUNDS {
        let r = s.post("/v1/admin/faults", json!({"stallWriter": true}));
        assert_eq!(r.status, 200, "{}", r.body);
        let (sent_tx, sent_rx) = mpsc::channel();
        let threads: Vec<_> = (0..WRITERS)
            .map(|i| {
                let (port, sent) = (s.port, sent_tx.clone());
                std::thread::spawn(move || {
                    let path = format!("/v1/sessions/{}/turns", seg(&target(round, i)));
                    let body = json!({"role": "user", "text": "go", "channel": "slack"});
                    let (status, answer) = post_raw(port, &path, &body, || {
                        let _ = sent.send(());
                    });
                    assert_eq!(status, 201, "{answer}");
                    let seq = answer["event"]["sequence"].as_i64().expect("sequence");
                    (watcher(round, i), seq)
                })
            })
            .collect();
        // Every turn is on the wire before the writer is let go.
        for _ in 0..WRITERS {
            sent_rx
                .recv_timeout(Duration::from_secs(20))
                .expect("a writer thread never sent its turn");
        }
        let r = s.post("/v1/admin/faults", json!({}));
        assert_eq!(r.status, 200, "{}", r.body);
        for t in threads {
            let (w, seq) = t.join().unwrap();
            sequence_of.insert(w, seq);
        }
    }
    let ops = (ROUNDS * WRITERS) as f64;
    let commits = s.metric("aware_commits_total ").unwrap() - commits_before;
    let got: Vec<(i64, String, i64)> = wakes
        .settle()
        .into_iter()
        .filter(|w| w["reason"] == "session-state")
        .map(|w| {
            let key = w["sessionKey"].as_str().unwrap().to_string();
            let seq = *sequence_of
                .get(&key)
                .unwrap_or_else(|| panic!("a wake for {key}, which no op here caused: {w}"));
            (w["id"].as_i64().unwrap(), key, seq)
        })
        .collect();
    assert_eq!(got.len(), ROUNDS * WRITERS, "one wake per watcher: {got:?}");
    // The stream's order is the order the wakes were emitted in (ids increase) ...
    assert!(
        got.windows(2).all(|p| p[0].0 < p[1].0),
        "wake ids out of order: {got:?}"
    );
    // ... and that is the order of the ops' sequences, across and inside group commits.
    assert!(
        got.windows(2).all(|p| p[0].2 < p[1].2),
        "wakes out of op order (id, watcher, sequence): {got:?}"
    );
    // The check means something only if ops shared commits: fewer commits than ops. (The turns
    // queued behind the held writer; the one that was held commits alone, the rest together.)
    assert!(
        commits < ops,
        "{ops} ops took {commits} commits: no group commit happened, nothing was checked"
    );
}
