//! Writing rules changed through the admin API back into the configuration file, keeping the
//! rest of the file (other sections, comments, layout) as it was.

use crate::file_stamp::FileStamp;
use std::path::Path;
use toml_edit::DocumentMut;

/// Writes `table`'s sub-tables as inline tables, and its arrays of tables (a per-key rule's
/// `exceptions`) as arrays of inline tables.
fn inline_nested(table: &mut toml_edit::Table) {
    let keys: Vec<String> = table
        .iter()
        .filter(|(_, item)| item.is_table() || item.is_array_of_tables())
        .map(|(key, _)| key.to_owned())
        .collect();
    for key in keys {
        match table.remove(&key) {
            Some(toml_edit::Item::Table(nested)) => {
                let inline = nested.into_inline_table();
                table.insert(&key, toml_edit::value(inline));
            }
            Some(toml_edit::Item::ArrayOfTables(tables)) => {
                table.insert(&key, toml_edit::value(tables.into_array()));
            }
            _ => {}
        }
    }
}

/// Replaces the given rule kinds in the file at `path`, each given by its name and its tables
/// in TOML (a kind not given is left as the file has it), then checks the result; the file is
/// replaced in one rename, and only if the new text is a valid configuration.
pub(crate) fn write_rules(path: &Path, kinds: &[(&str, String)]) -> Result<(), String> {
    // Read, edited and replaced; if the file changed meanwhile (an editor, a script), the edit
    // starts again from what it holds now, so that no one's change is lost.
    const TRIES: usize = 3;
    for _ in 0..TRIES {
        let metadata = std::fs::metadata(path).map_err(|err| format!("cannot read: {err}"))?;
        // Only a regular file says whether it changed (a pipe's time moves with every read).
        let read = metadata.is_file().then(|| FileStamp::of(&metadata));
        let new_text = edited(path, kinds)?;
        if replace(path, new_text.as_bytes(), read)? {
            return Ok(());
        }
    }
    Err(format!(
        "the file changed while the rules were written into it, {TRIES} times: nothing was written; try again"
    ))
}

/// The text of the file at `path` with `kinds` replaced, checked.
fn edited(path: &Path, kinds: &[(&str, String)]) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|err| format!("cannot read: {err}"))?;
    let mut document: DocumentMut = text
        .parse()
        .map_err(|err| format!("cannot edit the file: {err}"))?;
    // New rules go after everything else, each a `[[kind]]` table with its nested fields
    // (behavior, strategy, algorithm, queue) inline, as one would write them by hand.
    let mut position = document
        .iter()
        .flat_map(|(_, item)| {
            let table = item.as_table().and_then(|t| t.position());
            let tables = item
                .as_array_of_tables()
                .and_then(|a| a.iter().filter_map(|t| t.position()).max());
            table.into_iter().chain(tables)
        })
        .max()
        .unwrap_or(0)
        + 1;
    for (key, tables) in kinds {
        let fragment: DocumentMut = tables
            .parse()
            .map_err(|err| format!("cannot edit the rules: {err}"))?;
        document.remove(key);
        if let Some(mut item) = fragment.get(key).cloned() {
            if let Some(tables) = item.as_array_of_tables_mut() {
                for table in tables.iter_mut() {
                    inline_nested(table);
                    table.set_position(position);
                    position += 1;
                }
            }
            document.insert(key, item);
        }
    }
    let new_text = document.to_string();
    let name = path.display().to_string();
    crate::checked::parse(&new_text, &name)
        .map_err(|err| format!("the result would not load: {err}"))?;
    Ok(new_text)
}

