//! The memory text injected into prompts (reference §5.4):
//!
//! ```text
//! User Context:
//! - Work: …
//! - Personal: …
//! - Current Focus: …
//!
//! History:
//! - Recent: …
//! - Earlier: …
//! - Background: …
//!
//! Facts:
//! - [correction | 0.95] Use uv not pip (avoid: used pip)
//! ```
//!
//! Facts of the guaranteed categories come first, from their own token budget; the others
//! follow by confidence until the budget is used (stopping at the first that does not fit).
//! The facts block has priority: when everything does not fit, the summaries are cut from
//! the end. User-editable text is HTML-escaped so it cannot close the `<memory>` block.

use crate::model::{Fact, MemoryData};
use fawn_llm::estimate_text_tokens;

/// Knobs of [`format_memory_for_injection`].
#[derive(Clone, Debug, PartialEq)]
pub struct InjectionOptions {
    pub max_tokens: usize,
    pub guaranteed_categories: Vec<String>,
    pub guaranteed_token_budget: usize,
}

impl Default for InjectionOptions {
    fn default() -> Self {
        InjectionOptions {
            max_tokens: 2000,
            guaranteed_categories: vec!["correction".to_string()],
            guaranteed_token_budget: 500,
        }
    }
}

impl InjectionOptions {
    /// From `memory:` (`max_injection_tokens`, and `backend_config.guaranteed_categories` /
    /// `guaranteed_token_budget` when given).
    pub fn from_config(c: &fawn_config::MemoryConfig) -> Self {
        let mut o = InjectionOptions {
            max_tokens: c.max_injection_tokens,
            ..Default::default()
        };
        if let Some(serde_json::Value::Array(cats)) = c.backend_config.get("guaranteed_categories")
        {
            o.guaranteed_categories = cats
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
        }
        if let Some(b) = c
            .backend_config
            .get("guaranteed_token_budget")
            .and_then(serde_json::Value::as_u64)
        {
            o.guaranteed_token_budget = b as usize;
        }
        o
    }
}

/// `&`, `<` and `>` as entities.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One fact line: `- [category | 0.95] content (avoid: source error)`.
pub fn fact_line(f: &Fact) -> String {
    let mut line = format!(
        "- [{} | {:.2}] {}",
        escape(f.category.trim()),
        f.confidence,
        escape(f.content.trim())
    );
    if let Some(err) = f
        .source_error
        .as_deref()
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        line.push_str(&format!(" (avoid: {})", escape(err)));
    }
    line
}

