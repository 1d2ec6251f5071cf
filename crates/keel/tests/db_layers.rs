//! The store module (`src/db/`) reads as layers: each file imports only
//! from files of its own layer or below, and no files import each other
//! in a circle. This test reads the module's source and checks both.
//!
//! A file's imports are the sibling modules its code names: `super::X`
//! (and `super::{X, …}`), `crate::db::X`, and in `mod.rs` a path that
//! starts with a sibling's name. A name under `super::` that is not a
//! module is an item of `mod.rs` (the node `mod`). Test code does not
//! count: `#[cfg(test)]` items and files ending in `tests.rs`. `mod.rs`'s
//! `mod` declarations and `pub use` re-exports make the public API and
//! are not imports. `salvage/` counts as one node.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The layers, bottom first, with their files (`mod`: the code of
/// `mod.rs`, `salvage`: the `salvage/` folder). A file may import from its
/// own layer and those below. `src/db/mod.rs`'s opening comment says what
/// each layer holds.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundation",
        &[
            "error",
            "files",
            "options",
            "sync",
            "meta",
            "freelist",
            "pagewrite",
            "record",
            "item",
            "kept",
            "order",
            "placement",
            "helper",
        ],
    ),
    (
        "what a snapshot reads",
        &["layers", "writer", "blind", "run"],
    ),
    (
        "the store's state",
        &["gate", "published", "pending", "slot", "state"],
    ),
    ("reads", &["view", "read"]),
    ("write transactions", &["txn"]),
    ("the commit path", &["combine", "direct"]),
    (
        "the store",
        &["holder", "live", "store", "checkpoint", "inspect", "mod"],
    ),
    (
        "on the store's API",
        &["typed", "backup", "salvage", "fuzzing"],
    ),
];

/// Imports that go up, each with why it must. Neither check counts them;
/// each must still exist (remove it here once it is gone).
const UPWARD: &[(&str, &str, &str)] = &[];

/// The directory of the store module.
fn db_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/db")
}

/// Strip comments and the contents of string and character literals
/// (lifetimes are kept: `'a` is not a literal).
fn strip(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !is_ident(b[i - 1]))
        {
            // A raw string: r"…" or r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime.
            let lit_end = if next == Some('\\') {
                (i + 2..b.len()).find(|&j| b[j] == '\'')
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match lit_end {
                Some(end) => {
                    out.push_str("' '");
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `src` (stripped) without its `#[cfg(test)]` items, fields and
/// statements: each runs to a `;` or `,` outside brackets, to the end of
/// its first `{ … }` block, or to the end of the block holding it.
fn without_tests(src: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::new();
    let mut rest = src;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let item = &rest[at + MARK.len()..];
        let mut depth = 0i32;
        let mut end = item.len();
        for (i, c) in item.char_indices() {
            match c {
                '(' | '[' => depth += 1,
                '{' => depth += 1,
                ')' | ']' => depth -= 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                    if depth < 0 {
                        end = i;
                        break;
                    }
                }
                ';' | ',' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The identifier starting at `s` (after spaces), and the text after it.
fn ident(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let n = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    (&s[..n], &s[n..])
}

/// The first names of a `{ … }` group's top-level entries (`s` starts
/// after the `{`).
fn group_heads(s: &str) -> Vec<&str> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                heads.push(ident(&s[start..i]).0);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                heads.push(ident(&s[start..i]).0);
                start = i + 1;
            }
            _ => {}
        }
    }
    heads.retain(|h| !h.is_empty());
    heads
}

/// The names that follow `prefix` in `src` (as `prefix X` or
/// `prefix {X, Y}`), where `prefix` is not itself the tail of a longer
/// path.
fn names_after<'s>(src: &'s str, prefix: &str) -> Vec<&'s str> {
    let mut names = Vec::new();
    let mut from = 0;
    while let Some(at) = src[from..].find(prefix) {
        let at = from + at;
        from = at + prefix.len();
        let before = src[..at].chars().next_back();
        if before.is_some_and(|c| is_ident(c) || c == ':') {
            continue;
        }
        let after = src[from..].trim_start();
        if let Some(group) = after.strip_prefix('{') {
            names.extend(group_heads(group));
        } else {
            let (name, _) = ident(after);
            if !name.is_empty() {
                names.push(name);
            }
        }
    }
    names
}

