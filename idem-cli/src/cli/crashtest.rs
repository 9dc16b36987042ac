//! `idem crashtest PROGRAM [ARGS]...`: run a scenario program whose `main` runs a crash test
//! (`idem::testing::CrashTest`), or a test binary with the name of a test that does, and say
//! whether every point held. The program prints the report; this command adds the verdict
//! and exits 0 only if the report says every point held.

use std::process::Command;

use clap::Args;

use crate::exit::{Exit, Failure};

#[derive(Args)]
pub struct CrashtestArgs {
    /// The scenario program (a `fn main` that runs a `CrashTest` and exits non-zero unless
    /// it held), or a test binary (with `--test`).
    pub program: std::path::PathBuf,
    /// In a test binary, the test that runs the crash test (run alone, its output shown).
    #[arg(long, value_name = "NAME")]
    pub test: Option<String>,
    /// The program's own arguments, after `--`.
    #[arg(last = true)]
    pub args: Vec<String>,
}

pub fn crashtest(args: CrashtestArgs) -> Result<(), Failure> {
    let mut command = Command::new(&args.program);
    if let Some(test) = &args.test {
        command.arg(test).args(["--exact", "--nocapture"]);
    }
    command.args(&args.args);
    let output = command.output().map_err(|e| {
        Failure::new(
            Exit::Usage,
            format!("cannot run {}: {e}", args.program.display()),
        )
    })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    // The exit status alone is not enough: a test binary given a name it lacks runs no
    // test and exits 0. Held is what the report says.
    let held = stdout
        .lines()
        .any(|l| l.trim_end().ends_with("every point held"));
    match (output.status.success(), held) {
        (true, true) => {
            eprintln!("crash test held: {}", args.program.display());
            Ok(())
        }
        (true, false) => Err(Failure::new(
            Exit::Failed,
            format!(
                "{} printed no crash test report that held (is it a crash test? with --test, is the name right?)",
                args.program.display()
            ),
        )),
        (false, _) => Err(Failure::new(
            Exit::Failed,
            format!(
                "the crash test of {} did not hold ({}): its report above names each point and what broke",
                args.program.display(),
                output.status
            ),
        )),
    }
}
