//! Path attacks against the file tools through the whole engine: deny rules evaded by other
//! spellings of the same path (absolute, `..`, `.`, doubled slashes, symlinks to a file or a
//! directory inside the workspace, chains of them), escapes (absolute paths outside, `..` out,
//! symlinks and hard links to outside files), and special files (FIFOs, sockets, devices). Each
//! asserts the attack failed: the secret never appears in a result, the protected file is
//! unchanged, and the call is refused. The lower bound beside them: an ordinary path runs.

mod common;

use common::engine;
use serde_json::{Map, Value, json};
use std::path::Path;
use std::sync::Arc;
use toolgate_core::permit::ApproveAll;
use toolgate_core::{CallId, Engine, Outcome, Session, ToolCall, TurnOptions};

const SECRET: &str = "TOP-SECRET-4711";

fn session(engine: &Engine, ws: &Path) -> Arc<Session> {
    let deny = [
        "read_file(secret/**)",
        "list_directory(secret/**)",
        "list_directory(secret)",
        "write_file(protected/**)",
        "edit_file(protected/**)",
    ];
    common::session(engine, ws, &[], &deny, true, Arc::new(ApproveAll))
}

/// The workspace: `secret/key`, `protected/file`, links into them, and links and a hard link out.
fn workspace(outside: &Path) -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path();
    std::fs::create_dir_all(p.join("secret/deeper")).unwrap();
    std::fs::write(p.join("secret/key"), SECRET).unwrap();
    std::fs::write(p.join("secret/deeper/key"), SECRET).unwrap();
    std::fs::create_dir_all(p.join("protected")).unwrap();
    std::fs::write(p.join("protected/file"), "original").unwrap();
    std::fs::create_dir_all(p.join("open/sub")).unwrap();
    std::fs::write(p.join("open/readme"), "public").unwrap();
    let ln = |target: &str, link: &str| std::os::unix::fs::symlink(target, p.join(link)).unwrap();
    ln("secret", "dirlink");
    ln("secret/key", "keylink");
    ln("dirlink", "chain");
    ln("../secret", "open/up");
    ln("protected", "plink");
    ln("protected/file", "pfile");
    ln("../protected", "open/pup");
    std::fs::write(outside.join("outside.txt"), SECRET).unwrap();
    std::os::unix::fs::symlink(outside.join("outside.txt"), p.join("abs_out")).unwrap();
    std::os::unix::fs::symlink(outside, p.join("dir_out")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", p.join("zero")).unwrap();
    std::os::unix::fs::symlink("/etc", p.join("etc")).unwrap();
    std::fs::hard_link(outside.join("outside.txt"), p.join("hard")).unwrap();
    nix::unistd::mkfifo(&p.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(p.join("sock")).unwrap();
    std::mem::forget(_sock);
    ws
}

async fn call(engine: &Engine, s: &Arc<Session>, tool: &str, args: Value) -> (Option<String>, String) {
    let Value::Object(map) = args else { panic!() };
    let map: Map<String, Value> = map;
    let out = engine
        .run_call(s, ToolCall::new(CallId::generate(), tool, map), TurnOptions::default())
        .await;
    let entry = match &out {
        Outcome::Recorded { entry, .. } | Outcome::Abort { entry, .. } => entry.content.clone(),
        Outcome::Restart { .. } => Value::Null,
    };
    (entry["error"]["type"].as_str().map(str::to_owned), entry.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn path_attacks_fail_and_ordinary_paths_work() {
    let outside = tempfile::tempdir().unwrap();
    let ws = workspace(outside.path());
    let w = ws.path().canonicalize().unwrap().display().to_string();
    let o = outside.path().display().to_string();
    let engine = engine();
    let s = session(&engine, ws.path());

    let secret_spellings = [
        "secret/key".to_owned(),
        "./secret/key".into(),
        "secret//key".into(),
        "secret/./key".into(),
        "open/../secret/key".into(),
        "open/sub/../../secret/key".into(),
        "secret/../secret/key".into(),
        "./././secret/key".into(),
        format!("{w}/secret/key"),
        format!("{w}//secret/key"),
        format!("{w}/open/../secret/key"),
        "dirlink/key".into(),
        "keylink".into(),
        "chain/key".into(),
        "open/up/key".into(),
        format!("{w}/dirlink/key"),
        format!("{w}/keylink"),
        "dirlink/deeper/key".into(),
        "chain/deeper/../key".into(),
        "secret/deeper/key".into(),
    ];
    let mut attacks = 0;
    for path in &secret_spellings {
        let (kind, text) = call(&engine, &s, "read_file", json!({"path": path})).await;
        assert_eq!(kind.as_deref(), Some("permission_denied"), "read_file {path}: {text}");
        assert!(!text.contains(SECRET), "read_file {path} leaked: {text}");
        attacks += 1;
    }
    for path in [
        "secret",
        "./secret",
        "dirlink",
        "chain",
        "open/up",
        &format!("{w}/secret"),
        "secret/deeper",
        "dirlink/deeper",
    ] {
        let (kind, text) = call(&engine, &s, "list_directory", json!({"path": path})).await;
        assert_eq!(
            kind.as_deref(),
            Some("permission_denied"),
            "list_directory {path}: {text}"
        );
        assert!(!text.contains("\"key\""), "list_directory {path} listed: {text}");
        attacks += 1;
    }
    let protected_spellings = [
        "protected/file".to_owned(),
        "./protected/file".into(),
        "protected//file".into(),
        "open/../protected/file".into(),
        format!("{w}/protected/file"),
        "plink/file".into(),
        "pfile".into(),
        "open/pup/file".into(),
        "plink/new.txt".into(),
        "open/pup/new.txt".into(),
        format!("{w}/plink/file"),
        "protected/new.txt".into(),
    ];
    for path in &protected_spellings {
        let (kind, text) = call(&engine, &s, "write_file", json!({"path": path, "content": "pwned"})).await;
        assert_eq!(kind.as_deref(), Some("permission_denied"), "write_file {path}: {text}");
        let (kind, text) = call(
            &engine,
            &s,
            "edit_file",
            json!({"path": path, "old_string": "original", "new_string": "pwned"}),
        )
        .await;
        assert_eq!(kind.as_deref(), Some("permission_denied"), "edit_file {path}: {text}");
        attacks += 2;
    }
    assert_eq!(
        std::fs::read_to_string(ws.path().join("protected/file")).unwrap(),
        "original"
    );
    assert!(!ws.path().join("protected/new.txt").exists());

    // Escapes: refused before permission (builtin_deny) or by the kernel's confinement.
    let escapes = [
        "/etc/passwd".to_owned(),
        "/proc/self/environ".into(),
        "../outside.txt".into(),
        "open/../../x".into(),
        format!("{o}/outside.txt"),
        format!("{w}/../x"),
        "abs_out".into(),
        "dir_out/outside.txt".into(),
        "etc/passwd".into(),
        "zero".into(),
        "hard".into(),
        "fifo".into(),
        "sock".into(),
    ];
    for path in &escapes {
        for (tool, args) in [
            ("read_file", json!({"path": path})),
            ("write_file", json!({"path": path, "content": "pwned"})),
        ] {
            let (kind, text) = call(&engine, &s, tool, args).await;
            assert!(
                matches!(kind.as_deref(), Some("permission_denied" | "execution_failed")),
                "{tool} {path}: {text}"
            );
            assert!(!text.contains(SECRET), "{tool} {path} leaked: {text}");
            attacks += 1;
        }
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("outside.txt")).unwrap(),
        SECRET
    );
    assert!(attacks >= 60, "{attacks}");

    // The lower bound: ordinary paths, through links too, still work.
    let (kind, text) = call(&engine, &s, "read_file", json!({"path": "open/readme"})).await;
    assert_eq!(kind, None, "{text}");
    assert!(text.contains("public"));
    let (kind, text) = call(
        &engine,
        &s,
        "write_file",
        json!({"path": "open/new.txt", "content": "ok"}),
    )
    .await;
    assert_eq!(kind, None, "{text}");
    let (kind, text) = call(&engine, &s, "list_directory", json!({"path": "open"})).await;
    assert_eq!(kind, None, "{text}");
}
