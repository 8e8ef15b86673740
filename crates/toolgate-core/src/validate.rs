//! Stage 5: JSON Schema validation with safe coercion and unknown-key dropping.

use crate::error::{CallError, ErrorKind};
use serde_json::{Map, Value, json};

/// Which JSON Schema draft a schema without `$schema` is read as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Draft {
    /// Draft 7.
    Draft7,
    /// Draft 2020-12 (the default).
    #[default]
    Draft202012,
}

/// What the validation stage may change in the arguments before checking them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidateOptions {
    /// Turn `"5"` into `5` and `"true"` into `true` where the schema asks for a number or boolean.
    pub coerce: bool,
    /// Drop keys that `additionalProperties: false` forbids instead of reporting them.
    pub drop_unknown: bool,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        Self {
            coerce: true,
            drop_unknown: true,
        }
    }
}

/// One schema violation: where, and what.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Violation {
    /// JSON pointer into the arguments (`""` for the root).
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

/// A schema compiled once and reused for every call.
pub struct CompiledSchema {
    schema: Value,
    hash: u64,
    read_as: Option<Draft>,
    validator: jsonschema::Validator,
}

/// How deep the coercion walk follows a schema.
const MAX_DEPTH: usize = 64;

impl CompiledSchema {
    /// Compiles a schema, reading `$schema` when present and draft 2020-12 otherwise.
    /// Remote `$ref`s are refused: a schema cannot make toolgate fetch anything.
    pub fn compile(schema: &Value) -> Result<Self, String> {
        Self::compile_with(schema, None)
    }

    /// Compiles a schema as the given draft when it has no `$schema`.
    pub fn compile_with(schema: &Value, draft: Option<Draft>) -> Result<Self, String> {
        let mut options = jsonschema::options();
        let mut read_as = None;
        let declared = schema.get("$schema").is_some();
        if !declared {
            // A 2020-12 schema written only with keywords that mean the same in draft 7 is
            // compiled as draft 7 (formats left unchecked, as 2020-12 leaves them): its validator
            // is the same, and the first schema a process compiles spends ~1 ms less building
            // the meta-schema it is checked against (one `toolgate call` compiles one schema).
            let draft = match draft.unwrap_or_default() {
                Draft::Draft202012 if draft7_alike(schema, 0) => {
                    options = options.should_validate_formats(false);
                    Draft::Draft7
                }
                other => other,
            };
            options = options.with_draft(match draft {
                Draft::Draft7 => jsonschema::Draft::Draft7,
                Draft::Draft202012 => jsonschema::Draft::Draft202012,
            });
            read_as = Some(draft);
        }
        let validator = options.build(schema).map_err(|e| {
            // Where in the schema: the meta-schema check reports the schema as its instance.
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_owned() } else { at };
            format!("the tool's parameter schema does not compile at {at}: {e}")
        })?;
        Ok(Self {
            schema: schema.clone(),
            hash: crate::guard::canonical_hash(schema),
            read_as,
            validator,
        })
    }

    /// The schema it was compiled from.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// The draft the schema was compiled as, when it declares none (draft 7 for a 2020-12 schema
    /// that means the same in both, see `compile_with`); `None` when it declares its `$schema`.
    pub fn read_as(&self) -> Option<Draft> {
        self.read_as
    }

    /// A hash of the schema's canonical form (cache keys change when a schema does).
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// Whether `value` satisfies the schema as it is.
    pub fn is_valid(&self, value: &Value) -> bool {
        self.validator.is_valid(value)
    }

    /// Every violation, with its JSON pointer.
    /// At most 50 of them, each message at most 512 bytes: a hostile argument cannot make the
    /// error the model sees larger than the arguments were.
    pub fn violations(&self, value: &Value) -> Vec<Violation> {
        self.validator
            .iter_errors(value)
            .take(50)
            .map(|e| Violation {
                pointer: clip(e.instance_path().to_string(), 512),
                message: clip(e.to_string(), 512),
            })
            .collect()
    }

    /// Checks `args`, first coercing and dropping keys as `options` allow.
    /// Returns the warnings (what was changed) or an `invalid_arguments` error listing every violation.
    pub fn check(&self, args: &mut Value, options: ValidateOptions) -> Result<Vec<String>, CallError> {
        if self.validator.is_valid(args) {
            return Ok(Vec::new());
        }
        let mut warnings = Vec::new();
        if options.coerce || options.drop_unknown {
            let mut pointer = String::new();
            adjust(
                &self.schema,
                &self.schema,
                args,
                options,
                &mut pointer,
                &mut warnings,
                0,
            );
            if !warnings.is_empty() && self.validator.is_valid(args) {
                return Ok(warnings);
            }
        }
        let violations = self.violations(args);
        let summary = violations
            .iter()
            .take(5)
            .map(|v| {
                if v.pointer.is_empty() {
                    v.message.clone()
                } else {
                    format!("{}: {}", v.pointer, v.message)
                }
            })
            .collect::<Vec<_>>()
            .join("; ");
        Err(CallError::new(
            ErrorKind::InvalidArguments,
            format!("The arguments do not match the tool's schema ({summary}). Fix them and call again."),
        )
        .with("errors", json!(violations)))
    }
}

