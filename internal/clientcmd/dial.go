package clientcmd

import (
	"google.golang.org/grpc"

	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/dial"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

// dialCoordinator dials the coordinator as an operator: with files (an
// admin certificate) if they are given, in plaintext if not.
func dialCoordinator(target string, files tlsconfig.Files) (*grpc.ClientConn, error) {
	sec, err := cmdline.LoadTLS(files, nil)
	if err != nil {
		return nil, err
	}
	return dial.New(target, sec.DialOptions(tlsconfig.RoleCoordinator)...)
}
