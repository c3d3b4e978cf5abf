package afxdp

// WithSGFlag returns o with f as the bind flag that asks for multi-buffer
// AF_XDP in place of XDP_USE_SG: a flag the kernel does not know makes it
// refuse the bind with EINVAL, as a kernel without multi-buffer AF_XDP
// (before Linux 6.6) refuses XDP_USE_SG.
func WithSGFlag(o Options, f uint16) Options {
	o.sgFlag = f
	return o
}
