//! ClickHouse data types as `system.columns.type` prints them.
//!
//! Owns [`ChType`] and its parser [`parse_type`]. Pure and synchronous: used
//! once per table at start-up (schema discovery) by the thread that builds a
//! [`crate::RowEncoder`].

use std::fmt;

/// A ClickHouse column type.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChType {
    /// `UInt8`.
    UInt8,
    /// `UInt16`.
    UInt16,
    /// `UInt32`.
    UInt32,
    /// `UInt64`.
    UInt64,
    /// `UInt128`.
    UInt128,
    /// `UInt256`.
    UInt256,
    /// `Int8`.
    Int8,
    /// `Int16`.
    Int16,
    /// `Int32`.
    Int32,
    /// `Int64`.
    Int64,
    /// `Int128`.
    Int128,
    /// `Int256`.
    Int256,
    /// `Float32`.
    Float32,
    /// `Float64`.
    Float64,
    /// `String`.
    String,
    /// `FixedString(N)`.
    FixedString(usize),
    /// `Date` (u16 days since 1970-01-01).
    Date,
    /// `DateTime` or `DateTime('tz')` (u32 seconds).
    DateTime(Option<String>),
    /// `DateTime64(precision[, 'tz'])` (i64 ticks of 10^-precision s).
    DateTime64(u8, Option<String>),
    /// `Nullable(T)`.
    Nullable(Box<ChType>),
    /// `Array(T)`.
    Array(Box<ChType>),
    /// `LowCardinality(T)`; encoded in RowBinary exactly as `T`.
    LowCardinality(Box<ChType>),
    /// `UUID`.
    Uuid,
    /// `Enum8('name' = value, ...)` in declaration order.
    Enum8(Vec<(String, i8)>),
    /// `Enum16('name' = value, ...)` in declaration order.
    Enum16(Vec<(String, i16)>),
    /// `Decimal(P, S)`; `Decimal32/64/128/256(S)` are normalised to P =
    /// 9/18/38/76.
    Decimal {
        /// Total number of digits (1..=76).
        precision: u8,
        /// Digits after the decimal point.
        scale: u8,
    },
    /// `Bool`.
    Bool,
    /// `Map(K, V)`.
    Map(Box<ChType>, Box<ChType>),
    /// `IPv4`.
    IPv4,
    /// `IPv6`.
    IPv6,
    /// `Tuple(T1, T2)` or named `Tuple(a T1, b T2)`.
    Tuple(Vec<(Option<String>, ChType)>),
    /// `Nothing`.
    Nothing,
    /// `JSON` or `JSON(max_dynamic_paths = N, a.b UInt32, SKIP c, ...)`.
    Json(JsonSpec),
    /// `Variant(T1, T2, ...)`: the alternatives sorted by type name, as the
    /// server numbers them (a value's discriminator is its index here).
    Variant(Vec<ChType>),
    /// `Dynamic` or `Dynamic(max_types = N)`.
    Dynamic(Option<u32>),
}

/// The parameters of a `JSON` column type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JsonSpec {
    /// `max_dynamic_paths = N`, `max_dynamic_types = N`, as written.
    pub params: Vec<(String, u64)>,
    /// Typed paths (`a.b UInt32`): sent in their own type, not as Dynamic.
    pub typed: Vec<(String, ChType)>,
    /// `SKIP a.b`: paths (and everything below them) that are not stored.
    pub skip: Vec<String>,
}

/// Why a type string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TypeError {
    /// The type name is well-formed but spate cannot encode it.
    #[error("unsupported ClickHouse type `{0}`")]
    Unsupported(String),
    /// The text is not a valid type expression.
    #[error("malformed ClickHouse type `{text}` at byte {at}: {reason}")]
    Malformed {
        /// The whole type string.
        text: String,
        /// Byte offset of the problem.
        at: usize,
        /// What was expected.
        reason: &'static str,
    },
}

/// Parse a type string as printed by `system.columns.type`.
pub fn parse_type(s: &str) -> Result<ChType, TypeError> {
    let mut p = Parser {
        s: s.as_bytes(),
        text: s,
        pos: 0,
    };
    let ty = p.ty(0)?;
    p.ws();
    if p.pos != p.s.len() {
        return Err(p.err("trailing characters"));
    }
    Ok(ty)
}

