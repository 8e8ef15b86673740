//! A model cannot give itself permanent yolo: with the workspace holding the user's config
//! directory and toolgate's data (a user who starts toolgate in `~`), no tool writes them —
//! not `write_file` by any spelling, not `exec_shell` (the sandbox, on by default, keeps them
//! read-only, renames of the directories leading to them included). And the file tools refuse
//! FIFOs (without hanging), devices and hard links to files outside the workspace.

mod common;

use assert_cmd::Command;
use common::json_out;
use serde_json::json;
use std::path::Path;

/// `toolgate` with HOME = the workspace, so its configuration and data live inside it.
fn in_home(home: &Path) -> Command {
    let mut cmd = Command::cargo_bin("toolgate").unwrap();
    cmd.arg("--workspace")
        .arg(home)
        .arg("--store")
        .arg("memory")
        .arg("--yes");
    cmd.env("HOME", home);
    cmd.env("XDG_CONFIG_HOME", home.join(".config"));
    cmd.env("XDG_DATA_HOME", home.join(".local/share"));
    cmd.env_remove("RUST_LOG");
    cmd
}

fn home() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".config/toolgate")).unwrap();
    std::fs::create_dir_all(dir.path().join(".local/share/toolgate")).unwrap();
    std::fs::write(dir.path().join(".config/toolgate/toolgate.toml"), "# the user's\n").unwrap();
    std::fs::create_dir_all(dir.path().join("project")).unwrap();
    dir
}

const CONFIG: &str = ".config/toolgate/toolgate.toml";

#[test]
fn write_file_cannot_reach_the_user_config_by_any_spelling() {
    let h = home();
    let abs = h.path().join(CONFIG).display().to_string();
    std::os::unix::fs::symlink(".config", h.path().join("cfglink")).unwrap();
    std::os::unix::fs::symlink(h.path().join(".config"), h.path().join("abslink")).unwrap();
    for path in [
        CONFIG.to_owned(),
        format!("./{CONFIG}"),
        format!("project/../{CONFIG}"),
        abs,
        "cfglink/toolgate/toolgate.toml".to_owned(),
        "abslink/toolgate/toolgate.toml".to_owned(),
        ".config/toolgate/new.toml".to_owned(),
        ".local/share/toolgate/trust.json".to_owned(),
    ] {
        let out = in_home(h.path())
            .args([
                "call",
                "write_file",
                &json!({"path": path, "content": "yolo = true\n"}).to_string(),
            ])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{path}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let result = json_out(&out);
        assert_eq!(result["error"]["source"], "builtin_deny", "{path}: {result}");
    }
    assert_eq!(
        std::fs::read_to_string(h.path().join(CONFIG)).unwrap(),
        "# the user's\n"
    );
    assert!(!h.path().join(".config/toolgate/new.toml").exists());
    // The lower bound: an ordinary file beside them is written.
    let out = in_home(h.path())
        .args(["call", "write_file", r#"{"path": "project/notes.md", "content": "ok"}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn exec_shell_cannot_write_or_swap_the_user_config() {
    let h = home();
    // Written plainly, the redirection is refused before it runs.
    let out = in_home(h.path())
        .args([
            "call",
            "exec_shell",
            &json!({"command": format!("echo 'yolo = true' > {CONFIG}")}).to_string(),
        ])
        .output()
        .unwrap();
    assert_eq!(
        json_out(&out)["error"]["source"],
        "builtin_deny",
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Hidden from the analysis (a script computed at run time), the sandbox stops it.
    let hidden = format!(
        "echo 'yolo = true' > {CONFIG}; echo x >> {CONFIG}; mv .config .old; mv .config/toolgate .config/t2; \
         rm -rf .config; cp /etc/hostname {CONFIG}; echo 'x' > .local/share/toolgate/trust.json; \
         python3 -c \"open('{CONFIG}', 'w').write('yolo = true')\"; echo fine > project/out.txt"
    );
    let attack = format!("eval \"$(printf '%s' {})\"", shell_quote(&hidden));
    let out = in_home(h.path())
        .args(["call", "exec_shell", &json!({"command": attack}).to_string()])
        .output()
        .unwrap();
    let result = json_out(&out);
    assert_eq!(
        std::fs::read_to_string(h.path().join(CONFIG)).unwrap(),
        "# the user's\n",
        "{result}"
    );
    assert!(h.path().join(".config/toolgate").is_dir());
    assert!(!h.path().join(".local/share/toolgate/trust.json").exists());
    // The sandbox is on by default, and the rest of the workspace stays writable.
    let fs = result["sandbox"]["filesystem"].as_str().unwrap_or_default();
    assert!(fs.starts_with("enforced"), "{result}");
    assert_eq!(
        std::fs::read_to_string(h.path().join("project/out.txt")).unwrap(),
        "fine\n",
        "{result}"
    );
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[test]
fn file_tools_refuse_fifos_devices_and_hard_links_without_hanging() {
    let h = home();
    let p = h.path().join("project");
    nix::unistd::mkfifo(&p.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "secret").unwrap();
    std::fs::hard_link(outside.path().join("secret"), p.join("link")).unwrap();
    for (tool, args, needle) in [
        ("read_file", json!({"path": "project/fifo"}), "FIFO"),
        ("write_file", json!({"path": "project/fifo", "content": "x"}), "FIFO"),
        ("read_file", json!({"path": "project/link"}), "hard links"),
        (
            "write_file",
            json!({"path": "project/link", "content": "pwned"}),
            "hard links",
        ),
        (
            "edit_file",
            json!({"path": "project/link", "old_string": "secret", "new_string": "pwned"}),
            "hard links",
        ),
    ] {
        let out = in_home(h.path())
            .args(["call", tool, &args.to_string()])
            .timeout(std::time::Duration::from_secs(30))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{tool} {args}: {stdout}");
        assert!(stdout.contains(needle), "{tool} {args}: {stdout}");
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret")).unwrap(),
        "secret"
    );
}

#[test]
fn hard_link_reads_only_when_the_configuration_allows_them_and_never_writes() {
    let h = home();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("shared"), "shared text").unwrap();
    std::fs::hard_link(outside.path().join("shared"), h.path().join("project/link")).unwrap();
    let config = h.path().join("project/allow.toml");
    std::fs::write(&config, "[files]\nhardlink_reads = true\n").unwrap();
    let read = in_home(h.path())
        .arg("--config")
        .arg(&config)
        .args(["call", "read_file", r#"{"path": "project/link"}"#])
        .output()
        .unwrap();
    assert_eq!(read.status.code(), Some(0), "{}", String::from_utf8_lossy(&read.stdout));
    assert_eq!(json_out(&read)["content"], "shared text");
    let write = in_home(h.path())
        .arg("--config")
        .arg(&config)
        .args(["call", "write_file", r#"{"path": "project/link", "content": "pwned"}"#])
        .output()
        .unwrap();
    assert_eq!(write.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&write.stdout).contains("hard links"));
    assert_eq!(
        std::fs::read_to_string(outside.path().join("shared")).unwrap(),
        "shared text"
    );
}
