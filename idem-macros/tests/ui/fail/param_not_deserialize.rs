use idem::prelude::*;

struct Point {
    x: i64,
    y: i64,
}

/// Move the robot.
#[tool(class = "idempotent_write")]
fn move_to(target: Point, speed: u32) -> Result<i64, ToolError> {
    Ok(target.x + target.y + i64::from(speed))
}

fn main() {}
