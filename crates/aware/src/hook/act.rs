//! What each hook event does on the gateway, and what it hands back to the CLI.
//!
//! Every notice handed to the CLI comes from a drain, which acknowledges what it returns in the
//! same write (02 §9): two hooks that run at once (parallel tool calls, several matching hooks)
//! can never both get the same notice, and a notice shown once is never shown again. The cheap
//! path, a `PostToolUse` with nothing pending, is one request.

use super::common::{said, warn, Cli, Http, Output, Target};
use aware_client::hook_input::{Event, HookInput};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Origin of recorded turns (03 §8 step 3).
const ORIGIN: &str = "hook";

pub fn act(
    http: &Http,
    target: &Target,
    cli: Cli,
    event: Event,
    input: &HookInput,
) -> Result<Output, String> {
    // Inside a native subagent (Codex sends `agent_id` on the subagent's own prompt, tool calls
    // and stops, with the parent's session_id): the subagent is not the session's agent, so its
    // prompt is no human turn and the session's notices are not its to take.
    if input.agent_id.is_some()
        && !matches!(
            event,
            Event::SubagentStart | Event::SubagentStop | Event::PreCompact
        )
    {
        return Ok(Output::Nothing);
    }
    match event {
        // PostToolBatch is PostToolUse once per batch of parallel tool calls (Claude Code).
        Event::SessionStart | Event::PostToolUse | Event::PostToolBatch => {
            Ok(context(event, drain_or_create(http, target)?))
        }
        Event::UserPromptSubmit => user_prompt(http, target, cli, input),
        Event::Stop => stop_gate(http, target, input),
        // A compaction's forked summariser is no subagent of the user's: no child session.
        Event::SubagentStart | Event::SubagentStop
            if input.agent_type.as_deref().unwrap_or_default().is_empty() =>
        {
            Ok(Output::Nothing)
        }
        Event::SubagentStart => subagent_start(http, target, input),
        Event::SubagentStop => subagent_stop(http, target, input),
        Event::PreCompact => compacted(http, target, input),
        // The CLI is gone: nothing can be handed to it, and the session's state is kept as it is
        // so the next start (or another reader) finds every pending notice.
        Event::SessionEnd => Ok(Output::Nothing),
    }
}

/// Pending notices as context the CLI adds for the model (`additionalContext`).
fn context(event: Event, prompt: String) -> Output {
    if prompt.is_empty() {
        return Output::Nothing;
    }
    Output::Json(json!({
        "hookSpecificOutput": {"hookEventName": event.name(), "additionalContext": prompt}
    }))
}

/// Drains the session and returns the drain's `prompt`; creates the session when it does not
/// exist yet (a new session has nothing pending, so that costs no second drain).
fn drain_or_create(http: &Http, target: &Target) -> Result<String, String> {
    match http.post(&target.path("drain"), &super::common::drain_body()) {
        Ok(v) => Ok(prompt_of(&v)),
        Err(e) if e.code() == "session_not_found" => {
            create(http, target)?;
            Ok(String::new())
        }
        Err(e) => Err(format!("cannot drain: {}", said(&e))),
    }
}

fn create(http: &Http, target: &Target) -> Result<(), String> {
    let mut body = json!({"key": target.key, "createdVia": "hook"});
    if let Some(a) = &target.agent {
        body["agentId"] = a.clone().into();
    }
    http.post("/v1/sessions", &body)
        .map(|_| ())
        .map_err(|e| format!("cannot create session: {}", said(&e)))
}

fn prompt_of(drained: &Value) -> String {
    aware_wire::DrainAnswer::prompt_of(drained).to_string()
}

