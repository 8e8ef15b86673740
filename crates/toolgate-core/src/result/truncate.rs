//! Structural truncation to the byte budget: the largest strings cut to head and tail with a
//! marker, the longest arrays shortened with a sentinel, every key and scalar kept; the cut sized
//! by each string's escaped length, so escape-heavy text uses the budget too.

use super::{MIN_BUDGET, escaped_len, json_size};
use serde_json::{Map, Value, json};

/// A truncated value and how much was cut.
#[derive(Clone, Debug, PartialEq)]
pub struct Truncation {
    /// The value the model sees; its compact JSON is at most the budget.
    pub value: Value,
    /// Whether anything was cut.
    pub truncated: bool,
    /// Compact JSON size of the original.
    pub original_bytes: usize,
}

/// Strings at most this long are never cut before arrays are shortened.
const STRING_FLOOR: usize = 256;

/// Truncates `value` to `budget` bytes of compact JSON, structurally: the largest strings are cut
/// to head + tail with a marker giving the exact bytes cut, the longest arrays lose elements (a
/// sentinel gives the count), every key and scalar is kept. Only when that cannot fit does the
/// value become a `_truncated_json` envelope. Markers name `handle` when given.
///
/// Linear in the input: sizes are measured in two walks, the cuts are chosen from those
/// measurements, and only the (budget-sized) output is built.
pub fn truncate(value: &Value, budget: usize, handle: Option<&str>) -> Truncation {
    let budget = budget.max(MIN_BUDGET);
    let mut long = Vec::new();
    let original_bytes = measure(value, STRING_FLOOR, &mut long);
    if original_bytes <= budget {
        return Truncation {
            value: value.clone(),
            truncated: false,
            original_bytes,
        };
    }
    let marks = Marks::new(handle);
    let done = |v: Value| Truncation {
        value: v,
        truncated: true,
        original_bytes,
    };
    // 1. Cut the longest strings, keeping at least a readable head and tail.
    let need = original_bytes - budget;
    if string_savings(&long, STRING_FLOOR, &marks) >= need {
        let keep = largest_keep(&long, STRING_FLOOR, need, &marks);
        if let Some(v) = fitting(value, keep, usize::MAX, budget, &marks, long.len()) {
            return done(v);
        }
    }
    // 2. Shorten the longest arrays (strings cut to the floor).
    let (floor_size, tree) = size_tree(value, STRING_FLOOR, &marks);
    let items = match &tree {
        Some(tree) if floor_size > budget => {
            let sentinel = escaped_len(&marks.array_sentinel(usize::MAX)) + 2;
            let need = floor_size - budget;
            let (mut lo, mut hi) = (0usize, tree.max_len());
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if tree.savings(mid, sentinel) >= need {
                    lo = mid
                } else {
                    hi = mid - 1
                }
            }
            lo
        }
        _ => usize::MAX,
    };
    let shortened = apply(value, STRING_FLOOR, items, &marks);
    let mut size = json_size(&shortened);
    if size <= budget {
        // Dropped elements leave room: the kept strings grow back into it.
        let strings = long.len();
        return done(fitting(value, STRING_FLOOR, items, budget, &marks, strings).unwrap_or(shortened));
    }
    // 3. Cut strings further, down to nothing but the marker.
    let mut long = Vec::new();
    measure(&shortened, 0, &mut long);
    let need = size - budget;
    let keep = if string_savings(&long, 0, &marks) >= need {
        largest_keep(&long, 0, need, &marks)
    } else {
        0
    };
    if let Some(v) = fitting(&shortened, keep, usize::MAX, budget, &marks, long.len()) {
        return done(v);
    }
    let cut = apply(&shortened, 0, usize::MAX, &marks);
    size = json_size(&cut);
    if size <= budget {
        return done(cut);
    }
    // 4. Give up on structure.
    done(envelope(value, original_bytes, budget, handle))
}

