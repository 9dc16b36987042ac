//! Package `idem-tests`: idem's integration suites (each `[[test]]` of `Cargo.toml`), the
//! examples that need a server or a rig agent, and the guide's chapters compiled as doc tests
//! with the suites' dependencies (the facade shows the same chapters as `idem::guide`).

#[cfg(doctest)]
#[path = "../src/guide.rs"]
mod guide;
