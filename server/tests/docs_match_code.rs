//! One source of truth per fact, checked: the docs' tables name exactly what the code
//! defines. protocol.md §4 lists every `ErrorCode` with its number and name, and nothing
//! else; operations.md §5 lists every metric name the server's code uses, and no metric
//! the code does not have; every `mTLS (…)` mode the docs quote (in backticks, or in the
//! parentheses of a quoted `ready:` line) is one the line can print.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use corelog_client::codec::ErrorCode;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// The lines of the markdown section whose heading starts with `heading`, up to the
/// next heading of the same or a higher level.
fn section<'a>(doc: &'a str, heading: &str) -> Vec<&'a str> {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let mut lines = doc.lines().skip_while(|l| !l.starts_with(heading));
    let mut out = vec![lines.next().unwrap_or_else(|| panic!("no section {heading:?}"))];
    for l in lines {
        let h = l.chars().take_while(|c| *c == '#').count();
        if h > 0 && h <= level && l.chars().nth(h) == Some(' ') {
            break;
        }
        out.push(l);
    }
    out
}

/// Every `corelog_…` metric name in `text` (crate names excluded).
fn metric_names(text: &str, into: &mut BTreeSet<String>) {
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("corelog_") {
        let start = i + at;
        let mut end = start + "corelog_".len();
        while end < b.len() && (b[end].is_ascii_lowercase() || b[end].is_ascii_digit() || b[end] == b'_') {
            end += 1;
        }
        let preceded = start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        let name = &text[start..end];
        if !preceded
            && !matches!(
                name,
                "corelog_server"
                    | "corelog_client"
                    | "corelog_loadgen"
                    | "corelog_runtime"
                    | "corelog_history"
                    | "corelog_"
            )
        {
            into.insert(name.to_string());
        }
        i = end;
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn protocol_error_table_names_every_error_code_and_nothing_else() {
    let doc = read("docs/protocol.md");
    let rows: BTreeSet<(u16, String)> = section(&doc, "## 4. Error codes")
        .into_iter()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let code = cells.get(1)?.parse::<u16>().ok()?;
            Some((code, cells.get(2)?.trim_matches('`').to_string()))
        })
        .collect();
    let code: BTreeSet<(u16, String)> =
        (0..=u16::MAX).filter_map(|v| ErrorCode::from_u16(v).map(|c| (v, format!("{c:?}")))).collect();
    assert!(code.len() >= 23, "ErrorCode has {} codes", code.len());
    assert_same(&code, &rows, "protocol.md §4 and ErrorCode", "docs");
}

/// Asserts that the code's and the docs' sets are the same; the message names who
/// disagrees and the docs' side.
fn assert_same<T: Ord + std::fmt::Debug>(code: &BTreeSet<T>, docs: &BTreeSet<T>, who: &str, side: &str) {
    let missing: Vec<_> = code.difference(docs).collect();
    let extra: Vec<_> = docs.difference(code).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{who} disagree: not in the {side} {missing:?}; in the {side} only {extra:?}"
    );
}

#[test]
fn metrics_table_names_every_metric_of_the_code_and_nothing_else() {
    let mut files = Vec::new();
    // The server's metrics, and the runtime's it registers (kTLS connections).
    rust_files(&repo().join("server/src"), &mut files);
    rust_files(&repo().join("runtime/src"), &mut files);
    let mut code = BTreeSet::new();
    for f in &files {
        metric_names(&std::fs::read_to_string(f).unwrap(), &mut code);
    }
    assert!(code.len() >= 30, "only {} metric names found in server/src and runtime/src", code.len());
    let doc = read("docs/operations.md");
    let mut table = BTreeSet::new();
    for l in section(&doc, "## 5. Metrics and health").into_iter().filter(|l| l.starts_with("| `corelog_")) {
        let first_cell = l.split('|').nth(1).expect("a table row");
        metric_names(first_cell, &mut table);
    }
    assert_same(&code, &table, "operations.md §5's metrics table and the code", "table");
}

#[test]
fn every_ready_line_mode_quoted_in_the_docs_is_one_the_server_prints() {
    let modes = corelog_server::node::READY_MODES;
    let mut quoted = 0;
    for doc in ["docs/operations.md", "docs/protocol.md", "README.md"] {
        let text = read(doc);
        let mut rest = text.as_str();
        while let Some(at) = rest.find("mTLS (") {
            // A quote of the line: in backticks, or inside the line's own parentheses.
            if !(rest[..at].ends_with('`') || rest[..at].ends_with('(')) {
                rest = &rest[at + 1..];
                continue;
            }
            let tail = &rest[at..];
            // Up to the parenthesis that closes the one after "mTLS".
            let mut depth = 0;
            let end = tail
                .char_indices()
                .find_map(|(i, c)| {
                    match c {
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                return Some(i + 1);
                            }
                        }
                        _ => {}
                    }
                    None
                })
                .unwrap_or_else(|| panic!("{doc}: unclosed `mTLS (` quote"));
            let q = &tail[..end];
            assert!(modes.contains(&q), "{doc} quotes the ready-line mode {q:?}; the server prints one of {modes:?}");
            quoted += 1;
            rest = &tail[end..];
        }
    }
    assert!(quoted > 0, "the docs quote no ready-line mode");
}
