//! Errors that name the file, the line and the field.

use std::error::Error;
use std::fmt;
use std::ops::Range;

/// One problem of a configuration: where (file, line, column), which field, and what is wrong.
///
/// Its `Display` is `file:line:column: field: message`, as compilers print errors, so editors
/// and terminals link to the spot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    file: String,
    line: usize,
    column: usize,
    field: Option<String>,
    message: String,
}

impl Problem {
    /// The file.
    pub fn file_name(&self) -> &str {
        &self.file
    }

    /// The line (from 1; 0 when the problem is about the whole file).
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

impl fmt::Display for Problem {
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

/// A configuration that cannot be used: every problem found, in file order (at least one).
/// The accessors describe the first; [`problems`](Self::problems) lists them all.
///
/// Its `Display` is one `file:line:column: field: message` line per problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    problems: Vec<Problem>,
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
        let offset = span.map_or(0, |span| span.start);
        Self::at_offset(file, &LineIndex::new(text), offset, field, message)
    }

    /// An error at byte `offset` of the text `lines` indexes.
    pub(crate) fn at_offset(
        file: &str,
        lines: &LineIndex,
        offset: usize,
        field: Option<String>,
        message: impl Into<String>,
    ) -> Self {
        let (line, column) = lines.position(offset);
        Self::one(Problem {
            file: file.to_owned(),
            line,
            column,
            field,
            message: message.into(),
        })
    }

    /// An error about the file as a whole (it cannot be read, or a file it names cannot).
    pub fn file(file: &str, message: impl Into<String>) -> Self {
        Self::one(Problem {
            file: file.to_owned(),
            line: 0,
            column: 0,
            field: None,
            message: message.into(),
        })
    }

    fn one(problem: Problem) -> Self {
        Self {
            problems: vec![problem],
        }
    }

    /// The problems of `errors` together, in file order; `None` if there are none.
    pub(crate) fn all(errors: Vec<ConfigError>) -> Option<Self> {
        let mut problems: Vec<Problem> = errors.into_iter().flat_map(|e| e.problems).collect();
        // Stable: problems at one spot keep the order they were found in.
        problems.sort_by_key(|problem| (problem.line, problem.column));
        (!problems.is_empty()).then_some(Self { problems })
    }

    /// The same problems, each field renamed by `rename`.
    pub(crate) fn map_fields(mut self, rename: impl Fn(&str) -> String) -> Self {
        for problem in &mut self.problems {
            if let Some(field) = &problem.field {
                problem.field = Some(rename(field));
            }
        }
        self
    }

    /// Where its first problem is: line and column.
    pub(crate) fn position(&self) -> (usize, usize) {
        let first = self.first();
        (first.line, first.column)
    }

    /// Every problem, in file order.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    fn first(&self) -> &Problem {
        &self.problems[0]
    }

    /// The file.
    pub fn file_name(&self) -> &str {
        self.first().file_name()
    }

    /// The first problem's line (from 1; 0 when it is about the whole file).
    pub fn line(&self) -> usize {
        self.first().line()
    }

    /// The first problem's column (from 1).
    pub fn column(&self) -> usize {
        self.first().column()
    }

    /// The first problem's field, as a dotted path (`flow[1].count`), when it has one.
    pub fn field(&self) -> Option<&str> {
        self.first().field()
    }

    /// What is wrong, first.
    pub fn message(&self) -> &str {
        self.first().message()
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, problem) in self.problems.iter().enumerate() {
            if index > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl Error for ConfigError {}

/// Where each line of a text starts, to turn byte offsets into lines and columns in
/// logarithmic time (a file with many problems is not scanned once per problem).
#[derive(Debug)]
pub(crate) struct LineIndex {
    /// Byte offset of each line's start; the first is 0.
    starts: Vec<usize>,
    len: usize,
}

impl LineIndex {
    pub(crate) fn new(text: &str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(at, _)| at + 1))
            .collect();
        Self {
            starts,
            len: text.len(),
        }
    }

    /// Line and column (in bytes), both from 1, of byte `offset` (clamped to the text).
    pub(crate) fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.len);
        let line = self.starts.partition_point(|&start| start <= offset);
        let start = self.starts[line - 1];
        (line, offset - start + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::LineIndex;

    #[test]
    fn positions_count_lines_and_columns_from_one() {
        let text = "ab\ncd\n\nef";
        let lines = LineIndex::new(text);
        assert_eq!(lines.position(0), (1, 1));
        assert_eq!(lines.position(2), (1, 3)); // the newline itself
        assert_eq!(lines.position(3), (2, 1));
        assert_eq!(lines.position(6), (3, 1));
        assert_eq!(lines.position(8), (4, 2));
        assert_eq!(lines.position(100), (4, 3)); // past the end: the end
        assert_eq!(LineIndex::new("").position(0), (1, 1));
    }
}
