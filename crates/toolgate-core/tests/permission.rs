//! The permission seam: the default branch applied for real, and the approver's answers.

mod common;

use common::*;
use std::sync::Arc;
use toolgate_core::events::Event;
use toolgate_core::permit::{Answer, ApprovalRequest, Approver, DenyAll, Policy};
use toolgate_core::{AbortReason, EngineConfig, TurnOptions, TurnStatus};

struct Fixed(Answer);

#[async_trait::async_trait]
impl Approver for Fixed {
    async fn approve(&self, _: &ApprovalRequest) -> Answer {
        self.0.clone()
    }
}

fn verdicts(events: Vec<Event>) -> Vec<(&'static str, &'static str)> {
    events
        .into_iter()
        .filter_map(|e| match e {
            Event::Verdict { decision, source, .. } => Some((decision, source)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn read_only_tools_run_and_others_are_refused_without_an_approver() {
    let mut h = harness_with(
        vec![echo("look", read_only()), echo("change", writer())],
        EngineConfig::default(),
        Arc::new(DenyAll),
        Policy::default(),
    );
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("a", "look", "{}"), ("b", "change", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert!(turn.outcomes[0].entry().unwrap().content.get("error").is_none());
    let e = &turn.outcomes[1].entry().unwrap().content["error"];
    assert_eq!(e["type"], "permission_denied");
    assert_eq!(e["source"], "non_interactive_deny");
    assert!(
        e["message"].as_str().unwrap().contains("--yes"),
        "the message says how to allow it"
    );
    assert_eq!(
        verdicts(drain(&mut h.events)),
        [("allow", "readonly_hint"), ("deny", "non_interactive_deny")]
    );
}

#[tokio::test]
async fn yes_approves_once_and_yolo_allows() {
    let mut h = harness(vec![echo("change", writer())], EngineConfig::default());
    h.engine
        .run_turn(
            &h.session,
            &openai_answer(&[("a", "change", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(verdicts(drain(&mut h.events)), [("allow", "auto_approved")]);
    let mut h = harness_with(
        vec![echo("change", writer())],
        EngineConfig::default(),
        Arc::new(DenyAll),
        Policy {
            yolo: true,
            ..Policy::default()
        },
    );
    h.engine
        .run_turn(
            &h.session,
            &openai_answer(&[("a", "change", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(verdicts(drain(&mut h.events)), [("allow", "yolo")]);
}

#[tokio::test]
async fn a_rejection_carries_the_users_reason() {
    let h = harness_with(
        vec![echo("change", writer())],
        EngineConfig::default(),
        Arc::new(Fixed(Answer::Reject(Some("not on main".into())))),
        Policy::default(),
    );
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("a", "change", "{}")]),
            TurnOptions::default(),
        )
        .await;
    let e = &turn.outcomes[0].entry().unwrap().content["error"];
    assert_eq!(e["type"], "rejected_by_user");
    assert!(e["message"].as_str().unwrap().contains("not on main"));
}

#[tokio::test]
async fn arguments_completed_from_a_cut_off_value_are_asked_even_under_yolo() {
    let mut h = harness_with(
        vec![echo("change", writer())],
        EngineConfig::default(),
        Arc::new(DenyAll),
        Policy {
            yolo: true,
            ..Policy::default()
        },
    );
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("a", "change", "{\"content\": \"hel")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(error_type(&turn.outcomes[0]).as_deref(), Some("permission_denied"));
    let events = drain(&mut h.events);
    let repaired = events
        .iter()
        .any(|e| matches!(e, Event::CallStarted { repair: Some(r), .. } if r.completed_cut_off));
    assert!(repaired);
}

struct Never;

#[async_trait::async_trait]
impl Approver for Never {
    async fn approve(&self, _: &ApprovalRequest) -> Answer {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn an_ask_ends_at_the_approval_timeout() {
    let h = harness_with(
        vec![echo("change", writer())],
        EngineConfig::default(),
        Arc::new(Never),
        Policy::default(),
    );
    let start = tokio::time::Instant::now();
    let turn = h
        .engine
        .run_turn(
            &h.session,
            &openai_answer(&[("a", "change", "{}")]),
            TurnOptions::default(),
        )
        .await;
    assert_eq!(start.elapsed().as_secs(), 120);
    assert_eq!(error_type(&turn.outcomes[0]).as_deref(), Some("rejected_by_user"));
}

#[tokio::test]
async fn a_kill_cancels_a_pending_approval() {
    let mut h = harness_with(
        vec![echo("change", writer())],
        EngineConfig::default(),
        Arc::new(Never),
        Policy::default(),
    );
    let (engine, session) = (h.engine.clone(), h.session.clone());
    let run = tokio::spawn(async move {
        engine
            .run_turn(
                &session,
                &openai_answer(&[("a", "change", "{}")]),
                TurnOptions::default(),
            )
            .await
    });
    // Wait until the call is in the pipeline, then kill.
    loop {
        if let Some(Event::CallStarted { .. }) = h.events.recv().await {
            break;
        }
    }
    h.session.kill();
    let turn = run.await.unwrap();
    assert_eq!(turn.status, TurnStatus::Aborted(AbortReason::StoppedByUser));
    assert_eq!(verdicts(drain(&mut h.events)), [("canceled", "context_canceled")]);
}

#[tokio::test]
async fn a_library_answers_asks_through_a_channel() {
    use toolgate_core::permit::ChannelApprover;
    let (approver, mut asks) = ChannelApprover::new(4);
    let h = harness_with(
        vec![echo("change", writer())],
        EngineConfig::default(),
        Arc::new(approver),
        Policy::default(),
    );
    let answering = tokio::spawn(async move {
        let first = asks.recv().await.unwrap();
        assert_eq!(first.request.call.name.as_str(), "change");
        first.answer(Answer::ApproveOnce);
        let second = asks.recv().await.unwrap();
        second.answer(Answer::Reject(Some("enough".into())));
        // The third ask is dropped unanswered: refused.
        drop(asks.recv().await.unwrap());
    });
    let mut types = Vec::new();
    for i in 0..3 {
        let turn = h
            .engine
            .run_turn(
                &h.session,
                &openai_answer(&[(&format!("c{i}"), "change", &format!("{{\"i\": {i}}}"))]),
                TurnOptions::default(),
            )
            .await;
        types.push(error_type(&turn.outcomes[0]));
    }
    answering.await.unwrap();
    assert_eq!(
        types,
        [None, Some("rejected_by_user".into()), Some("permission_denied".into())]
    );
}
