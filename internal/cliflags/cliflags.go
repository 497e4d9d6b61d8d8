// Package cliflags is the flag parsing every command shares: errors go to
// the caller, and -h/--help prints the usage to stdout (so that --help exits
// 0, as the contract wants).
package cliflags

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// Parse parses args with fs. On -h or --help it prints "Usage of <name>:"
// and the flags to stdout and returns flag.ErrHelp.
func Parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage of %s:\n", fs.Name())
		fs.SetOutput(stdout)
		fs.PrintDefaults()
	}
	return err
}