/// Replaces the file at `path` with `contents` in one rename, as it was in all but its text: a
/// symbolic link is followed (the file it points to is replaced, the link stays), and the new
/// file keeps the old one's permissions, owner and group. The new text and the directory entry
/// are synced to disk before this returns.
/// Replaces the file at `path` with `contents` in one rename, keeping its mode and owner,
/// unless it changed since it was `read` (if given): `Ok(false)` then, and nothing is
/// replaced.
fn replace(path: &Path, contents: &[u8], read: Option<FileStamp>) -> Result<bool, String> {
    use std::io::Write;
    let target =
        std::fs::canonicalize(path).map_err(|err| format!("cannot find the file: {err}"))?;
    let metadata =
        std::fs::metadata(&target).map_err(|err| format!("cannot read its permissions: {err}"))?;
    let directory = target
        .parent()
        .ok_or_else(|| "the file has no directory".to_owned())?;
    let file_name = target
        .file_name()
        .ok_or_else(|| "the path names no file".to_owned())?
        .to_string_lossy();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(metadata.permissions().mode() & 0o7777);
    }
    // A name no other write uses: this process's and a count of its writes, the next count
    // while one is taken (left by a process of the same id that stopped mid-write, as in a
    // restarted container).
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut attempts = 0;
    let (temporary, mut file) = loop {
        let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temporary = directory.join(format!(".{file_name}.{}.{write}.tmp", std::process::id()));
        match options.open(&temporary) {
            Ok(file) => break (temporary, file),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists && attempts < 64 => {
                attempts += 1;
            }
            Err(err) => return Err(format!("cannot write next to it: {err}")),
        }
    };
    let written = (|| -> Result<(), String> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            // The mode again: the process's umask narrowed the one given at creation.
            file.set_permissions(metadata.permissions())
                .map_err(|err| format!("cannot keep its permissions: {err}"))?;
            let created = file
                .metadata()
                .map_err(|err| format!("cannot read the new file: {err}"))?;
            if (created.uid(), created.gid()) != (metadata.uid(), metadata.gid()) {
                std::os::unix::fs::fchown(&file, Some(metadata.uid()), Some(metadata.gid()))
                    .map_err(|err| {
                        format!(
                            "cannot keep its owner and group ({}:{}): {err}",
                            metadata.uid(),
                            metadata.gid()
                        )
                    })?;
            }
        }
        file.write_all(contents)
            .map_err(|err| format!("cannot write: {err}"))?;
        file.sync_all()
            .map_err(|err| format!("cannot sync the new file: {err}"))
    })();
    if let Err(err) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(err);
    }
    // Changed since it was read (by someone else than spillway's writes, which take turns):
    // not replaced. (A change between this look and the rename is still lost: the window is
    // the rename's.)
    if read.is_some_and(|read| FileStamp::read(&target).ok() != Some(read)) {
        let _ = std::fs::remove_file(&temporary);
        return Ok(false);
    }
    if let Err(err) = std::fs::rename(&temporary, &target) {
        let _ = std::fs::remove_file(&temporary);
        return Err(format!("cannot replace the file: {err}"));
    }
    // The rename itself reaches the disk with its directory.
    std::fs::File::open(directory)
        .and_then(|directory| directory.sync_all())
        .map_err(|err| format!("replaced, but cannot sync its directory: {err}"))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_changed_since_it_was_read_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spillway.toml");
        std::fs::write(&path, "# first\n").unwrap();
        let read = FileStamp::read(&path).unwrap();
        // Someone appends after the read: the write made from the read is not applied.
        let mut changed = std::fs::read_to_string(&path).unwrap();
        changed.push_str("# someone's line\n");
        std::fs::write(&path, &changed).unwrap();
        assert_eq!(replace(&path, b"# rules\n", Some(read)), Ok(false));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), changed);
        let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file left behind");
        // Unchanged since its read: replaced.
        let read = FileStamp::read(&path).unwrap();
        assert_eq!(replace(&path, b"# rules\n", Some(read)), Ok(true));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "# rules\n");
    }

    #[test]
    fn rules_are_written_into_the_file_as_it_is_now() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spillway.toml");
        let text = "# kept\n[listener]\nlisten = \"127.0.0.1:0\"\n";
        std::fs::write(&path, text).unwrap();
        let flow = "[[flow]]\nid = \"a\"\nresource = \"r\"\ncount = 5\n".to_owned();
        write_rules(&path, &[("flow", flow)]).unwrap();
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(
            written.starts_with("# kept\n") && written.contains("count = 5"),
            "{written}"
        );
    }
}
