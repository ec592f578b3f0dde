//! The pre-scan that refused flow collections nested past the limit before
//! libyaml saw the text (its scanner is quadratic in the flow depth), as
//! `src/yaml/nesting.rs` was until issue 28: kept here only so that
//! `yaml_speed` measures the path it replaced. It follows libyaml only as
//! far as needed to tell a `[` or `{` that opens a collection from one that
//! is text.

#![allow(dead_code)]

/// Why the text was refused.
#[derive(Debug)]
pub struct Error {
    pub location: Option<Location>,
    pub message: String,
}

/// A line and a column, from 1.
#[derive(Debug)]
pub struct Location {
    pub line: usize,
    pub column: usize,
}

/// The deepest nesting of flow collections (`[` / `{`) read: serde_yaml_ng
/// refuses more than 128 nested collections of any kind.
pub const MAX_FLOW_DEPTH: usize = 128;

/// Refuses flow collections nested deeper than [`MAX_FLOW_DEPTH`], naming
/// the line and column of the first bracket too deep. One pass over the
/// text: brackets in quoted scalars, comments, block scalars (`|`, `>`) and
/// block-context plain scalars (`see [1]`) do not count.
pub fn check_nesting(text: &str) -> Result<(), Error> {
    let bytes = text.as_bytes();
    match Scan::new(bytes).run() {
        Ok(()) => Ok(()),
        Err(offset) => {
            let line_start = bytes[..offset]
                .iter()
                .rposition(|&byte| byte == b'\n')
                .map_or(0, |newline| newline + 1);
            let line = bytes[..offset]
                .iter()
                .filter(|&&byte| byte == b'\n')
                .count()
                + 1;
            let column = text[line_start..offset].chars().count() + 1;
            Err(Error {
                location: Some(Location { line, column }),
                message: format!(
                    "flow collections (`[` / `{{`) nested deeper than {MAX_FLOW_DEPTH} levels"
                ),
            })
        }
    }
}

/// What the scan is inside of when a line ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Carry {
    /// Nothing that spans lines.
    Nothing,
    /// A quoted scalar (`'` or `"`) not closed yet.
    Quoted(u8),
    /// A block scalar: the lines indented at least `content` (set by its
    /// first non-blank line and the blank lines before it, at least
    /// `minimum`) and blank lines.
    BlockScalar {
        minimum: usize,
        content: Option<usize>,
    },
    /// A plain scalar in block context: a line indented more than the block
    /// indentation continues it.
    Plain,
    /// A plain scalar inside a flow collection: it goes on until a flow
    /// indicator, ` #` or `: `.
    FlowPlain,
}

/// The pre-scan: a small lexer that follows libyaml's scanner only as far as
/// needed to know which `[` and `{` open a collection — the block
/// indentation (as libyaml keeps it) decides where plain and block scalars
/// end, and quotes, comments and scalars hide brackets.
struct Scan<'a> {
    bytes: &'a [u8],
    /// Where the current line starts.
    position: usize,
    /// Open flow collections.
    depth: usize,
    carry: Carry,
    /// The column of the innermost block collection (-1: none), and the
    /// columns of those around it.
    indent: isize,
    indents: Vec<isize>,
}

