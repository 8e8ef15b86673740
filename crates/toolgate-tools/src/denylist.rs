//! Catastrophic commands `exec_shell` refuses before permission and approval, whatever the rules
//! or `--yolo` say: recursive deletes (`rm -r`, `find -delete`, `rsync --delete`), recursive
//! `chmod`/`chown`/`chgrp`, and `mv` of `/`, home, a system directory, an ancestor of the
//! workspace, or a glob that expands there; writes to block devices (`dd of=`, redirections,
//! `tee`, `cp`, `shred`); `mkfs` and friends; fork bombs; `shutdown`/`reboot`/`halt`/`poweroff`.
//!
//! It reads the same analysis as the permission rules ([`toolgate_core::shell`]): every program
//! the line runs, behind wrappers and inside inline scripts, with the working directory followed
//! through `cd` and the variables the line assigns. A target whose directory is not known in
//! advance (`cd "$X" && rm -rf *`) is refused when it names a whole directory; an unknown
//! variable counts as empty, as bash would expand it (`rm -rf $UNSET/` is `rm -rf /`).

use std::path::{Component, Path, PathBuf};
use toolgate_core::shell::{Analysis, Program, analyze, expand_braces};

/// Directories whose contents are the system: a glob directly inside them, or any entry of
/// them, is refused as a target.
const SYSTEM_ROOTS: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc", "/root", "/run",
    "/sbin", "/srv", "/sys", "/usr", "/var", "/snap", "/nix", "/media", "/mnt",
];

/// Where a line runs: the directory it starts in and the home directory `~` means.
#[derive(Clone, Debug)]
pub struct Place {
    /// The absolute directory the line starts in.
    pub start: PathBuf,
    /// The workspace (its ancestors are protected).
    pub workspace: PathBuf,
    /// `$HOME`.
    pub home: PathBuf,
}

impl Place {
    /// A line run in `workspace` (or `cwd` inside it), with this process's `$HOME`.
    pub fn new(workspace: &Path, cwd: Option<&str>) -> Self {
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
        Self {
            start: normalize(&workspace.join(cwd.unwrap_or("."))),
            workspace: workspace.to_path_buf(),
            home,
        }
    }
}

/// Why a command line is refused, if it is, run from the working directory.
pub fn check(line: &str) -> Option<String> {
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    check_at(line, &Place::new(&here, None))
}

/// Why a command line is refused, if it is, run at `place`.
pub fn check_at(line: &str, place: &Place) -> Option<String> {
    let analysis = analyze(line);
    check_analysis(&analysis, line, place)
}

/// The same, on an analysis already made.
pub fn check_analysis(analysis: &Analysis, line: &str, place: &Place) -> Option<String> {
    if let Some(why) = fork_bomb(line) {
        return Some(why);
    }
    if analysis.unparsed {
        // What cannot be parsed cannot be checked, and bash may run part of it anyway.
        return Some("toolgate's shell parser cannot read this line (or a script in it), so nothing in it can be checked; write it in plainer shell".into());
    }
    if !analysis.recursive_functions.is_empty() && line.contains(['&', '|']) {
        return Some(format!(
            "it is a fork bomb (the function {} calls itself in the background)",
            analysis.recursive_functions[0]
        ));
    }
    for w in &analysis.writes {
        for target in expand_braces(&w.path.to_ascii_lowercase(), 64) {
            if let Some(dev) = block_device(&target) {
                return Some(format!("it writes to the device {dev}"));
            }
        }
    }
    analysis.programs.iter().find_map(|p| check_program(p, place))
}

fn lower(p: &Program) -> Vec<String> {
    p.words.iter().map(|w| w.to_ascii_lowercase()).collect()
}

