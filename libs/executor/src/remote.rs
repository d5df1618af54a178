//! Remote executors and signers: the same contract over gRPC (tonic) or HTTP JSON (reqwest,
//! proto3 canonical JSON), with a per-call deadline and bearer or HMAC (v4, libs/wire-auth) authentication.
//!
//! Failure mapping (the engine applies each method's semantics on top): unreachable, 5xx,
//! 401/403/429 or gRPC UNAVAILABLE/INTERNAL/… → `Unavailable`; a missed deadline →
//! `Timeout`; anything that breaks the contract (bad status, undecodable or oversize body,
//! missing fields) → `Protocol`.

use std::time::Duration;

use async_trait::async_trait;
use qtg_core::protocol::{Method, MAX_RESULT_BYTES};
use qtg_core::{
    ExecutionContext, ExecutionResult, NextState, ObserveOutcome, Refusal, SignRequest, SignResult, SubmitOutcome,
};
use qtg_proto::convert;
use qtg_proto::executor::v1 as pb;
use qtg_proto::executor::v1::executor_service_client::ExecutorServiceClient;
use qtg_proto::signer::v1 as spb;
use qtg_proto::signer::v1::signer_service_client::SignerServiceClient;
use qtg_wire_auth::{grpc_signed_bytes, target, Credentials, EXECUTOR_SERVICE, SIGNER_SERVICE};

/// The operation an executor call's signature covers.
fn exec_target(operation: &str) -> String {
    target(EXECUTOR_SERVICE, operation)
}
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tonic::transport::Channel;

use crate::{Executor, ExecutorError, Prepared, SignError, Signer, Submission};

/// Where and how a remote entry is reached.
#[derive(Clone)]
pub struct Endpoint {
    pub url: String,
    pub timeout: Duration,
    pub auth: Credentials,
    /// For `https://` endpoints: the CA certificate(s) (PEM) that sign the server's
    /// certificate, and optionally the name to verify instead of the URL's host.
    pub tls: Option<TlsClient>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &qtg_core::urls::redact(&self.url))
            .field("timeout", &self.timeout)
            .field("auth", &self.auth)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct TlsClient {
    pub ca_pem: Vec<u8>,
    pub domain: Option<String>,
}

impl TlsClient {
    fn rustls_config(&self) -> Result<rustls::ClientConfig, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&self.ca_pem) {
            roots.add(cert.map_err(|e| format!("CA file: {e}"))?).map_err(|e| format!("CA file: {e}"))?;
        }
        if roots.is_empty() {
            return Err("CA file holds no certificate".into());
        }
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())
            .map(|b| b.with_root_certificates(roots).with_no_client_auth())
    }
}

#[derive(Clone)]
enum Conn<G> {
    Grpc(G),
    Http { client: reqwest::Client, base: String },
}

/// Makes `ring` the process' rustls provider (reqwest needs one even for plain HTTP clients).
/// Idempotent; a provider installed earlier is kept.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn http_client(tls: Option<&TlsClient>) -> Result<reqwest::Client, String> {
    install_tls_provider();
    // Executors are called directly: an HTTP(S)_PROXY in the environment is not used.
    let builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).no_proxy();
    let builder = match tls {
        Some(t) => builder.tls_backend_preconfigured(t.rustls_config()?),
        None => builder,
    };
    builder.build().map_err(|e| format!("HTTP client: {e}"))
}

fn channel(endpoint: &Endpoint) -> Result<Channel, String> {
    let url = &endpoint.url;
    let mut ch = Channel::from_shared(url.to_string())
        .map_err(|e| format!("endpoint {:?}: {e}", qtg_core::urls::redact(url)))?
        .connect_timeout(endpoint.timeout.min(Duration::from_secs(10)));
    if let Some(t) = &endpoint.tls {
        let mut tls =
            tonic::transport::ClientTlsConfig::new().ca_certificate(tonic::transport::Certificate::from_pem(&t.ca_pem));
        if let Some(d) = &t.domain {
            tls = tls.domain_name(d.clone());
        }
        ch = ch.tls_config(tls).map_err(|e| format!("TLS: {e}"))?;
    }
    Ok(ch.connect_lazy())
}

