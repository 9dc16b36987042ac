// A return type that is neither spelled `Result<..>` nor named like an alias of one (`..Result`)
// is refused once, on the type, with the fix.
use idem::prelude::*;

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Ticket {
    id: u64,
}

/// Open a ticket.
#[tool(class = "read")]
fn open_ticket(id: u64) -> Ticket {
    Ticket { id }
}

fn main() {}
