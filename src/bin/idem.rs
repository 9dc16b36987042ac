//! The `idem` binary for operators; everything it does lives in the `idem-cli` crate.

fn main() -> std::process::ExitCode {
    idem_cli::main()
}
