//! The docs' fenced blocks, found as GitHub renders them (CommonMark, `pulldown-cmark`), and how
//! each command block is classified: the HTML comment right above it says whether this harness
//! runs it (`run ID`), CI's real-control-plane stage runs it (`real ID`), it is output a runner
//! checks (`output ID`), or it cannot run here and why (`not-run REASON: why`).
//!
//! ```text
//! <!-- docs-test: run readme-quickstart -->
//! <!-- docs-test: not-run gcloud: creates a service account in a real Google project -->
//! ```
#![allow(dead_code)]

pub mod shell;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// The Markdown files whose command blocks are classified and run: README.md, docs/*.md and the
/// chart's README, in name order.
pub fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files.push(root.join("charts/tpu-operator/README.md"));
    files
}

/// [`doc_files`] and the crates' READMEs: the docs whose statements are checked.
pub fn all_doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = doc_files(root);
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|e| e.unwrap().path().join("README.md"))
        .filter(|p| p.exists())
        .collect();
    crates.sort();
    files.extend(crates);
    files
}

/// Why a block cannot run in CI. A new reason is a new variant with its explanation, so the
/// counts in docs/testing.md stay grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// gcloud against a real Google Cloud project (IAM, services, listing real resources).
    Gcloud,
    /// docker build / push to a registry.
    Docker,
    /// A real GKE cluster with the operator running against Google Cloud, or a session on one.
    Gke,
    /// Argo CD installed in the cluster (its ConfigMaps, its Application CRD).
    ArgoCd,
    /// A benchmark that runs for minutes to hours on a dedicated machine; docs/benchmarks.md
    /// records its results.
    Bench,
    /// One of this repository's own `cargo test` suites: CI runs it itself (the names it uses
    /// are checked to exist).
    Suite,
}

impl Reason {
    pub const ALL: [Reason; 6] = [
        Reason::Gcloud,
        Reason::Docker,
        Reason::Gke,
        Reason::ArgoCd,
        Reason::Bench,
        Reason::Suite,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Reason::Gcloud => "gcloud",
            Reason::Docker => "docker",
            Reason::Gke => "gke",
            Reason::ArgoCd => "argocd",
            Reason::Bench => "bench",
            Reason::Suite => "suite",
        }
    }

    fn parse(key: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.key() == key)
    }
}

/// What the comment above a block says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// Run by the runner of this id in `cargo test --workspace`.
    Run(String),
    /// Run by the runner of this id in CI's real-control-plane stage (TPU_OPERATOR_KUBE=real).
    Real(String),
    /// Output that the runner of this id compares with what the commands print.
    Output(String),
    /// Cannot run in CI, and why.
    NotRun { reason: Reason, why: String },
    /// A `docs-test:` comment this harness does not understand.
    Bad(String),
    /// No comment.
    None,
}

/// One fenced block.
#[derive(Debug, Clone)]
pub struct Block {
    /// Relative to the repository root, e.g. `docs/install.md`.
    pub file: String,
    /// 1-based line of the opening fence.
    pub line: usize,
    /// The info string's first word (`sh`, `yaml`, empty).
    pub lang: String,
    pub text: String,
    pub mark: Mark,
}

impl Block {
    /// `docs/install.md:177`.
    pub fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    /// A block of shell commands (or a console session), which must be classified.
    pub fn is_command(&self) -> bool {
        const SHELL: &[&str] = &[
            "sh",
            "bash",
            "shell",
            "console",
            "zsh",
            "fish",
            "shell-session",
            "shellsession",
            "sh-session",
            "bash-session",
            "terminal",
            "powershell",
            "pwsh",
            "ps1",
            "cmd",
            "bat",
        ];
        if SHELL.contains(&self.lang.as_str()) {
            return true;
        }
        if !["", "text", "txt", "plain", "plaintext"].contains(&self.lang.as_str()) {
            return false;
        }
        // An untyped block is a command block when it reads like one: a `$ ` prompt anywhere, or
        // a first line that starts with a command.
        const COMMANDS: &[&str] = &[
            "cargo",
            "kubectl",
            "helm",
            "gcloud",
            "gsutil",
            "docker",
            "tpu-operator",
            "kube-emulator",
            "gcp-emulator",
            "curl",
            "git",
            "go",
            "make",
            "python",
            "python3",
            "pip",
            "sudo",
            "export",
            "eval",
            "echo",
            "flux",
            "argocd",
            "kustomize",
        ];
        let prompt = self.text.lines().any(|l| l.trim_start().starts_with("$ "));
        let first = self
            .text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_default();
        prompt
            || COMMANDS.contains(&first)
            || first.starts_with("./")
            || ((first.starts_with("scripts/") || first.starts_with("tests/")) && first.ends_with(".sh"))
            || first.contains("=$(")
    }
}

const MARK_PREFIX: &str = "<!-- docs-test:";

