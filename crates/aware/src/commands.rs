//! The client commands (`status`, `list`, `send`, `spawn`, `turn`, `drain`, `pending`, `watch`,
//! `unwatch`, `history`, `adopt`, `catalog`): each builds its request from the parsed flags,
//! calls the gateway and prints the answer.

use crate::client::{self, out, seg, Client, Failure};
use crate::context::{self, Conn};
use crate::{Command, Common, Provenance, Role};
use serde_json::{json, Value};
use std::time::Duration;

fn put(v: &mut Value, k: &str, x: Option<impl Into<Value>>) {
    if let Some(x) = x {
        v[k] = x.into();
    }
}

/// The client, from flags after the command, flags before it, the environment and client.toml.
fn client(common: Common, outer: &Conn, outer_json: bool) -> client::CliResult<Client> {
    let r = context::resolve(common.conn.or(outer), common.timeout)?;
    Client::new(r, common.json || outer_json)
}

/// The client of a read (`list`, `status KEY`, `history`) and of `create` and `reply` (which act
/// on the session named, not as a caller): it acts as the caller only when
/// --session or AWARE_SESSION names one. client.toml's `session` is the default caller of the
/// commands that act (send, spawn, watch, ...), not an identity every read must have: a read as
/// a session the gateway does not know fails, where the operator's read works.
fn read_client(common: Common, outer: &Conn, outer_json: bool) -> client::CliResult<Client> {
    let mut r = context::resolve(common.conn.or(outer), common.timeout)?;
    if r.session_from_file {
        r.session = None;
    }
    Client::new(r, common.json || outer_json)
}

/// The text argument, or stdin for `-`.
fn text_or_stdin(text: String) -> client::CliResult<String> {
    if text != "-" {
        return Ok(text);
    }
    let mut s = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
        .map_err(|e| Failure::Usage(format!("cannot read stdin: {e}")))?;
    Ok(s)
}

/// Every turn of `key`'s current incarnation, oldest first, read page by page over the host
/// route (the operator has no `sessions_history`).
fn all_turns(c: &Client, key: &str) -> client::CliResult<Vec<Value>> {
    let mut turns = Vec::new();
    // No `after` on the first page: it starts at the first turn.
    let mut after: Option<i64> = None;
    loop {
        let from = after.map(|a| format!("after={a}&")).unwrap_or_default();
        let v = c.call(
            "GET",
            &format!("/v1/sessions/{}/turns?{from}limit=500", seg(key)),
            None,
        )?;
        let page = v["turns"].as_array().cloned().unwrap_or_default();
        let last = page.last().and_then(|t| t["index"].as_i64());
        turns.extend(page);
        match last {
            // A page that does not move forward ends the loop, whatever `hasMore` says.
            Some(l) if v["hasMore"] == true && after.is_none_or(|a| l > a) => after = Some(l),
            _ => return Ok(turns),
        }
    }
}

/// The run id of the newest message another session sent to `key` (a `user` turn with
/// provenance `inter_session` and a run id): what `aware reply` answers without --run-id.
fn newest_sent_run(c: &Client, key: &str) -> client::CliResult<String> {
    let turns = all_turns(c, key)?;
    turns
        .iter()
        .rev()
        .find(|t| t["role"] == "user" && t["provenance"]["kind"] == "inter_session")
        .and_then(|t| t["runId"].as_str())
        .map(str::to_string)
        .ok_or_else(|| {
            Failure::Usage(format!(
                "no session has sent a message to {key} (nothing to reply to); give --run-id \
                 RUN_ID to answer a run by its id"
            ))
        })
}

