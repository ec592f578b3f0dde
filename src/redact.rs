//! What lllm shows and stores is safe to show and store: URLs lose their
//! credentials (`url`, `place`), text from a provider loses every secret lllm
//! knows (`Secrets`), and text printed for a person loses its terminal control
//! sequences (`terminal_line`, `terminal_text`, `json_controls`) and, for a
//! value echoed into a line, its length past a bound (`echo`, `cut`).
//!
//! This is the lowest layer: it knows strings, not providers or records. The
//! provider layer decides which values are secrets (`http::Endpoint`,
//! `provider::scrub`); the CLI decides what is printed where.

use std::any::Any;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt::Write;
use std::sync::Arc;

use memchr::memmem::Finder;
use serde_json::{Map, Value};

/// What stands in for a secret.
pub const MASK: &str = "***";

/// The shortest value scrubbed from text. A shorter one would mangle ordinary
/// text (a one-letter header value would take every such letter out of every
/// reply) and is no secret anyone could rely on; it is still never printed or
/// recorded by lllm itself (header values are `***` in records and configs).
pub const MIN_SECRET_CHARS: usize = 8;

/// Where the credentials (`user:password@`) of a URL are, as written: after
/// `scheme://` (or from the start when there is no scheme) up to the last `@`.
/// The last one, so that an unencoded `@`, `/`, `?` or `#` in a password is
/// hidden too; a path or query holding `@` is then hidden with it, which is
/// safe. The range covers the credentials without their `@`.
fn credentials_span(text: &str) -> Option<std::ops::Range<usize>> {
    let start = match text.find("://") {
        Some(at) if !text[..at].contains(['/', '?', '#', '@']) => at + 3,
        _ => 0,
    };
    let end = start + text[start..].rfind('@')?;
    Some(start..end)
}

/// A URL as lllm shows and records it: the credentials replaced by `***`
/// (`http://***@host/v1`, user name included, since a token is often given as
/// the user name), every query value replaced too (`?key=***`: services that
/// take a key in the query exist), the fragment hidden. Works on text that does
/// not parse as a URL, so an error about a bad URL never shows its password.
pub fn url(text: &str) -> Cow<'_, str> {
    let credentials = credentials_span(text);
    let rest_start = credentials.as_ref().map_or(0, |span| span.end);
    let query = text[rest_start..]
        .find(['?', '#'])
        .map(|at| rest_start + at);
    if credentials.is_none() && query.is_none() {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len());
    if let Some(span) = &credentials {
        shown.push_str(&text[..span.start]);
        shown.push_str(MASK);
    }
    let Some(query) = query else {
        shown.push_str(&text[rest_start..]);
        return Cow::Owned(shown);
    };
    shown.push_str(&text[rest_start..query]);
    let tail = &text[query..];
    let (query_part, fragment) = match tail.find('#') {
        Some(at) => (&tail[..at], Some(&tail[at + 1..])),
        None => (tail, None),
    };
    if let Some(parameters) = query_part.strip_prefix('?') {
        shown.push('?');
        for (index, parameter) in parameters.split('&').enumerate() {
            if index > 0 {
                shown.push('&');
            }
            match parameter.split_once('=') {
                Some((name, _)) => {
                    shown.push_str(name);
                    shown.push('=');
                    shown.push_str(MASK);
                }
                None if parameter.is_empty() => {}
                None => shown.push_str(MASK),
            }
        }
    }
    if let Some(fragment) = fragment {
        shown.push('#');
        if !fragment.is_empty() {
            shown.push_str(MASK);
        }
    }
    Cow::Owned(shown)
}

/// A URL with its user name and password taken out (`http://host/v1`), the
/// rest as written: what identifies the server, never shown.
pub fn without_credentials(text: &str) -> Cow<'_, str> {
    match credentials_span(text) {
        Some(span) => Cow::Owned(format!("{}{}", &text[..span.start], &text[span.end + 1..])),
        None => Cow::Borrowed(text),
    }
}

/// A URL as error messages name it: credentials redacted, without its query
/// and fragment (`http://***@host/v1/chat/completions`).
pub fn place(text: &str) -> String {
    let shown = url(text);
    let end = shown.find(['?', '#']).unwrap_or(shown.len());
    shown[..end].to_string()
}

