//! `toolgate call write_file` under a pseudo-terminal: it asks, and honours each answer; `--yes`,
//! `--yolo` and an allow rule skip the prompt.

mod common;
use common::xdg_dir;

use expectrl::session::OsSession;
use expectrl::{Eof, Expect, Session};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn spawn(ws: &Path, extra: &[&str], file: &str) -> OsSession {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.arg("--workspace").arg(ws).args(extra);
    cmd.args([
        "call",
        "write_file",
        &format!(r#"{{"path": "{file}", "content": "hello"}}"#),
    ]);
    cmd.env("XDG_CONFIG_HOME", xdg_dir(ws, "config"));
    cmd.env("XDG_DATA_HOME", xdg_dir(ws, "data"));
    cmd.env_remove("RUST_LOG");
    let mut session = Session::spawn(cmd).expect("spawn under a pty");
    // Only a bound for a broken build: the test waits on the prompt text itself.
    session.set_expect_timeout(Some(Duration::from_secs(60)));
    session
}

/// Answers the prompt with `keys` and returns everything printed after it.
fn answer(ws: &Path, file: &str, keys: &str) -> String {
    let mut p = spawn(ws, &[], file);
    let before = p.expect("answer: ").expect("the prompt");
    let shown = String::from_utf8_lossy(before.before()).into_owned();
    assert!(shown.contains("write_file wants to run"), "{shown}");
    assert!(shown.contains(file), "the subject is shown: {shown}");
    assert!(
        shown.contains("write_file(*)") || shown.contains("write_file("),
        "a suggested rule is offered: {shown}"
    );
    p.send(keys).unwrap();
    let rest = p.expect(Eof).expect("the command ends");
    String::from_utf8_lossy(rest.as_bytes()).into_owned()
}

#[test]
fn each_answer_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    for (key, file) in [
        ("y", "once.txt"),
        ("s", "session.txt"),
        ("t", "tool.txt"),
        ("r", "rule.txt"),
    ] {
        let out = answer(ws, file, key);
        assert!(out.contains("\"bytes_written\": 5"), "{key}: {out}");
        assert_eq!(std::fs::read_to_string(ws.join(file)).unwrap(), "hello", "{key}");
    }
    let out = answer(ws, "no.txt", "nnot today\r");
    assert!(out.contains("rejected_by_user"), "{out}");
    assert!(out.contains("not today"), "the reason reaches the model: {out}");
    assert!(!ws.join("no.txt").exists());
    // Keys that mean nothing are ignored until a real answer comes.
    let out = answer(ws, "late.txt", "x?y");
    assert!(out.contains("\"bytes_written\": 5"), "{out}");
}

#[test]
fn yes_yolo_and_rules_skip_the_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let config = ws.join("allow.toml");
    std::fs::write(&config, "[permissions]\nallow = [\"write_file(ok/**)\"]\n").unwrap();
    let config_arg = config.display().to_string();
    for (extra, file) in [
        (vec!["--yes"], "yes.txt"),
        (vec!["--yolo"], "yolo.txt"),
        (vec!["--config", config_arg.as_str()], "ok/rule.txt"),
    ] {
        let mut p = spawn(ws, &extra, file);
        let out = p.expect(Eof).unwrap();
        let out = String::from_utf8_lossy(out.as_bytes()).into_owned();
        assert!(!out.contains("wants to run"), "{extra:?} asked: {out}");
        assert!(out.contains("\"bytes_written\": 5"), "{extra:?}: {out}");
    }
}
