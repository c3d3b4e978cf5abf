//go:build linux && cgo && ibverbs

package main

/*
#include <stdlib.h>
void gr_profile_atexit(void); // profile.c
*/
import "C"

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// envProfile names the files the library writes a Go CPU profile of each
// process it is loaded in to (its verbs, the soft engine, the packet path),
// from the library's load to the program's exit: PATH.PID, which go tool
// pprof reads. (A launcher such as timeout, in LD_PRELOAD's reach, writes
// its own.)
const envProfile = "GOROCE_CPUPROFILE"

var profileFile *os.File

func init() {
	p := os.Getenv(envProfile)
	if p == "" {
		return
	}
	f, err := os.Create(fmt.Sprintf("%s.%d", p, os.Getpid()))
	if err != nil {
		warn("%s: %v", envProfile, err)
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		warn("%s: %v", envProfile, err)
		f.Close()
		return
	}
	profileFile = f
	C.atexit((*[0]byte)(C.gr_profile_atexit))
}

// gr_profile_stop ends the profile and writes it out (at the program's exit).
//
//export gr_profile_stop
func gr_profile_stop() {
	if profileFile == nil {
		return
	}
	pprof.StopCPUProfile()
	profileFile.Close()
	profileFile = nil
}
