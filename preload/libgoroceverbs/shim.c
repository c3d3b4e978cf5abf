//go:build linux && cgo && ibverbs

// libibverbs' exported functions, served by the Go side (the gr_* functions
// of _cgo_export.h). Each checks what it can, calls Go once, and turns the
// errno Go returns into libibverbs' convention for that function: NULL or -1
// with errno set, or the errno itself as the return value.

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include "shim.h"
#include "_cgo_export.h"

#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define EXPORT __attribute__((visibility("default")))

int gr_c_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int req_notify_cq(struct ibv_cq *cq, int solicited_only);

struct ibv_qp *gr_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *a); // qpx.c

// gr_new_context makes a context inside a struct verbs_context, as
// libibverbs' providers do, so that the inline calls of verbs.h find the
// extended ops they look for: create_qp_ex (the ibv_wr_* API); the others
// left NULL make those calls fall back to the exported functions or say
// EOPNOTSUPP.
struct ibv_context *gr_new_context(void)
{
	struct verbs_context *v = calloc(1, sizeof *v);
	if (!v)
		return NULL;
	v->sz = sizeof *v;
	v->create_qp_ex = gr_create_qp_ex;
	struct ibv_context *ctx = &v->context;
	ctx->ops.poll_cq = poll_cq;
	ctx->ops.req_notify_cq = req_notify_cq;
	ctx->ops.post_send = gr_c_post_send;
	ctx->ops.post_recv = post_recv;
	ctx->ops.post_srq_recv = post_srq_recv;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	return ctx;
}

void *gr_context_base(struct ibv_context *ctx) { return verbs_get_ctx(ctx); }

// ret_ptr: NULL with errno, or p.
static void *ret_ptr(int e, void *p)
{
	if (e) {
		errno = e;
		return NULL;
	}
	return p;
}

// ret_neg: -1 with errno, or 0.
static int ret_neg(int e)
{
	if (e) {
		errno = e;
		return -1;
	}
	return 0;
}

EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **l = gr_get_device_list(num);
	if (!l) {
		if (num)
			*num = 0;
		errno = ENODEV;
	}
	return l;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }

EXPORT const char *ibv_get_device_name(struct ibv_device *d)
{
	if (!gr_is_device(d))
		return ret_ptr(EINVAL, NULL);
	return d->name;
}

EXPORT __be64 ibv_get_device_guid(struct ibv_device *d)
{
	if (!gr_is_device(d)) {
		errno = EINVAL;
		return 0;
	}
	return gr_device_guid(d);
}

EXPORT int ibv_get_device_index(struct ibv_device *d) { return -1; }

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *d)
{
	struct ibv_context *c = NULL;
	int e = gr_open_device(d, &c);
	return ret_ptr(e, c);
}

EXPORT int ibv_close_device(struct ibv_context *c) { return ret_neg(gr_close_device(c)); }

EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a) { return gr_query_device(c, a); }

EXPORT int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *a)
{
	return gr_query_port(c, port, (struct ibv_port_attr *)a);
}

EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
	return ret_neg(gr_query_gid(c, port, index, gid));
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
			     struct ibv_gid_entry *entry, uint32_t flags, size_t size)
{
	if (!entry || flags || size < sizeof(*entry) || port > 255 || index > INT32_MAX)
		return EINVAL;
	int e = gr_query_gid(c, port, index, &entry->gid);
	if (e)
		return e;
	entry->gid_index = index;
	entry->port_num = port;
	entry->gid_type = IBV_GID_TYPE_ROCE_V2;
	entry->ndev_ifindex = gr_ifindex(c);
	return 0;
}

EXPORT int ibv_query_gid_type(struct ibv_context *c, uint8_t port, unsigned int index,
			      int *type) // enum ibv_gid_type_sysfs of infiniband/driver.h
{
	union ibv_gid gid;
	if (!type || index > INT32_MAX || gr_query_gid(c, port, index, &gid))
		return ret_neg(EINVAL);
	*type = 1; // IBV_GID_TYPE_SYSFS_ROCE_V2
	return 0;
}

EXPORT int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey)
{
	struct ibv_port_attr pa;
	if (!pkey || index != 0 || gr_query_port(c, port, &pa))
		return ret_neg(EINVAL);
	*pkey = 0xffff;
	return 0;
}

