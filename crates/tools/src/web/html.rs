//! A small, forgiving HTML reader: a tokenizer, entity decoding, and a converter from an HTML
//! page to readable Markdown (title, headings, paragraphs, lists, links, code, quotes,
//! tables). It is not a browser: it skips scripts, styles, navigation and forms, prefers the
//! page's `<main>`/`<article>` when there is one, and never fails: malformed markup just
//! yields less structure. Input size is bounded by the caller.

use std::collections::HashMap;
use url::Url;

/// One piece of an HTML document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    Start {
        name: String,
        attrs: Vec<(String, String)>,
        self_closing: bool,
    },
    End {
        name: String,
    },
    Text(String),
}

impl Token {
    pub fn attr(&self, key: &str) -> Option<&str> {
        match self {
            Token::Start { attrs, .. } => attrs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str()),
            _ => None,
        }
    }

    /// True when the start tag's `class` attribute contains `class` as a word.
    pub fn has_class(&self, class: &str) -> bool {
        self.attr("class")
            .is_some_and(|c| c.split_ascii_whitespace().any(|w| w == class))
    }
}

/// Elements whose content is raw text up to their end tag.
const RAW_TEXT: [&str; 5] = ["script", "style", "textarea", "title", "xmp"];

/// Splits `html` into tokens. Tag and attribute names are lowercased, entities in text and
/// attribute values are decoded, comments/doctypes/processing instructions are dropped.
pub fn tokenize(html: &str) -> Vec<Token> {
    let b = html.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut text_start = 0;
    while i < b.len() {
        if b[i] != b'<' {
            i += 1;
            continue;
        }
        let rest = &html[i..];
        let next = b.get(i + 1).copied().unwrap_or(0);
        let is_tag = next.is_ascii_alphabetic() || next == b'/' || next == b'!' || next == b'?';
        if !is_tag {
            i += 1;
            continue;
        }
        if text_start < i {
            out.push(Token::Text(decode_entities(&html[text_start..i])));
        }
        if let Some(comment) = rest.strip_prefix("<!--") {
            i = match comment.find("-->") {
                Some(p) => i + 4 + p + 3,
                None => b.len(),
            };
            text_start = i;
            continue;
        }
        if next == b'!' || next == b'?' {
            i = match rest.find('>') {
                Some(p) => i + p + 1,
                None => b.len(),
            };
            text_start = i;
            continue;
        }
        let (token, consumed) = parse_tag(rest);
        i += consumed;
        text_start = i;
        if let Some(token) = token {
            let raw = match &token {
                Token::Start {
                    name, self_closing, ..
                } if !self_closing && RAW_TEXT.contains(&name.as_str()) => Some(name.clone()),
                _ => None,
            };
            out.push(token);
            if let Some(name) = raw {
                let close = format!("</{name}");
                let end = find_ci(&b[i..], close.as_bytes())
                    .map(|p| i + p)
                    .unwrap_or(b.len());
                let inner = &html[i..end];
                if !inner.is_empty() {
                    let text = if name == "title" || name == "textarea" {
                        decode_entities(inner)
                    } else {
                        inner.to_string()
                    };
                    out.push(Token::Text(text));
                }
                let after = html[end..]
                    .find('>')
                    .map(|p| end + p + 1)
                    .unwrap_or(b.len());
                out.push(Token::End { name });
                i = after;
                text_start = i;
            }
        }
    }
    if text_start < b.len() {
        out.push(Token::Text(decode_entities(&html[text_start..])));
    }
    out
}

/// Position of `needle` (lowercase ASCII) in `hay`, ignoring ASCII case.
fn find_ci(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    (0..=hay.len() - needle.len()).find(|&i| {
        hay[i..i + needle.len()]
            .iter()
            .zip(needle)
            .all(|(a, b)| a.to_ascii_lowercase() == *b)
    })
}

