//! Black-box test harness: a fresh database per test, the real binaries spawned as separate
//! processes (addresses read from their logs), an API client, and DB assertions.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};
use sqlx::{PgPool, Row};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub mod chaos;
pub mod webdriver;

mod db;
mod evm;
mod hooks;
mod inprocess;
mod procs;
mod py;
mod remote;
mod venue;
pub use db::*;
pub use evm::*;
pub use hooks::*;
pub use inprocess::*;
pub use procs::*;
pub use py::*;
pub use remote::*;
pub use venue::*;
