use super::*;
use base64::Engine;
use serde_json::{Map, json};

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn dialog_with(count: usize) -> Dialog {
    let mut dialog = Dialog::new("coder", "test");
    dialog.put_text(Role::System, "system");
    for index in 1..count {
        dialog.put_text(Role::User, format!("m{index}"));
    }
    dialog
}

fn contents(dialog: &Dialog) -> Vec<&str> {
    dialog
        .messages()
        .iter()
        .map(|m| m.content.as_str())
        .collect()
}

#[track_caller]
fn fork_case(
    len: usize,
    last_n: usize,
    first_k: usize,
    expected: &[&str],
    node: (usize, usize, usize),
) {
    let mut parent = dialog_with(len);
    let child = parent.fork(last_n, first_k);
    assert_eq!(contents(&child), expected);
    let tree = &child.tree_node;
    assert_eq!(
        (
            tree.split_point.unwrap(),
            tree.last_n.unwrap(),
            tree.first_k.unwrap()
        ),
        node
    );
    assert_eq!(tree.parent_id.as_deref(), Some(parent.dialog_id()));
    assert_eq!(
        parent.tree_node.children_ids,
        vec![child.dialog_id().to_string()]
    );
    assert_eq!(contents(&parent).len(), len, "the parent is untouched");
}

#[test]
fn fork_keeps_first_k_and_last_n_as_the_seeds_define() {
    // Full copy.
    fork_case(5, 0, 1, &["system", "m1", "m2", "m3", "m4"], (5, 0, 1));
    // System prompt plus the last 2.
    fork_case(5, 2, 1, &["system", "m3", "m4"], (3, 2, 1));
    // First 2 plus the last 2.
    fork_case(5, 2, 2, &["system", "m1", "m3", "m4"], (4, 2, 2));
    // first_k clamped so it does not overlap the tail.
    fork_case(5, 3, 4, &["system", "m1", "m2", "m3", "m4"], (5, 3, 2));
    // last_n >= len means a full copy.
    fork_case(3, 3, 1, &["system", "m1", "m2"], (3, 0, 1));
    // first_k 0 keeps only the tail.
    fork_case(4, 1, 0, &["m3"], (1, 1, 0));
}

#[test]
fn fork_inherits_owner_session_and_top_prompt_and_appends_independently() {
    let mut parent = dialog_with(2);
    let mut child = parent.fork(0, 1);
    assert_eq!(child.owner, "coder");
    assert_eq!(child.session_name, "test");
    assert_eq!(
        child.top_prompt.as_ref().map(|p| p.path.as_str()),
        Some("__text")
    );
    child.put_text(Role::User, "only in child");
    assert_eq!(parent.len(), 2);
    assert_eq!(child.len(), 3);
    assert_eq!(
        child.tail().unwrap().metadata["dialog_id"],
        json!(child.dialog_id())
    );
    assert_eq!(
        child.head().unwrap().metadata["dialog_id"],
        json!(parent.dialog_id())
    );
    assert_eq!(child.tree_node.depth, 1);
}

#[test]
fn tree_overview_shows_every_fork() {
    let mut root = dialog_with(5);
    let mut a = root.fork(0, 1);
    let b = root.fork(2, 1);
    let a1 = a.fork(0, 1);
    let all = [&root, &a, &b, &a1];
    let overview = root.tree_overview(&all);
    let lines: Vec<&str> = overview.lines().collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(
        lines[0],
        format!("[{}] owner=coder msgs=5", &root.dialog_id()[..8])
    );
    assert!(lines[1].starts_with("  └─ ") && lines[1].ends_with("msgs=5 split@5"));
    assert!(
        lines[2].starts_with("    └─ "),
        "a's child is listed under a: {overview}"
    );
    assert!(lines[3].ends_with("msgs=3 split@3 (last_n=2, first_k=1)"));
}

#[test]
fn put_prompt_renders_and_sets_top_prompt() {
    let prompt = Arc::new(Prompt::new("writer/draft", "Write about {{ topic }}.").unwrap());
    let mut dialog = Dialog::new("writer", "s");
    let message = dialog
        .put_prompt(Role::User, prompt, json!({"topic": "owls"}))
        .unwrap();
    assert_eq!(message.content, "Write about owls.");
    assert_eq!(dialog.top_prompt.as_ref().unwrap().path, "writer/draft");
    let missing = Arc::new(Prompt::new("writer/draft", "Write about {{ topic }}.").unwrap());
    assert!(dialog.put_prompt(Role::User, missing, ()).is_err());
    assert_eq!(dialog.len(), 1, "a failed render appends nothing");
}

