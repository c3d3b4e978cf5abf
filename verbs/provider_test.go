package verbs_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

type failing struct{}

func (failing) Name() string                     { return "failing" }
func (failing) Devices() ([]verbs.Device, error) { return nil, errors.New("cannot list") }

func TestRegistry(t *testing.T) {
	ca, cb := pipe.New(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), pipe.Options{})
	a, err := soft.New(soft.Options{Name: "soft0", Conn: ca})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := soft.New(soft.Options{Name: "soft1", Conn: cb})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	var r verbs.Registry
	if _, err := r.Open("soft0"); !errors.Is(err, verbs.ErrNoDevice) {
		t.Fatalf("empty registry: Open = %v, want ErrNoDevice", err)
	}
	if err := r.Register(&verbs.DeviceList{ProviderName: "soft", List: []verbs.Device{a, b}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(&verbs.DeviceList{ProviderName: "soft"}); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Fatalf("second provider named soft: %v, want ErrInvalidAttr", err)
	}
	if err := r.Register(nil); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Fatalf("nil provider: %v, want ErrInvalidAttr", err)
	}
	ds, err := r.Devices()
	if err != nil || len(ds) != 2 || ds[0].Name() != "soft0" || ds[1].Name() != "soft1" {
		t.Fatalf("Devices = %v, %v", ds, err)
	}
	ctx, err := r.Open("soft1")
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Device() != verbs.Device(b) {
		t.Fatalf("Open(soft1) opened %s", ctx.Device().Name())
	}
	if g, err := ctx.QueryGID(1, verbs.DefaultGIDIndex); err != nil || g.Addr() != netip.MustParseAddr("10.0.0.2") {
		t.Fatalf("soft1's GID = %v, %v", g, err)
	}
	if _, err := r.Open("mlx5_0"); !errors.Is(err, verbs.ErrNoDevice) {
		t.Fatalf("Open(mlx5_0) = %v, want ErrNoDevice", err)
	}

	// A provider that cannot list its devices: the others' devices are
	// still found, and the error is reported.
	if err := r.Register(failing{}); err != nil {
		t.Fatal(err)
	}
	if d, p, err := r.Lookup("soft0"); err != nil || d != verbs.Device(a) || p.Name() != "soft" {
		t.Fatalf("Lookup(soft0) = %v, %v, %v", d, p, err)
	}
	if _, err := r.Devices(); err == nil {
		t.Fatal("Devices hid the failing provider's error")
	}
	if _, err := r.Open("rxe0"); !errors.Is(err, verbs.ErrNoDevice) {
		t.Fatalf("Open(rxe0) = %v, want ErrNoDevice", err)
	}
	if got := len(r.Providers()); got != 2 {
		t.Fatalf("%d providers, want 2", got)
	}
}