/// `sessions_history`'s answer shape for the operator, from the host route's turns: the newest
/// `limit` (default 50) messages, or `limit` from index `offset`; tool turns only when asked.
fn operator_history(
    c: &Client,
    key: &str,
    limit: Option<i64>,
    offset: Option<i64>,
    include_tools: bool,
) -> client::CliResult<Value> {
    if let Some(l) = limit.filter(|l| !(1..=10_000).contains(l)) {
        return Err(Failure::Usage(format!(
            "--limit must be between 1 and 10000 (got {l})"
        )));
    }
    if let Some(o) = offset.filter(|o| *o < 0) {
        return Err(Failure::Usage(format!(
            "--offset must be 0 or more (got {o})"
        )));
    }
    let turns = all_turns(c, key)?;
    let total = turns.len();
    let kept: Vec<Value> = turns
        .into_iter()
        .filter(|t| include_tools || t["role"] != "tool")
        .collect();
    let limit = limit.unwrap_or(50) as usize;
    let (page, has_more) = match offset {
        Some(o) => {
            let from: Vec<Value> = kept
                .into_iter()
                .filter(|t| t["index"].as_i64().is_some_and(|i| i >= o))
                .collect();
            let more = from.len() > limit;
            (from.into_iter().take(limit).collect::<Vec<_>>(), more)
        }
        None => {
            let skip = kept.len().saturating_sub(limit);
            (kept.into_iter().skip(skip).collect(), false)
        }
    };
    Ok(json!({"sessionKey": key, "messages": page, "hasMore": has_more, "totalMessages": total}))
}

/// Runs one client command (everything but serve, node, mcp, hook, init, doctor, completions,
/// demo and the benches).
pub(crate) fn run(cmd: Command, outer: &Conn, outer_json: bool) -> client::CliResult<()> {
    match cmd {
        Command::Status {
            key,
            changes_since,
            limit,
            common,
        } => cmd_status(key, changes_since, limit, common, outer, outer_json),
        Command::List {
            kinds,
            limit,
            wide,
            common,
        } => cmd_list(kinds, limit, wide, common, outer, outer_json),
        Command::Send {
            args: positional,
            watch,
            timeout,
            no_wait,
            label,
            conn,
            json,
        } => cmd_send(
            positional, watch, timeout, no_wait, label, conn, json, outer, outer_json,
        ),
        Command::Reply {
            key,
            text,
            run_id,
            common,
        } => cmd_reply(key, text, run_id, common, outer, outer_json),
        Command::Create {
            key,
            parent,
            label,
            kind,
            agent_id,
            common,
        } => cmd_create(
            key, parent, label, kind, agent_id, common, outer, outer_json,
        ),
        Command::Spawn {
            task,
            label,
            child_agent,
            run_timeout,
            common,
        } => cmd_spawn(
            task,
            label,
            child_agent,
            run_timeout,
            common,
            outer,
            outer_json,
        ),
        Command::Turn {
            key,
            text,
            role,
            provenance,
            source,
            channel,
            human_id,
            run_id,
            common,
        } => cmd_turn(
            key, text, role, provenance, source, channel, human_id, run_id, common, outer,
            outer_json,
        ),
        Command::Drain {
            key,
            peek,
            follow,
            common,
        } => cmd_drain(key, peek, follow, common, outer, outer_json),
        Command::Pending { key, common } => cmd_pending(key, common, outer, outer_json),
        Command::Watch {
            target,
            target_agent,
            common,
        } => cmd_watch(target, target_agent, common, outer, outer_json),
        Command::Unwatch {
            target,
            target_agent,
            common,
        } => cmd_unwatch(target, target_agent, common, outer, outer_json),
        Command::History {
            key,
            limit,
            offset,
            include_tools,
            common,
        } => cmd_history(key, limit, offset, include_tools, common, outer, outer_json),
        Command::Adopt {
            thread,
            catalog,
            host,
            into_agent,
            common,
        } => cmd_adopt(thread, catalog, host, into_agent, common, outer, outer_json),
        Command::Catalog {
            catalog,
            host,
            limit,
            common,
        } => cmd_catalog(catalog, host, limit, common, outer, outer_json),
        _ => Ok(()),
    }
}

