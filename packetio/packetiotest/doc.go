// Package packetiotest checks that an implementation of packetio.Conn keeps
// the interface's contract: delivery and order of batches, the lent-buffer
// rules, deadlines, Wake, Close, transmit errors, counters, and that the hot
// paths do not allocate. Each implementation's tests call Run with a function
// that connects two fresh Conns.
package packetiotest
