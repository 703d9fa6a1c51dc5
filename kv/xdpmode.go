package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// XDPMode says how Attach puts kv_xdp on the interface (--xdp-mode).
type XDPMode string

// XDP attach modes.
const (
	// XDPAuto is the default: generic XDP on a veth, native elsewhere when
	// the driver supports it (else generic). On a veth, native XDP_TX
	// delivers a reply only when the peer runs an XDP program of its own;
	// the peer usually sits in a container's namespace, where its program
	// may be missing or go away, so auto never bets the replies on it.
	XDPAuto XDPMode = "auto"
	// XDPNative is driver mode, with no fallback. On a veth, check the peer
	// first (InspectLink, VethPeer.Delivers): `cistern kv serve` refuses
	// when the peer runs no XDP program.
	XDPNative XDPMode = "native"
	// XDPGeneric is the kernel's skb-based XDP: slower, but its XDP_TX
	// goes out through the ordinary transmit path, so it always delivers.
	XDPGeneric XDPMode = "generic"
)

// XDPModes are the values ParseXDPMode accepts.
func XDPModes() []string { return []string{string(XDPAuto), string(XDPNative), string(XDPGeneric)} }

// ParseXDPMode checks a --xdp-mode value ("" is auto).
func ParseXDPMode(s string) (XDPMode, error) {
	switch m := XDPMode(s); m {
	case "":
		return XDPAuto, nil
	case XDPAuto, XDPNative, XDPGeneric:
		return m, nil
	}
	return "", fmt.Errorf("--xdp-mode %q: want %s", s, strings.Join(XDPModes(), ", "))
}

// LinkInfo is what Kerby-KV needs to know about the interface it serves on.
type LinkInfo struct {
	Ifindex int
	Name    string
	Kind    string    // rtnetlink kind: "veth", "bridge", … ("" for a plain NIC)
	Peer    *VethPeer // the other end, when Kind is "veth"
}

// VethPeer is the other end of a veth, possibly in another namespace.
type VethPeer struct {
	Ifindex int // in the peer's own namespace
	NetnsID int // -1: the same namespace as ours
	// Err is why the peer's attributes could not be read (then XDP is unknown).
	Err error
	// XDPAttached is the peer's IFLA_XDP_ATTACHED (0 none, 1 driver,
	// 2 generic, 3 offloaded, 4 several); NativeProgID the program in
	// driver mode, 0 if none.
	XDPAttached  uint8
	NativeProgID uint32
}

// Delivers reports whether native XDP_TX replies on our end reach the peer's
// stack: the veth driver hands XDP_TX frames to the peer's NAPI ring, which
// exists only while the peer runs an XDP program in driver mode. With none,
// the frames are dropped (counted in our rx_queue_N_xdp_tx_errors); with
// only GRO enabled on the peer (NAPI without XDP), Linux 6.18 counted them
// as sent and the client still received nothing (measured). Unknown (Err set)
// counts as not delivering.
func (p *VethPeer) Delivers() bool { return p.Err == nil && p.NativeProgID != 0 }

// String describes the peer for messages.
func (p *VethPeer) String() string {
	where := "in this namespace"
	if p.NetnsID >= 0 {
		where = fmt.Sprintf("in namespace id %d", p.NetnsID)
	}
	return fmt.Sprintf("ifindex %d %s", p.Ifindex, where)
}

// XDP_ATTACHED_* of include/uapi/linux/if_link.h.
const (
	xdpAttachedNone  = 0
	xdpAttachedDrv   = 1
	xdpAttachedMulti = 4
)

// InspectLink reads ifindex (in the calling thread's network namespace)
// and, for a veth, its peer's XDP attachment, through rtnetlink: IFLA_LINK
// and IFLA_LINK_NETNSID name the peer, and RTM_GETLINK with
// IFLA_TARGET_NETNSID reads it in its own namespace. A peer that cannot be
// read is returned with Err set, not as an error.
func InspectLink(ifindex int) (LinkInfo, error) {
	a, err := getLink(ifindex, -1)
	if err != nil {
		return LinkInfo{}, fmt.Errorf("read interface %d: %w", ifindex, err)
	}
	li := LinkInfo{Ifindex: ifindex, Name: a.name, Kind: a.kind}
	if a.kind != "veth" {
		return li, nil
	}
	p := &VethPeer{Ifindex: a.link, NetnsID: a.linkNetnsID}
	li.Peer = p
	if a.link == 0 {
		p.Err = errors.New("the kernel did not name the veth's peer")
		return li, nil
	}
	pa, err := getLink(a.link, a.linkNetnsID)
	if err != nil {
		p.Err = err
		return li, nil
	}
	p.XDPAttached, p.NativeProgID = pa.xdpAttached, pa.xdpDrvProg
	return li, nil
}

type linkAttrs struct {
	name        string
	kind        string
	link        int // IFLA_LINK
	linkNetnsID int // IFLA_LINK_NETNSID, -1 when absent
	xdpAttached uint8
	xdpDrvProg  uint32
}

// getLink is RTM_GETLINK of one interface, in namespace nsid (-1: ours).
func getLink(ifindex, nsid int) (linkAttrs, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(ifindex)
	req.AddData(msg)
	if nsid >= 0 {
		req.AddData(nl.NewRtAttr(unix.IFLA_TARGET_NETNSID, nl.Uint32Attr(uint32(nsid))))
	}
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		return linkAttrs{}, err
	}
	if len(msgs) != 1 {
		return linkAttrs{}, fmt.Errorf("RTM_GETLINK of %d: %d answers", ifindex, len(msgs))
	}
	return parseLink(msgs[0])
}

func parseLink(m []byte) (linkAttrs, error) {
	a := linkAttrs{linkNetnsID: -1}
	hdr := nl.DeserializeIfInfomsg(m)
	attrs, err := nl.ParseRouteAttr(m[hdr.Len():])
	if err != nil {
		return a, err
	}
	u32 := func(b []byte) uint32 {
		if len(b) < 4 {
			return 0
		}
		return binary.NativeEndian.Uint32(b)
	}
	for _, at := range attrs {
		switch at.Attr.Type & nl.NLA_TYPE_MASK {
		case unix.IFLA_IFNAME:
			a.name = strings.TrimRight(string(at.Value), "\x00")
		case unix.IFLA_LINK:
			a.link = int(u32(at.Value))
		case unix.IFLA_LINK_NETNSID:
			a.linkNetnsID = int(int32(u32(at.Value)))
		case unix.IFLA_LINKINFO:
			for _, in := range nested(at.Value) {
				if in.Attr.Type&nl.NLA_TYPE_MASK == unix.IFLA_INFO_KIND {
					a.kind = strings.TrimRight(string(in.Value), "\x00")
				}
			}
		case unix.IFLA_XDP:
			var progID, drvID uint32
			for _, in := range nested(at.Value) {
				switch in.Attr.Type & nl.NLA_TYPE_MASK {
				case unix.IFLA_XDP_ATTACHED:
					if len(in.Value) > 0 {
						a.xdpAttached = in.Value[0]
					}
				case unix.IFLA_XDP_PROG_ID:
					progID = u32(in.Value)
				case unix.IFLA_XDP_DRV_PROG_ID:
					drvID = u32(in.Value)
				}
			}
			switch a.xdpAttached {
			case xdpAttachedDrv:
				a.xdpDrvProg = progID
			case xdpAttachedMulti:
				a.xdpDrvProg = drvID
			}
		}
	}
	return a, nil
}

func nested(b []byte) []syscall.NetlinkRouteAttr {
	attrs, _ := nl.ParseRouteAttr(b)
	return attrs
}
