//! The word-level half of the walk: redirections and the files they write, words and their
//! expansions (parameters, command substitutions, brace alternatives), and text that may hold
//! commands of its own.

use super::*;

impl Walker {
    pub(super) fn redirect(&mut self, r: &IoRedirect, depth: usize) {
        match r {
            IoRedirect::File(_, kind, target) => {
                let writes = matches!(
                    kind,
                    IoFileRedirectKind::Write
                        | IoFileRedirectKind::Append
                        | IoFileRedirectKind::ReadAndWrite
                        | IoFileRedirectKind::Clobber
                        | IoFileRedirectKind::DuplicateOutput
                );
                match target {
                    IoFileRedirectTarget::Filename(w) => {
                        let e = self.word(w, depth);
                        if writes {
                            self.write(e);
                        }
                    }
                    IoFileRedirectTarget::Duplicate(w) => {
                        let e = self.word(w, depth);
                        let to_file = !e.text.chars().all(|c| c.is_ascii_digit() || c == '-');
                        if writes && to_file {
                            self.write(e);
                        }
                    }
                    IoFileRedirectTarget::Fd(_) => {}
                    IoFileRedirectTarget::ProcessSubstitution(_, sub) => {
                        self.opaque("it uses process substitution");
                        self.list(&sub.list, depth + 1);
                    }
                }
            }
            IoRedirect::OutputAndError(w, _) => {
                let e = self.word(w, depth);
                self.write(e);
            }
            IoRedirect::HereString(_, w) => {
                let e = self.word(w, depth);
                self.stdin = if e.dynamic { Stdin::Unknown } else { Stdin::Text(e.text) };
            }
            IoRedirect::HereDocument(_, doc) => {
                let body = doc.doc.value.clone();
                if doc.requires_expansion && (body.contains('$') || body.contains('`')) {
                    self.opaque("it uses a here-document that expands substitutions");
                    self.nested_in_text(&body, depth);
                    self.stdin = Stdin::Unknown;
                } else {
                    self.stdin = Stdin::Text(body);
                }
            }
        }
    }

    pub(super) fn write(&mut self, e: Expanded) {
        if e.dynamic || e.pattern {
            self.opaque("it redirects output to a file whose name is computed at run time");
        } else if !inside_workspace(&e.text) {
            self.opaque("it redirects output to a file outside the workspace");
        }
        self.out.writes.push(Write {
            path: e.text,
            dynamic: e.dynamic || e.pattern,
            cwd: self.cwd.clone(),
        });
    }

    /// The word after quote removal and the expansions the line makes known.
    pub(super) fn word(&mut self, w: &Word, depth: usize) -> Expanded {
        // Plain words (no quotes, escapes, expansions or globs) are literal as written.
        let plain = !w.value.is_empty()
            && !w.value.starts_with('~')
            && w.value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%^".contains(&b));
        if plain {
            return Expanded {
                text: w.value.clone(),
                ..Expanded::default()
            };
        }
        let parsed = if oversized_tilde_index(&w.value) {
            None
        } else {
            std::panic::catch_unwind(|| brush_parser::word::parse(&w.value, &self.options)).ok()
        };
        match parsed.and_then(Result::ok).ok_or(()) {
            Ok(pieces) => {
                let mut out = Expanded::default();
                self.pieces(pieces, &mut out, false, depth);
                if out.dynamic {
                    self.opaque("it expands variables, substitutions or `~`, so what it runs is not known in advance");
                }
                out
            }
            Err(_) => {
                self.opaque("a word of it cannot be parsed");
                Expanded {
                    text: w.value.clone(),
                    dynamic: true,
                    pattern: false,
                }
            }
        }
    }

    pub(super) fn pieces(&mut self, pieces: Vec<WordPieceWithSource>, out: &mut Expanded, quoted: bool, depth: usize) {
        for piece in pieces {
            match piece.piece {
                WordPiece::Text(t) => {
                    if !quoted && has_pattern(&t) {
                        out.pattern = true;
                    }
                    out.text.push_str(&t);
                }
                WordPiece::SingleQuotedText(t) => out.text.push_str(&t),
                WordPiece::EscapeSequence(e) => {
                    let rest = e.strip_prefix('\\').unwrap_or(&e);
                    if rest != "\n" {
                        out.text.push_str(rest);
                    }
                }
                WordPiece::DoubleQuotedSequence(inner) | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, out, true, depth)
                }
                WordPiece::CommandSubstitution(body) | WordPiece::BackquotedCommandSubstitution(body) => {
                    out.dynamic = true;
                    self.script(&body, depth);
                }
                WordPiece::TildeExpansion(TildeExpr::Home) => {
                    out.dynamic = true;
                    out.text.push('~');
                }
                WordPiece::ParameterExpansion(expr) => match parameter(&expr) {
                    Some(name) => match self.vars.get(name) {
                        Some(Var::Known(v)) => out.text.push_str(v),
                        _ => {
                            out.dynamic = true;
                            if name == "HOME" {
                                out.text.push('~');
                            }
                        }
                    },
                    None => out.dynamic = true,
                },
                WordPiece::ArithmeticExpression(e) => {
                    out.dynamic = true;
                    self.maybe_commands(&e.value, depth);
                }
                WordPiece::AnsiCQuotedText(_) | WordPiece::TildeExpansion(_) => out.dynamic = true,
            }
        }
    }

    /// Text that may be commands (an arithmetic expression bash could read as subshells): its
    /// programs are listed when it parses, and nothing is said when it does not.
    pub(super) fn maybe_commands(&mut self, text: &str, depth: usize) {
        if depth >= MAX_NESTING {
            return;
        }
        let opaque = self.out.opaque.clone();
        if let Some(program) = parse_program(text, &self.options) {
            for complete in &program.complete_commands {
                self.list(complete, depth + 1);
            }
        }
        self.out.opaque = opaque.or_else(|| Some("it uses arithmetic".into()));
    }

    /// Command substitutions inside free text (an expanding here-document).
    pub(super) fn nested_in_text(&mut self, text: &str, depth: usize) {
        let mut rest = text;
        while let Some(start) = rest.find("$(") {
            let body = &rest[start + 2..];
            let end = body.find(')').unwrap_or(body.len());
            self.script(&body[..end], depth);
            rest = &body[end..];
        }
        if text.contains('`') {
            for (i, part) in text.split('`').enumerate() {
                if i % 2 == 1 {
                    self.script(part, depth);
                }
            }
        }
    }
}

