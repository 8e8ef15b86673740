//! Which process opened a journal row: `host/pid/start`, where `start` is the process's start
//! time in clock ticks since boot (so a recycled pid is not mistaken for the original process).

/// This process's owner text.
pub fn this_process() -> String {
    let pid = std::process::id();
    format!("{}/{}/{}", host(), pid, start_ticks(pid).unwrap_or(0))
}

/// Whether the process named by an owner text is still running: `Some(true)` or `Some(false)` on
/// this host, `None` when it ran elsewhere or the text is not an owner.
pub fn alive(owner: &str) -> Option<bool> {
    let mut parts = owner.rsplitn(3, '/');
    let start: u64 = parts.next()?.parse().ok()?;
    let pid: u32 = parts.next()?.parse().ok()?;
    let host_name = parts.next()?;
    if host_name != host() {
        return None;
    }
    Some(start_ticks(pid) == Some(start))
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// Field 22 of `/proc/PID/stat`; the command name before it may hold spaces and parentheses.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_finished_one_is_not() {
        let me = this_process();
        assert_eq!(alive(&me), Some(true), "{me}");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let owner = format!("{}/{}/{}", host(), pid, start_ticks(pid).unwrap_or(1));
        child.wait().unwrap();
        assert_eq!(alive(&owner), Some(false));
        assert_eq!(alive("elsewhere/1/2"), None);
        assert_eq!(alive("garbage"), None);
        // The same pid with another start time is another process.
        let (rest, _) = me.rsplit_once('/').unwrap();
        assert_eq!(alive(&format!("{rest}/1")), Some(false));
    }
}
