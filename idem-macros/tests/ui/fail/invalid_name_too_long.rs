use idem::prelude::*;

/// Send an email.
#[tool(
    class = "non_idempotent_write",
    name = "send_an_email_to_the_customer_who_opened_the_ticket_and_cc_their_manager"
)]
fn send_email(to: String) -> Result<String, ToolError> {
    Ok(to)
}

fn main() {}
