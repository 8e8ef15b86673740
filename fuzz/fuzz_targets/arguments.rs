//! Stage 1 on arbitrary text: never panics, never hangs; a repaired call keeps its raw text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate_core::formats::RawArguments;
use toolgate_core::parse::parse_arguments;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data).into_owned();
    for cut_off in [false, true] {
        if let Ok((_, Some(repair))) = parse_arguments(&RawArguments::Text(text.clone()), cut_off) {
            assert_eq!(repair.raw, text);
        }
    }
});