/// `aware status`.
fn cmd_status(
    key: Option<String>,
    changes_since: Option<i64>,
    limit: Option<i64>,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    // A key to read without --changes-since is a read: client.toml's session does not
    // make it a caller's (a gateway without that session would refuse it).
    let c = if key.is_some() && changes_since.is_none() && limit.is_none() {
        read_client(common, outer, outer_json)?
    } else {
        client(common, outer, outer_json)?
    };
    if c.session().is_none() {
        // Operator read: the session object, like GET /v1/sessions/{key}.
        let Some(key) = key else {
            return Err(Failure::Usage(
                "status needs a KEY, or --session naming the calling session".into(),
            ));
        };
        if changes_since.is_some() || limit.is_some() {
            return Err(Failure::Usage(
                "--changes-since and --limit need --session (the caller whose view is shown)"
                    .into(),
            ));
        }
        let v = c.call("GET", &format!("/v1/sessions/{}", seg(&key)), None)?;
        c.print(&v, client::human_session_object);
        return Ok(());
    }
    let mut args = json!({});
    put(&mut args, "sessionKey", key);
    put(&mut args, "changesSince", changes_since);
    put(&mut args, "limit", limit);
    let v = c.tool("session_status", args, Duration::ZERO)?;
    c.print(&v, client::human_status);
    Ok(())
}

/// `aware list`.
fn cmd_list(
    kinds: Vec<String>,
    limit: Option<i64>,
    wide: bool,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = read_client(common, outer, outer_json)?;
    if c.session().is_none() {
        // Operator read: every agent's sessions. One kind per request is what the route
        // filters on, so several kinds are fetched and merged.
        let mut sessions = Vec::new();
        let kinds_or_all: Vec<Option<String>> = if kinds.is_empty() {
            vec![None]
        } else {
            kinds.into_iter().map(Some).collect()
        };
        for k in kinds_or_all {
            let mut q = vec![];
            if let Some(k) = k {
                q.push(format!("kind={}", seg(&k)));
            }
            if let Some(l) = limit {
                q.push(format!("limit={l}"));
            }
            let path = if q.is_empty() {
                "/v1/sessions".to_string()
            } else {
                format!("/v1/sessions?{}", q.join("&"))
            };
            let v = c.call("GET", &path, None)?;
            sessions.extend(v["sessions"].as_array().cloned().unwrap_or_default());
        }
        let v = json!({ "sessions": sessions });
        c.print(&v, |v| client::human_sessions(v, wide));
        return Ok(());
    }
    let mut args = json!({});
    if !kinds.is_empty() {
        args["kinds"] = json!(kinds);
    }
    put(&mut args, "limit", limit);
    let v = c.tool("sessions_list", args, Duration::ZERO)?;
    c.print(&v, |v| client::human_sessions(v, wide));
    Ok(())
}

/// `aware send`.
// The fields of its `Command` variant, one parameter each, as clap parsed them.
#[allow(clippy::too_many_arguments)]
fn cmd_send(
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
        (Some(l), [message]) => json!({"label": l, "message": message}),
        (None, [target, message]) => json!({"sessionKey": target, "message": message}),
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
    if watch {
        args["watch"] = true.into();
    }
    put(&mut args, "timeoutSeconds", timeout);
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
    let v = c.tool("sessions_send", args, wait)?;
    let failed = v["status"] == "timeout" || v["status"] == "error";
    if c.json || !failed {
        c.print(&v, |v| match v["reply"].as_str() {
            Some(r) => r.to_string(),
            None => format!(
                "{} (run {}): the receiver answers with `aware reply {} TEXT`",
                v["status"].as_str().unwrap_or(""),
                v["runId"].as_str().unwrap_or(""),
                v["sessionKey"].as_str().unwrap_or("KEY"),
            ),
        });
    }
    // Waiting for a reply that did not come is a failure the caller must see.
    if let Some(status @ ("timeout" | "error")) = v["status"].as_str() {
        return Err(Failure::Server(format!(
            "{status}: {} (the message was sent as run {}; the receiver answers with \
                 `aware reply {} TEXT`, and `aware history` shows the reply when it comes)",
            v["error"].as_str().unwrap_or("no reply"),
            v["runId"].as_str().unwrap_or(""),
            v["sessionKey"].as_str().unwrap_or("KEY"),
        )));
    }
    Ok(())
}

