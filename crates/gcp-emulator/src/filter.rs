//! A small AIP-160 filter engine for the list filters Dataproc and Vertex document:
//! comparisons (`= != < <= > >=`), has (`:` incl. `labels.k:*` and `*` wildcards), `AND`, `OR`
//! (which binds tighter than AND, as AIP-160 says), `NOT` / `-`, and parentheses. Values compare as
//! RFC 3339 timestamps when both sides parse as one, else as strings.

use crate::errors::{ApiError, ApiResult};
use crate::wire::time::parse_ts;

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Not(Box<Expr>),
    Cmp { field: String, op: Op, value: String },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Has,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Str(String),
    Op(Op),
    LParen,
    RParen,
}

fn bad(filter: &str, why: &str) -> ApiError {
    ApiError::invalid_field("filter", format!("Invalid filter \"{filter}\": {why}"))
}

/// The rest of a quoted text from `cs[*i]` (after its opening `quote`) to its closing quote,
/// backslash escapes resolved; `*i` ends past the closing quote.
fn quoted(f: &str, cs: &[char], i: &mut usize, quote: char, unterminated: &str) -> ApiResult<String> {
    let mut s = String::new();
    while *i < cs.len() && cs[*i] != quote {
        if cs[*i] == '\\' && *i + 1 < cs.len() {
            *i += 1;
        }
        s.push(cs[*i]);
        *i += 1;
    }
    if *i >= cs.len() {
        return Err(bad(f, unterminated));
    }
    *i += 1;
    Ok(s)
}

/// A bare word (a field path or value) from `cs[*i]`, whose first character is `c`.
fn word(f: &str, cs: &[char], i: &mut usize, c: char) -> ApiResult<String> {
    let mut s = String::new();
    while *i < cs.len() && !" \t\n()=:!<>\"'".contains(cs[*i]) {
        s.push(cs[*i]);
        *i += 1;
        // A quoted path segment (Logging: `labels."k8s-pod/app"`) continues the word.
        if s.ends_with('.') && cs.get(*i) == Some(&'"') {
            *i += 1;
            s.push_str(&quoted(f, cs, i, '"', "unterminated quoted field name")?);
        }
    }
    if s.is_empty() {
        return Err(bad(f, &format!("unexpected character '{c}'")));
    }
    Ok(s)
}

fn lex(f: &str) -> ApiResult<Vec<Tok>> {
    let cs: Vec<char> = f.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < cs.len() {
        let c = cs[i];
        match c {
            ' ' | '\t' | '\n' => i += 1,
            '(' => {
                out.push(Tok::LParen);
                i += 1
            }
            ')' => {
                out.push(Tok::RParen);
                i += 1
            }
            '"' | '\'' => {
                i += 1;
                out.push(Tok::Str(quoted(f, &cs, &mut i, c, "unterminated string")?));
            }
            '=' => {
                out.push(Tok::Op(Op::Eq));
                i += 1
            }
            ':' => {
                out.push(Tok::Op(Op::Has));
                i += 1
            }
            '!' if cs.get(i + 1) == Some(&'=') => {
                out.push(Tok::Op(Op::Ne));
                i += 2
            }
            '<' | '>' => {
                let eq = cs.get(i + 1) == Some(&'=');
                out.push(Tok::Op(match (c, eq) {
                    ('<', false) => Op::Lt,
                    ('<', true) => Op::Le,
                    ('>', false) => Op::Gt,
                    _ => Op::Ge,
                }));
                i += if eq { 2 } else { 1 };
            }
            _ => out.push(Tok::Word(word(f, &cs, &mut i, c)?)),
        }
    }
    Ok(out)
}

struct Parser<'a> {
    toks: Vec<Tok>,
    pos: usize,
    src: &'a str,
}

