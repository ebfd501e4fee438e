//! Reading a configuration's types past its first error, so that `check` lists every value of
//! the wrong type and every unknown key at once, each with its field: the entry at fault is
//! noted, blanked out of a copy of the text (spaces, so that every later error keeps its place
//! in the file), and the copy read again.

use super::{Config, ConfigError};
use std::ops::Range;
use toml_edit::{ImDocument, Item, Table, Value};

/// Most values of the wrong type one check lists (each costs a reading of the whole file).
pub(super) const MAX_TYPE_PROBLEMS: usize = 20;

/// What reading the types gave.
pub(super) struct Typed {
    /// The configuration, read from the text with the entries at fault blanked out (none if
    /// reading could not go on past one).
    pub(super) config: Option<Config>,
    /// The problems, one per entry at fault.
    pub(super) problems: Vec<ConfigError>,
    /// The fields blanked out (`listener.workers`, `route[2].path`): problems the checks find
    /// there afterwards are about a default, not the file.
    pub(super) removed: Vec<String>,
    /// The elements of arrays of tables blanked out whole (one lacked a field it needs once
    /// its wrong value was blanked): by array, their indices in the file, in order.
    elements: Vec<(String, Vec<usize>)>,
}

impl Typed {
    /// `field` as the checks name it in the configuration read (`flow[1].count`), named as
    /// in the file: past an element blanked out whole, the indices of its array move up.
    pub(super) fn field_in_file(&self, field: &str) -> String {
        for (array, gone) in &self.elements {
            let Some(rest) = field.strip_prefix(&format!("{array}[")) else {
                continue;
            };
            let Some((index, tail)) = rest.split_once(']') else {
                continue;
            };
            let Ok(mut index) = index.parse::<usize>() else {
                continue;
            };
            for removed in gone {
                if *removed <= index {
                    index += 1;
                }
            }
            return format!("{array}[{index}]{tail}");
        }
        field.to_owned()
    }
}

/// Reads `text` as a [`Config`], past each type error (noting `max_problems` at most, and
/// one more).
///
/// # Errors
///
/// A TOML syntax error (nothing can be read past one).
pub(super) fn read_typed(
    text: &str,
    file: &str,
    max_problems: usize,
) -> Result<Typed, ConfigError> {
    // A good file is read once; the entries are found only for a file at fault.
    let first = match toml::from_str::<Config>(text) {
        Ok(config) => {
            return Ok(Typed {
                config: Some(config),
                problems: Vec::new(),
                removed: Vec::new(),
                elements: Vec::new(),
            })
        }
        Err(err) => err,
    };
    let document = ImDocument::parse(text)
        .map_err(|err| ConfigError::at(file, text, err.span(), None, err.message().trim_end()))?;
    let mut entries = Vec::new();
    entries_of_table(document.as_table(), "", &mut entries);
    let mut current = text.to_owned();
    let mut typed = Typed {
        config: None,
        problems: Vec::new(),
        removed: Vec::new(),
        elements: Vec::new(),
    };
    let mut next_error = Some(first);
    let max_problems = max_problems.min(MAX_TYPE_PROBLEMS);
    // Each pass reads the whole file again: bounded, so that a large file full of faults is
    // still checked in seconds.
    for _ in 0..2 * max_problems + 2 {
        let read = match next_error.take() {
            Some(err) => Err(err),
            None => toml::from_str::<Config>(&current),
        };
        let err = match read {
            Ok(config) => {
                typed.config = Some(config);
                return Ok(typed);
            }
            Err(err) => err,
        };
        if typed.problems.len() >= max_problems {
            let end = text.len()..text.len();
            let stop = format!(
                "stopped after {max_problems} values of the wrong type: fix these and check again"
            );
            typed
                .problems
                .push(ConfigError::at(file, text, Some(end), None, stop));
            return Ok(typed);
        }
        let message = err.message().trim_end().to_owned();
        let span = err.span();
        let lacks = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.strip_suffix('`'))
            .map(str::to_owned);
        // A field lacking because its wrong value was blanked out is no second problem.
        let caused_by_blank = |table: &str| {
            lacks
                .as_ref()
                .is_some_and(|name| typed.removed.contains(&join(table, name)))
        };
        // A key and its value, or an element, holds the error: noted, and blanked out.
        let at_fault = span.as_ref().and_then(|span| innermost(&entries, span));
        if let Some(entry) = at_fault.filter(|entry| !typed.removed.contains(&entry.field)) {
            if !caused_by_blank(&entry.field) {
                typed.problems.push(ConfigError::at(
                    file,
                    text,
                    span.clone(),
                    Some(entry.field.clone()),
                    message,
                ));
            }
            if !blankable(&current, entry) {
                return Ok(typed);
            }
            blank(&mut current, entry.blank.clone());
            typed.removed.push(entry.field.clone());
            continue;
        }
        // A table holds it: a field it lacks, or, at its header, a section no configuration
        // has. Reading goes on without it if it is a section the file made up or an element
        // of an array of tables; past anything else it stops.
        let Some(table) = span.as_ref().and_then(|span| table_at(&entries, span)) else {
            typed
                .problems
                .push(ConfigError::at(file, text, span, None, message));
            return Ok(typed);
        };
        let bare = table.split('[').next().unwrap_or(table);
        let unknown_section = message.starts_with(&format!("unknown field `{bare}`"));
        let field = match (&lacks, unknown_section) {
            (_, true) => bare.to_owned(),
            (Some(name), false) => join(table, name),
            (None, false) => table.to_owned(),
        };
        if !caused_by_blank(table) {
            typed.problems.push(ConfigError::at(
                file,
                text,
                span.clone(),
                Some(field),
                message,
            ));
        }
        if unknown_section {
            blank_table(&mut current, &entries, bare);
            typed.removed.push(bare.to_owned());
            continue;
        }
        let Some((array, index)) = element(table) else {
            return Ok(typed);
        };
        if typed.removed.iter().any(|gone| gone == table) {
            return Ok(typed);
        }
        blank_table(&mut current, &entries, table);
        typed.removed.push(table.to_owned());
        match typed.elements.iter_mut().find(|(name, _)| name == array) {
            Some((_, gone)) => {
                gone.push(index);
                gone.sort_unstable();
            }
            None => typed.elements.push((array.to_owned(), vec![index])),
        }
    }
    Ok(typed)
}

