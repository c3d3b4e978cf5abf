#!/bin/bash
# bench-peers.sh [flags] [ROUNDS]: goroce bench beside the raw-UDP baseline of
# the same traffic (goroce bench --baseline) and beside two other transports'
# own benchmarks over TCP and UDP: UCX's ucx_perftest (Debian ucx-utils, tcp
# transport) and libfabric's fi_pingpong (Debian libfabric-bin, tcp msg and
# udp dgram endpoints). All run between the same two network namespaces, in
# interleaved rounds (ROUNDS, default 3), under two link settings: veth MTU
# 9000 (goroce path MTU 4096, -m 4096) and MTU 1500 (path MTU 1024). Prints a
# markdown table of the medians, each tool's result in one unit (MB/s =
# 10^6 bytes/s for bandwidth, µs for latency) and the ratio of goroce's
# median to that tool's (bandwidth: above 1 goroce is faster; latency: below
# 1 goroce is faster), and the median of the per-round ratios (goroce's run
# against the tool's run of the same round, a few seconds apart: steadier
# than the ratio of medians where the machine's speed drifts between
# rounds). --raw FILE keeps every run's value, a line per round and tool.
#
# What is compared with what:
#   write_bw SIZE  ucx_perftest -t put_bw (UCT tcp, zcopy)
#   send_bw SIZE   ucx_perftest -t am_bw (UCT tcp; short at 64 B, bcopy at
#                  4 KiB, zcopy at 64 KiB: the layouts tcp allows there)
#   send_lat 64 B  ucx_perftest -t tag_lat (UCP over tcp), fi_pingpong -p tcp
#                  -e msg, fi_pingpong -p udp -e dgram
#   write_lat 64 B ucx_perftest -t put_lat (UCT tcp, zcopy)
#   send_lat 64 KiB fi_pingpong -p tcp -e msg (udp dgram takes no 64 KiB; nor
#                  does the raw-UDP ping-pong, one datagram each way)
# Latency is half a round trip: goroce's t_typical (median), ucx_perftest's
# 50th percentile, fi_pingpong's usec/xfer (a mean: it prints no median).
# Bandwidth: goroce's and ucx_perftest's MB/sec are 2^20 bytes/s, converted;
# fi_pingpong's are 10^6. Warm-up: ucx_perftest runs 200 iterations before
# it measures (-w 200); goroce's write_bw runs perftest's --perform_warm_up
# (a window of 128 messages; perftest has it for WRITE, READ and atomic
# bandwidth tests only); the raw-UDP baseline starts its clock at its first
# datagram.
#
# Flags (or the environment variable in brackets):
#   --path P            goroce's packet path [GOROCE_PATH, default udp]
#   --goroce-flags F    more flags for goroce bench, e.g. "--verify" [GOROCE_FLAGS]
#   --mtus "9000 1500"  the veth MTUs to run [MTUS]; path MTU 4096 at 9000
#                       and above, 1024 below
#   --no-peers          goroce and raw UDP only [NO_PEERS=1]
#   --raw FILE          every run's value, "MTU|test|size|tool|round|value" a
#                       line (value empty when the run failed) [RAW]
#   --iters K           K times every tool's iteration count (-n, -I) [ITERS=1]:
#                       the default counts (perftest's and ucx_perftest's
#                       order of magnitude) make bandwidth runs of 5 to 20
#                       ms, which measure how a tool starts as much as its
#                       steady rate (socket buffers absorb a large part of
#                       such a run); --iters 20 makes them 0.1 to 1 s
# When goroce bench has --gso (packetio/udp's UDP GSO), a "goroce (no GSO)"
# row runs it with --gso=false (and --gro=false when that exists too); when
# it has --events (latency tests waiting on a completion channel instead of
# polling), a "goroce (events)" row does the same for latency tests. When it
# has --baseline-ack, latency tests get a "raw UDP + ACK" row: the raw
# ping-pong with each message followed by an ACK datagram in a send of its
# own, as RC acknowledges every message (the floor of such a transport).
#
# Needs root, iproute2, ucx-utils and libfabric-bin (apt-get install -y
# ucx-utils libfabric-bin; a missing tool's rows say so). Creates the
# namespaces goroce-bp-<pid>-a and -b joined by a veth pair (10.66.0.1/24,
# 10.66.0.2/24) and deletes them on exit; kills only the processes it started;
# every run is bounded by timeout(1). About 1.5 minutes with ROUNDS=3 on a
# quiet 2-core machine, 3 to 4 under load.
set -euo pipefail
GOROCE_PATH=${GOROCE_PATH:-udp}
GOROCE_FLAGS=${GOROCE_FLAGS:-}
MTUS=${MTUS:-9000 1500}
NO_PEERS=${NO_PEERS:-}
ITERS=${ITERS:-1}
ROUNDS=${ROUNDS:-3}
RAW=${RAW:-}
while [ $# -gt 0 ]; do
	case $1 in
	--path) GOROCE_PATH=$2; shift 2 ;;
	--goroce-flags) GOROCE_FLAGS=$2; shift 2 ;;
	--mtus) MTUS=$2; shift 2 ;;
	--no-peers) NO_PEERS=1; shift ;;
	--iters) ITERS=$2; shift 2 ;;
	--raw) RAW=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	[0-9]*) ROUNDS=$1; shift ;;
	*) echo "bench-peers.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
	esac
