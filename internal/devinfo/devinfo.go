// Package devinfo opens the RDMA device a goroce command names and prints
// RDMA devices as rdma-core's ibv_devinfo and ibv_devices do.
//
// Write prints a device for `goroce devinfo`: its attributes, its ports
// and, verbosely, its limits and GID table (each GID's type named by
// GIDType); WriteNames prints ibv_devinfo -l's list and WriteDevices
// ibv_devices' table of names and node GUIDs.
//
// Soft says which soft device a command opens (address, packet path, pcap
// file); Soft.OpenDevice and Soft.OpenContext open the device -d names: a
// libibverbs device in a build with -tags ibverbs (OpenHW, HWDevices), else
// the soft device SoftName. Soft.List gathers what goroce devices and
// goroce devinfo list (Listing), and Soft.OpenPair opens the two devices
// of goroce bench --loopback.
package devinfo

import (
	"fmt"
	"io"
	"strings"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// Write prints a device as ibv_devinfo's print_hca_cap does, with the
// attributes a soft device has: every port, or port when it is not 0;
// verbose adds the limits and the GID table, each GID's type named by
// gidType.
func Write(w io.Writer, dev verbs.Device, port uint8, verbose bool, gidType func(ctx verbs.Context, port uint8, index int) string) error {
	ctx, err := dev.Open()
	if err != nil {
		return err
	}
	defer ctx.Close()
	da, err := ctx.QueryDevice()
	if err != nil {
		return err
	}
	if port != 0 && int(port) > da.PhysPortCnt {
		return fmt.Errorf("invalid port %d requested for device %s", port, dev.Name())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "hca_id:\t%s\n", dev.Name())
	fmt.Fprintf(&b, "\ttransport:\t\t\t%s (%d)\n", "InfiniBand", 0)
	if da.FWVer != "" {
		fmt.Fprintf(&b, "\tfw_ver:\t\t\t\t%s\n", da.FWVer)
	}
	fmt.Fprintf(&b, "\tnode_guid:\t\t\t%s\n", GUIDString(da.NodeGUID))
	fmt.Fprintf(&b, "\tsys_image_guid:\t\t\t%s\n", GUIDString(da.SysImageGUID))
	fmt.Fprintf(&b, "\tvendor_id:\t\t\t0x%04x\n", da.VendorID)
	fmt.Fprintf(&b, "\tvendor_part_id:\t\t\t%d\n", da.VendorPartID)
	fmt.Fprintf(&b, "\thw_ver:\t\t\t\t0x%X\n", da.HWVer)
	fmt.Fprintf(&b, "\tphys_port_cnt:\t\t\t%d\n", da.PhysPortCnt)
	if sd, ok := dev.(*soft.Device); ok && sd.Path() != "" {
		fmt.Fprintf(&b, "\tpacket_path:\t\t\t%s\n", sd.Path())
	}
	if verbose {
		fmt.Fprintf(&b, "\tmax_mr_size:\t\t\t0x%x\n", da.MaxMRSize)
		fmt.Fprintf(&b, "\tmax_qp:\t\t\t\t%d\n", da.MaxQP)
		fmt.Fprintf(&b, "\tmax_qp_wr:\t\t\t%d\n", da.MaxQPWR)
		fmt.Fprintf(&b, "\tmax_sge:\t\t\t%d\n", da.MaxSGE)
		fmt.Fprintf(&b, "\tmax_cq:\t\t\t\t%d\n", da.MaxCQ)
		fmt.Fprintf(&b, "\tmax_cqe:\t\t\t%d\n", da.MaxCQE)
		fmt.Fprintf(&b, "\tmax_mr:\t\t\t\t%d\n", da.MaxMR)
		fmt.Fprintf(&b, "\tmax_pd:\t\t\t\t%d\n", da.MaxPD)
		fmt.Fprintf(&b, "\tmax_qp_rd_atom:\t\t\t%d\n", da.MaxQPRdAtom)
		fmt.Fprintf(&b, "\tmax_qp_init_rd_atom:\t\t%d\n", da.MaxQPInitRdAtom)
		fmt.Fprintf(&b, "\tatomic_cap:\t\t\t%s (%d)\n", atomicCapString(da.AtomicCap), da.AtomicCap)
		fmt.Fprintf(&b, "\tmax_srq:\t\t\t%d\n", da.MaxSRQ)
		if da.MaxSRQ != 0 {
			fmt.Fprintf(&b, "\tmax_srq_wr:\t\t\t%d\n", da.MaxSRQWR)
		}
	}
	for p := 1; p <= da.PhysPortCnt; p++ {
		if port != 0 && p != int(port) {
			continue
		}
		pa, err := ctx.QueryPort(uint8(p))
		if err != nil {
			return fmt.Errorf("failed to query port %d props: %w", p, err)
		}
		fmt.Fprintf(&b, "\t\tport:\t%d\n", p)
		fmt.Fprintf(&b, "\t\t\tstate:\t\t\t%s (%d)\n", pa.State, pa.State)
		fmt.Fprintf(&b, "\t\t\tmax_mtu:\t\t%s (%d)\n", mtuString(pa.MaxMTU), pa.MaxMTU)
		fmt.Fprintf(&b, "\t\t\tactive_mtu:\t\t%s (%d)\n", mtuString(pa.ActiveMTU), pa.ActiveMTU)
		fmt.Fprintf(&b, "\t\t\tsm_lid:\t\t\t%d\n", 0)
		fmt.Fprintf(&b, "\t\t\tport_lid:\t\t%d\n", pa.LID)
		fmt.Fprintf(&b, "\t\t\tport_lmc:\t\t0x%02x\n", 0)
		fmt.Fprintf(&b, "\t\t\tlink_layer:\t\t%s\n", pa.LinkLayer)
		if verbose {
			fmt.Fprintf(&b, "\t\t\tpkey_tbl_len:\t\t%d\n", pa.PKeyTblLen)
			fmt.Fprintf(&b, "\t\t\tgid_tbl_len:\t\t%d\n", pa.GIDTblLen)
			for i := 0; i < pa.GIDTblLen; i++ {
				g, err := ctx.QueryGID(uint8(p), i)
				if err != nil {
					return fmt.Errorf("failed to query gid to port %d, index %d: %w", p, i, err)
				}
				var zero [8]byte
				if [8]byte(g[8:]) == zero {
					continue // ibv_devinfo skips null GIDs
				}
				fmt.Fprintf(&b, "\t\t\tGID[%3d]:\t\t%s, %s\n", i, cm.FormatGID(g), gidType(ctx, uint8(p), i))
			}
		}
		b.WriteString("\n")
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// GUIDString formats a GUID as ibv_devinfo does: four groups of four hex
// digits.
func GUIDString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48&0xffff, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

func mtuString(m verbs.MTU) string {
	if m.Bytes() == 0 {
		return "invalid MTU"
	}
	return m.String()
}

func atomicCapString(c int) string {
	switch c {
	case 0:
		return "ATOMIC_NONE"
	case 1:
		return "ATOMIC_HCA"
	case 2:
		return "ATOMIC_GLOB"
	}
	return "invalid atomic capability"
}