/// Parses one tag at the start of `s` (which begins with `<`). Returns the token (if it was a
/// well-formed tag) and the bytes consumed.
fn parse_tag(s: &str) -> (Option<Token>, usize) {
    let b = s.as_bytes();
    let mut i = 1;
    let closing = b.get(1) == Some(&b'/');
    if closing {
        i += 1;
    }
    let name_start = i;
    while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'>' && b[i] != b'/' {
        i += 1;
    }
    let name = s[name_start..i].to_ascii_lowercase();
    let mut attrs = Vec::new();
    let mut self_closing = false;
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        match b[i] {
            b'>' => {
                i += 1;
                break;
            }
            b'/' => {
                self_closing = true;
                i += 1;
                continue;
            }
            _ => {}
        }
        self_closing = false;
        let k_start = i;
        while i < b.len()
            && !b[i].is_ascii_whitespace()
            && b[i] != b'='
            && b[i] != b'>'
            && !(b[i] == b'/' && b.get(i + 1) == Some(&b'>'))
        {
            i += 1;
        }
        let key = s[k_start..i].to_ascii_lowercase();
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < b.len() && b[i] == b'=' {
            i += 1;
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            if i < b.len() && (b[i] == b'"' || b[i] == b'\'') {
                let q = b[i];
                let v_start = i + 1;
                let v_end = s[v_start..]
                    .bytes()
                    .position(|c| c == q)
                    .map(|p| v_start + p)
                    .unwrap_or(b.len());
                value = decode_entities(&s[v_start..v_end]);
                i = (v_end + 1).min(b.len());
            } else {
                let v_start = i;
                while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'>' {
                    i += 1;
                }
                value = decode_entities(&s[v_start..i]);
            }
        }
        if !key.is_empty() {
            attrs.push((key, value));
        } else if i < b.len() && b[i] != b'>' {
            // A stray character: skip it so the loop always advances.
            i += 1;
        }
    }
    if name.is_empty() {
        return (None, i);
    }
    let token = if closing {
        Token::End { name }
    } else {
        Token::Start {
            name,
            attrs,
            self_closing,
        }
    };
    (Some(token), i)
}

fn named_entity(name: &str) -> Option<&'static str> {
    Some(match name {
        "amp" => "&",
        "lt" => "<",
        "gt" => ">",
        "quot" => "\"",
        "apos" => "'",
        "nbsp" => "\u{a0}",
        "ndash" => "\u{2013}",
        "mdash" => "\u{2014}",
        "hellip" => "\u{2026}",
        "lsquo" => "\u{2018}",
        "rsquo" => "\u{2019}",
        "ldquo" => "\u{201c}",
        "rdquo" => "\u{201d}",
        "laquo" => "\u{ab}",
        "raquo" => "\u{bb}",
        "copy" => "\u{a9}",
        "reg" => "\u{ae}",
        "trade" => "\u{2122}",
        "bull" => "\u{2022}",
        "middot" => "\u{b7}",
        "deg" => "\u{b0}",
        "times" => "\u{d7}",
        "euro" => "\u{20ac}",
        "pound" => "\u{a3}",
        "yen" => "\u{a5}",
        "cent" => "\u{a2}",
        "sect" => "\u{a7}",
        "para" => "\u{b6}",
        "shy" => "",
        "zwj" => "\u{200d}",
        "zwnj" => "\u{200c}",
        _ => return None,
    })
}

