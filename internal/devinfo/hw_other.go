//go:build !(linux && cgo && ibverbs)

package devinfo

import "github.com/goroce/goroce/verbs"

// hwProviders are the providers of the devices other than the soft one that
// this build can open: none without -tags ibverbs.
func hwProviders() []verbs.Provider { return nil }

// GIDType names the type of a GID table entry as ibv_devinfo prints it: soft
// devices' GIDs are RoCE v2.
func GIDType(verbs.Context, uint8, int) string { return "RoCE v2" }
