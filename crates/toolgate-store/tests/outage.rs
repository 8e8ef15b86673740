//! A PostgreSQL outage, made with a private cluster this test starts on its own loopback port
//! (never the shared server): a call that needs a synced row fails within a bounded time, read-only
//! calls go on with their rows held, and once the server is back every row is written.
//!
//! Needs PostgreSQL's server programs (`initdb`, `pg_ctl`); skipped without them, except under
//! `CI=true`.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolgate_core::store::{Backlog, JournalFilter, Store};
use toolgate_core::{SessionId, TurnOptions};
use toolgate_store::{StoreOptions, StoreUrl};

/// A throwaway cluster in a temporary directory; stopped (immediately) when dropped.
struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

fn server_programs() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("initdb").exists())
        .collect();
    found.sort();
    found.pop()
}

impl Cluster {
    fn run(&self, program: &str, args: &[&str]) {
        // initdb and the server refuse to run as root: as the postgres user then.
        let root = nix::unistd::Uid::effective().is_root();
        let mut cmd = if root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(self.bin.join(program));
            c
        } else {
            Command::new(self.bin.join(program))
        };
        let out = cmd.args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn init() -> Option<Self> {
        let Some(bin) = server_programs() else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true and no PostgreSQL server programs under /usr/lib/postgresql"
            );
            eprintln!("skipped: no PostgreSQL server programs under /usr/lib/postgresql");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        if nix::unistd::Uid::effective().is_root() {
            let status = Command::new("chown").arg("postgres:").arg(dir.path()).status().unwrap();
            assert!(status.success());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cluster = Self { bin, dir, port };
        cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "--no-instructions",
            ],
        );
        Some(cluster)
    }

    fn start(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log").display().to_string();
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-o", &options, "-l", &log, "-w", "start"],
        );
    }

    /// A fast shutdown: sessions are ended (57P01) as an operator's restart does.
    fn stop(&self) {
        self.run("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"]);
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", &self.data(), "-m", "immediate", "stop"])
            .output();
    }
}

async fn turn(
    engine: &Arc<toolgate_core::Engine>,
    session: &Arc<toolgate_core::Session>,
    ids: &[&str],
) -> Vec<Option<String>> {
    let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    let turn = engine
        .run_turn(session, &common::answer("noop", &ids), TurnOptions::default())
        .await;
    turn.outcomes.iter().map(common::error_type).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_fails_calls_in_bounded_time_and_loses_no_row() {
    let Some(cluster) = Cluster::init() else {
        return;
    };
    cluster.start();
    let options = StoreOptions {
        write_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(1),
        ..StoreOptions::default()
    };
    let store: Arc<dyn Store> = toolgate_store::open(&StoreUrl::Postgres(cluster.url()), &options)
        .await
        .unwrap();
    let reader = common::engine(vec![common::Noop::tool(true)]);
    let writer = common::engine(vec![common::Noop::tool(false)]);
    let on_reader = common::session(&reader, store.clone(), "outage");
    let on_writer = common::session(&writer, store.clone(), "outage");
    assert_eq!(turn(&writer, &on_writer, &["w-before"]).await, [None]);
    store.flush().await.unwrap();

    cluster.stop();
    let began = Instant::now();
    let during = turn(&writer, &on_writer, &["w-during"]).await;
    let took = began.elapsed();
    assert!(
        during[0].is_some(),
        "a call needing a synced row ran while the server was down"
    );
    // Bounded by the write timeout plus one attempt (connect timeout); it used to be ~40 s.
    assert!(took < Duration::from_secs(8), "failing took {took:?}");
    assert_eq!(turn(&reader, &on_reader, &["r-1", "r-2"]).await, [None, None]);
    assert!(
        store.flush().await.is_err(),
        "a flush cannot promise rows it could not write"
    );
    assert!(store.backlog().held >= 2, "{:?}", store.backlog());

    cluster.start();
    assert_eq!(turn(&writer, &on_writer, &["w-after"]).await, [None]);
    store.flush().await.unwrap();
    assert_eq!(store.backlog(), Backlog::default(), "every held row written, none lost");
    let filter = JournalFilter {
        session: Some(SessionId::new("outage")),
        ..JournalFilter::default()
    };
    let mut rows: Vec<(String, String)> = store
        .journal_list(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.call_id.to_string(), r.state.into_owned()))
        .collect();
    rows.sort();
    let rows: Vec<(&str, &str)> = rows.iter().map(|(c, s)| (c.as_str(), s.as_str())).collect();
    assert_eq!(
        rows,
        [
            ("r-1", "success"),
            ("r-2", "success"),
            ("w-after", "success"),
            ("w-before", "success")
        ]
    );
}
