//go:build linux && cgo && ibverbs

// The C side of the provider; shim.h says what each part is for.

#include "shim.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <string.h>

// ---- errors ----

int goroce_rc(int rc) {
	if (rc == 0) return 0;
	if (rc > 0) return rc;
	if (rc == -1 && errno != 0) return errno;
	return -rc;
}

// ---- the device and its context ----

uint64_t goroce_guid(struct ibv_device *d) { return be64toh(ibv_get_device_guid(d)); }

struct ibv_context *goroce_open(const char *name, int *err) {
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *c = NULL;
	if (l == NULL) { *err = errno ? errno : ENODEV; return NULL; }
	*err = ENODEV;
	for (int i = 0; i < n; i++) {
		if (strcmp(ibv_get_device_name(l[i]), name) == 0) {
			errno = 0;
			c = ibv_open_device(l[i]);
			*err = c ? 0 : (errno ? errno : EIO);
			break;
		}
	}
	ibv_free_device_list(l);
	return c;
}

int goroce_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
	errno = 0;
	return goroce_rc(ibv_query_port(c, port, a));
}

int goroce_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t idx, struct ibv_gid_entry *e) {
	errno = 0;
	return goroce_rc(ibv_query_gid_ex(c, port, idx, e, 0));
}

uint64_t goroce_ts_mask(struct ibv_context *c, uint64_t *clock, int *err) {
	struct ibv_device_attr_ex a;
	memset(&a, 0, sizeof a);
	errno = 0;
	*err = goroce_rc(ibv_query_device_ex(c, NULL, &a));
	*clock = a.hca_core_clock;
	return a.completion_timestamp_mask;
}

int goroce_query_device(struct ibv_context *c, struct ibv_device_attr *a) {
	errno = 0;
	return goroce_rc(ibv_query_device(c, a));
}

int goroce_query_gid(struct ibv_context *c, uint8_t port, int idx, union ibv_gid *g) {
	errno = 0;
	return goroce_rc(ibv_query_gid(c, port, idx, g));
}

// goroce_wallclock_cqs reports whether the device stamps completions
// (completion_timestamp_mask non-zero) and makes extended CQs whose
// completions carry the wall-clock time, as CreateCQ makes them then: it
// creates one and destroys it.
int goroce_wallclock_cqs(struct ibv_context *c, uint64_t flags) {
	struct ibv_device_attr_ex a;
	memset(&a, 0, sizeof a);
	if (ibv_query_device_ex(c, NULL, &a) != 0 || a.completion_timestamp_mask == 0) return 0;
	struct ibv_cq_init_attr_ex ia;
	memset(&ia, 0, sizeof ia);
	ia.cqe = 1;
	ia.wc_flags = flags;
	struct ibv_cq_ex *cq = ibv_create_cq_ex(c, &ia);
	if (cq == NULL) return 0;
	ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
	return 1;
}

// ---- completion queues ----

// flat_wc copies a work completion into its flat form.
static void flat_wc(const struct ibv_wc *w, struct gwc *o) {
	o->wr_id = w->wr_id; o->status = w->status; o->opcode = w->opcode;
	o->vendor_err = w->vendor_err; o->byte_len = w->byte_len;
	o->imm = (w->wc_flags & IBV_WC_WITH_IMM) ? ntohl(w->imm_data) : w->invalidated_rkey;
	o->qp_num = w->qp_num; o->src_qp = w->src_qp; o->wc_flags = w->wc_flags;
	o->pkey_index = w->pkey_index; o->slid = w->slid; o->sl = w->sl; o->dlid_path_bits = w->dlid_path_bits;
	o->ts = 0; o->wallclock = 0;
}

// goroce_poll polls up to n completions into out (one call, one batch). It
// returns how many, or a negative errno.
int goroce_poll(struct ibv_cq *cq, int n, struct ibv_wc *scratch, struct gwc *out) {
	int k = ibv_poll_cq(cq, n, scratch);
	if (k < 0) return k;
	for (int i = 0; i < k; i++) flat_wc(&scratch[i], &out[i]);
	return k;
}

