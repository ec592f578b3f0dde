//! The store keeps every record's path (issue 26): paths that are not text
//! or hold a newline are shown and reindexed; a bad entry of `records.list`
//! is skipped with its line; a damaged index is moved aside and rebuilt;
//! `show` names a record that is another session's.

use std::path::{Path, PathBuf};

use super::{Entry, RECORDS_FILE, RecordPlace, Store, StoreError};

/// A real record (an echo tactic's run of `task`) written to `path`.
fn record_file(path: &Path, task: &str) -> Entry {
    let yaml = "tactic_type: echo
agent_configs: [{name: echo, model_name: mock/echo, system_prompt: You repeat.}]
";
    let tactic = crate::Tactic::from_yaml(yaml, ".", &crate::Registry::new()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let record = runtime.block_on(tactic.run(crate::Task::new(task)));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    record.write(path).unwrap();
    Entry::of(&record, RecordPlace::File(path.to_path_buf()))
}

fn delete_index(dir: &Path) {
    for name in ["index.sqlite", "index.sqlite-wal", "index.sqlite-shm"] {
        let _ = std::fs::remove_file(dir.join(name));
    }
}

#[track_caller]
fn shows(store: &Store, entry: &Entry) {
    let record = store.show(&entry.session_id).unwrap();
    assert_eq!(record.session_id, entry.session_id);
    assert_eq!(record.delivery, entry.delivery);
}

#[cfg(unix)]
#[test]
fn paths_that_are_not_text_or_hold_a_newline_are_shown_and_reindexed() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let odd = |name: &[u8]| dir.path().join(std::ffi::OsStr::from_bytes(name));
    let entries = [
        record_file(&odd(b"plain/r.json"), "plain"),
        record_file(&odd(b"not-utf8-\xff\xfe/r.json"), "bytes"),
        record_file(&odd(b"new\nline/r.json"), "newline"),
    ];
    let store_dir = dir.path().join("store");
    {
        let mut store = Store::open(&store_dir).unwrap();
        store.register(&entries).unwrap();
        for entry in &entries {
            shows(&store, entry);
        }
    }
    // Again from `records.list` alone.
    delete_index(&store_dir);
    let mut store = Store::open(&store_dir).unwrap();
    let (count, problems) = store.reindex(&[]).unwrap();
    assert_eq!((count, problems), (3, Vec::<String>::new()));
    for entry in &entries {
        shows(&store, entry);
    }
    // And from the index's own rows, `records.list` gone.
    std::fs::remove_file(store_dir.join(RECORDS_FILE)).unwrap();
    let (count, problems) = store.reindex(&[]).unwrap();
    assert_eq!((count, problems), (3, Vec::<String>::new()));
    for entry in &entries {
        shows(&store, entry);
    }
}

#[test]
fn a_bad_entry_of_records_list_is_skipped_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let first = record_file(&dir.path().join("a.json"), "first");
    let second = record_file(&dir.path().join("b.json"), "second");
    let store_dir = dir.path().join("store");
    Store::open(&store_dir)
        .unwrap()
        .register(&[first.clone(), second.clone()])
        .unwrap();
    delete_index(&store_dir);
    // A path that is gone between the two, and an entry a crash cut short.
    let list = store_dir.join(RECORDS_FILE);
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let text = [
        a.display().to_string().as_bytes(),
        b"\n/nowhere/gone.json\n",
        b.display().to_string().as_bytes(),
        b"\n\0/torn",
    ]
    .concat();
    std::fs::write(&list, &text).unwrap();
    let mut store = Store::open(&store_dir).unwrap();
    let (count, problems) = store.reindex(&[]).unwrap();
    assert_eq!(count, 2, "{problems:?}");
    let label = list.display().to_string();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].starts_with(&format!("`{label}` line 4 skipped: an entry cut short")),
        "{problems:?}"
    );
    assert!(
        problems[1].starts_with(&format!(
            "`{label}` line 2: cannot read the record `/nowhere/gone.json`"
        )),
        "{problems:?}"
    );
    shows(&store, &first);
    shows(&store, &second);
}

#[test]
fn a_damaged_index_is_moved_aside_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let entry = record_file(&dir.path().join("a.json"), "kept");
    let store_dir = dir.path().join("store");
    Store::open(&store_dir)
        .unwrap()
        .register(std::slice::from_ref(&entry))
        .unwrap();
    let index = store_dir.join(super::INDEX_FILE);
    std::fs::write(&index, "not a database at all, ".repeat(200)).unwrap();
    assert!(Store::open(&store_dir).is_err());
    let (mut store, note) = Store::open_to_rebuild(&store_dir).unwrap();
    let note = note.expect("a line saying the index was moved aside");
    let aside = PathBuf::from(format!("{}.damaged", index.display()));
    assert!(
        note.contains(&format!("moved it to `{}`", aside.display())),
        "{note}"
    );
    assert!(aside.is_file());
    assert_eq!(store.reindex(&[]).unwrap(), (1, Vec::new()));
    shows(&store, &entry);
    // A sound index is opened as it is.
    drop(store);
    let (store, note) = Store::open_to_rebuild(&store_dir).unwrap();
    assert_eq!(note, None);
    shows(&store, &entry);
}

