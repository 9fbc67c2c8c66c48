//! The commands that act: send, reply, create, spawn, turn, watch, unwatch, adopt, catalog.

use super::common::*;
use crate::client::{self, seg, Failure};
use crate::context::Conn;
use crate::{Common, Provenance, Role};
use aware_wire::sessions::{
    CreateSessionArgs, CreatedSession, PostTurnArgs, PostedTurn, WatchArgs, Watched,
};
use aware_wire::tools::SendStatus;
use aware_wire::{
    SessionsSendArgs, SessionsSendResult, SessionsSpawnArgs, SessionsSpawnResult,
    SessionsUnwatchArgs, SessionsUnwatchResult, Tool,
};
use std::time::Duration;

/// `aware send`.
// The fields of its `Command` variant, one parameter each, as clap parsed them.
#[allow(clippy::too_many_arguments)]
pub(super) fn cmd_send(
    positional: Vec<String>,
    watch: bool,
    timeout: Option<i64>,
    no_wait: bool,
    label: Option<String>,
    conn: Conn,
    json: bool,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let timeout = if no_wait { Some(0) } else { timeout };
    let c = client(
        Common {
            conn,
            json,
            timeout: None,
        },
        outer,
        outer_json,
    )?;
    let mut args = match (&label, positional.as_slice()) {
        (Some(l), [message]) => SessionsSendArgs {
            label: Some(l.clone()),
            message: message.clone(),
            ..Default::default()
        },
        (None, [target, message]) => SessionsSendArgs {
            session_key: Some(target.clone()),
            message: message.clone(),
            ..Default::default()
        },
        (Some(_), _) => {
            return Err(Failure::Usage(
                "with --label give only the MESSAGE (the label names the target)".into(),
            ))
        }
        (None, _) => {
            return Err(Failure::Usage(
                "send needs TARGET and MESSAGE (or --label LABEL and MESSAGE)".into(),
            ))
        }
    };
    args.watch = watch.then_some(true);
    args.timeout_seconds = timeout;
    // The tool waits 30 s by default (03 §6).
    let secs = timeout.unwrap_or(30).clamp(0, 600);
    let wait = Duration::from_secs(secs as u64);
    // Say what the silence is before it starts: a wait with no word looks like a hang.
    let target = match (&label, positional.first()) {
        (Some(l), _) => format!("the session labelled {l:?}"),
        (None, Some(k)) => k.clone(),
        (None, None) => String::new(),
    };
    if secs > 0 {
        eprintln!(
            "aware: sent to {target}; waiting up to {secs} s for its reply \
                 (the receiver answers with `aware reply KEY TEXT`; --no-wait returns at once)"
        );
    }
    let (v, sent) = c.tool_typed::<SessionsSendResult>(Tool::SessionsSend, &args, wait)?;
    let failed = matches!(sent.status, SendStatus::Timeout | SendStatus::Error);
    if c.json || !failed {
        c.print(&v, |_| match &sent.reply {
            Some(r) => r.clone(),
            None => format!(
                "{} (run {}): the receiver answers with `aware reply {} TEXT`",
                status_word(sent.status),
                sent.run_id,
                sent.session_key,
            ),
        });
    }
    // Waiting for a reply that did not come is a failure the caller must see.
    if failed {
        return Err(Failure::Server(format!(
            "{}: {} (the message was sent as run {}; the receiver answers with \
                 `aware reply {} TEXT`, and `aware history` shows the reply when it comes)",
            status_word(sent.status),
            sent.error.as_deref().unwrap_or("no reply"),
            sent.run_id,
            sent.session_key,
        )));
    }
    Ok(())
}

/// The word the gateway sends for a status.
fn status_word(s: SendStatus) -> &'static str {
    match s {
        SendStatus::Accepted => "accepted",
        SendStatus::Ok => "ok",
        SendStatus::Timeout => "timeout",
        SendStatus::Error => "error",
    }
}

