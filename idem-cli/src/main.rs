//! The `idem` binary for operators. Everything it does is this crate's library
//! ([`idem_cli::main`]), where its commands are documented and tested.

fn main() -> std::process::ExitCode {
    idem_cli::main()
}
