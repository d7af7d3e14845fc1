//! `ask_clarification`: the model asks the user a question and the run ends.
//!
//! This tool only declares the schema the model sees. The clarification middleware (in the
//! middleware crate) intercepts every `ask_clarification` call before it reaches
//! [`Tool::call`]: it formats the question, builds the structured `human_input` artifact
//! (reference §6.6) and ends the run. The body here is a fallback for a chain without that
//! middleware: it returns [`CLARIFICATION_PLACEHOLDER`] and ends the run (`return_direct`),
//! so the model never carries on as if it had an answer.

use crate::args::{parse_args, schema_for};
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::sync::Arc;

/// What the tool body returns when no middleware handled the call.
pub const CLARIFICATION_PLACEHOLDER: &str =
    "Clarification request recorded; the question is handled by the clarification middleware.";

const DESCRIPTION: &str = "\
Ask the user a question when you cannot go on without their input. The run stops after this \
call; the user's answer arrives as their next message.

Ask when:
- information you need is missing (a file, a URL, a target, a constraint);
- the request can reasonably be read in more than one way;
- several approaches are valid and the choice is the user's;
- you are about to do something risky or destructive and need explicit confirmation;
- you have a recommendation and want the user's approval first.

Pick the shape of the question:
- one open question: just `question`;
- choose one of several answers: `options`;
- choose several answers: one entry in `fields` of type `multi_select`;
- several values at once: `fields` (a single form instead of a string of questions).

Ask one clarification at a time (a form counts as one), be specific, and never guess when \
the answer matters. If a skill gives you a field template, pass it through `fields` unchanged.";

/// Why clarification is needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClarificationType {
    MissingInfo,
    AmbiguousRequirement,
    ApproachChoice,
    RiskConfirmation,
    Suggestion,
}

/// Input type of a form field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FieldType {
    Text,
    Textarea,
    Number,
    Select,
    MultiSelect,
    Checkbox,
    Date,
}

/// One field of a clarification form.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ClarificationField {
    /// Unique identifier of the field.
    pub name: String,
    /// Text shown to the user (defaults to `name`).
    #[serde(default)]
    pub label: Option<String>,
    /// Input type (defaults to `text`).
    #[serde(default, rename = "type")]
    pub field_type: Option<FieldType>,
    /// Whether the user must fill it (default false).
    #[serde(default)]
    pub required: Option<bool>,
    /// Choices; required for `select` and `multi_select`.
    #[serde(default)]
    pub options: Option<Vec<String>>,
    /// Hint shown in the empty input.
    #[serde(default)]
    pub placeholder: Option<String>,
}

/// Arguments of `ask_clarification`. `options` and `fields` are read leniently (the
/// middleware normalises them); the schema tells the model their intended shape.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AskClarificationArgs {
    /// The question for the user. Be specific and clear.
    pub question: String,
    /// The kind of clarification needed.
    pub clarification_type: ClarificationType,
    /// Why you are asking: helps the user understand the situation.
    #[serde(default)]
    pub context: Option<String>,
    /// Choices the user can pick one from (for approach_choice or suggestion).
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    pub options: Option<Value>,
    /// Form fields to collect several values in one card; takes precedence over `options`.
    #[serde(default)]
    #[schemars(with = "Option<Vec<ClarificationField>>")]
    pub fields: Option<Value>,
}

/// `ask_clarification(question, clarification_type, context?, options?, fields?)`.
#[derive(Debug, Default)]
pub struct AskClarificationTool;

impl AskClarificationTool {
    pub fn new() -> Self {
        AskClarificationTool
    }
}

#[async_trait]
impl Tool for AskClarificationTool {
    fn name(&self) -> &str {
        "ask_clarification"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> Arc<Value> {
        schema_for::<AskClarificationArgs>()
    }

    fn return_direct(&self) -> bool {
        true
    }

    async fn call(
        &self,
        args: Map<String, Value>,
        _ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let _args: AskClarificationArgs = parse_args(self.name(), args)?;
        let mut out = ToolOutput::text(CLARIFICATION_PLACEHOLDER);
        out.end_run = true;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_has_the_enums_and_field_types() {
        let s = AskClarificationTool.parameters();
        let ty = s["properties"]["clarification_type"].to_string();
        for v in [
            "missing_info",
            "ambiguous_requirement",
            "approach_choice",
            "risk_confirmation",
            "suggestion",
        ] {
            assert!(ty.contains(v), "{v} missing in {ty}");
        }
        let fields = s["properties"]["fields"].to_string();
        for v in [
            "textarea",
            "multi_select",
            "checkbox",
            "date",
            "placeholder",
            "required",
        ] {
            assert!(fields.contains(v), "{v} missing in {fields}");
        }
        assert!(s["properties"]["options"].to_string().contains("string"));
        let req = s["required"].to_string();
        assert!(req.contains("question") && req.contains("clarification_type"));
        assert!(!req.contains("options"));
    }
}
