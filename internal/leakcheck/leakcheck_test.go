package leakcheck

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

// TestCheckFindsLeaks leaks a goroutine and a descriptor on purpose and
// sees Check report both, then ends them and sees it pass.
func TestCheckFindsLeaks(t *testing.T) {
	before := FDs()
	stop := make(chan struct{})
	go leaky(stop)
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	err = Check(before, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "leaky") || !strings.Contains(err.Error(), os.Args[0]) {
		t.Errorf("Check with a leaked goroutine and file: %v", err)
	}
	close(stop)
	f.Close()
	if err := Check(before, 2*time.Second); err != nil {
		t.Errorf("Check after cleaning up: %v", err)
	}
}

func leaky(stop chan struct{}) { <-stop }
