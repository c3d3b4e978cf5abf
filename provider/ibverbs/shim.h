//go:build linux && cgo && ibverbs

// The C side of the provider: small wrappers over libibverbs that fold its
// three ways of reporting an error into one errno, flatten the structures
// Go cannot touch (unions, linked lists, static inline verbs) and handle a
// batch of work requests or completions per call. The Go files include
// this header; shim.c defines the functions. They are linked into the
// program, hence the goroce_ prefix.

#ifndef GOROCE_IBVERBS_SHIM_H
#define GOROCE_IBVERBS_SHIM_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdlib.h>

// A work completion, flat: libibverbs' struct ibv_wc has a union.
struct gwc {
	uint64_t wr_id;
	uint64_t ts;
	uint64_t wallclock;
	uint32_t status, opcode, vendor_err, byte_len, imm, qp_num, src_qp, wc_flags;
	uint16_t pkey_index, slid;
	uint8_t sl, dlid_path_bits;
};

// A send work request, flat: libibverbs' struct ibv_send_wr has unions and
// a linked list; goroce_post_send builds those in C. Its scatter/gather
// list is sges[sge_off : sge_off+num_sge] of the batch.
struct gsend {
	uint64_t wr_id, remote_addr, compare_add, swap;
	struct ibv_ah *ah;
	uint32_t opcode, flags, imm, rkey, remote_qpn, remote_qkey, inv_rkey, num_sge, sge_off;
	// BIND_MW: the window, the region, the range and access (rkey: the
	// window's new key).
	struct ibv_mw *mw;
	struct ibv_mr *mr;
	uint64_t bind_addr, bind_length;
	uint32_t bind_access;
};

// A receive work request, flat, as struct gsend.
struct grecv {
	uint64_t wr_id;
	uint32_t num_sge, sge_off;
};

// Errors. The verbs return errors three ways: an errno value, -1 with
// errno set, or a negative errno; goroce_rc folds them into 0 or a
// positive errno. It reads errno, so it is called in C right after the
// verb, on the thread that ran it (errors.go says why).
int goroce_rc(int rc);

// The device and its context.
uint64_t goroce_guid(struct ibv_device *d);
struct ibv_context *goroce_open(const char *name, int *err);
int goroce_query_device(struct ibv_context *c, struct ibv_device_attr *a);
int goroce_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a);
int goroce_query_gid(struct ibv_context *c, uint8_t port, int idx, union ibv_gid *g);
int goroce_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t idx, struct ibv_gid_entry *e);
uint64_t goroce_ts_mask(struct ibv_context *c, uint64_t *clock, int *err);
int goroce_wallclock_cqs(struct ibv_context *c, uint64_t flags);

// Completion queues.
int goroce_poll(struct ibv_cq *cq, int n, struct ibv_wc *scratch, struct gwc *out);
int goroce_poll_ex(struct ibv_cq_ex *cq, int n, uint64_t flags, struct gwc *out);
struct ibv_cq_ex *goroce_create_cq_ex(struct ibv_context *c, int cqe, struct ibv_comp_channel *ch, uint64_t flags, int *err);
struct ibv_cq *goroce_cq_ex_to_cq(struct ibv_cq_ex *cq);
int goroce_req_notify(struct ibv_cq *cq, int solicited);

// Events.
int goroce_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq);
int goroce_get_async_event(struct ibv_context *c, uint32_t *type, void **elem, int *port);

// Queue pairs and shared receive queues. The posts link n flat requests
// into wrs and make one ibv_post_send, ibv_post_recv or ibv_post_srq_recv;
// *bad is the index of the request that failed (n when all were posted).
int goroce_post_send(struct ibv_qp *qp, const struct gsend *g, int n, struct ibv_sge *sges, struct ibv_send_wr *wrs, int *bad);
uint64_t goroce_cap_ex(struct ibv_context *c);
struct ibv_qp *goroce_create_qp_aw(struct ibv_context *c, struct ibv_pd *pd, struct ibv_qp_init_attr *ia);
int goroce_atomic_write(struct ibv_qp *qp, uint64_t wr_id, uint32_t flags, uint32_t rkey, uint64_t addr, uint64_t src);
int goroce_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mr *mr, uint64_t wr_id, uint32_t flags, uint64_t addr, uint64_t length, uint32_t access, uint32_t *rkey);
int goroce_post_recv(struct ibv_qp *qp, const struct grecv *g, int n, struct ibv_sge *sges, struct ibv_recv_wr *wrs, int *bad);
int goroce_post_srq_recv(struct ibv_srq *srq, const struct grecv *g, int n, struct ibv_sge *sges, struct ibv_recv_wr *wrs, int *bad);
int goroce_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask);
int goroce_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, struct ibv_qp_init_attr *ia);

// One empty call: the benchmarks' baseline.
void goroce_noop(void);

#endif
