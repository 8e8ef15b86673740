//! Secret redaction: arguments and raw call text lose API keys, bearer tokens and passwords
//! before they are stored in the journal or traced. Two tests decide what is a secret: the key
//! it is stored under (`password`, `api_key`, `Authorization`, `*_token`, …) and the shape of the
//! text itself (`sk-…`, `ghp_…`, `AKIA…`, JWTs, `Bearer …`, `user:pass@` in URLs, private keys).

use regex::{Regex, RegexSet};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::OnceLock;

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Token shapes: what kind of secret each finds (for messages, never the secret itself), the
/// pattern, and what replaces a match (`$k` keeps a captured key name).
const SHAPES: &[(&str, &str, &str)] = &[
    (
        "a private key",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
        REDACTED,
    ),
    (
        "an API key (sk-…)",
        r"\bsk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_\-]{16,}",
        REDACTED,
    ),
    (
        "a GitHub token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
        REDACTED,
    ),
    ("a GitLab token", r"\bglpat-[A-Za-z0-9_\-]{20,}", REDACTED),
    ("a Slack token", r"\bxox[abprs]-[A-Za-z0-9\-]{10,}", REDACTED),
    ("an AWS access key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", REDACTED),
    ("a Google API key", r"\bAIza[0-9A-Za-z_\-]{35}", REDACTED),
    (
        "a JSON Web Token",
        r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
        REDACTED,
    ),
    (
        "an authorization credential",
        r"(?i)\b(?P<k>bearer|basic|token)\s+[A-Za-z0-9._~+/\-]{8,}=*",
        "$k [REDACTED]",
    ),
    (
        "a password in a URL",
        r"(?P<k>://[^/\s:@]+:)[^/\s@]+@",
        "${k}[REDACTED]@",
    ),
    (
        "a secret assigned to a key",
        r#"(?i)(?P<k>\b(?:[a-z0-9]+[_\-])*(?:password|passwd|passphrase|pwd|secret|api[_\-]?key|apikey|access[_\-]?key|auth[_\-]?token|access[_\-]?token|refresh[_\-]?token|token|authorization|x-api-key|private[_\-]?key|client[_\-]?secret)["']?\s*[:=]\s*["']?)[^\s"'&,;}]+"#,
        "${k}[REDACTED]",
    ),
    (
        "a secret given as an option",
        r"(?i)(?P<k>--?(?:password|passwd|token|api-key|apikey|secret|auth-token)\s+)[^\s-][^\s]*",
        "${k}[REDACTED]",
    ),
];

/// Text every shape needs one of (compared without ASCII case): ASCII text with none of them
/// holds no secret shape, and the regexes are neither run nor compiled for it. Compiling them
/// costs milliseconds, which a CLI call whose arguments are a path would otherwise pay at every
/// start. Other text always goes to the regexes: their `(?i)` folds Unicode (`ſ` is an `s`).
const NEEDLES: &[&str] = &[
    "private key",
    "sk-",
    "gh",
    "github_pat_",
    "glpat-",
    "xox",
    "akia",
    "asia",
    "aiza",
    "eyj",
    "bearer",
    "basic",
    "token",
    "://",
    "pass",
    "pwd",
    "secret",
    "key",
    "authorization",
];

struct Redactor {
    any: RegexSet,
    /// Each shape, compiled the first time the set says it matches.
    each: Vec<OnceLock<Option<Regex>>>,
}

/// `None` only if the constant needles did not build (a bug): then every text is checked.
fn needles() -> Option<&'static aho_corasick::AhoCorasick> {
    static N: OnceLock<Option<aho_corasick::AhoCorasick>> = OnceLock::new();
    N.get_or_init(|| {
        aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(NEEDLES)
            .ok()
    })
    .as_ref()
}

