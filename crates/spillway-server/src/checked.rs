//! A configuration read and checked whole: the file's structure (`config/`), then every kind's
//! rules, each by its kind (`kinds/`).

use crate::config::{parse_with, read, Config, ConfigError};
use crate::kinds::KINDS;
use std::path::Path;

/// Checks a configuration's text; `file` names it in errors.
///
/// # Errors
///
/// A [`ConfigError`] with every problem found, in file order, each naming its line and field
/// (at most [`MAX_PROBLEMS`](crate::config::MAX_PROBLEMS)): every value of the wrong type and
/// every unknown key, and what each kind's checks find. A file that is not valid TOML stops at
/// its first syntax error.
///
/// # Examples
///
/// ```
/// let config = spillway_server::checked::parse(
///     r#"
///     [[upstream]]
///     name = "app"
///     url = "http://127.0.0.1:8080"
///
///     [[route]]
///     path = "/api/*"
///     resource = "api"
///     upstream = "app"
///
///     [[flow]]
///     id = "api-qps"
///     resource = "api"
///     count = 100
///     "#,
///     "spillway.toml",
/// )?;
/// assert_eq!(config.flow.len(), 1);
///
/// let bad = "[[flow]]\nid = \"a\"\nresource = \"r\"\ncount = -1\n";
/// let err = spillway_server::checked::parse(bad, "bad.toml").unwrap_err();
/// assert!(err.to_string().starts_with("bad.toml:4:1: `flow[0].count`: must be finite"), "{err}");
/// # Ok::<(), spillway_server::config::ConfigError>(())
/// ```
pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
    parse_with(text, file, |config, check| {
        for kind in KINDS {
            kind.check(config, check);
        }
    })
}

/// Reads and checks the file at `path`.
///
/// # Errors
///
/// A [`ConfigError`] naming the file, line and field of each problem.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    parse(&read(path)?, &path.display().to_string())
}