/// The user name and password of a URL as written (still percent-encoded),
/// if it has any.
pub fn url_credentials(text: &str) -> Option<(&str, Option<&str>)> {
    let span = credentials_span(text)?;
    let credentials = &text[span];
    Some(match credentials.split_once(':') {
        Some((user, password)) => (user, Some(password)),
        None => (credentials, None),
    })
}

/// Every secret value lllm knows, to be taken out of text that came from a
/// provider, and out of what lllm writes of a request (see [`Scrub`]).
/// Values are matched as written and as a JSON string would escape them
/// (`"` `\` controls, and `/` as `\/`), so a raw error body that echoes a
/// key is scrubbed before it is parsed or cut short. Debug shows how many
/// values there are, never one of them.
#[derive(Clone, Default)]
pub struct Secrets {
    /// The forms to look for, longest first, without duplicates.
    patterns: Vec<String>,
    /// A SIMD searcher per pattern, in the same order, made once: a text is
    /// searched for every pattern, and most texts hold none.
    finders: Vec<Finder<'static>>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "Secrets({} forms)", self.patterns.len())
    }
}

/// Header names whose values carry no credential: scrubbing them would only
/// take ordinary words (`application/json`, an app's name) out of replies.
const PUBLIC_HEADERS: &[&str] = &[
    "accept",
    "accept-encoding",
    "accept-language",
    "anthropic-beta",
    "anthropic-version",
    "content-type",
    "http-referer",
    "referer",
    "user-agent",
    "x-title",
];

