//! Fields resolved to positions: where an operator finds the fields it
//! reads in the tuples it gets.

use super::{Input, PlanError};

/// The input of `operator` reading `names` from tuples of `fields`, or the
/// error naming the field it lacks.
pub(super) fn resolve(topology: &str, operator: &str, fields: &[String], names: &[String]) -> Result<Input, PlanError> {
    if let Some(name) = names.iter().find(|name| !fields.contains(name)) {
        return Err(PlanError::MissingField {
            topology: topology.to_owned(),
            operator: operator.to_owned(),
            field: name.clone(),
            fields: fields.to_vec(),
        });
    }
    Ok(input_of(fields, names))
}

pub(super) fn positions(fields: &[String], names: impl IntoIterator<Item = impl AsRef<str>>) -> Vec<usize> {
    names.into_iter().map(|n| fields.iter().position(|f| f == n.as_ref()).expect("resolved at load")).collect()
}

pub(super) fn input_of(fields: &[String], names: &[String]) -> Input {
    let positions = positions(fields, names);
    let whole_tuple = positions.iter().copied().eq(0..fields.len());
    Input { positions, names: names.to_vec(), whole_tuple }
}
