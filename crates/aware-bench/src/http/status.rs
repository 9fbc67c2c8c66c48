//! Workload 1: session_status changesSince, one keep-alive client.

use super::raw::RawConn;
use super::setup::*;
use crate::raw_sqlite::count_rows;
use crate::report::*;
use crate::util::*;
use anyhow::{anyhow, bail, Context, Result};
use aware_core::SessionRef;
use aware_engine::{CreateSession, Engine, NewTurn};
use aware_gateway::GatewayConfig;
use aware_store_sqlite::Durability;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// One child stream of workload 1: its parent (the caller), its key, the sequence of its
/// `child_spawned` event (the `changesSince` that returns exactly the 50 human turns).
pub(crate) struct Stream {
    /// Position in the list (the raw client's prebuilt request of this stream).
    index: usize,
    parent: SessionRef,
    child: SessionRef,
    since: i64,
    /// `session_status` with `changesSince` (the measured call).
    body: String,
    /// `session_status` without `changesSince`: the same call minus the page.
    bare_body: String,
}

#[expect(
    clippy::too_many_lines,
    reason = "one workload: its set-up, the timed loop and its report, read top to bottom"
)]
pub(crate) fn w1(plan: &Plan, calls: u64) -> Result<Vec<Outcome>> {
    let durability = Durability::Normal;
    let children = (W1_EVENT_ROWS / plan.scale / (W1_TURNS_PER_CHILD + 1)).max(10);
    let dir = plan.data_dir("w1")?;
    let db = GatewayConfig::for_data_dir(&dir).db_path();
    // The store is filled in-process (fast), then served by a gateway on the same file. The
    // engine handle stays open for the floor: a second reader of the same WAL file.
    let engine = open_engine(&db, durability, None, false)?;
    let streams = fill_w1(&engine, children)?;
    let gw = Gateway::start(&dir, durability)?;
    let event_rows = count_rows(&db, "session_state_events")?;
    if event_rows != children * (W1_TURNS_PER_CHILD + 1) {
        bail!(
            "the store holds {event_rows} event rows after the gateway's start-up, expected {}",
            children * (W1_TURNS_PER_CHILD + 1)
        );
    }
    let agent = new_agent(&gw.base)?;
    let status_url = "/v1/tools/session_status";
    let health_url = "/health";

    // Check one answer against the engine before timing anything.
    let s0 = &streams[0];
    let (_, text) = send(
        &agent,
        "POST",
        status_url,
        Some(s0.parent.key.as_str()),
        Some(&s0.body),
    )?;
    let answer: Value = serde_json::from_str(&text).context("session_status answer")?;
    let events = answer["stateChanges"]["events"]
        .as_array()
        .map_or(0, |a| a.len());
    let page = engine.list_since(&s0.child, s0.since, W1_PAGE as u32)?;
    if events as u64 != W1_PAGE
        || page.events.len() as u64 != W1_PAGE
        || answer["stateChanges"]["truncated"] != false
        || answer["stateChanges"]["events"][0]["sequence"] != page.events[0].sequence
    {
        bail!(
            "session_status did not return the expected {W1_PAGE}-event page (got {events} \
             events over HTTP, {} in-process)",
            page.events.len()
        );
    }
    let answer_bytes = text.len();
    let status_text_bytes = answer["statusText"].as_str().map_or(0, str::len);
    let (_, bare) = send(
        &agent,
        "POST",
        status_url,
        Some(s0.parent.key.as_str()),
        Some(&s0.bare_body),
    )?;
    let bare_bytes = bare.len();

    // Four ways of doing "the same" work, interleaved in chunks so noise hits all alike.
    let mut rng = Lcg(0x5eed);
    let picks: Vec<usize> = (0..calls)
        .map(|_| (rng.next() % streams.len() as u64) as usize)
        .collect();
    // The timed calls: one raw keep-alive connection (see raw.rs), unless --ureq-client.
    let raw = std::cell::RefCell::new(RawConn::connect(&gw.base)?);
    let raw_status: Vec<Vec<u8>> = streams
        .iter()
        .map(|s| {
            RawConn::request(
                &gw.base,
                "POST",
                status_url,
                Some(s.parent.key.as_str()),
                Some(&s.body),
            )
        })
        .collect();
    let raw_health = RawConn::request(&gw.base, "GET", health_url, None, None);
    // Returns when the status line and headers had arrived (the rest is reading the body); the
    // raw client reads both at once, so it returns the whole call.
    let http_status = |s: &Stream, start: Instant| -> Result<Duration> {
        if !plan.ureq_client {
            let mut conn = raw.borrow_mut();
            let a = conn.send(&raw_status[s.index])?;
            if a.status != 200 || a.body.len() < 100 {
                bail!(
                    "session_status answered {}: {}",
                    a.status,
                    String::from_utf8_lossy(a.body)
                );
            }
            return Ok(start.elapsed());
        }
        let resp = agent
            .request("POST", status_url)
            .as_session(s.parent.key.as_str())
            .send_any(Some(&s.body))
            .map_err(|e| anyhow!("session_status: {e}"))?;
        let headers = start.elapsed();
        let code = resp.status();
        let body = resp.text()?;
        if code != 200 || body.len() < 100 {
            bail!("session_status answered {code}: {body}");
        }
        Ok(headers)
    };
    let engine_page = |s: &Stream| -> Result<()> {
        let p = engine.list_since(&s.child, s.since, W1_PAGE as u32)?;
        if p.events.len() as u64 != W1_PAGE {
            bail!("list_since returned {} events", p.events.len());
        }
        Ok(())
    };
    // What the session_status handler asks the engine for (one call since round 3 of issue
    // 13): caller exists, then the target's row (its existence check and version) and the page.
    let engine_handler = |s: &Stream| -> Result<()> {
        if !engine.session_exists(&s.parent)? {
            bail!("session vanished");
        }
        let _session = engine.get_session(&s.child)?;
        let p = engine.list_since(&s.child, s.since, W1_PAGE as u32)?;
        if p.events.len() as u64 != W1_PAGE {
            bail!("list_since returned {} events", p.events.len());
        }
        Ok(())
    };
    let http_bare = |s: &Stream| -> Result<()> {
        let (code, body) = send(
            &agent,
            "POST",
            status_url,
            Some(s.parent.key.as_str()),
            Some(&s.bare_body),
        )?;
        if code != 200 || body.contains("stateChanges") {
            bail!("session_status without changesSince answered {code}: {body}");
        }
        Ok(())
    };
    let health = |_: &Stream| -> Result<()> {
        if !plan.ureq_client {
            let mut conn = raw.borrow_mut();
            let status = conn.send(&raw_health)?.status;
            if status != 200 {
                bail!("/health answered {status}");
            }
            return Ok(());
        }
        let (code, _) = send(&agent, "GET", health_url, None, None)?;
        if code != 200 {
            bail!("/health answered {code}");
        }
        Ok(())
    };
    // Warm-up: connection, reader pool, page cache.
    for (i, s) in streams.iter().enumerate().take(200) {
        http_status(s, Instant::now())?;
        engine_page(s)?;
        if i < 50 {
            health(s)?;
            http_bare(s)?;
            engine_handler(s)?;
        }
    }
    let cap = plan.cap(90);
    let t0 = Instant::now();
    let mut hh = Vec::new();
    let (mut h, mut e, mut eh, mut hf, mut hb) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for chunk in picks.chunks(100) {
        if t0.elapsed() > cap {
            break;
        }
        for &i in chunk {
            let t = Instant::now();
            let headers = http_status(&streams[i], t)?;
            h.push(t.elapsed().as_nanos() as u64);
            hh.push(headers.as_nanos() as u64);
        }
        let each = |samples: &mut Vec<u64>, f: &dyn Fn(&Stream) -> Result<()>| -> Result<()> {
            for &i in chunk {
                let t = Instant::now();
                f(&streams[i])?;
                samples.push(t.elapsed().as_nanos() as u64);
            }
            Ok(())
        };
        each(&mut e, &engine_page)?;
        each(&mut eh, &engine_handler)?;
        each(&mut hf, &health)?;
        each(&mut hb, &http_bare)?;
    }
    let done = h.len() as u64;
    let (h50, h99) = percentiles(&mut h);
    let (e50, e99) = percentiles(&mut e);
    let (eh50, _) = percentiles(&mut eh);
    let (hf50, hf99) = percentiles(&mut hf);
    let (hb50, _) = percentiles(&mut hb);
    let (hh50, _) = percentiles(&mut hh);
    drop(agent);
    gw.stop()?;
    engine.close();
    // No "left for framing and JSON" figure: a difference of medians of different
    // distributions is not the median of anything. The parts are shown as measured.
    let line = format!(
        "1 POST /v1/tools/session_status changesSince -> {W1_PAGE}-event page ({} B answer, {} \
         B of it statusText) of one of {} parent-watched child streams ({} event rows in the \
         store), 1 client, 1 keep-alive connection [{}]: {} calls{} p50 {} p99 {} ({}) | \
         engine floor Engine::list_since same page: p50 {} p99 {} -> ratio {:.1}x | HTTP floor \
         GET /health: p50 {} p99 {} -> ratio {:.1}x | the handler's engine reads in-process \
         (caller exists, get_session, list_since) p50 {} | the same call without changesSince \
         (no page, {} B answer) p50 {}",
        fmt_int(answer_bytes as u64),
        fmt_int(status_text_bytes as u64),
        fmt_int(children),
        fmt_int(event_rows),
        durability.as_str(),
        fmt_int(done),
        if done < calls {
            format!(" (stopped at the {} s cap)", cap.as_secs())
        } else {
            String::new()
        },
        fmt_dur(h50),
        fmt_dur(h99),
        if plan.ureq_client {
            format!("status line and headers in after p50 {}", fmt_dur(hh50))
        } else {
            "raw client: the whole answer read".to_string()
        },
        fmt_dur(e50),
        fmt_dur(e99),
        h50 as f64 / e50.max(1) as f64,
        fmt_dur(hf50),
        fmt_dur(hf99),
        h50 as f64 / hf50.max(1) as f64,
        fmt_dur(eh50),
        fmt_int(bare_bytes as u64),
        fmt_dur(hb50),
    );
    let us = |ns: u64| ns as f64 / 1e3;
    Ok(vec![Outcome::new("HTTP1", line)
        .figure("status_p50", us(h50), "us", Better::Lower)
        .figure("status_p99", us(h99), "us", Better::Lower)
        .figure("engine_page_p50", us(e50), "us", Better::Lower)
        .figure("engine_handler_reads_p50", us(eh50), "us", Better::Lower)
        .figure("health_p50", us(hf50), "us", Better::Lower)
        .figure("status_without_page_p50", us(hb50), "us", Better::Lower)
        .figure("answer_bytes", answer_bytes as f64, "B", Better::Lower)
        .target("status_p50", 300.0)])
}