impl Secrets {
    pub fn new() -> Secrets {
        Secrets::default()
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Adds one secret value (surrounding blanks ignored). Values shorter
    /// than [`MIN_SECRET_CHARS`] are not scrubbed (see there).
    pub fn add(&mut self, value: &str) {
        let value = value.trim();
        if value.chars().count() < MIN_SECRET_CHARS {
            return;
        }
        let escaped = serde_json::to_string(value).unwrap_or_default();
        let escaped = escaped
            .strip_prefix('"')
            .and_then(|inner| inner.strip_suffix('"'))
            .unwrap_or(value);
        let slashed = escaped.replace('/', "\\/");
        for form in [value, escaped, slashed.as_str()] {
            if !self.patterns.iter().any(|known| known == form) {
                self.patterns.push(form.to_string());
            }
        }
        self.sorted();
    }

    /// Puts the patterns longest first, so that when one secret holds
    /// another the whole longer one is found (overlaps are merged in `scrub`
    /// either way), and makes their searchers.
    fn sorted(&mut self) {
        self.patterns
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        self.finders = self
            .patterns
            .iter()
            .map(|pattern| Finder::new(pattern.as_bytes()).into_owned())
            .collect();
    }

    /// Whether `text` holds a secret: what [`scrub`](Self::scrub) would
    /// change, found without copying anything.
    pub fn holds(&self, text: &str) -> bool {
        // The shortest pattern is the last one.
        match self.patterns.last() {
            Some(shortest) if text.len() >= shortest.len() => self
                .finders
                .iter()
                .any(|finder| finder.find(text.as_bytes()).is_some()),
            _ => false,
        }
    }

    /// Whether a string (or an object key) of a JSON tree holds a secret.
    pub fn holds_in_value(&self, value: &Value) -> bool {
        match value {
            Value::String(text) => self.holds(text),
            Value::Array(items) => items.iter().any(|item| self.holds_in_value(item)),
            Value::Object(map) => self.holds_in_map(map),
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }

    /// Whether a key or a value of a JSON object holds a secret.
    pub fn holds_in_map(&self, map: &Map<String, Value>) -> bool {
        !self.is_empty()
            && map
                .iter()
                .any(|(key, value)| self.holds(key) || self.holds_in_value(value))
    }

    /// Adds the value of a header sent to a provider, unless the header is
    /// one that never carries a credential. Of `Bearer KEY` (an auth scheme,
    /// then the credential) only `KEY` is the secret, so an echo of either
    /// form reads `Bearer ***`, as when the key alone is known.
    pub fn add_header(&mut self, name: &str, value: &str) {
        if PUBLIC_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            return;
        }
        match value.trim().split_once(' ') {
            Some((scheme, credential))
                if !scheme.is_empty()
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-') =>
            {
                self.add(credential)
            }
            _ => self.add(value),
        }
    }

    /// Adds the credentials of a URL (`http://user:password@host`): the user
    /// name and the password, as written and percent-decoded.
    pub fn add_url(&mut self, text: &str) {
        let Some((user, password)) = url_credentials(text) else {
            return;
        };
        for part in [Some(user), password].into_iter().flatten() {
            self.add(part);
            self.add(&percent_encoding::percent_decode_str(part).decode_utf8_lossy());
        }
    }

    pub fn extend(&mut self, other: &Secrets) {
        if other
            .patterns
            .iter()
            .all(|pattern| self.patterns.contains(pattern))
        {
            return;
        }
        for pattern in &other.patterns {
            if !self.patterns.contains(pattern) {
                self.patterns.push(pattern.clone());
            }
        }
        self.sorted();
    }

    /// The byte ranges of `text` that hold a secret, merged where they
    /// overlap or touch, in order.
    fn spans(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        let mut spans: Vec<std::ops::Range<usize>> = Vec::new();
        // memchr's SIMD search: `str::find` scans a key-long needle about a
        // byte at a time, and every reply is scrubbed.
        for (pattern, finder) in self.patterns.iter().zip(&self.finders) {
            let mut from = 0;
            while let Some(at) = finder.find(&text.as_bytes()[from..]) {
                let start = from + at;
                spans.push(start..start + pattern.len());
                // Overlapping matches of one pattern count too ("aaaa" in "aaaaa").
                from = start + pattern.chars().next().map_or(1, char::len_utf8);
            }
        }
        if spans.len() > 1 {
            spans.sort_by_key(|span| span.start);
            let mut merged: Vec<std::ops::Range<usize>> = Vec::with_capacity(spans.len());
            for span in spans {
                match merged.last_mut() {
                    Some(last) if span.start <= last.end => last.end = last.end.max(span.end),
                    _ => merged.push(span),
                }
            }
            spans = merged;
        }
        spans
    }

    /// `text` with every secret replaced by `***`; borrowed when it holds none.
    pub fn scrub<'t>(&self, text: &'t str) -> Cow<'t, str> {
        if !self.holds(text) {
            return Cow::Borrowed(text);
        }
        let spans = self.spans(text);
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut clean = String::with_capacity(text.len());
        let mut copied = 0;
        for span in spans {
            clean.push_str(&text[copied..span.start]);
            clean.push_str(MASK);
            copied = span.end;
        }
        clean.push_str(&text[copied..]);
        Cow::Owned(clean)
    }

    /// Scrubs `text` in place; `true` if it held a secret.
    pub fn scrub_string(&self, text: &mut String) -> bool {
        match self.scrub(text) {
            Cow::Borrowed(_) => false,
            Cow::Owned(clean) => {
                *text = clean;
                true
            }
        }
    }

    /// Scrubs every string (and object key) in a JSON tree; `true` if one
    /// held a secret.
    pub fn scrub_value(&self, value: &mut Value) -> bool {
        match value {
            Value::String(text) => self.scrub_string(text),
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |found, item| self.scrub_value(item) | found),
            Value::Object(map) => self.scrub_map(map),
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }

    /// Scrubs every key and value of a JSON object; `true` if one held a secret.
    pub fn scrub_map(&self, map: &mut Map<String, Value>) -> bool {
        if self.patterns.is_empty() {
            return false;
        }
        let mut found = false;
        let renamed: Vec<String> = map
            .keys()
            .filter(|key| matches!(self.scrub(key), Cow::Owned(_)))
            .cloned()
            .collect();
        for key in renamed {
            if let Some(entry) = map.remove(&key) {
                map.insert(self.scrub(&key).into_owned(), entry);
                found = true;
            }
        }
        for entry in map.values_mut() {
            found |= self.scrub_value(entry);
        }
        found
    }

    /// Where the end of `text` could be the start of a secret that the next
    /// piece of a stream completes: the byte offset from which to hold text
    /// back (`text.len()` when nothing needs holding).
    pub fn unfinished_from(&self, text: &str) -> usize {
        let longest = self.patterns.first().map_or(0, String::len);
        let earliest = text.len().saturating_sub(longest.saturating_sub(1));
        (earliest..text.len())
            .filter(|at| text.is_char_boundary(*at))
            .find(|at| {
                let tail = &text[*at..];
                self.patterns
                    .iter()
                    .any(|pattern| pattern.len() > tail.len() && pattern.starts_with(tail))
            })
            .unwrap_or(text.len())
    }
}