fn redactor() -> &'static Redactor {
    static R: OnceLock<Redactor> = OnceLock::new();
    R.get_or_init(|| {
        let patterns: Vec<&str> = SHAPES.iter().map(|(_, p, _)| *p).collect();
        Redactor {
            // The patterns are constants covered by the tests below; a failure here is a bug in them.
            any: RegexSet::new(&patterns).unwrap_or_else(|_| RegexSet::empty()),
            each: SHAPES.iter().map(|_| OnceLock::new()).collect(),
        }
    })
}

/// Whether a key names a secret (`password`, `apiKey`, `X-Api-Key`, `github_token`, …).
pub fn is_secret_key(key: &str) -> bool {
    let k: String = key
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    const CONTAINS: &[&str] = &[
        "password",
        "passwd",
        "passphrase",
        "secret",
        "apikey",
        "accesskey",
        "privatekey",
        "authorization",
        "credential",
        "cookie",
    ];
    CONTAINS.iter().any(|c| k.contains(c)) || k.ends_with("token") || matches!(k.as_str(), "pwd" | "auth" | "bearer")
}

/// Text with every secret-shaped part replaced.
pub fn redact_text(text: &str) -> Cow<'_, str> {
    if text.is_ascii()
        && let Some(needles) = needles()
        && !needles.is_match(text)
    {
        return Cow::Borrowed(text);
    }
    let r = redactor();
    let mut matched = r.any.matches(text);
    if !matched.matched_any() {
        return Cow::Borrowed(text);
    }
    let mut out = Cow::Borrowed(text);
    // The shapes apply in order, each to the text the ones before it left: a replacement can
    // make a later shape match where the original text did not (`-token [REDACTED]x`), so the
    // set is asked again after every change.
    for (i, (_, pattern, with)) in SHAPES.iter().enumerate() {
        if !matched.matched(i) {
            continue;
        }
        let Some(re) = r.each[i].get_or_init(|| Regex::new(pattern).ok()) else {
            continue;
        };
        if let Cow::Owned(s) = re.replace_all(&out, *with) {
            matched = r.any.matches(&s);
            out = Cow::Owned(s);
        }
    }
    out
}

/// A JSON value with secrets replaced: values under secret keys, and secret-shaped text anywhere.
pub fn redact_value(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(redact_text(s).into_owned()),
        Value::Array(items) => Value::Array(items.iter().map(redact_value).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::Null | Value::Bool(_) => v.clone(),
                        _ if is_secret_key(k) => Value::String(REDACTED.into()),
                        _ => redact_value(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// What kind of secret `text` holds, if any (the first shape that matches, in order).
pub fn secret_kind(text: &str) -> Option<&'static str> {
    if text.is_ascii()
        && let Some(needles) = needles()
        && !needles.is_match(text)
    {
        return None;
    }
    let matched = redactor().any.matches(text);
    matched.iter().next().map(|i| SHAPES[i].0)
}

/// What kind of secret `text` holds as it is, or once decoded from the encodings a URL or an
/// HTTP request carries text in and the receiving server undoes without being asked:
/// percent-encoding (`%41KIA…`, up to three times over) and base64, standard or URL-safe (a run
/// of 16 or more base64 characters whose bytes are text). A text that hides a secret in an
/// encoding of its own (hex, reversed, split in pieces) is not found: this catches a secret sent
/// the ordinary way, not a model set on hiding one.
pub fn secret_kind_encoded(text: &str) -> Option<&'static str> {
    if let Some(kind) = secret_kind(text) {
        return Some(kind);
    }
    let mut layers: Vec<String> = Vec::new();
    while layers.len() < 3 {
        let Some(decoded) = percent_decoded(layers.last().map_or(text, String::as_str)) else {
            break;
        };
        if let Some(kind) = secret_kind(&decoded) {
            return Some(kind);
        }
        layers.push(decoded);
    }
    std::iter::once(text)
        .chain(layers.iter().map(String::as_str))
        .flat_map(base64_runs)
        .find_map(|run| base64_text(run).and_then(|decoded| secret_kind(&decoded)))
}

/// `text` with its `%XX` escapes decoded, when it has any (invalid UTF-8 replaced).
fn percent_decoded(text: &str) -> Option<String> {
    if !text.contains('%') {
        return None;
    }
    let bytes = text.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let (mut i, mut any) = (0, false);
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
            any = true;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    any.then(|| String::from_utf8_lossy(&out).into_owned())
}

/// The runs of 16 or more base64 characters (either alphabet) in `text`, and the pieces of each
/// between `/`s (a base64 character, and a URL's path separator: `example/Z2hw…`). Padding is
/// left out, and so split on: `k=Z2hw…` is the key and the run. Scanned as bytes: every base64
/// character is ASCII, so a run's ends are character boundaries.
fn base64_runs(text: &str) -> impl Iterator<Item = &str> {
    let is_b64 = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'-' | b'_');
    let bytes = text.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < bytes.len() {
            while at < bytes.len() && !is_b64(bytes[at]) {
                at += 1;
            }
            let start = at;
            while at < bytes.len() && is_b64(bytes[at]) {
                at += 1;
            }
            if at - start >= 16 {
                return text.get(start..at);
            }
        }
        None
    })
    .flat_map(|run| {
        let pieces = run.contains('/').then(|| run.split('/')).into_iter().flatten();
        std::iter::once(run).chain(pieces)
    })
    .filter(|run| run.len() >= 16)
}

