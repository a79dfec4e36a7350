// Command mcpcancel runs the parts of mcpcancel: `mcpcancel coordinator`,
// `mcpcancel worker`, `mcpcancel version`. Run `mcpcancel help` for the
// commands and `mcpcancel help COMMAND` for a command's flags; every flag
// may also be set as a MCPCANCEL_* environment variable.
package main

import (
	"context"
	"os"

	"github.com/mcpcancel/mcpcancel/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
