//! Background jobs in the engine: a call of a background tool answers at once with a handle while
//! its work goes on past the turn; the journal row stays `started` (naming the job) until the job
//! ends and then says how; the caps refuse before anyone is asked, naming the running jobs; a stop
//! or kill of the session, and the end of an agent run, end its jobs; a job's result is shaped
//! like any result (secrets redacted).

mod common;

use common::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use toolgate_core::jobs::JobState;
use toolgate_core::permit::{ChannelApprover, Policy};
use toolgate_core::store::JournalFilter;
use toolgate_core::tool::{Category, ToolOutput, ToolSpec};
use toolgate_core::{EngineConfig, TurnOptions};

/// A background tool: writes "tick N" lines to its job, then ends when told (`{"until": "end"}`
/// waits for the job's own token, i.e. a kill) or at once (`{"until": "now"}`).
fn worker() -> Arc<dyn toolgate_core::Tool> {
    let spec = ToolSpec {
        category: Category::Background,
        ..writer()
    };
    Arc::new(FnTool::new("worker", spec, |ctx, args| async move {
        let job = ctx.jobs.current().cloned().expect("a background call runs as a job");
        for i in 0..3 {
            job.write(format!("tick {i}\n").as_bytes());
        }
        if args["until"] == "end" {
            ctx.cancel.cancelled().await;
            return Err(toolgate_core::ToolError::Canceled);
        }
        Ok(ToolOutput::json(
            json!({"exit_code": 0, "note": "done, key sk-proj-abcdefghijklmnopqrstuv"}),
        ))
    }))
}

async fn start(h: &Harness, id: &str, until: &str) -> Value {
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[(id, "worker", &json!({ "until": until, "call": id }).to_string())]),
            TurnOptions::default(),
        )
        .await;
    let entry = turn.outcomes[0].entry().expect("a result");
    assert!(!entry.is_error, "{}", entry.content);
    entry.content.clone()
}

async fn rows(h: &Harness) -> Vec<toolgate_core::store::JournalRow> {
    h.session
        .store()
        .journal_list(&JournalFilter::default())
        .await
        .expect("the journal")
}