/// A value whose texts may hold a secret, scrubbed in place: what lllm
/// writes of a request (session records, `results.jsonl`, `--dry-run`)
/// holds `***` where the request held a key, as what a provider returns
/// does. Each type lists its fields by name (a new field must be placed),
/// and scrubs every text a user, a task, a tool or a model could have put
/// there.
pub trait Scrub {
    /// Replaces every secret in its texts with `***`; `true` if one held a secret.
    fn scrub(&mut self, scrubber: &mut Scrubber<'_>) -> bool;
}

/// Finding a secret in a value without changing it, so that a value shared
/// behind an `Arc` (a message held by a dialog, its forks and an invoke) is
/// copied only when it holds one.
pub trait HoldsSecret {
    /// Whether one of its texts holds a secret of `secrets`.
    fn holds_secret(&self, secrets: &Secrets) -> bool;
}

/// The secrets being taken out of one value, and the shared parts of it
/// already scrubbed: every holder of one `Arc` gets the one scrubbed copy,
/// so what was shared stays shared (a record writes a shared message once).
pub struct Scrubber<'s> {
    secrets: &'s Secrets,
    /// Scrubbed copies by the address of the original, which is kept alive
    /// here so that no other value takes its address meanwhile.
    copies: HashMap<usize, (SharedAny, SharedAny)>,
    /// Addresses of shared values found to hold no secret (alive: the value
    /// being scrubbed holds them).
    clean: HashSet<usize>,
}

type SharedAny = Arc<dyn Any + Send + Sync>;

impl<'s> Scrubber<'s> {
    /// Scrubs of `secrets`.
    pub fn new(secrets: &'s Secrets) -> Scrubber<'s> {
        Scrubber {
            secrets,
            copies: HashMap::new(),
            clean: HashSet::new(),
        }
    }

    /// The secrets taken out.
    pub fn secrets(&self) -> &'s Secrets {
        self.secrets
    }

    /// Whether there is nothing to take out (every scrub is then a no-op).
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }
}

impl Scrub for String {
    fn scrub(&mut self, scrubber: &mut Scrubber<'_>) -> bool {
        scrubber.secrets.scrub_string(self)
    }
}

impl HoldsSecret for String {
    fn holds_secret(&self, secrets: &Secrets) -> bool {
        secrets.holds(self)
    }
}

impl Scrub for Value {
    fn scrub(&mut self, scrubber: &mut Scrubber<'_>) -> bool {
        scrubber.secrets.scrub_value(self)
    }
}

impl HoldsSecret for Value {
    fn holds_secret(&self, secrets: &Secrets) -> bool {
        secrets.holds_in_value(self)
    }
}

impl Scrub for Map<String, Value> {
    fn scrub(&mut self, scrubber: &mut Scrubber<'_>) -> bool {
        scrubber.secrets.scrub_map(self)
    }
}

impl HoldsSecret for Map<String, Value> {
    fn holds_secret(&self, secrets: &Secrets) -> bool {
        secrets.holds_in_map(self)
    }
}

impl<T: Scrub> Scrub for Option<T> {
    fn scrub(&mut self, scrubber: &mut Scrubber<'_>) -> bool {
        self.as_mut().is_some_and(|value| value.scrub(scrubber))
    }
}

impl<T: HoldsSecret> HoldsSecret for Option<T> {
    fn holds_secret(&self, secrets: &Secrets) -> bool {
        self.as_ref()
            .is_some_and(|value| value.holds_secret(secrets))
    }
}

