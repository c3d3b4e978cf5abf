// wrapi.c: the extended QP's work-request API (ibv_create_qp_ex,
// ibv_qp_to_qp_ex, ibv_wr_start / ibv_wr_send / ibv_wr_set_ud_addr /
// ibv_wr_set_sge / ibv_wr_set_inline_data / ibv_wr_complete) under
// libgoroce-verbs.so: a UD QP sends to itself, from registered memory and
// inline from unregistered memory, two requests in one batch. Prints "ok".
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#define QKEY 0x11111111

static int wait_n(struct ibv_cq *cq, int want)
{
	for (long spins = 0; want > 0; spins++) {
		struct ibv_wc wc[4];
		int n = ibv_poll_cq(cq, 4, wc);
		if (n < 0 || spins > 100000000)
			return -1;
		for (int k = 0; k < n; k++)
			if (wc[k].status != IBV_WC_SUCCESS)
				return -1;
		want -= n;
	}
	return 0;
}

int main(void)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *ctx = l && n > 0 ? ibv_open_device(l[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	char *buf = calloc(1, 8192);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_cq *cq = ctx ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	if (!mr || !cq) {
		printf("FAIL setup\n");
		return 1;
	}
	struct ibv_qp_init_attr_ex ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .pd = pd,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .send_ops_flags = IBV_QP_EX_WITH_SEND,
					 .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 64}};
	struct ibv_qp *plain = ibv_create_qp(pd, (struct ibv_qp_init_attr *)&ia);
	errno = 0;
	if (!plain || ibv_qp_to_qp_ex(plain) != NULL || errno != EOPNOTSUPP) {
		printf("FAIL ibv_qp_to_qp_ex of a QP of ibv_create_qp\n");
		return 1;
	}
	ibv_destroy_qp(plain);
	ia.send_ops_flags = IBV_QP_EX_WITH_BIND_MW;
	errno = 0;
	if (ibv_create_qp_ex(ctx, &ia) != NULL || errno != EOPNOTSUPP) {
		printf("FAIL send_ops_flags not served\n");
		return 1;
	}
	ia.send_ops_flags = IBV_QP_EX_WITH_SEND;
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &ia);
	struct ibv_qp_ex *qx = qp ? ibv_qp_to_qp_ex(qp) : NULL;
	if (!qx) {
		printf("FAIL ibv_create_qp_ex: %s\n", strerror(errno));
		return 1;
	}
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
	ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	a.qp_state = IBV_QPS_RTR;
	ibv_modify_qp(qp, &a, IBV_QP_STATE);
	a.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) {
		printf("FAIL modify\n");
		return 1;
	}
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.sgid_index = 1, .hop_limit = 64}};
	ibv_query_gid(ctx, 1, 1, &aa.grh.dgid);
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	for (int i = 0; i < 2; i++) {
		struct ibv_sge rs = {.addr = (uintptr_t)buf + i * 2048, .length = 2048, .lkey = mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 10 + i, .sg_list = &rs, .num_sge = 1}, *rbad;
		if (ibv_post_recv(qp, &rw, &rbad)) {
			printf("FAIL post_recv\n");
			return 1;
		}
	}
	strcpy(buf + 4096, "from registered memory");
	char unregistered[32] = "inline, unregistered";
	ibv_wr_start(qx);
	qx->wr_id = 1;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_ud_addr(qx, ah, qp->qp_num, QKEY);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf + 4096, 23);
	qx->wr_id = 2;
	ibv_wr_send(qx);
	ibv_wr_set_ud_addr(qx, ah, qp->qp_num, QKEY);
	ibv_wr_set_inline_data(qx, unregistered, 21);
	int r = ibv_wr_complete(qx);
	if (r || wait_n(cq, 4)) {
		printf("FAIL ibv_wr_complete %d or completions\n", r);
		return 1;
	}
	if (strcmp(buf + 40, "from registered memory") || strcmp(buf + 2048 + 40, "inline, unregistered")) {
		printf("FAIL data: %s | %s\n", buf + 40, buf + 2048 + 40);
		return 1;
	}
	ibv_wr_start(qx);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 1); // no request begun
	if (ibv_wr_complete(qx) != EINVAL) {
		printf("FAIL ibv_wr_set_sge before a request\n");
		return 1;
	}
	ibv_wr_start(qx);
	ibv_wr_send(qx);
	ibv_wr_abort(qx);
	if (ibv_destroy_qp(qp) || ibv_destroy_ah(ah) || ibv_destroy_cq(cq) || ibv_dereg_mr(mr) || ibv_dealloc_pd(pd)) {
		printf("FAIL teardown\n");
		return 1;
	}
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	printf("ok\n");
	return 0;
}
