// Package networkpolicy: this file is copied into the patched kube-network-policies package by
// deploy/dev-cluster/up.sh (build_netpol); it sits in its own directory here only so that
// `go mod tidy` keeps its imports.
//
// kube-network-policies hands the first packet of a connection to userspace with the nftables
// `queue` expression (nft_queue, CONFIG_NFT_QUEUE), which some kernels lack (these Firecracker
// VMs' 6.18 has CONFIG_NFT_QUEUE unset; `nft ... queue` fails with "No such file or
// directory"). The xtables NFQUEUE target (CONFIG_NETFILTER_XT_TARGET_NFQUEUE) does the same
// through nft_compat, as iptables-nft's `-j NFQUEUE` does, and is present where iptables is.
// The patch replaces each `queue` expression in the controller's rules with sandkitXTQueue(queue).
package networkpolicy

import (
	"encoding/binary"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
)

// xt_NFQ_info_v3.flags
const xtNFQFlagBypass = 0x01

// sandkitXTQueue is the xtables NFQUEUE target (revision 3) that queues to q.Num, with
// "bypass" (accept when nothing listens) when q has it.
func sandkitXTQueue(q *expr.Queue) expr.Any {
	// struct xt_NFQ_info_v3 { __u16 queuenum; __u16 queues_total; __u16 flags; }, padded to 8.
	info := make([]byte, 8)
	binary.NativeEndian.PutUint16(info[0:], q.Num)
	binary.NativeEndian.PutUint16(info[2:], 1)
	if q.Flag&expr.QueueFlagBypass != 0 {
		binary.NativeEndian.PutUint16(info[4:], xtNFQFlagBypass)
	}
	payload := xt.Unknown(info)
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &payload}
}