done
[ -z "$RAW" ] || RAW=$(realpath -m "$RAW")
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
[ "$(id -u)" = 0 ] || { echo "bench-peers.sh: needs root (network namespaces)" >&2; exit 1; }
bench_setup goroce-bp

have() { command -v "$1" >/dev/null 2>&1; }
GOROCE_BASE="--path $GOROCE_PATH $GOROCE_FLAGS"
NOGSO=""
if "$TMP/goroce" bench write_bw -h 2>&1 | grep -qE '^ +-+gso\b'; then
	NOGSO="--gso=false"
	if "$TMP/goroce" bench write_bw -h 2>&1 | grep -qE '^ +-+gro\b'; then NOGSO="$NOGSO --gro=false"; fi
fi
EVENTS=""
if "$TMP/goroce" bench send_lat -h 2>&1 | grep -qE '^ +-+events\b'; then EVENTS="--events"; fi
BASEACK=""
if "$TMP/goroce" bench send_lat -h 2>&1 | grep -qE '^ +-+baseline-ack\b'; then BASEACK=1; fi

# wait_port NS PORT: until something listens on TCP PORT in NS (at most 5 s).
wait_port() {
	local i
	for i in $(seq 100); do
		ip netns exec "$1" ss -Hltn "sport = :$2" 2>/dev/null | grep -q . && return 0
		sleep 0.05
	done
	return 1
}

# Each tool runner prints one number (the unit of its case) or nothing when
# the run failed (its output is kept in $TMP/fail.log).

# t_goroce ARGS...: goroce bench, the client's row; $KIND is bw or lat.
t_goroce() {
	GOROCE_ARGS="$1"
	shift
	goroce_run "$@" > "$TMP/row" 2>>"$TMP/fail.log" || return 0
	case $KIND in
	bw) awk '{printf "%.4f\n", $4 * 1.048576}' "$TMP/row" ;;
	lat) awk '{print $5}' "$TMP/row" ;;
	esac
}

# t_ucx [NAME=VALUE...] ARGS...: ucx_perftest server in A, client in B, with
# the environment variables NAME=VALUE.
t_ucx() {
	local env="" spid
	while [ $# -gt 0 ] && [[ $1 == UCX_*=* ]]; do env="$env $1"; shift; done
	have ucx_perftest || return 0
	# shellcheck disable=SC2086
	bg_start "$TMP/ucx.srv" timeout 90 ip netns exec "$A" env $env ucx_perftest -p 13337
	spid=$BG
	wait_port "$A" 13337 || true
	# shellcheck disable=SC2086
	if ! timeout 60 ip netns exec "$B" env $env ucx_perftest "$ADDR_A" -p 13337 -w 200 -f "$@" > "$TMP/ucx.cli" 2>&1; then
		cat "$TMP/ucx.cli" "$TMP/ucx.srv" >> "$TMP/fail.log"
		bg_wait "$spid" || true
		return 0
	fi
	bg_wait "$spid" || true
	# The final line: iterations, latency 50%ile/average/overall (µs),
	# bandwidth average/overall (2^20 bytes/s), message rate average/overall.
	case $KIND in
	bw) awk '$1 ~ /^[0-9]+$/ && NF == 8 {v = $6 * 1.048576} END {if (v != "") printf "%.4f\n", v}' "$TMP/ucx.cli" ;;
	lat) awk '$1 ~ /^[0-9]+$/ && NF == 8 {v = $2} END {if (v != "") print v}' "$TMP/ucx.cli" ;;
	esac
}

# t_fi ARGS...: fi_pingpong server in A, client in B.
t_fi() {
	local spid
	have fi_pingpong || return 0
	bg_start "$TMP/fi.srv" timeout 90 ip netns exec "$A" fi_pingpong "$@"
	spid=$BG
	wait_port "$A" 47592 || true
	if ! timeout 60 ip netns exec "$B" fi_pingpong "$@" "$ADDR_A" > "$TMP/fi.cli" 2>&1; then
		cat "$TMP/fi.cli" "$TMP/fi.srv" >> "$TMP/fail.log"
		bg_wait "$spid" || true
		return 0
	fi
	bg_wait "$spid" || true
	# bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
	case $KIND in
	bw) awk '/^bytes/ {getline; print $6; exit}' "$TMP/fi.cli" ;;
	lat) awk '/^bytes/ {getline; print $7; exit}' "$TMP/fi.cli" ;;
	esac
}

