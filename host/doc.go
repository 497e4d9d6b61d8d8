// Package host is the host model of sandbox-gpu: the only code that reads
// sysfs, /dev and /proc. Every path is derived from injected roots, so the
// same code runs on a real node and on the simulated kernel of package
// hostsim. Scans never change anything; writes go through a Writer.
package host
