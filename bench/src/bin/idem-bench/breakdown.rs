//! Where the hot path's time goes: each piece of work a dispatch does, timed alone on the
//! same arguments, to read beside the criterion figures (nanoseconds per call, one run).

use std::hint::black_box;
use std::time::Instant;

use idem_bench::{ARGUMENTS, registry};
use idem_core::{Fingerprint, KeyMaterial, LogicalKey, canonical_json};
use serde_json::Value;

fn time<T>(name: &str, n: u32, mut f: impl FnMut() -> T) {
    for _ in 0..n / 10 {
        black_box(f());
    }
    let start = Instant::now();
    for _ in 0..n {
        black_box(f());
    }
    let ns = start.elapsed().as_nanos() as f64 / f64::from(n);
    println!("{{\"row\":\"breakdown\",\"part\":\"{name}\",\"ns\":{ns:.0}}}");
}

pub fn run(args: &[String]) -> Result<(), String> {
    let n: u32 = args
        .first()
        .map(|s| s.parse().map_err(|e| format!("count: {e}")))
        .transpose()?
        .unwrap_or(200_000);
    let registry = registry();
    let tool = registry
        .get("noop_idempotent_write")
        .ok_or("the no-op tool is registered")?;
    let value: Value = serde_json::from_str(ARGUMENTS).map_err(|e| e.to_string())?;
    let canonical = canonical_json(&value);
    let logical = LogicalKey::new(
        "bench",
        idem_bench::TENANT,
        "noop_idempotent_write",
        KeyMaterial::CallId {
            call_id: "call_0000000000".into(),
            run_id: None,
        },
    );
    time("parse arguments (serde_json::Value)", n, || {
        serde_json::from_str::<Value>(ARGUMENTS)
    });
    time("clone arguments", n, || value.clone());
    time("validate against the schema (with clone)", n, || {
        tool.validate_arguments(value.clone())
    });
    time("canonical JSON", n, || canonical_json(&value));
    time("serde_json::to_string (floor's canonical)", n, || {
        serde_json::to_string(&value)
    });
    time("SHA-256 fingerprint", n, || {
        Fingerprint::of_canonical(&canonical)
    });
    time("record key (SHA-256 + hex)", n, || logical.record_key());
    time("downstream key (SHA-256 + hex)", n, || {
        logical.downstream_key()
    });
    // What the dispatcher runs: both keys at once, from borrowed parts.
    time("both keys together (LogicalKey::derive, as dispatched)", n, || {
        LogicalKey::derive(
            "bench",
            idem_bench::TENANT,
            "noop_idempotent_write",
            &logical.material,
        )
    });
    // What an rmcp client pays to read each server's answer to the write (the `mcp` rows'
    // client runs in the bench's process): `ServerResult` is an untagged union in which a
    // tool call's result is the 16th variant tried, and each variant before it reads the
    // result's `_meta` again before it fails.
    let answers = [
        ("rmcp client parses the plain server's answer", PLAIN_ANSWER),
        ("rmcp client parses idem's answer", IDEM_ANSWER),
        (
            "rmcp client parses idem's answer without _meta",
            IDEM_ANSWER_WITHOUT_META,
        ),
    ];
    for (name, answer) in answers {
        serde_json::from_str::<rmcp::model::ServerJsonRpcMessage>(answer)
            .map_err(|e| format!("{name}: {e}"))?;
        time(name, n, || {
            serde_json::from_str::<rmcp::model::ServerJsonRpcMessage>(answer)
        });
    }
    Ok(())
}

/// The answers of `mcp-profile` to the idempotent write, as the servers framed them.
const PLAIN_ANSWER: &str = r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"complete","content":[{"type":"text","text":"{\"result\":\"ok\"}"}],"structuredContent":{"result":"ok"},"isError":false}}"#;
const IDEM_ANSWER: &str = r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"complete","content":[{"type":"text","text":"\"ok\""}],"structuredContent":{"result":"ok"},"isError":false,"_meta":{"io.idem/deduplicated":false,"io.idem/key":"idem-ac6ff1abe61924b2b8e876ea0b720eab30961ef5"}}}"#;
const IDEM_ANSWER_WITHOUT_META: &str = r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"complete","content":[{"type":"text","text":"\"ok\""}],"structuredContent":{"result":"ok"},"isError":false}}"#;
