//! Several gateways on one PostgreSQL, black-box (the real `aware serve` and `aware migrate` on
//! the throw-away test cluster of `aware_store_pg::testing`).
// Test code: a panic is the failure report (the workspace denies unwrap/expect elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test reads as one scenario, top to bottom: its steps share the state they check.
#![allow(clippy::too_many_lines)]

mod common;

use aware_store_pg::testing::PgCluster;
use common::*;
use serde_json::{json, Value};
use std::process::Command;

const MIGRATE_CONFIG: &str = "notify_on_create = false\n[retention]\nmax_age_days = 1\nprune_interval_secs = 31536000\n[monitor]\nenabled = false\n";

fn migrate(from: &str, to: &str) -> std::process::Output {
    Command::new(bin())
        .args(["migrate", "--from", from, "--to", to])
        .output()
        .expect("run aware migrate")
}

/// Every answer a client can get about every session: the list, and per session its status
/// with `changesSince 0` (as the operator's main session sees it), pending notices, watches,
/// watchers and turns.
fn snapshot(s: &Server) -> Value {
    let list = s.get("/v1/sessions");
    assert_eq!(list.status, 200, "{}", list.body);
    let mut keys: Vec<String> = list.body["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|x| x["key"].as_str().expect("key").to_string())
        .collect();
    keys.sort();
    let mut per = serde_json::Map::new();
    for k in &keys {
        let p = |suffix: &str| s.get(&format!("/v1/sessions/{}{suffix}", seg(k))).body;
        per.insert(
            k.clone(),
            json!({
                "session": p(""),
                "status": s.status(W, k, 0),
                "pending": p("/pending"),
                "watches": p("/watches"),
                "watchers": p("/watchers"),
                "turns": p("/turns"),
            }),
        );
    }
    json!({"list": list.body, "sessions": per})
}

/// SQLite → PostgreSQL → SQLite keeps every answer, the FIFO, the pruned watermarks and the
/// sequence counter (the next event gets the number the original store would give it).
#[test]
fn migrate_round_trip_sqlite_postgres_sqlite_keeps_every_answer() {
    let mut a = Server::with_config(MIGRATE_CONFIG);
    a.create(W);
    a.create_child(C, W);
    a.create(X);
    assert_eq!(a.watch(X, C).status, 200);
    a.hdm(C);
    let r = a.put(
        &format!("/v1/sessions/{}/goal", seg(C)),
        json!({"text": "ship it"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = a.post(
        &format!("/v1/sessions/{}/runs", seg(C)),
        json!({"runId": "r1"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let r = a.post(
        &format!("/v1/sessions/{}/runs/r1/end", seg(C)),
        json!({"outcome": "ok"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    // Two days later: everything so far is past `max_age_days`; prune leaves watermarks.
    let later = a.now + 2 * DAY;
    a.set_clock(later);
    a.hdm(X);
    let pruned = a.prune();
    assert!(
        pruned["deletedByAge"].as_i64().unwrap_or(0) > 0,
        "the prune deleted events: {pruned}"
    );
    a.hdm(C);
    // After the prune, which expires FIFO entries older than a day.
    let r = a.post(
        &format!("/v1/sessions/{}/system-events", seg(W)),
        json!({"text": "deploy finished", "contextKey": "deploy"}),
    );
    assert!(r.status == 200 || r.status == 201, "{}", r.body);
    // The highest sequence issued is then no longer stored: its session is deleted.
    a.create_child(D, W);
    let top = a.hdm_seq(D);
    assert_eq!(a.delete(&format!("/v1/sessions/{}", seg(D))).status, 200);
    let before = snapshot(&a);
    assert_eq!(
        before["sessions"][W]["pending"]["systemEvents"][0]["text"],
        "deploy finished"
    );
    a.stop();

    let pg = PgCluster::shared().database().expect("test database");
    let data = a.data_dir().to_str().expect("utf-8 path").to_string();
    let out = migrate(&data, &pg);
    assert!(
        out.status.success(),
        "migrate to PostgreSQL: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let progress = String::from_utf8_lossy(&out.stderr);
    assert!(progress.contains("counts verified"), "{progress}");

    // A second copy into the now non-empty database is refused, and nothing changes.
    let again = migrate(&data, &pg);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("not empty"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    // And back into a fresh data dir.
    let back = tempfile::tempdir().expect("tempdir");
    let back_dir = back.path().join("data");
    let out = migrate(&pg, back_dir.to_str().expect("utf-8"));
    assert!(
        out.status.success(),
        "migrate to SQLite: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The original and the round-tripped store answer alike, at the same test time.
    a.restart();
    let mut b = Server::with_args(MIGRATE_CONFIG, &[]);
    b.stop();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", b.db_path().display()));
    }
    std::fs::copy(back_dir.join("state.db"), b.db_path()).expect("copy the migrated store");
    b.now = a.now;
    b.restart();
    // (Both restarted at the same time, so both restart sweeps re-froze the same notices.)
    let (sa, sb) = (snapshot(&a), snapshot(&b));
    for (key, va) in sa["sessions"].as_object().expect("sessions") {
        assert_eq!(va, &sb["sessions"][key], "the round trip changed {key}");
    }
    assert_eq!(sa, sb);
    // The counters came along: the next event has the same sequence on both.
    assert_eq!(a.hdm_seq(C), top + 1);
    assert_eq!(
        b.hdm_seq(C),
        top + 1,
        "a deleted session's sequence was issued again"
    );
    assert_eq!(a.drain(W), b.drain(W), "the FIFO came along");
}

const CLUSTER_CONFIG: &str = "notify_on_create = false\n[retention]\nmax_age_days = 1\nprune_interval_secs = 60\n[monitor]\nenabled = true\nfirst_tick_secs = 1\ninterval_secs = 1\n";

/// A gateway on the PostgreSQL database `url`.
fn gateway(url: &str) -> Server {
    Server::with_args(CLUSTER_CONFIG, &["--store", url])
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !f() {
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Until every gateway's `LISTEN` connection is up (remote wakes and hints arrive).
fn wait_listening(gateways: &[&Server]) {
    wait_until("every gateway listening", || {
        gateways
            .iter()
            .all(|s| s.get("/health").body["cluster"]["listening"] == true)
    });
}

fn leads(s: &Server) -> bool {
    s.get("/health").body["cluster"]["leader"] == true
}

/// A turn posted to gateway A wakes the SSE subscriber connected to gateway B, once; the
/// webhook side stays with A (B's wake is marked remote and B publishes nothing back).
#[test]
fn a_turn_on_gateway_a_wakes_the_subscriber_on_gateway_b() {
    let url = PgCluster::shared().database().expect("test database");
    let a = gateway(&url);
    let b = gateway(&url);
    wait_listening(&[&a, &b]);
    a.create(W);
    a.create_child(C, W);
    let wakes = Wakes::subscribe(&b, &format!("?session={}", seg(W)), None);
    a.hdm(C);
    wait_until("the wake on B", || {
        wakes
            .received
            .lock()
            .unwrap()
            .iter()
            .any(|w| w["reason"] == "session-state" && w["sessionKey"] == W)
    });
    let got: Vec<Value> = wakes.received.lock().unwrap().clone();
    let state: Vec<&Value> = got
        .iter()
        .filter(|w| w["reason"] == "session-state")
        .collect();
    assert_eq!(state.len(), 1, "one wake: {got:?}");
    assert_eq!(state[0]["targets"][0]["sessionKey"], C);
    assert_eq!(b.metric("aware_cluster_wakes_received_total"), Some(1.0));
    assert!(
        a.metric("aware_cluster_wakes_published_total")
            .unwrap_or(0.0)
            >= 1.0
    );
}

/// The console's change stream on gateway B hints at a commit on gateway A that wakes nobody
/// (a session created without a parent): a change hint crosses, not a wake.
#[test]
fn a_commit_on_gateway_a_makes_the_console_stream_on_gateway_b_hint() {
    use std::io::BufRead;
    let url = PgCluster::shared().database().expect("test database");
    let a = gateway(&url);
    let b = gateway(&url);
    wait_listening(&[&a, &b]);
    let resp = ureq::get(&format!("{}/v1/console/events", b.base))
        .call()
        .expect("console events on B");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::io::BufReader::new(resp.into_reader());
    std::thread::spawn(move || {
        for line in reader.lines() {
            let Ok(line) = line else { return };
            if let Some(e) = line.strip_prefix("event: ") {
                if tx.send(e.to_string()).is_err() {
                    return;
                }
            }
        }
    });
    let next = || {
        rx.recv_timeout(std::time::Duration::from_secs(30))
            .expect("an event within 30 s")
    };
    assert_eq!(next(), "hello");
    a.create(X);
    assert_eq!(next(), "change");
    assert!(
        b.metric("aware_cluster_changes_received_total")
            .unwrap_or(0.0)
            >= 1.0
    );
    assert_eq!(
        b.metric("aware_cluster_wakes_received_total"),
        Some(0.0),
        "no wake crossed: the hint did"
    );
}

/// Exactly one gateway leads; after `kill -9` of the leader the other takes over, and the
/// singletons (the prune interval, the upstream monitor) run there and nowhere else.
#[test]
fn leadership_moves_after_kill_9_of_the_leader_and_pruning_follows() {
    let url = PgCluster::shared().database().expect("test database");
    let mut a = gateway(&url);
    let mut b = gateway(&url);
    wait_until("a leader", || leads(&a) || leads(&b));
    assert!(!(leads(&a) && leads(&b)), "two leaders");
    if leads(&b) {
        std::mem::swap(&mut a, &mut b);
    }
    assert_eq!(a.metric("aware_cluster_leader"), Some(1.0));
    assert_eq!(b.metric("aware_cluster_leader"), Some(0.0));
    b.create(W);
    b.create_child(C, W);
    b.hdm(C);
    // Two days on, on the follower only: its timers run, but retention is the leader's.
    let later = b.now + 2 * DAY;
    b.set_clock(later);
    assert!(
        !b.seqs(C, 0).is_empty(),
        "a follower pruned (retention is a singleton)"
    );
    assert_eq!(
        b.metric("aware_monitor_ticks_total"),
        Some(0.0),
        "a follower ran the upstream monitor"
    );

    let mut leader = a.child.take().expect("leader process");
    leader.kill().expect("kill -9 the leader");
    let _ = leader.wait();
    wait_until("the follower to lead", || leads(&b));
    assert_eq!(b.metric("aware_cluster_leader"), Some(1.0));
    // The new leader's next timer tick prunes.
    b.set_clock(later + 61_000);
    assert!(
        b.seqs(C, 0).is_empty(),
        "the new leader did not prune: {:?}",
        b.seqs(C, 0)
    );
    assert!(
        b.metric("aware_monitor_ticks_total").unwrap_or(0.0) >= 1.0,
        "the new leader does not run the upstream monitor"
    );
}

/// PostgreSQL killed: requests answer 503 `store_unavailable` at once, `/health` says
/// degraded; PostgreSQL back: the same gateway serves again without a restart.
#[test]
fn a_database_outage_answers_503_and_the_gateway_recovers_by_itself() {
    let pg = PgCluster::start_new(aware_store_pg::testing::ClusterOptions::default())
        .expect("own cluster");
    let url = pg.database().expect("database");
    let s = gateway(&url);
    s.create(W);
    pg.kill().expect("kill -9 PostgreSQL");
    let t = std::time::Instant::now();
    let r = s.post("/v1/sessions", json!({"key": X}));
    assert_eq!(
        (r.status, r.code()),
        (503, "store_unavailable"),
        "{}",
        r.body
    );
    let r = s.get(&format!("/v1/sessions/{}", seg(W)));
    assert_eq!(
        (r.status, r.code()),
        (503, "store_unavailable"),
        "{}",
        r.body
    );
    let h = s.get("/health");
    assert_eq!(
        (h.status, h.body["status"].as_str()),
        (503, Some("degraded")),
        "{}",
        h.body
    );
    eprintln!(
        "outage answers took {:?} (reported, not asserted)",
        t.elapsed()
    );

    pg.start().expect("restart PostgreSQL");
    wait_until("health again", || s.get("/health").status == 200);
    wait_until("writes again", || {
        s.post("/v1/sessions", json!({"key": X})).status == 201
    });
    assert_eq!(s.get(&format!("/v1/sessions/{}", seg(W))).status, 200);
}

/// SIGTERM of the leader: the process exits 0 (closing PostgreSQL connections off the async
/// workers) and the other gateway leads.
#[test]
fn a_graceful_stop_of_the_leader_exits_cleanly_and_hands_leadership_over() {
    let url = PgCluster::shared().database().expect("test database");
    let mut a = gateway(&url);
    let mut b = gateway(&url);
    wait_until("a leader", || leads(&a) || leads(&b));
    if leads(&b) {
        std::mem::swap(&mut a, &mut b);
    }
    let mut leader = a.child.take().expect("leader process");
    let _ = Command::new("kill")
        .args(["-TERM", &leader.id().to_string()])
        .status();
    let status = leader.wait().expect("wait for the leader");
    assert!(status.success(), "SIGTERM exit: {status:?}\n{}", a.logs());
    wait_until("the other gateway to lead", || leads(&b));
}

/// A webhook receiver that answers 200 and keeps every body it got.
fn webhook_receiver() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let got = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let got = got.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; len];
                let _ = reader.read_exact(&mut body);
                got.lock()
                    .expect("bodies")
                    .push(String::from_utf8_lossy(&body).into_owned());
                let mut s = stream;
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            });
        }
    });
    (port, bodies)
}

/// Both gateways configure the agent's webhook; a wake produced on A reaches B's SSE subscriber,
/// and the webhook gets it once (from A), not once per gateway.
#[test]
fn a_webhook_is_delivered_once_per_wake_across_the_cluster() {
    let (port, bodies) = webhook_receiver();
    let config = format!(
        "{CLUSTER_CONFIG}[agents.main.wake_webhook]\nurl = \"http://127.0.0.1:{port}/hook\"\n"
    );
    let url = PgCluster::shared().database().expect("test database");
    let a = Server::with_args(&config, &["--store", &url]);
    let b = Server::with_args(&config, &["--store", &url]);
    wait_listening(&[&a, &b]);
    a.create(W);
    a.create_child(C, W);
    let wakes = Wakes::subscribe(&b, &format!("?session={}", seg(W)), None);
    a.hdm(C);
    wait_until("the wake on B", || {
        wakes
            .received
            .lock()
            .unwrap()
            .iter()
            .any(|w| w["reason"] == "session-state")
    });
    let state_hooks = || {
        bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|b| b.contains("session-state"))
            .count()
    };
    wait_until("the webhook from A", || state_hooks() >= 1);
    // A marker through B's webhook lane: B offered the remote wake to its lane before the marker
    // (broadcast order), so a wrong second delivery would be there by the time the marker is.
    wakes.settle();
    wait_until("the marker through B's webhook", || {
        bodies
            .lock()
            .unwrap()
            .iter()
            .any(|b| b.contains("aware-test-fence"))
    });
    assert_eq!(state_hooks(), 1, "bodies: {:?}", bodies.lock().unwrap());
}

/// A `sessions_send` caller waiting on gateway A gets the reply posted on gateway B: B's writer
/// cannot signal A's waiter, so B publishes the run id on the cluster bus and A's listener
/// receives it (its periodic re-read is only the safety net).
#[test]
fn a_reply_posted_on_gateway_b_ends_the_wait_on_gateway_a_over_the_bus() {
    let url = PgCluster::shared().database().expect("test database");
    let a = gateway(&url);
    let b = gateway(&url);
    wait_listening(&[&a, &b]);
    a.create(W);
    a.create(X);
    let wakes = Wakes::subscribe(&b, &format!("?session={}", seg(X)), None);
    let (answer, run) = std::thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            a.tool(
                W,
                "sessions_send",
                json!({"sessionKey": X, "message": "ping", "timeoutSeconds": 30}),
            )
        });
        let mut run = None;
        wait_until("the message wake on B", || {
            run = wakes
                .received
                .lock()
                .unwrap()
                .iter()
                .find(|w| w["reason"] == "message")
                .and_then(|w| w["runId"].as_str().map(str::to_string));
            run.is_some()
        });
        let run = run.expect("run id");
        let r = b.post(
            &format!("/v1/sessions/{}/turns", seg(X)),
            json!({"role": "assistant", "text": "pong", "runId": run}),
        );
        assert_eq!(r.status, 201, "{}", r.body);
        (waiter.join().expect("waiter"), run)
    });
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body["status"], "ok", "{}", answer.body);
    assert_eq!(answer.body["reply"], "pong");
    assert_eq!(answer.body["runId"], run.as_str());
    wait_until("A received the reply signal", || {
        a.metric("aware_cluster_replies_received_total")
            .unwrap_or(0.0)
            >= 1.0
    });
}

/// PostgreSQL fails over: the primary is killed and its synchronous streaming standby promoted.
/// Two gateways on a multi-host URL (`target_session_attrs=read-write`, so they never write to
/// the standby while it is one) go on by themselves, nothing they acknowledged before the kill
/// is lost (synchronous replication: a commit is answered once the standby has it), and no
/// sequence is reused after the promotion.
#[test]
fn a_promoted_synchronous_standby_keeps_everything_acknowledged() {
    let primary = PgCluster::start_new(aware_store_pg::testing::ClusterOptions::default())
        .expect("primary cluster");
    let standby = primary.start_standby(true).expect("synchronous standby");
    let single = primary.database().expect("database");
    let name = single.rsplit('/').next().expect("database name");
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{name}?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let a = gateway(&url);
    let b = gateway(&url);
    a.create(W);
    let children: Vec<String> = (0..6)
        .map(|i| format!("agent:main:subagent:failover{i}"))
        .collect();
    for c in &children {
        a.create_child(c, W);
    }
    let turn = |s: &Server, c: &str, text: &str| {
        s.post(
            &format!("/v1/sessions/{}/turns", seg(c)),
            json!({"role": "user", "text": text, "channel": "slack"}),
        )
    };
    // (child, turn id, sequence) of every acknowledged turn, through both gateways.
    let mut acked: Vec<(String, String, i64)> = Vec::new();
    for round in 0..4 {
        for (i, c) in children.iter().enumerate() {
            let s = if (round + i) % 2 == 0 { &a } else { &b };
            let r = turn(s, c, &format!("before {round}"));
            assert_eq!(r.status, 201, "{}", r.body);
            acked.push((
                c.clone(),
                r.body["turn"]["id"].as_str().expect("turn id").to_string(),
                r.body["event"]["sequence"].as_i64().expect("sequence"),
            ));
        }
    }
    let max_before = acked.iter().map(|t| t.2).max().expect("acknowledged turns");

    primary.kill().expect("kill -9 the primary");
    let t = std::time::Instant::now();
    standby.promote().expect("promote the standby");
    let promoted = t.elapsed();
    let mut after = Vec::new();
    for (g, s) in [("a", &a), ("b", &b)] {
        wait_until(&format!("gateway {g} to write again"), || {
            let r = turn(s, &children[0], &format!("after on {g}"));
            if r.status == 201 {
                after.push(r.body["event"]["sequence"].as_i64().expect("sequence"));
            }
            r.status == 201
        });
    }
    eprintln!(
        "failover: standby promoted in {promoted:?}; both gateways writing again {:?} after the \
         kill (reported, not asserted)",
        t.elapsed()
    );

    // Nothing acknowledged is lost, read through either gateway.
    for (c, id, seq) in &acked {
        for s in [&a, &b] {
            let r = s.get(&format!("/v1/sessions/{}/turns?limit=500", seg(c)));
            assert_eq!(r.status, 200, "{}", r.body);
            let ids: Vec<&str> = r.body["turns"]
                .as_array()
                .expect("turns")
                .iter()
                .filter_map(|t| t["id"].as_str())
                .collect();
            assert!(ids.contains(&id.as_str()), "turn {id} of {c} lost: {ids:?}");
        }
        let seqs = a.seqs(c, 0);
        assert!(seqs.contains(seq), "sequence {seq} of {c} lost: {seqs:?}");
    }
    // No sequence is reused: the promoted server's sequence continues above the old one.
    for s in &after {
        assert!(
            *s > max_before,
            "sequence {s} after the failover is not above {max_before}"
        );
    }
    // Every child's changes reach W: drained through alternating gateways until quiet (the
    // first drain's notices were frozen at the first change, so the later turns come back as
    // follow-ups), no `(target, lastSeen)` twice, every child among them.
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..10 {
        let s = if round % 2 == 0 { &b } else { &a };
        let d = s.drain(W);
        let notices = d["notices"].as_array().expect("notices").clone();
        if notices.is_empty() {
            break;
        }
        for n in notices {
            let t = (
                n["targetSessionKey"].as_str().expect("target").to_string(),
                n["lastSeen"].as_i64().expect("lastSeen"),
            );
            assert!(seen.insert(t.clone()), "notice {t:?} delivered twice");
        }
    }
    for c in &children {
        assert!(
            seen.iter().any(|(t, _)| t == c),
            "no notice of {c} reached W: {seen:?}"
        );
    }
    assert!(a.drain(W)["notices"]
        .as_array()
        .expect("notices")
        .is_empty());
    assert!(b.drain(W)["notices"]
        .as_array()
        .expect("notices")
        .is_empty());
}

/// Many drainers of one watcher on random gateways, writers to its targets on random gateways,
/// and the leader `kill -9`ed and restarted mid-run: every notice is delivered at most once
/// (no `(target, lastSeen)` in two drain answers), and none is lost (after the final drains,
/// every cursor's `lastSeen` is its `material` and its target's head: every change was
/// acknowledged). A drain whose answer was cut by the kill may have acknowledged notices no
/// client saw: such drains are counted and reported, and they are the only way a notice can go
/// unseen.
#[test]
fn many_drainers_of_one_watcher_across_gateways_with_the_leader_killed() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, RwLock};
    const TARGETS: usize = 8;
    const WRITERS: usize = 2;
    const DRAINERS: usize = 4;
    let url = PgCluster::shared().database().expect("test database");
    let mut s = Server::with_options(ServerOptions {
        config: CLUSTER_CONFIG.to_string(),
        args: Vec::new(),
        gateways: 3,
        store: StoreChoice::PostgresAt(url),
        pick: Pick::RoundRobin,
    });
    s.create(W);
    let targets: Vec<String> = (0..TARGETS)
        .map(|i| format!("agent:main:subagent:drained{i}"))
        .collect();
    for t in &targets {
        s.create_child(t, W);
    }
    let bases = Arc::new(RwLock::new(
        (0..3)
            .map(|i| s.gateway_base(i).to_string())
            .collect::<Vec<_>>(),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let seen: Arc<Mutex<Vec<(String, i64)>>> = Arc::new(Mutex::new(Vec::new()));
    let cut_drains = Arc::new(AtomicU64::new(0));
    let pick = |bases: &RwLock<Vec<String>>, n: u64| {
        let b = bases.read().unwrap();
        b[(n as usize) % b.len()].clone()
    };
    let mut threads = Vec::new();
    for w in 0..WRITERS {
        let (bases, stop, written, targets) = (
            bases.clone(),
            stop.clone(),
            written.clone(),
            targets.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let mut n = w as u64;
            while !stop.load(Ordering::Relaxed) {
                n += 7;
                let t = &targets[(n as usize) % targets.len()];
                let body = json!({"role": "user", "text": format!("w{w} {n}"), "channel": "slack"})
                    .to_string();
                let path = format!("/v1/sessions/{}/turns", seg(t));
                if let Ok(r) = try_request(&pick(&bases, n), None, "POST", &path, &[], Some(&body))
                {
                    if r.status == 201 {
                        written.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for d in 0..DRAINERS {
        let (bases, stop, seen, cut) = (
            bases.clone(),
            stop.clone(),
            seen.clone(),
            cut_drains.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let mut n = d as u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let path = format!("/v1/sessions/{}/drain", seg(W));
                match try_request(&pick(&bases, n), None, "POST", &path, &[], Some("{}")) {
                    Ok(r) if r.status == 200 => {
                        let mut got = seen.lock().unwrap();
                        for notice in r.body["notices"].as_array().into_iter().flatten() {
                            got.push((
                                notice["targetSessionKey"].as_str().unwrap().to_string(),
                                notice["lastSeen"].as_i64().unwrap(),
                            ));
                        }
                    }
                    // 503 while the store or a gateway is away: nothing committed (checked by
                    // the batch and outage tests); a transport error may have committed.
                    Ok(_) => {}
                    // Refused at connect (the killed gateway's port): it never arrived.
                    Err(e) if e.to_ascii_lowercase().contains("refused") => {}
                    Err(_) => {
                        cut.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let wait_written = |at_least: u64| {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while written.load(Ordering::Relaxed) < at_least {
            assert!(std::time::Instant::now() < end, "writers stalled");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    wait_written(150);
    let leader = (0..3)
        .find(|&i| {
            try_request(s.gateway_base(i), None, "GET", "/health", &[], None)
                .is_ok_and(|r| r.body["cluster"]["leader"] == true)
        })
        .expect("a leader");
    s.kill9_gateway(leader);
    let at_kill = written.load(Ordering::Relaxed);
    wait_written(at_kill + 100);
    s.start_gateway(leader);
    bases.write().unwrap()[leader] = s.gateway_base(leader).to_string();
    let at_restart = written.load(Ordering::Relaxed);
    wait_written(at_restart + 100);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    // Final drains, through each gateway, until quiet.
    for round in 0..12 {
        let d = s.request_to(
            s.gateway_base(round % 3),
            "POST",
            &format!("/v1/sessions/{}/drain", seg(W)),
            &[],
            Some("{}"),
        );
        assert_eq!(d.status, 200, "{}", d.body);
        let notices = d.body["notices"].as_array().unwrap().clone();
        if notices.is_empty() && round >= 3 {
            break;
        }
        let mut got = seen.lock().unwrap();
        for notice in notices {
            got.push((
                notice["targetSessionKey"].as_str().unwrap().to_string(),
                notice["lastSeen"].as_i64().unwrap(),
            ));
        }
    }
    let seen = seen.lock().unwrap().clone();
    let mut unique = std::collections::BTreeSet::new();
    for n in &seen {
        assert!(unique.insert(n.clone()), "notice {n:?} delivered twice");
    }
    let watches = s.get(&format!("/v1/sessions/{}/watches?limit=500", seg(W)));
    for c in watches.body["watches"].as_array().unwrap() {
        let t = c["targetSessionKey"].as_str().unwrap();
        let head = s.get(&format!("/v1/sessions/{}", seg(t))).body["stateVersion"]
            .as_i64()
            .unwrap();
        assert_eq!(
            c["lastSeen"], c["material"],
            "a change of {t} never acknowledged: {c}"
        );
        assert_eq!(
            c["material"].as_i64(),
            Some(head),
            "{t}: material is not the head: {c}"
        );
    }
    eprintln!(
        "many drainers: {} turns acknowledged, {} notices delivered once each, {} drains cut by \
         the kill (their notices may have gone unseen), leader gateway {leader} killed and \
         restarted",
        written.load(Ordering::Relaxed),
        seen.len(),
        cut_drains.load(Ordering::Relaxed)
    );
}
