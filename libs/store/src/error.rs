use qtg_core::TransitionError;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlx(sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(String),
    #[error(transparent)]
    Transition(#[from] TransitionError),
    /// The row was not in the state the caller expected (someone else moved it).
    #[error("{entity} {id} is no longer {expected}")]
    StaleState { entity: &'static str, id: String, expected: String },
    /// NOWAIT lost: another transaction holds the row.
    #[error("{0} is locked by another operation")]
    Busy(String),
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// A node's event or artifact named a node that is not there (or not of that movement):
    /// nothing was written. The rows' foreign key held this before migration 0039; each
    /// writer now inserts from the node row itself.
    #[error("no node {node} in movement {movement}: its {what} was not written")]
    NoNode { node: uuid::Uuid, movement: uuid::Uuid, what: &'static str },
}

/// Every database error passes here: one that says the server went away or turned read-only
/// makes the pool drop its older connections (`session::observe_error`).
impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        crate::session::observe_error(&e);
        StoreError::Sqlx(e)
    }
}

impl StoreError {
    pub fn corrupt(what: impl std::fmt::Display) -> Self {
        StoreError::Corrupt(what.to_string())
    }

    /// `Ok` when an insert from the node row wrote the `expected` rows; otherwise the node was
    /// not there (or not of that movement), and the statement wrote nothing.
    pub(crate) fn node_found(
        written: u64,
        expected: u64,
        node: uuid::Uuid,
        movement: uuid::Uuid,
        what: &'static str,
    ) -> Result<(), StoreError> {
        if written == expected {
            Ok(())
        } else {
            Err(StoreError::NoNode { node, movement, what })
        }
    }
}