/// `mod.rs` without its `mod` declarations and `pub use` re-exports.
fn root_code(src: &str) -> String {
    let mut out = String::new();
    let mut rest = src;
    loop {
        let next = ["pub use ", "mod "]
            .iter()
            .filter_map(|m| {
                let mut from = 0;
                while let Some(at) = rest[from..].find(m) {
                    let at = from + at;
                    let before = rest[..at].chars().next_back();
                    if before.is_none_or(|c| !is_ident(c)) {
                        return Some(at);
                    }
                    from = at + m.len();
                }
                None
            })
            .min();
        let Some(at) = next else { break };
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let stmt_end = tail.find(';').map_or(tail.len(), |e| e + 1);
        let block = tail
            .find('{')
            .filter(|&b| b < stmt_end && tail.starts_with("mod "));
        rest = match block {
            // `mod name { … }`: keep its code.
            Some(b) => {
                out.push_str(&tail[..=b]);
                &tail[b + 1..]
            }
            None => &tail[stmt_end..],
        };
    }
    out.push_str(rest);
    out
}

/// Each node's source (test code removed).
fn sources() -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let dir = db_dir();
    let mut add = |node: &str, path: &Path| {
        let name = path.file_name().unwrap().to_str().unwrap();
        if !name.ends_with(".rs") || name.ends_with("tests.rs") {
            return;
        }
        let text = std::fs::read_to_string(path).unwrap();
        let code = without_tests(&strip(&text));
        let entry: &mut String = files.entry(node.to_string()).or_default();
        entry.push_str(&code);
        entry.push('\n');
    };
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            let node = path.file_name().unwrap().to_str().unwrap().to_string();
            for f in std::fs::read_dir(&path).unwrap() {
                add(&node, &f.unwrap().path());
            }
        } else {
            let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
            add(&stem, &path);
        }
    }
    files
}

/// The import graph: node -> the nodes it imports from.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let files = sources();
    let nodes: BTreeSet<String> = files.keys().cloned().collect();
    let dir = db_dir();
    let in_folder = |node: &str| dir.join(node).is_dir();
    let resolve = |from: &str, name: &str| -> Option<String> {
        let to = match name {
            "self" | "super" | "crate" => return None,
            n if nodes.contains(n) && n != "mod" => n.to_string(),
            _ => "mod".to_string(),
        };
        (to != from).then_some(to)
    };
    let mut g = BTreeMap::new();
    for (node, code) in &files {
        let mut to = BTreeSet::new();
        let mut names = names_after(code, "crate::db::");
        if node == "mod" {
            let code = root_code(code);
            let code = code.as_str();
            // In the root, a sibling is named by a path of its own.
            for sibling in &nodes {
                let bare = format!("{sibling}::");
                let self_path = format!("self::{sibling}::");
                let found = code.match_indices(&bare).any(|(at, _)| {
                    let before = code[..at].chars().next_back();
                    !before.is_some_and(|c| is_ident(c) || c == ':')
                }) || code.contains(&self_path);
                if found {
                    to.insert(sibling.clone());
                }
            }
        } else if in_folder(node) {
            names.extend(names_after(code, "super::super::"));
        } else {
            names.extend(names_after(code, "super::"));
        }
        to.extend(names.into_iter().filter_map(|n| resolve(node, n)));
        to.remove(node);
        g.insert(node.clone(), to);
    }
    g
}

