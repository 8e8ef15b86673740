//! The gateway fed thousands of tool schemas nobody here wrote: the 3,420 distinct function
//! definitions of the Berkeley Function Calling Leaderboard (the `bfcl-eval` package's data),
//! served as they are by an MCP server built on the official Python SDK
//! (`scripts/bfcl_server.py`), behind `toolgate serve`, listed and called by the official Python
//! SDK 2.x client (`scripts/corpus_client.py`), and exported by `toolgate tools` for each provider,
//! checked with the providers' SDK types and documented rules (`scripts/check_exports.py`).
//!
//! What broke here before: tools that vanished without a word, a name shown to the model that ran
//! another tool, one `tools/list` event larger than the client accepts, exports Gemini and OpenAI
//! strict mode refuse.

mod common;
use common::{peer, serve_on, toolgate, workspace};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/bfcl_server.py");

/// The corpus's data, the Python that serves it (SDK 1.x) and the one that calls it (SDK 2.x).
fn peers() -> Option<(PathBuf, PathBuf, PathBuf)> {
    Some((
        peer("TOOLGATE_BFCL_DATA")?,
        peer("TOOLGATE_MCP_PY1")?,
        peer("TOOLGATE_MCP_PY2")?,
    ))
}

fn config(dir: &Path, data: &Path, python: &Path) -> PathBuf {
    let path = dir.join("gateway.toml");
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.bfcl]\ncommand = {python:?}\nargs = [{SERVER:?}, {data:?}]\nstartup_timeout_secs = 120\n\n\
             [permissions]\nallow = [\"bfcl__*\"]\n",
            python = python.display().to_string(),
            data = data.display().to_string(),
        ),
    )
    .unwrap();
    path
}

/// How many definitions the corpus server serves (its own count).
fn served_upstream(python: &Path, data: &Path) -> usize {
    let out = Command::new(python)
        .arg(SERVER)
        .arg(data)
        .arg("--count")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn python_json(python: &Path, args: &[&str]) -> Value {
    let out = Command::new(python).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?} printed no JSON: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_real_world_tool_is_served_or_reported_and_runs_the_definition_it_was_shown_as() {
    let Some((data, py1, py2)) = peers() else {
        return;
    };
    let upstream = served_upstream(&py1, &data);
    let ws = workspace();
    let work = ws.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let config = config(ws.path(), &data, &py1);
    let (_g, addr) = serve_on(&work, "memory", Some(&config), &[], &[]);

    // Never silent: every definition the server offers is either listed or reported, with the
    // JSON pointer of its problem, in /healthz.
    let health: Value = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let bfcl = &health["servers"]["bfcl"];
    assert_eq!(bfcl["state"], "ready", "{health}");
    let unserved = bfcl["unserved"].as_array().cloned().unwrap_or_default();
    for tool in &unserved {
        let problem = tool["problem"].as_str().unwrap_or_default();
        assert!(problem.contains(" at /"), "no pointer to the problem: {tool}");
    }

    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/corpus_client.py");
    let seen = python_json(&py2, &[client, &format!("http://{addr}/mcp")]);
    let pages = seen["pages"].as_u64().unwrap();
    let corpus: Vec<&Value> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| !t["shown"].is_null())
        .collect();
    // Paged: the whole list (~3 MB) is more than the 1 MiB event the SDK takes, so one page would
    // have failed in the client; a page is at most 256 tools.
    assert!(pages as usize >= corpus.len().div_ceil(256), "{pages} pages");
    assert_eq!(corpus.len() + unserved.len(), upstream, "a definition went missing");
    assert_eq!(bfcl["tools"].as_u64(), Some(corpus.len() as u64), "{health}");

    // A bijection: each listed name once, each definition behind one listed name.
    let names: BTreeSet<&str> = corpus.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), corpus.len(), "a name listed twice");
    let shown: BTreeSet<u64> = corpus.iter().map(|t| t["shown"].as_u64().unwrap()).collect();
    assert_eq!(shown.len(), corpus.len(), "a definition listed under two names");
    for name in &names {
        assert!(
            name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{name} is not a name every provider takes"
        );
    }

    // Every call ran the definition whose description it was shown with, or was refused before
    // anything ran: arguments drawn from a schema that contradicts itself (an integer whose
    // enum lists strings) are the only refusals.
    let mut refused = BTreeMap::new();
    for tool in &corpus {
        match tool.get("ran") {
            Some(ran) => assert_eq!(ran, &tool["shown"], "{tool}: ran another definition"),
            None => {
                assert_eq!(tool["error"], "invalid_arguments", "{tool}");
                refused.insert(tool["name"].as_str().unwrap().to_owned(), tool["message"].clone());
            }
        }
    }
    assert!(
        refused.len() * 100 <= corpus.len(),
        "more than 1% refused: {refused:#?}"
    );
}

/// `toolgate tools --format F` with the corpus server as an upstream.
fn export(work: &Path, config: &Path, format: &str) -> PathBuf {
    let out = toolgate(work)
        .args(["--config"])
        .arg(config)
        .args(["--store", "memory", "tools", "--format", format])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let path = work.join(format!("{format}.json"));
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

fn check(python: &Path, format: &str, file: &Path) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/check_exports.py");
    python_json(python, &[script, format, &file.display().to_string()])
}

#[test]
fn every_provider_export_of_the_corpus_is_what_the_provider_accepts() {
    let Some((data, py1, _)) = peers() else {
        return;
    };
    let Some(sdks) = peer("TOOLGATE_PYTHON") else {
        return;
    };
    let ws = workspace();
    let work = ws.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let config = config(ws.path(), &data, &py1);
    let upstream = served_upstream(&py1, &data);
    let mut exported = BTreeMap::new();
    for format in ["openai", "responses", "anthropic", "gemini"] {
        let file = export(&work, &config, format);
        let verdict = check(&sdks, format, &file);
        assert_eq!(verdict["failed"], 0, "{format}: {verdict:#}");
        // Nothing was left out of the export to make it pass (the built-ins come on top).
        assert!(
            verdict["tools"].as_u64().unwrap() as usize >= upstream - 1,
            "{format}: {verdict}"
        );
        exported.insert(format, (file, verdict));
    }
    let (openai, verdict) = &exported["openai"];
    // Strict mode is still claimed where it holds: not dropped everywhere to be safe.
    assert!(verdict["strict"].as_u64().unwrap() > 0, "{verdict}");
    assert_eq!(exported["responses"].1["strict"], verdict["strict"]);

    // The checker refuses what the providers refuse: strict claimed for every schema, and the
    // full schemas given to Gemini as they are.
    let mut all_strict: Value = serde_json::from_slice(&std::fs::read(openai).unwrap()).unwrap();
    let mut as_gemini = Vec::new();
    for tool in all_strict.as_array_mut().unwrap() {
        tool["function"]["strict"] = json!(true);
        let f = &tool["function"];
        as_gemini.push(json!({"name": f["name"], "description": f["description"], "parameters": f["parameters"]}));
    }
    let forced = work.join("forced.json");
    std::fs::write(&forced, all_strict.to_string()).unwrap();
    let refused = check(&sdks, "openai", &forced);
    assert!(refused["failed"].as_u64().unwrap() > 1_000, "{refused}");
    let raw = work.join("raw-gemini.json");
    std::fs::write(&raw, json!([{"functionDeclarations": as_gemini}]).to_string()).unwrap();
    let refused = check(&sdks, "gemini", &raw);
    assert!(refused["failed"].as_u64().unwrap() > 0, "{refused}");
}
