use std::rc::Rc;

use idem::prelude::*;
use serde::Deserialize;

#[derive(Deserialize)]
struct Order {
    order_id: String,
}

async fn look_up(order_id: &str) -> Option<String> {
    Some(order_id.to_owned())
}

async fn owns_the_order(ctx: ToolContext, args: Order) -> Result<(), String> {
    let me = Rc::new(ctx.acting_for().map(str::to_owned));
    let owner = look_up(&args.order_id).await;
    match owner == *me {
        true => Ok(()),
        false => Err("not theirs".into()),
    }
}

/// Cancel an order.
#[tool(class = "idempotent_write", authorize_async = owns_the_order)]
async fn cancel_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

fn main() {}
