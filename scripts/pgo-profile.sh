#!/usr/bin/env bash
# pgo-profile.sh: profiles goroce bench's common runs between two network
# namespaces and merges the CPU profiles of both sides into
# cmd/goroce/default.pgo, the profile `go build` uses for profile-guided
# optimization of the goroce command (and the engine, packet paths and
# soft provider it links).
#
# usage: scripts/pgo-profile.sh [-o FILE]
#
#   -o FILE   write the merged profile to FILE instead of cmd/goroce/default.pgo
#
# The runs (RC over --path udp, veth MTU 9000, path MTU 4096, 2-3 s each):
# write_bw at 64 B, 4 KiB and 64 KiB, send_bw 64 B, read_bw 4 KiB, write_lat
# and send_lat 64 B: the hot paths of the bandwidth tests, of the polling
# latency tests, and of the packet path's GSO and GRO. goroce is built
# without PGO for them, so that the profile describes the code as written.
# Needs root (network namespaces); about 40 s.
set -euo pipefail
OUT=cmd/goroce/default.pgo
while [ $# -gt 0 ]; do
	case $1 in
	-o) OUT=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "pgo-profile.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
	esac
done
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
[ "$(id -u)" = 0 ] || { echo "pgo-profile.sh: needs root (network namespaces)" >&2; exit 1; }
BENCH_BUILD_FLAGS=-pgo=off bench_setup goroce-pgo
bench_mtu 9000

n=0
# profile TEST ARGS...: one server (A) and client (B) run (goroce_run),
# each side writing its CPU profile into $TMP.
profile() {
	n=$((n + 1))
	local row
	row=$(GOROCE_SERVER_ARGS="--cpuprofile $TMP/s$n.prof" GOROCE_CLIENT_ARGS="--cpuprofile $TMP/c$n.prof" goroce_run "$@") || exit 1
	echo "$*: $row"
}

profile write_bw -s 64 -D 3 -m 4096
profile write_bw -s 4096 -D 3 -m 4096
profile write_bw -s 65536 -D 3 -m 4096
profile send_bw -s 64 -n 1000000 -m 4096
profile read_bw -s 4096 -D 3 -m 4096
profile write_lat -s 64 -n 300000 -m 4096
profile send_lat -s 64 -n 300000 -m 4096

go tool pprof -proto "$TMP"/[sc]*.prof > "$TMP/merged.pgo"
mv "$TMP/merged.pgo" "$OUT"
echo "wrote $OUT ($(wc -c < "$OUT") bytes)"