/// A gRPC failure as the call's outcome; a deadline the server or the channel reports is the
/// call's own `deadline`.
/// What to tell an operator when an executor refuses qtg's v4 signature: one built before v4
/// refuses it, and keeps working through the deprecation window with `signature = "v3"`.
fn v4_hint(endpoint: &Endpoint) -> String {
    if matches!(endpoint.auth, Credentials::Hmac(_)) {
        format!(
            " (an executor built before the v4 signature refuses it: update it, or set auth.signature = \"v3\" \
             until {}; docs/executors.md §5a)",
            qtg_wire_auth::V3_ACCEPTED_UNTIL
        )
    } else {
        String::new()
    }
}

fn status_error(s: &tonic::Status, deadline: Duration) -> ExecutorError {
    use tonic::Code::*;
    let detail = format!("gRPC {:?}: {}", s.code(), s.message());
    let timeout = ExecutorError::Timeout(deadline.as_millis() as u64);
    match s.code() {
        DeadlineExceeded => timeout,
        // tonic's server answers a passed `grpc-timeout` with CANCELLED "Timeout expired".
        Cancelled if s.message().to_ascii_lowercase().contains("timeout") => timeout,
        Unavailable | Internal | Unknown | ResourceExhausted | Aborted | Cancelled | Unauthenticated
        | PermissionDenied => ExecutorError::Unavailable(detail),
        _ => ExecutorError::Protocol(detail),
    }
}

/// Runs a gRPC call under the entry's deadline (a miss is `Timeout`, whatever the channel
/// would have said).
async fn grpc_call<T>(
    endpoint: &Endpoint,
    fut: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, ExecutorError> {
    match tokio::time::timeout(endpoint.timeout, fut).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(s)) => Err(match status_error(&s, endpoint.timeout) {
            ExecutorError::Unavailable(d) if s.code() == tonic::Code::Unauthenticated => {
                ExecutorError::Unavailable(format!("{d}{}", v4_hint(endpoint)))
            }
            other => other,
        }),
        Err(_) => Err(ExecutorError::Timeout(endpoint.timeout.as_millis() as u64)),
    }
}

fn grpc_request<T: prost::Message + Serialize>(msg: T, endpoint: &Endpoint, target: &str) -> tonic::Request<T> {
    let body = if endpoint.auth.signs_body() { grpc_signed_bytes(&msg) } else { Vec::new() };
    let mut req = tonic::Request::new(msg);
    req.set_timeout(endpoint.timeout);
    if let Some(version) = endpoint.auth.deprecated_version() {
        qtg_telemetry::sink().deprecated_signature(target, version);
    }
    for (k, v) in endpoint.auth.headers(target, &body) {
        if let Ok(v) = v.parse() {
            req.metadata_mut().insert(k, v);
        }
    }
    // W3C trace context of the caller's span: the executor's work joins the node step's trace.
    if let Some(Ok(tp)) = qtg_telemetry::traceparent().map(|t| t.parse()) {
        req.metadata_mut().insert("traceparent", tp);
    }
    req
}

/// A failed HTTP call, with the status that answered it when one did: what a status means
/// (a signer's 422 is a refusal) is decided on the status, never on a message's text.
#[derive(Debug)]
struct HttpFailure {
    status: Option<u16>,
    error: ExecutorError,
}

impl From<ExecutorError> for HttpFailure {
    fn from(error: ExecutorError) -> Self {
        HttpFailure { status: None, error }
    }
}

impl From<HttpFailure> for ExecutorError {
    fn from(f: HttpFailure) -> Self {
        f.error
    }
}

/// The `message` of an error answer's JSON body (`{"error": {"message"}}`, as the SDK's
/// servers answer), read up to a few KiB.
async fn error_message(mut resp: reqwest::Response) -> Option<String> {
    const LIMIT: usize = 4096;
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        body.extend_from_slice(&chunk);
        if body.len() > LIMIT {
            return None;
        }
    }
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let m = v.pointer("/error/message").and_then(serde_json::Value::as_str)?;
    Some(m.chars().take(500).collect())
}

