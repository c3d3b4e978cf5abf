package packetio

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
)

// TestTxFailures: the first packet not sent (by index, whatever the order
// of Add) is the one the TransmitError names, with the count of all.
func TestTxFailures(t *testing.T) {
	pkts := make([]Packet, 4)
	for i := range pkts {
		pkts[i].Addr = netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
	}
	var f TxFailures
	if f.Len() != 0 || f.Err(pkts) != nil {
		t.Fatal("an empty TxFailures reports a failure")
	}
	f.Add(3, ErrTooLarge)
	f.Add(1, syscall.EMSGSIZE)
	var te *TransmitError
	if err := f.Err(pkts); !errors.As(err, &te) || te.Index != 1 || te.Failed != 2 || te.Addr != pkts[1].Addr || !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("err %v (%+v), want packet 1 of 2 failed, EMSGSIZE", err, te)
	}
}
