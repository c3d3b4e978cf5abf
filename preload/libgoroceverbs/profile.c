//go:build linux && cgo && ibverbs

#include "_cgo_export.h"

// gr_profile_atexit writes GOROCE_CPUPROFILE's profile when the program exits.
void gr_profile_atexit(void) { gr_profile_stop(); }
