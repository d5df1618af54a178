//! `MIGRATOR` embeds `migrations/` (`sqlx::migrate!`): a migration added there must rebuild
//! this crate, which cargo does not know from the macro alone.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
