// A refused tool still declares its type, and its function stays callable: code that names
// the tool compiles, and the only error is the misuse itself.
use idem::prelude::*;

/// Look up the weather.
#[tool(class = "reed")]
fn get_weather(city: String) -> Result<String, ToolError> {
    Ok(city)
}

fn main() {
    let _registry = Registry::builder().tool::<get_weather>();
    let _name = <get_weather as idem::StaticTool>::NAME;
    let _direct = get_weather("Lyon".to_owned());
}
