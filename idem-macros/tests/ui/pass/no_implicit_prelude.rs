//! A tool in a `#[no_implicit_prelude]` module: nothing the expansion writes relies on the
//! prelude being in scope.

#[no_implicit_prelude]
mod tools {
    use ::idem::{ToolContext, ToolError, tool};
    use ::std::string::String;

    /// Greet someone.
    #[tool(class = "read")]
    pub async fn greet(ctx: &ToolContext, name: String, times: ::std::option::Option<u8>) -> ::std::result::Result<String, ToolError> {
        let _ = ctx;
        let times = times.unwrap_or(1);
        ::std::result::Result::Ok(::std::format!("hello {name} x{times}"))
    }

    /// Count letters, synchronously.
    #[tool(class = "read")]
    pub fn count(word: String) -> ::std::result::Result<usize, ToolError> {
        ::std::result::Result::Ok(word.len())
    }
}

fn main() {
    let registry = idem::Registry::linked().unwrap();
    for name in ["greet", "count"] {
        assert!(registry.get(name).is_some(), "{name} is registered");
    }
    let _ = tools::greet {};
}
