//! Reading and printing the entries of an object's streams.

use std::collections::HashSet;

use chrono::{DateTime, SecondsFormat, Utc};
use tpu_operator_gcp::logging::{
    EntriesQuery, LogFilter, LogLine, LogSource, LoggingApi, MAX_PAGE_SIZE, Order,
};

use super::sources::{Resolved, Stream};

/// Pages read of one stream in one go (a million lines at most).
const MAX_PAGES: usize = 1000;

/// Where a stream was read up to: the newest entry's time, and the entries printed at that
/// time (a later read asks for `timestamp >= last` and drops those).
#[derive(Clone, Debug)]
pub struct Cursor {
    source: LogSource,
    /// The stream's prefix and whether it names hosts, for its last lines after it ended.
    prefix: Option<&'static str>,
    hosts: bool,
    last: Option<DateTime<Utc>>,
    printed_at_last: HashSet<String>,
}

impl Cursor {
    /// Not printed yet: a read from `last` on returns the entries printed at `last` again.
    fn is_new(&self, line: &LogLine) -> bool {
        !(line.timestamp == self.last && self.printed_at_last.contains(&line.insert_id))
    }
}

/// Prints lines as `kubectl logs` does: the text, with the stream's prefix when several print,
/// and the time first with `--timestamps`. A multi-host stream prints each line with its host
/// (`[train w1] ...`, `[w1] ...`), as `kubectl logs --prefix` names a line's pod: every host runs
/// the same program, so the same text comes once per host.
pub struct Printer {
    timestamps: bool,
    printed: usize,
}

impl Printer {
    pub fn new(timestamps: bool) -> Self {
        Self {
            timestamps,
            printed: 0,
        }
    }

    pub fn printed(&self) -> usize {
        self.printed
    }

    fn print(&mut self, prefix: Option<&str>, hosts: bool, line: &LogLine) {
        let mut out = String::new();
        if self.timestamps {
            let t = line
                .timestamp
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true));
            out.push_str(&t.unwrap_or_else(|| "-".into()));
            out.push(' ');
        }
        let host = line.host.as_deref().filter(|_| hosts).map(|h| format!("w{h}"));
        match (prefix, host) {
            (Some(p), Some(h)) => out.push_str(&format!("[{p} {h}] ")),
            (Some(p), None) => out.push_str(&format!("[{p}] ")),
            (None, Some(h)) => out.push_str(&format!("[{h}] ")),
            (None, None) => {}
        }
        out.push_str(&line.text);
        println!("{out}");
        self.printed += 1;
    }
}

/// The first read: every line of every stream (newer than `since`; the last `tail` of each),
/// printed in time order.
pub async fn first(
    logging: &dyn LoggingApi,
    resolved: &Resolved,
    since: Option<DateTime<Utc>>,
    tail: Option<u32>,
    cursors: &mut Vec<Cursor>,
    printer: &mut Printer,
) -> anyhow::Result<()> {
    let mut lines = Vec::new();
    for (i, stream) in resolved.streams.iter().enumerate() {
        let mut filter = stream.source.filter();
        if let Some(t) = since {
            filter = filter.since(t);
        }
        let got = match tail {
            Some(n) => newest(logging, &stream.source, filter, n).await?,
            None => all(logging, &stream.source, filter).await?,
        };
        cursors.push(cursor_after(stream, None, &got));
        lines.extend(got.into_iter().map(|l| (i, l)));
    }
    print_in_order(resolved, lines, printer);
    Ok(())
}