EXPORT int ibv_get_pkey_index(struct ibv_context *c, uint8_t port, __be16 pkey)
{
	__be16 p;
	if (ibv_query_pkey(c, port, 0, &p) || p != pkey)
		return ret_neg(ENOENT);
	return 0;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	struct ibv_pd *p = NULL;
	int e = gr_alloc_pd(c, &p);
	return ret_ptr(e, p);
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *p) { return gr_dealloc_pd(p); }

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				       unsigned int access)
{
	struct ibv_mr *m = NULL;
	int e = gr_reg_mr(pd, addr, length, iova, access, &m);
	return ret_ptr(e, m);
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, access);
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
					int fd, int access)
{
	return ret_ptr(EOPNOTSUPP, NULL);
}

EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_INPUT;
}

EXPORT int ibv_dereg_mr(struct ibv_mr *m) { return gr_dereg_mr(m); }

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	struct ibv_comp_channel *ch = NULL;
	int e = gr_create_comp_channel(c, &ch);
	return ret_ptr(e, ch);
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch) { return ret_neg(gr_destroy_comp_channel(ch)); }

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
				    struct ibv_comp_channel *ch, int comp_vector)
{
	struct ibv_cq *cq = NULL;
	int e = gr_create_cq(c, cqe, cq_context, ch, &cq);
	return ret_ptr(e, cq);
}

EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe) { return EOPNOTSUPP; }

EXPORT int ibv_destroy_cq(struct ibv_cq *cq) { return gr_destroy_cq(cq); }

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
	uint64_t n;
	struct ibv_cq *got = NULL;
	if (!cq || !cq_context)
		return ret_neg(EINVAL);
	// Check the channel before reading its fd: a stale pointer is refused,
	// not followed.
	if (!gr_chan_ok(ch))
		return ret_neg(EINVAL);
	if (read(ch->fd, &n, sizeof n) != sizeof n)
		return -1; // errno from read (EAGAIN on a non-blocking fd)
	int e = gr_cq_event(ch, &got);
	if (e)
		return ret_neg(e);
	*cq = got;
	*cq_context = got->cq_context;
	return 0;
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents) {}

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a)
{
	struct ibv_srq *s = NULL;
	int e = gr_create_srq(pd, a, &s);
	return ret_ptr(e, s);
}

EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *a, int mask) { return EOPNOTSUPP; }

EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *a) { return EOPNOTSUPP; }

EXPORT int ibv_destroy_srq(struct ibv_srq *s) { return gr_destroy_srq(s); }

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	struct ibv_qp *qp = NULL;
	int e = gr_create_qp(pd, a, &qp);
	return ret_ptr(e, qp);
}


EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) { return gr_modify_qp(qp, a, mask); }

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init)
{
	return gr_query_qp(qp, a, init);
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp) { return gr_destroy_qp(qp); }

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *a)
{
	struct ibv_ah *ah = NULL;
	int e = gr_create_ah(pd, a, &ah);
	return ret_ptr(e, ah);
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ah) { return gr_destroy_ah(ah); }

// ibv_init_ah_from_wc answers a UD receive: the GRH in front of its data
// names the sender (RoCE: every packet has one).
EXPORT int ibv_init_ah_from_wc(struct ibv_context *c, uint8_t port, struct ibv_wc *wc, struct ibv_grh *grh,
			       struct ibv_ah_attr *a)
{
	union ibv_gid gid;
	if (!wc || !grh || !a || !(wc->wc_flags & IBV_WC_GRH) || gr_query_gid(c, port, 1, &gid))
		return ret_neg(EINVAL);
	memset(a, 0, sizeof *a);
	a->is_global = 1;
	a->port_num = port;
	a->grh.dgid = grh->sgid;
	a->grh.sgid_index = 1;
	a->grh.hop_limit = 0xff;
	a->grh.traffic_class = (be32toh(grh->version_tclass_flow) >> 20) & 0xff;
	a->grh.flow_label = be32toh(grh->version_tclass_flow) & 0xfffff;
	return 0;
}

EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr a;
	if (!pd || ibv_init_ah_from_wc(pd->context, port, wc, grh, &a))
		return ret_ptr(EINVAL, NULL);
	return ibv_create_ah(pd, &a);
}

