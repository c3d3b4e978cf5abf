#!/bin/bash
# bench-table.sh [ROUNDS]: goroce bench between two network namespaces beside
# the raw-UDP baseline of the same traffic (goroce bench --baseline: the same
# datagram sizes and window on the same UDP path, without RoCE), interleaved
# ROUNDS times (default 3); prints a markdown table of the medians and of the
# ratio goroce / UDP for each case. goroce runs on the same UDP path as the
# baseline (--path udp: recvmmsg/sendmmsg), whatever the automatic choice
# (AF_XDP where UDP GSO does not work).
#
# Needs root and iproute2. Creates the namespaces goroce-bt-<pid>-a and -b
# joined by a veth pair (10.66.0.1/24 and 10.66.0.2/24, MTU 1500: path MTU
# 1024) and deletes them on exit.
set -euo pipefail
ROUNDS=${1:-3}
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
bench_setup goroce-bt
run() { goroce_run "$@" || exit 1; }

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
