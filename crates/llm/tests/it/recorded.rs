//! Provider streams as providers send them: recordings written from each provider's API
//! reference (`crates/testkit/recordings/`), replayed byte for byte by the mock.

use crate::support::{ask, claude, drain};
use fawn_state::merge_chunks;
use fawn_testkit::{MockLlm, Turn};
use serde_json::json;

fn recording(name: &str) -> Turn {
    Turn::recording(name).unwrap()
}

#[tokio::test]
async fn anthropic_last_message_delta_usage_wins_for_every_count() {
    let mock = MockLlm::start().await.unwrap();
    mock.push(recording("anthropic/usage_in_final_message_delta.sse"));
    let m = claude(&mock, json!({}));
    let (chunks, err) = drain(&m.model, ask("when does it renew?")).await;
    assert!(err.is_none(), "{err:?}");
    let msg = merge_chunks(&chunks);
    assert_eq!(msg.text(), "The contract renews on 1 March.");
    let u = msg.usage_metadata.unwrap();
    // input 1520 + cache read 2400 + cache creation 1200, all from the final message_delta.
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.total_tokens),
        (5120, 87, 5207)
    );
    assert_eq!(
        u.input_token_details.unwrap(),
        json!({"cache_read": 2400, "cache_creation": 1200})
    );
}
