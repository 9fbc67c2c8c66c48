//! `aware demo`: starts a real gateway on a temporary data dir (test clock, so time-based steps
//! are instant) and tells the story over HTTP, printing each request and what matters in the
//! answer.

use anyhow::{bail, Context, Result};
use aware_gateway::GatewayConfig;
use aware_wire::sessions::{PostedTurn, WatchesPage};
use aware_wire::{DrainAnswer, SessionStatusResult, SessionsSpawnResult, SessionsUnwatchResult};
use serde_json::{json, Value};
use std::time::Duration;

const T0: i64 = 1_767_225_600_000;

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Keep the temporary data directory and print its path.
    #[arg(long)]
    keep: bool,
    /// Port for the demo gateway (default: a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
}

struct Http {
    client: aware_client::Client,
}

impl Http {
    fn call(
        &self,
        method: &str,
        path: &str,
        caller: Option<&str>,
        body: Option<Value>,
    ) -> Result<Value> {
        let shown = body.as_ref().map(|b| format!(" {b}")).unwrap_or_default();
        let who = caller.map(|c| format!("  (as {c})")).unwrap_or_default();
        say!("  → {method} {path}{shown}{who}");
        self.quiet(method, path, caller, body)
    }

    /// [`Http::call`], the answer read into its `aware_wire` type.
    fn typed<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        caller: Option<&str>,
        body: Option<Value>,
    ) -> Result<T> {
        let v = self.call(method, path, caller, body)?;
        serde_json::from_value(v).with_context(|| format!("the answer to {method} {path}"))
    }

    fn quiet(
        &self,
        method: &str,
        path: &str,
        caller: Option<&str>,
        body: Option<Value>,
    ) -> Result<Value> {
        let req = self.client.request(method, path);
        let req = match caller {
            Some(c) => req.as_session(c),
            None => req.operator(),
        };
        match req.json(body.as_ref()) {
            Ok(v) => Ok(v),
            Err(aware_client::ClientError::Status { status, body, .. }) => {
                bail!("{method} {path} answered {status}: {body}")
            }
            Err(e) => bail!("{method} {path}: {e}"),
        }
    }
}

fn say(step: &str) {
    say!("\n== {step}");
}

use crate::client::seg;