/// An entry of the file: a key and its value, an element of an array, or a table.
#[derive(Debug)]
struct Entry {
    /// Its path, as the checks name fields: `listener.workers`, `flow[0].exceptions[1]`.
    field: String,
    /// Where it is written (a table: from its header on).
    span: Range<usize>,
    /// What to blank to take it out (with a separating comma inside `[...]` or `{...}`).
    blank: Range<usize>,
    /// Whether it is a table (found for a field it lacks, never blanked).
    table: bool,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn entries_of_table(table: &Table, path: &str, entries: &mut Vec<Entry>) {
    if let Some(span) = table.span() {
        entries.push(Entry {
            field: path.to_owned(),
            blank: span.clone(),
            span,
            table: true,
        });
    }
    for (key, item) in table.iter() {
        let field = join(path, key);
        match item {
            Item::Table(inner) => entries_of_table(inner, &field, entries),
            Item::ArrayOfTables(array) => {
                for (index, inner) in array.iter().enumerate() {
                    entries_of_table(inner, &format!("{field}[{index}]"), entries);
                }
            }
            Item::Value(value) => {
                let start = table.key(key).and_then(toml_edit::Key::span);
                if let (Some(start), Some(end)) = (start, value.span()) {
                    let span = start.start..end.end;
                    entries.push(Entry {
                        field: field.clone(),
                        blank: span.clone(),
                        span,
                        table: false,
                    });
                }
                entries_of_value(value, &field, entries);
            }
            Item::None => {}
        }
    }
}

/// The entries inside an inline table or an array, each blanked with the comma that parts it
/// from its neighbour.
fn entries_of_value(value: &Value, path: &str, entries: &mut Vec<Entry>) {
    let mut inner: Vec<(String, Range<usize>, &Value)> = Vec::new();
    match value {
        Value::InlineTable(table) => {
            for (key, item) in table.iter() {
                let start = table.key(key).and_then(toml_edit::Key::span);
                if let (Some(start), Some(end)) = (start, item.span()) {
                    inner.push((join(path, key), start.start..end.end, item));
                }
            }
        }
        Value::Array(array) => {
            for (index, item) in array.iter().enumerate() {
                if let Some(span) = item.span() {
                    inner.push((format!("{path}[{index}]"), span, item));
                }
            }
        }
        _ => return,
    }
    for (index, (field, span, _)) in inner.iter().enumerate() {
        let blank = if index > 0 {
            inner[index - 1].1.end..span.end
        } else if let Some(next) = inner.get(1) {
            span.start..next.1.start
        } else {
            span.clone()
        };
        entries.push(Entry {
            field: field.clone(),
            span: span.clone(),
            blank,
            table: false,
        });
    }
    for (field, _, item) in inner {
        entries_of_value(item, &field, entries);
    }
}

/// The array and index of `field` if it names an element of a top-level array of tables
/// (`flow[1]`).
fn element(field: &str) -> Option<(&str, usize)> {
    let (array, index) = field.strip_suffix(']')?.split_once('[')?;
    if array.contains(['.', '[']) {
        return None;
    }
    Some((array, index.parse().ok()?))
}

/// Blanks out the table `field` (`listner`, `flow[1]`) with the tables inside it
/// (`[adaptive.queue]` after an `[[adaptive]]`).
fn blank_table(text: &mut String, entries: &[Entry], field: &str) {
    let inside = |entry: &&Entry| {
        entry.field == field
            || entry.field.starts_with(&format!("{field}."))
            || entry.field.starts_with(&format!("{field}["))
    };
    for entry in entries.iter().filter(|entry| entry.table).filter(inside) {
        blank(text, entry.blank.clone());
    }
}

/// Whether blanking `entry` leaves good TOML: it starts its line, or follows the `{`, `[` or
/// `,` of an inline table or array (a dotted key's last part, `a.b = 1`, does not).
fn blankable(text: &str, entry: &Entry) -> bool {
    let before = text.get(..entry.span.start).unwrap_or("");
    let since = before.rsplit(['\n', '{', '[', ',']).next().unwrap_or("");
    since.trim().is_empty()
}

/// The smallest entry (not a table) whose text holds `span`.
fn innermost<'a>(entries: &'a [Entry], span: &Range<usize>) -> Option<&'a Entry> {
    entries
        .iter()
        .filter(|entry| !entry.table && holds(&entry.span, span))
        .min_by_key(|entry| entry.span.len())
}

