//! The house rule that keeps the crate readable from the bottom up: no two
//! files of `src/` name each other, directly or through others (an import
//! circle), and no two folders do. A file may name its ancestors (`super::`,
//! the vocabulary of the module it is in) and its own children freely; every
//! other name of a `crate::`, `super::` or `self::` path is an edge, from the
//! file that writes it to the file of the deepest module the path names.
//! Test code (`#[cfg(test)]` modules, inline or in files of their own) is
//! left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module: its path from the crate root (`engine::keeper` is
/// `["engine", "keeper"]`).
type Module = Vec<String>;

/// Every `.rs` file under `dir`, by its module.
fn modules(root: &Path, dir: &Path, found: &mut BTreeMap<Module, PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("reading src/") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            modules(root, &path, found);
            continue;
        }
        if path.extension().is_none_or(|ext| ext != "rs") {
            continue;
        }
        let relative = path.strip_prefix(root).expect("under src/").with_extension("");
        let mut module: Module = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
        if module.last().is_some_and(|last| last == "mod" || last == "lib") {
            module.pop();
        }
        found.insert(module, path);
    }
}

/// `source` without comments, and with every string and character literal
/// emptied, so that only code is left to read paths from.
fn code_of(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut code = String::with_capacity(source.len());
    let mut i = 0;
    let after_ident = |i: usize| i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
    while i < bytes.len() {
        let rest = &source[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if let Some(comment) = rest.strip_prefix("/*") {
            i += comment.find("*/").map_or(rest.len(), |end| end + 4);
        } else if rest.starts_with('r') && !after_ident(i) && rest[1..].trim_start_matches('#').starts_with('"') {
            let hashes = rest[1..].len() - rest[1..].trim_start_matches('#').len();
            let end = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            i += rest[body..].find(&end).map_or(rest.len(), |at| body + at + end.len());
            code.push_str("\"\"");
        } else if rest.starts_with('"') {
            let mut j = 1;
            while j < rest.len() && rest.as_bytes()[j] != b'"' {
                j += if rest.as_bytes()[j] == b'\\' { 2 } else { 1 };
            }
            i += j + 1;
            code.push_str("\"\"");
        } else if let Some(length) = char_literal(rest) {
            i += length;
            code.push_str("' '");
        } else {
            let c = rest.chars().next().expect("not at the end");
            code.push(c);
            i += c.len_utf8();
        }
    }
    code
}

/// The length of the character literal `rest` starts with, if it does (not
/// a lifetime).
fn char_literal(rest: &str) -> Option<usize> {
    let body = rest.strip_prefix('\'')?;
    if let Some(escaped) = body.strip_prefix('\\') {
        return escaped.find('\'').map(|end| end + 3);
    }
    let c = body.chars().next()?;
    body[c.len_utf8()..].starts_with('\'').then(|| c.len_utf8() + 2)
}

/// Whether `code` at `at` is a `#[cfg(test)]`-like attribute (also
/// `#[cfg(all(test, ..))]`); returns where it ends.
fn test_attribute(code: &str, at: usize) -> Option<usize> {
    let rest = &code[at..];
    let inner = rest.strip_prefix("#[cfg(")?;
    let inner = inner.strip_prefix("all(").unwrap_or(inner).trim_start();
    let after = inner.strip_prefix("test")?;
    if after.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
        return None;
    }
    rest.find(']').map(|end| at + end + 1)
}

/// The code of a file without its test modules, and the names of the
/// child modules it declares for tests only.
fn without_tests(code: &str) -> (String, Vec<String>) {
    let mut kept = String::new();
    let mut tests = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let Some(end) = code[i..].starts_with("#[cfg(").then(|| test_attribute(code, i)).flatten() else {
            let c = code[i..].chars().next().expect("not at the end");
            kept.push(c);
            i += c.len_utf8();
            continue;
        };
        // The item under the attribute: skip other attributes, then a
        // `mod name;` (a test file) or a `mod name { .. }` (inline).
        let mut rest = code[end..].trim_start();
        while rest.starts_with("#[") {
            rest = rest[rest.find(']').map_or(rest.len(), |e| e + 1)..].trim_start();
        }
        let item_at = code.len() - rest.len();
        let Some(named) = rest.strip_prefix("mod ") else {
            i = end;
            continue;
        };
        let name: String = named.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let after_name = named.trim_start()[name.len()..].trim_start();
        if after_name.starts_with(';') {
            tests.push(name);
            i = code.len() - after_name.len() + 1;
        } else if after_name.starts_with('{') {
            // Skip the inline module, braces balanced.
            let mut depth = 0;
            let mut j = code.len() - after_name.len();
            for (k, c) in code[j..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            j += k + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            i = j;
        } else {
            i = item_at;
        }
    }
    (kept, tests)
}

