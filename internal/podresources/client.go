// Package podresources is the client of the kubelet's PodResources v1 API
// that the node daemons share: the NRI plugin asks it what each container
// was allocated, the vGPU device manager which vGPUs pods hold.
package podresources

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Allocation is the device IDs a container holds, by resource name.
type Allocation map[string][]string

// PodAllocations is a pod's allocations by container name.
type PodAllocations map[string]Allocation

// Client talks to the kubelet's PodResources v1 API over its unix socket.
type Client struct {
	socket  string
	conn    *grpc.ClientConn
	client  podresourcesv1.PodResourcesListerClient
	timeout time.Duration
}

// New connects lazily to the socket; timeout bounds each call (default 1 s).
func New(socket string, timeout time.Duration) (*Client, error) {
	// Reconnect within a second of the kubelet coming back (gRPC's default
	// backoff grows to 2 minutes, and creations fail closed meanwhile).
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second}))
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources %s: %w", socket, err)
	}
	if timeout <= 0 {
		timeout = time.Second // well inside the runtime's 2 s per call
	}
	return &Client{socket: socket, conn: conn, client: podresourcesv1.NewPodResourcesListerClient(conn), timeout: timeout}, nil
}

// Close closes the connection.
func (k *Client) Close() error { return k.conn.Close() }

// Get returns the allocations of one pod; a pod the kubelet does not know
// has none.
func (k *Client) Get(ctx context.Context, namespace, name string) (PodAllocations, error) {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	resp, err := k.client.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: name, PodNamespace: namespace})
	switch {
	case err == nil:
		return fromPodResources(resp.GetPodResources()), nil
	case status.Code(err) == codes.Unknown && notFound.MatchString(status.Convert(err).Message()):
		// Not a kubelet pod (created through CRI directly): no allocation.
		return PodAllocations{}, nil
	case status.Code(err) == codes.Unimplemented || strings.Contains(status.Convert(err).Message(), "disabled"):
		// Kubelets with the Get method off: one List instead.
		all, lerr := k.List(ctx)
		if lerr != nil {
			return nil, lerr
		}
		if a, ok := all[namespace+"/"+name]; ok {
			return a, nil
		}
		return PodAllocations{}, nil
	default:
		return nil, fmt.Errorf("kubelet PodResources %s: get pod %s/%s: %w", k.socket, namespace, name, err)
	}
}

// List returns the allocations of every pod, by "namespace/name".
func (k *Client) List(ctx context.Context) (map[string]PodAllocations, error) {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	resp, err := k.client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources %s: list: %w", k.socket, err)
	}
	out := map[string]PodAllocations{}
	for _, p := range resp.GetPodResources() {
		out[p.GetNamespace()+"/"+p.GetName()] = fromPodResources(p)
	}
	return out, nil
}

func fromPodResources(p *podresourcesv1.PodResources) PodAllocations {
	out := PodAllocations{}
	for _, c := range p.GetContainers() {
		a := Allocation{}
		for _, d := range c.GetDevices() {
			a[d.GetResourceName()] = append(a[d.GetResourceName()], d.GetDeviceIds()...)
		}
		out[c.GetName()] = a
	}
	return out
}

// notFound is the kubelet's answer for a pod it does not know.
var notFound = regexp.MustCompile(`^pod .+ in namespace .+ not found$`)
