//! Compile-time behaviour of `#[tool]`: every misuse is one clear error on the offending
//! tokens, and every documented form compiles, registers and carries its policy.
//!
//! Regenerate the expected output with `TRYBUILD=overwrite cargo test -p idem-macros --test ui`, then read
//! every changed `.stderr` before committing it.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