/// Builds the cut value from the estimated keep-length, then corrects the estimate both ways:
/// over the budget keeps less, far under it keeps more (the escape density of the kept head and
/// tail differs from the string's average), so the result uses the budget, not a sliver of it.
fn fitting(value: &Value, keep: usize, items: usize, budget: usize, marks: &Marks, strings: usize) -> Option<Value> {
    let strings = strings.max(1);
    let (mut fits, mut over) = (None::<(usize, Value)>, usize::MAX);
    let mut keep = keep;
    for _ in 0..8 {
        let v = apply(value, keep, items, marks);
        let size = json_size(&v);
        let next = if size <= budget {
            let slack = budget - size;
            fits = Some((keep, v));
            if slack <= budget / 64 {
                break;
            }
            keep.saturating_add(slack / strings).min(over.saturating_sub(1))
        } else {
            over = keep;
            // Each raw byte kept costs at least one byte, so cutting the excess lands at or
            // under; between a keep that fits and one that does not, halve the gap.
            match &fits {
                Some((low, _)) => (keep.saturating_sub(size - budget)).max(low + (keep - low) / 2),
                None => keep.saturating_sub(size - budget),
            }
        };
        let settled = fits.as_ref().map_or(0, |(k, _)| *k);
        if next == keep || (fits.is_some() && next <= settled) || next >= over {
            break;
        }
        keep = next;
    }
    fits.map(|(_, v)| v)
}

struct Marks {
    suffix: String,
}

impl Marks {
    fn new(handle: Option<&str>) -> Self {
        Self {
            suffix: handle.map_or_else(String::new, |h| format!("; read_result handle={h}")),
        }
    }
    fn string_marker(&self, cut: usize) -> String {
        format!("\n…[{cut} bytes truncated{}]…\n", self.suffix)
    }
    fn array_sentinel(&self, omitted: usize) -> String {
        format!("…[{omitted} more items truncated{}]", self.suffix)
    }
    /// An upper bound of the escaped marker size for a string of `len` bytes.
    fn string_marker_len(&self, len: usize) -> usize {
        escaped_len(&self.string_marker(len))
    }
}

/// A long string: its length, and its length escaped (what it costs in the budget).
#[derive(Clone, Copy)]
struct Long {
    len: usize,
    escaped: usize,
}

impl Long {
    /// The escaped bytes of `keep` raw bytes of it, at the string's own escape density.
    fn kept(self, keep: usize) -> usize {
        if self.len == 0 {
            return 0;
        }
        ((keep.min(self.len) as u128 * self.escaped as u128).div_ceil(self.len as u128)) as usize
    }
}

/// The compact JSON size of `v`, collecting the strings longer than `longer_than`.
fn measure(v: &Value, longer_than: usize, long: &mut Vec<Long>) -> usize {
    match v {
        Value::String(s) => {
            let escaped = escaped_len(s);
            if s.len() > longer_than {
                long.push(Long { len: s.len(), escaped });
            }
            escaped + 2
        }
        Value::Array(a) => {
            2 + a.len().saturating_sub(1) + a.iter().map(|x| measure(x, longer_than, long)).sum::<usize>()
        }
        Value::Object(o) => {
            2 + o.len().saturating_sub(1)
                + o.iter()
                    .map(|(k, x)| escaped_len(k) + 3 + measure(x, longer_than, long))
                    .sum::<usize>()
        }
        other => json_size(other),
    }
}

/// Bytes saved (escaped, as the budget counts them) by cutting every long string to `keep`
/// bytes plus a marker. Escape-heavy text (newlines, quotes) saves more per byte cut.
fn string_savings(lens: &[Long], keep: usize, marks: &Marks) -> usize {
    lens.iter()
        .filter(|l| l.len > keep + marks.string_marker_len(l.len))
        .map(|&l| l.escaped.saturating_sub(l.kept(keep) + marks.string_marker_len(l.len)))
        .sum()
}

/// The largest keep-length (at least `floor`) whose savings cover `need`.
fn largest_keep(lens: &[Long], floor: usize, need: usize, marks: &Marks) -> usize {
    let (mut lo, mut hi) = (floor, lens.iter().map(|l| l.len).max().unwrap_or(floor).max(floor));
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if string_savings(lens, mid, marks) >= need {
            lo = mid
        } else {
            hi = mid - 1
        }
    }
    lo
}

/// The value with strings cut to `keep` bytes and arrays to `items` elements.
fn apply(v: &Value, keep: usize, items: usize, marks: &Marks) -> Value {
    match v {
        Value::String(s) if s.len() > keep + marks.string_marker_len(s.len()) => {
            Value::String(cut_string(s, keep, marks))
        }
        Value::Array(a) => {
            let mut out: Vec<Value> = a.iter().take(items).map(|x| apply(x, keep, items, marks)).collect();
            if a.len() > items {
                out.push(Value::String(marks.array_sentinel(a.len() - items)));
            }
            Value::Array(out)
        }
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), apply(x, keep, items, marks)))
                .collect::<Map<_, _>>(),
        ),
        other => other.clone(),
    }
}