const MAX_DEPTH: usize = 64;

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn err(&self, reason: &'static str) -> TypeError {
        TypeError::Malformed {
            text: self.text.to_owned(),
            at: self.pos,
            reason,
        }
    }

    fn ws(&mut self) {
        while self
            .s
            .get(self.pos)
            .is_some_and(|c| c.is_ascii_whitespace())
        {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8, reason: &'static str) -> Result<(), TypeError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.err(reason))
        }
    }

    fn ident(&mut self) -> Result<&str, TypeError> {
        self.ws();
        let start = self.pos;
        while self
            .s
            .get(self.pos)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.err("expected a type name"));
        }
        Ok(&self.text[start..self.pos])
    }

    fn number(&mut self) -> Result<i64, TypeError> {
        self.ws();
        let start = self.pos;
        if self.s.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        while self.s.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        self.text[start..self.pos]
            .parse()
            .map_err(|_| self.err("expected a number"))
    }

    /// A quoted string (`'..'` or `` `..` ``) with backslash escapes.
    fn quoted(&mut self, quote: u8) -> Result<String, TypeError> {
        self.expect(quote, "expected a quoted string")?;
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.s.get(self.pos) else {
                return Err(self.err("unterminated quoted string"));
            };
            self.pos += 1;
            match c {
                b'\\' => {
                    let Some(&e) = self.s.get(self.pos) else {
                        return Err(self.err("unterminated escape"));
                    };
                    self.pos += 1;
                    out.push(match e {
                        b'n' => b'\n',
                        b't' => b'\t',
                        b'r' => b'\r',
                        b'0' => 0,
                        b'b' => 8,
                        b'f' => 12,
                        b'a' => 7,
                        b'v' => 11,
                        other => other,
                    });
                }
                c if c == quote => {
                    // SQL style doubled quote.
                    if self.s.get(self.pos) == Some(&quote) {
                        self.pos += 1;
                        out.push(quote);
                    } else {
                        break;
                    }
                }
                c => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| self.err("quoted string is not UTF-8"))
    }

    fn inner(&mut self, depth: usize) -> Result<Box<ChType>, TypeError> {
        self.expect(b'(', "expected `(`")?;
        let t = self.ty(depth + 1)?;
        self.expect(b')', "expected `)`")?;
        Ok(Box::new(t))
    }

    fn ty(&mut self, depth: usize) -> Result<ChType, TypeError> {
        if depth > MAX_DEPTH {
            return Err(self.err("type nested too deeply"));
        }
        let name = self.ident()?.to_owned();
        Ok(match name.as_str() {
            "UInt8" => ChType::UInt8,
            "UInt16" => ChType::UInt16,
            "UInt32" => ChType::UInt32,
            "UInt64" => ChType::UInt64,
            "UInt128" => ChType::UInt128,
            "UInt256" => ChType::UInt256,
            "Int256" => ChType::Int256,
            "Int8" => ChType::Int8,
            "Int16" => ChType::Int16,
            "Int32" => ChType::Int32,
            "Int64" => ChType::Int64,
            "Int128" => ChType::Int128,
            "Float32" => ChType::Float32,
            "Float64" => ChType::Float64,
            "String" => ChType::String,
            "UUID" => ChType::Uuid,
            "Bool" => ChType::Bool,
            "IPv4" => ChType::IPv4,
            "IPv6" => ChType::IPv6,
            "Nothing" => ChType::Nothing,
            "Date" => ChType::Date,
            "FixedString" => self.fixed_string()?,
            "DateTime" => self.datetime()?,
            "DateTime64" => self.datetime64()?,
            "Nullable" => ChType::Nullable(self.inner(depth)?),
            "Array" => ChType::Array(self.inner(depth)?),
            "LowCardinality" => ChType::LowCardinality(self.inner(depth)?),
            "Map" => self.map(depth)?,
            "Tuple" => self.tuple(depth)?,
            "Variant" => self.variant(depth)?,
            "Dynamic" => ChType::Dynamic(self.dynamic_params()?),
            "JSON" => ChType::Json(self.json(depth)?),
            "Enum8" => ChType::Enum8(self.enum_items::<i8>()?),
            "Enum16" => ChType::Enum16(self.enum_items::<i16>()?),
            "Decimal" => {
                self.expect(b'(', "expected `(`")?;
                let p = self.number()?;
                self.expect(b',', "expected `,`")?;
                let s = self.number()?;
                self.expect(b')', "expected `)`")?;
                self.decimal(p, s)?
            }
            "Decimal32" => self.decimal_of(9)?,
            "Decimal64" => self.decimal_of(18)?,
            "Decimal128" => self.decimal_of(38)?,
            "Decimal256" => self.decimal_of(76)?,
            _ => return Err(TypeError::Unsupported(self.text.to_owned())),
        })
    }

    fn fixed_string(&mut self) -> Result<ChType, TypeError> {
        self.expect(b'(', "expected `(`")?;
        let n = self.number()?;
        self.expect(b')', "expected `)`")?;
        let n = usize::try_from(n).map_err(|_| self.err("bad FixedString length"))?;
        if n == 0 {
            return Err(self.err("FixedString length must be positive"));
        }
        Ok(ChType::FixedString(n))
    }

    /// `DateTime` or `DateTime('tz')`.
    fn datetime(&mut self) -> Result<ChType, TypeError> {
        let tz = if self.eat(b'(') {
            let tz = self.quoted(b'\'')?;
            self.expect(b')', "expected `)`")?;
            Some(tz)
        } else {
            None
        };
        Ok(ChType::DateTime(tz))
    }

    /// `DateTime64(p)` or `DateTime64(p, 'tz')`.
    fn datetime64(&mut self) -> Result<ChType, TypeError> {
        self.expect(b'(', "expected `(`")?;
        let p = self.number()?;
        let Some(p) = u8::try_from(p).ok().filter(|p| *p <= 9) else {
            return Err(self.err("DateTime64 precision must be 0..=9"));
        };
        let tz = if self.eat(b',') {
            Some(self.quoted(b'\'')?)
        } else {
            None
        };
        self.expect(b')', "expected `)`")?;
        Ok(ChType::DateTime64(p, tz))
    }

    fn map(&mut self, depth: usize) -> Result<ChType, TypeError> {
        self.expect(b'(', "expected `(`")?;
        let k = self.ty(depth + 1)?;
        self.expect(b',', "expected `,`")?;
        let v = self.ty(depth + 1)?;
        self.expect(b')', "expected `)`")?;
        Ok(ChType::Map(Box::new(k), Box::new(v)))
    }

    /// `DecimalN(s)`, whose precision `p` the name gives.
    fn decimal_of(&mut self, p: i64) -> Result<ChType, TypeError> {
        self.expect(b'(', "expected `(`")?;
        let s = self.number()?;
        self.expect(b')', "expected `)`")?;
        self.decimal(p, s)
    }

    fn decimal(&self, p: i64, s: i64) -> Result<ChType, TypeError> {
        if !(1..=76).contains(&p) || s < 0 || s > p {
            return Err(self.err("bad Decimal precision/scale"));
        }
        // Both fit in u8: checked by the ranges above.
        Ok(ChType::Decimal {
            precision: p as u8,
            scale: s as u8,
        })
    }

    fn enum_items<T: TryFrom<i64>>(&mut self) -> Result<Vec<(String, T)>, TypeError> {
        self.expect(b'(', "expected `(`")?;
        let mut items = Vec::new();
        loop {
            self.ws();
            let name = self.quoted(b'\'')?;
            self.expect(b'=', "expected `=` in enum")?;
            let v = self.number()?;
            let v = T::try_from(v).map_err(|_| self.err("enum value out of range"))?;
            items.push((name, v));
            if self.eat(b')') {
                break;
            }
            self.expect(b',', "expected `,` or `)` in enum")?;
        }
        Ok(items)
    }

    fn tuple(&mut self, depth: usize) -> Result<ChType, TypeError> {
        self.expect(b'(', "expected `(`")?;
        let mut items = Vec::new();
        loop {
            let name = self.tuple_element_name()?;
            let t = self.ty(depth + 1)?;
            items.push((name, t));
            if self.eat(b')') {
                break;
            }
            self.expect(b',', "expected `,` or `)` in Tuple")?;
        }
        Ok(ChType::Tuple(items))
    }

    /// A named tuple element is `name Type`: a name (bare or back-quoted)
    /// followed by whitespace and the start of a type name.
    fn tuple_element_name(&mut self) -> Result<Option<String>, TypeError> {
        if self.peek() == Some(b'`') {
            return Ok(Some(self.quoted(b'`')?));
        }
        let save = self.pos;
        let Ok(first) = self.ident().map(str::to_owned) else {
            self.pos = save;
            return Ok(None);
        };
        let after = self.pos;
        self.ws();
        let named = self.pos > after
            && self
                .s
                .get(self.pos)
                .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_');
        if named {
            Ok(Some(first))
        } else {
            self.pos = save;
            Ok(None)
        }
    }
}

