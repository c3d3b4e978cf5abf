package verbs

import (
	"fmt"
	"sync"
)

// Provider is a source of RDMA devices: the soft provider's devices, or the
// devices libibverbs finds (provider/ibverbs).
type Provider interface {
	// Name names the provider ("soft", "ibverbs").
	Name() string
	// Devices lists the devices the provider has now.
	Devices() ([]Device, error)
}

// DeviceList is a Provider over a fixed list of devices. The soft provider's
// devices are made with soft.New from options (a packet path, an address)
// and are not discoverable: a program lists the ones it made here to put
// them beside those of other providers in a Registry.
type DeviceList struct {
	ProviderName string
	List         []Device
}

// Name returns ProviderName.
func (l *DeviceList) Name() string { return l.ProviderName }

// Devices returns List.
func (l *DeviceList) Devices() ([]Device, error) { return l.List, nil }

// Registry is a set of providers and the way to find a device by name among
// them, as ibv_get_device_list finds devices among libibverbs' drivers. A
// program builds its own (there is no package-level registry): it registers
// the providers it was built with, then opens devices by name. The zero
// Registry is empty and ready to use; it is safe for concurrent use.
type Registry struct {
	mu        sync.Mutex
	providers []Provider
}

// Register adds p. Two providers of the same name are refused.
func (r *Registry) Register(p Provider) error {
	if p == nil {
		return fmt.Errorf("verbs: register a nil provider: %w", ErrInvalidAttr)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range r.providers {
		if q.Name() == p.Name() {
			return fmt.Errorf("verbs: provider %q registered twice: %w", p.Name(), ErrInvalidAttr)
		}
	}
	r.providers = append(r.providers, p)
	return nil
}

// Providers returns the registered providers, in registration order.
func (r *Registry) Providers() []Provider {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Provider(nil), r.providers...)
}

// Devices lists the devices of every provider, in registration order. A
// provider that fails to list its devices makes Devices return the devices
// found so far and the error.
func (r *Registry) Devices() ([]Device, error) {
	var out []Device
	for _, p := range r.Providers() {
		ds, err := p.Devices()
		if err != nil {
			return out, fmt.Errorf("verbs: provider %s: %w", p.Name(), err)
		}
		out = append(out, ds...)
	}
	return out, nil
}

// Lookup returns the device called name and its provider. The error wraps
// ErrNoDevice when no provider has it.
func (r *Registry) Lookup(name string) (Device, Provider, error) {
	var errs []error
	for _, p := range r.Providers() {
		ds, err := p.Devices()
		if err != nil {
			errs = append(errs, fmt.Errorf("provider %s: %w", p.Name(), err))
			continue
		}
		for _, d := range ds {
			if d.Name() == name {
				return d, p, nil
			}
		}
	}
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("verbs: device %q: %w (%v)", name, ErrNoDevice, errs)
	}
	return nil, nil, fmt.Errorf("verbs: device %q: %w", name, ErrNoDevice)
}

// Open opens the device called name (ibv_open_device).
func (r *Registry) Open(name string) (Context, error) {
	d, _, err := r.Lookup(name)
	if err != nil {
		return nil, err
	}
	return d.Open()
}