// goroce_poll_ex polls an extended CQ created with wc_flags.
int goroce_poll_ex(struct ibv_cq_ex *cq, int n, uint64_t flags, struct gwc *out) {
	struct ibv_poll_cq_attr attr;
	memset(&attr, 0, sizeof attr);
	int rc = ibv_start_poll(cq, &attr);
	if (rc == ENOENT) return 0;
	if (rc) return rc > 0 ? -rc : rc;
	int i = 0;
	for (;;) {
		struct gwc *o = &out[i];
		memset(o, 0, sizeof *o);
		o->wr_id = cq->wr_id;
		o->status = cq->status;
		o->opcode = ibv_wc_read_opcode(cq);
		o->vendor_err = ibv_wc_read_vendor_err(cq);
		o->wc_flags = ibv_wc_read_wc_flags(cq);
		if (flags & IBV_WC_EX_WITH_BYTE_LEN) o->byte_len = ibv_wc_read_byte_len(cq);
		if ((flags & IBV_WC_EX_WITH_IMM) && (o->wc_flags & IBV_WC_WITH_IMM)) o->imm = ntohl(ibv_wc_read_imm_data(cq));
		else if ((flags & IBV_WC_EX_WITH_IMM) && (o->wc_flags & IBV_WC_WITH_INV)) o->imm = ibv_wc_read_invalidated_rkey(cq);
		if (flags & IBV_WC_EX_WITH_QP_NUM) o->qp_num = ibv_wc_read_qp_num(cq);
		if (flags & IBV_WC_EX_WITH_SRC_QP) o->src_qp = ibv_wc_read_src_qp(cq);
		if (flags & IBV_WC_EX_WITH_SLID) o->slid = ibv_wc_read_slid(cq);
		if (flags & IBV_WC_EX_WITH_SL) o->sl = ibv_wc_read_sl(cq);
		if (flags & IBV_WC_EX_WITH_DLID_PATH_BITS) o->dlid_path_bits = ibv_wc_read_dlid_path_bits(cq);
		if (flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) o->ts = ibv_wc_read_completion_ts(cq);
		if (flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) o->wallclock = ibv_wc_read_completion_wallclock_ns(cq);
		i++;
		if (i == n) break;
		if (ibv_next_poll(cq) != 0) break;
	}
	ibv_end_poll(cq);
	return i;
}

struct ibv_cq_ex *goroce_create_cq_ex(struct ibv_context *c, int cqe, struct ibv_comp_channel *ch, uint64_t flags, int *err) {
	struct ibv_cq_init_attr_ex a;
	memset(&a, 0, sizeof a);
	a.cqe = cqe;
	a.channel = ch;
	a.wc_flags = flags;
	errno = 0;
	struct ibv_cq_ex *cq = ibv_create_cq_ex(c, &a);
	*err = cq ? 0 : (errno ? errno : EOPNOTSUPP);
	return cq;
}

struct ibv_cq *goroce_cq_ex_to_cq(struct ibv_cq_ex *cq) { return ibv_cq_ex_to_cq(cq); }

int goroce_req_notify(struct ibv_cq *cq, int solicited) {
	errno = 0;
	return goroce_rc(ibv_req_notify_cq(cq, solicited));
}

// ---- events ----

// goroce_get_cq_event takes one event off a channel and acknowledges it.
// With the channel's fd non-blocking, EAGAIN means no event yet.
int goroce_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq) {
	void *ctx;
	errno = 0;
	if (ibv_get_cq_event(ch, cq, &ctx) != 0) return errno ? errno : EIO;
	ibv_ack_cq_events(*cq, 1);
	return 0;
}