/// `aware reply`.
fn cmd_reply(
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
    let body = json!({"role": "assistant", "text": text, "runId": run_id});
    let v = c.call(
        "POST",
        &format!("/v1/sessions/{}/turns", seg(&key)),
        Some(body),
    )?;
    c.print(&v, |v| {
        format!(
            "replied to run {run_id} (turn {} of {key})",
            v["turn"]["index"]
        )
    });
    Ok(())
}

/// `aware create`.
// The fields of its `Command` variant, one parameter each, as clap parsed them.
#[allow(clippy::too_many_arguments)]
fn cmd_create(
    key: String,
    parent: Option<String>,
    label: Option<String>,
    kind: Option<String>,
    agent_id: Option<String>,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    // Not as client.toml's session: `aware create` is how that session comes to exist.
    let c = read_client(common, outer, outer_json)?;
    let mut body = json!({"key": key});
    put(&mut body, "parentSessionKey", parent);
    put(&mut body, "label", label);
    put(&mut body, "kind", kind);
    put(&mut body, "agentId", agent_id);
    let v = c.call("POST", "/v1/sessions", Some(body))?;
    c.print(&v, |v| {
        let s = &v["session"];
        let mut line = format!(
            "{} {} (agent {}, kind {})",
            if v["created"] == true {
                "created"
            } else {
                "already exists, unchanged:"
            },
            s["key"].as_str().unwrap_or(""),
            s["agentId"].as_str().unwrap_or(""),
            s["kind"].as_str().unwrap_or("")
        );
        if let Some(p) = s["parentSessionKey"].as_str() {
            line.push_str(&format!("; {p} watches it"));
        }
        line
    });
    Ok(())
}

/// `aware spawn`.
fn cmd_spawn(
    task: String,
    label: Option<String>,
    child_agent: Option<String>,
    run_timeout: Option<i64>,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = client(common, outer, outer_json)?;
    let mut args = json!({"task": task});
    put(&mut args, "label", label);
    put(&mut args, "agentId", child_agent);
    put(&mut args, "runTimeoutSeconds", run_timeout);
    let v = c.tool("sessions_spawn", args, Duration::ZERO)?;
    c.print(&v, |v| {
        format!(
            "spawned {} (run {})",
            v["childSessionKey"].as_str().unwrap_or(""),
            v["runId"].as_str().unwrap_or("")
        )
    });
    Ok(())
}

/// `aware turn`.
// The fields of its `Command` variant, one parameter each, as clap parsed them.
#[allow(clippy::too_many_arguments)]
fn cmd_turn(
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
    let mut body = json!({"role": role, "text": text});
    if provenance.is_some() || human_id.is_some() || source.is_some() {
        let kind = provenance.unwrap_or(if source.is_some() {
            Provenance::InterSession
        } else {
            Provenance::Human
        });
        let mut p = json!({"kind": kind.as_str()});
        put(&mut p, "humanId", human_id);
        put(&mut p, "sourceSessionKey", source);
        body["provenance"] = p;
    }
    put(&mut body, "channel", channel);
    put(&mut body, "runId", run_id);
    let v = c.call(
        "POST",
        &format!("/v1/sessions/{}/turns", seg(&key)),
        Some(body),
    )?;
    c.print(&v, |v| match v["event"]["sequence"].as_i64() {
        Some(s) => format!("turn {} recorded; event #{s}", v["turn"]["index"]),
        None => format!("turn {} recorded", v["turn"]["index"]),
    });
    Ok(())
}

/// `aware drain`.
fn cmd_drain(
    key: String,
    peek: bool,
    follow: bool,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = client(common, outer, outer_json)?;
    drain(&c, &key, peek, follow)?;
    Ok(())
}