/// Every `crate::`, `super::` or `self::` path in `code`, with the trees of
/// `use` declarations spread out (`use crate::a::{b, c::d}` is `crate::a::b`
/// and `crate::a::c::d`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let starts = ["crate::", "super::", "self::"].iter().any(|head| code[i..].starts_with(head));
        let boundary =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':');
        if !(starts && boundary) {
            i += code[i..].chars().next().map_or(1, char::len_utf8);
            continue;
        }
        let tree_end = path_tree_end(&code[i..]);
        spread(&code[i..i + tree_end], &mut Vec::new(), &mut found);
        i += tree_end;
    }
    found
}

/// Where the path (or `use` tree) at the start of `text` ends.
fn path_tree_end(text: &str) -> usize {
    let mut depth = 0;
    for (k, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth > 0 => depth -= 1,
            c if depth > 0 || c.is_alphanumeric() || c == '_' || c == ':' => {}
            c if depth == 0 && c.is_whitespace() => return k,
            _ if depth == 0 => return k,
            _ => {}
        }
        if depth == 0 && c == '}' {
            return k + 1;
        }
    }
    text.len()
}

/// The paths of one `use` tree, each after `prefix`.
fn spread(tree: &str, prefix: &mut Vec<String>, found: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    let (head, group) = match tree.find('{') {
        Some(open) => (&tree[..open], Some(&tree[open + 1..tree.rfind('}').unwrap_or(tree.len())])),
        None => (tree, None),
    };
    let start = prefix.len();
    let head = head.split(" as ").next().unwrap_or(head);
    prefix.extend(head.split("::").map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned));
    match group {
        None => found.push(prefix.clone()),
        Some(group) => {
            let mut depth = 0;
            let mut part = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        spread(&part, prefix, found);
                        part.clear();
                        continue;
                    }
                    _ => {}
                }
                part.push(c);
            }
            if !part.trim().is_empty() {
                spread(&part, prefix, found);
            }
        }
    }
    prefix.truncate(start);
}

/// The deepest module of `files` that `path`, written in `from`, names.
fn resolve(from: &Module, path: &[String], files: &BTreeMap<Module, PathBuf>) -> Option<Module> {
    let (mut module, mut rest) = match path.first()?.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "super" | "self" => (from.clone(), path),
        _ => return None,
    };
    while let Some(head) = rest.first() {
        match head.as_str() {
            "super" => drop(module.pop()),
            "self" => {}
            _ => break,
        }
        rest = &rest[1..];
    }
    let mut deepest = files.contains_key(&module).then(|| module.clone());
    for part in rest {
        module.push(part.clone());
        if !files.contains_key(&module) {
            break;
        }
        deepest = Some(module.clone());
    }
    deepest
}

/// The groups of nodes of `edges` that reach each other (Tarjan's strongly
/// connected components), those of more than one node.
fn circles<N: Ord + Clone>(edges: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    struct Walk<'a, N: Ord> {
        edges: &'a BTreeMap<N, BTreeSet<N>>,
        index: BTreeMap<N, usize>,
        low: BTreeMap<N, usize>,
        stack: Vec<N>,
        on_stack: BTreeSet<N>,
        found: Vec<Vec<N>>,
    }
    impl<N: Ord + Clone> Walk<'_, N> {
        fn visit(&mut self, node: &N) {
            let n = self.index.len();
            self.index.insert(node.clone(), n);
            self.low.insert(node.clone(), n);
            self.stack.push(node.clone());
            self.on_stack.insert(node.clone());
            for next in self.edges.get(node).into_iter().flatten() {
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node.clone(), low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node.clone(), low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut group = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(&member);
                    let done = member == *node;
                    group.push(member);
                    if done {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node) {
            walk.visit(node);
        }
    }
    walk.found
}