/// Sorts indices into `facts` by confidence, highest first (stable).
fn by_confidence(facts: &[&Fact], idx: &mut [usize]) {
    idx.sort_by(|a, b| {
        facts[*b]
            .confidence
            .partial_cmp(&facts[*a].confidence)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
}

fn summaries_text(memory: &MemoryData) -> String {
    let mut blocks = Vec::new();
    let user: Vec<String> = [
        ("Work", &memory.user.work_context.summary),
        ("Personal", &memory.user.personal_context.summary),
        ("Current Focus", &memory.user.top_of_mind.summary),
    ]
    .iter()
    .filter(|(_, s)| !s.trim().is_empty())
    .map(|(k, s)| format!("- {k}: {}", escape(s.trim())))
    .collect();
    if !user.is_empty() {
        blocks.push(format!("User Context:\n{}", user.join("\n")));
    }
    let history: Vec<String> = [
        ("Recent", &memory.history.recent_months.summary),
        ("Earlier", &memory.history.earlier_context.summary),
        ("Background", &memory.history.long_term_background.summary),
    ]
    .iter()
    .filter(|(_, s)| !s.trim().is_empty())
    .map(|(k, s)| format!("- {k}: {}", escape(s.trim())))
    .collect();
    if !history.is_empty() {
        blocks.push(format!("History:\n{}", history.join("\n")));
    }
    blocks.join("\n\n")
}

/// Cuts `text` from the end to about `budget` tokens (`…` marks the cut).
fn tail_trim(text: &str, budget: usize) -> String {
    if estimate_text_tokens(text) <= budget {
        return text.to_string();
    }
    if budget == 0 {
        return String::new();
    }
    let chars: Vec<char> = text.chars().collect();
    let (mut lo, mut hi) = (0usize, chars.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        let candidate: String = chars[..mid].iter().collect();
        if estimate_text_tokens(&candidate) < budget {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let mut out: String = chars[..lo].iter().collect();
    out = out.trim_end().to_string();
    if out.is_empty() {
        return out;
    }
    out.push('…');
    out
}

/// The memory text for a prompt (without the `<memory>` wrapper); empty when there is
/// nothing to say.
pub fn format_memory_for_injection(memory: &MemoryData, opts: &InjectionOptions) -> String {
    let is_guaranteed = |f: &Fact| {
        opts.guaranteed_categories
            .iter()
            .any(|c| c.eq_ignore_ascii_case(f.category.trim()))
    };
    let visible: Vec<&Fact> = memory
        .facts
        .iter()
        .filter(|f| !f.content.trim().is_empty())
        .collect();
    let mut guaranteed: Vec<usize> = (0..visible.len())
        .filter(|i| is_guaranteed(visible[*i]))
        .collect();
    by_confidence(&visible, &mut guaranteed);

    let header = "Facts:";
    let mut lines: Vec<String> = Vec::new();
    let mut chosen = vec![false; visible.len()];
    let mut used = estimate_text_tokens(header);
    let mut g_used = 0usize;
    for i in guaranteed {
        let line = fact_line(visible[i]);
        let t = estimate_text_tokens(&line) + 1;
        if g_used + t > opts.guaranteed_token_budget || used + t > opts.max_tokens {
            break;
        }
        g_used += t;
        used += t;
        lines.push(line);
        chosen[i] = true;
    }
    let mut rest: Vec<usize> = (0..visible.len()).filter(|i| !chosen[*i]).collect();
    by_confidence(&visible, &mut rest);
    for i in rest {
        let line = fact_line(visible[i]);
        let t = estimate_text_tokens(&line) + 1;
        if used + t > opts.max_tokens {
            break;
        }
        used += t;
        lines.push(line);
    }
    let facts_block = if lines.is_empty() {
        String::new()
    } else {
        format!("{header}\n{}", lines.join("\n"))
    };
    let facts_tokens = if facts_block.is_empty() { 0 } else { used };
    let summaries = tail_trim(
        &summaries_text(memory),
        opts.max_tokens.saturating_sub(facts_tokens),
    );
    match (summaries.is_empty(), facts_block.is_empty()) {
        (true, true) => String::new(),
        (false, true) => summaries,
        (true, false) => facts_block,
        (false, false) => format!("{summaries}\n\n{facts_block}"),
    }
}

/// `<memory>\n…\n</memory>`, or `None` when there is nothing to inject.
pub fn memory_block(memory: &MemoryData, opts: &InjectionOptions) -> Option<String> {
    let text = format_memory_for_injection(memory, opts);
    (!text.is_empty()).then(|| format!("<memory>\n{text}\n</memory>"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(content: &str, category: &str, confidence: f64) -> Fact {
        Fact {
            id: format!("fact_{content}"),
            content: content.into(),
            category: category.into(),
            confidence,
            ..Default::default()
        }
    }

    #[test]
    fn trims_tail_to_budget() {
        let long = "word ".repeat(100);
        let t = tail_trim(&long, 10);
        assert!(estimate_text_tokens(&t) <= 11, "{t}");
        assert!(t.ends_with('…'));
        assert_eq!(tail_trim("short", 10), "short");
    }

    #[test]
    fn guaranteed_budget_is_separate() {
        let m = MemoryData {
            facts: (0..50)
                .map(|i| {
                    fact(
                        &format!("correction number {i} with some words"),
                        "correction",
                        0.99,
                    )
                })
                .chain([fact("ordinary", "preference", 0.5)])
                .collect(),
            ..Default::default()
        };
        let out = format_memory_for_injection(
            &m,
            &InjectionOptions {
                max_tokens: 2000,
                guaranteed_token_budget: 30,
                ..Default::default()
            },
        );
        let corrections = out
            .lines()
            .filter(|l| l.starts_with("- [correction"))
            .count();
        // Only a few fit the guaranteed budget; the rest compete by confidence afterwards.
        assert!(corrections >= 2, "{out}");
        assert!(out.contains("ordinary"));
    }
}