UCT="UCX_NET_DEVICES=veth0"
UCP="UCX_TLS=tcp UCX_NET_DEVICES=veth0"
# case: KIND|goroce test and flags|peer name=runner;peer name=runner...[|nobase]
# (nobase: no raw-UDP baseline for the case)
cases=(
	"bw|write_bw -s 64 -n 20000 --perform_warm_up|UCX put_bw (tcp)=t_ucx $UCT -x tcp -d veth0 -t put_bw -D zcopy -s 64 -n 10000"
	"bw|write_bw -s 4096 -n 5000 --perform_warm_up|UCX put_bw (tcp)=t_ucx $UCT -x tcp -d veth0 -t put_bw -D zcopy -s 4096 -n 5000"
	"bw|write_bw -s 65536 -n 1000 --perform_warm_up|UCX put_bw (tcp)=t_ucx $UCT -x tcp -d veth0 -t put_bw -D zcopy -s 65536 -n 1000"
	"bw|send_bw -s 64 -n 20000|UCX am_bw (tcp)=t_ucx $UCT -x tcp -d veth0 -t am_bw -D short -s 64 -n 20000"
	"bw|send_bw -s 4096 -n 5000|UCX am_bw (tcp)=t_ucx $UCT -x tcp -d veth0 -t am_bw -D bcopy -s 4096 -n 5000"
	"bw|send_bw -s 65536 -n 1000|UCX am_bw (tcp)=t_ucx $UCT -x tcp -d veth0 -t am_bw -D zcopy -s 65536 -n 1000"
	"lat|send_lat -s 64 -n 5000|UCX tag_lat (tcp)=t_ucx $UCP -t tag_lat -s 64 -n 5000;fi_pingpong (tcp msg)=t_fi -p tcp -e msg -S 64 -I 2000;fi_pingpong (udp dgram)=t_fi -p udp -e dgram -S 64 -I 5000"
	"lat|write_lat -s 64 -n 5000|UCX put_lat (tcp)=t_ucx $UCT -x tcp -d veth0 -t put_lat -D zcopy -s 64 -n 5000"
	"lat|send_lat -s 65536 -n 500|fi_pingpong (tcp msg)=t_fi -p tcp -e msg -S 65536 -I 500|nobase"
)

# Every iteration count (goroce's and ucx_perftest's -n, fi_pingpong's -I)
# times ITERS.
if [ "$ITERS" != 1 ]; then
	for i in "${!cases[@]}"; do
		cases[i]=$(echo "${cases[i]}" | perl -pe "s/(?<=-[nI] )(\\d+)/\$1*$ITERS/ge")
	done
fi

# file MTU CASE TOOL: where the per-round values of a tool go.
vfile() { echo "$TMP/v.$1.$2.$3"; }

# tools MTU CASE: the tool names of a case, one a line, in table order.
tools() {
	local c=${cases[$2]} test
	test=$(echo "$c" | cut -d'|' -f2 | awk '{print $1}')
	echo "goroce"
	[ -n "$NOGSO" ] && echo "goroce (no GSO)"
	[ -n "$EVENTS" ] && [ "${test%_lat}" != "$test" ] && echo "goroce (events)"
	if [ "$(echo "$c" | cut -d'|' -f4)" != nobase ]; then
		echo "raw UDP"
		[ -z "$BASEACK" ] || [ "${test%_lat}" = "$test" ] || echo "raw UDP + ACK"
	fi
	[ -n "$NO_PEERS" ] && return 0
	echo "$c" | cut -d'|' -f3 | tr ';' '\n' | cut -d= -f1
}

# record MTU CASE TOOL RUNNER ARGS...: one run, its value (or an empty line
# when it failed, so that rounds stay aligned) appended to the tool's file.
# The runner runs in this shell (not in a command substitution) so that the
# processes it starts stay known to the cleanup.
record() {
	local f
	f=$(vfile "$1" "$2" "$3")
	shift 3
	local t0=$SECONDS
	: > "$TMP/val"
	"$@" > "$TMP/val" || true
	echo "$(head -n 1 "$TMP/val")" >> "$f"
	echo "$((SECONDS - t0)) s: $(basename "$f")" >> "$TMP/times"
}