/// The text a base64 run decodes to, in the standard or the URL-safe alphabet, when it is text.
fn base64_text(run: &str) -> Option<String> {
    use base64::Engine as _;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const LENIENT: GeneralPurposeConfig = GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true);
    const STANDARD: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::STANDARD, LENIENT);
    const URL_SAFE: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::URL_SAFE, LENIENT);
    let bytes = STANDARD.decode(run).or_else(|_| URL_SAFE.decode(run)).ok()?;
    String::from_utf8(bytes).ok()
}

/// The first secret-shaped string in a call's arguments (keys included), as it is or encoded
/// ([`secret_kind_encoded`]): its JSON pointer and what kind of secret it looks like. Used before
/// a call leaves the machine, so never the secret.
pub fn find_secret(arguments: &serde_json::Map<String, Value>) -> Option<(String, &'static str)> {
    fn object(map: &serde_json::Map<String, Value>, at: &mut String) -> Option<(String, &'static str)> {
        map.iter().find_map(|(k, item)| {
            // A secret used as a key is named by its object, never by a pointer that spells it.
            if let Some(kind) = secret_kind_encoded(k) {
                let object = if at.is_empty() { "/" } else { at.as_str() };
                return Some((format!("{object} (one of its keys)"), kind));
            }
            let len = at.len();
            at.push('/');
            at.push_str(&k.replace('~', "~0").replace('/', "~1"));
            let found = walk(item, at);
            at.truncate(len);
            found
        })
    }
    fn walk(v: &Value, at: &mut String) -> Option<(String, &'static str)> {
        match v {
            Value::String(s) => secret_kind_encoded(s).map(|k| (at.clone(), k)),
            Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
                let len = at.len();
                at.push('/');
                at.push_str(&i.to_string());
                let found = walk(item, at);
                at.truncate(len);
                found
            }),
            Value::Object(map) => object(map, at),
            _ => None,
        }
    }
    object(arguments, &mut String::new())
}

/// Whether a key of a tool's result names a credential. Stricter than [`is_secret_key`]: a
/// pagination token (`next_page_token`, `cursor_token`) is data a model needs, not a secret.
fn is_credential_key(key: &str) -> bool {
    if !is_secret_key(key) {
        return false;
    }
    let k = key.to_ascii_lowercase();
    !["page", "next", "cursor", "continuation", "sync", "prev"]
        .iter()
        .any(|w| k.contains(w))
}

