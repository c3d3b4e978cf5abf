//go:build linux && cgo && ibverbs

// Command libgoroceverbs is libgoroce-verbs.so: goroce's soft RDMA devices
// for unmodified programs linked against libibverbs. Built with
//
//	go build -tags ibverbs -buildmode=c-shared -o libgoroce-verbs.so ./preload/libgoroceverbs
//
// and loaded with LD_PRELOAD (goroce run does both), it defines libibverbs'
// exported functions (ibv_get_device_list, ibv_open_device, ibv_create_qp,
// ...), which the dynamic linker then binds the program's calls to before
// libibverbs' own. The structures it hands out are libibverbs' (struct
// ibv_context, ibv_qp, ...) with working context ops, so that the inline
// functions of <infiniband/verbs.h> (ibv_post_send, ibv_post_recv,
// ibv_poll_cq, ibv_req_notify_cq, ibv_post_srq_recv) call into the soft
// engine. See docs/c-programs.md for the environment it reads.
package main

func main() {}