/// Decodes character references (`&amp;`, `&#39;`, `&#x27;` and common named ones). Unknown
/// or malformed references are kept as written.
pub fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(p) = rest.find('&') {
        out.push_str(&rest[..p]);
        rest = &rest[p..];
        let end = rest[1..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '#'))
            .map(|e| e + 1)
            .unwrap_or(rest.len());
        let body = &rest[1..end];
        let decoded: Option<String> = if let Some(num) = body.strip_prefix('#') {
            let code = if let Some(hex) = num.strip_prefix('x').or_else(|| num.strip_prefix('X')) {
                u32::from_str_radix(hex, 16).ok()
            } else {
                num.parse::<u32>().ok()
            };
            code.map(|c| {
                char::from_u32(c)
                    .filter(|&ch| ch != '\0')
                    .unwrap_or('\u{fffd}')
                    .to_string()
            })
        } else {
            named_entity(body).map(str::to_string)
        };
        match decoded {
            Some(d) if !body.is_empty() => {
                out.push_str(&d);
                rest = &rest[end..];
                if rest.starts_with(';') {
                    rest = &rest[1..];
                }
            }
            _ => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Elements whose whole content is left out of the Markdown.
const SKIP: [&str; 16] = [
    "script", "style", "noscript", "template", "svg", "head", "nav", "footer", "aside", "form",
    "iframe", "button", "select", "textarea", "canvas", "dialog",
];

const VOID: [&str; 14] = [
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr",
];

const BLOCK: [&str; 19] = [
    "p",
    "div",
    "section",
    "article",
    "main",
    "header",
    "figure",
    "figcaption",
    "address",
    "details",
    "summary",
    "dl",
    "dt",
    "dd",
    "table",
    "center",
    "ul",
    "ol",
    "body",
];

/// A page converted to Markdown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    pub title: Option<String>,
    pub markdown: String,
}

/// Converts an HTML page to Markdown. Links and images are made absolute against `base`.
pub fn to_markdown(html: &str, base: Option<&Url>) -> Page {
    let tokens = tokenize(html);
    let title = extract_title(&tokens);
    // Prefer the main content when the page marks it.
    let range = main_range(&tokens, "main")
        .or_else(|| main_range(&tokens, "article"))
        .unwrap_or((0, tokens.len()));
    let mut r = Renderer::new(base);
    r.render(&tokens[range.0..range.1]);
    Page {
        title,
        markdown: r.finish(),
    }
}

fn extract_title(tokens: &[Token]) -> Option<String> {
    let pos = tokens
        .iter()
        .position(|t| matches!(t, Token::Start { name, .. } if name == "title"))?;
    match tokens.get(pos + 1) {
        Some(Token::Text(t)) => {
            let t = collapse_ws(t);
            (!t.is_empty()).then_some(t)
        }
        _ => None,
    }
}

/// Token range of the first `<tag>` element's content.
fn main_range(tokens: &[Token], tag: &str) -> Option<(usize, usize)> {
    let start = tokens
        .iter()
        .position(|t| matches!(t, Token::Start { name, .. } if name == tag))?;
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate().skip(start) {
        match t {
            Token::Start {
                name, self_closing, ..
            } if name == tag && !self_closing => depth += 1,
            Token::End { name } if name == tag => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some((start + 1, i));
                }
            }
            _ => {}
        }
    }
    Some((start + 1, tokens.len()))
}

pub(crate) fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

struct ListState {
    ordered: bool,
    next: usize,
}

struct Renderer<'a> {
    base: Option<&'a Url>,
    out: String,
    /// Pending text of the current line/paragraph.
    skip_depth: usize,
    skip_tag: Option<String>,
    pre_depth: usize,
    quote_depth: usize,
    lists: Vec<ListState>,
    links: Vec<Option<String>>,
    /// Position in `out` where the open link's text started.
    link_starts: Vec<usize>,
    cell_in_row: usize,
    open_counts: HashMap<String, usize>,
}

impl<'a> Renderer<'a> {
    fn new(base: Option<&'a Url>) -> Self {
        Renderer {
            base,
            out: String::new(),
            skip_depth: 0,
            skip_tag: None,
            pre_depth: 0,
            quote_depth: 0,
            lists: Vec::new(),
            links: Vec::new(),
            link_starts: Vec::new(),
            cell_in_row: 0,
            open_counts: HashMap::new(),
        }
    }

    fn absolute(&self, href: &str) -> Option<String> {
        let href = href.trim();
        if href.is_empty() || href.starts_with('#') || href.starts_with("javascript:") {
            return None;
        }
        match self.base {
            Some(b) => b.join(href).ok().map(|u| u.to_string()),
            None => Some(href.to_string()),
        }
    }

    fn line_prefix(&self) -> String {
        "> ".repeat(self.quote_depth)
    }

