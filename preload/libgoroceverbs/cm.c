//go:build linux && cgo && ibverbs

// librdmacm's exported functions, served by goroce's rdma_cm (cm.go).

#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include "shim.h"
#include "cmshim.h"
#include "_cgo_export.h"

#define EXPORT __attribute__((visibility("default")))

static int neg(int e)
{
	if (e) {
		errno = e;
		return -1;
	}
	return 0;
}

struct gr_inaddr gr_inaddr_of(const struct sockaddr *sa)
{
	struct gr_inaddr a;
	memset(&a, 0, sizeof a);
	if (!sa)
		return a;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		memcpy(a.ip, &s->sin_addr, 4);
		a.port = ntohs(s->sin_port);
		a.ok = 1;
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		memcpy(a.ip, &s->sin6_addr, 16);
		a.port = ntohs(s->sin6_port);
		a.is6 = 1;
		a.ok = 1;
	}
	return a;
}

void gr_set_addr(struct rdma_cm_id *id, int dst, struct gr_inaddr a)
{
	struct sockaddr_storage *ss = dst ? &id->route.addr.dst_storage : &id->route.addr.src_storage;
	memset(ss, 0, sizeof *ss);
	if (a.is6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		memcpy(&s->sin6_addr, a.ip, 16);
		s->sin6_port = htons(a.port);
	} else {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		memcpy(&s->sin_addr, a.ip, 4);
		s->sin_port = htons(a.port);
	}
}

struct rdma_cm_event *gr_cm_event_new(struct rdma_cm_id *id, struct rdma_cm_id *listen_id, int type, int status,
				      const void *pdata, int plen, int rr, int depth)
{
	struct rdma_cm_event *e = calloc(1, sizeof *e);
	if (!e)
		return NULL;
	e->id = id;
	e->listen_id = listen_id;
	e->event = type;
	e->status = status;
	if (plen > 0) {
		void *p = malloc(plen);
		if (p)
			memcpy(p, pdata, plen);
		e->param.conn.private_data = p;
		e->param.conn.private_data_len = p ? plen : 0;
	}
	e->param.conn.responder_resources = rr;
	e->param.conn.initiator_depth = depth;
	return e;
}

EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct rdma_event_channel *ch = NULL;
	int e = gr_create_event_channel(&ch);
	if (e) {
		errno = e;
		return NULL;
	}
	return ch;
}

EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *ch) { gr_destroy_event_channel(ch); }

EXPORT int rdma_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id, void *context, enum rdma_port_space ps)
{
	if (!id)
		return neg(EINVAL);
	return neg(gr_create_id(ch, id, context, ps));
}

EXPORT int rdma_destroy_id(struct rdma_cm_id *id) { return neg(gr_destroy_id(id)); }

EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	return neg(gr_bind_addr(id, gr_inaddr_of(addr)));
}

EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst, int timeout_ms)
{
	return neg(gr_resolve_addr(id, gr_inaddr_of(src), gr_inaddr_of(dst)));
}

EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms) { return neg(gr_resolve_route(id)); }

EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog) { return neg(gr_listen(id)); }

EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	return neg(gr_cm_create_qp(id, pd, attr));
}

EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *ax)
{
	if (!ax)
		return neg(EINVAL);
	struct ibv_qp_init_attr a = {
		.qp_context = ax->qp_context, .send_cq = ax->send_cq, .recv_cq = ax->recv_cq, .srq = ax->srq,
		.cap = ax->cap, .qp_type = ax->qp_type, .sq_sig_all = ax->sq_sig_all,
	};
	struct ibv_pd *pd = (ax->comp_mask & IBV_QP_INIT_ATTR_PD) ? ax->pd : NULL;
	if (ax->comp_mask & ~(IBV_QP_INIT_ATTR_PD))
		return neg(EOPNOTSUPP);
	int r = rdma_create_qp(id, pd, &a);
	if (!r)
		ax->cap = a.cap;
	return r;
}

EXPORT void rdma_destroy_qp(struct rdma_cm_id *id) { gr_cm_destroy_qp(id); }

static void conn_args(struct rdma_conn_param *p, const void **pd, int *plen, int *rr, int *depth, int *retry, int *rnr)
{
	*pd = NULL;
	*plen = 0;
	*rr = *depth = 1;
	*retry = *rnr = 7;
	if (p) {
		*pd = p->private_data;
		*plen = p->private_data ? p->private_data_len : 0;
		*rr = p->responder_resources;
		*depth = p->initiator_depth;
		*retry = p->retry_count;
		*rnr = p->rnr_retry_count;
	}
}

EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	const void *pd;
	int plen, rr, depth, retry, rnr;
	conn_args(p, &pd, &plen, &rr, &depth, &retry, &rnr);
	return neg(gr_connect(id, (void *)pd, plen, rr, depth, retry, rnr));
}

EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	const void *pd;
	int plen, rr, depth, retry, rnr;
	conn_args(p, &pd, &plen, &rr, &depth, &retry, &rnr);
	return neg(gr_accept(id, (void *)pd, plen, rr, depth, rnr));
}

EXPORT int rdma_reject(struct rdma_cm_id *id, const void *pdata, uint8_t len)
{
	return neg(gr_reject(id, (void *)pdata, pdata ? len : 0));
}

EXPORT int rdma_disconnect(struct rdma_cm_id *id) { return neg(gr_disconnect(id)); }

EXPORT int rdma_establish(struct rdma_cm_id *id) { return neg(EOPNOTSUPP); }

EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *attr, int *mask) { return neg(EOPNOTSUPP); }

EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	if (!optval)
		return neg(EINVAL);
	if (level == RDMA_OPTION_ID && (optname == RDMA_OPTION_ID_TOS || optname == RDMA_OPTION_ID_ACK_TIMEOUT) && optlen >= 1)
		return neg(gr_set_option(id, optname, *(uint8_t *)optval));
	if (level == RDMA_OPTION_ID && (optname == RDMA_OPTION_ID_REUSEADDR || optname == RDMA_OPTION_ID_AFONLY))
		return neg(gr_set_option(id, -1, 0)); // checks the id; a soft device's ports need neither
	return neg(ENOSYS);
}

EXPORT int rdma_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **event)
{
	uint64_t n;
	if (!event || !gr_event_channel_ok(ch))
		return neg(EINVAL);
	if (read(ch->fd, &n, sizeof n) != sizeof n)
		return -1; // read's errno: EAGAIN on a non-blocking fd
	struct rdma_cm_event *e = NULL;
	int r = gr_cm_event(ch, &e);
	if (r)
		return neg(r);
	*event = e;
	return 0;
}

void gr_cm_event_free(struct rdma_cm_event *e)
{
	free((void *)e->param.conn.private_data);
	free(e);
}

EXPORT int rdma_ack_cm_event(struct rdma_cm_event *e)
{
	if (!e)
		return neg(EINVAL);
	gr_cm_event_free(e);
	return 0;
}

EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	struct sockaddr *s = &id->route.addr.src_addr;
	return s->sa_family == AF_INET6 ? ((struct sockaddr_in6 *)s)->sin6_port : ((struct sockaddr_in *)s)->sin_port;
}

EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	struct sockaddr *s = &id->route.addr.dst_addr;
	return s->sa_family == AF_INET6 ? ((struct sockaddr_in6 *)s)->sin6_port : ((struct sockaddr_in *)s)->sin_port;
}

// rdma_getaddrinfo resolves with getaddrinfo: a passive lookup gives the
// source address, an active one the destination.
EXPORT int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
			    struct rdma_addrinfo **res)
{
	struct addrinfo h = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	if (!res || (!node && !service))
		return neg(EINVAL);
	int passive = hints && (hints->ai_flags & RAI_PASSIVE);
	h.ai_family = hints && hints->ai_family ? hints->ai_family : AF_UNSPEC;
	h.ai_flags = (passive ? AI_PASSIVE : 0) | (hints && (hints->ai_flags & RAI_NUMERICHOST) ? AI_NUMERICHOST : 0);
	if (h.ai_family == AF_UNSPEC && passive && !node)
		h.ai_family = AF_INET;
	int r = getaddrinfo(node, service, &h, &ai);
	if (r)
		return neg(r == EAI_SYSTEM ? errno : ENOENT);
	struct rdma_addrinfo *ra = calloc(1, sizeof *ra);
	void *sa = malloc(ai->ai_addrlen);
	if (!ra || !sa) {
		free(ra);
		free(sa);
		freeaddrinfo(ai);
		return neg(ENOMEM);
	}
	memcpy(sa, ai->ai_addr, ai->ai_addrlen);
	ra->ai_flags = hints ? hints->ai_flags : 0;
	ra->ai_family = ai->ai_family;
	ra->ai_qp_type = IBV_QPT_RC;
	ra->ai_port_space = RDMA_PS_TCP;
	if (passive) {
		ra->ai_src_addr = sa;
		ra->ai_src_len = ai->ai_addrlen;
	} else {
		ra->ai_dst_addr = sa;
		ra->ai_dst_len = ai->ai_addrlen;
	}
	freeaddrinfo(ai);
	*res = ra;
	return 0;
}

EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res);
		res = next;
	}
}
