use idem::prelude::*;

async fn cancel(_ctx: ToolContext) -> Result<(), ToolError> {
    Ok(())
}

/// Book a trip.
#[tool(class = "idempotent_write", compensate = cancel)]
async fn book_trip(trip: String) -> Result<String, ToolError> {
    Ok(trip)
}

fn main() {}