    /// Ends the current line and leaves one blank line (a paragraph break).
    fn block_break(&mut self) {
        let trimmed_len = self.out.trim_end_matches([' ', '\t']).len();
        self.out.truncate(trimmed_len);
        if self.out.is_empty() {
            return;
        }
        if !self.out.ends_with("\n\n") {
            if self.out.ends_with('\n') {
                self.out.push('\n');
            } else {
                self.out.push_str("\n\n");
            }
        }
    }

    fn line_break(&mut self) {
        let trimmed_len = self.out.trim_end_matches([' ', '\t']).len();
        self.out.truncate(trimmed_len);
        if !self.out.is_empty() && !self.out.ends_with('\n') {
            self.out.push('\n');
        }
    }

    fn at_line_start(&self) -> bool {
        self.out.is_empty() || self.out.ends_with('\n')
    }

    fn push_text(&mut self, text: &str) {
        if self.pre_depth > 0 {
            self.out.push_str(text);
            return;
        }
        let collapsed = collapse_ws(&text.replace('\u{a0}', " "));
        let leading = text.starts_with(|c: char| c.is_whitespace());
        let trailing = text.ends_with(|c: char| c.is_whitespace());
        if collapsed.is_empty() {
            if (leading || trailing) && !self.at_line_start() && !self.out.ends_with(' ') {
                self.out.push(' ');
            }
            return;
        }
        if self.at_line_start() {
            let p = self.line_prefix();
            self.out.push_str(&p);
        } else if leading && !self.out.ends_with(' ') {
            self.out.push(' ');
        }
        self.out.push_str(&collapsed);
        if trailing {
            self.out.push(' ');
        }
    }

    fn inline_marker(&mut self, m: &str, opening: bool) {
        if self.pre_depth > 0 {
            return;
        }
        if opening {
            if self.at_line_start() {
                let p = self.line_prefix();
                self.out.push_str(&p);
            }
            self.out.push_str(m);
        } else {
            let trimmed_len = self.out.trim_end_matches(' ').len();
            let had_space = trimmed_len != self.out.len();
            self.out.truncate(trimmed_len);
            self.out.push_str(m);
            if had_space {
                self.out.push(' ');
            }
        }
    }

    fn render(&mut self, tokens: &[Token]) {
        for t in tokens {
            match t {
                Token::Start {
                    name, self_closing, ..
                } => {
                    if self.skip_depth > 0 {
                        if Some(name) == self.skip_tag.as_ref() && !self_closing {
                            self.skip_depth += 1;
                        }
                        continue;
                    }
                    if SKIP.contains(&name.as_str()) && !self_closing {
                        self.skip_depth = 1;
                        self.skip_tag = Some(name.clone());
                        continue;
                    }
                    if !self_closing && !VOID.contains(&name.as_str()) {
                        *self.open_counts.entry(name.clone()).or_default() += 1;
                    }
                    self.start(name, t);
                }
                Token::End { name } => {
                    if self.skip_depth > 0 {
                        if Some(name) == self.skip_tag.as_ref() {
                            self.skip_depth -= 1;
                            if self.skip_depth == 0 {
                                self.skip_tag = None;
                            }
                        }
                        continue;
                    }
                    // Ignore end tags of elements that are not open (stray markup).
                    match self.open_counts.get_mut(name) {
                        Some(n) if *n > 0 => *n -= 1,
                        _ => continue,
                    }
                    self.end(name);
                }
                Token::Text(text) => {
                    if self.skip_depth == 0 {
                        self.push_text(text);
                    }
                }
            }
        }
    }