/// A later read: the lines each stream logged since its cursor (a stream seen for the first
/// time, such as a new attempt's, from its start). A stream the object no longer has (the
/// attempt that just failed, replaced by its retry) is read one last time and dropped, so its
/// final lines (the traceback) are not lost to the switch.
pub async fn more(
    logging: &dyn LoggingApi,
    resolved: &Resolved,
    cursors: &mut Vec<Cursor>,
    printer: &mut Printer,
) -> anyhow::Result<()> {
    let ended: Vec<Cursor> = cursors
        .iter()
        .filter(|c| !resolved.streams.iter().any(|s| s.source == c.source))
        .cloned()
        .collect();
    for cursor in ended {
        let mut filter = cursor.source.filter();
        if let Some(last) = cursor.last {
            filter = filter.since(last);
        }
        for line in all(logging, &cursor.source, filter).await? {
            if cursor.is_new(&line) {
                printer.print(cursor.prefix, cursor.hosts, &line);
            }
        }
        cursors.retain(|c| c.source != cursor.source);
    }
    let mut lines = Vec::new();
    for (i, stream) in resolved.streams.iter().enumerate() {
        let at = cursors.iter().position(|c| c.source == stream.source);
        let known = at.map(|at| cursors[at].clone());
        let mut filter = stream.source.filter();
        if let Some(last) = known.as_ref().and_then(|c| c.last) {
            filter = filter.since(last);
        }
        let got: Vec<LogLine> = all(logging, &stream.source, filter)
            .await?
            .into_iter()
            .filter(|l| known.as_ref().is_none_or(|c| c.is_new(l)))
            .collect();
        let next = cursor_after(stream, known.as_ref(), &got);
        match at {
            Some(at) => cursors[at] = next,
            None => cursors.push(next),
        }
        lines.extend(got.into_iter().map(|l| (i, l)));
    }
    print_in_order(resolved, lines, printer);
    Ok(())
}

fn print_in_order(resolved: &Resolved, mut lines: Vec<(usize, LogLine)>, printer: &mut Printer) {
    lines.sort_by_key(|(i, l)| (l.timestamp, *i));
    for (i, line) in &lines {
        let stream: &Stream = &resolved.streams[*i];
        printer.print(stream.prefix, stream.hosts, line);
    }
}

/// The cursor of `stream` after `got` (oldest first) was printed.
fn cursor_after(stream: &Stream, before: Option<&Cursor>, got: &[LogLine]) -> Cursor {
    let Some(last) = got.iter().filter_map(|l| l.timestamp).max() else {
        return before.cloned().unwrap_or(Cursor {
            source: stream.source.clone(),
            prefix: stream.prefix,
            hosts: stream.hosts,
            last: None,
            printed_at_last: HashSet::new(),
        });
    };
    let mut printed_at_last: HashSet<String> = got
        .iter()
        .filter(|l| l.timestamp == Some(last))
        .map(|l| l.insert_id.clone())
        .collect();
    if let Some(b) = before.filter(|b| b.last == Some(last)) {
        printed_at_last.extend(b.printed_at_last.iter().cloned());
    }
    Cursor {
        source: stream.source.clone(),
        prefix: stream.prefix,
        hosts: stream.hosts,
        last: Some(last),
        printed_at_last,
    }
}

/// Every entry matching `filter`, oldest first.
async fn all(
    logging: &dyn LoggingApi,
    source: &LogSource,
    filter: LogFilter,
) -> anyhow::Result<Vec<LogLine>> {
    let mut query = EntriesQuery {
        project: source.project().to_string(),
        filter,
        order: Order::OldestFirst,
        page_size: MAX_PAGE_SIZE,
        page_token: String::new(),
    };
    let mut lines = Vec::new();
    for _ in 0..MAX_PAGES {
        let page = logging.list_entries(&query).await?;
        lines.extend(page.lines);
        if page.next_page_token.is_empty() {
            return Ok(lines);
        }
        query.page_token = page.next_page_token;
    }
    eprintln!(
        "(stopped after {} lines; use --since or --tail for fewer)",
        lines.len()
    );
    Ok(lines)
}

/// The newest `n` entries matching `filter`, oldest first.
async fn newest(
    logging: &dyn LoggingApi,
    source: &LogSource,
    filter: LogFilter,
    n: u32,
) -> anyhow::Result<Vec<LogLine>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let query = EntriesQuery {
        project: source.project().to_string(),
        filter,
        order: Order::NewestFirst,
        page_size: (n as i32).min(MAX_PAGE_SIZE),
        page_token: String::new(),
    };
    let mut lines = logging.list_entries(&query).await?.lines;
    lines.reverse();
    Ok(lines)
}