impl<T: Scrub> Scrub for Vec<T> {
    fn scrub(&mut self, scrubber: &mut Scrubber<'_>) -> bool {
        if scrubber.is_empty() {
            return false;
        }
        self.iter_mut()
            .fold(false, |found, item| item.scrub(scrubber) | found)
    }
}

impl<T: HoldsSecret> HoldsSecret for [T] {
    fn holds_secret(&self, secrets: &Secrets) -> bool {
        !secrets.is_empty() && self.iter().any(|item| item.holds_secret(secrets))
    }
}

impl<T: HoldsSecret> HoldsSecret for Arc<T> {
    fn holds_secret(&self, secrets: &Secrets) -> bool {
        T::holds_secret(self, secrets)
    }
}

/// Shared text (a score's reason, worded once for every task) is replaced
/// by a scrubbed copy only when it holds a secret.
impl Scrub for Arc<str> {
    fn scrub(&mut self, scrubber: &mut Scrubber<'_>) -> bool {
        match scrubber.secrets.scrub(self) {
            Cow::Borrowed(_) => false,
            Cow::Owned(clean) => {
                *self = Arc::from(clean);
                true
            }
        }
    }
}

/// A shared value is copied only when it holds a secret, once however
/// many hold it; the copy is scrubbed and replaces the original in each.
impl<T> Scrub for Arc<T>
where
    T: Scrub + HoldsSecret + Clone + Send + Sync + 'static,
{
    fn scrub(&mut self, scrubber: &mut Scrubber<'_>) -> bool {
        if scrubber.is_empty() {
            return false;
        }
        let address = Arc::as_ptr(self) as *const () as usize;
        if scrubber.clean.contains(&address) {
            return false;
        }
        if let Some((_, copy)) = scrubber.copies.get(&address)
            && let Ok(copy) = Arc::clone(copy).downcast::<T>()
        {
            *self = copy;
            return true;
        }
        if !T::holds_secret(self, scrubber.secrets) {
            scrubber.clean.insert(address);
            return false;
        }
        let mut copy = T::clone(self);
        copy.scrub(scrubber);
        let copy = Arc::new(copy);
        let original = std::mem::replace(self, Arc::clone(&copy));
        scrubber.copies.insert(address, (original, copy));
        true
    }
}

/// How one control character is shown: `\n`, `\r`, `\x1b` (C0 and DEL), or
/// `\u{9b}` (C1, which a byte-style escape would misname).
fn escape_control(character: char, shown: &mut String) {
    match character {
        '\n' => shown.push_str("\\n"),
        '\r' => shown.push_str("\\r"),
        '\t' => shown.push_str("\\t"),
        '\0'..='\x1f' | '\x7f' => {
            let _ = write!(shown, "\\x{:02x}", character as u32);
        }
        _ => {
            let _ = write!(shown, "\\u{{{:x}}}", character as u32);
        }
    }
}

fn escape_where(text: &str, keep: impl Fn(&str, usize, char) -> bool) -> Cow<'_, str> {
    let needs =
        |(at, character): (usize, char)| character.is_control() && !keep(text, at, character);
    if !text.char_indices().any(needs) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for (at, character) in text.char_indices() {
        if needs((at, character)) {
            escape_control(character, &mut shown);
        } else {
            shown.push(character);
        }
    }
    Cow::Owned(shown)
}

/// Text for one line of a terminal (an error, a warning, a summary): every
/// control character escaped (ESC as `\x1b`, a newline as `\n`) except tab,
/// so text from a provider or a model cannot move the cursor, recolour,
/// retitle or clear the terminal, or break the line.
pub fn terminal_line(text: &str) -> Cow<'_, str> {
    escape_where(text, |_, _, character| character == '\t')
}

/// Text laid out over several lines of a terminal (`replay`, a delivery on a
/// terminal): like [`terminal_line`], but newlines, tabs and a carriage
/// return that ends a line (`\r\n`) stay.
pub fn terminal_text(text: &str) -> Cow<'_, str> {
    escape_where(text, |text, at, character| match character {
        '\n' | '\t' => true,
        '\r' => text[at + 1..].starts_with('\n'),
        _ => false,
    })
}

