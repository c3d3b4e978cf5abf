package afxdp

import "runtime"

// yield lets the other side of a test ring run (two cores are shared).
func yield() { runtime.Gosched() }
