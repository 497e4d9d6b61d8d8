package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// server is the deviceplugin v1beta1 server of one resource. Devices that
// disappear from a scan stay listed as Unhealthy; devices that come back
// turn Healthy again. A device that failed its check at Allocate stays
// Unhealthy until a scan finds it and its check passes.
type server struct {
	pluginapi.UnimplementedDevicePluginServer

	name   string
	socket string

	mu       sync.Mutex
	devices  map[string]*entry
	allocate func([]Device) *pluginapi.ContainerAllocateResponse
	changed  chan struct{} // closed and replaced on every change
	grpc     *grpc.Server
	ln       net.Listener // the current listener (tests close it)
	up       bool         // serving: started, and its listener has not failed
	startErr error        // why the last start failed, or why serving stopped
	gen      int          // listener generation, bumped by every start
	regKey   string       // kubelet instance and generation last registered with
	streams  atomic.Int32 // open ListAndWatch streams
	allocs   *prometheus.CounterVec
	onDown   func() // called when serving stops by itself (the listener failed)
}

type entry struct {
	dev     Device
	healthy bool
	// failed: the device failed its check at Allocate; scans check it
	// again before it turns Healthy.
	failed bool
}

func newServer(name, socket string, allocs *prometheus.CounterVec, onDown func()) *server {
	return &server{name: name, socket: socket, devices: map[string]*entry{}, changed: make(chan struct{}), allocs: allocs, onDown: onDown}
}

// counts returns how many devices are healthy and unhealthy.
func (s *server) counts() (healthy, unhealthy int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.devices {
		if e.healthy {
			healthy++
		} else {
			unhealthy++
		}
	}
	return healthy, unhealthy
}

// update replaces the device set with a scan's result and wakes the
// ListAndWatch streams when anything a kubelet sees changed.
func (s *server) update(res Resource) bool {
	failing := s.recheck(res.Devices)
	s.mu.Lock()
	defer s.mu.Unlock()
	if res.Allocate != nil {
		s.allocate = res.Allocate
	}
	changed := false
	seen := make(map[string]bool, len(res.Devices))
	for _, d := range res.Devices {
		seen[d.ID] = true
		e, ok := s.devices[d.ID]
		if !ok {
			s.devices[d.ID] = &entry{dev: d, healthy: true}
			changed = true
			continue
		}
		healthy := !failing[d.ID]
		if e.healthy != healthy || e.dev.NUMA != d.NUMA {
			changed = true
		}
		e.dev, e.healthy, e.failed = d, healthy, !healthy
	}
	for id, e := range s.devices {
		if !seen[id] && e.healthy {
			e.healthy, changed = false, true
		}
	}
	if changed {
		s.notifyLocked()
	}
	return changed
}

// recheck runs the check of each scanned device that failed one at
// Allocate (outside the lock: a check reads the host) and returns those
// that still fail.
func (s *server) recheck(devs []Device) map[string]bool {
	s.mu.Lock()
	var again []Device
	for _, d := range devs {
		if e, ok := s.devices[d.ID]; ok && e.failed && d.Check != nil {
			again = append(again, d)
		}
	}
	s.mu.Unlock()
	failing := map[string]bool{}
	for _, d := range again {
		if d.Check() != nil {
			failing[d.ID] = true
		}
	}
	return failing
}

// markUnhealthy flags a device found unusable at Allocate time.
func (s *server) markUnhealthy(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.devices[id]; ok {
		e.failed = true
		if e.healthy {
			e.healthy = false
			s.notifyLocked()
		}
	}
}

func (s *server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// snapshot returns the kubelet's view and the channel that closes on the
// next change.
func (s *server) snapshot() (*pluginapi.ListAndWatchResponse, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Sorted(maps.Keys(s.devices))
	resp := &pluginapi.ListAndWatchResponse{Devices: make([]*pluginapi.Device, 0, len(ids))}
	for _, id := range ids {
		e := s.devices[id]
		d := &pluginapi.Device{ID: id, Health: pluginapi.Unhealthy}
		if e.healthy {
			d.Health = pluginapi.Healthy
		}
		if e.dev.NUMA >= 0 {
			d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(e.dev.NUMA)}}}
		}
		resp.Devices = append(resp.Devices, d)
	}
	return resp, s.changed
}

// start listens on the socket (replacing a stale one) and serves. When
// the listener fails later (closed, its socket unusable), the server is
// down and onDown is called; the manager restarts it.
func (s *server) start() error {
	err := s.listen()
	if err != nil {
		s.mu.Lock()
		s.up, s.startErr = false, err
		s.mu.Unlock()
	}
	return err
}

