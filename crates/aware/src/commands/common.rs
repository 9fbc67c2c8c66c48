//! What the client commands share: the client from flags and config, the caller rule of reads,
//! text from stdin, and the operator's paged reads of a transcript.

use crate::client::{self, seg, Client, Failure};
use crate::context::{self, Conn};
use crate::Common;
use aware_wire::sessions::{Turn, TurnPage};
use serde_json::{json, Value};

/// The client, from flags after the command, flags before it, the environment and client.toml.
pub(super) fn client(common: Common, outer: &Conn, outer_json: bool) -> client::CliResult<Client> {
    let r = context::resolve(common.conn.or(outer), common.timeout)?;
    Client::new(r, common.json || outer_json)
}

/// The client of a read (`list`, `status KEY`, `history`) and of `create` and `reply` (which act
/// on the session named, not as a caller): it acts as the caller only when
/// --session or AWARE_SESSION names one. client.toml's `session` is the default caller of the
/// commands that act (send, spawn, watch, ...), not an identity every read must have: a read as
/// a session the gateway does not know fails, where the operator's read works.
pub(super) fn read_client(
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<Client> {
    let mut r = context::resolve(common.conn.or(outer), common.timeout)?;
    if r.session_from_file {
        r.session = None;
    }
    Client::new(r, common.json || outer_json)
}

/// The text argument, or stdin for `-`.
pub(super) fn text_or_stdin(text: String) -> client::CliResult<String> {
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
pub(super) fn all_turns(c: &Client, key: &str) -> client::CliResult<Vec<Turn>> {
    let mut turns: Vec<Turn> = Vec::new();
    // No `after` on the first page: it starts at the first turn.
    let mut after: Option<i64> = None;
    loop {
        let from = after.map(|a| format!("after={a}&")).unwrap_or_default();
        let (_, page): (Value, TurnPage) = c.call_typed(
            "GET",
            &format!("/v1/sessions/{}/turns?{from}limit=500", seg(key)),
            None::<&()>,
        )?;
        let last = page.turns.last().map(|t| t.index);
        turns.extend(page.turns);
        match last {
            // A page that does not move forward ends the loop, whatever `hasMore` says.
            Some(l) if page.has_more && after.is_none_or(|a| l > a) => after = Some(l),
            _ => return Ok(turns),
        }
    }
}

/// The run id of the newest message another session sent to `key` (a `user` turn with
/// provenance `inter_session` and a run id): what `aware reply` answers without --run-id.
pub(super) fn newest_sent_run(c: &Client, key: &str) -> client::CliResult<String> {
    let turns = all_turns(c, key)?;
    turns
        .iter()
        .rev()
        .find(|t| {
            t.role == "user"
                && t.provenance.get("kind").and_then(Value::as_str) == Some("inter_session")
        })
        .and_then(|t| t.run_id.clone())
        .ok_or_else(|| {
            Failure::Usage(format!(
                "no session has sent a message to {key} (nothing to reply to); give --run-id \
                 RUN_ID to answer a run by its id"
            ))
        })
}

/// `sessions_history`'s answer shape for the operator, from the host route's turns: the newest
/// `limit` (default 50) messages, or `limit` from index `offset`; tool turns only when asked.
pub(super) fn operator_history(
    c: &Client,
    key: &str,
    limit: Option<i64>,
    offset: Option<i64>,
    include_tools: bool,
) -> client::CliResult<(Value, Vec<client::HistoryLine>, bool)> {
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
    let kept: Vec<Turn> = turns
        .into_iter()
        .filter(|t| include_tools || t.role != "tool")
        .collect();
    let limit = limit.unwrap_or(50) as usize;
    let (page, has_more) = match offset {
        Some(o) => {
            let from: Vec<Turn> = kept.into_iter().filter(|t| t.index >= o).collect();
            let more = from.len() > limit;
            (from.into_iter().take(limit).collect::<Vec<_>>(), more)
        }
        None => {
            let skip = kept.len().saturating_sub(limit);
            (kept.into_iter().skip(skip).collect(), false)
        }
    };
    let v =
        json!({"sessionKey": key, "messages": page, "hasMore": has_more, "totalMessages": total});
    Ok((v, page.into_iter().map(Into::into).collect(), has_more))
}