/// `aware reply`.
pub(super) fn cmd_reply(
    key: String,
    text: String,
    run_id: Option<String>,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = read_client(common, outer, outer_json)?;
    let text = text_or_stdin(text)?;
    let run_id = match run_id {
        Some(r) => r,
        None => newest_sent_run(&c, &key)?,
    };
    let args = PostTurnArgs {
        role: "assistant".into(),
        text,
        run_id: Some(run_id.clone()),
        ..Default::default()
    };
    let (v, posted): (_, PostedTurn) = c.call_typed(
        "POST",
        &format!("/v1/sessions/{}/turns", seg(&key)),
        Some(&args),
    )?;
    c.print(&v, |_| {
        format!(
            "replied to run {run_id} (turn {} of {key})",
            posted.turn.index
        )
    });
    Ok(())
}

/// `aware delete`.
pub(super) fn cmd_delete(
    key: String,
    yes: bool,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    if !yes {
        return Err(client::Failure::Usage(format!(
            "aware delete removes {key} with its turns, runs, event log and watches, and nothing \
             brings them back; run it again with --yes"
        )));
    }
    let c = read_client(common, outer, outer_json)?;
    let v = c.call("DELETE", &format!("/v1/sessions/{}", seg(&key)), None)?;
    c.print(&v, |_| format!("deleted {key}"));
    Ok(())
}

/// `aware create`.
// The fields of its `Command` variant, one parameter each, as clap parsed them.
#[allow(clippy::too_many_arguments)]
pub(super) fn cmd_create(
    key: String,
    parent: Option<String>,
    label: Option<String>,
    kind: Option<String>,
    agent_id: Option<String>,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    // A bare key is legal but rarely meant: `aware create "not a key"` made a session of that
    // name in the default agent, which every later typo then missed. A bare key needs its agent
    // said with --agent-id.
    let qualified = key
        .trim()
        .get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case("agent:"));
    if !qualified && agent_id.is_none() {
        return Err(client::Failure::Usage(format!(
            "{key:?} is not an agent-qualified session key: keys read agent:<agentId>:<rest> \
             (agentId {}), e.g. agent:main:reviewer; a bare key needs its agent with --agent-id",
            aware_core::key::AGENT_ID_PATTERN
        )));
    }
    // Not as client.toml's session: `aware create` is how that session comes to exist.
    let c = read_client(common, outer, outer_json)?;
    let args = CreateSessionArgs {
        key,
        parent_session_key: parent,
        label,
        kind,
        agent_id,
    };
    let (v, created): (_, CreatedSession) = c.call_typed("POST", "/v1/sessions", Some(&args))?;
    c.print(&v, |_| {
        let s = &created.session;
        let mut line = format!(
            "{} {} (agent {}, kind {})",
            if created.created {
                "created"
            } else {
                "already exists, unchanged:"
            },
            s.key,
            s.agent_id,
            s.kind
        );
        if let Some(p) = &s.parent_session_key {
            line.push_str(&format!("; {p} watches it"));
        }
        line
    });
    Ok(())
}

/// `aware spawn`.
pub(super) fn cmd_spawn(
    task: String,
    label: Option<String>,
    child_agent: Option<String>,
    run_timeout: Option<i64>,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = client(common, outer, outer_json)?;
    let args = SessionsSpawnArgs {
        task,
        label,
        agent_id: child_agent,
        run_timeout_seconds: run_timeout,
    };
    let (v, spawned) =
        c.tool_typed::<SessionsSpawnResult>(Tool::SessionsSpawn, &args, Duration::ZERO)?;
    c.print(&v, |_| {
        format!(
            "spawned {} (run {})",
            spawned.child_session_key, spawned.run_id
        )
    });
    Ok(())
}