/// Type names real servers write that are not JSON Schema's, read as the type they plainly mean
/// (Python, Java, C#, TypeScript and SQL spellings), compared ignoring case. `any` and `object`
/// spellings of "anything" are not here: they are handled by [`normalize_schema`].
const TYPE_SPELLINGS: &[(&str, &str)] = &[
    ("float", "number"),
    ("double", "number"),
    ("decimal", "number"),
    ("real", "number"),
    ("float32", "number"),
    ("float64", "number"),
    ("bigdecimal", "number"),
    ("int", "integer"),
    ("long", "integer"),
    ("short", "integer"),
    ("int32", "integer"),
    ("int64", "integer"),
    ("uint", "integer"),
    ("bigint", "integer"),
    ("biginteger", "integer"),
    ("str", "string"),
    ("text", "string"),
    ("char", "string"),
    ("uuid", "string"),
    ("date", "string"),
    ("datetime", "string"),
    ("bool", "boolean"),
    ("dict", "object"),
    ("map", "object"),
    ("hashmap", "object"),
    ("record", "object"),
    ("list", "array"),
    ("tuple", "array"),
    ("set", "array"),
    ("arraylist", "array"),
    ("none", "null"),
    ("nil", "null"),
];

/// Makes a schema that does not compile because of type names JSON Schema lacks into the one it
/// plainly means, in place: `float` → `number`, `dict` → `object`, `String` → `string`, `any`
/// (and an empty `type` list) → no type constraint. Returns what it changed, one line each with
/// its JSON pointer; nothing when no spelling is recognised (the schema is then left as it was).
pub fn normalize_schema(schema: &mut Value) -> Vec<String> {
    let mut changes = Vec::new();
    let mut pointer = String::new();
    normalize_at(schema, &mut pointer, &mut changes, 0);
    changes
}

fn normal_type(name: &str) -> Option<&'static str> {
    const STANDARD: &[&str] = &["string", "number", "integer", "boolean", "object", "array", "null"];
    let lower = name.to_ascii_lowercase();
    if let Some(standard) = STANDARD.iter().find(|s| **s == lower) {
        return (name != *standard).then_some(standard);
    }
    TYPE_SPELLINGS
        .iter()
        .find(|(from, _)| *from == lower)
        .map(|(_, to)| *to)
}

