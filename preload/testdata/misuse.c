// misuse.c drives libibverbs' entry points with bad arguments (NULL,
// destroyed objects, wrong masks) under libgoroce-verbs.so: each must fail
// with the errno libibverbs gives, never crash. Prints "ok N" or the checks
// that failed; the exit status is the number of failures.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static int checks, failures;

#define CHECK(name, cond)                                                              \
	do {                                                                           \
		checks++;                                                              \
		if (!(cond)) {                                                         \
			failures++;                                                    \
			printf("FAIL %s (errno %d %s)\n", name, errno, strerror(errno)); \
		}                                                                      \
	} while (0)

// Returns: NULL with errno e.
#define NULLERR(name, call, e) do { errno = 0; void *p_ = (void *)(call); CHECK(name, p_ == NULL && errno == (e)); } while (0)
// Returns the errno itself.
#define RETERR(name, call, e) do { errno = 0; int r_ = (call); CHECK(name, r_ == (e)); } while (0)
// Returns -1 with errno e.
#define NEGERR(name, call, e) do { errno = 0; int r_ = (call); CHECK(name, r_ == -1 && errno == (e)); } while (0)

int main(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	CHECK("device list", l && n == 1);
	if (!l || n < 1)
		return 1;
	NULLERR("get_device_name(NULL)", ibv_get_device_name(NULL), EINVAL);
	NULLERR("open_device(NULL)", ibv_open_device(NULL), ENODEV);
	NULLERR("open_device(bogus)", ibv_open_device((struct ibv_device *)&n), ENODEV);
	NEGERR("close_device(NULL)", ibv_close_device(NULL), EINVAL);

	struct ibv_context *ctx = ibv_open_device(l[0]);
	CHECK("open_device", ctx != NULL);
	if (!ctx)
		return 1;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	union ibv_gid gid;
	RETERR("query_device(NULL)", ibv_query_device(NULL, &da), EINVAL);
	RETERR("query_device(ctx, NULL)", ibv_query_device(ctx, NULL), EINVAL);
	CHECK("query_port(port 9)", ibv_query_port(ctx, 9, &pa) != 0);
	NEGERR("query_gid(index 99)", ibv_query_gid(ctx, 1, 99, &gid), EINVAL);
	NEGERR("query_gid(index -1)", ibv_query_gid(ctx, 1, -1, &gid), EINVAL);
	NULLERR("alloc_pd(NULL)", ibv_alloc_pd(NULL), EINVAL);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[4096];
	NULLERR("reg_mr(NULL pd)", ibv_reg_mr(NULL, buf, sizeof buf, 0), EINVAL);
	NULLERR("reg_mr(NULL addr)", ibv_reg_mr(pd, NULL, sizeof buf, 0), EINVAL);
	NULLERR("reg_mr(length 0)", ibv_reg_mr(pd, buf, 0, 0), EINVAL);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	CHECK("reg_mr", mr != NULL && mr->addr == buf);

	NULLERR("create_comp_channel(NULL)", ibv_create_comp_channel(NULL), EINVAL);
	NULLERR("create_cq(cqe 0)", ibv_create_cq(ctx, 0, NULL, NULL, 0), EINVAL);
	NULLERR("create_cq(bogus channel)", ibv_create_cq(ctx, 16, NULL, (struct ibv_comp_channel *)buf, 0), EINVAL);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	CHECK("create_cq", cq != NULL);
	RETERR("destroy_comp_channel(with a CQ)", ibv_destroy_comp_channel(ch) == -1 ? errno : 0, EBUSY);

	NULLERR("create_qp(NULL attr)", ibv_create_qp(pd, NULL), EINVAL);
	struct ibv_qp_init_attr qa = {.send_cq = NULL, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	NULLERR("create_qp(NULL send_cq)", ibv_create_qp(pd, &qa), EINVAL);
	qa.send_cq = cq;
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK("create_qp", qp != NULL);
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	RETERR("modify_qp(NULL attr)", ibv_modify_qp(qp, NULL, IBV_QP_STATE), EINVAL);
	RETERR("modify_qp(unknown mask bit)", ibv_modify_qp(qp, &at, IBV_QP_STATE | (1 << 29)), EINVAL);
	at.qp_state = IBV_QPS_RTS;
	CHECK("modify_qp(RESET to RTS)", ibv_modify_qp(qp, &at, IBV_QP_STATE) != 0);
	at.qp_state = IBV_QPS_RTR;
	at.ah_attr.is_global = 0;
	RETERR("modify_qp(AV without GRH)", ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_AV), EINVAL);

	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad = NULL;
	CHECK("post_send(RESET QP)", ibv_post_send(qp, &wr, &bad) != 0 && bad == &wr);
	wr.sg_list = NULL;
	bad = NULL;
	RETERR("post_send(NULL sg_list)", ibv_post_send(qp, &wr, &bad), EINVAL);
	CHECK("post_send(NULL sg_list) bad_wr", bad == &wr);
	struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = NULL, .num_sge = 1}, *rbad = NULL;
	RETERR("post_recv(NULL sg_list)", ibv_post_recv(qp, &rwr, &rbad), EINVAL);
	CHECK("post_recv bad_wr", rbad == &rwr);

	// Inline data is copied by the library (from memory with no key): bad
	// addresses and too much of it are refused, the request named.
	char big[512];
	struct ibv_sge isge[2] = {{.addr = (uintptr_t)buf, .length = 8}, {.addr = 0, .length = 8}};
	struct ibv_send_wr iwr = {.wr_id = 3, .sg_list = isge, .num_sge = 2, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_INLINE}, *ibad = NULL;
	RETERR("post_send(inline from address 0)", ibv_post_send(qp, &iwr, &ibad), EINVAL);
	CHECK("post_send(inline from address 0) bad_wr", ibad == &iwr);
	isge[0] = (struct ibv_sge){.addr = (uintptr_t)big, .length = qa.cap.max_inline_data + 1};
	iwr.num_sge = 1;
	ibad = NULL;
	RETERR("post_send(inline past max_inline_data)", ibv_post_send(qp, &iwr, &ibad), EINVAL);
	CHECK("post_send(inline past max_inline_data) bad_wr", ibad == &iwr);

	// The devices' /dev/infiniband files (for programs that look, as UCX):
	// a listed device's is a character device, nothing else is touched.
	struct stat st;
	char path[128];
	snprintf(path, sizeof path, "/dev/infiniband/%s", l[0]->dev_name);
	CHECK("stat(device file)", stat(path, &st) == 0 && S_ISCHR(st.st_mode));
	CHECK("access(device file)", access(path, R_OK | W_OK) == 0);
	NEGERR("stat(another device's file)", stat("/dev/infiniband/uverbs-none", &st), ENOENT);
	NEGERR("access(another device's file)", access("/dev/infiniband/uverbs-none", F_OK), ENOENT);
	const char *volatile nullpath = NULL; // the kernel's EFAULT, not a crash
	NEGERR("stat(NULL)", stat(nullpath, &st), EFAULT);
	NEGERR("access(NULL)", access(nullpath, F_OK), EFAULT);
	CHECK("stat(/)", stat("/", &st) == 0 && S_ISDIR(st.st_mode));

	struct ibv_ah_attr ah = {.is_global = 0, .port_num = 1};
	NULLERR("create_ah(no GRH)", ibv_create_ah(pd, &ah), EINVAL);
	NULLERR("create_srq(NULL attr)", ibv_create_srq(pd, NULL), EINVAL);

	RETERR("dealloc_pd(with QP, MR)", ibv_dealloc_pd(pd), EBUSY);
	RETERR("destroy_cq(with QP)", ibv_destroy_cq(cq), EBUSY);
	RETERR("destroy_qp", ibv_destroy_qp(qp), 0);
	RETERR("destroy_qp(destroyed)", ibv_destroy_qp(qp), EINVAL);
	wr.sg_list = &sge;
	RETERR("post_send(destroyed QP)", ibv_post_send(qp, &wr, &bad), EINVAL);
	RETERR("post_recv(destroyed QP)", ibv_post_recv(qp, &rwr, &rbad), EINVAL);
	RETERR("modify_qp(destroyed QP)", ibv_modify_qp(qp, &at, IBV_QP_STATE), EINVAL);

	struct ibv_wc wc[4];
	RETERR("poll_cq(empty)", ibv_poll_cq(cq, 4, wc), 0);
	RETERR("poll_cq(negative)", ibv_poll_cq(cq, -1, wc), -1);
	RETERR("destroy_cq", ibv_destroy_cq(cq), 0);
	RETERR("poll_cq(destroyed)", ibv_poll_cq(cq, 4, wc), -1);
	RETERR("req_notify_cq(destroyed)", ibv_req_notify_cq(cq, 0), EINVAL);
	RETERR("destroy_cq(destroyed)", ibv_destroy_cq(cq), EINVAL);
	RETERR("destroy_comp_channel", ibv_destroy_comp_channel(ch), 0);
	struct ibv_cq *ecq;
	void *ectx;
	NEGERR("get_cq_event(destroyed channel)", ibv_get_cq_event(ch, &ecq, &ectx), EINVAL);
	NEGERR("get_cq_event(NULL)", ibv_get_cq_event(NULL, &ecq, &ectx), EINVAL);

	RETERR("dereg_mr", ibv_dereg_mr(mr), 0);
	RETERR("dereg_mr(deregistered)", ibv_dereg_mr(mr), EINVAL);
	RETERR("dealloc_pd", ibv_dealloc_pd(pd), 0);
	RETERR("dealloc_pd(deallocated)", ibv_dealloc_pd(pd), EINVAL);
	CHECK("close_device", ibv_close_device(ctx) == 0);
	NULLERR("alloc_pd(closed context)", ibv_alloc_pd(ctx), EINVAL);
	RETERR("query_device(closed context)", ibv_query_device(ctx, &da), EINVAL);
	struct ibv_async_event ev;
	NEGERR("get_async_event(closed context)", ibv_get_async_event(ctx, &ev), EINVAL);
	NEGERR("close_device(closed)", ibv_close_device(ctx), EINVAL);
	ibv_free_device_list(l);
	if (failures == 0)
		printf("ok %d\n", checks);
	return failures;
}