/// `aware turn`.
// The fields of its `Command` variant, one parameter each, as clap parsed them.
#[allow(clippy::too_many_arguments)]
pub(super) fn cmd_turn(
    key: String,
    text: String,
    role: Role,
    provenance: Option<Provenance>,
    source: Option<String>,
    channel: Option<String>,
    human_id: Option<String>,
    run_id: Option<String>,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = client(common, outer, outer_json)?;
    let text = text_or_stdin(text)?;
    let role = match role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let provenance = (provenance.is_some() || human_id.is_some() || source.is_some()).then(|| {
        let kind = provenance.unwrap_or(if source.is_some() {
            Provenance::InterSession
        } else {
            Provenance::Human
        });
        let mut p = serde_json::Map::new();
        p.insert("kind".into(), kind.as_str().into());
        if let Some(h) = human_id {
            p.insert("humanId".into(), h.into());
        }
        if let Some(s) = source {
            p.insert("sourceSessionKey".into(), s.into());
        }
        p
    });
    let args = PostTurnArgs {
        role: role.into(),
        text,
        provenance,
        channel,
        run_id,
    };
    let (v, posted): (_, PostedTurn) = c.call_typed(
        "POST",
        &format!("/v1/sessions/{}/turns", seg(&key)),
        Some(&args),
    )?;
    c.print(&v, |_| match &posted.event {
        Some(e) => format!("turn {} recorded; event #{}", posted.turn.index, e.sequence),
        None => format!("turn {} recorded", posted.turn.index),
    });
    Ok(())
}

/// `aware watch`.
pub(super) fn cmd_watch(
    target: String,
    target_agent: Option<String>,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = client(common, outer, outer_json)?;
    let watcher = c.need_session("watch")?.to_string();
    let args = WatchArgs {
        target,
        target_agent_id: target_agent,
    };
    let (v, watched): (_, Watched) = c.call_typed(
        "POST",
        &format!("/v1/sessions/{}/watches", seg(&watcher)),
        Some(&args),
    )?;
    c.print(&v, |_| {
        format!(
            "watching {} from version {}",
            watched.cursor.target_session_key, watched.cursor.last_seen
        )
    });
    Ok(())
}

/// `aware unwatch`.
pub(super) fn cmd_unwatch(
    target: String,
    target_agent: Option<String>,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = client(common, outer, outer_json)?;
    let args = SessionsUnwatchArgs {
        session_key: target,
        agent_id: target_agent,
    };
    let (v, done) =
        c.tool_typed::<SessionsUnwatchResult>(Tool::SessionsUnwatch, &args, Duration::ZERO)?;
    c.print(&v, |_| {
        if done.unwatched {
            "unwatched".into()
        } else {
            "was not watching".into()
        }
    });
    Ok(())
}

/// `aware adopt`.
pub(super) fn cmd_adopt(
    thread: String,
    catalog: String,
    host: String,
    into_agent: Option<String>,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = client(common, outer, outer_json)?;
    let args = aware_wire::catalog::ContinueArgs {
        catalog_id: catalog.clone(),
        host_id: host.clone(),
        thread_id: thread.clone(),
        agent_id: into_agent,
    };
    let (v, adopted): (_, aware_wire::catalog::Adopted) =
        c.call_typed("POST", "/v1/catalog/continue", Some(&args))?;
    let key = adopted.session_key;
    let linked = adopted.linked;
    c.print(&v, |_| {
        format!(
            "{} {key}{}",
            if adopted.created {
                "adopted as"
            } else {
                // The key existed: adopted before, or made by the hook or `aware create`
                // and adopted now (04 §3 step 5).
                "adopted the existing session"
            },
            if linked {
                " (linked: new prompts typed into the thread are noticed)"
            } else {
                ""
            }
        )
    });
    // The point of adopting is to notice a human typing into the thread; without a link
    // nothing is watched, which the user must not mistake for success.
    if !linked {
        return Err(Failure::Server(format!(
            "{key} is not linked to {catalog} thread {thread:?} on {host}: its transcript \
                 was not found, so nothing typed there is noticed (check the id with `aware \
                 catalog --catalog {catalog} --host {host}`)"
        )));
    }
    Ok(())
}

/// `aware catalog`.
pub(super) fn cmd_catalog(
    catalog: String,
    host: String,
    limit: Option<i64>,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = client(common, outer, outer_json)?;
    let mut path = format!(
        "/v1/catalog?catalogId={}&hostId={}",
        seg(&catalog),
        seg(&host)
    );
    if let Some(l) = limit {
        path.push_str(&format!("&limit={l}"));
    }
    let (v, page) = c.call_typed("GET", &path, None::<&()>)?;
    c.print(&v, |_| client::human_catalog(&page));
    Ok(())
}
