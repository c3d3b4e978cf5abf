#!/bin/bash
# bench-table.sh [ROUNDS]: goroce bench between two network namespaces beside
# the raw-UDP baseline of the same traffic (goroce bench --baseline: the same
# datagram sizes and window on the same UDP path, without RoCE), interleaved
# ROUNDS times (default 3); prints a markdown table of the medians and of the
# ratio goroce / UDP for each case. goroce runs on the same UDP path as the
# baseline (--path udp: recvmmsg/sendmmsg), not on the automatic choice
# (io_uring or AF_XDP where they work).
#
# Needs root and iproute2. Creates the namespaces goroce-bt-<pid>-a and -b
# joined by a veth pair (10.66.0.1/24 and 10.66.0.2/24, MTU 1500: path MTU
# 1024) and deletes them on exit.
set -euo pipefail
ROUNDS=${1:-3}
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
A=goroce-bt-$$-a
B=goroce-bt-$$-b
SPID=""
cleanup() {
	[ -n "$SPID" ] && kill "$SPID" 2>/dev/null || true
	ip netns del "$A" 2>/dev/null || true
	ip netns del "$B" 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT
go build -o "$TMP/goroce" ./cmd/goroce
ip netns add "$A"
ip netns add "$B"
ip link add veth0 netns "$A" type veth peer name veth0 netns "$B"
ip -n "$A" addr add 10.66.0.1/24 dev veth0
ip -n "$B" addr add 10.66.0.2/24 dev veth0
for n in "$A" "$B"; do ip -n "$n" link set veth0 up; ip -n "$n" link set lo up; done

# run TEST ARGS...: one server (namespace A) and client (namespace B) run;
# prints the client's result row.
run() {
	local out="$TMP/server.out"
	: > "$out"
	ip netns exec "$A" "$TMP/goroce" bench "$@" --addr 10.66.0.1 --path udp --timeout 120s > "$out" 2>&1 &
	SPID=$!
	for _ in $(seq 200); do grep -q "Waiting for client" "$out" && break; sleep 0.05; done
	ip netns exec "$B" "$TMP/goroce" bench "$@" --addr 10.66.0.2 --path udp --timeout 120s 10.66.0.1 > "$TMP/client.out" 2>/dev/null ||
		{ echo "client failed: $*" >&2; cat "$TMP/client.out" "$out" >&2; exit 1; }
	wait "$SPID" || { echo "server failed: $*" >&2; cat "$out" >&2; exit 1; }
	SPID=""
	# The row after the header of the result table.
	awk '/^ #bytes/ {getline; print; exit}' "$TMP/client.out"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

cases=(
	"write_bw -s 64 -n 20000"
	"write_bw -s 4096 -n 5000"
	"write_bw -s 65536 -n 1000"
	"read_bw -s 64 -n 20000"
	"read_bw -s 4096 -n 5000"
	"read_bw -s 65536 -n 1000"
	"send_bw -s 64 -n 20000"
	"send_bw -s 4096 -n 5000"
	"send_bw -s 65536 -n 1000"
	"send_lat -s 64 -n 5000"
	"write_lat -s 64 -n 5000"
)
echo "| test | size | goroce | raw UDP | goroce / UDP |"
echo "|---|---|---|---|---|"
for c in "${cases[@]}"; do
	set -- $c
	test=$1 size=$3
	: > "$TMP/g" ; : > "$TMP/u" ; : > "$TMP/r"
	for _ in $(seq "$ROUNDS"); do
		g=$(run $c) u=$(run $c --baseline)
		case $test in
		*_bw) gv=$(echo "$g" | awk '{print $4}') uv=$(echo "$u" | awk '{print $4}') ;;
		*_lat) gv=$(echo "$g" | awk '{print $5}') uv=$(echo "$u" | awk '{print $5}') ;; # t_typical
		esac
		echo "$gv" >> "$TMP/g"
		echo "$uv" >> "$TMP/u"
		awk -v g="$gv" -v u="$uv" 'BEGIN {print g / u}' >> "$TMP/r"
	done
	unit="MB/s"
	case $test in *_lat) unit="µs (t_typical)" ;; esac
	printf "| %s | %s B | %.2f %s | %.2f %s | %.2f |\n" "$test" "$size" "$(median < "$TMP/g")" "$unit" "$(median < "$TMP/u")" "$unit" "$(median < "$TMP/r")"
done