impl Parser<'_> {
    fn peek_word(&self, w: &str) -> bool {
        matches!(self.toks.get(self.pos), Some(Tok::Word(x)) if x.eq_ignore_ascii_case(w))
    }

    fn and(&mut self) -> ApiResult<Expr> {
        let mut parts = vec![self.or()?];
        loop {
            if self.peek_word("AND") {
                self.pos += 1;
                parts.push(self.or()?);
            } else if matches!(
                self.toks.get(self.pos),
                Some(Tok::Word(_) | Tok::LParen | Tok::Str(_))
            ) && !self.peek_word("OR")
            {
                // AIP-160: juxtaposition is an implicit AND.
                parts.push(self.or()?);
            } else {
                break;
            }
        }
        Ok(if parts.len() == 1 {
            parts.pop().expect("one")
        } else {
            Expr::And(parts)
        })
    }

    fn or(&mut self) -> ApiResult<Expr> {
        let mut parts = vec![self.unary()?];
        while self.peek_word("OR") {
            self.pos += 1;
            parts.push(self.unary()?);
        }
        Ok(if parts.len() == 1 {
            parts.pop().expect("one")
        } else {
            Expr::Or(parts)
        })
    }

    fn unary(&mut self) -> ApiResult<Expr> {
        if self.peek_word("NOT") {
            self.pos += 1;
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        if let Some(Tok::Word(w)) = self.toks.get(self.pos)
            && let Some(rest) = w.strip_prefix('-')
            && !rest.is_empty()
        {
            let rest = rest.to_string();
            self.toks[self.pos] = Tok::Word(rest);
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        match self.toks.get(self.pos).cloned() {
            Some(Tok::LParen) => {
                self.pos += 1;
                let e = self.and()?;
                if self.toks.get(self.pos) != Some(&Tok::RParen) {
                    return Err(bad(self.src, "missing ')'"));
                }
                self.pos += 1;
                Ok(e)
            }
            Some(Tok::Word(field)) => {
                self.pos += 1;
                let Some(Tok::Op(op)) = self.toks.get(self.pos).cloned() else {
                    return Err(bad(self.src, &format!("expected an operator after \"{field}\"")));
                };
                self.pos += 1;
                let value = match self.toks.get(self.pos).cloned() {
                    Some(Tok::Word(v)) | Some(Tok::Str(v)) => v,
                    _ => return Err(bad(self.src, &format!("expected a value after \"{field}\""))),
                };
                self.pos += 1;
                Ok(Expr::Cmp { field, op, value })
            }
            _ => Err(bad(self.src, "expected a comparison")),
        }
    }
}

/// Parses `filter`; `fields` lists the allowed field names (`labels` allows `labels.<key>`, and a
/// name ending in `.` allows every field under it).
pub fn parse(filter: &str, fields: &[&str]) -> ApiResult<Expr> {
    let mut p = Parser {
        toks: lex(filter)?,
        pos: 0,
        src: filter,
    };
    let e = p.and()?;
    if p.pos != p.toks.len() {
        return Err(bad(filter, "unexpected trailing input"));
    }
    check_fields(&e, fields, filter)?;
    Ok(e)
}

fn check_fields(e: &Expr, fields: &[&str], src: &str) -> ApiResult<()> {
    match e {
        Expr::And(v) | Expr::Or(v) => v.iter().try_for_each(|x| check_fields(x, fields, src)),
        Expr::Not(x) => check_fields(x, fields, src),
        Expr::Cmp { field, .. } => {
            let base = if field.starts_with("labels.") {
                "labels"
            } else {
                field.as_str()
            };
            let under = fields
                .iter()
                .any(|f| f.ends_with('.') && field.starts_with(f) && field.len() > f.len());
            if fields.contains(&base) || under {
                Ok(())
            } else {
                Err(bad(
                    src,
                    &format!("unsupported field \"{field}\" (supported: {})", fields.join(", ")),
                ))
            }
        }
    }
}

fn wildcard(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let mut rest = s;
    for (i, p) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(p) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(p);
        } else {
            match rest.find(p) {
                Some(at) => rest = &rest[at + p.len()..],
                None => return false,
            }
        }
    }
    true
}

/// Evaluates against a resource; `get(field)` returns the field's value (None when absent).
pub fn eval(e: &Expr, get: &dyn Fn(&str) -> Option<String>) -> bool {
    match e {
        Expr::And(v) => v.iter().all(|x| eval(x, get)),
        Expr::Or(v) => v.iter().any(|x| eval(x, get)),
        Expr::Not(x) => !eval(x, get),
        Expr::Cmp { field, op, value } => {
            let actual = get(field);
            if *op == Op::Has {
                return match actual {
                    None => false,
                    Some(_) if value == "*" => true,
                    Some(a) => wildcard(value, &a),
                };
            }
            let Some(a) = actual else { return *op == Op::Ne };
            // Only values shaped like RFC 3339 are parsed (keeps big listings cheap).
            let looks_ts =
                |s: &str| s.len() >= 20 && s.as_bytes()[0].is_ascii_digit() && s.as_bytes()[10] == b'T';
            let times = if looks_ts(value) && looks_ts(&a) {
                (parse_ts(&a), parse_ts(value))
            } else {
                (None, None)
            };
            let ord = match times {
                (Some(x), Some(y)) => x.cmp(&y),
                _ => {
                    if matches!(op, Op::Eq | Op::Ne) && value.contains('*') {
                        let m = wildcard(value, &a);
                        return if *op == Op::Eq { m } else { !m };
                    }
                    a.as_str().cmp(value.as_str())
                }
            };
            match op {
                Op::Eq => ord.is_eq(),
                Op::Ne => ord.is_ne(),
                Op::Lt => ord.is_lt(),
                Op::Le => ord.is_le(),
                Op::Gt => ord.is_gt(),
                Op::Ge => ord.is_ge(),
                Op::Has => unreachable!("handled above"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn matches(filter: &str, fields: &[(&str, &str)]) -> bool {
        let m: HashMap<String, String> = fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let e = parse(
            filter,
            &["state", "labels", "create_time", "display_name", "batch_id"],
        )
        .unwrap();
        eval(&e, &|f| m.get(f).cloned())
    }

    #[test]
    fn aip160_subset() {
        let r = [
            ("state", "RUNNING"),
            ("labels.env", "prod"),
            ("create_time", "2024-01-02T00:00:00Z"),
        ];
        assert!(matches("state = RUNNING and labels.env=prod", &r));
        assert!(matches(
            "state = RUNNING AND create_time < \"2025-01-01T00:00:00Z\"",
            &r
        ));
        assert!(!matches(
            "state = RUNNING AND create_time > \"2025-01-01T00:00:00Z\"",
            &r
        ));
        assert!(matches("state = SUCCEEDED OR state = RUNNING", &r));
        assert!(matches("labels.env:*", &r));
        assert!(!matches("labels.team:*", &r));
        assert!(matches("NOT state = FAILED", &r));
        assert!(matches("-state = FAILED", &r));
        assert!(matches(
            "(state = FAILED OR labels.env = prod) AND batch_id != x",
            &r
        ));
        let j = [("display_name", "my_job_7")];
        assert!(matches("display_name:\"my_job_*\"", &j));
        assert!(!matches("display_name=\"other\"", &j));
        assert!(parse("bogus = 1", &["state"]).is_err());
        assert!(parse("state = ", &["state"]).is_err());
    }
}
