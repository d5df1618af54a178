//! Serving a [`Handler`] over both transports.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use qtg_proto::convert;
use qtg_proto::executor::v1 as pb;
use qtg_proto::executor::v1::executor_service_server::{ExecutorService, ExecutorServiceServer};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Status};

use qtg_proto::signer::v1 as spb;
use qtg_proto::signer::v1::signer_service_server::{SignerService, SignerServiceServer};

use crate::fence::{Fenced, KeyStore, MemoryKeyStore};
use crate::{Handler, HandlerError, PrepareOutcome, SignerError, SignerHandler, SubmitCall};
use qtg_wire_auth::{NonceCache, Verifier, EXECUTOR_SERVICE, SIGNER_SERVICE};

#[derive(Clone, Default)]
pub struct ServeConfig {
    /// Also serve this signer (gRPC `qtg.signer.v1.SignerService`; HTTP under `/signer`).
    pub signer: Option<Arc<dyn SignerHandler>>,
    /// gRPC listen address (port 0 allowed); `None` = no gRPC.
    pub grpc_addr: Option<SocketAddr>,
    /// HTTP JSON listen address; `None` = no HTTP.
    pub http_addr: Option<SocketAddr>,
    pub auth: Verifier,
    /// Serve both transports over TLS with this certificate chain and key (PEM).
    pub tls: Option<TlsServer>,
    /// The fence's durable key record, shared by every replica ([`crate::FileKeyStore`] for
    /// one). `None` keeps keys in memory only and logs a warning: a restart forgets them.
    pub key_store: Option<Arc<dyn KeyStore>>,
    /// A recover that finds a sent key absent voids it only after its `submit_by` plus this
    /// margin (clocks, the venue's history lag); before, the answer is UNKNOWN. `None`: 5 s.
    pub clock_skew: Option<std::time::Duration>,
}

#[derive(Clone)]
pub struct TlsServer {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl TlsServer {
    fn rustls_config(&self) -> anyhow::Result<rustls::ServerConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = CertificateDer::pem_slice_iter(&self.cert_pem).collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem)?;
        let mut config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()?
                .with_no_client_auth()
                .with_single_cert(certs, key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// Serves an axum router over TLS until `shutdown`.
async fn serve_https(
    listener: tokio::net::TcpListener,
    app: Router,
    tls: &TlsServer,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls.rustls_config()?));
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            accepted = listener.accept() => accepted?,
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let stream = match acceptor.accept(stream).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            if let Err(e) = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await {
                tracing::debug!(%peer, error = %e, "HTTPS connection ended");
            }
        });
    }
}

