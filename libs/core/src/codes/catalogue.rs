// Every error code qtg writes or answers: what it means and what an operator does about it.
// docs/error-codes.md is generated from this table
// (`QTG_UPDATE_DOCS=1 cargo test -p qtg-tests --test source_rules`).

catalogue! {
    CONFLICT {
        source: Api,
        status: Some(409),
        meaning: "The change collides with the resource's state or a concurrent change (being changed elsewhere, no \
            longer in the expected state, already approved by the caller, a lookalike principal, an in-flight node \
            blocking a cancel).",
        action: "Re-read the resource and retry, or follow the message (for a blocked cancel: runbook case C6 with \
            evidence).",
    }
    EXECUTOR_DOWN {
        source: Api,
        status: Some(409),
        meaning: "An approval was refused because `qtg-health` reports a bound executor or signer down; nothing was \
            recorded.",
        action: "Restore the named executor or signer, wait for a healthy check, then approve again.",
    }
    EXECUTOR_HEALTH_STALE {
        source: Api,
        status: Some(409),
        meaning: "Under the strict approval gate, the last health check of a bound executor or signer is too old; \
            nothing was recorded.",
        action: "Check that `qtg-health` is running and reaching the named keys, then approve again.",
    }
    EXECUTOR_HEALTH_UNKNOWN {
        source: Api,
        status: Some(409),
        meaning: "Under the strict approval gate, a bound executor or signer has no known health (never checked, or \
            not up); nothing was recorded.",
        action: "Make sure `qtg-health` checks the named keys and reports them up, then approve again.",
    }
    FORBIDDEN {
        source: Api,
        status: Some(403),
        meaning: "The API key is valid but its roles do not include the one this operation needs; nothing changed.",
        action: "Use a key with the named role, or have an admin grant it.",
    }
    IDEMPOTENCY_CONFLICT {
        source: Api,
        status: Some(409),
        meaning: "The idempotency key was already used by this principal with a different body; nothing new was \
            created.",
        action: "Resend the original body to get the original answer, or use a new idempotency key for a new request.",
    }
    INSUFFICIENT_BALANCE {
        source: Api,
        status: Some(409),
        meaning: "The source's latest fresh balance snapshot holds less than the movement's amount; the movement or \
            transfer was not created (or the capital transfer closed `FAILED`).",
        action: "Fund the source or lower the amount and create it again (a template may opt out with \
            `risk_controls.balance_check = false`).",
    }
    INTERNAL {
        source: Api,
        status: Some(500),
        meaning: "An unexpected server-side error (e.g. the database); details are only in the server log.",
        action: "Check the API log for the error; re-read the resource before retrying, as the operation's outcome is \
            not stated.",
    }
    INVALID_STATE {
        source: Api,
        status: Some(409),
        meaning: "The operation is not allowed in the resource's current state (e.g. retrying a node that is not \
            FAILED, closing a capital transfer that is not `NEEDS_ATTENTION`); nothing changed.",
        action: "Read the resource's state and use the operation the message names.",
    }
    METHOD_NOT_ALLOWED {
        source: Api,
        status: Some(405),
        meaning: "The path exists but does not take this HTTP method; nothing changed.",
        action: "Use the method the OpenAPI document (`/v3/openapi.json`) gives for the path.",
    }
    NOT_FOUND {
        source: Api,
        status: Some(404),
        meaning: "The route, or the resource it names (movement, node, template, key, scope…), does not exist; \
            nothing changed.",
        action: "Check the path and the id.",
    }
    RATE_LIMITED {
        source: Api,
        status: Some(429),
        meaning: "A `fresh=true` balance read came sooner than `MG_BALANCE_FRESH_MIN_INTERVAL_SECONDS` after this \
            caller's last one; no venue was read.",
        action: "Wait the time the message names, or read the stored snapshots without `fresh=true`.",
    }
    POLICY_BLOCKED {
        source: Api,
        status: Some(422),
        meaning: "The approval policy in force blocks the movement (the message names the policy version and the \
            rule): at creation or approval nothing is created or approved; at the first claim the node is FAILED \
            with this code and nothing was sent.",
        action: "Read the rule (`GET /v3/policies/{version}`); change the movement (amount, destination, time), or \
            have the policy changed — a new version proposed and approved by other admins.",
    }
    POLICY_NOT_APPROVER {
        source: Api,
        status: Some(403),
        meaning: "The caller may not approve this movement under the policy in force: they belong to none of the \
            approver groups its rule still needs (or only to groups already filled); nothing changed.",
        action: "Have a member of a group the movement still needs approve it; its page shows each group's progress.",
    }
    ADDRESS_NOT_IN_BOOK {
        source: Api,
        status: Some(422),
        meaning: "The template requires its destination to be an active address-book entry past its cool-down, and \
            it is not (unknown, pending a second admin, or still cooling down); nothing was created.",
        action: "Add the address to the book (`POST /v3/address-book`), have another admin approve it, and wait for \
            its cool-down; or send to an address the book holds.",
    }
    RISK_LIMIT_EXCEEDED {
        source: Api,
        status: Some(422),
        meaning: "A risk limit (named in `limit`) refuses the movement: at creation or approval nothing is created or \
            approved; at the first claim the node is FAILED with this code and nothing was sent.",
        action: "Check the named limit (hard cap, velocity, allow-list…); wait for the velocity window, lower the \
            amount, or have the limits changed, then create or retry again.",
    }
    SELF_APPROVAL {
        source: Api,
        status: Some(403),
        meaning: "A principal tried to approve what it created itself (a movement, a template proposal, an API key \
            request); nothing changed.",
        action: "Have another principal with the needed role approve it.",
    }
    SUBMIT_ATTEMPT_PENDING {
        source: Api,
        status: Some(409),
        meaning: "A retry or C6 cancel was refused: the node's armed submit attempt may have reached the venue and is \
            not fenced yet (node UNKNOWN, or SUBMITTING with the pending marker).",
        action: "Wait for recovery to decide the attempt (a Recover FAILED voids its key), then retry or cancel.",
    }
    UNAUTHENTICATED {
        source: Api,
        status: Some(401),
        meaning: "No `Authorization: Bearer` key, or one that is unknown, revoked, expired or has no role; nothing \
            changed.",
        action: "Send a valid API key.",
    }
    VALIDATION_ERROR {
        source: Api,
        status: Some(400),
        meaning: "The request is malformed: a bad field, query parameter, JSON body or NUL character (also 413 for a \
            body over the limit, 415 without a JSON content type); nothing was recorded.",
        action: "Fix the field or input the message names and send the request again.",
    }
    CLAIM_LOST {
        source: Engine,
        status: None,
        meaning: "A node event: the dispatcher lost its claim before a sign, arm or failure write (an operator \
            cancelled the node, or its lease expired and another dispatcher took it); this dispatcher sent nothing.",
        action: "Nothing; informational. Frequent ones suggest dispatch steps outlasting `MG_DISPATCH_LEASE_SECONDS`.",
    }
    CONFIG_REF_UNRESOLVED {
        source: Engine,
        status: None,
        meaning: "A `$ref:node_key.field` in the node's config names no completed node, a field its `provider_refs` \
            lack, or a marker; the node failed at the claim and nothing was sent.",
        action: "Fix the template's ref (or the predecessor that should provide the field), then retry the node or \
            create a new movement.",
    }
    DISPATCH_ABORTED {
        source: Engine,
        status: None,
        meaning: "The movement left EXECUTING (cancelled, or handed to a person by another branch) between the claim \
            and the arm; the node is FAILED and nothing was sent.",
        action: "Resolve the movement's other nodes first; retry this node if the movement should still go on.",
    }
    DISPATCH_PAUSED {
        source: Engine,
        status: None,
        meaning: "A pause (kill switch) took effect after the node was claimed and before its submit was armed; the \
            node is FAILED and nothing reached the venue.",
        action: "Retry the node after the pause is resumed.",
    }
    ENGINE_ERROR {
        source: Engine,
        status: None,
        meaning: "A node event: qtg could not handle the node's step (claiming it, recording an answer), e.g. a \
            database error; the node is held back, then taken again (an unrecorded submit answer is left to recovery).",
        action: "Nothing if transient; if it repeats, check the worker log and the database.",
    }
    INTENT_HASH_DRIFT {
        source: Engine,
        status: None,
        meaning: "The movement's intent no longer matches the intent hash that was approved; the node failed at the \
            claim and nothing was sent.",
        action: "Treat it as tampering until explained: find how the stored intent changed, then cancel and create a \
            new movement.",
    }
    LATE_EFFECT {
        source: Engine,
        status: None,
        meaning: "An executor reported an effect (not FAILED) for a node qtg had already ended FAILED or CANCELLED: \
            money may have moved. The node gets `__late_effect` and the movement goes to MANUAL_INTERVENTION.",
        action: "Reconcile with the venue or chain, then cancel the movement; such a node is never retried.",
    }
    LEASE_EXPIRED {
        source: Engine,
        status: None,
        meaning: "A node event: a PREPARING or AWAITING_SIGNATURE node's lease expired (its dispatcher died or froze \
            before the arm) and it was claimed again; nothing was sent for that attempt.",
        action: "Nothing; informational. If frequent, check dispatcher restarts and executor or signer latency \
            against the lease.",
    }
    OBSERVATION_TIMEOUT {
        source: Engine,
        status: None,
        meaning: "With timeout enforcement on, the node passed `timeout_policy.observe_seconds` since its \
            `started_at`; it is UNKNOWN and handed to a person. The venue may hold its effect.",
        action: "Check the venue or chain (`qtgctl nodes diagnose`); resume the movement to let recovery and observe \
            go on, or resolve it per the runbook.",
    }
    PAYLOAD_HASH_MISMATCH {
        source: Engine,
        status: None,
        meaning: "A node event: the prepared action about to be submitted differs from the one stored for the \
            attempt; the submit was not sent and the armed attempt is left to recovery.",
        action: "Wait for recovery to fail the attempt (it finds nothing at the venue), investigate the executor, \
            then retry.",
    }
    PLAN_HASH_DRIFT {
        source: Engine,
        status: None,
        meaning: "The template version's compiled plan no longer matches the movement's, or the approved plan hash; \
            the node failed at the claim and nothing was sent.",
        action: "Find out why the plan changed; cancel the movement and create a new one against the current template \
            version.",
    }
    PREPARED_ACTION_EXPIRED {
        source: Engine,
        status: None,
        meaning: "The prepared action's `expires_at` passed before the submit (during prepare or signing); the node \
            is FAILED and nothing was sent.",
        action: "Retry the node (it prepares afresh); if it repeats, the signing step is slower than the action's \
            validity.",
    }
    SIGNER_BINDING_MISSING {
        source: Engine,
        status: None,
        meaning: "The node needs a signature but has no `signer_key`, or that signer is not in this worker's \
            registry; the node is FAILED and nothing was signed or sent.",
        action: "Fix the template's signer binding or the executor registry, then retry the node.",
    }
    SIGNER_IDENTITY_MISMATCH {
        source: Engine,
        status: None,
        meaning: "The signature was made by another address than the signer's enrolled identity \
            (`expected_signer_address`), or none was reported; the node is FAILED and nothing was sent.",
        action: "Check the signer's key and enrolment (a rotation, or a wrong key); fix it, then retry the node.",
    }
    STALE_ANSWER {
        source: Engine,
        status: None,
        meaning: "A node event: an executor answer (or failed call) came for an attempt the node has moved past \
            (re-claimed, decided elsewhere, cancelled); it was recorded, not applied.",
        action: "Nothing; informational (a late answer that reports an effect on an ended node is `LATE_EFFECT` \
            instead).",
    }
    SUBMIT_WINDOW_CLOSED {
        source: Engine,
        status: None,
        meaning: "A node event: the submit window closed between the arm and the start of the submit; nothing was \
            sent and the armed attempt is left to recovery.",
        action: "Wait for recovery to fail the attempt, then retry; if frequent, look for dispatcher stalls.",
    }
    ABSENCE_NOT_YET_CONCLUSIVE {
        source: Executor,
        status: None,
        meaning: "The executor SDK's fence: the handler's recover found nothing for a sent key whose `submit_by` plus \
            the margin has not passed, so the answer is UNKNOWN: the venue may still accept the request.",
        action: "Nothing; recovery asks again after the margin.",
    }
    EXECUTOR_ERROR {
        source: Executor,
        status: None,
        meaning: "The code of an executor SDK server's HTTP error body: 503 when the handler is unavailable, 400 for \
            an invalid request. qtg records such calls as `EXECUTOR_UNAVAILABLE` or `EXECUTOR_PROTOCOL_ERROR`.",
        action: "Read the message and the executor's log; see those two codes for the node.",
    }
    EXECUTOR_PROTOCOL_ERROR {
        source: Executor,
        status: None,
        meaning: "An executor answer broke the contract (bad status, undecodable or oversize body, a state not \
            allowed). Before submit: FAILED, nothing sent; on submit: UNKNOWN, the venue may hold it; \
            observe/recover: an event.",
        action: "Fix the executor. A FAILED node can be retried; an UNKNOWN one waits for recovery, never a blind \
            retry.",
    }
    EXECUTOR_TIMEOUT {
        source: Executor,
        status: None,
        meaning: "An executor call passed its deadline. On submit the node is UNKNOWN: the venue may hold it; on \
            observe or recover it is a node event and a backoff (before submit a timeout is `EXECUTOR_UNAVAILABLE`).",
        action: "Wait for recovery to reconcile the attempt; check the executor's latency against its `timeout_ms`.",
    }
    EXECUTOR_UNAVAILABLE {
        source: Executor,
        status: None,
        meaning: "The executor could not be reached or answered a transport failure (5xx, 401/403/429…). Before \
            submit: FAILED, nothing sent; on submit: UNKNOWN, the venue may hold it; on observe/recover: an event, \
            backoff.",
        action: "Restore the executor. Retry a FAILED node; leave an UNKNOWN one to recovery.",
    }
    IDEMPOTENCY_KEY_SUPERSEDED {
        source: Executor,
        status: None,
        meaning: "An executor's fence refused a submit whose attempt is older than one already seen for the node; the \
            key is void and nothing was sent.",
        action: "Nothing for this attempt: the newer attempt decides the node.",
    }
    IDEMPOTENCY_KEY_UNKNOWN {
        source: Executor,
        status: None,
        meaning: "Recover of a key the executor never recorded: it never reached the venue and is now void, so the \
            node is FAILED with no effect.",
        action: "Retry the node if the movement should still happen.",
    }
    IDEMPOTENCY_KEY_VOID {
        source: Executor,
        status: None,
        meaning: "The key was voided earlier (recover found nothing, or it was refused): a submit with it is refused \
            and a recover answers FAILED; nothing was or will be executed.",
        action: "Retry the node (a new attempt gets a new key) if the movement should still happen.",
    }
    PREFLIGHT_FAILED {
        source: Executor,
        status: None,
        meaning: "The executor refused at preflight without a code of its own (qtg's default); the node is FAILED and \
            nothing was sent.",
        action: "Read the node's `error_detail`, fix the cause, then retry the node.",
    }
    PREPARE_EMPTY {
        source: Executor,
        status: None,
        meaning: "The executor's prepare returned neither an action nor a refusal; the node is FAILED and nothing was \
            sent.",
        action: "Fix the executor (it must return an action or a FAILED refusal), then retry the node.",
    }
    PREPARE_FAILED {
        source: Executor,
        status: None,
        meaning: "The executor refused at prepare without a code of its own (qtg's default); the node is FAILED and \
            nothing was sent.",
        action: "Read the node's `error_detail`, fix the cause, then retry the node.",
    }
    REQUEST_NOT_ENCODABLE {
        source: Executor,
        status: None,
        meaning: "qtg could not encode its request to the executor (e.g. an integer beyond ±2^53); nothing was sent \
            and the executor is not to blame. Before submit the node is FAILED; on observe or recover it is an event.",
        action: "Fix the movement's or template's values that cannot be encoded (a new movement), then retry.",
    }
    SIGNER_PROTOCOL_ERROR {
        source: Executor,
        status: None,
        meaning: "The signer's answer broke the contract (a signature qtg cannot store or use); the node is FAILED \
            and nothing was sent.",
        action: "Fix the signer, then retry the node.",
    }
    SIGNER_REFUSED {
        source: Executor,
        status: None,
        meaning: "The signer refused to sign (its policy, or a payload hash not allowed); the node is FAILED, nothing \
            was sent and an EVM nonce reserved for it is given back.",
        action: "Find out why the signer refused (its log against the approved intent); fix the policy or the plan, \
            then retry.",
    }
    SIGNER_UNAVAILABLE {
        source: Executor,
        status: None,
        meaning: "The signer could not be reached, timed out or gave no usable answer; the node is FAILED and nothing \
            was sent, but a signature may exist outside qtg, so an EVM nonce stays with the node.",
        action: "Restore the signer, then retry the node (it reuses the held nonce).",
    }
    SUBMIT_BY_PASSED {
        source: Executor,
        status: None,
        meaning: "An executor's fence got the submit after its `submit_by`; the key is now void and nothing was sent.",
        action: "Retry the node; if it repeats, check clocks and the latency between qtg and the executor.",
    }
    EVM_BROADCAST_NO_ANSWER {
        source: Evm,
        status: None,
        meaning: "`eth_sendRawTransaction` gave no answer after the hash was recorded: the transaction may be on its \
            way; the node is UNKNOWN.",
        action: "Wait for recovery, which looks the node's transactions up on chain.",
    }
    EVM_BROADCAST_REJECTED {
        source: Evm,
        status: None,
        meaning: "The RPC refused the transaction. For the node's first transaction it is FAILED, nothing sent; if an \
            earlier one exists it is UNKNOWN, as that one may still be mined.",
        action: "FAILED: fix the cause in the detail, then retry. UNKNOWN: wait for recovery.",
    }
    EVM_CHAIN_MISMATCH {
        source: Evm,
        status: None,
        meaning: "The RPC serves another chain than the node's `chain_id`; refused at preflight, nothing sent.",
        action: "Fix the chain's RPC URL in `MG_EVM_CHAINS`, then retry the node.",
    }
    EVM_CHAIN_MISSING {
        source: Evm,
        status: None,
        meaning: "The node's config names no `chain_id`; refused before anything was sent.",
        action: "Fix the template's node config, then create a new movement.",
    }
    EVM_CHAIN_NOT_CONFIGURED {
        source: Evm,
        status: None,
        meaning: "The node's `chain_id` is not in `MG_EVM_CHAINS`; refused before anything was sent.",
        action: "Add the chain to `MG_EVM_CHAINS` (or fix the template), then retry the node.",
    }
    EVM_CONFIG_INVALID {
        source: Evm,
        status: None,
        meaning: "The node's config (`decimals`, an address such as `token_contract`) or `risk_controls.max_fee_wei` \
            does not parse; refused before anything was sent.",
        action: "Fix the template, then create a new movement.",
    }
    EVM_DESTINATION_NOT_ALLOWED {
        source: Evm,
        status: None,
        meaning: "The destination is not in the plan's `risk_controls.allowed_destinations`; refused at preflight, \
            nothing sent.",
        action: "Check the destination; if it is legitimate, allow it in a new template version and create a new \
            movement.",
    }
    EVM_ESTIMATE_FAILED {
        source: Evm,
        status: None,
        meaning: "`eth_estimateGas` says the transaction would fail; refused at prepare, nothing sent and the nonce \
            given back.",
        action: "Fix the cause in the detail (balance, allowance, contract state), then retry the node.",
    }
    EVM_FEE_CAP {
        source: Evm,
        status: None,
        meaning: "The base fee is above the chain's fee cap, or gas × `maxFeePerGas` could exceed `max_fee_wei`; \
            refused at prepare, nothing sent, nonce given back.",
        action: "Retry when fees fall, or raise the cap (chain settings or a new template version).",
    }
    EVM_FORCING_NONCE {
        source: Evm,
        status: None,
        meaning: "Recovery found nothing of the attempt on chain and is consuming its nonce with a zero-value \
            self-send, so no held signature can ever be mined; the node is UNKNOWN.",
        action: "Wait: once the nonce is final the node fails `EVM_NONCE_CONSUMED` and can be retried with a new \
            nonce.",
    }
    EVM_FROM_CHANGED {
        source: Evm,
        status: None,
        meaning: "The node holds a nonce of another address than the executor's current `from`, whose transaction \
            could still be mined; refused at prepare, nothing sent.",
        action: "Find the earlier attempt's transaction from the old address and make sure it cannot be mined \
            (consume the nonce), then decide: retry or cancel.",
    }
    EVM_INSUFFICIENT_BALANCE {
        source: Evm,
        status: None,
        meaning: "`from` holds less than the amount of the coin or token (gas not counted); refused at preflight, \
            nothing sent.",
        action: "Fund the address, then retry the node.",
    }
    EVM_INTENT_INVALID {
        source: Evm,
        status: None,
        meaning: "The intent's `destination` is not a strict, allowed EVM address, or its `amount` is not positive \
            with the node's `decimals`; refused before anything was sent.",
        action: "Cancel and create a new movement with a valid intent.",
    }
    EVM_NONCE_CONSUMED {
        source: Evm,
        status: None,
        meaning: "A final transaction that is not the node's consumed its nonce: none of the node's transactions can \
            be mined; the node is FAILED.",
        action: "Confirm on chain; retry the node (new nonce) if the movement should still happen, else cancel.",
    }
    EVM_NONCE_NOT_OWNED {
        source: Evm,
        status: None,
        meaning: "At submit the nonce was no longer the node's live reservation; nothing was sent and the node is \
            FAILED.",
        action: "Retry the node (it reserves again).",
    }
    EVM_NONCE_TOO_LOW {
        source: Evm,
        status: None,
        meaning: "The RPC says the nonce is already used, by one of the node's transactions or another; the node is \
            UNKNOWN.",
        action: "Wait for recovery, which looks the node's transactions up on chain.",
    }
    EVM_NOT_FOUND {
        source: Evm,
        status: None,
        meaning: "Recovery found nothing of the node on chain, its nonce is free, and no local signer can force it: a \
            signed transaction may still exist. UNKNOWN, for a person (`evm_nonce_not_forceable`).",
        action: "Have a zero-value self-send with the node's nonce signed and sent, then resume the movement; the \
            node then fails `EVM_NONCE_CONSUMED`.",
    }
    EVM_NOT_SIGNED {
        source: Evm,
        status: None,
        meaning: "The signer returned no signed transaction; the node is FAILED and nothing was sent.",
        action: "Fix the signer (it must return `signedPayload`), then retry the node.",
    }
    EVM_REVERTED {
        source: Evm,
        status: None,
        meaning: "The node's transaction was mined and reverted (its nonce is consumed, no transfer happened); the \
            node is FAILED.",
        action: "Find why it reverted (balance, allowance, contract state); retry the node with a new nonce, or \
            cancel.",
    }
    EVM_SIGNED_MISMATCH {
        source: Evm,
        status: None,
        meaning: "The signed transaction is not EIP-1559, not the prepared one, or not signed by `from`; the node is \
            FAILED and nothing was sent.",
        action: "Investigate the signer (key, policy); fix it, then retry the node.",
    }
    EVM_TOKEN_DECIMALS_MISMATCH {
        source: Evm,
        status: None,
        meaning: "The token's on-chain `decimals()` differs from the node's `decimals`; refused at preflight, nothing \
            sent.",
        action: "Fix the template's `decimals` or `token_contract`, then create a new movement.",
    }
    CEX_ADDRESS_INVALID {
        source: Cex,
        status: None,
        meaning: "The destination or memo is not in the venue's documented format for the network (or that format \
            does not compile); refused at preflight, nothing sent.",
        action: "Fix the address or memo (a new movement); if the venue's format is wrong, escalate.",
    }
    CEX_ADDRESS_NOT_WHITELISTED {
        source: Cex,
        status: None,
        meaning: "The destination (and memo) is not on the venue account's withdrawal whitelist, or has no saved \
            withdrawal key; refused before anything was sent.",
        action: "Whitelist the address at the venue if it is legitimate, then retry the node.",
    }
    CEX_AMOUNT_BELOW_FEE {
        source: Cex,
        status: None,
        meaning: "Under the venue's fee model nothing would arrive (the amount does not exceed the fee); refused, \
            nothing sent.",
        action: "Create a new movement with a larger amount.",
    }
    CEX_AMOUNT_OUT_OF_RANGE {
        source: Cex,
        status: None,
        meaning: "The amount applied for is outside the venue's withdrawal min/max for the network; refused at \
            preflight, nothing sent.",
        action: "Create a new movement within the limits (or split it).",
    }
    CEX_ASSET_UNAVAILABLE {
        source: Cex,
        status: None,
        meaning: "The venue does not list the asset; refused before anything was sent.",
        action: "Check the asset symbol and the venue entry, then create a new movement.",
    }
    CEX_AUTH_FAILED {
        source: Cex,
        status: None,
        meaning: "The venue refused the credentials at preflight, prepare or the withdraw request itself; it did not \
            act, the key is void and the node is FAILED.",
        action: "Fix the venue credentials (rotate, update, restart; `qtgctl venues drill`), then retry the node.",
    }
    CEX_DEPOSIT_FEE_CHANGED {
        source: Cex,
        status: None,
        meaning: "The deposit arrived as the venue's record of the withdrawal says, but not as priced: the money \
            moved at another fee. UNKNOWN, for a person (`deposit_fee_changed`).",
        action: "Compare the priced and charged fees at both venues and settle the difference; do not retry the \
            withdrawal.",
    }
    CEX_DEPOSIT_MISMATCH {
        source: Cex,
        status: None,
        meaning: "The deposit with the withdrawal's txid has another amount or address than expected; the node is \
            FAILED, though money moved.",
        action: "Reconcile at both venues and decide the movement by hand; do not retry the withdrawal.",
    }
    CEX_DEPOSIT_REJECTED {
        source: Cex,
        status: None,
        meaning: "The destination venue reports the deposit rejected: the withdrawal left the source but was not \
            credited; FAILED.",
        action: "Recover the funds with the destination venue; do not retry the withdrawal.",
    }
    CEX_DEPOSIT_WRONG {
        source: Cex,
        status: None,
        meaning: "The destination venue reports a wrong deposit: the withdrawal left the source but was not credited; \
            FAILED.",
        action: "Recover the funds with the destination venue; do not retry the withdrawal.",
    }
    CEX_FEE_CAP_REQUIRED {
        source: Cex,
        status: None,
        meaning: "An amount that must arrive at a venue that deducts its fee needs a fee cap \
            (`risk_controls.max_fee`) and the template has none; refused, nothing sent.",
        action: "Add `risk_controls.max_fee` in a new template version and create a new movement.",
    }
    CEX_FEE_OVER_CAP {
        source: Cex,
        status: None,
        meaning: "The venue's withdrawal fee is above the template's cap (`risk_controls.max_fee`); refused, nothing \
            sent.",
        action: "Retry when the fee falls, or raise the cap in a new template version.",
    }
    CEX_FEE_UNKNOWN {
        source: Cex,
        status: None,
        meaning: "The venue states no withdrawal fee for the network, so what would arrive cannot be known; refused, \
            nothing sent.",
        action: "Retry later; if the venue keeps stating none, escalate.",
    }
    CEX_INSUFFICIENT_BALANCE {
        source: Cex,
        status: None,
        meaning: "The venue account's free balance is below what the withdrawal debits under the fee model; refused \
            at preflight, nothing sent.",
        action: "Fund the venue account, then retry the node.",
    }
    CEX_INTENT_INVALID {
        source: Cex,
        status: None,
        meaning: "The intent or the template's fee cap cannot be read (or a deposit observe has no asset); refused, \
            nothing sent by this node.",
        action: "Fix the template or intent named in the detail and create a new movement.",
    }
    CEX_KEY_ALREADY_SENT {
        source: Cex,
        status: None,
        meaning: "A repeated submit for a key already sent, and the venue does not (yet) show a withdrawal under it; \
            never sent twice. The node is UNKNOWN: the venue may hold it.",
        action: "Wait for recovery to reconcile the key.",
    }
    CEX_KEY_SUPERSEDED {
        source: Cex,
        status: None,
        meaning: "A submit for an attempt older than one already recorded for the node; refused, nothing sent.",
        action: "Nothing for this attempt: the newer attempt decides the node.",
    }
    CEX_KEY_VOID {
        source: Cex,
        status: None,
        meaning: "The submit's key was voided (by recovery) before the request left; nothing was sent and the node is \
            FAILED.",
        action: "Retry the node if the movement should still happen.",
    }
    CEX_NETWORK_REQUIRED {
        source: Cex,
        status: None,
        meaning: "The asset moves on several networks and the node or intent names none; refused, nothing sent.",
        action: "Name the network in the template or intent and create a new movement.",
    }
    CEX_NETWORK_UNAVAILABLE {
        source: Cex,
        status: None,
        meaning: "The asset's network is unknown at the venue or closed for withdrawals; refused, nothing sent.",
        action: "Retry the node once the venue reopens withdrawals on the network.",
    }
    CEX_NO_ANSWER {
        source: Cex,
        status: None,
        meaning: "The withdraw request may have reached the venue and no usable answer says what it did; the node is \
            UNKNOWN.",
        action: "Wait for recovery to reconcile by client id (runbook C1/C2); never retry blind.",
    }
    CEX_RATE_LIMITED {
        source: Cex,
        status: None,
        meaning: "The venue rate-limited the withdraw request and did not process it; the key is void and the node is \
            FAILED.",
        action: "Retry the node later.",
    }
    CEX_REFERENCE_MISSING {
        source: Cex,
        status: None,
        meaning: "An observe node has no withdrawal id or txid to follow (its config or predecessors give none); \
            refused, nothing sent.",
        action: "Fix the template (config or the node it follows), then retry or create a new movement.",
    }
    CEX_STATUS_UNMAPPED {
        source: Cex,
        status: None,
        meaning: "The venue reports a withdrawal or deposit status qtg does not map; the node keeps OBSERVING with \
            `__status_unmapped` (runbook C5). The venue holds the withdrawal.",
        action: "File a bug with a fixture of the venue's status, then escalate.",
    }
    CEX_SUBMIT_LATE {
        source: Cex,
        status: None,
        meaning: "The submit came after `submit_by`, or the venue's clock was within 1 s of it; the key is void, \
            nothing was sent and the node is FAILED.",
        action: "Retry the node; if it repeats, check clock skew and venue latency.",
    }
    CEX_TXID_MISSING {
        source: Cex,
        status: None,
        meaning: "The deposit observe has no txid from its config or predecessors; it is FAILED. The withdrawal \
            before it may have moved money.",
        action: "Check the withdrawal and deposit at the venues by hand; fix the template.",
    }
    CEX_VENUE_ERROR {
        source: Cex,
        status: None,
        meaning: "The venue answered the withdraw request with a 5xx: whether it acted is unknown; the node is \
            UNKNOWN.",
        action: "Wait for recovery to reconcile by client id; never retry blind.",
    }
    CEX_VENUE_MISMATCH {
        source: Cex,
        status: None,
        meaning: "The prepared withdrawal names another venue than this executor entry's; nothing was sent and the \
            node is FAILED.",
        action: "Check the executor registry (entry and venue), then retry the node.",
    }
    CEX_VENUE_TIME_UNAVAILABLE {
        source: Cex,
        status: None,
        meaning: "The venue's clock could not be read before the withdraw request; the key is void, nothing was sent, \
            FAILED.",
        action: "Retry the node once the venue is reachable.",
    }
    CEX_VENUE_UNREACHABLE {
        source: Cex,
        status: None,
        meaning: "No connection to the venue could be made, so the withdraw request never left; the key is void and \
            the node is FAILED.",
        action: "Restore connectivity to the venue, then retry the node.",
    }
    CEX_WITHDRAWAL_CANCELLED {
        source: Cex,
        status: None,
        meaning: "The venue ended the withdrawal as cancelled without moving funds; the node is FAILED.",
        action: "Confirm at the venue that nothing left the account, then retry the node or cancel the movement.",
    }
    CEX_WITHDRAWAL_FAILED {
        source: Cex,
        status: None,
        meaning: "The venue ended the withdrawal as failed without moving funds; the node is FAILED.",
        action: "Confirm at the venue that nothing left the account, then retry the node or cancel the movement.",
    }
    CEX_WITHDRAWAL_ID_MISSING {
        source: Cex,
        status: None,
        meaning: "An observe found no venue withdrawal id recorded for the node; it is UNKNOWN and the venue may hold \
            the withdrawal.",
        action: "Wait for recovery to reconcile by client id; escalate if it persists.",
    }
    CEX_WITHDRAWAL_NOT_FOUND {
        source: Cex,
        status: None,
        meaning: "Recovery: the venue has no withdrawal for the key and the request can no longer reach it; the key \
            is void and the node is FAILED with no effect.",
        action: "Retry the node if the movement should still happen.",
    }
    CEX_WITHDRAWAL_NOT_SENT {
        source: Cex,
        status: None,
        meaning: "Recovery: the key never left qtg (a withdrawal of the same shape is someone else's); the key is \
            void and the node is FAILED with no effect.",
        action: "Retry the node if the movement should still happen.",
    }
    CEX_WITHDRAWAL_REFUSED {
        source: Cex,
        status: None,
        meaning: "The venue refused the withdraw request (a 4xx) and did not act; the key is void and the node is \
            FAILED.",
        action: "Fix the cause in the venue's message, then retry the node.",
    }
    CEX_WITHDRAWAL_REJECTED {
        source: Cex,
        status: None,
        meaning: "The venue ended the withdrawal as rejected without moving funds; the node is FAILED.",
        action: "Confirm at the venue that nothing left the account, then retry the node or cancel the movement.",
    }
    RECONCILIATION_AMBIGUOUS {
        source: Cex,
        status: None,
        meaning: "Recovery: several withdrawals (or a lone one without qtg's client id) match the attempt; UNKNOWN, \
            asked again while the lookback is open, then for a person (runbook C2).",
        action: "Once handed over: check the venue by client order id, amount and address, then decide the node by \
            hand.",
    }
    RECONCILIATION_AUTH_FAILED {
        source: Cex,
        status: None,
        meaning: "Recovery could not read the venue: its credentials were refused. The node is UNKNOWN and gated; the \
            venue may hold the withdrawal (runbook C3b).",
        action: "Fix the credentials (rotate, update, restart), check with `qtgctl venues drill`, then escalate or \
            resume.",
    }
    RECONCILIATION_FENCING {
        source: Cex,
        status: None,
        meaning: "Recovery: the request may still reach the venue, so its history is matched only after the fence \
            time; UNKNOWN.",
        action: "Nothing; recovery asks again then.",
    }
    RECONCILIATION_GATED {
        source: Cex,
        status: None,
        meaning: "Recovery will not match: the submit markers are missing, so what was sent cannot be told. UNKNOWN \
            for a person; the venue may hold it (runbook C3a).",
        action: "Escalate, keeping the evidence; check the venue by client order id, amount and address.",
    }
    RECONCILIATION_NO_MATCH {
        source: Cex,
        status: None,
        meaning: "Recovery: no withdrawal matches, but the request may still reach the venue; UNKNOWN, asked again — \
            past the lookback without proof, for a person (runbook C2).",
        action: "Wait; once handed over, check the venue by client order id, then decide (C6 cancel if nothing was \
            created).",
    }
    CCTP_ALLOWANCE_INSUFFICIENT {
        source: Cctp,
        status: None,
        meaning: "`from`'s USDC allowance to the token messenger is below the burn amount (qtg never sends \
            `approve`); refused at preflight, nothing sent.",
        action: "Have `from` approve the token messenger itself, then retry the node.",
    }
    CCTP_ATTESTATION_INVALID {
        source: Cctp,
        status: None,
        meaning: "The mint's attestation is not as long as the destination transmitter's m-of-n check needs \
            (signatureThreshold() signatures of 65 bytes), or the transmitter does not say its threshold; refused at \
            preflight, nothing minted (the burn already happened).",
        action: "Check the attestation step's output and service, then retry the mint; never re-run the burn.",
    }
    CCTP_ATTESTATION_MISMATCH {
        source: Cctp,
        status: None,
        meaning: "The attestation service attested another message than the burn's; the attestation node is FAILED. \
            The burn happened and nothing is minted yet.",
        action: "Investigate the attestation service; obtain the burn's own attestation; never re-run the burn.",
    }
    CCTP_ATTESTATION_EXPIRED {
        source: Cctp,
        status: None,
        meaning: "The V2 Fast attestation's `expirationBlock` has passed on the destination chain; the transmitter \
            would revert the mint, so it was refused before anything was sent (the burn happened, nothing minted).",
        action: "Have the attestation re-signed (`POST /v2/reattest/{nonce}`; the attestation step does it when it \
            sees the expiry coming), then retry the mint with the new attestation; never re-run the burn.",
    }
    CCTP_BURN_CALLER_MISMATCH {
        source: Cctp,
        status: None,
        meaning: "The burn's `config.burn_caller` is missing or not the address its signer (or executor) sends from; \
            the node is FAILED before prepare: nothing signed or sent.",
        action: "Align `burn_caller`, the signer binding and its enrolled identity, then retry the node.",
    }
    CCTP_BURN_REFERENCE_MISSING {
        source: Cctp,
        status: None,
        meaning: "The attestation step has no source domain or burn transaction hash; refused, nothing done by this \
            step (the burn may have happened).",
        action: "Fix the template's refs to the burn, then retry the node; never re-run the burn.",
    }
    CCTP_CHAIN_NOT_CONFIGURED {
        source: Cctp,
        status: None,
        meaning: "The node's chain has no domain in `MG_CCTP_DOMAINS`; refused before anything was sent.",
        action: "Add the domain to `MG_CCTP_DOMAINS` or fix the template's `chain_id`, then retry.",
    }
    CCTP_CONFIG_INVALID {
        source: Cctp,
        status: None,
        meaning: "The node's config lacks `contract`, `token_contract`, `decimals`, `destination_domain`, \
            `burn_caller` or `burn_message_hash`; refused before anything was sent.",
        action: "Fix the template's node config, then create a new movement (or retry once the ref is fixed).",
    }
    CCTP_CONTRACT_MISMATCH {
        source: Cctp,
        status: None,
        meaning: "The plan's `contract` is not the domain's token messenger (burn) or message transmitter (mint); \
            refused, nothing sent.",
        action: "Fix the template or `MG_CCTP_DOMAINS`, whichever is wrong.",
    }
    CCTP_DENYLISTED {
        source: Cctp,
        status: None,
        meaning: "The V2 token messenger's denylist holds the burn's sender: its `depositForBurn` would revert; \
            refused at preflight, nothing signed or sent.",
        action: "Find out from Circle why the address is denylisted; burn from another address (a new template \
            version) once cleared.",
    }
    CCTP_DESTINATION_DOMAIN_NOT_ALLOWED {
        source: Cctp,
        status: None,
        meaning: "The destination domain is this chain's own, not configured, not in `allowed_destination_domains`, \
            or has no remote messenger on chain; refused, nothing sent.",
        action: "Check the domain; fix the template, `MG_CCTP_DOMAINS` or the plan's allow-list.",
    }
    CCTP_FEE_ABOVE_CAP {
        source: Cctp,
        status: None,
        meaning: "The V2 route's fee — the fee API's minimum for the chosen finality and the messenger's on-chain \
            minimum, of the amount burned — is above the burn's cap (`config.max_fee`, lowered by \
            `risk_controls.cctp_max_fee`); refused at preflight, nothing signed or sent.",
        action: "Wait for the fee to fall and retry the node, or approve a template version with a higher cap (or \
            Standard instead of Fast).",
    }
    CCTP_FEE_UNKNOWN {
        source: Cctp,
        status: None,
        meaning: "The fee API refused the V2 route (a 4xx other than 429), answered in a shape qtg cannot read, or \
            quotes no fee for the burn's finality: the fee is unknown, so the burn was refused at preflight, nothing \
            signed or sent. (No answer, a 429 or a 5xx is retried instead.)",
        action: "Check the route (domains) and the burn entry's `fee_url` against Circle's fee API, then retry the \
            node.",
    }
    CCTP_MESSAGE_INVALID {
        source: Cctp,
        status: None,
        meaning: "The mint's message is not a CCTP message or its body is not a burn; refused, nothing minted.",
        action: "Check the attestation step's output, then retry the mint; never re-run the burn.",
    }
    CCTP_MESSAGE_MISMATCH {
        source: Cctp,
        status: None,
        meaning: "The mint's message is not the burn's (hash), comes by another route, or does not mint the intent's \
            amount to its destination; refused, nothing minted.",
        action: "Investigate where the message came from; retry the mint with the burn's own message; never re-run \
            the burn.",
    }
    CCTP_MESSAGE_MISSING {
        source: Cctp,
        status: None,
        meaning: "The mint's config has no hex `message` or `attestation` (refs to the attestation step); refused, \
            nothing minted.",
        action: "Fix the template's refs to the attestation step, then retry the mint.",
    }
    CCTP_MINT_CALLER_MISMATCH {
        source: Cctp,
        status: None,
        meaning: "The message names a `destinationCaller` other than this executor's address, which therefore cannot \
            receive it; refused, nothing minted.",
        action: "Have the named caller receive the message, or route the mint to an executor sending from it.",
    }
    CCTP_TOKEN_MISMATCH {
        source: Cctp,
        status: None,
        meaning: "The plan's `token_contract` is not the domain's USDC; refused, nothing sent.",
        action: "Fix the template or `MG_CCTP_DOMAINS`, whichever is wrong.",
    }
    CCTP_VERSION_NOT_CONFIGURED {
        source: Cctp,
        status: None,
        meaning: "The node's CCTP version (`config.cctp_version`) has no contracts on its domain or the destination \
            domain in `MG_CCTP_DOMAINS`; refused, nothing sent.",
        action: "Add the version's contracts to `MG_CCTP_DOMAINS`, or use the version the route has.",
    }
    CCIP_ALLOWANCE_INSUFFICIENT {
        source: Ccip,
        status: None,
        meaning: "`from`'s allowance of the token to the CCIP router is below the amount (qtg never sends `approve`); \
            refused at preflight, nothing signed or sent.",
        action: "Have `from` approve the router itself, then retry the node.",
    }
    CCIP_AMOUNT_NOT_REPRESENTABLE {
        source: Ccip,
        status: None,
        meaning: "The destination token has fewer decimals than the source token and the amount is finer than \
            them: the pool would release it rounded down (dust as 0), so less would arrive than was approved; \
            refused at preflight, nothing sent.",
        action: "Send an amount the destination token can hold (a multiple of its smallest unit).",
    }
    CCIP_CHAIN_NOT_CONFIGURED {
        source: Ccip,
        status: None,
        meaning: "The node's chain, or its destination chain selector, is not in `MG_CCIP_CHAINS`; refused, nothing \
            sent (observe: the destination cannot be read).",
        action: "Add the chain (chain id, selector, router) to `MG_CCIP_CHAINS`, or fix the template.",
    }
    CCIP_CONFIG_INVALID {
        source: Ccip,
        status: None,
        meaning: "The CCIP node's config is missing or malformed (router, destination_chain_selector, token, \
            decimals, fee_token, max_fee, gas_limit, data); refused, nothing sent.",
        action: "Fix the template (docs/architecture.md §9.7 lists the keys), then retry the node.",
    }
    CCIP_DESTINATION_NOT_SUPPORTED {
        source: Ccip,
        status: None,
        meaning: "The router has no OnRamp for the destination chain selector (or the plan's risk controls do not \
            allow it); refused at preflight, nothing sent.",
        action: "Check the lane on chain (the router's `getOnRamp`, the send executor's drift facts) and the \
            template's destination; retry once the lane exists.",
    }
    CCIP_EXECUTION_FAILED {
        source: Ccip,
        status: None,
        meaning: "The message's execution on the destination is FAILURE (the receiver or the token pool reverted); \
            the node is UNKNOWN for a person with the message id, the OffRamp and its return data. FAILURE is not \
            final: manual execution can still turn it into SUCCESS, so the send must never be repeated.",
        action: "Fix the cause, execute the message manually on the OffRamp (`manuallyExecute`), then resume the \
            movement: recovery reads SUCCESS and completes the node. Never retry the send.",
    }
    CCIP_EXECUTION_OVERDUE {
        source: Ccip,
        status: None,
        meaning: "The stranded reaper found the message left the source (its id known) but shows no execution on \
            the destination `MG_CCIP_STRANDED_REAPER_AGE_SECONDS` later (a message never executed emits nothing \
            there); the delivery node is UNKNOWN for a person. The message may still be executed.",
        action: "Check the message by id in the CCIP explorer or on the OffRamp; execute it manually once the \
            permissionless threshold passed, then resume the movement. Never re-send.",
    }
    CCIP_FEE_ABOVE_CAP {
        source: Ccip,
        status: None,
        meaning: "The router's fee (`getFee`) for the message is above the plan's cap (`config.max_fee`, lowered by \
            `risk_controls.ccip_max_fee`); refused before anything was signed.",
        action: "Wait for fees to fall, or raise the cap in a reviewed template version, then retry.",
    }
    CCIP_FEE_FUNDS_INSUFFICIENT {
        source: Ccip,
        status: None,
        meaning: "`from` cannot pay the fee: its balance of the fee token (or the native coin) or its LINK allowance \
            to the router is below the router's fee; refused at preflight, nothing sent.",
        action: "Fund `from` (or have it approve the router for LINK), then retry the node.",
    }
    CCIP_FEE_TOKEN_NOT_ALLOWED {
        source: Ccip,
        status: None,
        meaning: "The node's `fee_token` is neither `native` nor the chain's LINK in `MG_CCIP_CHAINS`; refused, \
            nothing sent.",
        action: "Use `native` or the chain's LINK address in the template.",
    }
    CCIP_OFFRAMP_NOT_FOUND {
        source: Ccip,
        status: None,
        meaning: "No OffRamp of the destination router serves the send's OnRamp: the message's execution cannot be \
            read there. The node is UNKNOWN for a person.",
        action: "Check the destination router's `getOffRamps` and their source configs; once an OffRamp serves the \
            source, resume the movement.",
    }
    CCIP_RATE_LIMITED {
        source: Ccip,
        status: None,
        meaning: "The token pool's outbound rate limit for the destination holds fewer tokens than the amount; \
            refused at preflight, nothing sent (the router would revert).",
        action: "Retry the node once the bucket refills (the pool's `getCurrentOutboundRateLimiterState` shows its \
            capacity and rate), or split the amount.",
    }
    CCIP_ROUTER_MISMATCH {
        source: Ccip,
        status: None,
        meaning: "The plan's `contract` is not the chain's router in `MG_CCIP_CHAINS`; refused, nothing sent.",
        action: "Fix the template or `MG_CCIP_CHAINS`, whichever is wrong.",
    }
    CCIP_SEND_REFERENCE_MISSING {
        source: Ccip,
        status: None,
        meaning: "The delivery node has no message to watch: no `message_id`, `sequence_number` and selectors from \
            its send predecessor (or its config); FAILED before anything was watched.",
        action: "Bind the delivery node after the send node in the template.",
    }
    CCIP_TOKEN_NOT_SUPPORTED {
        source: Ccip,
        status: None,
        meaning: "The token has no pool on the OnRamp for the destination (the router would revert); refused at \
            preflight, nothing sent.",
        action: "Check the token's registration (TokenAdminRegistry) and pool on chain, or fix the template.",
    }
    SIM_KEY_SUPERSEDED {
        source: Sim,
        status: None,
        meaning: "The sim venue refused a submit older than an attempt it already saw; nothing executed.",
        action: "Nothing (test lane): the newer attempt decides.",
    }
    SIM_KEY_VOID {
        source: Sim,
        status: None,
        meaning: "The sim venue refused a submit whose key recovery voided; nothing executed.",
        action: "Retry the node if wanted (test lane).",
    }
    SIM_NOT_FOUND {
        source: Sim,
        status: None,
        meaning: "Recover found no order with the key at the sim venue (or was scripted to fail); the key is now \
            void, FAILED with no effect.",
        action: "Retry the node if wanted (test lane).",
    }
    SIM_OBSERVE_FAILED {
        source: Sim,
        status: None,
        meaning: "Scripted observe failure (`config.sim.observe = \"fail\"`); the node is FAILED after its submit was \
            accepted.",
        action: "Nothing: a test scenario.",
    }
    SIM_PREFLIGHT_FAILED {
        source: Sim,
        status: None,
        meaning: "Scripted preflight failure (`config.sim.preflight = \"fail\"`); nothing was sent.",
        action: "Nothing: a test scenario.",
    }
    SIM_SUBMIT_FAILED {
        source: Sim,
        status: None,
        meaning: "Scripted submit failure (`config.sim.submit = \"fail\"`): the sim venue voided the key and executed \
            nothing.",
        action: "Nothing: a test scenario.",
    }
    SIM_SUBMIT_LATE {
        source: Sim,
        status: None,
        meaning: "The sim venue got the submit after `submit_by`; the key is void and nothing executed.",
        action: "Retry the node if wanted (test lane).",
    }
}
