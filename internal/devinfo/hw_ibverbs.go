//go:build linux && cgo && ibverbs

package devinfo

import (
	"github.com/goroce/goroce/provider/ibverbs"
	"github.com/goroce/goroce/verbs"
)

// hwProviders are the providers of the devices other than the soft one that
// this build can open: libibverbs' (built with -tags ibverbs).
func hwProviders() []verbs.Provider { return []verbs.Provider{ibverbs.Provider{}} }

// GIDType names the type of a GID table entry as ibv_devinfo prints it:
// libibverbs' devices report theirs; soft devices' GIDs are RoCE v2.
func GIDType(ctx verbs.Context, port uint8, index int) string {
	if c, ok := ctx.(*ibverbs.Context); ok {
		if e, err := c.QueryGIDEntry(port, index); err == nil {
			return e.Type.String()
		}
	}
	return "RoCE v2"
}
