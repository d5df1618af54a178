#!/usr/bin/env bash
# `make run`: Postgres → database `qtg` → `qtg-venue-sim` (a simulated exchange, two accounts)
# → with anvil: two local chains (QTT on A; the CCTP contracts on A and B) and
# `qtg-attestation-sim` → `qtg` (API + workers; sim, CEX, EVM and CCTP lanes; balance snapshots of
# the venue's accounts and the chains, capital transfers followed up) → demo templates and API
# keys → prints how to create and approve a movement, read balances and request a capital
# transfer with curl. Ctrl-C stops it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
mkdir -p .qtg
# Everything it starts is stopped on Ctrl-C or exit, also when a step fails before qtg is up, and
# waited for: anvil writes its chain state as it stops, and a next run finds the ports free.
pid="" venue_pid="" anvil_pid="" anvil_b_pid="" attestation_pid="" ccip_pid=""
stop() {
  kill -TERM $pid $venue_pid $anvil_pid $anvil_b_pid $attestation_pid $ccip_pid 2>/dev/null || true
  wait $pid $venue_pid $anvil_pid $anvil_b_pid $attestation_pid $ccip_pid 2>/dev/null || true
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
admin_url=$(./scripts/ensure-postgres.sh)
base=${admin_url%/*}
psql "$admin_url" -tAc "SELECT 1 FROM pg_database WHERE datname = 'qtg'" | grep -q 1 \
  || psql "$admin_url" -qc "CREATE DATABASE qtg"

export MG_DATABASE_URL="$base/qtg"
# The simulated exchange of the CEX→CEX demo (its ledger survives restarts in .qtg/).
venue_addr="${QTG_VENUE_SIM_ADDR:-127.0.0.1:9400}"
./target/debug/qtg-venue-sim --addr "$venue_addr" --accounts deploy/venue-sim.toml --state .qtg/venue-sim.json \
  2> .qtg/venue-sim.log &
venue_pid=$!
for _ in $(seq 1 50); do
  curl -fsS "http://$venue_addr/api/v3/time" >/dev/null 2>&1 && break
  kill -0 $venue_pid 2>/dev/null || { echo "qtg-venue-sim exited; see .qtg/venue-sim.log" >&2; exit 1; }
  sleep 0.1
done
# The sim lanes plus the CEX lane's entries and its two accounts' balance fetchers, pointed at
# that venue; its accounts' credentials (the simulator's own, from deploy/venue-sim.toml) as a
# real deployment passes them: by env.
cat deploy/registry.cex.toml deploy/registry.cex-kraken.toml deploy/registry.cex-balances.toml | sed "s|http://127.0.0.1:9400|http://$venue_addr|" \
  | cat deploy/registry.sim.toml - > .qtg/registry.toml
export MG_EXECUTOR_REGISTRY="$here/.qtg/registry.toml"
export MG_SIM_A_ACCESS_KEY=sim-a-api-key-0001 MG_SIM_A_SECRET=sim-a-secret-0001
export MG_SIM_B_ACCESS_KEY=sim-b-api-key-0001 MG_SIM_B_SECRET=sim-b-secret-0001
export MG_SIM_K_ACCESS_KEY=sim-k-api-key-0001 MG_SIM_K_SECRET=c2ltLWstc2VjcmV0LTAwMDEta3Jha2VuLXNoYXBlZC1hY2NvdW50

# The EVM demo: a local anvil (from npm; its chain state kept in .qtg/anvil-state.json across
# restarts, like the database) with the QTT test token, and the EVM lane's entries.
rpc_at() { # url method params → the JSON-RPC answer
  curl -fsS -X POST "$1" -H 'Content-Type: application/json' -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$2\",\"params\":$3}"
}
rpc() { rpc_at "$anvil_url" "$@"; }
json() { python3 -c "import sys, json; print(json.load(sys.stdin)$1)"; }
evm_chain() { # chain id, rpc url → its MG_EVM_CHAINS entry
  echo "{\"chain_id\":$1,\"rpc_urls\":[\"$2\"],\"confirmations\":1,\"max_fee_per_gas_wei\":\"100000000000\",\"max_priority_fee_per_gas_wei\":\"2000000000\",\"replace_after_seconds\":30}"
}
deployer=0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266 # anvil's first account (unlocked)
token=""
cctp=""
if anvil_bin=$(./scripts/ensure-evm-tools.sh 2>.qtg/evm-tools.log); then
  anvil_addr="${QTG_ANVIL_ADDR:-127.0.0.1:8545}"
  anvil_url="http://$anvil_addr"
  "$anvil_bin" --host "${anvil_addr%:*}" --port "${anvil_addr##*:}" --state .qtg/anvil-state.json --state-interval 2 \
    > .qtg/anvil.log 2>&1 &
  anvil_pid=$!
  for _ in $(seq 1 50); do rpc eth_chainId '[]' >/dev/null 2>&1 && break; sleep 0.1; done
  # QTT: the first contract anvil's first account deploys (its address follows from that).
  token=0x5fbdb2315678afecb367f032d93f642f64180aa3
  if [ "$(rpc eth_getCode "[\"$token\",\"latest\"]" | python3 -c 'import sys,json; print(json.load(sys.stdin)["result"])')" = "0x" ]; then
    supply=$(python3 -c 'print(format(10**24, "064x"))')
    rpc eth_sendTransaction "[{\"from\":\"$deployer\",\"gas\":\"0x200000\",\"data\":\"0x$(cat contracts/QtgTestToken.bin)$supply\"}]" >/dev/null
  fi
  cat deploy/registry.evm.toml >> .qtg/registry.toml
  export MG_ANVIL0_PRIVATE_KEY=0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80

  # The CCTP demo: a second anvil as chain B (31338, CCTP domain 1; its state kept in
  # .qtg/anvil-b-state.json) beside chain A (the anvil above, domain 0), the contracts of
  # contracts/QtgCctp.sol on both, qtg-attestation-sim attesting A's burns, and the CCTP lane's
  # entries (deploy/registry.cctp.toml).
  anvil_b_addr="${QTG_ANVIL_B_ADDR:-127.0.0.1:8546}"
  anvil_b_url="http://$anvil_b_addr"
  "$anvil_bin" --host "${anvil_b_addr%:*}" --port "${anvil_b_addr##*:}" --chain-id 31338 \
    --state .qtg/anvil-b-state.json --state-interval 2 > .qtg/anvil-b.log 2>&1 &
  anvil_b_pid=$!
  # Its chain id, not just an answer: another node on that port would take the demo elsewhere.
  for _ in $(seq 1 100); do
    [ "$(rpc_at "$anvil_b_url" eth_chainId '[]' 2>/dev/null | json "['result']" 2>/dev/null)" = 0x7a6a ] && break
    kill -0 $anvil_b_pid 2>/dev/null \
      || { echo "anvil (chain B) exited; see .qtg/anvil-b.log (QTG_ANVIL_B_ADDR picks another address)" >&2; exit 1; }
    sleep 0.1
  done
  # The attester: a test key (anvil's sixth account's; never a real one). Its address, which
  # chain B's transmitter checks attestations against, as the simulator reports it.
  attestation_addr="${QTG_ATTESTATION_SIM_ADDR:-127.0.0.1:9401}"
  QTG_ATTESTATION_SIM_ATTESTER_KEY=0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba \
    ./target/debug/qtg-attestation-sim --addr "$attestation_addr" --source "0=$anvil_url" \
    --destination "1=$anvil_b_url" --confirmations 1 \
    2> .qtg/attestation-sim.log &
  attestation_pid=$!
  attester=""
  for _ in $(seq 1 100); do
    attester=$(curl -fsS "http://$attestation_addr/admin/stats" 2>/dev/null | json "['attester']" 2>/dev/null) && break
    kill -0 $attestation_pid 2>/dev/null \
      || { echo "qtg-attestation-sim exited; see .qtg/attestation-sim.log (QTG_ATTESTATION_SIM_ADDR picks another address)" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "$attester" ] || { echo "qtg-attestation-sim does not answer at $attestation_addr" >&2; exit 1; }

  # ABI words by hand: a uint, an address.
  word() { printf '%064x' "$1"; }
  addr_word() { local a=${1#0x}; printf '%024d%s' 0 "${a,,}"; }
  # A transaction from anvil's first account on the chain at $1, to $2 (empty: a deployment),
  # with data $3; anvil mines it at once. Fails if it reverted; prints the receipt's
  # contractAddress (None but for a deployment).
  send_tx() {
    local hash receipt=""
    hash=$(rpc_at "$1" eth_sendTransaction \
      "[{\"from\":\"$deployer\",\"gas\":\"0x800000\",${2:+\"to\":\"$2\",}\"data\":\"$3\"}]" \
      | python3 -c 'import sys, json; a = json.load(sys.stdin); print(a["result"]) if "result" in a else sys.exit("make run: eth_sendTransaction: %s" % a.get("error"))') \
      || return 1
    for _ in $(seq 1 100); do
      receipt=$(rpc_at "$1" eth_getTransactionReceipt "[\"$hash\"]" \
        | python3 -c 'import sys, json; r = json.load(sys.stdin)["result"]; r and print(r["status"], r["contractAddress"])') || return 1
      [ -n "$receipt" ] && break
      sleep 0.1
    done
    [ "${receipt%% *}" = 0x1 ] || { echo "make run: transaction $hash on $1 ${receipt:+reverted}${receipt:-was not mined}" >&2; return 1; }
    echo "${receipt#* }"
  }
  has_code() { local c; c=$(rpc_at "$1" eth_getCode "[\"$2\",\"latest\"]" | json "['result']") && [ "$c" != 0x ]; }
  call_word() { rpc_at "$1" eth_call "[{\"to\":\"$2\",\"data\":\"$3\"},\"latest\"]" | json "['result']"; }
  # Chain $1's CCTP contracts as domain $2, recorded in $3 ("usdc transmitter messenger");
  # deployed (once) when the chain has no code at the recorded addresses: the first run, or that
  # chain's state lost. Recorded, not predicted: an address follows from the deployer's nonce,
  # and on chain A QTT and the demo's own movements spend nonces too.
  cctp_side() { # url domain record
    local usdc transmitter messenger
    if [ -s "$3" ] && read -r usdc transmitter messenger < "$3" \
      && has_code "$1" "$usdc" && has_code "$1" "$transmitter" && has_code "$1" "$messenger"; then
      return
    fi
    # 1 000 000 USDC (6 decimals) to the deployer; the transmitter trusts the attester; the
    # messenger burns and mints through both.
    usdc=$(send_tx "$1" "" "0x$(cat contracts/QtgCctp_sol_QtgUsdc.bin)$(word 1000000000000)")
    transmitter=$(send_tx "$1" "" "0x$(cat contracts/QtgCctp_sol_MessageTransmitter.bin)$(word "$2")$(addr_word "$attester")")
    messenger=$(send_tx "$1" "" "0x$(cat contracts/QtgCctp_sol_TokenMessenger.bin)$(addr_word "$transmitter")$(addr_word "$usdc")")
    # 0x8b363731 configureMinter(address,bool): the messenger mints what the other chain burned.
    send_tx "$1" "$usdc" "0x8b363731$(addr_word "$messenger")$(word 1)" >/dev/null
    echo "$usdc $transmitter $messenger" > "$3"
  }
  cctp_side "$anvil_url" 0 .qtg/cctp-a.addresses
  cctp_side "$anvil_b_url" 1 .qtg/cctp-b.addresses
  read -r a_usdc a_transmitter a_messenger < .qtg/cctp-a.addresses
  read -r b_usdc b_transmitter b_messenger < .qtg/cctp-b.addresses
  # CCTP V2 beside V1 on the same USDC (contracts/QtgCctpV2.sol), recorded in $4 ("usdc
  # transmitter messenger"; deployed anew with the chain's V1 side): MessageTransmitterV2
  # trusting the attester, TokenMessengerV2 paying the fees to anvil's fourth account and
  # minting USDC, 1 000 000 USDC a message (0x7235ea0c setMaxBurnAmountPerMessage).
  fee_recipient=0x90F79bf6EB2c4f870365E785982E1f101E93b906
  cctp_v2_side() { # url domain usdc record
    local usdc transmitter messenger
    if [ -s "$4" ] && read -r usdc transmitter messenger < "$4" && [ "$usdc" = "$3" ] \
      && has_code "$1" "$transmitter" && has_code "$1" "$messenger"; then
      return
    fi
    transmitter=$(send_tx "$1" "" "0x$(cat contracts/QtgCctpV2_sol_MessageTransmitterV2.bin)$(word "$2")$(addr_word "$attester")")
    messenger=$(send_tx "$1" "" "0x$(cat contracts/QtgCctpV2_sol_TokenMessengerV2.bin)$(addr_word "$transmitter")$(addr_word "$fee_recipient")")
    send_tx "$1" "$3" "0x8b363731$(addr_word "$messenger")$(word 1)" >/dev/null
    send_tx "$1" "$messenger" "0x7235ea0c$(addr_word "$3")$(word 1000000000000)" >/dev/null
    echo "$3 $transmitter $messenger" > "$4"
  }
  cctp_v2_side "$anvil_url" 0 "$a_usdc" .qtg/cctp-v2-a.addresses
  cctp_v2_side "$anvil_b_url" 1 "$b_usdc" .qtg/cctp-v2-b.addresses
  read -r _ a_transmitter_v2 a_messenger_v2 < .qtg/cctp-v2-a.addresses
  read -r _ b_transmitter_v2 b_messenger_v2 < .qtg/cctp-v2-b.addresses
  # 0xda87e448 addRemoteTokenMessenger(uint32,bytes32): each messenger takes the other's
  # messages. Checked by 0x82a5e665 remoteTokenMessengers(uint32) at each start: a side deployed
  # anew needs it again on the other.
  link() { # url messenger remote-domain remote-messenger
    [ "$(call_word "$1" "$2" "0x82a5e665$(word "$3")")" = "0x$(addr_word "$4")" ] \
      || send_tx "$1" "$2" "0xda87e448$(word "$3")$(addr_word "$4")" >/dev/null
  }
  link "$anvil_url" "$a_messenger" 1 "$b_messenger"
  link "$anvil_b_url" "$b_messenger" 0 "$a_messenger"
  link "$anvil_url" "$a_messenger_v2" 1 "$b_messenger_v2"
  link "$anvil_b_url" "$b_messenger_v2" 0 "$a_messenger_v2"
  # 0x2b2b90e1 linkTokenPair(address,uint32,bytes32): each side mints its USDC for the other's
  # (as Circle's TokenMinter; checked by 0x78a0565e getLocalToken(uint32,bytes32)).
  pair() { # url messenger local-usdc remote-domain remote-usdc
    [ "$(call_word "$1" "$2" "0x78a0565e$(word "$4")$(addr_word "$5")")" = "0x$(addr_word "$3")" ] \
      || send_tx "$1" "$2" "0x2b2b90e1$(addr_word "$3")$(word "$4")$(addr_word "$5")" >/dev/null
  }
  pair "$anvil_url" "$a_messenger" "$a_usdc" 1 "$b_usdc"
  pair "$anvil_b_url" "$b_messenger" "$b_usdc" 0 "$a_usdc"
  pair "$anvil_url" "$a_messenger_v2" "$a_usdc" 1 "$b_usdc"
  pair "$anvil_b_url" "$b_messenger_v2" "$b_usdc" 0 "$a_usdc"
  # 0x095ea7b3 approve(address,uint256): the burn pulls the deployer's USDC on A through A's
  # messenger, without limit (0xdd62ed3e allowance(address,address) says if it was given).
  max=$(printf 'f%.0s' $(seq 64))
  for spender in "$a_messenger" "$a_messenger_v2"; do
    [ "$(call_word "$anvil_url" "$a_usdc" "0xdd62ed3e$(addr_word $deployer)$(addr_word "$spender")")" = "0x$max" ] \
      || send_tx "$anvil_url" "$a_usdc" "0x095ea7b3$(addr_word "$spender")$max" >/dev/null
  done
  sed "s|http://127.0.0.1:9401|http://$attestation_addr|" deploy/registry.cctp.toml >> .qtg/registry.toml
  # Both chains' balance fetchers (ETH, QTT and USDC of the demos' sender and recipient): after
  # the CCTP contracts, as chain A's USDC address is known only then; both chains are in
  # MG_EVM_CHAINS, which a fetcher's chain must be.
  sed -e "s|__TOKEN__|$token|" -e "s|__USDC_A__|$a_usdc|" -e "s|__USDC_B__|$b_usdc|" \
    deploy/registry.evm-balances.toml >> .qtg/registry.toml
  export MG_EVM_CHAINS="[$(evm_chain 31337 "$anvil_url"),$(evm_chain 31338 "$anvil_b_url")]"
  # domain chain usdc transmitter messenger transmitter-v2 messenger-v2 → its MG_CCTP_DOMAINS
  # entry: V2 (what the demo leads with) and V1 (legacy).
  domain() {
    echo "{\"domain\":$1,\"chain_id\":$2,\"usdc\":\"$3\",\"v2\":{\"token_messenger\":\"$7\",\"message_transmitter\":\"$6\"},\"v1\":{\"token_messenger\":\"$5\",\"message_transmitter\":\"$4\"}}"
  }
  export MG_CCTP_DOMAINS="[$(domain 0 31337 "$a_usdc" "$a_transmitter" "$a_messenger" "$a_transmitter_v2" "$a_messenger_v2"),$(domain 1 31338 "$b_usdc" "$b_transmitter" "$b_messenger" "$b_transmitter_v2" "$b_messenger_v2")]"
  cctp=1

  # The CCIP demo: Chainlink's own CCIP 1.6 lane from chain A to chain B — the released bytecode
  # of @chainlink/contracts-ccip (fetched by ensure-evm-tools.sh) deployed once on both chains by
  # qtg-ccip-sim as anvil's tenth account (every address recorded in .qtg/ccip-lane.json; anvil's
  # first account holds the token QCA and LINK and has approved A's router) — and qtg-ccip-sim
  # relay standing in for CCIP's off-chain network (commit each message's root, then execute it).
  ccip_lane=.qtg/ccip-lane.json
  lane_at() { python3 -c "import json, sys; print(json.load(open(sys.argv[1]))$1)" "$ccip_lane"; }
  if ! { [ -s "$ccip_lane" ] && has_code "$anvil_url" "$(lane_at "['source']['on_ramp']")" \
      && has_code "$anvil_b_url" "$(lane_at "['destination']['off_ramp']")"; }; then
    ./target/debug/qtg-ccip-sim deploy --source "$anvil_url" --destination "$anvil_b_url" --out "$ccip_lane" \
      --approve 2>> .qtg/ccip-sim.log \
      || { echo "qtg-ccip-sim deploy failed; see .qtg/ccip-sim.log" >&2; exit 1; }
  fi
  ./target/debug/qtg-ccip-sim relay --lane "$ccip_lane" 2>> .qtg/ccip-sim.log &
  ccip_pid=$!
  cat deploy/registry.ccip.toml >> .qtg/registry.toml
  MG_CCIP_CHAINS=$(python3 -c "import json, sys; print(json.dumps(json.load(open(sys.argv[1]))['mg_ccip_chains']))" "$ccip_lane")
  export MG_CCIP_CHAINS
  ccip_router_a=$(lane_at "['source']['router']")
  ccip_token_a=$(lane_at "['source']['token']")
  ccip_token_b=$(lane_at "['destination']['token']")
  ccip_selector_b=$(lane_at "['destination']['selector']")
else
  echo "make run: the EVM demo is off (no anvil: see .qtg/evm-tools.log)" >&2
fi
export MG_API_ADDR="${MG_API_ADDR:-127.0.0.1:8080}"
export MG_ADMIN_ADDR="${MG_ADMIN_ADDR:-127.0.0.1:9090}"
export MG_LOG_FORMAT="${MG_LOG_FORMAT:-pretty}"
# qtg-balance and qtg-followup, off by default, run in the all-in-one qtg: snapshots of every
# [balances.*] venue every 30 s (what GET /v3/balances shows and creation checks), and capital
# transfers closed within seconds of their movement ending (a tick every 5 s, not 60) and a lost
# movement created after 30 s untouched (not 300).
export MG_BALANCE_SNAPSHOT_ENABLED=true MG_CAPITAL_TRANSFER_FOLLOWUP_ENABLED=true
# cex_transfer_ingest: what moved on the venue accounts, linked to the movements; a withdrawal no
# movement explains is alerted (GET /v3/venue-transfers?unexplained=true, the console's Balances).
# Read every 10 s, and a withdrawal alerted 60 s after it was first seen unexplained (900 s by
# default: qtg's own withdrawal must have time to be linked).
export MG_CEX_TRANSFER_INGEST_VENUES_CSV=sim_a,sim_b,sim_k
export MG_CEX_TRANSFER_INGEST_INTERVAL_SECONDS="${MG_CEX_TRANSFER_INGEST_INTERVAL_SECONDS:-10}"
export MG_CEX_TRANSFER_UNEXPLAINED_GRACE_SECONDS="${MG_CEX_TRANSFER_UNEXPLAINED_GRACE_SECONDS:-60}"
export MG_CAPITAL_TRANSFER_FOLLOWUP_INTERVAL_SECONDS="${MG_CAPITAL_TRANSFER_FOLLOWUP_INTERVAL_SECONDS:-5}"
export MG_CAPITAL_TRANSFER_FOLLOWUP_STALE_SECONDS="${MG_CAPITAL_TRANSFER_FOLLOWUP_STALE_SECONDS:-30}"
if [ ! -f .qtg/bootstrap.key ]; then
  python3 -c 'import secrets; print("qtg_boot_" + secrets.token_hex(16))' > .qtg/bootstrap.key
fi
export MG_API_BOOTSTRAP_ADMIN_KEY=$(cat .qtg/bootstrap.key)
api="http://$MG_API_ADDR"

./target/debug/qtg 2> >(tee .qtg/qtg.log >&2) &
pid=$!
for _ in $(seq 1 100); do
  curl -fsS "http://$MG_ADMIN_ADDR/readyz" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { echo "qtg exited; see .qtg/qtg.log" >&2; exit 1; }
  sleep 0.2
done

call() { # method path key [body]
  curl -fsS -X "$1" "$api$2" -H "Authorization: Bearer $3" -H 'Content-Type: application/json' ${4:+-d "$4"}
}
key_for() { # principal role → secret (created once, kept in .qtg/keys)
  local f=".qtg/keys/$1"
  mkdir -p .qtg/keys
  if [ ! -s "$f" ] || ! curl -fsS "$api/v3/templates" -H "Authorization: Bearer $(cat "$f")" >/dev/null 2>&1; then
    call POST /v3/api-keys "$MG_API_BOOTSTRAP_ADMIN_KEY" "{\"principal\":\"$1\",\"roles\":[\"$2\"]}" | json "['secret']" > "$f"
  fi
  cat "$f"
}
OPERATOR=$(key_for demo-operator operator)
REQUESTER=$(key_for demo-requester requester)
APPROVER=$(key_for demo-approver approver)

install_template() { # key file [text… its latest version must hold, else the file makes the next]
  local key=$1 file=$2 t p want stale=""
  shift 2
  t=$(call GET "/v3/templates/$key" "$OPERATOR" 2>/dev/null | json "['versions'][0]" 2>/dev/null) || t=""
  [ -n "$t" ] || stale=1
  for want in "$@"; do grep -qiF -- "$want" <<<"$t" || stale=1; done
  if [ -n "$stale" ]; then
    p=$(call POST /v3/template-proposals "$OPERATOR" "$(cat "$file")" | json "['id']")
    call POST "/v3/template-proposals/$p/approve" "$MG_API_BOOTSTRAP_ADMIN_KEY" '{"reason":"demo"}' >/dev/null
  fi
}
install_template demo.sim.transfer deploy/demo-template.json
install_template demo.cex.a_to_b deploy/cex-demo-template.json
install_template demo.cex.k_to_b deploy/cex-kraken-demo-template.json
if [ -n "$token" ]; then
  sed "s|__TOKEN__|$token|" deploy/evm-demo-template.json > .qtg/evm-demo-template.json
  install_template demo.evm.pair .qtg/evm-demo-template.json
fi
if [ -n "$cctp" ]; then
  # The contracts of this run's chains: a chain state lost and deployed anew (other addresses)
  # while the database kept the template gets the template's next version.
  sed -e "s|__MESSENGER_A__|$a_messenger|" -e "s|__USDC_A__|$a_usdc|" \
    -e "s|__TRANSMITTER_B__|$b_transmitter|" -e "s|__USDC_B__|$b_usdc|" \
    deploy/cctp-demo-template.json > .qtg/cctp-demo-template.json
  install_template usdc.cctp.chain_a_to_b .qtg/cctp-demo-template.json "$a_messenger" "$a_usdc" "$b_transmitter" "$b_usdc" \
    burn_message_hash
  for kind in fast standard; do
    sed -e "s|__MESSENGER_A__|$a_messenger_v2|" -e "s|__USDC_A__|$a_usdc|" \
      -e "s|__TRANSMITTER_B__|$b_transmitter_v2|" -e "s|__USDC_B__|$b_usdc|" \
      "deploy/cctp-v2-$kind-template.json" > ".qtg/cctp-v2-$kind-template.json"
    install_template "usdc.cctp.v2.$kind" ".qtg/cctp-v2-$kind-template.json" "$a_messenger_v2" "$b_transmitter_v2" "$a_usdc"
  done
  # The burn's caller is aligned against the signer's identity before anything is signed: enrol
  # it (anvil's first account) once qtg's health worker has listed the signer (404 until then).
  enrolled=""
  for _ in $(seq 1 120); do
    call PUT /v3/signers/signer.evm.local/expected-identity "$MG_API_BOOTSTRAP_ADMIN_KEY" \
      "{\"address\":\"$deployer\"}" >/dev/null 2>&1 && { enrolled=1; break; }
    kill -0 $pid 2>/dev/null || { echo "qtg exited; see .qtg/qtg.log" >&2; exit 1; }
    sleep 0.5
  done
  [ -n "$enrolled" ] || echo "make run: signer.evm.local's identity is not enrolled (qtg-health has not listed it): the CCTP burn will fail" >&2
  sed -e "s|__ROUTER_A__|$ccip_router_a|" -e "s|__TOKEN_A__|$ccip_token_a|" -e "s|__SELECTOR_B__|$ccip_selector_b|" \
    deploy/ccip-demo-template.json > .qtg/ccip-demo-template.json
  install_template ccip.qca.a_to_b .qtg/ccip-demo-template.json "$ccip_router_a" "$ccip_token_a"
fi

cat <<MSG

qtg is running: API $api, admin http://$MG_ADMIN_ADDR (/healthz /readyz /metrics), log .qtg/qtg.log
The operator console: $api/console (sign in with a key of .qtg/keys/, e.g. demo-operator)
qtg-venue-sim (a simulated exchange, accounts sim_a and sim_b, and sim_k speaking Kraken's API) at
http://$venue_addr, log .qtg/venue-sim.log
Templates demo.sim.transfer (sim lane), demo.cex.a_to_b (CEX→CEX through qtg-venue-sim), demo.cex.k_to_b
(the same from the Kraken-shaped sim_k, by withdrawal key) and, with anvil,
demo.evm.pair (ETH then the QTT token on a local anvil at ${anvil_url:-(off)}, log .qtg/anvil.log) and
usdc.cctp.chain_a_to_b (USDC by CCTP from that anvil, chain A, to a second one, chain B at ${anvil_b_url:-(off)},
log .qtg/anvil-b.log) are installed. Keys are in .qtg/keys/ (the bootstrap admin key in .qtg/bootstrap.key).

  REQUESTER=\$(cat .qtg/keys/demo-requester) APPROVER=\$(cat .qtg/keys/demo-approver)

  # create a movement (idempotent by idempotency_key)
  curl -s -X POST $api/v3/movements -H "Authorization: Bearer \$REQUESTER" -H 'Content-Type: application/json' \\
    -d '{"template_key":"demo.sim.transfer","intent":{"asset":"USDC","amount":"100.00","source":"venue-a","destination":"0xabc"},"idempotency_key":"demo-1"}'

  # approve it (four-eyes: a different principal), then watch it reach COMPLETED
  curl -s -X POST $api/v3/movements/<id>/approve -H "Authorization: Bearer \$APPROVER"
  curl -s $api/v3/movements/<id> -H "Authorization: Bearer \$REQUESTER"

  # or with qtgctl (QTG_API_URL, QTG_API_KEY; --json for scripts)
  export QTG_API_URL=$api
  QTG_API_KEY=\$REQUESTER ./target/debug/qtgctl movements create --template demo.sim.transfer \\
    --asset USDC --amount 100.00 --source venue-a --destination 0xabc --idempotency-key demo-2
  QTG_API_KEY=\$APPROVER ./target/debug/qtgctl movements approve <id>
  QTG_API_KEY=\$REQUESTER ./target/debug/qtgctl movements watch <id>

  # CEX→CEX: withdraw 100 USDT from sim_a to sim_b's deposit address, follow it, see it credited
  curl -s -X POST $api/v3/movements -H "Authorization: Bearer \$REQUESTER" -H 'Content-Type: application/json' \\
    -d '{"template_key":"demo.cex.a_to_b","intent":{"asset":"USDT","amount":"100","source":"sim_a","destination":"0xb0b0000000000000000000000000000000000b0b"},"idempotency_key":"cex-1"}'
  # the same from the Kraken-shaped account: template demo.cex.k_to_b, source sim_k (Kraken deducts its fee)
  curl -s -X POST $api/v3/movements -H "Authorization: Bearer \$REQUESTER" -H 'Content-Type: application/json' \\
    -d '{"template_key":"demo.cex.k_to_b","intent":{"asset":"USDT","amount":"100","source":"sim_k","destination":"0xb0b0000000000000000000000000000000000b0b"},"idempotency_key":"cex-k-1"}'
  curl -s http://$venue_addr/admin/ledger        # the venue's books; /admin/requests: every withdraw request
  MG_EXECUTOR_REGISTRY=.qtg/registry.toml MG_SIM_A_ACCESS_KEY=sim-a-api-key-0001 MG_SIM_A_SECRET=sim-a-secret-0001 \\
    ./target/debug/qtgctl venues drill --venue sim_a --asset USDT

  # balances: qtg-balance's snapshot every 30 s of sim_a, sim_b and, with anvil, evm:31337 and
  # evm:31338 (ETH, QTT and USDC of anvil's first and third accounts); fresh=true reads the
  # venues now (once per 5 s per caller)
  curl -s $api/v3/balances -H "Authorization: Bearer \$REQUESTER"
  curl -s "$api/v3/balances?fresh=true&venue=sim_a" -H "Authorization: Bearer \$REQUESTER"

  # a capital transfer: 100 USDT from sim_a to sim_b by the CEX template; it answers the request
  # with its movement_id, approved as above; qtg-followup closes it COMPLETED within seconds of the
  # movement completing, and sim_a's USDT is down by 100 and the 1 USDT withdrawal fee
  curl -s -X POST $api/v3/capital-transfers -H "Authorization: Bearer \$REQUESTER" -H 'Content-Type: application/json' \\
    -d '{"from":"sim_a","to":"0xb0b0000000000000000000000000000000000b0b","asset":"USDT","amount":"100","reason":"rebalance","template_key":"demo.cex.a_to_b","idempotency_key":"ct-1"}'
  curl -s -X POST $api/v3/movements/<movement_id>/approve -H "Authorization: Bearer \$APPROVER"
  curl -s $api/v3/capital-transfers/<id> -H "Authorization: Bearer \$REQUESTER"
  QTG_API_KEY=\$REQUESTER ./target/debug/qtgctl balances --venue sim_a --fresh
  QTG_API_KEY=\$REQUESTER ./target/debug/qtgctl capital-transfers create --from sim_a \\
    --to 0xb0b0000000000000000000000000000000000b0b --asset USDT --amount 100 --reason rebalance \\
    --template demo.cex.a_to_b --idempotency-key ct-2
  QTG_API_KEY=\$REQUESTER ./target/debug/qtgctl capital-transfers list
  QTG_API_KEY=\$REQUESTER ./target/debug/qtgctl capital-transfers show <id>

  # EVM: 1.5 ETH, then 1.5 QTT, from anvil's first account to its third (signed by signer.evm.local)
  curl -s -X POST $api/v3/movements -H "Authorization: Bearer \$REQUESTER" -H 'Content-Type: application/json' \\
    -d '{"template_key":"demo.evm.pair","intent":{"asset":"ETH","amount":"1.5","source":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","destination":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"},"idempotency_key":"evm-1"}'
MSG
if [ -n "$cctp" ]; then
  cat <<MSG

  # CCTP V2: 25 USDC from anvil's first account on chain A (domain 0) to its third on chain B
  # (domain 1) as a Fast Transfer (usdc.cctp.v2.fast: 1 bp fee, capped at 0.05 USDC, out of the
  # amount: 24.9975 arrive) or a Standard one (usdc.cctp.v2.standard: no fee): burn on A, the
  # attestation from qtg-attestation-sim (http://$attestation_addr, log .qtg/attestation-sim.log),
  # mint on B; approve it as above, it takes a few seconds. usdc.cctp.chain_a_to_b is the same on
  # CCTP V1 (legacy: Circle phases it out from July 2026).
  curl -s -X POST $api/v3/movements -H "Authorization: Bearer \$REQUESTER" -H 'Content-Type: application/json' \\
    -d '{"template_key":"usdc.cctp.v2.fast","intent":{"asset":"USDC","amount":"25","source":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","destination":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"},"idempotency_key":"cctp-v2-1"}'
  curl -s -X POST $api/v3/movements/<id>/approve -H "Authorization: Bearer \$APPROVER"
  # the third account's USDC on chain B (balanceOf, in units of 10^-6: 25 USDC is 0x17d7840)
  curl -s $anvil_b_url -H 'Content-Type: application/json' -d \\
    '{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"to":"$b_usdc","data":"0x70a08231$(addr_word 0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC)"},"latest"]}'
  # the contracts: chain A USDC $a_usdc, V2 TokenMessengerV2 $a_messenger_v2, MessageTransmitterV2 $a_transmitter_v2
  #                  V1 TokenMessenger $a_messenger, MessageTransmitter $a_transmitter
  #                chain B USDC $b_usdc, V2 TokenMessengerV2 $b_messenger_v2, MessageTransmitterV2 $b_transmitter_v2
  #                  V1 TokenMessenger $b_messenger, MessageTransmitter $b_transmitter

  # CCIP: 10 QCA from anvil's first account on chain A to its third on chain B through
  # Chainlink's own CCIP 1.6 contracts (ccip.qca.a_to_b: Router.ccipSend, the fee in ETH capped at
  # 0.01, then the delivery watched on B's OffRamp); qtg-ccip-sim relay (log .qtg/ccip-sim.log)
  # commits and executes the message. The lane's addresses: .qtg/ccip-lane.json.
  curl -s -X POST $api/v3/movements -H "Authorization: Bearer \$REQUESTER" -H 'Content-Type: application/json' \\
    -d '{"template_key":"ccip.qca.a_to_b","intent":{"asset":"QCA","amount":"10","source":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","destination":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"},"idempotency_key":"ccip-1"}'
  # the third account's QCB on chain B (balanceOf; 10 QCB is 0x8ac7230489e80000)
  curl -s $anvil_b_url -H 'Content-Type: application/json' -d \\
    '{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"to":"$ccip_token_b","data":"0x70a08231$(addr_word 0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC)"},"latest"]}'
MSG
fi
echo
echo "Ctrl-C stops qtg."
wait $pid