/// The parsers of `Variant`, `Dynamic` and `JSON`.
impl Parser<'_> {
    fn variant(&mut self, depth: usize) -> Result<ChType, TypeError> {
        self.expect(b'(', "expected `(`")?;
        let mut items = Vec::new();
        loop {
            items.push(self.ty(depth + 1)?);
            if self.eat(b')') {
                break;
            }
            self.expect(b',', "expected `,` or `)` in Variant")?;
        }
        // The server numbers the alternatives in the order of their names.
        items.sort_by_cached_key(ToString::to_string);
        Ok(ChType::Variant(items))
    }

    fn dynamic_params(&mut self) -> Result<Option<u32>, TypeError> {
        if !self.eat(b'(') {
            return Ok(None);
        }
        if self.ident()? != "max_types" {
            return Err(self.err("expected `max_types` in Dynamic"));
        }
        self.expect(b'=', "expected `=`")?;
        let n = u32::try_from(self.number()?).map_err(|_| self.err("bad max_types"))?;
        self.expect(b')', "expected `)`")?;
        Ok(Some(n))
    }

    /// A JSON path: dotted names, each bare or back-quoted.
    fn json_path(&mut self) -> Result<String, TypeError> {
        let mut path = String::new();
        loop {
            if self.peek() == Some(b'`') {
                path.push_str(&self.quoted(b'`')?);
            } else {
                path.push_str(self.ident()?);
            }
            if self.s.get(self.pos) != Some(&b'.') {
                return Ok(path);
            }
            self.pos += 1;
            path.push('.');
        }
    }

    fn json(&mut self, depth: usize) -> Result<JsonSpec, TypeError> {
        let mut spec = JsonSpec::default();
        if !self.eat(b'(') {
            return Ok(spec);
        }
        loop {
            let save = self.pos;
            let word = self.ident().map(str::to_owned).unwrap_or_default();
            if self.eat(b'=') {
                let n =
                    u64::try_from(self.number()?).map_err(|_| self.err("bad JSON parameter"))?;
                spec.params.push((word, n));
            } else if word == "SKIP" {
                let save = self.pos;
                if self.ident().is_ok_and(|w| w == "REGEXP") {
                    // Which paths a regexp drops cannot be decided here.
                    return Err(TypeError::Unsupported(self.text.to_owned()));
                }
                self.pos = save;
                let path = self.json_path()?;
                spec.skip.push(path);
            } else {
                self.pos = save;
                let path = self.json_path()?;
                let t = self.ty(depth + 1)?;
                spec.typed.push((path, t));
            }
            if self.eat(b')') {
                return Ok(spec);
            }
            self.expect(b',', "expected `,` or `)` in JSON")?;
        }
    }
}

