//! Test support: a scripted OpenAI-compatible mock LLM server (also the `fawn-mock-llm`
//! binary) that records every request and can inject faults.
