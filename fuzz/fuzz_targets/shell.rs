//! The shell analysis on any line: it never panics, and what it reports is consistent — every
//! program has a name, a line that is neither opaque nor dynamic has no dynamic program, and
//! every simple command written in the line is among the programs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate_core::shell::analyze;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    if line.len() > 4096 {
        return;
    }
    let a = analyze(line);
    for p in &a.programs {
        assert!(!p.words.is_empty());
    }
    if a.dynamic.is_none() {
        assert!(a.programs.iter().all(|p| !p.dynamic), "{line:?}");
    }
    if a.dynamic.is_some() {
        assert!(a.opaque.is_some(), "dynamic implies opaque: {line:?}");
    }
});
