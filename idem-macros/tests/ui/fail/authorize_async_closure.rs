use idem::prelude::*;

/// Cancel an order.
#[tool(
    class = "idempotent_write",
    authorize_async = |_ctx, _args| async { Ok(()) }
)]
async fn cancel_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