/// The bound addresses and the tasks serving them.
pub struct Running {
    pub grpc_addr: Option<SocketAddr>,
    pub http_addr: Option<SocketAddr>,
    pub tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Running {
    /// Waits for every server to stop (after the shutdown token fires).
    pub async fn wait(self) -> anyhow::Result<()> {
        for t in self.tasks {
            t.await??;
        }
        Ok(())
    }
}

/// Serves `handler` until `shutdown` is cancelled.
pub async fn serve<H: Handler>(
    handler: Arc<H>,
    config: ServeConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<Running> {
    let durable = config.key_store.is_some();
    let guard = Guard { verifier: config.auth.clone(), nonces: Arc::new(NonceCache::default()) };
    let keys: Arc<dyn KeyStore> = match config.key_store.clone() {
        Some(k) => k,
        None => {
            tracing::warn!(
                "no key store configured: idempotency keys are kept in memory and a restart forgets them (not a \
                 fence across restarts)"
            );
            Arc::new(MemoryKeyStore::default())
        }
    };
    let skew = config
        .clock_skew
        .and_then(|d| chrono::Duration::from_std(d).ok())
        .unwrap_or_else(|| chrono::Duration::seconds(5));
    let handler = Arc::new(Fenced { inner: handler, keys, now: chrono::Utc::now, skew, durable });
    let mut running = Running { grpc_addr: None, http_addr: None, tasks: Vec::new() };
    if let Some(addr) = config.grpc_addr {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        let (health_reporter, health_service) = tonic_health::server::health_reporter();
        health_reporter.set_serving::<ExecutorServiceServer<Grpc<Fenced<H>>>>().await;
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(qtg_proto::FILE_DESCRIPTOR_SET)
            .build_v1()?;
        let service = ExecutorServiceServer::new(Grpc { handler: handler.clone(), auth: guard.clone() });
        let signer =
            config.signer.clone().map(|s| SignerServiceServer::new(GrpcSigner { signer: s, auth: guard.clone() }));
        let token = shutdown.clone();
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &config.tls {
            let identity = tonic::transport::Identity::from_pem(&tls.cert_pem, &tls.key_pem);
            builder = builder.tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))?;
        }
        running.tasks.push(tokio::spawn(async move {
            builder
                .add_service(health_service)
                .add_service(reflection)
                .add_service(service)
                .add_optional_service(signer)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    token.cancelled_owned(),
                )
                .await?;
            Ok(())
        }));
        tracing::info!(grpc_addr = %bound, "executor gRPC server listening");
        running.grpc_addr = Some(bound);
    }
    if let Some(addr) = config.http_addr {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        let state = HttpState { handler, auth: guard.clone() };
        let app = Router::new()
            .route("/preflight", post(http_preflight::<Fenced<H>>))
            .route("/prepare", post(http_prepare::<Fenced<H>>))
            .route("/submit", post(http_submit::<Fenced<H>>))
            .route("/observe", post(http_observe::<Fenced<H>>))
            .route("/recover", post(http_recover::<Fenced<H>>))
            .route("/health", get(http_health::<Fenced<H>>))
            .with_state(state);
        let app = match config.signer.clone() {
            Some(signer) => app.nest(
                "/signer",
                Router::new()
                    .route("/sign", post(http_sign))
                    .route("/health", get(http_signer_health))
                    .with_state(SignerState { signer, auth: guard.clone() }),
            ),
            None => app,
        };
        let token = shutdown.clone();
        let tls = config.tls.clone();
        running.tasks.push(tokio::spawn(async move {
            match tls {
                Some(tls) => serve_https(listener, app, &tls, token).await,
                None => {
                    axum::serve(listener, app).with_graceful_shutdown(token.cancelled_owned()).await?;
                    Ok(())
                }
            }
        }));
        tracing::info!(http_addr = %bound, "executor HTTP server listening");
        running.http_addr = Some(bound);
    }
    Ok(running)
}

fn handler_status(e: HandlerError) -> Status {
    match e {
        HandlerError::Unavailable(m) => Status::unavailable(m),
        HandlerError::Invalid(m) => Status::invalid_argument(m),
    }
}

fn context(ctx: Option<&pb::ExecutionContext>, key: &str) -> Result<qtg_core::ExecutionContext, HandlerError> {
    let ctx = ctx.ok_or_else(|| HandlerError::Invalid("context is required".into()))?;
    if key.is_empty() || ctx.request_node_id.is_empty() {
        return Err(HandlerError::Invalid("executor_key and context.request_node_id are required".into()));
    }
    Ok(convert::context_from_wire(ctx, key))
}

fn result_wire(r: &qtg_core::ExecutionResult) -> Result<pb::ExecutionResult, HandlerError> {
    convert::result_to_wire(r).map_err(|e| HandlerError::Invalid(e.to_string()))
}

/// The protocol operations, shared by both transports.
async fn do_preflight<H: Handler>(
    h: &H,
    req: pb::PreflightRequest,
) -> Result<Option<pb::ExecutionResult>, HandlerError> {
    let ctx = context(req.context.as_ref(), &req.executor_key)?;
    h.preflight(&req.executor_key, &ctx).await?.map(|r| result_wire(&r)).transpose()
}

async fn do_prepare<H: Handler>(h: &H, req: pb::PrepareRequest) -> Result<pb::PrepareResponse, HandlerError> {
    let ctx = context(req.context.as_ref(), &req.executor_key)?;
    use pb::prepare_response::Outcome;
    let outcome = match h.prepare(&req.executor_key, &ctx).await? {
        PrepareOutcome::Action(mut a) => {
            if a.payload_hash.is_empty() {
                a.payload_hash = a.computed_hash();
            }
            Outcome::Action(convert::prepared_to_wire(&a))
        }
        PrepareOutcome::Refused(r) => Outcome::Refused(result_wire(&r)?),
    };
    Ok(pb::PrepareResponse { outcome: Some(outcome) })
}

