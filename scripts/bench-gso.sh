#!/bin/bash
# bench-gso.sh [ROUNDS] [N]: goroce bench write_bw -s 65536 between two
# network namespaces on the udp path, with UDP GSO and GRO on (the default)
# and off (--gso=false --gro=false), interleaved ROUNDS times (default 5),
# at path MTU 4096 over a veth of MTU 9000 and path MTU 1024 over MTU 1500;
# prints a markdown table of the medians (Gb/s) and the ratio on / off.
# N is the number of 64 KiB WRITEs per run (default 2000).
#
# Needs root and iproute2. Creates the namespaces goroce-gso-<pid>-a and -b
# joined by a veth pair (10.67.0.1/24 and 10.67.0.2/24) and deletes them on
# exit.
set -euo pipefail
ROUNDS=${1:-5}
N=${2:-2000}
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
A=goroce-gso-$$-a
B=goroce-gso-$$-b
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
ip -n "$A" addr add 10.67.0.1/24 dev veth0
ip -n "$B" addr add 10.67.0.2/24 dev veth0
for n in "$A" "$B"; do ip -n "$n" link set veth0 up; ip -n "$n" link set lo up; done

# run ARGS...: one server (namespace A) and client (namespace B) run;
# prints the client's BW average (Gb/s).
run() {
	local out="$TMP/server.out"
	: > "$out"
	ip netns exec "$A" "$TMP/goroce" bench write_bw -s 65536 -n "$N" "$@" --addr 10.67.0.1 --path udp --timeout 120s > "$out" 2>&1 &
	SPID=$!
	for _ in $(seq 200); do grep -q "Waiting for client" "$out" && break; sleep 0.05; done
	ip netns exec "$B" "$TMP/goroce" bench write_bw -s 65536 -n "$N" "$@" --addr 10.67.0.2 --path udp --timeout 120s 10.67.0.1 > "$TMP/client.out" 2>/dev/null ||
		{ echo "client failed: $*" >&2; cat "$TMP/client.out" "$out" >&2; exit 1; }
	wait "$SPID" || { echo "server failed: $*" >&2; cat "$out" >&2; exit 1; }
	SPID=""
	awk '/^ #bytes/ {getline; print $4; exit}' "$TMP/client.out"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "| veth MTU | path MTU | GSO+GRO on | off | on / off |"
echo "|---|---|---|---|---|"
for m in "9000 4096" "1500 1024"; do
	set -- $m
	for n in "$A" "$B"; do ip -n "$n" link set veth0 mtu "$1"; done
	: > "$TMP/on"; : > "$TMP/off"; : > "$TMP/r"
	for _ in $(seq "$ROUNDS"); do
		on=$(run -m "$2") off=$(run -m "$2" --gso=false --gro=false)
		echo "$on" >> "$TMP/on"
		echo "$off" >> "$TMP/off"
		awk -v a="$on" -v b="$off" 'BEGIN {print a / b}' >> "$TMP/r"
	done
	echo "| $1 | $2 | $(median < "$TMP/on") | $(median < "$TMP/off") | $(median < "$TMP/r") |"
	echo "rounds (on, off): $(paste -sd' ' "$TMP/on"); $(paste -sd' ' "$TMP/off")" >&2
done
