//! A callback receiver for a test.

use super::*;

/// A callback receiver for a test: keeps every JSON body posted to its URL, answers 200.
#[derive(Clone, Default)]
pub struct Hooks(Arc<Mutex<Vec<Value>>>);

async fn keep_hook(
    axum::extract::State(h): axum::extract::State<Hooks>,
    body: axum::body::Bytes,
) -> axum::http::StatusCode {
    if let Ok(v) = serde_json::from_slice::<Value>(&body) {
        h.0.lock().expect("hooks").push(v);
    }
    axum::http::StatusCode::OK
}

impl Hooks {
    /// Serves on a port of its own; answers its URL.
    pub async fn serve(&self) -> anyhow::Result<String> {
        let app = axum::Router::new().route("/hook", axum::routing::post(keep_hook)).with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(url)
    }

    /// Every body received.
    pub fn all(&self) -> Vec<Value> {
        self.0.lock().expect("hooks").clone()
    }

    /// The bodies received of `event_type`.
    pub fn of(&self, event_type: &str) -> Vec<Value> {
        self.0.lock().expect("hooks").iter().filter(|h| h["event_type"] == event_type).cloned().collect()
    }
}
