// Command mcpcancel is the composition root of mcpcancel: one binary
// whose subcommands wire the components together and run them
// (`mcpcancel dev`, `gateway`, `coordinator`, `worker`) or run a client
// of them (`call`, `calls`, `audit`, `cancel`, `tools`, `console`, from
// internal/clientcmd). Run `mcpcancel help` for the commands and
// `mcpcancel help COMMAND` for a command's flags; every flag may also be
// set as a MCPCANCEL_* environment variable, and those of dev, gateway,
// coordinator and worker in a --config file (docs/config.md).
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