start=$(date +%s)
for round in $(seq "$ROUNDS"); do
	for mtu in $MTUS; do
		bench_mtu "$mtu"
		pmtu=1024
		[ "$mtu" -ge 9000 ] && pmtu=4096
		for i in "${!cases[@]}"; do
			IFS='|' read -r KIND gargs peers nobase <<< "${cases[$i]}"
			# shellcheck disable=SC2086
			record "$mtu" "$i" goroce t_goroce "$GOROCE_BASE" $gargs -m $pmtu
			if [ -n "$NOGSO" ]; then
				# shellcheck disable=SC2086
				record "$mtu" "$i" "goroce (no GSO)" t_goroce "$GOROCE_BASE $NOGSO" $gargs -m $pmtu
			fi
			if [ -n "$EVENTS" ] && [ "$KIND" = lat ]; then
				# shellcheck disable=SC2086
				record "$mtu" "$i" "goroce (events)" t_goroce "$GOROCE_BASE $EVENTS" $gargs -m $pmtu
			fi
			if [ "$nobase" != nobase ]; then
				# shellcheck disable=SC2086
				record "$mtu" "$i" "raw UDP" t_goroce "--path udp" $gargs -m $pmtu --baseline
				if [ -n "$BASEACK" ] && [ "$KIND" = lat ]; then
					# shellcheck disable=SC2086
					record "$mtu" "$i" "raw UDP + ACK" t_goroce "--path udp" $gargs -m $pmtu --baseline --baseline-ack
				fi
			fi
			[ -n "$NO_PEERS" ] && continue
			IFS=';' read -r -a plist <<< "$peers"
			for p in "${plist[@]}"; do
				# shellcheck disable=SC2086
				record "$mtu" "$i" "${p%%=*}" ${p#*=}
			done
		done
	done
	echo "round $round done after $(( $(date +%s) - start )) s" >&2
done

# A tool's median and the ratio of goroce's median to it.
echo "| veth MTU (path MTU) | test | size | tool | result | goroce / tool | per round |"
echo "|---|---|---|---|---|---|---|"
for mtu in $MTUS; do
	pmtu=1024
	[ "$mtu" -ge 9000 ] && pmtu=4096
	for i in "${!cases[@]}"; do
		IFS='|' read -r KIND gargs _ <<< "${cases[$i]}"
		set -- $gargs
		test=$1 size=$3
		unit="MB/s"
		[ "$KIND" = lat ] && unit="µs"
		gf=$(vfile "$mtu" "$i" goroce)
		while IFS= read -r tool; do
			f=$(vfile "$mtu" "$i" "$tool")
			vals=$(grep -E '^[0-9.]+$' "$f" 2>/dev/null || true)
			if [ -z "$vals" ]; then
				why="failed"
				case $tool in UCX*) have ucx_perftest || why="not installed" ;; fi_*) have fi_pingpong || why="not installed" ;; esac
				printf "| %s (%s) | %s | %s B | %s | %s | | |\n" "$mtu" "$pmtu" "$test" "$size" "$tool" "$why"
				continue
			fi
			med=$(echo "$vals" | median)
			ratio="" paired=""
			gvals=$(grep -E '^[0-9.]+$' "$gf" 2>/dev/null || true)
			if [ "$tool" != goroce ] && [ -n "$gvals" ]; then
				ratio=$(awk -v g="$(echo "$gvals" | median)" -v t="$med" 'BEGIN {if (t > 0) printf "%.2f", g / t}')
				pr=$(paste -d' ' "$gf" "$f" | awk 'NF == 2 && $2 > 0 {print $1 / $2}')
				[ -z "$pr" ] || paired=$(echo "$pr" | median | awk '{printf "%.2f", $1}')
			fi
			printf "| %s (%s) | %s | %s B | %s | %.2f %s | %s | %s |\n" "$mtu" "$pmtu" "$test" "$size" "$tool" "$med" "$unit" "$ratio" "$paired"
		done < <(tools "$mtu" "$i")
	done
done
if [ -n "$RAW" ]; then
	: > "$RAW"
	for mtu in $MTUS; do
		for i in "${!cases[@]}"; do
			IFS='|' read -r _ gargs _ <<< "${cases[$i]}"
			set -- $gargs
			while IFS= read -r tool; do
				f=$(vfile "$mtu" "$i" "$tool")
				[ ! -f "$f" ] || awk -v p="$mtu|$1|$3|$tool" '{print p "|" NR "|" $0}' "$f" >> "$RAW"
			done < <(tools "$mtu" "$i")
		done
	done
fi
echo "bench-peers.sh: $ROUNDS rounds in $(( $(date +%s) - start )) s; the slowest runs:" >&2
sort -rn "$TMP/times" | head -n 5 >&2
if [ -s "$TMP/fail.log" ]; then
	echo "bench-peers.sh: some runs failed; their output:" >&2
	tail -n 40 "$TMP/fail.log" >&2
fi