#[test]
fn put_image_detects_the_type_from_magic_bytes() {
    let png = b"\x89PNG\r\n\x1a\nrest";
    let mut dialog = Dialog::new("a", "s");
    let message = dialog
        .put(Role::User)
        .caption("a chart")
        .image(ImageSource::Bytes(png))
        .unwrap();
    // An image goes in as a multipart message, the way attachments do.
    assert_eq!(message.modality, Modality::Text);
    assert_eq!(message.content, "a chart");
    assert_eq!(message.parts[0].to_string(), "<image image/png>");
    let jpeg = base64::engine::general_purpose::STANDARD.encode(b"\xff\xd8\xff\xe0data");
    let message = dialog
        .put_image(Role::User, ImageSource::Base64(&jpeg))
        .unwrap();
    assert_eq!(message.parts[0].to_string(), "<image image/jpeg>");
    let error = dialog
        .put_image(Role::User, ImageSource::Bytes(b"hello"))
        .unwrap_err();
    assert!(
        error.to_string().contains("not PNG, JPEG, WebP or GIF"),
        "{error}"
    );
    assert!(
        dialog
            .put_image(Role::User, ImageSource::Base64("%%%"))
            .is_err()
    );
}

#[test]
fn records_round_trip_every_field() {
    let mut dialog = dialog_with(3);
    let _child = dialog.fork(1, 1);
    let record = dialog.to_record();
    let text = serde_json::to_string(&dialog).unwrap();
    let back: DialogRecord = serde_json::from_str(&text).unwrap();
    assert_eq!(back.messages, record.messages);
    assert_eq!(back.tree_node, record.tree_node);
    assert_eq!(back.top_prompt_path.as_deref(), Some("__text"));
    let rebuilt = Dialog::from_record(back, None);
    assert_eq!(rebuilt.dialog_id(), dialog.dialog_id());
    assert_eq!(rebuilt.messages(), dialog.messages());
    assert_eq!(rebuilt.top_prompt.unwrap().path, "__text");
}

#[test]
fn cost_sums_messages_and_overview_previews() {
    let mut dialog = dialog_with(1);
    let mut reply = Message::assistant("coder", "x".repeat(200));
    reply.usage = args(json!({"prompt_tokens": 10, "completion_tokens": 5, "response_cost": 0.25}));
    dialog.append(reply.clone());
    dialog.append(reply);
    let cost = dialog.cost();
    assert_eq!(cost.total_tokens, 30);
    assert_eq!(cost.cost, Some(0.5));
    let overview = dialog.overview(10);
    assert!(
        overview.contains("[1. coder (assistant)]: xxxxxxxxxx..."),
        "{overview}"
    );
}

#[test]
fn records_leave_out_what_forks_share_with_their_parent_and_get_it_back() {
    let mut root = dialog_with(3);
    let mut child = root.fork(0, 1);
    child.append(Message::user("child only"));
    let mut grandchild = child.fork(0, 1);
    grandchild.append(Message::user("grandchild only"));
    // A fork of the tail only shares nothing from the start.
    let tail = root.fork(1, 0);
    let full: Vec<DialogRecord> = [&root, &child, &grandchild, &tail]
        .iter()
        .map(|dialog| dialog.to_record())
        .collect();

    let mut records = full.clone();
    share_prefixes(&mut records);
    let kept: Vec<(usize, usize)> = records
        .iter()
        .map(|record| (record.inherited, record.messages.len()))
        .collect();
    assert_eq!(kept, [(0, 3), (3, 1), (4, 1), (0, 1)]);

    // Any order on disk: children may come before their parents.
    records.reverse();
    expand_shared_prefixes(&mut records);
    records.reverse();
    assert_eq!(records, full);
}

fn registry_with(prompts: &[(&str, &str)]) -> Registry {
    let mut registry = Registry::empty();
    for (key, template) in prompts {
        registry.insert(Prompt::new(*key, *template).unwrap());
    }
    registry
}

#[test]
fn put_prompt_key_renders_the_registered_prompt_or_names_the_unknown_key() {
    let registry = registry_with(&[
        ("writer/system", "You write."),
        ("writer/draft", "On {{ topic }}."),
    ]);
    let mut dialog = Dialog::new("writer", "main");
    dialog
        .put_prompt_key(Role::System, "writer/system", &registry, ())
        .unwrap();
    let message = dialog
        .put_prompt_key(
            Role::User,
            "writer/draft",
            &registry,
            json!({"topic": "owls"}),
        )
        .unwrap();
    assert_eq!(message.content, "On owls.");
    assert_eq!(dialog.top_prompt.as_ref().unwrap().path, "writer/draft");
    let error = dialog
        .put_prompt_key(Role::User, "writer/drafts", &registry, ())
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "unknown prompt `writer/drafts`; did you mean `writer/draft`?"
    );
    let error = dialog
        .put_prompt_key(Role::User, "critic/review", &registry, ())
        .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("unknown prompt `critic/review` (known: "),
        "{error}"
    );
    assert_eq!(dialog.len(), 2, "an unknown key appends nothing");
    assert_eq!(dialog.top_prompt.as_ref().unwrap().path, "writer/draft");
}

