//! The file tools: behaviour, and the attacks on workspace confinement.

use serde_json::{Value, json};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use toolgate_core::tool::{ToolContext, Typed};
use toolgate_core::{Tool, ToolError};
use toolgate_tools::files::{EditFile, ListDirectory, ReadFile, WriteFile};

struct Fixture {
    _dir: tempfile::TempDir,
    ws: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let ws = root.join("ws");
    let outside = root.join("outside");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(ws.join("src/lib.rs"), "line 1\nline 2\nline 3\nline 4\n").unwrap();
    std::fs::write(outside.join("secret.txt"), "TOP SECRET").unwrap();
    Fixture { _dir: dir, ws, outside }
}

async fn run(tool: &dyn Tool, ws: &Path, args: Value) -> Result<Value, ToolError> {
    tool.execute(&ToolContext::standalone(ws), args)
        .await
        .map(|o| o.content)
}

fn read() -> Typed<ReadFile> {
    Typed::new(ReadFile::default())
}

#[tokio::test]
async fn read_file_returns_a_line_range() {
    let f = fixture();
    let out = run(&read(), &f.ws, json!({"path": "src/lib.rs", "offset": 2, "limit": 2}))
        .await
        .unwrap();
    assert_eq!(out["content"], "line 2\nline 3\n");
    assert_eq!(out["start_line"], 2);
    assert_eq!(out["end_line"], 3);
    assert_eq!(out["truncated"], true);
    let all = run(&read(), &f.ws, json!({"path": "src/lib.rs"})).await.unwrap();
    assert_eq!(all["content"], "line 1\nline 2\nline 3\nline 4\n");
    assert_eq!(all["truncated"], false);
}

#[tokio::test]
async fn read_file_stops_at_its_size_limit() {
    let f = fixture();
    std::fs::write(f.ws.join("big.txt"), "x".repeat(100) + "\n" + &"y\n".repeat(100_000)).unwrap();
    let tool = Typed::new(ReadFile {
        limits: toolgate_tools::files::FileLimits {
            max_read_bytes: 1000,
            ..Default::default()
        },
    });
    let out = run(&tool, &f.ws, json!({"path": "big.txt"})).await.unwrap();
    assert!(out["content"].as_str().unwrap().len() <= 1000);
    assert_eq!(out["truncated"], true);
    // A single line longer than the limit still yields its head.
    std::fs::write(f.ws.join("one.txt"), "é".repeat(5000)).unwrap();
    let out = run(&tool, &f.ws, json!({"path": "one.txt"})).await.unwrap();
    let content = out["content"].as_str().unwrap();
    assert!(!content.is_empty() && content.len() <= 1000 && content.chars().all(|c| c == 'é'));
    assert_eq!(out["truncated"], true);
}

#[tokio::test]
async fn dot_dot_and_absolute_paths_out_of_the_workspace_are_refused() {
    let f = fixture();
    let outside = f.outside.join("secret.txt");
    for path in [
        "../outside/secret.txt".to_string(),
        "src/../../outside/secret.txt".to_string(),
        outside.display().to_string(),
        "/etc/passwd".to_string(),
    ] {
        let err = run(&read(), &f.ws, json!({"path": path})).await.unwrap_err();
        assert!(err.to_string().contains("outside the workspace"), "{path}: {err}");
    }
    // An absolute path inside the workspace is fine.
    let inside = f.ws.join("src/lib.rs").display().to_string();
    assert!(run(&read(), &f.ws, json!({"path": inside})).await.is_ok());
}

#[tokio::test]
async fn symlinks_pointing_out_are_refused_for_every_tool() {
    let f = fixture();
    symlink(f.outside.join("secret.txt"), f.ws.join("link.txt")).unwrap();
    symlink("../outside", f.ws.join("linkdir")).unwrap();
    symlink(&f.outside, f.ws.join("abslinkdir")).unwrap();
    let write = Typed::new(WriteFile::default());
    let edit = Typed::new(EditFile::default());
    let list = Typed::new(ListDirectory::default());
    for (tool, args) in [
        (&read() as &dyn Tool, json!({"path": "link.txt"})),
        (&read(), json!({"path": "linkdir/secret.txt"})),
        (&read(), json!({"path": "abslinkdir/secret.txt"})),
        (&list, json!({"path": "linkdir"})),
        (&write, json!({"path": "link.txt", "content": "pwned"})),
        (&write, json!({"path": "linkdir/new.txt", "content": "pwned"})),
        (
            &edit,
            json!({"path": "link.txt", "old_string": "TOP", "new_string": "pwned"}),
        ),
    ] {
        let err = run(tool, &f.ws, args.clone()).await.unwrap_err();
        assert!(err.to_string().contains("outside the workspace"), "{args}: {err}");
    }
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
        "TOP SECRET"
    );
    assert!(!f.outside.join("new.txt").exists());
}

