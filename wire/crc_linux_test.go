//go:build linux

package wire

import (
	"hash/crc32"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCRCUpdateBounds: crcUpdate reads nothing outside p, which here starts
// right after an inaccessible page or ends right before one (a read there
// faults).
func TestCRCUpdateBounds(t *testing.T) {
	ps := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 3*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Skip(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Mprotect(mem[:ps], unix.PROT_NONE); err != nil {
		t.Skip(err)
	}
	if err := unix.Mprotect(mem[2*ps:], unix.PROT_NONE); err != nil {
		t.Skip(err)
	}
	page := mem[ps : 2*ps]
	for i := range page {
		page[i] = byte(i*13 + 1)
	}
	for n := 0; n <= ps; n++ {
		for _, p := range [][]byte{page[:n], page[ps-n:]} {
			if got, want := crcUpdate(7, p), crc32.Update(7, crc32.IEEETable, p); got != want {
				t.Fatalf("%d bytes: %#x, want %#x", n, got, want)
			}
			if haveCRCFold512 && n >= 64 {
				if got, want := ^crcFold512(^uint32(7), p), crc32.Update(7, crc32.IEEETable, p); got != want {
					t.Fatalf("crcFold512: %d bytes: %#x, want %#x", n, got, want)
				}
			}
		}
	}
}
