//! Catastrophic commands `exec_shell` refuses before anything runs, whatever the permission rules
//! say: `rm -r` of `/`, home or a system directory (every spelling), `mkfs` and friends, `dd` or a
//! redirection onto a device, fork bombs, `shutdown`/`reboot`/`halt`/`poweroff`, recursive
//! `chmod`/`chown` of `/`. Every simple command of the parsed line is checked — inside pipelines,
//! chains, substitutions, control flow and function bodies, behind wrappers such as `sudo`,
//! `env`, `timeout`, and inside `bash -c`/`eval` strings — case-insensitively.

use toolgate_core::shell::analyze;

/// System directories whose recursive removal is refused.
const SYSTEM_DIRS: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc", "/root", "/run", "/sbin",
    "/srv", "/sys", "/usr", "/var",
];

/// Programs that run the command after their own options.
const PASS_THROUGH: &[&str] = &[
    "sudo", "doas", "nohup", "nice", "ionice", "time", "command", "builtin", "exec", "stdbuf", "setsid", "env",
    "timeout", "xargs", "watch", "chrt", "taskset", "unbuffer",
];

/// Why a command line is refused, if it is.
pub fn check(line: &str) -> Option<String> {
    check_depth(line, 0)
}

fn check_depth(line: &str, depth: usize) -> Option<String> {
    if depth > 4 {
        return None;
    }
    if let Some(why) = fork_bomb(line) {
        return Some(why);
    }
    let analysis = analyze(line);
    for target in &analysis.writes {
        if let Some(dev) = block_device(&target.to_ascii_lowercase()) {
            return Some(format!("it writes to the device {dev}"));
        }
    }
    for command in &analysis.commands {
        let words: Vec<String> = command.words.iter().map(|w| unquote(w).to_ascii_lowercase()).collect();
        if let Some(why) = check_words(&words, depth) {
            return Some(why);
        }
    }
    None
}

/// The program's name without its directory (`/usr/bin/rm` → `rm`).
fn program(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

fn check_words(words: &[String], depth: usize) -> Option<String> {
    let mut rest = words;
    // Unwrap `sudo -u x`, `env A=1`, `timeout 5`, `nice -n 5` … down to the real command.
    while let Some(first) = rest.first() {
        let name = program(first);
        if !PASS_THROUGH.contains(&name) {
            break;
        }
        rest = &rest[1..];
        while let Some(w) = rest.first() {
            let takes_value = matches!(
                w.as_str(),
                "-u" | "-g" | "-n" | "-c" | "-s" | "-k" | "-p" | "-i" | "-o" | "-e"
            );
            if w.starts_with('-') || w.contains('=') {
                rest = &rest[if takes_value && rest.len() > 1 { 2 } else { 1 }..];
            } else if name == "timeout" && w.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                rest = &rest[1..];
            } else {
                break;
            }
        }
    }
    let (first, args) = rest.split_first()?;
    let name = program(first);
    match name {
        "bash" | "sh" | "zsh" | "dash" | "ksh" => {
            let code = args
                .iter()
                .skip_while(|a| !a.starts_with('-') || !a.contains('c'))
                .nth(1)?;
            check_depth(unquote(code), depth + 1)
        }
        "eval" => check_depth(
            &args.iter().map(|a| unquote(a)).collect::<Vec<_>>().join(" "),
            depth + 1,
        ),
        "rm" => rm(args),
        "chmod" | "chown" | "chgrp" => {
            let recursive = args.iter().any(|a| recursive_flag(a));
            (recursive && args.iter().any(|a| root_like(a)).then_some(()).is_some())
                .then(|| format!("{name} -R of the whole filesystem"))
        }
        n if n == "mkfs"
            || n.starts_with("mkfs.")
            || matches!(n, "mke2fs" | "mkswap" | "wipefs" | "mkdosfs" | "mkntfs") =>
        {
            Some(format!("{name} formats a filesystem"))
        }
        "dd" => args
            .iter()
            .filter_map(|a| a.strip_prefix("of="))
            .find_map(block_device)
            .map(|dev| format!("dd writes to the device {dev}")),
        "shred" => args
            .iter()
            .find_map(|a| block_device(a))
            .map(|dev| format!("shred destroys the device {dev}")),
        "shutdown" | "reboot" | "halt" | "poweroff" => Some(format!("{name} stops the machine")),
        "init" | "telinit" if args.iter().any(|a| a == "0" || a == "6") => Some(format!("{name} stops the machine")),
        "systemctl"
            if args.iter().any(|a| {
                matches!(
                    a.as_str(),
                    "poweroff" | "reboot" | "halt" | "kexec" | "emergency" | "rescue"
                )
            }) =>
        {
            Some("systemctl stops the machine".into())
        }
        _ => None,
    }
}

/// A word the parser kept as written (it expands something) loses its outer double quotes.
fn unquote(word: &str) -> &str {
    word.strip_prefix('"')
        .and_then(|w| w.strip_suffix('"'))
        .or_else(|| word.strip_prefix('\'').and_then(|w| w.strip_suffix('\'')))
        .unwrap_or(word)
}

fn recursive_flag(arg: &str) -> bool {
    arg == "--recursive" || (arg.starts_with('-') && !arg.starts_with("--") && arg.contains('r'))
}

