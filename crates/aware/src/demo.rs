//! `aware demo`: the engine on a temporary data dir, narrated step by step for a newcomer.

use anyhow::{Context, Result};
use aware_core::{SessionKey, SessionRef};
use aware_engine::{CreateSession, Engine, EngineConfig, ManualClock, NewTurn, Session};
use std::sync::Arc;

const T0: i64 = 1_767_225_600_000;

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Keep the temporary data directory and print its path.
    #[arg(long)]
    keep: bool,
}

fn key(s: &str) -> Result<SessionRef> {
    let k = SessionKey::parse(s).with_context(|| format!("demo key {s}"))?;
    let agent = k
        .qualified_agent()
        .context("demo keys are agent-qualified")?;
    Ok(SessionRef { key: k, agent })
}

fn say(step: &str) {
    println!("\n== {step}");
}

pub fn run(args: DemoArgs) -> Result<()> {
    let dir = tempfile::tempdir().context("create a temporary data dir")?;
    let mut config = EngineConfig::new(dir.path().join("state.db"));
    config.notify_on_create = false;
    let clock = Arc::new(ManualClock::new(T0));
    let engine = Engine::open(config, clock.clone())?;
    engine.start()?;
    println!(
        "aware demo: engine on {}",
        dir.path().join("state.db").display()
    );

    let manager = key("agent:main:main")?;
    say("A manager session starts and spawns two workers");
    engine.create_session(CreateSession::new(manager.key.clone()))?;
    let w1 = engine.spawn(
        &manager,
        "research the failing test",
        Some("w1".into()),
        None,
        None,
    )?;
    let w2 = engine.spawn(&manager, "write the fix", Some("w2".into()), None, Some(60))?;
    let worker1 = key(&w1.child_key)?;
    let worker2 = key(&w2.child_key)?;
    println!("spawned {} and {}", w1.child_key, w2.child_key);
    println!("the manager now watches both from their spawn sequence on:");
    for c in engine.watches(&manager)? {
        println!(
            "  cursor {} -> (lastSeen {}, notified {}, material {})",
            c.target_key, c.state.last_seen, c.state.notified, c.state.material
        );
    }

    say("A human types straight into worker 1 (the manager does not know)");
    clock.advance(1000);
    let out = engine.post_turn(
        &worker1,
        NewTurn::user("actually, use the staging database").channel("slack"),
    )?;
    let ev = out
        .event
        .context("a human turn on a parented session is recorded")?;
    println!(
        "recorded event #{} {}: \"{}\" (no message text in the log)",
        ev.sequence, ev.kind, ev.summary
    );

    say("The manager's next turn starts with a drain: exactly one notice");
    let drain = engine.drain(&manager)?;
    println!("{}", drain.prompt);
    let since = drain.notices.first().map_or(0, |n| n.last_seen);

    say("The manager reconciles with session_status changesSince before acting");
    let changes = engine.list_since(&worker1, since, 200)?;
    let status: Session = engine.get_session(&worker1)?;
    println!("state version of worker 1: {}", status.state_version);
    for e in &changes.events {
        println!(
            "  #{} {} by {}: {}",
            e.sequence,
            e.kind,
            e.actor_type.as_str(),
            e.summary
        );
    }
    println!(
        "truncated: {}, historyGap: {}",
        changes.truncated, changes.history_gap
    );

    say("A burst of 20 more human messages still yields one line");
    for i in 0..20 {
        clock.advance(100);
        engine.post_turn(
            &worker1,
            NewTurn::user(format!("note {i}")).channel("slack"),
        )?;
    }
    let pending = engine.peek(&manager)?;
    println!("pending notices: {}", pending.notices.len());
    for n in &pending.notices {
        println!("  {}", n.text);
    }
    let drained = engine.drain(&manager)?;
    println!(
        "drained {} notice(s); {} follow-up(s) remain: the burst went on after the notice froze,\n\
         so exactly one follow-up opens; the ack never skips work the manager has not been shown",
        drained.notices.len(),
        drained.pending_after
    );

    say("Worker 2's run times out: logged for reconciliation, no notice");
    clock.advance(61_000);
    engine.run_timers()?;
    let w2changes = engine.list_since(&worker2, 0, 200)?;
    for e in &w2changes.events {
        println!("  #{} {}: {}", e.sequence, e.kind, e.summary);
    }
    let after = engine.peek(&manager)?;
    println!(
        "notices for the manager about worker 2: {}",
        after
            .notices
            .iter()
            .filter(|n| n.target_key == w2.child_key)
            .count()
    );

    say("The manager stops listening to worker 1");
    let unwatched = engine.unwatch(&manager, &worker1)?;
    engine.post_turn(&worker1, NewTurn::user("one more thing").channel("slack"))?;
    println!(
        "unwatched: {unwatched}; notices about worker 1 afterwards: {}",
        engine
            .peek(&manager)?
            .notices
            .iter()
            .filter(|n| n.target_key == w1.child_key)
            .count()
    );
    engine.close();
    if args.keep {
        let kept = dir.keep();
        println!("\ndata kept in {}", kept.display());
    }
    Ok(())
}
