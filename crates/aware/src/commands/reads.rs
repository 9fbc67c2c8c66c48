//! The commands that read: status, list, drain and pending (with --follow), history.

use super::common::*;
use crate::client::{self, out, seg, Client, Failure};
use crate::context::Conn;
use crate::Common;
use aware_wire::sessions::SessionPage;
use aware_wire::{
    SessionStatusArgs, SessionStatusResult, SessionsHistoryArgs, SessionsHistoryResult,
    SessionsListArgs, SessionsListResult, Tool,
};
use serde_json::{json, Value};
use std::time::Duration;

/// `aware status`.
pub(super) fn cmd_status(
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
    let args = SessionStatusArgs {
        session_key: key,
        changes_since,
        limit,
        ..Default::default()
    };
    let (v, status) =
        c.tool_typed::<SessionStatusResult>(Tool::SessionStatus, &args, Duration::ZERO)?;
    c.print(&v, |_| client::human_status(&status));
    Ok(())
}

/// `aware list`.
pub(super) fn cmd_list(
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
            let (_, page): (Value, SessionPage) = c.call_typed("GET", &path, None::<&()>)?;
            sessions.extend(page.sessions);
        }
        let v = json!({ "sessions": sessions });
        let lines: Vec<client::SessionLine> = sessions.into_iter().map(Into::into).collect();
        c.print(&v, |_| client::human_sessions(&lines, wide));
        return Ok(());
    }
    let args = SessionsListArgs {
        kinds: (!kinds.is_empty()).then_some(kinds),
        limit,
        ..Default::default()
    };
    let (v, list) =
        c.tool_typed::<SessionsListResult>(Tool::SessionsList, &args, Duration::ZERO)?;
    let lines: Vec<client::SessionLine> = list.sessions.into_iter().map(Into::into).collect();
    c.print(&v, |_| client::human_sessions(&lines, wide));
    Ok(())
}

/// `aware drain`.
pub(super) fn cmd_drain(
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
pub(super) fn cmd_pending(
    key: String,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = client(common, outer, outer_json)?;
    drain(&c, &key, true, false)?;
    Ok(())
}

/// `aware history`.
pub(super) fn cmd_history(
    key: String,
    limit: Option<i64>,
    offset: Option<i64>,
    include_tools: bool,
    common: Common,
    outer: &Conn,
    outer_json: bool,
) -> client::CliResult<()> {
    let c = read_client(common, outer, outer_json)?;
    let (v, lines, has_more) = if c.session().is_some() {
        let args = SessionsHistoryArgs {
            session_key: key,
            limit,
            offset,
            include_tools: include_tools.then_some(true),
            ..Default::default()
        };
        let (v, h) =
            c.tool_typed::<SessionsHistoryResult>(Tool::SessionsHistory, &args, Duration::ZERO)?;
        let lines = h.messages.into_iter().map(Into::into).collect();
        (v, lines, h.has_more)
    } else {
        operator_history(&c, &key, limit, offset, include_tools)?
    };
    c.print(&v, |_| client::human_history(&lines, has_more));
    Ok(())
}

/// drain / pending / drain --follow.
pub(super) fn drain(c: &Client, key: &str, peek: bool, follow: bool) -> client::CliResult<()> {
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
