//go:build linux && cgo && ibverbs

// The extended QP (ibv_create_qp_ex, ibv_qp_to_qp_ex) and its work-request
// calls (ibv_wr_start, ibv_wr_send, ibv_wr_set_sge, ..., ibv_wr_complete):
// each ibv_wr_* call fills in a struct ibv_send_wr, and ibv_wr_complete
// posts them all with ibv_post_send. Inline data is copied into a buffer
// the QP registers, so it needs no key.

#include <errno.h>
#include <string.h>
#include <stdlib.h>
#include "shim.h"

#define EXPORT __attribute__((visibility("default")))
#define QPX_WRS 64
#define QPX_SGES 16
#define QPX_INLINE 256

int gr_c_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);

struct gr_wr_builder {
	int n, err;
	struct ibv_mr *mr; // of inl
	struct ibv_send_wr wr[QPX_WRS];
	struct ibv_sge sge[QPX_WRS][QPX_SGES];
	char inl[QPX_WRS][QPX_INLINE];
};

static struct gr_wr_builder *builder(struct ibv_qp_ex *q) { return ((struct gr_qpx *)q)->b; }

// next starts a work request of the batch.
static struct ibv_send_wr *next(struct ibv_qp_ex *q, enum ibv_wr_opcode op)
{
	struct gr_wr_builder *b = builder(q);
	if (!b)
		return NULL;
	if (b->n >= QPX_WRS) {
		b->err = ENOMEM;
		return NULL;
	}
	struct ibv_send_wr *w = &b->wr[b->n++];
	memset(w, 0, sizeof *w);
	w->wr_id = q->wr_id;
	w->send_flags = q->wr_flags;
	w->opcode = op;
	return w;
}

// cur is the work request the ibv_wr_set_* calls complete.
static struct ibv_send_wr *cur(struct ibv_qp_ex *q)
{
	struct gr_wr_builder *b = builder(q);
	if (!b || b->n == 0) {
		if (b)
			b->err = EINVAL;
		return NULL;
	}
	return &b->wr[b->n - 1];
}

static void wr_start(struct ibv_qp_ex *q)
{
	struct gr_wr_builder *b = builder(q);
	if (b)
		b->n = b->err = 0;
}

static int wr_complete(struct ibv_qp_ex *q)
{
	struct gr_wr_builder *b = builder(q);
	if (!b)
		return EINVAL;
	int n = b->n, e = b->err;
	b->n = b->err = 0;
	if (e || n == 0)
		return e;
	for (int i = 0; i < n; i++)
		b->wr[i].next = i + 1 < n ? &b->wr[i + 1] : NULL;
	struct ibv_send_wr *bad;
	return gr_c_post_send(&q->qp_base, b->wr, &bad);
}

static void wr_abort(struct ibv_qp_ex *q)
{
	struct gr_wr_builder *b = builder(q);
	if (b)
		b->n = b->err = 0;
}

static void wr_rdma(struct ibv_qp_ex *q, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct ibv_send_wr *w = next(q, op);
	if (w) {
		w->wr.rdma.rkey = rkey;
		w->wr.rdma.remote_addr = addr;
		w->imm_data = imm;
	}
}

static void wr_rdma_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr) { wr_rdma(q, IBV_WR_RDMA_WRITE, rkey, addr, 0); }
static void wr_rdma_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, __be32 imm) { wr_rdma(q, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr, imm); }
static void wr_rdma_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr) { wr_rdma(q, IBV_WR_RDMA_READ, rkey, addr, 0); }
static void wr_send(struct ibv_qp_ex *q) { next(q, IBV_WR_SEND); }

static void wr_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
	struct ibv_send_wr *w = next(q, IBV_WR_SEND_WITH_IMM);
	if (w)
		w->imm_data = imm;
}

static void wr_send_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	struct ibv_send_wr *w = next(q, IBV_WR_SEND_WITH_INV);
	if (w)
		w->invalidate_rkey = rkey;
}

static void wr_atomic(struct ibv_qp_ex *q, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr, uint64_t cmp_add, uint64_t swap)
{
	struct ibv_send_wr *w = next(q, op);
	if (w) {
		w->wr.atomic.rkey = rkey;
		w->wr.atomic.remote_addr = addr;
		w->wr.atomic.compare_add = cmp_add;
		w->wr.atomic.swap = swap;
	}
}

static void wr_cmp_swp(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t cmp, uint64_t swap) { wr_atomic(q, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, cmp, swap); }
static void wr_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t add) { wr_atomic(q, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, add, 0); }