impl<'a> Scan<'a> {
    fn new(bytes: &'a [u8]) -> Scan<'a> {
        Scan {
            bytes,
            position: 0,
            depth: 0,
            carry: Carry::Nothing,
            indent: -1,
            indents: Vec::new(),
        }
    }

    /// The offset of the first bracket past the limit, if any.
    fn run(mut self) -> Result<(), usize> {
        while self.position < self.bytes.len() {
            let end = self.bytes[self.position..]
                .iter()
                .position(|&byte| byte == b'\n')
                .map_or(self.bytes.len(), |newline| self.position + newline);
            self.line(end)?;
            self.position = end + 1;
        }
        Ok(())
    }

    fn at(&self, offset: usize) -> u8 {
        self.bytes.get(offset).copied().unwrap_or(b'\n')
    }

    /// A block collection starts at `column` (libyaml's `roll_indent`).
    fn roll(&mut self, column: isize) {
        if self.depth == 0 && self.indent < column {
            self.indents.push(self.indent);
            self.indent = column;
        }
    }

    /// A token at `column` closes the block collections indented more
    /// (libyaml's `unroll_indent`).
    fn unroll(&mut self, column: isize) {
        while self.indent > column {
            self.indent = self.indents.pop().unwrap_or(-1);
        }
    }

    /// One line, `self.position..end` (without its `\n`).
    fn line(&mut self, end: usize) -> Result<(), usize> {
        let start = self.position;
        let line = &self.bytes[start..end];
        // A document marker ends whatever was open.
        if (line.starts_with(b"---") || line.starts_with(b"..."))
            && line.get(3).is_none_or(|byte| byte.is_ascii_whitespace())
        {
            self.depth = 0;
            self.carry = Carry::Nothing;
            self.unroll(-1);
            return self.segment(start + 3, end, true, false);
        }
        let spaces = line.iter().take_while(|&&byte| byte == b' ').count();
        let first = line.get(spaces).copied();
        let blank = line[spaces..].iter().all(|byte| byte.is_ascii_whitespace());
        let carry = std::mem::replace(&mut self.carry, Carry::Nothing);
        match carry {
            Carry::BlockScalar { minimum, content } => {
                // As in libyaml, blank lines before the first text count
                // towards its indentation.
                if blank {
                    self.carry = Carry::BlockScalar {
                        minimum: if content.is_none() {
                            minimum.max(spaces)
                        } else {
                            minimum
                        },
                        content,
                    };
                    return Ok(());
                }
                let content = content.unwrap_or(spaces.max(minimum));
                if spaces >= content {
                    self.carry = Carry::BlockScalar {
                        minimum,
                        content: Some(content),
                    };
                    return Ok(());
                }
            }
            Carry::Plain if blank => {
                self.carry = carry;
                return Ok(());
            }
            Carry::Plain if spaces as isize > self.indent && first != Some(b'#') => {
                return self.segment(start + spaces, end, false, false);
            }
            Carry::Quoted(quote) => {
                return match self.quoted(start, end, quote) {
                    Some(after) => self.segment(after, end, false, false),
                    None => {
                        self.carry = carry;
                        Ok(())
                    }
                };
            }
            Carry::FlowPlain => return self.segment(start, end, false, true),
            Carry::Plain | Carry::Nothing => {}
        }
        if self.depth > 0 {
            return self.segment(start, end, false, false);
        }
        if first == Some(b'%') && spaces == 0 {
            return Ok(());
        }
        if !blank && first != Some(b'#') {
            self.unroll(spaces as isize);
        }
        self.segment(start + spaces, end, true, false)
    }

    /// Scans `from..end` of the current line, in block context while no flow
    /// collection is open and in flow context while one is. `node_start`
    /// says whether a block node may begin here (a `|`, a `[`); `plain`,
    /// that a plain scalar of a flow collection goes on (its quotes are
    /// text).
    fn segment(
        &mut self,
        from: usize,
        end: usize,
        mut node_start: bool,
        mut plain: bool,
    ) -> Result<(), usize> {
        let line_start = self.position;
        let column = |offset: usize| (offset - line_start) as isize;
        let mut offset = from;
        // Where the block node now being read began (at its anchor or tag,
        // if any): a `:` after it makes it a key, and its column the
        // mapping's.
        let mut node_column = column(from);
        let mut properties = false;
        while offset < end {
            let byte = self.bytes[offset];
            let next = self.at(offset + 1);
            let separated = offset == line_start || self.bytes[offset - 1].is_ascii_whitespace();
            if matches!(byte, b' ' | b'\t' | b'\r') {
                offset += 1;
                continue;
            }
            // Where a token may start, `#` starts a comment (after a quoted
            // scalar or `[` too); inside a plain scalar only after a blank.
            if byte == b'#' && (!plain || separated) {
                break;
            }
            if self.depth > 0 {
                match byte {
                    b'[' | b'{' => {
                        self.open(offset)?;
                        plain = false;
                    }
                    b']' | b'}' => {
                        self.depth -= 1;
                        plain = false;
                    }
                    b',' => plain = false,
                    b':' if !plain
                        || matches!(
                            next,
                            b' ' | b'\t' | b'\r' | b'\n' | b',' | b'[' | b']' | b'{' | b'}'
                        ) =>
                    {
                        plain = false;
                    }
                    b'"' | b'\'' if !plain => match self.quoted(offset + 1, end, byte) {
                        Some(after) => {
                            offset = after;
                            continue;
                        }
                        None => {
                            self.carry = Carry::Quoted(byte);
                            return Ok(());
                        }
                    },
                    b'&' | b'!' if !plain => {
                        offset = self.token_end(offset, end);
                        continue;
                    }
                    _ => plain = true,
                }
                offset += 1;
                continue;
            }
            match byte {
                b'-' | b'?' if node_start && next.is_ascii_whitespace() => {
                    self.roll(column(offset));
                    properties = false;
                    offset += 1;
                }
                b':' if next.is_ascii_whitespace() => {
                    self.roll(node_column);
                    node_start = true;
                    properties = false;
                    offset += 1;
                }
                b'[' | b'{' if node_start => {
                    if !properties {
                        node_column = column(offset);
                    }
                    node_start = false;
                    self.open(offset)?;
                    offset += 1;
                }
                b'"' | b'\'' if node_start => {
                    if !properties {
                        node_column = column(offset);
                    }
                    node_start = false;
                    match self.quoted(offset + 1, end, byte) {
                        Some(after) => offset = after,
                        None => {
                            self.carry = Carry::Quoted(byte);
                            return Ok(());
                        }
                    }
                }
                b'|' | b'>' if node_start => {
                    // libyaml's block scalar indentation: an explicit
                    // indicator counts from the block indentation, else the
                    // first non-blank line sets it; at least one more than
                    // the block indentation, and at least 1.
                    let header = &self.bytes[offset + 1..end];
                    let explicit = header
                        .iter()
                        .take(2)
                        .find(|byte| byte.is_ascii_digit())
                        .map(|digit| usize::from(digit - b'0'));
                    let base = usize::try_from(self.indent).unwrap_or(0);
                    let minimum = (base + 1).max(1);
                    self.carry = Carry::BlockScalar {
                        minimum: explicit.map_or(minimum, |digit| base + digit),
                        content: explicit.map(|digit| base + digit),
                    };
                    return Ok(());
                }
                b'&' | b'!' if node_start => {
                    if !properties {
                        node_column = column(offset);
                        properties = true;
                    }
                    offset = self.token_end(offset, end);
                }
                _ => {
                    // A plain scalar (or an alias): up to `: ` or ` #`.
                    if node_start && !properties {
                        node_column = column(offset);
                    }
                    node_start = false;
                    while offset < end
                        && !(self.bytes[offset] == b':'
                            && self.at(offset + 1).is_ascii_whitespace())
                        && !(self.bytes[offset] == b'#'
                            && self.bytes[offset - 1].is_ascii_whitespace())
                    {
                        offset += 1;
                    }
                    if offset >= end {
                        self.carry = Carry::Plain;
                    }
                }
            }
        }
        if self.depth > 0 && plain {
            self.carry = Carry::FlowPlain;
        }
        Ok(())
    }

    /// Opens a flow collection at `offset`; past the limit, the offset.
    fn open(&mut self, offset: usize) -> Result<(), usize> {
        self.depth += 1;
        if self.depth > MAX_FLOW_DEPTH {
            Err(offset)
        } else {
            Ok(())
        }
    }

    /// The end of an anchor or a tag starting at `offset`: the next blank,
    /// or in a flow collection also the next flow indicator.
    fn token_end(&self, offset: usize, end: usize) -> usize {
        let mut offset = offset + 1;
        while offset < end {
            let byte = self.bytes[offset];
            if byte.is_ascii_whitespace()
                || (self.depth > 0 && matches!(byte, b',' | b'[' | b']' | b'{' | b'}'))
            {
                break;
            }
            offset += 1;
        }
        offset
    }

    /// The offset after the closing quote of a scalar whose text starts at
    /// `from`, or `None` when it does not close on this line.
    fn quoted(&self, from: usize, end: usize, quote: u8) -> Option<usize> {
        let mut offset = from;
        while offset < end {
            let byte = self.bytes[offset];
            if quote == b'"' && byte == b'\\' {
                offset += 2;
                continue;
            }
            if byte == quote {
                if quote == b'\'' && self.at(offset + 1) == b'\'' {
                    offset += 2;
                    continue;
                }
                return Some(offset + 1);
            }
            offset += 1;
        }
        None
    }
}