/// Where a string cut to `keep` bytes ends its head and starts its tail, on UTF-8 boundaries.
fn kept_bounds(s: &str, keep: usize) -> (usize, usize) {
    let mut head = keep / 2;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail_start = s.len() - (keep - keep / 2);
    while !s.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    (head, tail_start)
}

/// Keeps about `keep` bytes — half from the head, half from the tail, on UTF-8 boundaries.
fn cut_string(s: &str, keep: usize, marks: &Marks) -> String {
    let (head, tail_start) = kept_bounds(s, keep);
    let cut = tail_start - head;
    let marker = marks.string_marker(cut);
    let mut out = String::with_capacity(head + marker.len() + s.len() - tail_start);
    out.push_str(&s[..head]);
    out.push_str(&marker);
    out.push_str(&s[tail_start..]);
    out
}

/// Sizes of an array's elements, for choosing how many to keep without re-walking them.
struct ArrayNode {
    len: usize,
    /// `prefix[i]` = bytes of elements `0..i` including their separating commas.
    prefix: Vec<usize>,
    /// Composite children (index, node), in index order.
    nested: Vec<(usize, SizeNode)>,
}

enum SizeNode {
    Array(ArrayNode),
    Object(Vec<SizeNode>),
}

impl SizeNode {
    fn max_len(&self) -> usize {
        match self {
            Self::Array(a) => a.nested.iter().map(|(_, n)| n.max_len()).max().unwrap_or(0).max(a.len),
            Self::Object(children) => children.iter().map(Self::max_len).max().unwrap_or(0),
        }
    }

    /// Bytes saved if every array keeps at most `keep` elements (plus a sentinel).
    fn savings(&self, keep: usize, sentinel: usize) -> usize {
        match self {
            Self::Object(children) => children.iter().map(|c| c.savings(keep, sentinel)).sum(),
            Self::Array(a) => {
                let mut saved = 0;
                if a.len > keep {
                    let kept = a.prefix[keep] + sentinel + usize::from(keep > 0);
                    saved += a.prefix[a.len].saturating_sub(kept);
                }
                for (i, child) in &a.nested {
                    if *i >= keep.min(a.len) {
                        break;
                    }
                    saved += child.savings(keep, sentinel);
                }
                saved
            }
        }
    }
}

/// Sizes bottom-up in one walk, with strings counted as if cut to `keep`.
fn size_tree(v: &Value, keep: usize, marks: &Marks) -> (usize, Option<SizeNode>) {
    match v {
        Value::String(s) => {
            let marker = marks.string_marker_len(s.len());
            let size = if s.len() > keep + marker {
                // Only the kept head and tail are scanned, never the part cut away.
                let (head, tail) = kept_bounds(s, keep);
                escaped_len(&s[..head]) + escaped_len(&s[tail..]) + marker + 2
            } else {
                escaped_len(s) + 2
            };
            (size, None)
        }
        Value::Array(a) => {
            let mut prefix = Vec::with_capacity(a.len() + 1);
            prefix.push(0);
            let mut nested = Vec::new();
            let mut total = 0;
            for (i, x) in a.iter().enumerate() {
                let (size, node) = size_tree(x, keep, marks);
                total += size + usize::from(i > 0);
                prefix.push(total);
                if let Some(n) = node {
                    nested.push((i, n));
                }
            }
            (
                total + 2,
                Some(SizeNode::Array(ArrayNode {
                    len: a.len(),
                    prefix,
                    nested,
                })),
            )
        }
        Value::Object(o) => {
            let mut total = 2 + o.len().saturating_sub(1);
            let mut children = Vec::new();
            for (k, x) in o {
                let (size, node) = size_tree(x, keep, marks);
                total += escaped_len(k) + 3 + size;
                children.extend(node);
            }
            (total, (!children.is_empty()).then_some(SizeNode::Object(children)))
        }
        other => (json_size(other), None),
    }
}

