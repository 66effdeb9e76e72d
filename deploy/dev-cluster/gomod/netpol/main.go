// Command sandkit-netpol runs the NetworkPolicy controller of sigs.k8s.io/kube-network-policies
// on the dev cluster's node as a host process. The upstream command only reads in-cluster
// credentials (it is meant to run as a DaemonSet); the dev cluster has no cluster networking to
// run it in, so this one takes the admin kubeconfig and the node name on the command line.
// Built by deploy/dev-cluster/up.sh (SANDKIT_NETPOL=1) against a patched copy of the module
// (see xtqueue/); started and stopped by up.sh/down.sh like the other daemons.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

func main() { os.Exit(run()) }

func run() int {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster (required)")
	node := flag.String("node-name", "", "the node whose pods are policed (required)")
	queue := flag.Int("nfqueue-id", 100, "netfilter queue the first packet of each connection goes to")
	annotation := flag.String("node-annotation", "", "KEY=VALUE set on the node while this runs")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *node == "" {
		fmt.Fprintln(os.Stderr, "usage: sandkit-netpol --kubeconfig FILE --node-name NODE [--nfqueue-id N] [--node-annotation KEY=VALUE]")
		return 2
	}
	// The cluster's containerd (1.6) has no NRI socket; the only one such a host may have
	// (/var/run/nri/nri.sock) belongs to another containerd (Docker's), whose pods are not ours.
	// An unparsable socket fd makes the NRI stub give up at once; pod IPs come from the API.
	if err := os.Setenv("NRI_PLUGIN_SOCKET", "none"); err != nil {
		klog.Fatal(err)
	}
	// Upstream's command stops (and removes its nftables table) on SIGINT only; down.sh sends
	// SIGTERM.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatalf("kubeconfig %s: %v", *kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		klog.Fatal(err)
	}
	if key, value, ok := strings.Cut(*annotation, "="); ok {
		// Tells clients (the tests) that policy is enforced; removed again on a clean stop.
		if err := annotate(ctx, client, *node, key, &value); err != nil {
			klog.Fatalf("annotating node %s: %v", *node, err)
		}
		defer func() {
			stopping, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := annotate(stopping, client, *node, key, nil); err != nil {
				klog.Errorf("removing the annotation %s of node %s: %v", key, *node, err)
			}
		}()
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	controller, err := networkpolicy.NewController(client,
		factory.Networking().V1().NetworkPolicies(), factory.Core().V1().Namespaces(),
		factory.Core().V1().Pods(), nil, nil, nil, nil,
		networkpolicy.Config{
			QueueID:  *queue,
			NodeName: *node,
			// The DNS/conntrack race it works around is fixed in Linux 6.12; there is no
			// cluster DNS here anyway.
			NetfilterBug1766Fix: false,
		})
	if err != nil {
		klog.Errorf("controller: %v", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx) }()
	factory.Start(ctx.Done())
	// Run returns when ctx ends (after deleting its table) or when it cannot bind the queue.
	if err := <-done; err != nil {
		klog.Errorf("controller stopped: %v", err)
		stop()
		return 1
	}
	return 0
}

// annotate sets (value != nil) or removes the node annotation key.
func annotate(ctx context.Context, client kubernetes.Interface, node, key string, value *string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{key: value}}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