/// The smallest table whose text holds `span`: its field.
fn table_at<'a>(entries: &'a [Entry], span: &Range<usize>) -> Option<&'a str> {
    entries
        .iter()
        .filter(|entry| entry.table && !entry.field.is_empty() && holds(&entry.span, span))
        .min_by_key(|entry| entry.span.len())
        .map(|entry| entry.field.as_str())
}

fn holds(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end && inner.start < outer.end
}

/// Replaces `range` of `text` with spaces, keeping its line breaks (every offset stays put).
fn blank(text: &mut String, range: Range<usize>) {
    let Some(part) = text.get(range.clone()) else {
        return;
    };
    // A space per byte: a multi-byte character leaves as many.
    let spaced: String = part
        .bytes()
        .map(|b| {
            if b == b'\n' || b == b'\r' {
                char::from(b)
            } else {
                ' '
            }
        })
        .collect();
    text.replace_range(range, &spaced);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(text: &str) -> Vec<(Option<String>, String)> {
        let typed = read_typed(text, "t.toml", 100).unwrap();
        typed
            .problems
            .iter()
            .flat_map(ConfigError::problems)
            .map(|p| (p.field().map(str::to_owned), p.message().to_owned()))
            .collect()
    }

    #[test]
    fn every_wrong_value_and_unknown_key_is_listed_with_its_field() {
        let text = "[listener]\nworkers = 0\nheader_timeout = \"zz\"\n\n[[upstream]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\nbogus = 1\n\n[[flow]]\nid = \"x\"\nresource = \"r\"\ncount = \"many\"\n";
        let found = fields(text);
        let names: Vec<_> = found.iter().map(|(f, _)| f.as_deref()).collect();
        assert_eq!(
            names,
            [
                Some("listener.workers"),
                Some("listener.header_timeout"),
                Some("upstream[0].bogus"),
                Some("flow[0].count"),
            ],
            "{found:?}"
        );
        assert!(found[0].1.contains("from 1 to 1024"), "{found:?}");
        assert!(found[2].1.contains("unknown field"), "{found:?}");
    }

    #[test]
    fn a_blanked_required_field_is_not_reported_twice_and_positions_are_the_files_own() {
        let text = "[[upstream]]\nname = 5\nurl = \"http://127.0.0.1:1\"\n";
        let typed = read_typed(text, "t.toml", 100).unwrap();
        // Read on without the element, which lacks its name once its number is blanked.
        assert!(typed
            .config
            .as_ref()
            .is_some_and(|c| c.upstreams.is_empty()));
        assert_eq!(typed.removed, ["upstream[0].name", "upstream[0]"]);
        assert_eq!(typed.field_in_file("upstream[0].url"), "upstream[1].url");
        let problems: Vec<_> = typed
            .problems
            .iter()
            .flat_map(ConfigError::problems)
            .collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].field(), Some("upstream[0].name"));
        assert_eq!((problems[0].line(), problems[0].column()), (2, 8));
    }

    #[test]
    fn entries_inside_arrays_and_inline_tables_are_blanked_with_their_comma() {
        let text = "[admin]\nallowed_hosts = [\"a\", 5, \"b\"]\n";
        let found = fields(text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0.as_deref(), Some("admin.allowed_hosts[1]"));
        let mut text = String::from("x = [1, 2, 3]\ny = { a = 1, b = 2 }\n");
        blank(&mut text, 5..8);
        assert_eq!(text, "x = [   2, 3]\ny = { a = 1, b = 2 }\n");
    }

    #[test]
    fn a_missing_field_names_the_table_and_the_field() {
        let found = fields("[[upstream]]\nname = \"a\"\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0.as_deref(), Some("upstream[0].url"), "{found:?}");
    }

    #[test]
    fn a_missing_field_a_made_up_section_and_an_inline_table_are_read_past() {
        let text = "[listner]\nlisten = 1\n\n[[flow]]\nid = \"a\"\ncount = 1\n\n[[route]]\nresource = \"r\"\npath = \"/r\"\nupstream = \"app\"\ntps = { rate = \"lots\" }\n\n[[flwo]]\nid = 1\n\n[listener]\nworkers = 0\n";
        let found = fields(text);
        let names: Vec<_> = found.iter().map(|(f, _)| f.as_deref()).collect();
        assert_eq!(
            names,
            [
                Some("listner"),
                Some("flow[0].resource"),
                Some("route[0].tps.rate"),
                Some("flwo"),
                Some("listener.workers"),
            ],
            "{found:?}"
        );
    }

    #[test]
    fn an_element_read_past_takes_its_inner_tables_with_it() {
        let text = "[[adaptive]]\nid = 5\nalgorithm = { type = \"aimd\" }\n\n[adaptive.queue]\ncapacity = 10\n\n[[adaptive]]\nid = \"b\"\nalgorithm = { type = \"aimd\" }\n";
        let typed = read_typed(text, "t.toml", 100).unwrap();
        let config = typed.config.as_ref().expect("read on");
        assert_eq!(config.adaptive.len(), 1);
        assert!(
            config.adaptive[0].get_ref().queue.is_none(),
            "the queue went with its rule"
        );
        assert_eq!(typed.field_in_file("adaptive[0].id"), "adaptive[1].id");
    }

    #[test]
    fn a_dotted_key_ends_the_reading_cleanly() {
        let found = fields("[listener]\ntimeouts.header = 5\nworkers = 0\n");
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn the_type_errors_listed_are_bounded() {
        let text: String = (0..50)
            .map(|i| format!("[[flow]]\nid = \"r{i}\"\nresource = \"r\"\ncount = \"x\"\n"))
            .collect();
        let found = fields(&text);
        assert_eq!(found.len(), MAX_TYPE_PROBLEMS + 1, "{found:?}");
        assert!(
            found.last().unwrap().1.starts_with("stopped after 20"),
            "{found:?}"
        );
    }

    #[test]
    fn a_syntax_error_stops_at_once() {
        let Err(err) = read_typed("[listener\n", "t.toml", 100) else {
            panic!("read");
        };
        assert_eq!(err.problems().len(), 1);
    }
}
