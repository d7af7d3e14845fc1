//! `fawn-mock-llm`: the testkit mock LLM as a standalone server for demos and benchmarks.
//! It answers statelessly (echo, demo or rules), so any number of concurrent runs can use it.

use anyhow::Context;
use clap::{Parser, ValueEnum};
use fawn_testkit::{Behavior, Chunking, MockConfig, MockLlm, Rules};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    /// Repeat the user's last text.
    Echo,
    /// Say it is the Fawn demo model, then echo.
    Demo,
    /// Call `--tool` when offered after a user message, answer `--after-tool` after a tool
    /// result, echo otherwise.
    Rules,
    /// Echo, unless the last user message carries `@mock {json}` saying what to do:
    /// `tool` + `args` (call it, then answer `after_tool`), `text`, `delay_ms`,
    /// `chunk_chars`, `reasoning`.
    Directives,
}

/// A mock LLM server speaking the OpenAI, Anthropic, Gemini and Ollama chat APIs.
#[derive(Debug, Parser)]
#[command(name = "fawn-mock-llm", version)]
struct Cli {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 picks a free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    #[arg(long, value_enum, default_value = "echo")]
    mode: Mode,
    /// Rules mode: the tool to call.
    #[arg(long)]
    tool: Option<String>,
    /// Rules mode: the tool's arguments as a JSON object.
    #[arg(long, default_value = "{}")]
    tool_args: String,
    /// Rules mode: the answer after a tool result.
    #[arg(long)]
    after_tool: Option<String>,
    /// Reasoning streamed before each answer (rules mode).
    #[arg(long)]
    reasoning: Option<String>,
    /// Delay between streamed chunks, in milliseconds.
    #[arg(long, default_value_t = 0)]
    chunk_delay_ms: u64,
    /// Characters per streamed chunk (0 = one chunk per word).
    #[arg(long, default_value_t = 0)]
    chunk_chars: usize,
    /// Model id listed by `GET /v1/models`.
    #[arg(long, default_value = "fawn-mock")]
    model: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let addr: SocketAddr = format!("{}:{}", cli.host, cli.port)
        .parse()
        .with_context(|| format!("invalid --host/--port: {}:{}", cli.host, cli.port))?;
    let behavior = match cli.mode {
        Mode::Echo => Behavior::Echo,
        Mode::Demo => Behavior::Demo,
        Mode::Directives => Behavior::Directives,
        Mode::Rules => {
            let mut rules = Rules::new();
            if let Some(tool) = &cli.tool {
                let args: serde_json::Value = serde_json::from_str(&cli.tool_args)
                    .with_context(|| format!("--tool-args is not JSON: {}", cli.tool_args))?;
                anyhow::ensure!(args.is_object(), "--tool-args must be a JSON object");
                rules = rules.call_tool(tool.clone(), args);
            }
            if let Some(t) = &cli.after_tool {
                rules = rules.after_tool(t.clone());
            }
            if let Some(r) = &cli.reasoning {
                rules = rules.with_reasoning(r.clone());
            }
            Behavior::Rules(rules)
        }
    };
    let config = MockConfig::default()
        .with_addr(addr)
        .with_behavior(behavior)
        .with_chunking(if cli.chunk_chars == 0 {
            Chunking::Words
        } else {
            Chunking::Chars(cli.chunk_chars)
        })
        .with_chunk_delay(Duration::from_millis(cli.chunk_delay_ms))
        .with_model(cli.model);
    let mock = MockLlm::start_with(config)
        .await
        .with_context(|| format!("could not listen on {addr}"))?;
    println!("fawn-mock-llm listening on {}", mock.base_url());
    tokio::signal::ctrl_c()
        .await
        .context("waiting for ctrl-c")?;
    mock.stop().await;
    Ok(())
}
