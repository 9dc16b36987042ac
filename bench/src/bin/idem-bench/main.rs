//! The benchmark driver `scripts/bench` runs: one subcommand per row that criterion cannot
//! measure in-process, each printing one JSON line of results.

mod breakdown;
mod client;
mod hop;
mod latency;
mod macros;
mod mcp;
mod paired;
mod profile;
mod proxy;
mod proxy_latency;
mod server;
mod sqlite;
mod timed;
mod turns;

const USAGE: &str = "usage: idem-bench <command> ...
  sqlite idem|raw <db> <worker> <start_ms|now> <seconds>
  redis <url> <prefix> <concurrency> <start_ms|now> <seconds>
  redis-client <url> <script-sha> <arguments-json> <concurrency> <start_ms|now> <seconds>
  postgres <url> <schema> <concurrency> <start_ms|now> <seconds>
  gen-macro-crates <dir> <tools>
  profile first|replay <tool> <calls>
  paired [rounds] [calls per batch]
  mcp <dir> [rounds] [calls per batch] [concurrency]
  mcp-profile <dir> <contender> [calls] [concurrency]
  proxy <idem-binary> <proxy.toml> <dir> [rounds] [calls per batch] [concurrency]
  breakdown [calls]
  hop [calls]
  latency <memory|sqlite:PATH|redis:URL|redis-cluster:URLS|postgres:URL> <calls>
  proxy-latency <idem-binary> <proxy.toml> <sqlite:PATH|redis://...|postgres://...> <calls>";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    let result = match command.as_str() {
        "sqlite" => sqlite::run(rest),
        "redis" => server::run("redis", rest),
        "redis-cluster" => server::run("redis-cluster", rest),
        "redis-client" => client::run(rest),
        "postgres" => server::run("postgres", rest),
        "gen-macro-crates" => macros::run(rest),
        "profile" => profile::run(rest),
        "paired" => paired::run(rest),
        "mcp" => mcp::run(rest),
        "mcp-profile" => mcp::profile(rest),
        "proxy" => proxy::run(rest),
        "breakdown" => breakdown::run(rest),
        "hop" => hop::run(rest),
        "latency" => latency::run(rest),
        "proxy-latency" => proxy_latency::run(rest),
        other => Err(format!("unknown command {other:?}\n{USAGE}")),
    };
    if let Err(e) = result {
        eprintln!("idem-bench {command}: {e}");
        std::process::exit(1);
    }
}