/// `rm` with a recursive flag on `/`, home or a system directory, or with `--no-preserve-root`.
fn rm(args: &[String]) -> Option<String> {
    if args.iter().any(|a| a == "--no-preserve-root") {
        return Some("rm --no-preserve-root".into());
    }
    if !args.iter().any(|a| recursive_flag(a)) {
        return None;
    }
    args.iter()
        .filter(|a| !a.starts_with('-'))
        .find(|a| root_like(a) || home_like(a) || system_dir(a))
        .map(|t| format!("rm -r of {t}"))
}

/// `/`, `/*`, `//`, `/.`, `/..`, `/./*` …
fn root_like(arg: &str) -> bool {
    let n = normalize(arg);
    n == "/" || n == "/*"
}

fn home_like(arg: &str) -> bool {
    let n = normalize(arg);
    matches!(
        n.as_str(),
        "~" | "~/" | "~/*" | "$home" | "${home}" | "$home/" | "$home/*" | "${home}/" | "${home}/*"
    )
}

fn system_dir(arg: &str) -> bool {
    let n = normalize(arg);
    let n = n.strip_suffix("/*").unwrap_or(&n);
    SYSTEM_DIRS.contains(&n)
}

/// Collapses repeated slashes and `.` segments, and `..` at the root; keeps a trailing `/*`.
fn normalize(path: &str) -> String {
    if !path.starts_with('/') {
        return path.trim_end_matches('/').to_owned().replace("//", "/");
    }
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    format!("/{}", parts.join("/"))
}

/// A block or raw device (not `/dev/null`, `/dev/zero`, the std streams, a tty or `/dev/fd/*`).
fn block_device(path: &str) -> Option<&str> {
    let dev = path.strip_prefix("/dev/")?;
    let harmless = matches!(
        dev,
        "null" | "zero" | "stdout" | "stderr" | "stdin" | "tty" | "random" | "urandom" | "full"
    ) || dev.starts_with("fd/")
        || dev.starts_with("pts/")
        || dev.starts_with("tcp/")
        || dev.starts_with("udp/")
        || dev.starts_with("shm/");
    (!harmless).then_some(path)
}

/// `:(){ :|:& };:` and the same with any name or spacing.
fn fork_bomb(line: &str) -> Option<String> {
    let squeezed: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    let is_name = |c: char| c.is_alphanumeric() || matches!(c, '_' | ':' | '.' | '-');
    for (at, _) in line.match_indices('(') {
        if !line[at + 1..].trim_start().starts_with(')') {
            continue;
        }
        let before = line[..at].trim_end();
        let name: String = before
            .chars()
            .rev()
            .take_while(|c| is_name(*c))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if !name.is_empty() && squeezed.contains(&format!("{name}|{name}&")) {
            return Some("it is a fork bomb".into());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFUSED: &[&str] = &[
        "rm -rf /",
        "rm -fr /",
        "rm -r -f /",
        "rm -Rf /*",
        "rm --recursive --force /",
        "rm -rf //",
        "rm -rf /.",
        "rm -rf /../",
        "rm -rf ~",
        "rm -rf ~/",
        "rm -rf $HOME",
        "rm -rf \"$HOME\"",
        "rm -rf /usr",
        "rm -rf /etc/*",
        "rm --no-preserve-root -rf /",
        "/bin/rm -rf /",
        "RM -RF /",
        "sudo rm -rf /",
        "sudo -u root rm -rf /",
        "env A=1 rm -rf /",
        "timeout 5 rm -rf /",
        "mkfs.ext4 /dev/sda1",
        "mkfs -t ext4 /dev/sda",
        "mkswap /dev/sdb",
        "wipefs -a /dev/sda",
        "dd if=/dev/zero of=/dev/sda bs=1M",
        "dd if=x of=/dev/nvme0n1",
        "cat image > /dev/sda",
        "echo x >/dev/mmcblk0",
        "shred /dev/sda",
        ":(){ :|:& };:",
        ":() { : | : & }; :",
        "bomb(){ bomb|bomb& };bomb",
        "shutdown -h now",
        "reboot",
        "halt",
        "poweroff",
        "init 0",
        "systemctl reboot",
        "chmod -R 777 /",
        "chown -R nobody /",
    ];

    #[test]
    fn each_pattern_alone_in_chains_and_in_substitutions() {
        for cmd in REFUSED {
            assert!(check(cmd).is_some(), "alone: {cmd}");
            for wrapped in [
                format!("echo start && {cmd}"),
                format!("ls; {cmd}; echo done"),
                format!("true | {cmd}"),
                format!("echo $({cmd})"),
                format!("echo `{cmd}`"),
                format!("( {cmd} )"),
                format!("if true; then {cmd}; fi"),
                format!("bash -c '{}'", cmd.replace('\'', "")),
                format!("sh -c \"{}\"", cmd.replace('"', "")),
            ] {
                if wrapped.contains("'") && cmd.contains('\'') {
                    continue;
                }
                assert!(check(&wrapped).is_some(), "wrapped: {wrapped}");
            }
        }
    }

    #[test]
    fn ordinary_commands_pass() {
        for cmd in [
            "rm -rf target",
            "rm -rf ./build/*",
            "rm file.txt",
            "rm -f /tmp/x",
            "ls -la /",
            "dd if=/dev/zero of=out.img bs=1M count=1",
            "echo hi > /dev/null",
            "cat x 2>/dev/null",
            "cargo test --workspace",
            "git status && git diff",
            "chmod -R 755 build",
            "f() { echo hi; }; f",
            "echo 'rm -rf /'",
            "grep -r shutdown src",
        ] {
            assert_eq!(check(cmd), None, "{cmd}");
        }
    }
}
