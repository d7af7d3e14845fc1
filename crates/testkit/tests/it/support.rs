use futures::StreamExt;
use serde_json::Value;

/// Sends `body` to `url` and returns the SSE `(event, data)` pairs up to the end of the body.
pub async fn sse(url: &str, body: &Value) -> anyhow::Result<Vec<(String, String)>> {
    let resp = fawn_net::client().post(url).json(body).send().await?;
    anyhow::ensure!(resp.status().is_success(), "status {}", resp.status());
    let mut events = eventsource_stream::EventStream::new(resp.bytes_stream());
    let mut out = Vec::new();
    while let Some(ev) = events.next().await {
        let ev = ev?;
        out.push((ev.event, ev.data));
    }
    Ok(out)
}

/// The JSON payloads of an OpenAI stream, without `[DONE]`; fails if `[DONE]` is missing.
pub async fn openai_chunks(url: &str, body: &Value) -> anyhow::Result<Vec<Value>> {
    let events = sse(url, body).await?;
    anyhow::ensure!(
        events.last().map(|(_, d)| d.as_str()) == Some("[DONE]"),
        "stream did not end with [DONE]"
    );
    events[..events.len() - 1]
        .iter()
        .map(|(_, d)| Ok(serde_json::from_str(d)?))
        .collect()
}