/// POSTs (or GETs, without a body) JSON; `Ok(None)` on 204.
async fn http_call<Req: Serialize, Resp: DeserializeOwned>(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    body: Option<&Req>,
    endpoint: &Endpoint,
    service: &str,
) -> Result<Option<Resp>, HttpFailure> {
    let url = format!("{}/{}", base.trim_end_matches('/'), path);
    let bytes = match body {
        Some(b) => serde_json::to_vec(b).map_err(|e| ExecutorError::Request(e.to_string()))?,
        None => Vec::new(),
    };
    let mut req = if body.is_some() { client.post(&url) } else { client.get(&url) }.timeout(endpoint.timeout);
    // From here on `url` is what errors show: its query (a token, perhaps) masked.
    let url = qtg_core::urls::redact(&url);
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let target = qtg_wire_auth::target(service, path);
    if let Some(version) = endpoint.auth.deprecated_version() {
        qtg_telemetry::sink().deprecated_signature(&target, version);
    }
    for (k, v) in endpoint.auth.headers(&target, &bytes) {
        req = req.header(k, v);
    }
    if let Some(tp) = qtg_telemetry::traceparent() {
        req = req.header("traceparent", tp);
    }
    let resp = req.body(bytes).send().await.map_err(|e| {
        if e.is_timeout() {
            ExecutorError::Timeout(endpoint.timeout.as_millis() as u64)
        } else {
            ExecutorError::Unavailable(format!("{url}: {}", e.without_url()))
        }
    })?;
    let status = resp.status();
    if status.as_u16() == 204 {
        return Ok(None);
    }
    if status.is_server_error() || matches!(status.as_u16(), 401 | 403 | 408 | 429) {
        let hint = if status.as_u16() == 401 { v4_hint(endpoint) } else { String::new() };
        let error = ExecutorError::Unavailable(format!("{url}: HTTP {status}{hint}"));
        return Err(HttpFailure { status: Some(status.as_u16()), error });
    }
    if !status.is_success() {
        let said = error_message(resp).await.map(|m| format!(": {m}")).unwrap_or_default();
        let error = ExecutorError::Protocol(format!("{url}: HTTP {status}{said}"));
        return Err(HttpFailure { status: Some(status.as_u16()), error });
    }
    let too_large = || ExecutorError::Protocol(format!("{url}: body over {MAX_RESULT_BYTES} bytes"));
    if resp.content_length().is_some_and(|l| l as usize > MAX_RESULT_BYTES) {
        return Err(too_large().into());
    }
    // Read with a hard limit while streaming (a chunked or dripped body has no length to
    // check first); the request's timeout bounds the whole read.
    let mut body = Vec::new();
    let mut resp = resp;
    loop {
        let chunk = resp.chunk().await.map_err(|e| {
            if e.is_timeout() {
                ExecutorError::Timeout(endpoint.timeout.as_millis() as u64)
            } else {
                ExecutorError::Unavailable(format!("{url}: {}", e.without_url()))
            }
        })?;
        let Some(chunk) = chunk else { break };
        if body.len() + chunk.len() > MAX_RESULT_BYTES {
            return Err(too_large().into());
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map(Some).map_err(|e| ExecutorError::Protocol(format!("{url}: {e}")).into())
}

fn wire<T>(r: Result<T, convert::WireError>) -> Result<T, ExecutorError> {
    r.map_err(|e| ExecutorError::Protocol(e.to_string()))
}

/// An executor served by another process.
pub struct RemoteExecutor {
    key: String,
    endpoint: Endpoint,
    conn: Conn<ExecutorServiceClient<Channel>>,
}

impl RemoteExecutor {
    pub fn grpc(key: &str, endpoint: Endpoint) -> Result<Self, String> {
        let ch = channel(&endpoint)?;
        let client = ExecutorServiceClient::new(ch).max_decoding_message_size(MAX_RESULT_BYTES);
        Ok(RemoteExecutor { key: key.to_string(), endpoint, conn: Conn::Grpc(client) })
    }

    pub fn http(key: &str, endpoint: Endpoint) -> Result<Self, String> {
        let base = endpoint.url.clone();
        let client = http_client(endpoint.tls.as_ref())?;
        Ok(RemoteExecutor { key: key.to_string(), endpoint, conn: Conn::Http { client, base } })
    }

    fn ctx(&self, ctx: &ExecutionContext) -> Result<Option<pb::ExecutionContext>, ExecutorError> {
        convert::context_to_wire(ctx).map(Some).map_err(|e| ExecutorError::Request(e.to_string()))
    }

    /// One result-returning call over either transport.
    async fn result_call<Req>(
        &self,
        method: Method,
        req: Req,
        grpc: impl AsyncFnOnce(
            ExecutorServiceClient<Channel>,
            tonic::Request<Req>,
        ) -> Result<tonic::Response<pb::ExecutionResult>, tonic::Status>,
    ) -> Result<Option<ExecutionResult>, ExecutorError>
    where
        Req: prost::Message + Serialize,
    {
        let answer = match &self.conn {
            Conn::Grpc(client) => Some(
                grpc_call(
                    &self.endpoint,
                    grpc(client.clone(), grpc_request(req, &self.endpoint, &exec_target(method.as_str()))),
                )
                .await?,
            ),
            Conn::Http { client, base } => {
                http_call::<Req, pb::ExecutionResult>(
                    client,
                    base,
                    method.as_str(),
                    Some(&req),
                    &self.endpoint,
                    EXECUTOR_SERVICE,
                )
                .await?
            }
        };
        match answer {
            None if method == Method::Preflight => Ok(None),
            None => Err(ExecutorError::Protocol(format!("{} answered 204", method.as_str()))),
            Some(r) => wire(convert::result_from_wire(&r, method)),
        }
    }
}

fn required(r: Option<ExecutionResult>, method: Method) -> Result<ExecutionResult, ExecutorError> {
    r.ok_or_else(|| ExecutorError::Protocol(format!("{} answered without next_state", method.as_str())))
}

/// The calls, without a worker transaction (remote executors have none) — also what the
/// conformance suite drives.
impl RemoteExecutor {
    pub async fn call_preflight(&self, ctx: &ExecutionContext) -> Result<Option<ExecutionResult>, ExecutorError> {
        let req = pb::PreflightRequest { executor_key: self.key.clone(), context: self.ctx(ctx)? };
        self.result_call(Method::Preflight, req, async |mut c, r| c.preflight(r).await).await
    }

    pub async fn call_prepare(&self, ctx: &ExecutionContext) -> Result<Prepared, ExecutorError> {
        let req = pb::PrepareRequest { executor_key: self.key.clone(), context: self.ctx(ctx)? };
        let resp = match &self.conn {
            Conn::Grpc(client) => {
                grpc_call(
                    &self.endpoint,
                    client.clone().prepare(grpc_request(req, &self.endpoint, &exec_target("prepare"))),
                )
                .await?
            }
            Conn::Http { client, base } => http_call::<_, pb::PrepareResponse>(
                client,
                base,
                "prepare",
                Some(&req),
                &self.endpoint,
                EXECUTOR_SERVICE,
            )
            .await?
            .ok_or_else(|| ExecutorError::Protocol("prepare answered 204".into()))?,
        };
        use pb::prepare_response::Outcome;
        match resp.outcome {
            Some(Outcome::Action(a)) => Ok(Prepared::Action(wire(convert::prepared_from_wire(&a))?)),
            Some(Outcome::Refused(r)) => {
                let refusal = required(wire(convert::result_from_wire(&r, Method::Prepare))?, Method::Prepare)?;
                Ok(Prepared::Refused(narrow(refusal, Method::Prepare)?))
            }
            None => Ok(Prepared::Empty),
        }
    }

    pub async fn call_submit(
        &self,
        ctx: &ExecutionContext,
        submission: &Submission<'_>,
    ) -> Result<ExecutionResult, ExecutorError> {
        let req = pb::SubmitRequest {
            executor_key: self.key.clone(),
            context: self.ctx(ctx)?,
            prepared_action: Some(convert::prepared_to_wire(submission.prepared)),
            sign_result: submission.signed.map(convert::sign_result_to_wire),
            idempotency_key: submission.idempotency_key.to_string(),
            submit_by: Some(convert::timestamp_to_wire(
                submission.submit_by.timestamp(),
                submission.submit_by.timestamp_subsec_nanos(),
            )),
        };
        required(self.result_call(Method::Submit, req, async |mut c, r| c.submit(r).await).await?, Method::Submit)
    }

    pub async fn call_observe(&self, ctx: &ExecutionContext) -> Result<ExecutionResult, ExecutorError> {
        let req = pb::ObserveRequest { executor_key: self.key.clone(), context: self.ctx(ctx)? };
        required(self.result_call(Method::Observe, req, async |mut c, r| c.observe(r).await).await?, Method::Observe)
    }

    pub async fn call_recover(
        &self,
        ctx: &ExecutionContext,
        idempotency_key: &str,
    ) -> Result<ExecutionResult, ExecutorError> {
        let req = pb::RecoverRequest {
            executor_key: self.key.clone(),
            context: self.ctx(ctx)?,
            idempotency_key: idempotency_key.to_string(),
        };
        required(self.result_call(Method::Recover, req, async |mut c, r| c.recover(r).await).await?, Method::Recover)
    }

    pub async fn call_health(&self) -> Result<Option<Value>, ExecutorError> {
        let req = pb::HealthRequest { executor_key: self.key.clone() };
        let resp = match &self.conn {
            Conn::Grpc(client) => {
                grpc_call(
                    &self.endpoint,
                    client.clone().health(grpc_request(req, &self.endpoint, &exec_target("health"))),
                )
                .await?
            }
            Conn::Http { client, base } => http_call::<pb::HealthRequest, pb::HealthResponse>(
                client,
                base,
                "health",
                None,
                &self.endpoint,
                EXECUTOR_SERVICE,
            )
            .await?
            .unwrap_or(pb::HealthResponse { ok: true, details: None }),
        };
        if !resp.ok {
            return Err(ExecutorError::Unavailable("executor reports not ok".into()));
        }
        Ok(Some(convert::from_struct(resp.details.as_ref())))
    }
}

/// A wire answer to `method`, checked against the contract and typed as that method's answer:
/// where a remote executor's answer enters qtg. A forbidden state is the executor's protocol
/// error, handled as every other one for the method.
fn narrow<S: NextState>(r: ExecutionResult, method: Method) -> Result<ExecutionResult<S>, ExecutorError> {
    r.narrow(method).map_err(|v| ExecutorError::Protocol(v.0))
}

#[async_trait]
impl Executor for RemoteExecutor {
    async fn preflight(&self, ctx: &ExecutionContext) -> Result<Option<Refusal>, ExecutorError> {
        self.call_preflight(ctx).await?.map(|r| narrow(r, Method::Preflight)).transpose()
    }

    async fn prepare(&self, ctx: &ExecutionContext) -> Result<Prepared, ExecutorError> {
        self.call_prepare(ctx).await
    }

    async fn submit(
        &self,
        ctx: &ExecutionContext,
        submission: &Submission<'_>,
    ) -> Result<SubmitOutcome, ExecutorError> {
        narrow(self.call_submit(ctx, submission).await?, Method::Submit)
    }

    async fn observe(&self, ctx: &ExecutionContext) -> Result<ObserveOutcome, ExecutorError> {
        narrow(self.call_observe(ctx).await?, Method::Observe)
    }

    async fn recover(&self, ctx: &ExecutionContext, idempotency_key: &str) -> Result<SubmitOutcome, ExecutorError> {
        narrow(self.call_recover(ctx, idempotency_key).await?, Method::Recover)
    }

    async fn health(&self) -> Result<Option<Value>, ExecutorError> {
        self.call_health().await
    }
}

/// A signer served by another process.
pub struct RemoteSigner {
    endpoint: Endpoint,
    conn: Conn<SignerServiceClient<Channel>>,
}

impl RemoteSigner {
    pub fn grpc(endpoint: Endpoint) -> Result<Self, String> {
        let ch = channel(&endpoint)?;
        Ok(RemoteSigner { conn: Conn::Grpc(SignerServiceClient::new(ch)), endpoint })
    }

    pub fn http(endpoint: Endpoint) -> Result<Self, String> {
        let base = endpoint.url.clone();
        let client = http_client(endpoint.tls.as_ref())?;
        Ok(RemoteSigner { endpoint, conn: Conn::Http { client, base } })
    }
}

#[async_trait]
impl Signer for RemoteSigner {
    async fn sign(&self, req: &SignRequest) -> Result<SignResult, SignError> {
        let wire_req =
            convert::sign_request_to_wire(req).map_err(|e| SignError::Call(ExecutorError::Request(e.to_string())))?;
        let resp = match &self.conn {
            Conn::Grpc(client) => {
                let mut client = client.clone();
                let call = client.sign(grpc_request(wire_req, &self.endpoint, &target(SIGNER_SERVICE, "sign")));
                match tokio::time::timeout(self.endpoint.timeout, call).await {
                    Ok(Ok(r)) => r.into_inner(),
                    Ok(Err(s)) if s.code() == tonic::Code::FailedPrecondition => {
                        return Err(SignError::Refused(s.message().to_string()))
                    }
                    Ok(Err(s)) => return Err(SignError::Call(status_error(&s, self.endpoint.timeout))),
                    Err(_) => {
                        return Err(SignError::Call(ExecutorError::Timeout(self.endpoint.timeout.as_millis() as u64)))
                    }
                }
            }
            Conn::Http { client, base } => {
                match http_call::<_, spb::SignResponse>(
                    client,
                    base,
                    "sign",
                    Some(&wire_req),
                    &self.endpoint,
                    SIGNER_SERVICE,
                )
                .await
                {
                    Ok(Some(r)) => r,
                    Ok(None) => return Err(SignError::Call(ExecutorError::Protocol("sign answered 204".into()))),
                    // The contract's refusal (docs/executors.md): 422, whatever the text says.
                    Err(HttpFailure { status: Some(422), error }) => return Err(SignError::Refused(error.to_string())),
                    Err(f) => return Err(SignError::Call(f.into())),
                }
            }
        };
        if resp.signature.is_empty() {
            return Err(SignError::Call(ExecutorError::Protocol("sign answered without a signature".into())));
        }
        Ok(SignResult {
            signature: resp.signature,
            signed_payload: (!resp.signed_payload.is_empty()).then_some(resp.signed_payload),
            signer_address: (!resp.signer_address.is_empty()).then_some(resp.signer_address),
            signed_tx_hash: (!resp.signed_tx_hash.is_empty()).then_some(resp.signed_tx_hash),
        })
    }

    async fn health(&self) -> Result<Option<Value>, ExecutorError> {
        let req = spb::HealthRequest { signer_key: String::new() };
        let resp = match &self.conn {
            Conn::Grpc(client) => {
                grpc_call(
                    &self.endpoint,
                    client.clone().health(grpc_request(req, &self.endpoint, &target(SIGNER_SERVICE, "health"))),
                )
                .await?
            }
            Conn::Http { client, base } => http_call::<spb::HealthRequest, spb::HealthResponse>(
                client,
                base,
                "health",
                None,
                &self.endpoint,
                SIGNER_SERVICE,
            )
            .await?
            .unwrap_or_default(),
        };
        if !resp.ok {
            return Err(ExecutorError::Unavailable("signer reports not ok".into()));
        }
        let mut details = convert::from_struct(resp.details.as_ref());
        if !resp.signer_address.is_empty() {
            details["signer_address"] = Value::String(resp.signer_address);
        }
        Ok(Some(details))
    }
}