fn quote(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("'")?;
    for c in s.chars() {
        match c {
            '\'' => f.write_str("\\'")?,
            '\\' => f.write_str("\\\\")?,
            c => write!(f, "{c}")?,
        }
    }
    f.write_str("'")
}

impl fmt::Display for ChType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChType::UInt8 => f.write_str("UInt8"),
            ChType::UInt16 => f.write_str("UInt16"),
            ChType::UInt32 => f.write_str("UInt32"),
            ChType::UInt64 => f.write_str("UInt64"),
            ChType::UInt128 => f.write_str("UInt128"),
            ChType::UInt256 => f.write_str("UInt256"),
            ChType::Int256 => f.write_str("Int256"),
            ChType::Int8 => f.write_str("Int8"),
            ChType::Int16 => f.write_str("Int16"),
            ChType::Int32 => f.write_str("Int32"),
            ChType::Int64 => f.write_str("Int64"),
            ChType::Int128 => f.write_str("Int128"),
            ChType::Float32 => f.write_str("Float32"),
            ChType::Float64 => f.write_str("Float64"),
            ChType::String => f.write_str("String"),
            ChType::FixedString(n) => write!(f, "FixedString({n})"),
            ChType::Date => f.write_str("Date"),
            ChType::DateTime(None) => f.write_str("DateTime"),
            ChType::DateTime(Some(tz)) => {
                f.write_str("DateTime(")?;
                quote(f, tz)?;
                f.write_str(")")
            }
            ChType::DateTime64(p, None) => write!(f, "DateTime64({p})"),
            ChType::DateTime64(p, Some(tz)) => {
                write!(f, "DateTime64({p}, ")?;
                quote(f, tz)?;
                f.write_str(")")
            }
            ChType::Nullable(t) => write!(f, "Nullable({t})"),
            ChType::Array(t) => write!(f, "Array({t})"),
            ChType::LowCardinality(t) => write!(f, "LowCardinality({t})"),
            ChType::Uuid => f.write_str("UUID"),
            ChType::Enum8(items) => {
                write_enum(f, "Enum8", items.iter().map(|(n, v)| (n, i16::from(*v))))
            }
            ChType::Enum16(items) => write_enum(f, "Enum16", items.iter().map(|(n, v)| (n, *v))),
            ChType::Decimal { precision, scale } => write!(f, "Decimal({precision}, {scale})"),
            ChType::Bool => f.write_str("Bool"),
            ChType::Map(k, v) => write!(f, "Map({k}, {v})"),
            ChType::IPv4 => f.write_str("IPv4"),
            ChType::IPv6 => f.write_str("IPv6"),
            ChType::Tuple(items) => {
                f.write_str("Tuple(")?;
                for (i, (name, t)) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    if let Some(n) = name {
                        write!(f, "{n} ")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str(")")
            }
            ChType::Nothing => f.write_str("Nothing"),
            ChType::Json(spec) => write_json(f, spec),
            ChType::Variant(items) => {
                f.write_str("Variant(")?;
                for (i, t) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str(")")
            }
            ChType::Dynamic(None) => f.write_str("Dynamic"),
            ChType::Dynamic(Some(n)) => write!(f, "Dynamic(max_types={n})"),
        }
    }
}