/// The file-level edges of the crate's `src/`, test code left out.
fn edges_of(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut files = BTreeMap::new();
    modules(src, src, &mut files);
    let mut tests = BTreeSet::new();
    let mut code = BTreeMap::new();
    for (module, path) in &files {
        let source = std::fs::read_to_string(path).expect("reading a source file");
        for (at, _) in source.match_indices("#[path = \"") {
            // A test module in a file of another name: `#[path = "x.rs"]`,
            // relative to the declaring file's folder.
            let name = &source[at + 10..];
            let name = &name[..name.find('"').unwrap_or(0)];
            let before = &source[..at];
            if before.rfind("#[cfg(").is_some_and(|cfg| test_attribute(&code_of(&before[cfg..]), 0).is_some()) {
                let file = path.parent().expect("in src/").join(name);
                let relative = file.strip_prefix(src).expect("under src/").with_extension("");
                tests.insert(relative.iter().map(|p| p.to_string_lossy().into_owned()).collect::<Module>());
            }
        }
        let (kept, children) = without_tests(&code_of(&source));
        for child in children {
            let mut test = module.clone();
            test.push(child);
            tests.insert(test);
        }
        code.insert(module.clone(), kept);
    }
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, kept) in &code {
        if tests.contains(module) {
            continue;
        }
        let named = edges.entry(module.clone()).or_default();
        for path in paths(kept) {
            let Some(target) = resolve(module, &path, &files) else { continue };
            let ancestor = module.starts_with(&target);
            let descendant = target.starts_with(module);
            if !(ancestor || descendant || tests.contains(&target)) {
                named.insert(target);
            }
        }
    }
    edges
}

/// The folders the edges between their files join: an edge between two
/// files is one between the first two folders (or files) where their paths
/// part.
fn folder_edges(edges: &BTreeMap<Module, BTreeSet<Module>>) -> BTreeMap<Module, BTreeSet<Module>> {
    let folders: BTreeSet<Module> =
        edges.keys().flat_map(|module| (1..module.len()).map(|n| module[..n].to_vec())).collect();
    let mut joined: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (from, targets) in edges {
        for to in targets {
            let shared = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            let (a, b) = (from[..(shared + 1).min(from.len())].to_vec(), to[..(shared + 1).min(to.len())].to_vec());
            if a != b && folders.contains(&a) && folders.contains(&b) {
                joined.entry(a).or_default().insert(b);
            }
        }
    }
    joined
}

fn names(groups: &[Vec<Module>]) -> Vec<String> {
    groups.iter().map(|group| group.iter().map(|m| m.join("/")).collect::<Vec<_>>().join(" <-> ")).collect()
}

#[test]
fn no_file_of_src_names_another_that_names_it_back() {
    let edges = edges_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(edges.len() > 50, "the walk found the crate's files");
    let files = circles(&edges);
    assert!(files.is_empty(), "import circles between files: {:?}", names(&files));
    let folders = circles(&folder_edges(&edges));
    assert!(folders.is_empty(), "import circles between folders: {:?}", names(&folders));
}

#[test]
fn the_check_sees_a_circle_when_there_is_one() {
    let dir = std::env::temp_dir().join(format!("idem-import-circles-{}", std::process::id()));
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("creating the folder");
        std::fs::write(path, text).expect("writing a file");
    };
    write("lib.rs", "mod a;\nmod b;\nmod c;\n");
    write("a.rs", "use crate::b::{Thing, other::More};\n// use crate::c;\n");
    write("b/mod.rs", "pub(crate) mod other;\npub(crate) struct Thing;\nfn f() { super::a::g(\"crate::c\"); }\n");
    write("b/other.rs", "use super::Thing;\npub(crate) struct More;\n");
    write("c.rs", "#[cfg(test)]\nmod tests { use crate::a; }\n");
    let edges = edges_of(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let module = |path: &str| path.split('/').map(str::to_owned).collect::<Module>();
    assert_eq!(edges[&module("a")], BTreeSet::from([module("b"), module("b/other")]), "comments are not code");
    assert_eq!(edges[&module("b")], BTreeSet::from([module("a")]), "strings are not code; children are free");
    assert_eq!(edges[&module("b/other")], BTreeSet::new(), "a child names its parent freely");
    assert_eq!(edges[&module("c")], BTreeSet::new(), "test code is left out");
    assert_eq!(names(&circles(&edges)), vec!["a <-> b".to_owned()]);
    assert_eq!(names(&circles(&folder_edges(&edges))), Vec::<String>::new(), "a and b are files, not folders");
}
