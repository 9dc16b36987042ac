use idem::prelude::*;

struct Mailer;

impl Mailer {
    /// Send an email.
    #[tool(class = "non_idempotent_write")]
    fn send_email(&self, to: String) -> Result<String, ToolError> {
        Ok(to)
    }
}

fn main() {}
