//! The messageId of a JSON event, found by one pass over its bytes without building the
//! document, for the worker's default path (`app/worker/dedup.py`), which needs the id alone.
//!
//! The reference is `app.rules.inspect`: orjson's parse, the standard library's where orjson
//! refuses, then the checks of `_valid`. This scan answers only where `inspect` answers `Valid`
//! with the same id bytes, and answers nothing (`None`) wherever it is less than certain: the
//! caller then runs `inspect` on that value, so a verdict never depends on which path ran.
//! What it accepts is strict RFC 8259 JSON that both parsers accept with the same top-level
//! `messageId`: valid UTF-8 (as Python's decode and orjson check it), a top-level object whose
//! last `messageId` member (both parsers keep the last of duplicate keys) is a non-empty string
//! written without escapes, no longer than the id limit, in a value no longer than the event
//! limit. Left to `inspect`: any escape in a top-level key (`"message\u0049d"` names the id) or
//! in the id, nesting deeper than `MAX_DEPTH`, a number token longer than `MAX_NUMBER` (the
//! standard library's digit limit on ints; orjson's range), `NaN` and the other tokens only the
//! standard library takes, a byte-order mark, and every invalid value (its reason is
//! `inspect`'s to give). `tests/unit/adapters/test_message_ids.py` holds the two to this.

/// Deeper nesting is left to `inspect` (orjson's own limit is 1,024 levels).
const MAX_DEPTH: usize = 64;
/// Longer number tokens are left to `inspect`: far below the standard library's 4,300-digit
/// limit on ints and wide enough for any id or amount an event carries.
const MAX_NUMBER: usize = 32;

/// Not certain: leave the value to `inspect`.
struct Unsure;

type Scan<T> = Result<T, Unsure>;

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

/// A string's bytes between its quotes, and whether it holds an escape.
struct Text {
    start: usize,
    end: usize,
    escaped: bool,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Scan<u8> {
        self.b.get(self.i).copied().ok_or(Unsure)
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn expect(&mut self, c: u8) -> Scan<()> {
        if self.peek()? != c {
            return Err(Unsure);
        }
        self.i += 1;
        Ok(())
    }

    fn literal(&mut self, word: &[u8]) -> Scan<()> {
        if !self.b[self.i..].starts_with(word) {
            return Err(Unsure);
        }
        self.i += word.len();
        Ok(())
    }

    /// A string from its opening quote: escapes checked, control characters refused (the
    /// bytes are valid UTF-8 already).
    fn string(&mut self) -> Scan<Text> {
        self.expect(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            let c = self.peek()?;
            match c {
                b'"' => {
                    let end = self.i;
                    self.i += 1;
                    return Ok(Text {
                        start,
                        end,
                        escaped,
                    });
                }
                b'\\' => {
                    escaped = true;
                    match self.b.get(self.i + 1).copied().ok_or(Unsure)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                        b'u' => {
                            let hex = self.b.get(self.i + 2..self.i + 6).ok_or(Unsure)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return Err(Unsure);
                            }
                            self.i += 6;
                        }
                        _ => return Err(Unsure),
                    }
                }
                0x00..=0x1f => return Err(Unsure),
                _ => self.i += 1,
            }
        }
    }

    fn digits(&mut self) -> usize {
        let from = self.i;
        while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
        self.i - from
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Scan<()> {
        let from = self.i;
        if self.peek()? == b'-' {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return Err(Unsure),
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(Unsure);
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(Unsure);
            }
        }
        if self.i - from > MAX_NUMBER {
            return Err(Unsure);
        }
        Ok(())
    }

    /// Any value, at `depth` (the top-level object's members are at depth 1).
    fn value(&mut self, depth: usize) -> Scan<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' => self.nested(depth, b'}', |c, d| {
                c.string()?;
                c.skip_ws();
                c.expect(b':')?;
                c.skip_ws();
                c.value(d)
            }),
            b'[' => self.nested(depth, b']', |c, d| c.value(d)),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(Unsure),
        }
    }

    /// An object or array below the top level: its items, comma-separated, up to `close`.
    fn nested(
        &mut self,
        depth: usize,
        close: u8,
        mut item: impl FnMut(&mut Self, usize) -> Scan<()>,
    ) -> Scan<()> {
        if depth + 1 > MAX_DEPTH {
            return Err(Unsure);
        }
        self.i += 1; // the opening bracket
        self.skip_ws();
        if self.peek()? == close {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            item(self, depth + 1)?;
            self.skip_ws();
            match self.peek()? {
                b',' => self.i += 1,
                c if c == close => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(Unsure),
            }
        }
    }
}

/// The messageId's bytes, where `inspect` would find the value valid with that id (the module's
/// doc); None where the scan leaves the value to `inspect`.
pub fn message_id(value: &[u8], max_event_bytes: usize, max_id_bytes: usize) -> Option<&[u8]> {
    if value.len() > max_event_bytes || std::str::from_utf8(value).is_err() {
        return None;
    }
    let mut c = Cursor { b: value, i: 0 };
    // The last messageId member: Some(Some(text)) a string, Some(None) another kind of value.
    let mut last: Option<Option<Text>> = None;
    let scanned: Scan<()> = (|| {
        c.skip_ws();
        c.expect(b'{')?;
        c.skip_ws();
        if c.peek()? == b'}' {
            c.i += 1;
        } else {
            loop {
                c.skip_ws();
                let key = c.string()?;
                if key.escaped {
                    return Err(Unsure); // an escaped key may spell messageId
                }
                c.skip_ws();
                c.expect(b':')?;
                c.skip_ws();
                if &value[key.start..key.end] == b"messageId" {
                    if c.peek()? == b'"' {
                        last = Some(Some(c.string()?));
                    } else {
                        c.value(1)?;
                        last = Some(None);
                    }
                } else {
                    c.value(1)?;
                }
                c.skip_ws();
                match c.peek()? {
                    b',' => c.i += 1,
                    b'}' => {
                        c.i += 1;
                        break;
                    }
                    _ => return Err(Unsure),
                }
            }
        }
        c.skip_ws();
        if c.i != value.len() {
            return Err(Unsure);
        }
        Ok(())
    })();
    scanned.ok()?;
    let id = last??;
    let bytes = &value[id.start..id.end];
    if id.escaped || bytes.is_empty() || bytes.len() > max_id_bytes {
        return None;
    }
    Some(bytes)
}