// goroce_get_async_event takes one asynchronous event and acknowledges it.
int goroce_get_async_event(struct ibv_context *c, uint32_t *type, void **elem, int *port) {
	struct ibv_async_event ev;
	errno = 0;
	if (ibv_get_async_event(c, &ev) != 0) return errno ? errno : EIO;
	*type = ev.event_type;
	*elem = ev.element.qp;
	*port = ev.element.port_num;
	ibv_ack_async_event(&ev);
	return 0;
}

// ---- queue pairs and shared receive queues ----

// goroce_post_send posts n requests with one ibv_post_send. *bad is the
// index of the request that failed (n when all were posted).
int goroce_post_send(struct ibv_qp *qp, const struct gsend *g, int n, struct ibv_sge *sges, struct ibv_send_wr *wrs, int *bad) {
	for (int i = 0; i < n; i++) {
		struct ibv_send_wr *w = &wrs[i];
		memset(w, 0, sizeof *w);
		w->wr_id = g[i].wr_id;
		w->next = i + 1 < n ? &wrs[i + 1] : NULL;
		w->sg_list = g[i].num_sge ? &sges[g[i].sge_off] : NULL;
		w->num_sge = g[i].num_sge;
		w->opcode = g[i].opcode;
		w->send_flags = g[i].flags;
		switch (g[i].opcode) {
		case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: case IBV_WR_RDMA_READ:
			w->wr.rdma.remote_addr = g[i].remote_addr;
			w->wr.rdma.rkey = g[i].rkey;
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP: case IBV_WR_ATOMIC_FETCH_AND_ADD:
			w->wr.atomic.remote_addr = g[i].remote_addr;
			w->wr.atomic.rkey = g[i].rkey;
			w->wr.atomic.compare_add = g[i].compare_add;
			w->wr.atomic.swap = g[i].swap;
			break;
		default:
			break;
		}
		if (qp->qp_type == IBV_QPT_UD) {
			w->wr.ud.ah = g[i].ah;
			w->wr.ud.remote_qpn = g[i].remote_qpn;
			w->wr.ud.remote_qkey = g[i].remote_qkey;
		}
		if (g[i].opcode == IBV_WR_SEND_WITH_IMM || g[i].opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
			w->imm_data = htonl(g[i].imm);
		else if (g[i].opcode == IBV_WR_SEND_WITH_INV || g[i].opcode == IBV_WR_LOCAL_INV)
			w->invalidate_rkey = g[i].inv_rkey;
		else if (g[i].opcode == IBV_WR_BIND_MW) {
			w->bind_mw.mw = g[i].mw;
			w->bind_mw.rkey = g[i].rkey;
			w->bind_mw.bind_info.mr = g[i].mr;
			w->bind_mw.bind_info.addr = g[i].bind_addr;
			w->bind_mw.bind_info.length = g[i].bind_length;
			w->bind_mw.bind_info.mw_access_flags = g[i].bind_access;
		}
	}
	struct ibv_send_wr *badwr = NULL;
	errno = 0;
	int rc = goroce_rc(ibv_post_send(qp, wrs, &badwr));
	*bad = rc ? (badwr ? (int)(badwr - wrs) : 0) : n;
	return rc;
}

// link_recv links n flat receive requests into wrs.
static void link_recv(const struct grecv *g, int n, struct ibv_sge *sges, struct ibv_recv_wr *wrs) {
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr *w = &wrs[i];
		w->wr_id = g[i].wr_id;
		w->next = i + 1 < n ? &wrs[i + 1] : NULL;
		w->sg_list = g[i].num_sge ? &sges[g[i].sge_off] : NULL;
		w->num_sge = g[i].num_sge;
	}
}

int goroce_post_recv(struct ibv_qp *qp, const struct grecv *g, int n, struct ibv_sge *sges, struct ibv_recv_wr *wrs, int *bad) {
	link_recv(g, n, sges, wrs);
	struct ibv_recv_wr *badwr = NULL;
	errno = 0;
	int rc = goroce_rc(ibv_post_recv(qp, wrs, &badwr));
	*bad = rc ? (badwr ? (int)(badwr - wrs) : 0) : n;
	return rc;
}