/// The most characters of one value (an id, a tag, a name, a path, a key)
/// that a line for a person shows: a task file, a reply or an argument can
/// hold a value of any size, and a 100 KB id echoed whole buries the line
/// that names it (issue 26).
pub const ECHO_CHARS: usize = 200;

/// The most characters of one line lllm writes on stderr ([`crate::output::stderr_line`]):
/// the bound behind [`ECHO_CHARS`], for a line that quotes a long text
/// (a parser's message, a server's reply) rather than a value. A trace
/// body (`provider::trace::BODY_BYTES`) fits.
pub const LINE_CHARS: usize = 8192;

/// `text` cut to at most `max` characters: the first `max`, then `…` and
/// the whole length (`abc… (100000 characters)`), so a value of any size
/// takes a bounded part of a line and the reader still learns its size.
/// Shorter text is unchanged.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => Cow::Borrowed(text),
        Some((end, _)) => Cow::Owned(format!(
            "{}… ({} characters)",
            &text[..end],
            text.chars().count()
        )),
    }
}

/// A value lllm echoes into a line for a person — an error, a warning, a
/// listing's column: an id, a tag, a name from a task file, a reply or the
/// command line — as that line shows it: cut to [`ECHO_CHARS`] characters
/// ([`cut`]) and its control characters escaped ([`terminal_line`]). JSON
/// outputs (`--json`) and records keep values whole; this is for people.
pub fn echo(text: &str) -> Cow<'_, str> {
    match cut(text, ECHO_CHARS) {
        Cow::Borrowed(text) => terminal_line(text),
        Cow::Owned(text) => Cow::Owned(terminal_line(&text).into_owned()),
    }
}

/// A message line with every value it quotes in backticks (`` `x` ``, how
/// lllm quotes input in a message) cut as [`echo`] cuts it: the bound for
/// the values of every error and warning, whichever of the many places that
/// word a message wrote it (a path from the command line in `cannot read
/// `…``, a name in a parser's message). A span [`echo`] cut already (it ends
/// with the length note) is left as it is; text outside backticks is not
/// touched. Control characters are not escaped here.
pub fn echo_quoted(line: &str) -> Cow<'_, str> {
    let ticks: Vec<usize> = line.match_indices('`').map(|(at, _)| at).collect();
    let long = |span: &str| span.chars().count() > ECHO_CHARS && !already_cut(span);
    if !ticks
        .chunks_exact(2)
        .any(|pair| long(&line[pair[0] + 1..pair[1]]))
    {
        return Cow::Borrowed(line);
    }
    let mut shown = String::with_capacity(line.len().min(1 << 16));
    let mut from = 0;
    for pair in ticks.chunks_exact(2) {
        let span = &line[pair[0] + 1..pair[1]];
        if long(span) {
            shown.push_str(&line[from..=pair[0]]);
            shown.push_str(&cut(span, ECHO_CHARS));
            from = pair[1];
        }
    }
    shown.push_str(&line[from..]);
    Cow::Owned(shown)
}

/// Whether `span` ends with what [`cut`] made of a value (`… (N
/// characters)`): its value was cut where the message was worded (`--by
/// vvv… (100000 characters)`), and a second cut would hide its length.
fn already_cut(span: &str) -> bool {
    span.strip_suffix(" characters)")
        .and_then(|rest| rest.rsplit_once("… ("))
        .is_some_and(|(_, count)| !count.is_empty() && count.bytes().all(|b| b.is_ascii_digit()))
}

