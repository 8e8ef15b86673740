//! toolgate's secrets (approver and client tokens, provider keys) out of `/proc`: once read,
//! their bytes in the process's original argument and environment block — what
//! `/proc/PID/cmdline` and `/proc/PID/environ` show to any process of the same user — are
//! overwritten. Environment secrets stay readable to toolgate itself (set again, on the heap,
//! which `/proc/PID/environ` does not show). Children never inherit them: `exec_shell` and
//! upstream MCP servers start with a minimal environment.

/// Whether an environment variable holds a secret.
fn secret_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    [
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "API_KEY",
        "APIKEY",
        "ACCESS_KEY",
        "PRIVATE_KEY",
    ]
    .iter()
    .any(|k| n.contains(k))
}

/// Options whose value is a secret.
const SECRET_OPTIONS: &[&str] = &["--token", "--approver-token", "--client"];

/// The `[start, end)` addresses of the argument and environment blocks, from /proc/self/stat.
fn blocks() -> Option<((usize, usize), (usize, usize))> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    // Fields counted from 3 (state) after the command name: arg_start is field 48.
    let f: Vec<&str> = after.split_whitespace().collect();
    let at = |n: usize| f.get(n - 3).and_then(|v| v.parse::<usize>().ok());
    Some(((at(48)?, at(49)?), (at(50)?, at(51)?)))
}

/// Overwrites `len` bytes at `start + offset`, inside `[start, end)`.
fn blank(start: usize, end: usize, offset: usize, len: usize) {
    if start == 0 || start.checked_add(offset + len).is_none_or(|e| e > end) {
        return;
    }
    // SAFETY: the range lies inside this process's own argument or environment block, as the
    // kernel reports it; those pages are the process's writable stack.
    unsafe { std::ptr::write_bytes((start + offset) as *mut u8, b'*', len) };
}

/// Scrubs the secrets from the process's original blocks. Call once, first thing in `main`,
/// before any thread starts (it sets environment variables).
pub fn scrub() {
    let Some(((arg_start, arg_end), (env_start, env_end))) = blocks() else {
        return;
    };
    if let Ok(cmdline) = std::fs::read("/proc/self/cmdline") {
        let mut offset = 0;
        let mut secret_next = false;
        for arg in cmdline.split(|b| *b == 0) {
            let text = String::from_utf8_lossy(arg);
            if secret_next {
                blank(arg_start, arg_end, offset, arg.len());
            }
            secret_next = SECRET_OPTIONS.contains(&text.as_ref());
            if let Some(opt) = SECRET_OPTIONS.iter().find(|o| text.starts_with(&format!("{o}="))) {
                blank(arg_start, arg_end, offset + opt.len() + 1, arg.len() - opt.len() - 1);
            }
            offset += arg.len() + 1;
        }
    }
    if let Ok(environ) = std::fs::read("/proc/self/environ") {
        let mut offset = 0;
        for entry in environ.split(|b| *b == 0) {
            let text = String::from_utf8_lossy(entry);
            if let Some((name, _)) = text.split_once('=')
                && secret_name(name)
                && let Ok(value) = std::env::var(name)
            {
                blank(
                    env_start,
                    env_end,
                    offset + name.len() + 1,
                    entry.len() - name.len() - 1,
                );
                // SAFETY: called before any other thread exists (see above).
                unsafe { std::env::set_var(name, value) };
            }
            offset += entry.len() + 1;
        }
    }
}
