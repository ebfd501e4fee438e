//! Errors that name the file, the line and the field.

use std::error::Error;
use std::fmt;
use std::ops::Range;

/// A configuration that cannot be used: where (file, line, column), which field, and what is
/// wrong.
///
/// Its `Display` is `file:line:column: field: message`, as compilers print errors, so editors
/// and terminals link to the spot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    file: String,
    line: usize,
    column: usize,
    field: Option<String>,
    message: String,
}

impl ConfigError {
    /// An error at byte `span` of `text` (line and column counted from 1).
    pub(crate) fn at(
        file: &str,
        text: &str,
        span: Option<Range<usize>>,
        field: Option<String>,
        message: impl Into<String>,
    ) -> Self {
        let offset = span.map_or(0, |span| span.start.min(text.len()));
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let column = before
            .rfind('\n')
            .map_or(offset, |newline| offset - newline - 1)
            + 1;
        Self {
            file: file.to_owned(),
            line,
            column,
            field,
            message: message.into(),
        }
    }

    /// An error about the file as a whole (it cannot be read).
    pub(crate) fn file(file: &str, message: impl Into<String>) -> Self {
        Self {
            file: file.to_owned(),
            line: 0,
            column: 0,
            field: None,
            message: message.into(),
        }
    }

    /// The file.
    pub fn file_name(&self) -> &str {
        &self.file
    }

    /// The line (from 1; 0 when the error is about the whole file).
    pub fn line(&self) -> usize {
        self.line
    }

    /// The column (from 1).
    pub fn column(&self) -> usize {
        self.column
    }

    /// The field at fault, as a dotted path (`flow[1].count`), when one is.
    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: ", self.file)?;
        } else {
            write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        }
        if let Some(field) = &self.field {
            write!(f, "`{field}`: ")?;
        }
        f.write_str(&self.message)
    }
}

impl Error for ConfigError {}