/// JSON printed for a person (`--show-config`, `replay --json`, `--dry-run`):
/// serde_json escapes C0 controls but writes DEL and C1 as they are; they are
/// written as `\u00XX` here, which reads back as the same JSON value.
pub fn json_controls(json: &str) -> Cow<'_, str> {
    if !json.chars().any(char::is_control) {
        return Cow::Borrowed(json);
    }
    let mut shown = String::with_capacity(json.len() + 8);
    for character in json.chars() {
        // Only strings can hold these: JSON's own whitespace is \n, \r, \t, space.
        if character.is_control() && !matches!(character, '\n' | '\r' | '\t') {
            let _ = write!(shown, "\\u{:04x}", character as u32);
        } else {
            shown.push(character);
        }
    }
    Cow::Owned(shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn url_case(given: &str, shown: &str) {
        assert_eq!(url(given), shown, "{given}");
    }

    #[test]
    fn urls_lose_credentials_and_query_values() {
        url_case("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1");
        url_case("http://user:PASSWORD@host/v1", "http://***@host/v1");
        url_case("https://token@host:8443/v1/", "https://***@host:8443/v1/");
        url_case("http://u:p@ss/w?rd@host/v1", "http://***@host/v1");
        url_case("user:PASSWORD@host:11434", "***@host:11434");
        url_case(
            "https://h/v1?api-version=2024-06-01&key=sk-1",
            "https://h/v1?api-version=***&key=***",
        );
        url_case("https://h/v1?sk-bare#frag", "https://h/v1?***#***");
        url_case("http://u:pw@[bad/v1?x=1", "http://***@[bad/v1?x=***");
        url_case("not a url", "not a url");
        assert_eq!(
            place("http://user:PASSWORD@host/v1/chat?key=sk"),
            "http://***@host/v1/chat"
        );
        assert_eq!(
            url_credentials("http://user:p%40ss@host"),
            Some(("user", Some("p%40ss")))
        );
        assert_eq!(url_credentials("https://token@h"), Some(("token", None)));
        assert_eq!(url_credentials("http://h/v1"), None);
    }

    fn secrets(values: &[&str]) -> Secrets {
        let mut secrets = Secrets::new();
        for value in values {
            secrets.add(value);
        }
        secrets
    }

    #[test]
    fn secrets_are_scrubbed_in_every_form_they_are_echoed() {
        let secrets = secrets(&["sk-live-0123456789", "ab/cd\"ef-long"]);
        assert_eq!(
            secrets.scrub("bad key sk-live-0123456789, again sk-live-0123456789."),
            "bad key ***, again ***."
        );
        // As a JSON body escapes it, with and without `\/`.
        assert_eq!(
            secrets.scrub(r#"{"m": "ab/cd\"ef-long", "n": "ab\/cd\"ef-long"}"#),
            r#"{"m": "***", "n": "***"}"#
        );
        assert!(matches!(secrets.scrub("nothing here"), Cow::Borrowed(_)));
        assert!(secrets.holds("x sk-live-0123456789 y"));
        assert!(
            !secrets.holds("sk-live-012345678"),
            "a part is not the secret"
        );
        assert!(!secrets.holds("short"));
        assert!(!Secrets::new().holds("sk-live-0123456789"));
        let mut merged = Secrets::new();
        merged.extend(&secrets);
        assert_eq!(
            merged.scrub("sk-live-0123456789"),
            "***",
            "searchers made anew"
        );
        assert!(matches!(Secrets::new().scrub("sk-live"), Cow::Borrowed(_)));
        assert_eq!(format!("{secrets:?}"), "Secrets(4 forms)");
    }

    #[test]
    fn overlapping_secrets_leave_nothing_of_either() {
        let secrets = secrets(&["abcdefgh12", "12345678xy"]);
        assert_eq!(secrets.scrub("<abcdefgh12345678xy>"), "<***>");
        let repeated = self::secrets(&["aaaaaaaa"]);
        assert_eq!(repeated.scrub("aaaaaaaaaa b"), "*** b");
    }

    #[test]
    fn short_values_are_not_secrets_and_public_headers_are_skipped() {
        let mut secrets = secrets(&["x", "1234567", "  "]);
        assert!(secrets.is_empty());
        secrets.add_header("Content-Type", "application/json");
        secrets.add_header("X-Title", "My great application");
        assert!(secrets.is_empty());
        secrets.add_header("Authorization", "Bearer sk-abcdefgh");
        assert_eq!(secrets.scrub("sk-abcdefgh"), "***");
        assert_eq!(secrets.scrub("Bearer sk-abcdefgh"), "Bearer ***");
        secrets.add_url("http://user-name-long:p%40ssword@host/v1");
        assert_eq!(
            secrets.scrub("user-name-long p%40ssword p@ssword"),
            "*** *** ***"
        );
    }

    #[test]
    fn json_trees_are_scrubbed_keys_included() {
        let secrets = secrets(&["sk-secret-value"]);
        let mut value =
            serde_json::json!({"a": ["x sk-secret-value"], "sk-secret-value": 1, "n": 2});
        assert!(secrets.scrub_value(&mut value));
        assert_eq!(value, serde_json::json!({"a": ["x ***"], "***": 1, "n": 2}));
        assert!(!secrets.scrub_value(&mut value));
    }

    #[test]
    fn a_stream_holds_back_only_what_could_start_a_secret() {
        let secrets = secrets(&["sk-secret-value"]);
        assert_eq!(secrets.unfinished_from("hello world"), 11);
        assert_eq!(secrets.unfinished_from("key: sk-sec"), 5);
        assert_eq!(secrets.unfinished_from("it was s"), 7);
        assert_eq!(secrets.unfinished_from("é"), 2);
        assert_eq!(Secrets::new().unfinished_from("sk-"), 3);
    }

    #[test]
    fn terminals_see_controls_escaped() {
        assert_eq!(terminal_line("plain text"), "plain text");
        assert_eq!(
            terminal_line("\x1b[31mred\x1b[0m\r\nnext\tcol\x07\x7f\u{9b}2J"),
            "\\x1b[31mred\\x1b[0m\\r\\nnext\tcol\\x07\\x7f\\u{9b}2J"
        );
        assert_eq!(
            terminal_text("line one\r\nline two\n\x1b]0;title\x07\rover"),
            "line one\r\nline two\n\\x1b]0;title\\x07\\rover"
        );
        assert!(matches!(terminal_text("a\nb\tc"), Cow::Borrowed(_)));
    }

    #[track_caller]
    fn cut_case(text: &str, max: usize, shown: &str) {
        assert_eq!(cut(text, max), shown);
    }

    #[test]
    fn long_values_are_cut_with_their_length() {
        cut_case("", 3, "");
        cut_case("abc", 3, "abc");
        cut_case("abcd", 3, "abc… (4 characters)");
        cut_case("ééééé", 2, "éé… (5 characters)");
        let huge = "x".repeat(100_000);
        assert_eq!(
            echo(&huge),
            format!("{}… (100000 characters)", "x".repeat(ECHO_CHARS))
        );
        // Cut first, then escaped: the 199 newlines kept after `a` read `\n`.
        let newlines = format!("a{}", "\n".repeat(300));
        let shown = echo(&newlines);
        assert!(!shown.contains('\n'), "{shown}");
        assert!(shown.ends_with("\\n… (301 characters)"), "{shown}");
        assert_eq!(echo("id\x1b[2J"), "id\\x1b[2J");
        assert!(matches!(echo("short"), Cow::Borrowed(_)));
    }

    #[test]
    fn values_quoted_in_a_message_are_cut() {
        let huge = "z".repeat(100_000);
        let line = format!("cannot read `{huge}`: File name too long (`x`, `{huge}`)");
        let cut_value = format!("{}… (100000 characters)", "z".repeat(ECHO_CHARS));
        assert_eq!(
            echo_quoted(&line),
            format!("cannot read `{cut_value}`: File name too long (`x`, `{cut_value}`)")
        );
        // Cut once: what `echo` cut stays as it is.
        let echoed = format!("no session `{}` here (`--by {}`)", echo(&huge), echo(&huge));
        assert!(matches!(echo_quoted(&echoed), Cow::Borrowed(_)));
        // Short spans, text outside backticks and an unpaired backtick stay.
        let plain = format!("step `a` of {huge} and a ` alone");
        assert!(matches!(echo_quoted(&plain), Cow::Borrowed(_)));
        let open = format!("`short` then `{huge}");
        assert_eq!(echo_quoted(&open), open);
        assert_eq!(echo_quoted("é`é`é"), "é`é`é");
    }

    #[test]
    fn json_keeps_its_value_with_c1_and_del_escaped() {
        let value = serde_json::json!({"text": "\u{1b}[2J\u{9b}31m\u{7f}é"});
        let json = serde_json::to_string_pretty(&value).unwrap();
        let shown = json_controls(&json);
        assert!(
            !shown.chars().any(|c| c.is_control() && c != '\n'),
            "{shown}"
        );
        let back: Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, value);
    }
}