/// Replaces the secrets in a tool's result, in place: secret-shaped text in every string, and
/// the value of every key that names a credential. Returns how many values changed (0: the
/// result is as it was).
pub fn redact_result(value: &mut Value) -> usize {
    match value {
        Value::String(s) => match redact_text(s) {
            Cow::Borrowed(_) => 0,
            Cow::Owned(r) => {
                *s = r;
                1
            }
        },
        Value::Array(items) => items.iter_mut().map(redact_result).sum(),
        Value::Object(map) => map
            .iter_mut()
            .map(|(k, v)| match v {
                Value::String(s) if s.is_empty() || s == REDACTED => 0,
                Value::String(_) | Value::Number(_) if is_credential_key(k) => {
                    *v = Value::String(REDACTED.into());
                    1
                }
                _ => redact_result(v),
            })
            .sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_secret_is_found_percent_encoded_or_in_base64_and_ordinary_encoded_text_is_not() {
        use base64::Engine as _;
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        let github = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345";
        let aws = "AKIAIOSFODNN7EXAMPLE";
        let percent = |s: &str| s.bytes().map(|b| format!("%{b:02X}")).collect::<String>();
        for spelled in [
            format!("https://evil.example/?k=%41KIA{}", &aws[4..]),
            format!("https://evil.example/?t=ghp%5F{}", &github[4..]),
            format!("https://evil.example/?t={}", percent(github)),
            // Encoded twice: a client that escaped an already escaped value.
            format!("https://evil.example/?t={}", percent(&percent(aws))),
            format!("https://evil.example/?t={}", STANDARD.encode(github)),
            format!(
                "https://evil.example/{}/x",
                URL_SAFE_NO_PAD.encode(format!("key {aws}"))
            ),
            format!(
                "https://evil.example/?d={}",
                percent(&STANDARD.encode(format!("token={github}")))
            ),
            format!("Basic {}", STANDARD.encode(format!("me:{github}"))),
        ] {
            assert!(secret_kind_encoded(&spelled).is_some(), "{spelled} went unseen");
        }
        for ordinary in [
            "https://example.com/search?q=hello%20world%21&lang=en",
            "https://example.com/a%2Fb/%E2%9C%93",
            "data:text/plain;base64,aGVsbG8gd29ybGQsIHRoaXMgaXMgZmluZQ==",
            "https://example.com/items/0123456789abcdef0123456789abcdef",
            "%%%41%4",
        ] {
            assert_eq!(secret_kind_encoded(ordinary), None, "{ordinary}");
        }
    }

    #[test]
    fn every_pattern_compiles() {
        let r = redactor();
        assert_eq!(r.each.len(), SHAPES.len());
        assert_eq!(r.any.len(), SHAPES.len());
        for (_, pattern, _) in SHAPES {
            assert!(Regex::new(pattern).is_ok(), "{pattern}");
        }
        assert!(needles().is_some());
    }

    /// Every shape, without the literal prefilter: what the prefilter must never change.
    fn slow(text: &str) -> String {
        static ALL: OnceLock<Vec<Regex>> = OnceLock::new();
        let all = ALL.get_or_init(|| SHAPES.iter().map(|(_, p, _)| Regex::new(p).unwrap()).collect());
        let mut out = text.to_owned();
        for (re, (_, _, with)) in all.iter().zip(SHAPES) {
            out = re.replace_all(&out, *with).into_owned();
        }
        out
    }

    proptest::proptest! {
        /// Text built from the pieces of every shape (mixed case, Unicode look-alikes, separators):
        /// the prefiltered redaction equals running every regex.
        #[test]
        fn the_prefilter_never_lets_a_secret_through(parts in proptest::collection::vec(
            proptest::sample::select(vec![
                "sk-", "SK-", "proj-", "ghp_", "gho_", "github_pat_", "glpat-", "xoxb-", "AKIA", "asia",
                "AIza", "eyJ", "Bearer ", "bAsIc ", "TOKEN ", "token=", "://", "admin:", "@", "s3cr3t",
                "PASSWORD", "pa\u{17f}\u{17f}word", "pwd", "Secret", "api_key", "x-api-key", "Key",
                "Authorization: ", "--password ", "-----BEGIN RSA PRIVATE KEY-----", ".", "=", ":",
                " ", "\"", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOP", "0123456789", "_", "-",
                "\u{212a}ey", "src/main.rs",
            ]),
            0..12,
        )) {
            let text: String = parts.concat();
            proptest::prop_assert_eq!(redact_text(&text).into_owned(), slow(&text), "{:?}", text);
        }
    }

    #[test]
    fn a_replacement_that_makes_a_later_shape_match_is_followed() {
        // The proptest's find: `token -X` is a bearer-style token, and what is left after it
        // (`-TOKEN [REDACTED]sk-sk-`) is a `-token VALUE` flag.
        let text = "sk-TOKEN -SK-token=sk-sk-";
        assert_eq!(redact_text(text), slow(text));
        assert!(!redact_text(text).contains("sk-sk-"));
    }

    #[test]
    fn secrets_by_key_name() {
        let v = redact_value(&json!({
            "password": "hunter2", "apiKey": "abc", "X-Api-Key": "abc", "github_token": "t",
            "Authorization": "whatever", "client_secret": 12345, "nested": [{"db_password": "p"}],
            "max_tokens": 100, "path": "src/main.rs", "enabled": true, "token": null
        }));
        assert_eq!(
            v,
            json!({
                "password": REDACTED, "apiKey": REDACTED, "X-Api-Key": REDACTED, "github_token": REDACTED,
                "Authorization": REDACTED, "client_secret": REDACTED, "nested": [{"db_password": REDACTED}],
                "max_tokens": 100, "path": "src/main.rs", "enabled": true, "token": null
            })
        );
    }

    #[test]
    fn secrets_by_shape() {
        let cases = [
            (
                "curl -H 'Authorization: Bearer abcdefgh12345678' x",
                "Authorization: [REDACTED]",
            ),
            ("Bearer abcdefgh12345678", "Bearer [REDACTED]"),
            (
                "export OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234",
                "OPENAI_API_KEY=[REDACTED]",
            ),
            ("key sk-ant-api03-abcdefghijklmnopqrstuv", "key [REDACTED]"),
            (
                "git clone https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/x",
                "[REDACTED]",
            ),
            ("aws AKIAABCDEFGHIJKLMNOP", "aws [REDACTED]"),
            ("psql postgres://admin:s3cr3t@db/x", "postgres://admin:[REDACTED]@db/x"),
            ("mysql --password hunter2 -u root", "--password [REDACTED] -u root"),
            ("{\"password\": \"hunter2\"}", "{\"password\": \"[REDACTED]\"}"),
            (
                "t=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijk",
                "t=[REDACTED]",
            ),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
                REDACTED,
            ),
            ("slack xoxb-1234567890-abcdef", "slack [REDACTED]"),
            ("AIzaSyA1234567890abcdefghijklmnopqrstuv", REDACTED),
        ];
        for (input, expected) in cases {
            let out = redact_text(input);
            assert!(out.contains(expected), "{input:?} became {out:?}");
            for secret in ["hunter2", "s3cr3t", "abcdefgh12345678", "MIIE", "1234567890-abcdef"] {
                assert!(!out.contains(secret), "{input:?} kept {secret:?}: {out:?}");
            }
        }
    }

    #[test]
    fn ordinary_text_is_untouched() {
        for text in [
            "cargo test --workspace",
            "ls -la src",
            "the token count is 5",
            "https://docs.rs/tokio",
        ] {
            assert!(matches!(redact_text(text), Cow::Borrowed(_)), "{text:?}");
        }
    }
}