fn normalize_at(schema: &mut Value, pointer: &mut String, changes: &mut Vec<String>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let Value::Object(object) = schema else {
        return;
    };
    let anything = |t: &str| matches!(t.to_ascii_lowercase().as_str(), "any" | "mixed" | "unknown");
    // The pointer of this schema ("" at the root), so `{at}/type` is the pointer of its type.
    let at = pointer.as_str();
    match object.get_mut("type") {
        Some(Value::String(t)) if anything(t) => {
            changes.push(format!("{at}/type: `{t}` read as any type"));
            object.remove("type");
        }
        Some(Value::String(t)) => {
            if let Some(to) = normal_type(t) {
                changes.push(format!("{at}/type: `{t}` read as `{to}`"));
                *t = to.to_owned();
            }
        }
        Some(Value::Array(types)) => {
            if types.iter().any(|t| t.as_str().is_some_and(anything)) {
                changes.push(format!("{at}/type: a list with `any` read as any type"));
                object.remove("type");
            } else {
                let mut out: Vec<Value> = Vec::with_capacity(types.len());
                for t in types.iter() {
                    let mapped = match t.as_str().and_then(normal_type) {
                        Some(to) => {
                            changes.push(format!(
                                "{at}/type: `{}` read as `{to}`",
                                t.as_str().unwrap_or_default()
                            ));
                            Value::String(to.to_owned())
                        }
                        None => t.clone(),
                    };
                    if !out.contains(&mapped) {
                        out.push(mapped);
                    }
                }
                if out.is_empty() {
                    changes.push(format!("{at}/type: an empty list read as any type"));
                    object.remove("type");
                } else {
                    *types = out;
                }
            }
        }
        _ => {}
    }
    // Draft 7's tuple form, which 2020-12 spells `prefixItems` (and `additionalItems` `items`).
    if object.get("items").is_some_and(Value::is_array) && !object.contains_key("prefixItems") {
        changes.push(format!("{at}/items: a list read as `prefixItems`"));
        if let Some(items) = object.remove("items") {
            object.insert("prefixItems".into(), items);
        }
        if let Some(rest) = object.remove("additionalItems") {
            object.insert("items".into(), rest);
        }
    }
    for (key, value) in object.iter_mut() {
        let base = pointer.len();
        match key.as_str() {
            "items"
            | "additionalProperties"
            | "additionalItems"
            | "contains"
            | "propertyNames"
            | "not"
            | "if"
            | "then"
            | "else"
            | "unevaluatedProperties"
            | "unevaluatedItems"
                if value.is_object() =>
            {
                pointer.push('/');
                pointer.push_str(key);
                normalize_at(value, pointer, changes, depth + 1);
            }
            "allOf" | "anyOf" | "oneOf" | "prefixItems" | "items" => {
                if let Value::Array(items) = value {
                    for (i, item) in items.iter_mut().enumerate() {
                        pointer.truncate(base);
                        pointer.push_str(&format!("/{key}/{i}"));
                        normalize_at(item, pointer, changes, depth + 1);
                    }
                }
            }
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                if let Value::Object(map) = value {
                    for (name, sub) in map.iter_mut() {
                        pointer.truncate(base);
                        pointer.push('/');
                        pointer.push_str(key);
                        pointer.push('/');
                        pointer.push_str(&name.replace('~', "~0").replace('/', "~1"));
                        normalize_at(sub, pointer, changes, depth + 1);
                    }
                }
            }
            _ => {}
        }
        pointer.truncate(base);
    }
}

/// Keywords that annotate and never change what a schema accepts.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "readOnly",
    "writeOnly",
    "deprecated",
];

