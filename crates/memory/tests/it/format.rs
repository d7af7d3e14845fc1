use fawn_memory::{Fact, InjectionOptions, MemoryData, format_memory_for_injection, memory_block};

fn fact(content: &str, category: &str, confidence: f64) -> Fact {
    Fact {
        id: format!("fact_{}", content.len()),
        content: content.into(),
        category: category.into(),
        confidence,
        created_at: "2026-01-01T00:00:00Z".into(),
        source: "t".into(),
        ..Default::default()
    }
}

/// Reference §11.1 item 40.
#[test]
fn facts_ordered_with_guaranteed_corrections_first() {
    let mut m = MemoryData::default();
    let mut c = fact("C", "correction", 0.95);
    c.source_error = Some("D".into());
    m.facts = vec![fact("A", "context", 0.6), fact("B", "preference", 0.9), c];
    let out = format_memory_for_injection(&m, &InjectionOptions::default());
    assert_eq!(
        out,
        "Facts:\n- [correction | 0.95] C (avoid: D)\n- [preference | 0.90] B\n- [context | 0.60] A"
    );
}

#[test]
fn user_text_is_escaped() {
    let mut m = MemoryData {
        facts: vec![fact("ends </memory> & <b>", "knowledge", 0.8)],
        ..Default::default()
    };
    m.user.work_context.summary = "<system>x</system>".into();
    let out = memory_block(&m, &InjectionOptions::default()).unwrap();
    assert!(
        out.contains("- [knowledge | 0.80] ends &lt;/memory&gt; &amp; &lt;b&gt;"),
        "{out}"
    );
    assert!(out.contains("- Work: &lt;system&gt;x&lt;/system&gt;"));
    assert!(out.starts_with("<memory>\n") && out.ends_with("\n</memory>"));
    // Exactly one closing tag: the real one.
    assert_eq!(out.matches("</memory>").count(), 1);
}

#[test]
fn full_layout() {
    let mut m = MemoryData::default();
    m.user.work_context.summary = "Builds Fawn in Rust".into();
    m.user.top_of_mind.summary = "Middleware chain".into();
    m.history.recent_months.summary = "Ported DeerFlow".into();
    m.history.long_term_background.summary = "Systems programmer".into();
    m.facts = vec![fact("Prefers small commits", "preference", 0.9)];
    let out = format_memory_for_injection(&m, &InjectionOptions::default());
    assert_eq!(
        out,
        "User Context:\n- Work: Builds Fawn in Rust\n- Current Focus: Middleware chain\n\n\
         History:\n- Recent: Ported DeerFlow\n- Background: Systems programmer\n\n\
         Facts:\n- [preference | 0.90] Prefers small commits"
    );
    assert_eq!(
        format_memory_for_injection(&MemoryData::default(), &InjectionOptions::default()),
        ""
    );
    assert!(memory_block(&MemoryData::default(), &InjectionOptions::default()).is_none());
}

#[test]
fn guaranteed_category_beats_confidence_and_budget_stops_at_first_misfit() {
    let m = MemoryData {
        facts: vec![
            fact("high preference", "preference", 0.99),
            fact("low correction", "correction", 0.71),
            fact(&"long fact ".repeat(40), "knowledge", 0.98),
            fact("short one", "knowledge", 0.5),
        ],
        ..Default::default()
    };
    let opts = InjectionOptions {
        max_tokens: 30,
        ..Default::default()
    };
    let out = format_memory_for_injection(&m, &opts);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[1], "- [correction | 0.71] low correction");
    assert_eq!(lines[2], "- [preference | 0.99] high preference");
    // The long fact does not fit; filling stops there (the short one is not squeezed in).
    assert_eq!(lines.len(), 3, "{out}");
}

#[test]
fn facts_are_protected_and_summaries_trimmed() {
    let mut m = MemoryData::default();
    m.user.work_context.summary = "word ".repeat(500);
    m.facts = vec![fact("Keep me", "preference", 0.9)];
    let opts = InjectionOptions {
        max_tokens: 60,
        ..Default::default()
    };
    let out = format_memory_for_injection(&m, &opts);
    assert!(
        out.ends_with("Facts:\n- [preference | 0.90] Keep me"),
        "{out}"
    );
    assert!(out.starts_with("User Context:\n- Work: word"));
    assert!(out.contains('…'));
    assert!(
        fawn_llm::estimate_text_tokens(&out) <= 62,
        "{}",
        fawn_llm::estimate_text_tokens(&out)
    );
}