/// Creates `children` parent/child pairs and 50 human turns on each child, from several threads.
pub(crate) fn fill_w1(engine: &Engine, children: u64) -> Result<Vec<Stream>> {
    let handles: Vec<Worker<(u64, Stream)>> = (0..SETUP_THREADS)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for i in (t as u64..children).step_by(SETUP_THREADS) {
                    let parent = session_ref(&format!("agent:main:p{i}"))?;
                    let child = session_ref(&format!("agent:main:subagent:c{i}"))?;
                    engine.create_session(CreateSession::new(parent.key.clone()))?;
                    let (_, session) = engine.create_session(
                        CreateSession::new(child.key.clone()).parent(parent.key.clone()),
                    )?;
                    let since = session.state_version;
                    if since <= 0 {
                        bail!("child {} has no child_spawned event", child.key);
                    }
                    for k in 0..W1_TURNS_PER_CHILD {
                        let o = engine.post_turn(
                            &child,
                            NewTurn::user(format!("turn {k}")).channel("bench"),
                        )?;
                        if o.event.is_none() {
                            bail!("a human turn on a parented child recorded no event");
                        }
                    }
                    let body = json!({"sessionKey": child.key.as_str(), "changesSince": since,
                                      "limit": W1_PAGE})
                    .to_string();
                    let bare_body = json!({"sessionKey": child.key.as_str()}).to_string();
                    out.push((
                        i,
                        Stream {
                            index: 0,
                            parent,
                            child,
                            since,
                            body,
                            bare_body,
                        },
                    ));
                }
                Ok(out)
            })
        })
        .collect();
    let mut all = join_all(handles)?;
    all.sort_by_key(|(i, _)| *i);
    Ok(all
        .into_iter()
        .enumerate()
        .map(|(index, (_, s))| Stream { index, ..s })
        .collect())
}
