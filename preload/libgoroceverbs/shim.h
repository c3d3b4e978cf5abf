// The C side of libgoroce-verbs.so: what the Go side shares with shim.c.
#ifndef GOROCE_SHIM_H
#define GOROCE_SHIM_H

#include <stdint.h>
#include <stdlib.h>
#include <infiniband/verbs.h>

// gr_swr is a send work request with libibverbs' unions taken apart, as
// shim.c hands it to the Go side.
struct gr_swr {
	uint64_t wr_id;
	struct ibv_sge *sg_list;
	void *ah;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t opcode;
	uint32_t send_flags;
	uint32_t imm; // host order: the value on the wire
	uint32_t invalidate_rkey;
	uint32_t rkey;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
	int32_t num_sge;
};

// gr_wc is a work completion as the Go side fills it in; shim.c copies it
// into the program's struct ibv_wc.
struct gr_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm; // host order
	uint32_t invalidated_rkey;
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
	uint16_t pkey_index;
	uint16_t slid;
	uint8_t sl;
	uint8_t dlid_path_bits;
};

// gr_async is an asynchronous event as the Go side hands it over.
struct gr_async {
	void *element; // the CQ, QP or SRQ
	uint32_t type;
	uint32_t port;
};

#define GR_BATCH 64

// A QP's structure: the struct ibv_qp_ex programs see, and the work
// requests the ibv_wr_* calls build (qpx.c) for a QP of ibv_create_qp_ex.
struct gr_wr_builder;
struct gr_qpx {
	struct ibv_qp_ex ex;
	struct gr_wr_builder *b;
};

// gr_ptr is the program's address a as a pointer (an SGE's addr).
static inline void *gr_ptr(uint64_t a) { return (void *)(uintptr_t)a; }

struct ibv_context *gr_new_context(void);
void *gr_context_base(struct ibv_context *ctx);
void gr_qpx_free(struct ibv_qp *qp);

#endif
