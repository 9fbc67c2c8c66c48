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

/// Runs one client command (everything but serve, node, mcp, hook, init, doctor, completions,
/// demo and the benches).
pub(crate) fn run(cmd: Command, outer: &Conn, outer_json: bool) -> client::CliResult<()> {
    match cmd {
        Command::Status {
            key,
            changes_since,
            limit,
            common,
        } => {
            let c = client(common, outer, outer_json)?;
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
        }
        Command::List {
            kinds,
            limit,
            common,
        } => {
            let c = client(common, outer, outer_json)?;
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
                c.print(&v, client::human_sessions);
                return Ok(());
            }
            let mut args = json!({});
            if !kinds.is_empty() {
                args["kinds"] = json!(kinds);
            }
            put(&mut args, "limit", limit);
            let v = c.tool("sessions_list", args, Duration::ZERO)?;
            c.print(&v, client::human_sessions);
        }
        Command::Send {
            args: positional,
            watch,
            timeout,
            label,
            conn,
            json,
        } => {
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
            let wait = Duration::from_secs(timeout.unwrap_or(30).clamp(0, 600) as u64);
            let v = c.tool("sessions_send", args, wait)?;
            let failed = v["status"] == "timeout" || v["status"] == "error";
            if c.json || !failed {
                c.print(&v, |v| match v["reply"].as_str() {
                    Some(r) => r.to_string(),
                    None => format!(
                        "{} (run {})",
                        v["status"].as_str().unwrap_or(""),
                        v["runId"].as_str().unwrap_or("")
                    ),
                });
            }
            // Waiting for a reply that did not come is a failure the caller must see.
            if let Some(status @ ("timeout" | "error")) = v["status"].as_str() {
                return Err(Failure::Server(format!(
                    "{status}: {} (the message was sent)",
                    v["error"].as_str().unwrap_or("no reply")
                )));
            }
        }
        Command::Spawn {
            task,
            label,
            child_agent,
            run_timeout,
            common,
        } => {
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
        }
        Command::Turn {
            key,
            text,
            role,
            provenance,
            source,
            channel,
            human_id,
            common,
        } => {
            let c = client(common, outer, outer_json)?;
            let text = if text == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                    .map_err(|e| Failure::Usage(format!("cannot read stdin: {e}")))?;
                s
            } else {
                text
            };
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
            let v = c.call(
                "POST",
                &format!("/v1/sessions/{}/turns", seg(&key)),
                Some(body),
            )?;
            c.print(&v, |v| match v["event"]["sequence"].as_i64() {
                Some(s) => format!("turn {} recorded; event #{s}", v["turn"]["index"]),
                None => format!("turn {} recorded", v["turn"]["index"]),
            });
        }
        Command::Drain {
            key,
            peek,
            follow,
            common,
        } => {
            let c = client(common, outer, outer_json)?;
            drain(&c, &key, peek, follow)?;
        }
        Command::Pending { key, common } => {
            let c = client(common, outer, outer_json)?;
            drain(&c, &key, true, false)?;
        }
        Command::Watch {
            target,
            target_agent,
            common,
        } => {
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
        }
        Command::Unwatch {
            target,
            target_agent,
            common,
        } => {
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
        }
        Command::History {
            key,
            limit,
            offset,
            include_tools,
            common,
        } => {
            let c = client(common, outer, outer_json)?;
            let mut args = json!({"sessionKey": key});
            put(&mut args, "limit", limit);
            put(&mut args, "offset", offset);
            if include_tools {
                args["includeTools"] = true.into();
            }
            let v = c.tool("sessions_history", args, Duration::ZERO)?;
            c.print(&v, |v| {
                let lines: Vec<String> = v["messages"]
                    .as_array()
                    .map(|m| {
                        m.iter()
                            .map(|x| {
                                format!(
                                    "[{}] {}: {}",
                                    x["index"],
                                    x["role"].as_str().unwrap_or(""),
                                    x["text"].as_str().unwrap_or("")
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if lines.is_empty() {
                    "no messages".into()
                } else {
                    lines.join("\n")
                }
            });
        }
        Command::Adopt {
            thread,
            catalog,
            host,
            into_agent,
            common,
        } => {
            let c = client(common, outer, outer_json)?;
            let mut body = json!({"catalogId": catalog, "hostId": host, "threadId": thread});
            put(&mut body, "agentId", into_agent);
            let v = c.call("POST", "/v1/catalog/continue", Some(body))?;
            c.print(&v, |v| {
                format!(
                    "{} {} ({})",
                    if v["created"] == true {
                        "adopted as"
                    } else {
                        "already adopted as"
                    },
                    v["sessionKey"].as_str().unwrap_or(""),
                    if v["linked"] == true {
                        "linked: new upstream prompts are watched"
                    } else {
                        "not linked"
                    }
                )
            });
        }
        Command::Catalog {
            catalog,
            host,
            limit,
            common,
        } => {
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
        }
        _ => {}
    }
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
        eprintln!(
            "aware: following {key} at {} ({} on every wake; Ctrl-C to stop)",
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