/// `aware pending`.
fn cmd_pending(
    key: String,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = client(common, outer, outer_json)?;
    drain(&c, &key, true, false)?;
    Ok(())
}

/// `aware watch`.
fn cmd_watch(
    target: String,
    target_agent: Option<String>,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = client(common, outer, outer_json)?;
    let watcher = c.need_session("watch")?.to_string();
    let mut body = json!({"target": target});
    put(&mut body, "targetAgentId", target_agent);
    let v = c.call(
        "POST",
        &format!("/v1/sessions/{}/watches", seg(&watcher)),
        Some(body),
    )?;
    c.print(&v, |v| {
        format!(
            "watching {} from version {}",
            v["cursor"]["targetSessionKey"].as_str().unwrap_or(""),
            v["cursor"]["lastSeen"]
        )
    });
    Ok(())
}

/// `aware unwatch`.
fn cmd_unwatch(
    target: String,
    target_agent: Option<String>,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = client(common, outer, outer_json)?;
    let mut args = json!({"sessionKey": target});
    put(&mut args, "agentId", target_agent);
    let v = c.tool("sessions_unwatch", args, Duration::ZERO)?;
    c.print(&v, |v| {
        if v["unwatched"] == true {
            "unwatched".into()
        } else {
            "was not watching".into()
        }
    });
    Ok(())
}

/// `aware history`.
fn cmd_history(
    key: String,
    limit: Option<i64>,
    offset: Option<i64>,
    include_tools: bool,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = read_client(common, outer, outer_json)?;
    let v = if c.session().is_some() {
        let mut args = json!({"sessionKey": key});
        put(&mut args, "limit", limit);
        put(&mut args, "offset", offset);
        if include_tools {
            args["includeTools"] = true.into();
        }
        c.tool("sessions_history", args, Duration::ZERO)?
    } else {
        operator_history(&c, &key, limit, offset, include_tools)?
    };
    c.print(&v, client::human_history);
    Ok(())
}

/// `aware adopt`.
fn cmd_adopt(
    thread: String,
    catalog: String,
    host: String,
    into_agent: Option<String>,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = client(common, outer, outer_json)?;
    let mut body = json!({"catalogId": &catalog, "hostId": &host, "threadId": &thread});
    put(&mut body, "agentId", into_agent);
    let v = c.call("POST", "/v1/catalog/continue", Some(body))?;
    let key = v["sessionKey"].as_str().unwrap_or("").to_string();
    let linked = v["linked"] == true;
    c.print(&v, |v| {
        format!(
            "{} {key}{}",
            if v["created"] == true {
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
fn cmd_catalog(
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
    let v = c.call("GET", &path, None)?;
    c.print(&v, client::human_catalog);
    Ok(())
}

/// drain / pending / drain --follow.
fn drain(c: &Client, key: &str, peek: bool, follow: bool) -> client::CliResult<()> {
    let path = format!(
        "/v1/sessions/{}/{}",
        seg(key),
        if peek { "pending" } else { "drain" }
    );
    let method = if peek { "GET" } else { "POST" };
    let once = |lines: bool| -> client::CliResult<()> {
        let v = c.call(method, &path, None)?;
        if lines && c.json {
            out(&v.to_string());
        } else if lines && v["prompt"].as_str().unwrap_or("").is_empty() {
            // Following: an empty drain after a coalesced wake is not news.
        } else {
            c.print(&v, client::human_drain);
        }
        Ok(())
    };
    if follow {
        // The gaps a new user otherwise takes for a hang, said before the first one.
        eprintln!(
            "aware: following {key} at {} ({} on every wake; Ctrl-C to stop)\n\
             aware: messages and spawns wake at once; changes of watched sessions wake at once, \
             then at most once per 20 s ([wakes] coalesce_secs); a human typing into an adopted \
             session is found within 60 s ([monitor] interval_secs)",
            c.url(),
            if peek { "peeking" } else { "draining" }
        );
    }
    once(follow)?;
    if follow {
        c.follow_wakes(key, || once(true))?;
    }
    Ok(())
}