/// A cycle of the graph, if it has one (its nodes in order, the first
/// repeated at the end).
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        mark: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        mark.insert(n.to_string(), Mark::Open);
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            match mark.get(m.as_str()).copied().unwrap_or(Mark::New) {
                Mark::Open => {
                    let from = path.iter().position(|p| p == m).unwrap();
                    let mut cycle = path[from..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(m, g, mark, path) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        mark.insert(n.to_string(), Mark::Done);
        None
    }
    let mut mark = BTreeMap::new();
    for n in g.keys() {
        if mark.get(n.as_str()).copied().unwrap_or(Mark::New) == Mark::New {
            if let Some(c) = visit(n, g, &mut mark, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// Every edge that is part of some cycle, and the cycle found first.
fn describe_cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Option<String> {
    let first = find_cycle(g)?;
    let mut s = format!("a cycle: {}\n", first.join(" -> "));
    // Edges u -> v with v reaching u lie on a cycle.
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(n) = stack.pop() {
            for m in g.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    stack.push(m.clone());
                }
            }
        }
        seen
    };
    s.push_str("edges on a cycle:\n");
    for (u, vs) in g {
        for v in vs {
            if reach(v).contains(u) {
                let _ = writeln!(s, "  {u} -> {v}");
            }
        }
    }
    Some(s)
}

#[test]
fn checker_sees_imports() {
    let src = strip(
        "use super::error::{DbError, Result};\n\
         use super::{read, Durability};\n\
         // use super::comment::X;\n\
         let s = \"super::string::X\";\n\
         fn f<'a>(c: char) { let _ = 'x'; super::call::f(); crate::db::other::g(); }\n\
         #[cfg(test)]\nuse super::test_only::X;\n\
         struct S { a: u8, #[cfg(test)] b: super::field::T, c: u8 }\n\
         #[cfg(test)]\nmod tests { use super::tests_mod::X; }\n",
    );
    let code = without_tests(&src);
    let mut names = names_after(&code, "super::");
    names.extend(names_after(&code, "crate::db::"));
    names.sort_unstable();
    assert_eq!(names, ["Durability", "call", "error", "other", "read"]);
    let root = root_code("mod a;\npub use b::X;\nuse c::Y;\nfn f() { d::g() }");
    assert!(!root.contains("b::") && root.contains("c::") && root.contains("d::"));
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert!(find_cycle(&g).is_some());
    g.remove("b");
    assert!(find_cycle(&g).is_none());
}

/// The graph without the [`UPWARD`] imports, and those of them it does
/// not have.
fn graph_without_upward() -> (BTreeMap<String, BTreeSet<String>>, Vec<String>) {
    let mut g = graph();
    let mut stale = Vec::new();
    for (from, to, _) in UPWARD {
        let had = g.get_mut(*from).is_some_and(|vs| vs.remove(*to));
        if !had {
            stale.push(format!("{from} -> {to}"));
        }
    }
    (g, stale)
}

/// What breaks the layering of `g` (empty: nothing).
fn layer_problems(g: &BTreeMap<String, BTreeSet<String>>, layers: &[(&str, &[&str])]) -> String {
    let mut layer_of = BTreeMap::new();
    let mut problems = String::new();
    for (i, (_, files)) in layers.iter().enumerate() {
        for f in *files {
            if layer_of.insert(*f, i).is_some() {
                let _ = writeln!(problems, "  {f}: in two layers");
            }
        }
    }
    for node in g.keys() {
        if !layer_of.contains_key(node.as_str()) {
            let _ = writeln!(problems, "  {node}: in no layer (add it to LAYERS)");
        }
    }
    for f in layer_of.keys() {
        if !g.contains_key(*f) {
            let _ = writeln!(problems, "  {f}: in LAYERS but no such file");
        }
    }
    for (u, vs) in g {
        let Some(&lu) = layer_of.get(u.as_str()) else {
            continue;
        };
        for v in vs {
            match layer_of.get(v.as_str()) {
                Some(&lv) if lv > lu => {
                    let _ = writeln!(
                        problems,
                        "  {u} ({}) imports {v} ({}), a layer above",
                        layers[lu].0, layers[lv].0
                    );
                }
                _ => {}
            }
        }
    }
    problems
}

#[test]
fn the_checks_find_what_they_look_for() {
    let edges = |list: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (u, v) in list {
            g.entry(u.to_string()).or_default().insert(v.to_string());
            g.entry(v.to_string()).or_default();
        }
        g
    };
    let cyclic = edges(&[("a", "b"), ("b", "c"), ("c", "a")]);
    assert_eq!(find_cycle(&cyclic).unwrap(), ["a", "b", "c", "a"]);
    assert!(describe_cycles(&cyclic).unwrap().contains("c -> a"));
    let layered = edges(&[("a", "b"), ("b", "c")]);
    assert!(find_cycle(&layered).is_none());
    let layers: &[(&str, &[&str])] = &[("low", &["c"]), ("mid", &["b"]), ("high", &["a"])];
    assert_eq!(layer_problems(&layered, layers), "");
    let up = edges(&[("a", "b"), ("c", "a")]);
    let problems = layer_problems(&up, layers);
    assert!(problems.contains("c (low) imports a (high)"), "{problems}");
}

#[test]
fn db_files_import_each_other_without_a_cycle() {
    let (g, stale) = graph_without_upward();
    assert!(g.len() > 20, "found only {:?}", g.keys());
    if let Some(report) = describe_cycles(&g) {
        panic!("src/db/ files import each other in a circle\n{report}");
    }
    assert!(
        stale.is_empty(),
        "UPWARD lists imports no file makes: {stale:?}"
    );
}

#[test]
fn db_files_import_only_from_their_layer_or_below() {
    let (g, _) = graph_without_upward();
    let problems = layer_problems(&g, LAYERS);
    assert!(problems.is_empty(), "src/db/ layering:\n{problems}");
}
