//! Human-in-the-loop: DeerFlow's clarification question surfaced as a LangGraph interrupt,
//! answers to it (`command.resume`), and `command.update` payloads.
//!
//! DeerFlow ends the run when the model calls `ask_clarification` (the ToolMessage carries
//! the question, `artifact.human_input` its structured form). Fawn keeps that — the run
//! ends normally — and also leaves the question pending on the thread: the run's last
//! checkpoint has `next = [<loop entry>]` and that task carries one [`Interrupt`] whose value
//! is the `human_input` payload and whose id is derived from the request id (so it is the
//! same every time it is shown). The thread is therefore `interrupted` until either a new
//! user message arrives (a normal run; the pending task is discarded) or a run resumes it
//! with `command: {resume: …}`, which Fawn turns into the user's answer: a human message
//! carrying `additional_kwargs.human_input_response`, exactly what DeerFlow's UI sends.

use fawn_state::{Interrupt, Message, MessageKind, StateError, StateUpdate};
use serde_json::{Map, Value, json};

/// The stable 32-hex id of the interrupt for `request_id`.
pub fn interrupt_id(request_id: &str) -> String {
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, request_id.as_bytes())
        .simple()
        .to_string()
}

/// The interrupt a clarification ToolMessage stands for, if it is one.
pub(crate) fn clarification_interrupt(message: &Message) -> Option<Interrupt> {
    if message.kind != MessageKind::Tool {
        return None;
    }
    let call_id = message.tool_call_id.clone().unwrap_or_default();
    let value = match message.artifact.get("human_input") {
        Some(Value::Object(o))
            if o.get("kind")
                .and_then(Value::as_str)
                .unwrap_or("human_input_request")
                == "human_input_request" =>
        {
            Value::Object(o.clone())
        }
        _ if message.name.as_deref() == Some("ask_clarification") => json!({
            "version": 1,
            "kind": "human_input_request",
            "source": "ask_clarification",
            "request_id": format!("clarification:{call_id}"),
            "question": message.text(),
            "input_mode": "free_text",
            "tool_call_id": call_id,
        }),
        _ => return None,
    };
    let request_id = value
        .get("request_id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("clarification:{call_id}"));
    Some(Interrupt {
        id: interrupt_id(&request_id),
        value,
    })
}

/// The answer a `command.resume` value gives to `interrupt`: `resume` itself, or its entry
/// for this interrupt when it is a map keyed by interrupt ids. `None` when a map does not
/// answer this interrupt.
pub(crate) fn resume_value_for<'a>(interrupt: &Interrupt, resume: &'a Value) -> Option<&'a Value> {
    if let Value::Object(map) = resume
        && !map.is_empty()
        && map.keys().all(|k| is_interrupt_id(k))
    {
        return map.get(&interrupt.id);
    }
    Some(resume)
}

fn is_interrupt_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The user's answer to a clarification as the human message DeerFlow's UI would send.
pub(crate) fn answer_message(interrupt: &Interrupt, answer: &Value) -> Message {
    let request = &interrupt.value;
    let response = match answer {
        Value::Object(o)
            if o.get("kind").and_then(Value::as_str) == Some("human_input_response") =>
        {
            Value::Object(o.clone())
        }
        other => {
            let value = match other {
                Value::Object(o) if o.contains_key("value") => o["value"].clone(),
                v => v.clone(),
            };
            let mut r = Map::new();
            r.insert("version".into(), json!(1));
            r.insert("kind".into(), json!("human_input_response"));
            r.insert(
                "source".into(),
                request
                    .get("source")
                    .cloned()
                    .unwrap_or_else(|| json!("ask_clarification")),
            );
            if let Some(id) = request.get("request_id") {
                r.insert("request_id".into(), id.clone());
            }
            match matching_option(request, &value) {
                Some(option_id) => {
                    r.insert("response_kind".into(), json!("option"));
                    r.insert("value".into(), value);
                    r.insert("option_id".into(), option_id);
                }
                None => {
                    r.insert("response_kind".into(), json!("text"));
                    r.insert("value".into(), value);
                }
            }
            Value::Object(r)
        }
    };
    let text = match response.get("value") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    };
    let mut m = Message::human(text);
    m.additional_kwargs
        .insert("human_input_response".into(), response);
    m
}

