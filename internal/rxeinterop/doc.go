// Package rxeinterop holds interoperability tests of goroce against Linux's
// rdma_rxe, rdma-core's tools and perftest, run in a qemu guest by the rxe-vm
// harness (run-peer.sh -k): the package's tests share one guest, which the
// first test that needs it boots and TestMain stops (a guest of another
// kernel build, TestVerbs612Rxe's, replaces it). It has no code of its own: see rxeinterop_test.go
// (pingpong), bench_test.go (perftest), ibverbs_test.go and cnp_test.go
// (ECN: goroce's CNPs to rdma_rxe, whose packets an nftables rule marks CE;
// it also needs nft).
//
// The tests skip, and say why, unless GOROCE_RXE_VM names the harness
// directory; RXE_VM_BUILD names its build directory (default: the harness's
// build/), which must hold vmlinuz and initrd.cpio (the harness's build.sh
// makes them). They need root, qemu and tcpdump; TestIbverbsRxe
// (ibverbs_test.go) also needs libibverbs-dev and a C compiler, to build
// provider/ibverbs with -tags ibverbs for the guest. GOROCE_WIRE_CHECK, when set
// to the path of check-pcap.sh, has every capture judged by that independent
// checker as well; GOROCE_RXE_CAPTURES, when set to a directory, keeps the
// captures there.
//
//	GOROCE_RXE_VM=../shared/harness/rxe-vm RXE_VM_BUILD=build/rxe-vm \
//	GOROCE_WIRE_CHECK=../shared/tools/wire-check/check-pcap.sh \
//	go test -timeout 30m -v ./internal/rxeinterop
//
// TestBenchCMRxeLoss (about four minutes) runs only with -args -rxe.long.
package rxeinterop