async fn do_submit<H: Handler>(h: &H, req: pb::SubmitRequest) -> Result<pb::ExecutionResult, HandlerError> {
    let ctx = context(req.context.as_ref(), &req.executor_key)?;
    let prepared = req
        .prepared_action
        .as_ref()
        .ok_or_else(|| HandlerError::Invalid("prepared_action is required".into()))
        .and_then(|p| convert::prepared_from_wire(p).map_err(|e| HandlerError::Invalid(e.to_string())))?;
    if req.idempotency_key.is_empty() {
        return Err(HandlerError::Invalid("idempotency_key is required".into()));
    }
    let signed = req.sign_result.as_ref().map(convert::sign_result_from_wire);
    let submit_by = req
        .submit_by
        .as_ref()
        .and_then(convert::timestamp_from_wire)
        .and_then(|(s, n)| chrono::DateTime::from_timestamp(s, n))
        .ok_or_else(|| HandlerError::Invalid("submit_by is required (an absolute timestamp)".into()))?;
    let call =
        SubmitCall { prepared: &prepared, signed: signed.as_ref(), idempotency_key: &req.idempotency_key, submit_by };
    result_wire(&h.submit(&req.executor_key, &ctx, &call).await?)
}

async fn do_observe<H: Handler>(h: &H, req: pb::ObserveRequest) -> Result<pb::ExecutionResult, HandlerError> {
    let ctx = context(req.context.as_ref(), &req.executor_key)?;
    result_wire(&h.observe(&req.executor_key, &ctx).await?)
}

async fn do_recover<H: Handler>(h: &H, req: pb::RecoverRequest) -> Result<pb::ExecutionResult, HandlerError> {
    let ctx = context(req.context.as_ref(), &req.executor_key)?;
    if req.idempotency_key.is_empty() {
        return Err(HandlerError::Invalid("idempotency_key is required".into()));
    }
    result_wire(&h.recover(&req.executor_key, &ctx, &req.idempotency_key).await?)
}

async fn do_health<H: Handler>(h: &H, key: &str) -> pb::HealthResponse {
    match h.health(key).await {
        Ok(details) => pb::HealthResponse { ok: true, details: convert::to_struct(&details).ok().flatten() },
        Err(e) => pb::HealthResponse {
            ok: false,
            details: convert::to_struct(&serde_json::json!({"error": e.to_string()})).ok().flatten(),
        },
    }
}

/// How requests are checked: the configured credentials, and the nonces a v4 signature has
/// used within its window (one cache for both transports).
#[derive(Clone)]
struct Guard {
    verifier: Verifier,
    nonces: Arc<NonceCache>,
}

impl Guard {
    fn check(&self, get: impl Fn(&str) -> Option<String>, service: &str, op: &str, body: &[u8]) -> Result<(), String> {
        self.verifier.check(get, &qtg_wire_auth::target(service, op), body, &self.nonces)
    }
}

struct Grpc<H> {
    handler: Arc<H>,
    auth: Guard,
}

impl<H: Handler> Grpc<H> {
    fn authorize<T: Serialize>(&self, req: &Request<T>, op: &str) -> Result<(), Status> {
        authorize(&self.auth, req, EXECUTOR_SERVICE, op)
    }
}

/// Checks a gRPC request's credentials (an HMAC covers the request's canonical JSON).
fn authorize<T: Serialize>(auth: &Guard, req: &Request<T>, service: &str, op: &str) -> Result<(), Status> {
    let body = if auth.verifier.signs_body() { qtg_wire_auth::grpc_signed_bytes(req.get_ref()) } else { Vec::new() };
    let md = req.metadata();
    auth.check(|k| md.get(k).and_then(|v| v.to_str().ok()).map(String::from), service, op, &body)
        .map_err(Status::unauthenticated)?;
    log_trace_context("grpc", md.get("traceparent").and_then(|v| v.to_str().ok()));
    Ok(())
}

/// The caller's W3C trace context (qtg sends its node step's), for implementers to join.
fn log_trace_context(transport: &str, traceparent: Option<&str>) {
    if let Some(tp) = traceparent {
        tracing::debug!(transport, traceparent = tp, "call carries trace context");
    }
}

#[tonic::async_trait]
impl<H: Handler> ExecutorService for Grpc<H> {
    async fn preflight(
        &self,
        req: Request<pb::PreflightRequest>,
    ) -> Result<tonic::Response<pb::ExecutionResult>, Status> {
        self.authorize(&req, "preflight")?;
        let r = do_preflight(&*self.handler, req.into_inner()).await.map_err(handler_status)?;
        Ok(tonic::Response::new(r.unwrap_or_default()))
    }