#[tokio::test]
async fn symlinks_inside_the_workspace_are_followed() {
    let f = fixture();
    symlink("src/lib.rs", f.ws.join("alias.rs")).unwrap();
    let out = run(&read(), &f.ws, json!({"path": "alias.rs", "limit": 1}))
        .await
        .unwrap();
    assert_eq!(out["content"], "line 1\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_swapped_in_during_calls_never_leaks_the_outside() {
    let f = fixture();
    std::fs::create_dir_all(f.ws.join("real")).unwrap();
    std::fs::write(f.ws.join("real/secret.txt"), "inside").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (ws, outside, stop) = (f.ws.clone(), f.outside.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u32;
            while !stop.load(Ordering::Relaxed) {
                // "dir" flips between a real directory and a symlink to the outside.
                let _ = std::fs::remove_file(ws.join("dir"));
                let _ = symlink(ws.join("real"), ws.join("dir.tmp"));
                let _ = std::fs::rename(ws.join("dir.tmp"), ws.join("dir"));
                let _ = std::fs::remove_file(ws.join("dir"));
                let _ = symlink(&outside, ws.join("dir"));
                swaps += 1;
            }
            swaps
        })
    };
    for _ in 0..2000 {
        match run(&read(), &f.ws, json!({"path": "dir/secret.txt"})).await {
            Ok(out) => assert_eq!(out["content"], "inside", "a read escaped the workspace"),
            Err(e) => assert!(!e.to_string().contains("TOP SECRET")),
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert!(swapper.join().unwrap() > 0, "the swapper never ran");
}

#[tokio::test]
async fn write_file_creates_parents_and_reports_creation() {
    let f = fixture();
    let write = Typed::new(WriteFile::default());
    let out = run(&write, &f.ws, json!({"path": "a/b/c.txt", "content": "hi"}))
        .await
        .unwrap();
    assert_eq!(out["created"], true);
    assert_eq!(std::fs::read_to_string(f.ws.join("a/b/c.txt")).unwrap(), "hi");
    let out = run(&write, &f.ws, json!({"path": "a/b/c.txt", "content": "again"}))
        .await
        .unwrap();
    assert_eq!(out["created"], false);
    assert_eq!(std::fs::read_to_string(f.ws.join("a/b/c.txt")).unwrap(), "again");
}

#[tokio::test]
async fn edit_file_needs_a_unique_match() {
    let f = fixture();
    let edit = Typed::new(EditFile::default());
    let err = run(
        &edit,
        &f.ws,
        json!({"path": "src/lib.rs", "old_string": "line", "new_string": "row"}),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("occurs 4 times"), "{err}");
    let err = run(
        &edit,
        &f.ws,
        json!({"path": "src/lib.rs", "old_string": "nope", "new_string": "x"}),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("not found"), "{err}");
    let out = run(
        &edit,
        &f.ws,
        json!({"path": "src/lib.rs", "old_string": "line 3", "new_string": "third"}),
    )
    .await
    .unwrap();
    assert_eq!(out["replacements"], 1);
    assert_eq!(
        std::fs::read_to_string(f.ws.join("src/lib.rs")).unwrap(),
        "line 1\nline 2\nthird\nline 4\n"
    );
    let out = run(
        &edit,
        &f.ws,
        json!({"path": "src/lib.rs", "old_string": "line", "new_string": "row", "replace_all": true}),
    )
    .await
    .unwrap();
    assert_eq!(out["replacements"], 3);
}

#[tokio::test]
async fn list_directory_lists_sorted_entries_with_types() {
    let f = fixture();
    std::fs::write(f.ws.join("b.txt"), "12345").unwrap();
    symlink("b.txt", f.ws.join("c")).unwrap();
    let list = Typed::new(ListDirectory::default());
    let out = run(&list, &f.ws, json!({})).await.unwrap();
    assert_eq!(
        out["entries"],
        json!([
            {"name": "b.txt", "type": "file", "size_bytes": 5},
            {"name": "c", "type": "symlink"},
            {"name": "src", "type": "directory"}
        ])
    );
}
