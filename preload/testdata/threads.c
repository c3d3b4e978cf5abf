// threads.c: libibverbs from several threads at once under
// libgoroce-verbs.so. Each of 4 threads has its own CQ (on a completion
// channel it sleeps on) and UD QP and sends 300 messages to itself,
// waiting for each with ibv_req_notify_cq / ibv_get_cq_event; all share one
// context and PD. Prints "ok" and exits 0 when every message arrived.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#define THREADS 4
#define MSGS 300
#define QKEY 0x11111111

static struct ibv_context *ctx;
static struct ibv_pd *pd;

static void *run(void *arg)
{
	long id = (long)arg;
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, (void *)id, ch, 0);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = mr && cq ? ibv_create_qp(pd, &ia) : NULL;
	if (!qp)
		return "setup";
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return "init";
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return "rtr";
	a.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return "rts";
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.sgid_index = 1, .hop_limit = 64}};
	if (ibv_query_gid(ctx, 1, 1, &aa.grh.dgid))
		return "gid";
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		return "ah";
	for (int i = 0; i < MSGS; i++) {
		struct ibv_sge rs = {.addr = (uintptr_t)buf, .length = 2048, .lkey = mr->lkey};
		struct ibv_sge ss = {.addr = (uintptr_t)buf + 2048, .length = 32, .lkey = mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *rbad;
		struct ibv_send_wr sw = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED}, *sbad;
		sw.wr.ud.ah = ah;
		sw.wr.ud.remote_qpn = qp->qp_num;
		sw.wr.ud.remote_qkey = QKEY;
		snprintf(buf + 2048, 32, "t%ld m%d", id, i);
		if (ibv_post_recv(qp, &rw, &rbad) || ibv_post_send(qp, &sw, &sbad))
			return "post";
		int got = 0, recv = 0;
		while (got < 2) {
			struct ibv_wc wc[2];
			int n = ibv_poll_cq(cq, 2, wc);
			if (n < 0)
				return "poll";
			for (int k = 0; k < n; k++) {
				if (wc[k].status != IBV_WC_SUCCESS)
					return "completion";
				if (wc[k].opcode == IBV_WC_RECV) {
					char want[32];
					snprintf(want, sizeof want, "t%ld m%d", id, i);
					if (strcmp(buf + 40, want))
						return "data";
					recv = 1;
				}
			}
			got += n;
			if (got < 2 && n == 0) {
				struct ibv_cq *ecq;
				void *ectx;
				if (ibv_req_notify_cq(cq, 0))
					return "notify";
				n = ibv_poll_cq(cq, 2, wc); // completions before the arm
				if (n > 0) {
					for (int k = 0; k < n; k++)
						if (wc[k].opcode == IBV_WC_RECV)
							recv = 1;
					got += n;
					continue;
				}
				if (ibv_get_cq_event(ch, &ecq, &ectx) || ecq != cq || ectx != (void *)id)
					return "event";
				ibv_ack_cq_events(cq, 1);
			}
		}
		if (!recv)
			return "no receive";
	}
	if (ibv_destroy_qp(qp) || ibv_destroy_ah(ah) || ibv_destroy_cq(cq) || ibv_destroy_comp_channel(ch) ||
	    ibv_dereg_mr(mr))
		return "teardown";
	free(buf);
	return NULL;
}

int main(void)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || n < 1 || !(ctx = ibv_open_device(l[0])) || !(pd = ibv_alloc_pd(ctx))) {
		printf("FAIL setup\n");
		return 1;
	}
	pthread_t t[THREADS];
	for (long i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, run, (void *)i);
	int bad = 0;
	for (int i = 0; i < THREADS; i++) {
		void *r;
		pthread_join(t[i], &r);
		if (r) {
			printf("FAIL thread %d: %s\n", i, (char *)r);
			bad++;
		}
	}
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	if (!bad)
		printf("ok %d threads x %d messages\n", THREADS, MSGS);
	return bad;
}
