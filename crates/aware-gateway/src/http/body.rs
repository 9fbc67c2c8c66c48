//! Strict request bodies: a JSON object whose fields are taken one by one with messages that
//! name the field and what is accepted; whatever is left over is an unknown field (03 §5.1).

use crate::http::error::{ApiError, ApiResult};
use axum::http::StatusCode;
use serde_json::{Map, Value};

/// Largest accepted body.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Parses JSON refusing duplicate object keys at any depth: with two values for one key, which
/// one a reader takes differs between parsers (and a proxy or log may have seen the other).
pub fn parse_strict(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = Strict.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

struct Strict;

impl<'de> serde::de::DeserializeSeed<'de> for Strict {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Strict)
    }
}

impl<'de> serde::de::Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(n)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        serde::de::DeserializeSeed::deserialize(Strict, d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Strict)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.contains_key(&k) {
                return Err(serde::de::Error::custom(format!(
                    "duplicate key {k:?} (each key may appear once per object)"
                )));
            }
            let v = map.next_value_seed(Strict)?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

pub struct Obj {
    map: Map<String, Value>,
}

fn invalid_json(msg: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", msg)
}

impl Obj {
    /// Parses a body; an empty body is an empty object when `empty_ok`.
    pub fn parse(bytes: &[u8], empty_ok: bool) -> ApiResult<Self> {
        if bytes.len() > MAX_BODY_BYTES {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "body must be at most 1 MiB",
            ));
        }
        if empty_ok && bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Obj { map: Map::new() });
        }
        match parse_strict(bytes) {
            Ok(Value::Object(map)) => Ok(Obj { map }),
            Ok(_) => Err(invalid_json("body must be a JSON object")),
            Err(e) => Err(invalid_json(format!("body is not valid JSON: {e}"))),
        }
    }

    pub fn from_map(map: Map<String, Value>) -> Self {
        Obj { map }
    }

    /// Removes a field. `null` is returned as is: each typed getter refuses it with the same
    /// message as any other wrong value, since an optional field is omitted, never null.
    fn take(&mut self, field: &str) -> ApiResult<Option<Value>> {
        Ok(self.map.remove(field))
    }

    pub fn has(&self, field: &str) -> bool {
        self.map.contains_key(field)
    }

    pub fn opt_str(&mut self, field: &str) -> ApiResult<Option<String>> {
        match self.take(field)? {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(ApiError::invalid(format!("{field} must be a string"))),
        }
    }

    pub fn req_str(&mut self, field: &str) -> ApiResult<String> {
        self.opt_str(field)?
            .ok_or_else(|| ApiError::invalid(format!("{field} is required (a string)")))
    }

    pub fn opt_bool(&mut self, field: &str) -> ApiResult<Option<bool>> {
        match self.take(field)? {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(_) => Err(ApiError::invalid(format!("{field} must be a boolean"))),
        }
    }

    /// An integer in `range`; `msg` is the whole error message (the spec fixes some wordings).
    pub fn opt_int(
        &mut self,
        field: &str,
        range: std::ops::RangeInclusive<i64>,
        msg: &str,
    ) -> ApiResult<Option<i64>> {
        match self.take(field)? {
            None => Ok(None),
            // `as_i64` is `Some` only for JSON integers: fractions, exponents (parsed as floats),
            // strings, booleans and null all fall through to the error.
            Some(v) => match v.as_i64() {
                Some(n) if range.contains(&n) => Ok(Some(n)),
                _ => Err(ApiError::invalid(msg.to_string())),
            },
        }
    }

    pub fn opt_value(&mut self, field: &str) -> ApiResult<Option<Value>> {
        match self.take(field)? {
            Some(Value::Null) => Err(ApiError::invalid(format!(
                "{field} must not be null (omit it instead)"
            ))),
            other => Ok(other),
        }
    }

    pub fn opt_obj(&mut self, field: &str) -> ApiResult<Option<Obj>> {
        match self.take(field)? {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Obj { map })),
            Some(_) => Err(ApiError::invalid(format!("{field} must be an object"))),
        }
    }

    pub fn opt_array(&mut self, field: &str) -> ApiResult<Option<Vec<Value>>> {
        match self.take(field)? {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(_) => Err(ApiError::invalid(format!("{field} must be an array"))),
        }
    }

    /// Refuses whatever was not taken.
    pub fn finish(self) -> ApiResult<()> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(k) => Err(ApiError::invalid(format!("unknown field {k:?}"))),
        }
    }
}

/// Query parameters, strict in the same way.
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    pub fn parse(raw: Option<&str>) -> ApiResult<Self> {
        let mut pairs = Vec::new();
        for part in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let dec = |s: &str| -> ApiResult<String> {
                let plus = s.replace('+', " ");
                percent_encoding::percent_decode_str(&plus)
                    .decode_utf8()
                    .map(|c| c.into_owned())
                    .map_err(|_| {
                        ApiError::invalid(format!(
                            "query parameter {k:?} is not valid UTF-8 after percent-decoding"
                        ))
                    })
            };
            pairs.push((dec(k)?, dec(v)?));
        }
        Ok(Query { pairs })
    }

    pub fn take_all(&mut self, name: &str) -> Vec<String> {
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pairs)
            .into_iter()
            .partition(|(k, _)| k == name);
        self.pairs = rest;
        mine.into_iter().map(|(_, v)| v).collect()
    }

    pub fn take(&mut self, name: &str) -> ApiResult<Option<String>> {
        let mut all = self.take_all(name);
        match all.len() {
            0 => Ok(None),
            1 => Ok(all.pop()),
            _ => Err(ApiError::invalid(format!(
                "query parameter {name} must be given at most once"
            ))),
        }
    }

    pub fn int(
        &mut self,
        name: &str,
        range: std::ops::RangeInclusive<i64>,
        msg: &str,
    ) -> ApiResult<Option<i64>> {
        match self.take(name)? {
            None => Ok(None),
            Some(v) => match v.parse::<i64>() {
                Ok(n) if range.contains(&n) => Ok(Some(n)),
                _ => Err(ApiError::invalid(msg.to_string())),
            },
        }
    }

    /// `limit` (1..=500, default 100) and `offset` (≥ 0, default 0) of a paged list.
    pub fn page(&mut self) -> ApiResult<(i64, i64)> {
        let limit = self
            .int(
                "limit",
                1..=500,
                "limit must be an integer between 1 and 500",
            )?
            .unwrap_or(100);
        let offset = self
            .int(
                "offset",
                0..=i64::MAX,
                "offset must be a non-negative integer",
            )?
            .unwrap_or(0);
        Ok((limit, offset))
    }

    pub fn finish(self) -> ApiResult<()> {
        match self.pairs.first() {
            None => Ok(()),
            Some((k, _)) => Err(ApiError::invalid(format!("unknown query parameter {k:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        assert!(parse_strict(br#"{"a":1,"b":[{"c":1}]}"#).is_ok());
        let e = parse_strict(br#"{"a":1,"a":2}"#).unwrap_err().to_string();
        assert!(e.contains("duplicate key \"a\""), "{e}");
        assert!(parse_strict(br#"{"x":[{"k":1,"k":1}]}"#).is_err());
        assert!(parse_strict(br#"{"a":1} x"#).is_err());
    }
}