EXPORT int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *ev)
{
	uint64_t n;
	struct gr_async a;
	if (!ev || !gr_context_ok(c))
		return ret_neg(EINVAL);
	if (read(c->async_fd, &n, sizeof n) != sizeof n)
		return -1;
	int e = gr_async_event(c, &a);
	if (e)
		return ret_neg(e);
	memset(ev, 0, sizeof *ev);
	ev->event_type = a.type;
	switch (a.type) {
	case IBV_EVENT_PORT_ACTIVE: case IBV_EVENT_PORT_ERR: case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE: case IBV_EVENT_SM_CHANGE: case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		ev->element.port_num = a.port;
		break;
	default:
		ev->element.cq = a.element; // the union's pointers share a place
	}
	return 0;
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *ev) {}

EXPORT int ibv_fork_init(void) { return 0; }

EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

int gr_c_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct gr_swr b[GR_BATCH];
	while (wr) {
		struct ibv_send_wr *first = wr;
		int n = 0, e = 0;
		for (; wr && n < GR_BATCH; wr = wr->next, n++) {
			struct gr_swr *s = &b[n];
			memset(s, 0, sizeof *s);
			s->wr_id = wr->wr_id;
			s->sg_list = wr->sg_list;
			s->num_sge = wr->num_sge;
			s->opcode = wr->opcode;
			s->send_flags = wr->send_flags;
			s->imm = be32toh(wr->imm_data);
			s->invalidate_rkey = wr->invalidate_rkey;
			switch (wr->opcode) {
			case IBV_WR_ATOMIC_CMP_AND_SWP: case IBV_WR_ATOMIC_FETCH_AND_ADD:
				s->remote_addr = wr->wr.atomic.remote_addr;
				s->rkey = wr->wr.atomic.rkey;
				s->compare_add = wr->wr.atomic.compare_add;
				s->swap = wr->wr.atomic.swap;
				break;
			default:
				s->remote_addr = wr->wr.rdma.remote_addr;
				s->rkey = wr->wr.rdma.rkey;
			}
			if (qp && qp->qp_type == IBV_QPT_UD) {
				s->ah = wr->wr.ud.ah;
				s->remote_qpn = wr->wr.ud.remote_qpn;
				s->remote_qkey = wr->wr.ud.remote_qkey;
			}
		}
		int got = gr_post_send(qp, b, n, &e);
		if (got == n && !e)
			continue;
		for (int i = 0; i < got; i++)
			first = first->next;
		if (bad)
			*bad = first;
		return e ? e : EINVAL;
	}
	return 0;
}

static int post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return gr_post_recv(qp, wr, bad);
}

static int post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return gr_post_srq_recv(srq, wr, bad);
}

static int poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct gr_wc b[GR_BATCH];
	int done = 0;
	if (n < 0) {
		errno = EINVAL;
		return -1;
	}
	do {
		int want = n - done < GR_BATCH ? n - done : GR_BATCH;
		int got = gr_poll_cq(cq, want, b);
		if (got < 0) {
			errno = -got;
			return done ? done : -1;
		}
		for (int i = 0; i < got; i++) {
			struct ibv_wc *w = &wc[done + i];
			w->wr_id = b[i].wr_id;
			w->status = b[i].status;
			w->opcode = b[i].opcode;
			w->vendor_err = b[i].vendor_err;
			w->byte_len = b[i].byte_len;
			if (b[i].wc_flags & IBV_WC_WITH_INV)
				w->invalidated_rkey = b[i].invalidated_rkey;
			else
				w->imm_data = htobe32(b[i].imm);
			w->qp_num = b[i].qp_num;
			w->src_qp = b[i].src_qp;
			w->wc_flags = b[i].wc_flags;
			w->pkey_index = b[i].pkey_index;
			w->slid = b[i].slid;
			w->sl = b[i].sl;
			w->dlid_path_bits = b[i].dlid_path_bits;
		}
		done += got;
		if (got < want)
			break;
	} while (done < n);
	return done;
}

static int req_notify_cq(struct ibv_cq *cq, int solicited_only) { return gr_req_notify_cq(cq, solicited_only); }
