//! Writing rules changed through the admin API back into the configuration file, keeping the
//! rest of the file (other sections, comments, layout) as it was.

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
    replace(path, new_text.as_bytes())
}

/// Replaces the file at `path` with `contents` in one rename, as it was in all but its text: a
/// symbolic link is followed (the file it points to is replaced, the link stays), and the new
/// file keeps the old one's permissions, owner and group. The new text and the directory entry
/// are synced to disk before this returns.
fn replace(path: &Path, contents: &[u8]) -> Result<(), String> {
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
    if let Err(err) = std::fs::rename(&temporary, &target) {
        let _ = std::fs::remove_file(&temporary);
        return Err(format!("cannot replace the file: {err}"));
    }
    // The rename itself reaches the disk with its directory.
    std::fs::File::open(directory)
        .and_then(|directory| directory.sync_all())
        .map_err(|err| format!("replaced, but cannot sync its directory: {err}"))
}