/// Whether `schema` (no `$schema` of its own) accepts exactly the same instances read as draft 7
/// as read as draft 2020-12: it uses no keyword whose meaning differs or that one of them lacks,
/// no `items` array (2020-12 spells that `prefixItems`), no `$ref` beside a keyword that
/// validates (draft 7 ignores those) or outside the document, no identifiers or dynamic
/// references, no content keywords (draft 7 checks them). Unknown keywords are ignored by both.
fn draft7_alike(schema: &Value, depth: usize) -> bool {
    const DIFFERENT: &[&str] = &[
        "$schema",
        "$id",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "$vocabulary",
        "prefixItems",
        "unevaluatedItems",
        "unevaluatedProperties",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "minContains",
        "maxContains",
        "contentSchema",
        "contentMediaType",
        "contentEncoding",
    ];
    if depth > MAX_DEPTH {
        return false;
    }
    let object = match schema {
        Value::Bool(_) => return true,
        Value::Object(object) => object,
        _ => return false,
    };
    if let Some(target) = object.get("$ref") {
        let local = target.as_str().is_some_and(|r| {
            r == "#" || r.starts_with("#/$defs/") || r.starts_with("#/definitions/") || r.starts_with("#/properties/")
        });
        if !local || object.keys().any(|k| k != "$ref" && !ANNOTATIONS.contains(&k.as_str())) {
            return false;
        }
    }
    let all = |v: &Value| match v {
        Value::Array(items) => items.iter().all(|s| draft7_alike(s, depth + 1)),
        _ => false,
    };
    let each = |v: &Value| match v {
        Value::Object(map) => map.values().all(|s| draft7_alike(s, depth + 1)),
        _ => false,
    };
    object.iter().all(|(key, value)| match key.as_str() {
        k if DIFFERENT.contains(&k) => false,
        "items" => !value.is_array() && draft7_alike(value, depth + 1),
        "additionalProperties" | "contains" | "propertyNames" | "not" | "if" | "then" | "else" => {
            draft7_alike(value, depth + 1)
        }
        "allOf" | "anyOf" | "oneOf" => all(value),
        "properties" | "patternProperties" | "$defs" | "definitions" => each(value),
        _ => true,
    })
}

fn resolve<'a>(root: &'a Value, mut schema: &'a Value) -> &'a Value {
    for _ in 0..8 {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) if r.starts_with('#') => match root.pointer(&r[1..]) {
                Some(target) => schema = target,
                None => return schema,
            },
            _ => return schema,
        }
    }
    schema
}

fn types_of(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn adjust(
    root: &Value,
    schema: &Value,
    value: &mut Value,
    options: ValidateOptions,
    pointer: &mut String,
    warnings: &mut Vec<String>,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        return;
    }
    let schema = resolve(root, schema);
    let types = types_of(schema);
    if options.coerce
        && let Value::String(s) = value
        && !types.is_empty()
        && !types.contains(&"string")
        && let Some(coerced) = coerce(s, &types)
    {
        warnings.push(format!(
            "coerced {} from string {:?} to {}",
            display(pointer),
            s,
            coerced
        ));
        *value = coerced;
        return;
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            if options.drop_unknown && schema.get("additionalProperties") == Some(&Value::Bool(false)) {
                let patterns = schema.get("patternProperties").is_some();
                if !patterns {
                    // One pass (retain), not one removal per key: linear in the number of keys.
                    let known = |k: &str| properties.is_some_and(|p| p.contains_key(k));
                    let mut dropped = 0usize;
                    map.retain(|key, _| {
                        if known(key) {
                            return true;
                        }
                        dropped += 1;
                        if dropped <= MAX_WARNINGS {
                            warnings.push(format!("dropped unknown key {}/{}", pointer, escape(key)));
                        }
                        false
                    });
                    if dropped > MAX_WARNINGS {
                        warnings.push(format!("dropped {} more unknown keys", dropped - MAX_WARNINGS));
                    }
                }
            }
            if let Some(properties) = properties {
                walk_object(root, properties, map, options, pointer, warnings, depth);
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter_mut().enumerate() {
                    let len = pointer.len();
                    pointer.push('/');
                    pointer.push_str(&i.to_string());
                    adjust(root, item_schema, item, options, pointer, warnings, depth + 1);
                    pointer.truncate(len);
                }
            }
        }
        _ => {}
    }
}