fn write_json(f: &mut fmt::Formatter<'_>, spec: &JsonSpec) -> fmt::Result {
    if spec.params.is_empty() && spec.typed.is_empty() && spec.skip.is_empty() {
        return f.write_str("JSON");
    }
    f.write_str("JSON(")?;
    let mut sep = "";
    for (k, v) in &spec.params {
        write!(f, "{sep}{k}={v}")?;
        sep = ", ";
    }
    for (path, t) in &spec.typed {
        write!(f, "{sep}{path} {t}")?;
        sep = ", ";
    }
    for path in &spec.skip {
        write!(f, "{sep}SKIP {path}")?;
        sep = ", ";
    }
    f.write_str(")")
}

fn write_enum<'a>(
    f: &mut fmt::Formatter<'_>,
    name: &str,
    items: impl Iterator<Item = (&'a String, i16)>,
) -> fmt::Result {
    write!(f, "{name}(")?;
    for (i, (n, v)) in items.enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        quote(f, n)?;
        write!(f, " = {v}")?;
    }
    f.write_str(")")
}

impl ChType {
    /// The type with `LowCardinality` wrappers removed at this level.
    #[must_use]
    pub fn strip_low_cardinality(&self) -> &ChType {
        match self {
            ChType::LowCardinality(t) => t.strip_low_cardinality(),
            t => t,
        }
    }

    /// Whether the type (ignoring `LowCardinality`) is an integer type.
    #[must_use]
    pub fn is_integer(&self) -> bool {
        matches!(
            self.strip_low_cardinality(),
            ChType::UInt8
                | ChType::UInt16
                | ChType::UInt32
                | ChType::UInt64
                | ChType::UInt128
                | ChType::Int8
                | ChType::Int16
                | ChType::Int32
                | ChType::Int64
                | ChType::Int128
                | ChType::UInt256
                | ChType::Int256
        )
    }
}

#[cfg(test)]
mod tests;
