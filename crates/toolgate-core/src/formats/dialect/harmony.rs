//! gpt-oss harmony: messages of `<|start|>ROLE<|channel|>CHANNEL<|message|>BODY` ended by
//! `<|end|>`, `<|call|>` or `<|return|>`. A message addressed `to=functions.NAME` — in the channel
//! (`<|channel|>commentary to=functions.NAME <|constrain|>json`) or in the role header
//! (`assistant to=functions.NAME<|channel|>commentary json`) — is a call whose body is its JSON
//! arguments. The analysis channel is reasoning and never read for calls; the final channel (and
//! commentary addressed to no one, the preamble) is content. Text whose special tokens a server
//! stripped still reads by its `to=functions.NAME` headers.

use super::scan::{broken, json_end, json_value};
use super::{Call, Dialect, Found, find_structural};
use crate::formats::RawArguments;
use serde_json::Map;

const START: &str = "<|start|>";
const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
const ENDS: [&str; 3] = ["<|end|>", "<|call|>", "<|return|>"];
const RECIPIENT: &str = "to=functions.";

pub(super) fn marker(text: &str) -> Option<usize> {
    [START, CHANNEL, MESSAGE, RECIPIENT]
        .iter()
        .filter_map(|t| find_structural(text, t))
        .min()
}

pub(super) fn parse(text: &str) -> Option<Found> {
    marker(text)?;
    if !text.contains(MESSAGE) {
        return stripped(text);
    }
    let mut calls = Vec::new();
    let mut content = Vec::new();
    let mut reasoning = Vec::new();
    let mut at = 0;
    // Message by message, in order: a call's body ends where its JSON does (an end token inside
    // a string argument is not its end); any other body at the first end token.
    while let Some(m) = text[at..].find(MESSAGE).map(|m| at + m) {
        let head = &text[at..m];
        let (before, header) = match head.rfind(START) {
            Some(s) => (&head[..s], &head[s + START.len()..]),
            None => ("", head),
        };
        push_plain(before, &mut content);
        let body_at = m + MESSAGE.len();
        let channel = header
            .split(CHANNEL)
            .nth(1)
            .and_then(|c| c.split_whitespace().next())
            .unwrap_or_default();
        let name = recipient(header);
        let json_at = body_at + (text[body_at..].len() - text[body_at..].trim_start().len());
        let json = name.is_some() && text[json_at..].starts_with(['{', '[']);
        let json_stop = if json { json_end(text, json_at) } else { None };
        let body_end = match json_stop {
            Some(e) => e,
            None if json => text.len(),
            None => first_end(text, body_at).map_or(text.len(), |(e, _)| e),
        };
        let next = first_end(text, body_end);
        let ended = if json { json_stop.is_some() } else { next.is_some() };
        let body = &text[body_at..body_end];
        match name {
            Some(name) => calls.push(call(name, body, ended)),
            None if channel == "analysis" => reasoning.push(body.trim().to_owned()),
            None => content.push(body.trim().to_owned()),
        }
        at = match next {
            Some((e, len)) if text[body_end..e].trim().is_empty() => e + len,
            _ => body_end,
        };
    }
    push_plain(&text[at..], &mut content);
    let mut found = Found::new(Dialect::GptOss, content.join("\n"), calls);
    found.reasoning = (!reasoning.is_empty()).then(|| reasoning.join("\n"));
    Some(found)
}

/// Text outside any message (what a server left around them) is content.
fn push_plain(plain: &str, content: &mut Vec<String>) {
    let plain = strip_ends(plain.trim()).trim_start_matches(START).trim();
    if !plain.is_empty() {
        content.push(plain.to_owned());
    }
}

/// The first end token at or after `from`: its position and length.
fn first_end(text: &str, from: usize) -> Option<(usize, usize)> {
    super::scan::find_any(text, from, &ENDS)
}

/// The function a header addresses, from `to=functions.NAME`.
fn recipient(header: &str) -> Option<String> {
    let at = header.find("to=")? + 3;
    let rest = &header[at..];
    let end = rest.find(|c: char| c.is_whitespace() || c == '<').unwrap_or(rest.len());
    let name = &rest[..end];
    let name = name.strip_prefix("functions.").unwrap_or(name);
    (!name.is_empty()).then(|| name.to_owned())
}

