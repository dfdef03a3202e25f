//! Typed access to an input tuple's fields, and the emitter for outputs.

use crate::call::{BatchInfo, Error};
use crate::codec::{BatchWriter, Row, ValueRef};

/// One input tuple: the fields the operator declared, read in place.
#[derive(Clone, Copy, Debug)]
pub struct Tuple<'a> {
    row: Row<'a>,
    info: &'a BatchInfo,
}

/// Names a field by position or by name.
pub trait FieldRef: Copy + std::fmt::Display {
    /// Position of the field among the tuple's fields.
    fn position(self, fields: &[String]) -> Option<usize>;
}

impl FieldRef for usize {
    #[inline]
    fn position(self, fields: &[String]) -> Option<usize> {
        (self < fields.len()).then_some(self)
    }
}

impl FieldRef for &str {
    #[inline]
    fn position(self, fields: &[String]) -> Option<usize> {
        fields.iter().position(|f| f == self)
    }
}

/// Converts a field value into a Rust type.
pub trait FromValue<'a>: Sized {
    /// The type's name in error messages.
    const NAME: &'static str;
    /// The value as this type, if it is one.
    fn from_value(value: ValueRef<'a>) -> Option<Self>;
}

macro_rules! from_value {
    ($($t:ty, $name:literal, $pat:pat => $out:expr);* $(;)?) => {$(
        impl<'a> FromValue<'a> for $t {
            const NAME: &'static str = $name;
            fn from_value(value: ValueRef<'a>) -> Option<Self> {
                match value { $pat => Some($out), _ => None }
            }
        }
    )*};
}
from_value! {
    &'a str, "string", ValueRef::Str(s) => s;
    &'a [u8], "bytes", ValueRef::Bytes(b) => b;
    i64, "i64", ValueRef::I64(i) => i;
    f64, "f64", ValueRef::F64(f) => f;
    bool, "bool", ValueRef::Bool(b) => b;
}

impl<'a> Tuple<'a> {
    /// A tuple over `row`, whose fields are named in `info.fields`.
    #[inline]
    pub fn new(row: Row<'a>, info: &'a BatchInfo) -> Tuple<'a> {
        Tuple { row, info }
    }

    /// The batch this tuple belongs to.
    pub fn batch(&self) -> &'a BatchInfo {
        self.info
    }

    /// Names of the tuple's fields, in order.
    pub fn fields(&self) -> &'a [String] {
        &self.info.fields
    }

    /// The raw value of a field.
    #[inline]
    pub fn value(&self, field: impl FieldRef) -> Result<ValueRef<'a>, Error> {
        field.position(&self.info.fields).and_then(|i| self.row.get(i)).ok_or_else(|| {
            Error::fatal(format!(
                "operator {} has no input field {field} (it has {:?})",
                self.info.operator, self.info.fields
            ))
        })
    }

    /// A field's value as type `T`; an error names the field and both types.
    #[inline]
    pub fn get<T: FromValue<'a>>(&self, field: impl FieldRef) -> Result<T, Error> {
        let value = self.value(field)?;
        T::from_value(value).ok_or_else(|| {
            Error::fatal(format!(
                "operator {}: field {field} is {}, not {}",
                self.info.operator,
                value.type_name(),
                T::NAME
            ))
        })
    }

    /// A string field.
    #[inline]
    pub fn str(&self, field: impl FieldRef) -> Result<&'a str, Error> {
        self.get(field)
    }

    /// An integer field.
    #[inline]
    pub fn i64(&self, field: impl FieldRef) -> Result<i64, Error> {
        self.get(field)
    }
}

/// Collects a function's output tuples for one input tuple.
#[derive(Debug)]
pub struct Emitter<'w> {
    writer: &'w mut BatchWriter,
    parent: u32,
}

impl<'w> Emitter<'w> {
    /// An emitter whose rows extend input row `parent`.
    #[inline]
    pub fn new(writer: &'w mut BatchWriter, parent: u32) -> Emitter<'w> {
        Emitter { writer, parent }
    }

    /// Emits one tuple: exactly as many values as the operator's output
    /// fields, or the call fails naming both counts.
    #[inline]
    pub fn emit<'v, V: Into<ValueRef<'v>>>(&mut self, values: impl IntoIterator<Item = V>) -> Result<(), Error> {
        self.writer
            .push_row(self.parent, values.into_iter().map(Into::into))
            .map_err(|e| Error::fatal(format!("emitted {e}")))
    }
}

/// Collects a spout's tuples for a batch.
#[derive(Debug)]
pub struct SpoutEmitter<'w> {
    writer: &'w mut BatchWriter,
}

impl<'w> SpoutEmitter<'w> {
    /// An emitter writing to `writer`.
    pub fn new(writer: &'w mut BatchWriter) -> SpoutEmitter<'w> {
        SpoutEmitter { writer }
    }

    /// Emits one tuple: exactly as many values as the spout's fields.
    pub fn emit<'v, V: Into<ValueRef<'v>>>(&mut self, values: impl IntoIterator<Item = V>) -> Result<(), Error> {
        self.writer
            .push_row(0, values.into_iter().map(Into::into))
            .map_err(|e| Error::fatal(format!("spout emitted {e}")))
    }

    /// Tuples emitted so far.
    pub fn len(&self) -> usize {
        self.writer.rows()
    }

    /// True when nothing was emitted yet.
    pub fn is_empty(&self) -> bool {
        self.writer.rows() == 0
    }
}
