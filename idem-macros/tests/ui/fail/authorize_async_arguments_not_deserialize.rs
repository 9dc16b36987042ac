use idem::prelude::*;

struct Order {
    order_id: String,
}

async fn owns_the_order(_ctx: ToolContext, args: Order) -> Result<(), String> {
    let _ = args.order_id;
    Ok(())
}

/// Cancel an order.
#[tool(class = "idempotent_write", authorize_async = owns_the_order)]
async fn cancel_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