fn check_program(p: &Program, place: &Place) -> Option<String> {
    if p.dynamic {
        return None;
    }
    let words = lower(p);
    let (name, args) = words.split_first()?;
    let name = name.as_str();
    // The targets are checked as written (case matters in paths); flags and names lowercased.
    let raw_args = &p.words[1..];
    let cwd = p.cwd.as_deref();
    let targets = |skip: usize| -> Vec<&String> {
        let mut out = Vec::new();
        let mut options_done = false;
        let mut skipped = 0;
        for a in raw_args {
            if !options_done && a == "--" {
                options_done = true;
                continue;
            }
            if !options_done && a.starts_with('-') && a.len() > 1 {
                continue;
            }
            if skipped < skip {
                skipped += 1;
                continue;
            }
            out.push(a);
        }
        out
    };
    let recursive = args.iter().any(|a| recursive_flag(a));
    match name {
        "rm" => {
            if args.iter().any(|a| a == "--no-preserve-root") {
                return Some("rm --no-preserve-root".into());
            }
            if !recursive {
                return None;
            }
            targets(0)
                .into_iter()
                .find_map(|t| catastrophic(t, cwd, place))
                .map(|why| format!("rm -r of {why}"))
        }
        "find" => {
            let deletes = args.iter().any(|a| a == "-delete")
                || args
                    .iter()
                    .zip(args.iter().skip(1))
                    .any(|(a, b)| matches!(a.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") && destroys(b));
            if !deletes {
                return None;
            }
            let starts: Vec<&String> = raw_args
                .iter()
                .take_while(|a| !a.starts_with('-') && !matches!(a.as_str(), "(" | "!" | ")"))
                .collect();
            let dot = ".".to_owned();
            let starts = if starts.is_empty() { vec![&dot] } else { starts };
            starts
                .into_iter()
                .find_map(|t| catastrophic(t, cwd, place))
                .map(|why| format!("find deletes everything under {why}"))
        }
        "rsync" if args.iter().any(|a| a.starts_with("--delete")) => targets(0)
            .last()
            .and_then(|t| catastrophic(t, cwd, place))
            .map(|why| format!("rsync --delete into {why}")),
        "chmod" | "chown" | "chgrp" if recursive => targets(1)
            .into_iter()
            .find_map(|t| catastrophic(t, cwd, place))
            .map(|why| format!("{name} -R of {why}")),
        "mv" => {
            let all = targets(0);
            let sources = &all[..all.len().saturating_sub(1)];
            sources
                .iter()
                .find_map(|t| catastrophic(t, cwd, place))
                .map(|why| format!("mv of {why}"))
        }
        n if n == "mkfs"
            || n.starts_with("mkfs.")
            || matches!(
                n,
                "mke2fs"
                    | "mkswap"
                    | "wipefs"
                    | "mkdosfs"
                    | "mkntfs"
                    | "mkfs.vfat"
                    | "sfdisk"
                    | "fdisk"
                    | "parted"
                    | "sgdisk"
            ) =>
        {
            Some(format!("{name} formats or repartitions a disk"))
        }
        "dd" => args
            .iter()
            .filter_map(|a| a.strip_prefix("of="))
            .find_map(block_device)
            .map(|dev| format!("dd writes to the device {dev}")),
        "shred" | "tee" | "cp" | "truncate" | "blkdiscard" => args
            .iter()
            .find_map(|a| block_device(a))
            .map(|dev| format!("{name} writes to the device {dev}")),
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

/// A program `find -exec` runs that deletes what it is given.
fn destroys(program: &str) -> bool {
    let name = program.rsplit('/').next().unwrap_or(program);
    matches!(name, "rm" | "shred" | "unlink" | "rmdir")
}

fn recursive_flag(arg: &str) -> bool {
    arg == "--recursive" || (arg.starts_with('-') && !arg.starts_with("--") && arg.contains('r'))
}

/// Why a target is catastrophic, if it is: `/`, home, a system directory or an entry of one, an
/// ancestor of the workspace, a glob that expands there, or a whole directory whose location is
/// not known in advance.
fn catastrophic(target: &str, cwd: Option<&str>, place: &Place) -> Option<String> {
    for alt in expand_braces(target, 64) {
        if alt.is_empty() {
            continue;
        }
        let Some(abs) = resolve(&alt, cwd, place) else {
            let whole = matches!(
                alt.trim_end_matches('/'),
                "*" | "." | ".." | ".*" | "./*" | "../*" | "./." | "./.*"
            ) || alt.starts_with("..");
            if whole {
                return Some(format!("{alt} in a directory not known in advance"));
            }
            continue;
        };
        if let Some(why) = protected(&abs, place) {
            return Some(if alt == abs.to_string_lossy() {
                why
            } else {
                format!("{alt} ({why})")
            });
        }
    }
    None
}

/// The absolute, normalised path a target names, or `None` when its directory is unknown.
fn resolve(target: &str, cwd: Option<&str>, place: &Place) -> Option<PathBuf> {
    let under_home = |rest: &str| place.home.join(rest.trim_start_matches('/'));
    let path = if let Some(rest) = target.strip_prefix('~') {
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None; // ~user: another home, not known here
        }
        under_home(rest)
    } else if target.starts_with('/') {
        PathBuf::from(target)
    } else {
        let base = match cwd? {
            c if c.starts_with('/') => PathBuf::from(c),
            c if c.starts_with('~') => under_home(c.trim_start_matches('~')),
            c => place.start.join(c),
        };
        base.join(target)
    };
    Some(normalize(&path))
}

/// Collapses `.`, `..` (never above `/`) and repeated slashes, lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Why an absolute path is protected, if it is.
fn protected(abs: &Path, place: &Place) -> Option<String> {
    let text = abs.to_string_lossy();
    // The directory before the first component with a glob: a glob expands to its entries.
    let mut dir = PathBuf::from("/");
    let mut globbed = false;
    for c in abs.components().skip(1) {
        let part = c.as_os_str().to_string_lossy();
        if has_glob(&part) {
            globbed = true;
            break;
        }
        dir.push(c.as_os_str());
    }
    let root = Path::new("/");
    let is_root_like = |d: &Path| d == root || d == place.home || SYSTEM_ROOTS.iter().any(|s| d == Path::new(s));
    let ancestor_of_workspace = |d: &Path| place.workspace.starts_with(d) && d != place.workspace;
    if globbed {
        if is_root_like(&dir) || ancestor_of_workspace(&dir) {
            return Some(format!("{text}, a glob over {}", dir.display()));
        }
        return None;
    }
    if abs == root {
        return Some("/ (the whole filesystem)".into());
    }
    if abs == place.home {
        return Some(format!("{text} (the home directory)"));
    }
    if ancestor_of_workspace(abs) {
        return Some(format!("{text} (it contains the workspace)"));
    }
    let depth = abs.components().count() - 1;
    if depth == 1 {
        return Some(format!("{text} (a top-level system directory)"));
    }
    if depth == 2
        && let Some(parent) = abs.parent()
        && SYSTEM_ROOTS.iter().any(|s| parent == Path::new(s))
        && parent != Path::new("/home")
        && parent != Path::new("/mnt")
        && parent != Path::new("/media")
    {
        return Some(format!("{text} (a system directory)"));
    }
    if depth == 2 && abs.parent() == Some(Path::new("/home")) {
        return Some(format!("{text} (a home directory)"));
    }
    None
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

    fn refused() -> Vec<String> {
        serde_json::from_str(include_str!("../tests/corpus/catastrophic.json")).unwrap_or_default()
    }

    #[test]
    fn each_pattern_alone_in_chains_and_in_substitutions() {
        let refused = refused();
        assert!(refused.len() >= 50, "{}", refused.len());
        for cmd in &refused {
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
                // Inside double quotes the outer shell expands `$x` first: not the same line.
                // Quotes removed from the command change what it means.
                if wrapped.starts_with("echo $((") {
                    continue; // arithmetic, not a substitution
                }
                let quoted = wrapped.starts_with("sh -c") || wrapped.starts_with("bash -c");
                if (wrapped.starts_with("sh -c \"") && cmd.contains('$')) || (quoted && cmd.contains(['\'', '"'])) {
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
