//! The attacks of the security issue, against the real `exec_shell` through the whole engine.
//!
//! - Every spelling of `rm -rf victim` in the corpus, run with `allow = ["exec_shell"]` and
//!   `deny = ["exec_shell(rm:*)"]` (and again under `--yolo` with the deny rule alone), in a
//!   temporary workspace holding a victim directory: the call is refused and the victim stays.
//!   A control run without the deny rule shows the victim does get deleted when allowed.
//! - Every line of the catastrophic corpus is refused by `Engine::check` with `builtin_deny`
//!   under `--yolo`, before permission. Those lines are never executed.

mod common;

use common::engine;
use serde_json::{Map, Value, json};
use std::path::Path;
use std::sync::Arc;
use toolgate_core::permit::{ApproveAll, DenyAll};
use toolgate_core::{CallId, Engine, Outcome, Session, ToolCall, TurnOptions};

fn session(engine: &Engine, ws: &Path, allow: &[&str], deny: &[&str], yolo: bool) -> Arc<Session> {
    common::session(engine, ws, allow, deny, yolo, Arc::new(ApproveAll))
}

fn shell_call(command: &str) -> ToolCall {
    let mut args = Map::new();
    args.insert("command".into(), json!(command));
    args.insert("timeout_ms".into(), json!(5000));
    ToolCall::new(CallId::generate(), "exec_shell", args)
}

fn spellings() -> Vec<String> {
    serde_json::from_str(include_str!("../../toolgate-core/tests/corpus/rm_spellings.json")).unwrap()
}

fn victim(ws: &Path) -> std::path::PathBuf {
    let v = ws.join("victim");
    std::fs::create_dir_all(v.join("inner")).unwrap();
    std::fs::write(v.join("inner/file"), "precious").unwrap();
    // Scripts some spellings pipe into a shell, made harmless but present.
    std::fs::write(ws.join("script.sh"), "rm -rf victim\n").unwrap();
    v
}