#[test]
fn a_damaged_index_found_while_rebuilding_is_replaced_too() {
    let dir = tempfile::tempdir().unwrap();
    let entry = record_file(&dir.path().join("a.json"), "kept");
    let store_dir = dir.path().join("store");
    // Closed: its WAL is checkpointed into the file.
    Store::open(&store_dir)
        .unwrap()
        .register(std::slice::from_ref(&entry))
        .unwrap();
    // The first page (the header and the schema) is sound, so the file
    // opens; the tables' pages are garbage, found when `reindex` reads them.
    let index = store_dir.join(super::INDEX_FILE);
    let mut bytes = std::fs::read(&index).unwrap();
    assert!(bytes.len() > 4096 && !store_dir.join("index.sqlite-wal").exists());
    for byte in bytes.iter_mut().skip(4096) {
        *byte = 0xAB;
    }
    std::fs::write(&index, &bytes).unwrap();
    let mut store = Store::open(&store_dir).unwrap();
    let (count, problems) = store.reindex(&[]).unwrap();
    assert_eq!(count, 1, "{problems:?}");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("moved it to"), "{problems:?}");
    shows(&store, &entry);
}

#[test]
fn show_names_a_record_that_is_another_session() {
    let dir = tempfile::tempdir().unwrap();
    let mine = record_file(&dir.path().join("mine.json"), "mine");
    let other = record_file(&dir.path().join("other.json"), "other");
    let mut store = Store::open(dir.path()).unwrap();
    // The index says `mine` is in the file that holds `other`.
    let stale = Entry {
        place: other.place.clone(),
        ..mine.clone()
    };
    store.register(&[stale]).unwrap();
    let error = store.show(&mine.session_id).unwrap_err();
    assert!(matches!(error, StoreError::Mismatch { .. }), "{error}");
    let text = error.to_string();
    assert!(
        text.contains(&format!(
            "places session `{}` at `{}`, which holds session `{}`",
            mine.session_id,
            dir.path().join("other.json").display(),
            other.session_id
        )),
        "{text}"
    );
    assert!(text.contains("`lllm logs reindex`"), "{text}");
}

#[test]
fn sessions_are_found_by_their_trace_and_an_older_stores_traces_are_moved_into_the_column() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "agent_configs: [{name: echo, model_name: mock/echo, system_prompt: You repeat.}]";
    let tactic = crate::Tactic::from_yaml(yaml, ".", &crate::Registry::new()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let parent: crate::trace_context::TraceContext =
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            .parse()
            .unwrap();
    let traced = runtime.block_on(crate::trace_context::continuing(
        parent,
        tactic.run(crate::Task::new("traced")),
    ));
    let plain = runtime.block_on(tactic.run(crate::Task::new("plain")));
    assert_eq!(plain.trace, None);
    let trace = traced.trace.unwrap();
    assert_eq!(trace.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(trace.parent_span_id, Some(parent.span_id()));
    let mut entries = Vec::new();
    for (name, record) in [("traced.json", &traced), ("plain.json", &plain)] {
        let path = dir.path().join(name);
        record.write(&path).unwrap();
        entries.push(Entry::of(record, RecordPlace::File(path)));
    }
    let store_dir = dir.path().join("store");
    // A store made before the trace id was a column: its sessions (one
    // traced) without it, and their traces in a table of their own.
    {
        let mut store = Store::open(&store_dir).unwrap();
        store.register(&entries).unwrap();
        store
            .connection
            .execute_batch(
                "CREATE TABLE session_traces (trace_id TEXT NOT NULL, session INTEGER NOT NULL, \
                 PRIMARY KEY (trace_id, session)) WITHOUT ROWID; \
                 INSERT INTO session_traces SELECT trace_id, id FROM sessions WHERE trace_id IS NOT NULL; \
                 DROP INDEX sessions_trace; ALTER TABLE sessions DROP COLUMN trace_id;",
            )
            .unwrap();
    }
    // As it opens, the column is added and the old table's rows moved in.
    let mut store = Store::open(&store_dir).unwrap();
    let old_tables: i64 = store
        .connection
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'session_traces'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(old_tables, 0);
    let found_before_registering = {
        let filter = super::Filter {
            trace_id: Some(trace.trace_id_hex()),
            ..super::Filter::default()
        };
        store.list(&filter, 10).unwrap().len()
    };
    assert_eq!(found_before_registering, 1);
    // Registered again (a reindex): still one row per session.
    store.register(&entries).unwrap();
    store.register(&entries).unwrap();
    let by_trace = |trace_id: &str| -> Vec<String> {
        let filter = super::Filter {
            trace_id: Some(trace_id.into()),
            ..super::Filter::default()
        };
        let listed = store.list(&filter, 10).unwrap();
        listed
            .into_iter()
            .map(|session| session.session_id)
            .collect()
    };
    assert_eq!(
        by_trace(&trace.trace_id_hex()),
        std::slice::from_ref(&traced.session_id)
    );
    assert!(by_trace("0af7651916cd43dd8448eb211c80319c").is_empty());
    let read = store.show(&traced.session_id).unwrap();
    assert_eq!(read.trace, traced.trace);
}
