# bench-lib.sh: shared by bench-table.sh, bench-peers.sh and pgo-profile.sh
# (source it, do not run it). Two network namespaces joined by a veth pair,
# goroce built into a temporary directory, one goroce bench server/client
# run, medians.
#
# bench_setup PREFIX: builds goroce into $TMP (go build $BENCH_BUILD_FLAGS),
# creates the namespaces PREFIX-<pid>-a and -b ($A, $B) joined by veth0
# (10.66.0.1/24 in A, 10.66.0.2/24 in B, MTU 1500), and arranges for
# everything to be deleted on exit. Needs root and iproute2. The caller sets
# -euo pipefail and cd's to the checkout first.

TMP=""
BENCH_BUILD_FLAGS=${BENCH_BUILD_FLAGS:-}
A=""
B=""
# PIDs of the background processes this script started (timeout(1) wrappers);
# only these are ever killed.
BG_PIDS=()
ADDR_A=10.66.0.1
ADDR_B=10.66.0.2

bench_cleanup() {
	local p
	for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	[ -n "$A" ] && ip netns del "$A" 2>/dev/null || true
	[ -n "$B" ] && ip netns del "$B" 2>/dev/null || true
	[ -n "$TMP" ] && rm -rf "$TMP"
}

bench_setup() {
	TMP=$(mktemp -d)
	A=$1-$$-a
	B=$1-$$-b
	trap bench_cleanup EXIT
	# shellcheck disable=SC2086
	go build $BENCH_BUILD_FLAGS -o "$TMP/goroce" ./cmd/goroce
	ip netns add "$A"
	ip netns add "$B"
	ip link add veth0 netns "$A" type veth peer name veth0 netns "$B"
	ip -n "$A" addr add "$ADDR_A/24" dev veth0
	ip -n "$B" addr add "$ADDR_B/24" dev veth0
	local n
	for n in "$A" "$B"; do ip -n "$n" link set veth0 up; ip -n "$n" link set lo up; done
}

# bench_mtu N: sets both ends of the veth pair to MTU N.
bench_mtu() {
	ip -n "$A" link set veth0 mtu "$1"
	ip -n "$B" link set veth0 mtu "$1"
}

# bg_start FILE CMD...: runs CMD in the background with its output in FILE;
# sets BG to its PID (remembered for cleanup).
bg_start() {
	local out=$1
	shift
	"$@" > "$out" 2>&1 &
	BG=$!
	BG_PIDS+=("$BG")
}

# bg_wait PID: waits for a background process started by bg_start and
# forgets it; returns its status.
bg_wait() {
	local rc=0 p keep=()
	wait "$1" || rc=$?
	for p in "${BG_PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	BG_PIDS=("${keep[@]+"${keep[@]}"}")
	return $rc
}

# goroce_run TEST ARGS...: one goroce bench server (namespace A) and client
# (namespace B) run of TEST with ARGS (plus $GOROCE_ARGS, default --path udp,
# and $GOROCE_SERVER_ARGS or $GOROCE_CLIENT_ARGS on that side only); prints
# the client's result row. Each side is bounded by timeout(1).
GOROCE_ARGS=${GOROCE_ARGS:---path udp}
GOROCE_SERVER_ARGS=${GOROCE_SERVER_ARGS:-}
GOROCE_CLIENT_ARGS=${GOROCE_CLIENT_ARGS:-}
goroce_run() {
	local out="$TMP/server.out" spid
	: > "$out"
	# shellcheck disable=SC2086
	bg_start "$out" timeout 150 ip netns exec "$A" "$TMP/goroce" bench "$@" --addr "$ADDR_A" $GOROCE_ARGS $GOROCE_SERVER_ARGS --timeout 120s
	spid=$BG
	local i
	for i in $(seq 200); do grep -q "Waiting for client" "$out" && break; sleep 0.05; done
	# shellcheck disable=SC2086
	if ! timeout 150 ip netns exec "$B" "$TMP/goroce" bench "$@" --addr "$ADDR_B" $GOROCE_ARGS $GOROCE_CLIENT_ARGS --timeout 120s "$ADDR_A" > "$TMP/client.out" 2>&1; then
		echo "client failed: $*" >&2
		cat "$TMP/client.out" "$out" >&2
		# The server would wait for its --timeout, holding port 4791.
		kill "$spid" 2>/dev/null || true
		bg_wait "$spid" || true
		return 1
	fi
	bg_wait "$spid" || { echo "server failed: $*" >&2; cat "$out" >&2; return 1; }
	# The row after the header of the result table.
	awk '/^ #bytes/ {getline; print; exit}' "$TMP/client.out"
}

# median: the median of the numbers on stdin, one a line.
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
