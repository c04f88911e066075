//! Electric's 400 validation body, `{"message":"Invalid request","errors":{…}}`, and the
//! texts of the checks that need the catalog (done by the caller, after parsing).

use std::collections::BTreeMap;

use syncline_core::sql::quote_ident;

/// Validation failures of a shape request, by field; renders as Electric's 400 body.
///
/// Fields keep Electric's names (`table`, `offset`, `where`, …); subset failures nest under
/// `errors.subset.<field>`. Keys are emitted in sorted order, as Electric's (Jason-encoded,
/// small) maps are; messages of one field in the order they were added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParamErrors {
    fields: BTreeMap<String, Vec<String>>,
    subset: BTreeMap<String, Vec<String>>,
}

impl ParamErrors {
    /// One failure of a top-level field, e.g. `("where", "unknown reference foo")`.
    pub fn single(field: &str, message: impl Into<String>) -> Self {
        let mut errors = Self::default();
        errors.add(field, message);
        errors
    }

    /// One failure of a subset field, rendered under `errors.subset.<field>`.
    pub fn single_subset(field: &str, message: impl Into<String>) -> Self {
        let mut errors = Self::default();
        errors.add_subset(field, message);
        errors
    }

    /// Adds a failure of a top-level field.
    pub fn add(&mut self, field: &str, message: impl Into<String>) {
        self.fields
            .entry(field.to_owned())
            .or_default()
            .push(message.into());
    }

    /// Adds a failure of a subset field.
    pub fn add_subset(&mut self, field: &str, message: impl Into<String>) {
        self.subset
            .entry(field.to_owned())
            .or_default()
            .push(message.into());
    }

    /// True when nothing failed.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty() && self.subset.is_empty()
    }

    /// The response body (status 400, `application/json`).
    ///
    /// `message` comes before `errors` as in the protocol reference; Electric's own encoder
    /// sorts the two keys the other way round, which no JSON client can observe.
    pub fn body(&self) -> String {
        let mut keys: Vec<&str> = self.fields.keys().map(String::as_str).collect();
        if !self.subset.is_empty() {
            keys.push("subset");
            keys.sort_unstable();
        }
        let entries: Vec<String> = keys
            .into_iter()
            .map(|key| {
                let value = match self.fields.get(key) {
                    Some(messages) => json(messages),
                    None => object(&self.subset),
                };
                format!("{}:{value}", json(key))
            })
            .collect();
        format!(
            r#"{{"message":"Invalid request","errors":{{{}}}}}"#,
            entries.join(",")
        )
    }
}

fn object(fields: &BTreeMap<String, Vec<String>>) -> String {
    let entries: Vec<String> = fields
        .iter()
        .map(|(key, messages)| format!("{}:{}", json(key), json(messages)))
        .collect();
    format!("{{{}}}", entries.join(","))
}

fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("strings serialise")
}

/// `table` text when the relation is not in the catalog.
pub fn table_does_not_exist(schema: &str, table: &str) -> String {
    format!(
        "Table {}.{} does not exist. If the table name contains capitals or special characters \
         you must quote it.",
        quote_ident(schema),
        quote_ident(table)
    )
}

/// `table` text when row-level security applies to the server's role on the table: the
/// snapshot would honour the policies but replicated changes cannot, so no shape is served.
pub fn row_security_active(schema: &str, table: &str) -> String {
    format!(
        "Table {}.{} has row-level security enabled for this database role. Syncline cannot apply \
         row-level security policies to replicated changes, so it does not serve shapes of this \
         table; connect with a role that bypasses row-level security, or disable it.",
        quote_ident(schema),
        quote_ident(table)
    )
}

/// `columns` text when the selection leaves out primary-key columns (in key order).
pub fn columns_missing_pk(missing: &[&str]) -> String {
    format!(
        "The list of columns must include all primary key columns, missing: {}",
        missing.join(", ")
    )
}

/// `columns` text when the shape would hold generated columns, which Postgres 15 does not
/// replicate; `implicit` when the request named no columns.
pub fn columns_generated(generated: &[&str], implicit: bool) -> String {
    let mut text = format!(
        "The following columns are generated and cannot be included in the shape: {}",
        generated.join(", ")
    );
    if implicit {
        text.push_str(
            ". You can exclude them from the shape by explicitly listing which columns to fetch \
             in the 'columns' query param",
        );
    }
    text
}

/// `columns` text when selected columns are not on the table (in request order).
pub fn columns_not_found(unknown: &[&str]) -> String {
    format!(
        "The following columns are not found on the table: {}",
        unknown.join(", ")
    )
}

/// `columns` text when selected columns are not among `queryable_columns`.
pub fn columns_not_queryable(hidden: &[&str]) -> String {
    format!(
        "The following columns are not queryable: {}",
        hidden.join(", ")
    )
}

/// `where` (or `subset.where`) text when `$n` has no value in `params`.
pub fn parameter_not_provided(n: usize) -> String {
    format!("parameter ${n} was not provided")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_fields_sorted_with_subset_nested() {
        let mut errors = ParamErrors::single("table", "can't be blank");
        errors.add("offset", "has invalid format");
        errors.add("offset", "second");
        errors.add_subset("where", "At location 17: syntax error at or near \"x\"");
        errors.add_subset("limit", "must be greater than 0");
        errors.add("where", "w");
        assert_eq!(
            errors.body(),
            r#"{"message":"Invalid request","errors":{"offset":["has invalid format","second"],"subset":{"limit":["must be greater than 0"],"where":["At location 17: syntax error at or near \"x\""]},"table":["can't be blank"],"where":["w"]}}"#
        );
        assert!(!errors.is_empty());
        assert!(ParamErrors::default().is_empty());
    }

    #[test]
    fn subset_only() {
        assert_eq!(
            ParamErrors::single_subset("order_by", "x").body(),
            r#"{"message":"Invalid request","errors":{"subset":{"order_by":["x"]}}}"#
        );
    }

    #[test]
    fn catalog_texts() {
        assert_eq!(
            table_does_not_exist("electric_test", "issues for 12_0_3fa"),
            "Table \"electric_test\".\"issues for 12_0_3fa\" does not exist. If the table name \
             contains capitals or special characters you must quote it."
        );
        assert_eq!(
            table_does_not_exist("public", "a\"b"),
            "Table \"public\".\"a\"\"b\" does not exist. If the table name contains capitals or \
             special characters you must quote it."
        );
        assert_eq!(
            columns_missing_pk(&["id"]),
            "The list of columns must include all primary key columns, missing: id"
        );
        assert_eq!(
            columns_missing_pk(&["a", "b"]),
            "The list of columns must include all primary key columns, missing: a, b"
        );
        assert_eq!(
            columns_not_found(&["x", "y"]),
            "The following columns are not found on the table: x, y"
        );
        assert_eq!(parameter_not_provided(2), "parameter $2 was not provided");
    }
}
