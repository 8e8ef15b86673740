//! The gateway's Prometheus metrics, fed by the engine's event stream: calls by tool and
//! outcome, a latency histogram, calls in flight; approvals pending are read at scrape time.
//!
//! Kept here rather than behind the `metrics` facade: its recorder is process-global, and a
//! process may run several gateways (tests, embedding programs).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use toolgate_core::events::{Event, EventSink};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

/// The gateway's metrics; an [`EventSink`] for the engine.
#[derive(Default)]
pub struct Metrics {
    calls: Mutex<BTreeMap<(String, String), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    /// The calls running, with when each started (events carry whole milliseconds; buckets
    /// need better). Its size is the in-flight gauge.
    running: Mutex<std::collections::HashMap<toolgate_core::CallId, std::time::Instant>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Calls running now.
    pub fn in_flight(&self) -> usize {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The Prometheus text exposition (version 0.0.4).
    pub fn render(
        &self,
        approvals_pending: Option<usize>,
        backlog: toolgate_core::store::Backlog,
        replica: Option<&str>,
        jobs_running: usize,
    ) -> String {
        let mut out = String::new();
        if let Some(replica) = replica {
            out.push_str("# HELP toolgate_replica_info The replica these figures are from (its lease id).\n");
            out.push_str("# TYPE toolgate_replica_info gauge\n");
            let _ = writeln!(out, "toolgate_replica_info{{replica=\"{}\"}} 1", escape(replica));
        }
        out.push_str("# HELP toolgate_calls_total Tool calls finished, by tool and outcome.\n");
        out.push_str("# TYPE toolgate_calls_total counter\n");
        for ((tool, outcome), n) in self.calls.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(
                out,
                "toolgate_calls_total{{tool=\"{}\",outcome=\"{}\"}} {n}",
                escape(tool),
                escape(outcome)
            );
        }
        out.push_str("# HELP toolgate_call_duration_seconds Time from a call's start to its result, by tool.\n");
        out.push_str("# TYPE toolgate_call_duration_seconds histogram\n");
        for (tool, h) in self.latency.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let tool = escape(tool);
            let mut cumulative = 0;
            for (i, bound) in BUCKETS.iter().enumerate() {
                cumulative += h.counts[i];
                let _ = writeln!(
                    out,
                    "toolgate_call_duration_seconds_bucket{{tool=\"{tool}\",le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "toolgate_call_duration_seconds_bucket{{tool=\"{tool}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(out, "toolgate_call_duration_seconds_sum{{tool=\"{tool}\"}} {}", h.sum);
            let _ = writeln!(
                out,
                "toolgate_call_duration_seconds_count{{tool=\"{tool}\"}} {}",
                h.count
            );
        }
        out.push_str("# HELP toolgate_calls_in_flight Tool calls running now.\n");
        out.push_str("# TYPE toolgate_calls_in_flight gauge\n");
        let _ = writeln!(out, "toolgate_calls_in_flight {}", self.in_flight());
        out.push_str("# HELP toolgate_jobs_running Background jobs running now in this replica.\n");
        out.push_str("# TYPE toolgate_jobs_running gauge\n");
        let _ = writeln!(out, "toolgate_jobs_running {jobs_running}");
        if let Some(n) = approvals_pending {
            out.push_str("# HELP toolgate_approvals_pending Asks of this replica waiting for an answer.\n");
            out.push_str("# TYPE toolgate_approvals_pending gauge\n");
            let _ = writeln!(out, "toolgate_approvals_pending {n}");
        }
        out.push_str("# HELP toolgate_store_writes_held Journal rows the store refused, held to be retried.\n");
        out.push_str("# TYPE toolgate_store_writes_held gauge\n");
        let _ = writeln!(out, "toolgate_store_writes_held {}", backlog.held);
        out.push_str("# HELP toolgate_store_writes_lost_total Journal rows dropped after the store refused them.\n");
        out.push_str("# TYPE toolgate_store_writes_lost_total counter\n");
        let _ = writeln!(out, "toolgate_store_writes_lost_total {}", backlog.lost);
        out
    }
}

fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl EventSink for Metrics {
    fn emit(&self, event: &Event) {
        match event {
            Event::CallStarted { call_id, .. } => {
                self.running
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(call_id.clone(), std::time::Instant::now());
            }
            Event::CallFinished {
                call_id,
                tool,
                success,
                error_type,
                duration_ms,
                ..
            } => {
                let began = self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(call_id);
                let outcome = if *success {
                    "success"
                } else {
                    error_type.unwrap_or("error")
                };
                *self
                    .calls
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry((tool.to_string(), outcome.to_owned()))
                    .or_default() += 1;
                let seconds = began.map_or(*duration_ms as f64 / 1000.0, |t| t.elapsed().as_secs_f64());
                let mut latency = self.latency.lock().unwrap_or_else(|p| p.into_inner());
                let h = latency.entry(tool.to_string()).or_default();
                if let Some(i) = BUCKETS.iter().position(|b| seconds <= *b) {
                    h.counts[i] += 1;
                }
                h.sum += seconds;
                h.count += 1;
            }
            _ => {}
        }
    }
}