pub fn run(args: DemoArgs) -> Result<()> {
    let dir = tempfile::tempdir().context("create a temporary data dir")?;
    let mut config = GatewayConfig::for_data_dir(dir.path());
    config.notify_on_create = false;
    config.test_clock_start = Some(T0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let listener = runtime.block_on(tokio::net::TcpListener::bind(("127.0.0.1", args.port)))?;
    let addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = runtime.spawn(aware_gateway::run(listener, config, async {
        let _ = stop_rx.await;
    }));
    let http = Http {
        client: aware_client::Client::new(&format!("http://{addr}"))?,
    };
    say!(
        "aware demo: a gateway on http://{addr} with its store in {}",
        dir.path().display()
    );
    for _ in 0..200 {
        if http.client.request("GET", "/health").send(None).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let story = tell(&http);
    let _ = stop_tx.send(());
    let _ = runtime.block_on(server);
    if args.keep {
        say!("\ndata kept in {}", dir.keep().display());
    }
    story
}

/// The story, one chapter per step of what a manager and its workers live through.
fn tell(http: &Http) -> Result<()> {
    let manager = "agent:main:main";
    let (worker1, worker2) = spawn_two_workers(http, manager)?;
    human_types(http, &worker1)?;
    let since = drain_once(http, manager)?;
    reconcile(http, manager, &worker1, since)?;
    burst(http, manager, &worker1)?;
    run_times_out(http, manager, &worker2)?;
    unwatch(http, manager, &worker1)
}

fn spawn_two_workers(http: &Http, manager: &str) -> Result<(String, String)> {
    say("A manager session starts and spawns two workers");
    http.call("POST", "/v1/sessions", None, Some(json!({"key": manager})))?;
    let w1: SessionsSpawnResult = http.typed(
        "POST",
        "/v1/tools/sessions_spawn",
        Some(manager),
        Some(json!({"task": "research the failing test", "label": "w1"})),
    )?;
    let w2: SessionsSpawnResult = http.typed(
        "POST",
        "/v1/tools/sessions_spawn",
        Some(manager),
        Some(json!({"task": "write the fix", "label": "w2", "runTimeoutSeconds": 60})),
    )?;
    let (worker1, worker2) = (w1.child_session_key, w2.child_session_key);
    say!("    spawned {worker1}\n    spawned {worker2}");
    let watches: WatchesPage = http.typed(
        "GET",
        &format!("/v1/sessions/{}/watches", seg(manager)),
        None,
        None,
    )?;
    for c in watches.watches {
        say!(
            "    the manager watches {} from version {} (nothing before the spawn ever notifies)",
            c.target_session_key,
            c.last_seen
        );
    }
    Ok((worker1, worker2))
}

fn human_types(http: &Http, worker1: &str) -> Result<()> {
    say("A human types straight into worker 1; the manager does not know yet");
    http.call(
        "POST",
        "/v1/admin/clock",
        None,
        Some(json!({"advanceMs": 1000})),
    )?;
    let t: PostedTurn = http.typed("POST", &format!("/v1/sessions/{}/turns", seg(worker1)), None, Some(json!({"role": "user", "text": "actually, use the staging database", "channel": "slack"})))?;
    let e = t.event.context("a human turn records an event")?;
    say!(
        "    recorded event #{} {}: \"{}\" (the log never holds message text)",
        e.sequence,
        e.kind,
        e.summary
    );
    Ok(())
}

fn drain_once(http: &Http, manager: &str) -> Result<i64> {
    say("The manager's next turn starts with a drain: exactly one notice");
    let d: DrainAnswer = http.typed(
        "POST",
        &format!("/v1/sessions/{}/drain", seg(manager)),
        None,
        None,
    )?;
    say!("    {}", d.prompt);
    let since = d.notices.first().map_or(0, |n| n.last_seen);
    Ok(since)
}

fn reconcile(http: &Http, manager: &str, worker1: &str, since: i64) -> Result<()> {
    say("Before acting, the manager reconciles with session_status changesSince");
    let st: SessionStatusResult = http.typed(
        "POST",
        "/v1/tools/session_status",
        Some(manager),
        Some(json!({"sessionKey": worker1, "changesSince": since})),
    )?;
    let changes = st
        .state_changes
        .context("changesSince answers stateChanges")?;
    say!(
        "    stateVersion {}; historyGap {}",
        st.state_version,
        changes.history_gap
    );
    for e in changes.events {
        say!(
            "    #{} {} by {}: {}",
            e.sequence,
            e.kind,
            e.actor_type,
            e.summary
        );
    }
    Ok(())
}

fn burst(http: &Http, manager: &str, worker1: &str) -> Result<()> {
    say("A burst of 20 more human messages still yields one line");
    say!("  → POST /v1/sessions/{}/turns {{\"role\":\"user\",\"text\":\"note <i>\",\"channel\":\"slack\"}}  × 20", seg(worker1));
    for i in 0..20 {
        http.quiet(
            "POST",
            &format!("/v1/sessions/{}/turns", seg(worker1)),
            None,
            Some(json!({"role": "user", "text": format!("note {i}"), "channel": "slack"})),
        )?;
    }
    let p: DrainAnswer = http.typed(
        "GET",
        &format!("/v1/sessions/{}/pending", seg(manager)),
        None,
        None,
    )?;
    for n in p.notices {
        say!("    {}", n.text);
    }
    let d: DrainAnswer = http.typed(
        "POST",
        &format!("/v1/sessions/{}/drain", seg(manager)),
        None,
        None,
    )?;
    say!("    drained {} notice(s); pendingAfter {}: the burst went on after the notice froze, so exactly one follow-up opens", d.notices.len(), d.pending_after);
    Ok(())
}

fn run_times_out(http: &Http, manager: &str, worker2: &str) -> Result<()> {
    say("Worker 2's run times out: recorded for reconciliation, no notice");
    http.call(
        "POST",
        "/v1/admin/clock",
        None,
        Some(json!({"advanceMs": 61_000})),
    )?;
    let st: SessionStatusResult = http.typed(
        "POST",
        "/v1/tools/session_status",
        Some(manager),
        Some(json!({"sessionKey": worker2, "changesSince": 0})),
    )?;
    for e in st.state_changes.map(|c| c.events).unwrap_or_default() {
        say!("    #{} {}: {}", e.sequence, e.kind, e.summary);
    }
    let p: DrainAnswer = http.typed(
        "GET",
        &format!("/v1/sessions/{}/pending", seg(manager)),
        None,
        None,
    )?;
    let about_w2 = p
        .notices
        .iter()
        .filter(|n| n.target_session_key == worker2)
        .count();
    say!("    notices about worker 2: {about_w2}");
    Ok(())
}

fn unwatch(http: &Http, manager: &str, worker1: &str) -> Result<()> {
    say("The manager stops listening to worker 1");
    let u: SessionsUnwatchResult = http.typed(
        "POST",
        "/v1/tools/sessions_unwatch",
        Some(manager),
        Some(json!({"sessionKey": worker1})),
    )?;
    http.call(
        "POST",
        &format!("/v1/sessions/{}/turns", seg(worker1)),
        None,
        Some(json!({"role": "user", "text": "one more thing", "channel": "slack"})),
    )?;
    let p: DrainAnswer = http.typed(
        "GET",
        &format!("/v1/sessions/{}/pending", seg(manager)),
        None,
        None,
    )?;
    say!(
        "    unwatched: {}; pending notices now: {}",
        u.unwatched,
        p.notices.len()
    );
    Ok(())
}
