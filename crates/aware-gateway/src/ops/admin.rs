//! Test-mode routes (03 §9): clock, prune, events, faults. 404 outside test mode.

use crate::http::body::Obj;
use crate::http::error::{ApiError, ApiResult};
use crate::http::request::{parse_agent, parse_key, resolve_ref, Req};
use crate::http::routes::AdminOp;
use crate::state::{blocking, run_monitor};
use crate::wire::{self, answers};
use aware_core::{ActorType, EventKind};
use aware_engine::{AppendOutcome, AppendRequest, Clock};
use axum::response::Response;

/// Only routed in test mode (`routes::parse`), where the test clock exists.
#[expect(clippy::too_many_lines, reason = "one arm per test-mode admin route")]
pub(crate) async fn handle(req: Req, op: AdminOp) -> ApiResult<Response> {
    let Some(clock) = req.state.test_clock.clone() else {
        return Err(ApiError::not_found(
            "not_found",
            "no such route (test mode is off)",
        ));
    };
    let engine = req.state.engine()?;
    let mut b = Obj::parse(&req.body, true)?;
    match op {
        AdminOp::Clock => {
            // Later time arithmetic (timers, expiry) must not overflow, so the clock stays
            // within RFC 3339 years (up to 9999-12-31) whichever way it is moved.
            const MAX_CLOCK_MS: i64 = 253_402_300_799_999;
            let now = b.opt_int(
                "now",
                0..=MAX_CLOCK_MS,
                "now must be an integer from 0 to 253402300799999 (epoch milliseconds, at most 9999-12-31T23:59:59.999Z)",
            )?;
            let adv = b.opt_int(
                "advanceMs",
                0..=i64::MAX,
                "advanceMs must be a non-negative integer",
            )?;
            b.finish()?;
            let serial = req.state.clock_lock.lock().await;
            let t = match (now, adv) {
                (Some(t), None) => clock.set(t).map_err(|e| ApiError::invalid(e.to_string()))?,
                (None, Some(a)) => {
                    match clock.now_ms().checked_add(a) {
                        Some(t) if t <= MAX_CLOCK_MS => clock.advance(a),
                        _ => {
                            return Err(ApiError::invalid(format!(
                                "advanceMs {a} would move the clock past {MAX_CLOCK_MS} (9999-12-31T23:59:59.999Z)"
                            )))
                        }
                    }
                }
                _ => return Err(ApiError::invalid("give exactly one of now and advanceMs")),
            };
            blocking(move || Ok(engine.run_timers()?)).await?;
            // The monitor's tick runs outside the clock lock: its single flight (04 §7) is its
            // own, so a clock move while a tick is still busy finds that tick running and skips
            // the one it made due (counted), as a wall-clock tick would.
            drop(serial);
            run_monitor(&req.state).await;
            wire::ok(answers::clock(t))
        }
        AdminOp::Prune => {
            b.finish()?;
            let r = blocking(move || Ok(engine.prune_pass()))
                .await?
                .unwrap_or_default();
            wire::ok(answers::pruned(&r))
        }
        AdminOp::Faults => {
            let fail_appends = b.opt_bool("failAppends")?;
            let fail_for = b.opt_str("failAppendsFor")?;
            let fail_reads = b.opt_bool("failReads")?;
            let fail_links = b.opt_bool("failLinkSettles")?;
            let stall_writer = b.opt_bool("stallWriter")?;
            let fail_commits = b.opt_int(
                "failCommits",
                0..=i64::from(u32::MAX),
                "failCommits must be a non-negative integer",
            )?;
            let stall_checks = b.opt_bool("stallProviderChecks")?;
            let fail_checks = b.opt_bool("failProviderChecks")?;
            b.finish()?;
            let f = engine.store_faults();
            f.clear();
            f.set_fail_appends(fail_appends.unwrap_or(false));
            f.set_fail_appends_for(
                fail_for
                    .map(|k| parse_key(&k).map(|k| k.as_str().to_string()))
                    .transpose()?,
            );
            f.set_fail_reads(fail_reads.unwrap_or(false));
            f.set_fail_link_settles(fail_links.unwrap_or(false));
            f.set_stall_writer(stall_writer.unwrap_or(false));
            f.fail_next_commits(fail_commits.map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)));
            f.set_stall_provider_checks(stall_checks.unwrap_or(false));
            f.set_fail_provider_checks(fail_checks.unwrap_or(false));
            wire::ok(answers::empty())
        }
        AdminOp::Events => {
            let key = parse_key(&b.req_str("sessionKey")?)?;
            let agent = b
                .opt_str("agentId")?
                .map(|a| parse_agent("agentId", &a))
                .transpose()?;
            let kind = b.req_str("kind")?;
            let kind = EventKind::parse(&kind).ok_or_else(|| {
                ApiError::invalid(format!(
                    "kind must be one of {}",
                    EventKind::ALL.map(|k| k.as_str()).join(", ")
                ))
            })?;
            let actor = b.req_str("actorType")?;
            let actor = ActorType::parse(&actor).ok_or_else(|| {
                ApiError::invalid("actorType must be one of human, agent, system")
            })?;
            let session = resolve_ref(&req, &key, agent.as_ref(), None)?;
            let mut a = AppendRequest::new(session, kind, actor);
            a.actor_id = b.opt_str("actorId")?.map(|id| {
                aware_core::SessionKey::parse(&id)
                    .map(|k| k.as_str().to_string())
                    .unwrap_or(id)
            });
            a.run_id = b.opt_str("runId")?;
            a.dedupe_key = b.opt_str("dedupeKey")?;
            if let Some(s) = b.opt_str("summary")? {
                a.summary = s;
            }
            a.payload = b.opt_value("payload")?;
            a.occurred_at = b.opt_int(
                "occurredAt",
                0..=i64::MAX,
                "occurredAt must be a non-negative integer",
            )?;
            for w in b.opt_array("watchers")?.unwrap_or_default() {
                a.watchers.push(
                    w.as_str()
                        .ok_or_else(|| {
                            ApiError::invalid("watchers must be an array of session keys")
                        })?
                        .to_string(),
                );
            }
            b.finish()?;
            match blocking(move || Ok(engine.append(a)?)).await? {
                AppendOutcome::Recorded(e) => wire::created(answers::appended(&e, false)),
                AppendOutcome::Deduped(e) => wire::ok(answers::appended(&e, true)),
                AppendOutcome::NotRecorded(_) => wire::ok(answers::not_recorded()),
            }
        }
    }
}