#[tokio::test]
async fn a_background_call_answers_with_a_handle_and_its_row_closes_when_the_job_ends() {
    let h = harness(vec![worker()], EngineConfig::default());
    let handle = start(&h, "c1", "end").await;
    assert_eq!(handle["state"], "running");
    let id = handle["job_id"].as_str().expect("a job id").to_owned();
    // The turn is over; the job is not.
    let job = h.engine.jobs().get(h.session.id(), &id).expect("the session's job");
    assert!(job.running());
    assert!(job.wait_for_output(21, Duration::from_secs(10)).await);
    assert_eq!(job.read(Some(0), 100).text, "tick 0\ntick 1\ntick 2\n");
    let row = rows(&h)
        .await
        .into_iter()
        .find(|r| r.call_id.as_str() == "c1")
        .expect("a row");
    assert_eq!(row.state, "started");
    assert_eq!(row.job, Some(json!({"id": id})));
    // Killed: the work's token fires, the job ends, the row says so.
    job.kill();
    assert!(job.wait(Duration::from_secs(10)).await);
    assert_eq!(job.status(false)["state"], "killed");
    let row = loop {
        let row = rows(&h)
            .await
            .into_iter()
            .find(|r| r.call_id.as_str() == "c1")
            .expect("a row");
        if row.state != "started" {
            break row;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(row.state, "canceled");
    assert_eq!(row.job.as_ref().map(|j| j["state"].clone()), Some(json!("killed")));
    assert_eq!(row.job.as_ref().map(|j| j["output_bytes"].clone()), Some(json!(21)));
}

#[tokio::test]
async fn a_finished_job_s_result_is_shaped_like_any_result() {
    let h = harness(vec![worker()], EngineConfig::default());
    let id = start(&h, "c1", "now").await["job_id"].as_str().unwrap().to_owned();
    let job = h.engine.jobs().get(h.session.id(), &id).unwrap();
    assert!(job.wait(Duration::from_secs(10)).await);
    let status = job.status(false);
    assert_eq!(status["state"], "succeeded");
    assert_eq!(status["result"]["exit_code"], 0);
    assert_eq!(status["result"]["note"], "done, key [REDACTED]");
}

#[tokio::test]
async fn the_session_cap_refuses_before_anyone_is_asked_and_names_the_running_jobs() {
    let config = EngineConfig {
        max_jobs_per_session: 2,
        ..EngineConfig::default()
    };
    let (approver, mut asks) = ChannelApprover::new(8);
    let h = harness_with(vec![worker()], config, Arc::new(approver), Policy::default());
    let answering = tokio::spawn(async move {
        let mut n = 0;
        while let Some(ask) = asks.recv().await {
            n += 1;
            ask.answer(toolgate_core::permit::Answer::ApproveOnce);
        }
        n
    });
    let a = start(&h, "c1", "end").await["job_id"].as_str().unwrap().to_owned();
    let b = start(&h, "c2", "end").await["job_id"].as_str().unwrap().to_owned();
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("c3", "worker", r#"{"until": "end", "call": "c3"}"#)]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(error_type(&turn.outcomes[0]).as_deref(), Some("rate_limited"));
    let message = turn.outcomes[0].entry().unwrap().content["error"]["message"].to_string();
    assert!(message.contains(&a) && message.contains(&b), "{message}");
    // Another session has its own allowance.
    h.session.end_jobs();
    for id in [&a, &b] {
        assert!(
            h.engine
                .jobs()
                .get(h.session.id(), id)
                .unwrap()
                .wait(Duration::from_secs(10))
                .await
        );
    }
    drop(h);
    assert_eq!(
        answering.await.unwrap(),
        2,
        "only the two calls that started were asked"
    );
}

#[tokio::test]
async fn a_stop_or_kill_of_the_session_ends_its_jobs_and_a_later_job_runs() {
    let h = harness(vec![worker()], EngineConfig::default());
    let id = start(&h, "c1", "end").await["job_id"].as_str().unwrap().to_owned();
    let job = h.engine.jobs().get(h.session.id(), &id).unwrap();
    h.session.request_stop();
    assert!(job.wait(Duration::from_secs(10)).await);
    assert_eq!(job.status(false)["state"], JobState::Killed.as_str());
    h.session.resume();
    let id = start(&h, "c2", "end").await["job_id"].as_str().unwrap().to_owned();
    let job = h.engine.jobs().get(h.session.id(), &id).unwrap();
    assert!(job.running(), "a job after resume runs under a fresh token");
    h.session.kill();
    assert!(job.wait(Duration::from_secs(10)).await);
}

#[tokio::test]
async fn twenty_polls_are_not_a_loop_and_twenty_identical_calls_still_are() {
    let h = harness(
        vec![echo("job_status", read_only()), echo("lookup", read_only())],
        EngineConfig::default(),
    );
    for i in 0..20 {
        let turn = h
            .engine
            .run_turn(
                &h.session,
                &openai_answer(&[(&format!("p{i}"), "job_status", r#"{"job_id": "j1"}"#)]),
                TurnOptions::default(),
            )
            .await;
        assert!(turn.outcomes[0].succeeded(), "poll {i}: {:?}", turn.outcomes[0].entry());
    }
    let mut refused = None;
    for i in 0..20 {
        let turn = h
            .engine
            .run_turn(
                &h.session,
                &openai_answer(&[(&format!("l{i}"), "lookup", r#"{"q": 1}"#)]),
                TurnOptions::default(),
            )
            .await;
        if error_type(&turn.outcomes[0]).as_deref() == Some("loop_detected") {
            refused = Some(i);
            break;
        }
    }
    assert_eq!(refused, Some(2), "the third identical call is refused");
}
