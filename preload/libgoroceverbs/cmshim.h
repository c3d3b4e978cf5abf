// The rdma_cm side of libgoroce-verbs.so: what cm.go and cm.c share.
#ifndef GOROCE_CMSHIM_H
#define GOROCE_CMSHIM_H

#include <stdint.h>
#include <rdma/rdma_cma.h>

// gr_inaddr is an IPv4 or IPv6 address and port, as the Go side takes them.
struct gr_inaddr {
	uint8_t ip[16]; // IPv4: the first 4 bytes
	int is6;
	uint16_t port; // host order
	int ok;        // 0: no address (NULL, or a family other than AF_INET/AF_INET6)
};

struct gr_inaddr gr_inaddr_of(const struct sockaddr *sa);
void gr_set_addr(struct rdma_cm_id *id, int dst, struct gr_inaddr a);
struct rdma_cm_event *gr_cm_event_new(struct rdma_cm_id *id, struct rdma_cm_id *listen_id, int type, int status,
				      const void *pdata, int plen, int rr, int depth);

void gr_cm_event_free(struct rdma_cm_event *e);

#endif
