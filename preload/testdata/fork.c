// fork.c: a program that forks and execs while its verbs objects live
// (as a launcher or a shell-out would) under libgoroce-verbs.so. The child
// runs /bin/true; the parent's registered memory and QP keep working after
// the fork (a UD SEND to itself before and after). Prints "ok".
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <infiniband/verbs.h>

#define QKEY 0x11111111

static int send_self(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_ah *ah, struct ibv_mr *mr, char *buf, const char *msg)
{
	struct ibv_sge rs = {.addr = (uintptr_t)buf, .length = 2048, .lkey = mr->lkey};
	struct ibv_sge ss = {.addr = (uintptr_t)buf + 2048, .length = 32, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.sg_list = &rs, .num_sge = 1}, *rbad;
	struct ibv_send_wr sw = {.sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *sbad;
	sw.wr.ud.ah = ah;
	sw.wr.ud.remote_qpn = qp->qp_num;
	sw.wr.ud.remote_qkey = QKEY;
	snprintf(buf + 2048, 32, "%s", msg);
	if (ibv_post_recv(qp, &rw, &rbad) || ibv_post_send(qp, &sw, &sbad))
		return -1;
	for (int got = 0, spins = 0; got < 2; spins++) {
		struct ibv_wc wc[2];
		int n = ibv_poll_cq(cq, 2, wc);
		if (n < 0 || spins > 50000000)
			return -1;
		for (int k = 0; k < n; k++)
			if (wc[k].status != IBV_WC_SUCCESS)
				return -1;
		got += n;
	}
	return strcmp(buf + 40, msg);
}

int main(void)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *ctx = l && n > 0 ? ibv_open_device(l[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_cq *cq = ctx ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = mr && cq ? ibv_create_qp(pd, &ia) : NULL;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
	if (!qp || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) {
		printf("FAIL setup\n");
		return 1;
	}
	a.qp_state = IBV_QPS_RTR;
	ibv_modify_qp(qp, &a, IBV_QP_STATE);
	a.qp_state = IBV_QPS_RTS;
	ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.sgid_index = 1, .hop_limit = 64}};
	ibv_query_gid(ctx, 1, 1, &aa.grh.dgid);
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah || send_self(qp, cq, ah, mr, buf, "before fork")) {
		printf("FAIL before fork\n");
		return 1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		execl("/bin/true", "true", (char *)NULL);
		_exit(127);
	}
	int st;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		printf("FAIL child\n");
		return 1;
	}
	if (send_self(qp, cq, ah, mr, buf, "after fork")) {
		printf("FAIL after fork\n");
		return 1;
	}
	ibv_destroy_qp(qp);
	ibv_destroy_ah(ah);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	printf("ok\n");
	return 0;
}
