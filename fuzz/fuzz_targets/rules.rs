//! Rule parsing and matching on any rule text and subject: never a panic, and the deny side is
//! at least as strict as the allow side — whatever a rule allows, the same rule as a deny rule
//! refuses (for command lines, paths and URLs alike).
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate_core::rules::{Rule, Subject, allows};
use toolgate_core::shell::analyze;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some((rule, subject)) = text.split_once('\n') else {
        return;
    };
    if subject.len() > 2048 {
        return;
    }
    for tool in ["exec_shell", "read_file", "fetch_url"] {
        let Ok(rule) = Rule::parse(&format!("{tool}({rule})")) else {
            continue;
        };
        let subjects = [
            Subject::Command(analyze(subject)),
            Subject::Path(subject.to_owned()),
            Subject::Url(subject.to_owned()),
        ];
        for s in &subjects {
            if allows(&[&rule], tool, s) {
                assert!(rule.covers_any(tool, s), "{rule} allows but does not deny {s:?}");
            }
        }
    }
});
