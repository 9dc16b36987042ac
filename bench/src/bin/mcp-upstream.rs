//! The proxy row's upstream: a plain rmcp server over stdio serving the bench's no-op tools
//! ([`idem_bench::mcp::Plain`]), for `idem-bench proxy` to call directly and through
//! `idem mcp-proxy`.

use std::process::ExitCode;

use idem_bench::mcp::Plain;
use rmcp::ServiceExt;

fn main() -> ExitCode {
    let served = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(async {
                let running = Plain::new()
                    .serve(rmcp::transport::stdio())
                    .await
                    .map_err(|e| e.to_string())?;
                running.waiting().await.map_err(|e| e.to_string())
            })
        });
    match served {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-upstream: {e}");
            ExitCode::FAILURE
        }
    }
}