    async fn prepare(&self, req: Request<pb::PrepareRequest>) -> Result<tonic::Response<pb::PrepareResponse>, Status> {
        self.authorize(&req, "prepare")?;
        Ok(tonic::Response::new(do_prepare(&*self.handler, req.into_inner()).await.map_err(handler_status)?))
    }

    async fn submit(&self, req: Request<pb::SubmitRequest>) -> Result<tonic::Response<pb::ExecutionResult>, Status> {
        self.authorize(&req, "submit")?;
        Ok(tonic::Response::new(do_submit(&*self.handler, req.into_inner()).await.map_err(handler_status)?))
    }

    async fn observe(&self, req: Request<pb::ObserveRequest>) -> Result<tonic::Response<pb::ExecutionResult>, Status> {
        self.authorize(&req, "observe")?;
        Ok(tonic::Response::new(do_observe(&*self.handler, req.into_inner()).await.map_err(handler_status)?))
    }

    async fn recover(&self, req: Request<pb::RecoverRequest>) -> Result<tonic::Response<pb::ExecutionResult>, Status> {
        self.authorize(&req, "recover")?;
        Ok(tonic::Response::new(do_recover(&*self.handler, req.into_inner()).await.map_err(handler_status)?))
    }

    async fn health(&self, req: Request<pb::HealthRequest>) -> Result<tonic::Response<pb::HealthResponse>, Status> {
        self.authorize(&req, "health")?;
        Ok(tonic::Response::new(do_health(&*self.handler, &req.get_ref().executor_key).await))
    }
}

struct HttpState<H> {
    handler: Arc<H>,
    auth: Guard,
}

impl<H> Clone for HttpState<H> {
    fn clone(&self) -> Self {
        HttpState { handler: self.handler.clone(), auth: self.auth.clone() }
    }
}