/// The id of the request's option whose value or label equals `value`.
fn matching_option(request: &Value, value: &Value) -> Option<Value> {
    let text = value.as_str()?;
    request
        .get("options")?
        .as_array()?
        .iter()
        .find(|o| {
            o.get("value").and_then(Value::as_str) == Some(text)
                || o.get("label").and_then(Value::as_str) == Some(text)
        })
        .and_then(|o| o.get("id").cloned())
}

/// `command.update`: an object, or a list of `[key, value]` pairs.
pub(crate) fn command_update(v: &Value) -> Result<StateUpdate, StateError> {
    match v {
        Value::Array(pairs) => {
            let mut map = Map::new();
            for p in pairs {
                match p.as_array().map(Vec::as_slice) {
                    Some([Value::String(k), v]) => {
                        // Repeated keys for reducer channels (messages) accumulate.
                        match (map.get_mut(k), v) {
                            (Some(Value::Array(existing)), Value::Array(more))
                                if k == "messages" =>
                            {
                                existing.extend(more.iter().cloned())
                            }
                            _ => {
                                map.insert(k.clone(), v.clone());
                            }
                        }
                    }
                    _ => {
                        return Err(StateError::BadChannel {
                            channel: "command.update",
                            reason: "expected an object or a list of [key, value] pairs".into(),
                        });
                    }
                }
            }
            StateUpdate::from_value(Value::Object(map))
        }
        other => StateUpdate::from_value(other.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Interrupt {
        Interrupt {
            id: interrupt_id("clarification:call_1"),
            value: json!({"version": 1, "kind": "human_input_request", "source": "ask_clarification",
                "request_id": "clarification:call_1", "question": "Which env?",
                "options": [{"id": "option-1", "label": "staging", "value": "staging"}]}),
        }
    }

    #[test]
    fn ids_are_stable_hex() {
        let a = interrupt_id("clarification:call_1");
        assert_eq!(a, interrupt_id("clarification:call_1"));
        assert_ne!(a, interrupt_id("clarification:call_2"));
        assert!(is_interrupt_id(&a), "{a}");
    }

    #[test]
    fn answers_become_human_input_responses() {
        let i = request();
        let m = answer_message(&i, &json!("staging"));
        assert_eq!(m.kind, MessageKind::Human);
        assert_eq!(m.text(), "staging");
        let r = &m.additional_kwargs["human_input_response"];
        assert_eq!(r["response_kind"], "option");
        assert_eq!(r["option_id"], "option-1");
        assert_eq!(r["request_id"], "clarification:call_1");
        let free = answer_message(&i, &json!("production please"));
        assert_eq!(
            free.additional_kwargs["human_input_response"]["response_kind"],
            "text"
        );
        let structured =
            json!({"kind": "human_input_response", "value": "x", "response_kind": "text"});
        let m = answer_message(&i, &structured);
        assert_eq!(m.additional_kwargs["human_input_response"], structured);
        assert_eq!(m.text(), "x");
    }

    #[test]
    fn resume_maps_are_keyed_by_interrupt_id() {
        let i = request();
        let map = json!({ i.id.clone(): "yes" });
        assert_eq!(resume_value_for(&i, &map), Some(&json!("yes")));
        let other = json!({ interrupt_id("x"): "no" });
        assert_eq!(resume_value_for(&i, &other), None);
        let plain = json!({"value": "v"});
        assert_eq!(resume_value_for(&i, &plain), Some(&plain));
    }

    #[test]
    fn command_updates_accept_pairs() {
        let u = command_update(
            &json!([["title", "T"], ["messages", [{"role": "user", "content": "a"}]],
            ["messages", [{"role": "user", "content": "b"}]]]),
        )
        .unwrap();
        assert_eq!(u.title, Some(Some("T".into())));
        assert_eq!(u.messages.unwrap().len(), 2);
        assert!(command_update(&json!([["title"]])).is_err());
        assert!(command_update(&json!({"title": "x"})).is_ok());
    }
}