static void wr_set_ud_addr(struct ibv_qp_ex *q, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct ibv_send_wr *w = cur(q);
	if (w) {
		w->wr.ud.ah = ah;
		w->wr.ud.remote_qpn = qpn;
		w->wr.ud.remote_qkey = qkey;
	}
}

static void wr_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *l)
{
	struct ibv_send_wr *w = cur(q);
	if (!w)
		return;
	struct gr_wr_builder *b = builder(q);
	if (n > QPX_SGES || (n && !l)) {
		b->err = EINVAL;
		return;
	}
	struct ibv_sge *s = b->sge[w - b->wr];
	if (n)
		memcpy(s, l, n * sizeof *l);
	w->sg_list = s;
	w->num_sge = n;
}

static void wr_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t len)
{
	struct ibv_sge s = {.addr = addr, .length = len, .lkey = lkey};
	wr_set_sge_list(q, 1, &s);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *q, size_t n, const struct ibv_data_buf *l)
{
	struct ibv_send_wr *w = cur(q);
	if (!w)
		return;
	struct gr_wr_builder *b = builder(q);
	char *dst = b->inl[w - b->wr];
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		if (total + l[i].length > QPX_INLINE) {
			b->err = EINVAL;
			return;
		}
		memcpy(dst + total, l[i].addr, l[i].length);
		total += l[i].length;
	}
	struct ibv_sge s = {.addr = (uintptr_t)dst, .length = total, .lkey = b->mr->lkey};
	wr_set_sge_list(q, 1, &s);
	w->send_flags |= IBV_SEND_INLINE;
}

static void wr_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t len)
{
	struct ibv_data_buf d = {.addr = addr, .length = len};
	wr_set_inline_data_list(q, 1, &d);
}

// The send_ops_flags served.
#define QPX_OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND | \
		 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
		 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV)

struct ibv_qp *gr_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *a)
{
	if (!a || !(a->comp_mask & IBV_QP_INIT_ATTR_PD) ||
	    (a->comp_mask & ~(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) ||
	    ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (a->send_ops_flags & ~(uint64_t)QPX_OPS))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!a->pd || a->pd->context != c) {
		errno = EINVAL;
		return NULL;
	}
	struct gr_wr_builder *b = calloc(1, sizeof *b);
	if (!b) {
		errno = ENOMEM;
		return NULL;
	}
	if (!(b->mr = ibv_reg_mr(a->pd, b->inl, sizeof b->inl, IBV_ACCESS_LOCAL_WRITE))) {
		free(b);
		return NULL;
	}
	struct ibv_qp *qp = ibv_create_qp(a->pd, (struct ibv_qp_init_attr *)a);
	if (!qp) {
		int e = errno;
		ibv_dereg_mr(b->mr);
		free(b);
		errno = e;
		return NULL;
	}
	struct gr_qpx *x = (struct gr_qpx *)qp;
	struct ibv_qp_ex *q = &x->ex;
	x->b = b;
	q->wr_start = wr_start;
	q->wr_complete = wr_complete;
	q->wr_abort = wr_abort;
	q->wr_send = wr_send;
	q->wr_send_imm = wr_send_imm;
	q->wr_send_inv = wr_send_inv;
	q->wr_rdma_write = wr_rdma_write;
	q->wr_rdma_write_imm = wr_rdma_write_imm;
	q->wr_rdma_read = wr_rdma_read;
	q->wr_atomic_cmp_swp = wr_cmp_swp;
	q->wr_atomic_fetch_add = wr_fetch_add;
	q->wr_set_ud_addr = wr_set_ud_addr;
	q->wr_set_sge = wr_set_sge;
	q->wr_set_sge_list = wr_set_sge_list;
	q->wr_set_inline_data = wr_set_inline_data;
	q->wr_set_inline_data_list = wr_set_inline_data_list;
	return qp;
}

// gr_qpx_free frees the builder of a QP being destroyed (the Go side has
// taken it out of the registry; its MR goes with the PD's objects).
void gr_qpx_free(struct ibv_qp *qp)
{
	struct gr_qpx *x = (struct gr_qpx *)qp;
	if (x->b) {
		ibv_dereg_mr(x->b->mr);
		free(x->b);
		x->b = NULL;
	}
}

EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	if (!qp || !((struct gr_qpx *)qp)->b) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return &((struct gr_qpx *)qp)->ex;
}
