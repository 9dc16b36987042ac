use idem::prelude::*;

/// Cancel an order.
#[tool(class = "idempotent_write", authorize_async = "owns_the_order")]
async fn cancel_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