fn call(name: String, body: &str, ended: bool) -> Call {
    let body = body.trim();
    let start = body.find(['{', '[']).unwrap_or(0);
    match json_end(body, start) {
        None if !ended => broken(Some(name), "the arguments were cut off before <|call|>"),
        _ => match json_value(&body[start..]) {
            Ok((value, repair)) => Call {
                id: None,
                name: Some(name),
                arguments: RawArguments::Json(value),
                extra: Map::new(),
                repair,
            },
            Err(e) => broken(Some(name), e),
        },
    }
}

/// Harmony with its special tokens stripped: `…commentary to=functions.NAME json{…}`.
fn stripped(text: &str) -> Option<Found> {
    let first = find_structural(text, RECIPIENT)?;
    let mut calls = Vec::new();
    let mut at = first;
    while let Some(p) = text[at..].find(RECIPIENT) {
        let name_at = at + p + RECIPIENT.len();
        let name_end = text[name_at..]
            .find(|c: char| c.is_whitespace() || c == '{' || c == '<')
            .map_or(text.len(), |e| name_at + e);
        let name = text[name_at..name_end].to_owned();
        let Some(j) = text[name_end..].find('{').map(|j| name_end + j) else {
            calls.push(broken(Some(name), "the call has no JSON arguments"));
            break;
        };
        let Some(end) = json_end(text, j) else {
            calls.push(broken(Some(name), "the arguments were cut off before their end"));
            break;
        };
        calls.push(call(name, &text[j..end], true));
        at = end;
    }
    let mut found = Found::new(Dialect::GptOss, "", calls);
    let before = text[..first].trim();
    found.reasoning = (!before.is_empty()).then(|| before.to_owned());
    Some(found)
}

fn strip_ends(text: &str) -> &str {
    let mut t = text.trim();
    for e in ENDS {
        t = t.trim_end_matches(e).trim();
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_recipient_in_the_channel_or_the_role() {
        for text in [
            "<|channel|>analysis<|message|>Need the weather; call get_weather with {\"location\": \"x\"}.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"Tokyo\"}<|call|>",
            "<|channel|>analysis<|message|>Need the weather; call get_weather with {\"location\": \"x\"}.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"location\":\"Tokyo\"}<|call|>",
        ] {
            let f = parse(text).unwrap();
            assert_eq!(f.calls.len(), 1, "{text}");
            assert_eq!(f.calls[0].name.as_deref(), Some("get_weather"));
            assert_eq!(f.calls[0].arguments, RawArguments::Json(json!({"location": "Tokyo"})));
            assert!(f.reasoning.unwrap().starts_with("Need the weather"));
        }
    }

    #[test]
    fn final_channel_is_content_and_cut_off_calls_are_broken() {
        let f = parse(
            "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.<|return|>",
        )
        .unwrap();
        assert!(f.calls.is_empty());
        assert_eq!(f.content, "It is 4.");
        let f = parse("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"To")
            .unwrap();
        assert!(matches!(f.calls[0].arguments, RawArguments::Broken(_)));
    }

    #[test]
    fn end_tokens_inside_arguments_are_not_ends() {
        let f = parse(
            "<|start|>assistant to=functions.note<|channel|>commentary json<|message|>{\"text\": \"<|call|> and <|start|>x<|message|>\"}<|call|>",
        )
        .unwrap();
        assert_eq!(f.calls.len(), 1);
        assert_eq!(
            f.calls[0].arguments,
            RawArguments::Json(json!({"text": "<|call|> and <|start|>x<|message|>"}))
        );
        assert_eq!(f.content, "");
    }

    #[test]
    fn stripped_tokens_still_read() {
        let f = parse("analysisNeed weather.assistantcommentary to=functions.get_weather json{\"location\":\"Tokyo\"}")
            .unwrap();
        assert_eq!(f.calls[0].name.as_deref(), Some("get_weather"));
        assert_eq!(f.calls[0].arguments, RawArguments::Json(json!({"location": "Tokyo"})));
    }
}