/// `text` cut to at most `max` bytes on a character boundary, the cut marked.
fn clip(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Warnings listed one by one at most; the rest are counted.
const MAX_WARNINGS: usize = 20;

fn walk_object(
    root: &Value,
    properties: &Map<String, Value>,
    map: &mut Map<String, Value>,
    options: ValidateOptions,
    pointer: &mut String,
    warnings: &mut Vec<String>,
    depth: usize,
) {
    for (key, value) in map.iter_mut() {
        if let Some(sub) = properties.get(key) {
            let len = pointer.len();
            pointer.push('/');
            pointer.push_str(&escape(key));
            adjust(root, sub, value, options, pointer, warnings, depth + 1);
            pointer.truncate(len);
        }
    }
}

fn coerce(s: &str, types: &[&str]) -> Option<Value> {
    let t = s.trim();
    if types.contains(&"integer") {
        if let Ok(i) = t.parse::<i64>() {
            return Some(json!(i));
        }
        if let Ok(f) = t.parse::<f64>()
            && f.is_finite()
            && f.fract() == 0.0
            && f.abs() < 9.0e15
        {
            return Some(json!(f as i64));
        }
    }
    if types.contains(&"number")
        && let Ok(f) = t.parse::<f64>()
        && f.is_finite()
    {
        return Some(if let Ok(i) = t.parse::<i64>() {
            json!(i)
        } else {
            json!(f)
        });
    }
    if types.contains(&"boolean") {
        match t.to_ascii_lowercase().as_str() {
            "true" => return Some(Value::Bool(true)),
            "false" => return Some(Value::Bool(false)),
            _ => {}
        }
    }
    if types.contains(&"null") && (t == "null" || t.is_empty()) {
        return Some(Value::Null);
    }
    // JSON text where an object or array is asked for (a provider that cannot express a free-form
    // object, such as Gemini, is shown a string holding one).
    if (types.contains(&"object") && t.starts_with('{')) || (types.contains(&"array") && t.starts_with('[')) {
        return serde_json::from_str::<Value>(t)
            .ok()
            .filter(|v| (v.is_object() && types.contains(&"object")) || (v.is_array() && types.contains(&"array")));
    }
    None
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn display(pointer: &str) -> &str {
    if pointer.is_empty() { "/" } else { pointer }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_servers_write_are_read_as_what_they_mean_and_nothing_else_changes() {
        let mut served = json!({
            "type": "dict",
            "properties": {
                "ratio": {"type": "float"},
                "opts": {"type": "dict", "properties": {"n": {"type": "Integer"}}},
                "tags": {"type": "List", "items": {"type": "str"}},
                "pair": {"type": "tuple", "items": [{"type": "int64"}, {"type": "String"}]},
                "blob": {"type": "any"},
                "maybe": {"type": ["float", "null", "double"]},
                "a/b": {"anyOf": [{"type": "bool"}, {"type": "string"}]}
            },
            "required": ["ratio"]
        });
        assert!(CompiledSchema::compile(&served).is_err());
        let changes = normalize_schema(&mut served);
        for expected in [
            // The root's type: a JSON pointer, not `//type`.
            "/type: `dict` read as `object`",
            "/properties/ratio/type: `float` read as `number`",
            "/properties/opts/type: `dict` read as `object`",
            "/properties/opts/properties/n/type: `Integer` read as `integer`",
            "/properties/tags/items/type: `str` read as `string`",
            "/properties/pair/items: a list read as `prefixItems`",
            "/properties/pair/prefixItems/0/type: `int64` read as `integer`",
            "/properties/blob/type: `any` read as any type",
            "/properties/a~1b/anyOf/0/type: `bool` read as `boolean`",
        ] {
            assert!(changes.iter().any(|c| c == expected), "{expected} not in {changes:#?}");
        }
        assert_eq!(served["properties"]["maybe"]["type"], json!(["number", "null"]));
        let compiled = CompiledSchema::compile(&served).expect("compiles once normalised");
        assert!(compiled.is_valid(&json!({"ratio": 1.5, "opts": {"n": 2}, "tags": ["x"], "blob": [1], "maybe": null})));
        assert!(!compiled.is_valid(&json!({"ratio": "fast"})));
        assert!(!compiled.is_valid(&json!({"ratio": 1, "tags": [3]})));
        assert!(!compiled.is_valid(&json!({"ratio": 1, "opts": {"n": 2.5}})));
        // A schema that already compiles is not touched; an unknown spelling is not guessed.
        let mut fine = schema();
        assert!(normalize_schema(&mut fine).is_empty());
        assert_eq!(fine, schema());
        let mut unknown = json!({"type": "object", "properties": {"x": {"type": "banana"}}});
        assert!(normalize_schema(&mut unknown).is_empty());
        let error = CompiledSchema::compile(&unknown).err().expect("still refused");
        assert!(error.contains("/properties/x/type"), "{error}");
    }

    #[test]
    fn only_schemas_that_mean_the_same_in_draft_7_are_read_as_draft_7() {
        let alike = [
            json!(true),
            json!({"type": "object", "properties": {"a": {"type": "string", "format": "email"}}, "additionalProperties": false}),
            json!({"type": "array", "items": {"type": "integer", "exclusiveMinimum": 0}, "uniqueItems": true}),
            json!({"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n", "description": "x"}}}),
            json!({"anyOf": [{"type": "null"}, {"if": {"minimum": 3}, "then": {"multipleOf": 3}}]}),
            json!({"x-vendor": {"prefixItems": 1}, "type": "string"}),
        ];
        for schema in &alike {
            assert!(draft7_alike(schema, 0), "{schema}");
        }
        let different = [
            json!({"type": "array", "items": [{"type": "string"}]}),
            json!({"type": "array", "prefixItems": [{"type": "string"}]}),
            json!({"properties": {"a": {"$ref": "#/$defs/n", "maxLength": 2}}, "$defs": {"n": {"type": "string"}}}),
            json!({"$ref": "https://example.com/s.json"}),
            json!({"properties": {"a": {"unevaluatedProperties": false}}}),
            json!({"dependentRequired": {"a": ["b"]}}),
            json!({"allOf": [{"contentMediaType": "application/json"}]}),
            json!({"items": {"items": {"$dynamicRef": "#meta"}}}),
            json!({"$id": "https://example.com/s.json", "type": "object"}),
            json!({"contains": {"type": "string"}, "minContains": 2}),
            json!({"not": 3}),
        ];
        for schema in &different {
            assert!(!draft7_alike(schema, 0), "{schema}");
        }
        let mut deep = json!({"type": "string"});
        for _ in 0..=MAX_DEPTH + 1 {
            deep = json!({"not": deep});
        }
        assert!(!draft7_alike(&deep, 0));
    }

    #[test]
    fn a_schema_read_as_draft_7_accepts_and_refuses_what_2020_12_does() {
        // $ref beside annotations, a `$defs` target, a format left unchecked as 2020-12 leaves it.
        let schema = json!({
            "$defs": {"mode": {"type": "string", "enum": ["fast", "slow"]}},
            "type": "object",
            "properties": {
                "mode": {"$ref": "#/$defs/mode", "description": "how"},
                "mail": {"type": "string", "format": "email"},
                "n": {"type": "integer", "exclusiveMinimum": 0}
            },
            "required": ["mode"],
            "additionalProperties": false
        });
        assert!(draft7_alike(&schema, 0));
        let ours = CompiledSchema::compile(&schema).expect("compiles");
        let full = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(&schema)
            .expect("compiles as 2020-12");
        for instance in [
            json!({"mode": "fast"}),
            json!({"mode": "fast", "mail": "not an address", "n": 1}),
            json!({"mode": "medium"}),
            json!({"mode": "slow", "n": 0}),
            json!({"mode": "slow", "n": 1.0}),
            json!({"n": 2}),
            json!({"mode": "fast", "extra": 1}),
            json!([]),
        ] {
            assert_eq!(ours.is_valid(&instance), full.is_valid(&instance), "{instance}");
        }
        // A schema that is not valid stays refused.
        assert!(CompiledSchema::compile(&json!({"type": "strin"})).is_err());
        assert!(CompiledSchema::compile(&json!({"properties": {"a": {"minLength": -1}}})).is_err());
    }

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "count": {"type": "integer", "minimum": 1, "maximum": 10},
                "ratio": {"type": "number"},
                "flag": {"type": "boolean"},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "name": {"type": "string", "pattern": "^[a-z]+$"},
                "nested": {"type": "object", "properties": {"n": {"type": "integer"}}}
            },
            "required": ["count"],
            "additionalProperties": false,
            "dependentRequired": {"mode": ["name"]}
        })
    }

    #[test]
    fn strings_are_coerced_to_numbers_and_booleans_with_warnings() {
        let c = CompiledSchema::compile(&schema()).unwrap();
        let mut args = json!({"count": "5", "ratio": "0.5", "flag": "true", "nested": {"n": "7"}});
        let warnings = c.check(&mut args, ValidateOptions::default()).unwrap();
        assert_eq!(
            args,
            json!({"count": 5, "ratio": 0.5, "flag": true, "nested": {"n": 7}})
        );
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        assert!(warnings[0].contains("/count"));
    }

    #[test]
    fn every_violation_is_reported_with_its_pointer() {
        let c = CompiledSchema::compile(&schema()).unwrap();
        let mut args = json!({"count": 50, "mode": "medium", "name": "ABC"});
        let err = c.check(&mut args, ValidateOptions::default()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArguments);
        let errors = err.details["errors"].as_array().unwrap();
        let pointers: Vec<&str> = errors.iter().map(|e| e["pointer"].as_str().unwrap()).collect();
        assert!(pointers.contains(&"/count"), "{errors:?}");
        assert!(pointers.contains(&"/mode"), "{errors:?}");
        assert!(pointers.contains(&"/name"), "{errors:?}");
    }

    #[test]
    fn missing_required_and_dependent_parameters_are_errors() {
        let c = CompiledSchema::compile(&schema()).unwrap();
        let err = c.check(&mut json!({}), ValidateOptions::default()).unwrap_err();
        assert!(err.message.contains("count"), "{}", err.message);
        let err = c
            .check(&mut json!({"count": 1, "mode": "fast"}), ValidateOptions::default())
            .unwrap_err();
        assert!(err.message.contains("name"), "{}", err.message);
    }

    #[test]
    fn unknown_keys_are_dropped_only_when_forbidden() {
        let c = CompiledSchema::compile(&schema()).unwrap();
        let mut args = json!({"count": 2, "extra": 1});
        let warnings = c.check(&mut args, ValidateOptions::default()).unwrap();
        assert_eq!(args, json!({"count": 2}));
        assert!(warnings[0].contains("/extra"));
        let strict = ValidateOptions {
            coerce: false,
            drop_unknown: false,
        };
        assert!(c.check(&mut json!({"count": 2, "extra": 1}), strict).is_err());
        assert!(c.check(&mut json!({"count": "2"}), strict).is_err());
    }

    #[test]
    fn one_of_exclusion_is_enforced() {
        let s = json!({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]});
        let c = CompiledSchema::compile(&s).unwrap();
        assert!(c.check(&mut json!({"a": 1}), ValidateOptions::default()).is_ok());
        assert!(
            c.check(&mut json!({"a": 1, "b": 2}), ValidateOptions::default())
                .is_err()
        );
    }

    #[test]
    fn remote_refs_are_refused() {
        let s = json!({"$ref": "http://127.0.0.1:9/schema.json"});
        assert!(CompiledSchema::compile(&s).is_err());
    }
}
