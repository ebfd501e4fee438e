//! Reading a configuration file: bounded in size, UTF-8 (checking it is `checked::load`).

use super::ConfigError;
use std::path::Path;

/// The text of the file at `path`, read whole if it is at most [`MAX_FILE_BYTES`] long.
///
/// # Errors
///
/// A [`ConfigError`] if it cannot be read, is longer, or is not UTF-8.
pub fn read(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read as _;
    let name = path.display().to_string();
    let cannot_read = |err: std::io::Error| ConfigError::file(&name, format!("cannot read: {err}"));
    let file = std::fs::File::open(path).map_err(cannot_read)?;
    // Read at most one byte past the cap: a huge file (or `/dev/zero`) costs no more.
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot_read)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ConfigError::file(
            &name,
            format!("is larger than {} MiB", MAX_FILE_BYTES >> 20),
        ));
    }
    String::from_utf8(bytes).map_err(|_| ConfigError::file(&name, "is not UTF-8 text".to_owned()))
}

/// The largest configuration file read: far above any real one (a file of 10,000 rules is
/// about 1 MiB), small enough that reading and parsing it stays quick.
pub const MAX_FILE_BYTES: u64 = 4 << 20;
