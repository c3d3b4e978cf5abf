// Package bench is the measurement behind `goroce bench`: perftest's
// benchmarks (ib_send_bw, ib_write_bw, ib_read_bw, ib_atomic_bw, ib_send_lat,
// ib_write_lat, ib_read_lat, ib_atomic_lat) over any verbs device, with
// perftest's out-of-band exchange (package cm/perftest) in each program's own
// order, so that either side may be perftest.
//
// Run performs one side of a test: it sets up a PD, one MR, a CQ and RC QPs
// as perftest does, exchanges versions, buffer sizes, MTU and keys, connects
// the QPs (RTR: path MTU, max_dest_rd_atomic = out_reads, min_rnr_timer 12;
// RTS: timeout 14, retry_cnt 7, rnr_retry 7, max_rd_atomic = the peer's
// out_reads), runs the traffic and returns perftest's figures:
//
//   - bandwidth: the average over the run (first post to last completion)
//     and the peak (the best average over any window from a post to a
//     signaled completion, as print_report_bw finds it; on long runs the
//     windows' starts are sampled), in MB/sec (2^20 bytes) or Gb/sec, and the
//     message rate. The server of a WRITE, READ or atomic test measures
//     nothing and reports what the client sends it, as perftest does.
//   - latency: half the round trip of SEND and WRITE ping-pongs, the whole
//     round trip of READs and atomics, sorted, the two largest dropped
//     (LAT_MEASURE_TAIL): minimum, maximum, median (t_typical), average,
//     standard deviation and the 99 % and 99.9 % percentiles at perftest's
//     indices, plus the 50 % percentile.
//
// Memory layout, as perftest's: one buffer of 2 x QPs x BUFF_SIZE bytes
// (BUFF_SIZE = max(size, cycle_buffer)); QP i sends from slot i and offers
// slot QPs+i to the peer. Messages no larger than half the cycle buffer
// advance through it by INC(size) = size rounded up to the cache line, local
// and remote address alike; WRITE latency carries the iteration count in the
// last byte of each message, which the receiver polls.
//
// Data verification (Options.Verify, goroce against goroce): WRITE and READ
// sources are filled with a known pattern and the target regions checked
// after the run, every byte the test wrote or read; SEND messages go out from
// the pattern and every received message is checked (length and bytes) into a
// receive slot of its own that is cleared before it is posted again.
//
// RunSide runs one side as `goroce bench` does: it connects to the peer (a
// TCP exchange, or rdma_cm with Side.CM), runs the test and prints the
// report (WriteReport, or WriteJSON); RunBaselineSide does the same for the
// raw-UDP baseline (Baseline), and RunLoopback runs both sides in one
// process on two devices.
//
// On a soft device Run also returns what its congestion control did
// (Outcome.Congestion): the growth of the device's counters over the run
// (retransmissions, timeouts, NAKs, tail probes, CNPs, window cuts,
// CE-marked packets, receive drops) and the first QP's final window and
// round trip; WriteCongestion prints them after perftest's table, which
// stays as perftest prints it.
package bench
