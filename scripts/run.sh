#!/usr/bin/env bash
# `make run`: Postgres → database `qtg` → `qtg-venue-sim` (a simulated exchange, two accounts)
# → `qtg` (API + workers; sim and CEX lanes) → demo templates and API keys → prints how to
# create and approve a movement with curl. Ctrl-C stops it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
mkdir -p .qtg
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
# The sim lanes plus the CEX lane's entries, pointed at that venue; its accounts' credentials
# (the simulator's own, from deploy/venue-sim.toml) as a real deployment passes them: by env.
sed "s|http://127.0.0.1:9400|http://$venue_addr|" deploy/registry.cex.toml | cat deploy/registry.sim.toml - > .qtg/registry.toml
export MG_EXECUTOR_REGISTRY="$here/.qtg/registry.toml"
export MG_SIM_A_ACCESS_KEY=sim-a-api-key-0001 MG_SIM_A_SECRET=sim-a-secret-0001
export MG_SIM_B_ACCESS_KEY=sim-b-api-key-0001 MG_SIM_B_SECRET=sim-b-secret-0001

# The EVM demo: a local anvil (from npm; its chain state kept in .qtg/anvil-state.json across
# restarts, like the database) with the QTT test token, and the EVM lane's entries.
rpc() { curl -fsS -X POST "$anvil_url" -H 'Content-Type: application/json' -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$1\",\"params\":$2}"; }
anvil_pid=""
token=""
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
    rpc eth_sendTransaction "[{\"from\":\"0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266\",\"gas\":\"0x200000\",\"data\":\"0x$(cat contracts/QtgTestToken.bin)$supply\"}]" >/dev/null
  fi
  cat deploy/registry.evm.toml >> .qtg/registry.toml
  export MG_EVM_CHAINS="[{\"chain_id\":31337,\"rpc_urls\":[\"$anvil_url\"],\"confirmations\":1,\"max_fee_per_gas_wei\":\"100000000000\",\"max_priority_fee_per_gas_wei\":\"2000000000\",\"replace_after_seconds\":30}]"
  export MG_ANVIL0_PRIVATE_KEY=0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80
else
  echo "make run: the EVM demo is off (no anvil: see .qtg/evm-tools.log)" >&2
fi
export MG_API_ADDR="${MG_API_ADDR:-127.0.0.1:8080}"
export MG_ADMIN_ADDR="${MG_ADMIN_ADDR:-127.0.0.1:9090}"
export MG_LOG_FORMAT="${MG_LOG_FORMAT:-pretty}"
if [ ! -f .qtg/bootstrap.key ]; then
  python3 -c 'import secrets; print("qtg_boot_" + secrets.token_hex(16))' > .qtg/bootstrap.key
fi
export MG_API_BOOTSTRAP_ADMIN_KEY=$(cat .qtg/bootstrap.key)
api="http://$MG_API_ADDR"

./target/debug/qtg 2> >(tee .qtg/qtg.log >&2) &
pid=$!
trap 'kill -TERM $pid $venue_pid $anvil_pid 2>/dev/null; wait $pid' INT TERM EXIT
for _ in $(seq 1 100); do
  curl -fsS "http://$MG_ADMIN_ADDR/readyz" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { echo "qtg exited; see .qtg/qtg.log" >&2; exit 1; }
  sleep 0.2
done

call() { # method path key [body]
  curl -fsS -X "$1" "$api$2" -H "Authorization: Bearer $3" -H 'Content-Type: application/json' ${4:+-d "$4"}
}
json() { python3 -c "import sys, json; print(json.load(sys.stdin)$1)"; }
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

install_template() { # key file
  if ! call GET "/v3/templates/$1" "$OPERATOR" >/dev/null 2>&1; then
    local p
    p=$(call POST /v3/template-proposals "$OPERATOR" "$(cat "$2")" | json "['id']")
    call POST "/v3/template-proposals/$p/approve" "$MG_API_BOOTSTRAP_ADMIN_KEY" '{"reason":"demo"}' >/dev/null
  fi
}
install_template demo.sim.transfer deploy/demo-template.json
install_template demo.cex.a_to_b deploy/cex-demo-template.json
if [ -n "$token" ]; then
  sed "s|__TOKEN__|$token|" deploy/evm-demo-template.json > .qtg/evm-demo-template.json
  install_template demo.evm.pair .qtg/evm-demo-template.json
fi

cat <<MSG

qtg is running: API $api, admin http://$MG_ADMIN_ADDR (/healthz /readyz /metrics), log .qtg/qtg.log
qtg-venue-sim (a simulated exchange, accounts sim_a and sim_b) at http://$venue_addr, log .qtg/venue-sim.log
Templates demo.sim.transfer (sim lane), demo.cex.a_to_b (CEX→CEX through qtg-venue-sim) and, with anvil,
demo.evm.pair (ETH then the QTT token on a local anvil at ${anvil_url:-(off)}, log .qtg/anvil.log) are installed. Keys are in .qtg/keys/ (the bootstrap admin key in .qtg/bootstrap.key).

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
  curl -s http://$venue_addr/admin/ledger        # the venue's books; /admin/requests: every withdraw request
  MG_EXECUTOR_REGISTRY=.qtg/registry.toml MG_SIM_A_ACCESS_KEY=sim-a-api-key-0001 MG_SIM_A_SECRET=sim-a-secret-0001 \\
    ./target/debug/qtgctl venues drill --venue sim_a --asset USDT

  # EVM: 1.5 ETH, then 1.5 QTT, from anvil's first account to its third (signed by signer.evm.local)
  curl -s -X POST $api/v3/movements -H "Authorization: Bearer \$REQUESTER" -H 'Content-Type: application/json' \\
    -d '{"template_key":"demo.evm.pair","intent":{"asset":"ETH","amount":"1.5","source":"anvil0","destination":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"},"idempotency_key":"evm-1"}'

Ctrl-C stops qtg.
MSG
wait $pid