/// The variable a plain `$x` / `${x}` names; `None` for anything more (defaults, indirection…).
pub(super) fn parameter(expr: &ParameterExpr) -> Option<&str> {
    match expr {
        ParameterExpr::Parameter {
            parameter: Parameter::Named(name),
            indirect: false,
        } => Some(name),
        _ => None,
    }
}

/// An unquoted glob or brace expansion.
pub(super) fn has_pattern(text: &str) -> bool {
    text.contains(['*', '?', '[']) || (text.contains('{') && (text.contains(',') || text.contains("..")))
}

/// What `echo` or `printf` with literal arguments writes, for a shell reading it from a pipe.
pub(super) fn literal_output(c: &Command) -> Option<String> {
    let Command::Simple(s) = c else {
        return None;
    };
    let name = s.word_or_name.as_ref()?;
    if !matches!(name.value.as_str(), "echo" | "printf") {
        return None;
    }
    let a = analyze(&c.to_string());
    let cmd = a
        .commands
        .first()
        .filter(|_| a.dynamic.is_none() && a.opaque.is_none())?;
    Some(
        cmd.words[1..]
            .iter()
            .filter(|w| !w.starts_with('-'))
            .cloned()
            .collect::<Vec<_>>()
            .join(" ")
            .replace("\\n", "\n"),
    )
}

/// A path without leading `./`.
pub(super) fn clean(path: &str) -> &str {
    let mut p = path;
    while let Some(rest) = p.strip_prefix("./") {
        p = rest.trim_start_matches('/');
    }
    p
}

/// `cwd` joined with `target` (an absolute path or one under `~` stands alone).
pub(super) fn join(cwd: Option<&str>, target: &str) -> Option<String> {
    if target.starts_with('/') || target.starts_with('~') {
        return Some(target.to_owned());
    }
    Some(format!("{}/{target}", cwd?))
}

/// Whether a redirection target is a file inside the workspace (relative, no `..`) or `/dev/null`.
pub(super) fn inside_workspace(path: &str) -> bool {
    if path == "/dev/null" {
        return true;
    }
    !path.is_empty()
        && !path.starts_with('/')
        && !path.starts_with('~')
        && !std::path::Path::new(path)
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// Expands unquoted brace alternatives (`/{bin,usr}` → `/bin`, `/usr`; `{a,}` → `a`, ``), up to
/// `limit` results; text without braces is returned as it is.
pub fn expand_braces(text: &str, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    braces(text, limit, &mut out);
    if out.is_empty() {
        out.push(text.to_owned());
    }
    out
}

fn braces(text: &str, limit: usize, out: &mut Vec<String>) {
    if out.len() >= limit {
        return;
    }
    let Some(open) = text.find('{') else {
        out.push(text.to_owned());
        return;
    };
    let mut level = 0usize;
    let mut parts = Vec::new();
    let mut start = open + 1;
    let mut close = None;
    for (i, c) in text[open..].char_indices().map(|(i, c)| (i + open, c)) {
        match c {
            '{' => level += 1,
            '}' => {
                level -= 1;
                if level == 0 {
                    parts.push(&text[start..i]);
                    close = Some(i);
                    break;
                }
            }
            ',' if level == 1 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    let Some(close) = close.filter(|_| parts.len() > 1) else {
        out.push(text.to_owned());
        return;
    };
    for part in parts {
        braces(&format!("{}{part}{}", &text[..open], &text[close + 1..]), limit, out);
    }
}

/// A `~N`, `~+N` or `~-N` whose number no `usize` holds: the word parser panics on it (it
/// unwraps the number's parse; found by fuzzing), so such a word is unparseable without asking
/// the parser. No directory stack is that deep.
pub(super) fn oversized_tilde_index(word: &str) -> bool {
    word.match_indices('~').any(|(at, _)| {
        let rest = &word[at + 1..];
        let rest = rest.strip_prefix(['+', '-']).unwrap_or(rest);
        let digits = &rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len())];
        !digits.is_empty() && digits.parse::<usize>().is_err()
    })
}
