package plugincmd

// hostView is what Serve needs of the host model: exactly the method of
// *host.Host it calls (Command builds that one and hands it to run).
type hostView interface {
	DeviceWatchPaths() []string // host/vfiodev.go
}