fn parse_mark(line: &str) -> Mark {
    let Some(rest) = line.trim().strip_prefix(MARK_PREFIX) else {
        return Mark::None;
    };
    let Some(body) = rest.strip_suffix("-->").map(str::trim) else {
        return Mark::Bad(line.trim().to_string());
    };
    let (verb, arg) = body.split_once(' ').unwrap_or((body, ""));
    let arg = arg.trim();
    let id_ok = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    match verb {
        "run" if id_ok => Mark::Run(arg.to_string()),
        "real" if id_ok => Mark::Real(arg.to_string()),
        "output" if id_ok => Mark::Output(arg.to_string()),
        "not-run" => match arg.split_once(':') {
            Some((key, why)) if !why.trim().is_empty() => match Reason::parse(key.trim()) {
                Some(reason) => Mark::NotRun {
                    reason,
                    why: why.trim().to_string(),
                },
                None => Mark::Bad(line.trim().to_string()),
            },
            _ => Mark::Bad(line.trim().to_string()),
        },
        _ => Mark::Bad(line.trim().to_string()),
    }
}

/// Every fenced block of one Markdown text, with the `docs-test` comment right above it (blank
/// lines between are allowed; any other line means no comment).
pub fn blocks_of(file: &str, markdown: &str) -> Vec<Block> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut out = Vec::new();
    let mut current: Option<Block> = None;
    for (event, range) in Parser::new_ext(markdown, Options::empty()).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                let line = markdown[..range.start].matches('\n').count() + 1;
                let mark = lines[..line - 1]
                    .iter()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map_or(Mark::None, |l| parse_mark(l));
                current = Some(Block {
                    file: file.to_string(),
                    line,
                    lang: info
                        .split(|c: char| c.is_whitespace() || c == ',' || c == '{')
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                    text: String::new(),
                    mark,
                });
            }
            Event::Text(text) => {
                if let Some(block) = current.as_mut() {
                    block.text.push_str(&text);
                }
            }
            Event::End(TagEnd::CodeBlock) => out.extend(current.take()),
            _ => {}
        }
    }
    out
}

/// Every fenced block of every doc file.
pub fn all_blocks(root: &Path) -> Vec<Block> {
    doc_files(root)
        .iter()
        .flat_map(|path| {
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{rel}: {e}"));
            blocks_of(&rel, &text)
        })
        .collect()
}

/// The one block marked `run ID` / `real ID` (`want` picks which), or a panic naming what was
/// found: a runner whose block was removed from the docs fails instead of passing unseen.
pub fn block(root: &Path, id: &str, want: fn(&Mark) -> Option<&str>) -> Block {
    let found: Vec<Block> = all_blocks(root)
        .into_iter()
        .filter(|b| want(&b.mark) == Some(id))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "want exactly one doc block marked for {id:?}, found {}: {:?}",
        found.len(),
        found.iter().map(Block::at).collect::<Vec<_>>()
    );
    found.into_iter().next().unwrap()
}

pub fn run_id(mark: &Mark) -> Option<&str> {
    match mark {
        Mark::Run(id) => Some(id),
        _ => None,
    }
}

pub fn real_id(mark: &Mark) -> Option<&str> {
    match mark {
        Mark::Real(id) => Some(id),
        _ => None,
    }
}

pub fn output_id(mark: &Mark) -> Option<&str> {
    match mark {
        Mark::Output(id) => Some(id),
        _ => None,
    }
}

/// The counts docs/testing.md reports.
#[derive(Debug, Default)]
pub struct Counts {
    pub command_blocks: usize,
    pub run: usize,
    pub real: usize,
    pub output: usize,
    pub not_run: BTreeMap<Reason, Vec<String>>,
}

pub fn counts(blocks: &[Block]) -> Counts {
    let mut c = Counts::default();
    for b in blocks {
        if b.is_command() {
            c.command_blocks += 1;
        }
        match &b.mark {
            Mark::Run(_) => c.run += 1,
            Mark::Real(_) => c.real += 1,
            Mark::Output(_) => c.output += 1,
            Mark::NotRun { reason, .. } => c.not_run.entry(*reason).or_default().push(b.at()),
            Mark::Bad(_) | Mark::None => {}
        }
    }
    c
}

/// Whitespace-separated words of a line, with the parts that legitimately differ between runs
/// replaced by `…`: the `volatile` patterns (see the runners).
pub fn words(line: &str, volatile: &[regex::Regex]) -> Vec<String> {
    let mut line = line.to_string();
    for re in volatile {
        line = re.replace_all(&line, "…").into_owned();
    }
    line.split_whitespace().map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comment_above_a_block_classifies_it_and_a_prompt_makes_an_untyped_block_a_command() {
        let md = "# t\n\n<!-- docs-test: not-run gcloud: needs a project -->\n```sh\ngcloud x\n```\n\ntext\n\n```\n$ kubectl get tpl\nNAME\n```\n\n<!-- docs-test: run a-b -->\n\n```bash\nls\n```\n\n<!-- docs-test: frobnicate -->\n```console\n$ x\n```\n\n```\nOBJECT  RESULT\n```\n\n   ```yaml\n   a: 1\n   ```\n";
        let b = blocks_of("x.md", md);
        assert_eq!(b.len(), 6);
        assert_eq!(
            b[0].mark,
            Mark::NotRun {
                reason: Reason::Gcloud,
                why: "needs a project".into()
            }
        );
        assert_eq!((b[0].line, b[0].lang.as_str()), (4, "sh"));
        assert!(b[1].is_command() && b[1].mark == Mark::None);
        assert_eq!(b[2].mark, Mark::Run("a-b".into()));
        assert!(matches!(b[3].mark, Mark::Bad(_)));
        assert!(!b[4].is_command());
        assert!(!b[5].is_command() && b[5].text == "a: 1\n");
    }
}