/// 03 §8: the prompt is recorded as a human turn, then the session is drained.
fn user_prompt(
    http: &Http,
    target: &Target,
    cli: Cli,
    input: &HookInput,
) -> Result<Output, String> {
    // Claude Code reports a background subagent's completion as a prompt of its own, and the
    // waiting hook wakes an idle Codex with a queued prompt (super::codex_wake); nobody typed
    // either, so neither is a human turn. Newer notices are still handed over.
    if is_task_notification(&input.prompt)
        || (cli == Cli::Codex && super::codex_wake::claim(&target.key, &input.prompt))
    {
        return Ok(match cli {
            Cli::ClaudeCode => match drain_or_create(http, target)? {
                p if p.is_empty() => Output::Nothing,
                p => Output::Text(p),
            },
            Cli::Codex | Cli::Gemini => {
                context(Event::UserPromptSubmit, drain_or_create(http, target)?)
            }
        });
    }
    let turns = target.path("turns");
    let turn = json!({
        "role": "user",
        "text": input.prompt,
        "provenance": {"kind": "human"},
        "channel": cli.channel(),
        "origin": ORIGIN,
    });
    // Post first and create only on a 404: the common case (the session exists) costs one
    // request less than create-then-post.
    let recorded = match http.post(&turns, &turn) {
        Ok(_) => Ok(()),
        Err(e) if e.code() == "session_not_found" => {
            create(http, target)?;
            http.post(&turns, &turn)
                .map(|_| ())
                .map_err(|e| format!("cannot record the prompt: {}", said(&e)))
        }
        // The gateway is down: the prompt is kept and replayed, with the time it was typed,
        // when the gateway answers again; the human hears of the outage once.
        Err(e) if super::spool::retryable(&e) => {
            return Ok(keep_prompt(http, target, cli, turn, &e))
        }
        Err(e) => Err(format!("cannot record the prompt: {}", said(&e))),
    };
    // A prompt the gateway refused (e.g. over the size limit) must not hide the notices that
    // are waiting: they are still drained and handed over, and the refusal is the warning.
    let drained = http
        .post(&target.path("drain"), &super::common::drain_body())
        .map_err(|e| format!("cannot drain: {}", said(&e)))?;
    let prompt = prompt_of(&drained);
    if let Err(m) = recorded {
        warn(&m);
    }
    Ok(match cli {
        // Claude Code adds a UserPromptSubmit hook's plain stdout to the context (as before).
        Cli::ClaudeCode if prompt.is_empty() => Output::Nothing,
        Cli::ClaudeCode => Output::Text(prompt),
        Cli::Codex | Cli::Gemini => context(Event::UserPromptSubmit, prompt),
    })
}

/// Keeps a prompt the gateway could not take (`spool.rs`), stamped with the time it was typed
/// and an idempotency key, so a replay records it once; tells the human of the outage the first
/// time (Claude Code shows a hook's `systemMessage`; Codex gets the warning line).
fn keep_prompt(
    http: &Http,
    target: &Target,
    cli: Cli,
    mut turn: serde_json::Value,
    e: &aware_client::ClientError,
) -> Output {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    turn["occurredAt"] = (now.as_millis() as u64).into();
    turn["idempotencyKey"] =
        format!("hook-prompt-{}-{}", now.as_nanos(), std::process::id()).into();
    let route = target.path("turns");
    let Some(spool) = keep_request(http, target, &[(&route, &turn)], "the prompt", e) else {
        return Output::Nothing;
    };
    if !spool.first_notice_of_outage() {
        return Output::Nothing;
    }
    let msg = format!(
        "aware: the gateway at {} is not answering ({}); your prompts are kept and recorded when \
         it is back (start it with `aware serve`). Notices from other sessions wait until then.",
        http.gw.base(),
        said(e)
    );
    match cli {
        Cli::ClaudeCode => Output::Json(json!({ "systemMessage": msg })),
        // Codex shows the warning line above, and so does Gemini CLI (a hook's stderr when its
        // stdout is empty); one line per hook run.
        Cli::Codex | Cli::Gemini => Output::Nothing,
    }
}

/// Keeps requests the gateway could not take (a prompt, a subagent's start or end, a
/// compaction) for the replay (`spool.rs`), with one warning line; the spool when they were
/// kept. Each is idempotent on replay: a turn has its idempotency key, a session create answers
/// the existing one, a compaction has its operation id, a repeated run start or end is taken as
/// done.
fn keep_request(
    http: &Http,
    target: &Target,
    requests: &[(&str, &serde_json::Value)],
    what: &str,
    e: &aware_client::ClientError,
) -> Option<super::spool::Spool> {
    // One warning line for the hook run, however many requests it keeps.
    let kept = super::spool::Spool::of(http.gw.base(), &target.key).and_then(|spool| {
        requests
            .iter()
            .try_for_each(|(route, body)| spool.put(route, body))
            .map(|()| spool)
    });
    match kept {
        Ok(spool) => {
            warn(&format!(
                "the gateway did not take {what} ({}); it is kept and recorded when the gateway answers",
                said(e)
            ));
            Some(spool)
        }
        Err(m) => {
            warn(&format!(
                "cannot record {what} ({}), nor keep it: {m}",
                said(e)
            ));
            None
        }
    }
}

