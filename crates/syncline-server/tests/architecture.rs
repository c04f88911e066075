//! The workspace's structure rule: no file of a crate imports, directly or through other files,
//! a file that imports it back. A file imports another when it names an item by a path that
//! resolves to it (`use crate::a::b::Item`, `super::Item`, `crate::a::f(..)` inline); a path
//! through a `pub use` re-export counts as importing the file that defines the item. `mod x;`
//! declarations and in-file `#[cfg(test)]` modules do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// One source file: its module path (`["shapes", "registry"]`, empty for the crate root) and
/// its code with comments and the trailing test module removed.
struct SourceFile {
    module: Vec<String>,
    code: String,
}

/// Module path of a file under `src`: `lib.rs`/`main.rs` → root, `a/mod.rs` → `a`, `a/b.rs` → `a::b`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("file is under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    let crate_root = parts.is_empty() && matches!(stem, "lib" | "main");
    if stem != "mod" && !crate_root {
        parts.push(stem.to_owned());
    }
    parts
}

/// The code that counts: line comments dropped, and everything from the file's first
/// `#[cfg(test)]` module on (tests sit at the end of a file by convention here).
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        let code = match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "bin") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Expands `use` trees into flat paths: `a::{b, c::{d, e as f}}` → `a::b`, `a::c::d`,
/// `a::c::e as f`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_owned()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').expect("balanced use tree")];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| {
            if p == "self" {
                prefix.trim_end_matches("::").to_owned()
            } else {
                format!("{prefix}{p}")
            }
        })
        .collect()
}

/// Every crate-internal path a file names, made absolute (`crate::`, `super::`, `self::`
/// resolved against the file's module).
fn paths_named(file: &SourceFile) -> Vec<Vec<String>> {
    let use_stmt = Regex::new(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);").expect("regex");
    let inline = Regex::new(r"\b(?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+").expect("regex");
    let mut raw: Vec<String> = Vec::new();
    for caps in use_stmt.captures_iter(&file.code) {
        raw.extend(
            expand(&caps[1])
                .into_iter()
                .map(|p| without_alias(&p).to_owned()),
        );
    }
    let without_uses = use_stmt.replace_all(&file.code, "");
    raw.extend(
        inline
            .find_iter(&without_uses)
            .map(|m| m.as_str().to_owned()),
    );
    raw.into_iter()
        .filter_map(|path| absolute(&file.module, &path))
        .collect()
}

fn without_alias(path: &str) -> &str {
    path.split(" as ").next().unwrap_or(path).trim()
}

fn absolute(module: &[String], path: &str) -> Option<Vec<String>> {
    let mut segments = path.split("::").map(str::trim).filter(|s| !s.is_empty());
    let mut base: Vec<String> = match segments.next()? {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => module[..module.len().checked_sub(1)?].to_vec(),
        _ => return None,
    };
    for segment in segments {
        if segment == "super" {
            base.pop();
        } else if segment != "*" {
            base.push(segment.to_owned());
        }
    }
    Some(base)
}

/// The file that defines what `path` names: the longest module prefix that is a file,
/// following that file's `pub use` re-exports of the next segment.
fn resolve(
    files: &BTreeMap<Vec<String>, SourceFile>,
    path: &[String],
    depth: usize,
) -> Option<Vec<String>> {
    let at = (0..=path.len())
        .rev()
        .find(|&n| files.contains_key(&path[..n]))?;
    let module = path[..at].to_vec();
    let Some(name) = path.get(at) else {
        return Some(module);
    };
    if depth < 8 {
        let file = &files[&module];
        let reexport = Regex::new(r"(?m)^\s*pub(?:\([^)]*\))?\s+use\s+([^;]+);").expect("regex");
        for caps in reexport.captures_iter(&file.code) {
            for entry in expand(&caps[1]) {
                let target = without_alias(&entry).to_owned();
                let last = target
                    .rsplit("::")
                    .next()
                    .unwrap_or(&target)
                    .trim()
                    .to_owned();
                let alias = entry.split(" as ").nth(1).map(str::trim);
                if alias.unwrap_or(&last) == name || last == "*" {
                    let target = if target.starts_with("crate")
                        || target.starts_with("super")
                        || target.starts_with("self")
                    {
                        target
                    } else {
                        format!("self::{target}")
                    };
                    if let Some(mut abs) = absolute(&module, &target) {
                        if last == "*" {
                            abs.push(name.clone());
                        }
                        if abs != path {
                            if let Some(found) = resolve(files, &abs, depth + 1) {
                                if found != module {
                                    return Some(found);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Some(module)
}

/// Strongly connected groups of more than one file in a crate's import graph.
fn import_cycles(src: &Path) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    rust_files(src, &mut paths);
    if src.join("lib.rs").exists() {
        // A binary beside a library is its own crate and reaches the library by name.
        paths.retain(|p| p != &src.join("main.rs"));
    }
    let files: BTreeMap<Vec<String>, SourceFile> = paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).expect("readable source file");
            let module = module_of(src, path);
            (
                module.clone(),
                SourceFile {
                    module,
                    code: code_of(&text),
                },
            )
        })
        .collect();
    let mut edges: BTreeMap<&Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, file) in &files {
        let targets = edges.entry(module).or_default();
        for path in paths_named(file) {
            if let Some(target) = resolve(&files, &path, 0) {
                if &target != module {
                    targets.insert(target);
                }
            }
        }
    }
    let reaches = |from: &Vec<String>| -> BTreeSet<Vec<String>> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(next) = stack.pop() {
            for target in edges.get(&next).into_iter().flatten() {
                if seen.insert(target.clone()) {
                    stack.push(target.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&Vec<String>, BTreeSet<Vec<String>>> =
        files.keys().map(|m| (m, reaches(m))).collect();
    let mut groups: BTreeSet<Vec<String>> = BTreeSet::new();
    for (module, reached) in &reach {
        let mut group: Vec<String> = reached
            .iter()
            .filter(|other| reach.get(other).is_some_and(|back| back.contains(*module)))
            .map(|m| display(m))
            .collect();
        if !group.is_empty() {
            group.push(display(module));
            group.sort();
            group.dedup();
            groups.insert(group);
        }
    }
    groups.into_iter().collect()
}

fn display(module: &[String]) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

#[test]
fn no_crate_has_an_import_cycle_between_its_files() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&crates).expect("crates dir") {
        let src = entry.expect("dir entry").path().join("src");
        if src.is_dir() {
            for cycle in import_cycles(&src) {
                found.push(format!("{}: {}", src.display(), cycle.join(" <-> ")));
            }
        }
    }
    assert!(
        found.is_empty(),
        "import cycles between files:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_rule_sees_a_cycle_through_a_reexport() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("a")).expect("dirs");
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\npub use b::Thing;\n").expect("write");
    std::fs::write(
        src.join("a/mod.rs"),
        "mod inner;\npub fn f() { crate::Thing::new(); }\n",
    )
    .expect("write");
    std::fs::write(src.join("a/inner.rs"), "use super::super::b;\n").expect("write");
    std::fs::write(src.join("b.rs"), "use crate::a::f;\npub struct Thing;\n").expect("write");
    assert_eq!(
        import_cycles(&src),
        vec![vec!["a".to_owned(), "b".to_owned()]]
    );
}