int goroce_post_srq_recv(struct ibv_srq *srq, const struct grecv *g, int n, struct ibv_sge *sges, struct ibv_recv_wr *wrs, int *bad) {
	link_recv(g, n, sges, wrs);
	struct ibv_recv_wr *badwr = NULL;
	errno = 0;
	int rc = goroce_rc(ibv_post_srq_recv(srq, wrs, &badwr));
	*bad = rc ? (badwr ? (int)(badwr - wrs) : 0) : n;
	return rc;
}

int goroce_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
	errno = 0;
	return goroce_rc(ibv_modify_qp(qp, a, mask));
}

int goroce_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, struct ibv_qp_init_attr *ia) {
	errno = 0;
	// Every standard attribute, IBV_QP_STATE .. IBV_QP_DEST_QPN: drivers
	// refuse bits beyond them (rdma_rxe: EOPNOTSUPP).
	return goroce_rc(ibv_query_qp(qp, a, (1 << 21) - 1, ia));
}

void goroce_noop(void) {}

// goroce_bind_mw binds a type 1 window (ibv_bind_mw) and returns its new
// key in *rkey.
int goroce_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mr *mr, uint64_t wr_id, uint32_t flags, uint64_t addr, uint64_t length, uint32_t access, uint32_t *rkey) {
	struct ibv_mw_bind b = {0};
	b.wr_id = wr_id;
	b.send_flags = flags;
	b.bind_info.mr = mr;
	b.bind_info.addr = addr;
	b.bind_info.length = length;
	b.bind_info.mw_access_flags = access;
	errno = 0;
	int rc = goroce_rc(ibv_bind_mw(qp, mw, &b));
	*rkey = mw->rkey;
	return rc;
}

// goroce_cap_ex returns the device's extended capability flags
// (device_cap_flags_ex: ATOMIC_WRITE is bit 40, FLUSH_GLOBAL 38,
// FLUSH_PERSISTENT 39), 0 when ibv_query_device_ex fails.
uint64_t goroce_cap_ex(struct ibv_context *c) {
	struct ibv_device_attr_ex a;
	memset(&a, 0, sizeof a);
	if (ibv_query_device_ex(c, NULL, &a) != 0)
		return 0;
	return a.device_cap_flags_ex;
}

// goroce_create_qp_aw creates a QP with ibv_create_qp_ex, ATOMIC_WRITE among
// its send operations (the others as ibv_post_send has them); NULL, errno
// set, when the device refuses.
struct ibv_qp *goroce_create_qp_aw(struct ibv_context *c, struct ibv_pd *pd, struct ibv_qp_init_attr *ia) {
	struct ibv_qp_init_attr_ex x;
	memset(&x, 0, sizeof x);
	x.send_cq = ia->send_cq;
	x.recv_cq = ia->recv_cq;
	x.srq = ia->srq;
	x.cap = ia->cap;
	x.qp_type = ia->qp_type;
	x.sq_sig_all = ia->sq_sig_all;
	x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	x.pd = pd;
	x.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
		IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
		IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW |
		IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_ATOMIC_WRITE;
	errno = 0;
	return ibv_create_qp_ex(c, &x);
}

// goroce_atomic_write posts an ATOMIC_WRITE of the 8 bytes at src
// (ibv_wr_atomic_write) on a QP goroce_create_qp_aw made.
int goroce_atomic_write(struct ibv_qp *qp, uint64_t wr_id, uint32_t flags, uint32_t rkey, uint64_t addr, uint64_t src) {
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	if (!x)
		return EOPNOTSUPP;
	ibv_wr_start(x);
	x->wr_id = wr_id;
	x->wr_flags = flags;
	ibv_wr_atomic_write(x, rkey, addr, (const void *)(uintptr_t)src);
	errno = 0;
	return goroce_rc(ibv_wr_complete(x));
}
