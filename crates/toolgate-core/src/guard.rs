//! Stage 6: the loop detector and the per-turn caps.

use serde_json::Value;
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};

/// Detects N consecutive identical batches (same tools, same canonical arguments).
#[derive(Debug)]
pub struct LoopDetector {
    threshold: u32,
    exempt: HashSet<String>,
    last: Option<u64>,
    count: u32,
}

impl LoopDetector {
    /// A detector tripping on the `threshold`th identical batch; batches made only of `exempt`
    /// tools neither count nor reset it.
    pub fn new(threshold: u32, exempt: impl IntoIterator<Item = String>) -> Self {
        Self {
            threshold: threshold.max(2),
            exempt: exempt.into_iter().collect(),
            last: None,
            count: 0,
        }
    }

    /// What the detector has seen: the last batch's signature and how many times in a row.
    pub fn state(&self) -> (Option<u64>, u32) {
        (self.last, self.count)
    }

    /// Takes up where a detector of the same session left off (another process or replica).
    pub fn restore(&mut self, last: Option<u64>, count: u32) {
        self.last = last;
        self.count = count.min(self.threshold.saturating_sub(1));
    }

    /// Records a batch of (tool, arguments); true when this batch is the Nth identical one (it
    /// must not run). The detector resets after tripping.
    pub fn observe<'a>(&mut self, batch: impl IntoIterator<Item = (&'a str, &'a Value)>) -> bool {
        let mut hasher = DefaultHasher::new();
        let mut counted = 0usize;
        for (name, args) in batch {
            if self.exempt.contains(name) {
                continue;
            }
            counted += 1;
            name.hash(&mut hasher);
            hash_canonical(args, &mut hasher);
        }
        if counted == 0 {
            return false;
        }
        let signature = hasher.finish();
        if self.last == Some(signature) {
            self.count += 1;
        } else {
            self.last = Some(signature);
            self.count = 1;
        }
        if self.count >= self.threshold {
            self.last = None;
            self.count = 0;
            return true;
        }
        false
    }
}

/// A hash of a value with object keys in sorted order (reordered keys hash the same).
pub fn canonical_hash(v: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    hash_canonical(v, &mut h);
    h.finish()
}

/// Hashes a value with object keys in sorted order, so reordered keys hash the same.
fn hash_canonical(v: &Value, h: &mut impl Hasher) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => (2u8, n.to_string()).hash(h),
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(a) => {
            (4u8, a.len()).hash(h);
            a.iter().for_each(|x| hash_canonical(x, h));
        }
        Value::Object(o) => {
            (5u8, o.len()).hash(h);
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            for k in keys {
                k.hash(h);
                hash_canonical(&o[k.as_str()], h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn varied_calls_never_trip() {
        let mut d = LoopDetector::new(3, []);
        for i in 0..10 {
            let args = json!({"i": i});
            assert!(!d.observe([("read_file", &args)]));
        }
    }

    #[test]
    fn the_nth_identical_batch_trips_and_resets() {
        let mut d = LoopDetector::new(3, []);
        let a = json!({"path": "x", "n": 1});
        assert!(!d.observe([("read_file", &a)]));
        assert!(!d.observe([("read_file", &a)]));
        assert!(d.observe([("read_file", &a)]));
        // Reset after tripping: counting starts again.
        assert!(!d.observe([("read_file", &a)]));
        assert!(!d.observe([("read_file", &a)]));
        assert!(d.observe([("read_file", &a)]));
    }

    #[test]
    fn reordered_keys_are_equal() {
        let mut d = LoopDetector::new(2, []);
        assert!(!d.observe([("t", &json!({"a": 1, "b": {"x": 1, "y": 2}}))]));
        assert!(d.observe([("t", &json!({"b": {"y": 2, "x": 1}, "a": 1}))]));
    }

    #[test]
    fn exempt_batches_neither_count_nor_reset() {
        let mut d = LoopDetector::new(3, ["think".to_string()]);
        let a = json!({});
        let t = json!({"n": 1});
        assert!(!d.observe([("read_file", &a)]));
        assert!(!d.observe([("think", &t)]));
        assert!(!d.observe([("read_file", &a)]));
        assert!(!d.observe([("think", &t)]));
        assert!(d.observe([("read_file", &a)]));
    }

    #[test]
    fn a_different_batch_resets_the_count() {
        let mut d = LoopDetector::new(3, []);
        let a = json!({"n": 1});
        let b = json!({"n": 2});
        assert!(!d.observe([("t", &a)]));
        assert!(!d.observe([("t", &a)]));
        assert!(!d.observe([("t", &b)]));
        assert!(!d.observe([("t", &a)]));
        assert!(!d.observe([("t", &a)]));
        assert!(d.observe([("t", &a)]));
    }
}