func (s *server) listen() error {
	if err := os.Remove(s.socket); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("resource %s: remove stale socket %s: %w", s.name, s.socket, err)
	}
	ln, err := net.Listen("unix", s.socket)
	if err != nil {
		return fmt.Errorf("resource %s: listen on %s: %w", s.name, s.socket, err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, s)
	s.mu.Lock()
	s.grpc, s.ln, s.up, s.startErr = g, ln, true, nil
	s.gen++
	s.mu.Unlock()
	go func() {
		err := g.Serve(ln)
		s.mu.Lock()
		mine := s.grpc == g // not stopped or replaced on purpose
		if mine {
			if err == nil {
				err = errors.New("stopped serving")
			}
			s.up, s.startErr = false, fmt.Errorf("resource %s: serving on %s: %w", s.name, s.socket, err)
		}
		s.mu.Unlock()
		if mine && s.onDown != nil {
			s.onDown()
		}
	}()
	return nil
}

// serving reports whether the server is up, and why not.
func (s *server) serving() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up, s.startErr
}

// stop ends the server and every ListAndWatch stream.
func (s *server) stop() {
	s.mu.Lock()
	g := s.grpc
	s.grpc, s.ln, s.up = nil, nil, false
	s.mu.Unlock()
	if g != nil {
		g.Stop()
	}
}

// GetDevicePluginOptions implements pluginapi.DevicePluginServer.
func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the device list now and after every change, until
// the client's stream ends or the server stops.
func (s *server) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	s.streams.Add(1)
	defer s.streams.Add(-1)
	for {
		resp, changed := s.snapshot()
		if err := stream.Send(resp); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// Allocate validates the requested devices and builds a fresh response per
// container: unknown, unhealthy or no longer usable devices are refused by
// name.
func (s *server) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(req.ContainerRequests))}
	for _, creq := range req.ContainerRequests {
		devs, allocate, err := s.lookup(creq.DevicesIds)
		s.allocs.WithLabelValues(s.name, result(err == nil, "ok", "refused")).Inc()
		if err != nil {
			return nil, err
		}
		var cr *pluginapi.ContainerAllocateResponse
		if allocate != nil {
			cr = allocate(devs)
		}
		if cr == nil {
			cr = &pluginapi.ContainerAllocateResponse{}
		}
		seen := map[string]bool{}
		for _, d := range devs {
			for _, spec := range d.Specs {
				if !seen[spec.HostPath] {
					seen[spec.HostPath] = true
					cr.Devices = append(cr.Devices, &pluginapi.DeviceSpec{ContainerPath: spec.ContainerPath, HostPath: spec.HostPath, Permissions: spec.Permissions})
				}
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

func (s *server) lookup(ids []string) ([]Device, func([]Device) *pluginapi.ContainerAllocateResponse, error) {
	s.mu.Lock()
	allocate := s.allocate
	devs := make([]Device, 0, len(ids))
	var unknown, unhealthy []string
	for _, id := range ids {
		e, ok := s.devices[id]
		switch {
		case !ok:
			unknown = append(unknown, id)
		case !e.healthy:
			unhealthy = append(unhealthy, id)
		default:
			devs = append(devs, e.dev)
		}
	}
	s.mu.Unlock()
	if len(unknown) > 0 {
		return nil, nil, status.Errorf(codes.InvalidArgument, "resource %s: unknown devices %s", s.name, strings.Join(unknown, ", "))
	}
	for _, d := range devs {
		if d.Check == nil {
			continue
		}
		if err := d.Check(); err != nil {
			s.markUnhealthy(d.ID)
			unhealthy = append(unhealthy, fmt.Sprintf("%s (%v)", d.ID, err))
		}
	}
	if len(unhealthy) > 0 {
		return nil, nil, status.Errorf(codes.FailedPrecondition, "resource %s: unhealthy devices %s", s.name, strings.Join(unhealthy, ", "))
	}
	return devs, allocate, nil
}

// GetPreferredAllocation keeps a request on one NUMA node when it can.
func (s *server) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	s.mu.Lock()
	numa := make(map[string]int, len(s.devices))
	for id, e := range s.devices {
		numa[id] = e.dev.NUMA
	}
	s.mu.Unlock()
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		ids := preferNUMA(c.AvailableDeviceIDs, c.MustIncludeDeviceIDs, int(c.AllocationSize), numa)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// PreStartContainer is not needed (not requested in the options).
func (s *server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
