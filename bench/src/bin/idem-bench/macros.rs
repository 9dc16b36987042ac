//! Row 5: generate two crates with the same N tools, one written with idem's `#[tool]`, one
//! with rmcp's `#[tool_router]`/`#[tool]`, for `scripts/bench` to time their clean and
//! incremental builds. One tool body carries `/*edit*/` so the harness can change it.

use std::fmt::Write as _;
use std::path::Path;

/// `gen-macro-crates <dir> <tools>`
pub fn run(args: &[String]) -> Result<(), String> {
    let [dir, tools] = args else {
        return Err("usage: gen-macro-crates <dir> <tools>".into());
    };
    let n: usize = tools.parse().map_err(|e| format!("tools: {e}"))?;
    let dir = Path::new(dir);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("the bench crate has no parent directory")?;
    write(
        &dir.join("idem_tools"),
        &manifest(
            "idem_tools",
            &format!(
                "idem = {{ path = {:?}, package = \"idem-tools\", default-features = false }}\n",
                repo.display()
            ),
        ),
        &idem_crate(n),
    )?;
    write(
        &dir.join("rmcp_tools"),
        &manifest(
            "rmcp_tools",
            "rmcp = { version = \"3.11\", default-features = false, features = [\"server\", \"macros\"] }\n\
             serde = { version = \"1\", features = [\"derive\"] }\n",
        ),
        &rmcp_crate(n),
    )
}

fn manifest(name: &str, deps: &str) -> String {
    format!(
        "[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [workspace]\n\n[dependencies]\n{deps}"
    )
}

fn write(dir: &Path, manifest: &str, lib: &str) -> Result<(), String> {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).map_err(|e| format!("{}: {e}", src.display()))?;
    std::fs::write(dir.join("Cargo.toml"), manifest).map_err(|e| e.to_string())?;
    std::fs::write(src.join("lib.rs"), lib).map_err(|e| e.to_string())
}

/// The body every tool runs; tool 42 carries the edit marker.
fn body(i: usize) -> String {
    let mark = if i == 42 { "0 /*edit*/" } else { "0" };
    format!("format!(\"{{ticket}} {{status}} {{note:?}} {i} {{}}\", {mark})")
}

fn idem_crate(n: usize) -> String {
    let mut s = String::from(
        "//! Generated: tools declared with idem's `#[tool]`.\n\nuse idem::prelude::*;\n\n",
    );
    for i in 0..n {
        let _ = write!(
            s,
            "/// Tool {i}: set a ticket's status.\n\
             #[tool(class = \"idempotent_write\")]\n\
             pub async fn tool_{i:03}(\n    \
                 /// The ticket.\n    ticket: u64,\n    \
                 /// The new status.\n    status: String,\n    \
                 /// A note for the customer.\n    note: Option<String>,\n\
             ) -> Result<String, ToolError> {{\n    Ok({})\n}}\n\n",
            body(i)
        );
    }
    s.push_str("/// Every tool.\npub fn registry() -> Registry {\n    Registry::builder()\n");
    for i in 0..n {
        let _ = writeln!(s, "        .tool::<tool_{i:03}>()");
    }
    s.push_str("        .build()\n        .expect(\"tools register\")\n}\n");
    s
}

fn rmcp_crate(n: usize) -> String {
    let mut s = String::from(
        "//! Generated: tools declared with rmcp's `#[tool_router]` and `#[tool]`.\n\n\
         use rmcp::handler::server::router::tool::ToolRouter;\n\
         use rmcp::handler::server::wrapper::Parameters;\n\
         use rmcp::{schemars, tool, tool_router};\n\n",
    );
    for i in 0..n {
        let _ = write!(
            s,
            "#[derive(serde::Deserialize, schemars::JsonSchema)]\n\
             pub struct Tool{i:03}Args {{\n    \
                 /// The ticket.\n    ticket: u64,\n    \
                 /// The new status.\n    status: String,\n    \
                 /// A note for the customer.\n    note: Option<String>,\n}}\n\n"
        );
    }
    s.push_str(
        "/// The server.\n#[derive(Clone)]\npub struct Server;\n\n#[tool_router]\nimpl Server {\n",
    );
    for i in 0..n {
        let _ = write!(
            s,
            "    /// Tool {i}: set a ticket's status.\n    \
             #[tool]\n    \
             async fn tool_{i:03}(&self, Parameters(Tool{i:03}Args {{ ticket, status, note }}): Parameters<Tool{i:03}Args>) -> String {{\n        \
                 {}\n    }}\n\n",
            body(i)
        );
    }
    s.push_str("}\n\n/// Every tool.\npub fn router() -> ToolRouter<Server> {\n    Server::tool_router()\n}\n");
    s
}