    fn start(&mut self, name: &str, t: &Token) {
        match name {
            "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => {
                self.block_break();
                let level = name[1..].parse::<usize>().unwrap_or(1);
                let p = self.line_prefix();
                self.out.push_str(&p);
                self.out.push_str(&"#".repeat(level));
                self.out.push(' ');
            }
            "br" => {
                self.line_break();
            }
            "hr" => {
                self.block_break();
                self.out.push_str("---");
                self.block_break();
            }
            "pre" => {
                self.block_break();
                self.out.push_str("```\n");
                self.pre_depth += 1;
            }
            "code" if self.pre_depth == 0 => self.inline_marker("`", true),
            "strong" | "b" => self.inline_marker("**", true),
            "em" | "i" => self.inline_marker("*", true),
            "blockquote" => {
                self.block_break();
                self.quote_depth += 1;
            }
            "ul" | "ol" => {
                if self.lists.is_empty() {
                    self.block_break();
                } else {
                    self.line_break();
                }
                self.lists.push(ListState {
                    ordered: name == "ol",
                    next: t.attr("start").and_then(|s| s.parse().ok()).unwrap_or(1),
                });
            }
            "li" => {
                self.line_break();
                let indent = "  ".repeat(self.lists.len().saturating_sub(1));
                let p = self.line_prefix();
                let marker = match self.lists.last_mut() {
                    Some(l) if l.ordered => {
                        let m = format!("{}. ", l.next);
                        l.next += 1;
                        m
                    }
                    _ => "- ".to_string(),
                };
                self.out.push_str(&p);
                self.out.push_str(&indent);
                self.out.push_str(&marker);
            }
            "a" => {
                let href = t.attr("href").and_then(|h| self.absolute(h));
                if href.is_some() {
                    if self.at_line_start() {
                        let p = self.line_prefix();
                        self.out.push_str(&p);
                    }
                    self.out.push('[');
                }
                self.link_starts.push(self.out.len());
                self.links.push(href);
            }
            "img" => {
                let alt = collapse_ws(t.attr("alt").unwrap_or_default());
                if let Some(src) = t.attr("src").and_then(|s| self.absolute(s))
                    && !alt.is_empty()
                    && !src.starts_with("data:")
                {
                    if self.at_line_start() {
                        let p = self.line_prefix();
                        self.out.push_str(&p);
                    }
                    self.out.push_str(&format!("![{alt}]({src})"));
                }
            }
            "tr" => {
                self.line_break();
                self.cell_in_row = 0;
            }
            "td" | "th" => {
                if self.cell_in_row > 0 {
                    self.out.push_str(" | ");
                } else if self.at_line_start() {
                    let p = self.line_prefix();
                    self.out.push_str(&p);
                }
                self.cell_in_row += 1;
            }
            n if BLOCK.contains(&n) => self.block_break(),
            _ => {}
        }
    }

    fn end(&mut self, name: &str) {
        match name {
            "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => self.block_break(),
            "pre" => {
                self.pre_depth = self.pre_depth.saturating_sub(1);
                if !self.out.ends_with('\n') {
                    self.out.push('\n');
                }
                self.out.push_str("```");
                self.block_break();
            }
            "code" if self.pre_depth == 0 => self.inline_marker("`", false),
            "strong" | "b" => self.inline_marker("**", false),
            "em" | "i" => self.inline_marker("*", false),
            "blockquote" => {
                self.quote_depth = self.quote_depth.saturating_sub(1);
                self.block_break();
            }
            "ul" | "ol" => {
                self.lists.pop();
                if self.lists.is_empty() {
                    self.block_break();
                } else {
                    self.line_break();
                }
            }
            "li" => self.line_break(),
            "a" => {
                let start = self.link_starts.pop().unwrap_or(self.out.len());
                if let Some(Some(href)) = self.links.pop() {
                    let text_len = self.out.len().saturating_sub(start);
                    let trimmed_len = self.out.trim_end_matches(' ').len();
                    let had_space = trimmed_len != self.out.len();
                    self.out.truncate(trimmed_len.max(start));
                    if text_len == 0 || self.out.len() == start {
                        // No link text: show the address itself.
                        self.out.push_str(&href);
                    }
                    self.out.push_str(&format!("]({href})"));
                    if had_space {
                        self.out.push(' ');
                    }
                }
            }
            "tr" => self.line_break(),
            n if BLOCK.contains(&n) => self.block_break(),
            _ => {}
        }
    }

    fn finish(self) -> String {
        let mut lines: Vec<&str> = Vec::new();
        let mut blank = 0;
        for line in self.out.lines() {
            let l = line.trim_end();
            if l.trim().is_empty() {
                blank += 1;
                if blank > 1 {
                    continue;
                }
                lines.push("");
            } else {
                blank = 0;
                lines.push(l);
            }
        }
        lines.join("\n").trim().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entities() {
        assert_eq!(decode_entities("a &amp; b &lt;c&gt;"), "a & b <c>");
        assert_eq!(decode_entities("&#39;&#x27;&quot;"), "''\"");
        assert_eq!(decode_entities("AT&T &unknown; &"), "AT&T &unknown; &");
        assert_eq!(decode_entities("&#0;&#xD800;"), "\u{fffd}\u{fffd}");
        assert_eq!(decode_entities("&copy 2024"), "\u{a9} 2024");
    }

    #[test]
    fn tokenizer_handles_attributes_comments_and_raw_text() {
        let t = tokenize(
            r#"<!DOCTYPE html><!-- c --><A HREF='x?a=1&amp;b=2' class="k  l">T</a><br/><script>if (a<b) {}</script>z"#,
        );
        assert_eq!(
            t[0],
            Token::Start {
                name: "a".into(),
                attrs: vec![
                    ("href".into(), "x?a=1&b=2".into()),
                    ("class".into(), "k  l".into())
                ],
                self_closing: false
            }
        );
        assert!(t[0].has_class("l") && !t[0].has_class("k l"));
        assert_eq!(t[1], Token::Text("T".into()));
        assert_eq!(t[2], Token::End { name: "a".into() });
        assert!(matches!(&t[3], Token::Start { name, self_closing: true, .. } if name == "br"));
        assert_eq!(t[5], Token::Text("if (a<b) {}".into()));
        assert_eq!(t[7], Token::Text("z".into()));
    }

    #[test]
    fn tokenizer_survives_garbage() {
        for s in [
            "<",
            "<a",
            "<a href=\"x",
            "</",
            "<!--",
            "a < b > c",
            "<<>>",
            "<a =x>",
        ] {
            let _ = tokenize(s);
            let _ = to_markdown(s, None);
        }
        assert_eq!(to_markdown("a < b", None).markdown, "a < b");
    }

    #[test]
    fn markdown_from_a_page() {
        let html = r#"<html><head><title>My  Page</title><style>p{}</style></head>
<body><nav><a href="/home">Home</a></nav>
<h1>Hello</h1><p>Some <b>bold</b> and <em>em</em> text with a
<a href="/docs/x">link</a>.</p>
<ul><li>one</li><li>two <code>x()</code></li></ul>
<ol><li>first</li><li>second</li></ol>
<pre>let a = 1;
let b = 2;</pre>
<blockquote>quoted</blockquote>
<table><tr><th>A</th><th>B</th></tr><tr><td>1</td><td>2</td></tr></table>
<script>alert(1)</script><footer>foot</footer></body></html>"#;
        let base = Url::parse("https://example.com/a/b").unwrap();
        let p = to_markdown(html, Some(&base));
        assert_eq!(p.title.as_deref(), Some("My Page"));
        let md = p.markdown;
        assert!(md.starts_with("# Hello"), "{md}");
        assert!(
            md.contains("Some **bold** and *em* text with a [link](https://example.com/docs/x)."),
            "{md}"
        );
        assert!(md.contains("- one\n- two `x()`"), "{md}");
        assert!(md.contains("1. first\n2. second"), "{md}");
        assert!(md.contains("```\nlet a = 1;\nlet b = 2;\n```"), "{md}");
        assert!(md.contains("> quoted"), "{md}");
        assert!(md.contains("A | B\n1 | 2"), "{md}");
        assert!(!md.contains("alert") && !md.contains("Home") && !md.contains("foot"));
    }

    #[test]
    fn table_sections_keep_rows_together() {
        let html = "<table><thead><tr><th>N</th><th>V</th></tr></thead><tbody><tr><td>a</td><td>1</td></tr></tbody></table>";
        assert_eq!(to_markdown(html, None).markdown, "N | V\na | 1");
    }

    #[test]
    fn prefers_main_content() {
        let html =
            "<body><div>menu stuff</div><main><p>the article</p></main><div>more</div></body>";
        assert_eq!(to_markdown(html, None).markdown, "the article");
    }
}
