// Known limitation: an attribute macro cannot see that its function sits in an `impl`
// block, and the type `#[tool]` generates cannot live there. rustc reports that first
// ("struct is not supported in `trait`s or `impl`s ... consider moving the struct out"),
// then errors that follow from it. Move the tool out of the `impl`.
use idem::prelude::*;

struct Mailer;

impl Mailer {
    /// Send an email.
    #[tool(class = "non_idempotent_write")]
    fn send_email(to: String) -> Result<String, ToolError> {
        Ok(to)
    }
}

fn main() {}
