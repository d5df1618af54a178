//! Named parameters for the long statements (the one door's writes): each value is declared
//! once, beside its name and SQL type, and the statement reads it as `arg.<name>` from an `arg`
//! CTE built from the same declarations. Nothing maps a `$n` back to a meaning by counting,
//! so two values cannot be swapped by their position.

use sqlx::postgres::PgArguments;
use sqlx::{Arguments, Encode, Postgres, Type};

/// The values of one statement, in the order they were declared.
#[derive(Default)]
pub(crate) struct Params {
    columns: Vec<(&'static str, &'static str)>,
    args: PgArguments,
    error: Option<sqlx::error::BoxDynError>,
}

impl Params {
    /// Declares `name` (read as `arg.name`) of SQL type `sql_type` with `value`.
    pub fn with<'q, T>(mut self, name: &'static str, sql_type: &'static str, value: T) -> Self
    where
        T: Encode<'q, Postgres> + Type<Postgres> + 'q,
    {
        debug_assert!(!self.columns.iter().any(|(n, _)| *n == name), "parameter {name} declared twice");
        if let Err(e) = self.args.add(value) {
            self.error.get_or_insert(e);
        }
        self.columns.push((name, sql_type));
        self
    }

    /// The statement: `WITH arg AS (SELECT $1::type AS name, …), <rest>`; `rest` continues the
    /// `WITH` list. Every declared value must be read by `rest` (checked in debug builds: a
    /// value declared and never read is a write that silently does less than its caller asked).
    ///
    /// `{$name}` in `rest` is the value itself (`$n::type`), for the key a statement finds its
    /// row by: the planner then sees a parameter, not a column of the `arg` CTE, and looks the
    /// row up by its index whatever it believes of the table's size (on a young or just-grown
    /// table it believed a sequential scan cheaper, and scanned every node on every write).
    pub fn statement(&self, rest: &str) -> String {
        let mut rest = rest.to_string();
        let mut sql = String::from("WITH arg AS (SELECT ");
        for (i, (name, ty)) in self.columns.iter().enumerate() {
            let value = format!("${}::{ty}", i + 1);
            let direct = format!("{{${name}}}");
            debug_assert!(
                rest.contains(&format!("arg.{name}")) || rest.contains(&direct),
                "parameter {name} is never read"
            );
            rest = rest.replace(&direct, &value);
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("{value} AS {name}"));
        }
        debug_assert!(!rest.contains("{$"), "a {{$name}} in the statement names no parameter");
        sql.push_str("), ");
        sql.push_str(&rest);
        sql
    }

    /// [`Params::statement`], built once for a call site (`cache`): its declarations are the same
    /// on every call, so is its text — the hot path does not rebuild it (checked in debug
    /// builds).
    pub fn statement_once(&self, cache: &'static std::sync::OnceLock<String>, rest: &str) -> &'static str {
        let sql = cache.get_or_init(|| self.statement(rest));
        debug_assert_eq!(*sql, self.statement(rest), "a statement's declarations changed between calls");
        sql
    }

    /// The encoded values, or the first value that could not be encoded.
    pub fn into_arguments(self) -> Result<PgArguments, sqlx::Error> {
        match self.error {
            Some(e) => Err(sqlx::Error::Encode(e)),
            None => Ok(self.args),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cte_names_each_value_in_declaration_order() {
        let p = Params::default().with("node_id", "uuid", uuid::Uuid::nil()).with("to_state", "text", "READY");
        assert_eq!(
            p.statement("upd AS (SELECT arg.node_id, arg.to_state FROM arg) SELECT 1"),
            "WITH arg AS (SELECT $1::uuid AS node_id, $2::text AS to_state), \
             upd AS (SELECT arg.node_id, arg.to_state FROM arg) SELECT 1"
        );
        assert!(p.into_arguments().is_ok());
    }

    #[test]
    fn a_key_is_read_as_the_value_itself() {
        let p = Params::default().with("node_id", "uuid", uuid::Uuid::nil()).with("to_state", "text", "READY");
        assert_eq!(
            p.statement("upd AS (UPDATE t SET s = arg.to_state FROM arg WHERE t.id = {$node_id}) SELECT 1"),
            "WITH arg AS (SELECT $1::uuid AS node_id, $2::text AS to_state), \
             upd AS (UPDATE t SET s = arg.to_state FROM arg WHERE t.id = $1::uuid) SELECT 1"
        );
    }

    #[test]
    #[should_panic(expected = "parameter unread is never read")]
    fn a_value_nobody_reads_is_caught() {
        let p = Params::default().with("unread", "int4", 1_i32);
        let _ = p.statement("x AS (SELECT 1) SELECT 1");
    }
}