fn envelope(value: &Value, original: usize, budget: usize, handle: Option<&str>) -> Value {
    let text = value.to_string();
    let skeleton = json!({
        "_truncated_json": "",
        "_original_bytes": original,
        "_cut_bytes": original,
        "read_result_handle": handle,
    });
    let room = budget.saturating_sub(json_size(&skeleton) + 8);
    let mut used = 0;
    let mut end = 0;
    for (i, c) in text.char_indices() {
        let mut buf = [0u8; 4];
        let w = escaped_len(c.encode_utf8(&mut buf));
        if used + w > room {
            break;
        }
        used += w;
        end = i + c.len_utf8();
    }
    json!({
        "_truncated_json": &text[..end],
        "_original_bytes": original,
        "_cut_bytes": text.len() - end,
        "read_result_handle": handle,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{NO_OUTPUT, normalize_empty};

    fn size(v: &Value) -> usize {
        v.to_string().len()
    }

    #[test]
    fn json_size_matches_serde() {
        let v = json!({"a": [1, -20, 3.5, true, false, null, "x\"y\\z\n\u{1}é"], "b": {"c": u64::MAX}, "": []});
        assert_eq!(json_size(&v), size(&v));
    }

    #[test]
    fn short_values_are_untouched() {
        let v = json!({"exit_code": 0, "stdout": "hello"});
        let t = truncate(&v, 1000, Some("r1"));
        assert!(!t.truncated);
        assert_eq!(t.value, v);
    }

    #[test]
    fn the_largest_string_is_cut_to_head_and_tail_with_the_exact_count() {
        let stdout = "a".repeat(5000) + &"b".repeat(5000);
        let v = json!({"exit_code": 3, "stdout": stdout, "stderr": "fatal: at the end"});
        let t = truncate(&v, 2000, Some("r7"));
        assert!(t.truncated);
        assert!(size(&t.value) <= 2000, "{}", size(&t.value));
        assert_eq!(t.value["exit_code"], 3);
        assert_eq!(t.value["stderr"], "fatal: at the end");
        let cut = t.value["stdout"].as_str().unwrap();
        assert!(cut.starts_with("aaa") && cut.ends_with("bbb"));
        let kept = cut.len() - cut.find('\n').unwrap() - (cut.len() - cut.rfind('\n').unwrap());
        let marker = &cut[cut.find('\n').unwrap()..=cut.rfind('\n').unwrap()];
        let n: usize = marker
            .trim()
            .trim_start_matches("…[")
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let kept_bytes = cut.len() - marker.len();
        assert_eq!(n + kept_bytes, 10_000, "{marker}");
        assert!(marker.contains("read_result handle=r7"));
        let _ = kept;
    }

    #[test]
    fn long_arrays_lose_elements_with_a_sentinel() {
        let v = json!({"items": (0..10_000).collect::<Vec<_>>(), "total": 10_000});
        let t = truncate(&v, 1000, None);
        assert!(size(&t.value) <= 1000);
        assert_eq!(t.value["total"], 10_000);
        let items = t.value["items"].as_array().unwrap();
        let sentinel = items.last().unwrap().as_str().unwrap();
        let omitted: usize = sentinel
            .trim_start_matches("…[")
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(omitted + items.len() - 1, 10_000);
        assert_eq!(items[0], 0);
    }

    #[test]
    fn nested_objects_keep_every_key() {
        let v = json!({"a": {"b": {"c": "x".repeat(100_000), "d": 1}, "e": ["y".repeat(50_000)]}, "f": null});
        let t = truncate(&v, 4096, Some("r1"));
        assert!(size(&t.value) <= 4096);
        assert_eq!(t.value["a"]["b"]["d"], 1);
        assert!(t.value["f"].is_null());
        assert!(t.value["a"]["e"].is_array());
    }

    #[test]
    fn utf8_is_never_split() {
        let v = json!("é".repeat(10_000) + &"日本".repeat(5000));
        let t = truncate(&v, 1000, None);
        assert!(size(&t.value) <= 1000);
        assert!(t.value.as_str().is_some());
    }

    #[test]
    fn escapes_are_counted() {
        let v = json!("\u{1}".repeat(20_000));
        let t = truncate(&v, 1000, Some("r2"));
        assert!(size(&t.value) <= 1000, "{}", size(&t.value));
    }

    #[test]
    fn too_many_keys_fall_back_to_an_envelope_within_budget() {
        let map: Map<String, Value> = (0..5000).map(|i| (format!("key{i}"), json!(i))).collect();
        let t = truncate(&Value::Object(map), 1000, Some("r3"));
        assert!(size(&t.value) <= 1000);
        assert!(t.value["_truncated_json"].as_str().unwrap().starts_with("{\"key0\":0"));
        assert_eq!(t.value["read_result_handle"], "r3");
    }

    #[test]
    fn empty_results_become_no_output() {
        assert_eq!(normalize_empty(Value::Null), json!(NO_OUTPUT));
        assert_eq!(normalize_empty(json!("  ")), json!(NO_OUTPUT));
        assert_eq!(normalize_empty(json!(0)), json!(0));
    }
}