/// A prompt Claude Code writes itself when a background task ends.
fn is_task_notification(prompt: &str) -> bool {
    prompt.trim_start().starts_with("<task-notification>")
}

/// The stop gate: a notice pending when the agent is about to stop sends it back to work once,
/// with the notice as the reason, so it reconciles before it ends its turn. It never blocks
/// twice in a row (`stop_hook_active`: the CLI is continuing because of a stop hook), so it
/// cannot loop; what arrives after that is for the waiting hook (`--wait`) to deliver.
fn stop_gate(http: &Http, target: &Target, input: &HookInput) -> Result<Output, String> {
    answer_messages(http, target, input);
    if input.stop_hook_active {
        return Ok(Output::Nothing);
    }
    let prompt = drain_or_create(http, target)?;
    if prompt.is_empty() {
        return Ok(Output::Nothing);
    }
    Ok(Output::Json(json!({"decision": "block", "reason": prompt})))
}

/// The text the agent stopped with answers the messages handed over to it (`…/replies`: each
/// message answered once, whichever stop comes first; none open costs one small write). A
/// failure is a warning: the stop itself goes on.
fn answer_messages(http: &Http, target: &Target, input: &HookInput) {
    let Some(text) = input
        .last_assistant_message
        .as_deref()
        .filter(|t| !t.trim().is_empty())
    else {
        return;
    };
    // A turn's text is at most 256 KiB (the gateway's limit); a longer answer is cut on a
    // character boundary, and the sender reads the rest in the transcript.
    const MAX_REPLY_BYTES: usize = 200 * 1024;
    let mut end = text.len().min(MAX_REPLY_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let text = if end < text.len() {
        format!("{} …[cut]", &text[..end])
    } else {
        text.to_string()
    };
    match http.post(&target.path("replies"), &json!({ "text": text })) {
        Ok(_) => {}
        Err(e) if e.code() == "session_not_found" => {}
        Err(e) => warn(&format!("cannot record the reply: {}", said(&e))),
    }
}

/// The child session of a native subagent: `agent:<agent>:subagent:claude-<agent_id>`.
fn child(target: &Target, agent_id: &str) -> Target {
    let agent = target
        .key
        .strip_prefix("agent:")
        .and_then(|r| r.split(':').next())
        .or(target.agent.as_deref())
        .unwrap_or("main")
        .to_string();
    Target {
        key: format!("agent:{agent}:subagent:claude-{}", safe_id(agent_id)),
        agent: None,
    }
}

/// `agent_id` as it is when it is a short run of `[A-Za-z0-9._-]` (so it can be read in a key
/// and a run id), else the first 32 hex digits of its SHA-256.
fn safe_id(id: &str) -> String {
    let plain = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if plain {
        id.to_string()
    } else {
        aware_core::hex::lower(&Sha256::digest(id.as_bytes()))[..32].to_string()
    }
}

fn run_id(agent_id: &str) -> String {
    format!("claude-{}", safe_id(agent_id))
}

/// A native subagent becomes a child session of the hook's session (`child_spawned` seeds the
/// parent's cursor, 02 §4) with a run that its `SubagentStop` ends.
fn subagent_start(http: &Http, target: &Target, input: &HookInput) -> Result<Output, String> {
    let id = input.agent_id.as_deref().unwrap_or_default();
    let kid = child(target, id);
    let body = json!({"key": kid.key, "parentSessionKey": target.key, "createdVia": "hook"});
    match http.post("/v1/sessions", &body) {
        Ok(_) => {}
        // The parent itself is new: create it, then the child.
        Err(e) if e.code() == "session_not_found" => {
            create(http, target)?;
            http.post("/v1/sessions", &body)
                .map_err(|e| format!("cannot create the subagent's session: {}", said(&e)))?;
        }
        // The gateway is down: both requests are kept, in order, for when it answers.
        Err(e) if super::spool::retryable(&e) => {
            let run = json!({"runId": run_id(id)});
            let runs = kid.path("runs");
            keep_request(
                http,
                target,
                &[("/v1/sessions", &body), (&runs, &run)],
                "the subagent's start",
                &e,
            );
            return Ok(Output::Nothing);
        }
        Err(e) => {
            return Err(format!(
                "cannot create the subagent's session: {}",
                said(&e)
            ))
        }
    }
    let run = json!({"runId": run_id(id)});
    match http.post(&kid.path("runs"), &run) {
        Ok(_) => Ok(Output::Nothing),
        // A repeated start (the same subagent resumed) keeps the run it has.
        Err(e) if e.code() == "run_active" || e.code() == "run_conflict" => Ok(Output::Nothing),
        Err(e) if super::spool::retryable(&e) => {
            let runs = kid.path("runs");
            keep_request(http, target, &[(&runs, &run)], "the subagent's run", &e);
            Ok(Output::Nothing)
        }
        Err(e) => Err(format!("cannot start the subagent's run: {}", said(&e))),
    }
}

/// Ends the subagent's run (`run_completed` on its session), then gates its stop like `Stop`
/// does for the main session, on the child's own notices.
fn subagent_stop(http: &Http, target: &Target, input: &HookInput) -> Result<Output, String> {
    let id = input.agent_id.as_deref().unwrap_or_default();
    let kid = child(target, id);
    let end = kid.path(&format!("runs/{}/end", crate::client::seg(&run_id(id))));
    match http.post(&end, &json!({"outcome": "ok"})) {
        Ok(_) => {}
        // Started before aware was set up (or its start was lost): nothing to end.
        Err(e) if e.code() == "run_not_found" || e.code() == "session_not_found" => {
            return Ok(Output::Nothing)
        }
        // Already ended (a repeated stop).
        Err(e) if e.code() == "run_conflict" => {}
        // Kept for when the gateway answers; nothing can be handed over now.
        Err(e) if super::spool::retryable(&e) => {
            let body = json!({"outcome": "ok"});
            keep_request(http, target, &[(&end, &body)], "the subagent's end", &e);
            return Ok(Output::Nothing);
        }
        Err(e) => return Err(format!("cannot end the subagent's run: {}", said(&e))),
    }
    stop_gate(http, &kid, input)
}

/// `PreCompact` records `compacted` (03 §4.6). The operation id is the session, the transcript
/// and its length at that moment: one id per compaction, the same id for a repeated delivery.
fn compacted(http: &Http, target: &Target, input: &HookInput) -> Result<Output, String> {
    let mut h = Sha256::new();
    h.update(input.session_id.as_deref().unwrap_or_default().as_bytes());
    h.update([0]);
    if let Some(p) = &input.transcript_path {
        h.update(p.as_bytes());
        h.update([0]);
        let len = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        h.update(len.to_le_bytes());
    }
    let op = format!("compact-{}", &aware_core::hex::lower(&h.finalize())[..32]);
    let body = json!({"operationId": op, "summary": format!("[compacted: {}]", input.trigger.as_deref().unwrap_or("auto"))});
    match http.post(&target.path("compaction"), &body) {
        Ok(_) => Ok(Output::Nothing),
        Err(e) if e.code() == "session_not_found" => {
            create(http, target)?;
            http.post(&target.path("compaction"), &body)
                .map(|_| Output::Nothing)
                .map_err(|e| format!("cannot record the compaction: {}", said(&e)))
        }
        Err(e) if super::spool::retryable(&e) => {
            let route = target.path("compaction");
            keep_request(http, target, &[(&route, &body)], "the compaction", &e);
            Ok(Output::Nothing)
        }
        Err(e) => Err(format!("cannot record the compaction: {}", said(&e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subagent_ids_stay_readable_or_are_hashed() {
        assert_eq!(safe_id("a1b2c3"), "a1b2c3");
        assert_eq!(safe_id("x/y").len(), 32);
        assert_eq!(safe_id("").len(), 32);
        let t = Target {
            key: "agent:ops:project:x".into(),
            agent: None,
        };
        assert_eq!(child(&t, "a1").key, "agent:ops:subagent:claude-a1");
    }
}