fn json_response<T: Serialize>(v: &T) -> Response {
    match serde_json::to_vec(v) {
        Ok(body) => ([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn error_response(e: HandlerError) -> Response {
    let status = match e {
        HandlerError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        HandlerError::Invalid(_) => StatusCode::BAD_REQUEST,
    };
    (
        status,
        axum::Json(serde_json::json!({"error": {"code": qtg_core::codes::EXECUTOR_ERROR, "message": e.to_string()}})),
    )
        .into_response()
}

/// Why an HTTP request was turned away before the handler saw it.
enum Rejected {
    Unauthorized(String),
    Invalid(String),
}

impl IntoResponse for Rejected {
    fn into_response(self) -> Response {
        match self {
            Rejected::Unauthorized(m) => (StatusCode::UNAUTHORIZED, m).into_response(),
            Rejected::Invalid(m) => error_response(HandlerError::Invalid(m)),
        }
    }
}

fn http_input<T: DeserializeOwned>(
    s: &Guard,
    headers: &HeaderMap,
    body: &Bytes,
    service: &str,
    op: &str,
) -> Result<T, Rejected> {
    s.check(|k| headers.get(k).and_then(|v| v.to_str().ok()).map(String::from), service, op, body)
        .map_err(Rejected::Unauthorized)?;
    log_trace_context("http", headers.get("traceparent").and_then(|v| v.to_str().ok()));
    serde_json::from_slice(body).map_err(|e| Rejected::Invalid(e.to_string()))
}

async fn http_preflight<H: Handler>(State(s): State<HttpState<H>>, headers: HeaderMap, body: Bytes) -> Response {
    let req = match http_input(&s.auth, &headers, &body, EXECUTOR_SERVICE, "preflight") {
        Ok(r) => r,
        Err(rejected) => return rejected.into_response(),
    };
    match do_preflight(&*s.handler, req).await {
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        Ok(Some(r)) => json_response(&r),
        Err(e) => error_response(e),
    }
}

macro_rules! http_op {
    ($name:ident, $op:ident, $operation:literal) => {
        async fn $name<H: Handler>(State(s): State<HttpState<H>>, headers: HeaderMap, body: Bytes) -> Response {
            let req = match http_input(&s.auth, &headers, &body, EXECUTOR_SERVICE, $operation) {
                Ok(r) => r,
                Err(rejected) => return rejected.into_response(),
            };
            match $op(&*s.handler, req).await {
                Ok(r) => json_response(&r),
                Err(e) => error_response(e),
            }
        }
    };
}

http_op!(http_prepare, do_prepare, "prepare");
http_op!(http_submit, do_submit, "submit");
http_op!(http_observe, do_observe, "observe");
http_op!(http_recover, do_recover, "recover");

async fn http_health<H: Handler>(State(s): State<HttpState<H>>, headers: HeaderMap) -> Response {
    let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).map(String::from);
    if let Err(m) = s.auth.check(get, EXECUTOR_SERVICE, "health", b"") {
        return (StatusCode::UNAUTHORIZED, m).into_response();
    }
    let key = String::new();
    let r = do_health(&*s.handler, &key).await;
    let status = if r.ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, json_response(&r)).into_response()
}

/// The hash rule every signer keeps, enforced before the implementation sees the request.
fn checked_sign_request(req: &spb::SignRequest) -> Result<qtg_core::SignRequest, SignerError> {
    let r = convert::sign_request_from_wire(req);
    let actual = qtg_core::hash::sha256_hex(r.payload.as_bytes());
    if actual != r.payload_hash || actual != r.signing_intent.allowed_payload_hash {
        return Err(SignerError::Refused(format!("payload hash {actual} is not the allowed_payload_hash")));
    }
    Ok(r)
}

async fn do_sign(signer: &dyn SignerHandler, req: &spb::SignRequest) -> Result<spb::SignResponse, SignerError> {
    let r = checked_sign_request(req)?;
    let s = signer.sign(&r).await?;
    Ok(spb::SignResponse {
        signature: s.signature,
        signed_payload: s.signed_payload.unwrap_or_default(),
        signer_address: s.signer_address.unwrap_or_default(),
        signed_tx_hash: s.signed_tx_hash.unwrap_or_default(),
    })
}

async fn do_signer_health(signer: &dyn SignerHandler, key: &str) -> spb::HealthResponse {
    match signer.signer_address(key).await {
        Ok(address) => spb::HealthResponse { ok: true, signer_address: address.unwrap_or_default(), details: None },
        Err(e) => spb::HealthResponse {
            ok: false,
            signer_address: String::new(),
            details: convert::to_struct(&serde_json::json!({"error": e.to_string()})).ok().flatten(),
        },
    }
}

struct GrpcSigner {
    signer: Arc<dyn SignerHandler>,
    auth: Guard,
}

#[tonic::async_trait]
impl SignerService for GrpcSigner {
    async fn sign(&self, req: Request<spb::SignRequest>) -> Result<tonic::Response<spb::SignResponse>, Status> {
        authorize(&self.auth, &req, SIGNER_SERVICE, "sign")?;
        match do_sign(&*self.signer, req.get_ref()).await {
            Ok(r) => Ok(tonic::Response::new(r)),
            Err(SignerError::Refused(m)) => Err(Status::failed_precondition(m)),
            Err(SignerError::Unavailable(m)) => Err(Status::unavailable(m)),
        }
    }

    async fn health(&self, req: Request<spb::HealthRequest>) -> Result<tonic::Response<spb::HealthResponse>, Status> {
        authorize(&self.auth, &req, SIGNER_SERVICE, "health")?;
        Ok(tonic::Response::new(do_signer_health(&*self.signer, &req.get_ref().signer_key).await))
    }
}

#[derive(Clone)]
struct SignerState {
    signer: Arc<dyn SignerHandler>,
    auth: Guard,
}

async fn http_sign(State(s): State<SignerState>, headers: HeaderMap, body: Bytes) -> Response {
    let req: spb::SignRequest = match http_input(&s.auth, &headers, &body, SIGNER_SERVICE, "sign") {
        Ok(r) => r,
        Err(rejected) => return rejected.into_response(),
    };
    match do_sign(&*s.signer, &req).await {
        Ok(r) => json_response(&r),
        Err(SignerError::Refused(m)) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            axum::Json(serde_json::json!({"error": {"code": qtg_core::codes::SIGNER_REFUSED, "message": m}})),
        )
            .into_response(),
        Err(SignerError::Unavailable(m)) => error_response(HandlerError::Unavailable(m)),
    }
}

async fn http_signer_health(State(s): State<SignerState>, headers: HeaderMap) -> Response {
    let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).map(String::from);
    if let Err(m) = s.auth.check(get, SIGNER_SERVICE, "health", b"") {
        return (StatusCode::UNAUTHORIZED, m).into_response();
    }
    let r = do_signer_health(&*s.signer, "").await;
    let status = if r.ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, json_response(&r)).into_response()
}
