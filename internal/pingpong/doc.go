// Package pingpong is rdma-core's ibv_rc_pingpong, ibv_ud_pingpong and
// ibv_srq_pingpong as a program over the verbs API: the same objects,
// exchange (cm's pingpong exchange on TCP 18515; srq_pingpong's 256
// addresses each way), loop and report, so that either side may be
// rdma-core's program. `goroce pingpong` parses the flags and calls Run.
package pingpong
