package afxdp_test

import (
	"testing"

	"github.com/goroce/goroce/internal/leakcheck"
)

// TestMain fails the package's tests when they leave a goroutine or a file
// descriptor behind.
func TestMain(m *testing.M) { leakcheck.Main(m) }
