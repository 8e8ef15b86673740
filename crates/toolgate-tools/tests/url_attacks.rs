//! URL spellings against a domain rule: the rule reads the URL as the fetcher parses it, so no
//! spelling that sends the request elsewhere is allowed by `fetch_url(domain:example.com)`, and
//! internal addresses are refused before permission whatever a rule says (`builtin_deny`).
//! Decided through `Engine::check`: nothing is fetched.

mod common;

use common::engine;
use serde_json::{Map, json};
use std::sync::Arc;
use toolgate_core::permit::DenyAll;
use toolgate_core::{CallId, Engine, Session, ToolCall};

fn check(engine: &Engine, s: &Session, url: &str) -> (String, String) {
    let mut args = Map::new();
    args.insert("url".into(), json!(url));
    let r = engine.check(s, &ToolCall::new(CallId::generate(), "fetch_url", args));
    (r.decision.to_owned(), r.source)
}

#[test]
fn url_spellings_cannot_borrow_an_allowed_domain() {
    let engine = engine();
    let ws = tempfile::tempdir().unwrap();
    let s = common::session(
        &engine,
        ws.path(),
        &["fetch_url(domain:example.com)"],
        &[],
        false,
        Arc::new(DenyAll),
    );
    // Another host, however the URL is dressed: never allowed by the rule.
    let elsewhere = [
        "http://example.com@evil.com/",
        "http://example.com:80@evil.com/",
        "http://user:example.com@evil.com/",
        "http://evil.com#@example.com/",
        "http://evil.com?@example.com/",
        "http://evil.com/?u=http://example.com/",
        "http://evil.com/example.com",
        "http://example.com.evil.com/",
        "http://evilexample.com/",
        "http://example.com%2eevil.com/",
        "http://evil.com\\@example.com/",
        "http://evil.com\\example.com",
        "http://evil.com%40example.com/",
        "http://example.co/",
        "http://example.com.evil/",
        "http://xn--exmple-cua.com/",
        "http://exämple.com/",
        "https://evil.com:443#example.com",
        "http://evil.com;example.com/",
        "http://evil.com&example.com/",
        "http://[2001:db8::1]/example.com",
    ];
    for url in elsewhere {
        let (decision, source) = check(&engine, &s, url);
        assert_ne!(decision, "allow", "{url}: {source}");
    }
    // Internal addresses: refused before permission, whatever the spelling.
    let internal = [
        "http://[::1]:8080\\@example.com/",
        "http://127.0.0.1\\@example.com/",
        "http://127.0.0.1#@example.com/",
        "http://localhost\\@example.com/",
        "http://0x7f000001/",
        "http://2130706433/",
        "http://017700000001/",
        "http://127.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:0:7f00:1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://metadata.google.internal/",
        "http://[64:ff9b:1::a00:1]/",
        "file:///etc/passwd",
        "gopher://example.com/",
    ];
    for url in internal {
        let (decision, source) = check(&engine, &s, url);
        assert_eq!((decision.as_str(), source.as_str()), ("deny", "builtin_deny"), "{url}");
    }
    assert!(elsewhere.len() + internal.len() >= 30);
    // The lower bound: the domain and its subdomains, in any case, are allowed.
    for url in [
        "https://example.com/",
        "https://www.example.com/x?y=1",
        "HTTPS://EXAMPLE.COM/",
        "http://example.com./",
    ] {
        assert_eq!(check(&engine, &s, url).0, "allow", "{url}");
    }
}