fn error_type(outcome: &Outcome) -> Option<String> {
    let entry = match outcome {
        Outcome::Recorded { entry, .. } | Outcome::Abort { entry, .. } => entry,
        Outcome::Restart { .. } => return None,
    };
    let content: &Value = &entry.content;
    content["error"]["type"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_victim_is_deleted_when_nothing_denies_it() {
    let ws = tempfile::tempdir().unwrap();
    let v = victim(ws.path());
    let engine = engine();
    let s = session(&engine, ws.path(), &["exec_shell"], &[], false);
    let out = engine
        .run_call(&s, shell_call("rm -rf victim"), TurnOptions::default())
        .await;
    assert_eq!(error_type(&out), None, "{out:?}");
    assert!(
        !v.exists(),
        "the control run must delete the victim, or the attacks prove nothing"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_spelling_of_a_denied_program_is_refused_and_the_victim_stays() {
    let engine = engine();
    let spellings = spellings();
    assert!(spellings.len() >= 80);
    for (allow, yolo) in [(&["exec_shell"][..], false), (&[][..], true)] {
        for line in &spellings {
            let ws = tempfile::tempdir().unwrap();
            let v = victim(ws.path());
            let s = session(&engine, ws.path(), allow, &["exec_shell(rm:*)"], yolo);
            let out = engine.run_call(&s, shell_call(line), TurnOptions::default()).await;
            assert_eq!(
                error_type(&out).as_deref(),
                Some("permission_denied"),
                "{line} (yolo {yolo}): {out:?}"
            );
            assert!(v.join("inner/file").exists(), "{line} (yolo {yolo}) deleted the victim");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn catastrophic_lines_are_refused_before_permission_even_under_yolo() {
    let ws = tempfile::tempdir().unwrap();
    let engine = engine();
    let s = session(&engine, ws.path(), &["exec_shell"], &[], true);
    let lines: Vec<String> = serde_json::from_str(include_str!("corpus/catastrophic.json")).unwrap();
    assert!(lines.len() >= 50);
    for line in &lines {
        let report = engine.check(&s, &shell_call(line));
        assert_eq!(
            (report.decision, report.source.as_str()),
            ("deny", "builtin_deny"),
            "{line}: {report:?}"
        );
    }
    for harmless in [
        "rm -rf target",
        "rm -rf ./build/*",
        "cd src && rm -rf gen",
        "find . -name '*.o' -delete",
        "ls -la /",
    ] {
        let report = engine.check(&s, &shell_call(harmless));
        assert_eq!(report.decision, "allow", "{harmless}: {report:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn redirections_cannot_write_outside_through_links_or_braces() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("target");
    std::fs::write(&target, "untouched").unwrap();
    std::os::unix::fs::symlink(&target, ws.path().join("evil_link")).unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("linkdir")).unwrap();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    let o = outside.path().display().to_string();
    let engine = engine();
    // ls and echo are allowed; nobody can approve an ask (the approver in `session` approves
    // everything, so the rules here say deny for what must not run and nothing else).
    let s = common::session(
        &engine,
        ws.path(),
        &["exec_shell(ls:*)", "exec_shell(echo:*)"],
        &[],
        false,
        Arc::new(DenyAll),
    );
    let lines = [
        "ls > evil_link".to_owned(),
        "echo pwned >> evil_link".into(),
        "ls > linkdir/target".into(),
        "ls > linkdir/new".into(),
        "cd sub && ls > ../evil_link".into(),
        "ls > {evil_link,}".into(),
        "ls > {../x,}".into(),
        format!("ls 2> {{{o}/target,}}"),
        "echo x > ../escape".into(),
        "ls > sub/../evil_link".into(),
    ];
    for line in &lines {
        let report = engine.check(&s, &shell_call(line));
        assert_ne!(report.decision, "allow", "{line}: {report:?}");
        let out = engine.run_call(&s, shell_call(line), TurnOptions::default()).await;
        assert_eq!(
            error_type(&out).as_deref(),
            Some("permission_denied"),
            "{line}: {out:?}"
        );
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
    assert!(!outside.path().join("new").exists());
    // The lower bound: an allowed redirection inside the workspace runs.
    let out = engine
        .run_call(&s, shell_call("echo fine > sub/out.txt"), TurnOptions::default())
        .await;
    assert_eq!(error_type(&out), None, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("sub/out.txt")).unwrap(),
        "fine\n"
    );
}

#[test]
fn prefix_rules_do_not_cover_options_that_run_programs() {
    let ws = tempfile::tempdir().unwrap();
    let engine = engine();
    let s = common::session(
        &engine,
        ws.path(),
        &[
            "exec_shell(cargo test:*)",
            "exec_shell(git:*)",
            "exec_shell(find:*)",
            "exec_shell(tar:*)",
            "exec_shell(rsync:*)",
        ],
        &[],
        false,
        Arc::new(DenyAll),
    );
    for line in [
        r#"cargo test --config 'target.x86_64-unknown-linux-gnu.runner=["sh","-c","touch pwned"]'"#,
        "cargo test --config=build.rustc-wrapper='/tmp/x'",
        "git -c core.pager='sh -c \"touch pwned\"' log",
        "git -c alias.x='!touch pwned' x",
        "git -c core.sshCommand='touch pwned' fetch",
        "git --exec-path=/tmp log",
        "git rebase -x 'touch pwned' HEAD~1",
        "git submodule foreach 'touch pwned'",
        "find . -exec touch pwned ;",
        "find . -execdir sh -c 'touch pwned' ;",
        "tar --to-command='sh -c x' -xf a.tar",
        "tar -I 'sh -c x' -xf a.tar",
        "tar --checkpoint-action=exec='touch pwned' -cf a.tar .",
        "rsync -e 'sh -c x' a b:c",
    ] {
        let report = engine.check(&s, &shell_call(line));
        assert_ne!(report.decision, "allow", "{line}: {report:?}");
    }
    for line in [
        "cargo test -p core",
        "git log -p",
        "git status",
        "find . -name '*.rs'",
        "tar -tf a.tar",
    ] {
        assert_eq!(engine.check(&s, &shell_call(line)).decision, "allow", "{line}");
    }
}