#[test]
fn a_dialog_written_and_read_back_is_the_same_dialog() {
    let registry = registry_with(&[
        ("writer/system", "You write."),
        ("writer/draft", "On {{ topic }}."),
    ]);
    let mut parent = Dialog::new("writer", "main");
    parent
        .put_prompt_key(Role::System, "writer/system", &registry, ())
        .unwrap();
    parent.put(Role::User).name("ann").text("hello").unwrap();
    let mut reply = Message::assistant("writer", "hi");
    reply.usage.insert("prompt_tokens".into(), json!(3));
    parent.append(reply);
    let mut child = parent.fork(1, 1);
    child
        .put_prompt_key(
            Role::User,
            "writer/draft",
            &registry,
            json!({"topic": "owls"}),
        )
        .unwrap();

    for dialog in [&parent, &child] {
        let text = serde_json::to_string(dialog).unwrap();
        let back: Dialog = serde_json::from_str(&text).unwrap();
        assert_eq!(back.to_record(), dialog.to_record());
        assert_eq!(back.messages(), dialog.messages());
        assert_eq!(back.dialog_id(), dialog.dialog_id());
        assert_eq!(back.tree_node, dialog.tree_node);
        assert_eq!(
            serde_json::to_string(&back).unwrap(),
            text,
            "written again, byte for byte"
        );
    }
    let back: Dialog = serde_json::from_str(&serde_json::to_string(&child).unwrap()).unwrap();
    assert_eq!(
        back.tree_node.parent_id.as_deref(),
        Some(parent.dialog_id())
    );
    assert_eq!(
        parent.tree_node.children_ids,
        vec![child.dialog_id().to_string()]
    );
    assert_eq!(
        (back.tree_node.last_n, back.tree_node.first_k),
        (Some(1), Some(1))
    );

    // The key came back with a stand-in; the registry restores the prompt itself.
    let mut back = back;
    let stand_in = back.top_prompt.clone().unwrap();
    assert_eq!(
        (stand_in.path.as_str(), stand_in.template()),
        ("writer/draft", "")
    );
    back.restore_top_prompt(&registry).unwrap();
    assert_eq!(
        back.top_prompt.as_ref().unwrap().template(),
        "On {{ topic }}."
    );
    let error = back
        .restore_top_prompt(&registry_with(&[("writer/drafts", "x")]))
        .unwrap_err();
    assert!(
        error.to_string().contains("did you mean `writer/drafts`"),
        "{error}"
    );
    // A put_text turn comes back as the bare text prompt.
    let parent_back: Dialog =
        serde_json::from_str(&serde_json::to_string(&parent).unwrap()).unwrap();
    assert_eq!(parent_back.top_prompt.unwrap().path, "__text");
}

#[test]
fn a_dialog_record_missing_its_shared_messages_is_refused() {
    let mut parent = dialog_with(3);
    let child = parent.fork(0, 0);
    let mut records = vec![parent.to_record(), child.to_record()];
    share_prefixes(&mut records);
    assert_eq!(records[1].inherited, 3);
    let text = serde_json::to_string(&records[1]).unwrap();
    let error = serde_json::from_str::<Dialog>(&text)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("holds only the messages after the first 3 of its parent dialog"),
        "{error}"
    );
    expand_shared_prefixes(&mut records);
    let back: Dialog = serde_json::from_str(&serde_json::to_string(&records[1]).unwrap()).unwrap();
    assert_eq!(back.messages(), child.messages());
}

#[test]
fn tree_overview_lists_each_dialog_once_and_caps_the_indent() {
    // Children lists as a file may hold them: a circle, and a chain deeper
    // than the indent goes.
    let mut root = dialog_with(1);
    let mut chain = vec![root.fork(0, 0)];
    for _ in 0..TREE_INDENT + 5 {
        let next = chain.last_mut().unwrap().fork(0, 0);
        chain.push(next);
    }
    let root_id = root.dialog_id().to_string();
    chain
        .last_mut()
        .unwrap()
        .tree_node
        .children_ids
        .push(root_id.clone());
    root.tree_node.children_ids.push(root_id);
    let mut all = vec![&root];
    all.extend(chain.iter());
    let overview = root.tree_overview(&all);
    let lines: Vec<&str> = overview.lines().collect();
    assert_eq!(lines.len(), 1 + chain.len(), "{overview}");
    let deepest = lines.last().unwrap();
    let indent = deepest.len() - deepest.trim_start().len();
    assert_eq!(indent, 2 * TREE_INDENT, "{deepest:?}");
}
